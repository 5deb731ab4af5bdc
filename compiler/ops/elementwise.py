"""The elementwise ops: add, mul, and the QDQ float ops qdq_add, sub, div, max, min (with broadcasting, b an
input or a constant), relu, clip and requantize."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .. import reference as sem
from ..dims import Dim, DynamicOp, dynamic_op, has_dims
from ..errors import CompileError
from .base import INT8, INT32, PRODUCT_LIMIT, Op, Tensor
from .checks import (clamp_args, derived_scale, f32_scale_arg, f32_scales_arg, float_form, int_arg,
                     per_channel_arg, shape_arg, x_zp_range)


@dataclass(frozen=True, eq=False, repr=False)
class Elementwise(Op):
    """add, mul, clip (relu) or requantize over a tensor of any shape."""

    mode: str                   # "add", "mul", "clip", "requantize", or one of FLOAT_BINARY
    shape: tuple[int, ...]
    in_dtype: str = "int8"
    za: int = 0                 # zero point of a (zx for requantize)
    zb: int = 0
    ma: np.ndarray | int = 0    # multiplier (per channel along axis 1 for requantize)
    mb: int = 0
    shift: np.ndarray | int = 0
    zp_out: int = 0
    lo: int = -128
    hi: int = 127
    scale: np.ndarray | np.float32 | None = None    # requantize's float form: per tensor, or per channel
    fscales: tuple | None = None                    # add / mul's float form: float32 (scale_a, scale_b, scale_out)
    x_layout: str = "nchw"      # DDR layouts of the inputs and of y (a clip between two: a layout transform)
    y_layout: str = "nchw"
    b_shape: tuple | None = None    # binary: b's shape when it broadcasts to `shape` (1 or the size per axis)
    b_const: np.ndarray | None = None   # binary: b as an int8 constant of b_shape (or shape), not an input
    reverse: bool = False       # b op a (a FLOAT_BINARY op); add's float form: b takes QLinearAdd's A role
    uint8: bool = False         # add / mul's float form on uint8 tensors held as int8 (reference.excess)
    kind: str = field(init=False, default="elementwise")

    def __post_init__(self):
        object.__setattr__(self, "kind", self.mode)

    @property
    def is_float(self) -> bool:
        """Is this the float form (onnxruntime arithmetic)?"""
        return self.scale is not None or self.fscales is not None

    @property
    def is_add(self) -> bool:
        """An add: QLinearAdd's (or the integer) add, or onnxruntime's float Add (qdq_add)?"""
        return self.mode in ("add", "qdq_add")

    @property
    def binary(self) -> bool:
        """A binary op (a and b)?"""
        return self.mode in ("add", "mul") + FLOAT_BINARY

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        if self.binary:         # a constant b is the op's own, not an input
            b = () if self.b_const is not None else (Tensor("b", self.b_shape or self.shape, "int8"),)
            return (Tensor("a", self.shape, "int8"),) + b
        return (Tensor("x", self.shape, self.in_dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.shape, "int8")

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        if self.b_const is not None:
            arrays = (arrays[0], self.b_const)
        if self.b_shape is not None:        # b repeated along its size-1 axes, then elementwise
            arrays = (arrays[0], np.broadcast_to(arrays[1], self.shape))
        if self.mode in FLOAT_BINARY:
            (a, b), (za, zb), (sa, sb, sy) = arrays, (self.za, self.zb), self.fscales
            if self.reverse:
                a, b, za, zb, sa, sb = b, a, zb, za, sb, sa
            return sem.qdq_binary_f32(self.mode, a, b, za, zb, sa, sb, sy, self.zp_out, self.lo, self.hi)
        if self.fscales is not None and self.mode == "add":
            return sem.add_f32(*self.roles(arrays), *self.add_params()[3:], self.zp_out, self.lo, self.hi,
                               self.uint8)
        if self.fscales is not None:
            return sem.mul_f32(*arrays, self.za, self.zb, *self.fscales, self.zp_out, self.lo, self.hi, self.uint8)
        if self.scale is not None:
            return sem.requantize_f32(arrays[0], self.za, self.scale, self.zp_out, self.lo, self.hi)
        if self.mode == "add":
            return sem.add(*arrays, self.za, self.zb, self.ma, self.mb, self.shift, self.zp_out,
                           self.lo, self.hi)
        if self.mode == "mul":
            return sem.mul(*arrays, self.za, self.zb, self.ma, self.shift, self.zp_out, self.lo, self.hi)
        if self.mode == "clip":
            return sem.clip(arrays[0], self.lo, self.hi)
        return sem.requantize(arrays[0], self.za, self.ma, self.shift, self.zp_out, self.lo, self.hi)


    def roles(self, pair: tuple) -> tuple:
        """A pair given as (a, b) in the order of QLinearAdd's (A, B) roles: reversed, (b, a)."""
        return tuple(pair[::-1]) if self.reverse else tuple(pair)

    def add_params(self) -> tuple:
        """A float-form add's (ra, rb, c) and its (za, zb, scale_a, scale_b, scale_out) in QLinearAdd's roles
        (reverse: b is A): sem.add_f32_params of them, the factors vu.fadd takes."""
        za, zb = self.roles((self.za, self.zb))
        sa, sb = self.roles(self.fscales[:2])
        ra, rb, c = sem.add_f32_params(sa, sb, self.fscales[2], za, zb, self.zp_out, self.uint8)
        return ra, rb, c, za, zb, sa, sb, self.fscales[2]


FLOAT_BINARY = sem.QDQ_BINARY
"""The binary ops with only a float form: onnxruntime's DequantizeLinear -> float32 op -> QuantizeLinear."""


def _b_const(b_const, b_shape: tuple | None, shape: tuple) -> np.ndarray | None:
    """b as a constant: an int8 array of b's shape (b_shape when it broadcasts, else shape), read-only."""
    if b_const is None:
        return None
    b = np.asarray(b_const)
    want = b_shape or tuple(shape)
    if b.dtype != np.int8 or b.shape != want:
        raise CompileError(f"b_const must be an int8 array of shape {want}, got {b.dtype} {b.shape}")
    b = b.copy()
    b.flags.writeable = False
    return b


def qdq_binary(mode: str, shape, *, za=0, zb=0, scale_a, scale_b, scale_out, zp_out=0, lo=-128, hi=127,
               b_shape=None, b_const=None, reverse=False) -> Elementwise:
    """onnxruntime's QDQ float island: QuantizeLinear(DequantizeLinear(a) op DequantizeLinear(b)), op one of
    "qdq_add", "sub", "div", "max", "min", in float32 (compiler.reference.qdq_binary_f32).

    b_shape: b's shape when it broadcasts to `shape`; b_const: b as an int8 constant instead of an input;
    reverse: compute b op a instead (a keeps the output's shape, b still broadcasts).
    """
    if mode not in FLOAT_BINARY:
        raise CompileError(f"qdq_binary: mode must be one of {', '.join(FLOAT_BINARY)}, got {mode!r}")
    if has_dims(shape):
        raise CompileError(f"{mode}: shape {tuple(shape)} holds a Dim; qdq_binary has a static lowering only")
    shape, za, zb = shape_arg("shape", shape), int_arg("za", za, *INT8), int_arg("zb", zb, *INT8)
    b_shape = _broadcast(shape, b_shape)
    fs = _binary_floats(mode, scale_a, scale_b, scale_out)
    return Elementwise(mode, shape, "int8", za, zb, 0, 0, 0, *clamp_args(zp_out, lo, hi), fscales=fs,
                       b_shape=b_shape, b_const=_b_const(b_const, b_shape, shape), reverse=bool(reverse))


def _uint8_arg(kind: str, uint8, shape, scale) -> bool:
    """uint8 as a bool: only a float form (a scale given) has a uint8 arithmetic, and only a static one."""
    if not isinstance(uint8, (bool, np.bool_)):
        raise CompileError(f"{kind}: uint8 must be True or False, got {uint8!r}")
    if uint8 and scale is None:
        raise CompileError(f"{kind}: uint8=True needs the float form (scale_a=, scale_b=, scale_out=): the integer "
                           "form computes the same on uint8 tensors and their int8 view")
    if uint8 and has_dims(shape):
        raise CompileError(f"{kind}: uint8=True with a Dim in shape {tuple(shape)}: the uint8 float form has a "
                           "static lowering only")
    return bool(uint8)


def _reverse_arg(reverse, shape, scale) -> bool:
    """add's reverse as a bool: only the float form has roles to exchange, and only a static one."""
    if not isinstance(reverse, (bool, np.bool_)):
        raise CompileError(f"add: reverse must be True or False, got {reverse!r}")
    if reverse and scale is None:
        raise CompileError("add: reverse=True needs the float form (scale_a=, scale_b=, scale_out=): the integer "
                           "form is symmetric in a and b")
    if reverse and has_dims(shape):
        raise CompileError(f"add: reverse=True with a Dim in shape {tuple(shape)}: the reversed float form has a "
                           "static lowering only")
    return bool(reverse)


def _binary_floats(what: str, scale_a, scale_b, scale_out) -> tuple:
    """The three float32 tensor scales of a QLinearAdd / QLinearMul."""
    return (f32_scale_arg("scale_a", scale_a), f32_scale_arg("scale_b", scale_b), f32_scale_arg("scale_out", scale_out))


def _broadcast(shape, b_shape) -> tuple | None:
    """b's shape if it broadcasts to shape (the same rank, each axis 1 or shape's), None if it is shape."""
    if b_shape is None:
        return None
    b_shape = shape_arg("b_shape", b_shape)
    if len(b_shape) != len(shape) or any(b not in (1, a) for a, b in zip(shape, b_shape)):
        raise CompileError(f"b_shape {b_shape} does not broadcast to {tuple(shape)}: it needs the same rank, "
                           f"each axis 1 or the same size")
    return None if b_shape == tuple(shape) else b_shape


def _dynamic_binary(kind: str, make, shape, b_shape) -> DynamicOp:
    """The DynamicOp of a binary op with Dims; a broadcast b has a fixed shape."""
    if has_dims(b_shape or ()):
        raise CompileError(f"{kind}: b_shape {tuple(b_shape)} holds a Dim; a broadcast operand of a dynamic "
                           f"{kind} has a fixed shape (1 per axis, or the channels)")
    if b_shape is not None:
        b_shape = shape_arg("b_shape", b_shape)
        _broadcast(tuple(1 if isinstance(d, Dim) else d for d in shape), b_shape)    # a Dim's axis: 1 in b
    return dynamic_op(kind, lambda s: make(s, b_shape), shape, ("a", "b"),
                      in_shapes=None if b_shape is None else (tuple(shape), b_shape))


def add(shape, *, za=0, zb=0, ma=None, mb=None, shift=None, scale_a=None, scale_b=None, scale_out=None,
        zp_out=0, lo=-128, hi=127, b_shape=None, b_const=None, uint8=False, reverse=False) -> Elementwise | DynamicOp:
    """Quantised a + b: clip(rshift_round((a - za) * ma + (b - zb) * mb, shift) + zp_out, lo, hi).

    With scale_a=, scale_b=, scale_out= (the tensors' float32 scales) instead: QLinearAdd's arithmetic.
    b_shape: b's shape when it broadcasts to `shape` (each axis 1 or the same size: a per-channel or scalar b).
    b_const: b as an int8 constant (of b_shape, or shape) instead of an input.
    uint8: the float form of uint8 tensors held as their int8 view q - 128 (QLinearAdd's uint8 kernel).
    reverse: the float form with b in QLinearAdd's A role and a in its B role (its arithmetic is not
    symmetric: a broadcast or constant A), computing add_f32(b, a, zb, za, scale_b, scale_a, ...).
    """
    uint8 = _uint8_arg("add", uint8, shape, scale_a)
    reverse = _reverse_arg(reverse, shape, scale_a)
    if has_dims(shape) and b_const is None:
        return _dynamic_binary("add", lambda s, bs: add(s, za=za, zb=zb, ma=ma, mb=mb, shift=shift, scale_a=scale_a,
                                                        scale_b=scale_b, scale_out=scale_out, zp_out=zp_out, lo=lo,
                                                        hi=hi, b_shape=bs), shape, b_shape)
    shape, za, zb = shape_arg("shape", shape), int_arg("za", za, *INT8), int_arg("zb", zb, *INT8)
    b_shape = _broadcast(shape, b_shape)
    clamp = clamp_args(zp_out, lo, hi)
    floats = {"scale_a": scale_a, "scale_b": scale_b, "scale_out": scale_out}
    if float_form("add", {"ma": ma, "mb": mb, "shift": shift}, floats):
        fs = _binary_floats("add", scale_a, scale_b, scale_out)
        op = Elementwise("add", shape, "int8", za, zb, 0, 0, 0, *clamp, fscales=fs, b_shape=b_shape,
                         b_const=_b_const(b_const, b_shape, shape), uint8=uint8, reverse=reverse)
        with np.errstate(all="ignore"):      # an overflow is reported below, naming the factor
            ra, rb, c = op.add_params()[:3]
        first, second = op.roles(("scale_a", "scale_b"))
        derived_scale(f"{first} / scale_out", ra, "the scales")
        derived_scale(f"{second} / scale_out", rb, "the scales")
        if not np.isfinite(c):
            raise CompileError(f"add: the folded zero points give the non-finite offset {c}")
        return op
    return Elementwise("add", shape, "int8", za, zb, int_arg("ma", ma, 0, (1 << 31) - 1),
                       int_arg("mb", mb, 0, (1 << 31) - 1), int_arg("shift", shift, 0, 62), *clamp, b_shape=b_shape,
                       b_const=_b_const(b_const, b_shape, shape))


def mul(shape, *, za=0, zb=0, multiplier=None, shift=None, scale_a=None, scale_b=None, scale_out=None,
        zp_out=0, lo=-128, hi=127, b_shape=None, b_const=None, uint8=False) -> Elementwise | DynamicOp:
    """Quantised a * b: clip(rshift_round((a - za) * (b - zb) * M, S) + zp_out, lo, hi).

    With scale_a=, scale_b=, scale_out= (the tensors' float32 scales) instead: QLinearMul's arithmetic.
    b_shape: b's shape when it broadcasts to `shape` (each axis 1 or the same size: a per-channel or scalar b).
    b_const: b as an int8 constant (of b_shape, or shape) instead of an input.
    uint8: the float form of uint8 tensors held as their int8 view q - 128 (QLinearMul's uint8 kernel).
    """
    uint8 = _uint8_arg("mul", uint8, shape, scale_a)
    if has_dims(shape) and b_const is None:
        return _dynamic_binary("mul", lambda s, bs: mul(s, za=za, zb=zb, multiplier=multiplier, shift=shift,
                                                        scale_a=scale_a, scale_b=scale_b, scale_out=scale_out,
                                                        zp_out=zp_out, lo=lo, hi=hi, b_shape=bs), shape, b_shape)
    shape, za, zb = shape_arg("shape", shape), int_arg("za", za, *INT8), int_arg("zb", zb, *INT8)
    b_shape = _broadcast(shape, b_shape)
    clamp = clamp_args(zp_out, lo, hi)
    floats = {"scale_a": scale_a, "scale_b": scale_b, "scale_out": scale_out}
    if float_form("mul", {"multiplier": multiplier, "shift": shift}, floats):
        fs = _binary_floats("mul", scale_a, scale_b, scale_out)
        with np.errstate(all="ignore"):
            r = sem.mul_f32_ratio(*fs)
        derived_scale("scale_a * scale_b / scale_out", r, "the scales")
        return Elementwise("mul", shape, "int8", za, zb, 0, 0, 0, *clamp, fscales=fs, b_shape=b_shape,
                           b_const=_b_const(b_const, b_shape, shape), uint8=uint8)
    return Elementwise("mul", shape, "int8", za, zb, int_arg("multiplier", multiplier, 1, (1 << 31) - 1), 0,
                       int_arg("shift", shift, 0, 62), *clamp, b_shape=b_shape,
                       b_const=_b_const(b_const, b_shape, shape))


def relu(shape, zp=0) -> Elementwise | DynamicOp:
    """max(x, zp)."""
    if has_dims(shape):
        return dynamic_op("relu", lambda s: relu(s, zp), shape)
    zp = int_arg("zp", zp, *INT8)
    return Elementwise("clip", shape_arg("shape", shape), lo=zp, hi=127)


def clip(shape, lo, hi) -> Elementwise | DynamicOp:
    """clip(x, lo, hi)."""
    if has_dims(shape):
        return dynamic_op("clip", lambda s: clip(s, lo, hi), shape)
    _, lo, hi = clamp_args(0, lo, hi)
    return Elementwise("clip", shape_arg("shape", shape), lo=lo, hi=hi)


def requantize(shape, *, in_dtype, zx=0, multiplier=None, shift=None, scale=None, zp_out=0, lo=-128,
               hi=127) -> Elementwise | DynamicOp:
    """clip(rshift_round((x - zx) * M, S) + zp_out, lo, hi) for int8 or int32 x.

    multiplier and shift are scalars, or one per channel (axis 1) of a shape with two or more axes.
    With scale= (float32, per tensor or per channel) instead: requant_f32(x - zx), onnxruntime's arithmetic.
    """
    if has_dims(shape):
        return dynamic_op("requantize", lambda s: requantize(s, in_dtype=in_dtype, zx=zx, multiplier=multiplier,
                                                              shift=shift, scale=scale, zp_out=zp_out, lo=lo,
                                                              hi=hi), shape)
    shape = shape_arg("shape", shape)
    if in_dtype not in ("int8", "int32"):
        raise CompileError(f"in_dtype must be 'int8' or 'int32', got {in_dtype!r}")
    zx = int_arg("zx", zx, *(INT8 if in_dtype == "int8" else INT32))
    if float_form("requantize", {"multiplier": multiplier, "shift": shift}, {"scale": scale}):
        if np.ndim(scale) and len(shape) < 2:
            raise CompileError("a per-channel scale needs a shape with a channel axis (axis 1)")
        s = f32_scales_arg("scale", scale, shape[1]) if np.ndim(scale) else f32_scale_arg("scale", scale)
        return Elementwise("requantize", shape, in_dtype, zx, 0, 0, 0, 0, *clamp_args(zp_out, lo, hi), scale=s)
    per_channel = np.ndim(multiplier) or np.ndim(shift)
    if per_channel and len(shape) < 2:
        raise CompileError("per-channel multiplier/shift need a shape with a channel axis (axis 1)")
    n = shape[1] if per_channel else 1
    m = per_channel_arg("multiplier", multiplier, n, 1, (1 << 31) - 1)
    s = per_channel_arg("shift", shift, n, 0, 62)
    x_range = (x_zp_range(zx) if in_dtype == "int8" else (1 << 31) + abs(zx))
    if x_range * int(m.max()) >= PRODUCT_LIMIT:
        raise CompileError(f"zx = {zx} with multiplier {int(m.max())}: (x - zx) * M can leave 62 bits")
    if not per_channel:
        m, s = int(m[0]), int(s[0])
    return Elementwise("requantize", shape, in_dtype, zx, 0, m, 0, s, *clamp_args(zp_out, lo, hi))
