"""`make demo` runs end to end: every example assembles, simulates race-free and writes a trace."""
import json

import numpy as np
import pytest

from compiler.agreement import Agreement, agreement, have_onnx
from compiler.demos import demo, network_demo

pytestmark = pytest.mark.usefixtures("warm_engine")


def test_demo_runs_every_example(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(demo, "OUT", tmp_path)
    assert demo.main([]) == 0
    printed = capsys.readouterr().out
    for path in demo.EXAMPLES.glob("*.s"):
        assert f"==== {path.name}" in printed
        trace = json.loads((tmp_path / f"{path.stem}.trace.json").read_text())
        assert any(e.get("ph") == "X" for e in trace["traceEvents"]) or path.stem == "scalar_loop"
    assert "dense 32->10" in printed and "cycles/roofline" in printed
    cnn = json.loads((tmp_path / "cnn.trace.json").read_text())
    layers = {e["args"]["name"] for e in cnn["traceEvents"] if e.get("name") == "process_name"}
    assert len(layers) == 7
    if have_onnx():    # the whole network: one program, equal to onnxruntime, a layer track
        assert "output equal to onnxruntime's bit for bit (largest difference 0 steps" in printed
        assert "whole network" in printed and "gemm1_quant" in printed
        net = json.loads((tmp_path / network_demo.TRACE).read_text())
        slices = [e for e in net["traceEvents"] if e.get("cat") == "layer"]
        # seven kernels fused into four: conv1 (its taps folded, nu.conv.rq) with the max pool
        assert len(slices) == 4 and slices[0]["name"] == "conv1_quant"


def test_agreement_counts_steps_and_top1():
    scale = np.float32(0.5)
    ref = np.array([[0.5, 1.0, -0.5]], np.float32)
    assert agreement(ref.copy(), ref, scale) == Agreement(True, 0, True)
    assert agreement(ref + [[1.0, 0, 0]], ref, scale) == Agreement(False, 2, False)
    assert agreement(ref + [[0, 0, 0.5]], ref, [scale]) == Agreement(False, 1, True)
