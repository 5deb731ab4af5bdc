"""The in-memory NNP-1 program (code, DDR data, symbols, buffers) and its binary form.

A Program is written as an ELF32 executable (isa_spec.elf).  What ELF has no
place for lives in the `.nnp.meta` section as canonical JSON
(`json.dumps(..., sort_keys=True, separators=(",", ":"))`):

    {"abs": {NAME: VALUE, ...},          exact values of the absolute symbols
     "buffers": [{"addr": A, "dtype": "int8" | "int32", "layout": SPEC,
                  "name": NAME, "shape": [D0, ...]}, ...],
     "config": {KEY: INT | STRING, ...},  (abs and config integers fit 64 bits)
     "format": "nnp-elf", "format_version": 1,
     "isa": {"name": ISA_NAME, "version": ISA_VERSION},
     "lines": null | {"files": [FILE, ...], "table": [[FILE_INDEX, LINE], ...]}}

`lines.table` has one entry per instruction.  Reading validates every part
and raises BinaryError (never another exception) naming the problem.  The
writer and the reader hold a binary to what the assembler can write, so the
disassembler's round trip is exact: every word decodes, every pc-relative
target lies inside .text, every buffer has a data symbol of its name at its
address and no two buffers overlap, text symbols are instruction addresses.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .elf import BinaryError, read_elf, write_elf
from .encoding import DecodeError, decode_program
from .layout import LayoutError, stored_shape
from .model import Isa, load_isa

FORMAT, FORMAT_VERSION = "nnp-elf", 1
DTYPES = {"int8": 1, "int32": 4}
SECTIONS = ("text", "data", "abs")
MAX_LINE = 2**32 - 1        # line numbers in the line table are 32-bit
NAME = re.compile(r"[A-Za-z_.][A-Za-z0-9_.$]*\Z")  # the assembler's NAME token
ZIP_MAGIC = b"PK\x03\x04"
"""A network with host parts is saved as a zip archive (compiler.library): its index, each NPU stage's program
and each host part's ONNX model, one file each; a binary starting so is refused by name, not as a bad ELF."""

__all__ = ["BinaryError", "Buffer", "Symbol", "Program"]


@dataclass
class Buffer:
    """A tensor in DDR: where it is, its element type, logical shape and stored layout."""

    name: str
    addr: int
    dtype: str
    shape: tuple[int, ...]
    layout: str = ""

    @property
    def nbytes(self) -> int:
        """Stored size in bytes under the layout (padding included)."""
        return int(np.prod(stored_shape(self.layout, self.shape), dtype=object)) * DTYPES[self.dtype]


@dataclass
class Symbol:
    """A named value: a CU byte address ('text'), a DDR address ('data') or a constant ('abs')."""

    name: str
    value: int
    section: str


@dataclass
class Program:
    """An assembled NNP-1 program."""

    code: np.ndarray
    data: bytes = field(default=b"", repr=False)
    data_base: int = 0
    data_size: int = 0
    symbols: dict[str, Symbol] = field(default_factory=dict)
    buffers: dict[str, Buffer] = field(default_factory=dict)
    lines: list[tuple[str, int]] | None = None
    config: dict[str, int | str] = field(default_factory=dict)

    def to_bytes(self) -> bytes:
        """The ELF binary; BinaryError if the program cannot be represented."""
        code = _code_array(self.code)
        isa = load_isa()
        _check_code(code, isa)
        data = bytes(self.data)
        size = max(int(self.data_size), len(data))
        syms = [(s.name, int(s.value), s.section) for s in _symbol_order(self.symbols)]
        meta = _dump_meta(self, len(code), size)
        return write_elf(code.astype("<u8").tobytes(), data.rstrip(b"\0"), int(self.data_base), size,
                         syms, meta, isa.elf_machine, isa.version)

    @classmethod
    def from_bytes(cls, data: bytes) -> Program:
        """Parse and validate a binary; BinaryError says what is wrong and where."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise BinaryError(f"a binary is bytes, not {type(data).__name__}")
        if bytes(data[:4]) == ZIP_MAGIC:
            raise BinaryError("a zip archive, not an NNP binary: a network with host parts is saved as a zip of "
                              "NPU stages and onnxruntime parts, and runs with `nnpc run`")
        isa = load_isa()
        img = read_elf(bytes(data), isa.elf_machine)
        if img.flags != isa.version:
            raise BinaryError(f"e_flags {img.flags} is not ISA version {isa.version}")
        code = np.frombuffer(img.text, dtype="<u8").astype(np.uint64)
        _check_code(code, isa)
        meta = _load_meta(img.meta)
        symbols = _symbols(img.symbols, meta["abs"])
        prog = cls(code, img.data, img.data_base, img.data_size, symbols,
                   _buffers(meta["buffers"]), _lines(meta["lines"], len(code)), meta["config"])
        _check_buffers(prog)
        return prog

    def save(self, path: str | Path) -> None:
        """Write the binary to `path`."""
        Path(path).write_bytes(self.to_bytes())

    @classmethod
    def load(cls, path: str | Path) -> Program:
        """Read a binary; BinaryError (naming the path) if it is missing, unreadable or invalid."""
        try:
            blob = Path(path).read_bytes()
        except OSError as exc:
            raise BinaryError(f"{path}: cannot read: {exc.strerror or exc}") from None
        try:
            return cls.from_bytes(blob)
        except BinaryError as exc:
            raise BinaryError(f"{path}: {exc}") from None


def _symbol_order(symbols: dict[str, Symbol]) -> list[Symbol]:
    """The file's canonical symbol order (so equal programs give equal bytes): text, data, abs, by value."""
    return sorted(symbols.values(), key=lambda s: (SECTIONS.index(s.section) if s.section in SECTIONS else 3,
                                                  s.value, s.name))


def _code_array(code) -> np.ndarray:
    a = np.asarray(code)
    if a.ndim != 1 or not (a.size == 0 or np.issubdtype(a.dtype, np.integer)):
        raise BinaryError(f"code must be a 1-D array of 64-bit words, not {a.dtype} {a.shape}")
    return a.astype(np.uint64)


def _check_code(code: np.ndarray, isa: Isa) -> None:
    """Every word must decode and every branch land inside .text (what the assembler can write)."""
    try:
        table = decode_program(code, isa)
    except DecodeError as exc:
        raise BinaryError(f"section .text: {exc}") from None
    end = 8 * len(code)
    for n, instr in enumerate(isa.instructions):
        for name, fld in instr.fields.items():
            if fld.kind.cls != "pcrel":
                continue
            rows = np.nonzero(table[:, 0] == n)[0]
            targets = 8 * rows + table[rows, 1 + isa.slots.index(name)]
            bad = np.nonzero((targets < 0) | (targets >= end))[0]
            if len(bad):
                pc = int(rows[bad[0]])
                raise BinaryError(f"section .text: instruction {pc} (byte {8 * pc:#x}): {instr.mnemonic} "
                                  f"branches to {int(targets[bad[0]]):#x}, outside .text [0, {end:#x})")


def _dump_meta(prog: Program, ninstr: int, data_size: int) -> bytes:
    isa = load_isa()
    for key, sym in prog.symbols.items():
        if key != sym.name or not NAME.match(sym.name) or sym.section not in SECTIONS:
            raise BinaryError(f"symbol {key!r}: bad name or section {sym.section!r}")
        if sym.section == "abs" and not _fits64(sym.value):
            raise BinaryError(f"absolute symbol {sym.name} = {_show(sym.value)} does not fit 64 bits")
    lines = None
    if prog.lines is not None:
        if len(prog.lines) != ninstr:
            raise BinaryError(f"line table has {len(prog.lines)} entries for {ninstr} instructions")
        files = list(dict.fromkeys(f for f, _ in prog.lines))
        index = {f: i for i, f in enumerate(files)}
        lines = {"files": files, "table": [[index[f], int(n)] for f, n in prog.lines]}
    for key, value in prog.config.items():
        if not isinstance(key, str) or not NAME.match(key) or not (isinstance(value, str) or _fits64(value)):
            raise BinaryError(f"config {key!r} = {_show(value)}: keys are identifiers, values strings or "
                              "integers that fit 64 bits")
    meta = {
        "abs": {s.name: int(s.value) for s in prog.symbols.values() if s.section == "abs"},
        "buffers": [{"addr": int(b.addr), "dtype": b.dtype, "layout": b.layout, "name": b.name,
                     "shape": [int(d) for d in b.shape]}
                    for b in sorted(prog.buffers.values(), key=lambda b: (b.addr, b.name))],
        "config": {k: v if isinstance(v, str) else int(v) for k, v in prog.config.items()},
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "isa": {"name": isa.name, "version": isa.version},
        "lines": lines,
    }
    # Validate through the reader's own checks so that what is written can be read.
    blob = _canonical(meta)
    _load_meta(blob)
    _lines(lines, ninstr)
    _check_buffers(Program(np.zeros(0, np.uint64), b"", prog.data_base, data_size, prog.symbols,
                           _buffers(meta["buffers"]), None, {}))
    return blob


def _canonical(meta: object) -> bytes:
    try:
        return json.dumps(meta, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()
    except ValueError as exc:   # an integer too long for decimal text (sys.get_int_max_str_digits)
        raise BinaryError(f"metadata cannot be written: {exc}") from None


def _fail(what: str) -> BinaryError:
    return BinaryError(f"section .nnp.meta: {what}")


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _fits64(v) -> bool:
    """An integer the binary can hold: signed or unsigned 64-bit."""
    return _is_int(v) and -(1 << 63) <= v < (1 << 64)


def _show(v) -> str:
    """A value for a message (an integer too long to print is described by its size)."""
    if _is_int(v) and not _fits64(v):
        return f"<{int(v).bit_length()}-bit integer>"
    return repr(v)[:80]


def _load_meta(blob: bytes) -> dict:
    """Parse and schema-check the metadata JSON."""
    try:
        meta = json.loads(blob.decode())
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise _fail(f"not valid UTF-8 JSON ({exc})") from None
    keys = {"abs", "buffers", "config", "format", "format_version", "isa", "lines"}
    if not isinstance(meta, dict) or set(meta) != keys:
        got = sorted(meta) if isinstance(meta, dict) else type(meta).__name__
        raise _fail(f"expected an object with keys {sorted(keys)}, got {got}")
    isa = load_isa()
    # compared as JSON text: true == 1 in Python, but a file saying true is not the canonical file
    if _canonical([meta["format"], meta["format_version"]]) != _canonical([FORMAT, FORMAT_VERSION]):
        raise _fail(f"format {_show(meta['format'])} version {_show(meta['format_version'])} is not "
                    f"{FORMAT!r} version {FORMAT_VERSION}")
    if _canonical(meta["isa"]) != _canonical({"name": isa.name, "version": isa.version}):
        raise _fail(f"built for ISA {_show(meta['isa'])}, this is {isa.name} version {isa.version}")
    if not isinstance(meta["abs"], dict) or not all(_fits64(v) for v in meta["abs"].values()):
        raise _fail("abs must map names to integers that fit 64 bits")
    config = meta["config"]
    if not isinstance(config, dict) or not all(NAME.match(k) and (_fits64(v) or isinstance(v, str))
                                               for k, v in config.items()):
        raise _fail("config must map identifiers to strings or integers that fit 64 bits")
    if not isinstance(meta["buffers"], list):
        raise _fail("buffers must be a list")
    if _canonical(meta) != blob:
        raise _fail("not in canonical form (sorted keys, no spaces)")
    return meta


def _symbols(rows: list[tuple[str, int, str]], abs_values: dict[str, int]) -> dict[str, Symbol]:
    out: dict[str, Symbol] = {}
    for name, value, section in rows:
        if not NAME.match(name):
            raise BinaryError(f"section .symtab: symbol name {name!r} is not an identifier")
        if name in out:
            raise BinaryError(f"section .symtab: symbol {name} defined twice")
        if section == "abs":
            if name not in abs_values or abs_values[name] & 0xFFFFFFFF != value:
                raise BinaryError(f"absolute symbol {name}: .symtab value {value:#x} does not match "
                                  "section .nnp.meta")
            value = abs_values[name]
        out[name] = Symbol(name, value, section)
    extra = set(abs_values) - {n for n, s in out.items() if s.section == "abs"}
    if extra:
        raise _fail(f"abs names {sorted(extra)} that are not absolute symbols")
    if list(out) != [s.name for s in _symbol_order(out)]:
        raise BinaryError("section .symtab: symbols are not in canonical order (text, data, abs; "
                          "by value, then name)")
    return out


def _buffers(rows: list) -> dict[str, Buffer]:
    out: dict[str, Buffer] = {}
    keys = {"addr", "dtype", "layout", "name", "shape"}
    for n, row in enumerate(rows):
        if not isinstance(row, dict) or set(row) != keys:
            raise _fail(f"buffer {n}: expected an object with keys {sorted(keys)}")
        name, addr, dtype, shape, layout = (row[k] for k in ("name", "addr", "dtype", "shape", "layout"))
        if not isinstance(name, str) or not NAME.match(name) or name in out:
            raise _fail(f"buffer {n}: name {name!r} is not an identifier or is repeated")
        if not _is_int(addr) or not isinstance(dtype, str) or dtype not in DTYPES or not isinstance(layout, str):
            raise _fail(f"buffer {name}: bad addr {addr!r}, dtype {dtype!r} or layout {layout!r}")
        if not isinstance(shape, list) or not shape or not all(_is_int(d) and d >= 0 for d in shape):
            raise _fail(f"buffer {name}: shape {shape!r} is not a non-empty list of non-negative integers")
        out[name] = Buffer(name, addr, dtype, tuple(shape), layout)
    if list(out) != sorted(out, key=lambda n: (out[n].addr, n)):
        raise _fail("buffers are not in canonical order (by address, then name)")
    return out


def _check_buffers(prog: Program) -> None:
    """Every buffer must have a valid layout, lie inside the data extent, carry its label and
    overlap no other buffer: what `.buffer` can write (it defines the label, and a buffer's bytes
    end before the next `.buffer`)."""
    lo, hi = prog.data_base, prog.data_base + prog.data_size
    for b in prog.buffers.values():
        try:
            nbytes = b.nbytes
        except LayoutError as exc:
            raise _fail(f"buffer {b.name}: {exc}") from None
        if not lo <= b.addr <= b.addr + nbytes <= hi:
            raise _fail(f"buffer {b.name} [{b.addr:#x}, {b.addr + nbytes:#x}) lies outside the "
                        f"data section [{lo:#x}, {hi:#x})")
        sym = prog.symbols.get(b.name)
        if sym is None or sym.section != "data" or sym.value != b.addr:
            raise _fail(f"buffer {b.name} at {b.addr:#x} has no data symbol '{b.name}' at that address "
                        "(the label .buffer defines)")
    order = buffer_order(prog.buffers)
    for a, b in zip(order, order[1:]):
        if a.addr + a.nbytes > b.addr:
            raise _fail(f"buffers {a.name} [{a.addr:#x}, {a.addr + a.nbytes:#x}) and {b.name} "
                        f"[{b.addr:#x}, {b.addr + b.nbytes:#x}) overlap")


def buffer_order(buffers: dict[str, Buffer]) -> list[Buffer]:
    """Buffers in DDR order (an empty one before a sized one at the same address), as `.buffer`s are written."""
    return sorted(buffers.values(), key=lambda b: (b.addr, b.nbytes, b.name))


def _lines(lines, ninstr: int) -> list[tuple[str, int]] | None:
    if lines is None:
        return None
    if not isinstance(lines, dict) or set(lines) != {"files", "table"}:
        raise _fail("lines must be null or an object with keys files and table")
    files, table = lines["files"], lines["table"]
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        raise _fail("lines.files must be a list of strings")
    if not isinstance(table, list) or len(table) != ninstr:
        raise _fail(f"lines.table must hold one entry per instruction ({ninstr})")
    out = []
    for n, row in enumerate(table):
        if (not isinstance(row, list) or len(row) != 2 or not all(_is_int(v) for v in row)
                or not 0 <= row[0] < len(files) or not 0 <= row[1] <= MAX_LINE):
            raise _fail(f"lines.table[{n}] is not [file index, line in [0, {MAX_LINE}]]")
        out.append((files[row[0]], row[1]))
    if files != list(dict.fromkeys(f for f, _ in out)):
        raise _fail("lines.files must list every file of the table once, in order of first use")
    return out
