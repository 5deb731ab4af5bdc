"""nnpc sweep: executors agree row for row, resume, the compile cache, bad sweep files, error rows."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.cli import main as nnpc
from compiler.sweep import SweepError, load_sweep
from compiler.sweep.cache import CompileCache
from compiler.sweep.compile import compile_workload
from compiler.sweep.layers import layer_ops
from compiler.sweep.plot import pareto_front
from compiler.sweep.points import points
from compiler.sweep.results import Results
from compiler.sweep.run_point import COLUMNS, TIMING_COLUMNS, run_point, task
from compiler.sweep.runner import run_sweep
from nnpsim.config import config_from_dict

ROOT = Path(__file__).resolve().parents[3]

# Two small layers (one with shapes that divide no array size) and the tiny network, on four machines.
SWEEP = """\
[sweep]
workloads = ["tiny"]

[sweep.model]
size = 16
classes = 10

[[sweep.layer]]
name = "conv"
op = "conv2d"
x_shape = [1, 5, 9, 11]
out_channels = 7
kernel = 3
padding = 1
relu = true

[[sweep.layer]]
name = "pool"
op = "max_pool2d"
x_shape = [1, 6, 10, 10]
kernel = 2

[axes]
"nu.rows" = [8, 16]
"memory.ddr.bytes_per_cycle" = [16, 32]
"""


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def deterministic(rows: list[dict]) -> list[dict]:
    return [{c: v for c, v in r.items() if c not in TIMING_COLUMNS} for r in rows]


@pytest.fixture(scope="module")
def pool_run(tmp_path_factory):
    """The sweep on a two-process pool: (sweep file, results file, rows)."""
    tmp = tmp_path_factory.mktemp("pool")
    spec = write(tmp, SWEEP)
    _, outcome, rows = run_sweep(spec, tmp / "r.csv", workers=2, cache=str(tmp / "cache"), progress=False)
    assert outcome.computed == 12 and outcome.skipped == 0
    return spec, tmp / "r.csv", rows


def test_every_point_is_a_bit_exact_row(pool_run):
    _, _, rows = pool_run
    assert [r["point"] for r in rows] == list(range(12))
    assert {r["workload"] for r in rows} == {"tiny", "conv", "pool"}
    for r in rows:
        assert r["error"] == "", r["error"]
        assert r["exact"] is True and r["diff_steps"] == 0
        assert r["reference"] == ("onnxruntime" if r["workload"] == "tiny" else "numpy")
        assert r["cycles"] >= r["bound_cycles"] > 0 and r["predicted_cycles"] > 0
        assert 0 < r["ddr_bytes"] and 0 <= r["mac_util_pct"] <= 100
    conv = [r for r in rows if r["workload"] == "conv"]
    assert all(r["nu_busy_pct"] > 0 and r["high_water.wbuf"] > 0 for r in conv)
    # the swept keys are the machine's: a wider array has a larger area
    assert {(r["nu.rows"], r["memory.ddr.bytes_per_cycle"]) for r in conv} == {(8, 16), (8, 32), (16, 16), (16, 32)}
    for r in conv:      # the area proxy as docs/sweep.md writes it: 256 per MAC, 1 per on-chip byte
        macs = r["nu.count"] * r["nu.rows"] * r["nu.cols"]
        onchip = (r["nu.count"] * (r["nu.ibuf_bytes"] + r["nu.wbuf_bytes"] + r["nu.abuf_bytes"])
                  + r["vu.count"] * r["vu.vbuf_bytes"] + r["memory.dm.size"])
        assert r["area"] == 256 * macs + onchip


def test_dask_local_cluster_equals_process_pool(pool_run, tmp_path):
    spec, _, pool_rows = pool_run
    _, outcome, dask_rows = run_sweep(spec, tmp_path / "d.csv", dask="local:2", cache=str(tmp_path / "cache"),
                                      progress=False)
    assert outcome.computed == 12
    assert deterministic(dask_rows) == deterministic(pool_rows)
    # and read back from the file, every cell as the pool's
    back = sorted(Results(tmp_path / "d.csv", COLUMNS).rows, key=lambda r: r["point"])
    assert deterministic(back) == deterministic(pool_rows)


def test_dask_scheduler_address_runs_the_same_rows(pool_run, tmp_path):
    """--dask tcp://...: a Client connected to a running scheduler (here a loopback LocalCluster's)."""
    from distributed import LocalCluster

    spec, _, pool_rows = pool_run
    with LocalCluster(n_workers=1, threads_per_worker=2, processes=False, protocol="tcp://", host="127.0.0.1",
                      dashboard_address=None) as cluster:
        assert cluster.scheduler_address.startswith("tcp://127.0.0.1:")
        _, outcome, rows = run_sweep(spec, tmp_path / "t.csv", dask=cluster.scheduler_address, cache=None,
                                     limit=4, progress=False)
    assert outcome.computed == 4
    assert deterministic(rows) == deterministic(pool_rows[:4])


def test_second_run_computes_nothing_and_rows_read_back_equal(pool_run):
    spec, out, rows = pool_run
    _, outcome, again = run_sweep(spec, out, workers=1, cache=None, progress=False)
    assert (outcome.computed, outcome.skipped) == (0, 12)
    assert deterministic(again) == deterministic(rows)


def test_interrupted_run_resumes_with_only_the_missing_points(tmp_path):
    spec = write(tmp_path, SWEEP)
    out = tmp_path / "r.csv"
    cache = str(tmp_path / "cache")
    _, first, _ = run_sweep(spec, out, workers=1, cache=cache, limit=5, progress=False)
    assert first.computed == 5
    # a kill in the middle of writing the fifth row: half a line, no newline
    text = out.read_text()
    out.write_text(text[:text.rstrip("\n").rfind("\n") + 1] + text.rstrip("\n").rsplit("\n", 1)[1][:40])
    _, second, rows = run_sweep(spec, out, workers=2, cache=cache, progress=False)
    assert (second.skipped, second.computed, second.dropped) == (4, 8, 1)
    assert sorted(r["point"] for r in rows) == list(range(12))
    assert len(Results(out, COLUMNS).rows) == 12 and all(r["error"] == "" for r in rows)


def test_killed_sweep_loses_at_most_the_points_in_flight(tmp_path):
    spec = write(tmp_path, SWEEP)
    out = tmp_path / "r.csv"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "compiler", "sweep", str(spec), "-o", str(out), "--workers", "1",
           "--cache", str(tmp_path / "cache"), "--quiet"]
    proc = subprocess.Popen(cmd, env=env, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not out.exists() or out.read_text().count("\n") < 3):
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)      # the CLI and its pool's worker
    proc.wait()
    kept = len(Results(out, COLUMNS).rows)
    assert 2 <= kept < 12
    code, text = run_cli([str(spec), "-o", str(out), "--workers", "1", "--cache", str(tmp_path / "cache"),
                          "--quiet"])
    assert code == 0
    assert f"{12 - kept} computed" in text and f"{kept} already in" in text
    assert len(Results(out, COLUMNS).rows) == 12


def run_cli(argv: list[str]) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "compiler", "sweep", *argv], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


# ----------------------------------------------------------------------------- bad sweep files

LAYER = '[[sweep.layer]]\nname = "c"\nop = "conv2d"\nx_shape = [1, 4, 6, 6]\nout_channels = 4\nkernel = 3\n'
BAD = [
    ("[sweep]\nworkloads = ['tiny']\n[axis]\n'nu.rows' = [8]\n", "axis", "unknown key"),
    ("[sweep]\nworkloads = ['tiny']\nsampel = 'grid'\n", "sweep.sampel", "unknown key"),
    ("[sweep]\nworkloads = ['tiny']\n[axes]\n'nu.rowz' = [8, 16]\n", 'axes."nu.rowz"',
     "unknown configuration key 'nu.rowz'"),
    ("[sweep]\nworkloads = ['tiny']\n[axes]\n'nu.rows' = []\n", 'axes."nu.rows"', "empty"),
    ("[sweep]\nworkloads = ['tiny']\n[axes]\n'nu.count' = [1, 9]\n", 'axes."nu.count"[1]',
     "nu.count = 9 is out of range [1, 4]"),
    ("[sweep]\nworkloads = ['tiny']\n[axes]\n'memory.ddr.burst_bytes' = [64, 48]\n",
     'axes."memory.ddr.burst_bytes"[1]', "must be a power of two"),
    ("[sweep]\nworkloads = ['tiny']\n[axes]\nbufs = [{ 'nu.ibuf_bytes' = 0 }]\n", "axes.bufs[0]",
     "nu.ibuf_bytes = 0 is out of range"),
    ("[sweep]\nworkloads = ['tiny']\n[config]\n'nu.rows' = 'wide'\n", 'config."nu.rows"', "must be an integer"),
    ("[sweep]\nworkloads = ['resnet19']\n", "sweep.workloads[0]", "unknown workload 'resnet19'"),
    ("[sweep]\nworkloads = ['missing.onnx']\n", "sweep.workloads[0]", "cannot read the ONNX file"),
    ("[sweep]\n" + LAYER + "stride = 1\nsize = 3\n", "sweep.layer[0].size", "unknown key"),
    ("[sweep]\n" + LAYER.replace("op = \"conv2d\"", "op = \"conv3d\""), "sweep.layer[0].op", "must be one of"),
    ("[sweep]\n" + LAYER.replace("op = \"conv2d\"", "op = []"), "sweep.layer[0].op", "must be one of"),
    ("[sweep]\nworkloads = ['tiny']\nsample = 'random'\nn = 5\n[axes]\n'nu.rows' = [8, 16]\n", "sweep.n",
     "more than the 2 points"),
    ("[sweep]\nworkloads = ['tiny']\nsample = 'latin'\n", "sweep.sample", "must be one of"),
    ("[sweep]\nworkloads = []\n", "sweep.workloads", "no workloads"),
    ("[sweep]\nworkloads = = ['tiny']\n", "", "not valid TOML"),
    ("[sweep]\n" + LAYER + "[area]\nmac = nan\n", "area.mac", "must be a finite number >= 0, got nan"),
    ("[sweep]\n" + LAYER + "[area]\nbyte = inf\n", "area.byte", "must be a finite number >= 0, got inf"),
    ("[sweep]\n" + LAYER + "[area]\nmac = -1\n", "area.mac", "must be a finite number >= 0, got -1"),
    ("[sweep]\n" + LAYER + "[area]\nmac = 'big'\n", "area.mac", "must be a finite number >= 0, got 'big'"),
    ("[sweep]\n" + LAYER.replace("out_channels = 4", "out_channels = 0"), "sweep.layer[0]",
     "out_channels must be an integer in [1, 1073741824], got 0"),
    ("[sweep]\n" + LAYER.replace("kernel = 3", "kernel = [3, 0]"), "sweep.layer[0]",       # found by FUZZ=long
     "kernel must be an integer in [1, 1073741824], got 0"),
    ("[sweep]\n" + LAYER.replace("[1, 4, 6, 6]", "[1, 4, 6]"), "sweep.layer[0]", "x_shape must have 4 dimensions"),
    ("[sweep]\n" + LAYER.replace("[1, 4, 6, 6]", "[1, 0, 6, 6]"), "sweep.layer[0]", "x_shape[1] = 0 is out of range"),
    ("[sweep]\n" + LAYER.replace("out_channels = 4", "out_channels = 100000000"), "sweep.layer[0]",
     "the weights [100000000, 4, 3, 3] are more than"),
]


@pytest.mark.parametrize("text, key, words", BAD, ids=[b[1] or "toml" for b in BAD])
def test_bad_sweep_file_gives_one_error_naming_the_key(tmp_path, text, key, words):
    spec = write(tmp_path, text)
    with pytest.raises(SweepError) as info:
        load_sweep(spec)
    msg = str(info.value)
    assert msg.startswith(str(spec)) and words in msg and "\n" not in msg
    if key:
        assert f"error: {key}:" in msg
    else:
        assert msg.startswith(f"{spec}:2:")     # file:line:col of the TOML error


def test_bad_sweep_file_on_the_command_line(tmp_path):
    spec = write(tmp_path, BAD[4][0])
    code, text = run_cli([str(spec), "-o", str(tmp_path / "r.csv")])
    assert code == 1
    assert 'axes."nu.count"[1]: nu.count = 9 is out of range' in text and "Traceback" not in text
    assert text.startswith(f"nnpc sweep: {spec}:4: error:")
    assert not (tmp_path / "r.csv").exists()


def test_command_line_errors_are_messages(tmp_path, capsys):
    spec = write(tmp_path, SWEEP)
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.txt")]) == 1
    assert "must end in .csv or .parquet" in capsys.readouterr().err
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.csv"), "--dask", "local:none"]) == 1
    assert "local:N needs a number of workers" in capsys.readouterr().err
    assert nnpc(["sweep", str(tmp_path / "nope.toml"), "-o", str(tmp_path / "r.csv")]) == 1
    assert "cannot read the sweep file" in capsys.readouterr().err
    (tmp_path / "other.csv").write_text("a,b\n1,2\n")
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "other.csv")]) == 1
    assert "its columns are not" in capsys.readouterr().err


def test_missing_extras_name_the_extra(tmp_path, monkeypatch, capsys):
    spec = write(tmp_path, SWEEP)
    for module in ("distributed", "matplotlib", "pyarrow"):
        monkeypatch.setitem(sys.modules, module, None)      # import fails as if not installed
    import importlib.util
    real = importlib.util.find_spec
    missing = {"matplotlib"}
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None if name in missing else real(name, *a))
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.csv"), "--dask", "local:2"]) == 1
    assert "nnp-toolchain[scale]" in capsys.readouterr().err
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.csv"), "--plot", "p.png"]) == 1
    assert "nnp-toolchain[plot]" in capsys.readouterr().err
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.parquet")]) == 1
    assert "nnp-toolchain[parquet]" in capsys.readouterr().err
    missing.add("onnxruntime")
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "r.csv")]) == 1
    assert "sweep.workloads[0]: tiny: networks need onnx and onnxruntime" in capsys.readouterr().err


def test_importing_compiler_imports_no_extra():
    code = ("import sys, compiler, compiler.sweep, compiler.sweep.cli, compiler.sweep.runner\n"
            "print(sorted(m for m in ('dask', 'distributed', 'matplotlib', 'pyarrow') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr


# ----------------------------------------------------------------------------- points, rows, cache

def test_random_sample_is_seeded_and_distinct(tmp_path):
    text = ("[sweep]\nworkloads = ['tiny']\nsample = 'random'\nn = 5\nseed = {}\n[axes]\n"
            "'nu.rows' = [8, 16, 32]\narray = [{{ 'nu.cols' = 8 }}, {{ 'nu.cols' = 16, 'vu.count' = 2 }}]\n"
            "'memory.ddr.bytes_per_cycle' = [8, 16]\n")
    a = points(load_sweep(write(tmp_path, text.format(3), "a.toml")))
    b = points(load_sweep(write(tmp_path, text.format(3), "b.toml")))
    c = points(load_sweep(write(tmp_path, text.format(4), "c.toml")))
    assert [p.values for p in a] == [p.values for p in b]
    assert len({p.hash for p in a}) == 5 and [p.values for p in a] != [p.values for p in c]
    for p in a:       # a named axis sets its keys together
        assert (p.values["nu.cols"] == 16) == (p.values.get("vu.count") == 2)
    grid = points(load_sweep(write(tmp_path, text.replace("sample = 'random'\nn = 5\n", "").format(0), "g.toml")))
    assert len(grid) == 12 and {p.hash for p in a} <= {p.hash for p in grid}


def test_uncompilable_point_is_a_row_with_its_error(tmp_path):
    text = SWEEP.split("[axes]")[0].replace('workloads = ["tiny"]', "workloads = []") + \
        "[axes]\n'nu.wbuf_bytes' = [64, 262144]\n"
    _, outcome, rows = run_sweep(write(tmp_path, text), tmp_path / "r.csv", workers=1, cache=None,
                                 progress=False)
    conv = {r["nu.wbuf_bytes"]: r for r in rows if r["workload"] == "conv"}
    assert outcome.failed >= 1
    assert "fit" in conv[64]["error"] and "wbuf (capacity 64)" in conv[64]["error"]
    assert conv[64]["cycles"] is None and conv[64]["area"] > 0
    assert conv[262144]["error"] == "" and conv[262144]["exact"] is True


def one_point(tmp_path: Path, cache: str | None):
    spec = load_sweep(write(tmp_path, SWEEP))
    p = next(p for p in points(spec) if p.workload.name == "conv")
    return run_point(task(p, cache, spec.area))


def test_corrupt_cache_entries_are_recompiled(tmp_path):
    cache = tmp_path / "cache"
    cold = one_point(tmp_path, str(cache))
    warm = one_point(tmp_path, str(cache))
    assert (cold["program_cached"], warm["program_cached"]) == (False, True)
    assert deterministic([cold]) == deterministic([warm])
    (elf,) = cache.glob("program/*/*.elf")
    elf.write_bytes(elf.read_bytes()[:100])                         # truncated
    (choice,) = cache.glob("choice/*/*.json")
    choice.write_text(choice.read_text().replace('"choice": ', '"choice": 1'))   # edited
    again = one_point(tmp_path, str(cache))
    assert again["program_cached"] is False and again["choice_hits"] == 0
    assert deterministic([again]) == deterministic([cold]) and again["exact"] is True
    assert one_point(tmp_path, str(cache))["program_cached"] is True     # rewritten whole


def test_cache_detects_every_kind_of_damage(tmp_path):
    c = CompileCache(tmp_path)
    c.put("program", "ab12", {"n": 1}, {".elf": b"\x7fELF" + bytes(200)})
    assert c.get("program", "ab12") == ({"n": 1}, {".elf": b"\x7fELF" + bytes(200)})
    json_file, blob = tmp_path / "program/ab/ab12.json", tmp_path / "program/ab/ab12.elf"
    for damage in (lambda: blob.write_bytes(b"\x7fELF"), lambda: blob.unlink(),
                   lambda: json_file.write_text(json_file.read_text()[:30]),
                   lambda: json_file.write_text(json_file.read_text().replace('"n": 1', '"n": 2'))):
        c.put("program", "ab12", {"n": 1}, {".elf": b"\x7fELF" + bytes(200)})
        damage()
        before = c.stats.corrupt
        assert c.get("program", "ab12") is None and c.stats.corrupt == before + 1
    assert not list(tmp_path.rglob("*.tmp"))


def test_cached_tiling_gives_the_cold_compile(tmp_path):
    """A chain's tiling from the cache builds the program a search from scratch builds."""
    from compiler.sweep.spec import Workload

    params = {"op": "conv2d", "x_shape": [1, 12, 13, 9], "out_channels": 20, "kernel": 3, "padding": 1,
              "stride": 2, "seed": 4}
    w = Workload("layer", "c", params)
    cfg = config_from_dict({"nu.rows": 8, "nu.cols": 16, "nu.ibuf_bytes": 4096})
    cold = compile_workload(w, cfg, CompileCache(None), lambda: layer_ops(params))
    cache = CompileCache(tmp_path)
    first = compile_workload(w, cfg, cache, lambda: layer_ops(params))
    for f in tmp_path.glob("program/*/*"):
        f.unlink()                                 # keep only the tiling choice
    hinted = compile_workload(w, cfg, cache, lambda: layer_ops(params))
    assert (first.choice_hits, hinted.choice_hits, hinted.program_hit) == (0, 1, False)
    assert hinted.program.to_bytes() == cold.program.to_bytes() == first.program.to_bytes()


def test_network_repeated_layers_compile_once_per_configuration(tmp_path):
    from compiler import from_onnx, models
    from compiler.network.partition import partition
    from compiler.network.storage import alias
    from compiler.structure import tiling_key
    from compiler.sweep.spec import Workload

    graph = from_onnx(models.build("resnet18", size=32, classes=10))
    groups = partition(graph, alias(graph)[1])
    distinct = len({tiling_key(g.ops) for g in groups})
    assert distinct < len(groups)
    w = Workload("model", "resnet18", {"network": "resnet18", "size": 32})
    cache = CompileCache(tmp_path)
    got = compile_workload(w, config_from_dict({}), cache, lambda: graph)
    # every chain the compile searched (graph fusion prices merged chains too) was looked up:
    # a chain's first search stores one entry, its repeats hit it
    entries = len(list(tmp_path.glob("choice/*/*.json")))
    assert got.choice_lookups - got.choice_hits == entries
    assert got.choice_hits > 0
    for f in tmp_path.glob("program/*/*"):
        f.unlink()                                      # keep only the tiling choices
    again = compile_workload(w, config_from_dict({}), cache, lambda: graph)
    assert (again.program_hit, again.choice_hits) == (False, again.choice_lookups)
    assert again.program.to_bytes() == got.program.to_bytes()


def test_pareto_front():
    rows = [{"workload": "w", "error": "", "cycles": c, "area": a} for c, a in
            [(100, 10), (90, 20), (95, 30), (50, 40), (50, 45), (60, 5), (10, 100)]]
    rows.append({"workload": "w", "error": "x", "cycles": None, "area": 1})
    front = pareto_front(rows)
    assert [(r["area"], r["cycles"]) for r in front] == [(5, 60), (40, 50), (100, 10)]


def test_plot_and_front_table(pool_run, tmp_path):
    spec, out, _ = pool_run
    code, text = run_cli([str(spec), "-o", str(out), "--plot", str(tmp_path / "p.png"), "--workers", "1"])
    assert code == 0 and "0 computed" in text and "12 already in" in text
    assert "Pareto front of conv" in text and "nu.rows" in text
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
