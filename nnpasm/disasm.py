"""Disassembler: an NNP-1 binary back to assembly source that assembles to the same binary.

Output, in order: `.target` lines (configuration), `.equ` lines (absolute
symbols), `.text` with a label at every text symbol and branch target and a
`.loc` wherever the line table departs from counting source lines (`.nolines`
if the binary has no line table), then `.data` (`.org` if the data does
not start at 0) with `.buffer` declarations, `.byte` lines (16 bytes each),
`.space` for zero runs, and a label at every data symbol.  Every symbol of the
binary is declared `.global`; labels the disassembler invents for branch
targets are local (`.L<hex>`), so they stay out of the symbol table.

What the assembler makes of it, and so what reproduces a binary exactly: every
non-local label, `.equ` and `.set` becomes a symbol; `.loc "f", L` gives the
next source line location (f, L) and the lines after it L+1, L+2, ...; data
always starts at DDR address 0 (`.org` pads), so a binary with data_base != 0
comes back with the same DDR contents but data_base 0.
"""
from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping

import numpy as np

from isa_spec import Instruction, decode, load_isa
from isa_spec.program import BinaryError, Program, buffer_order

BYTES_PER_LINE = 16


def _number(value: int) -> str:
    return str(value) if -4096 <= value <= 4096 else (f"-{-value:#x}" if value < 0 else f"{value:#x}")


_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\0": "\\0"}


def _quote(text: str) -> str:
    """A string literal in the assembler's syntax."""
    return '"' + "".join(_ESCAPES.get(c, c) for c in text) + '"'


def format_operand(instr: Instruction, name: str, value: int, pc: int, labels: Mapping[int, str],
                   data_labels: Mapping[int, str] | None = None) -> str:
    """One operand field as written in assembly."""
    kind = instr.fields[name].kind
    if kind.cls in ("reg", "sem"):
        return f"{kind.prefix}{value}"
    if kind.cls == "enum":
        return kind.names[value]
    if kind.cls == "pcrel":
        target = pc + value
        return labels.get(target, _number(target))
    if kind.cls == "addr" and data_labels and value in data_labels:
        return data_labels[value]
    return _number(value)


def format_instruction(instr: Instruction, values: Mapping[str, int | None], pc: int,
                       labels: Mapping[int, str], data_labels: Mapping[int, str] | None = None) -> str:
    """One instruction as assembly: `mnemonic op, op[, wait=sN][, signal=sM]`.

    `labels` maps CU byte addresses to names for branch targets; `data_labels`
    maps DDR addresses to names for `la`-style address operands.
    """
    ops = []
    for op in instr.operands:
        texts = [format_operand(instr, f, values[f], pc, labels, data_labels) for f in op.fields]
        ops.append(f"{texts[0]}[{texts[1]}]" if op.is_mem else texts[0])
    for name in instr.optional:
        if values.get(name) is not None:
            ops.append(f"{name}={instr.fields[name].kind.prefix}{values[name]}")
    return instr.mnemonic + (" " + ", ".join(ops) if ops else "")


class _Targets(Mapping):
    """Branch-target names usable from one scope: symbols, and invented labels of that scope."""

    def __init__(self, names: dict[int, str], scopes: dict[int, str], scope: str):
        self.names, self.scopes, self.scope = names, scopes, scope

    def __getitem__(self, addr: int) -> str:
        if self.scopes.get(addr, self.scope) != self.scope:
            raise KeyError(addr)
        return self.names[addr]

    def __iter__(self):
        return (a for a in self.names if a in self)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _text_labels(prog: Program, decoded) -> tuple[dict[int, list[str]], Callable[[int], _Targets]]:
    """Labels to print at each CU address, and the branch-target names usable from each pc.

    Symbols are printed where they are.  A branch target with no symbol gets an
    invented local label `.L<hex>`; the assembler scopes local labels to the
    preceding non-local label, so such a target is written as a label only from
    inside its own scope and as a number elsewhere.
    """
    names: dict[int, list[str]] = {}
    for s in prog.symbols.values():
        if s.section == "text":
            names.setdefault(s.value, []).append(s.name)
    starts = sorted(names)

    def scope(addr: int) -> str:
        i = bisect.bisect_right(starts, addr)
        return names[starts[i - 1]][-1] if i else ""

    targets = {8 * pc + values[name] for pc, (instr, values) in enumerate(decoded)
               for name, fld in instr.fields.items() if fld.kind.cls == "pcrel"}
    scopes = {t: scope(t) for t in targets if 0 <= t < 8 * len(decoded) and t not in names}
    for t in scopes:
        names[t] = [f".L{t:x}"]
    first = {a: n[0] for a, n in names.items()}
    return names, lambda pc: _Targets(first, scopes, scope(8 * pc))


def _text(prog: Program, out: list[str], data_labels: dict[int, str]) -> None:
    """Append the .text section to `out` (line numbers matter: `.loc` counts source lines)."""
    decoded = [decode(int(w)) for w in prog.code]
    names, targets_from = _text_labels(prog, decoded)
    out += [".text"] if prog.lines is not None else [".text", "    .nolines"]
    loc = None   # (file, line, output line of the .loc): the assembler advances line with the source
    for pc, (instr, values) in enumerate(decoded):
        out += [f"{n}:" for n in names.get(8 * pc, [])]
        if prog.lines is not None:
            here = len(out) + 1
            if loc is None or (loc[0], loc[1] + here - loc[2] - 1) != prog.lines[pc]:
                out.append(f"    .loc {_quote(prog.lines[pc][0])}, {prog.lines[pc][1]}")
                loc = (*prog.lines[pc], here)
        out.append("    " + format_instruction(instr, values, 8 * pc, targets_from(pc), data_labels))
    out += [f"{n}:" for n in names.get(8 * len(decoded), [])]


def _byte_lines(data: bytes, start: int, stop: int) -> list[str]:
    """`.byte` / `.space` lines for data offsets [start, stop) (zero beyond len(data))."""
    out, pos = [], start
    n = max(0, min(stop, len(data)) - start)
    if n:
        rows = np.zeros(-(-n // BYTES_PER_LINE) * BYTES_PER_LINE, np.uint8)
        rows[:n] = np.frombuffer(data, np.uint8, n, start)
        rows = rows.reshape(-1, BYTES_PER_LINE)
        for r in np.flatnonzero(rows.any(axis=1)):
            row_start = start + int(r) * BYTES_PER_LINE
            if row_start > pos:
                out.append(f"    .space {row_start - pos}")
            row = rows[r, :min(BYTES_PER_LINE, start + n - row_start)]
            out.append("    .byte " + ", ".join(str(int(b)) for b in row))
            pos = row_start + len(row)
    if stop > pos:
        out.append(f"    .space {stop - pos}")
    return out


def _shape(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


def _data(prog: Program) -> list[str]:
    base, end = prog.data_base, prog.data_base + prog.data_size
    labels: dict[int, list[str]] = {}
    buffers: dict[int, list[str]] = {}
    for b in buffer_order(prog.buffers):
        layout = f", {_quote(b.layout)}" if b.layout else ""
        buffers.setdefault(b.addr, []).append(f".buffer {b.name}, {b.dtype}, {_shape(b.shape)}{layout}")
    for s in prog.symbols.values():
        defined_by_buffer = s.name in prog.buffers and prog.buffers[s.name].addr == s.value
        if s.section == "data" and not defined_by_buffer:
            labels.setdefault(s.value, []).append(f"{s.name}:")
    out = [".data"] + ([f"    .org {_number(base)}"] if base else [])
    cur = base
    for addr in sorted(set(labels) | set(buffers)):
        out += _byte_lines(prog.data, cur - base, addr - base)
        out += labels.get(addr, []) + ["    " + b for b in buffers.get(addr, [])]
        cur = addr
    return out + _byte_lines(prog.data, cur - base, end - base)


def disassemble(data: bytes | Program) -> str:
    """Assembly source for a binary or a Program; BinaryError if it is not a valid NNP-1 program."""
    blob = data.to_bytes() if isinstance(data, Program) else data
    prog = Program.from_bytes(blob)
    data_labels = {}
    for s in prog.symbols.values():
        if s.section == "data":
            data_labels.setdefault(s.value, s.name)
    out = [f"; {load_isa().name} disassembly"]
    out += [f".target {k}, {_quote(v) if isinstance(v, str) else _number(v)}" for k, v in prog.config.items()]
    out += [f".global {name}" for name in prog.symbols]
    out += [f".equ {s.name}, {_number(s.value)}" for s in prog.symbols.values() if s.section == "abs"]
    _text(prog, out, data_labels)
    return "\n".join(out + _data(prog)) + "\n"


__all__ = ["BinaryError", "disassemble", "format_instruction", "format_operand"]
