"""Layout rewrites done at compile time: NU weight blocks, bias and (M, S) tables, activation views.

The NU reads weights as [out_cb][in_cb][k_h][k_w][rows][cols].  For groups = 1
that is the isa_spec.layout spec WEIGHT_SPEC applied to [O, C, KH, KW] weights.
Grouped (and depthwise) convolutions become block-diagonal: output block ob
only reads the `span` input blocks starting at `cb_start[ob]`, so the stored
array is [out_cb][span][k_h][k_w][rows][cols] with zeros outside the group.
Activations in DDR are NCHW, NHWC (channel innermost) or blocked NC/bHWb
("nc32hw32": [N][C/b][H][W][b], the NU's own [cb][h][w][cols]; a channel count
that does not fill the last block leaves it narrower, [H][W][C mod b], so no
byte is padding), per tensor: an op's x_layout and y_layout say which
(compiler.layout_plan chooses them for a network; a kernel built from ops alone
keeps NCHW, the layout its user's arrays have).  On chip nothing changes: the
DMA gathers any layout into the same blocked buffers, so a layout only changes
the DDR side's strides (blocked: per block, block_at and chan_runs).  ddr_order
then puts the DMA's dims in the order of the DDR side's strides, so that its
contiguous runs are as long as the layout allows (docs/timing.md, DDR bursts):
a row of pixels from NCHW, a pixel's channels from NHWC, a row of pixels times
a block's channels from blocked.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from isa_spec.layout import LayoutError, stored_shape, to_stored

from ..errors import CompileError
from ..ir import Dma
from ..quant import f32_bits
from ..reference import mlas_step
from ..ops import Conv2d, Dense, FloatConv
from ..ops.checks import accumulator_may_wrap

LAYOUTS = ("nchw", "nhwc")
"""DDR layouts of an activation every configuration has: logical NCHW, or channel innermost (NHWC).
A third, blocked_layout(b), depends on the NU array (its block is the array's columns)."""

_BLOCKED = re.compile(r"nc(\d+)hw(\d+)")
_PITCHED = re.compile(r"nchw_c(\d+)")


def pitched_layout(pitch: int) -> str:
    """NCHW with `pitch` channel planes from one channel to the next: a piece of a tensor whose channels
    interleave `pitch` pieces (ShuffleNetV2's shuffle of its concat), the first plane at the piece's offset."""
    return f"nchw_c{int(pitch)}"


def layout_pitch(layout: str) -> int:
    """The channel pitch of a pitched layout (pitched_layout); 1 for every other."""
    m = _PITCHED.fullmatch(str(layout))
    return int(m.group(1)) if m else 1


def blocked_layout(block: int) -> str:
    """The blocked layout NC/bHWb: channels in blocks of `block`, a block's channels innermost."""
    return f"nc{int(block)}hw{int(block)}"


def layouts_for(block: int) -> tuple[str, ...]:
    """Every layout a kernel may take with channel blocks `block` wide (0: none blocked)."""
    return LAYOUTS + ((blocked_layout(block),) if block else ())


def layout_block(layout: str) -> int:
    """Channels per block of a blocked layout; 0 for NCHW and NHWC (CompileError for no layout)."""
    if layout in LAYOUTS or layout_pitch(check_layout(layout)) > 1:
        return 0
    return int(_BLOCKED.fullmatch(layout).group(1))


def check_layout(layout: str) -> str:
    """layout, or CompileError naming it when it is none of LAYOUTS nor a blocked layout."""
    if layout in LAYOUTS or layout_pitch(layout) > 1:
        return layout
    m = _BLOCKED.fullmatch(str(layout))
    if m is None or m.group(1) != m.group(2) or int(m.group(1)) < 1:
        raise CompileError(f"activation layout {layout!r}: expected one of {', '.join(LAYOUTS)} "
                           "or a blocked layout nc<b>hw<b> (b channels per block, e.g. nc32hw32)")
    return layout


def _plain(shape) -> tuple[int, ...]:
    rest = [1] * len(shape)
    for k in range(len(shape) - 2, -1, -1):
        rest[k] = rest[k + 1] * shape[k + 1]
    return tuple(rest)


def act_strides(shape, layout: str) -> tuple[int, ...]:
    """Element strides of a contiguous activation of logical `shape` (N, C, then the rest) stored in `layout`.

    NHWC puts the channel innermost: (n, c, r...) lives at (n * R + r) * C + c, R the product of
    the rest.  Blocked NC/bHWb stores [N][C/b][R...][b]: these are the strides inside the first
    block (block_at gives any channel's); a tensor of at most b channels is one block, the same
    bytes as NHWC.  Pitched NCHW (pitched_layout) multiplies NCHW's image and channel strides by its
    pitch.  A tensor of fewer than three dims has one layout.
    """
    shape = tuple(int(v) for v in shape)
    rest = _plain(shape)
    pitch = layout_pitch(check_layout(layout))
    if pitch > 1:
        return (rest[0] * pitch, rest[1] * pitch) + rest[2:]
    if layout == "nchw" or len(shape) < 3:
        return rest
    c = shape[1]
    if layout != "nhwc":
        c = min(c, layout_block(layout))
    inner = _plain(shape[2:])
    return (rest[0], 1) + tuple(c * v for v in inner)


def block_at(shape, strides, block: int, c: int) -> tuple[int, tuple[int, ...]]:
    """(element offset of channel c at image 0 and position 0, the strides (n, c, pos...) inside c's block).

    `strides` and `block` describe the tensor as stored (act_strides and layout_block, or strides an
    on-chip buffer keeps, block 0).  Unblocked, every channel shares the strides.  Blocked, the
    blocks follow one another, each [pos...][b]; the last holds the C mod b channels left (it is
    narrower: the tensor takes N*C*H*W bytes, as in the other layouts, and DMAs address it apart).
    """
    if not block:
        return c * strides[1], tuple(strides)
    ch, plane = shape[1], math.prod(shape[2:])
    width = block if c // block < ch // block else ch - ch // block * block
    return (c // block) * plane * block + c % block, (strides[0], 1) + tuple(width * s // strides[-1]
                                                                            for s in strides[2:])


def block_stride(shape, strides, block: int, unit: int) -> int:
    """Element stride between consecutive groups of `unit` channels that start on a block (an on-chip
    block of the NU, or a DDR block); CompileError when a blocked layout's blocks are not `unit` wide."""
    if not block:
        return unit * strides[1]
    if unit != block and shape[1] > block:
        raise CompileError(f"blocked layout {blocked_layout(block)}: the NU's blocks here are {unit} channels "
                           f"wide, not {block}")
    return math.prod(shape[2:]) * block


def chan_runs(shape, layout: str, c0: int, c1: int) -> list[tuple[int, int, int, int, int, tuple[int, ...]]]:
    """Channels [c0, c1) cut where a layout's addressing changes, per run: (first channel, channels
    per block, blocks, element offset of the first channel at image 0 and position 0, element
    stride between the blocks, strides (n, c, pos...) inside them).

    One run unblocked; blocked, a partial first block, the full blocks (one run), the narrower last.
    """
    shape = tuple(int(v) for v in shape)
    strides = act_strides(shape, layout)
    block = layout_block(layout) if len(shape) >= 3 else 0
    if not block:
        return [(c0, c1 - c0, 1, c0 * strides[1], 0, strides)]
    out, c = [], c0
    while c < c1:
        k = min(c1, (c // block + 1) * block) - c
        nblk = (c1 - c) // block if c % block == 0 and k == block else 1
        off, inner = block_at(shape, strides, block, c)
        out.append((c, k, nblk, off, math.prod(shape[2:]) * block, inner))
        c += k * nblk
    return out


def row_strides(shape) -> tuple[int, int, int, int]:
    """Element strides (n, c, h, w) of an (n, h, c, w) array: a tile of whole rows is one contiguous range,
    so a consumer's row tile depends on the producer tiles that wrote those rows alone (compiler.pipelining)."""
    n, c, h, w = shape
    return c * h * w, w, c * w, 1


def to_layout(x: np.ndarray, layout: str) -> np.ndarray:
    """The bytes of logical x as stored in `layout` (a test's and a runtime's view; never a kernel's)."""
    if check_layout(layout) == "nchw" or x.ndim < 3:
        return np.ascontiguousarray(x)
    if layout == "nhwc":
        return np.ascontiguousarray(np.moveaxis(x, 1, -1))
    b = layout_block(layout)
    parts = [np.moveaxis(x[:, c:c + b], 1, -1).reshape(x.shape[0], -1) for c in range(0, x.shape[1], b)]
    return np.ascontiguousarray(np.concatenate(parts, axis=1).reshape(x.shape))


def from_layout(stored: np.ndarray, shape, layout: str) -> np.ndarray:
    """Logical `shape` back from the bytes of a tensor stored in `layout`."""
    shape = tuple(shape)
    if check_layout(layout) == "nchw" or len(shape) < 3:
        return stored.reshape(shape)
    if layout == "nhwc":
        return np.moveaxis(stored.reshape((shape[0],) + shape[2:] + (shape[1],)), -1, 1)
    b, n, c = layout_block(layout), shape[0], shape[1]
    flat, plane, out, at = stored.reshape(n, -1), math.prod(shape[2:]), [], 0
    for c0 in range(0, c, b):
        w = min(b, c - c0)
        out.append(np.moveaxis(flat[:, at:at + plane * w].reshape((n,) + shape[2:] + (w,)), -1, 1))
        at += plane * w
    return np.concatenate(out, axis=1)


def same_bytes(shape, a: str, b: str) -> bool:
    """Do layouts a and b store a tensor of logical `shape` as the same bytes?"""
    shape = tuple(int(v) for v in shape)
    if len(shape) < 3 or shape[1] == 1 or math.prod(shape[2:]) == 1:
        return True
    return canonical(shape, a) == canonical(shape, b)


def canonical(shape, layout: str) -> str:
    """The first of NCHW, NHWC, `layout` that stores a tensor of `shape` (three dims or more, C > 1, more
    than one position) as `layout` does: blocked NC/1HW1 is NCHW, a blocked layout of one block NHWC."""
    blk = layout_block(layout)
    if blk == 1:
        return "nchw"
    return "nhwc" if blk and shape[1] <= blk else layout


def io_layouts(ops) -> tuple[list[str], str]:
    """The DDR layouts of a chain's inputs (in the kernel's input order: the head's, then each later
    binary op's second operand) and of its output."""
    ins = [getattr(ops[0], "x_layout", "nchw")] * len(ops[0].inputs)
    ins += [op.x_layout for op in ops[1:] if getattr(op, "binary", False)]
    return ins, getattr(ops[-1], "y_layout", "nchw")


def ddr_order(cmd: Dma) -> Dma:
    """cmd with its dims sorted by the DDR side's byte strides, smallest innermost (the same copy).

    A DMA box is the same set of (source, destination) element pairs in any dim order, padding
    included; its DDR cost is not: each contiguous run pays its bursts, and a run only grows
    along dims whose stride continues it.  Dims of size 1 and of stride 0 go outermost.  A
    command with both or neither side in DDR is returned as it is.
    """
    src_ddr, dst_ddr = cmd.src.buf.space == "ddr", cmd.dst.buf.space == "ddr"
    if src_ddr == dst_ddr:
        return cmd
    order = _ddr_dims(cmd.size, cmd.src_stride if src_ddr else cmd.dst_stride)
    if order is None:
        return cmd
    pick = (lambda v: tuple(v[k] for k in order))
    return Dma(cmd.chan, cmd.dst, cmd.src, pick(cmd.size), pick(cmd.src_stride), pick(cmd.dst_stride),
               pick(cmd.pad_lo), pick(cmd.pad_hi), cmd.pad_value, cmd.elem, comment=cmd.comment, wait=cmd.wait,
               signal=cmd.signal, signal2=cmd.signal2)


@lru_cache(maxsize=1 << 14)
def _ddr_dims(size: tuple[int, ...], key: tuple[int, ...]) -> tuple[int, ...] | None:
    """ddr_order's dim order for these sizes and DDR strides (None: as they are); memoised, as the
    search lowers many tiles of the same few shapes."""
    order = tuple(sorted(range(4), key=lambda k: (size[k] == 1 or key[k] == 0, abs(key[k]))))
    return None if order == (0, 1, 2, 3) else order


def weight_spec(rows: int, cols: int) -> str:
    """The isa_spec.layout spec taking [O, C, KH, KW] to the NU order (groups = 1)."""
    return f"split(0,{cols}) split(2,{rows}) reorder(0,2,4,5,3,1)"


@dataclass(frozen=True)
class NuWeights:
    """Weights in NU order plus, per output block, the first input block it reads."""

    blocks: np.ndarray          # int8 [out_cb, span, KH, KW, rows, cols]
    cb_start: tuple[int, ...]   # per output block
    in_cb: int                  # input blocks of the whole tensor
    layout: str                 # the layout spec when expressible (groups = 1), else ""

    @property
    def out_cb(self) -> int:
        return self.blocks.shape[0]

    @property
    def span(self) -> int:
        return self.blocks.shape[1]

    @property
    def block_bytes(self) -> int:
        """Bytes of one (ob, cb) block over the whole window."""
        return math.prod(self.blocks.shape[2:]) * self.blocks.itemsize


@dataclass(frozen=True)
class ConvView:
    """A conv2d seen by the NU path: weights [O, C/g, KH, KW] and NCHW-like strided activations."""

    x_shape: tuple[int, int, int, int]
    x_strides: tuple[int, int, int, int]      # elements, for (n, c, h, w)
    y_shape: tuple[int, int, int, int]
    y_strides: tuple[int, int, int, int]
    weight: np.ndarray
    bias: np.ndarray | None
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    x_zp: int
    multiplier: np.ndarray
    shift: np.ndarray
    zp_out: int
    lo: int
    hi: int
    fold: tuple[int, int, int] | None = None   # (kw, stride_w, dil_w) folded into IBUF rows
    taps: "TapFold | None" = None              # the whole window folded into IBUF rows (fold_taps)
    scale: np.ndarray | None = None            # float32 [O]: the float form (multiplier, shift are None)
    x_block: int = 0                           # channels per DDR block of x and y (blocked layouts; else 0)
    y_block: int = 0
    act: np.ndarray | None = None              # int8[256]: a lut run on the int8 tile before its store
    fmode: FloatConv | None = None             # the NU's float mode (nu.fconv): no fold, block-diagonal weights

    @property
    def table_entry(self) -> int:
        """Bytes per output channel of the requantiser's table: a float32 scale, or an (M, S) pair."""
        return 4 if self.scale is not None else 8

    @property
    def may_wrap(self) -> bool:
        """Can an int32 accumulator wrap (the float form, whose overflow is not refused: ops.nu)?"""
        return accumulator_may_wrap(np.abs(self.weight.astype(np.int64)).sum(axis=(1, 2, 3)), self.bias, self.x_zp)

    @property
    def x_shape_bytes(self) -> int:
        """Bytes of the whole int8 input."""
        return math.prod(self.x_shape)

    @property
    def in_channels(self) -> int:
        """Channels the NU sees (kernel columns times channels when folded)."""
        return self.weight.shape[1] * self.groups


def nchw_strides(shape) -> tuple[int, int, int, int]:
    """Element strides of a contiguous NCHW array."""
    n, c, h, w = shape
    return c * h * w, h * w, w, 1


def conv_view(op: Conv2d | Dense, rows: int = 0) -> ConvView:
    """The conv2d the NU computes for op (dense is a 1x1 conv over N pixels of K channels).

    With `rows` (the array's), kernel columns are folded into unused input rows (fold_columns).
    """
    if isinstance(op, Dense):
        (n, k), o = op.x_shape, op.weight.shape[1]
        return ConvView((1, k, 1, n), (0, 1, 0, k), (1, o, 1, n), (0, 1, 0, o),
                        op.weight.T[:, :, None, None], op.bias, (1, 1), (0, 0, 0, 0), (1, 1), 1,
                        op.x_zp, op.multiplier, op.shift, op.zp_out, op.lo, op.hi, scale=op.scale, act=op.act)
    y = op.output.shape
    view = ConvView(op.x_shape, act_strides(op.x_shape, op.x_layout), y, act_strides(y, op.y_layout),
                    op.weight, op.bias,
                    op.stride, op.padding, op.dilation, op.groups, op.x_zp, op.multiplier, op.shift,
                    op.zp_out, op.lo, op.hi, scale=op.scale, x_block=layout_block(op.x_layout),
                    y_block=layout_block(op.y_layout), act=op.act, fmode=op.fmode)
    return fold_columns(view, rows) if rows else view


def fold_columns(view: ConvView, rows: int) -> ConvView:
    """Fold kernel columns into input rows when the channels leave rows empty.

    A conv with C * KW <= rows input channels and groups = 1 becomes one with
    C * KW channels and a KW = 1 kernel: IBUF row j * C + c of output column q
    holds x[c, ., q * stride_w + j * dil_w - pad_left] (each j is one DMA), and
    the weights become w'[o, j * C + c, i, 0] = w[o, c, i, j].  The NU then
    spends one pass per kernel row instead of one per tap.
    """
    o, c, kh, kw = view.weight.shape
    if view.groups != 1 or kw == 1 or c * kw > rows or view.fmode is not None:     # folds reorder MLAS's K
        return view
    w = view.weight.transpose(0, 3, 1, 2).reshape(o, kw * c, kh)[..., None]
    return replace(view, weight=w, stride=(view.stride[0], 1), dilation=(view.dilation[0], 1),
                   fold=(kw, view.stride[1], view.dilation[1]))


@dataclass(frozen=True)
class TapFold:
    """A conv's whole window gathered into IBUF rows (fold_taps): the window's geometry, which the
    input loads apply, and how the taps lie in the rows."""

    kh: int
    kw: int
    stride: tuple[int, int]
    dilation: tuple[int, int]
    channels: int
    per_block: int              # taps per block of rows: rows // channels (k_order: every tap)
    k_order: bool = False       # the float mode's: row c * KH * KW + k, MLAS's K (one block)

    def place(self, k: int) -> tuple[int, int]:
        """(block, first row) of tap k = i * kw + j: its channels fill the rows from there, lane_step apart."""
        if self.k_order:
            return 0, k
        return k // self.per_block, (k % self.per_block) * self.channels

    @property
    def lane_step(self) -> int:
        """Rows between a tap's consecutive channels."""
        return self.kh * self.kw if self.k_order else 1

    @property
    def tap_step(self) -> int:
        """Rows between a channel's consecutive taps in one block."""
        return 1 if self.k_order else self.channels

    @property
    def blocks(self) -> int:
        """Blocks of rows the window takes (the NU's passes per output block)."""
        return -(-(self.kh * self.kw) // self.per_block)


def folds_taps(view: ConvView, rows: int) -> bool:
    """Can the conv's whole window fold into the array's `rows` input rows (fold_taps): groups = 1, not
    folded yet, a window of more than one tap, and C <= rows channels (the float mode: C * KH * KW <= rows,
    one block in MLAS's order, and no dropped taps, whose K indices a 1x1 command cannot skip)?"""
    _, c, kh, kw = view.weight.shape
    return (view.groups == 1 and view.fold is None and view.taps is None and kh * kw > 1 and c <= rows
            and (view.fmode is None or (c * kh * kw <= rows and not any(view.fmode.crop))))


def fold_taps(view: ConvView, rows: int) -> ConvView | None:
    """The conv with its whole window folded into input rows, or None when it cannot be.

    An (unfolded) conv with C <= rows channels and groups = 1 becomes a 1x1 conv, stride 1,
    over an im2col-like input: tap k = i * KW + j of output pixel (p, q) goes to block
    k // T, rows (k % T) * C .. + C - 1 (T = rows // C taps per block, so no tap straddles
    two blocks), holding x[c, p * stride_h + i * dil_h - pad_top, q * stride_w + j * dil_w -
    pad_left]; the weights become w'[o, b * rows + (k % T) * C + c] = w[o, c, i, j], zero in
    the rows no tap fills.  The NU then spends ceil(KH * KW / T) passes per output block,
    against KH passes (fold_columns) or KH * KW (no fold); the input loads gather the taps
    (nu.NuLowering._load_taps).  The padding stays in the view for those loads.

    In the float mode the rows are in MLAS's K order instead, row c * KH * KW + k for tap k of
    channel c, one block of exactly C * KH * KW input channels (no zero rows: they would count in
    K): the conv is MLAS's own im2col GEMM, w'[o, c * KH * KW + k] = w[o, c, i, j], whose K and
    products, in the order nu.fconv adds them, are the unfolded conv's (float_params).
    """
    if not folds_taps(view, rows):
        return None
    o, c, kh, kw = view.weight.shape
    if view.fmode is not None:
        fold = TapFold(kh, kw, view.stride, view.dilation, c, kh * kw, k_order=True)
        w, fw = (a.reshape(o, c * kh * kw, 1, 1) for a in (view.weight, view.fmode.weight))
        return replace(view, weight=w, fmode=replace(view.fmode, weight=np.ascontiguousarray(fw)), stride=(1, 1),
                       dilation=(1, 1), taps=fold)
    fold = TapFold(kh, kw, view.stride, view.dilation, c, rows // c)
    taps = np.zeros((o, fold.blocks * fold.per_block, c), dtype=view.weight.dtype)
    taps[:, :kh * kw] = view.weight.transpose(0, 2, 3, 1).reshape(o, kh * kw, c)
    w = np.zeros((o, fold.blocks, rows), dtype=view.weight.dtype)
    w[:, :, :fold.per_block * c] = taps.reshape(o, fold.blocks, fold.per_block * c)
    return replace(view, weight=w.reshape(o, fold.blocks * rows, 1, 1), stride=(1, 1), dilation=(1, 1),
                   taps=fold)


def nu_weights(weight: np.ndarray, groups: int, in_channels: int, rows: int, cols: int,
               spec: str | None = None) -> NuWeights:
    """Rearrange [O, C/groups, KH, KW] weights into zero-padded NU blocks.

    groups = 1: by the layout spec `spec` (a schedule's composed weight layout; by default
    weight_spec), which must store the NU's [out_cb][in_cb][k_h][k_w][rows][cols].
    """
    o, cg, kh, kw = weight.shape
    og = o // groups
    n_ob, n_cb = -(-o // cols), -(-in_channels // rows)
    if groups == 1:
        spec = spec if spec is not None else weight_spec(rows, cols)
        want = (n_ob, n_cb, kh, kw, rows, cols)
        try:
            got = stored_shape(spec, weight.shape)
        except LayoutError as exc:
            raise CompileError(f"weight layout: {exc}") from None
        if got != want:
            raise CompileError(f"weight layout {spec!r} stores [O, C, KH, KW] = {list(weight.shape)} as "
                               f"{list(got)}; nu.conv reads [out_cb, in_cb, k_h, k_w, rows, cols] = {list(want)}")
        return NuWeights(to_stored(spec, weight.astype(np.int8)), (0,) * n_ob, n_cb, spec)
    if spec is not None:
        raise CompileError(f"weight layout {spec!r}: a grouped conv (groups = {groups}) stores its weights "
                           "block-diagonally, which no layout spec expresses")
    return block_diagonal(weight, groups, in_channels, rows, cols, np.int8)


def block_diagonal(weight: np.ndarray, groups: int, in_channels: int, rows: int, cols: int,
                   dtype) -> NuWeights:
    """[O, C/groups, KH, KW] weights as NU blocks of `dtype`, zero outside each output block's group: output
    block ob reads the `span` input blocks from cb_start[ob] (nu_weights' grouped layout; the float mode's for
    every conv)."""
    o, cg, kh, kw = weight.shape
    og = o // groups
    n_ob, n_cb = -(-o // cols), -(-in_channels // rows)
    full = np.zeros((n_ob * cols, n_cb * rows, kh, kw), dtype=dtype)
    for g in range(groups):
        full[g * og:(g + 1) * og, g * cg:(g + 1) * cg] = weight[g * og:(g + 1) * og]
    first = [(ob * cols // og) * cg // rows for ob in range(n_ob)]
    last = [(((min((ob + 1) * cols, o) - 1) // og + 1) * cg - 1) // rows for ob in range(n_ob)]
    span = max(b - a + 1 for a, b in zip(first, last))
    start = tuple(min(a, n_cb - span) for a in first)
    blocks = np.zeros((n_ob, span, kh, kw, rows, cols), dtype=dtype)
    for ob, s in enumerate(start):
        tile = full[ob * cols:(ob + 1) * cols, s * rows:(s + span) * rows]     # [cols, span*rows, kh, kw]
        blocks[ob] = tile.reshape(cols, span, rows, kh, kw).transpose(1, 3, 4, 2, 0)
    return NuWeights(blocks, start, n_cb, "")


def bias_table(bias: np.ndarray | None, out_cb: int, cols: int) -> np.ndarray:
    """int32 [out_cb * cols] bias, zero-padded."""
    t = np.zeros(out_cb * cols, dtype=np.int32)
    if bias is not None:
        t[:len(bias)] = bias
    return t


def requant_table(multiplier: np.ndarray, shift: np.ndarray, out_cb: int, cols: int) -> np.ndarray:
    """int32 [out_cb * cols, 2] (M, S) pairs for vu.requant.pc; padding lanes get (1, 0)."""
    t = np.zeros((out_cb * cols, 2), dtype=np.int32)
    t[:, 0] = 1
    t[:len(multiplier), 0] = multiplier
    t[:len(shift), 1] = shift
    return t


def fscale_table(scale: np.ndarray, out_cb: int, cols: int) -> np.ndarray:
    """int32 [out_cb * cols]: the bits of the float32 scales of vu.requant.fpc; padding lanes get 1.0."""
    t = np.ones(out_cb * cols, dtype=np.float32)
    t[:len(scale)] = scale
    return t.view(np.int32)


def ms_table(multiplier: np.ndarray | None, shift: np.ndarray | None, scale: np.ndarray | None, out_cb: int,
             cols: int) -> np.ndarray:
    """The requantiser's per-channel table: float32 scale bits [out_cb * cols] (float form), else (M, S) pairs."""
    if scale is not None:
        return fscale_table(scale, out_cb, cols)
    return requant_table(multiplier, shift, out_cb, cols)


def rq_table(bias: np.ndarray | None, multiplier: np.ndarray | None, shift: np.ndarray | None,
             scale: np.ndarray | None, out_cb: int, cols: int) -> np.ndarray:
    """int32 [out_cb * cols, 3]: nu.conv.rq's (bias, M, S) per channel, padding lanes (0, 1, 0).

    With a float scale (rq_float): (bias, scale bits, 0), padding lanes scaled by 1.0.
    """
    t = np.zeros((out_cb * cols, 3), dtype=np.int32)
    t[:, 0] = bias_table(bias, out_cb, cols)
    ms = ms_table(multiplier, shift, scale, out_cb, cols).reshape(len(t), -1)
    t[:, 1:1 + ms.shape[1]] = ms
    return t


def float_table(bias: np.ndarray, scale, out_cb: int, cols: int) -> np.ndarray:
    """int32 [out_cb * cols, 3]: nu.fconv.rq's float32 (bias, output scale, 0) bits per channel; padding lanes
    (0.0, scale), a scale the NU accepts."""
    t = np.zeros((out_cb * cols, 3), dtype=np.float32)
    t[:len(bias), 0] = bias
    t[:, 1] = np.float32(scale)
    return t.view(np.int32)


def float_params(fmode: FloatConv, groups: int, pixels: int, first_cb: int, first_ob: int, rows: int,
                 cols: int) -> dict[str, int]:
    """The nu.f_* parameters of a float-mode command whose IBUF starts at input block first_cb and whose columns
    start at output block first_ob: where its lanes sit in MLAS's order, which depends on the whole conv (its
    pixels = OH * OW and K = C / groups * KH * KW, the dropped taps included: fmode.crop), never on the tile."""
    o, cg = fmode.weight.shape[:2]
    t, l, b, r = fmode.crop
    return {"fx_scale": f32_bits(fmode.x_scale), "f_step": mlas_step(pixels, fmode.depth, o // groups),
            "f_c0": first_cb * rows, "f_cpg": cg, "f_o0": first_ob * cols, "f_opg": o // groups,
            "f_top": t, "f_left": l, "f_bottom": b, "f_right": r}


def bias_blocks(bias: np.ndarray, x_zp: int, out_cb: int, rows: int,
                cols: int) -> tuple[np.ndarray, np.ndarray] | None:
    """A constant input row vector and weight blocks whose NU product is the bias, or None.

    The NU computes sum over rows r of (I[r] - x_zp) * W[r, c].  Rows 0..rows-3 hold
    I = x_zp + D with |D| >= 128 (127 or -128, whichever is farther from x_zp), the last
    two hold x_zp +- 1.  A bias b = q * |D| + r (0 <= r < |D| <= 255) puts q, split into
    int8 pieces, on the D rows and r on the two unit rows.  Returns (I: int8 [rows],
    W: int8 [out_cb, rows, cols]) or None when some |bias| is too large for that (about
    (rows - 2) * 127 * |D|, at least 483,000 for a 32-row array) or rows < 3.
    """
    if rows < 3:
        return None
    d = 127 - x_zp if 127 - x_zp >= x_zp + 128 else -128 - x_zp
    unit = 1 if x_zp <= 126 else -1
    lanes = np.array([x_zp + d] * (rows - 2) + [x_zp + unit] * 2, dtype=np.int64)
    b = np.zeros(out_cb * cols, dtype=np.int64)
    b[:len(bias)] = bias
    q, r = np.divmod(b, abs(d))
    q = q * (1 if d > 0 else -1)
    if np.abs(q).max() > 127 * (rows - 2):
        return None
    w = np.zeros((rows, out_cb * cols), dtype=np.int64)
    rest = q.copy()
    for lane in range(rows - 2):
        w[lane] = np.clip(rest, -128, 127)
        rest -= w[lane]
    w[rows - 2] = np.minimum(r, 127) * unit
    w[rows - 1] = (r - np.minimum(r, 127)) * unit
    if (((lanes - x_zp)[:, None] * w).sum(axis=0) != b).any():
        return None
    blocks = w.reshape(rows, out_cb, cols).transpose(1, 0, 2)
    return lanes.astype(np.int8), blocks.astype(np.int8)
