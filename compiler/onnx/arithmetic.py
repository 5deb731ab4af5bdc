"""The arithmetic forms: how ONNX scales become the keywords of the compiler's ops, one function per op family.

arithmetic="onnxruntime": the float32 forms of the ops (docs/semantics.md), which onnxruntime's
QLinear kernels (QLinearConv, QGemm, QLinearAdd, QLinearMul, QLinearAveragePool,
QLinearGlobalAveragePool) and its QDQ groups compute bit for bit.  arithmetic="fixed": integer
(M, S) pairs (compiler.quant) from the float64 ratio of the float32 scales, within one output step.
"""
from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from .. import ops
from ..graph import QuantParams
from ..quant import ort_scale, quantize_multiplier, quantize_multipliers

ARITHMETIC = ("onnxruntime", "fixed")
INT8 = (-128, 127)


def requant_args(arithmetic: str, in_scale: ArrayLike, w_scale: ArrayLike, out_scale: ArrayLike,
                 zp_out: int) -> dict:
    """conv2d / dense keywords mapping the int32 accumulator (scale in_scale * w_scale) to the output."""
    if arithmetic == "onnxruntime":
        return {"scale": ort_scale(in_scale, np.asarray(w_scale, np.float32).ravel(), out_scale),
                "zp_out": int(zp_out)}
    ratio = np.float64(in_scale) * np.asarray(w_scale, dtype=np.float64).ravel() / np.float64(out_scale)
    m, s = quantize_multipliers(ratio)
    return {"multiplier": m, "shift": s, "zp_out": int(zp_out)}


def rescale_op(arithmetic: str, shape: tuple[int, ...], in_dtype: str, zx: int, in_scale: ArrayLike,
               out_scale: ArrayLike, zp_out: int, lo: int, hi: int) -> ops.Elementwise:
    """requantize: x (int8, or an int32 sum) with real value in_scale * (x - zx) to the output scale.

    With onnxruntime arithmetic the factor in_scale / out_scale is one float32 (as its requantiser
    takes it); a DequantizeLinear -> QuantizeLinear pair rounds twice instead, so that pattern is
    within one step, not exact (docs/runtime.md).
    """
    if arithmetic == "onnxruntime":
        scale = np.float32(np.float32(in_scale) / np.float32(out_scale))
        return ops.requantize(shape, in_dtype=in_dtype, zx=zx, scale=scale, zp_out=zp_out, lo=lo, hi=hi)
    m, s = quantize_multiplier(np.float64(in_scale) / np.float64(out_scale))
    if in_dtype == "int32":
        # ops.requantize proves (x - zx) * M fits 62 bits over the whole int32 range: give up
        # low multiplier bits (at most 2, from 31) rather than refuse a large zero-point offset.
        while ((1 << 31) + abs(zx)) * m >= ops.PRODUCT_LIMIT and s > 0:
            m, s = (m + 1) >> 1, s - 1
    return ops.requantize(shape, in_dtype=in_dtype, zx=zx, multiplier=m, shift=s, zp_out=zp_out,
                          lo=lo, hi=hi)


def add_args(arithmetic: str, a_scale: ArrayLike, b_scale: ArrayLike, out_scale: ArrayLike, zp_out: int,
             uint8: bool = False) -> dict:
    """add keywords: the three float32 scales (onnxruntime; uint8: its uint8 kernel), or two multipliers over
    ONE shift (which compute the same on uint8 tensors and their int8 view)."""
    if arithmetic == "onnxruntime":
        return {"scale_a": np.float32(a_scale), "scale_b": np.float32(b_scale),
                "scale_out": np.float32(out_scale), "zp_out": int(zp_out), "uint8": uint8}
    ra = np.float64(a_scale) / np.float64(out_scale)
    rb = np.float64(b_scale) / np.float64(out_scale)
    big, shift = quantize_multiplier(max(ra, rb))
    small = int(round(min(ra, rb) * 2.0 ** shift))   # may lose low bits when the ratios differ a lot
    ma, mb = (big, small) if ra >= rb else (small, big)
    return {"ma": ma, "mb": mb, "shift": shift, "zp_out": int(zp_out)}


def add_roles_swapped(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> bool:
    """Does onnxruntime's QLinearAdd (and the QDQ Add it fuses into one) compute with B in A's role?

    Its broadcast loop walks the output in spans along the innermost axis of size > 1; where A is one
    value along that axis (a scalar per span), it calls MLAS's kernel with B as the vector and A as the
    scalar, which is its arithmetic with A and B exchanged (fma(b, rb, fma(a, ra, c)), the zero points
    folded in that order too).  Otherwise (B a scalar per span, or both vectors, A broadcast along an outer
    axis or a constant) A keeps its role.
    """
    out = tuple(int(v) for v in np.broadcast_shapes(tuple(a_shape), tuple(b_shape)))
    a = (1,) * (len(out) - len(a_shape)) + tuple(a_shape)
    inner = [d for d in range(len(out)) if out[d] > 1]
    return not inner or a[inner[-1]] == 1


def mul_args(arithmetic: str, a_scale: ArrayLike, b_scale: ArrayLike, out_scale: ArrayLike, zp_out: int,
             uint8: bool = False) -> dict:
    """mul keywords: the three float32 scales (onnxruntime; uint8: its uint8 kernel), or one multiplier for
    a * b / out."""
    if arithmetic == "onnxruntime":
        return {"scale_a": np.float32(a_scale), "scale_b": np.float32(b_scale),
                "scale_out": np.float32(out_scale), "zp_out": int(zp_out), "uint8": uint8}
    m, s = quantize_multiplier(np.float64(a_scale) * np.float64(b_scale) / np.float64(out_scale))
    return {"multiplier": m, "shift": s, "zp_out": int(zp_out)}


def avg_pool_ops(arithmetic: str, x_shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
                 padding: tuple[int, int, int, int], count_include_pad: bool,
                 xq: QuantParams, yq: QuantParams, lo: int, hi: int,
                 uint8: bool = False, quantize_linear: bool = False) -> list[tuple[str, object, object]]:
    """Average pooling as (suffix, op, quant) steps.

    onnxruntime: one avg_pool2d in QLinearAveragePool's float form (uint8: its uint8 kernel; quantize_linear: a
    float AveragePool then QuantizeLinear, pool.quantize_linear_pool).  Fixed: same scale and zero
    point in and out (QDQ): one avg_pool2d.  No padding: sum_pool2d then requantize (one
    rounding).  Padding and different scales: avg_pool2d then requantize, two roundings, so up to
    one step more error than onnxruntime (documented in docs/runtime.md).
    """
    xs, xz, ys, yz = float(xq.scale), int(xq.zero_point), float(yq.scale), int(yq.zero_point)
    if arithmetic == "onnxruntime":
        avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz, scale_x=np.float32(xs),
                             scale_out=np.float32(ys), zp_out=yz, uint8=uint8, quantize_linear=quantize_linear)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if xq.same_as(yq):
        avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if not any(padding):
        total = ops.sum_pool2d(x_shape, kernel, stride, 0)
        k = kernel[0] * kernel[1]
        req = rescale_op(arithmetic, total.output.shape, "int32", k * xz, xs / k, ys, yz, lo, hi)
        return [("sum", total, None), ("requant", req, yq)]
    avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz)
    req = rescale_op(arithmetic, avg.output.shape, "int8", xz, xs, ys, yz, lo, hi)
    return [("avg", avg, xq), ("requant", req, yq)]


def global_pool_ops(arithmetic: str, x_shape: tuple[int, ...], xq: QuantParams, yq: QuantParams, lo: int,
                    hi: int) -> list[tuple[str, object, object]]:
    """Global average pooling as (suffix, op, quant) steps.

    onnxruntime: QLinearGlobalAveragePool's float form.  Fixed: one global_avg_pool2d when the
    scales agree, else sum then requantize.
    """
    if arithmetic == "onnxruntime":
        avg = ops.global_avg_pool2d(x_shape, x_zp=int(xq.zero_point), scale_x=np.float32(xq.scale),
                                    scale_out=np.float32(yq.scale), zp_out=int(yq.zero_point))
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if xq.same_as(yq):
        avg = ops.global_avg_pool2d(x_shape)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    n = x_shape[2] * x_shape[3]
    total = ops.sum_pool2d(x_shape, x_shape[2:], None, 0)
    req = rescale_op(arithmetic, total.output.shape, "int32", n * int(xq.zero_point),
                      float(xq.scale) / n, float(yq.scale), int(yq.zero_point), lo, hi)
    return [("sum", total, None), ("requant", req, yq)]


def _clip_step(shape, lo: int, hi: int, q) -> list:
    """A clip step after an op whose own range is int8's, unless [lo, hi] is int8's."""
    return [] if (lo, hi) == INT8 else [("clip", ops.clip(shape, lo, hi), q)]


def int8_bounds(q: QuantParams, lo: float, hi: float) -> tuple[int, int]:
    """int8 bounds of a float clip [lo, hi] followed by QuantizeLinear (exact: quantising is monotone)."""
    def one(v: float, default: int) -> int:
        if math.isinf(v):
            return default
        r = float(np.rint(np.float32(v) / q.scale)) + int(q.zero_point)
        return int(min(max(r, -128), 127))
    return one(lo, -128), one(hi, 127)

