"""Where source lines come from: files, includes, macro expansions and .rept blocks.

The assembler pulls lines one at a time from a stack of frames.  Each line
carries the real file and line it came from (a macro body line keeps its own
definition location) and the notes that explain how it was reached.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

MAX_INCLUDE_DEPTH = 32
MAX_MACRO_DEPTH = 64
MAX_EXPANDED_LINES = 2_000_000
MAX_REPT = 1_000_000

_HEAD = re.compile(r"\s*(?:[A-Za-z_.][A-Za-z0-9_.$]*\s*:\s*)?(\.[A-Za-z_]+)\b")
_PARAM = re.compile(r"\\([A-Za-z_][A-Za-z0-9_]*|@|\(\))")  # \name, \@ (expansion count), \() (joins)


class SourceError(Exception):
    """A limit was hit or a block is malformed; `column` is 1-based in `text`."""

    def __init__(self, message: str, column: int = 1):
        super().__init__(message)
        self.message, self.column = message, column


class Line(NamedTuple):
    """One source line as the assembler sees it (after macro substitution).

    `origin`, for a line a macro argument was substituted into, is the body
    line as written and, for every column of `text` (and one past its end),
    the column of the body line it came from: so a diagnostic points into
    the real file.
    """

    text: str
    file: str
    line: int
    notes: tuple[str, ...] = ()
    origin: tuple[str, tuple[int, ...]] | None = None


@dataclass
class Macro:
    """A macro: its parameters and raw body lines (with their own locations)."""

    name: str
    params: tuple[str, ...]
    body: list[Line]
    file: str
    line: int


class _Frame:
    """A list of lines being read, possibly repeated (a .rept body)."""

    __slots__ = ("lines", "index", "repeats", "kind", "real", "file")

    def __init__(self, lines, kind: str, repeats: int = 1, real: str = "", file: str = ""):
        self.lines, self.index, self.repeats, self.kind, self.real, self.file = lines, 0, repeats, kind, real, file


def directive_of(text: str) -> str | None:
    """The directive a raw line starts with (after an optional label), or None."""
    m = _HEAD.match(text)
    return m.group(1) if m else None


def read_source(path: str | Path) -> str:
    """A source file's text exactly as stored: lines end at \\n only (a \\r is blank space),
    the same as for source handed over as a string, so line numbers agree with the file."""
    with open(path, encoding="utf-8", newline="") as fh:
        return fh.read()


def resolve_file(name: str, including_file: str, include_dirs: tuple[str, ...]) -> Path | None:
    """Find an .include/.incbin file: next to the including file, then in each -I directory."""
    base = Path(including_file).parent if not including_file.startswith("<") else Path(".")
    for d in (base, *map(Path, include_dirs)):
        p = d / name
        if p.is_file():
            return p
    return None


class LineSource:
    """A stack of files, macro expansions and repeat blocks, read line by line."""

    def __init__(self):
        self.frames: list[_Frame] = []
        self.expanded = 0
        self.macro_depth = 0
        self.expansions = 0

    def push_file(self, text: str, file: str, real: str = "") -> None:
        """Start reading a file (main or included); raises SourceError on a cycle or too deep."""
        if real:
            chain = [f.file for f in self.frames if f.kind == "file"]
            if any(f.real == real for f in self.frames if f.kind == "file"):
                raise SourceError("include cycle: " + " -> ".join(chain + [file]))
            if len(chain) > MAX_INCLUDE_DEPTH:  # the main file is not an include
                raise SourceError(f"include depth exceeds {MAX_INCLUDE_DEPTH}")
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        self.frames.append(_Frame(lines, "file", real=real, file=file))

    def push_macro(self, macro: Macro, args: list[str], notes: tuple[str, ...]) -> list[tuple[Line, SourceError]]:
        """Expand a macro call; returns the body lines naming an unknown parameter (left out).

        Raises SourceError past the depth limit.
        """
        if self.macro_depth >= MAX_MACRO_DEPTH:
            raise SourceError(f"macro expansion depth exceeds {MAX_MACRO_DEPTH} (recursive macro?)")
        self.expansions += 1
        values = dict(zip(macro.params, args))
        values["@"] = str(self.expansions)
        values["()"] = ""
        body, bad = [], []
        for ln in macro.body:
            try:
                text, colmap = _substitute(ln.text, values)
                origin = (ln.text, colmap) if colmap is not None else None
                body.append(Line(text, ln.file, ln.line, notes, origin))
            except SourceError as exc:
                bad.append((Line(ln.text, ln.file, ln.line, notes), exc))
        self.frames.append(_Frame(body, "macro"))
        self.macro_depth += 1
        return bad

    def push_rept(self, body: list[Line], count: int) -> None:
        """Repeat a block `count` times."""
        if not 0 <= count <= MAX_REPT:
            raise SourceError(f".rept count {count} out of range [0, {MAX_REPT}]")
        if count and body:
            self.frames.append(_Frame(body, "rept", repeats=count))

    def next(self) -> Line | None:
        """The next line, None at the end."""
        frames = self.frames
        while frames:
            f = frames[-1]
            if f.index < len(f.lines):
                i = f.index
                f.index = i + 1
                self.expanded += 1
                if self.expanded > MAX_EXPANDED_LINES:
                    raise SourceError(f"more than {MAX_EXPANDED_LINES} lines after expansion")
                if f.kind == "file":
                    return Line(f.lines[i], f.file, i + 1)
                return f.lines[i]
            f.repeats -= 1
            if f.repeats > 0:
                f.index = 0
                continue
            frames.pop()
            if f.kind == "macro":
                self.macro_depth -= 1
        return None

    def collect(self, start: str, end: str) -> list[Line] | None:
        """Read raw lines up to the `end` directive that closes a block opened by `start`.

        Nested blocks of the same kind are kept whole.  Returns None if the
        current file or expansion ends first.
        """
        if not self.frames:
            return None
        f = self.frames[-1]
        body, depth = [], 1
        while f.index < len(f.lines):
            item = f.lines[f.index]
            f.index += 1
            line = Line(item, f.file, f.index) if f.kind == "file" else item
            word = directive_of(line.text)
            if word == start:
                depth += 1
            elif word == end:
                depth -= 1
                if depth == 0:
                    return body
            body.append(line)
        return None

    def current_file(self) -> str:
        """The file whose lines are being read (for relative includes)."""
        for f in reversed(self.frames):
            if f.kind == "file":
                return f.file
        return "<string>"


def _substitute(text: str, values: dict[str, str]) -> tuple[str, tuple[int, ...] | None]:
    """The body line with \\name replaced, and the column map (None when nothing was replaced)."""
    if "\\" not in text:
        return text, None
    out, colmap, pos = [], [], 0
    for m in _PARAM.finditer(text):
        if m.group(1) not in values:
            raise SourceError(f"unknown macro parameter '\\{m.group(1)}'", m.start() + 1)
        out.append(text[pos:m.start()])
        colmap.extend(range(pos, m.start()))
        value = values[m.group(1)]
        out.append(value)
        colmap.extend([m.start()] * len(value))   # anything in an argument points at its reference
        pos = m.end()
    out.append(text[pos:])
    colmap.extend(range(pos, len(text) + 1))
    return "".join(out), tuple(colmap)


def real_path(p: Path) -> str:
    """A canonical path for include-cycle detection."""
    return os.path.realpath(p)
