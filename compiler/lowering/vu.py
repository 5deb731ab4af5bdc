"""Lowering of pooling and elementwise ops onto the VU.

Elementwise ops see their tensor as [N, C, R] (R = the product of the axes
after the channel axis; elementwise_ncr: a tensor of rank below 4 that is one run
of bytes, [1, 1, R]) and run over tiles of whole rows of R, or of part of
one row; pooling runs over tiles of channels x output rows with the input
rows (and the halo, filled by the DMA) in VBUF.  Every tile is loaded, computed
and stored through double-buffered VBUF slots.

A consumer inside a fused kernel whose input is an intermediate kept in DM row by
row, (n, h, c, w) (layout.row_strides), walks rows outermost (`rows=True`): its
tiles are whole rows of every channel where they fit (else part of a row), in
row order, a pool's halo rows read from the producer's rows in DM, so that each
tile reads rows its producer has finished and compiler.pipelining can interleave
the two kernels tile by tile.  Only the walk and the DMA strides change; each
tile's arithmetic is the same.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np

from nnpsim.config import Config
from nnpsim.timing import AFFINE_PAIR_BYTES as PAIR_BYTES, LUT_BYTES, slide_span
from nnpsim.units.vu import FAVG_QUANTIZE_LINEAR, SLIDE_LINE_BYTES, SLIDE_MAX_COLS

from ..cost import slide_steps, vu_cycles
from ..errors import CompileError
from ..ir import Buffer, Dma, Note, Ref, Vu, u8_scalar
from ..ops import FLOAT_BINARY, BatchNorm, Elementwise, Pool2d
from ..quant import f32_bits, f32_table
from ..reference import MEAN_LANES, global_avg_pool_scale, mul_f32_ratio, real_counts
from .double_buffer import Slots, Step
from .layout import chan_runs, ddr_order, row_strides
from .units import Part

CH_A, CH_B, CH_OUT = 0, 1, 3
MIN_TILES = 4      # split work at least this far, so loads, compute and stores overlap
ELEMENTWISE_TILES = 2
"""Tiles an elementwise op is split into at least.  Each DMA pays DDR's latency (100 cycles) before
its first byte, on its channel's in-order queue: MobileNetV2's adds (7,840 to 75,264 elements) ran
at 1.47x their DDR bound, geometric mean, in 4 tiles, 1.25x in 2 with LOAD_CHANNELS (1.32x in one)."""
LOAD_CHANNELS = (CH_A, CH_B, 2)
"""The channels an elementwise op's loads take in turn: the next tile's loads start (and pay their
latency) while this tile's still stream, instead of queueing behind them."""
DT = {"int8": "i8", "int32": "i32"}



def _dense(size: tuple[int, ...]) -> tuple[int, ...]:
    """Element strides of a box of `size` (innermost first) packed in VBUF."""
    out, step = [], 1
    for v in size:
        out.append(step)
        step *= v
    return tuple(out)


def _ncr(shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(shape) == 1:
        return 1, 1, shape[0]
    return shape[0], shape[1], int(np.prod(shape[2:], dtype=np.int64))


def elementwise_ncr(op: Elementwise) -> tuple[int, int, int]:
    """The [N, C, R] an elementwise op's tiles walk.  A tensor of rank below 4 with several images, that every
    operand holds as one run of bytes (one layout, no per-channel table, b of its shape or a single value), is
    walked as one image of one channel: a tile never spans images, so SSDLite's box decoding on [3234, 1]
    would take a tile, a DMA and a VU command per element."""
    b = getattr(op, "b_shape", None)
    if (len(op.shape) < 4 and op.shape[0] > 1 and not strided(op) and not has_channel_table(op)
            and (b is None or all(v == 1 for v in b))):
        return 1, 1, int(np.prod(op.shape, dtype=np.int64))
    return _ncr(op.shape)


def _runs(shape, layout: str, c0: int, c1: int) -> list[tuple[int, int, int, int, int, tuple[int, ...]]]:
    """layout.chan_runs of channels [c0, c1), where layout "rows" is a producer's intermediate kept row by row
    in DM (layout.row_strides: one run)."""
    if layout == "rows":
        st = row_strides(shape)
        return [(c0, c1 - c0, 1, c0 * st[1], 0, st)]
    return chan_runs(shape, layout, c0, c1)


def strided(op: Elementwise) -> bool:
    """Does the op address its tensors by channel and position (its layouts differ, or a per-channel
    table or a b that varies by channel or position meets NHWC)?  Otherwise it sees every tensor as the same run of bytes, whatever the layout."""
    if op.x_layout == op.y_layout and op.x_layout != "nchw":
        return has_channel_table(op) or (broadcast_strides(op) or (0, 0, 0))[1:] != (0, 0)
    return op.x_layout != op.y_layout


def broadcast_strides(op: Elementwise) -> tuple[int, int, int] | None:
    """b's element strides along a's (image, channel, position) when b broadcasts (0 along each axis it
    repeats), None when b has a's shape; CompileError for a b_shape the lowering does not broadcast."""
    why = broadcast_problem(op)
    if why:
        raise CompileError(f"{op.kind}: {why}")
    b = getattr(op, "b_shape", None)
    if b is None:
        return None
    positions = int(np.prod(b[2:], dtype=np.int64))
    return (int(np.prod(b[1:], dtype=np.int64)) if b[0] > 1 else 0, positions if len(b) > 1 and b[1] > 1 else 0,
            1 if positions > 1 else 0)


def broadcast_problem(op) -> str:
    """Why the static lowering cannot broadcast op's b ('' if it can, or b does not broadcast).

    b's image axis is 1 or a's, its channel axis 1 or a's, and the axes after them all 1 or all a's
    (positions): so b's element for a's (n, c, position) is at n * sn + c * sc + position * sr, and b's
    bytes are the same in every layout unless it varies by both channel and position, which is refused."""
    b = getattr(op, "b_shape", None)
    if b is None:
        return ""
    shape = tuple(op.shape)
    spatial = tuple(b[2:])
    ok = (b[0] in (1, shape[0]) and (len(b) < 2 or b[1] in (1, shape[1]))
          and (all(v == 1 for v in spatial) or spatial == shape[2:])
          and not (len(b) > 1 and b[1] > 1 and int(np.prod(spatial, dtype=np.int64)) > 1))
    if ok:
        return ""
    return (f"b of shape {tuple(b)} broadcast to {shape}: an add or mul broadcasts a b that is one value per "
            f"image and / or channel ([N, C, 1, 1], [1, C, 1, 1], [N, 1, 1, 1], a scalar) or one plane "
            f"([1, 1, H, W], [N, 1, H, W]), not one that repeats along the height or width only")


def broadcast_view(shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[tuple, tuple] | None:
    """(the op's shape, b's shape at its rank) under which the lowering broadcasts a b of b_shape to shape: the
    shapes themselves (b padded on the left) when b has a's shape or broadcast_problem has nothing against them,
    else the same bytes seen with size-1 axes dropped and adjacent axes merged where b is alike (all a's, or all
    1), as (image, channel, positions); None when that leaves more than three axes (b alternates too often)."""
    if len(b_shape) > len(shape):
        return None
    full = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    if full == tuple(shape) or not broadcast_problem(SimpleNamespace(shape=tuple(shape), b_shape=full)):
        return tuple(shape), full
    runs: list[list] = []                 # [size, b varies] of merged axes, outer first
    for d, bd in zip(shape, full):
        if d == 1:
            continue
        if runs and runs[-1][1] == (bd == d):
            runs[-1][0] *= d
        else:
            runs.append([d, bd == d])
    if len(runs) > 3:
        return None
    runs = [[1, False]] * (3 - len(runs)) + runs
    return tuple(r[0] for r in runs), tuple(r[0] if r[1] else 1 for r in runs)


TRANSFORM_CHANNELS = 64     # channels a strided tile takes at least: an NHWC side's run, a burst


def elementwise_tiles(op: Elementwise, budget: int) -> list[tuple[int, int, int, int, int]]:
    """(n, c0, c1, r0, r1) tiles of at most `budget` elements."""
    n, c, r = elementwise_ncr(op)
    out = []
    if strided(op) and r > budget:
        # channels x positions: runs of positions on the NCHW side, of channels on the NHWC side
        cc = min(c, TRANSFORM_CHANNELS, budget)
        nr = budget // cc
        return [(ni, c0, min(c, c0 + cc), r0, min(r, r0 + nr))
                for ni in range(n) for c0 in range(0, c, cc) for r0 in range(0, r, nr)]
    for ni in range(n):
        if r <= budget:
            step = max(1, budget // r)
            out += [(ni, c0, min(c, c0 + step), 0, r) for c0 in range(0, c, step)]
        else:
            out += [(ni, ci, ci + 1, r0, min(r, r0 + budget)) for ci in range(c) for r0 in range(0, r, budget)]
    return out


def row_walk(op) -> bool:
    """Does walking the op's input rows outermost (rows=True) give it more than one band of rows to start
    on: a pool with several output rows, an NCHW-shaped elementwise op with several rows?  (A global
    pool reads every row for its one output row.)"""
    if isinstance(op, Pool2d):
        return op.out_hw[0] > 1
    return isinstance(op, Elementwise) and len(op.shape) == 4 and op.shape[2] > 1


ROW_TILES = 8      # row tiles a rows-outermost consumer aims for: its first waits for an eighth of the producer


def elementwise_row_tiles(op: Elementwise, budget: int) -> list[tuple[int, int, int, int, int]]:
    """(n, c0, c1, r0, r1) tiles of at most `budget` elements, rows outermost: whole rows of every channel,
    else one row of a channel range, else part of one row of one channel (r: h * W + w)."""
    n, c, h, w = op.shape
    out = []
    for ni in range(n):
        if c * w <= budget:
            nh = min(h, budget // (c * w))
            out += [(ni, 0, c, h0 * w, min(h, h0 + nh) * w) for h0 in range(0, h, nh)]
        elif w <= budget:
            cc = budget // w
            out += [(ni, c0, min(c, c0 + cc), hi * w, (hi + 1) * w) for hi in range(h) for c0 in range(0, c, cc)]
        else:
            out += [(ni, ci, ci + 1, hi * w + w0, hi * w + min(w, w0 + budget))
                    for hi in range(h) for ci in range(c) for w0 in range(0, w, budget)]
    return out


def row_tile(op: Elementwise | Pool2d, cfg: Config) -> int | tuple[int, int]:
    """The tile a rows-outermost consumer takes in `cfg`: about ROW_TILES row tiles (an elementwise op's
    element budget; a pool's (channels, output rows), every channel where they fit)."""
    x = Buffer("x", "ddr", 1)
    if isinstance(op, Pool2d):
        return PoolLowering(op, x, x, cfg, "L", rows=True).row_tile()
    n, c, h, w = op.shape
    default = ElementwiseLowering(op, [x, x], x, cfg, "L", rows=True).budget      # what fits, in ELEMENTWISE_TILES
    return max(1, min(default, c * w * -(-h // ROW_TILES)))


class ElementwiseLowering:
    """add / mul / clip / requantize over VBUF tiles (or a Part of them: every count-th tile).

    Parts of one op share its DDR constants: pass the first part's lowering as `shared`.
    """

    def __init__(self, op: Elementwise, ins: list[Buffer], y: Buffer, cfg: Config, name: str,
                 budget: int | None = None, part: Part | None = None,
                 shared: "ElementwiseLowering | None" = None, roles: dict[str, str] | None = None,
                 depths: dict[str, int] | None = None, rows: bool = False, out_rows: bool = False):
        self.op, self.ins, self.y, self.part = op, list(ins), y, part
        self.rows = rows       # ins[0] is kept row by row in DM: walk rows outermost
        self.out_rows = out_rows    # y is an intermediate kept row by row in DM (a conv reads it): likewise
        self.walk_rows = rows or out_rows
        if op.b_const is not None:      # a constant b: a DDR buffer of its own (NCHW), shared by the parts
            self.ins.append(shared.ins[1] if shared is not None else const_b_buffer(op, name))
        if self.walk_rows and len(op.shape) != 4:
            raise CompileError(f"{op.kind}: a rows-outermost walk needs an NCHW tensor, not {op.shape}")
        self.name = name if part is None else name + part.suffix
        self.vu, self.ch = (0, 0) if part is None else (part.vu, part.ch)
        in_bytes = 4 if op.in_dtype == "int32" else 1
        # a broadcast b (one value per channel, or one) is loaded into VBUF once, before the tiles
        self.bcast = broadcast_strides(op)
        # slot a is loaded, computed in place and stored: three slots (see double_buffer.pipeline)
        per_elem = 3 * in_bytes + (2 if op.binary and self.bcast is None else 0)
        per_channel = channel_table(op)
        self.per_channel = per_channel is not None
        self.lut = op.mode == "lut"         # its 256-entry table in VBUF, loaded once like a per-channel one
        # bytes per channel: a float32 scale, or (M, S), or batch_norm's float32 (scale, offset)
        self.entry = per_channel[0].nbytes if self.per_channel else 0
        n, c, r = elementwise_ncr(op)
        table = c * self.entry if self.per_channel else (LUT_BYTES if self.lut else 0)
        b_values = 0 if self.bcast is None else int(np.prod(op.b_shape))
        if b_values > cfg.vbuf_bytes // 4:
            raise CompileError(f"{op.kind}: b of shape {tuple(op.b_shape)} ({b_values} bytes) broadcast to "
                               f"{tuple(op.shape)} does not fit a quarter of VBUF ({cfg.vbuf_bytes} bytes), where it "
                               f"is kept for the whole op")
        table += -(-b_values // 64) * 64
        fit = (cfg.vbuf_bytes - table - 256) // per_elem // 64 * 64
        self.budget = budget or max(1, min(fit, -(-n * c * r // ELEMENTWISE_TILES)))
        self.slots = Slots()
        depths = {"a": 3, "b": 2, **(depths or {})}
        self.role = {k: f"{self.name}_{v}" for k, v in {"a": "a", "b": "b", **(roles or {})}.items()}
        self.slots.declare(self.role["a"], "vbuf", self.budget * in_bytes, depth=depths["a"], unit=self.vu)
        if op.binary and self.bcast is None:
            self.slots.declare(self.role["b"], "vbuf", self.budget, depth=depths["b"], unit=self.vu)
        self.b_vbuf = Buffer(f"{self.name}_b_vbuf", "vbuf", b_values, unit=self.vu) if self.bcast else None
        self.table_ddr = self.table_vbuf = None
        if self.per_channel:
            t, tname = per_channel, f"{name}_{TABLE_SUFFIX.get(op.mode, 'fs' if op.scale is not None else 'ms')}"
            self.table_ddr = (shared.table_ddr if shared is not None else
                              Buffer(tname, "ddr", t.nbytes, dtype="int32", shape=t.shape, data=t))
            self.table_vbuf = Buffer(f"{self.name}_ms_vbuf", "vbuf", t.nbytes, unit=self.vu)
        if self.lut:
            self.table_ddr, self.table_vbuf = lut_table(op.entries(), name, self.name, self.vu,
                                                        shared.table_ddr if shared is not None else None)

    def tiles(self) -> list[tuple[int, int, int, int, int]]:
        """(n, c0, c1, r0, r1) of this lowering's tiles (its part's share)."""
        tiles = (elementwise_row_tiles if self.walk_rows else elementwise_tiles)(self.op, self.budget)
        return tiles if self.part is None else tiles[self.part.index::self.part.count]

    def n_tiles(self) -> int:
        """How many tiles the lowering has."""
        return len(self.tiles())

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses."""
        extra = [self.table_ddr, self.table_vbuf] if self.per_channel or self.lut else []
        extra += [self.ins[1]] if self.op.b_const is not None else []
        return extra + ([self.b_vbuf] if self.bcast else []) + self.slots.all()

    def steps(self) -> list[Step]:
        """The table load (per-channel requantize) or b's (a broadcast b), then one Step per tile."""
        op = self.op
        n, c, r = elementwise_ncr(op)
        steps = []
        if self.bcast:       # b's bytes are the same in every layout (broadcast_problem)
            s = Step()
            size = self.b_vbuf.nbytes
            s.loads.append(Dma(self.ch + CH_B, Ref(self.b_vbuf), Ref(self.ins[1]), (size,), (1,), (1,), elem=1,
                               comment=f"{self.name}: b, {size} value(s) broadcast"))
            steps.append(s)
        if self.per_channel:
            s = Step()
            what = TABLE_WHAT.get(op.mode, "float32 scale" if self.entry == 4 else "(M, S)")
            s.loads.append(Dma(self.ch + CH_B, Ref(self.table_vbuf), Ref(self.table_ddr), (c * self.entry // 4,),
                               (4,), (4,), elem=4, comment=f"{self.name}: {what} table"))
            steps.append(s)
        if self.lut:
            steps.append(Step(loads=[lut_load(self.ch + CH_B, self.table_vbuf, self.table_ddr, self.name)]))
        esz = 4 if op.in_dtype == "int32" else 1
        if self.rows:      # x is the producer's intermediate, kept row by row in DM; b and y in DDR
            lx, lb, ly = "rows", op.x_layout, op.y_layout
        elif self.out_rows:     # x (and b) in DDR, y the intermediate a conv reads row by row in DM
            lx, lb, ly = op.x_layout, (op.x_layout if op.b_const is None else "nchw"), "rows"
        else:              # VBUF holds a tile as [channel][position] whatever the DDR layouts: only their strides change
            lx, ly = (op.x_layout, op.y_layout) if strided(op) else ("nchw", "nchw")
            lb = lx if op.b_const is None else "nchw"
        operands = 2 if op.binary else 1
        for ti, tile in enumerate(self.tiles()):
            ni, c0, c1, r0, r1 = tile
            ch_a, ch_b = (LOAD_CHANNELS[(operands * ti + j) % len(LOAD_CHANNELS)] for j in range(2))
            s = Step()
            where = f"{self.name}: tile n {ni} c {c0}..{c1 - 1} r {r0}..{r1 - 1}"
            nc, nr = c1 - c0, r1 - r0
            s.loads.append(Note(where + ": loads"))
            a = self.slots.next(self.role["a"])
            s.loads += self._moves(ch_a, a, self.ins[0], lx, tile, esz, True)
            b = None
            if op.binary and self.bcast is None:
                b = self.slots.next(self.role["b"])
                s.loads += self._moves(ch_b, b, self.ins[1], lb, tile, 1, True)
            s.compute.append(Note(where + ": VU"))
            s.compute.append(self._vu(a, b, nc, nr, c0, ni, r0))
            s.epilogue += self._moves(CH_OUT, a, self.y, ly, tile, 1, False)
            steps.append(s)
        return steps

    def _moves(self, ch: int, tile: Buffer, ddr: Buffer, layout: str, box: tuple[int, int, int, int, int],
               esz: int, load: bool) -> list[Dma]:
        """The DMAs between a VBUF tile [channel][position] and a tensor in `layout` ("rows": the intermediate
        kept row by row): one per run of channels the layout addresses alike (one unblocked; a blocked
        layout's full blocks, then the rest).  Walking rows, a tile is whole rows or part of one."""
        ni, c0, c1, r0, r1 = box
        nr = r1 - r0
        shape = self.op.shape if self.walk_rows else elementwise_ncr(self.op)
        out = []
        for ca, k, nblk, off, bs, (sn, sc, *pos) in _runs(shape, layout, c0, c1):
            if len(pos) == 1:
                first, dims, far = r0 * pos[0], (nr,), (pos[0],)
            else:
                w = shape[3]
                h0, w0 = divmod(r0, w)
                dims = (w, nr // w) if w0 == 0 and nr % w == 0 else (nr, 1)
                first, far = h0 * pos[0] + w0 * pos[1], (pos[1], pos[0])
            dims += (k, nblk)
            far_st = tuple(v * esz for v in far + (sc, bs))
            near_st = tuple(v * esz for v in _dense(dims))
            far_ref, near = Ref(ddr, (ni * sn + off + first) * esz), Ref(tile, (ca - c0) * nr * esz)
            where = f"{self.name}: {ddr.name} -> {tile.name}" if load else f"{self.name}: {tile.name} -> {ddr.name}"
            out.append(ddr_order(Dma(self.ch + ch, near, far_ref, dims, far_st, near_st, elem=esz, comment=where)
                                 if load else Dma(self.ch + ch, far_ref, near, dims, near_st, far_st, elem=esz,
                                                  comment=where)))
        return out
    def _vu(self, a: Buffer, b: Buffer | None, nc: int, nr: int, c0: int, ni: int = 0, r0: int = 0) -> Vu:
        b_op = self._b_operand(b, nr, c0, ni, r0) if self.op.binary else None
        table = Ref(self.table_vbuf, c0 * self.entry) if self.per_channel else (
            Ref(self.table_vbuf) if self.lut else None)
        return elementwise_vu(self.op, Ref(a), b_op, table, nc, nr, self.vu, self.name)

    def _b_operand(self, b: Buffer | None, nr: int, c0: int, ni: int = 0, r0: int = 0) -> tuple[Ref, tuple[int, int]]:
        """b's Ref and (position, channel) strides for the tile at image ni, channel c0, position r0: the
        tile's slot, or the broadcast b in VBUF (stride 0 along the axes it repeats)."""
        bcast = self.b_vbuf
        if bcast is None:
            return Ref(b), (1, nr)
        sn, sc, sr = self.bcast
        return Ref(bcast, ni * sn + c0 * sc + r0 * sr), (sr, sc)


def const_b_buffer(op: Elementwise, name: str) -> Buffer:
    """The DDR buffer holding a binary op's constant b (op.b_const, NCHW)."""
    b = np.ascontiguousarray(op.b_const)
    return Buffer(f"{name}_bconst", "ddr", b.nbytes, dtype="int8", shape=b.shape, data=b)


TABLE_SUFFIX = {"batch_norm": "bn"}
TABLE_WHAT = {"batch_norm": "float32 (scale, offset)"}
"""The DDR name suffix and the comment of the per-channel tables of ops other than requantize."""


def has_channel_table(op: Elementwise) -> bool:
    """Does the op read a per-channel table in VBUF (a per-channel requantize, a batch_norm)?"""
    return isinstance(op, BatchNorm) or requant_per_channel(op)


def channel_table(op: Elementwise) -> np.ndarray | None:
    """The op's per-channel table in VBUF (int32 [C] or [C, 2]: requant_table, batch_norm's pairs), None if
    it has none."""
    if isinstance(op, BatchNorm):
        return op.table()
    return requant_table(op) if requant_per_channel(op) else None


def requant_per_channel(op: Elementwise) -> bool:
    """Is op a requantize with one (M, S) or float32 scale per channel (a table in VBUF)?"""
    per_channel = op.scale if op.scale is not None else op.ma
    return op.mode == "requantize" and np.ndim(per_channel) > 0


def requant_table(op: Elementwise) -> np.ndarray:
    """A per-channel requantize's table, int32: the float32 scales' bits [C], or the (M, S) pairs [C, 2]."""
    if op.scale is not None:
        return f32_table(op.scale)
    return np.stack([np.asarray(op.ma), np.asarray(op.shift)], axis=1).astype(np.int32)


def elementwise_vu(op: Elementwise, a: Ref, b: tuple[Ref, tuple[int, int]] | None, table: Ref | None, nc: int,
                   nr: int, unit: int = 0, name: str = "") -> Vu:
    """The VU command of an elementwise tile of nc channels x nr positions, in place at a: b is a binary op's
    other operand and its (position, channel) strides, table a per-channel requantize's entry for the tile's
    first channel (requant_table, in VBUF)."""
    lohi = {"zp_out": op.zp_out, "lo": op.lo, "hi": op.hi}
    d1 = (1, nr)
    if op.mode == "clip":
        return Vu("vu.clip", a, a, None, n=(nr, nc), d_stride=d1, a_stride=d1,
                  scalars={"lo": op.lo, "hi": op.hi}, unit=unit, comment=f"{name}: clip in place")
    if op.mode == "lut":
        return lut_vu(a, table, nr * nc, unit, f"{name}: table lookup in place")
    if isinstance(op, BatchNorm):
        return _batch_norm_vu(op, a, table, nc, nr, unit, name)
    if op.binary:
        return _binary_vu(op, a, b, nc, nr, unit, name)
    esz = 4 if op.in_dtype == "int32" else 1
    a1 = (esz, nr * esz)
    if op.scale is not None:
        return _requant_f32(op, a, table, nc, nr, unit, name)
    if table is not None:
        return Vu("vu.requant.pc", a, a, table, "i8", DT[op.in_dtype], 8,
                  (nr, nc), d1, a1, (0, 8), scalars={"za": op.za, **lohi},
                  unit=unit, comment=f"{name}: requantise per channel in place")
    return Vu("vu.requant", a, a, None, "i8", DT[op.in_dtype], 0, (nr, nc), d1, a1,
              scalars={"za": op.za, "ma": op.ma, "shift": op.shift, **lohi},
              unit=unit, comment=f"{name}: requantise in place")


def lut_table(entries: np.ndarray, name: str, part_name: str, unit: int,
              shared: Buffer | None = None) -> tuple[Buffer, Buffer]:
    """(DDR constant, VBUF buffer) of a lut's 256-entry int8 table; parts of one op share the DDR
    constant (shared: the first part's)."""
    ddr = shared or Buffer(f"{name}_lut", "ddr", LUT_BYTES, dtype="int8", shape=(LUT_BYTES,), data=entries)
    return ddr, Buffer(f"{part_name}_lut_vbuf", "vbuf", LUT_BYTES, unit=unit)


def lut_load(ch: int, vbuf: Buffer, ddr: Buffer, name: str) -> Dma:
    """The DMA of a lut's table into VBUF (once, before the tiles)."""
    return Dma(ch, Ref(vbuf), Ref(ddr), (LUT_BYTES,), (1,), (1,), elem=1, comment=f"{name}: lookup table -> vbuf")


def lut_vu(a: Ref, table: Ref, n: int, unit: int, comment: str) -> Vu:
    """vu.lut over n contiguous int8 at a, in place, through the 256-byte table at `table`."""
    return Vu("vu.lut", a, a, table, "i8", "i8", LUT_BYTES, (n,), (1,), (1,), (0,), unit=unit, comment=comment)


FBIN_MNEMONIC = {"qdq_add": "vu.fsub", "sub": "vu.fsub", "div": "vu.fdiv", "max": "vu.fmax", "min": "vu.fmin"}
"""The VU instruction of each QDQ float binary op: the float Add is vu.fsub with b's scale negated (exact)."""


def binary_command(op: Elementwise) -> tuple[str, dict]:
    """The mnemonic and scalars (but lo, hi) of a binary op's VU command, its first source the op's a (b when
    op.reverse: QLinearAdd's A role, or the first operand of b op a)."""
    if op.mode in FLOAT_BINARY:
        (za, zb), (sa, sb, sy) = op.roles((op.za, op.zb)), op.fscales
        sa, sb = op.roles((sa, sb))
        sb = -sb if op.mode == "qdq_add" else sb
        return FBIN_MNEMONIC[op.mode], {"za": za, "zb": zb, "fscale": f32_bits(sa), "fscale_b": f32_bits(sb),
                                        "fbias": f32_bits(sy), "zp_out": op.zp_out}
    if op.fscales is not None and op.mode == "add":
        ra, rb, c = op.add_params()[:3]
        return "vu.fadd", {"fscale": f32_bits(ra), "fscale_b": f32_bits(rb), "fbias": f32_bits(c),
                           **u8_scalar(op.uint8)}
    if op.fscales is not None:
        return "vu.fmul", {"za": op.za, "zb": op.zb, "fscale": f32_bits(mul_f32_ratio(*op.fscales)),
                           "zp_out": op.zp_out, **u8_scalar(op.uint8)}
    return f"vu.{op.mode}", {"za": op.za, "zb": op.zb, "ma": op.ma, "mb": op.mb, "shift": op.shift,
                             "zp_out": op.zp_out}


def _binary_vu(op: Elementwise, a: Ref, b: tuple[Ref, tuple[int, int]], nc: int, nr: int, unit: int,
               name: str) -> Vu:
    """A binary op's VU command in place at a; reversed, b is the command's first source."""
    d1 = (1, nr)
    (first, first_st), (second, second_st) = op.roles(((a, d1), b))
    mnemonic, sc = binary_command(op)
    what = op.mode + (" (reversed)" if op.reverse else "")
    if op.mode in FLOAT_BINARY:
        what = f"DequantizeLinear, float32 {what}, QuantizeLinear"
    elif op.fscales is not None:
        what = f"float32 {what}"
    return Vu(mnemonic, a, first, second, "i8", "i8", 1, (nr, nc), d1, first_st, second_st,
              scalars={**sc, "lo": op.lo, "hi": op.hi}, unit=unit, comment=f"{name}: {what} in place")


def _batch_norm_vu(op: BatchNorm, a: Ref, table: Ref, nc: int, nr: int, unit: int, name: str) -> Vu:
    """vu.faffine in place: each channel's (new_scale, new_bias) pair at table (stride 0 along the positions)."""
    sc = {"za": op.za, "fscale": f32_bits(op.scale_x), "fbias": f32_bits(op.scale_out), "zp_out": op.zp_out,
          "lo": op.lo, "hi": op.hi}
    return Vu("vu.faffine", a, a, table, "i8", "i8", 8, (nr, nc), (1, nr), (1, nr), (0, 8), scalars=sc, unit=unit,
              comment=f"{name}: DequantizeLinear, float32 BatchNormalization per channel, QuantizeLinear in place")


def _requant_f32(op: Elementwise, a: Ref, table: Ref | None, nc: int, nr: int, unit: int, name: str) -> Vu:
    """vu.requant.f, or vu.requant.fpc with the float32 scale table, in place."""
    esz = 4 if op.in_dtype == "int32" else 1
    sc = {"za": op.za, "zp_out": op.zp_out, "lo": op.lo, "hi": op.hi}
    if table is not None:
        return Vu("vu.requant.fpc", a, a, table, "i8", DT[op.in_dtype], 4,
                  (nr, nc), (1, nr), (esz, nr * esz), (0, 4), scalars=sc,
                  unit=unit, comment=f"{name}: float32 requantise per channel in place")
    return Vu("vu.requant.f", a, a, None, "i8", DT[op.in_dtype], 0, (nr, nc), (1, nr), (esz, nr * esz),
              scalars={**sc, "fscale": f32_bits(op.scale)}, unit=unit,
              comment=f"{name}: float32 requantise in place")


SLIDE_OF = {"vu.pool.acc": "vu.slide.acc", "vu.pool.avg": "vu.slide.avg", "vu.pool.favg": "vu.slide.favg"}
"""The sliding-window engine's form of each window-summing pool instruction (same values, other timing)."""


def fits_slide_engine(cmd: Vu) -> bool:
    """Is the command on the engine's grid (a strides whole steps of positive window strides) with the
    columns its windows span inside the engine's column sums and line buffer (docs/architecture.md)?"""
    if min(cmd.win_stride) < 1:
        return False
    for n, a, ws in zip(cmd.n, cmd.a_stride, cmd.win_stride[::-1]):     # (n0, a_stride0, win_stride_w), ...
        if n > 1 and (a < ws or a % ws):
            return False
    cols = slide_span(cmd.n[0], slide_steps(cmd)[0], cmd.win[1])
    return cols <= SLIDE_MAX_COLS and cmd.win[0] * cols <= SLIDE_LINE_BYTES


def cheaper_engine(cmd: Vu, cfg: Config) -> str:
    """The command's mnemonic, or its sliding-window engine form when the command fits there and the cost
    model prices it lower."""
    if cmd.mnemonic not in SLIDE_OF or not fits_slide_engine(cmd):
        return cmd.mnemonic
    slide = dataclasses.replace(cmd, mnemonic=SLIDE_OF[cmd.mnemonic])
    return slide.mnemonic if vu_cycles(slide, cfg) < vu_cycles(cmd, cfg) else cmd.mnemonic


def pool_engines(op: Pool2d) -> tuple[str, ...]:
    """The instructions a pool's window stage can run on: vu.pool.max, or a summing pool's accumulator
    instruction and its sliding-window engine form."""
    if op.mode == "max":
        return ("vu.pool.max",)
    if op.mode == "mean":
        return ("vu.pool.fmean",)
    if op.mode == "bnavg":
        return ("vu.pool.faffavg",)
    if op.is_float and not (op.mode == "avg" and op.is_global):
        acc = "vu.pool.favg"
    else:
        acc = "vu.pool.avg" if op.mode == "avg" and not op.is_float else "vu.pool.acc"
    return acc, SLIDE_OF[acc]


def default_pool_engine(op: Pool2d, cfg: Config, tile: tuple[int, int] | None = None) -> str:
    """The instruction a pool's window runs on by default (pool_engines: the one the cost model prices lower
    on a whole tile)."""
    x = Buffer("x", "ddr", 1)
    return PoolLowering(op, x, x, cfg, "L", tile).engine


def pool_fill(op: Pool2d) -> int:
    """What a pool's padding holds in its input tiles: -128 for max (never wins), 0 for sums, x_zp for an
    average that counts it (onnxruntime's count_include_pad=1 counts it as a real x_zp; the float form
    subtracts x_zp, so it adds 0), 0 for an integer average over the real elements only."""
    return {"max": -128, "sum": 0, "mean": 0, "bnavg": 0,
            "avg": op.x_zp if op.count_include_pad or op.is_float else 0}[op.mode]


def fmean_phase(op: Pool2d, ni: int, c0: int) -> int:
    """vu.mode of a tile of a ReduceMean from image ni, channel c0: where that plane starts past a 16-byte
    boundary in onnxruntime's float32 [N, C, H, W] tensor (64-byte aligned), in floats."""
    _, c, h, w = op.x_shape
    return (ni * c + c0) * h * w % MEAN_LANES


def favg_scalars(op: Pool2d) -> dict[str, int]:
    """vu.pool.favg's scalars: sum(sx * (x - x_zp)) / count / sy + zp_out, clamped to int8, as onnxruntime (vu.mode
    2 for a float AveragePool then QuantizeLinear: rounded, then + zp_out)."""
    mode = {"mode": FAVG_QUANTIZE_LINEAR} if op.quantize_linear else u8_scalar(op.uint8)
    return {"za": op.x_zp, "fscale": f32_bits(op.scale_x), "fscale_b": f32_bits(op.scale_out), "zp_out": op.zp_out,
            "lo": -128, "hi": 127, **mode}


class PoolLowering:
    """max / sum / avg pooling over tiles of channels x output rows (or a Part: every count-th tile).

    Sum pooling is one vu.pool.acc per tile, integer average pooling one vu.pool.avg (both read the
    window a byte a lane).  The float average pool (QLinearAveragePool) is one vu.pool.favg per tile;
    the float global one (and a float average pool that onnxruntime runs as global) is vu.pool.acc
    then vu.requant.f.

    Parts of one op share its DDR constants: pass the first part's lowering as `shared`.
    """

    def __init__(self, op: Pool2d, x: Buffer, y: Buffer, cfg: Config, name: str,
                 tile: tuple[int, int] | None = None, part: Part | None = None,
                 shared: "PoolLowering | None" = None, roles: dict[str, str] | None = None,
                 depths: dict[str, int] | None = None, engine: str | None = None, rows: bool = False):
        self.op, self.x, self.y, self.part, self.cfg = op, x, y, part, cfg
        self.rows = rows       # x is kept row by row in DM: walk output rows outermost
        self.name = name if part is None else name + part.suffix
        self.vu, self.ch = (0, 0) if part is None else (part.vu, part.ch)
        n, c, h, w = op.x_shape
        oh, ow = op.out_hw
        t, l, b, r = op.padding
        self.iw = w + l + r
        self.out_bytes = 4 if op.mode == "sum" else 1
        self.div = None
        table = 0
        self.global_f32 = op.mode == "avg" and op.is_float and op.is_global
        # the result slot holds int32 sums (sum pooling, and the float global average before its
        # requantisation), else int8: vu.pool.avg and vu.pool.max write the result directly
        self.slot_bytes = 4 if op.mode == "sum" or self.global_f32 else 1
        if op.mode == "avg" and not self.global_f32:
            if op.count_include_pad:
                div = np.full((1,), op.kernel[0] * op.kernel[1], dtype=np.int32)
            else:
                div = real_counts(h, w, op.kernel, op.stride, op.padding).astype(np.int32)
            self.div = (shared.div if shared is not None else
                        Buffer(f"{name}_div", "ddr", div.nbytes, dtype="int32", shape=div.shape, data=div))
            self.div_vbuf = Buffer(f"{self.name}_div_vbuf", "vbuf", div.nbytes, unit=self.vu)
            table = div.nbytes
        # a BatchNormalization's (new_scale, new_bias) pairs come with each tile, one pair a channel
        self.pairs = None
        if op.mode == "bnavg":
            pairs = op.table()
            self.pairs = (shared.pairs if shared is not None else
                          Buffer(f"{name}_pairs", "ddr", pairs.nbytes, dtype="int32", shape=pairs.shape, data=pairs))
        # a per-position count table larger than a quarter of VBUF comes in a tile's rows at a time
        self.tile_counts = self.div is not None and not op.count_include_pad and table > cfg.vbuf_bytes // 4
        if self.tile_counts:
            table = 0
        self.cap = cfg.vbuf_bytes - table - 256
        self.cc, self.th = tile or self._choose(self.cap)
        ih = self.in_rows(self.th)
        self.slots = Slots()
        depths = {"in": 2, "out": 2, **(depths or {})}
        self.role = {k: f"{self.name}_{v}" for k, v in {"in": "in", "out": "out", **(roles or {})}.items()}
        self.slots.declare(self.role["in"], "vbuf", self.cc * ih * self.iw, depth=depths["in"], unit=self.vu)
        self.slots.declare(self.role["out"], "vbuf", self.cc * self.th * ow * self.slot_bytes,
                           depth=depths["out"], unit=self.vu)
        if self.tile_counts:
            self.slots.declare(f"{self.name}_cnt", "vbuf", self.th * ow * 4, unit=self.vu)
        if self.pairs is not None:
            self.slots.declare(f"{self.name}_pairs", "vbuf", self.cc * PAIR_BYTES, depth=2, unit=self.vu)
        self.engine = self._engine(engine)

    def _engine(self, engine: str | None) -> str:
        """The instruction every tile's window runs on: the one asked for, or the one the cost model prices
        lower on a whole tile."""
        engines = pool_engines(self.op)
        if engine is None:
            if len(engines) == 1:
                return engines[0]
            probe = Ref(Buffer("probe", "vbuf", 1))
            return cheaper_engine(self._window(engines[0], probe, probe, probe, self.cc, self.th), self.cfg)
        if engine not in engines:
            raise CompileError(f"{self.op.kind}: its window runs on {' or '.join(engines)}, not {engine}")
        if engine in SLIDE_OF.values():
            probe = Ref(Buffer("probe", "vbuf", 1))
            if not fits_slide_engine(self._window(engine, probe, probe, probe, self.cc, self.th)):
                raise CompileError(f"{self.op.kind}: {engine} needs windows on its grid within "
                                   f"{SLIDE_MAX_COLS} columns and a {SLIDE_LINE_BYTES}-byte line buffer "
                                   f"(docs/architecture.md); this pool's rows are {self.iw} wide")
        return engine

    def in_rows(self, th: int) -> int:
        """Input rows (halo included) that th output rows read."""
        return (th - 1) * self.op.stride[0] + self.op.kernel[0]

    def tile_bytes(self, cc: int, th: int) -> int:
        """VBUF bytes of a tile of cc channels x th output rows, both slots."""
        per_row = cc * self.slot_bytes + (4 if self.tile_counts else 0)
        pairs = cc * PAIR_BYTES if self.op.mode == "bnavg" else 0
        return 2 * (cc * self.in_rows(th) * self.iw + th * self.op.out_hw[1] * per_row + pairs)

    def _choose(self, cap: int) -> tuple[int, int]:
        c = self.op.x_shape[1]
        oh = self.op.out_hw[0]
        for th in sorted({oh} | {v for v in (64, 32, 16, 8, 4, 2, 1) if v < oh}, reverse=True):
            if self.tile_bytes(1, th) <= cap:
                tiles_per_channel = -(-oh // th) * self.op.x_shape[0]
                cc = min(c, max(1, cap // self.tile_bytes(1, th)),
                         max(1, -(-c * tiles_per_channel // MIN_TILES)))
                return cc, th
        raise CompileError(f"{self.op.kind}: one output row of one channel needs "
                           f"{self.tile_bytes(1, 1)} bytes of VBUF, more than its {cap}")

    def row_tile(self) -> tuple[int, int]:
        """(channels, output rows) of a rows-outermost tile in the VBUF it may use: at most 1 / ROW_TILES
        of the output rows, every channel if such a tile fits (else as many as one row takes)."""
        c, oh, cap = self.op.x_shape[1], self.op.out_hw[0], self.cap
        top = max(1, -(-oh // ROW_TILES))
        th = next((t for t in range(top, 0, -1) if self.tile_bytes(c, t) <= cap), 1)
        cc = next((k for k in range(c, 0, -1) if self.tile_bytes(k, th) <= cap), None)
        if cc is None:
            raise CompileError(f"{self.op.kind}: one output row of one channel needs "
                               f"{self.tile_bytes(1, 1)} bytes of VBUF, more than its {cap}")
        return cc, th

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses."""
        extra = [b for b in (self.div, self.pairs) if b is not None]
        if self.div is not None and not self.tile_counts:
            extra.append(self.div_vbuf)
        return extra + self.slots.all()

    def steps(self) -> list[Step]:
        """The divisor load (average pooling), then one Step per tile."""
        op = self.op
        n, c, h, w = op.x_shape
        oh, ow = op.out_hw
        steps = []
        if self.div is not None and not self.tile_counts:
            s = Step()
            s.loads.append(Dma(self.ch + CH_B, Ref(self.div_vbuf), Ref(self.div), (self.div.nbytes // 4,), (4,),
                               (4,), elem=4, comment=f"{self.name}: divisors"))
            steps.append(s)
        for ni, c0, oh0 in self.tiles():
            steps.append(self._tile(ni, c0, min(c, c0 + self.cc) - c0, oh0, min(self.th, oh - oh0)))
        return steps

    def tiles(self) -> list[tuple[int, int, int]]:
        """(n, first channel, first output row) of this lowering's tiles (its part's share)."""
        n, c, _, _ = self.op.x_shape
        oh = self.op.out_hw[0]
        if self.rows:
            tiles = [(ni, c0, oh0) for ni in range(n) for oh0 in range(0, oh, self.th) for c0 in range(0, c, self.cc)]
        else:
            tiles = [(ni, c0, oh0) for ni in range(n) for c0 in range(0, c, self.cc) for oh0 in range(0, oh, self.th)]
        return tiles if self.part is None else tiles[self.part.index::self.part.count]

    def n_tiles(self) -> int:
        """How many tiles the lowering has."""
        return len(self.tiles())

    def _count_strides(self) -> tuple[int, int, int]:
        """b's strides of an average: one count (stride 0), or one per output position."""
        return (0, 0, 0) if self.op.count_include_pad else (4, 4 * self.op.out_hw[1], 0)

    def _counts(self, s: Step, oh0: int, th: int) -> Ref:
        """b of an average: the window size, or the per-position counts of this tile's rows (loaded with
        the tile when the whole table would crowd VBUF)."""
        if self.op.count_include_pad:
            return Ref(self.div_vbuf, 0)
        ow = self.op.out_hw[1]
        if not self.tile_counts:
            return Ref(self.div_vbuf, oh0 * ow * 4)
        cnt = self.slots.next(f"{self.name}_cnt")
        s.loads.append(Dma(self.ch + CH_B, Ref(cnt), Ref(self.div, oh0 * ow * 4), (th * ow,), (4,), (4,), elem=4,
                           comment=f"{self.name}: counts of rows {oh0}..{oh0 + th - 1} -> {cnt.name}"))
        return Ref(cnt)

    def _pairs(self, s: Step, c0: int, cc: int) -> Ref:
        """b of a BatchNormalization's pool: the (new_scale, new_bias) pairs of the tile's channels, loaded with it."""
        slot = self.slots.next(f"{self.name}_pairs")
        s.loads.append(Dma(self.ch + CH_B, Ref(slot), Ref(self.pairs, c0 * PAIR_BYTES), (2 * cc,), (4,), (4,), elem=4,
                           comment=f"{self.name}: pairs of channels {c0}..{c0 + cc - 1} -> {slot.name}"))
        return Ref(slot)

    def _window(self, mnemonic: str, out: Ref, inp: Ref, counts: Ref | None, cc: int, th: int,
                phase: int = 0) -> Vu:
        """The window command of a tile of cc channels x th output rows on `mnemonic` (counts: b of an
        average, or the tile's (new_scale, new_bias) pairs; phase: vu.mode of a ReduceMean's first plane)."""
        op, iw = self.op, self.iw
        ow = op.out_hw[1]
        sh, sw = op.stride
        n3, win = (ow, th, cc), dict(win=op.kernel, win_stride=(iw, 1))
        a_st = (sw, sh * iw, self.in_rows(th) * iw)
        engine = " (sliding-window engine)" if mnemonic in SLIDE_OF.values() else ""
        if mnemonic == "vu.pool.max":
            return Vu(mnemonic, out, inp, None, "i8", "i8", 0, n3, (1, ow, th * ow), a_st, **win, unit=self.vu,
                      comment=f"{self.name}: window max")
        if mnemonic == "vu.pool.fmean":
            return Vu(mnemonic, out, inp, None, "i8", "i8", 0, n3, (1, ow, th * ow), a_st, **win,
                      scalars={**favg_scalars(op), "mode": phase}, unit=self.vu,
                      comment=f"{self.name}: float32 mean in onnxruntime's order")
        if mnemonic == "vu.pool.faffavg":
            return Vu(mnemonic, out, inp, counts, "i8", "i8", PAIR_BYTES, n3, (1, ow, th * ow), a_st,
                      (0, 0, PAIR_BYTES), **win, scalars={**favg_scalars(op), "mode": int(op.relu)}, unit=self.vu,
                      comment=f"{self.name}: float32 BatchNormalization{', Relu' if op.relu else ''} and mean "
                              "in onnxruntime's order")
        if mnemonic.endswith(".favg"):
            return Vu(mnemonic, out, inp, counts, "i8", "i8", 4, n3, (1, ow, th * ow), a_st, self._count_strides(),
                      **win, scalars=favg_scalars(op), unit=self.vu,
                      comment=f"{self.name}: float32 window average{engine}")
        if mnemonic.endswith(".avg"):
            return Vu(mnemonic, out, inp, counts, "i8", "i8", 4, n3, (1, ow, th * ow), a_st, self._count_strides(),
                      **win, unit=self.vu, comment=f"{self.name}: window average{engine}")
        return Vu(mnemonic, out, inp, None, "i32", "i8", 0, n3, (4, 4 * ow, 4 * th * ow), a_st, **win,
                  unit=self.vu, comment=f"{self.name}: window sum{engine}")

    def full_windows(self, oh0: int, th: int) -> tuple[tuple[int, int], tuple[int, int]]:
        """(rows, columns) of the tile's outputs whose windows hold no padding, as ranges [lo, hi) relative
        to the tile (empty when lo >= hi)."""
        op = self.op
        _, _, h, w = op.x_shape
        t, l, _, _ = op.padding
        (kh, kw), (sh, sw), (oh, ow) = op.kernel, op.stride, op.out_hw

        def full(pad: int, size: int, k: int, step: int, n: int) -> tuple[int, int]:
            return -(-pad // step), min(n, (size + pad - k) // step + 1) if size + pad >= k else 0

        (i0, i1), (j0, j1) = full(t, h, kh, sh, oh), full(l, w, kw, sw, ow)
        return (min(max(i0 - oh0, 0), th), min(max(i1 - oh0, 0), th)), (j0, j1)

    def _windows(self, out: Ref, inp: Ref, counts: Ref | None, cc: int, oh0: int, th: int,
                 phase: int = 0) -> list[Vu]:
        """A tile's window commands: one, or, for an average whose per-position counts (four bytes an
        output) would cost the sliding-window engine more than the windows' input, the windows without
        padding on one count read once a plane and the border bands on the table, when the cost model
        prices that lower."""
        whole = self._window(self.engine, out, inp, counts, cc, th, phase)
        if counts is None or self.op.count_include_pad or self.engine not in SLIDE_OF.values():
            return [whole]
        (r0, r1), (j0, j1) = self.full_windows(oh0, th)
        if r0 >= r1 or j0 >= j1:
            return [whole]
        ow = self.op.out_hw[1]
        bands = [((0, r0), (0, ow)), ((r1, th), (0, ow)), ((r0, r1), (0, j0)), ((r0, r1), (j1, ow))]
        cmds = [self._rect(whole, (r0, r1), (j0, j1), one_count=True)]
        cmds += [self._rect(whole, rows, cols, one_count=False) for rows, cols in bands
                 if rows[0] < rows[1] and cols[0] < cols[1]]
        cheaper = sum(vu_cycles(c, self.cfg) for c in cmds) < vu_cycles(whole, self.cfg)
        return cmds if cheaper else [whole]

    def _rect(self, whole: Vu, rows: tuple[int, int], cols: tuple[int, int], one_count: bool) -> Vu:
        """The tile's window command cut to output rows x columns [lo, hi); one_count: every window there is
        whole, so its first count serves them all (b strides 0: read once a plane)."""
        (r0, r1), (j0, j1) = rows, cols
        ow = self.op.out_hw[1]
        sh, sw = self.op.stride
        at = r0 * ow + j0
        where = ("windows without padding, one count" if one_count
                 else f"border rows {r0}..{r1 - 1} columns {j0}..{j1 - 1}")
        return dataclasses.replace(
            whole, d=whole.d + at * whole.d_stride[0], a=whole.a + r0 * sh * self.iw + j0 * sw,
            b=whole.b + at * whole.b_stride[0], n=(j1 - j0, r1 - r0, whole.n[2], whole.n[3]),
            b_stride=(0, 0, 0, 0) if one_count else whole.b_stride, comment=f"{whole.comment}: {where}")

    def _tile(self, ni: int, c0: int, cc: int, oh0: int, th: int) -> Step:
        op, iw = self.op, self.iw
        n, c, h, w = op.x_shape
        oh, ow = op.out_hw
        t, l, b, r = op.padding
        sh = op.stride[0]
        ih = self.in_rows(th)
        s = Step()
        where = f"{self.name}: tile n {ni} c {c0}..{c0 + cc - 1} oh {oh0}..{oh0 + th - 1}"
        s.loads.append(Note(where + ": load with halo"))
        inp = self.slots.next(self.role["in"])
        start = oh0 * sh - t
        plo = min(ih, max(0, -start))
        phi = min(ih - plo, max(0, start + ih - h))
        row0 = max(0, min(start, h - 1))
        fill = pool_fill(op)
        for ca, k, nblk, off, bs, (xn, xc, xh, xw) in _runs(op.x_shape, "rows" if self.rows else op.x_layout,
                                                              c0, c0 + cc):
            s.loads.append(ddr_order(Dma(self.ch + CH_A, Ref(inp, (ca - c0) * ih * iw),
                                         Ref(self.x, ni * xn + off + row0 * xh), (iw, ih, k, nblk), (xw, xh, xc, bs),
                                         (1, iw, ih * iw, k * ih * iw), (l, plo, 0, 0), (r, phi, 0, 0),
                                         pad_value=fill, comment=f"{self.name}: x -> {inp.name}")))
        out = self.slots.next(self.role["out"])
        s.compute.append(Note(where + ": VU"))
        counts = self._counts(s, oh0, th) if self.div is not None else None      # an average's divisors
        if self.pairs is not None:
            counts = self._pairs(s, c0, cc)
        s.compute.extend(self._windows(Ref(out), Ref(inp), counts, cc, oh0, th, fmean_phase(op, ni, c0)))
        rb = self.slot_bytes
        if self.global_f32:
            n = op.x_shape[2] * op.x_shape[3]
            sc = {"za": op.x_zp * n, "fscale": f32_bits(global_avg_pool_scale(op.scale_x, op.scale_out, n)),
                  "zp_out": op.zp_out, "lo": -128, "hi": 127}
            s.compute.append(Vu("vu.requant.f", Ref(out), Ref(out), None, "i8", "i32", 0, (ow, th, cc),
                                (1, ow, th * ow), (4, 4 * ow, 4 * th * ow), scalars=sc, unit=self.vu,
                                comment=f"{self.name}: float32 requantise the sums"))
            rb = 1
        if op.y_layout == "nchw":
            dst = Ref(self.y, ((ni * c + c0) * oh + oh0) * ow * rb)
            store = Dma(self.ch + CH_OUT, dst, Ref(out), (th * ow, cc), (rb, th * ow * rb), (rb, oh * ow * rb),
                        elem=rb, comment=f"{self.name}: {out.name} -> {self.y.name}")
            s.epilogue.append(store)
            return s
        for ca, k, nblk, off, bs, (yn, yc, yh, yw) in chan_runs(op.output.shape, op.y_layout, c0, c0 + cc):
            s.epilogue.append(ddr_order(Dma(
                self.ch + CH_OUT, Ref(self.y, (ni * yn + off + oh0 * yh) * rb), Ref(out, (ca - c0) * th * ow * rb),
                (ow, th, k, nblk), (rb, ow * rb, th * ow * rb, k * th * ow * rb),
                (yw * rb, yh * rb, yc * rb, bs * rb), elem=rb, comment=f"{self.name}: {out.name} -> {self.y.name}")))
        return s
