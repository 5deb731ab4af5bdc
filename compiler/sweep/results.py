"""The results file: one row per point, appended as points finish; which points are already done.

CSV output is its own journal: each row is appended and flushed to disk as its point
finishes, so a killed sweep loses only the points in flight.  A row a kill cut short (no
final newline, or too few fields) is dropped when the file is opened again, and its point
runs again; so is a row with a cell that is not of its column's type.  Parquet cannot be
appended to, so `-o results.parquet` keeps the same journal beside it
(`results.parquet.journal.csv`) and writes the Parquet file from it when the sweep ends.  A row is done when its hash (compiler.sweep.points.Point.hash: the point and the
toolchain version) is one of this sweep's points; rows of other hashes (another toolchain,
another sweep file) stay in the file and are left alone.
"""
from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from .cache import write_atomic
from .spec import SweepError

PARQUET_EXTRA = "pip install 'nnp-toolchain[parquet]' (pyarrow)"


def _cell(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def parse_cell(text: str, kind: type) -> object:
    """A CSV cell back to its column's type (None for an empty cell of a number or flag)."""
    if kind is str:
        return text
    if text == "":
        return None
    if kind is bool:
        return text == "True"
    return kind(text)


class Results:
    """The rows of one results file, read back on open and appended to as points finish."""

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
        self.dropped = 0
        self._open()

    def _open(self) -> None:
        header = list(self.columns)
        try:
            text = self.journal.read_text()
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise SweepError(f"{self.journal}: cannot read the results file: {exc}") from None
        if text:
            lines = text.splitlines(keepends=True)
            found = next(csv.reader([lines[0]]))
            if found != header:
                raise SweepError(f"{self.journal}: its columns are not this toolchain's sweep columns "
                                 "(another program's file?): write to another file, or remove it")
            good = [ln for ln in lines[1:] if ln.endswith("\n")]
            for ln in good:
                cells = next(csv.reader([ln]), [])
                if len(cells) == len(header) and cells[1]:
                    try:
                        self.rows.append({c: parse_cell(v, self.columns[c]) for c, v in zip(header, cells)})
                    except ValueError:
                        pass        # a cell that is not its column's type: the row is damaged
            self.dropped = len(lines) - 1 - len(self.rows)
            if self.dropped:       # a partial row would run into the next one appended: rewrite without it
                write_atomic(self.journal, (self._line(header) + "".join(
                    self._line([_cell(r[c]) for c in header]) for r in self.rows)).encode())
        else:
            self.journal.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.journal, self._line(header).encode())
        self._fh = open(self.journal, "a", newline="")

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
        self._fh.write(self._line([_cell(row.get(c)) for c in self.columns]))
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self.rows.append({c: row.get(c) for c in self.columns})

    def close(self) -> None:
        """Close the journal; for Parquet output, write the Parquet file from it."""
        self._fh.close()
        if self.parquet:
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
