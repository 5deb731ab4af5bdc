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
docs/compiler.md, "Dynamic shapes", explains it.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp, axis_rule, check_divisor, reciprocal, window_out
from ..errors import CompileError
from ..ops import Conv2d
from .depthwise import depthwise_weights
from .layout import fscale_table

MAX_WIDTHS = 4096       # widths a dynamic conv's range may span: its tile table has one word per width
TILE_OVERHEAD = 120     # cycles of CU set-up a tile's latency takes beyond its units' work: the pricing's guess


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
        self.depthwise = (big.groups > 1 and big.weight.shape[1] == 1 and self.o == big.groups == c
                          and self.R == self.C)
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
        blocks = -(-self.kh * self.kw // self.tpb) if self.tpb else 0
        self.taps = (taps and not self.depthwise and 0 < blocks < self.in_cb * self.kh * self.kw_nu)
        if self.taps:
            self.fold, self.kh_nu, self.kw_nu, self.in_cb = 1, 1, 1, blocks
        self.w_block = ((4 + self.kh * self.kw) * self.C if self.depthwise
                        else self.in_cb * self.kh_nu * self.kw_nu * self.R * self.C)
        self.wbytes = self.out_cb * self.w_block
        # rq: nu.conv.rq's output stage adds the bias and requantises into VBUF (its (bias, M, S) table in
        # WBUF after the weights), so no bias broadcast, drain or VU pass: one command holds all the input
        # blocks (the stage needs the whole sum); not nu.dwconv, which has no such stage
        self.rq_at = -(-self.wbytes // 64) * 64
        self.rq = rq and not self.depthwise and self.rq_at + self.out_cb * self.C * 12 <= cfg.wbuf_bytes
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
        if self.tab > self.cfg.vbuf_bytes // 2:
            return f"the (M, S) table needs {self.tab} bytes of VBUF, more than half its {self.cfg.vbuf_bytes}"
        if self.fit(self.widths[-1]) < 1:
            return (f"one output row at the largest width {self.widths[-1]} does not fit 1/{self.nsets} of IBUF "
                    f"({self.ib} bytes) and 1/{self.nsets} of ABUF/VBUF ({self.ab} bytes)")
        return ""


def nu_cycles(g: _Geometry, rows: int, ow: int) -> int:
    """The NU's cycles for one tile of rows x ow outputs (every block)."""
    from nnpsim.timing import nu_conv_cycles, nu_dwconv_cycles

    if g.depthwise:
        return g.tile_cb * nu_dwconv_cycles(1, g.kh, g.kw, rows, ow, g.R, g.cfg.nu_latency)
    return nu_conv_cycles(g.out_cb, g.in_cb, g.kh_nu, g.kw_nu, rows, ow, g.R, g.cfg.nu_latency)


def tile_cycles(g: _Geometry, rows: int, w: int, staged: bool) -> tuple[int, int, int]:
    """A tile of `rows` output rows at input width w: (its busiest unit's cycles, the DDR's, the latency
    from its load's issue to its store's end, which the CU's wait for the store of the tile `nsets` back
    spreads over nsets tiles)."""
    from nnpsim.timing import vu_cycles

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
    vu = 0 if g.rq else g.tile_cb * vu_cycles(rows * ow * g.C, 1, 4, cfg.vu_bytes_per_cycle, cfg.vu_latency)
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


def constants(g: _Geometry) -> dict[str, bytes]:
    """Weights in the NU's [out_cb][in_cb][kh][kw][R][C] order, the bias table, the (M, S) table."""
    big = g.op.largest
    wt = np.zeros((g.out_cb * g.C, g.in_cb * g.R, g.kh_nu, g.kw_nu), dtype=np.int8)
    if g.taps:          # block k // tpb, row (k % tpb) * c + ci holds tap k = (i, j) of channel ci
        for i in range(g.kh):
            for j in range(g.kw):
                k = i * g.kw + j
                row = k // g.tpb * g.R + k % g.tpb * g.c
                wt[:g.o, row:row + g.c, 0, 0] = g.weight[:, :, i, j]
    elif g.fold > 1:      # row kwi * c + ci of column j holds tap (kh, j * fold + kwi) of channel ci
        for j in range(g.kw_nu):
            for kwi in range(min(g.fold, g.kw - j * g.fold)):
                wt[:g.o, kwi * g.c:(kwi + 1) * g.c, :, j] = g.weight[:, :, :, j * g.fold + kwi]
    elif not g.depthwise:
        wt[:g.o, :g.c] = g.weight
    w5 = wt.reshape(g.out_cb, g.C, g.in_cb, g.R, g.kh_nu, g.kw_nu).transpose(0, 2, 4, 5, 3, 1)
    if g.depthwise:     # per block its biases then [kh][kw][C]: nu.dwconv's own bias, no broadcast
        w5 = depthwise_weights(big.weight, big.bias, g.C).blocks
    bias = np.zeros(g.out_cb * g.C, dtype="<i4")
    if big.bias is not None:
        bias[:g.o] = big.bias
    if big.scale is not None:       # vu.requant.fpc's float32 scales (the float form, onnxruntime's)
        ms = fscale_table(big.scale, g.out_cb, g.C)
    else:
        ms = np.tile(np.array([1, 0], dtype="<i4"), (g.out_cb * g.C, 1))
        ms[:g.o, 0], ms[:g.o, 1] = big.multiplier, big.shift
    files = {"dyn_w.bin": np.ascontiguousarray(w5).tobytes()}
    if g.rq:            # nu.conv.rq's (bias, M, S) (float form: (bias, scale bits, 0)) per channel
        rq = np.zeros((g.out_cb * g.C, 3), dtype="<i4")
        rq[:, 0] = bias
        if big.scale is not None:
            rq[:, 1] = ms
        else:
            rq[:, 1:] = ms
        files["dyn_rq.bin"] = rq.tobytes()
        return files
    files["dyn_ms.bin"] = ms.tobytes()
    if not g.depthwise:
        files["dyn_bias.bin"] = bias.tobytes()
    return files


def block_diagonal(weight: np.ndarray, groups: int) -> np.ndarray:
    """A grouped conv's [O, C/groups, KH, KW] weights as a dense conv's [O, C, KH, KW]: output channel o of
    group g sees only group g's input channels, every other weight zero."""
    o, cg, kh, kw = weight.shape
    dense = np.zeros((o, cg * groups, kh, kw), dtype=weight.dtype)
    og = o // groups
    for grp in range(groups):
        dense[grp * og:(grp + 1) * og, grp * cg:(grp + 1) * cg] = weight[grp * og:(grp + 1) * og]
    return dense


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


def notes(g: _Geometry) -> list[str]:
    """The conv's notes: its output's height and width follow from the input's."""
    n, _, h, w = g.op.x_shape
    return target_notes(g.op, [axis_name(n), str(g.y_slice[1]), _axis(h, g.pt + g.pb - g.ekh, g.sh),
                               _axis(w, g.pl + g.pr - g.ekw, g.sw)])


# Registers: sizes, loop state, buffer addresses, temporaries.
RN, RH, RW, ROH, ROW, RWP, RHW, ROHW = "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9"
RI, ROH0, RTH, RB, RPEND, RIB, RAB, RVB, RPIX = "r10", "r11", "r12", "r13", "r14", "r15", "r16", "r17", "r18"
RMAX = "r31"
T = [f"r{k}" for k in range(19, 31)]
S_BIAS, S_LOAD, S_NU, S_DRAIN, S_VU, S_STORE, S_W, S_AFREE = "s0", "s1", "s2", "s3", "s4", "s5", "s6", "s7"


def _size(lines: list[str], reg: str, d, idx: dict[str, int]) -> None:
    lines.append(f"        ld      {reg}, r1, {4 * idx[d.name]}" if isinstance(d, Dim) else f"        li      {reg}, {d}")


def column_pads(i, shift: int, regs: tuple[str, str, str]) -> int:
    """Emit (pad_lo, pad_hi) of a row of RWP columns whose column j holds input column j + shift (the left
    padding, at most the row; the columns past RW's end): regs (lo, hi, scratch).  Returns the first real
    column, max(0, shift)."""
    lo, hi, tmp = regs
    col0 = max(0, shift)
    i(f"sub     {hi}, {RW}, r0")
    i(f"addi    {hi}, {hi}, {-col0}")
    i(f"max     {hi}, {hi}, r0")
    i(f"li      {lo}, {max(0, -shift)}")
    i(f"min     {lo}, {lo}, {RWP}")
    i(f"sub     {tmp}, {RWP}, {lo}")
    i(f"min     {hi}, {hi}, {tmp}")                # real columns
    i(f"sub     {hi}, {tmp}, {hi}")                # pad_hi
    return col0


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


def staged_io(g: _Geometry, at: int, set_bytes: int) -> TileIO:
    """Input rows DDR -> DM as whole rows per channel first (DDR bursts: IBUF's layout puts the channels
    innermost, one byte per burst from DDR), then DM -> IBUF; two DM sets of set_bytes from offset at."""
    def stage(em, start, rows, plo, phi, prefix):
        real, plane, src, dst = T[6], T[7], T[8], T[9]
        em.i(f"sub     {real}, {rows}, {plo}")
        em.i(f"sub     {real}, {real}, {phi}")
        em.i(f"beq     {real}, r0, {prefix}staged")    # a tile wholly in the padding reads nothing
        em.i(f"mul     {plane}, {real}, {RW}")
        em.i(f"mul     {T[10]}, {RH}, {RW}")
        em.dma_box(1, [(plane, 1, 1, 0, 0), (g.c, T[10], plane, 0, 0)])
        em.i(f"mul     {src}, {RI}, {T[10]}")
        em.i(f"muli    {src}, {src}, {g.c}")
        em.i(f"mul     {T[10]}, {start}, {RW}")
        em.i(f"add     {src}, {src}, {T[10]}")
        em.i(f"la      {T[10]}, x")
        em.i(f"add     {src}, {src}, {T[10]}")
        em.i(f"muli    {dst}, {RB}, {set_bytes}")
        em.i(f"addi    {dst}, {dst}, {at}")
        em.i(f"dma     ch0, dm[{dst}], ddr[{src}]")    # the loads from DM queue behind it on ch0
        em.e(f"{prefix}staged:")
        em.i(f"mul     {RHW}, {real}, {RW}")          # the source plane is now the DM tile's

    def padded(em, start, rows, plo, phi, prefix):
        # the full-tap fold's gathers read a tile of every row and column with its padding: [c][rows][w + pl
        # + pr] in the DM set, the padding written by this DMA (x_zp)
        wp, plane, src, dst, hw = T[6], T[7], T[8], T[9], T[10]
        em.i(f"addi    {wp}, {RW}, {g.pl + g.pr}")
        em.i(f"mul     {plane}, {rows}, {wp}")
        em.i(f"mul     {hw}, {RH}, {RW}")
        em.dma_box(1, [(wp, 1, 1, g.pl, g.pr), (rows, RW, wp, plo, phi), (g.c, hw, plane, 0, 0)],
                   g.op.largest.x_zp)
        em.i(f"mul     {src}, {RI}, {hw}")
        em.i(f"muli    {src}, {src}, {g.c}")
        em.i(f"mul     {T[11]}, {start}, {RW}")
        em.i(f"add     {src}, {src}, {T[11]}")
        em.i(f"la      {T[11]}, x")
        em.i(f"add     {src}, {src}, {T[11]}")
        em.i(f"muli    {dst}, {RB}, {set_bytes}")
        em.i(f"addi    {dst}, {dst}, {at}")
        em.i(f"dma     ch0, dm[{dst}], ddr[{src}]")    # the gathers from DM queue behind it on ch0

    def src(em, reg, start, tmp):
        em.i(f"muli    {reg}, {RB}, {set_bytes}")
        em.i(f"addi    {reg}, {reg}, {at}")
    return TileIO(src, ddr_io(g.c, g.y_slice[1], y_first=g.y_slice[0]).dst, "dm", "ddr",
                  padded if g.taps else stage)


def stage_bytes(g: _Geometry) -> int:
    """One DM set of a tile's real input rows at the largest width and tile height (the full-tap fold: every
    row and column with the padding, the most any width takes), 64-aligned."""
    if g.taps:
        return max(-(-g.c * ((g.rows[w] - 1) * g.sh + g.ekh) * (w + g.pl + g.pr) // 64) * 64 for w in g.widths)
    th = max(g.rows.values())
    return -(-g.c * ((th - 1) * g.sh + g.ekh) * g.widths[-1] // 64) * 64


def load_constants(em: Emit, g: _Geometry, signal: bool = True, on_loads: bool = False) -> None:
    """Queue the constants, each ahead of its first user on the same channel (FIFO orders them); the
    weights signal S_W block by block unless signal=False (something else orders them).  Tiles of one
    channel block (by_block) take the weights on ch0 instead, ahead of the loads their NU commands wait
    for, and need no wait of their own; so do any conv's with on_loads.  nu.conv.rq's table goes ahead of
    the weights on their channel."""
    rg = g.region
    # by_block, on_loads: the weights on ch0, ahead of every load (the NU waits for its load), no signal
    wch, signal = ("ch0", False) if g.by_block or on_loads else ("ch1", signal)
    if g.rq:
        em.dma_box(4, [(g.out_cb * g.C * 3, 4, 4, 0, 0)])
        em.i(f"la      {T[0]}, dyn_rq")
        em.i(f"li      {T[1]}, {rg.wbuf + g.rq_at}")
        em.i(f"dma     {wch}, wbuf0[{T[1]}], ddr[{T[0]}]")
    em.e("        ; constants, each queued ahead of its first user on the same channel (FIFO orders them):")
    em.e("        ; weights block by block on ch1 (the first tile's CU waits for each before its NU command),")
    em.e("        ; then the (M, S) table on ch1 before the first drain, the bias table into dm on ch3 before")
    em.e("        ; the first broadcast")
    em.dma_box(1, [(g.w_block, 1, 1, 0, 0)])
    em.i(f"la      {T[0]}, dyn_w")
    for ob in range(g.out_cb):
        em.i(f"li      {T[1]}, {rg.wbuf + ob * g.w_block}")
        em.i(f"dma     {wch}, wbuf0[{T[1]}], ddr[{T[0]}]" + (f", signal={S_W}" if signal else ""))
        em.i(f"addi    {T[0]}, {T[0]}, {g.w_block}")
    if g.rq:
        return
    em.dma_box(4, [(g.out_cb * g.C * g.entry // 4, 4, 4, 0, 0)])
    em.i(f"la      {T[0]}, dyn_ms")
    em.i(f"dma     ch1, vbuf0[{_at(em, rg.table, T[1])}], ddr[{T[0]}]")
    if not g.depthwise:
        em.setp("dma.size0", g.out_cb * g.C)
        em.i(f"la      {T[0]}, dyn_bias")
        em.i(f"dma     ch3, dm[{_at(em, rg.dm, T[1])}], ddr[{T[0]}]")


def _at(em: Emit, offset: int, reg: str) -> str:
    """A register holding offset: r0 for 0, else reg loaded with it."""
    if not offset:
        return "r0"
    em.i(f"li      {reg}, {offset}")
    return reg


def fixed_params(em: Emit, g: _Geometry) -> None:
    """The NU and VU parameters that do not depend on the shape."""
    big = g.op.largest
    sh, sw, dh, dw = (1, 1, 1, 1) if g.taps else (g.sh, g.sw, g.dh, g.dw * g.fold)    # taps: a 1x1 conv
    for p, v in (("in_cb", 1 if g.depthwise else g.in_cb), ("out_cb", 1), ("k_h", g.kh_nu), ("k_w", g.kw_nu),
                 ("stride_h", sh), ("stride_w", sw), ("dil_h", dh), ("dil_w", dw), ("x_zp", big.x_zp)):
        em.setp(f"nu.{p}", v)
    if g.rq:
        for p, v in (("rq_table", g.region.wbuf + g.rq_at), ("rq_zp_out", big.zp_out), ("rq_lo", big.lo),
                     ("rq_hi", big.hi), ("rq_float", int(big.scale is not None))):
            em.setp(f"nu.{p}", v)
        return
    for p, v in (("n0", g.C), ("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", 4), ("b_stride0", g.entry),
                 ("d_stride1", g.C), ("a_stride1", 4 * g.C), ("b_stride1", 0),
                 ("za", 0), ("zp_out", big.zp_out), ("lo", big.lo), ("hi", big.hi)):
        em.setp(f"vu.{p}", v)


def program_text(g: _Geometry) -> str:
    """The assembly of the dynamic kernel."""
    op, big, cfg = g.op, g.op.largest, g.cfg
    n, c, h, w = op.x_shape
    idx = {d.name: k for k, d in enumerate(op.dims)}
    L = [f"; dynamic kernel: {op!r}", "; output rows per tile read from a table by input width; full width;"
         " two buffer sets", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()] + ["        " + s for s in notes(g)]
    x_max = big.x_shape
    y_max = (big.output.shape[0], g.y_slice[1]) + big.output.shape[2:]
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}",
          "        .align 64", f"        .buffer x, int8, ({', '.join(map(str, x_max))},)",
          f"        .space {int(np.prod(x_max))}", "        .align 64",
          f"        .buffer y, int8, ({', '.join(map(str, y_max))},)", f"        .space {int(np.prod(y_max))}"]
    L += constant_data(g) + ["        .align 64", f"dyn_rows:                               ; output rows per tile, by "
                             f"input width from {g.widths[0]}", *(f"        .word {g.rows[w]}" for w in g.widths),
                             "", "        .text", "main:"]
    em = Emit(L)
    e, i = em.e, em.i
    i("la      r1, args")
    for reg, d in ((RN, n), (RH, h), (RW, w)):
        _size(L, reg, d, idx)
    e("        ; output size, padded width, plane sizes")
    emit_out_size(i, ROH, RH, g.pt + g.pb - g.ekh, g.sh, T[0])
    emit_out_size(i, ROW, RW, g.pl + g.pr - g.ekw, g.sw, T[0])
    padded_width(em, g)
    i(f"mul     {RHW}, {RH}, {RW}")
    i(f"mul     {ROHW}, {ROH}, {ROW}")
    e("        ; rows per tile for this width (the compiler's table)")
    i(f"slli    {T[0]}, {RW}, 2")
    i(f"la      {T[1]}, dyn_rows - {4 * g.widths[0]}")
    i(f"add     {T[0]}, {T[0]}, {T[1]}")
    i(f"ld      {RMAX}, {T[0]}, 0")
    load_constants(em, g)
    fixed_params(em, g)
    i(f"li      {RI}, 0")
    if not g.by_block:
        i("li      r1, 1")                         # r1: 1 until the first tile has waited for the weights
    i(f"li      {RB}, 0")
    i(f"li      {RPEND}, 0")
    if g.marker_sets:     # the two accumulator sets start free; RAB alternates between them
        i(f"li      {RAB}, 0")
        i(f"sem.signal {S_AFREE}")
        i(f"sem.signal {S_AFREE}")
    e("batch:")
    if g.by_block:
        i("li      r1, 0")                         # r1: the channel block
        e("block:")
    i(f"li      {ROH0}, 0")
    e("tile:")
    e("        ; rows of this tile: th, or the remainder")
    i(f"sub     {RTH}, {ROH}, {ROH0}")
    i(f"min     {RTH}, {RTH}, {RMAX}")
    e(f"        ; buffers of tile k-{g.nsets} are reused: wait for its store")
    i(f"li      {T[0]}, {g.nsets}")
    i(f"blt     {RPEND}, {T[0]}, free")
    i(f"sem.wait {S_STORE}")
    i(f"addi    {RPEND}, {RPEND}, -1")
    e("free:")
    g.marker = -(-g.out_cb * g.C * 4 // 64) * 64        # after the bias table
    at = g.stage_at
    size = stage_bytes(g)
    # Staged when folded: its kw loads of a row read a row's columns each, short runs of DDR bursts (the
    # full-tap fold always: its gathers read the padded copy, which fit() sized); the others load straight
    # from DDR, a channel's rows one run (the box's columns innermost)
    staged = g.taps or (g.fold > 1 and at + g.nsets * size <= cfg.dm_bytes)
    tile_body(em, g, staged_io(g, at, size) if staged else ddr_io(g.c, g.y_slice[1], y_first=g.y_slice[0]))
    if not g.by_block:
        i("li      r1, 0")
    if g.marker_sets:
        i(f"sub     {RAB}, r0, {RAB}")
        i(f"addi    {RAB}, {RAB}, {g.ab}")
    tail = drain_and_halt(RPEND, S_STORE)
    if g.marker_sets:     # the last two markers' tokens, so that none is left at halt
        tail[-1:-1] = [f"        sem.wait {S_AFREE}"] * 2
    L += next_tile(g.nsets, g.out_cb if g.by_block else 0) + tail
    return "\n".join(L) + "\n"


def constant_data(g: _Geometry, prefix: str = "") -> list[str]:
    """The .data lines of the weights, bias and (M, S) tables (labels and files prefixed in a fused chain)."""
    out = []
    names = (("dyn_w", "dyn_rq") if g.rq else ("dyn_w", "dyn_ms") if g.depthwise
             else ("dyn_w", "dyn_bias", "dyn_ms"))
    for name in names:
        out += ["        .align 64", f"{prefix}{name}:", f'        .incbin "{prefix}{name}.bin"']
    return out


def padded_width(em: Emit, g: _Geometry) -> None:
    """RWP: the columns of a tile's input rows in IBUF (from ROW when folded, else RW plus the padding)."""
    if g.taps:
        em.i(f"add     {RWP}, {ROW}, r0")
    elif g.fold > 1:
        em.i(f"addi    {RWP}, {ROW}, -1")
        em.i(f"muli    {RWP}, {RWP}, {g.sw}")
        em.i(f"addi    {RWP}, {RWP}, {1 + (g.kw_nu - 1) * g.fold * g.dw}")
    else:
        em.i(f"addi    {RWP}, {RW}, {g.pl + g.pr}")


def tile_body(em: Emit, g: _Geometry, io: TileIO, prefix: str = "", weights_wait: bool = True,
              epilogue: Callable | None = None) -> None:
    """One tile: RTH output rows from row ROH0 of image RI, in buffer set RB of the op's region (the first
    tile's CU waits for each weight block unless weights_wait=False).  With nu.conv.rq, epilogue(em, ob,
    rows, channels) may put VU work between block ob's NU command and its store, returning (the store's
    VBUF source, the semaphore the store waits for)."""
    e, i, setp, dma_box = em.e, em.i, em.setp, em.dma_box
    big, rg = g.op.largest, g.region
    i(f"muli    {RIB}, {RB}, {g.ib}")
    if rg.ibuf:
        i(f"addi    {RIB}, {RIB}, {rg.ibuf}")
    if g.rq:
        pass                # no accumulators in ABUF: nu.conv.rq writes the tile's int8 rows to VBUF
    elif not g.marker_sets:     # else RAB alternates by itself (next_tile)
        i(f"muli    {RAB}, {RB}, {g.ab}")
        if rg.abuf:
            i(f"addi    {RAB}, {RAB}, {rg.abuf}")
    elif not g.depthwise:   # before the bias broadcast writes it (a depthwise conv: before its NU command)
        e("        ; the accumulator set of tile k-2 is reused: wait for its drain's marker")
        i(f"sem.wait {S_AFREE}")
    i(f"muli    {RVB}, {RB}, {g.vb}")
    i(f"addi    {RVB}, {RVB}, {g.sets}")
    i(f"mul     {RPIX}, {RTH}, {ROW}")
    if not g.depthwise and not g.rq:
        e("        ; bias broadcast dm -> abuf")
        i(f"slli    {T[1]}, {RPIX}, {2 + (g.C.bit_length() - 1)}")
        # only the real channels when there is one block: the others' accumulators are never read
        dma_box(4, [(g.o if g.out_cb == 1 else g.C, 4, 4, 0, 0), (RPIX, 0, 4 * g.C, 0, 0),
                    (g.out_cb, 4 * g.C, T[1], 0, 0)])
        i(f"dma     ch3, abuf0[{RAB}], dm[{_at(em, rg.dm, T[0])}], signal={S_BIAS}")
    e("        ; input rows with halo -> ibuf")
    rows, vstart, plo, start, phi = T[1], T[2], T[3], T[4], T[5]
    halo_rows(i, (rows, vstart, plo, start, phi, T[11]), g.sh, g.ekh, g.pt)
    src, dst, step_dst, rowb, step_src = T[6], T[7], T[8], T[9], T[10]
    if io.stage:
        io.stage(em, start, rows, plo, phi, prefix)
    io.src(em, src, start, T[11])
    i(f"slli    {rowb}, {RWP}, {g.R.bit_length() - 1}")
    i(f"mul     {step_dst}, {rows}, {rowb}")
    i(f"muli    {step_src}, {RHW}, {g.R}")
    i(f"add     {dst}, {RIB}, r0")
    if g.taps:
        e("        ; the full-tap fold: the window's taps gathered into the array's rows")
        (tap_gathers if io.stage else tap_loads)(em, g, io, src, rows, rowb)
    for kwi in range(g.fold if g.fold > 1 else 0):
        # group kwi: rows kwi*c.., column j holds input column j - pl + kwi*dw
        col0 = column_pads(i, kwi * g.dw - g.pl, (T[0], T[11], step_dst))
        i(f"addi    {step_src}, {src}, {col0}")
        i(f"addi    {dst}, {RIB}, {kwi * g.c}")
        dma_box(1, [(RWP, 1, g.R, T[0], T[11]), (rows, RW, rowb, plo, phi), (g.c, RHW, 1, 0, 0)],
                big.x_zp)
        sig = f", signal={S_LOAD}" if kwi == g.fold - 1 else ""
        i(f"dma     ch0, ibuf0[{dst}], {io.src_space}[{step_src}]{sig}")
    if g.by_block:      # block r1's input channels: min(R, c - r1 * R) of them, r1 * R planes in
        i(f"mul     {T[11]}, r1, {RHW}")
        i(f"muli    {T[11]}, {T[11]}, {g.R}")
        i(f"add     {src}, {src}, {T[11]}")
        i(f"muli    {T[0]}, r1, {-g.R}")
        i(f"addi    {T[0]}, {T[0]}, {g.c}")
        i(f"li      {T[11]}, {g.R}")
        i(f"min     {T[0]}, {T[0]}, {T[11]}")
    for cb in range(g.tile_cb if g.depthwise else g.in_cb if g.fold == 1 and not g.taps else 0):
        cr = T[0] if g.by_block else min(g.R, g.c - cb * g.R)
        if cb:
            i(f"add     {src}, {src}, {step_src}")
            i(f"add     {dst}, {dst}, {step_dst}")
        dma_box(1, [(RWP, 1, g.R, g.pl, g.pr), (rows, RW, rowb, plo, phi), (cr, RHW, 1, 0, 0)], big.x_zp)
        sig = f", signal={S_LOAD}" if cb == (g.tile_cb if g.depthwise else g.in_cb) - 1 else ""
        i(f"dma     ch0, ibuf0[{dst}], {io.src_space}[{src}]{sig}")
    e("        ; convolve onto the bias, one command per output block so that block k's epilogue")
    e("        ; overlaps block k+1's convolution")
    for p, v in (("in_h", RTH if g.taps else rows), ("in_w", RWP), ("out_h", RTH), ("out_w", ROW)):
        setp(f"nu.{p}", v)
    if not g.depthwise and not g.rq:
        i(f"sem.wait {S_BIAS}")                    # the NU's one wait is the input's: join the bias here
    acc, wreg, pixb, rin, in_step = T[6], T[7], T[8], T[11], T[10]
    # bytes of one block's accumulators (int32), or of its int8 rows in VBUF (rq)
    i(f"slli    {pixb}, {RPIX}, {g.C.bit_length() - 1 + (0 if g.rq else 2)}")
    i(f"add     {acc}, {RVB if g.rq else RAB}, r0")
    if g.depthwise and g.marker_sets:
        i(f"sem.wait {S_AFREE}")                 # the accumulator set of tile k-2 is drained
    if g.depthwise:      # block ob reads input block ob
        i(f"mul     {in_step}, {rows}, {rowb}")
        i(f"add     {rin}, {RIB}, r0")
    for ob in range(g.tile_cb):
        if ob:
            i(f"add     {acc}, {acc}, {pixb}")
            if g.depthwise:
                i(f"add     {rin}, {rin}, {in_step}")
        wait = f", wait={S_LOAD}" if ob == 0 else ""
        if weights_wait and not g.by_block:
            i(f"beq     r1, r0, {prefix}weights{ob}")
            i(f"sem.wait {S_W}")
            e(f"{prefix}weights{ob}:")
        block_address(i, g, wreg, rg.wbuf, g.w_block, ob)
        if g.depthwise:
            i(f"nu.dwconv nu0, {acc}, {rin}, {wreg}{wait}, signal={S_NU}")
        elif g.rq:      # one block a command: its table entries start the table (the stage indexes by ob)
            if g.out_cb > 1:
                setp("nu.rq_table", rg.wbuf + g.rq_at + ob * g.C * 12)
            i(f"nu.conv.rq nu0, {acc}, {RIB}, {wreg}{wait}, signal={S_NU}")
        else:
            i(f"nu.conv.acc nu0, {acc}, {RIB}, {wreg}{wait}, signal={S_NU}")
    if g.rq:
        e("        ; per output block: store its int8 rows from vbuf")
    else:
        e("        ; per output block: drain abuf -> vbuf, requantise in place, store")
        setp("vu.n1", RPIX)
    ydst, ysrc, asrc, step_y, table = T[3], T[4], T[6], T[9], T[10]
    io.dst(em, ydst, T[5])
    i(f"muli    {step_y}, {ROHW}, {g.C}")
    if g.by_block:      # block r1: its r1 * C output planes in, min(C, o - r1 * C) channels, its table entries
        i(f"mul     {T[5]}, {step_y}, r1")
        i(f"add     {ydst}, {ydst}, {T[5]}")
        i(f"muli    {T[0]}, r1, {-g.C}")
        i(f"addi    {T[0]}, {T[0]}, {g.o}")
        i(f"li      {T[5]}, {g.C}")
        i(f"min     {T[0]}, {T[0]}, {T[5]}")
    i(f"add     {ysrc}, {RVB}, r0")
    i(f"add     {asrc}, {RAB}, r0")
    for ob in range(g.tile_cb):
        cv = T[0] if g.by_block else min(g.C, g.o - ob * g.C)
        if ob:
            i(f"add     {ysrc}, {ysrc}, {pixb}")
            i(f"add     {asrc}, {asrc}, {pixb}")
            i(f"add     {ydst}, {ydst}, {step_y}")
        if not g.rq:
            drain_and_requant(em, g, ob, cv, ysrc, asrc, table)
        src, wait = ysrc, S_NU if g.rq else S_VU
        if epilogue is not None:
            src, wait = epilogue(em, ob, ysrc, cv)
        dma_box(1, [(RPIX, g.C, 1, 0, 0), (cv, 1, ROHW, 0, 0)])
        sig = f", signal={S_STORE}" if ob == g.tile_cb - 1 else ""
        i(f"dma     ch2, {io.dst_space}[{ydst}], vbuf0[{src}], wait={wait}{sig}")
    if g.marker_sets:     # a one-word copy queued behind the drains: the accumulator set is free when it ends
        setp("dma.size0", 1)
        setp("dma.size1", 1)
        i(f"li      {T[11]}, {g.marker}")
        i(f"dma     ch1, dm[{T[11]}], dm[{T[11]}], signal={S_AFREE}")


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


def _tap_dst(em: Emit, g: _Geometry, dst: str, block: str, k: int) -> None:
    """dst = the IBUF address of tap k's rows: RIB + (k // tpb) * block + (k % tpb) * c."""
    em.i(f"muli    {dst}, {block}, {k // g.tpb}")
    em.i(f"add     {dst}, {dst}, {RIB}")
    if k % g.tpb:
        em.i(f"addi    {dst}, {dst}, {k % g.tpb * g.c}")


def tap_gathers(em: Emit, g: _Geometry, io: TileIO, src: str, rows: str, rowb: str) -> None:
    """The full-tap fold's IBUF tile from the padded copy in DM at src ([c][rows][w + pl + pr]): per run of
    taps of one kernel row in one block a 4-D gather (columns sw apart, rows sh apart, the channels, the
    taps dw apart) into rows (k % tpb) * c + ci of block k // tpb; the last signals the load."""
    wp, step, plane, dst, block, base = T[0], T[8], T[10], T[7], T[5], T[4]
    em.i(f"addi    {wp}, {RW}, {g.pl + g.pr}")
    em.i(f"muli    {step}, {wp}, {g.sh}")
    em.i(f"mul     {plane}, {rows}, {wp}")
    em.i(f"mul     {block}, {RTH}, {rowb}")
    em.i(f"add     {base}, {src}, r0")
    runs = tap_runs(g)
    for n, (i, j, count) in enumerate(runs):
        em.dma_box(1, [(ROW, g.sw, g.R, 0, 0), (RTH, step, rowb, 0, 0), (g.c, plane, 1, 0, 0),
                       (count, g.dw, g.c, 0, 0)])
        em.i(f"muli    {src}, {wp}, {i * g.dh}")
        em.i(f"addi    {src}, {src}, {j * g.dw}")
        em.i(f"add     {src}, {src}, {base}")
        _tap_dst(em, g, dst, block, i * g.kw + j)
        sig = f", signal={S_LOAD}" if n == len(runs) - 1 else ""
        em.i(f"dma     ch0, ibuf0[{dst}], dm[{src}]{sig}")


def tap_loads(em: Emit, g: _Geometry, io: TileIO, src: str, rows: str, rowb: str) -> None:
    """The full-tap fold's IBUF tile from an unpadded plane (a fused chain's, stride 1): per tap one 3-D
    load of its rows and columns, shifted by the tap, the padding written by the DMA (x_zp); the last
    signals the load."""
    if (g.sh, g.sw) != (1, 1):
        raise CompileError("the full-tap fold loads from an unpadded plane only at stride 1")
    plo, start, phi, lo, hi, dst, block, t0, t1 = T[1], T[2], T[3], T[4], T[5], T[7], T[8], T[10], T[11]
    em.i(f"mul     {block}, {RTH}, {rowb}")
    em.dma_box(1, [(ROW, 1, g.R, 0, 0), (RTH, RW, rowb, 0, 0), (g.c, RHW, 1, 0, 0)], g.op.largest.x_zp)
    for i in range(g.kh):
        em.e(f"        ; kernel row {i}: RTH rows from ROH0 - pt + {i * g.dh}, clamped to the image, the rest padding")
        halo_rows(em.i, (T[0], t0, plo, start, phi, t1), 1, 1, g.pt - i * g.dh)
        em.setp("dma.pad_lo1", plo)
        em.setp("dma.pad_hi1", phi)
        for j in range(g.kw):
            k = i * g.kw + j
            col0 = column_pads(em.i, j * g.dw - g.pl, (lo, hi, t1))     # RWP is ROW: one column an output
            io.src(em, src, start, t0)
            if col0:
                em.i(f"addi    {src}, {src}, {col0}")
            _tap_dst(em, g, dst, block, k)
            em.setp("dma.pad_lo0", lo)
            em.setp("dma.pad_hi0", hi)
            sig = f", signal={S_LOAD}" if k == g.kh * g.kw - 1 else ""
            em.i(f"dma     ch0, ibuf0[{dst}], {io.src_space}[{src}]{sig}")


def block_address(i, g: _Geometry, reg: str, base: int, size: int, ob: int) -> None:
    """reg = base + block * size: the block in r1 when a tile is one channel block (by_block), else ob."""
    if g.by_block:
        i(f"muli    {reg}, r1, {size}")
        i(f"addi    {reg}, {reg}, {base}")
    else:
        i(f"li      {reg}, {base + ob * size}")


def drain_and_requant(em: Emit, g: _Geometry, ob: int, cv, ysrc: str, asrc: str, table: str) -> None:
    """Output block ob's accumulators (cv real channels) ABUF -> VBUF after its NU command, then
    requantised in place on the VU (its (M, S) or scale entries from the table)."""
    big, rg, i = g.op.largest, g.region, em.i
    em.dma_box(4, [(cv, 4, 4, 0, 0), (RPIX, 4 * g.C, 4 * g.C, 0, 0)])     # the block's real channels
    em.setp("vu.n0", cv)
    i(f"dma     ch1, vbuf0[{ysrc}], abuf0[{asrc}], wait={S_NU}, signal={S_DRAIN}")
    block_address(i, g, table, rg.table, g.C * g.entry, ob)
    i(f"{'vu.requant.fpc' if big.scale is not None else 'vu.requant.pc'} vu0, {ysrc}, {ysrc}, {table}, i32, "
      f"wait={S_DRAIN}, signal={S_VU}")


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


def output_part(op: DynamicOp, first: int, end: int) -> DynamicOp:
    """The conv computing output channels [first, end) of op only (groups 1)."""
    def cut(c: Conv2d) -> Conv2d:
        sl = {f: getattr(c, f)[first:end] for f in ("weight", "bias", "multiplier", "shift", "scale")
              if getattr(c, f) is not None}
        return dataclasses.replace(c, **sl)
    return DynamicOp(op.kind, op.x_shape, op.dims, lambda s: cut(op.make(s)), cut(op.largest), cut(op.smallest),
                     op.names)


def lower_split(op: DynamicOp, config: Config, rows_per_tile: int | None = None):
    """A dynamic conv whose weights do not fit WBUF as parts of as many output blocks as fit, one after
    another in one program, each reading all of x and writing its channels of y."""
    from .dynamic_chain import join

    g = _Geometry(op, config)
    if op.largest.groups != 1:
        raise CompileError(f"dynamic conv2d does not fit this machine: the weights need {g.wbytes} bytes of WBUF, "
                           f"it has {config.wbuf_bytes} (a grouped conv is not split yet)")
    per = config.wbuf_bytes // g.w_block * g.C
    if per < 1:
        raise CompileError(f"dynamic conv2d does not fit this machine: one output block's weights need "
                           f"{g.w_block} bytes of WBUF, it has {config.wbuf_bytes}")
    programs, rows = [], {}
    for first in range(0, g.o, per):
        asm, files, rows = lower_conv(output_part(op, first, min(g.o, first + per)), config, rows_per_tile,
                                      (first, g.o))
        programs.append((asm, files))
    asm, files = join(programs)
    return asm, files, rows


def lower_conv(op: DynamicOp, config: Config, rows_per_tile: int | None = None,
               y_slice: tuple[int, int] | None = None, sets: int | None = None, rq: bool = True,
               taps: bool = True):
    """A dynamic conv2d's (assembly, .incbin files, rows per tile by input width); with y_slice (first
    channel, all channels) it writes its channels of a larger y; with sets, in that many buffer sets; with
    rq=False requantised on the VU, not by nu.conv.rq; with taps=False never the full-tap fold (tests,
    measurements)."""
    if y_slice is None and _Geometry(op, config).wbytes > config.wbuf_bytes:
        return lower_split(op, config, rows_per_tile)
    g = choose_rows(op, config, sets, rq, taps)
    if y_slice is not None:
        g.y_slice = y_slice
    if rows_per_tile is not None:      # a fixed tile height where it fits (tests, measurements)
        g.rows = {w: max(1, min(rows_per_tile, g.fit(w))) for w in g.widths}
    return fold_channels(program_text(g), config.dma_channels), constants(g), g.rows
