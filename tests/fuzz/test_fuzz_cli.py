"""Fuzz the `nnpsim` command line with bad files and options; faults never lose work.

Property: every bad input (missing or unreadable files, files that are not
.npy, arrays of the wrong shape or dtype, unknown buffer names, unwritable
output paths, malformed configuration files, unknown configuration keys)
gets exactly one line on stderr that names the problem and what was
expected, and a non-zero exit; never a traceback.  A run stopped by a
simulation error still writes --stats and --trace up to the failing cycle
and says so.
"""
from __future__ import annotations

import contextlib
import json
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from isa_spec import encode, load_isa
from isa_spec.program import Program
from nnpsim.cli import main
from nnpsim.config import _TOML_KEYS

from .strategies import SMALL, assert_clean_exit, budget, example_programs, random_program, run_python

ISA = load_isa()
UNREADABLE = "/proc/self/mem"   # opens, but reading offset 0 fails (EIO), even for root


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, str]:
    """The requant_pool example (buffers x int32 (1,4,8,8), q, mp, ap), a valid input, a small config."""
    d = tmp_path_factory.mktemp("cli")
    prog = example_programs()["requant_pool.s"]
    prog.save(d / "prog.bin")
    np.save(d / "x.npy", np.random.default_rng(1).integers(-1000, 1000, (1, 4, 8, 8), dtype=np.int32))
    (d / "small.toml").write_text("".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
                                          for s, kv in _small_toml().items()))
    return {"dir": str(d), "bin": str(d / "prog.bin"), "x": str(d / "x.npy"), "cfg": str(d / "small.toml")}


def _small_toml() -> dict:
    inv = {attr: (s, k) for s, keys in _TOML_KEYS.items() for k, attr in keys.items()}
    out: dict = {}
    for attr, value in SMALL.items():
        s, k = inv[attr]
        out.setdefault(s, {})[k] = value
    return out


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_error_line(code: int, err: str, *words: str) -> str:
    """Exactly one `nnpsim: error:` line, a non-zero status, and the given words in it."""
    lines = err.strip().splitlines()
    assert code in (1, 2), f"status {code}: {err}"
    assert len(lines) == 1 and lines[0].startswith("nnpsim: error: "), err
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]


# ---------------------------------------------------------------------------
# Files and options, one by one.
# ---------------------------------------------------------------------------

def test_missing_and_unreadable_binaries(files, capsys, tmp_path):
    for path, words in [(str(tmp_path / "nope.bin"), ["nope.bin", "no such file"]),
                        (str(tmp_path), [str(tmp_path)]), (UNREADABLE, [UNREADABLE, "cannot read"])]:
        one_error_line(*run(capsys, "run", path)[::2], *words)


@pytest.mark.parametrize("content, words", [
    (b"", ["is empty"]), (b"hello, world\n", ["not a .npy"]), (b"\x93NUMPY", ["not a valid .npy"]),
    (b"\x93NUMPY\x01\x00\x10\x00{'descr': '<i4'", ["not a valid .npy"]),
    (b"\x93NUMPY\x01\x00\x46\x00{'descr': '|O', 'fortran_order': False, 'shape': (1, 4, 8, 8), }" + b" " * 10 + b"\n",
     ["not a valid .npy"]),
])
def test_inputs_that_are_not_npy(files, capsys, tmp_path, content, words):
    bad = tmp_path / "bad.npy"
    bad.write_bytes(content)
    one_error_line(*run(capsys, "run", files["bin"], "--input", f"x={bad}")[::2], str(bad), *words)


def test_missing_directory_and_unreadable_inputs(files, capsys, tmp_path):
    for path, words in [(str(tmp_path / "none.npy"), ["no such file"]), (str(tmp_path), ["directory"]),
                        (UNREADABLE, ["cannot read"])]:
        one_error_line(*run(capsys, "run", files["bin"], "--input", f"x={path}")[::2], path, *words)


@given(dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint32", "float32", "float64",
                              "bool", "complex64", ">i4"]),
       shape=st.lists(st.integers(0, 9), max_size=5).map(tuple))
@budget(40)
def test_inputs_of_the_wrong_shape_or_dtype(files, capsys, tmp_path_factory, dtype, shape):
    arr = np.zeros(shape, dtype=dtype)
    path = tmp_path_factory.mktemp("in") / "a.npy"
    np.save(path, arr)
    code, _, err = run(capsys, "run", files["bin"], "--config", files["cfg"], "--input", f"x={path}")
    if arr.shape == (1, 4, 8, 8) and arr.dtype.kind == "i" and arr.dtype.itemsize == 4:
        assert code == 0, err
    else:
        one_error_line(code, err, "--input x", "expects int32 of shape (1, 4, 8, 8)", str(arr.shape))


@given(name=st.text(alphabet="abcxyzXQ_.0123456789 -", min_size=1, max_size=10))
@budget(30)
def test_unknown_buffer_names(files, capsys, name):
    known = {"x", "divisor", "q", "mp", "ap"}
    for option in ("--input", "--output"):
        code, _, err = run(capsys, "run", files["bin"], "--config", files["cfg"], option,
                           f"{name}={files['dir']}/o.npy" if option == "--output" else f"{name}={files['x']}")
        if name in known:
            continue
        if name.startswith("-"):   # argparse reads it as an option: a usage error
            one_error_line(code, err)
        else:
            one_error_line(code, err, f"no buffer '{name}'", "buffers: ap, divisor, mp, q, x")


@pytest.mark.parametrize("option", ["--input", "--output"])
@pytest.mark.parametrize("item", ["x", "=a.npy", "x=", ""])
def test_malformed_name_file_pairs(files, capsys, option, item):
    one_error_line(*run(capsys, "run", files["bin"], option, item)[::2], "NAME=FILE")


def test_unwritable_output_paths(files, capsys, tmp_path):
    (tmp_path / "plain").write_text("")
    for path, words in [(str(tmp_path / "no" / "dir" / "y.npy"), ["does not exist"]),
                        (str(tmp_path), ["is a directory"]), (str(tmp_path / "plain" / "y.npy"), ["not a directory"]),
                        ("/proc/version", ["/proc/version"])]:
        for option in (["--output", f"q={path}"], ["--stats", path], ["--trace", path]):
            code, out, err = run(capsys, "run", files["bin"], "--config", files["cfg"], *option)
            one_error_line(code, err, path, *words)


@pytest.mark.parametrize("text, words", [
    ("[nu\ncount = 2\n", ["not valid TOML"]), ("nu.count = = 3\n", ["not valid TOML"]),
    ("\x00\x01", ["not valid TOML"]), ("[nu]\ncuont = 2\n", ["unknown configuration key 'nu.cuont'", "known:"]),
    ("[gpu]\ncount = 2\n", ["unknown configuration key 'gpu.count'"]), ("bogus = 1\n", ["'bogus'"]),
    ("[nu]\ncount = 9\n", ["nu.count", "[1, 4]"]), ("[nu]\ncount = \"two\"\n", ["nu.count", "integer"]),
    ("[nu]\ncount = 1.5\n", ["nu.count", "integer"]), ("[nu]\ncount = true\n", ["nu.count", "integer"]),
    ("[nu]\ncount = [1, 2]\n", ["nu.count", "integer"]), ("[memory.ddr]\nsize = 8589934592\n", ["memory.ddr.size"]),
    ("[clock]\nghz = -1.0\n", ["clock.ghz", "positive"]), ("[queues]\ndepth = 0\n", ["queues.depth"]),
    ("[nu.count]\nx = 1\n", ["nu.count.x"]), ("[clock]\nghz = \"8\"\n", ["clock.ghz"]),
    ("[clock]\nghz = true\n", ["clock.ghz"]),
])
def test_malformed_configs(files, capsys, tmp_path, text, words):
    cfg = tmp_path / "hw.toml"
    cfg.write_text(text)
    for argv in (["run", files["bin"], "--config", str(cfg)], ["config", "--config", str(cfg)]):
        one_error_line(*run(capsys, *argv)[::2], str(cfg), *words)


def test_missing_and_unreadable_configs(files, capsys, tmp_path):
    for path in (str(tmp_path / "none.toml"), str(tmp_path), UNREADABLE):
        one_error_line(*run(capsys, "config", "--config", path)[::2], path, "--config", "cannot read")


KEYS = [f"{s}.{k}" for s, keys in _TOML_KEYS.items() for k in keys] + ["nu.bogus", "x", "memory.hbm.size"]
TOML_VALUES = st.sampled_from(["0", "1", "-1", "4", "64", "4096", "1.0", "0.5", "true", '"8"', "[1]", "{}",
                               "4294967296", "99999999999999999999", "nan", "inf", "1e400", "''"])


@given(items=st.lists(st.tuples(st.sampled_from(KEYS), TOML_VALUES), max_size=5),
       junk=st.sampled_from(["", "\n[", "\n=", "\n]]", "\n\"unterminated", "\n\x7f"]))
@budget(150)
def test_random_configs(files, capsys, tmp_path_factory, items, junk):
    """Random configuration files: accepted (exit 0) or one clear error line (exit 1)."""
    text = "".join(f"{k} = {v}\n" for k, v in items) + junk
    cfg = tmp_path_factory.mktemp("cfg") / "hw.toml"
    cfg.write_text(text)
    code, out, err = run(capsys, "config", "--config", str(cfg))
    if code == 0:
        assert err == "" and "[nu]" in out
    else:
        one_error_line(code, err, str(cfg))


@given(argv=st.lists(st.sampled_from(["run", "config", "--config", "--input", "--output", "--trace", "--stats",
                                      "--max-cycles", "--check-races", "-1", "0x10", "abc", "x=y", "--bogus",
                                      "--help", "-", "", "BIN"]), max_size=6))
@budget(100)
def test_random_argument_lists(files, capsys, argv):
    argv = [files["bin"] if a == "BIN" else a for a in argv]
    with tempfile.TemporaryDirectory() as scratch, contextlib.chdir(scratch):   # "--stats run" writes ./run
        code, out, err = run(capsys, *argv)
    assert "Traceback" not in err and code >= 0
    if code not in (0, 3):
        one_error_line(code, err)


def test_bad_max_cycles(files, capsys):
    for value, words in [("-5", ["negative"]), ("ten", ["not an integer"]), ("1.5", ["not an integer"])]:
        one_error_line(*run(capsys, "run", files["bin"], "--max-cycles", value)[::2], *words)


def test_real_entry_point_for_bad_input(files, tmp_path):
    """Through the interpreter, as a user runs it: one line, status 1, no traceback."""
    bad = tmp_path / "x.npy"
    np.save(bad, np.zeros((2, 2), dtype=np.float32))
    proc = run_python("import runpy; runpy.run_module('nnpsim.cli', run_name='__main__')",
                      "run", files["bin"], "--input", f"x={bad}")
    assert_clean_exit(proc, "nnpsim")
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# ---------------------------------------------------------------------------
# Faults never lose work.
# ---------------------------------------------------------------------------

def _w(m: str, **ops) -> int:
    return encode(m, ops, ISA)


def failing_program() -> Program:
    """Some DMA work that completes, then an out-of-bounds DMA: stops with an error mid-run."""
    words = [_w("setpi", param=ISA.params["dma.size0"], imm=256), _w("li", rd=1, imm=0),
             _w("dma", ch=0, dspace=1, rd=1, sspace=0, rs=1, wait=None, signal=1), _w("sem.wait", sem=1),
             _w("li", rd=2, imm=(1 << 32) - 128),
             _w("dma", ch=1, dspace=1, rd=2, sspace=0, rs=1, wait=None, signal=None), _w("halt")]
    return Program(np.array(words, dtype=np.uint64), bytes(range(256)), 0, 256)


def check_partial_reports(code: int, err: str, stats: Path, trace: Path) -> int:
    """Status 3, the error line, then a line per report naming the cycle; both files cover the run so far."""
    assert code == 3, err
    lines = err.strip().splitlines()
    assert lines[0].startswith("nnpsim: simulation error: ") and "Traceback" not in err, err
    cycle = int(re.search(r"up to cycle (\d+)", err).group(1))
    assert f"stats up to cycle {cycle} written to {stats}" in err, err
    assert f"trace up to cycle {cycle} written to {trace}" in err, err
    doc = json.loads(stats.read_text())
    assert doc["cycles"] == cycle and doc["error"], doc
    tr = json.loads(trace.read_text())
    assert tr["otherData"]["cycles"] == cycle
    ends = [e["ts"] + e.get("dur", 0) for e in tr["traceEvents"] if "ts" in e]
    assert max(ends, default=0) <= cycle, (max(ends), cycle)
    return cycle


def test_a_failed_run_writes_stats_and_trace_up_to_the_failure(capsys, tmp_path):
    prog = tmp_path / "fail.bin"
    failing_program().save(prog)
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[memory.ddr]\nsize = 65536\n")
    stats, trace = tmp_path / "s.json", tmp_path / "t.json"
    code, _, err = run(capsys, "run", str(prog), "--config", str(cfg), "--stats", str(stats), "--trace", str(trace))
    cycle = check_partial_reports(code, err, stats, trace)
    assert "out-of-bounds" in err and cycle > 100     # the first DMA (DDR latency 100) completed
    assert json.loads(stats.read_text())["memory"]["dm"]["written_bytes"] == 256
    slices = [e for e in json.loads(trace.read_text())["traceEvents"] if e.get("ph") == "X"]
    assert any(e["ts"] + e["dur"] <= cycle and "dma" in json.dumps(e) for e in slices), slices


def test_cycle_limit_and_deadlock_keep_their_reports(files, capsys, tmp_path):
    stats, trace = tmp_path / "s.json", tmp_path / "t.json"
    code, _, err = run(capsys, "run", files["bin"], "--max-cycles", "50", "--stats", str(stats), "--trace", str(trace))
    assert check_partial_reports(code, err, stats, trace) >= 50 and "cycle limit" in err
    dead = tmp_path / "dead.bin"
    Program(np.array([_w("sem.wait", sem=5), _w("halt")], dtype=np.uint64)).save(dead)
    code, _, err = run(capsys, "run", str(dead), "--stats", str(stats), "--trace", str(trace))
    check_partial_reports(code, err, stats, trace)
    assert "deadlock" in err


@given(prog=random_program(max_len=20, writable=True))
@budget(40)
def test_random_failing_runs_keep_their_reports(capsys, tmp_path_factory, prog):
    d = tmp_path_factory.mktemp("run")
    (d / "hw.toml").write_text("".join(f"[{s}]\n" + "".join(f"{k} = {v}\n" for k, v in kv.items())
                                       for s, kv in _small_toml().items()))
    prog.save(d / "p.bin")
    code, out, err = run(capsys, "run", str(d / "p.bin"), "--config", str(d / "hw.toml"), "--max-cycles", "20000",
                         "--stats", str(d / "s.json"), "--trace", str(d / "t.json"))
    if code == 3:
        check_partial_reports(code, err, d / "s.json", d / "t.json")
    elif code == 0:
        assert json.loads((d / "s.json").read_text())["error"] is None
    else:
        one_error_line(code, err, str(d / "p.bin"))
