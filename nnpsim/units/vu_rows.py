"""The VU's element loops for the float ops whole networks spend their time in, one tight loop a row.

For vu.requant.f, vu.requant.fpc, vu.fadd and vu.fmul nnpsim.units.vu hands the whole command to a
`*_block` function, which walks its outer counts and runs each row of n0 elements through one of these
loops (a function of its own per op: in one shared loop LLVM vectorised none of the rows).  Each takes
every parameter as a scalar (a parameter array read inside the loop is reloaded at every element, since
LLVM cannot prove the stores to `out` leave it alone), advances its addresses by their strides, and reads
int32 and float32 operands through int32 and float32 views of the memory (`words`, `floats`: the same
bytes; every such operand was checked 4-byte aligned in its space, and vu runs these loops only on a
space whose base is a multiple of 4: the simulator's all are, at multiples of 64).  The
arithmetic is vu.py's, operation for operation (units/f32.py's float32 rounding at every step).

A loop has no early exit: it folds the checks of its elements into the flag it returns, and a command
whose flag is False is rerun by vu._compute's general loop, which reports the first failure in element
order.  Addresses are absolute byte positions inside checked bounds, indexed as uint64 (a signed index
costs numba a negative-index fix-up per access).
"""
from __future__ import annotations

import sys

import numpy as np
from numba import njit

from . import f32

if sys.byteorder != "little":
    raise ImportError("nnpsim.units.vu_rows reads little-endian int32 and float32 operands through memory views")


@njit(cache=True)
def views(mem: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The memory's whole words as int32s and as float32s (word k: bytes 4k .. 4k + 3)."""
    whole = mem[:mem.size - mem.size % 4]
    return whole.view(np.int32), whole.view(np.float32)


@njit(cache=True)
def _i8(mem: np.ndarray, at: int) -> int:
    return (np.int64(mem[np.uint64(at)]) ^ 0x80) - 0x80


@njit(cache=True)
def _clip(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else (hi if v > hi else v)


@njit(cache=True)
def requant(v: int, s: float, zp_out: int, lo: int, hi: int) -> int:
    """clip(rne(clamp(f32(v) * s, -128 - zp_out, 127 - zp_out)) + zp_out, lo, hi) (MlasRequantizeOutput)."""
    t = f32.r32(f32.i2f(v) * s)
    t = max(t, float(-128 - zp_out))
    t = min(t, float(127 - zp_out))
    return _clip(f32.rne(t) + zp_out, lo, hi)


@njit(cache=True, inline="always")
def requant_f(mem: np.ndarray, words: np.ndarray, floats: np.ndarray, a: int, sa: int, a4: bool, b: int,
              sb: int, per_channel: bool, n: int, za: int, s: float, zp_out: int, lo: int, hi: int,
              out: np.ndarray, e: int) -> bool:
    """vu.requant.f (scale s) or .fpc (float32 scales at b) on n elements of a (int32 if a4, else int8)."""
    ok = True
    for i in range(n):
        x = np.int64(words[np.uint64(a >> 2)]) if a4 else _i8(mem, a)
        if per_channel:
            at = np.uint64(b >> 2)
            ok &= f32.positive_finite(np.int64(words[at]))
            s = np.float64(floats[at])
            b += sb
        out[e + i] = requant(x - za, s, zp_out, lo, hi)
        a += sa
    return ok


@njit(cache=True, inline="always")
def requant_fpc_words(words: np.ndarray, floats: np.ndarray, a: int, b: int, n: int, za: int, zp_out: int, lo: int,
                      hi: int, out: np.ndarray, e: int) -> bool:
    """vu.requant.fpc on n consecutive int32 words from word a, scaled by the n float32s from word b (the conv
    epilogue's usual row: indexed, not strided, so LLVM can vectorise it)."""
    ok = True
    for i in range(n):
        ok &= f32.positive_finite(np.int64(words[np.uint64(b + i)]))
        s = np.float64(floats[np.uint64(b + i)])
        out[e + i] = requant(np.int64(words[np.uint64(a + i)]) - za, s, zp_out, lo, hi)
    return ok


@njit(cache=True)
def requant_fpc_block(words: np.ndarray, floats: np.ndarray, a: int, b: int, n: tuple, sa: tuple, sb: tuple, za: int,
                      zp_out: int, lo: int, hi: int, out: np.ndarray) -> bool:
    """vu.requant.fpc on a whole command of int32 rows whose n[0] words and scales are consecutive (word
    indices a, b; strides sa, sb in words, dim 0 first): requant_fpc_words a row, in a function of its own
    with only scalars around it, so that LLVM vectorises the row (inside vu._compute_rows it does not)."""
    ok = True
    e = 0
    for i3 in range(n[3]):
        for i2 in range(n[2]):
            for i1 in range(n[1]):
                ok &= requant_fpc_words(words, floats, a + i3 * sa[3] + i2 * sa[2] + i1 * sa[1],
                                        b + i3 * sb[3] + i2 * sb[2] + i1 * sb[1], n[0], za, zp_out, lo, hi, out, e)
                e += n[0]
    return ok


@njit(cache=True, inline="always")
def fmul(mem: np.ndarray, a: int, sa: int, b: int, sb: int, n: int, za: int, zb: int, fx: float, o: int,
         zp_out: int, lo: int, hi: int, out: np.ndarray, e: int) -> None:
    """vu.fmul on n int8 pairs; the caller has checked |za|, |zb| < 2**30, so no product leaves 2**62."""
    c = float(zp_out + o)
    for i in range(n):
        v = (_i8(mem, a) - za) * (_i8(mem, b) - zb)
        t = f32.r32(f32.r32(f32.i2f(v) * fx) + c)
        out[e + i] = _clip(f32.cvt8_excess(t, o), lo, hi)
        a += sa
        b += sb


@njit(cache=True, inline="always")
def fadd(mem: np.ndarray, a: int, sa: int, b: int, sb: int, n: int, fx: float, fy: float, fc: float, o: int,
         lo: int, hi: int, out: np.ndarray, e: int) -> None:
    """vu.fadd on n int8 pairs: fma32(a + o, fx, fma32(b + o, fy, fc)), cvt8 o above the int8 view, clip."""
    for i in range(n):
        t = f32.fma32(float(_i8(mem, a) + o), fx, f32.fma32(float(_i8(mem, b) + o), fy, fc))
        out[e + i] = _clip(f32.cvt8_excess(t, o), lo, hi)
        a += sa
        b += sb


@njit(cache=True)
def fmul_block(mem: np.ndarray, a: int, b: int, n: tuple, sa: tuple, sb: tuple, za: int, zb: int, fx: float, o: int,
               zp_out: int, lo: int, hi: int, out: np.ndarray) -> None:
    """vu.fmul on a whole command (byte addresses a, b; strides sa, sb, dim 0 first): fmul a row, in a function
    of its own (as requant_fpc_block)."""
    e = 0
    for i3 in range(n[3]):
        for i2 in range(n[2]):
            for i1 in range(n[1]):
                fmul(mem, a + i3 * sa[3] + i2 * sa[2] + i1 * sa[1], sa[0], b + i3 * sb[3] + i2 * sb[2] + i1 * sb[1],
                     sb[0], n[0], za, zb, fx, o, zp_out, lo, hi, out, e)
                e += n[0]


@njit(cache=True)
def fadd_block(mem: np.ndarray, a: int, b: int, n: tuple, sa: tuple, sb: tuple, fx: float, fy: float, fc: float,
               o: int, lo: int, hi: int, out: np.ndarray) -> None:
    """vu.fadd on a whole command (as fmul_block)."""
    e = 0
    for i3 in range(n[3]):
        for i2 in range(n[2]):
            for i1 in range(n[1]):
                fadd(mem, a + i3 * sa[3] + i2 * sa[2] + i1 * sa[1], sa[0], b + i3 * sb[3] + i2 * sb[2] + i1 * sb[1],
                     sb[0], n[0], fx, fy, fc, o, lo, hi, out, e)
                e += n[0]


@njit(cache=True)
def requant_f_block(mem: np.ndarray, words: np.ndarray, floats: np.ndarray, a: int, b: int, n: tuple, sa: tuple,
                    sb: tuple, a4: bool, per_channel: bool, za: int, s: float, zp_out: int, lo: int, hi: int,
                    out: np.ndarray) -> bool:
    """vu.requant.f (or .fpc with its scales strided) on a whole command (as fmul_block)."""
    ok = True
    e = 0
    for i3 in range(n[3]):
        for i2 in range(n[2]):
            for i1 in range(n[1]):
                ok &= requant_f(mem, words, floats, a + i3 * sa[3] + i2 * sa[2] + i1 * sa[1], sa[0], a4,
                                b + i3 * sb[3] + i2 * sb[2] + i1 * sb[1], sb[0], per_channel, n[0], za, s, zp_out,
                                lo, hi, out, e)
                e += n[0]
    return ok
