"""The ops with weights: Conv and QLinearConv (conv2d), Gemm, QGemm, MatMul and QLinearMatMul (dense).

Weights are int8 and symmetric, per tensor or per output channel; a bias is rescaled to the
accumulator's scale (float32(x_scale * w_scale), as the quantizer writes it).  The window
geometry (strides, pads, dilations, auto_pad, ceil_mode) is shared with pooling.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from ..errors import CompileError
from ..graph import QuantParams
from .arithmetic import requant_args
from .state import Attr, Const, ConstDQ, Importer, Pending, Problem, Q, as_int8, brief, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


_CONV_ATTRS = {"auto_pad": Attr("string", "NOTSET"), "dilations": Attr("ints"), "group": Attr("int", 1),
               "kernel_shape": Attr("ints"), "pads": Attr("ints"), "strides": Attr("ints")}


def conv(im: Importer, node: NodeProto) -> None:
    """Conv in QDQ: DQ(x), DQ(w), bias DQ(int32) or float -> pending conv2d."""
    at = im.attrs(node, _CONV_ATTRS)
    x = im.dequantised(node, 0, "X")
    w = _weight(im, node, 1, "W", ndim=4, axis=0)
    bias = _bias_input(im, node, 2)
    make = _conv_maker(im, node, x.value, x.q, w.array, w.q, bias, at, _runs_in_float(im, node))
    im.set(node, Pending(node, make))


def qlinear_conv(im: Importer, node: NodeProto) -> None:
    """QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B): conv2d."""
    at = im.attrs(node, _CONV_ATTRS)
    x = im.int8(node, 0, "x")
    xq = im.params(node, 1, 2, "x")
    w = im.const(node, 3, "w")
    w, wq = _weight_params(im, node, w, 4, 5, axis=0, ndim=4)
    b = im.const(node, 8, "B", optional=True)
    bias = None if b is None else ("acc", b)
    yq = im.params(node, 6, 7, "y")
    make = _conv_maker(im, node, x, xq, w, wq, bias, at)
    im.set(node, Q(make(yq, -128, 127, node.output[0], im.name(node))))


def _runs_in_float(im: Importer, node) -> bool:
    """Does onnxruntime run this QDQ Conv / Gemm / MatMul in float at its default level?  Its optimised graph
    says so (Importer.ort_kernel: in an int8 model, a group whose input its QDQS8ToU8 pass left int8), and it
    fuses the group into QLinearConv / QGemm / QLinearMatMul only when the activation comes straight from a
    DequantizeLinear."""
    return im.writer_op(node.input[0]) != "DequantizeLinear" or im.ort_kernel(node) == "float"


def _no_wrap(node, what: str, wabs_sum: np.ndarray, bias: np.ndarray | None, x_zp: int) -> None:
    """Problem unless the int32 accumulators cannot wrap: onnxruntime's QLinear kernels wrap as the NU does
    (reference.wrap32), but its float Gemm and Conv do not."""
    try:
        ops.check_accumulator(what, wabs_sum, bias, x_zp)
    except CompileError as exc:
        raise Problem(node, f"{exc}; onnxruntime runs this node in float, where nothing wraps") from None


def _conv_maker(im: Importer, node, x: str, xq: QuantParams, w: np.ndarray, wq: QuantParams, bias, at,
                in_float: bool = False):
    x_shape = im.shape(x)
    if len(x_shape) != 4:
        raise Problem(node, f"input has shape {list(x_shape)}: only 2-D convolution (NCHW) is supported")
    if at["kernel_shape"] is not None and tuple(at["kernel_shape"]) != w.shape[2:]:
        raise Problem(node, f"kernel_shape {list(at['kernel_shape'])} does not match the weight "
                      f"{list(w.shape)}")
    stride, pads, dil = geometry(node, at, x_shape[2:], w.shape[2:])
    o = w.shape[0]
    acc_scale = _acc_scale(xq, wq, o)
    b = _bias_values(node, bias, acc_scale)
    if in_float:
        _no_wrap(node, "conv2d", np.abs(w.astype(np.int64)).sum(axis=(1, 2, 3)), b, int(xq.zero_point))

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        args = requant_args(im.arithmetic, xq.scale, _per_out(wq, o), yq.scale, int(yq.zero_point))
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [xq], "w_quant": wq}
        if patchify(x_shape, w.shape, stride, pads, dil, at["group"]):
            return im.emit(name, _patch_steps(x_shape, w, b, xq, yq, lo, hi, args), (x,), out, info)
        op = ops.conv2d(x_shape, w, b, stride=stride, padding=pads, dilation=dil, groups=at["group"],
                        x_zp=int(xq.zero_point), lo=lo, hi=hi, **args)
        if in_float and not im.dynamic:     # onnxruntime's float Conv on the NU's float mode (docs/architecture.md);
            # MLAS's order depends on the output's size, which a dynamic graph's program does not fix
            op = ops.float_mode(op, xq.scale, _per_out(wq, o), yq.scale, _float_bias(bias, o))
        return im.emit(name, [("conv", op, yq)], (x,), out, info)
    return make


PATCH_TAPS = 64
"""Taps from which a patchify conv is imported as a dense over its patches (patchify)."""


def patchify(x_shape, w_shape, stride, pads, dil, groups: int) -> bool:
    """Is the conv a patch embedding the importer runs as a dense: windows that tile the input exactly (kernel
    = stride, no padding or dilation, one group, the plane a whole number of windows) of PATCH_TAPS taps or
    more?  The NU's conv plan keeps every tap of a weight block on chip (ViT's 16 x 16 patches from 3 channels
    need 512 KiB of WBUF), where a dense chunks its depth; the integer sums and their requantisation per
    output channel are the same (QLinearConv's and QGemm's), so the result is too."""
    kh, kw = w_shape[2:]
    return (groups == 1 and tuple(stride) == (kh, kw) and not any(pads) and tuple(dil) == (1, 1)
            and kh * kw >= PATCH_TAPS and x_shape[2] % kh == 0 and x_shape[3] % kw == 0)


def _patch_steps(x_shape, w: np.ndarray, b, xq: QuantParams, yq: QuantParams, lo: int, hi: int, args) -> list:
    """The patchify conv as (suffix, op, quant) steps: the patches as rows (Reshapes moving no data around one
    Transpose), a dense over them, the output back to NCHW."""
    n, c, h, wd = x_shape
    o, _, kh, kw = w.shape
    gh, gw = h // kh, wd // kw
    dense = ops.dense((n * gh * gw, c * kh * kw), np.ascontiguousarray(w.reshape(o, -1).T), b,
                      x_zp=int(xq.zero_point), lo=lo, hi=hi, **args)
    return [("patches", ops.Reshape(x_shape, (n, c, gh, kh, gw, kw)), xq),
            ("patch_rows", ops.Transpose((n, c, gh, kh, gw, kw), (0, 2, 4, 1, 3, 5)), xq),
            ("patch_matrix", ops.Reshape((n, gh, gw, c, kh, kw), (n * gh * gw, c * kh * kw)), xq),
            ("dense", dense, yq),
            ("grid", ops.Reshape((n * gh * gw, o), (n, gh, gw, o)), yq),
            ("conv", ops.Transpose((n, gh, gw, o), (0, 3, 1, 2)), yq)]


def _weight(im: Importer, node, i: int, what: str, ndim: int, axis: int) -> ConstDQ:
    s = im.input(node, i)
    if isinstance(s, ConstDQ) and s.array.dtype == np.int8:
        _check_weight(node, s.array, s.q, ndim, axis)
        return s
    raise Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must be int8 weights "
                  f"dequantised by a DequantizeLinear, got {describe(s)}")


def _weight_params(im: Importer, node, w: np.ndarray, si: int, zi: int, axis: int,
                   ndim: int) -> tuple[np.ndarray, QuantParams]:
    """The weights as int8 (uint8 ones as q - 128, state.as_int8) and their QuantParams."""
    if w.dtype not in (np.int8, np.uint8):
        raise Problem(node, f"weights have dtype {w.dtype}: only int8 and uint8 weights are supported")
    q = im.params(node, si, zi, "weight", dtypes=(w.dtype.name,), axis=axis, per_channel=True, missing=w.dtype.name)
    _check_weight(node, w, q, ndim, axis, shown=128 if w.dtype == np.uint8 else 0)
    return (as_int8(w) if w.dtype == np.uint8 else w), q


def _check_weight(node, w: np.ndarray, q: QuantParams, ndim: int, axis: int, shown: int = 0) -> None:
    """Problem unless the weights are ndim-D, scaled per tensor or along `axis`, symmetric (`shown` is added to
    the zero point in the message: 128 for uint8 weights, whose zero point the importer holds less 128)."""
    if w.ndim != ndim:
        raise Problem(node, f"weights have shape {list(w.shape)}, expected {ndim} dimensions")
    if q.per_channel and (q.axis % ndim != axis % ndim or q.scale.size != w.shape[axis]):
        raise Problem(node, f"weight scales: {q.scale.size} along axis {q.axis}; expected one per output "
                      f"channel ({w.shape[axis]}, axis {axis % ndim}) or one per tensor")
    if np.any(q.zero_point != 0):
        raise Problem(node, f"weight zero point {brief(q.zero_point + shown)}: only symmetric weights (zero point "
                      f"{shown}) are supported")


def _per_out(wq: QuantParams, o: int) -> np.ndarray:
    return wq.scale if wq.per_channel else np.full(o, wq.scale, dtype=np.float32)


def _acc_scale(xq: QuantParams, wq: QuantParams, o: int) -> np.ndarray:
    """The accumulator's scale per output channel, as the quantizer writes it: float32(x_scale * w_scale)."""
    return (xq.scale * _per_out(wq, o)).astype(np.float32)


def _bias_input(im: Importer, node, i: int):
    """("dq", int32, QuantParams), ("float", array) or None."""
    s = im.input(node, i)
    if s is None:
        return None
    if isinstance(s, ConstDQ) and s.array.dtype == np.int32:
        return ("dq", s.array, s.q)
    if isinstance(s, Const) and s.array.dtype.kind == "f":
        return ("float", s.array)
    raise Problem(node, f"bias ({node.input[i]!r}) must be an int32 constant dequantised by a DequantizeLinear, "
                  f"or float, got {describe(s)}")


def _float_bias(bias, o: int) -> np.ndarray | None:
    """The float32 bias onnxruntime's float Conv adds: its DequantizeLinear's f32(b) * scale, or the float one
    (_bias_values has checked its size and zero point)."""
    if bias is None:
        return None
    a = np.asarray(bias[1]).reshape(o)
    if bias[0] == "dq":
        q = bias[2]
        return (a.astype(np.float32) * np.asarray(q.scale, np.float32)).astype(np.float32)
    return a.astype(np.float32)


def _bias_values(node, bias, acc_scale: np.ndarray) -> np.ndarray | None:
    """int32 bias in the accumulator's scale."""
    if bias is None:
        return None
    o = acc_scale.size
    kind, a = bias[0], np.asarray(bias[1])
    if a.size != o:
        raise Problem(node, f"bias has {a.size} values for {o} output channels")
    a = a.reshape(o)
    if kind == "acc":
        if a.dtype != np.int32:
            raise Problem(node, f"bias has dtype {a.dtype}, expected int32")
        return a.astype(np.int64)
    if kind == "dq":
        q = bias[2]
        if np.any(q.zero_point != 0):
            raise Problem(node, f"bias zero point {brief(q.zero_point)}: expected 0")
        scale = q.scale if q.per_channel else np.full(o, q.scale, dtype=np.float32)
        if scale.size != o:
            raise Problem(node, f"bias has {scale.size} scales for {o} output channels")
        if np.array_equal(scale, acc_scale):
            return a.astype(np.int64)
        real = a.astype(np.float64) * scale.astype(np.float64)
    else:
        real = a.astype(np.float64)
    b = np.rint(real / acc_scale.astype(np.float64))    # rescaled to the accumulator: rounds once
    if not np.all(np.isfinite(b)) or np.abs(b).max() >= 1 << 31:
        raise Problem(node, f"bias {brief(real)} does not fit int32 at the accumulator scale {brief(acc_scale)}")
    return b.astype(np.int64)


def geometry(node: NodeProto, at: dict, hw: tuple[int, int], kernel: tuple[int, int], *,
             ceil_mode: int = 0) -> tuple[tuple[int, int], tuple[int, int, int, int], tuple[int, int]]:
    """(stride, (top, left, bottom, right), dilation) from ONNX conv/pool attributes."""
    def pair(key, default):
        v = at.get(key)
        if v is None:
            return default
        if len(v) != 2:
            raise Problem(node, f"{key} = {list(v)}: expected 2 values (2-D)")
        if min(v) < 1:
            raise Problem(node, f"{key} = {list(v)} must be positive")
        return tuple(v)
    stride, dil = pair("strides", (1, 1)), pair("dilations", (1, 1))
    span = tuple(d * (k - 1) + 1 for d, k in zip(dil, kernel))
    mode = at.get("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        pads = at.get("pads") or (0, 0, 0, 0)
        if len(pads) != 4 or min(pads) < 0:
            raise Problem(node, f"pads = {list(pads)}: expected 4 non-negative values")
        pads = tuple(pads)
    elif mode == "VALID":
        pads = (0, 0, 0, 0)
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (-(-n // s) - 1) * s + sp - n) for n, s, sp in zip(hw, stride, span)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if mode == "SAME_UPPER" else (big, small)
        pads = (begin[0], begin[1], end[0], end[1])
    else:
        raise Problem(node, f"auto_pad = {mode!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    if ceil_mode:
        pads = _ceil_pads(node, hw, span, stride, pads)
    return stride, pads, dil


def _ceil_pads(node, hw, span, stride, pads) -> tuple[int, int, int, int]:
    """ceil_mode as extra bottom/right padding (windows must still start inside the input or padding)."""
    extra = []
    for n, sp, s, p0, p1 in zip(hw, span, stride, pads[:2], pads[2:]):
        full = n + p0 + p1
        if full < sp:
            raise Problem(node, f"the window ({sp}) is larger than the padded input ({full})")
        out = -(-(full - sp) // s) + 1
        if (out - 1) * s >= n + p0:      # onnxruntime drops a last window that starts in the end padding
            out -= 1
        extra.append(max(0, (out - 1) * s + sp - full))
    return pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1]


# -- dense

def gemm(im: Importer, node: NodeProto) -> None:
    """Gemm in QDQ: DQ(A) [N, K], DQ(B) [K, O] or [O, K] (transB), bias C -> pending dense."""
    at = im.attrs(node, {"alpha": Attr("float", 1.0), "beta": Attr("float", 1.0),
                         "transA": Attr("int", 0), "transB": Attr("int", 0)})
    _gemm_checks(node, at)
    a = im.dequantised(node, 0, "A")
    w = _weight(im, node, 1, "B", ndim=2, axis=0 if at["transB"] else 1)
    bias = _bias_input(im, node, 2)
    make = _dense_maker(im, node, a.value, a.q, w.array.T if at["transB"] else w.array, w.q, bias,
                        _runs_in_float(im, node))
    im.set(node, Pending(node, make))


def qgemm(im: Importer, node: NodeProto) -> None:
    """QGemm(A, as, az, B, bs, bz, C, ys, yz) (com.microsoft): dense; no y scale means a float output."""
    at = im.attrs(node, {"alpha": Attr("float", 1.0), "transA": Attr("int", 0), "transB": Attr("int", 0)})
    _gemm_checks(node, at)
    a = im.int8(node, 0, "A")
    aq = im.params(node, 1, 2, "A")
    w = im.const(node, 3, "B")
    w, wq = _weight_params(im, node, w, 4, 5, axis=0 if at["transB"] else 1, ndim=2)
    c = im.const(node, 6, "C", optional=True)
    make = _dense_maker(im, node, a, aq, w.T if at["transB"] else w, wq, None if c is None else ("acc", c))
    if im.input(node, 7) is None:
        im.set(node, Pending(node, make))
    else:
        yq = im.params(node, 7, 8, "y")
        im.set(node, Q(make(yq, -128, 127, node.output[0], im.name(node))))


def _gemm_checks(node, at: dict) -> None:
    if at["transA"]:
        raise Problem(node, "transA = 1 is not supported")
    if at["transB"] not in (0, 1):
        raise Problem(node, f"transB = {at['transB']}: expected 0 or 1")
    for key in ("alpha", "beta"):
        if at.get(key, 1.0) != 1.0:
            raise Problem(node, f"{key} = {at[key]}: only 1.0 is supported")


def matmul(im: Importer, node: NodeProto) -> None:
    """MatMul in QDQ: DQ(A) [N, K] @ DQ(B) [K, O] -> pending dense."""
    im.attrs(node, {})
    a = im.dequantised(node, 0, "A")
    w = _weight(im, node, 1, "B", ndim=2, axis=1)
    im.set(node, Pending(node, _dense_maker(im, node, a.value, a.q, w.array, w.q, None, _runs_in_float(im, node))))


def qlinear_matmul(im: Importer, node: NodeProto) -> None:
    """QLinearMatMul(a, as, az, b, bs, bz, ys, yz): dense."""
    im.attrs(node, {})
    a = im.int8(node, 0, "a")
    aq = im.params(node, 1, 2, "a")
    w = im.const(node, 3, "b")
    w, wq = _weight_params(im, node, w, 4, 5, axis=1, ndim=2)
    yq = im.params(node, 6, 7, "y")
    make = _dense_maker(im, node, a, aq, w, wq, None)
    im.set(node, Q(make(yq, -128, 127, node.output[0], im.name(node))))


def _dense_maker(im: Importer, node, x: str, xq: QuantParams, w: np.ndarray, wq: QuantParams, bias,
                 in_float: bool = False):
    x_shape = im.shape(x)
    if len(x_shape) != 2:
        raise Problem(node, f"input has shape {list(x_shape)}: only 2-D [N, K] inputs are supported "
                      "(Flatten first)")
    if w.shape[0] != x_shape[1]:
        raise Problem(node, f"weight [K, O] = {list(w.shape)} does not match the input's K = {x_shape[1]}")
    o = w.shape[1]
    if wq.per_channel:    # per output feature: the weight as given was [O, K] (axis 0) or [K, O] (axis 1)
        wq = QuantParams(wq.scale, wq.zero_point, 1)
    b = _bias_values(node, bias, _acc_scale(xq, wq, o))
    if in_float:
        _no_wrap(node, "dense", np.abs(w.astype(np.int64)).sum(axis=0), b, int(xq.zero_point))

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        args = requant_args(im.arithmetic, xq.scale, _per_out(wq, o), yq.scale, int(yq.zero_point))
        op = ops.dense(x_shape, w, b, x_zp=int(xq.zero_point), lo=lo, hi=hi, **args)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [xq], "w_quant": wq}
        return im.emit(name, [("dense", op, yq)], (x,), out, info)
    return make

