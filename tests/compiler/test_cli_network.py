"""nnpc compile / nnpc run on whole ONNX networks: the layer table, a run, onnxruntime comparison, errors."""
from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

import compiler
from compiler import models
from compiler.cli import main as nnpc_main
from tests.helpers.hosted import compiled, inputs
from tests.helpers.cli_files import INPUT_KINDS, OUTPUT_KINDS, bad_input, bad_output, files_under, one_error_line


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
    (("run", "tiny.onnx", "--input", "missing.npy"), "--input missing.npy: cannot read: no such file"),
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


# ---------------------------------------------------------------------------
# File arguments and output paths, in process (compiler.cli.main).
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def net(tmp_path_factory):
    """tiny.onnx, its program tiny.nnp (compiled once), a float and an int8 input, a config."""
    d = tmp_path_factory.mktemp("files")
    onnx.save(models.tiny("qoperator"), str(d / "tiny.onnx"))
    compiler.build(compiler.from_onnx(d / "tiny.onnx")).save(d / "tiny.nnp")
    rng = np.random.default_rng(5)
    np.save(d / "x.npy", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    np.save(d / "x8.npy", rng.integers(-128, 128, (1, 3, 16, 16)).astype(np.int8))
    (d / "hw.toml").write_text("[nu]\ncount = 1\n")
    return d


def nnpc(capsys, *argv) -> tuple[int, str, str]:
    code = nnpc_main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


# (argv with FILE where the bad path goes, the good file a truncation is cut from)
FILE_ARGUMENTS = {
    "compile model": (["compile", "FILE", "-o", "OUT/p.nnp"], "tiny.onnx"),
    "compile --config": (["compile", "tiny.onnx", "-o", "OUT/p.nnp", "--config", "FILE"], "hw.toml"),
    "run model (.onnx)": (["run", "FILE", "--input", "x.npy"], "tiny.onnx"),
    "run model (.nnp)": (["run", "FILE.nnp", "--input", "x.npy"], "tiny.nnp"),
    "run --input": (["run", "tiny.nnp", "--input", "FILE"], "x.npy"),
    "run --config": (["run", "tiny.nnp", "--input", "x.npy", "--config", "FILE"], "hw.toml"),
}


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("what", list(FILE_ARGUMENTS))
def test_every_bad_file_argument_is_one_line(net, capsys, tmp_path, what, kind):
    """Missing, a directory, empty, unreadable, a device, truncated: one line naming the file, status 1."""
    argv, good = FILE_ARGUMENTS[what]
    path = bad_input(tmp_path, kind, net / good, cut=9 if good == "hw.toml" else None)
    argv = [path if a in ("FILE", "FILE.nnp") else str(tmp_path / "p.nnp") if a == "OUT/p.nnp" else a
            for a in argv]
    with contextlib.chdir(net):
        code, out, err = nnpc(capsys, *argv)
    one_error_line("nnpc", code, err, path)
    assert code == 1 and not (tmp_path / "p.nnp").exists()


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
@pytest.mark.parametrize("option", ["compile -o", "run --output", "run --output NAME=", "run --trace"])
def test_bad_output_paths_are_refused_before_work_or_reported(net, capsys, tmp_path, option, kind):
    path = bad_output(tmp_path, kind)
    verb, flag = option.split()[:2]
    value = f"gemm1={path}" if option.endswith("NAME=") else path
    model = "tiny.onnx" if verb == "compile" else "tiny.nnp"
    argv = [verb, model, flag, value] + (["--input", "x.npy"] if verb == "run" else [])
    before = files_under(tmp_path)
    with contextlib.chdir(net):
        code, out, err = nnpc(capsys, *argv)
    one_error_line("nnpc", code, err, flag, path)
    assert files_under(tmp_path) == before and not Path(path + ".npy").exists()
    if kind == "full":
        assert "No space left on device" in err
    else:                      # refused before the compile or the run: nothing printed
        assert out == "", out


def test_output_paths_are_written_exactly_as_given(net, capsys, tmp_path):
    y, t, p = tmp_path / "y.out", tmp_path / "trace", tmp_path / "prog"
    with contextlib.chdir(net):
        assert nnpc(capsys, "run", "tiny.nnp", "--input", "x.npy", "--output", y, "--trace", t)[0] == 0
        assert nnpc(capsys, "compile", "tiny.onnx", "-o", p)[0] == 0
    assert files_under(tmp_path) == {"y.out", "trace", "prog"}
    assert np.load(y).shape == (1, 10) and compiler.load(p).layers
    assert any(e.get("cat") == "layer" for e in json.loads(t.read_text())["traceEvents"])


def test_trace_to_dev_null_is_written_once_and_never_read_back(net, capsys):
    with contextlib.chdir(net):
        code, out, err = nnpc(capsys, "run", "tiny.nnp", "--input", "x.npy", "--trace", "/dev/null")
    assert code == 0 and err == "", err
    assert "cycles " in out


def test_a_program_for_another_machine_or_too_big_for_ddr_is_one_line(net, capsys, tmp_path):
    (tmp_path / "two.toml").write_text("[nu]\ncount = 2\n")
    (tmp_path / "small.toml").write_text("[memory.ddr]\nsize = 4096\n")
    with contextlib.chdir(net):
        code, out, err = nnpc(capsys, "run", "tiny.nnp", "--input", "x.npy", "--config", tmp_path / "two.toml")
        one_error_line("nnpc", code, err, "tiny.nnp", "built for another machine", "nu.count = 1")
        code, out, err = nnpc(capsys, "run", "tiny.nnp", "--input", "x.npy", "--config", tmp_path / "small.toml")
        one_error_line("nnpc", code, err, "tiny.nnp", "does not fit the configured DDR of 0x1000 bytes")
        code, out, err = nnpc(capsys, "compile", "tiny.onnx", "-o", tmp_path / "s.nnp",
                              "--config", tmp_path / "small.toml")
    one_error_line("nnpc", code, err, "the network", "does not fit the configured DDR of 0x1000")
    assert code == 1 and not (tmp_path / "s.nnp").exists()


def test_int8_input_compares_with_onnxruntime(net, capsys):
    with contextlib.chdir(net):
        code, out, err = nnpc(capsys, "run", "tiny.onnx", "--input", "x8.npy", "--compare-onnxruntime")
    assert code == 0, err
    assert "onnxruntime: output gemm1: largest difference 0 step(s); top-1 agrees" in out


def test_a_compiled_program_prints_the_prediction_of_its_model(net, capsys):
    with contextlib.chdir(net):
        runs = [nnpc(capsys, "run", m, "--input", "x.npy") for m in ("tiny.onnx", "tiny.nnp")]
    lines = [next(line for line in out.splitlines() if line.startswith("cycles ")) for _, out, _ in runs]
    predicted = compiler.build(compiler.from_onnx(net / "tiny.onnx")).predicted_cycles
    assert predicted > 0 and lines[0] == lines[1] and lines[0].endswith(f"; predicted {predicted:,}"), lines
    assert compiler.load(net / "tiny.nnp").predicted_cycles == predicted


@pytest.mark.parametrize("argv", [["compile"], ["compile", "m.onnx"], ["run"], ["run", "m.onnx", "--bogus"],
                                  ["compile", "m.onnx", "-o", "x", "--arithmetic", "float"], ["sweep"],
                                  ["sweep", "s.toml"], ["conv2d"], ["frobnicate"], []])
def test_command_line_refusals_are_one_line(capsys, argv):
    code, out, err = nnpc(capsys, *argv)
    one_error_line("nnpc", code, err)
    assert code == 2 and out == ""


def test_help_lists_every_verb_and_each_verb_has_help(capsys):
    code, out, err = nnpc(capsys, "--help")
    assert code == 0 and err == ""
    verbs = {line.split()[0]: line for line in out.splitlines() if line.startswith("  ")}
    assert {"compile", "run", "sweep", "OP"} <= set(verbs), out
    assert "conv2d" in verbs["OP"] and "exactly as given" in out
    for verb, word in [("compile", "--report"), ("run", "--compare-onnxruntime"), ("sweep", "--plot"),
                       ("conv2d", "--x-shape")]:
        code, out, err = nnpc(capsys, verb, "--help")
        assert code == 0 and word in out, (verb, out)


def test_a_model_with_host_parts_compiles_reports_and_runs(tmp_path, capsys):
    """nnpc compile --report names every host node and the NPU's share of the MACs; --npu-only refuses with the
    listing; nnpc run of the file runs the host parts too and says where the MACs ran."""
    onnx_model, _, lib = compiled("attention")
    onnx.save(onnx_model, str(tmp_path / "attn.onnx"))
    np.save(tmp_path / "x.npy", inputs(0))
    assert nnpc_main(["compile", str(tmp_path / "attn.onnx"), "-o", str(tmp_path / "attn.nnp"), "--report",
                      "--table", str(tmp_path / "t.csv")]) == 0
    out = capsys.readouterr().out
    share = f"NPU: {100 * lib.npu_mac_share:.2f}% of {lib.npu_macs + lib.host_macs:,} MACs"
    # the two matmuls of activations run on the host, the softmax between them on the NPU
    assert share in out and "host0 (host, onnxruntime): 1 node: QLinearMatMul" in out
    assert "host1 (host, onnxruntime): 1 node: QLinearMatMul" in out
    for node in ("scores_quant", "mix_quant"):
        assert f"  {node} (" in out
    rows = (tmp_path / "t.csv").read_text().splitlines()
    assert sum(",host," in r for r in rows) == 2 and sum(",npu," in r for r in rows) == len(rows) - 3
    assert nnpc_main(["compile", str(tmp_path / "attn.onnx"), "-o", str(tmp_path / "no.nnp"), "--npu-only"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("nnpc: error: cannot import the ONNX model: ") and "QLinearMatMul" in err[0]
    assert not (tmp_path / "no.nnp").exists()
    assert nnpc_main(["run", str(tmp_path / "attn.nnp"), "--input", str(tmp_path / "x.npy"),
                      "--output", str(tmp_path / "y.npy")]) == 0
    out = capsys.readouterr().out
    assert "host: host0: 1 node; host1: 1 node (onnxruntime); NPU: " in out and "on the host (onnxruntime)" in out
    assert (np.load(tmp_path / "y.npy") == lib.run(inputs(0))).all()
