"""The results file never loses, repeats or glues rows: the lock, the repair on open, errors of the
environment retried, and every value and path checked before the first point runs."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.cli import main as nnpc
from compiler.sweep import SweepError, load_sweep
from compiler.sweep.points import points
from compiler.sweep.results import ENVIRONMENT, Results, retried
from compiler.sweep.run_point import CACHE_ERROR, COLUMNS, run_point, task
from compiler.sweep.runner import run_sweep
from compiler.sweep.spec import Workload

ROOT = Path(__file__).resolve().parents[3]
LAYER = ('[[sweep.layer]]\nname = "c"\nop = "conv2d"\nx_shape = [1, 3, 5, 7]\nout_channels = 5\nkernel = 3\n'
         'padding = 1\n')
SPEC = "[sweep]\n" + LAYER + "[axes]\n'memory.ddr.bytes_per_cycle' = [16, 32]\n"


def write(tmp_path: Path, text: str, name: str = "sweep.toml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def row(point: int, error: str = "", h: str | None = None) -> dict:
    """A row of the results file's columns (values of the right types)."""
    r = {c: None for c in COLUMNS}
    r.update(point=point, hash=h or f"h{point}", workload="c", kind="layer", cycles=100 + point, exact=True,
             toolchain="t", error=error, reference="numpy", unit_busy_pct="")
    return r


def lines(path: Path) -> list[str]:
    text = path.read_text()
    assert text.endswith("\n"), "the file ends in a torn line"
    return text[:-1].split("\n")


# ----------------------------------------------------------------------------- the lock

def test_a_second_writer_is_refused_while_the_first_has_the_file(tmp_path):
    out = tmp_path / "r.csv"
    first = Results(out, COLUMNS)
    with pytest.raises(SweepError, match="another sweep is writing this results file"):
        Results(out, COLUMNS)
    first.append(row(0))
    first.close()
    second = Results(out, COLUMNS)       # the lock went with the first writer
    assert second.done() == {"h0"}
    second.close()


def test_two_sweeps_on_one_file_the_second_exits_with_one_line(tmp_path):
    """`nnpc sweep` while another sweep holds the file: exit 1, one line, no row written (today: both
    exit 0 and the file holds every point twice)."""
    spec = write(tmp_path, SPEC)
    out = tmp_path / "r.csv"
    holder = Results(out, COLUMNS)
    proc = subprocess.run([sys.executable, "-m", "compiler", "sweep", str(spec), "-o", str(out), "--workers", "1",
                           "--no-cache", "--quiet"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    holder.close()
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and "another sweep is writing" in proc.stderr
    assert lines(out) == [lines(out)[0]]            # the header only


# ----------------------------------------------------------------------------- repair on open

def test_a_header_without_its_newline_gets_it_back(tmp_path):
    out = tmp_path / "r.csv"
    r = Results(out, COLUMNS)
    r.close()
    out.write_text(out.read_text().rstrip("\n"))
    r = Results(out, COLUMNS)
    r.append(row(0))
    r.close()
    assert len(lines(out)) == 2 and lines(out)[0].endswith(",error")
    assert Results(out, COLUMNS).done() == {"h0"}


def test_a_torn_last_row_is_dropped_and_its_point_runs_again(tmp_path):
    out = tmp_path / "r.csv"
    r = Results(out, COLUMNS)
    for k in range(3):
        r.append(row(k))
    r.close()
    text = out.read_text()
    out.write_text(text[:len(text) - 25])           # the last row cut short: no newline
    r = Results(out, COLUMNS)
    assert r.done() == {"h0", "h1"} and r.dropped == 1
    r.append(row(2))
    r.close()
    assert len(lines(out)) == 4
    assert Results(out, COLUMNS).done() == {"h0", "h1", "h2"}


def test_a_piece_of_a_header_is_repaired_and_another_file_refused(tmp_path):
    out = tmp_path / "r.csv"
    out.write_text("point,hash,work")             # a header cut short: nothing else to lose
    Results(out, COLUMNS).close()
    assert lines(out)[0].startswith("point,hash,workload,")
    (tmp_path / "o.csv").write_text("time,value")
    with pytest.raises(SweepError, match="its columns are not this toolchain's"):
        Results(tmp_path / "o.csv", COLUMNS)


def test_repeated_rows_of_one_point_are_dropped(tmp_path):
    out = tmp_path / "r.csv"
    r = Results(out, COLUMNS)
    for k in (0, 1, 0, 1):
        r.append(row(k))
    r.close()
    r = Results(out, COLUMNS)
    assert [x["hash"] for x in r.rows] == ["h0", "h1"] and r.dropped == 2
    r.close()
    assert len(lines(out)) == 3


def test_a_value_with_a_newline_stays_one_row(tmp_path):
    out = tmp_path / "r.csv"
    r = Results(out, COLUMNS)
    r.append(row(0, error="cannot import:\n  - node 'a'\nsupported: ..."))
    r.close()
    r = Results(out, COLUMNS)
    assert len(lines(out)) == 2 and r.dropped == 0
    assert r.rows[0]["error"] == "cannot import:   - node 'a' supported: ..."


# ----------------------------------------------------------------------------- errors of the environment

def test_environment_error_rows_are_retried_and_point_errors_stay(tmp_path):
    out = tmp_path / "r.csv"
    r = Results(out, COLUMNS)
    r.append(row(0))
    r.append(row(1, error=f"{ENVIRONMENT}IsADirectoryError: [Errno 21] Is a directory: 'cache/x.json'"))
    r.append(row(2, error="conv2d: the tile does not fit wbuf (capacity 64)"))
    r.close()
    r = Results(out, COLUMNS)
    assert r.done() == {"h0", "h2"} and r.retry == 1
    r.close()
    assert len(lines(out)) == 3         # the environment's row is gone, so its rerun is the only one


def test_an_unreadable_workload_file_is_an_error_of_the_environment(tmp_path):
    (tmp_path / "m.onnx").mkdir()        # the ONNX file replaced by a directory after the sweep was read
    w = Workload("onnx", "m", {"path": str(tmp_path / "m.onnx"), "sha256": "0" * 64})
    got = run_point({"index": 0, "hash": "h", "workload": w.to_dict(), "values": {}, "data_seed": 0,
                     "cache": None, "area": {"mac": 256.0, "byte": 1.0}})
    assert got["error"].startswith(ENVIRONMENT) and "IsADirectoryError" in got["error"] and retried(got)


def test_a_cache_entry_replaced_by_a_directory_is_recompiled_not_an_error(tmp_path):
    spec = load_sweep(write(tmp_path, SPEC))
    p = points(spec)[0]
    cache = tmp_path / "cache"
    cold = run_point(task(p, str(cache), spec.area))
    (entry,) = cache.glob("program/*/*.json")
    entry.unlink()
    entry.mkdir()                         # where the entry was, a directory
    again = run_point(task(p, str(cache), spec.area))
    assert again["error"] == "" and again["exact"] is True and again["cycles"] == cold["cycles"]
    assert again["program_cached"] is False and "Is a directory" in again[CACHE_ERROR]


# ----------------------------------------------------------------------------- checked before any point

def test_bad_options_and_paths_are_refused_before_any_point(tmp_path, capsys):
    spec = write(tmp_path, SPEC)
    out = tmp_path / "r.csv"
    (tmp_path / "file").write_text("x")
    (tmp_path / "adir.csv").mkdir()
    cases = [(["--workers", "-3"], "--workers must be at least 1, got -3"),
             (["--workers", "0"], "--workers must be at least 1, got 0"),
             (["--cache", str(tmp_path / "file")], "is not a directory"),
             (["--cache", str(tmp_path / "file" / "sub")], "cannot write to the cache directory"),
             (["--plot", str(tmp_path / "nodir" / "p.png")], "does not exist"),
             (["--plot", str(tmp_path)], "is a directory"),
             (["--plot", str(tmp_path / "p.txt")], "give a file ending in one of .png")]
    for extra, words in cases:
        assert nnpc(["sweep", str(spec), "-o", str(out), "--quiet", *extra]) == 1, extra
        err = capsys.readouterr().err
        assert words in err and err.count("\n") == 1, (extra, err)
        assert not out.exists(), extra          # refused before the results file was opened
    assert nnpc(["sweep", str(spec), "-o", str(tmp_path / "adir.csv"), "--quiet"]) == 1
    assert "is a directory" in capsys.readouterr().err


def test_a_huge_layer_is_refused_when_the_file_is_read(tmp_path):
    """A layer too large for every machine of the sweep: refused by the size check in load_sweep (no tiling
    search runs there); one past 32-bit DDR addresses by the op's own check (compiler.sizes)."""
    text = "[sweep]\n" + LAYER.replace("[1, 3, 5, 7]", "[1, 4, 10000, 10000]")
    with pytest.raises(SweepError, match=r"sweep.layer\[0\]: conv2d: its tensors take [\d,]+ bytes, "
                                         r"more than the 268,435,456 bytes of DDR"):
        load_sweep(write(tmp_path, text))
    # a larger DDR on one axis is the largest machine's: there the layer fits
    bigger = text + "[axes]\n'memory.ddr.size' = [268435456, 4294967296]\n"
    assert load_sweep(write(tmp_path, bigger)) is not None
    huge = "[sweep]\n" + LAYER.replace("[1, 3, 5, 7]", "[1, 4, 100000, 100000]")
    with pytest.raises(SweepError, match=r"sweep.layer\[0\]: conv2d: .* more than the 4,294,967,296 a 32-bit"):
        load_sweep(write(tmp_path, huge))


def test_non_utf8_files_give_one_line(tmp_path):
    spec = tmp_path / "s.toml"
    spec.write_bytes(b"[sweep]\nworkloads = ['tiny']\n# \xff\xfe\n")
    with pytest.raises(SweepError, match=r"s.toml: cannot read the sweep file: not UTF-8 text \(byte 0xff"):
        load_sweep(spec)
    (tmp_path / "base.toml").write_bytes(b"[nu]\nrows = 16 # \xe9\n")
    spec = write(tmp_path, "[sweep]\nconfig = 'base.toml'\n" + LAYER)
    with pytest.raises(SweepError, match=r"sweep.config: cannot read .*base.toml: not UTF-8 text \(byte 0xe9"):
        load_sweep(spec)


def test_a_rerun_after_an_environment_error_computes_only_that_point(tmp_path):
    spec = write(tmp_path, SPEC)
    out = tmp_path / "r.csv"
    _, first, rows = run_sweep(spec, out, workers=1, cache=None, progress=False)
    assert first.computed == 2 and all(r["error"] == "" for r in rows)
    text = out.read_text().split("\n")
    text[2] = text[2].rsplit(",", 1)[0] + "," + ENVIRONMENT + "OSError: [Errno 28] No space left on device"
    out.write_text("\n".join(text))
    _, second, rows = run_sweep(spec, out, workers=1, cache=None, progress=False)
    assert (second.computed, second.skipped, second.retried) == (1, 1, 1)
    assert len(lines(out)) == 3 and all(r["error"] == "" for r in rows)
