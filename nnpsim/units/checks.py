"""Checks shared by the unit kernels: error reporting, parameter ranges, footprints, bounds.

Every helper runs in nopython mode and is overflow-safe for any int64 input:
parameters come from 32-bit registers, but a kernel must never wrap or index
out of range whatever it is given.  A kernel runs all its checks before it
touches memory, so a failing command changes nothing.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import errors
from ..isa_layout import N_SPACES

PARAM_LIMIT = 1 << 32      # |parameter| above this is BAD_PARAM (unreachable from 32-bit registers)
MAX_ELEMENTS = 1 << 24     # most elements (times window) one command may iterate over: its temporaries stay allocatable
SPAN_LIMIT = 1 << 40       # a saturated byte span: far beyond any memory (<= 4 GiB)
ADDR_LIMIT = 1 << 48       # register addresses are clamped here before footprint sums


@njit(cache=True)
def fail(err: np.ndarray, code: int, space: int, first: int, last: int,
         param: int, value: int, extra6: int, extra7: int) -> int:
    """Fill err (see nnpsim/errors.py) and return code."""
    err[0] = code
    err[1] = space
    err[2] = first
    err[3] = last
    err[4] = param
    err[5] = value
    err[6] = extra6
    err[7] = extra7
    return code


@njit(cache=True)
def bad_param(err: np.ndarray, param: int, value: int, extra: int) -> int:
    """Report BAD_PARAM for parameter number `param` holding `value`."""
    return fail(err, errors.BAD_PARAM, -1, -1, -1, param, value, extra, 0)


@njit(cache=True)
def check_param_range(p: np.ndarray, group_base: int, first: int, last: int, err: np.ndarray) -> int:
    """BAD_PARAM if any p[first..last] lies outside [-2**32, 2**32] (keeps all later arithmetic in int64)."""
    for j in range(first, last + 1):
        v = p[j]
        if v > PARAM_LIMIT or v < -PARAM_LIMIT:
            return bad_param(err, group_base + j, v, 0)
    return errors.OK


@njit(cache=True)
def check_space(space_size: np.ndarray, space: int, err: np.ndarray) -> int:
    """NO_SUCH_MEMORY unless `space` is a valid id of a memory the configuration has."""
    if space < 0 or space >= N_SPACES or space_size[space] <= 0:
        return fail(err, errors.NO_SUCH_MEMORY, space, -1, -1, -1, space, 0, 0)
    return errors.OK


@njit(cache=True)
def span(n: int, stride: int) -> int:
    """(n - 1) * stride, saturated to +-SPAN_LIMIT; 0 when n <= 1."""
    if n <= 1 or stride == 0:
        return 0
    a = stride if stride > 0 else -stride
    m = n - 1
    if m > SPAN_LIMIT // a:
        return SPAN_LIMIT if stride > 0 else -SPAN_LIMIT
    return m * stride


@njit(cache=True)
def clamp_addr(addr: int) -> int:
    """addr clamped to +-ADDR_LIMIT so that footprint sums cannot overflow."""
    if addr > ADDR_LIMIT:
        return ADDR_LIMIT
    if addr < -ADDR_LIMIT:
        return -ADDR_LIMIT
    return addr


@njit(cache=True)
def footprint(addr: int, counts: np.ndarray, strides: np.ndarray, elem: int) -> tuple[int, int]:
    """(first, last) byte of the elements addr + sum(i_k * strides_k), i_k < counts_k, elem bytes each."""
    lo = clamp_addr(addr)
    hi = lo
    for k in range(counts.shape[0]):
        s = span(counts[k], strides[k])
        if s < 0:
            lo += s
        else:
            hi += s
    return lo, hi + elem - 1


@njit(cache=True)
def check_bounds(space_size: np.ndarray, space: int, first: int, last: int, err: np.ndarray) -> int:
    """OUT_OF_BOUNDS unless bytes first..last lie inside memory `space`."""
    if first < 0 or last >= space_size[space]:
        return fail(err, errors.OUT_OF_BOUNDS, space, first, last, -1, 0, 0, 0)
    return errors.OK


@njit(cache=True)
def check_aligned(space: int, addr: int, counts: np.ndarray, strides: np.ndarray,
                  param0: int, align: int, err: np.ndarray) -> int:
    """MISALIGNED unless addr and every stride of a dimension with count > 1 are multiples of align.

    err[4] is -1 for the address, else the stride's parameter number (param0 + k).
    """
    if addr % align != 0:
        return fail(err, errors.MISALIGNED, space, addr, addr + align - 1, -1, addr, align, 0)
    for k in range(counts.shape[0]):
        if counts[k] > 1 and strides[k] % align != 0:
            return fail(err, errors.MISALIGNED, space, addr, addr + align - 1, param0 + k,
                        strides[k], align, 0)
    return errors.OK


@njit(cache=True)
def check_counts(p: np.ndarray, group_base: int, first: int, n: int, limit: int,
                 err: np.ndarray) -> int:
    """BAD_PARAM unless p[first..first+n-1] are each >= 1 and their product is <= limit.

    On an oversized product err[4] is the parameter where the running product passed the limit.
    """
    prod = 1
    for j in range(first, first + n):
        v = p[j]
        if v < 1:
            return bad_param(err, group_base + j, v, 0)
        if v > limit // prod:
            return bad_param(err, group_base + j, v, limit)
        prod *= v
    return errors.OK


# The loads and stores index mem with uint64 positions: a signed index makes numba add a
# negative-index fix-up to every access, which costs about 3x in the VU's element loops.
# Positions are absolute and were bounds-checked, so never negative.

@njit(cache=True)
def load_i8(mem: np.ndarray, at: int) -> int:
    """Signed byte at absolute index `at` (numba loads uint8: convert explicitly)."""
    return (np.int64(mem[np.uint64(at)]) ^ 0x80) - 0x80


@njit(cache=True)
def load_i32(mem: np.ndarray, at: int) -> int:
    """Little-endian signed int32 at absolute byte index `at`."""
    u = np.uint64(at)
    v = (np.int64(mem[u]) | (np.int64(mem[u + np.uint64(1)]) << 8)
         | (np.int64(mem[u + np.uint64(2)]) << 16) | (np.int64(mem[u + np.uint64(3)]) << 24))
    return (v ^ 0x80000000) - 0x80000000


@njit(cache=True)
def store_i32(mem: np.ndarray, at: int, v: int) -> None:
    """Store the low 32 bits of v little-endian at absolute byte index `at`."""
    u = np.uint64(at)
    mem[u] = v & 0xFF
    mem[u + np.uint64(1)] = (v >> 8) & 0xFF
    mem[u + np.uint64(2)] = (v >> 16) & 0xFF
    mem[u + np.uint64(3)] = (v >> 24) & 0xFF


@njit(cache=True)
def sat_mul(a: int, b: int) -> int:
    """a * b for a, b >= 0, saturated to SPAN_LIMIT."""
    if a == 0 or b == 0:
        return 0
    if a > SPAN_LIMIT // b:
        return SPAN_LIMIT
    return a * b
