"""compiler.report: the per-layer table as rows, CSV and JSON, the roofline PNG, and nnpc's --table / --plot."""
from __future__ import annotations

import csv
import json
import subprocess
import sys

import numpy as np
import onnx
import pytest

from compiler import GraphModule, build, models, report
from compiler.errors import CompileError
from tests.helpers.networks import int8_data, residual_net


@pytest.fixture(scope="module")
def ran():
    """A small residual network compiled and run once: (its Library, the run's layer statistics)."""
    rng = np.random.default_rng(7)
    g = residual_net(rng, hw=10, c=8)
    lib = build(g)
    m = GraphModule(lib)
    m.set_input(0, int8_data(rng, g.values[g.inputs[0]].shape))
    m.run()
    return lib, m.layer_stats()


def test_rows_carry_the_run_layer_by_layer(ran):
    lib, stats = ran
    rows = report.layer_rows(lib, stats)
    assert [r["layer"] for r in rows] == [layer["name"] for layer in lib.layers]
    for r, s, layer in zip(rows, stats, lib.layers):
        assert r["measured"] and r["ran_on"] == "npu"
        assert (r["cycles"], r["ddr_bytes"], r["start"], r["end"]) == (s.cycles, s.ddr_bytes, s.start, s.end)
        assert r["bound_cycles"] == s.bound_cycles and r["macs"] == layer["macs"]
        assert r["ratio"] == round(s.cycles / s.bound_cycles, 4)
        assert r["out_shape"] == "x".join(map(str, layer["out_shape"]))
        peaks = {m: max([n for k, n in layer["onchip"].items() if k.rstrip("0123456789") == m] or [0])
                 for m in report.MEMORIES}
        assert all(r[f"peak_{m}_bytes"] == peaks[m] for m in report.MEMORIES)
    assert any(r["peak_ibuf_bytes"] > 0 for r in rows)


def test_rows_from_the_compile_are_the_prediction(ran):
    lib, _ = ran
    rows = report.layer_rows(lib)
    assert all(not r["measured"] and r["ddr_bytes"] is None for r in rows)
    assert [r["cycles"] for r in rows] == [layer["predicted_cycles"] for layer in lib.layers]
    with pytest.raises(CompileError, match="1 layer statistics for"):
        report.layer_rows(lib, ran[1][:1])


def test_csv_and_json_read_back_to_the_rows(ran, tmp_path):
    rows = report.layer_rows(*ran)
    report.write_table(rows, str(tmp_path / "t.csv"))
    report.write_table(rows, str(tmp_path / "t.json"))
    with open(tmp_path / "t.csv", newline="") as f:
        back = list(csv.DictReader(f))
    assert list(back[0]) == list(report.FIELDS)
    assert [{k: str(v) for k, v in r.items()} for r in rows] == back
    data = json.loads((tmp_path / "t.json").read_text())
    assert data["fields"] == list(report.FIELDS) and data["layers"] == rows
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.csv", "t.json"]     # no temporary left


@pytest.mark.parametrize("name, message", [
    ("t.txt", "must end in .csv or .json"), ("nodir/t.csv", "no such directory"), ("adir.csv", "is a directory")])
def test_a_table_path_that_cannot_be_written_is_refused(ran, tmp_path, name, message):
    (tmp_path / "adir.csv").mkdir()
    with pytest.raises(CompileError, match=message):
        report.write_table(report.layer_rows(*ran), str(tmp_path / name))


def test_the_roofline_plot_is_a_png_of_the_measured_layers(ran, tmp_path):
    rows = report.layer_rows(*ran)
    points = report.roofline_points(rows)
    assert len(points) == sum(1 for r in rows if r["macs"])
    for _, intensity, rate in points:
        assert rate <= ran[0].config.peak_macs_per_cycle and intensity > 0
    out = report.plot_roofline(rows, str(tmp_path / "r.png"), ran[0].config)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 2000
    with pytest.raises(CompileError, match="must end in .png"):
        report.plot_roofline(rows, str(tmp_path / "r.jpg"), ran[0].config)


def _nnpc(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "compiler.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_nnpc_writes_the_table_and_the_plot(tmp_path):
    onnx.save(models.tiny("qoperator"), str(tmp_path / "tiny.onnx"))
    np.save(tmp_path / "x.npy", np.random.default_rng(4).standard_normal((1, 3, 16, 16)).astype(np.float32))
    done = _nnpc("compile", "tiny.onnx", "-o", "t.nnp", "--table", "c.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    compiled = json.loads((tmp_path / "c.json").read_text())["layers"]
    assert compiled and not any(r["measured"] for r in compiled)
    done = _nnpc("run", "t.nnp", "--input", "x.npy", "--table", "r.csv", "--plot", "r.png", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "r.csv", newline="") as f:
        measured = list(csv.DictReader(f))
    assert [r["layer"] for r in measured] == [r["layer"] for r in compiled]
    assert all(r["measured"] == "True" and int(r["cycles"]) > 0 for r in measured)
    assert (tmp_path / "r.png").read_bytes()[:4] == b"\x89PNG"


def test_nnpc_refuses_a_bad_table_path_before_compiling(tmp_path):
    onnx.save(models.tiny("qoperator"), str(tmp_path / "tiny.onnx"))
    done = _nnpc("run", "tiny.onnx", "--input", "x.npy", "--plot", "nodir/p.png", cwd=tmp_path)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "nnpc: error: --plot 'nodir/p.png': no such directory 'nodir'"]
    done = _nnpc("compile", "tiny.onnx", "-o", "t.nnp", "--table", "t.xlsx", cwd=tmp_path)
    assert done.returncode == 1 and "must end in .csv or .json" in done.stderr
    assert not (tmp_path / "t.nnp").exists()
