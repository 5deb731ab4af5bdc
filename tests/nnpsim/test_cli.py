"""`nnpsim` command line: runs, reports, and one clear line (never a traceback) for every user error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest

from nnpsim.cli import main
from nnpsim.config import Config, config_toml
from tests.helpers.cli_files import INPUT_KINDS, OUTPUT_KINDS, bad_input, bad_output, files_under, one_error_line
from tests.helpers.races import conv_inputs, conv_source

ROOT = Path(__file__).resolve().parents[2]


def build(tmp_path: Path, drop: str = "") -> dict[str, str]:
    """The conv kernel binary and its input files; paths by role."""
    from nnpasm import assemble
    x, w, y = conv_inputs(3)
    files = {"bin": tmp_path / "conv.bin", "x": tmp_path / "x.npy", "w": tmp_path / "w.npy"}
    assemble(conv_source(drop), "conv.s").save(files["bin"])
    np.save(files["x"], x)
    np.save(files["w"], w)
    return {k: str(v) for k, v in files.items()}


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def one_line_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nnpsim: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_run_writes_outputs_stats_and_trace(tmp_path, capsys):
    f = build(tmp_path)
    y_path, stats, trace = tmp_path / "y.out", tmp_path / "s.json", tmp_path / "t.json"
    code, out, err = run(capsys, "run", f["bin"], "--input", f"x={f['x']}", "--input", f"w={f['w']}",
                         "--output", f"y={y_path}", "--stats", str(stats), "--trace", str(trace),
                         "--check-races")
    assert code == 0 and err == ""
    assert np.array_equal(np.load(y_path), conv_inputs(3)[2])      # exact path, no .npy appended
    doc = json.loads(stats.read_text())
    assert f"cycles       {doc['cycles']:,}" in out and "nu0" in out and "dma2" in out
    assert out.endswith(f"race check: no data race among {doc['commands']:,} commands\n")
    assert doc["macs"] == 2 * 2 * 9 * 32 * 32
    assert json.loads(trace.read_text())["otherData"]["cycles"] == doc["cycles"]


def test_config_prints_default_toml(capsys):
    code, out, _ = run(capsys, "config")
    assert code == 0 and out == config_toml()
    assert tomllib.loads(out)["nu"]["rows"] == Config().nu_rows


def test_config_merges_a_file(tmp_path, capsys):
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[dma]\nchannels = 2\n")
    code, out, _ = run(capsys, "config", "--config", str(cfg))
    assert code == 0 and tomllib.loads(out)["dma"]["channels"] == 2


def test_run_with_config_file(tmp_path, capsys):
    f = build(tmp_path)
    cfg = tmp_path / "hw.toml"
    cfg.write_text("[memory.ddr]\nlatency = 10\n")
    stats = tmp_path / "s.json"
    assert run(capsys, "run", f["bin"], "--stats", str(stats))[0] == 0
    slow = json.loads(stats.read_text())["cycles"]
    assert run(capsys, "run", f["bin"], "--config", str(cfg), "--stats", str(stats))[0] == 0
    assert json.loads(stats.read_text())["cycles"] < slow


def _hosted_zip(t) -> str:
    """A file shaped like a network with host parts (a zip), which only nnpc runs."""
    path = t / "net.nnp"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("nnp_hosted.json", "{}")
    return str(path)


@pytest.mark.parametrize("make_args, status, words", [
    (lambda f, t: ["run", str(t / "missing.bin")], 1, ["missing.bin", "cannot read"]),
    (lambda f, t: ["run", _hosted_zip(t)], 1, ["net.nnp", "a zip archive", "nnpc run"]),
    (lambda f, t: ["run", f["x"]], 1, ["x.npy"]),
    (lambda f, t: ["run", f["bin"], "--input", f"x={t / 'none.npy'}"], 1, ["none.npy", "no such file"]),
    (lambda f, t: ["run", f["bin"], "--input", f"x={f['bin']}"], 1, ["conv.bin", "not a .npy file"]),
    (lambda f, t: ["run", f["bin"], "--input", f"x={f['w']}"], 1,
     ["--input x", "int8 of shape (9216,)", "expects int8 of shape (512,)"]),
    (lambda f, t: ["run", f["bin"], "--input", f"y={f['x']}"], 1, ["expects int32 of shape (128,)"]),
    (lambda f, t: ["run", f["bin"], "--input", f"z={f['x']}"], 1, ["no buffer 'z'", "buffers: w, x, y"]),
    (lambda f, t: ["run", f["bin"], "--output", f"q={t / 'q.npy'}"], 1, ["no buffer 'q'"]),
    (lambda f, t: ["run", f["bin"], "--input", "x"], 2, ["NAME=FILE", "'x'"]),
    (lambda f, t: ["run", f["bin"], "--input", "=a.npy"], 2, ["NAME=FILE"]),
    (lambda f, t: ["run", f["bin"], "--output", f"y={t / 'nodir' / 'y.npy'}"], 1, ["does not exist"]),
    (lambda f, t: ["run", f["bin"], "--stats", str(t)], 1, ["--stats", "is a directory"]),
    (lambda f, t: ["run", f["bin"], "--trace", str(t / "nodir" / "t.json")], 1, ["--trace", "does not exist"]),
    (lambda f, t: ["run", f["bin"], "--config", str(t / "none.toml")], 1, ["none.toml", "cannot read"]),
    (lambda f, t: ["run", f["bin"], "--max-cycles", "-5"], 2, ["-5 is negative"]),
    (lambda f, t: ["run", f["bin"], "--max-cycles", "lots"], 2, ["'lots' is not an integer"]),
    (lambda f, t: ["run"], 2, ["binary"]),
    (lambda f, t: ["frobnicate"], 2, ["frobnicate"]),
    (lambda f, t: ["run", f["bin"], "--bogus"], 2, ["--bogus"]),
])
def test_user_errors_are_one_line(tmp_path, capsys, make_args, status, words):
    f = build(tmp_path)
    code, out, err = run(capsys, *make_args(f, tmp_path))
    line = one_line_error(err)
    assert code == status, line
    for w in words:
        assert w in line, line


@pytest.mark.parametrize("text, words", [("[nu\nrows = 3", ["not valid TOML"]),
                                         ("[nu]\ncolour = 3\n", ["unknown configuration key 'nu.colour'"]),
                                         ("[dma]\nchannels = 99\n", ["dma.channels", "out of range"])])
def test_bad_config_files(tmp_path, capsys, text, words):
    f = build(tmp_path)
    cfg = tmp_path / "hw.toml"
    cfg.write_text(text)
    code, _, err = run(capsys, "run", f["bin"], "--config", str(cfg))
    line = one_line_error(err)
    assert code == 1 and all(w in line for w in words), line


def test_output_under_a_file_is_rejected_before_the_run(tmp_path, capsys):
    f = build(tmp_path)
    code, out, err = run(capsys, "run", f["bin"], "--output", f"y={f['x']}/y.npy")
    assert code == 1 and out == "" and "is not a directory" in one_line_error(err)


def test_write_failure_after_the_run(tmp_path, capsys):
    """A device that refuses the bytes: the run succeeds, the write fails with one line."""
    f = build(tmp_path)
    code, out, err = run(capsys, "run", f["bin"], "--output", "y=/dev/full")
    line = one_line_error(err)
    assert code == 1 and "--output y: /dev/full: cannot write" in line and "No space left" in line


def test_cycle_limit_exits_3_and_still_writes_reports(tmp_path, capsys):
    f = build(tmp_path)
    stats, trace = tmp_path / "s.json", tmp_path / "t.json"
    code, out, err = run(capsys, "run", f["bin"], "--max-cycles", "50", "--stats", str(stats), "--trace", str(trace))
    assert code == 3 and out == "" and "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines[0].startswith("nnpsim: simulation error: cycle limit exceeded")
    assert f"stats up to cycle 50 written to {stats}" in err and f"trace up to cycle 50 written to {trace}" in err
    assert json.loads(stats.read_text())["cycles"] == 50
    assert "cycle limit" in json.loads(stats.read_text())["error"]
    assert json.loads(trace.read_text())["otherData"]["cycles"] == 50


def test_data_race_exits_3(tmp_path, capsys):
    f = build(tmp_path, drop="INPUT")
    code, _, err = run(capsys, "run", f["bin"], "--check-races")
    assert code == 3 and "data race on ibuf0" in err and "conv.s:" in err
    code, out, _ = run(capsys, "run", f["bin"], "--no-check-races")     # racy, but not checked
    assert code == 0 and out.endswith("race check: skipped (--no-check-races)\n")


def test_races_are_checked_by_default(tmp_path, capsys):
    f = build(tmp_path, drop="INPUT")
    code, out, err = run(capsys, "run", f["bin"])
    assert code == 3 and out == "" and err.startswith("nnpsim: simulation error: data race on ibuf0")
    f = build(tmp_path)
    code, out, err = run(capsys, "run", f["bin"], "--input", f"x={f['x']}", "--input", f"w={f['w']}")
    assert code == 0 and err == "" and out.endswith("race check: no data race among 4 commands\n")


def _subprocess(*argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "nnpsim.cli", *argv], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def test_subprocess_missing_binary(tmp_path):
    p = _subprocess("run", str(tmp_path / "nope.bin"))
    assert p.returncode == 1 and "Traceback" not in p.stderr
    assert p.stderr.strip() == f"nnpsim: error: binary {tmp_path / 'nope.bin'}: cannot read: no such file"


def test_subprocess_bad_npy(tmp_path):
    f = build(tmp_path)
    Path(tmp_path / "bad.npy").write_bytes(b"\x93NUMPY garbage")
    p = _subprocess("run", f["bin"], "--input", f"x={tmp_path / 'bad.npy'}")
    assert p.returncode == 1 and "Traceback" not in p.stderr and "not a valid .npy file" in p.stderr
    p = _subprocess("run", f["bin"], "--input", "x")
    assert p.returncode == 2 and "Traceback" not in p.stderr and "NAME=FILE" in p.stderr


def test_subprocess_data_race_exits_3(tmp_path):
    f = build(tmp_path, drop="RESULT")
    p = _subprocess("run", f["bin"], "--check-races", "--stats", str(tmp_path / "s.json"))
    assert p.returncode == 3 and "Traceback" not in p.stderr and p.stdout == ""
    assert p.stderr.startswith("nnpsim: simulation error: data race on abuf0")
    assert json.loads((tmp_path / "s.json").read_text())["error"].startswith("data race on abuf0")


def test_failed_run_with_unwritable_report_still_exits_3(tmp_path, capsys):
    f = build(tmp_path)
    code, _, err = run(capsys, "run", f["bin"], "--max-cycles", "20", "--stats", "/dev/full")
    lines = err.strip().splitlines()
    assert code == 3 and len(lines) == 2 and "Traceback" not in err
    assert lines[0].startswith("nnpsim: simulation error: cycle limit exceeded")
    assert lines[1].startswith("nnpsim: error: --stats /dev/full: cannot write: No space left")


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("what", ["binary", "--config", "--input", "config --config"])
def test_every_bad_file_argument_is_one_line(tmp_path, capsys, what, kind):
    """Missing, a directory, empty, unreadable, a device (/dev/zero used to be read for ever), truncated."""
    f = build(tmp_path)
    toml = tmp_path / "hw.toml"
    toml.write_text("[nu]\ncount = 1\n")
    good = {"binary": f["bin"], "--input": f["x"]}.get(what, toml)
    path = bad_input(tmp_path, kind, good, cut=9 if good == toml else None)
    argv = {"binary": ["run", path], "--config": ["run", f["bin"], "--config", path],
            "--input": ["run", f["bin"], "--input", f"x={path}"], "config --config": ["config", "--config", path]}
    code, out, err = run(capsys, *argv[what])
    one_error_line("nnpsim", code, err, path)
    assert code == 1 and out == ""


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
@pytest.mark.parametrize("option", ["--output", "--stats", "--trace"])
def test_bad_output_paths_are_refused_before_the_run_or_reported(tmp_path, capsys, option, kind):
    f = build(tmp_path)
    path = bad_output(tmp_path, kind)
    before = files_under(tmp_path)
    code, out, err = run(capsys, "run", f["bin"], "--input", f"x={f['x']}", "--input", f"w={f['w']}",
                         option, f"y={path}" if option == "--output" else path)
    one_error_line("nnpsim", code, err, option, path)
    assert files_under(tmp_path) == before
    assert (out != "") == (kind == "full"), out         # the run happens only when the path can be opened
