"""`nnpasm` command line: every bad file argument and output path gets one line and status 1."""
from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from nnpasm.cli import main
from tests.helpers.cli_files import INPUT_KINDS, OUTPUT_KINDS, bad_input, bad_output, files_under, one_error_line

SOURCE = "main:\n        li r1, 64\n        halt\n"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def good(tmp_path) -> dict[str, Path]:
    src = tmp_path / "k.s"
    src.write_text(SOURCE)
    assert main([str(src), "-o", str(tmp_path / "k.bin")]) == 0
    return {"source": src, "binary": tmp_path / "k.bin"}


# A truncated source is assembled and its errors are diagnostics (file:line:col, test_diagnostics.py).
@pytest.mark.parametrize("what, kind", [("source", k) for k in INPUT_KINDS if k != "truncated"]
                         + [("binary", k) for k in INPUT_KINDS])
def test_every_bad_file_argument_is_one_line(tmp_path, capsys, good, what, kind):
    path = bad_input(tmp_path, kind, good[what])
    before = files_under(tmp_path)
    argv = [path, "-o", tmp_path / "out.bin"] if what == "source" else ["--disassemble", path]
    code, out, err = run(capsys, *argv)
    one_error_line("nnpasm", code, err, path)
    assert code == 1 and out == "" and files_under(tmp_path) == before


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
@pytest.mark.parametrize("option", ["-o", "--listing", "--disassemble -o"])
def test_bad_output_paths_are_refused_or_reported(tmp_path, capsys, good, option, kind):
    path = bad_output(tmp_path, kind)
    before = files_under(tmp_path)
    if option == "--disassemble -o":
        argv = ["--disassemble", good["binary"], "-o", path]
    else:
        argv = [good["source"], option, path] + (["-o", tmp_path / "other.bin"] if option == "--listing" else [])
    code, out, err = run(capsys, *argv)
    one_error_line("nnpasm", code, err, option.split()[-1], path)
    # only /dev/full is opened; then the binary (-o other.bin) was written before the listing failed
    assert files_under(tmp_path) - before <= ({"other.bin"} if kind == "full" else set()) and code == 1


def test_the_default_output_never_overwrites_the_input(tmp_path, capsys):
    src = tmp_path / "k.bin"          # a source named .bin: the default output would be itself
    src.write_text(SOURCE)
    code, out, err = run(capsys, src)
    one_error_line("nnpasm", code, err, str(src), "is the input file")
    assert src.read_text() == SOURCE


def test_outputs_are_written_exactly_as_given(tmp_path, capsys, good):
    with contextlib.chdir(tmp_path):
        assert run(capsys, good["source"], "-o", "prog", "--listing", "lst")[0] == 0
        assert run(capsys, "--disassemble", "prog", "-o", "back")[0] == 0
    assert {"prog", "lst", "back"} <= files_under(tmp_path)
    assert "halt" in (tmp_path / "back").read_text()
