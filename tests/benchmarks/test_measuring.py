"""benchmarks/measuring.py: the first and second compile leave the user's compile cache and environment
alone and give the same program; the side-by-side runs keep the simulator's outputs and refuse two
different outputs for one input."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import measuring  # noqa: E402

import compiler  # noqa: E402
from compiler import models  # noqa: E402
from compiler.agreement import onnxruntime_session  # noqa: E402


def test_environment_sets_and_restores_variables(monkeypatch):
    monkeypatch.setenv("NNP_TEST_A", "1")
    monkeypatch.delenv("NNP_TEST_B", raising=False)
    with measuring.environment(NNP_TEST_A="2", NNP_TEST_B="3"):
        assert (os.environ["NNP_TEST_A"], os.environ["NNP_TEST_B"]) == ("2", "3")
    assert os.environ["NNP_TEST_A"] == "1" and "NNP_TEST_B" not in os.environ


def test_two_compiles_give_one_program_in_a_cache_of_their_own_and_run_side_by_side(tmp_path, monkeypatch):
    monkeypatch.setenv("NNP_CACHE_DIR", str(tmp_path))
    model = models.tiny("qoperator")
    two = measuring.compile_twice(compiler.from_onnx(model))
    assert two.same and two.first_cpu > 0 and two.second_cpu >= 0
    assert list(tmp_path.iterdir()) == [] and os.environ["NNP_CACHE_DIR"] == str(tmp_path)
    assert os.environ["NNP_CACHE"] == "0"             # the suite's setting (tests/conftest.py), restored
    m = compiler.GraphModule(two.lib)
    x = np.random.default_rng(0).standard_normal(tuple(two.lib.meta["inputs"][0]["shape"])).astype(np.float32)
    m.set_input(0, x)
    sess = onnxruntime_session(model, threads=1)
    runs = measuring.run_side_by_side(m, sess, {sess.get_inputs()[0].name: x}, repeats=2)
    assert all(t[0] > 0 for t in (runs.unchecked, runs.checked, runs.onnxruntime))
    assert runs.checked_ratio == runs.checked[0] / runs.unchecked[0]
    assert runs.ort_ratio == runs.unchecked[0] / runs.onnxruntime[0]
    (out,) = runs.outputs
    assert np.array_equal(out, m.get_output(0, quantized=True))


class Flaky:
    """A module whose output changes from run to run."""

    num_outputs = 1

    def __init__(self):
        self.k = 0

    def run(self, check_races=False):
        self.k += 1

    def get_output(self, k, quantized=False):
        return np.array([self.k])


class Session:
    def run(self, names, feeds):
        return [np.zeros(1)]


def test_two_different_outputs_for_one_input_end_the_run():
    with pytest.raises(SystemExit, match="flaky: the simulator gave two different outputs"):
        measuring.run_side_by_side(Flaky(), Session(), {}, repeats=1, name="flaky")
