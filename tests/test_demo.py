"""`make demo` runs end to end: every example assembles, simulates race-free and writes a trace."""
import json

import pytest

from compiler import demo

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
