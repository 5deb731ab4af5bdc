"""IEEE-754 float32 arithmetic for the VU's float instructions, bit for bit, in numba.

A value is carried as a float64 holding a float32 exactly; r32 rounds a float64 to the nearest
float32 (ties to even).  One +, -, * or / done in float64 and then rounded by r32 is the correctly
rounded float32 result: float64 carries more than 2 * 24 + 2 bits, so the double rounding is
innocuous (Figueroa, 1995).  fma32 needs more: a * b is exact in float64 but a * b + c is not, so
TwoSum recovers the rounding error and breaks the one hazardous case, a float64 sum exactly halfway
between two float32 values.  No FMA instruction and no fast-math flags are involved, so results do
not depend on the host CPU or on how the compiler contracts expressions.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

TWO31 = 2147483648.0
POS_FINITE_MAX = 0x7F7FFFFF      # bit pattern of the largest finite float32
EXP_MASK = 0x7F800000


@njit(cache=True)
def r32(x: float) -> float:
    """x rounded to the nearest float32, ties to even (as a float64)."""
    return np.float64(np.float32(x))


@njit(cache=True)
def i2f(v: int) -> float:
    """The integer v rounded to float32 (one rounding: int64 to float32 directly)."""
    return np.float64(np.float32(np.int64(v)))


@njit(cache=True)
def positive_finite(bits: int) -> bool:
    """Are the low 32 bits of `bits` a float32 > 0 and finite (subnormals included)?"""
    u = bits & 0xFFFFFFFF
    return 1 <= u <= POS_FINITE_MAX


@njit(cache=True)
def nonzero_finite(bits: int) -> bool:
    """Are the low 32 bits of `bits` a finite float32 other than +0.0 and -0.0, of either sign?"""
    return finite(bits) and (bits & 0x7FFFFFFF) != 0


@njit(cache=True)
def finite(bits: int) -> bool:
    """Are the low 32 bits of `bits` a finite float32 (not inf, not nan)?"""
    return ((bits & 0xFFFFFFFF) & EXP_MASK) != EXP_MASK


@njit(cache=True)
def value(bits: int) -> float:
    """The value of the finite float32 whose bit pattern is the low 32 bits of `bits`."""
    u = bits & 0xFFFFFFFF
    e = (u >> 23) & 0xFF
    m = u & 0x7FFFFF
    v = math.ldexp(float(m | 0x800000), e - 150) if e else math.ldexp(float(m), -149)
    return -v if u >> 31 else v


@njit(cache=True)
def fma32(a: float, b: float, c: float) -> float:
    """a * b + c rounded once to float32 (a, b, c float32 values)."""
    p = a * b                          # exact: 24 + 24 significant bits
    s = p + c
    t = s - p
    err = (p - (s - t)) + (c - t)      # s + err == p + c exactly
    near = r32(s)
    if near == s or err == 0.0:
        return near
    other = np.float64(np.nextafter(np.float32(near), np.float32(-np.inf if near > s else np.inf)))
    if abs(near - s) != abs(other - s):
        return near                    # not halfway: the float64 rounding could not move it across
    return other if (err > 0.0) == (other > near) else near


@njit(cache=True)
def rne(t: float) -> int:
    """t rounded half to even, |t| < 2**31."""
    return np.int64(np.rint(t))      # roundsd in the default rounding mode, nearest-even


@njit(cache=True)
def cvt8(t: float) -> int:
    """float32 to int8 as cvtps2dq then saturating packs: out of int32 range (or nan) is INT_MIN, so -128."""
    if not abs(t) < TWO31:
        return -128
    r = rne(t)
    return -128 if r < -128 else (127 if r > 127 else r)


@njit(cache=True)
def cvt8_excess(t: float, o: int) -> int:
    """cvt8 of a result computed on values o above the int8 view (o = 128: uint8, saturated to [0, 255] by
    packus, then less 128); cvtps2dq's INT_MIN (nan, |t| >= 2**31) saturates to 0, so -128, as for int8."""
    if not abs(t) < TWO31:
        return -128
    r = rne(t) - o
    return -128 if r < -128 else (127 if r > 127 else r)
