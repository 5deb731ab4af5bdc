"""Max, sum and average pooling over a range of shapes: one program that reads its sizes from an argument block.

A max pool, and a summing pool of fewer than MIN_GROUPS channels, runs per
image over tiles of output rows (full tiles, then the remainder): one DMA
loads every channel's input rows with their halo into VBUF as [c][rows][w
padded] (padding -128 for max, which never wins), one window command
(vu.pool.max, or vu.pool.acc / .avg / .favg or their sliding-window forms)
computes the tile's [c][rows][w out] and one DMA stores it; two buffer sets,
the CU taking tile k-2's store token before reusing a set.  The tile height
comes from a table by height for a max pool (priced), else is half the
output rows, at most the largest whose two sets fit VBUF at the largest
width.

Any other summing pool runs as the static lowering does: per image and
group of about a quarter of the channels, one tile of whole planes (no halo
read twice, a channel's output one run), in three buffer sets where they fit;
the tiles load on ch0 and ch1 in turn, each with its own token, so that one
load's DDR latency hides under the other's transfer.

An average that does not count the padding divides each output by its count
of real elements, which changes with the shape: the VU pools a plane of ones
(the padding 0) into the counts, once a run for tiles of whole planes, else
per tile.  On the sliding-window engine its windows without padding run as
one command on one count read once a plane, and only the border bands read
the counts (split_windows), the CU working out per tile where those end.
The run's constants (the divisor, the ones) come on ch3 beside the first load.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from nnpsim.config import Config
from nnpsim.timing import vu_pool_cycles

from ..cost import transfer_cycles
from ..dims import Dim, DynamicOp, check_divisor, window_out
from ..errors import CompileError
from ..lowering.vu import default_pool_engine, favg_scalars, pool_fill
from ..ops import Pool2d
from .asm import ZERO, Mem, Reg, Scope, Sem
from .common import (Part, TileIO, TileRegs, axis_name, ddr_io, drain, emit_out_size, halo_rows, load_size,
                     next_tile, out_axis, target_notes, tile_registers)

SPLIT_LOG2 = 1           # without a table: about 2**1 tiles per image, where they fit
MIN_GROUPS = 4           # a summing pool of this many channels or more: whole planes of about 1/4 of them a tile
MAX_TABLE = 4096         # output heights a rows-per-tile table may span (a word each)
CU_TILE = 85             # CU cycles of a tile's set-up (about 80 instructions: addresses, setp)


def tile_rows(op: DynamicOp, cfg: Config) -> int:
    """The most output rows per tile whose two buffer sets fit VBUF at the largest shape."""
    big: Pool2d = op.largest
    _, c, _, w = big.x_shape
    oh, ow = big.out_hw
    best = 0
    for th in range(1, oh + 1):
        need = 2 * set_bytes(op, th) + 64             # two sets and an average's divisor
        if need > cfg.vbuf_bytes or c * th * ow > 1 << 24:
            break
        best = th
    if not best:
        raise CompileError(f"dynamic {op.kind}: one output row of {c} channels at width {w} does not fit "
                           f"two buffer sets in VBUF ({cfg.vbuf_bytes} bytes)")
    return best


def out_bytes(op: DynamicOp) -> int:
    """Bytes of one output: int32 window sums, else int8."""
    return 4 if op.largest.mode == "sum" else 1


def window_engine(op: DynamicOp, cfg: Config, th: int, group: int = 0) -> str:
    """"slide" if a summing pool's windows fit the sliding-window engine at the largest width and it is
    cheaper there for a full tile (it reads each input byte once, however much the windows overlap), else
    "pool" (the accumulators; a max pool has only those).  group: a tile's channels, if not all."""
    big: Pool2d = op.largest
    if big.mode == "max":
        return "pool"
    # the static lowering's choice on a tile of the largest shape: the engine that fits there and that the
    # cost model prices lower
    engine = default_pool_engine(big, cfg, (group or big.x_shape[1], th))
    return "slide" if engine.startswith("vu.slide") else "pool"


def _stages(op: DynamicOp, cfg: Config, rows: int, w: int) -> tuple[int, int, int]:
    """(load, VU, store) cycles of a max pool's tile of `rows` output rows at input width w, each on its own."""
    big: Pool2d = op.largest
    c = big.x_shape[1]
    (kh, kw), (sh, sw), (_, pl, _, pr) = big.kernel, big.stride, big.padding
    ow = window_out(w, pl + pr - kw, sw)
    load = transfer_cycles(c * ((rows - 1) * sh + kh) * w, "ddr", "vbuf", cfg)
    # vu_pool_cycles, not vu.pool.max's ISA timing (cost.vu_cycles: no output byte an output), nor cost's DDR
    # bursts: on those the tables change, and with them benchmarks/dynamic.py's max pool programs
    vu = vu_pool_cycles(c * rows * ow, kh * kw, 1, 1, 0, cfg.vu_bytes_per_cycle, cfg.vu_latency)
    return load, vu, transfer_cycles(c * rows * ow, "vbuf", "ddr", cfg)


def price(op: DynamicOp, cfg: Config, th: int, oh: int, w: int) -> int:
    """Predicted cycles of one image of a max pool of oh output rows at width w in tiles of th rows: the
    first tile's load, then per further tile the busiest of its load channel, the VU, its store channel, the
    DDR port (loads and stores share it), the CU and the two-set ring (half of a tile's load, pooling, store
    and set-up), then the last tile's pooling and store."""
    k, last = -(-oh // th), oh - (-(-oh // th) - 1) * th
    full, rest = _stages(op, cfg, th, w), _stages(op, cfg, last, w)
    port = full[0] + full[2]
    ring = (sum(full) + CU_TILE + 1) // 2       # two sets: tile k+2's load follows tile k's store
    step = max(full[0], full[1], full[2], port, ring, CU_TILE)
    return CU_TILE + full[0] + (k - 1) * step + rest[1] + rest[2]


def rows_table(op: DynamicOp, cfg: Config, th_max: int) -> tuple[int, list[int]] | None:
    """(first input height, rows per tile for each input height of the range), each the cheapest by
    `price` among th = ceil(oh / k), k = 1..16, at the width on the range's diagonal (w from its low to its
    high end as h goes); None for a summing pool or a range of more than MAX_TABLE heights.  The price
    ranks tile heights as measured for max pools (bound by the VU and the per-tile costs); for summing
    pools it undercounts what each extra tile costs on DDR, and two tiles an image measured best at every
    size (benchmarks/dynamic.py, docs/performance.md)."""
    big: Pool2d = op.largest
    (kh, _), (sh, _), (pt, _, pb, _) = big.kernel, big.stride, big.padding
    h_lo, h_hi = op.smallest.x_shape[2], big.x_shape[2]
    w_lo, w_hi = op.smallest.x_shape[3], big.x_shape[3]
    if big.mode != "max" or h_hi - h_lo + 1 > MAX_TABLE:
        return None
    table = []
    for h in range(h_lo, h_hi + 1):
        w = w_lo + (h - h_lo) * (w_hi - w_lo) // max(1, h_hi - h_lo)
        oh = window_out(h, pt + pb - kh, sh)
        options = sorted({min(th_max, -(-oh // k)) for k in range(1, min(oh, 16) + 1)})
        table.append(min(options, key=lambda th: price(op, cfg, th, oh, w)))
    return h_lo, table


def per_position(op: DynamicOp) -> bool:
    """Does each output divide by its own count (count_include_pad=False)?  The counts change with the
    shape: each tile pools a plane of ones (padding 0) into them on the VU."""
    big: Pool2d = op.largest
    return big.mode == "avg" and not big.count_include_pad


def split_windows(op: DynamicOp, engine: str) -> bool:
    """Does each tile run its windows that hold no padding as one command on one count (the window size,
    read once a plane) and only its border bands on the per-position counts, as the static lowering does
    (vu.PoolLowering._windows)?  An average that does not count the padding, on the sliding-window engine,
    where a count an output costs four bytes against the output's one; where the smallest shape's windows
    reach past neither end of the plane (so the CU computes where they stop without a negative divide)."""
    big, small = op.largest, op.smallest
    (kh, kw), (pt, pl, _, _) = big.kernel, big.padding
    _, _, h, w = small.x_shape
    return per_position(op) and engine == "slide" and h + pt >= kh and w + pl >= kw


def set_bytes(op: DynamicOp, th: int, group: int = 0) -> int:
    """Bytes of one buffer set (input rows with halo, output rows) at th output rows and the largest width, of
    every channel or (group) of a group's whole planes, whose counts are made once a run (once_bytes)."""
    big: Pool2d = op.largest
    _, c, _, w_max = big.x_shape
    (kh, _), (sh, _), (_, pl, _, pr) = big.kernel, big.stride, big.padding
    rows, ow = (th - 1) * sh + kh, big.out_hw[1]
    counts = rows * (w_max + pl + pr) + 4 + th * ow * 4 if per_position(op) and not group else 0   # ones, sums
    c = group or c
    return -(-(c * rows * (w_max + pl + pr) + c * th * ow * out_bytes(op) + 3 + counts) // 64) * 64


def once_bytes(op: DynamicOp) -> tuple[int, int]:
    """(bytes of the plane of ones, of its window sums, the counts) of a pool of whole planes that does not
    count the padding, made once a run at the largest shape (0, 0 for any other pool)."""
    if not per_position(op):
        return 0, 0
    big: Pool2d = op.largest
    (kh, _), (sh, _), (_, pl, _, pr) = big.kernel, big.stride, big.padding
    (oh, ow), w_max = big.out_hw, big.x_shape[3]
    return -(-((oh - 1) * sh + kh) * (w_max + pl + pr) // 64) * 64, -(-oh * ow * 4 // 64) * 64


def planes_group(op: DynamicOp, cfg: Config) -> int:
    """Channels a tile of a summing pool takes when its tiles are whole planes, as the static lowering's
    (each plane read once, no halo read twice, the output one run a channel): about 1/MIN_GROUPS of them,
    fewer where two sets do not fit VBUF beside the divisor and the counts at the largest shape.  0 (tiles
    of rows of every channel) for a max pool, fewer than MIN_GROUPS channels or a plane that does not fit."""
    big: Pool2d = op.largest
    c, oh = big.x_shape[1], big.out_hw[0]
    if big.mode == "max" or c < MIN_GROUPS:
        return 0
    fixed = 64 + sum(once_bytes(op))
    return next((g for g in range(-(-c // MIN_GROUPS), 0, -1)
                 if 2 * set_bytes(op, oh, g) + fixed <= cfg.vbuf_bytes and g * oh * big.out_hw[1] <= 1 << 24), 0)


@dataclass(frozen=True)
class PoolSems:
    """A pool's semaphores: its loads, window commands and stores, then, in a one-op program, the run's."""

    load: Sem
    vu: Sem
    store: Sem
    const: Sem | None = None      # the divisor or the plane of ones, on ch3 beside the first load, once a run
    load_b: Sem | None = None     # tiles of whole planes: every other tile's load, on ch1


def pool_semaphores(b: Scope, run: bool = True) -> PoolSems:
    """Take a pool's semaphores from b's pool in order: load, VU, store, then (run: a one-op program) the
    run's constants' and the other load's."""
    return PoolSems(*b.sems.take("load", "vu", "store", *(("const", "load_b") if run else ())))


@dataclass(frozen=True)
class Tiles:
    """Where tile_body's buffer sets lie in VBUF and what runs its windows."""

    set_size: int                   # bytes of one buffer set
    vbuf: int = 0                   # the first set's VBUF offset
    div_at: int = 0                 # an average's window size (one int32 word) in VBUF
    engine: str = "pool"            # a summing pool's windows run on vu.<engine>.*: window_engine
    split: bool = False             # split_windows (r.ib, r.ab: where the windows without padding end)
    group: int = 0                  # a tile's channels when its tiles are whole planes (0: every channel)
    counts_at: int | None = None    # the counts, made once a run, in VBUF (None: per tile, if needed)


@dataclass(frozen=True)
class Plan:
    """A one-op pool program's choices: rows per tile (or whole planes of `group` channels), buffer sets,
    the tiles' layout and engine, the VBUF offset of the plane of ones, and the rows-per-tile table."""

    th: int
    group: int
    sets: int
    tiles: Tiles
    ones_at: int
    table: tuple[int, list[int]] | None

    @property
    def once(self) -> bool:
        """Are the counts made once a run (tiles of whole planes of a per-position average)?"""
        return self.tiles.counts_at is not None


def plan(op: DynamicOp, cfg: Config) -> Plan:
    """The program's choices for op on cfg (CompileError where it has none)."""
    big: Pool2d = op.largest
    if big.mode == "avg" and big.is_float and not any(big.padding):
        (kh, kw), (_, _, h, w) = big.kernel, op.x_shape
        lo_hi = [(d.lo, d.hi) if isinstance(d, Dim) else (d, d) for d in (h, w)]
        if all(lo <= k <= hi for k, (lo, hi) in zip((kh, kw), lo_hi)):
            raise CompileError(f"dynamic {op.kind}: at {kh}x{kw} the {kh}x{kw} window is the whole plane, which "
                               f"onnxruntime averages with QLinearGlobalAveragePool's other rounding; pad it or "
                               f"narrow the range to exclude that shape")
    group = planes_group(op, cfg)
    th = big.out_hw[0] if group else tile_rows(op, cfg)
    sets = 3 if group and 3 * set_bytes(op, th, group) + 64 + sum(once_bytes(op)) <= cfg.vbuf_bytes else 2
    check_divisor(f"dynamic {op.kind}", "stride height", big.stride[0])
    check_divisor(f"dynamic {op.kind}", "stride width", big.stride[1])
    engine = window_engine(op, cfg, th, group)
    div_at = sets * set_bytes(op, th, group)          # VBUF: the sets, the divisor, the ones, the counts
    ones_at = div_at + 64
    counts_at = ones_at + once_bytes(op)[0] if group and per_position(op) else None
    tiles = Tiles(set_bytes(op, th, group), 0, div_at, engine, split_windows(op, engine), group, counts_at)
    table = None if group else rows_table(op, cfg, th)      # max pools; two tiles an image for the others
    return Plan(th, group, sets, tiles, ones_at, table)


def fixed_params(b: Scope, op: DynamicOp) -> None:
    """The DMA and VU parameters that do not depend on the shape."""
    fixed_dma(b, op)
    fixed_vu(b, op)


def fixed_dma(b: Scope, op: DynamicOp) -> None:
    """The DMA parameters that do not depend on the shape."""
    _, pl, _, pr = op.largest.padding
    for p, v in (("elem", 1), ("pad_value", pool_fill(op.largest)), ("size3", 1), ("pad_lo3", 0), ("pad_hi3", 0),
                 ("pad_lo0", pl), ("pad_hi0", pr),
                 ("src_stride0", 1), ("dst_stride0", 1)):
        b.i("setpi", f"dma.{p}", v)


def fixed_vu(b: Scope, op: DynamicOp) -> None:
    """The VU parameters that do not depend on the shape."""
    big: Pool2d = op.largest
    (kh, kw), (_, sw) = big.kernel, big.stride
    for p, v in (("win_h", kh), ("win_w", kw), ("win_stride_w", 1), ("n3", 1), ("a_stride0", sw),
                 ("d_stride0", out_bytes(op)), ("b_stride0", 0), ("b_stride1", 0), ("b_stride2", 0)):
        b.i("setpi", f"vu.{p}", v)
    if big.is_float:
        for p, v in favg_scalars(big).items():
            b.i("setpi", f"vu.{p}", v)


def lower_pool(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """Write a dynamic max, sum or average pool's buffers, constants and code into b (ending on its drain)."""
    p = plan(op, cfg)
    big: Pool2d = op.largest
    n, c, h, w = op.x_shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = big.kernel, big.stride, big.padding
    pool_data(b, op, p)
    r, s = tile_registers(b), pool_semaphores(b)
    b.i("la", r.args, b.buf("args"))
    index = {d.name: k for k, d in enumerate(op.dims)}
    for reg, d in ((r.n, n), (r.h, h), (r.w, w)):
        load_size(b, reg, d, index, r.args)
    emit_out_size(b, r.oh, r.h, pt + pb - kh, sh, r.t[0])
    emit_out_size(b, r.ow, r.w, pl + pr - kw, sw, r.t[0])
    b.i("addi", r.wp, r.w, pl + pr)
    b.i("mul", r.hw, r.h, r.w)
    b.i("mul", r.ohw, r.oh, r.ow)
    fixed_dma(b, op)
    rows_per_tile(b, r, p)
    tile_loop(b, r, s, op, p)
    drain(b, r.pend, s.store)
    b.fold_channels(cfg.dma_channels)
    tiles = f"whole planes of {p.group} channels a tile" if p.group else f"{p.th} output rows per tile"
    y_axes = [axis_name(n), str(c), out_axis(h, pt + pb - kh, sh), out_axis(w, pl + pr - kw, sw)]
    return Part([f"dynamic kernel: {op!r}", f"{tiles}; {p.sets} buffer sets"], target_notes(op, y_axes))


def pool_data(b: Scope, op: DynamicOp, p: Plan) -> None:
    """The program's .data: the argument block, x and y, then the divisor, the row of ones and the
    rows-per-tile table where the program reads them."""
    big: Pool2d = op.largest
    prog, (kh, kw), w_max = b.prog, big.kernel, big.x_shape[3]
    prog.buffer(b.buf("args").name, "int32", (len(op.dims),), 4 * len(op.dims), align=False)
    prog.buffer(b.buf("x").name, "int8", big.x_shape, big.x_shape[0] * big.x_shape[1] * big.x_shape[2] * w_max)
    prog.buffer(b.buf("y").name, big.output.dtype, big.output.shape, big.output.nbytes)

    if big.mode == "avg" and not per_position(op):
        prog.table(b.label("pool_div"), [kh * kw], "the window size (count_include_pad)")
    if per_position(op):
        prog.align()
        prog.label(b.label("pool_ones"), "one row of ones: the counts")
        prog.space(w_max, 1)
    if p.table is not None:
        prog.table(b.label("pool_rows"), p.table[1], f"rows per tile by input height from {p.table[0]}")


def rows_per_tile(b: Scope, r: TileRegs, p: Plan) -> None:
    """r.max := the output rows a tile takes: the whole plane, the table's entry for this height, or about
    1/2**SPLIT_LOG2 of them, at most p.th."""
    if p.group:
        b.comment("rows per tile: the whole plane (two sets of the group's planes fit VBUF at the largest shape)")
        b.i("addi", r.max, r.oh, 0)
    elif p.table is not None:
        b.comment(f"rows per tile for this height (the compiler's table, at most {p.th}: two sets fit VBUF)")
        b.i("addi", r.t[0], r.h, -p.table[0])
        b.i("slli", r.t[0], r.t[0], 2)
        b.i("la", r.t[1], b.label("pool_rows"))
        b.i("add", r.t[0], r.t[0], r.t[1])
        b.i("ld", r.max, r.t[0], 0)
    else:
        b.comment(f"rows per tile: about 1/{1 << SPLIT_LOG2} of the output rows (loads, pooling and stores "
                  f"overlap), at most {p.th} (two sets fit VBUF)")
        b.i("addi", r.max, r.oh, (1 << SPLIT_LOG2) - 1)
        b.i("srai", r.max, r.max, SPLIT_LOG2)
        b.i("li", r.t[0], p.th)
        b.i("min", r.max, r.max, r.t[0])


def tile_loop(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, p: Plan) -> None:
    """The loops over images, channel groups and tiles, each tile waiting for the store of the one
    p.sets before it."""
    _, pl, _, pr = op.largest.padding
    odd = r.pix                                     # tiles of whole planes: 1 on every other tile
    b.i("li", r.i, 0)
    b.i("li", r.b, 0)
    b.i("li", r.pend, 0)
    if p.group:
        b.i("li", odd, 0)
    b.at(b.label("batch"))
    if p.group:
        b.i("li", r.args, 0)                        # the channel group
        b.at(b.label("block"))
    b.i("li", r.oh0, 0)
    b.at(b.label("tile"))
    b.i("sub", r.th, r.oh, r.oh0)
    b.i("min", r.th, r.th, r.max)
    b.i("li", r.t[0], p.sets)
    b.i("blt", r.pend, r.t[0], b.label("free"))
    b.i("sem.wait", s.store)
    b.i("addi", r.pend, r.pend, -1)
    b.at(b.label("free"))
    c = op.x_shape[1]
    tile_body(b, r, s, op, ddr_io(r, c, c, y_bytes=out_bytes(op)), p.tiles,
              lambda b: run_setup(b, r, s, op, p))
    b.i("setpi", "dma.pad_lo0", pl)
    b.i("setpi", "dma.pad_hi0", pr)
    if p.group:
        b.i("xori", odd, odd, 1)
    next_tile(b, r, p.sets, -(-c // p.group) if p.group else 0)


def run_setup(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, p: Plan) -> None:
    """What the run sets up once, after the first tile's load is on its way: the VU's fixed parameters,
    where the windows without padding stop, the divisor or the counts made once (on ch3, beside the
    loads; the VU takes its token before any window command)."""
    big: Pool2d = op.largest
    (kh, kw), (sh, sw), (pt, pl, _, _) = big.kernel, big.stride, big.padding
    fixed_vu(b, op)
    if p.tiles.split:
        fh, fw = r.ib, r.ab
        b.comment("the output rows and columns whose windows end inside the plane: [.., RFH), [.., RFW)")
        emit_out_size(b, fh, r.h, pt - kh, sh, r.t[0])
        b.i("min", fh, fh, r.oh)
        emit_out_size(b, fw, r.w, pl - kw, sw, r.t[0])
        b.i("min", fw, fw, r.ow)
    if big.mode == "avg" and not per_position(op):
        for k, v in (("size0", 4), ("size1", 1), ("size2", 1), ("pad_lo0", 0), ("pad_hi0", 0), ("pad_lo1", 0),
                     ("pad_hi1", 0)):
            b.i("setpi", f"dma.{k}", v)
        b.i("la", r.t[0], b.label("pool_div"))
        b.i("li", r.t[1], p.tiles.div_at)
        b.i("dma", b.ch(3), Mem("vbuf0", r.t[1]), Mem("ddr", r.t[0]), signal=s.const)
        # a command takes one token: a one-word copy of the divisor onto itself takes it
        for k in ("n0", "n1", "n2"):
            b.i("setpi", f"vu.{k}", 1)
        b.i("li", r.t[1], p.tiles.div_at)
        b.i("vu.mov", "vu0", "i32", r.t[1], "i32", r.t[1], wait=s.const)
    if p.once:
        once_counts(b, r, s, op, p)


def once_counts(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, p: Plan) -> None:
    """Each output's count of real elements, once a run for tiles of whole planes (in the first tile, whose
    rows r.th from r.oh0 = 0 are the plane's): a plane of ones (one row of ones in DDR read every row, the
    padding 0) into VBUF at p.ones_at on ch3, its window sums (int32) at p.tiles.counts_at."""
    big: Pool2d = op.largest
    (kh, _), (sh, _), (pt, pl, _, pr) = big.kernel, big.stride, big.padding
    t = r.t
    b.comment("the counts, once: a plane of ones where the input is real (0 in its padding), its window sums")
    rows, plo, phi = t[1], t[3], t[5]
    halo_rows(b, r, (rows, t[2], plo, t[4], phi, t[11]), sh, kh, pt)
    for k, v in (("size0", r.wp), ("size1", rows), ("src_stride1", 0), ("dst_stride1", r.wp), ("pad_lo0", pl),
                 ("pad_hi0", pr), ("pad_lo1", plo), ("pad_hi1", phi), ("size2", 1), ("pad_lo2", 0), ("pad_hi2", 0),
                 ("pad_value", 0)):
        b.setp(f"dma.{k}", v)
    b.i("la", t[0], b.label("pool_ones"))
    b.i("li", t[1], p.ones_at)
    b.i("dma", b.ch(3), Mem("vbuf0", t[1]), Mem("ddr", t[0]), signal=s.const)
    b.i("setpi", "dma.pad_value", pool_fill(op.largest))
    b.i("slli", t[2], r.ow, 2)
    b.i("muli", t[0], r.wp, sh)
    for k, v in (("n0", r.ow), ("n1", r.oh), ("n2", 1), ("d_stride0", 4), ("d_stride1", t[2]), ("a_stride1", t[0]),
                 ("win_stride_h", r.wp)):
        b.setp(f"vu.{k}", v)
    b.i("li", t[1], p.ones_at)
    b.i("li", t[2], p.tiles.counts_at)
    b.i(f"vu.{p.tiles.engine}.acc", "vu0", t[2], t[1], wait=s.const)
    b.i("setpi", "vu.d_stride0", 1)


@dataclass(frozen=True)
class _Bufs:
    """A tile's VBUF addresses and sizes, in temporaries: its input, its output, one channel's input rows
    (plane), and the address of its rows outside (src, later of its output's)."""

    inb: Reg
    outb: Reg
    plane: Reg
    src: Reg


def tile_body(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, io: TileIO, t: Tiles,
              first: Callable[[Scope], None] | None = None) -> None:
    """One tile: r.th output rows from row r.oh0 of image r.i, in buffer set r.b (t: where the sets lie, what
    runs the windows), of every channel or (t.group) of channel group r.args, t.group channels (the last
    group the rest), with the counts, if it needs them, made per tile or once at VBUF t.counts_at; first:
    what the first tile alone emits after its load."""
    chans = tile_channels(b, r, op, t.group)
    rows, start = r.t[1], r.t[4]
    halo_rows(b, r, (rows, r.t[2], r.t[3], start, r.t[5], r.t[11]), op.largest.stride[0], op.largest.kernel[0],
              op.largest.padding[0])
    bufs = tile_buffers(b, r, op, t, rows)
    load_tile(b, r, s, op, io, t, bufs, chans)
    if first is not None:
        b.comment("the first tile only (no store is pending yet)")
        b.i("bne", r.pend, ZERO, b.label("pool_first"))
        first(b)
        b.at(b.label("pool_first"))
    b.comment("pool -> [c][rows][w out]")
    b.i("mul", r.t[10], r.th, r.ow)                  # one channel's output
    b.i("muli", r.t[0], r.wp, op.largest.stride[0])
    load_wait = {"wait": s.load}
    if t.group:
        take_load_token(b, r, s, bufs.inb)
        load_wait = {}                              # the VU runs its commands in order: after the copy
    if per_position(op) and t.counts_at is None:
        tile_counts(b, r, s, op, t, bufs)
        load_wait = {}                              # the VU runs its commands in order: after the counts
    elif per_position(op):                          # made once a run; per position: 4 bytes, a row of them
        b.i("li", r.t[5], t.counts_at)
        b.i("slli", r.t[2], r.ow, 2)
        for k, v in (("b_stride0", 4), ("b_stride1", r.t[2]), ("b_stride2", 0)):
            b.setp(f"vu.{k}", v)
    pool_windows(b, r, s, op, t, bufs, chans, load_wait)
    store_tile(b, r, s, op, io, t.group, bufs, chans)


def tile_channels(b: Scope, r: TileRegs, op: DynamicOp, group: int) -> Reg | int:
    """The tile's channels: every channel, or (group) a register holding group r.args's (the last fewer)."""
    c = op.x_shape[1]
    if not group:
        return c
    chans = r.vb
    b.comment(f"channels {group} * r1 on: {group}, the last group fewer")
    b.i("muli", r.t[0], r.args, -group)
    b.i("addi", chans, r.t[0], c)
    b.i("li", r.t[0], group)
    b.i("min", chans, chans, r.t[0])
    return chans


def tile_buffers(b: Scope, r: TileRegs, op: DynamicOp, t: Tiles, rows: Reg) -> _Bufs:
    """The tile's input and output in VBUF (and, counted per tile, its plane of ones at r.t[11], between)."""
    bufs = _Bufs(*r.t[6:10])
    inb, outb, plane = bufs.inb, bufs.outb, bufs.plane
    b.i("muli", inb, r.b, t.set_size)
    if t.vbuf:
        b.i("addi", inb, inb, t.vbuf)
    b.i("mul", plane, rows, r.wp)                   # one channel's input rows in VBUF
    b.i("muli", outb, plane, t.group or op.x_shape[1])
    b.i("add", outb, outb, inb)
    if per_position(op) and t.counts_at is None:    # a plane of ones after the input: [rows][w padded]
        b.i("addi", r.t[11], outb, 0)
        b.i("add", outb, outb, plane)
    if out_bytes(op) > 1:                           # int32 sums: aligned
        b.i("addi", outb, outb, 3)
        b.i("andi", outb, outb, -4)
    return bufs


def load_tile(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, io: TileIO, t: Tiles, bufs: _Bufs,
              chans: Reg | int) -> None:
    """The tile's input rows with their halo -> VBUF [c][rows][w padded] (halo_rows' registers set), and,
    counted per tile, the plane of ones; tiles of whole planes load on ch0 and ch1 in turn."""
    rows, plo, start, phi = r.t[1], r.t[3], r.t[4], r.t[5]
    b.comment("every channel's rows with halo -> vbuf [c][rows][w padded]")
    io.src(b, bufs.src, start, r.t[10])
    if t.group:                                     # the group's first plane
        channel_offset(b, r, bufs.src, r.hw, t.group, 1, r.t[10])
    for k, v in (("size0", r.wp), ("size1", rows), ("src_stride1", r.w), ("dst_stride1", r.wp), ("pad_lo1", plo),
                 ("pad_hi1", phi), ("src_stride2", r.hw), ("dst_stride2", bufs.plane)):
        b.setp(f"dma.{k}", v)
    if per_position(op) and t.counts_at is None:
        b.comment("ones where the tile's input is real, 0 in its padding (one row of ones, read rows times)")
        for k, v in (("src_stride1", 0), ("size2", 1), ("pad_value", 0)):
            b.i("setpi", f"dma.{k}", v)
        b.i("la", r.t[0], b.label("pool_ones"))
        b.i("dma", b.ch(0), Mem("vbuf0", r.t[11]), Mem("ddr", r.t[0]))
        b.setp("dma.src_stride1", r.w)
        b.i("setpi", "dma.pad_value", pool_fill(op.largest))
    b.setp("dma.size2", chans)
    b.i("setpi", "dma.pad_lo2", 0)
    b.i("setpi", "dma.pad_hi2", 0)
    src = Mem(io.src_space, bufs.src)
    if t.group:     # every other tile on ch1: its DDR latency under the other's transfer, its own token
        b.i("bne", r.pix, ZERO, b.label("pool_odd"))
        b.i("dma", b.ch(0), Mem("vbuf0", bufs.inb), src, signal=s.load)
        b.i("jal", ZERO, b.label("pool_loaded"))
        b.at(b.label("pool_odd"))
        b.i("dma", b.ch(1), Mem("vbuf0", bufs.inb), src, signal=s.load_b)
        b.at(b.label("pool_loaded"))
    else:
        b.i("dma", b.ch(0), Mem("vbuf0", bufs.inb), src, signal=s.load)


def take_load_token(b: Scope, r: TileRegs, s: PoolSems, inb: Reg) -> None:
    """A command takes one token: a one-byte copy of the input onto itself takes this tile's load's (on
    every other tile the other load channel's)."""
    for k in ("n0", "n1", "n2"):
        b.i("setpi", f"vu.{k}", 1)
    b.i("bne", r.pix, ZERO, b.label("pool_odd_wait"))
    b.i("vu.mov", "vu0", "i8", inb, "i8", inb, wait=s.load)
    b.i("jal", ZERO, b.label("pool_waited"))
    b.at(b.label("pool_odd_wait"))
    b.i("vu.mov", "vu0", "i8", inb, "i8", inb, wait=s.load_b)
    b.at(b.label("pool_waited"))


def tile_counts(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, t: Tiles, bufs: _Bufs) -> None:
    """Each output's count of real elements, per tile: the window sums of its plane of ones (at r.t[11]),
    int32 after the output, at r.t[5] (the first command on the tile's load)."""
    cnt, row4 = r.t[5], r.t[2]
    b.comment("each output's count of real elements: the window sums of the ones, int32 after the output")
    b.i("muli", cnt, r.t[10], op.x_shape[1])
    b.i("add", cnt, cnt, bufs.outb)
    b.i("addi", cnt, cnt, 3)
    b.i("andi", cnt, cnt, -4)
    b.i("slli", row4, r.ow, 2)
    for k, v in (("n0", r.ow), ("n1", r.th), ("d_stride1", row4), ("a_stride1", r.t[0]), ("win_stride_h", r.wp)):
        b.setp(f"vu.{k}", v)
    for k, v in (("n2", 1), ("d_stride0", 4), ("b_stride0", 4), ("b_stride2", 0)):
        b.i("setpi", f"vu.{k}", v)
    b.i(f"vu.{t.engine}.acc", "vu0", cnt, r.t[11], wait=s.load)
    b.i("setpi", "vu.d_stride0", 1)
    b.setp("vu.b_stride1", row4)


def pool_windows(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, t: Tiles, bufs: _Bufs, chans: Reg | int,
                 load_wait: dict[str, Sem]) -> None:
    """The tile's window command(s) -> [c][rows][w out] (load_wait: the first waits for the load)."""
    big: Pool2d = op.largest
    ob = out_bytes(op)
    if ob > 1:
        b.i("muli", r.t[11], r.ow, ob)
        b.i("muli", r.t[5], r.t[10], ob)
    for k, v in (("n0", r.ow), ("n1", r.th), ("d_stride1", r.t[11] if ob > 1 else r.ow), ("a_stride1", r.t[0]),
                 ("d_stride2", r.t[5] if ob > 1 else r.t[10]), ("a_stride2", bufs.plane), ("win_stride_h", r.wp)):
        b.setp(f"vu.{k}", v)
    b.setp("vu.n2", chans)
    if big.mode == "max":
        b.i("vu.pool.max", "vu0", bufs.outb, bufs.inb, **load_wait, signal=s.vu)
    elif big.mode == "sum":
        b.i(f"vu.{t.engine}.acc", "vu0", bufs.outb, bufs.inb, **load_wait, signal=s.vu)
    else:           # b: the counts, or the window size (one int32 word every output reads)
        avg = f"vu.{t.engine}.{'favg' if big.is_float else 'avg'}"
        if not per_position(op):
            b.i("li", r.t[5], t.div_at)
        if t.split:
            split_avg(b, r, s, op, avg, bufs)
        else:
            b.i(avg, "vu0", bufs.outb, bufs.inb, r.t[5], **load_wait, signal=s.vu)


def store_tile(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, io: TileIO, group: int, bufs: _Bufs,
               chans: Reg | int) -> None:
    """The tile's output -> y: per channel th * w out contiguous elements, on ch2 after the windows."""
    ob, src = out_bytes(op), bufs.src
    b.comment("store: per channel th * w out contiguous bytes")
    io.dst(b, src, r.t[0])
    if group:
        channel_offset(b, r, src, r.ohw, group, ob, r.t[0])
    if ob > 1:                                      # int32 sums: strides in bytes
        b.i("muli", r.t[11], r.ohw, ob)
        for k, v in (("elem", ob), ("src_stride0", ob), ("dst_stride0", ob)):
            b.i("setpi", f"dma.{k}", v)
    for k, v in (("size0", r.t[10]), ("size1", chans), ("src_stride1", r.t[5] if ob > 1 else r.t[10]),
                 ("dst_stride1", r.t[11] if ob > 1 else r.ohw)):
        b.setp(f"dma.{k}", v)
    for k in ("pad_lo0", "pad_hi0", "pad_lo1", "pad_hi1"):
        b.i("setpi", f"dma.{k}", 0)
    b.i("setpi", "dma.size2", 1)
    b.i("dma", b.ch(2), Mem(io.dst_space, src), Mem("vbuf0", bufs.outb), wait=s.vu, signal=s.store)
    if ob > 1:
        for k, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1)):
            b.i("setpi", f"dma.{k}", v)


def channel_offset(b: Scope, r: TileRegs, reg: Reg, plane: Reg, group: int, size: int, tmp: Reg) -> None:
    """reg += the offset of channel group r.args's first plane (planes of `plane` elements of `size` bytes)."""
    b.i("muli", tmp, r.args, group * size)
    b.i("mul", tmp, tmp, plane)
    b.i("add", reg, reg, tmp)


def split_avg(b: Scope, r: TileRegs, s: PoolSems, op: DynamicOp, avg: str, bufs: _Bufs) -> None:
    """The tile's average as the static lowering splits it: the border bands (rows above and below, then
    columns left and right of the windows without padding) on the counts at r.t[5], each skipped when
    empty, then the windows without padding on one count, their first (which is the window size), read
    once a plane (b strides 0), which signals the store; a tile with no such window runs whole on the
    counts.  The VU runs them in order after a command that took the load's token."""
    big: Pool2d = op.largest
    (sh, sw), (pt, pl, _, _) = big.stride, big.padding
    i0, j0 = -(-pt // sh), -(-pl // sw)
    fh, fw = r.ib, r.ab
    top, bottom, n = r.t[1], r.t[3], r.t[4]
    b.comment(f"the tile's rows whose windows hold no padding: [{top}, {bottom})")
    b.i("li", top, i0)
    b.i("sub", top, top, r.oh0)
    b.i("max", top, top, ZERO)
    b.i("min", top, top, r.th)
    b.i("sub", bottom, fh, r.oh0)
    b.i("max", bottom, bottom, ZERO)
    b.i("min", bottom, bottom, r.th)
    b.i("bge", top, bottom, b.label("pool_whole"))
    b.i("li", n, j0)
    b.i("bge", n, fw, b.label("pool_whole"))

    def rect(first_row: Reg | None, rows: Reg, first_col: Reg | int, cols: Reg | int, signal: bool = False):
        window_rect(b, r, avg, big.stride, bufs, (first_row, rows), (first_col, cols),
                    {"signal": s.vu} if signal else {})
    b.comment("border bands on the counts: the rows above, the rows below")
    b.i("beq", top, ZERO, b.label("pool_top"))
    rect(None, top, 0, r.ow)
    b.at(b.label("pool_top"))
    b.i("sub", n, r.th, bottom)
    b.i("beq", n, ZERO, b.label("pool_bottom"))
    rect(bottom, n, 0, r.ow)
    b.at(b.label("pool_bottom"))
    b.comment("the columns left and right of the windows without padding")
    b.i("sub", n, bottom, top)
    if j0:
        rect(top, n, 0, j0)
    cols = bufs.plane                               # the plane's size is set (a_stride2): free
    b.i("sub", cols, r.ow, fw)
    b.i("beq", cols, ZERO, b.label("pool_right"))
    rect(top, n, fw, cols)
    b.at(b.label("pool_right"))
    b.comment("the windows without padding: one count, read once a plane")
    for k in ("b_stride0", "b_stride1"):
        b.i("setpi", f"vu.{k}", 0)
    b.i("addi", cols, fw, -j0)
    rect(top, n, j0, cols, signal=True)
    b.i("jal", ZERO, b.label("pool_done"))
    b.at(b.label("pool_whole"))
    b.i(avg, "vu0", bufs.outb, bufs.inb, r.t[5], signal=s.vu)
    b.at(b.label("pool_done"))


def window_rect(b: Scope, r: TileRegs, avg: str, stride: tuple[int, int], bufs: _Bufs,
                row_span: tuple[Reg | None, Reg], col_span: tuple[Reg | int, Reg | int],
                signal: dict[str, Sem]) -> None:
    """The average (mnemonic avg, windows `stride` apart) over the tile's output rows (first, count; first
    None: the tile's first) x columns (first, count), its b the counts (at r.t[5]) from the first output's
    on."""
    (sh, sw), (first_row, rows), (first_col, cols) = stride, row_span, col_span
    b.setp("vu.n0", cols)
    b.setp("vu.n1", rows)
    off, d, a, bb = r.t[0], r.t[2], r.t[9], r.t[11]
    if first_row is None:
        b.i("li", off, 0)
        b.i("li", a, 0)
    else:
        b.i("mul", off, first_row, r.ow)
        b.i("mul", a, first_row, r.wp)
        if sh > 1:
            b.i("muli", a, a, sh)
    if isinstance(first_col, Reg):
        b.i("add", off, off, first_col)
        b.i("muli", d, first_col, sw)
        b.i("add", a, a, d)
    elif first_col:
        b.i("addi", off, off, first_col)
        b.i("addi", a, a, first_col * sw)
    b.i("add", d, off, bufs.outb)
    b.i("add", a, a, bufs.inb)
    b.i("slli", bb, off, 2)
    b.i("add", bb, bb, r.t[5])
    b.i(avg, "vu0", d, a, bb, **signal)
