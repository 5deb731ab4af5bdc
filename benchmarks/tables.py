"""The results page's tables, written by the benchmarks that measure them (docs/performance.md).

Each table of the page sits between two markers that name it and the command that measures it:

    <!-- table: resnet50-1nu (benchmarks/resnet50.py --no-check) -->
    | figure | measured | goal |
    ...
    <!-- end table -->

A benchmark run with `--write-docs` calls `write_table` with the rows it measured; the table's body
is replaced by the rows, the goal, the command and the commit (`git rev-parse --short HEAD`).  The
run must be the marker's command (plus `--write-docs`): a partial run (`--layers 3`, another
`--only`) does not overwrite the figures of a full one.  `markers` lists the page's tables for
tests/test_docs_tables.py.
"""
from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "performance.md"
FLAG = "--write-docs"
MARKER = re.compile(r"^<!-- table: (?P<name>[\w.-]+) \((?P<command>benchmarks/(?P<script>[\w.]+\.py)[^)]*)\) -->\n"
                    r"(?P<body>.*?)^<!-- end table -->$", re.S | re.M)



def parser(doc: str) -> argparse.ArgumentParser:
    """A benchmark's command line: its docstring's first line, `--config HW.toml` and `--write-docs`."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--config", help="machine configuration (TOML); default: the built-in reference machine")
    ap.add_argument(FLAG, action="store_true", help="write the measured tables into docs/performance.md")
    return ap


def markers(text: str) -> list[dict[str, str]]:
    """Every table marker of a results page: its name, command, script and current body."""
    return [m.groupdict() for m in MARKER.finditer(text)]


def commit() -> str:
    """The short hash of the tree being measured, with ` + changes` if tracked files differ from it (`unknown`
    outside a git checkout): a table measured on an uncommitted tree says so."""
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                             text=True, check=True)
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=ROOT, capture_output=True).returncode
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return out.stdout.strip() + (" + changes" if dirty else "")


def markdown(header: list[str], rows: list[list[object]]) -> str:
    """A Markdown table; numbers as they are given (format them in the benchmark)."""
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def body(header: list[str], rows: list[list[object]], goal: str, command: str, at: str) -> str:
    """A table's text between its markers: the rows, the goal, the command and the commit."""
    return (f"{markdown(header, rows)}\n\nGoal: {goal}\n\n"
            f"Measured by `python {command}` at commit `{at}`.\n")


def write_table(name: str, header: list[str], rows: list[list[object]], goal: str, *,
                argv: list[str] | None = None, doc: Path | None = None, at: str | None = None) -> None:
    """Replace the table `name` of the results page with these rows, the goal, its command and the commit.

    `argv` (default `sys.argv[1:]`) must be the marker's arguments plus `--write-docs`, in any order; `at`
    (default `commit()`) names the commits of rows measured before this run (benchmarks/zoo.py --resume)."""
    doc = DOC if doc is None else doc
    text = doc.read_text()
    found = [m for m in MARKER.finditer(text) if m["name"] == name]
    if len(found) != 1:
        raise SystemExit(f"{doc}: {len(found)} tables named {name!r} (want one)")
    m = found[0]
    ran = [a for a in (sys.argv[1:] if argv is None else argv) if a != FLAG]
    wanted = shlex.split(m["command"])[1:]
    if sorted(ran) != sorted(wanted):
        raise SystemExit(f"the table {name!r} is measured by `python {m['command']}`; this run's arguments "
                         f"were {shlex.join(ran) or '(none)'}: not written")
    new = text[:m.start("body")] + body(header, rows, goal, m["command"], at or commit()) + text[m.end("body"):]
    doc.write_text(new)
    print(f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}: table {name!r} written", file=sys.stderr)
