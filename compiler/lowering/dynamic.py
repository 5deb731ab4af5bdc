"""The text emitter of the dynamic lowerings not yet on the program builder (compiler/dynamic/asm.py).

Pool, global pool, elementwise, concat and the fused chain still write their
assembly as text with these pieces: registers as module constants, `Emit`,
and `fold_channels` over the finished text.  The conv (compiler/dynamic/
conv.py) is on the builder; `scope_lines` hands its builder-written pieces to
the fused chain's text, and `text_lowering` a text program to a chain or
network composed on the builder (compiler/dynamic/chain.py).  This module
goes when its last user is converted.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from ..dims import Dim, DynamicOp, axis_rule, reciprocal, window_out
from ..dynamic.asm import Instr, Line, Program, Scope
from ..dynamic.common import Part


def scope_lines(build: Callable[[Scope], None], prefix: str = "") -> list[str]:
    """The text lines of code written by build(scope) into a program of its own (registers from r1,
    semaphores from s0, labels and constants prefixed), for a text program to take in."""
    prog = Program()
    build(Scope(prog, prefix=prefix))
    return [item.text() if isinstance(item, Instr) else item.text for item in prog.text]


def scope_data(build: Callable[[Scope], None], prefix: str = "") -> tuple[list[str], dict[str, bytes]]:
    """The .data lines and .incbin files written by build(scope) into a program of its own."""
    prog = Program()
    build(Scope(prog, prefix=prefix))
    return [item.text for item in prog.data], prog.files


def emit_out_size(i, reg: str, src: str, add: int, stride: int, tmp: str) -> None:
    """reg = (src + add) // stride + 1 on the CU: a shift for a power-of-two stride, else the high word of
    the product with the stride's reciprocal (`mulhu`, exact for every size in range: dims.reciprocal)."""
    i(f"addi    {reg}, {src}, {add}")
    if stride & (stride - 1):
        i(f"li      {tmp}, {reciprocal(stride)}")
        i(f"mulhu   {reg}, {reg}, {tmp}")
    elif stride > 1:
        i(f"srai    {reg}, {reg}, {stride.bit_length() - 1}")
    i(f"addi    {reg}, {reg}, 1")


def _axis(d, add: int, stride: int) -> str:
    """An output axis (d + add) // stride + 1 in a note: the Dim's name when that is d itself."""
    if not isinstance(d, Dim):
        return str(window_out(d, add, stride))
    return d.name if (add, stride) == (-1, 1) else axis_rule(d.name, add, stride)


def fold_channels(asm: str, channels: int) -> str:
    """The program with its DMA channels (ch0 loads, ch1 weights and drains, ch2 stores, ch3 bias) folded
    onto the configured ones: one queue only adds order (no command waits on one behind it).  The channels
    the program uses are dealt out in turn (nu.conv.rq's programs use only ch0 and ch2: on two channels,
    loads on one, stores on the other)."""
    used = sorted({int(k) for k in re.findall(r"(?m)^\s+dma\s+ch(\d)", asm)})
    if len(used) <= channels:
        place = {k: k if k < channels else used.index(k) for k in used}
        if len(set(place.values())) < len(used):
            place = {k: j for j, k in enumerate(used)}
    else:
        place = {k: j % channels for j, k in enumerate(used)}
    return re.sub(r"(?m)^(\s+dma\s+ch)(\d)", lambda m: f"{m.group(1)}{place[int(m.group(2))]}", asm)


def axis_name(d) -> str:
    """An axis in a `.target dynamic.buffer.*` note: a Dim's name or the fixed size."""
    return d.name if isinstance(d, Dim) else str(d)


def target_notes(op: DynamicOp, y_axes: list[str]) -> list[str]:
    """The `.target dynamic.*` notes that describe the argument block and the buffers to nnpsim."""
    dims = " ".join(f"{d.name}:{d.lo}:{d.hi}" for d in op.dims)
    shape = " ".join(axis_name(d) for d in op.x_shape)
    return ([f'.target dynamic.dims, "{dims}"', '.target dynamic.args, "args"']
            + [f'.target dynamic.buffer.{t}, "{shape}"' for t in op.names]
            + [f'.target dynamic.buffer.y, "{" ".join(y_axes)}"'])


# Registers: sizes, loop state, buffer addresses, temporaries.
RN, RH, RW, ROH, ROW, RWP, RHW, ROHW = "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"
RI, ROH0, RTH, RB, RPEND, RIB, RAB, RVB, RPIX = "r10", "r11", "r12", "r13", "r14", "r15", "r16", "r17", "r18"
RMAX = "r31"
T = [f"r{k}" for k in range(19, 31)]


def _size(lines: list[str], reg: str, d, idx: dict[str, int]) -> None:
    lines.append(f"        ld      {reg}, r1, {4 * idx[d.name]}" if isinstance(d, Dim) else f"        li      {reg}, {d}")


def halo_rows(i, regs: tuple[str, ...], sh: int, ekh: int, pt: int) -> None:
    """Emit a tile's input rows: (rows, first virtual row, pad top, first real row, pad bottom, scratch) from
    RTH (its output rows), ROH0 (its first) and RH (the input height), all clamped: a tile may lie wholly in
    the padding."""
    rows, vstart, plo, start, phi, tmp = regs
    i(f"addi    {rows}, {RTH}, -1")
    i(f"muli    {rows}, {rows}, {sh}")
    i(f"addi    {rows}, {rows}, {ekh}")
    i(f"muli    {vstart}, {ROH0}, {sh}")
    i(f"addi    {vstart}, {vstart}, {-pt}")
    i(f"sub     {plo}, r0, {vstart}")
    i(f"max     {plo}, {plo}, r0")
    i(f"min     {plo}, {plo}, {rows}")
    i(f"max     {start}, {vstart}, r0")
    i(f"min     {start}, {start}, {RH}")
    i(f"add     {phi}, {vstart}, {rows}")
    i(f"sub     {phi}, {phi}, {RH}")
    i(f"max     {phi}, {phi}, r0")
    i(f"sub     {tmp}, {rows}, {plo}")
    i(f"min     {phi}, {phi}, {tmp}")


class Emit:
    """Assembly lines being written, with the helpers every dynamic lowering uses."""

    def __init__(self, lines: list[str]):
        self.L = lines

    def e(self, s: str) -> None:
        """A line as it is (a label or comment)."""
        self.L.append(s)

    def i(self, s: str) -> None:
        """An instruction."""
        self.L.append("        " + s)

    def setp(self, param: str, v) -> None:
        """A command parameter from a register (str) or an immediate."""
        self.i(f"setp    {param}, {v}, 0" if isinstance(v, str) else f"setpi   {param}, {v}")

    def dma_box(self, elem: int, dims, pad_value: int = 0) -> None:
        """dims: up to 4 (size, src_stride, dst_stride, pad_lo, pad_hi); each an int or a register."""
        self.setp("dma.elem", elem)
        self.setp("dma.pad_value", pad_value)
        for k in range(4):
            size, ss, ds, lo, hi = dims[k] if k < len(dims) else (1, 0, 0, 0, 0)
            for p, v in (("size", size), ("src_stride", ss), ("dst_stride", ds), ("pad_lo", lo), ("pad_hi", hi)):
                self.setp(f"dma.{p}{k}", v)


@dataclass(frozen=True)
class TileIO:
    """Where a tile's input rows come from and its output rows go: DDR buffers x and y for one op, DM
    tiles inside a fused chain.  `src(em, reg, start, tmp)` puts the address of input row `start` of
    channel 0 in reg (channels RHW apart, rows RW apart); `dst(em, reg, tmp)` the address of output row
    ROH0 of channel 0 (channels ROHW apart, rows ROW apart)."""

    src: Callable
    dst: Callable
    src_space: str = "ddr"
    dst_space: str = "ddr"
    stage: Callable | None = None    # stage(em, start, rows, plo, phi, prefix): bring the rows on chip first


def ddr_io(c: int, o: int, x: str = "x", y: str = "y", y_bytes: int = 1, y_first: int = 0) -> TileIO:
    """Input rows from DDR buffer x ([n][c][h][w]), output rows to DDR buffer y ([n][o][oh][ow], y_bytes
    an element, from channel y_first)."""
    def src(em, reg, start, tmp):
        em.i(f"mul     {reg}, {RI}, {RHW}")
        em.i(f"muli    {reg}, {reg}, {c}")
        em.i(f"mul     {tmp}, {start}, {RW}")
        em.i(f"add     {reg}, {reg}, {tmp}")
        em.i(f"la      {tmp}, {x}")
        em.i(f"add     {reg}, {reg}, {tmp}")

    def dst(em, reg, tmp):
        em.i(f"mul     {reg}, {RI}, {ROHW}")
        em.i(f"muli    {reg}, {reg}, {o}")
        em.i(f"mul     {tmp}, {ROH0}, {ROW}")
        em.i(f"add     {reg}, {reg}, {tmp}")
        if y_first:
            em.i(f"muli    {tmp}, {ROHW}, {y_first}")
            em.i(f"add     {reg}, {reg}, {tmp}")
        if y_bytes > 1:
            em.i(f"muli    {reg}, {reg}, {y_bytes}")
        em.i(f"la      {tmp}, {y}")
        em.i(f"add     {reg}, {reg}, {tmp}")
    return TileIO(src, dst)



def next_tile(sets: int = 2, blocks: int = 0) -> list[str]:
    """The end of a row tile: count its store, step to the next of `sets` slots, to the next tile, then
    (blocks > 0: a depthwise conv's channel blocks, counted in r1) the next block, then the next image."""
    step = ([f"        xori    {RB}, {RB}, 1"] if sets == 2 else
            [f"        addi    {RB}, {RB}, 1", f"        li      {T[0]}, {sets}", f"        blt     {RB}, {T[0]}, slot",
             f"        li      {RB}, 0", "slot:"])
    block = (["        addi    r1, r1, 1", f"        li      {T[0]}, {blocks}", "        blt     r1, "
              f"{T[0]}, block"] if blocks else [])
    return ([f"        addi    {RPEND}, {RPEND}, 1", *step,
             f"        add     {ROH0}, {ROH0}, {RTH}", f"        blt     {ROH0}, {ROH}, tile", *block,
             f"        addi    {RI}, {RI}, 1", f"        blt     {RI}, {RN}, batch"])


def drain_and_halt(pending: str, store_sem: str) -> list[str]:
    """The end of every dynamic program: wait for the `pending` stores still in flight, then halt."""
    return ["drain:", f"        beq     {pending}, r0, done", f"        sem.wait {store_sem}",
            f"        addi    {pending}, {pending}, -1", "        jal     r0, drain", "done:", "        halt"]


_LABEL = re.compile(r"^(\w+):", re.M)
_NOTE = re.compile(r'^\s*\.target (dynamic\.[\w.]+), "([^"]*)"', re.M)


def text_lowering(asm: str, files: dict[str, bytes]) -> Callable[[Scope], Part]:
    """A one-op program written as text, as a lowering into a scope (compiler/dynamic/chain.py): its labels
    and files prefixed by the scope, its buffers renamed by its binding, the buffers the program has
    declared already left out (their .align lines kept), its code between main: and the halt."""
    lines = asm.splitlines()
    d, t = lines.index("        .data"), lines.index("        .text")
    assert lines[t + 1] == "main:" and lines[-1].strip() == "halt" and lines[t - 1] == "", "a one-op program"
    head = lines[:d]
    part = Part([line[2:] for line in head[:head.index("")]], _NOTE.findall("\n".join(head)))
    labels = set(_LABEL.findall("\n".join(lines[d:]))) - {"main"}

    def write(b: Scope) -> Part:
        data = _rename("\n".join(lines[d + 1:t - 1]), labels, b.prefix, b.bind).split("\n")
        skip = False
        for line in data:
            words = line.split()
            if words[:1] == [".buffer"]:
                name = words[1].rstrip(",")
                skip = name in b.prog.declared
                b.prog.declared.add(name)
            if not skip:
                b.prog.data.append(Line(line))
            elif words[:1] == [".space"]:
                skip = False
        b.prog.text += [Line(line) for line in _rename("\n".join(lines[t + 2:-1]), labels, b.prefix,
                                                                b.bind).split("\n")]
        b.prog.files.update({f"{b.prefix}{name}": blob for name, blob in files.items()})
        return part
    return write


def _rename(text: str, labels: set[str], prefix: str, names: dict[str, str]) -> str:
    """text with its labels prefixed and its buffers renamed in one pass (a -> b and b -> c at once do not
    make a into c)."""
    if labels and prefix:
        pattern = re.compile(r"\b(" + "|".join(sorted(labels, key=len, reverse=True)) + r")\b")
        text = pattern.sub(rf"{prefix}\1", text)
    if not names:
        return text
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], text)
