"""Float scales to fixed-point (multiplier, shift) pairs, the gemmlowp / TFLite way.

A positive scale is written as q * 2**e with q in [0.5, 1) (math.frexp).  The
multiplier is M = round(q * 2**31), in [2**30, 2**31] (a round-up to exactly
2**31 is renormalised to 2**30 with e + 1), and the shift is S = 31 - e, so
that M * 2**-S approximates the scale with relative error at most 2**-31
(|M - q * 2**31| <= 1/2 and M >= 2**30).  The requantiser then computes
rshift_round(acc * M, S).  S must land in [0, 62]: scales from 2**-32 up to
2**31 - 1/2 (exclusive, where M would round up to 2**31 with S = -1) are
representable.

The float form (onnxruntime's arithmetic) keeps float32 scales instead:
ort_scale combines them as QLinearConv and QLinearMatMul do, f32_bits and
f32_table give the bit patterns the VU's float parameters and tables hold.
"""
from __future__ import annotations

import math

import numpy as np

from .errors import CompileError

MAX_SHIFT = 62
REL_ERROR_BOUND = 2.0 ** -31


def quantize_multiplier(scale: float) -> tuple[int, int]:
    """(M, S) with M in [2**30, 2**31) and M * 2**-S within 2**-31 relative of scale."""
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise CompileError(f"scale must be a number, got {scale!r}") from None
    if math.isnan(scale) or math.isinf(scale) or scale <= 0:
        raise CompileError(f"scale must be positive and finite, got {scale}")
    q, e = math.frexp(scale)
    m = math.floor(q * (1 << 31) + 0.5)
    if m == 1 << 31:
        m, e = 1 << 30, e + 1
    s = 31 - e
    if not 0 <= s <= MAX_SHIFT:
        raise CompileError(f"scale {scale!r} needs shift {s}, outside [0, {MAX_SHIFT}]: "
                           f"representable scales are about [2**-32, 2**31 - 0.5)")
    return m, s


def quantize_multipliers(scales) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel quantize_multiplier: int64 arrays M and S, one entry per scale."""
    flat = np.asarray(scales, dtype=object).ravel()
    if flat.size == 0:
        raise CompileError("scales must not be empty")
    pairs = []
    for i, sc in enumerate(flat):
        try:
            pairs.append(quantize_multiplier(sc))
        except CompileError as exc:
            raise CompileError(f"scales[{i}]: {exc}") from None
    m, s = zip(*pairs)
    return np.array(m, dtype=np.int64), np.array(s, dtype=np.int64)


def ort_scale(x_scale, w_scale, y_scale) -> np.ndarray | np.float32:
    """QLinearConv's / QLinearMatMul's requantisation factor (x_scale * w_scale) / y_scale, in float32.

    w_scale is one scale or one per output channel; onnxruntime computes in this order, in float32.
    """
    out = (np.float32(x_scale) * np.asarray(w_scale, np.float32)).astype(np.float32) / np.float32(y_scale)
    return np.float32(out) if out.ndim == 0 else out.astype(np.float32)


def f32_bits(value) -> int:
    """The IEEE-754 bit pattern of a float32, as a parameter register takes it (vu.fscale ...)."""
    return int(np.asarray(value, np.float32).view(np.uint32))


def f32_table(values) -> np.ndarray:
    """float32 values as the int32 words of a DDR table (its stored bytes are the float32s)."""
    return np.ascontiguousarray(np.asarray(values, np.float32)).view(np.int32)
