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

from typing import Callable

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp, check_divisor, window_out
from ..errors import CompileError
from ..ops import Pool2d
from ..quant import f32_bits
from .dynamic import (RAB, RB, RH, RHW, RI, RIB, RMAX, RN, ROH, ROH0, ROHW, ROW, RPEND, RPIX, RTH, RVB, RW, RWP, Emit,
                      TileIO, _axis, axis_name, ddr_io, drain_and_halt, emit_out_size, fold_channels, halo_rows,
                      next_tile, target_notes)

S_LOAD, S_VU, S_STORE = "s0", "s1", "s2"
S_CONST = "s3"           # the divisor or the plane of ones, on ch3 beside the first load, once a run
S_LOAD_B = "s4"          # tiles of whole planes: every other tile's load, on ch1
SPLIT_LOG2 = 1           # without a table: about 2**1 tiles per image, where they fit
MIN_GROUPS = 4           # a summing pool of this many channels or more: whole planes of about 1/4 of them a tile
MAX_TABLE = 4096         # output heights a rows-per-tile table may span (a word each)
CU_TILE = 85             # CU cycles of a tile's set-up (about 80 instructions: addresses, setp)
T = [f"r{k}" for k in range(19, 31)]
# registers a conv's program uses for its buffer offsets, free in a pool program
RFH, RFW = RIB, RAB      # the output rows, columns before which the windows hold no padding at the bottom, right
RCC, RODD = RVB, RPIX    # tiles of whole planes: this tile's channels; 1 on every other tile


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


def pad_value(op: DynamicOp) -> int:
    """What the padding holds: -128 for max (never wins), 0 for sums, x_zp for averages (onnxruntime's
    count_include_pad=1 counts it as a real x_zp; the float form subtracts x_zp, so it adds 0), 0 for an
    integer average over the real elements only."""
    big: Pool2d = op.largest
    avg = big.x_zp if big.count_include_pad or big.is_float else 0
    return {"max": -128, "sum": 0, "avg": avg}[big.mode]


def window_engine(op: DynamicOp, cfg: Config, th: int, group: int = 0) -> str:
    """"slide" if a summing pool's windows fit the sliding-window engine at the largest width and it is
    cheaper there for a full tile (it reads each input byte once, however much the windows overlap), else
    "pool" (the accumulators; a max pool has only those).  group: a tile's channels, if not all."""
    from nnpsim.timing import slide_span, vu_pool_cycles, vu_slide_cycles
    from nnpsim.units.vu import SLIDE_LINE_BYTES, SLIDE_MAX_COLS

    big: Pool2d = op.largest
    if big.mode == "max":
        return "pool"
    c, ow = group or big.x_shape[1], big.out_hw[1]
    (kh, kw), (sh, sw) = big.kernel, big.stride
    cols = slide_span(ow, sw, kw)
    if cols > SLIDE_MAX_COLS or kh * cols > SLIDE_LINE_BYTES:
        return "pool"
    d, b = out_bytes(op), 0 if big.mode == "sum" else 4
    bpc, lat = cfg.vu_bytes_per_cycle, cfg.vu_latency
    pool = vu_pool_cycles(c * th * ow, kh * kw, d, 1, b, bpc, lat)
    slide = vu_slide_cycles(ow, th, c, sw, sh, kh, kw, d, b, big.count_include_pad, big.is_float, bpc, lat)
    return "slide" if slide < pool else "pool"


def _stages(op: DynamicOp, cfg: Config, engine: str, rows: int, w: int) -> tuple[int, int, int]:
    """(load, VU, store) cycles of a tile of `rows` output rows at input width w, each on its own."""
    from nnpsim.timing import dma_cycles, vu_pool_cycles, vu_slide_cycles

    big: Pool2d = op.largest
    c = big.x_shape[1]
    (kh, kw), (sh, sw), (_, pl, _, pr) = big.kernel, big.stride, big.padding
    ow = window_out(w, pl + pr - kw, sw)
    rin, d = (rows - 1) * sh + kh, out_bytes(op)
    ddr, vbuf = (cfg.ddr_bytes_per_cycle, cfg.ddr_latency), (cfg.local_bytes_per_cycle, cfg.local_latency)
    ones = rin * w if per_position(op) else 0
    load = dma_cycles(c * rin * w + ones, *ddr, *vbuf)
    b = 0 if big.mode in ("max", "sum") else 4
    if engine == "slide":
        vu = vu_slide_cycles(ow, rows, c, sw, sh, kh, kw, d, b, big.count_include_pad, big.is_float,
                             cfg.vu_bytes_per_cycle, cfg.vu_latency)
    else:
        vu = vu_pool_cycles(c * rows * ow, kh * kw, d, 1, b, cfg.vu_bytes_per_cycle, cfg.vu_latency)
    if per_position(op):
        vu += vu_pool_cycles(rows * ow, kh * kw, 4, 1, 0, cfg.vu_bytes_per_cycle, cfg.vu_latency)
    return load, vu, dma_cycles(c * rows * ow * d, *vbuf, *ddr)


def price(op: DynamicOp, cfg: Config, engine: str, th: int, oh: int, w: int) -> int:
    """Predicted cycles of one image of oh output rows at width w in tiles of th rows: the first tile's
    load, then per further tile the busiest of its load channel, the VU, its store channel, the DDR port
    (loads and stores share it), the CU and the two-set ring (half of a tile's load, pooling, store and
    set-up), then the last tile's pooling and store."""
    k, last = -(-oh // th), oh - (-(-oh // th) - 1) * th
    full, rest = _stages(op, cfg, engine, th, w), _stages(op, cfg, engine, last, w)
    port = full[0] + full[2]
    ring = (sum(full) + CU_TILE + 1) // 2       # two sets: tile k+2's load follows tile k's store
    step = max(full[0], full[1], full[2], port, ring, CU_TILE)
    return CU_TILE + full[0] + (k - 1) * step + rest[1] + rest[2]


def rows_table(op: DynamicOp, cfg: Config, engine: str, th_max: int) -> tuple[int, list[int]] | None:
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
        table.append(min(options, key=lambda th: price(op, cfg, engine, th, oh, w)))
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


def fixed_params(em: Emit, op: DynamicOp) -> None:
    """The DMA and VU parameters that do not depend on the shape."""
    fixed_dma(em, op)
    fixed_vu(em, op)


def fixed_dma(em: Emit, op: DynamicOp) -> None:
    """The DMA parameters that do not depend on the shape."""
    _, pl, _, pr = op.largest.padding
    for p, v in (("elem", 1), ("pad_value", pad_value(op)), ("size3", 1), ("pad_lo3", 0), ("pad_hi3", 0),
                 ("pad_lo0", pl), ("pad_hi0", pr),
                 ("src_stride0", 1), ("dst_stride0", 1)):
        em.i(f"setpi   dma.{p}, {v}")


def fixed_vu(em: Emit, op: DynamicOp) -> None:
    """The VU parameters that do not depend on the shape."""
    big: Pool2d = op.largest
    (kh, kw), (_, sw) = big.kernel, big.stride
    for p, v in (("win_h", kh), ("win_w", kw), ("win_stride_w", 1), ("n3", 1), ("a_stride0", sw),
                 ("d_stride0", out_bytes(op)), ("b_stride0", 0), ("b_stride1", 0), ("b_stride2", 0)):
        em.i(f"setpi   vu.{p}, {v}")
    if big.is_float:         # vu.pool.favg: sum(sx * (x - x_zp)) / count / sy + zp_out, as onnxruntime
        for p, v in (("za", big.x_zp), ("fscale", f32_bits(big.scale_x)), ("fscale_b", f32_bits(big.scale_out)),
                     ("zp_out", big.zp_out), ("lo", -128), ("hi", 127)):
            em.i(f"setpi   vu.{p}, {v}")


def program_text(op: DynamicOp, cfg: Config, th: int, group: int = 0, sets: int = 2) -> str:
    """The assembly of the dynamic pool: tiles of th rows of every channel, or (group) whole planes of group
    channels, in `sets` buffer sets."""
    big: Pool2d = op.largest
    n, c, h, w = op.x_shape
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = big.kernel, big.stride, big.padding
    check_divisor(f"dynamic {op.kind}", "stride height", sh), check_divisor(f"dynamic {op.kind}", "stride width", sw)
    _, _, h_max, w_max = big.x_shape
    idx = {d.name: k for k, d in enumerate(op.dims)}
    tiles = f"whole planes of {group} channels a tile" if group else f"{th} output rows per tile"
    L = [f"; dynamic kernel: {op!r}", f"; {tiles}; {sets} buffer sets", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += ["        " + s for s in target_notes(op, [axis_name(n), str(c), _axis(h, pt + pb - kh, sh),
                                                   _axis(w, pl + pr - kw, sw)])]
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}",
          "        .align 64", f"        .buffer x, int8, ({', '.join(map(str, big.x_shape))},)",
          f"        .space {c * h_max * w_max * big.x_shape[0]}", "        .align 64",
          f"        .buffer y, {big.output.dtype}, ({', '.join(map(str, big.output.shape))},)",
          f"        .space {big.output.nbytes}"]
    engine = window_engine(op, cfg, th, group)
    split = split_windows(op, engine)
    div_at = sets * set_bytes(op, th, group)          # VBUF: the sets, the divisor, the ones, the counts
    ones_at = div_at + 64
    counts_at = ones_at + once_bytes(op)[0]
    divisor = big.mode == "avg" and not per_position(op)
    if divisor:
        L += ["        .align 64", "pool_div:                               ; the window size (count_include_pad)",
              f"        .word {kh * kw}"]
    if per_position(op):
        L += ["        .align 64", "pool_ones:                              ; one row of ones: the counts",
              f"        .space {w_max}, 1"]
    table = None if group else rows_table(op, cfg, engine, th)      # max pools; two tiles an image for the others
    if table is not None:
        L += ["        .align 64", f"pool_rows:                              ; rows per tile by input height from "
                                    f"{table[0]}", *(f"        .word {r}" for r in table[1])]
    L += ["", "        .text", "main:", "        la      r1, args"]
    em = Emit(L)
    e, i = em.e, em.i
    for reg, d in ((RN, n), (RH, h), (RW, w)):
        i(f"ld      {reg}, r1, {4 * idx[d.name]}" if isinstance(d, Dim) else f"li      {reg}, {d}")
    once = bool(group) and per_position(op)       # the counts made once (once_counts)
    emit_out_size(i, ROH, RH, pt + pb - kh, sh, T[0])
    emit_out_size(i, ROW, RW, pl + pr - kw, sw, T[0])
    i(f"addi    {RWP}, {RW}, {pl + pr}")
    i(f"mul     {RHW}, {RH}, {RW}")
    i(f"mul     {ROHW}, {ROH}, {ROW}")
    fixed_dma(em, op)
    if group:
        e("        ; rows per tile: the whole plane (two sets of the group's planes fit VBUF at the largest shape)")
        i(f"addi    {RMAX}, {ROH}, 0")
    elif table is not None:
        e(f"        ; rows per tile for this height (the compiler's table, at most {th}: two sets fit VBUF)")
        i(f"addi    {T[0]}, {RH}, {-table[0]}")
        i(f"slli    {T[0]}, {T[0]}, 2")
        i(f"la      {T[1]}, pool_rows")
        i(f"add     {T[0]}, {T[0]}, {T[1]}")
        i(f"ld      {RMAX}, {T[0]}, 0")
    else:
        e(f"        ; rows per tile: about 1/{1 << SPLIT_LOG2} of the output rows (loads, pooling and stores "
          f"overlap), at most {th} (two sets fit VBUF)")
        i(f"addi    {RMAX}, {ROH}, {(1 << SPLIT_LOG2) - 1}")
        i(f"srai    {RMAX}, {RMAX}, {SPLIT_LOG2}")
        i(f"li      {T[0]}, {th}")
        i(f"min     {RMAX}, {RMAX}, {T[0]}")

    def first(em: Emit) -> None:
        """What the run sets up once, after the first tile's load is on its way: the VU's fixed parameters,
        where the windows without padding stop, the divisor or the counts made once (on ch3, beside the
        loads; the VU takes its token before any window command)."""
        fixed_vu(em, op)
        if split:
            e("        ; the output rows and columns whose windows end inside the plane: [.., RFH), [.., RFW)")
            emit_out_size(i, RFH, RH, pt - kh, sh, T[0])
            i(f"min     {RFH}, {RFH}, {ROH}")
            emit_out_size(i, RFW, RW, pl - kw, sw, T[0])
            i(f"min     {RFW}, {RFW}, {ROW}")
        if divisor:
            for p, v in (("size0", 4), ("size1", 1), ("size2", 1), ("pad_lo0", 0), ("pad_hi0", 0), ("pad_lo1", 0),
                         ("pad_hi1", 0)):
                i(f"setpi   dma.{p}, {v}")
            i(f"la      {T[0]}, pool_div")
            i(f"li      {T[1]}, {div_at}")
            i(f"dma     ch3, vbuf0[{T[1]}], ddr[{T[0]}], signal={S_CONST}")
            # a command takes one token: a one-word copy of the divisor onto itself takes it
            for p in ("n0", "n1", "n2"):
                i(f"setpi   vu.{p}, 1")
            i(f"li      {T[1]}, {div_at}")
            i(f"vu.mov  vu0, i32, {T[1]}, i32, {T[1]}, wait={S_CONST}")
        if once:
            once_counts(em, op, engine, ones_at, counts_at)

    i(f"li      {RI}, 0")
    i(f"li      {RB}, 0")
    i(f"li      {RPEND}, 0")
    if group:
        i(f"li      {RODD}, 0")
    e("batch:")
    if group:
        i("li      r1, 0")                             # r1: the channel group
        e("block:")
    i(f"li      {ROH0}, 0")
    e("tile:")
    i(f"sub     {RTH}, {ROH}, {ROH0}")
    i(f"min     {RTH}, {RTH}, {RMAX}")
    i(f"li      {T[0]}, {sets}")
    i(f"blt     {RPEND}, {T[0]}, free")
    i(f"sem.wait {S_STORE}")
    i(f"addi    {RPEND}, {RPEND}, -1")
    e("free:")
    tile_body(em, op, ddr_io(c, c, y_bytes=out_bytes(op)), set_bytes(op, th, group), 0, div_at, engine,
              split, group, counts_at if once else None, first)
    i(f"setpi   dma.pad_lo0, {pl}")
    i(f"setpi   dma.pad_hi0, {pr}")
    if group:
        i(f"xori    {RODD}, {RODD}, 1")
    L += next_tile(sets, -(-c // group) if group else 0) + drain_and_halt(RPEND, S_STORE)
    return "\n".join(L) + "\n"


def once_counts(em: Emit, op: DynamicOp, engine: str, ones_at: int, counts_at: int) -> None:
    """Each output's count of real elements, once a run for tiles of whole planes (in the first tile, whose
    rows RTH from ROH0 = 0 are the plane's): a plane of ones (one row of ones in DDR read every row, the
    padding 0) into VBUF at ones_at on ch3, its window sums (int32) at counts_at."""
    e, i = em.e, em.i
    big: Pool2d = op.largest
    (kh, _), (sh, _), (pt, pl, _, pr) = big.kernel, big.stride, big.padding
    e("        ; the counts, once: a plane of ones where the input is real (0 in its padding), its window sums")
    rows, plo, phi = T[1], T[3], T[5]
    halo_rows(i, (rows, T[2], plo, T[4], phi, T[11]), sh, kh, pt)
    for p, v in (("size0", RWP), ("size1", rows), ("src_stride1", 0), ("dst_stride1", RWP), ("pad_lo0", pl),
                 ("pad_hi0", pr), ("pad_lo1", plo), ("pad_hi1", phi), ("size2", 1), ("pad_lo2", 0), ("pad_hi2", 0),
                 ("pad_value", 0)):
        em.setp(f"dma.{p}", v)
    i(f"la      {T[0]}, pool_ones")
    i(f"li      {T[1]}, {ones_at}")
    i(f"dma     ch3, vbuf0[{T[1]}], ddr[{T[0]}], signal={S_CONST}")
    i(f"setpi   dma.pad_value, {pad_value(op)}")
    i(f"slli    {T[2]}, {ROW}, 2")
    i(f"muli    {T[0]}, {RWP}, {sh}")
    for p, v in (("n0", ROW), ("n1", ROH), ("n2", 1), ("d_stride0", 4), ("d_stride1", T[2]), ("a_stride1", T[0]),
                 ("win_stride_h", RWP)):
        em.setp(f"vu.{p}", v)
    i(f"li      {T[1]}, {ones_at}")
    i(f"li      {T[2]}, {counts_at}")
    i(f"vu.{engine}.acc vu0, {T[2]}, {T[1]}, wait={S_CONST}")
    i("setpi   vu.d_stride0, 1")


def tile_body(em: Emit, op: DynamicOp, io: TileIO, set_size: int, vbuf: int = 0, div_at: int = 0,
              engine: str = "pool", split: bool = False, group: int = 0, counts_at: int | None = None,
              first: Callable[[Emit], None] | None = None) -> None:
    """One tile: RTH output rows from row ROH0 of image RI, in buffer set RB (set_size bytes each from
    VBUF offset vbuf; an average pool's window size at VBUF div_at; a summing pool's windows on
    vu.<engine>.*: window_engine; split: split_windows, with RFH and RFW set), of every channel or (group)
    of channel group r1, group channels (the last group the rest), with the counts, if it needs them,
    made once at VBUF counts_at; first: what the first tile alone emits after its load."""
    e, i = em.e, em.i
    big: Pool2d = op.largest
    c = big.x_shape[1]
    (kh, _), (sh, _), (pt, _, _, _) = big.kernel, big.stride, big.padding
    ob = out_bytes(op)
    tile_counts = per_position(op) and counts_at is None
    chans = RCC if group else c                     # this tile's channels: a register, or every channel
    if group:
        e(f"        ; channels {group} * r1 on: {group}, the last group fewer")
        i(f"muli    {T[0]}, r1, {-group}")
        i(f"addi    {RCC}, {T[0]}, {c}")
        i(f"li      {T[0]}, {group}")
        i(f"min     {RCC}, {RCC}, {T[0]}")
    rows, vstart, plo, start, phi = T[1], T[2], T[3], T[4], T[5]
    halo_rows(i, (rows, vstart, plo, start, phi, T[11]), sh, kh, pt)
    inb, outb, plane, src = T[6], T[7], T[8], T[9]
    i(f"muli    {inb}, {RB}, {set_size}")
    if vbuf:
        i(f"addi    {inb}, {inb}, {vbuf}")
    i(f"mul     {plane}, {rows}, {RWP}")              # one channel's input rows in VBUF
    i(f"muli    {outb}, {plane}, {group or c}")
    i(f"add     {outb}, {outb}, {inb}")
    if tile_counts:                                 # a plane of ones after the input: [rows][w padded]
        i(f"addi    {T[11]}, {outb}, 0")
        i(f"add     {outb}, {outb}, {plane}")
    if ob > 1:                                      # int32 sums: aligned
        i(f"addi    {outb}, {outb}, 3")
        i(f"andi    {outb}, {outb}, -4")
    e("        ; every channel's rows with halo -> vbuf [c][rows][w padded]")
    io.src(em, src, start, T[10])
    if group:                                       # the group's first plane
        channel_offset(em, src, RHW, group, 1, T[10])
    for p, v in (("size0", RWP), ("size1", rows), ("src_stride1", RW), ("dst_stride1", RWP), ("pad_lo1", plo),
                 ("pad_hi1", phi), ("src_stride2", RHW), ("dst_stride2", plane)):
        i(f"setp    dma.{p}, {v}, 0")
    if tile_counts:
        e("        ; ones where the tile's input is real, 0 in its padding (one row of ones, read rows times)")
        for p, v in (("src_stride1", 0), ("size2", 1), ("pad_value", 0)):
            i(f"setpi   dma.{p}, {v}")
        i(f"la      {T[0]}, pool_ones")
        i(f"dma     ch0, vbuf0[{T[11]}], ddr[{T[0]}]")
        i(f"setp    dma.src_stride1, {RW}, 0")
        i(f"setpi   dma.pad_value, {pad_value(op)}")
    em.setp("dma.size2", chans)
    i("setpi   dma.pad_lo2, 0")
    i("setpi   dma.pad_hi2, 0")
    if group:       # every other tile on ch1: its DDR latency under the other's transfer, its own token
        i(f"bne     {RODD}, r0, pool_odd")
        i(f"dma     ch0, vbuf0[{inb}], {io.src_space}[{src}], signal={S_LOAD}")
        i("jal     r0, pool_loaded")
        e("pool_odd:")
        i(f"dma     ch1, vbuf0[{inb}], {io.src_space}[{src}], signal={S_LOAD_B}")
        e("pool_loaded:")
    else:
        i(f"dma     ch0, vbuf0[{inb}], {io.src_space}[{src}], signal={S_LOAD}")
    if first is not None:
        e("        ; the first tile only (no store is pending yet)")
        i(f"bne     {RPEND}, r0, pool_first")
        first(em)
        e("pool_first:")
    e("        ; pool -> [c][rows][w out]")
    i(f"mul     {T[10]}, {RTH}, {ROW}")                # one channel's output
    i(f"muli    {T[0]}, {RWP}, {sh}")
    load_wait = f"wait={S_LOAD}, "
    if group:       # a command takes one token: a one-byte copy of the input onto itself takes this tile's
        for p in ("n0", "n1", "n2"):
            i(f"setpi   vu.{p}, 1")
        i(f"bne     {RODD}, r0, pool_odd_wait")
        i(f"vu.mov  vu0, i8, {inb}, i8, {inb}, wait={S_LOAD}")
        i("jal     r0, pool_waited")
        e("pool_odd_wait:")
        i(f"vu.mov  vu0, i8, {inb}, i8, {inb}, wait={S_LOAD_B}")
        e("pool_waited:")
        load_wait = ""                              # the VU runs its commands in order: after the copy
    if per_position(op) and not tile_counts:        # made once a run; per position: 4 bytes, a row of them
        i(f"li      {T[5]}, {counts_at}")
        i(f"slli    {T[2]}, {ROW}, 2")
        for p, v in (("b_stride0", 4), ("b_stride1", T[2]), ("b_stride2", 0)):
            em.setp(f"vu.{p}", v)
    if tile_counts:
        e("        ; each output's count of real elements: the window sums of the ones, int32 after the output")
        cnt, row4 = T[5], T[2]
        i(f"muli    {cnt}, {T[10]}, {c}")
        i(f"add     {cnt}, {cnt}, {outb}")
        i(f"addi    {cnt}, {cnt}, 3")
        i(f"andi    {cnt}, {cnt}, -4")
        i(f"slli    {row4}, {ROW}, 2")
        for p, v in (("n0", ROW), ("n1", RTH), ("d_stride1", row4), ("a_stride1", T[0]), ("win_stride_h", RWP)):
            i(f"setp    vu.{p}, {v}, 0")
        for p, v in (("n2", 1), ("d_stride0", 4), ("b_stride0", 4), ("b_stride2", 0)):
            i(f"setpi   vu.{p}, {v}")
        i(f"vu.{engine}.acc vu0, {cnt}, {T[11]}, {load_wait.rstrip(', ')}")
        i("setpi   vu.d_stride0, 1")
        i(f"setp    vu.b_stride1, {row4}, 0")
        load_wait = ""                              # the VU runs its commands in order: after the counts
    if ob > 1:
        i(f"muli    {T[11]}, {ROW}, {ob}")
        i(f"muli    {T[5]}, {T[10]}, {ob}")
    for p, v in (("n0", ROW), ("n1", RTH), ("d_stride1", T[11] if ob > 1 else ROW), ("a_stride1", T[0]),
                 ("d_stride2", T[5] if ob > 1 else T[10]), ("a_stride2", plane), ("win_stride_h", RWP)):
        i(f"setp    vu.{p}, {v}, 0")
    em.setp("vu.n2", chans)
    if big.mode == "max":
        i(f"vu.pool.max vu0, {outb}, {inb}, {load_wait}signal={S_VU}")
    elif big.mode == "sum":
        i(f"vu.{engine}.acc vu0, {outb}, {inb}, {load_wait}signal={S_VU}")
    else:           # b: the counts, or the window size (one int32 word every output reads)
        avg = f"vu.{engine}.{'favg' if big.is_float else 'avg'}"
        if not per_position(op):
            i(f"li      {T[5]}, {div_at}")
        if split:
            split_avg(em, op, avg, outb, inb, T[5])
        else:
            i(f"{avg} vu0, {outb}, {inb}, {T[5]}, {load_wait}signal={S_VU}")
    e("        ; store: per channel th * w out contiguous bytes")
    io.dst(em, src, T[0])
    if group:
        channel_offset(em, src, ROHW, group, ob, T[0])
    if ob > 1:                                      # int32 sums: strides in bytes
        i(f"muli    {T[11]}, {ROHW}, {ob}")
        for p, v in (("elem", ob), ("src_stride0", ob), ("dst_stride0", ob)):
            i(f"setpi   dma.{p}, {v}")
    for p, v in (("size0", T[10]), ("size1", None), ("src_stride1", T[5] if ob > 1 else T[10]),
                 ("dst_stride1", T[11] if ob > 1 else ROHW)):
        if v is None:
            em.setp("dma.size1", chans)
        else:
            i(f"setp    dma.{p}, {v}, 0")
    for p in ("pad_lo0", "pad_hi0", "pad_lo1", "pad_hi1"):
        i(f"setpi   dma.{p}, 0")
    i("setpi   dma.size2, 1")
    i(f"dma     ch2, {io.dst_space}[{src}], vbuf0[{outb}], wait={S_VU}, signal={S_STORE}")
    if ob > 1:
        for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1)):
            i(f"setpi   dma.{p}, {v}")


def channel_offset(em: Emit, reg: str, plane: str, group: int, size: int, tmp: str) -> None:
    """reg += the offset of channel group r1's first plane (planes of `plane` elements of `size` bytes)."""
    em.i(f"muli    {tmp}, r1, {group * size}")
    em.i(f"mul     {tmp}, {tmp}, {plane}")
    em.i(f"add     {reg}, {reg}, {tmp}")


def split_avg(em: Emit, op: DynamicOp, avg: str, outb: str, inb: str, cnt: str) -> None:
    """The tile's average as the static lowering splits it: the border bands (rows above and below, then
    columns left and right of the windows without padding) on the counts at cnt, each skipped when
    empty, then the windows without padding on one count, their first (which is the window size), read
    once a plane (b strides 0), which signals the store; a tile with no such window runs whole on the
    counts.  The VU runs them in order after a command that took the load's token."""
    e, i = em.e, em.i
    big: Pool2d = op.largest
    (sh, sw), (pt, pl, _, _) = big.stride, big.padding
    i0, j0 = -(-pt // sh), -(-pl // sw)
    top, bottom, n = T[1], T[3], T[4]
    e(f"        ; the tile's rows whose windows hold no padding: [{top}, {bottom})")
    i(f"li      {top}, {i0}")
    i(f"sub     {top}, {top}, {ROH0}")
    i(f"max     {top}, {top}, r0")
    i(f"min     {top}, {top}, {RTH}")
    i(f"sub     {bottom}, {RFH}, {ROH0}")
    i(f"max     {bottom}, {bottom}, r0")
    i(f"min     {bottom}, {bottom}, {RTH}")
    i(f"bge     {top}, {bottom}, pool_whole")
    i(f"li      {n}, {j0}")
    i(f"bge     {n}, {RFW}, pool_whole")

    def rect(first_row: str | None, rows: str, first_col: str | int, cols: str | int, signal: bool = False) -> None:
        """The average over `rows` output rows from first_row (a register; None: the tile's first) x `cols`
        columns from first_col, its b the counts from the first output's on (signal: the last command)."""
        em.setp("vu.n0", cols)
        em.setp("vu.n1", rows)
        off, d, a, bb = T[0], T[2], T[9], T[11]
        if first_row is None:
            i(f"li      {off}, 0")
            i(f"li      {a}, 0")
        else:
            i(f"mul     {off}, {first_row}, {ROW}")
            i(f"mul     {a}, {first_row}, {RWP}")
            if sh > 1:
                i(f"muli    {a}, {a}, {sh}")
        if isinstance(first_col, str):
            i(f"add     {off}, {off}, {first_col}")
            i(f"muli    {d}, {first_col}, {sw}")
            i(f"add     {a}, {a}, {d}")
        elif first_col:
            i(f"addi    {off}, {off}, {first_col}")
            i(f"addi    {a}, {a}, {first_col * sw}")
        i(f"add     {d}, {off}, {outb}")
        i(f"add     {a}, {a}, {inb}")
        i(f"slli    {bb}, {off}, 2")
        i(f"add     {bb}, {bb}, {cnt}")
        i(f"{avg} vu0, {d}, {a}, {bb}{f', signal={S_VU}' if signal else ''}")

    e("        ; border bands on the counts: the rows above, the rows below")
    i(f"beq     {top}, r0, pool_top")
    rect(None, top, 0, ROW)
    e("pool_top:")
    i(f"sub     {n}, {RTH}, {bottom}")
    i(f"beq     {n}, r0, pool_bottom")
    rect(bottom, n, 0, ROW)
    e("pool_bottom:")
    e("        ; the columns left and right of the windows without padding")
    i(f"sub     {n}, {bottom}, {top}")
    if j0:
        rect(top, n, 0, j0)
    cols = T[8]                                     # the plane's size is set (a_stride2): free
    i(f"sub     {cols}, {ROW}, {RFW}")
    i(f"beq     {cols}, r0, pool_right")
    rect(top, n, RFW, cols)
    e("pool_right:")
    e("        ; the windows without padding: one count, read once a plane")
    for p in ("b_stride0", "b_stride1"):
        i(f"setpi   vu.{p}, 0")
    i(f"addi    {cols}, {RFW}, {-j0}")
    rect(top, n, j0, cols, signal=True)
    i("jal     r0, pool_done")
    e("pool_whole:")
    i(f"{avg} vu0, {outb}, {inb}, {cnt}, signal={S_VU}")
    e("pool_done:")


def lower_pool(op: DynamicOp, cfg: Config):
    """A dynamic max, sum or average pool's (assembly, .incbin files, None)."""
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
    asm = program_text(op, cfg, th, group, sets)
    return fold_channels(asm, cfg.dma_channels), {}, None
