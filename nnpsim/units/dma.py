"""DMA: the 4-D box copy with per-dimension padding (docs/architecture.md, DMA).

Parameter snapshot: the dma.* group, offsets from nnp1.toml (nnpsim.isa_layout).
Check order: parameter ranges, elem, sizes, padding, spaces (dst, src), alignment
(an ABUF side needs elem 4 and 4-aligned address and strides), bounds (dst, src).
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import errors
from ..isa_layout import ABUF, DDR, GROUP_BASE, MAX_UNITS, offset, offsets
from ..timing import burst_bytes
from .checks import (MAX_ELEMENTS, bad_param, check_aligned, check_bounds, check_counts,
                     check_param_range, check_space, fail, footprint)

OPS = ("copy",)
"""The ops this kernel implements (a semantics row's `op`)."""
GROUP = GROUP_BASE["DMA"]
P_SIZE, P_SRC_STRIDE, P_DST_STRIDE, P_PAD_LO, P_PAD_HI = (
    offsets(*(f"dma.{x}{k}" for k in range(4)))[0] for x in ("size", "src_stride", "dst_stride", "pad_lo", "pad_hi"))
P_PAD_VALUE = offset("dma.pad_value")
P_ELEM = offset("dma.elem")
P_LAST = max(P_SIZE, P_SRC_STRIDE, P_DST_STRIDE, P_PAD_LO, P_PAD_HI) + 3
P_LAST = max(P_LAST, P_PAD_VALUE, P_ELEM)
ABUF_SPACES = (ABUF, ABUF + MAX_UNITS)   # [first, end) of the int32 accumulator buffers' space ids


@njit(cache=True)
def _is_abuf(space: int) -> bool:
    return ABUF_SPACES[0] <= space < ABUF_SPACES[1]


@njit(cache=True)
def _check_params(p: np.ndarray, err: np.ndarray) -> int:
    rc = check_param_range(p, GROUP, 0, P_LAST, err)
    if rc != errors.OK:
        return rc
    elem = p[P_ELEM]
    if elem != 1 and elem != 2 and elem != 4:
        return bad_param(err, GROUP + P_ELEM, elem, 0)
    rc = check_counts(p, GROUP, P_SIZE, 4, MAX_ELEMENTS, err)
    if rc != errors.OK:
        return rc
    for k in range(4):
        lo = p[P_PAD_LO + k]
        hi = p[P_PAD_HI + k]
        if lo < 0:
            return bad_param(err, GROUP + P_PAD_LO + k, lo, 0)
        if hi < 0:
            return bad_param(err, GROUP + P_PAD_HI + k, hi, 0)
        if lo + hi > p[P_SIZE + k]:
            return bad_param(err, GROUP + P_PAD_LO + k, lo, hi)
    return errors.OK


@njit(cache=True)
def _check_aligned_side(space: int, addr: int, counts: np.ndarray, strides: np.ndarray,
                        stride_param: int, elem: int, err: np.ndarray) -> int:
    """An ABUF side moves whole int32s: elem 4, 4-aligned address and strides."""
    if not _is_abuf(space):
        return errors.OK
    if elem != 4:
        return fail(err, errors.MISALIGNED, space, addr, addr + 3, GROUP + P_ELEM, elem, 4, 0)
    return check_aligned(space, addr, counts, strides, stride_param, 4, err)


@njit(cache=True)
def _check_inside(space_size: np.ndarray, space: int, addr: int, counts: np.ndarray,
                  strides: np.ndarray, elem: int, err: np.ndarray) -> int:
    first, last = footprint(addr, counts, strides, elem)
    return check_bounds(space_size, space, first, last, err)


@njit(cache=True)
def _gather(mem: np.ndarray, base: int, counts: np.ndarray, strides: np.ndarray, elem: int,
            out: np.ndarray) -> None:
    """Read the source box, dimension 0 fastest, into out (elem bytes per element)."""
    n0, n1, n2, n3 = counts[0], counts[1], counts[2], counts[3]
    s0, s1, s2, s3 = strides[0], strides[1], strides[2], strides[3]
    t = 0
    row = n0 * elem
    for j3 in range(n3):
        for j2 in range(n2):
            for j1 in range(n1):
                a = base + j3 * s3 + j2 * s2 + j1 * s1
                if s0 == elem:
                    out[t:t + row] = mem[a:a + row]
                    t += row
                else:
                    for j0 in range(n0):
                        a0 = np.uint64(a + j0 * s0)
                        for b in range(elem):
                            out[t] = mem[a0 + np.uint64(b)]
                            t += 1


@njit(cache=True)
def _put_run(mem: np.ndarray, d: int, ds: int, src: np.ndarray, t: int, n: int, elem: int) -> None:
    """Write the n elements src[t:t + n * elem] from d (stride ds)."""
    if ds == elem:
        dv = mem[d:d + n * elem]
        sv = src[t:t + n * elem]
        for b in range(n * elem):
            dv[b] = sv[b]
        return
    for j in range(n):
        at = np.uint64(d + j * ds)
        for b in range(elem):
            mem[at + np.uint64(b)] = src[t + j * elem + b]


@njit(cache=True)
def _scatter(mem: np.ndarray, base: int, sizes: np.ndarray, strides: np.ndarray,
             pad_lo: np.ndarray, pad_hi: np.ndarray, elem: int, pad: np.ndarray,
             src: np.ndarray) -> None:
    """Write the destination box: src elements in order inside the padding, pad bytes outside (each row in
    element order: its low padding, its inside, its high padding)."""
    # Scalars, not array reads: numba cannot tell the stores to mem leave the arrays alone, and reloads them.
    n0, n1, n2, n3 = sizes[0], sizes[1], sizes[2], sizes[3]
    s0, s1, s2, s3 = strides[0], strides[1], strides[2], strides[3]
    lo0, lo1, lo2, lo3 = pad_lo[0], pad_lo[1], pad_lo[2], pad_lo[3]
    hi0, hi1, hi2, hi3 = n0 - pad_hi[0], n1 - pad_hi[1], n2 - pad_hi[2], n3 - pad_hi[3]
    t = 0
    for i3 in range(n3):
        in3 = lo3 <= i3 < hi3
        for i2 in range(n2):
            in2 = in3 and lo2 <= i2 < hi2
            for i1 in range(n1):
                a = base + i3 * s3 + i2 * s2 + i1 * s1
                if not (in2 and lo1 <= i1 < hi1):
                    _fill_run(mem, a, s0, n0, elem, pad)
                    continue
                if lo0 > 0:
                    _fill_run(mem, a, s0, lo0, elem, pad)
                _put_run(mem, a + lo0 * s0, s0, src, t, hi0 - lo0, elem)
                t += (hi0 - lo0) * elem
                if n0 > hi0:
                    _fill_run(mem, a + hi0 * s0, s0, n0 - hi0, elem, pad)


@njit(cache=True)
def _copy_run(mem: np.ndarray, d: int, ds: int, s: int, ss: int, n: int, elem: int) -> None:
    """Copy n elements from s (stride ss) to d (stride ds), in order; source and destination apart.

    A contiguous run copies through one-dimensional views (the loop vectorises,
    ~50x faster than indexing mem); a strided one indexes mem with uint64
    positions, which spares numba's negative-index fix-up on every access (4x).
    Negative strides wrap modulo 2**64 to the same (checked, in-bounds) bytes.
    """
    if n <= 0:
        return
    if ds == elem and ss == elem:
        dv = mem[d:d + n * elem]
        sv = mem[s:s + n * elem]
        for b in range(n * elem):
            dv[b] = sv[b]
        return
    du, dsu, su, ssu = np.uint64(d), np.uint64(ds), np.uint64(s), np.uint64(ss)
    if elem == 1:
        for j in range(n):
            ju = np.uint64(j)
            mem[du + ju * dsu] = mem[su + ju * ssu]
        return
    for j in range(n):
        ju = np.uint64(j)
        for b in range(elem):
            bu = np.uint64(b)
            mem[du + ju * dsu + bu] = mem[su + ju * ssu + bu]


@njit(cache=True)
def _copy_plane(mem: np.ndarray, d: int, ds0: int, ds1: int, s: int, ss0: int, ss1: int, n0: int, n1: int,
                elem: int) -> None:
    """Copy n1 rows of n0 elements (dims 0 and 1 of an unpadded box), in order; source and destination apart.

    Contiguous rows go through _copy_run's views; strided ones walk uint64 positions advanced by their
    strides (no multiply per element: a transposing DMA moves most of a network's bytes this way).
    """
    if (ds0 == elem and ss0 == elem) or elem != 1:
        for i1 in range(n1):
            _copy_run(mem, d + i1 * ds1, ds0, s + i1 * ss1, ss0, n0, elem)
        return
    dsu, ssu = np.uint64(ds0), np.uint64(ss0)
    for i1 in range(n1):
        du, su = np.uint64(d + i1 * ds1), np.uint64(s + i1 * ss1)
        for _ in range(n0):
            mem[du] = mem[su]
            du += dsu
            su += ssu


@njit(cache=True)
def _fill_run(mem: np.ndarray, d: int, ds: int, n: int, elem: int, pad: np.ndarray) -> None:
    """Write the pad element n times from d (stride ds)."""
    if ds == elem and elem == 1:
        dv = mem[d:d + n]
        v = pad[0]
        for b in range(n):
            dv[b] = v
        return
    du, dsu = np.uint64(d), np.uint64(ds)
    for j in range(n):
        at = du + np.uint64(j) * dsu
        for b in range(elem):
            mem[at + np.uint64(b)] = pad[b]


@njit(cache=True)
def _merge_dims(sizes: np.ndarray, pad_lo: np.ndarray, pad_hi: np.ndarray, src_strides: np.ndarray,
                dst_strides: np.ndarray) -> None:
    """Fold each unpadded dimension that continues the one below it on both sides into it (in place).

    Element order is unchanged, so the copy writes the same bytes in the same order;
    a folded dimension is left with size 1.
    """
    for k in range(1, 4):
        lo = k - 1
        while lo > 0 and sizes[lo] == 1 and pad_lo[lo] == 0 and pad_hi[lo] == 0:
            lo -= 1
        if (sizes[k] > 1 and pad_lo[k] == 0 and pad_hi[k] == 0 and pad_lo[lo] == 0
                and pad_hi[lo] == 0 and src_strides[k] == sizes[lo] * src_strides[lo]
                and dst_strides[k] == sizes[lo] * dst_strides[lo]):
            sizes[lo] *= sizes[k]
            sizes[k] = 1


@njit(cache=True)
def _copy_apart(mem: np.ndarray, sbase: int, dbase: int, sizes: np.ndarray, pad_lo: np.ndarray,
                pad_hi: np.ndarray, src_strides: np.ndarray, dst_strides: np.ndarray, elem: int,
                pad: np.ndarray) -> None:
    """The box copy straight from source to destination, in element order (no temporary).

    For memories that cannot overlap (different spaces): then reading everything
    first, as _gather and _scatter do, changes nothing.  Rows run as whole
    contiguous or strided runs after _merge_dims.
    """
    _merge_dims(sizes, pad_lo, pad_hi, src_strides, dst_strides)
    if pad_lo.max() == 0 and pad_hi.max() == 0:
        for i3 in range(sizes[3]):
            for i2 in range(sizes[2]):
                _copy_plane(mem, dbase + i3 * dst_strides[3] + i2 * dst_strides[2], dst_strides[0], dst_strides[1],
                            sbase + i3 * src_strides[3] + i2 * src_strides[2], src_strides[0], src_strides[1],
                            sizes[0], sizes[1], elem)
        return
    # Sizes, strides and padding as scalars: the stores to mem could alias the arrays for all numba knows, so
    # it would reload them at every row (1.7x on a padded transposing copy).
    n0, n1, n2, n3 = sizes[0], sizes[1], sizes[2], sizes[3]
    ds0, ds1, ds2, ds3 = dst_strides[0], dst_strides[1], dst_strides[2], dst_strides[3]
    ss0, ss1, ss2, ss3 = src_strides[0], src_strides[1], src_strides[2], src_strides[3]
    lo0, lo1, lo2, lo3 = pad_lo[0], pad_lo[1], pad_lo[2], pad_lo[3]
    hi0, hi1, hi2, hi3 = n0 - pad_hi[0], n1 - pad_hi[1], n2 - pad_hi[2], n3 - pad_hi[3]
    for i3 in range(n3):
        in3 = lo3 <= i3 < hi3
        for i2 in range(n2):
            in2 = in3 and lo2 <= i2 < hi2
            for i1 in range(n1):
                a = dbase + i3 * ds3 + i2 * ds2 + i1 * ds1
                if not (in2 and lo1 <= i1 < hi1):
                    _fill_run(mem, a, ds0, n0, elem, pad)
                    continue
                s = sbase + (i3 - lo3) * ss3 + (i2 - lo2) * ss2 + (i1 - lo1) * ss1
                if lo0 > 0:
                    _fill_run(mem, a, ds0, lo0, elem, pad)
                _copy_run(mem, a + lo0 * ds0, ds0, s, ss0, hi0 - lo0, elem)
                if n0 > hi0:
                    _fill_run(mem, a + hi0 * ds0, ds0, n0 - hi0, elem, pad)


@njit(cache=True)
def dma_copy(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, dspace: int,
             daddr: int, sspace: int, saddr: int, p: np.ndarray, err: np.ndarray) -> int:
    """Run one dma command (all checks first); return an errors code, filling err on failure."""
    rc = _check_params(p, err)
    if rc != errors.OK:
        return rc
    rc = check_space(space_size, dspace, err)
    if rc != errors.OK:
        return rc
    rc = check_space(space_size, sspace, err)
    if rc != errors.OK:
        return rc
    elem = p[P_ELEM]
    sizes = p[P_SIZE:P_SIZE + 4].copy()
    pad_lo = p[P_PAD_LO:P_PAD_LO + 4].copy()
    pad_hi = p[P_PAD_HI:P_PAD_HI + 4].copy()
    inner = sizes - pad_lo - pad_hi
    dst_strides = p[P_DST_STRIDE:P_DST_STRIDE + 4].copy()
    src_strides = p[P_SRC_STRIDE:P_SRC_STRIDE + 4].copy()
    reads = inner.min() > 0
    rc = _check_aligned_side(dspace, daddr, sizes, dst_strides, GROUP + P_DST_STRIDE, elem, err)
    if rc == errors.OK and reads:
        rc = _check_aligned_side(sspace, saddr, inner, src_strides, GROUP + P_SRC_STRIDE, elem, err)
    if rc == errors.OK:
        rc = _check_inside(space_size, dspace, daddr, sizes, dst_strides, elem, err)
    if rc == errors.OK and reads:
        rc = _check_inside(space_size, sspace, saddr, inner, src_strides, elem, err)
    if rc != errors.OK:
        return rc
    pad = np.empty(elem, dtype=np.uint8)
    for b in range(elem):
        pad[b] = (p[P_PAD_VALUE] >> (8 * b)) & 0xFF
    if dspace != sspace:
        _copy_apart(mem, space_base[sspace] + saddr, space_base[dspace] + daddr, sizes, pad_lo, pad_hi,
                    src_strides, dst_strides, elem, pad)
        return errors.OK
    n_inner = inner[0] * inner[1] * inner[2] * inner[3] if reads else 0
    src = np.empty(n_inner * elem, dtype=np.uint8)
    if reads:
        _gather(mem, space_base[sspace] + saddr, inner, src_strides, elem, src)
    _scatter(mem, space_base[dspace] + daddr, sizes, dst_strides, pad_lo, pad_hi, elem, pad, src)
    return errors.OK


@njit(cache=True)
def dma_bytes(p: np.ndarray) -> int:
    """Bytes the transfer moves: prod(size_k) * elem (0 for parameters dma_copy rejects)."""
    n = p[P_ELEM]
    if n != 1 and n != 2 and n != 4:
        return 0
    for k in range(4):
        s = p[P_SIZE + k]
        if s < 1 or s > MAX_ELEMENTS * 4 // n:
            return 0
        n *= s
    return n


@njit(cache=True)
def dma_burst_bytes(p: np.ndarray, dspace: int, daddr: int, sspace: int, saddr: int,
                    burst: int) -> tuple[int, int]:
    """(source, destination) DDR burst bytes of a transfer (timing.burst_bytes; 0 for a side on chip).

    The source side is the inner (unpadded) box at the source strides, empty when
    padding leaves nothing to read; the destination side is the whole box, padding
    included, at the destination strides.  For parameters dma_copy accepts.
    """
    elem = p[P_ELEM]
    src = 0
    dst = 0
    if sspace == DDR:
        src = burst_bytes(saddr, p[P_SIZE] - p[P_PAD_LO] - p[P_PAD_HI],
                          p[P_SIZE + 1] - p[P_PAD_LO + 1] - p[P_PAD_HI + 1],
                          p[P_SIZE + 2] - p[P_PAD_LO + 2] - p[P_PAD_HI + 2],
                          p[P_SIZE + 3] - p[P_PAD_LO + 3] - p[P_PAD_HI + 3],
                          p[P_SRC_STRIDE], p[P_SRC_STRIDE + 1], p[P_SRC_STRIDE + 2], p[P_SRC_STRIDE + 3],
                          elem, burst)
    if dspace == DDR:
        dst = burst_bytes(daddr, p[P_SIZE], p[P_SIZE + 1], p[P_SIZE + 2], p[P_SIZE + 3],
                          p[P_DST_STRIDE], p[P_DST_STRIDE + 1], p[P_DST_STRIDE + 2], p[P_DST_STRIDE + 3],
                          elem, burst)
    return src, dst
