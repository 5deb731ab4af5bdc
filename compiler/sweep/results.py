"""The results file: one row per point, appended as points finish; which points are already done.

CSV output is its own journal: each row is one line, appended and flushed to disk as its point
finishes, so a killed sweep loses only the points in flight.  When the file is opened again it
is repaired before anything is appended: a row a kill cut short (no final newline, or too few
fields), a row with a cell that is not of its column's type, a second row of one point and a
row whose error came from the environment (ENVIRONMENT) are dropped, and their points run
again; a header that lost its newline gets it back.  A file whose first line is not the
header is refused.  The file is locked while a sweep has it open (`<file>.lock`, fcntl.flock):
a second sweep on the same file is refused with one line.  Parquet cannot be
appended to, so `-o results.parquet` keeps the same journal beside it
(`results.parquet.journal.csv`) and writes the Parquet file from it when the sweep ends.  A row is done when its hash (compiler.sweep.points.Point.hash: the point and the
toolchain version) is one of this sweep's points; rows of other hashes (another toolchain,
another sweep file) stay in the file and are left alone.
"""
from __future__ import annotations

import csv
import fcntl
import io
import os
from pathlib import Path

from .cache import write_atomic
from .spec import SweepError

PARQUET_EXTRA = "pip install 'nnp-toolchain[parquet]' (pyarrow)"


def _cell(v) -> str:
    """A value as its CSV cell, on one line (a row is one line: that is how a torn row is found)."""
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return " ".join(str(v).splitlines())


def _cells(line: str) -> list[str] | None:
    """The cells of one line (None if csv cannot read it: a NUL, say)."""
    try:
        return next(csv.reader([line]), [])
    except csv.Error:
        return None


def _lock(journal: Path, path: Path):
    """An exclusive flock on `<journal>.lock`, held while the file is open; SweepError if another holds it."""
    lock_path = journal.with_name(journal.name + ".lock")
    try:
        journal.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "a")
    except OSError as exc:
        raise SweepError(f"{path}: cannot open the results file's lock {lock_path}: {exc.strerror or exc}") from None
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        fh.close()
        raise SweepError(f"{path}: another sweep is writing this results file (it holds {lock_path}): "
                         "wait for it to end, or write to another file") from None
    return fh


def parse_cell(text: str, kind: type) -> object:
    """A CSV cell back to its column's type (None for an empty cell of a number or flag)."""
    if kind is str:
        return text
    if text == "":
        return None
    if kind is bool:
        if text not in ("True", "False"):
            raise ValueError(f"not a flag: {text!r}")
        return text == "True"
    return kind(text)


ENVIRONMENT = "environment: "
"""The start of an error the point did not cause (a file or the cache could not be read or written, a
worker was lost): such a row is not done, and the next run drops it and runs its point again."""


def retried(row: dict) -> bool:
    """The row's error came from the environment, not from its point: run the point again."""
    return bool(row.get("error")) and str(row["error"]).startswith(ENVIRONMENT)


class Results:
    """The rows of one results file, read back on open and appended to as points finish.

    The file is locked (fcntl.flock on `<file>.lock` beside it) from open to close: a second sweep
    on the same file is refused instead of interleaving rows with the first."""

    def __init__(self, path: str | Path, columns: dict[str, type]):
        self.path = Path(path)
        self.columns = columns
        self.parquet = self.path.suffix.lower() == ".parquet"
        if self.parquet:
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise SweepError(f"{self.path}: writing Parquet needs pyarrow: {PARQUET_EXTRA}; "
                                 "or write CSV (-o results.csv)") from None
        elif self.path.suffix.lower() != ".csv":
            raise SweepError(f"{self.path}: the results file must end in .csv or .parquet")
        self.journal = self.path.with_name(self.path.name + ".journal.csv") if self.parquet else self.path
        self.rows: list[dict] = []
        self.dropped = 0        # rows cut short or damaged, and repeated rows of one point
        self.retry = 0          # rows with an error of the environment: their points run again
        self._lock = _lock(self.journal, self.path)
        try:
            self._open()
        except BaseException:
            self._lock.close()
            raise

    def _open(self) -> None:
        header = list(self.columns)
        try:
            text = self.journal.read_bytes().decode("utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise SweepError(f"{self.journal}: cannot read the results file: {exc}") from None
        rows, damaged = self._parse(text, header) if text else ([], True)
        seen: set[str] = set()
        for r in rows:
            if retried(r):
                self.retry += 1
            elif r["hash"] in seen:
                self.dropped += 1
            else:
                seen.add(r["hash"])
                self.rows.append(r)
        if damaged or self.dropped or self.retry:   # rewrite: a torn row would run into the next one
            write_atomic(self.journal, (self._line(header) + "".join(
                self._line([_cell(r[c]) for c in header]) for r in self.rows)).encode())
        self._fh = open(self.journal, "a", newline="")

    def _parse(self, text: str, header: list[str]) -> tuple[list[dict], bool]:
        """The file's sound rows, and whether it needs rewriting (a row or the header cut short)."""
        lines = text.split("\n")
        torn = lines.pop()          # "" when the file ends in a newline, else a line cut short
        head = self._line(header)[:-1]
        if not lines:               # no newline at all: the header, or a piece of it, and nothing else
            if not head.startswith(torn):
                raise SweepError(f"{self.journal}: its columns are not this toolchain's sweep columns "
                                 "(another program's file?): write to another file, or remove it")
            return [], True
        if _cells(lines[0]) != header:
            raise SweepError(f"{self.journal}: its columns are not this toolchain's sweep columns "
                             "(another program's file?): write to another file, or remove it")
        rows = []
        for ln in lines[1:]:
            cells = _cells(ln)
            if cells is not None and len(cells) == len(header) and cells[1]:
                try:
                    rows.append({c: parse_cell(v, self.columns[c]) for c, v in zip(header, cells)})
                except ValueError:
                    pass        # a cell that is not its column's type: the row is damaged
        self.dropped = len(lines) - 1 - len(rows) + bool(torn)
        return rows, bool(torn)

    @staticmethod
    def _line(cells: list[str]) -> str:
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(cells)
        return buf.getvalue()

    def done(self) -> set[str]:
        """Hashes of the points with a row."""
        return {r["hash"] for r in self.rows}

    def append(self, row: dict) -> None:
        """Add a finished point's row and put it on disk now."""
        cells = [_cell(row.get(c)) for c in self.columns]
        self._fh.write(self._line(cells))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.rows.append({c: v if kind is not str else cell
                          for (c, kind), v, cell in zip(self.columns.items(), map(row.get, self.columns), cells)})

    def close(self) -> None:
        """Close the journal; for Parquet output, write the Parquet file from it; release the lock."""
        try:
            self._fh.close()
            if self.parquet:
                self._write_parquet()
        finally:
            self._lock.close()

    def _write_parquet(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pa.table({c: pa.array([r[c] for r in self.rows], type=_ARROW[self.columns[c]]())
                          for c in self.columns})
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)


def _arrow(kind: str):
    def make():
        import pyarrow as pa
        return getattr(pa, kind)()
    return make


_ARROW = {int: _arrow("int64"), float: _arrow("float64"), bool: _arrow("bool_"), str: _arrow("string")}
