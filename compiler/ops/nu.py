"""The NU ops: grouped 2-D convolution and dense layers."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .. import reference as sem
from ..dims import DynamicOp, dynamic_op, has_dims
from ..errors import CompileError
from .base import INT8, INT32, Op, Tensor
from .checks import (check_accumulator, check_sizes, clamp_args, f32_scales_arg, float_form, int_arg, int_array_arg,
                     out_size, padding_arg, pair_arg, per_channel_arg, shape_arg)


@dataclass(frozen=True, eq=False)
class FloatConv:
    """A conv onnxruntime runs in float32 (a QDQ group it does not fuse), for the NU's float mode (nu.fconv):
    DequantizeLinear's input scale, the float32 weights f32(w) * w_scale [O, C/groups, KH, KW] and bias
    f32(b) * b_scale [O] (zeros without one), and QuantizeLinear's output scale.  crop: the (top, left, bottom,
    right) kernel rows and columns Conv2d.live dropped from weight, whose products still count in MLAS's K."""

    x_scale: np.float32
    weight: np.ndarray
    bias: np.ndarray
    y_scale: np.float32
    crop: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def depth(self) -> int:
        """MLAS's K: input channels per group times the taps of the whole window, the dropped ones included."""
        _, cg, kh, kw = self.weight.shape
        t, l, b, r = self.crop
        return cg * (t + kh + b) * (l + kw + r)


@dataclass(frozen=True, eq=False, repr=False)
class Conv2d(Op):
    """Quantised grouped 2-D convolution, NCHW int8 in and out."""

    x_shape: tuple[int, int, int, int]
    weight: np.ndarray          # int64 [O, C/groups, KH, KW]
    bias: np.ndarray | None     # int64 [O]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    dilation: tuple[int, int]
    groups: int
    x_zp: int
    multiplier: np.ndarray | None      # int64 [O]; None in the float form
    shift: np.ndarray | None           # int64 [O]; None in the float form
    zp_out: int
    lo: int
    hi: int
    scale: np.ndarray | None = None    # float32 [O]: the float form (onnxruntime arithmetic)
    x_layout: str = "nchw"             # DDR layouts of x and of y (and a fused residual): lowering.layout
    y_layout: str = "nchw"
    act: np.ndarray | None = None      # int8[256]: a lut fused after the clamp (lowering.driver.fuse_nu_chain)
    fmode: FloatConv | None = None     # onnxruntime's float32 arithmetic (reference.conv2d_mlas), else integer
    kind: str = field(init=False, default="conv2d")

    @property
    def out_channels(self) -> int:
        return self.weight.shape[0]

    @property
    def kernel(self) -> tuple[int, int]:
        return self.weight.shape[2], self.weight.shape[3]

    @property
    def out_hw(self) -> tuple[int, int]:
        (_, _, h, w), (kh, kw) = self.x_shape, self.kernel
        t, l, b, r = self.padding
        return (out_size("conv2d height", h, kh, self.stride[0], self.dilation[0], t, b),
                out_size("conv2d width", w, kw, self.stride[1], self.dilation[1], l, r))

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.x_shape, "int8"),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", (self.x_shape[0], self.out_channels) + self.out_hw, "int8")

    @property
    def macs(self) -> int:
        _, o, oh, ow = self.output.shape
        return self.x_shape[0] * o * oh * ow * int(np.prod(self.weight.shape[1:]))

    def live(self) -> Conv2d:
        """The same conv without the kernel rows and columns whose every read is padding (live_taps).

        Exact: a padded tap reads x_zp and adds (x_zp - x_zp) * w = 0.  The padding shrinks by the dropped
        taps' extent, so the output is the same; it may turn negative (the first window then starts inside
        the input: a crop), and a single kept tap has dilation 1.  A conv whose dilated window exceeds its
        input (DeepLabV3's ASPP) then reads only what it can reach.  Itself when every tap can read a
        pixel.  What the NU lowers and the roofline prices; its reference() takes no negative padding.
        In the float mode the dropped taps' products (exact zeros) still count in MLAS's K: fmode.crop
        says where the kept ones lie in it (nu.f_top ...).
        """
        (_, _, h, w), (kh, kw), (oh, ow) = self.x_shape, self.kernel, self.out_hw
        (t, l, b, r), (dh, dw) = self.padding, self.dilation
        rows = live_taps(oh, kh, self.stride[0], dh, t, h) or range(1)
        cols = live_taps(ow, kw, self.stride[1], dw, l, w) or range(1)
        if len(rows) == kh and len(cols) == kw:
            return self
        cut = (rows.start, cols.start, kh - rows.stop, kw - cols.stop)
        kept = (slice(None), slice(None), slice(rows.start, rows.stop), slice(cols.start, cols.stop))
        fmode = None if self.fmode is None else replace(
            self.fmode, weight=np.ascontiguousarray(self.fmode.weight[kept]),
            crop=tuple(a + d for a, d in zip(self.fmode.crop, cut)))
        return replace(self, weight=np.ascontiguousarray(self.weight[kept]),
                       padding=(t - cut[0] * dh, l - cut[1] * dw, b - cut[2] * dh, r - cut[3] * dw),
                       dilation=(dh if len(rows) > 1 else 1, dw if len(cols) > 1 else 1), fmode=fmode)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        if self.fmode is not None:
            f = self.fmode
            return _act(self.act, sem.conv2d_mlas(x, f.x_scale, self.x_zp, f.weight, f.bias, self.stride, self.padding,
                                                  self.dilation, self.groups, f.y_scale, self.zp_out, self.lo, self.hi))
        if self.scale is not None:
            return _act(self.act, sem.conv2d_f32(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                                                 self.groups, self.x_zp, self.scale, self.zp_out, self.lo, self.hi))
        return _act(self.act, sem.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                                         self.groups, self.x_zp, self.multiplier, self.shift, self.zp_out, self.lo,
                                         self.hi))


@dataclass(frozen=True, eq=False, repr=False)
class Dense(Op):
    """Quantised dense layer: x [N, K] int8 times weight [K, O], int8 [N, O] out."""

    x_shape: tuple[int, int]
    weight: np.ndarray          # int64 [K, O]
    bias: np.ndarray | None
    x_zp: int
    multiplier: np.ndarray | None
    shift: np.ndarray | None
    zp_out: int
    lo: int
    hi: int
    scale: np.ndarray | None = None    # float32 [O]: the float form (onnxruntime arithmetic)
    act: np.ndarray | None = None      # int8[256]: a lut fused after the clamp (lowering.driver.fuse_nu_chain)
    kind: str = field(init=False, default="dense")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.x_shape, "int8"),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", (self.x_shape[0], self.weight.shape[1]), "int8")

    @property
    def macs(self) -> int:
        return self.x_shape[0] * self.weight.shape[0] * self.weight.shape[1]

    def _compute(self, x: np.ndarray) -> np.ndarray:
        if self.scale is not None:
            return _act(self.act, sem.dense_f32(x, self.weight, self.bias, self.x_zp, self.scale, self.zp_out,
                                                self.lo, self.hi))
        return _act(self.act, sem.dense(x, self.weight, self.bias, self.x_zp, self.multiplier, self.shift,
                                        self.zp_out, self.lo, self.hi))


def live_taps(out: int, k: int, stride: int, dil: int, pad: int, size: int) -> range:
    """The kernel taps along one axis that read a real input pixel for some output, first to last (a tap
    between them may read only padding too); empty when every window reads only padding.  Output o's tap j
    reads input o * stride + j * dil - pad."""
    live = [j for j in range(k)
            if max(0, -((j * dil - pad) // stride)) <= min(out - 1, (size - 1 + pad - j * dil) // stride)]
    return range(live[0], live[-1] + 1) if live else range(0)


def _act(table: np.ndarray | None, y: np.ndarray) -> np.ndarray:
    """y through a fused lut's table, if any."""
    return y if table is None else sem.lut(y, table)


def _requant_args(what: str, o: int, multiplier, shift, scale, zp_out, lo, hi) -> dict:
    """The requantisation fields of a conv2d / dense: (M, S) per channel, or a float32 scale per channel."""
    zp_out, lo, hi = clamp_args(zp_out, lo, hi)
    out = {"zp_out": zp_out, "lo": lo, "hi": hi, "multiplier": None, "shift": None}
    if float_form(what, {"multiplier": multiplier, "shift": shift}, {"scale": scale}):
        return out | {"scale": f32_scales_arg("scale", scale, o)}
    return out | {"multiplier": per_channel_arg("multiplier", multiplier, o, 1, (1 << 31) - 1),
                  "shift": per_channel_arg("shift", shift, o, 0, 62)}


def _bias(bias, o: int) -> np.ndarray | None:
    return None if bias is None else int_array_arg("bias", bias, INT32, shape=(o,))


def conv2d(x_shape, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, x_zp=0,
           multiplier=None, shift=None, scale=None, zp_out=0, lo=-128, hi=127) -> Conv2d | DynamicOp:
    """A quantised conv2d (docs/semantics.md), validated; scale= (one or one per channel) is QLinearConv's.
    A compiler.Dim in x_shape (batch, height, width) makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("conv2d", lambda shape: conv2d(
            shape, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups, x_zp=x_zp,
            multiplier=multiplier, shift=shift, scale=scale, zp_out=zp_out, lo=lo, hi=hi), x_shape)
    x_shape = shape_arg("x_shape", x_shape, 4)
    w = int_array_arg("weight", weight, INT8, ndim=4)
    groups = int_arg("groups", groups, 1, x_shape[1])
    o, cg, kh, kw = w.shape
    if x_shape[1] % groups:
        raise CompileError(f"groups = {groups} does not divide the {x_shape[1]} input channels")
    if o % groups:
        raise CompileError(f"groups = {groups} does not divide the {o} output channels of weight")
    if cg != x_shape[1] // groups:
        raise CompileError(f"weight has {cg} input channels per group, expected "
                           f"{x_shape[1]} / {groups} = {x_shape[1] // groups}")
    x_zp = int_arg("x_zp", x_zp, *INT8)
    bias = _bias(bias, o)
    op = Conv2d(x_shape, w, bias, pair_arg("stride", stride), padding_arg("padding", padding),
                pair_arg("dilation", dilation), groups, x_zp,
                **_requant_args("conv2d", o, multiplier, shift, scale, zp_out, lo, hi))
    op.out_hw  # noqa: B018 - raises CompileError when the window does not fit
    check_sizes(op)
    if op.scale is None:        # the float form's int32 accumulator wraps, as onnxruntime's (reference.wrap32)
        check_accumulator("conv2d", np.abs(w).sum(axis=(1, 2, 3)), bias, x_zp)
    return op


def float_mode(op: Conv2d, x_scale, w_scale, y_scale, bias=None) -> Conv2d:
    """op run as onnxruntime runs its QDQ group in float32 (the NU's float mode): its int8 weights dequantised as
    DequantizeLinear does, f32(w) * w_scale per output channel (or per tensor), and the float32 bias (its
    DequantizeLinear's values; zeros without one)."""
    o = op.out_channels
    ws = np.broadcast_to(np.asarray(w_scale, np.float32).reshape(-1), (o,)).reshape(o, 1, 1, 1)
    wf = (op.weight.astype(np.float32) * ws).astype(np.float32)
    bf = np.zeros(o, np.float32) if bias is None else np.asarray(bias, np.float32).reshape(o)
    return replace(op, fmode=FloatConv(np.float32(x_scale), wf, bf.copy(), np.float32(y_scale)))


def dense(x_shape, weight, bias=None, *, x_zp=0, multiplier=None, shift=None, scale=None, zp_out=0, lo=-128,
          hi=127) -> Dense | DynamicOp:
    """A quantised dense layer with weight [K, O], validated; scale= is QLinearMatMul's (QGemm's with a bias).
    A compiler.Dim for the batch (x_shape[0]) makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("dense", lambda shape: dense(shape, weight, bias, x_zp=x_zp, multiplier=multiplier,
                                                       shift=shift, scale=scale, zp_out=zp_out, lo=lo, hi=hi),
                          x_shape, ndim=2)
    x_shape = shape_arg("x_shape", x_shape, 2)
    w = int_array_arg("weight", weight, INT8, ndim=2)
    if w.shape[0] != x_shape[1]:
        raise CompileError(f"weight has {w.shape[0]} rows, expected K = {x_shape[1]} (weight is [K, O])")
    x_zp = int_arg("x_zp", x_zp, *INT8)
    bias = _bias(bias, w.shape[1])
    op = Dense(x_shape, w, bias, x_zp, **_requant_args("dense", w.shape[1], multiplier, shift, scale, zp_out, lo, hi))
    if op.scale is None:        # the float form's int32 accumulator wraps, as onnxruntime's (reference.wrap32)
        check_accumulator("dense", np.abs(w).sum(axis=0), bias, x_zp)
    return op
