"""Depthwise convolutions on the NU's depthwise mode (nu.dwconv; nu.fdwconv in the float mode; docs/architecture.md,
NU).

A depthwise conv (one input channel per group, one output channel per group)
through nu.conv is block-diagonal: each weight block is a diagonal, so 31 of
the array's 32 rows multiply zeros.  nu.dwconv gives each column one channel
and fills the rows with the taps of several pixels, so the same weights are
stored as [block][k_h][k_w][cols] (one lane per channel), after the block's
int32 biases, with which nu.dwconv starts its accumulators (no bias broadcast
into ABUF: at four bytes per output it would cost as much as the drain).  The
rest of the NU lowering (tiles, input blocks, drain, requantisation) is
unchanged: output block ob reads input block ob.

In the float mode (a conv onnxruntime runs in float32) the same conv runs as
nu.fdwconv: per block the cols float32 biases, the cols float32 output scales,
then [KH][KW][cols] float32 weights (float_depthwise_weights).  nu.fdwconv adds
each window's products in MLAS's M = 1 order (one filter a group) and quantises
into VBUF itself, so it needs no accumulators, drain or requantiser's table: a
tiling of it is one on the NU's output stage (drain "nu") whose table lies in
its weights.
"""
from __future__ import annotations

import numpy as np

from ..ir import Dma, Ref
from ..ops.nu import FloatConv, live_taps
from .conv_plan import ConvTiling, NuPlan, buffer_needs, fits, powers_up_to
from .layout import ConvView, NuWeights, ddr_order


def uses_depthwise_mode(view: ConvView, rows: int, cols: int) -> bool:
    """Is the conv depthwise with a channel multiplier of 1, on an array whose blocks line up
    (channel block of IBUF = output block = cols channels)?  Then it runs on nu.dwconv, or in the float
    mode on nu.fdwconv (ir.NuConv.mnemonic): the one decision of which command a conv takes beside nu.conv."""
    o, cg = view.weight.shape[:2]
    return (view.groups > 1 and cg == 1 and o == view.groups and view.in_channels == o
            and view.fold is None and rows == cols)


def depthwise_weights(weight: np.ndarray, bias: np.ndarray | None, cols: int) -> NuWeights:
    """[C, 1, KH, KW] weights and the int32 bias as nu.dwconv reads them: per block of cols channels
    the cols biases (little-endian int32) then [KH][KW][cols] int8 weights, as int8
    [blocks, 1, (4 + KH * KW) * cols]; zero lanes past the last channel.  Block ob reads input block ob."""
    c, _, kh, kw = weight.shape
    n_b = -(-c // cols)
    lanes = np.zeros((n_b * cols, kh, kw), dtype=np.int8)
    lanes[:c] = weight[:, 0]
    b = np.zeros(n_b * cols, dtype="<i4")
    if bias is not None:
        b[:c] = bias
    w = lanes.reshape(n_b, cols, kh * kw).transpose(0, 2, 1).reshape(n_b, kh * kw * cols)
    blocks = np.concatenate([b.view(np.int8).reshape(n_b, 4 * cols), w], axis=1)
    return NuWeights(np.ascontiguousarray(blocks[:, None, :]), tuple(range(n_b)), n_b, "")


def float_depthwise_weights(f: FloatConv, cols: int) -> NuWeights:
    """A float-mode depthwise conv's blocks as nu.fdwconv reads them: per block of cols channels the float32
    biases, the output scales (QuantizeLinear's, one for every lane), then [KH][KW][cols] float32 weights, as
    float32 [blocks, 1, (2 + KH * KW) * cols]; past the last channel zero biases and weights, and the same scale
    (which the NU checks to be a positive finite float32).  Block ob reads input block ob."""
    c, _, kh, kw = f.weight.shape
    n_b = -(-c // cols)
    rows = np.zeros((n_b * cols, 2 + kh * kw), dtype=np.float32)
    rows[:c, 0] = f.bias
    rows[:, 1] = f.y_scale
    rows[:c, 2:] = f.weight.reshape(c, kh * kw)
    blocks = rows.reshape(n_b, cols, 2 + kh * kw).transpose(0, 2, 1).reshape(n_b, 1, -1)
    return NuWeights(np.ascontiguousarray(blocks), tuple(range(n_b)), n_b, "")


def defer_table(steps: list, table) -> None:
    """Move the load of the requantiser's table (into buffer `table`) from the constants to after the
    first tile's loads.  A depthwise tile's weights are a few hundred bytes and its NU work short: the
    table (eight bytes a channel, needed only by the first requantisation) would otherwise hold the
    first tile's weights back on their channel and share DDR with its input."""
    if len(steps) < 2:
        return
    moved = [c for c in steps[0].loads if isinstance(c, Dma) and c.dst.buf is table]
    steps[0].loads = [c for c in steps[0].loads if not any(c is m for m in moved)]
    steps[1].loads += moved


def halo_prefilled(low) -> bool:
    """Does every tile of a depthwise lowering cover the whole output plane?  Then every input tile
    has its halo in the same place: each IBUF slot gets its x_zp halo once (fill_halos) and the
    tiles load only the real input (interior_load).  A DMA spends port time on the padding it
    writes, which from DDR is DDR's time: a 7 x 7 plane with its one-pixel halo is 81 bytes a lane
    for 49 read."""
    p, t, v = low.p, low.t, low.p.view
    return t.th >= p.oh and t.tw >= p.ow and any(v.padding) and all(
        _reads_input(out, k, v.stride[a], v.dilation[a], v.padding[a], v.x_shape[2 + a])
        for a, (out, k) in enumerate(((p.oh, p.kh), (p.ow, p.kw))))


def _reads_input(out: int, k: int, stride: int, dil: int, pad: int, size: int) -> bool:
    """Does some window read a real input pixel along this axis?  (A window of one tap with a stride
    of two and a pad of one reads only padding: its tile then depends on no load.)"""
    return bool(live_taps(out, k, stride, dil, pad, size))


def fill_halos(low, chan: int, step) -> None:
    """Fill every IBUF input slot with x_zp once (a DMA that is all padding reads nothing)."""
    role = low.role["in"]
    for slot in low.slots.buffers[role]:
        step.loads.append(Dma(chan, Ref(slot), Ref(slot), (slot.nbytes,), (1,), (1,), (slot.nbytes,), (0,),
                              pad_value=low.p.view.x_zp, comment=f"{low.name}: x_zp halo -> {slot.name}"))


def interior_load(low, chan: int, dst: Ref, src: Ref, size: tuple[int, int, int, int], lo: tuple[int, int],
                  hi: tuple[int, int], what: str, strides: tuple[int, int, int, int]) -> Dma:
    """The DMA of an input tile's real pixels into a slot whose halo is filled: `size` is (real
    lanes, columns, rows, blocks) of the tile, halo included, `lo` and `hi` the halo's (columns,
    rows) before and after.  Lanes past the real channels keep what they held: a depthwise lane
    only feeds its own output lane, which is never stored.  `strides`: the source's (lane, column,
    row, block) element strides."""
    rows = low.p.rows
    lanes, iw, ih, blocks = size
    at = Ref(dst.buf, dst.offset + (lo[1] * iw + lo[0]) * rows)
    return ddr_order(Dma(chan, at, src, (lanes, iw - lo[0] - hi[0], ih - lo[1] - hi[1], blocks),
                         strides, (1, rows, iw * rows, ih * iw * rows),
                         comment=f"{low.name}: {what} (halo filled)"))


MIN_WIDTH = 8      # narrower tiles read more halo columns than they save halo rows


def narrow_tilings(p: NuPlan, caps: dict[str, int], residual: bool) -> list[ConvTiling]:
    """Tilings of a depthwise conv narrower than the output rows, one output block each: per
    power-of-two width from MIN_WIDTH, the tallest tile that fits.  Its DDR traffic is the input
    and the output, so the halo matters: ABUF holds a few hundred pixels of a block, four rows of
    112 (the input read 1.5 times over) or a 32 x 16 patch (1.2 times)."""
    out = []
    for tw in (w for w in powers_up_to(p.ow)[:-1] if w >= MIN_WIDTH):
        fitting = [ConvTiling(th, tw, 1, 1) for th in powers_up_to(p.oh)
                   if fits(buffer_needs(p, ConvTiling(th, tw, 1, 1), residual), caps)]
        if fitting:
            out.append(fitting[-1])
    return out
