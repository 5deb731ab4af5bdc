"""The public op constructors: validated, immutable descriptions of quantised layers.

Each constructor checks every argument and raises CompileError naming the
argument and saying why.  An op knows its input and output tensors (names,
shapes, dtypes) and computes its own reference result with compiler.reference.

Every requantising op has two forms (docs/semantics.md): the integer one,
with a multiplier and shift, and the float one, with float32 scales, which
computes what onnxruntime computes bit for bit (conv2d, dense, requantize:
`scale=`; add, mul: `scale_a=`, `scale_b=`, `scale_out=`; avg_pool2d,
global_avg_pool2d: `scale_x=`, `scale_out=`, `zp_out=`).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import numpy as np

from . import reference as sem
from .dims import Dim, DynamicOp, at, collect, dynamic_op, has_dims
from .errors import CompileError

DTYPES = ("int8", "int32")      # of a graph value and a layout op
INT8 = (-128, 127)
INT32 = (-(1 << 31), (1 << 31) - 1)
ACC_LIMIT = 1 << 31
PRODUCT_LIMIT = 1 << 62
GLOBAL_SCALE_RANGE = (2.0 ** -32, 256.0)    # onnxruntime refuses a global average pool factor outside it


@dataclass(frozen=True)
class Tensor:
    """A named DDR tensor of an op: logical shape and dtype ("int8" or "int32")."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Op:
    """Base of every op: inputs, output, and a reference computed by compiler.reference."""

    kind: str = field(init=False, default="op")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        raise NotImplementedError

    @property
    def output(self) -> Tensor:
        raise NotImplementedError

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The op's result on numpy inputs (checked against the op's input tensors)."""
        arrays = check_inputs(self, inputs)
        return self._compute(*arrays)

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}{list(t.shape)}" for t in self.inputs)
        return f"{self.kind}({ins}) -> {list(self.output.shape)} {self.output.dtype}"


def check_inputs(op: Op, inputs) -> list[np.ndarray]:
    """The inputs as numpy arrays, or CompileError naming the one that does not fit."""
    if len(inputs) != len(op.inputs):
        names = ", ".join(t.name for t in op.inputs)
        raise CompileError(f"{op.kind} takes {len(op.inputs)} input(s) ({names}), got {len(inputs)}")
    out = []
    for t, a in zip(op.inputs, inputs):
        a = np.asarray(a)
        if a.shape != t.shape:
            raise CompileError(f"{op.kind}: input {t.name} has shape {a.shape}, expected {t.shape}")
        if a.dtype != np.dtype(t.dtype):
            raise CompileError(f"{op.kind}: input {t.name} has dtype {a.dtype}, expected {t.dtype}")
        out.append(a)
    return out


# ---------------------------------------------------------------- argument checks

def _int(name: str, v, lo: int | None = None, hi: int | None = None) -> int:
    if isinstance(v, (bool, np.bool_)):
        raise CompileError(f"{name} must be an integer, got {v!r}")
    try:
        i = operator.index(v)
    except TypeError:
        raise CompileError(f"{name} must be an integer, got {v!r}") from None
    if (lo is not None and i < lo) or (hi is not None and i > hi):
        rng = f"[{lo if lo is not None else '-inf'}, {hi if hi is not None else 'inf'}]"
        raise CompileError(f"{name} = {i} is out of range {rng}")
    return int(i)


def _shape(name: str, v, ndim: int | None = None) -> tuple[int, ...]:
    try:
        dims = tuple(v)
    except TypeError:
        raise CompileError(f"{name} must be a tuple of dimensions, got {v!r}") from None
    if ndim is not None and len(dims) != ndim:
        raise CompileError(f"{name} must have {ndim} dimensions, got {len(dims)}: {dims}")
    if not dims:
        raise CompileError(f"{name} must have at least one dimension")
    return tuple(_int(f"{name}[{i}]", d, 1, 1 << 30) for i, d in enumerate(dims))


def _pair(name: str, v, lo: int = 1) -> tuple[int, int]:
    if np.ndim(v) == 0:
        i = _int(name, v, lo, 1 << 16)
        return i, i
    vals = tuple(v)
    if len(vals) != 2:
        raise CompileError(f"{name} must be an int or a pair, got {v!r}")
    return _int(f"{name}[0]", vals[0], lo, 1 << 16), _int(f"{name}[1]", vals[1], lo, 1 << 16)


def _padding(name: str, v) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, an (h, w) pair or a 4-tuple."""
    if np.ndim(v) == 0:
        p = _int(name, v, 0, 1 << 16)
        return p, p, p, p
    vals = tuple(v)
    if len(vals) == 2:
        h, w = _pair(name, vals, 0)
        return h, w, h, w
    if len(vals) == 4:
        return tuple(_int(f"{name}[{i}]", p, 0, 1 << 16) for i, p in enumerate(vals))  # type: ignore
    raise CompileError(f"{name} must be an int, a pair or (top, left, bottom, right), got {v!r}")


def _int_array(name: str, v, rng: tuple[int, int], shape: tuple[int, ...] | None = None,
               ndim: int | None = None) -> np.ndarray:
    a = np.asarray(v)
    if a.dtype.kind not in "iu":
        raise CompileError(f"{name} must be an integer array, got dtype {a.dtype}")
    if ndim is not None and a.ndim != ndim:
        raise CompileError(f"{name} must have {ndim} dimensions, got shape {a.shape}")
    if shape is not None and a.shape != shape:
        raise CompileError(f"{name} must have shape {shape}, got {a.shape}")
    if a.size == 0:
        raise CompileError(f"{name} must not be empty")
    if a.min() < rng[0] or a.max() > rng[1]:
        raise CompileError(f"{name} has values outside [{rng[0]}, {rng[1]}]")
    return a.astype(np.int64)


def _per_channel(name: str, v, n: int, lo: int, hi: int) -> np.ndarray:
    """A scalar broadcast to n channels, or exactly n values, each in [lo, hi]."""
    if np.ndim(v) == 0:
        return np.full(n, _int(name, v, lo, hi), dtype=np.int64)
    return _int_array(name, v, (lo, hi), shape=(n,))


def _f32_scale(name: str, v) -> np.float32:
    """v as a positive finite float32, or CompileError naming it."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise CompileError(f"{name} must be a number, got {v!r}") from None
    with np.errstate(over="ignore"):
        s = np.float32(f)
    if not (np.isfinite(s) and s > 0):
        raise CompileError(f"{name} = {v!r} is not a positive finite float32 (as float32: {s})")
    return s


def _f32_scales(name: str, v, n: int) -> np.ndarray:
    """A scalar broadcast to n channels, or exactly n values, each a positive finite float32."""
    if np.ndim(v) == 0:
        return np.full(n, _f32_scale(name, v), dtype=np.float32)
    a = np.asarray(v)
    if a.shape != (n,):
        raise CompileError(f"{name} must be a scalar or have shape ({n},), got {a.shape}")
    return np.array([_f32_scale(f"{name}[{i}]", x) for i, x in enumerate(a.tolist())], dtype=np.float32)


def _derived_scale(what: str, value: np.float32, inputs: str) -> np.float32:
    """A factor computed from the op's scales, which the VU needs positive and finite."""
    if not (np.isfinite(value) and value > 0):
        raise CompileError(f"{what} = {value} (from {inputs}) is not a positive finite float32")
    return np.float32(value)


def _float_form(op: str, integer: dict, floats: dict) -> bool:
    """True for the float form; CompileError unless exactly one form is given in full."""
    given_int = [k for k, v in integer.items() if v is not None]
    given_float = [k for k, v in floats.items() if v is not None]
    int_names, float_names = "=, ".join(integer) + "=", "=, ".join(floats) + "="
    if given_int and given_float:
        raise CompileError(f"{op}: give {int_names} (integer) or {float_names} (onnxruntime float32), "
                           f"not both (got {', '.join(given_int + given_float)})")
    if given_float and len(given_float) < len(floats):
        missing = [k for k in floats if floats[k] is None]
        raise CompileError(f"{op}: the float form needs {float_names}; missing {', '.join(missing)}")
    if not given_float and len(given_int) < len(integer):
        raise CompileError(f"{op}: requantisation needs {int_names} or {float_names}")
    return bool(given_float)


def _clamp(zp_out, lo, hi) -> tuple[int, int, int]:
    zp_out = _int("zp_out", zp_out, *INT8)
    lo, hi = _int("lo", lo, *INT8), _int("hi", hi, *INT8)
    if lo > hi:
        raise CompileError(f"lo = {lo} must not exceed hi = {hi}")
    return zp_out, lo, hi


def _out_size(what: str, n: int, k: int, stride: int, dil: int, p0: int, p1: int) -> int:
    span = dil * (k - 1) + 1
    if n + p0 + p1 < span:
        raise CompileError(f"{what}: the window ({span}) is larger than the padded input ({n + p0 + p1})")
    return (n + p0 + p1 - span) // stride + 1


def _x_range(x_zp: int) -> int:
    """Largest |x - x_zp| over int8 x."""
    return max(127 - x_zp, x_zp + 128)


def check_accumulator(what: str, wabs_sum: np.ndarray, bias: np.ndarray | None, x_zp: int) -> None:
    """Prove every int32 accumulator stays in range: |bias| + max|x - x_zp| * sum|w| < 2**31."""
    bound = _x_range(x_zp) * wabs_sum
    if bias is not None:
        bound = bound + np.abs(bias)
    worst = int(bound.max())
    if worst >= ACC_LIMIT:
        o = int(bound.argmax())
        raise CompileError(f"{what}: output channel {o} can reach |acc| = {worst} >= 2**31: the int32 "
                           "accumulator could overflow (fewer input channels, smaller weights or bias)")


# ---------------------------------------------------------------- NU ops

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
        return (_out_size("conv2d height", h, kh, self.stride[0], self.dilation[0], t, b),
                _out_size("conv2d width", w, kw, self.stride[1], self.dilation[1], l, r))

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

    def _compute(self, x: np.ndarray) -> np.ndarray:
        if self.scale is not None:
            return sem.conv2d_f32(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                                  self.groups, self.x_zp, self.scale, self.zp_out, self.lo, self.hi)
        return sem.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                          self.groups, self.x_zp, self.multiplier, self.shift, self.zp_out, self.lo, self.hi)


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
            return sem.dense_f32(x, self.weight, self.bias, self.x_zp, self.scale, self.zp_out, self.lo, self.hi)
        return sem.dense(x, self.weight, self.bias, self.x_zp, self.multiplier, self.shift,
                         self.zp_out, self.lo, self.hi)


def _requant_args(what: str, o: int, multiplier, shift, scale, zp_out, lo, hi) -> dict:
    """The requantisation fields of a conv2d / dense: (M, S) per channel, or a float32 scale per channel."""
    zp_out, lo, hi = _clamp(zp_out, lo, hi)
    out = {"zp_out": zp_out, "lo": lo, "hi": hi, "multiplier": None, "shift": None}
    if _float_form(what, {"multiplier": multiplier, "shift": shift}, {"scale": scale}):
        return out | {"scale": _f32_scales("scale", scale, o)}
    return out | {"multiplier": _per_channel("multiplier", multiplier, o, 1, (1 << 31) - 1),
                  "shift": _per_channel("shift", shift, o, 0, 62)}


def _bias(bias, o: int) -> np.ndarray | None:
    return None if bias is None else _int_array("bias", bias, INT32, shape=(o,))


def conv2d(x_shape, weight, bias=None, *, stride=1, padding=0, dilation=1, groups=1, x_zp=0,
           multiplier=None, shift=None, scale=None, zp_out=0, lo=-128, hi=127) -> Conv2d | DynamicOp:
    """A quantised conv2d (docs/semantics.md), validated; scale= (one or one per channel) is QLinearConv's.
    A compiler.Dim in x_shape (batch, height, width) makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("conv2d", lambda shape: conv2d(
            shape, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups, x_zp=x_zp,
            multiplier=multiplier, shift=shift, scale=scale, zp_out=zp_out, lo=lo, hi=hi), x_shape)
    x_shape = _shape("x_shape", x_shape, 4)
    w = _int_array("weight", weight, INT8, ndim=4)
    groups = _int("groups", groups, 1, x_shape[1])
    o, cg, kh, kw = w.shape
    if x_shape[1] % groups:
        raise CompileError(f"groups = {groups} does not divide the {x_shape[1]} input channels")
    if o % groups:
        raise CompileError(f"groups = {groups} does not divide the {o} output channels of weight")
    if cg != x_shape[1] // groups:
        raise CompileError(f"weight has {cg} input channels per group, expected "
                           f"{x_shape[1]} / {groups} = {x_shape[1] // groups}")
    x_zp = _int("x_zp", x_zp, *INT8)
    bias = _bias(bias, o)
    op = Conv2d(x_shape, w, bias, _pair("stride", stride), _padding("padding", padding),
                _pair("dilation", dilation), groups, x_zp,
                **_requant_args("conv2d", o, multiplier, shift, scale, zp_out, lo, hi))
    op.out_hw  # noqa: B018 - raises CompileError when the window does not fit
    check_accumulator("conv2d", np.abs(w).sum(axis=(1, 2, 3)), bias, x_zp)
    return op


def dense(x_shape, weight, bias=None, *, x_zp=0, multiplier=None, shift=None, scale=None, zp_out=0, lo=-128,
          hi=127) -> Dense | DynamicOp:
    """A quantised dense layer with weight [K, O], validated; scale= is QLinearMatMul's (QGemm's with a bias).
    A compiler.Dim for the batch (x_shape[0]) makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("dense", lambda shape: dense(shape, weight, bias, x_zp=x_zp, multiplier=multiplier,
                                                       shift=shift, scale=scale, zp_out=zp_out, lo=lo, hi=hi),
                          x_shape, ndim=2)
    x_shape = _shape("x_shape", x_shape, 2)
    w = _int_array("weight", weight, INT8, ndim=2)
    if w.shape[0] != x_shape[1]:
        raise CompileError(f"weight has {w.shape[0]} rows, expected K = {x_shape[1]} (weight is [K, O])")
    x_zp = _int("x_zp", x_zp, *INT8)
    bias = _bias(bias, w.shape[1])
    check_accumulator("dense", np.abs(w).sum(axis=0), bias, x_zp)
    return Dense(x_shape, w, bias, x_zp, **_requant_args("dense", w.shape[1], multiplier, shift, scale, zp_out,
                                                         lo, hi))


# ---------------------------------------------------------------- pooling

@dataclass(frozen=True, eq=False, repr=False)
class Pool2d(Op):
    """max / avg / sum pooling over NCHW int8 (global average pooling is avg over the plane)."""

    mode: str                   # "max", "avg" or "sum"
    x_shape: tuple[int, int, int, int]
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int, int, int]
    count_include_pad: bool = True
    x_zp: int = 0
    zp_out: int = 0
    scale_x: np.float32 | None = None      # the float form (QLinearAveragePool): input and output scales
    scale_out: np.float32 | None = None
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
        """Does onnxruntime run it as a global average pool (kernel = the plane, no padding)?"""
        return sem.avg_pool_is_global(self.x_shape, self.kernel, self.padding)

    @property
    def out_hw(self) -> tuple[int, int]:
        (_, _, h, w), (kh, kw), (t, l, b, r) = self.x_shape, self.kernel, self.padding
        return (_out_size("pool height", h, kh, self.stride[0], 1, t, b),
                _out_size("pool width", w, kw, self.stride[1], 1, l, r))

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
        if self.is_float:
            return sem.avg_pool2d_f32(x, self.kernel, self.stride, self.padding, self.count_include_pad,
                                      self.x_zp, self.scale_x, self.scale_out, self.zp_out)
        return sem.avg_pool2d(x, self.kernel, self.stride, self.padding, self.count_include_pad, self.x_zp)


def _pool(mode: str, x_shape, kernel, stride, padding, count_include_pad=True, x_zp=0, **floats) -> Pool2d:
    x_shape = _shape("x_shape", x_shape, 4)
    k = _pair("kernel", kernel)
    s = k if stride is None else _pair("stride", stride)
    pad = _padding("padding", padding)
    for side, p, kk in zip(("top", "left", "bottom", "right"), pad, k + k):
        if p >= kk:
            raise CompileError(f"padding {side} = {p} must be smaller than the kernel ({kk}): "
                               "otherwise a window can lie entirely in the padding")
    if not isinstance(count_include_pad, (bool, np.bool_)):
        raise CompileError(f"count_include_pad must be a bool, got {count_include_pad!r}")
    op = Pool2d(mode, x_shape, k, s, pad, bool(count_include_pad), _int("x_zp", x_zp, *INT8), **floats)
    op.out_hw  # noqa: B018 - raises CompileError when the window does not fit
    if op.is_float and op.is_global:
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
    return {"scale_x": _f32_scale("scale_x", scale_x), "scale_out": _f32_scale("scale_out", scale_out),
            "zp_out": _int("zp_out", 0 if zp_out is None else zp_out, *INT8)}


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
               scale_out=None, zp_out=None) -> Pool2d | DynamicOp:
    """Average pooling, rounding half away from zero; with scale_x= and scale_out=, QLinearAveragePool's.
    A compiler.Dim in x_shape makes a DynamicOp (compiler/dims.py)."""
    if has_dims(x_shape):
        return dynamic_op("avg_pool2d", lambda s: avg_pool2d(s, kernel, stride, padding, count_include_pad, x_zp,
                                                              scale_x=scale_x, scale_out=scale_out, zp_out=zp_out),
                          x_shape)
    floats = _avg_floats("avg_pool2d", scale_x, scale_out, zp_out)
    return _pool("avg", x_shape, kernel, stride, padding, count_include_pad, x_zp, **floats)


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
    x_shape = _shape("x_shape", x_shape, 4)
    floats = _avg_floats("global_avg_pool2d", scale_x, scale_out, zp_out)
    return _pool("avg", x_shape, x_shape[2:], None, 0, True, x_zp, **floats)


# ---------------------------------------------------------------- elementwise

@dataclass(frozen=True, eq=False, repr=False)
class Elementwise(Op):
    """add, mul, clip (relu) or requantize over a tensor of any shape."""

    mode: str                   # "add", "mul", "clip", "requantize"
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
    b_shape: tuple | None = None    # add / mul: b's shape when it broadcasts to `shape` (1 or the size per axis)
    kind: str = field(init=False, default="elementwise")

    def __post_init__(self):
        object.__setattr__(self, "kind", self.mode)

    @property
    def is_float(self) -> bool:
        """Is this the float form (onnxruntime arithmetic)?"""
        return self.scale is not None or self.fscales is not None

    @property
    def binary(self) -> bool:
        return self.mode in ("add", "mul")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        if self.binary:
            return Tensor("a", self.shape, "int8"), Tensor("b", self.b_shape or self.shape, "int8")
        return (Tensor("x", self.shape, self.in_dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.shape, "int8")

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        if self.b_shape is not None:        # b repeated along its size-1 axes, then elementwise
            arrays = (arrays[0], np.broadcast_to(arrays[1], self.shape))
        if self.fscales is not None:
            f = sem.add_f32 if self.mode == "add" else sem.mul_f32
            return f(*arrays, self.za, self.zb, *self.fscales, self.zp_out, self.lo, self.hi)
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


def _binary_floats(what: str, scale_a, scale_b, scale_out) -> tuple:
    """The three float32 tensor scales of a QLinearAdd / QLinearMul."""
    return (_f32_scale("scale_a", scale_a), _f32_scale("scale_b", scale_b), _f32_scale("scale_out", scale_out))


def _broadcast(shape, b_shape) -> tuple | None:
    """b's shape if it broadcasts to shape (the same rank, each axis 1 or shape's), None if it is shape."""
    if b_shape is None:
        return None
    b_shape = _shape("b_shape", b_shape)
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
        b_shape = _shape("b_shape", b_shape)
        _broadcast(tuple(1 if isinstance(d, Dim) else d for d in shape), b_shape)    # a Dim's axis: 1 in b
    return dynamic_op(kind, lambda s: make(s, b_shape), shape, ("a", "b"),
                      in_shapes=None if b_shape is None else (tuple(shape), b_shape))


def add(shape, *, za=0, zb=0, ma=None, mb=None, shift=None, scale_a=None, scale_b=None, scale_out=None,
        zp_out=0, lo=-128, hi=127, b_shape=None) -> Elementwise | DynamicOp:
    """Quantised a + b: clip(rshift_round((a - za) * ma + (b - zb) * mb, shift) + zp_out, lo, hi).

    With scale_a=, scale_b=, scale_out= (the tensors' float32 scales) instead: QLinearAdd's arithmetic.
    b_shape: b's shape when it broadcasts to `shape` (each axis 1 or the same size: a per-channel or scalar b).
    """
    if has_dims(shape):
        return _dynamic_binary("add", lambda s, bs: add(s, za=za, zb=zb, ma=ma, mb=mb, shift=shift, scale_a=scale_a,
                                                        scale_b=scale_b, scale_out=scale_out, zp_out=zp_out, lo=lo,
                                                        hi=hi, b_shape=bs), shape, b_shape)
    shape, za, zb = _shape("shape", shape), _int("za", za, *INT8), _int("zb", zb, *INT8)
    b_shape = _broadcast(shape, b_shape)
    clamp = _clamp(zp_out, lo, hi)
    floats = {"scale_a": scale_a, "scale_b": scale_b, "scale_out": scale_out}
    if _float_form("add", {"ma": ma, "mb": mb, "shift": shift}, floats):
        fs = _binary_floats("add", scale_a, scale_b, scale_out)
        with np.errstate(all="ignore"):      # an overflow is reported below, naming the factor
            ra, rb, c = sem.add_f32_params(*fs, za, zb, clamp[0])
        _derived_scale("scale_a / scale_out", ra, "the scales")
        _derived_scale("scale_b / scale_out", rb, "the scales")
        if not np.isfinite(c):
            raise CompileError(f"add: the folded zero points give the non-finite offset {c}")
        return Elementwise("add", shape, "int8", za, zb, 0, 0, 0, *clamp, fscales=fs, b_shape=b_shape)
    return Elementwise("add", shape, "int8", za, zb, _int("ma", ma, 0, (1 << 31) - 1),
                       _int("mb", mb, 0, (1 << 31) - 1), _int("shift", shift, 0, 62), *clamp, b_shape=b_shape)


def mul(shape, *, za=0, zb=0, multiplier=None, shift=None, scale_a=None, scale_b=None, scale_out=None,
        zp_out=0, lo=-128, hi=127, b_shape=None) -> Elementwise | DynamicOp:
    """Quantised a * b: clip(rshift_round((a - za) * (b - zb) * M, S) + zp_out, lo, hi).

    With scale_a=, scale_b=, scale_out= (the tensors' float32 scales) instead: QLinearMul's arithmetic.
    b_shape: b's shape when it broadcasts to `shape` (each axis 1 or the same size: a per-channel or scalar b).
    """
    if has_dims(shape):
        return _dynamic_binary("mul", lambda s, bs: mul(s, za=za, zb=zb, multiplier=multiplier, shift=shift,
                                                        scale_a=scale_a, scale_b=scale_b, scale_out=scale_out,
                                                        zp_out=zp_out, lo=lo, hi=hi, b_shape=bs), shape, b_shape)
    shape, za, zb = _shape("shape", shape), _int("za", za, *INT8), _int("zb", zb, *INT8)
    b_shape = _broadcast(shape, b_shape)
    clamp = _clamp(zp_out, lo, hi)
    floats = {"scale_a": scale_a, "scale_b": scale_b, "scale_out": scale_out}
    if _float_form("mul", {"multiplier": multiplier, "shift": shift}, floats):
        fs = _binary_floats("mul", scale_a, scale_b, scale_out)
        with np.errstate(all="ignore"):
            r = sem.mul_f32_ratio(*fs)
        _derived_scale("scale_a * scale_b / scale_out", r, "the scales")
        return Elementwise("mul", shape, "int8", za, zb, 0, 0, 0, *clamp, fscales=fs, b_shape=b_shape)
    return Elementwise("mul", shape, "int8", za, zb, _int("multiplier", multiplier, 1, (1 << 31) - 1), 0,
                       _int("shift", shift, 0, 62), *clamp, b_shape=b_shape)


def relu(shape, zp=0) -> Elementwise | DynamicOp:
    """max(x, zp)."""
    if has_dims(shape):
        return dynamic_op("relu", lambda s: relu(s, zp), shape)
    zp = _int("zp", zp, *INT8)
    return Elementwise("clip", _shape("shape", shape), lo=zp, hi=127)


def clip(shape, lo, hi) -> Elementwise | DynamicOp:
    """clip(x, lo, hi)."""
    if has_dims(shape):
        return dynamic_op("clip", lambda s: clip(s, lo, hi), shape)
    _, lo, hi = _clamp(0, lo, hi)
    return Elementwise("clip", _shape("shape", shape), lo=lo, hi=hi)


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
    shape = _shape("shape", shape)
    if in_dtype not in ("int8", "int32"):
        raise CompileError(f"in_dtype must be 'int8' or 'int32', got {in_dtype!r}")
    zx = _int("zx", zx, *(INT8 if in_dtype == "int8" else INT32))
    if _float_form("requantize", {"multiplier": multiplier, "shift": shift}, {"scale": scale}):
        if np.ndim(scale) and len(shape) < 2:
            raise CompileError("a per-channel scale needs a shape with a channel axis (axis 1)")
        s = _f32_scales("scale", scale, shape[1]) if np.ndim(scale) else _f32_scale("scale", scale)
        return Elementwise("requantize", shape, in_dtype, zx, 0, 0, 0, 0, *_clamp(zp_out, lo, hi), scale=s)
    per_channel = np.ndim(multiplier) or np.ndim(shift)
    if per_channel and len(shape) < 2:
        raise CompileError("per-channel multiplier/shift need a shape with a channel axis (axis 1)")
    n = shape[1] if per_channel else 1
    m = _per_channel("multiplier", multiplier, n, 1, (1 << 31) - 1)
    s = _per_channel("shift", shift, n, 0, 62)
    x_range = (_x_range(zx) if in_dtype == "int8" else (1 << 31) + abs(zx))
    if x_range * int(m.max()) >= PRODUCT_LIMIT:
        raise CompileError(f"zx = {zx} with multiplier {int(m.max())}: (x - zx) * M can leave 62 bits")
    if not per_channel:
        m, s = int(m[0]), int(s[0])
    return Elementwise("requantize", shape, in_dtype, zx, 0, m, 0, s, *_clamp(zp_out, lo, hi))


# ---------------------------------------------------------------- layout ops

@dataclass(frozen=True, eq=False, repr=False)
class Reshape(Op):
    """Same elements, new shape (Flatten is a Reshape); row-major order as numpy and ONNX."""

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="reshape")

    def __post_init__(self):
        if _symbolic(self, ("in_shape", "out_shape")):
            object.__setattr__(self, "in_shape", tuple(self.in_shape))
            object.__setattr__(self, "out_shape", tuple(self.out_shape))
            return
        object.__setattr__(self, "in_shape", _shape("in_shape", self.in_shape))
        object.__setattr__(self, "out_shape", _shape("out_shape", self.out_shape))
        check_dtype(self.dtype)
        n_in, n_out = math.prod(self.in_shape), math.prod(self.out_shape)   # exact, never overflows
        if n_in != n_out:
            raise CompileError(f"reshape {self.in_shape} ({n_in} elements) to {self.out_shape} "
                               f"({n_out} elements)")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.out_shape, self.dtype)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.out_shape).copy()


@dataclass(frozen=True, eq=False, repr=False)
class Concat(Op):
    """Inputs joined along `axis`; every other dimension must agree."""

    shapes: tuple[tuple[int, ...], ...]
    axis: int = 1
    dtype: str = "int8"
    kind: str = field(init=False, default="concat")

    def __post_init__(self):
        try:
            shapes = tuple(self.shapes)
        except TypeError:
            raise CompileError(f"shapes must be a sequence of shapes, got {self.shapes!r}") from None
        if not shapes:
            raise CompileError("concat needs at least one input")
        object.__setattr__(self, "shapes", shapes)
        if _symbolic(self, ("shapes",)):
            object.__setattr__(self, "shapes", tuple(tuple(s) for s in shapes))
            axis = at_values(self, _ends(self, ("shapes",))[1]).axis
            object.__setattr__(self, "axis", axis)
            for i, sh in enumerate(self.shapes):
                if not isinstance(sh[axis], int):
                    raise CompileError(f"concat along axis {axis}: input {i}'s axis is the dimension {sh[axis]}; "
                                       f"a concat with Dims joins along a fixed axis")
            return
        shapes = tuple(_shape(f"shapes[{i}]", s) for i, s in enumerate(shapes))
        check_dtype(self.dtype)
        ndim = len(shapes[0])
        axis = _int("axis", self.axis, -ndim, ndim - 1) % ndim
        for i, s in enumerate(shapes):
            if len(s) != ndim or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
                raise CompileError(f"concat along axis {axis}: input {i} has shape {s}, input 0 has "
                                   f"{shapes[0]}: all dimensions but the axis must agree")
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "axis", axis)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return tuple(Tensor(f"x{i}", s, self.dtype) for i, s in enumerate(self.shapes))

    @property
    def output(self) -> Tensor:
        s = list(self.shapes[0])
        s[self.axis] = sum(sh[self.axis] for sh in self.shapes)
        return Tensor("y", tuple(s), self.dtype)

    def _compute(self, *xs: np.ndarray) -> np.ndarray:
        return np.concatenate(xs, axis=self.axis)


def _axes_of(op, fields: tuple[str, ...]) -> dict[str, tuple]:
    """The shapes held by a layout op's fields, named."""
    out = {}
    for f in fields:
        v = getattr(op, f)
        for i, sh in enumerate(v if f == "shapes" else (v,)):
            try:
                out[f"{f}[{i}]" if f == "shapes" else f] = tuple(sh)
            except TypeError:
                raise CompileError(f"{f} must be a tuple of dimensions, got {sh!r}") from None
    return out


def _ends(op, fields: tuple[str, ...]) -> tuple[dict, dict]:
    """The values of every Dim in a layout op's shapes at the low and the high end of its range."""
    dims = collect(_axes_of(op, fields))
    return {d.name: d.lo for d in dims}, {d.name: d.hi for d in dims}


def _symbolic(op, fields: tuple[str, ...]) -> bool:
    """True (after checking the op at both ends of the range) if a layout op's shapes hold compiler.Dims: it
    stands for the op at every size in range (`at_values`), as in a Graph with a Dim in an input."""
    if not any(has_dims(sh) for sh in _axes_of(op, fields).values()):
        return False
    for values in _ends(op, fields):
        at_values(op, values)            # CompileError if the op does not hold at that end
    return True


def at_values(op: Op, values: dict[str, int]) -> Op:
    """A Reshape or Concat with its Dims replaced by these values (the op itself if it has none)."""
    if isinstance(op, Reshape):
        return Reshape(at(op.in_shape, values), at(op.out_shape, values), op.dtype)
    if isinstance(op, Concat):
        return Concat(tuple(at(sh, values) for sh in op.shapes), op.axis, op.dtype)
    return op


def check_dtype(d) -> str:
    """d, if it is one of DTYPES (a graph value's or a layout op's dtype); CompileError if not."""
    if d not in DTYPES:
        raise CompileError(f"dtype must be one of {DTYPES}, got {d!r}")
    return d
