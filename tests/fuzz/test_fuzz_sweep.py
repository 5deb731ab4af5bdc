"""Fuzz `nnpc sweep`: sweep files mutated value by value and byte by byte, and sweeps racing on one file.

Properties:
* a sweep file (and the base configuration file it names) is either a Sweep whose points can be
  made, or one SweepError line that starts with the file's name; never another exception, within
  a time guard (so an impossible layer is refused before any tiling search);
* `nnpc sweep` on a bad file: exit 1, one line on stderr, no traceback, no results file;
* two or three sweeps started on one results file at once, some killed mid-way (SIGKILL of the
  CLI and its pool), then one resuming run: every point of the sweep has exactly one row, every
  line of the file is whole (ends in a newline, one cell per column), and a writer that was not
  killed either finished (exit 0) or was refused with one line (exit 1).
Budgets follow tests/fuzz/conftest.py (FUZZ=long for long runs).
"""
from __future__ import annotations

import copy
import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from compiler.sweep import SweepError, load_sweep
from compiler.sweep.points import points
from compiler.sweep.run_point import COLUMNS

from .strategies import ROOT, assert_clean_exit, budget, time_limit

BASE = {
    "sweep": {"workloads": [], "sample": "grid", "data_seed": 0,
              "layer": [{"name": "c", "op": "conv2d", "x_shape": [1, 3, 5, 7], "out_channels": 5, "kernel": 3,
                         "padding": 1, "relu": True},
                        {"name": "p", "op": "max_pool2d", "x_shape": [1, 4, 6, 6], "kernel": 2}]},
    "config": {"memory.ddr.burst_bytes": 64},
    "axes": {"nu.rows": [8, 16], "array": [{"nu.cols": 8}, {"nu.cols": 16, "vu.count": 2}]},
    "area": {"mac": 256, "byte": 1},
}
KEYS = ["workloads", "sample", "n", "seed", "data_seed", "config", "model", "layer", "op", "x_shape",
        "out_channels", "out_features", "kernel", "stride", "padding", "dilation", "groups", "relu", "x_zp",
        "zp_out", "name", "mac", "byte", "nu.rows", "nu.cols", "nu.count", "vu.count", "memory.ddr.size",
        "memory.ddr.bytes_per_cycle", "nu.wbuf_bytes", "clock.ghz", "size", "classes", "format", "bogus"]
EDGE_INTS = [0, 1, -1, 2, 3, 7, 8, 16, 31, 32, 33, 255, 256, 65536, 100000, 1 << 30, 1 << 31, (1 << 63) - 1,
             -(1 << 63)]

scalars = st.one_of(
    st.sampled_from(EDGE_INTS), st.integers(-(1 << 63), (1 << 63) - 1),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -0.0, 0.5, 1e300]), st.floats(allow_nan=True),
    st.booleans(), st.text(max_size=12), st.sampled_from(["tiny", "resnet19", "m.onnx", "grid", "random",
                                                           "conv2d", "dense", "add", "qdq", "base.toml"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.sampled_from(KEYS), inner, max_size=4)),
                      max_leaves=12)


def toml_value(v) -> str:
    """v in TOML (inline tables and arrays; every key quoted)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf") if math.isinf(v) else repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(x)}" for k, x in v.items()) + "}"


def toml_text(data: dict) -> str:
    return "".join(f"{json.dumps(k)} = {toml_value(v)}\n" for k, v in data.items())


def _paths(node, prefix=()):
    """Every (container, key) of a nested dict / list."""
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for k, v in items:
        yield node, k
        yield from _paths(v, prefix + (k,))


@st.composite
def mutated_specs(draw) -> dict:
    """The base sweep with one to four values replaced, keys deleted or unknown keys added."""
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(1, 4))):
        spots = list(_paths(data))
        node, key = draw(st.sampled_from(spots))
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "add"]))
        if action == "replace":
            node[key] = draw(values)
        elif action == "delete" and isinstance(node, dict):
            del node[key]
        elif isinstance(node, dict):
            node[draw(st.sampled_from(KEYS))] = draw(values)
    return data


@st.composite
def spec_bytes(draw) -> tuple[bytes, bytes | None]:
    """(sweep file, base configuration file or None): mutated values, then maybe mangled bytes."""
    data = draw(mutated_specs())
    config = None
    if isinstance(data.get("sweep"), dict) and draw(st.booleans()):
        data["sweep"]["config"] = "base.toml"
        config = toml_text(draw(st.dictionaries(st.sampled_from(KEYS), values, max_size=4))).encode()
    blob = toml_text(data).encode()
    for _ in range(draw(st.integers(0, 2))):
        target = draw(st.sampled_from(["spec", "config"])) if config is not None else "spec"
        b = bytearray(blob if target == "spec" else config)
        at = draw(st.integers(0, len(b)))
        kind = draw(st.sampled_from(["flip", "insert", "cut"]))
        if kind == "flip" and at < len(b):
            b[at] ^= 1 << draw(st.integers(0, 7))
        elif kind == "insert":
            b[at:at] = draw(st.binary(min_size=1, max_size=4))
        else:
            del b[at:]
        blob, config = (bytes(b), config) if target == "spec" else (blob, bytes(b))
    return blob, config


def check_spec(path: Path) -> None:
    """The contract of one sweep file: a Sweep whose points can be made, or one SweepError line."""
    with time_limit(20, "reading a sweep file"):
        try:
            sweep = load_sweep(path)
        except SweepError as exc:
            msg = str(exc)
            assert msg.startswith(str(path)) and "\n" not in msg and "Traceback" not in msg, msg
            return
        pts = points(sweep)
    assert pts and len({p.hash for p in pts}) == len(pts)


@given(spec_bytes())
@budget(30)
def test_mutated_sweep_files_load_or_give_one_line(tmp_path_factory, case):
    d = tmp_path_factory.mktemp("spec")
    blob, config = case
    (d / "sweep.toml").write_bytes(blob)
    if config is not None:
        (d / "base.toml").write_bytes(config)
    check_spec(d / "sweep.toml")


SWEEP_ERRORS = [
    b"[sweep]\nworkloads = ['tiny']\n[area]\nmac = nan\n",
    b"[sweep]\n[[sweep.layer]]\nop = 'conv2d'\nx_shape = [1, 4, 100000, 100000]\nout_channels = 4\nkernel = 3\n",
    b"[sweep]\n[[sweep.layer]]\nop = 'conv2d'\nx_shape = [1, 4, 6, 6]\nout_channels = 0\nkernel = 3\n",
    b"[sweep]\nworkloads = ['tiny'] # \xff\xfe\n",
]


@given(st.sampled_from(SWEEP_ERRORS) | spec_bytes().map(lambda c: c[0]))
@budget(1)
def test_bad_sweep_files_on_the_command_line(tmp_path_factory, blob):
    d = tmp_path_factory.mktemp("cli")
    (d / "sweep.toml").write_bytes(blob)
    try:
        load_sweep(d / "sweep.toml")
        return          # a usable file: running it is the concurrency test's business
    except SweepError:
        pass
    proc = subprocess.run([sys.executable, "-m", "compiler", "sweep", str(d / "sweep.toml"), "-o",
                           str(d / "r.csv"), "--no-cache", "--quiet"], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert_clean_exit(proc, blob[:80])
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert not (d / "r.csv").exists()


# ----------------------------------------------------------------------------- writers racing on one file

RACE = ("[sweep]\n[[sweep.layer]]\nname = 'c'\nop = 'conv2d'\nx_shape = [1, 3, 5, 7]\nout_channels = 5\n"
        "kernel = 3\npadding = 1\n[[sweep.layer]]\nname = 'p'\nop = 'max_pool2d'\nx_shape = [1, 4, 6, 6]\n"
        "kernel = 2\n[axes]\n'memory.ddr.bytes_per_cycle' = [8, 16, 32]\n")


@pytest.fixture(scope="module")
def race(tmp_path_factory):
    """The racing sweep file, its points' hashes and a cache the writers share (warm after the first)."""
    d = tmp_path_factory.mktemp("race")
    spec = d / "sweep.toml"
    spec.write_text(RACE)
    return spec, {p.hash for p in points(load_sweep(spec))}, d / "cache"


def nnpc_sweep(spec: Path, out: Path, cache: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "compiler", "sweep", str(spec), "-o", str(out), "--workers",
                             "1", "--cache", str(cache), "--quiet"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def whole_rows(out: Path) -> list[list[str]]:
    """The file's rows, each line whole: the header, then one cell per column on every line."""
    text = out.read_text()
    assert text.endswith("\n"), "a torn last line"
    lines = text[:-1].split("\n")
    assert next(csv.reader([lines[0]])) == list(COLUMNS), "the header is not the columns"
    rows = [next(csv.reader([ln])) for ln in lines[1:]]
    assert all(len(r) == len(COLUMNS) for r in rows), "a glued or torn row"
    return rows


@given(writers=st.integers(2, 3), delays=st.lists(st.floats(0, 1.5), min_size=3, max_size=3),
       kills=st.lists(st.one_of(st.none(), st.floats(0.5, 6)), min_size=3, max_size=3))
@budget(1)
def test_racing_and_killed_writers_leave_every_point_once(race, tmp_path_factory, writers, delays, kills):
    spec, hashes, cache = race
    out = tmp_path_factory.mktemp("out") / "r.csv"
    start = time.monotonic()
    procs = []
    for k in range(writers):
        time.sleep(delays[k] / 3)
        procs.append((nnpc_sweep(spec, out, cache), kills[k]))
    for proc, kill in procs:
        if kill is not None:
            time.sleep(max(0.0, start + kill - time.monotonic()))
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)      # the CLI and its pool's worker
    for proc, kill in procs:
        _, err = proc.communicate(timeout=600)
        if kill is None or proc.returncode >= 0:
            assert proc.returncode in (0, 1) and "Traceback" not in err, err
            if proc.returncode == 1:
                assert "another sweep is writing" in err and err.count("\n") == 1, err
    resume = nnpc_sweep(spec, out, cache)
    _, err = resume.communicate(timeout=600)
    assert resume.returncode == 0, err
    got = [r[1] for r in whole_rows(out)]
    assert sorted(got) == sorted(hashes), "a point is missing or has two rows"
