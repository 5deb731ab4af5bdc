"""Argument checks shared by the op constructors: each raises CompileError naming the argument and the value."""
from __future__ import annotations

import operator

import numpy as np

from ..errors import CompileError
from ..sizes import check_tensor
from .base import ACC_LIMIT, INT8


def int_arg(name: str, v, lo: int | None = None, hi: int | None = None) -> int:
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


def shape_arg(name: str, v, ndim: int | None = None) -> tuple[int, ...]:
    try:
        dims = tuple(v)
    except TypeError:
        raise CompileError(f"{name} must be a tuple of dimensions, got {v!r}") from None
    if ndim is not None and len(dims) != ndim:
        raise CompileError(f"{name} must have {ndim} dimensions, got {len(dims)}: {dims}")
    if not dims:
        raise CompileError(f"{name} must have at least one dimension")
    dims = tuple(int_arg(f"{name}[{i}]", d, 1, 1 << 30) for i, d in enumerate(dims))
    check_tensor(name, dims)
    return dims


def check_sizes(op) -> None:
    """CompileError unless every tensor of the op (its output too, which padding and channels can make larger
    than its inputs) can be addressed at all (compiler.sizes.check_tensor)."""
    for t in (*op.inputs, op.output):
        check_tensor(f"{op.kind} {t.name}", t.shape, np.dtype(t.dtype).itemsize)


def pair_arg(name: str, v, lo: int = 1) -> tuple[int, int]:
    if np.ndim(v) == 0:
        i = int_arg(name, v, lo, 1 << 16)
        return i, i
    vals = tuple(v)
    if len(vals) != 2:
        raise CompileError(f"{name} must be an int or a pair, got {v!r}")
    return int_arg(f"{name}[0]", vals[0], lo, 1 << 16), int_arg(f"{name}[1]", vals[1], lo, 1 << 16)


def padding_arg(name: str, v) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, an (h, w) pair or a 4-tuple."""
    if np.ndim(v) == 0:
        p = int_arg(name, v, 0, 1 << 16)
        return p, p, p, p
    vals = tuple(v)
    if len(vals) == 2:
        h, w = pair_arg(name, vals, 0)
        return h, w, h, w
    if len(vals) == 4:
        return tuple(int_arg(f"{name}[{i}]", p, 0, 1 << 16) for i, p in enumerate(vals))  # type: ignore
    raise CompileError(f"{name} must be an int, a pair or (top, left, bottom, right), got {v!r}")


def int_array_arg(name: str, v, rng: tuple[int, int], shape: tuple[int, ...] | None = None,
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


def per_channel_arg(name: str, v, n: int, lo: int, hi: int) -> np.ndarray:
    """A scalar broadcast to n channels, or exactly n values, each in [lo, hi]."""
    if np.ndim(v) == 0:
        return np.full(n, int_arg(name, v, lo, hi), dtype=np.int64)
    return int_array_arg(name, v, (lo, hi), shape=(n,))


def f32_scale_arg(name: str, v) -> np.float32:
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


def f32_scales_arg(name: str, v, n: int) -> np.ndarray:
    """A scalar broadcast to n channels, or exactly n values, each a positive finite float32."""
    if np.ndim(v) == 0:
        return np.full(n, f32_scale_arg(name, v), dtype=np.float32)
    a = np.asarray(v)
    if a.shape != (n,):
        raise CompileError(f"{name} must be a scalar or have shape ({n},), got {a.shape}")
    return np.array([f32_scale_arg(f"{name}[{i}]", x) for i, x in enumerate(a.tolist())], dtype=np.float32)


def derived_scale(what: str, value: np.float32, inputs: str) -> np.float32:
    """A factor computed from the op's scales, which the VU needs positive and finite."""
    if not (np.isfinite(value) and value > 0):
        raise CompileError(f"{what} = {value} (from {inputs}) is not a positive finite float32")
    return np.float32(value)


def float_form(op: str, integer: dict, floats: dict) -> bool:
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


def clamp_args(zp_out, lo, hi) -> tuple[int, int, int]:
    zp_out = int_arg("zp_out", zp_out, *INT8)
    lo, hi = int_arg("lo", lo, *INT8), int_arg("hi", hi, *INT8)
    if lo > hi:
        raise CompileError(f"lo = {lo} must not exceed hi = {hi}")
    return zp_out, lo, hi


def out_size(what: str, n: int, k: int, stride: int, dil: int, p0: int, p1: int) -> int:
    span = dil * (k - 1) + 1
    if n + p0 + p1 < span:
        raise CompileError(f"{what}: the window ({span}) is larger than the padded input ({n + p0 + p1})")
    return (n + p0 + p1 - span) // stride + 1


def x_zp_range(x_zp: int) -> int:
    """Largest |x - x_zp| over int8 x."""
    return max(127 - x_zp, x_zp + 128)


def accumulator_bound(wabs_sum: np.ndarray, bias: np.ndarray | None, x_zp: int) -> np.ndarray:
    """The largest |acc| each output channel's int32 accumulator can reach: |bias| + max|x - x_zp| * sum|w|."""
    bound = x_zp_range(x_zp) * np.asarray(wabs_sum, np.int64)
    return bound + np.abs(np.asarray(bias, np.int64)) if bias is not None else bound


def accumulator_may_wrap(wabs_sum: np.ndarray, bias: np.ndarray | None, x_zp: int) -> bool:
    """Can some int32 accumulator leave [-2**31, 2**31) (and wrap, as the NU's and onnxruntime's do)?"""
    return int(accumulator_bound(wabs_sum, bias, x_zp).max()) >= ACC_LIMIT


def check_accumulator(what: str, wabs_sum: np.ndarray, bias: np.ndarray | None, x_zp: int) -> None:
    """Prove every int32 accumulator stays in range: |bias| + max|x - x_zp| * sum|w| < 2**31."""
    bound = accumulator_bound(wabs_sum, bias, x_zp)
    worst = int(bound.max())
    if worst >= ACC_LIMIT:
        o = int(bound.argmax())
        raise CompileError(f"{what}: output channel {o} can reach |acc| = {worst} >= 2**31: the int32 "
                           "accumulator could overflow (fewer input channels, smaller weights or bias)")
