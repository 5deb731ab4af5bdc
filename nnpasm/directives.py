"""The assembler's directives: sections, symbols, data, buffers, includes, macros and line mapping.

Each directive is a function `(asm, stmt)` in DIRECTIVES; it reads its operands
from the parsed Statement and changes the Assembler's state through its public
methods and attributes.  A bad operand raises OperandError (or the expression
evaluator's EvalError), which the assembler reports at the operand's column.
"""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable, NamedTuple

from isa_spec.layout import LayoutError, stored_shape
from isa_spec.program import DTYPES, MAX_LINE, Buffer

from .diagnostics import OperandError
from .expr import EvalError, Undefined
from .macros import Macro, SourceError, read_source, real_path, resolve_file
from .parser import Keyword, Mem, Shape, Statement, Str, describe_operand

if TYPE_CHECKING:
    from .assembler import Assembler, LineContext

DDR_BYTES = 256 << 20
BUFFER_ALIGN = 64
DATA_WIDTH = {".byte": 1, ".half": 2, ".word": 4, ".dword": 8}
NOT_VALUES = (Mem, Keyword, Str, Shape)


class LocMapping(NamedTuple):
    """A `.loc "file", line`: lines of `file` from `first_line` on map to `to_file` from `to_line`."""

    file: str
    first_line: int
    to_file: str
    to_line: int


class Fixup(NamedTuple):
    """A data value naming a symbol defined later, written into .data in pass 2."""

    offset: int
    width: int
    node: object
    column: int
    base: int
    ctx: LineContext
    scope: str


class GlobalRef(NamedTuple):
    """A name given to .global, checked once every symbol is defined."""

    name: str
    column: int
    ctx: LineContext


class OpenBuffer(NamedTuple):
    """The .buffer whose bytes are still being emitted, and where it was declared."""

    buffer: Buffer
    ctx: LineContext
    column: int


# ------------------------------------------------------------------ operands
def _args(stmt: Statement, lo: int, hi: int, usage: str) -> list:
    n = len(stmt.operands)
    if not lo <= n <= hi:
        col = stmt.cols[hi] if n > hi else (stmt.cols[-1] if stmt.cols else stmt.name.column)
        raise OperandError(col, f"{stmt.name} expects {usage}, got {n} operand{'s' if n != 1 else ''}")
    return stmt.operands


def _name_arg(stmt: Statement, i: int, what: str = "a name") -> str:
    node = stmt.operands[i]
    if type(node) is int or not isinstance(node, str):
        raise OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be {what}, "
                                         f"not {describe_operand(node)}")
    return node


def _string_arg(stmt: Statement, i: int) -> str:
    node = stmt.operands[i]
    if type(node) is not Str:
        raise OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be a string, "
                                         f"not {describe_operand(node)}")
    return node.value


def _int_arg(asm: Assembler, stmt: Statement, i: int) -> int:
    node = stmt.operands[i]
    if type(node) in NOT_VALUES:
        raise OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be an expression, "
                                         f"not {describe_operand(node)}")
    return asm.evaluate(node, stmt.cols[i], stmt.bases[i])


def _need(asm: Assembler, stmt: Statement, section: str) -> None:
    if asm.section != section:
        raise OperandError(stmt.name.column, f"{stmt.name} is only allowed in .{section}")


def data_value(asm: Assembler, node: object, col: int, base: int, width: int) -> int:
    """A data value as unsigned bits after its range check."""
    if type(node) in NOT_VALUES:
        raise OperandError(col, f"expected a value, not {describe_operand(node)}")
    value = asm.evaluate(node, col, base)
    lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width)) - 1
    if not lo <= value <= hi:
        name = {1: ".byte", 2: ".half", 4: ".word", 8: ".dword"}[width]
        raise OperandError(col, f"{name} value {value} out of range [{lo}, {hi}]")
    return value & ((1 << (8 * width)) - 1)


# ----------------------------------------------------------------- data bytes
def _check_size(asm: Assembler, n: int, col: int) -> None:
    if asm.cursor + n > DDR_BYTES:
        raise OperandError(col, f".data would grow to {asm.cursor + n} bytes, beyond the "
                                f"DDR size {DDR_BYTES}")


def _skip(asm: Assembler, n: int, col: int) -> None:
    # Skipped bytes stay unwritten: .data is only filled up to its last emitted byte.
    _check_size(asm, n, col)
    asm.cursor += n


def _emit(asm: Assembler, blob: bytes, col: int) -> None:
    _check_size(asm, len(blob), col)
    if asm.cursor > len(asm.data):
        asm.data.extend(bytes(asm.cursor - len(asm.data)))
    asm.data += blob
    asm.cursor += len(blob)


# ---------------------------------------------------------- sections, symbols
def section(asm: Assembler, stmt: Statement) -> None:
    """`.text` / `.data`: switch sections (leaving .data closes the open buffer)."""
    _args(stmt, 0, 0, "no operands")
    if asm.section == "data" and stmt.name != ".data":
        close_buffer(asm)
    asm.section = stmt.name[1:]


def equ(asm: Assembler, stmt: Statement) -> None:
    """`.equ NAME, value` (once) / `.set NAME, value` (again and again)."""
    _args(stmt, 2, 2, "NAME, value")
    name = _name_arg(stmt, 0)
    try:
        value = _int_arg(asm, stmt, 1)
    except Undefined as exc:
        raise EvalError(exc.message + f" ({stmt.name} needs its value now)", exc.column) from None
    asm.define(name, value, "abs", stmt.name[1:], stmt.cols[0])


def global_(asm: Assembler, stmt: Statement) -> None:
    """`.global NAME, ...`: names that must be defined by the end of the program."""
    _args(stmt, 1, 1 << 20, "one or more names")
    for i in range(len(stmt.operands)):
        asm.globals.append(GlobalRef(_name_arg(stmt, i), stmt.cols[i], asm.ctx))


def target(asm: Assembler, stmt: Statement) -> None:
    """`.target KEY, value`: a machine configuration entry recorded in the binary."""
    _args(stmt, 2, 2, "KEY, value")
    key = _name_arg(stmt, 0, "a key name")
    value = stmt.operands[1]
    asm.config[str(key)] = value.value if type(value) is Str else _int_arg(asm, stmt, 1)


def nolines(asm: Assembler, stmt: Statement) -> None:
    """`.nolines`: leave the line table out of the binary."""
    _args(stmt, 0, 0, "no operands")
    asm.keep_lines = False


def loc(asm: Assembler, stmt: Statement) -> None:
    """`.loc "file", line`: the next line counts as `line` of `file` in the line table."""
    _args(stmt, 2, 2, '"file", line')
    file, line = _string_arg(stmt, 0), _int_arg(asm, stmt, 1)
    if not 0 <= line <= MAX_LINE:
        raise OperandError(stmt.cols[1], f".loc line {line} is outside [0, {MAX_LINE}]")
    asm.loc = LocMapping(asm.ctx.file, asm.ctx.line + 1, file, line)


# -------------------------------------------------------------- source input
def _file_arg(asm: Assembler, stmt: Statement) -> Path:
    _args(stmt, 1, 1, '"file"')
    name = _string_arg(stmt, 0)
    including = asm.source.current_file()
    path = resolve_file(name, including, asm.include_dirs)
    if path is None:
        dirs = ", ".join(asm.include_dirs) or "no -I directories"
        raise OperandError(stmt.cols[0], f"{stmt.name}: file '{name}' not found "
                                         f"(searched next to {including}, {dirs})")
    return path


def include(asm: Assembler, stmt: Statement) -> None:
    """`.include "file"`: read the file's lines next."""
    path = _file_arg(asm, stmt)
    try:
        text = read_source(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise OperandError(stmt.cols[0], f".include: cannot read '{path}': {exc}") from None
    try:
        asm.source.push_file(text, str(path), real_path(path))
    except SourceError as exc:
        raise OperandError(stmt.cols[0], exc.message) from None


def incbin(asm: Assembler, stmt: Statement) -> None:
    """`.incbin "file"`: the file's bytes as data."""
    _need(asm, stmt, "data")
    path = _file_arg(asm, stmt)
    try:
        blob = path.read_bytes()
    except OSError as exc:
        raise OperandError(stmt.cols[0], f".incbin: cannot read '{path}': {exc.strerror}") from None
    _emit(asm, blob, stmt.cols[0])


def macro(asm: Assembler, stmt: Statement) -> None:
    """`.macro NAME params...` ... `.endm`: define a macro."""
    # The body is consumed first so that a bad header does not assemble the body as code.
    body = asm.source.collect(".macro", ".endm")
    _args(stmt, 1, 1 << 10, "a name and parameters")
    name = _name_arg(stmt, 0)
    params = tuple(str(_name_arg(stmt, i, "a parameter name")) for i in range(1, len(stmt.operands)))
    if body is None:
        raise OperandError(stmt.name.column, f"missing .endm for macro '{name}'")
    if name in asm.isa.by_mnemonic or name in DIRECTIVES or name in asm.macros:
        raise OperandError(stmt.cols[0], f"macro name '{name}' is already an instruction, "
                                         "directive or macro")
    asm.macros[name] = Macro(name, params, body, asm.ctx.file, asm.ctx.line)


def rept(asm: Assembler, stmt: Statement) -> None:
    """`.rept count` ... `.endr`: read the body `count` times."""
    body = asm.source.collect(".rept", ".endr")
    _args(stmt, 1, 1, "a count")
    if body is None:
        raise OperandError(stmt.name.column, "missing .endr for .rept")
    count = _int_arg(asm, stmt, 0)
    try:
        asm.source.push_rept(body, count)
    except SourceError as exc:
        raise OperandError(stmt.cols[0], exc.message) from None


def stray_end(asm: Assembler, stmt: Statement) -> None:
    """`.endm` / `.endr` with no block open: always an error."""
    opener = ".macro" if stmt.name == ".endm" else ".rept"
    raise OperandError(stmt.name.column, f"{stmt.name} without {opener}")


# --------------------------------------------------------------------- layout
def align(asm: Assembler, stmt: Statement) -> None:
    """`.align n`: pad .text with nops, or skip .data bytes, to a multiple of n."""
    _args(stmt, 1, 1, "a power of two")
    n = _int_arg(asm, stmt, 0)
    if n < 1 or n & (n - 1) or n > DDR_BYTES:
        raise OperandError(stmt.cols[0], f".align {n}: not a power of two in [1, {DDR_BYTES}]")
    if asm.section == "text":
        while (8 * len(asm.words)) % n:
            asm.words.append(asm.nop)
            asm.record_line(stmt.cols[0])
    else:
        _skip(asm, (-asm.cursor) % n, stmt.cols[0])


def org(asm: Assembler, stmt: Statement) -> None:
    """`.org addr`: skip forward to a .data address."""
    _need(asm, stmt, "data")
    _args(stmt, 1, 1, "an address")
    addr = _int_arg(asm, stmt, 0)
    if addr < asm.cursor:
        raise OperandError(stmt.cols[0], f".org {addr:#x} would move backwards from {asm.cursor:#x}")
    _skip(asm, addr - asm.cursor, stmt.cols[0])


def space(asm: Assembler, stmt: Statement) -> None:
    """`.space n[, fill]`: n bytes of fill (default 0)."""
    _need(asm, stmt, "data")
    _args(stmt, 1, 2, "a size and an optional fill byte")
    n = _int_arg(asm, stmt, 0)
    fill = _int_arg(asm, stmt, 1) if len(stmt.operands) > 1 else 0
    if n < 0:
        raise OperandError(stmt.cols[0], f".space size {n} is negative")
    if not -128 <= fill <= 255:
        raise OperandError(stmt.cols[1], f".space fill {fill} out of range [-128, 255]")
    if fill:
        _check_size(asm, n, stmt.cols[0])
        _emit(asm, bytes([fill & 0xFF]) * n, stmt.cols[0])
    else:
        _skip(asm, n, stmt.cols[0])


def data_values(asm: Assembler, stmt: Statement) -> None:
    """`.byte` / `.half` / `.word` / `.dword v, ...`: little-endian values, later symbols patched in pass 2."""
    _need(asm, stmt, "data")
    _args(stmt, 1, 1 << 20, "one or more values")
    width = DATA_WIDTH[stmt.name]
    if asm.cursor % width:
        raise OperandError(stmt.name.column, f"{stmt.name} at {asm.cursor:#x} is not aligned to "
                                             f"{width} bytes (use .align {width})")
    out = bytearray()
    for i in range(len(stmt.operands)):
        col, base = stmt.cols[i], stmt.bases[i]
        try:
            out += data_value(asm, stmt.operands[i], col, base, width).to_bytes(width, "little")
        except Undefined:
            asm.fixups.append(Fixup(asm.cursor + len(out), width, stmt.operands[i], col, base,
                                    asm.ctx, asm.scope))
            out += bytes(width)
        except (OperandError, EvalError) as exc:
            asm.error(exc.column or col, exc.message)
            out += bytes(width)
    _emit(asm, bytes(out), stmt.cols[0])


def resolve_fixups(asm: Assembler) -> None:
    """Pass 2: write the data values that named a symbol defined after them."""
    for fix in asm.fixups:
        asm.ctx, asm.scope = fix.ctx, fix.scope
        try:
            value = data_value(asm, fix.node, fix.column, fix.base, fix.width)
        except (OperandError, EvalError) as exc:
            asm.error(exc.column or fix.column, exc.message)
        else:
            asm.data[fix.offset:fix.offset + fix.width] = value.to_bytes(fix.width, "little")


# -------------------------------------------------------------------- buffers
def _buffer_shape(asm: Assembler, stmt: Statement) -> tuple[int, ...]:
    node = stmt.operands[2]
    items = node.items if type(node) is Shape else (node,)
    shape = tuple(asm.evaluate(d, stmt.cols[2], stmt.bases[2]) for d in items)
    if any(d < 0 for d in shape):
        raise OperandError(stmt.cols[2], f".buffer shape {shape} has a negative dimension")
    return shape


def _buffer_layout(stmt: Statement, shape: tuple[int, ...]) -> str:
    layout = _string_arg(stmt, 3) if len(stmt.operands) > 3 else ""
    try:
        stored_shape(layout, shape)
    except LayoutError as exc:
        raise OperandError(stmt.cols[3] if len(stmt.operands) > 3 else stmt.cols[2],
                           f".buffer layout: {exc}") from None
    return layout


def buffer(asm: Assembler, stmt: Statement) -> None:
    """`.buffer NAME, DTYPE, (d0, ...)[, "LAYOUT"]`: declare a tensor the data after it fills."""
    _need(asm, stmt, "data")
    _args(stmt, 3, 4, 'NAME, DTYPE, (d0, d1, ...)[, "LAYOUT"]')
    close_buffer(asm)
    name = _name_arg(stmt, 0)
    dtype = str(_name_arg(stmt, 1, "a dtype"))
    if dtype not in DTYPES:
        raise OperandError(stmt.cols[1], f".buffer dtype '{dtype}' is not one of {', '.join(DTYPES)}")
    shape = _buffer_shape(asm, stmt)
    layout = _buffer_layout(stmt, shape)
    if asm.cursor % BUFFER_ALIGN:
        raise OperandError(stmt.name.column, f".buffer {name} at {asm.cursor:#x} is not "
                                             f"{BUFFER_ALIGN}-byte aligned (use .align {BUFFER_ALIGN})")
    if name in asm.buffers:
        raise OperandError(stmt.cols[0], f"duplicate buffer '{name}'")
    buf = Buffer(str(name), asm.cursor, dtype, shape, layout)
    asm.define(name, asm.cursor, "data", "label", stmt.cols[0])
    asm.buffers[buf.name] = buf
    asm.open_buffer = OpenBuffer(buf, asm.ctx, stmt.cols[0])


def close_buffer(asm: Assembler) -> None:
    """Check that the open buffer (if any) got all its bytes, and close it."""
    if asm.open_buffer is None:
        return
    buf, opened = asm.open_buffer.buffer, asm.open_buffer
    asm.open_buffer = None
    got = asm.cursor - buf.addr
    if got < buf.nbytes:
        asm.error(opened.column, f"buffer '{buf.name}' needs {buf.nbytes} bytes ({buf.dtype} {buf.shape}"
                       f"{' ' + repr(buf.layout) if buf.layout else ''}) but only {got} were "
                       "emitted before the next .buffer or the end of .data", opened.ctx)


DIRECTIVES: dict[str, Callable[[Assembler, Statement], None]] = {
    ".text": section, ".data": section, ".equ": equ, ".set": equ, ".global": global_, ".target": target,
    ".loc": loc, ".nolines": nolines, ".include": include, ".incbin": incbin, ".macro": macro, ".rept": rept,
    ".endm": stray_end, ".endr": stray_end, ".align": align, ".org": org, ".space": space, ".buffer": buffer,
    **{d: data_values for d in DATA_WIDTH}}
