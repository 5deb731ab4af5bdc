"""What every dynamic program shares: its header and notes, the row-tile registers, sizes and loops.

A dynamic op's program reads its sizes from the argument block (`args`,
one int32 word per Dim), computes the output sizes on the CU and loops over
tiles of rows.  The pieces here are written once and called by each op's
lowering (conv.py, pool.py, fused.py ...), through an `asm.Scope`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp, axis_rule, reciprocal, window_out
from ..errors import CompileError
from .asm import ZERO, Line, Program, Reg, Scope, Sem, Sym


@dataclass(frozen=True)
class TileRegs:
    """The registers of a row-tiled program: sizes, loop state, buffer offsets, temporaries.

    A conv, a pool and a fused chain of them use the same set, taken in this order from a section's pool
    (r1 up, `max` from the top)."""

    args: Reg       # the argument block's address; later a flag or the channel block
    n: Reg
    h: Reg
    w: Reg
    oh: Reg
    ow: Reg
    wp: Reg         # the padded width of a tile's input rows
    hw: Reg
    ohw: Reg
    i: Reg          # the image
    oh0: Reg        # the tile's first output row
    th: Reg         # the tile's output rows
    b: Reg          # the buffer set
    pend: Reg       # stores in flight
    ib: Reg
    ab: Reg
    vb: Reg
    pix: Reg
    t: tuple[Reg, ...]      # twelve temporaries
    max: Reg                # output rows per tile (from the width's table)


def tile_registers(b: Scope) -> TileRegs:
    """Take the row-tile registers from b's pool."""
    names = ("args", "n", "h", "w", "oh", "ow", "wp", "hw", "ohw", "i", "oh0", "th", "b", "pend", "ib", "ab",
             "vb", "pix")
    regs = b.regs.take(*names)
    temps = b.regs.take(*(f"t{k}" for k in range(12)))
    return TileRegs(*regs, temps, b.regs.take_top("max"))


def header(prog: Program, title: list[str], cfg: Config) -> None:
    """The program's opening comments, a blank line and the machine's `.target` lines."""
    for line in title:
        prog.head(f"; {line}")
    prog.head("")
    for k, v in shape_target(cfg).items():
        prog.target(k, v)


def axis_name(d) -> str:
    """An axis in a `.target dynamic.buffer.*` note: a Dim's name or the fixed size."""
    return d.name if isinstance(d, Dim) else str(d)


def out_axis(d, add: int, stride: int) -> str:
    """An output axis (d + add) // stride + 1 in a note: the Dim's name when that is d itself."""
    if not isinstance(d, Dim):
        return str(window_out(d, add, stride))
    return d.name if (add, stride) == (-1, 1) else axis_rule(d.name, add, stride)


def target_notes(op: DynamicOp, y_axes: list[str]) -> list[tuple[str, str]]:
    """The `.target dynamic.*` notes that describe the argument block and the buffers to nnpsim, as (key,
    value) pairs: the dims, the argument block, each input's axes, then y's."""
    dims = " ".join(f"{d.name}:{d.lo}:{d.hi}" for d in op.dims)
    shape = " ".join(axis_name(d) for d in op.x_shape)
    return ([("dynamic.dims", dims), ("dynamic.args", "args")]
            + [(f"dynamic.buffer.{t}", shape) for t in op.names] + [("dynamic.buffer.y", " ".join(y_axes))])


def add_notes(prog: Program, notes: list[tuple[str, str]]) -> None:
    """Write `.target` notes into the header."""
    for key, value in notes:
        prog.target(key, value, quote=True)


def load_size(b: Scope, reg: Reg, d, index: dict[str, int], args: Reg) -> None:
    """reg := an axis's size: a Dim's word from the argument block, or the fixed size."""
    if isinstance(d, Dim):
        b.i("ld", reg, args, 4 * index[d.name])
    else:
        b.i("li", reg, d)


def times_sizes(b: Scope, reg: Reg, axes, index: dict[str, int], args: Reg, tmp: Reg) -> None:
    """reg *= each axis's size: a Dim's word from the argument block (through tmp), or the fixed size."""
    for d in axes:
        if isinstance(d, Dim):
            b.i("ld", tmp, args, 4 * index[d.name])
            b.i("mul", reg, reg, tmp)
        elif d != 1:
            b.i("muli", reg, reg, d)


def args_buffer(b: Scope, dims) -> Sym:
    """Declare the argument block, one int32 word per Dim (not aligned: it comes first), and return it."""
    return b.prog.buffer(b.buf("args").name, "int32", (len(dims),), 4 * len(dims), align=False)


def emit_out_size(b: Scope, reg: Reg, src: Reg, add: int, stride: int, tmp: Reg) -> None:
    """reg = (src + add) // stride + 1 on the CU: a shift for a power-of-two stride, else the high word of
    the product with the stride's reciprocal (`mulhu`, exact for every size in range: dims.reciprocal)."""
    b.i("addi", reg, src, add)
    if stride & (stride - 1):
        b.i("li", tmp, reciprocal(stride))
        b.i("mulhu", reg, reg, tmp)
    elif stride > 1:
        b.i("srai", reg, reg, stride.bit_length() - 1)
    b.i("addi", reg, reg, 1)


def dma_box(b: Scope, elem: int | Reg, dims, pad_value: int | Reg = 0) -> None:
    """The DMA's box: dims, up to 4 of (size, src_stride, dst_stride, pad_lo, pad_hi), each an int or a
    register; the rest size 1."""
    b.setp("dma.elem", elem)
    b.setp("dma.pad_value", pad_value)
    for k in range(4):
        size, ss, ds, lo, hi = dims[k] if k < len(dims) else (1, 0, 0, 0, 0)
        for p, v in (("size", size), ("src_stride", ss), ("dst_stride", ds), ("pad_lo", lo), ("pad_hi", hi)):
            b.setp(f"dma.{p}{k}", v)


def column_pads(b: Scope, r: TileRegs, shift: int, regs: tuple[Reg, Reg, Reg]) -> int:
    """Emit (pad_lo, pad_hi) of a row of r.wp columns whose column j holds input column j + shift (the left
    padding, at most the row; the columns past r.w's end): regs (lo, hi, scratch).  Returns the first real
    column, max(0, shift)."""
    lo, hi, tmp = regs
    col0 = max(0, shift)
    b.i("sub", hi, r.w, ZERO)
    b.i("addi", hi, hi, -col0)
    b.i("max", hi, hi, ZERO)
    b.i("li", lo, max(0, -shift))
    b.i("min", lo, lo, r.wp)
    b.i("sub", tmp, r.wp, lo)
    b.i("min", hi, hi, tmp)                 # real columns
    b.i("sub", hi, tmp, hi)                 # pad_hi
    return col0


def halo_rows(b: Scope, r: TileRegs, regs: tuple[Reg, ...], sh: int, ekh: int, pt: int) -> None:
    """Emit a tile's input rows: (rows, first virtual row, pad top, first real row, pad bottom, scratch)
    from r.th (its output rows), r.oh0 (its first) and r.h (the input height), all clamped: a tile may lie
    wholly in the padding."""
    rows, vstart, plo, start, phi, tmp = regs
    b.i("addi", rows, r.th, -1)
    b.i("muli", rows, rows, sh)
    b.i("addi", rows, rows, ekh)
    b.i("muli", vstart, r.oh0, sh)
    b.i("addi", vstart, vstart, -pt)
    b.i("sub", plo, ZERO, vstart)
    b.i("max", plo, plo, ZERO)
    b.i("min", plo, plo, rows)
    b.i("max", start, vstart, ZERO)
    b.i("min", start, start, r.h)
    b.i("add", phi, vstart, rows)
    b.i("sub", phi, phi, r.h)
    b.i("max", phi, phi, ZERO)
    b.i("sub", tmp, rows, plo)
    b.i("min", phi, phi, tmp)


@dataclass(frozen=True)
class TileIO:
    """Where a tile's input rows come from and its output rows go: DDR buffers x and y for one op, DM
    tiles inside a fused chain.  `src(b, reg, start, tmp)` puts the address of input row `start` of
    channel 0 in reg (channels r.hw apart, rows r.w apart); `dst(b, reg, tmp)` the address of output row
    r.oh0 of channel 0 (channels r.ohw apart, rows r.ow apart)."""

    src: Callable
    dst: Callable
    src_space: str = "ddr"
    dst_space: str = "ddr"
    stage: Callable | None = None    # stage(b, start, rows, plo, phi): bring the rows on chip first


def ddr_io(r: TileRegs, c: int, o: int, x: str = "x", y: str = "y", y_bytes: int = 1,
           y_first: int = 0) -> TileIO:
    """Input rows from DDR buffer x ([n][c][h][w]), output rows to DDR buffer y ([n][o][oh][ow], y_bytes
    an element, from channel y_first)."""
    def src(b: Scope, reg: Reg, start: Reg, tmp: Reg) -> None:
        b.i("mul", reg, r.i, r.hw)
        b.i("muli", reg, reg, c)
        b.i("mul", tmp, start, r.w)
        b.i("add", reg, reg, tmp)
        b.i("la", tmp, b.buf(x))
        b.i("add", reg, reg, tmp)

    def dst(b: Scope, reg: Reg, tmp: Reg) -> None:
        b.i("mul", reg, r.i, r.ohw)
        b.i("muli", reg, reg, o)
        b.i("mul", tmp, r.oh0, r.ow)
        b.i("add", reg, reg, tmp)
        if y_first:
            b.i("muli", tmp, r.ohw, y_first)
            b.i("add", reg, reg, tmp)
        if y_bytes > 1:
            b.i("muli", reg, reg, y_bytes)
        b.i("la", tmp, b.buf(y))
        b.i("add", reg, reg, tmp)
    return TileIO(src, dst)


def next_tile(b: Scope, r: TileRegs, sets: int = 2, blocks: int = 0) -> None:
    """The end of a row tile: count its store, step to the next of `sets` slots, to the next tile, then
    (blocks > 0: a depthwise conv's channel blocks, counted in r.args) the next block, then the next image."""
    b.i("addi", r.pend, r.pend, 1)
    if sets == 2:
        b.i("xori", r.b, r.b, 1)
    else:
        b.i("addi", r.b, r.b, 1)
        b.i("li", r.t[0], sets)
        b.i("blt", r.b, r.t[0], b.label("slot"))
        b.i("li", r.b, 0)
        b.at(b.label("slot"))
    b.i("add", r.oh0, r.oh0, r.th)
    b.i("blt", r.oh0, r.oh, b.label("tile"))
    if blocks:
        b.i("addi", r.args, r.args, 1)
        b.i("li", r.t[0], blocks)
        b.i("blt", r.args, r.t[0], b.label("block"))
    b.i("addi", r.i, r.i, 1)
    b.i("blt", r.i, r.n, b.label("batch"))


def drain(b: Scope, pending: Reg, store_sem: Sem) -> None:
    """Wait for the `pending` stores still in flight (every dynamic program's and layer's end)."""
    b.at(b.label("drain"))
    b.i("beq", pending, ZERO, b.label("done"))
    b.i("sem.wait", store_sem)
    b.i("addi", pending, pending, -1)
    b.i("jal", ZERO, b.label("drain"))
    b.at(b.label("done"))


def drain_and_halt(b: Scope, pending: Reg, store_sem: Sem) -> None:
    """The end of a one-op program: drain the stores, then halt."""
    drain(b, pending, store_sem)
    b.i("halt")



@dataclass
class Part:
    """What one op's lowering says about the code it wrote into its scope: its title (the program's opening
    comments when it stands alone), its `.target dynamic.*` notes, and its rows per tile by input width."""

    title: list[str]
    notes: list[tuple[str, str]]
    rows: dict[int, int] | None = None


def checked(lower: Callable[[Scope], Part]) -> Callable[[Scope], Part]:
    """lower, written once into a scratch program first, so that what it refuses raises now (a network names
    the node) and not when the program it goes into is built."""
    lower(Scope(Program()))
    return lower


def one_program(cfg: Config, lower: Callable[[Scope], Part]) -> tuple[str, dict[str, bytes], Part]:
    """A program of one op: `lower(scope)` writes its buffers, constants and code (ending on its drain);
    the header, `main:` and the final halt are added here.  (assembly, .incbin files, the Part)."""
    prog = Program()
    prog.text.append(Line("main:"))
    b = Scope(prog)
    part = lower(b)
    b.i("halt")
    header(prog, part.title, cfg)
    add_notes(prog, part.notes)
    prog.head("")
    return prog.emit(), prog.files, part


def check_ddr_half(what: str, need: int, dims, cfg: Config) -> None:
    """CompileError unless `need` bytes (the buffers at the largest shape) fit half of DDR: the binary's data
    and the host's argument block take the rest."""
    if need > cfg.ddr_bytes // 2:
        top = ", ".join(f"{d.name} <= {d.hi}" for d in dims)
        raise CompileError(f"{what} at the largest shape ({top}) need {need:,} bytes of DDR, more than half of "
                           f"it ({cfg.ddr_bytes:,}); narrow the ranges")
