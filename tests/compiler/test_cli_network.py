"""nnpc compile / nnpc run on whole ONNX networks: the layer table, a run, onnxruntime comparison, errors."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest

import compiler
from compiler import models


def _nnpc(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp("net")
    onnx.save(models.tiny("qoperator"), str(d / "tiny.onnx"))
    x = np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(d / "x.npy", x)
    return d


def test_compile_prints_the_layer_table_and_writes_the_program(tiny):
    run = _nnpc("compile", "tiny.onnx", "-o", "tiny.nnp", cwd=tiny)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].split()[:5] == ["layer", "ops", "output", "predicted", "bound"]
    assert any(line.startswith("conv1_quant") and "conv2d" in line for line in lines)
    assert any(line.startswith("arena ") for line in lines)
    n = len(compiler.load(tiny / "tiny.nnp").layers)
    assert f"nnpc: wrote tiny.nnp ({n} layers" in run.stdout
    apart = _nnpc("compile", "tiny.onnx", "-o", "apart.nnp", "--no-fuse", cwd=tiny)
    assert apart.returncode == 0, apart.stderr
    assert "nnpc: wrote apart.nnp (7 layers" in apart.stdout        # one kernel per node, the add too
    assert n < 6               # fewer than conv + epilogue kernels: the cost model fused anchors


def test_run_compares_with_onnxruntime_bit_for_bit(tiny):
    run = _nnpc("run", "tiny.onnx", "--input", "x.npy", "--output", "y.npy", "--check-races",
                "--compare-onnxruntime", "--trace", "t.json", cwd=tiny)
    assert run.returncode == 0, run.stderr
    assert "onnxruntime: output gemm1: largest difference 0 step(s); top-1 agrees" in run.stdout
    assert "cycles " in run.stdout and (tiny / "t.json").exists()
    import onnxruntime as ort
    sess = ort.InferenceSession(str(tiny / "tiny.onnx"), providers=["CPUExecutionProvider"])
    want = sess.run(None, {"input": np.load(tiny / "x.npy")})[0]
    np.testing.assert_array_equal(np.load(tiny / "y.npy"), want)


def test_run_a_compiled_program_by_input_name(tiny):
    assert _nnpc("compile", "tiny.onnx", "-o", "again.nnp", cwd=tiny).returncode == 0
    run = _nnpc("run", "again.nnp", "--input", "input=x.npy", "--output", "gemm1=z.npy", cwd=tiny)
    assert run.returncode == 0, run.stderr
    assert np.load(tiny / "z.npy").shape == (1, 10)
    assert run.stdout.splitlines()[0].split()[:3] == ["layer", "ops", "cycles"]


@pytest.mark.parametrize("args, message", [
    (("run", "tiny.onnx", "--input", "missing.npy"), "cannot read missing.npy"),
    (("run", "tiny.onnx"), "the model takes 1 input(s) (input); got 0 --input"),
    (("run", "tiny.onnx", "--input", "bad.npy"), "input input has shape (1, 3, 16, 16), got (2, 2)"),
    (("compile", "nothing.onnx", "-o", "n.nnp"), "nothing.onnx"),
    (("run", "tiny.nnp", "--input", "x.npy", "--compare-onnxruntime"), "needs the .onnx model"),
])
def test_bad_input_gets_one_line_and_exit_1(tiny, args, message):
    np.save(tiny / "bad.npy", np.zeros((2, 2), np.float32))
    _nnpc("compile", "tiny.onnx", "-o", "tiny.nnp", cwd=tiny)
    run = _nnpc(*args, cwd=tiny)
    assert run.returncode == 1, run.stdout
    assert run.stderr.startswith("nnpc: error: ") and message in run.stderr
    assert "Traceback" not in run.stderr
