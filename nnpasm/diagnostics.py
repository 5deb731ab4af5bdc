"""Assembler diagnostics: `file:line:col: error: message` (or `warning:`), the source line and a caret."""
from __future__ import annotations

from dataclasses import dataclass

MAX_ERRORS = 500


@dataclass(frozen=True)
class Diagnostic:
    """One error (or warning) in user input, at a 1-based line and column of a real file."""

    file: str
    line: int
    column: int
    message: str
    source: str = ""
    notes: tuple[str, ...] = ()
    severity: str = "error"   # or "warning"

    def format(self) -> str:
        """The compiler-style text: location, message, source line, caret, notes."""
        out = [f"{self.file}:{self.line}:{self.column}: {self.severity}: {self.message}"]
        if self.source:
            src = self.source.rstrip("\r\n")
            pad = "".join(c if c == "\t" else " " for c in src[:max(self.column - 1, 0)])
            out += [src, pad + "^"]
        out += [f"note: {n}" for n in self.notes]
        return "\n".join(out)


class AsmError(Exception):
    """Assembly failed; `diagnostics` lists every error found, str() is their formatted text."""

    def __init__(self, diagnostics: list[Diagnostic]):
        super().__init__()
        self.diagnostics = list(diagnostics)

    def __str__(self) -> str:
        return "\n".join(d.format() for d in self.diagnostics)


class OperandError(Exception):
    """A bad operand at a 1-based column of the parsed code."""

    def __init__(self, column: int, message: str):
        super().__init__(message)
        self.column, self.message = column, message


class TooManyErrors(Exception):
    """Raised internally once MAX_ERRORS diagnostics were collected."""


class Diagnostics:
    """Collects diagnostics instead of stopping at the first."""

    def __init__(self):
        self._items: list[tuple[int, int, Diagnostic]] = []

    def error(self, file: str, line: int, column: int, message: str, source: str = "",
              notes: tuple[str, ...] = (), order: int = 0) -> None:
        """Record an error; `order` places it among the others (the source line's read order).

        Stops the run (TooManyErrors) past MAX_ERRORS.
        """
        diag = Diagnostic(file, line, max(column, 1), message, source, notes)
        self._items.append((order, len(self._items), diag))
        if len(self._items) >= MAX_ERRORS:
            raise TooManyErrors

    @property
    def items(self) -> list[Diagnostic]:
        """Every diagnostic, in source order."""
        return [d for _, _, d in sorted(self._items, key=lambda t: t[:2])]

    def __bool__(self) -> bool:
        return bool(self._items)
