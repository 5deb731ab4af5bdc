"""The pooling ops: max, average, sum and global average pooling, and ReduceMean over the plane."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import reference as sem
from ..dims import DynamicOp, dynamic_op, has_dims
from ..errors import CompileError
from .base import ACC_LIMIT, GLOBAL_SCALE_RANGE, INT8, Op, Tensor
from .checks import check_sizes, int_arg, shape_arg, pair_arg, padding_arg, f32_scale_arg, out_size


@dataclass(frozen=True, eq=False, repr=False)
class Pool2d(Op):
    """max / avg / sum pooling over NCHW int8 (global average pooling is avg over the plane); mean: onnxruntime's
    float32 ReduceMean over the plane between DequantizeLinear and QuantizeLinear."""

    mode: str                   # "max", "avg", "sum" or "mean"
    x_shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    count_include_pad: bool = True
    x_zp: int = 0
    zp_out: int = 0
    scale_x: np.float32 | None = None      # the float form (QLinearAveragePool): input and output scales
    scale_out: np.float32 | None = None
    uint8: bool = False                    # the float form on uint8 tensors held as int8 (reference.excess)
    quantize_linear: bool = False          # the float form of a float AveragePool then QuantizeLinear (rounds first)
    x_layout: str = "nchw"                 # DDR layouts of x and y: lowering.layout
    y_layout: str = "nchw"
    kind: str = field(init=False, default="pool2d")

    def __post_init__(self):
        object.__setattr__(self, "kind", f"{self.mode}_pool2d")

    @property
    def is_float(self) -> bool:
        """Is this onnxruntime's QLinearAveragePool / QLinearGlobalAveragePool (float32 arithmetic)?"""
        return self.scale_x is not None

    @property
    def is_global(self) -> bool:
        """Does onnxruntime run it as a global average pool (kernel = the plane, no padding)?  Its QLinearAveragePool
        does; a float AveragePool it runs on NCHWc blocks (quantize_linear) sums the window in order."""
        return not self.quantize_linear and sem.avg_pool_is_global(self.x_shape, self.kernel, self.padding)

    @property
    def out_hw(self) -> tuple[int, int]:
        (_, _, h, w), (kh, kw), (t, l, b, r) = self.x_shape, self.kernel, self.padding
        return (out_size("pool height", h, kh, self.stride[0], 1, t, b),
                out_size("pool width", w, kw, self.stride[1], 1, l, r))

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.x_shape, "int8"),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.x_shape[:2] + self.out_hw, "int32" if self.mode == "sum" else "int8")

    def _compute(self, x: np.ndarray) -> np.ndarray:
        if self.mode == "max":
            return sem.max_pool2d(x, self.kernel, self.stride, self.padding)
        if self.mode == "sum":
            return sem.sum_pool2d(x, self.kernel, self.stride, self.padding)
        if self.mode == "mean":
            return sem.reduce_mean_f32(x, self.x_zp, self.scale_x, self.scale_out, self.zp_out)
        if self.is_float:
            return sem.avg_pool2d_f32(x, self.kernel, self.stride, self.padding, self.count_include_pad,
                                      self.x_zp, self.scale_x, self.scale_out, self.zp_out, self.uint8,
                                      self.quantize_linear)
        return sem.avg_pool2d(x, self.kernel, self.stride, self.padding, self.count_include_pad, self.x_zp)


def _pool(mode: str, x_shape, kernel, stride, padding, count_include_pad=True, x_zp=0, **floats) -> Pool2d:
    x_shape = shape_arg("x_shape", x_shape, 4)
    k = pair_arg("kernel", kernel)
    s = k if stride is None else pair_arg("stride", stride)
    pad = padding_arg("padding", padding)
    for side, p, kk in zip(("top", "left", "bottom", "right"), pad, k + k):
        if p >= kk:
            raise CompileError(f"padding {side} = {p} must be smaller than the kernel ({kk}): "
                               "otherwise a window can lie entirely in the padding")
    if not isinstance(count_include_pad, (bool, np.bool_)):
        raise CompileError(f"count_include_pad must be a bool, got {count_include_pad!r}")
    op = Pool2d(mode, x_shape, k, s, pad, bool(count_include_pad), int_arg("x_zp", x_zp, *INT8), **floats)
    op.out_hw  # noqa: B018 - raises CompileError when the window does not fit
    check_sizes(op)
    if op.mode == "avg" and op.is_float and op.is_global:
        _check_global_float(op)
    return op


def _avg_floats(what: str, scale_x, scale_out, zp_out) -> dict:
    """The float form's fields of an average pool, or none (zp_out alone is an error: the integer form keeps
    the input's quantisation)."""
    if scale_x is None and scale_out is None:
        if zp_out is not None:
            raise CompileError(f"{what}: zp_out = {zp_out!r} needs scale_x= and scale_out= (the float form); "
                               "the integer form keeps the input's scale and zero point")
        return {}
    if scale_x is None or scale_out is None:
        raise CompileError(f"{what}: the float form needs both scale_x= and scale_out=")
    return {"scale_x": f32_scale_arg("scale_x", scale_x), "scale_out": f32_scale_arg("scale_out", scale_out),
            "zp_out": int_arg("zp_out", 0 if zp_out is None else zp_out, *INT8)}


def _check_global_float(op: Pool2d) -> None:
    """onnxruntime's limits on QLinearGlobalAveragePool, and an int32 sum that cannot wrap."""
    n = op.x_shape[2] * op.x_shape[3]
    if 255 * n >= ACC_LIMIT:
        raise CompileError(f"{op.kind}: a plane of {n} elements: sum(x) - x_zp * {n} could leave int32")
    with np.errstate(all="ignore"):
        s = sem.global_avg_pool_scale(op.scale_x, op.scale_out, n)
    if not GLOBAL_SCALE_RANGE[0] <= s < GLOBAL_SCALE_RANGE[1]:
        raise CompileError(f"{op.kind}: scale_x / (scale_out * {n}) = {s} is outside [2**-32, 256), "
                           "which onnxruntime refuses")


def max_pool2d(x_shape, kernel, stride=None, padding=0) -> Pool2d | DynamicOp:
    """Max pooling; padding never wins.  A compiler.Dim in x_shape makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("max_pool2d", lambda s: max_pool2d(s, kernel, stride, padding), x_shape)
    return _pool("max", x_shape, kernel, stride, padding)


def avg_pool2d(x_shape, kernel, stride=None, padding=0, count_include_pad=True, x_zp=0, *, scale_x=None,
               scale_out=None, zp_out=None, uint8=False, quantize_linear=False) -> Pool2d | DynamicOp:
    """Average pooling, rounding half away from zero; with scale_x= and scale_out=, QLinearAveragePool's
    (uint8=True: its uint8 kernel, on tensors held as their int8 view q - 128; quantize_linear=True: onnxruntime's
    float AveragePool on NCHWc blocks then QuantizeLinear, which rounds before it adds zp_out).
    A compiler.Dim in x_shape makes a DynamicOp (compiler/dims.py)."""
    for name, flag in (("uint8", uint8), ("quantize_linear", quantize_linear)):
        if not isinstance(flag, (bool, np.bool_)) or (flag and (scale_x is None or has_dims(x_shape))):
            raise CompileError(f"avg_pool2d: {name} = {flag!r}: True or False, and True only in the float form "
                               "(scale_x=, scale_out=) of a static shape")
    if uint8 and quantize_linear:
        raise CompileError("avg_pool2d: uint8 and quantize_linear exclude each other (QuantizeLinear rounds before "
                           "it adds the zero point, so it computes the same on uint8 tensors and their int8 view)")
    if has_dims(x_shape):
        return dynamic_op("avg_pool2d", lambda s: avg_pool2d(s, kernel, stride, padding, count_include_pad, x_zp,
                                                              scale_x=scale_x, scale_out=scale_out, zp_out=zp_out),
                          x_shape)
    floats = _avg_floats("avg_pool2d", scale_x, scale_out, zp_out)
    return _pool("avg", x_shape, kernel, stride, padding, count_include_pad, x_zp, **floats,
                 **({"uint8": True} if uint8 else {}), **({"quantize_linear": True} if quantize_linear else {}))


def sum_pool2d(x_shape, kernel, stride=None, padding=0) -> Pool2d | DynamicOp:
    """Window sums as int32.  A compiler.Dim in x_shape makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("sum_pool2d", lambda s: sum_pool2d(s, kernel, stride, padding), x_shape)
    return _pool("sum", x_shape, kernel, stride, padding)


def global_avg_pool2d(x_shape, *, x_zp=0, scale_x=None, scale_out=None, zp_out=None) -> Pool2d | DynamicOp:
    """Average over the whole plane: [N, C, 1, 1]; with scale_x= and scale_out=, QLinearGlobalAveragePool's.
    A compiler.Dim in x_shape makes a DynamicOp whose window is the actual plane (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("global_avg_pool2d", lambda s: global_avg_pool2d(
            s, x_zp=x_zp, scale_x=scale_x, scale_out=scale_out, zp_out=zp_out), x_shape)
    x_shape = shape_arg("x_shape", x_shape, 4)
    floats = _avg_floats("global_avg_pool2d", scale_x, scale_out, zp_out)
    return _pool("avg", x_shape, x_shape[2:], None, 0, True, x_zp, **floats)


def reduce_mean(x_shape, *, x_zp=0, scale_x, scale_out, zp_out=0) -> Pool2d:
    """DequantizeLinear -> ReduceMean over H and W -> QuantizeLinear: [N, C, 1, 1] int8, onnxruntime's float32
    sum in its order (reference.reduce_mean_f32).  Shapes are static."""
    if has_dims(x_shape):
        raise CompileError(f"reduce_mean: x_shape {x_shape!r} holds a Dim; ReduceMean takes static shapes only")
    x_shape = shape_arg("x_shape", x_shape, 4)
    floats = _avg_floats("reduce_mean", scale_x, scale_out, zp_out)
    return _pool("mean", x_shape, x_shape[2:], None, 0, True, x_zp, **floats)
