"""A conv2d over a range of shapes: one program that reads its sizes from an argument block.

The CU `ld`s batch, height and width from the block, computes the output
size, the padded width and every DMA, NU and VU size and stride from them in
registers (`setp param, rs, imm`), and loops over tiles of output rows:
full tiles of `th` rows, then the remainder (min(th, rows left)).  Each tile
is loaded with its halo (padding by DMA), convolved and requantised on the NU
(nu.conv.rq; or onto a bias broadcast, drained to VBUF and requantised on the
VU) and stored; three or more buffer sets let later tiles load and convolve
while earlier ones are stored, and the CU waits for the store of the tile a
set count back before reusing its buffers.  With few input channels the
kernel's columns (the column fold) or its whole window (the full-tap fold,
`rows // c` taps a block, a 1x1 conv on the NU) go into the array's rows.
docs/dynamic.md, explains it.

The code is written through a `Scope` (compiler/dynamic/asm.py): `lower_conv`
into any program, `program` as a program of its own.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnpsim.config import Config

from ..cost import conv_cycles, vector_cycles
from ..dims import Dim, DynamicOp, check_divisor, window_out
from ..errors import CompileError
from ..lowering.conv_plan import output_stage_fits
from ..lowering.depthwise import depthwise_weights, uses_depthwise_mode
from ..lowering.layout import bias_table, conv_view, fold_taps, fscale_table, nu_weights, requant_table
from ..ops import Conv2d
from .asm import ZERO, Mem, Pool, Reg, Scope, Sem
from .common import (Part, TileIO, TileRegs, axis_name, column_pads, ddr_io, dma_box, drain, emit_out_size,
                     halo_rows, load_size, next_tile, one_program, out_axis, target_notes, tile_registers)

MAX_WIDTHS = 4096       # widths a dynamic conv's range may span: its tile table has one word per width
TILE_OVERHEAD = 120     # cycles of CU set-up a tile's latency takes beyond its units' work: the pricing's guess


@dataclass(frozen=True)
class Region:
    """Where one op's tables and two buffer sets go: all of the machine for one op, a share of it for each
    op of a fused chain (its ops run at once, each on its own tile)."""

    table: int = 0                  # VBUF offset of the (M, S) table
    vbuf: int | None = None         # VBUF offset of the two sets (None: after the table)
    wbuf: int = 0
    dm: int = 0                     # the bias table's
    ibuf: int = 0                   # IBUF and ABUF offsets of the two sets
    abuf: int = 0
    ibuf_bytes: int | None = None   # bytes for the two sets (None: the whole buffer, VBUF after the table)
    abuf_bytes: int | None = None
    vbuf_bytes: int | None = None


class _Geometry:
    """The static facts of the op and the two buffer sets (each half of its IBUF, ABUF, VBUF after the table)."""

    def __init__(self, op: DynamicOp, cfg: Config, region: Region = Region(), sets: int = 2,
                 by_block: bool = False, rq: bool = True, taps: bool = False):
        big: Conv2d = op.largest
        if not isinstance(big, Conv2d):
            raise CompileError(f"dynamic shapes are lowered for conv2d only so far, not {op.kind}")
        self.op, self.cfg = op, cfg
        self.R, self.C = cfg.nu_rows, cfg.nu_cols
        n, c, h, w = big.x_shape
        self.c, self.o = c, big.out_channels
        self.kh, self.kw = big.kernel
        self.sh, self.sw = big.stride
        self.dh, self.dw = big.dilation
        self.pt, self.pl, self.pb, self.pr = big.padding
        self.ekh, self.ekw = (self.kh - 1) * self.dh + 1, (self.kw - 1) * self.dw + 1
        check_divisor("dynamic conv2d", "stride height", self.sh)
        check_divisor("dynamic conv2d", "stride width", self.sw)
        self.in_cb, self.out_cb = -(-c // self.R), -(-self.o // self.C)
        self.entry = 4 if big.scale is not None else 8    # table bytes per channel: float32 scale, or (M, S)
        # Depthwise (one channel per group, no multiplier) on nu.dwconv: column j of block b is channel
        # b * C + j, its bias starts the accumulator.  Any other grouping runs as a dense conv whose
        # weights are zero between groups (block-diagonal: exact, the NU multiplies the zeros too).
        view = conv_view(big)
        self.depthwise = uses_depthwise_mode(view, self.R, self.C)
        self.weight = big.weight if big.groups == 1 or self.depthwise else block_diagonal(big.weight, big.groups)
        # Few channels: `fold` of the kernel's columns go side by side in the array's rows (row kwi * c + ci
        # holds input channel ci shifted by kwi columns), so the NU runs a kernel of ceil(kw / fold) columns
        # fold columns apart (tap j, row group kwi: column j * fold + kwi, zero past kw).
        f = min(self.kw, self.R // c) if not self.depthwise else 1
        self.fold = f if f > 1 else 1
        self.kw_nu = -(-self.kw // self.fold)
        self.kh_nu = self.kh
        # taps (the full-tap fold, an im2col of the tile): the window's taps in the array's rows, tpb = rows
        # // c of them a block (no tap straddles two), tap k = i * kw + j in block k // tpb, rows (k % tpb) * c
        # .. + c - 1; the NU runs a 1x1 conv of stride 1 over ceil(kh * kw / tpb) blocks, taken only where
        # that is fewer passes than the column fold's
        self.tpb = self.R // c
        # the static fold (layout.fold_taps) where it applies: the dense weights (block-diagonal if grouped)
        self.tap_view = None if self.depthwise else fold_taps(dataclasses.replace(view, weight=self.weight,
                                                                                  groups=1), self.R)
        blocks = self.tap_view.taps.blocks if self.tap_view is not None else 0
        self.taps = taps and 0 < blocks < self.in_cb * self.kh * self.kw_nu
        if self.taps:
            self.fold, self.kh_nu, self.kw_nu, self.in_cb = 1, 1, 1, blocks
        self.w_block = ((4 + self.kh * self.kw) * self.C if self.depthwise
                        else self.in_cb * self.kh_nu * self.kw_nu * self.R * self.C)
        self.wbytes = self.out_cb * self.w_block
        # rq: nu.conv.rq's output stage adds the bias and requantises into VBUF (its (bias, M, S) table in
        # WBUF after the weights), so no bias broadcast, drain or VU pass: one command holds all the input
        # blocks (the stage needs the whole sum); where the static lowering would use it, and its table fits
        self.rq_at = -(-self.wbytes // 64) * 64
        self.rq = (rq and output_stage_fits(view, self.depthwise)
                   and self.rq_at + self.out_cb * self.C * 12 <= cfg.wbuf_bytes)
        self.wtotal = self.rq_at + self.out_cb * self.C * 12 if self.rq else self.wbytes     # WBUF bytes
        self.tab = 0 if self.rq else -(-self.out_cb * self.C * self.entry // 64) * 64
        # by_block: a depthwise conv's channel blocks are independent convs, so a tile is one block's rows
        # (block index in r1): a block's accumulators alone in a set fit out_cb times more rows.
        self.by_block = by_block and self.depthwise
        self.tile_cb = 1 if self.by_block else self.out_cb      # output (and, depthwise, input) blocks a tile
        self.nsets = sets
        self.marker = 0         # DM offset of the word the drain channel's marker copies (nsets > 2)
        self.region = region
        self.sets = self.tab if region.vbuf is None else region.vbuf      # VBUF offset of the two sets
        ibuf = cfg.ibuf_bytes if region.ibuf_bytes is None else region.ibuf_bytes
        abuf = cfg.abuf_bytes if region.abuf_bytes is None else region.abuf_bytes
        vbuf = cfg.vbuf_bytes - self.sets if region.vbuf_bytes is None else region.vbuf_bytes
        self.ib = ibuf // sets // self.R * self.R
        # ABUF has two sets whatever `sets` is: an accumulator set is free once drained, early in a tile's
        # life (with more than two sets the NU waits for the drain of tile k-2 by a marker on its channel)
        self.ab = abuf // 2 // 128 * 128 if sets > 2 else min(abuf // 2, vbuf // 2) // 128 * 128
        self.vb = vbuf // sets // 128 * 128 if sets > 2 or self.rq else self.ab
        self.marker_sets = sets > 2 and not self.rq      # accumulator sets freed by a marker (ABUF in use)
        wd = op.x_shape[3]
        self.widths = range(wd.lo, wd.hi + 1) if isinstance(wd, Dim) else range(wd, wd + 1)
        self.rows: dict[int, int] = {}      # input width -> output rows per tile (filled by choose_rows)
        self.y_slice = (0, self.o)          # a part of a conv too big for WBUF: (first channel, all channels)

    def out_size(self, n: int, k: int, lo: int, hi: int, stride: int) -> int:
        return window_out(n, lo + hi - k, stride)

    def fit(self, w: int) -> int:
        """The most output rows per tile whose buffers fit at input width w (0: not even one)."""
        ow = self.out_size(w, self.ekw, self.pl, self.pr, self.sw)
        by_acc = (self.vb // (self.tile_cb * ow * self.C) if self.rq
                  else min(self.ab, self.vb) // (self.tile_cb * ow * self.C * 4))
        in_cb = self.tile_cb if self.depthwise else self.in_cb
        if self.taps:       # IBUF holds the tile's output rows (an im2col); DM its padded input rows
            by_in = self.ib // (self.in_cb * self.in_width(w) * self.R)
            if self.region.ibuf_bytes is not None:       # a fused chain's: its input is a plane in DM
                return max(0, min(by_acc, by_in))
            per_set = (self.cfg.dm_bytes - self.stage_at) // self.nsets // 64 * 64
            by_dm = (per_set // (self.c * (w + self.pl + self.pr)) - self.ekh) // self.sh + 1
            return max(0, min(by_acc, by_in, by_dm))
        by_in = ((self.ib // (in_cb * self.in_width(w) * self.R)) - self.ekh) // self.sh + 1
        return max(0, min(by_acc, by_in))

    @property
    def stage_at(self) -> int:
        """The DM offset of a staged conv's input sets: after the bias table and the marker word."""
        return -(-self.out_cb * self.C * 4 // 64) * 64 + 64

    def in_width(self, w: int) -> int:
        """Columns of a tile's input rows in IBUF: the padded width, or folded, one per output column's start
        (the full-tap fold: one per output column)."""
        if self.taps:
            return self.out_size(w, self.ekw, self.pl, self.pr, self.sw)
        if self.fold > 1:
            return ((self.out_size(w, self.ekw, self.pl, self.pr, self.sw) - 1) * self.sw + 1
                    + (self.kw_nu - 1) * self.fold * self.dw)
        return w + self.pl + self.pr

    def fits(self) -> str:
        """Why the largest shape does not fit the machine, or ''."""
        if self.wtotal > self.cfg.wbuf_bytes:
            return f"the weights need {self.wbytes} bytes of WBUF, it has {self.cfg.wbuf_bytes}"
        if not tables_fit(self.tab, self.cfg):
            return f"the (M, S) table needs {self.tab} bytes of VBUF, more than half its {self.cfg.vbuf_bytes}"
        if self.fit(self.widths[-1]) < 1:
            return (f"one output row at the largest width {self.widths[-1]} does not fit 1/{self.nsets} of IBUF "
                    f"({self.ib} bytes) and 1/{self.nsets} of ABUF/VBUF ({self.ab} bytes)")
        return ""


def tables_fit(table: int, cfg: Config) -> bool:
    """Do (M, S) tables of `table` bytes leave VBUF at least half for the tiles' sets?"""
    return table <= cfg.vbuf_bytes // 2


def requant_mnemonic(g: _Geometry) -> str:
    """The VU instruction requantising a drained tile: per-channel float32 scales or (M, S) pairs."""
    return "vu.requant.fpc" if g.op.largest.scale is not None else "vu.requant.pc"


def nu_cycles(g: _Geometry, rows: int, ow: int) -> int:
    """The NU's cycles for one tile of rows x ow outputs (every block)."""
    if g.depthwise:
        return g.tile_cb * conv_cycles(True, 1, 1, g.kh, g.kw, rows, ow, g.cfg)
    return conv_cycles(False, g.out_cb, g.in_cb, g.kh_nu, g.kw_nu, rows, ow, g.cfg)


def tile_cycles(g: _Geometry, rows: int, w: int, staged: bool) -> tuple[int, int, int]:
    """A tile of `rows` output rows at input width w: (its busiest unit's cycles, the DDR's, the latency
    from its load's issue to its store's end, which the CU's wait for the store of the tile `nsets` back
    spreads over nsets tiles)."""
    cfg = g.cfg
    ow = g.out_size(w, g.ekw, g.pl, g.pr, g.sw)
    cin = min(g.c, g.tile_cb * g.R) if g.depthwise else g.c
    # DDR bytes: one run a channel (its rows are contiguous), each touching about one burst more than
    # its length (the runs are not burst-aligned)
    ins = cin * (((rows - 1) * g.sh + g.ekh) * w + cfg.ddr_burst_bytes)
    outs = min(g.o, g.tile_cb * g.C) * (rows * ow + cfg.ddr_burst_bytes)
    acc = g.tile_cb * rows * ow * g.C * 4
    ddr = (ins + outs) // cfg.ddr_bytes_per_cycle
    # staged: the input rows DDR -> DM, then DM -> IBUF (the full-tap fold gathers kh * kw copies)
    gathered = g.c * g.kh * g.kw * rows * ow if g.taps else ins
    load = cfg.ddr_latency + ins // cfg.ddr_bytes_per_cycle + (gathered // cfg.local_bytes_per_cycle if staged else 0)
    nu = nu_cycles(g, rows, ow)
    drain = 0 if g.rq else cfg.local_latency + acc // cfg.local_bytes_per_cycle
    vu = 0 if g.rq else g.tile_cb * vector_cycles(requant_mnemonic(g), "i32", "i8", rows * ow * g.C, 1, cfg)
    store = cfg.ddr_latency + outs // cfg.ddr_bytes_per_cycle
    busy = max(load, nu, drain, vu, store)
    return busy, ddr, load + nu + drain + vu // g.tile_cb + store + TILE_OVERHEAD


def price(g: _Geometry, th: int, w: int, heights: list[tuple[int, int]], staged: bool = False) -> int:
    """Predicted cycles of th rows per tile at input width w, summed over sample (n, h): per tile the
    busiest of its units, the DDR (loads and stores share it) and its latency over the sets, plus once
    the pipeline's fill and drain (a tile's latency but its busiest unit's share)."""
    total = 0
    for n, h in heights:
        oh = g.out_size(h, g.ekh, g.pt, g.pb, g.sh)
        full, rest = divmod(oh, th)
        for rows, count in ((th, full), (rest, 1 if rest else 0)):
            if count:
                busy, ddr, chain = tile_cycles(g, rows, w, staged)
                total += n * count * (g.out_cb // g.tile_cb) * max(busy, ddr, chain // g.nsets)
        busy, _, chain = tile_cycles(g, min(th, oh), w, staged)
        total += chain - busy           # the fill and the drain of the pipeline: its busiest unit is counted
    return total


def sample_heights(op: DynamicOp) -> list[tuple[int, int]]:
    """(n, h) at the low end, the middle and the high end of their ranges."""
    n, _, h, _ = op.x_shape
    pick = lambda d, f: d.lo + int(round(f * (d.hi - d.lo))) if isinstance(d, Dim) else d   # noqa: E731
    return [(pick(n, f), pick(h, f)) for f in (0.0, 0.5, 1.0)]


def candidates(op: DynamicOp, cfg: Config, sets: int | None = None, rq: bool = True,
               taps: bool = True) -> list[_Geometry]:
    """The buffer arrangements a single conv may take, best first where they are not priced: three sets
    (a tile's load, convolution and epilogue overlap two others'), with the full-tap fold and without
    (priced: the fold takes kh times fewer NU passes but gathers kh * kw copies of the input), or,
    depthwise, tiles of one channel block in three to five sets (priced: its tiles are short, so their
    latency needs more of them in flight); two sets, as a fused chain's ops have, when nothing else fits."""
    depthwise = _Geometry(op, cfg).depthwise
    tapped = taps and _Geometry(op, cfg, taps=True).taps
    if sets is not None:        # one arrangement asked for (tests, measurements)
        return [_Geometry(op, cfg, sets=sets, by_block=depthwise and sets > 2, rq=rq, taps=tapped)]
    shapes = ([(k, True, False) for k in (3, 4, 5)] if depthwise
              else [(3, False, True)] * tapped + [(3, False, False)])
    return [_Geometry(op, cfg, sets=k, by_block=b, rq=rq, taps=t) for k, b, t in shapes + [(2, False, False)]]


def choose_rows(op: DynamicOp, cfg: Config, sets: int | None = None, rq: bool = True,
                taps: bool = True) -> _Geometry:
    """The buffer arrangement (candidates; `sets` buffer sets if given, the VU's requantisation if not
    rq, no full-tap fold if not taps) and, for every width of the range, the rows per tile that fit it
    and price cheapest over sample heights."""
    g = _Geometry(op, cfg)
    if len(g.widths) > MAX_WIDTHS:
        raise CompileError(f"dynamic conv2d: the width range [{g.widths[0]}, {g.widths[-1]}] spans more than "
                           f"{MAX_WIDTHS} widths (its table of tile heights has one word per width)")
    why = g.fits()
    if why:
        raise CompileError(f"dynamic conv2d does not fit this machine: {why}")
    heights = sample_heights(op)
    oh_max = op.largest.out_hw[0]
    ws = g.widths
    sample_widths = sorted({ws[0], ws[len(ws) // 2], ws[-1]})

    def best(c: _Geometry, w: int) -> tuple[int, int]:
        options = range(1, min(c.fit(w), oh_max) + 1)
        return min((price(c, th, w, heights, c.fold > 1 or c.taps), -th) for th in options)

    fitting = [c for c in candidates(op, cfg, sets, rq, taps) if not c.fits()]
    if not fitting:
        raise CompileError(f"dynamic conv2d does not fit this machine in {sets} buffer sets: "
                           f"{candidates(op, cfg, sets)[0].fits()}")
    priced = [c for c in fitting if c.by_block] or [c for c in fitting if c.nsets == fitting[0].nsets]
    g = min(priced, key=lambda c: sum(best(c, w)[0] for w in sample_widths))
    for w in g.widths:
        g.rows[w] = -best(g, w)[1]
    return g




def weight_blocks(g: _Geometry) -> bytes:
    """The weights in the NU's [out_cb][in_cb][kh][kw][R][C] order (the static packing, compiler/lowering/
    layout.py, where the static lowering folds the same way; the column fold of fewer than kw columns, which
    the static lowering does not take, here), or nu.dwconv's blocks (depthwise)."""
    big = g.op.largest
    if g.depthwise:     # per block its biases then [kh][kw][C]: nu.dwconv's own bias, no broadcast
        return np.ascontiguousarray(depthwise_weights(big.weight, big.bias, g.C).blocks).tobytes()
    weight = g.weight
    if g.taps:          # block k // tpb, row (k % tpb) * c + ci holds tap k = (i, j) of channel ci
        weight = g.tap_view.weight
    elif g.fold > 1:    # row kwi * c + ci of column j holds tap (kh, j * fold + kwi) of channel ci
        weight = np.zeros((g.o, g.fold * g.c, g.kh, g.kw_nu), dtype=np.int8)
        for j in range(g.kw_nu):
            for kwi in range(min(g.fold, g.kw - j * g.fold)):
                weight[:, kwi * g.c:(kwi + 1) * g.c, :, j] = g.weight[:, :, :, j * g.fold + kwi]
    blocks = nu_weights(weight, 1, weight.shape[1], g.R, g.C).blocks
    return np.ascontiguousarray(blocks).tobytes()


def constants(g: _Geometry) -> dict[str, bytes]:
    """The conv's constant tables by label, in their .data order: the weights, then nu.conv.rq's (bias, M,
    S) table, or the bias table (not depthwise: nu.dwconv's biases are in its weights) and the (M, S) or
    float scale table."""
    big = g.op.largest
    bias = bias_table(big.bias, g.out_cb, g.C)
    ms = (fscale_table(big.scale, g.out_cb, g.C) if big.scale is not None
          else requant_table(big.multiplier, big.shift, g.out_cb, g.C))
    if g.rq:            # nu.conv.rq's (bias, M, S) (float form: (bias, scale bits, 0)) per channel
        rq = np.zeros((g.out_cb * g.C, 3), dtype="<i4")
        rq[:, 0] = bias
        if big.scale is not None:
            rq[:, 1] = ms
        else:
            rq[:, 1:] = ms
        return {"dyn_w": weight_blocks(g), "dyn_rq": rq.tobytes()}
    if g.depthwise:
        return {"dyn_w": weight_blocks(g), "dyn_ms": ms.tobytes()}
    return {"dyn_w": weight_blocks(g), "dyn_bias": bias.tobytes(), "dyn_ms": ms.tobytes()}


def block_diagonal(weight: np.ndarray, groups: int) -> np.ndarray:
    """A grouped conv's [O, C/groups, KH, KW] weights as a dense conv's [O, C, KH, KW]: output channel o of
    group g sees only group g's input channels, every other weight zero."""
    o, cg, kh, kw = weight.shape
    dense = np.zeros((o, cg * groups, kh, kw), dtype=weight.dtype)
    og = o // groups
    for grp in range(groups):
        dense[grp * og:(grp + 1) * og, grp * cg:(grp + 1) * cg] = weight[grp * og:(grp + 1) * og]
    return dense


def notes(g: _Geometry) -> list[tuple[str, str]]:
    """The conv's notes: its output's height and width follow from the input's."""
    n, _, h, w = g.op.x_shape
    return target_notes(g.op, [axis_name(n), str(g.y_slice[1]), out_axis(h, g.pt + g.pb - g.ekh, g.sh),
                               out_axis(w, g.pl + g.pr - g.ekw, g.sw)])


@dataclass(frozen=True)
class ConvSems:
    """A conv's semaphores, in the order it takes them from its scope's pool."""

    bias: Sem       # the bias broadcast into ABUF
    load: Sem       # a tile's input rows
    nu: Sem         # each output block's NU command
    drain: Sem      # its accumulators ABUF -> VBUF
    vu: Sem         # its requantisation
    store: Sem      # the tile's store
    w: Sem          # each weight block (the first tile waits for them)
    afree: Sem | None = None    # an accumulator set drained (more than two sets)


def conv_semaphores(pool: Pool, marker: bool = True) -> ConvSems:
    """Take a conv's semaphores from pool (marker=False: not afree, for a conv of two buffer sets only)."""
    return ConvSems(*pool.take("bias", "load", "nu", "drain", "vu", "store", "w", *(("afree",) if marker else ())))


def staged_io(r: TileRegs, g: _Geometry, at: int, set_bytes: int) -> TileIO:
    """Input rows DDR -> DM as whole rows per channel first (DDR bursts: IBUF's layout puts the channels
    innermost, one byte per burst from DDR), then DM -> IBUF; two DM sets of set_bytes from offset at."""
    t = r.t

    def stage(b: Scope, start: Reg, rows: Reg, plo: Reg, phi: Reg) -> None:
        real, plane, hw = t[6], t[7], t[10]
        b.i("sub", real, rows, plo)
        b.i("sub", real, real, phi)
        b.i("beq", real, ZERO, b.label("staged"))    # a tile wholly in the padding reads nothing
        b.i("mul", plane, real, r.w)
        b.i("mul", hw, r.h, r.w)
        dma_box(b, 1, [(plane, 1, 1, 0, 0), (g.c, hw, plane, 0, 0)])
        _stage_dma(b, r, g, start, hw, hw, at, set_bytes)     # the loads from DM queue behind it on ch0
        b.at(b.label("staged"))
        b.i("mul", r.hw, real, r.w)          # the source plane is now the DM tile's

    def padded(b: Scope, start: Reg, rows: Reg, plo: Reg, phi: Reg) -> None:
        # the full-tap fold's gathers read a tile of every row and column with its padding: [c][rows][w + pl
        # + pr] in the DM set, the padding written by this DMA (x_zp)
        wp, plane, hw = t[6], t[7], t[10]
        b.i("addi", wp, r.w, g.pl + g.pr)
        b.i("mul", plane, rows, wp)
        b.i("mul", hw, r.h, r.w)
        dma_box(b, 1, [(wp, 1, 1, g.pl, g.pr), (rows, r.w, wp, plo, phi), (g.c, hw, plane, 0, 0)],
                g.op.largest.x_zp)
        _stage_dma(b, r, g, start, hw, t[11], at, set_bytes)  # the gathers from DM queue behind it on ch0

    def src(b: Scope, reg: Reg, start: Reg, tmp: Reg) -> None:
        b.i("muli", reg, r.b, set_bytes)
        b.i("addi", reg, reg, at)
    return TileIO(src, ddr_io(r, g.c, g.y_slice[1], y_first=g.y_slice[0]).dst, "dm", "ddr",
                  padded if g.taps else stage)


def _stage_dma(b: Scope, r: TileRegs, g: _Geometry, start: Reg, hw: Reg, tmp: Reg, at: int,
               set_bytes: int) -> None:
    """The staging DMA of image r.i's rows from `start` (planes hw apart) into DM set r.b at `at`."""
    src, dst = r.t[8], r.t[9]
    b.i("mul", src, r.i, hw)
    b.i("muli", src, src, g.c)
    b.i("mul", tmp, start, r.w)
    b.i("add", src, src, tmp)
    b.i("la", tmp, b.buf("x"))
    b.i("add", src, src, tmp)
    b.i("muli", dst, r.b, set_bytes)
    b.i("addi", dst, dst, at)
    b.i("dma", b.ch(0), Mem("dm", dst), Mem("ddr", src))


def stage_bytes(g: _Geometry) -> int:
    """One DM set of a tile's real input rows at the largest width and tile height (the full-tap fold: every
    row and column with the padding, the most any width takes), 64-aligned."""
    if g.taps:
        return max(-(-g.c * ((g.rows[w] - 1) * g.sh + g.ekh) * (w + g.pl + g.pr) // 64) * 64 for w in g.widths)
    th = max(g.rows.values())
    return -(-g.c * ((th - 1) * g.sh + g.ekh) * g.widths[-1] // 64) * 64


def constant_data(b: Scope, g: _Geometry) -> None:
    """The weights, bias and (M, S) tables in .data (labels and files named by the scope)."""
    for name, blob in constants(g).items():
        b.const(name, blob)


def load_constants(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, signal: bool = True,
                   on_loads: bool = False) -> None:
    """Queue the constants, each ahead of its first user on the same channel (FIFO orders them); the
    weights signal s.w block by block unless signal=False (something else orders them).  Tiles of one
    channel block (by_block) take the weights on ch0 instead, ahead of the loads their NU commands wait
    for, and need no wait of their own; so do any conv's with on_loads.  nu.conv.rq's table goes ahead of
    the weights on their channel."""
    rg, t = g.region, r.t
    # by_block, on_loads: the weights on ch0, ahead of every load (the NU waits for its load), no signal
    wch, signal = (0, False) if g.by_block or on_loads else (1, signal)
    if g.rq:
        dma_box(b, 4, [(g.out_cb * g.C * 3, 4, 4, 0, 0)])
        b.i("la", t[0], b.label("dyn_rq"))
        b.i("li", t[1], rg.wbuf + g.rq_at)
        b.i("dma", b.ch(wch), Mem("wbuf0", t[1]), Mem("ddr", t[0]))
    b.comment("constants, each queued ahead of its first user on the same channel (FIFO orders them):")
    b.comment("weights block by block on ch1 (the first tile's CU waits for each before its NU command),")
    b.comment("then the (M, S) table on ch1 before the first drain, the bias table into dm on ch3 before")
    b.comment("the first broadcast")
    dma_box(b, 1, [(g.w_block, 1, 1, 0, 0)])
    b.i("la", t[0], b.label("dyn_w"))
    for ob in range(g.out_cb):
        b.i("li", t[1], rg.wbuf + ob * g.w_block)
        b.i("dma", b.ch(wch), Mem("wbuf0", t[1]), Mem("ddr", t[0]), **({"signal": s.w} if signal else {}))
        b.i("addi", t[0], t[0], g.w_block)
    if g.rq:
        return
    dma_box(b, 4, [(g.out_cb * g.C * g.entry // 4, 4, 4, 0, 0)])
    b.i("la", t[0], b.label("dyn_ms"))
    b.i("dma", b.ch(1), Mem("vbuf0", _at(b, rg.table, t[1])), Mem("ddr", t[0]))
    if not g.depthwise:
        b.setp("dma.size0", g.out_cb * g.C)
        b.i("la", t[0], b.label("dyn_bias"))
        b.i("dma", b.ch(3), Mem("dm", _at(b, rg.dm, t[1])), Mem("ddr", t[0]))


def _at(b: Scope, offset: int, reg: Reg) -> Reg:
    """A register holding offset: r0 for 0, else reg loaded with it."""
    if not offset:
        return ZERO
    b.i("li", reg, offset)
    return reg


def fixed_params(b: Scope, g: _Geometry) -> None:
    """The NU and VU parameters that do not depend on the shape."""
    big = g.op.largest
    sh, sw, dh, dw = (1, 1, 1, 1) if g.taps else (g.sh, g.sw, g.dh, g.dw * g.fold)    # taps: a 1x1 conv
    for p, v in (("in_cb", 1 if g.depthwise else g.in_cb), ("out_cb", 1), ("k_h", g.kh_nu), ("k_w", g.kw_nu),
                 ("stride_h", sh), ("stride_w", sw), ("dil_h", dh), ("dil_w", dw), ("x_zp", big.x_zp)):
        b.setp(f"nu.{p}", v)
    if g.rq:
        for p, v in (("rq_table", g.region.wbuf + g.rq_at), ("rq_zp_out", big.zp_out), ("rq_lo", big.lo),
                     ("rq_hi", big.hi), ("rq_float", int(big.scale is not None))):
            b.setp(f"nu.{p}", v)
        return
    for p, v in (("n0", g.C), ("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", 4), ("b_stride0", g.entry),
                 ("d_stride1", g.C), ("a_stride1", 4 * g.C), ("b_stride1", 0),
                 ("za", 0), ("zp_out", big.zp_out), ("lo", big.lo), ("hi", big.hi)):
        b.setp(f"vu.{p}", v)


def _buffers(b: Scope, g: _Geometry) -> None:
    """The .data of one conv: the argument block, x, y, its constants and its table of rows per tile."""
    op, big, prog = g.op, g.op.largest, b.prog
    y_max = (big.output.shape[0], g.y_slice[1]) + big.output.shape[2:]
    prog.buffer(b.buf("args").name, "int32", (len(op.dims),), 4 * len(op.dims), align=False)
    prog.buffer(b.buf("x").name, "int8", big.x_shape, int(np.prod(big.x_shape)))
    prog.buffer(b.buf("y").name, "int8", y_max, int(np.prod(y_max)))
    constant_data(b, g)
    prog.table(b.label("dyn_rows"), [g.rows[w] for w in g.widths],
               f"output rows per tile, by input width from {g.widths[0]}")


def _sizes(b: Scope, r: TileRegs, g: _Geometry) -> None:
    """The sizes from the argument block, the output's, the padded width, the planes, the rows per tile."""
    n, _, h, w = g.op.x_shape
    index = {d.name: k for k, d in enumerate(g.op.dims)}
    b.i("la", r.args, b.buf("args"))
    for reg, d in ((r.n, n), (r.h, h), (r.w, w)):
        load_size(b, reg, d, index, r.args)
    b.comment("output size, padded width, plane sizes")
    emit_out_size(b, r.oh, r.h, g.pt + g.pb - g.ekh, g.sh, r.t[0])
    emit_out_size(b, r.ow, r.w, g.pl + g.pr - g.ekw, g.sw, r.t[0])
    padded_width(b, r, g)
    b.i("mul", r.hw, r.h, r.w)
    b.i("mul", r.ohw, r.oh, r.ow)
    b.comment("rows per tile for this width (the compiler's table)")
    b.i("slli", r.t[0], r.w, 2)
    b.i("la", r.t[1], b.label("dyn_rows") - 4 * g.widths[0])
    b.i("add", r.t[0], r.t[0], r.t[1])
    b.i("ld", r.max, r.t[0], 0)


def _loop_head(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry) -> None:
    """The loops' start: images, (by_block) channel blocks, tiles; a tile's rows and its wait for the
    store of the tile nsets back."""
    b.i("li", r.i, 0)
    if not g.by_block:
        b.i("li", r.args, 1)            # 1 until the first tile has waited for the weights
    b.i("li", r.b, 0)
    b.i("li", r.pend, 0)
    if g.marker_sets:     # the two accumulator sets start free; r.ab alternates between them
        b.i("li", r.ab, 0)
        b.i("sem.signal", s.afree)
        b.i("sem.signal", s.afree)
    b.at(b.label("batch"))
    if g.by_block:
        b.i("li", r.args, 0)            # the channel block
        b.at(b.label("block"))
    b.i("li", r.oh0, 0)
    b.at(b.label("tile"))
    b.comment("rows of this tile: th, or the remainder")
    b.i("sub", r.th, r.oh, r.oh0)
    b.i("min", r.th, r.th, r.max)
    b.comment(f"buffers of tile k-{g.nsets} are reused: wait for its store")
    b.i("li", r.t[0], g.nsets)
    b.i("blt", r.pend, r.t[0], b.label("free"))
    b.i("sem.wait", s.store)
    b.i("addi", r.pend, r.pend, -1)
    b.at(b.label("free"))


def _tiles(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry) -> None:
    """Every tile's body, the loops' end and the drain."""
    g.marker = -(-g.out_cb * g.C * 4 // 64) * 64        # after the bias table
    at = g.stage_at
    size = stage_bytes(g)
    # Staged when folded: its kw loads of a row read a row's columns each, short runs of DDR bursts (the
    # full-tap fold always: its gathers read the padded copy, which fit() sized); the others load straight
    # from DDR, a channel's rows one run (the box's columns innermost)
    staged = g.taps or (g.fold > 1 and at + g.nsets * size <= g.cfg.dm_bytes)
    io = staged_io(r, g, at, size) if staged else ddr_io(r, g.c, g.y_slice[1], y_first=g.y_slice[0])
    tile_body(b, r, s, g, io)
    if not g.by_block:
        b.i("li", r.args, 0)
    if g.marker_sets:
        b.i("sub", r.ab, ZERO, r.ab)
        b.i("addi", r.ab, r.ab, g.ab)
    next_tile(b, r, g.nsets, g.out_cb if g.by_block else 0)
    drain(b, r.pend, s.store)
    if g.marker_sets:     # the last two markers' tokens, so that none is left at halt
        b.i("sem.wait", s.afree)
        b.i("sem.wait", s.afree)


def write_conv(b: Scope, g: _Geometry, note: list[tuple[str, str]] | None = None) -> Part:
    """Write the conv of geometry g (rows chosen) into b: its buffers, constants and code, ending on its
    drain; `note` replaces its `.target dynamic.*` notes (a dense layer describes its buffers as two-axis)."""
    r = tile_registers(b)
    s = conv_semaphores(b.sems)
    _buffers(b, g)
    _sizes(b, r, g)
    load_constants(b, r, s, g)
    fixed_params(b, g)
    _loop_head(b, r, s, g)
    _tiles(b, r, s, g)
    b.fold_channels(g.cfg.dma_channels)
    title = [f"dynamic kernel: {g.op!r}", "output rows per tile read from a table by input width; full width; "
             "two buffer sets"]
    return Part(title, notes(g) if note is None else note, g.rows)


def padded_width(b: Scope, r: TileRegs, g: _Geometry) -> None:
    """r.wp: the columns of a tile's input rows in IBUF (from r.ow when folded, else r.w plus the padding)."""
    if g.taps:
        b.i("add", r.wp, r.ow, ZERO)
    elif g.fold > 1:
        b.i("addi", r.wp, r.ow, -1)
        b.i("muli", r.wp, r.wp, g.sw)
        b.i("addi", r.wp, r.wp, 1 + (g.kw_nu - 1) * g.fold * g.dw)
    else:
        b.i("addi", r.wp, r.w, g.pl + g.pr)


def tile_body(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, io: TileIO, weights_wait: bool = True,
              epilogue: Callable | None = None) -> None:
    """One tile: r.th output rows from row r.oh0 of image r.i, in buffer set r.b of the op's region (the
    first tile's CU waits for each weight block unless weights_wait=False).  With nu.conv.rq, epilogue(b,
    ob, rows, channels) may put VU work between block ob's NU command and its store, returning (the
    store's VBUF source, the semaphore the store waits for)."""
    _tile_sets(b, r, s, g)
    rows, rowb = _input_rows(b, r, s, g, io)
    pixb = _convolve(b, r, s, g, rows, rowb, weights_wait)
    _store_blocks(b, r, s, g, io, pixb, epilogue)
    if g.marker_sets:     # a one-word copy queued behind the drains: the accumulator set is free when it ends
        b.setp("dma.size0", 1)
        b.setp("dma.size1", 1)
        b.i("li", r.t[11], g.marker)
        b.i("dma", b.ch(1), Mem("dm", r.t[11]), Mem("dm", r.t[11]), signal=s.afree)


def _tile_sets(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry) -> None:
    """The tile's IBUF, ABUF and VBUF sets and pixels, and (the VU's requantisation) its bias broadcast."""
    rg = g.region
    b.i("muli", r.ib, r.b, g.ib)
    if rg.ibuf:
        b.i("addi", r.ib, r.ib, rg.ibuf)
    if g.rq:
        pass                # no accumulators in ABUF: nu.conv.rq writes the tile's int8 rows to VBUF
    elif not g.marker_sets:     # else r.ab alternates by itself (next_tile)
        b.i("muli", r.ab, r.b, g.ab)
        if rg.abuf:
            b.i("addi", r.ab, r.ab, rg.abuf)
    elif not g.depthwise:   # before the bias broadcast writes it (a depthwise conv: before its NU command)
        b.comment("the accumulator set of tile k-2 is reused: wait for its drain's marker")
        b.i("sem.wait", s.afree)
    b.i("muli", r.vb, r.b, g.vb)
    b.i("addi", r.vb, r.vb, g.sets)
    b.i("mul", r.pix, r.th, r.ow)
    if not g.depthwise and not g.rq:
        b.comment("bias broadcast dm -> abuf")
        b.i("slli", r.t[1], r.pix, 2 + (g.C.bit_length() - 1))
        # only the real channels when there is one block: the others' accumulators are never read
        dma_box(b, 4, [(g.o if g.out_cb == 1 else g.C, 4, 4, 0, 0), (r.pix, 0, 4 * g.C, 0, 0),
                       (g.out_cb, 4 * g.C, r.t[1], 0, 0)])
        b.i("dma", b.ch(3), Mem("abuf0", r.ab), Mem("dm", _at(b, rg.dm, r.t[0])), signal=s.bias)


def _input_rows(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, io: TileIO) -> tuple[Reg, Reg]:
    """The tile's input rows with their halo into IBUF (folded, gathered tap by tap, or block by block);
    returns the registers of its input row count and of one row's IBUF bytes."""
    t = r.t
    b.comment("input rows with halo -> ibuf")
    rows, vstart, plo, start, phi = t[1], t[2], t[3], t[4], t[5]
    halo_rows(b, r, (rows, vstart, plo, start, phi, t[11]), g.sh, g.ekh, g.pt)
    src, dst, step_dst, rowb, step_src = t[6], t[7], t[8], t[9], t[10]
    if io.stage:
        io.stage(b, start, rows, plo, phi)
    io.src(b, src, start, t[11])
    b.i("slli", rowb, r.wp, g.R.bit_length() - 1)
    b.i("mul", step_dst, rows, rowb)
    b.i("muli", step_src, r.hw, g.R)
    b.i("add", dst, r.ib, ZERO)
    if g.taps:
        b.comment("the full-tap fold: the window's taps gathered into the array's rows")
        (tap_gathers if io.stage else tap_loads)(b, r, s, g, io, src, rows, rowb)
    x_zp = g.op.largest.x_zp
    for kwi in range(g.fold if g.fold > 1 else 0):
        # group kwi: rows kwi*c.., column j holds input column j - pl + kwi*dw
        col0 = column_pads(b, r, kwi * g.dw - g.pl, (t[0], t[11], step_dst))
        b.i("addi", step_src, src, col0)
        b.i("addi", dst, r.ib, kwi * g.c)
        dma_box(b, 1, [(r.wp, 1, g.R, t[0], t[11]), (rows, r.w, rowb, plo, phi), (g.c, r.hw, 1, 0, 0)], x_zp)
        sig = {"signal": s.load} if kwi == g.fold - 1 else {}
        b.i("dma", b.ch(0), Mem("ibuf0", dst), Mem(io.src_space, step_src), **sig)
    if g.by_block:      # block r.args's input channels: min(R, c - r.args * R) of them, r.args * R planes in
        b.i("mul", t[11], r.args, r.hw)
        b.i("muli", t[11], t[11], g.R)
        b.i("add", src, src, t[11])
        _block_channels(b, r, t[0], t[11], g.R, g.c)
    blocks = g.tile_cb if g.depthwise else g.in_cb
    for cb in range(blocks if g.depthwise or (g.fold == 1 and not g.taps) else 0):
        cr = t[0] if g.by_block else min(g.R, g.c - cb * g.R)
        if cb:
            b.i("add", src, src, step_src)
            b.i("add", dst, dst, step_dst)
        dma_box(b, 1, [(r.wp, 1, g.R, g.pl, g.pr), (rows, r.w, rowb, plo, phi), (cr, r.hw, 1, 0, 0)], x_zp)
        sig = {"signal": s.load} if cb == blocks - 1 else {}
        b.i("dma", b.ch(0), Mem("ibuf0", dst), Mem(io.src_space, src), **sig)
    return rows, rowb


def _block_channels(b: Scope, r: TileRegs, reg: Reg, tmp: Reg, per: int, total: int) -> None:
    """reg := the channels of block r.args: min(per, total - r.args * per)."""
    b.i("muli", reg, r.args, -per)
    b.i("addi", reg, reg, total)
    b.i("li", tmp, per)
    b.i("min", reg, reg, tmp)


def _convolve(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, rows: Reg, rowb: Reg,
              weights_wait: bool) -> Reg:
    """The NU commands, one per output block; returns the register of one block's bytes in ABUF or VBUF."""
    t, rg = r.t, g.region
    b.comment("convolve onto the bias, one command per output block so that block k's epilogue")
    b.comment("overlaps block k+1's convolution")
    for p, v in (("in_h", r.th if g.taps else rows), ("in_w", r.wp), ("out_h", r.th), ("out_w", r.ow)):
        b.setp(f"nu.{p}", v)
    if not g.depthwise and not g.rq:
        b.i("sem.wait", s.bias)              # the NU's one wait is the input's: join the bias here
    acc, wreg, pixb, rin, in_step = t[6], t[7], t[8], t[11], t[10]
    # bytes of one block's accumulators (int32), or of its int8 rows in VBUF (rq)
    b.i("slli", pixb, r.pix, g.C.bit_length() - 1 + (0 if g.rq else 2))
    b.i("add", acc, r.vb if g.rq else r.ab, ZERO)
    if g.depthwise and g.marker_sets:
        b.i("sem.wait", s.afree)             # the accumulator set of tile k-2 is drained
    if g.depthwise:      # block ob reads input block ob
        b.i("mul", in_step, rows, rowb)
        b.i("add", rin, r.ib, ZERO)
    for ob in range(g.tile_cb):
        if ob:
            b.i("add", acc, acc, pixb)
            if g.depthwise:
                b.i("add", rin, rin, in_step)
        wait = {"wait": s.load} if ob == 0 else {}
        if weights_wait and not g.by_block:
            b.i("beq", r.args, ZERO, b.label(f"weights{ob}"))
            b.i("sem.wait", s.w)
            b.at(b.label(f"weights{ob}"))
        block_address(b, r, g, wreg, rg.wbuf, g.w_block, ob)
        if g.depthwise:
            b.i("nu.dwconv", "nu0", acc, rin, wreg, **wait, signal=s.nu)
        elif g.rq:      # one block a command: its table entries start the table (the stage indexes by ob)
            if g.out_cb > 1:
                b.setp("nu.rq_table", rg.wbuf + g.rq_at + ob * g.C * 12)
            b.i("nu.conv.rq", "nu0", acc, r.ib, wreg, **wait, signal=s.nu)
        else:
            b.i("nu.conv.acc", "nu0", acc, r.ib, wreg, **wait, signal=s.nu)
    return pixb


def _store_blocks(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, io: TileIO, pixb: Reg,
                  epilogue: Callable | None) -> None:
    """Per output block: (the VU's requantisation) drain and requantise, the epilogue, the store."""
    t = r.t
    if g.rq:
        b.comment("per output block: store its int8 rows from vbuf")
    else:
        b.comment("per output block: drain abuf -> vbuf, requantise in place, store")
        b.setp("vu.n1", r.pix)
    ydst, ysrc, asrc, step_y, table = t[3], t[4], t[6], t[9], t[10]
    io.dst(b, ydst, t[5])
    b.i("muli", step_y, r.ohw, g.C)
    if g.by_block:      # block r.args: its output planes in, min(C, o - r.args * C) channels, its table entries
        b.i("mul", t[5], step_y, r.args)
        b.i("add", ydst, ydst, t[5])
        _block_channels(b, r, t[0], t[5], g.C, g.o)
    b.i("add", ysrc, r.vb, ZERO)
    b.i("add", asrc, r.ab, ZERO)
    for ob in range(g.tile_cb):
        cv = t[0] if g.by_block else min(g.C, g.o - ob * g.C)
        if ob:
            b.i("add", ysrc, ysrc, pixb)
            b.i("add", asrc, asrc, pixb)
            b.i("add", ydst, ydst, step_y)
        if not g.rq:
            drain_and_requant(b, r, s, g, ob, cv, ysrc, asrc, table)
        src, wait = ysrc, s.nu if g.rq else s.vu
        if epilogue is not None:
            src, wait = epilogue(b, ob, ysrc, cv)
        dma_box(b, 1, [(r.pix, g.C, 1, 0, 0), (cv, 1, r.ohw, 0, 0)])
        sig = {"signal": s.store} if ob == g.tile_cb - 1 else {}
        b.i("dma", b.ch(2), Mem(io.dst_space, ydst), Mem("vbuf0", src), wait=wait, **sig)


def tap_runs(g: _Geometry) -> list[tuple[int, int, int]]:
    """The full-tap fold's runs of taps (kernel row i, first column j, count) that lie in one block."""
    runs = []
    for i in range(g.kh):
        j = 0
        while j < g.kw:
            k = i * g.kw + j
            n = min(g.kw - j, g.tpb - k % g.tpb)
            runs.append((i, j, n))
            j += n
    return runs


def _tap_dst(b: Scope, r: TileRegs, g: _Geometry, dst: Reg, block: Reg, k: int) -> None:
    """dst = the IBUF address of tap k's rows: r.ib + (k // tpb) * block + (k % tpb) * c."""
    b.i("muli", dst, block, k // g.tpb)
    b.i("add", dst, dst, r.ib)
    if k % g.tpb:
        b.i("addi", dst, dst, k % g.tpb * g.c)


def tap_gathers(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, io: TileIO, src: Reg, rows: Reg,
                rowb: Reg) -> None:
    """The full-tap fold's IBUF tile from the padded copy in DM at src ([c][rows][w + pl + pr]): per run of
    taps of one kernel row in one block a 4-D gather (columns sw apart, rows sh apart, the channels, the
    taps dw apart) into rows (k % tpb) * c + ci of block k // tpb; the last signals the load."""
    t = r.t
    wp, step, plane, dst, block, base = t[0], t[8], t[10], t[7], t[5], t[4]
    b.i("addi", wp, r.w, g.pl + g.pr)
    b.i("muli", step, wp, g.sh)
    b.i("mul", plane, rows, wp)
    b.i("mul", block, r.th, rowb)
    b.i("add", base, src, ZERO)
    runs = tap_runs(g)
    for n, (i, j, count) in enumerate(runs):
        dma_box(b, 1, [(r.ow, g.sw, g.R, 0, 0), (r.th, step, rowb, 0, 0), (g.c, plane, 1, 0, 0),
                       (count, g.dw, g.c, 0, 0)])
        b.i("muli", src, wp, i * g.dh)
        b.i("addi", src, src, j * g.dw)
        b.i("add", src, src, base)
        _tap_dst(b, r, g, dst, block, i * g.kw + j)
        sig = {"signal": s.load} if n == len(runs) - 1 else {}
        b.i("dma", b.ch(0), Mem("ibuf0", dst), Mem("dm", src), **sig)


def tap_loads(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, io: TileIO, src: Reg, rows: Reg,
              rowb: Reg) -> None:
    """The full-tap fold's IBUF tile from an unpadded plane (a fused chain's, stride 1): per tap one 3-D
    load of its rows and columns, shifted by the tap, the padding written by the DMA (x_zp); the last
    signals the load."""
    if (g.sh, g.sw) != (1, 1):
        raise CompileError("the full-tap fold loads from an unpadded plane only at stride 1")
    t = r.t
    plo, start, phi, lo, hi, dst, block, t0, t1 = t[1], t[2], t[3], t[4], t[5], t[7], t[8], t[10], t[11]
    b.i("mul", block, r.th, rowb)
    dma_box(b, 1, [(r.ow, 1, g.R, 0, 0), (r.th, r.w, rowb, 0, 0), (g.c, r.hw, 1, 0, 0)], g.op.largest.x_zp)
    for i in range(g.kh):
        b.comment(f"kernel row {i}: RTH rows from ROH0 - pt + {i * g.dh}, clamped to the image, the rest padding")
        halo_rows(b, r, (t[0], t0, plo, start, phi, t1), 1, 1, g.pt - i * g.dh)
        b.setp("dma.pad_lo1", plo)
        b.setp("dma.pad_hi1", phi)
        for j in range(g.kw):
            k = i * g.kw + j
            col0 = column_pads(b, r, j * g.dw - g.pl, (lo, hi, t1))     # r.wp is r.ow: one column an output
            io.src(b, src, start, t0)
            if col0:
                b.i("addi", src, src, col0)
            _tap_dst(b, r, g, dst, block, k)
            b.setp("dma.pad_lo0", lo)
            b.setp("dma.pad_hi0", hi)
            sig = {"signal": s.load} if k == g.kh * g.kw - 1 else {}
            b.i("dma", b.ch(0), Mem("ibuf0", dst), Mem(io.src_space, src), **sig)


def block_address(b: Scope, r: TileRegs, g: _Geometry, reg: Reg, base: int, size: int, ob: int) -> None:
    """reg = base + block * size: the block in r.args when a tile is one channel block (by_block), else ob."""
    if g.by_block:
        b.i("muli", reg, r.args, size)
        b.i("addi", reg, reg, base)
    else:
        b.i("li", reg, base + ob * size)


def drain_and_requant(b: Scope, r: TileRegs, s: ConvSems, g: _Geometry, ob: int, cv: Reg | int, ysrc: Reg,
                      asrc: Reg, table: Reg) -> None:
    """Output block ob's accumulators (cv real channels) ABUF -> VBUF after its NU command, then
    requantised in place on the VU (its (M, S) or scale entries from the table)."""
    dma_box(b, 4, [(cv, 4, 4, 0, 0), (r.pix, 4 * g.C, 4 * g.C, 0, 0)])     # the block's real channels
    b.setp("vu.n0", cv)
    b.i("dma", b.ch(1), Mem("vbuf0", ysrc), Mem("abuf0", asrc), wait=s.nu, signal=s.drain)
    block_address(b, r, g, table, g.region.table, g.C * g.entry, ob)
    requant = requant_mnemonic(g)
    b.i(requant, "vu0", ysrc, ysrc, table, "i32", wait=s.drain, signal=s.vu)


def output_part(op: DynamicOp, first: int, end: int) -> DynamicOp:
    """The conv computing output channels [first, end) of op only (groups 1)."""
    def cut(c: Conv2d) -> Conv2d:
        sl = {f: getattr(c, f)[first:end] for f in ("weight", "bias", "multiplier", "shift", "scale")
              if getattr(c, f) is not None}
        return dataclasses.replace(c, **sl)
    return DynamicOp(op.kind, op.x_shape, op.dims, lambda s: cut(op.make(s)), cut(op.largest), cut(op.smallest),
                     op.names)


def _split(op: DynamicOp, cfg: Config, rows_per_tile: int | None = None,
           note: list[tuple[str, str]] | None = None) -> Callable[[Scope], Part]:
    """A dynamic conv whose weights do not fit WBUF as parts of as many output blocks as fit, one after
    another, each reading all of x and writing its channels of y: each part in a scope of its own
    (labels L<k>_, its own registers and semaphores) over b's buffers.  Each ends waiting for its last
    stores, which every command it issued feeds, so the next starts after all of it."""
    g = _Geometry(op, cfg)
    if op.largest.groups != 1:
        raise CompileError(f"dynamic conv2d does not fit this machine: the weights need {g.wbytes} bytes of WBUF, "
                           f"it has {cfg.wbuf_bytes} (a grouped conv is not split yet)")
    per = cfg.wbuf_bytes // g.w_block * g.C
    if per < 1:
        raise CompileError(f"dynamic conv2d does not fit this machine: one output block's weights need "
                           f"{g.w_block} bytes of WBUF, it has {cfg.wbuf_bytes}")
    parts = [prepare(output_part(op, first, min(g.o, first + per)), cfg, rows_per_tile, (first, g.o), note=note)
             for first in range(0, g.o, per)]

    def write(b: Scope) -> Part:
        b.prog.repeat_align = True      # the parts' args, x and y are declared once, their lines kept
        done = []
        for k, part in enumerate(parts):
            if k:
                b.prog.align()
            b.comment(f"---- part {k}")
            done.append(part(Scope(b.prog, prefix=f"{b.prefix}L{k}_", bind=b.bind)))
            b.prog.gap()
        return Part(done[0].title, done[0].notes, done[-1].rows)
    return write


def plan(op: DynamicOp, cfg: Config, rows_per_tile: int | None = None, y_slice: tuple[int, int] | None = None,
         sets: int | None = None, rq: bool = True, taps: bool = True) -> _Geometry:
    """The conv's geometry with its rows per tile chosen (choose_rows; rows_per_tile: that height where it
    fits) and its part of y (y_slice: first channel, all channels)."""
    g = choose_rows(op, cfg, sets, rq, taps)
    if y_slice is not None:
        g.y_slice = y_slice
    if rows_per_tile is not None:      # a fixed tile height where it fits (tests, measurements)
        g.rows = {w: max(1, min(rows_per_tile, g.fit(w))) for w in g.widths}
    return g


def prepare(op: DynamicOp, cfg: Config, rows_per_tile: int | None = None, y_slice: tuple[int, int] | None = None,
            sets: int | None = None, rq: bool = True, taps: bool = True,
            note: list[tuple[str, str]] | None = None) -> Callable[[Scope], Part]:
    """A dynamic conv2d planned (what does not fit raises here): the function that writes it into a scope
    (its buffers, constants and code, ending on its drain), split in parts when its weights do not fit
    WBUF.  With y_slice (first channel, all channels) it writes its channels of a larger y; with sets, in
    that many buffer sets; with rq=False requantised on the VU, not by nu.conv.rq; with taps=False never
    the full-tap fold (tests, measurements); `note` replaces its notes."""
    if y_slice is None and _Geometry(op, cfg).wbytes > cfg.wbuf_bytes:
        return _split(op, cfg, rows_per_tile, note)
    g = plan(op, cfg, rows_per_tile, y_slice, sets, rq, taps)
    return lambda b: write_conv(b, g, note)


def lower_conv(b: Scope, op: DynamicOp, cfg: Config, rows_per_tile: int | None = None,
               sets: int | None = None, rq: bool = True, taps: bool = True) -> Part:
    """Write a dynamic conv2d into b (prepare's options)."""
    return prepare(op, cfg, rows_per_tile, sets=sets, rq=rq, taps=taps)(b)


def program(op: DynamicOp, cfg: Config, rows_per_tile: int | None = None, sets: int | None = None,
            rq: bool = True, taps: bool = True) -> tuple[str, dict[str, bytes], dict[int, int]]:
    """A dynamic conv2d as a program of its own: (assembly, .incbin files, rows per tile by input width)."""
    asm, files, part = one_program(cfg, lambda b: lower_conv(b, op, cfg, rows_per_tile, sets=sets, rq=rq,
                                                             taps=taps))
    return asm, files, part.rows
