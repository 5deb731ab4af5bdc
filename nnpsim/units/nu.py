"""NU: nu.conv and nu.conv.acc, the implicit-im2col int8 convolution, nu.dwconv, its depthwise
mode, and nu.conv.rq / nu.conv.acc.rq, its requantising output stage (docs/architecture.md, NU).

Parameter snapshot: the nu.* group (in_h, in_w, in_cb, out_h, out_w, out_cb, k_h, k_w,
stride_h, stride_w, dil_h, dil_w, x_zp), offsets from nnp1.toml (nnpsim.isa_layout), which
must keep this order: the checks walk them as one run.  Check order: parameter ranges, counts >= 1 (in
parameter order), x_zp, array shape, window fits the tile (height, width), unit, spaces (abuf,
ibuf, wbuf), alignment (racc % 4, rin % rows, rw % rows), bounds (abuf, ibuf, wbuf).

The product is an integer matrix product: im2col rows of int16 (x - x_zp fits: |.| <= 255)
against one contiguous int16 row of weights per array column, each output one dot product
summed in int64, which LLVM vectorises into 16-bit multiply-adds (about 4x the int32
rank-1 updates this replaced).  The sum is exact (|sum| < K * 2**15) and the accumulator
keeps its low 32 bits, wrapping as the hardware's does.  (A BLAS float64 product was
faster on an idle machine but collapsed 15x under load from BLAS's own threads, and pulled
in scipy.)
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import errors
from ..cu import wrap32
from ..isa_layout import ABUF, GROUP_BASE, IBUF, MAX_UNITS, VBUF, WBUF, offsets
from . import f32
from .vu import requant_i
from .vu_rows import requant
from .checks import (bad_param, check_bounds, check_param_range, check_space, clamp_addr, fail,
                     load_i32, load_i8, sat_mul, span, store_i32)

OPS = ("conv", "conv_acc", "dwconv", "dwconv_acc", "conv_rq", "conv_acc_rq", "fconv", "fconv_rq", "fdwconv")
"""The ops this kernel and nnpsim.units.nu_float implement (a semantics row's `op`; the _acc ops add to ABUF,
dwconv is the depthwise mode, conv_rq requantises in the array's output stage, conv_acc_rq adds partial sums from
ABUF there first; the f ops are the float32 mode).  A command's op code (its fields[0]) is the op's index here."""
(NU_CONV, NU_CONV_ACC, NU_DWCONV, NU_DWCONV_ACC, NU_CONV_RQ, NU_CONV_ACC_RQ, NU_FCONV, NU_FCONV_RQ,
 NU_FDWCONV) = range(len(OPS))
GROUP = GROUP_BASE["NU"]
IN_H, IN_W, IN_CB, OUT_H, OUT_W, OUT_CB, K_H, K_W, STRIDE_H, STRIDE_W, DIL_H, DIL_W, X_ZP = offsets(
    *(f"nu.{n}" for n in ("in_h", "in_w", "in_cb", "out_h", "out_w", "out_cb", "k_h", "k_w", "stride_h",
                          "stride_w", "dil_h", "dil_w", "x_zp")))
RQ_TABLE, RQ_ZP_OUT, RQ_LO, RQ_HI, RQ_FLOAT, RQ_PSUM = offsets("nu.rq_table", "nu.rq_zp_out", "nu.rq_lo",
                                                               "nu.rq_hi", "nu.rq_float", "nu.rq_psum")
RQ_ENTRY = 12            # a (bias, M, S) int32 triple per output channel
M_LIMIT = 1 << 31
CHUNK_ELEMS = 1 << 20    # im2col rows per chunk * K stays below this (2 MiB of int16)


@njit(cache=True)
def _check_params(p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    rc = check_param_range(p, GROUP, IN_H, X_ZP, err)
    if rc != errors.OK:
        return rc
    for j in range(IN_H, X_ZP):
        if p[j] < 1:
            return bad_param(err, GROUP + j, p[j], 0)
    if p[X_ZP] < -128 or p[X_ZP] > 127:
        return bad_param(err, GROUP + X_ZP, p[X_ZP], 0)
    if rows < 1 or cols < 1:
        return bad_param(err, -1, rows if rows < 1 else cols, 0)
    for d in range(2):
        need = span(p[OUT_H + d], p[STRIDE_H + d]) + span(p[K_H + d], p[DIL_H + d]) + 1
        if need > p[IN_H + d]:
            return bad_param(err, GROUP + IN_H + d, p[IN_H + d], need)
    return errors.OK


@njit(cache=True)
def _check_spans(space_size: np.ndarray, unit: int, racc: int, rin: int, rw: int, rows: int, w_align: int,
                 acc_bytes: int, in_bytes: int, w_bytes: int, err: np.ndarray, out: int = ABUF,
                 out_align: int = 4) -> int:
    """An NU command's unit, its three spaces (the result in `out`, ABUF or VBUF, of the unit), the
    operands' alignment (result out_align, IBUF rows, WBUF w_align) and the bytes each spans."""
    if unit < 0 or unit >= MAX_UNITS:
        return fail(err, errors.ILLEGAL_INSTRUCTION, -1, -1, -1, -1, unit, 0, 0)
    abuf, ibuf, wbuf = out + unit, IBUF + unit, WBUF + unit
    for s in (abuf, ibuf, wbuf):
        rc = check_space(space_size, s, err)
        if rc != errors.OK:
            return rc
    if racc % out_align != 0:
        return fail(err, errors.MISALIGNED, abuf, racc, racc + out_align - 1, -1, racc, out_align, 0)
    if rin % rows != 0:
        return fail(err, errors.MISALIGNED, ibuf, rin, rin + rows - 1, -1, rin, rows, 0)
    if rw % w_align != 0:
        return fail(err, errors.MISALIGNED, wbuf, rw, rw + w_align - 1, -1, rw, w_align, 0)
    for s, a, n in ((abuf, racc, acc_bytes), (ibuf, rin, in_bytes), (wbuf, rw, w_bytes)):
        first = clamp_addr(a)
        rc = check_bounds(space_size, s, first, first + n - 1, err)
        if rc != errors.OK:
            return rc
    return errors.OK


@njit(cache=True)
def _check_memories(space_size: np.ndarray, unit: int, racc: int, rin: int, rw: int,
                    p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    """nu.conv's unit, spaces, alignment and bounds: ABUF [out_cb][out_h][out_w][cols] int32,
    IBUF [in_cb][in_h][in_w][rows], WBUF [out_cb][in_cb][k_h][k_w][rows][cols]."""
    acc_bytes = sat_mul(sat_mul(sat_mul(p[OUT_CB], p[OUT_H]), p[OUT_W]), cols * 4)
    in_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[IN_H]), p[IN_W]), rows)
    w_bytes = sat_mul(sat_mul(sat_mul(sat_mul(p[OUT_CB], p[IN_CB]), p[K_H]), p[K_W]), rows * cols)
    return _check_spans(space_size, unit, racc, rin, rw, rows, rows, acc_bytes, in_bytes, w_bytes, err)


@njit(cache=True)
def _weights(mem: np.ndarray, wb: int, out_cb: int, k: int, cols: int) -> np.ndarray:
    """WBUF [out_cb][K][C] as an int16 [out_cb * C][K] matrix (one contiguous row per array column)."""
    w8 = mem[wb:wb + out_cb * k * cols].view(np.int8)
    w = np.empty((out_cb * cols, k), dtype=np.int16)
    for ob in range(out_cb):
        for j in range(k):
            row = (ob * k + j) * cols
            for c in range(cols):
                w[ob * cols + c, j] = w8[row + c]
    return w


@njit(cache=True)
def _im2col(mem: np.ndarray, ib: int, p: np.ndarray, rows: int, p0: int, x: np.ndarray) -> None:
    """Fill x[q, k] = I[cb, ih, iw, r] - x_zp (int16: |I - x_zp| <= 255) for output pixels p0 .. p0 + len(x) - 1."""
    in_h, in_w, in_cb = p[IN_H], p[IN_W], p[IN_CB]
    out_w, k_h, k_w = p[OUT_W], p[K_H], p[K_W]
    zp = np.int16(p[X_ZP])
    i8 = mem.view(np.int8)
    flat = x.reshape(-1)
    at = 0
    for q in range(x.shape[0]):
        oh = (p0 + q) // out_w
        ow = (p0 + q) % out_w
        for cb in range(in_cb):
            for kh in range(k_h):
                ih = oh * p[STRIDE_H] + kh * p[DIL_H]
                for kw in range(k_w):
                    iw = ow * p[STRIDE_W] + kw * p[DIL_W]
                    src = ib + ((cb * in_h + ih) * in_w + iw) * rows
                    # one-dimensional views: plain loops over them vectorise
                    d = flat[at:at + rows]
                    v = i8[src:src + rows]
                    for r in range(rows):
                        d[r] = np.int16(v[r]) - zp
                    at += rows


@njit(cache=True)
def _matmul(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Product of int16 [n, k] and the transpose of int16 [m, k], modulo 2**32.

    Each output is one dot product of two contiguous int16 rows summed in int64
    (|sum| < k * 2**15, far inside int64), which LLVM turns into pairwise
    multiply-adds of 16-bit lanes; the low 32 bits are the accumulator's.
    """
    n, k = x.shape
    m = w.shape[0]
    y = np.empty((n, m), dtype=np.int32)
    for q in range(n):
        for c in range(m):
            s = np.int64(0)
            for j in range(k):
                s += np.int64(x[q, j]) * np.int64(w[c, j])
            y[q, c] = wrap32(s)
    return y


@njit(cache=True)
def nu_conv(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int,
            racc: int, rin: int, rw: int, p: np.ndarray, accumulate: bool, rows: int, cols: int,
            err: np.ndarray) -> int:
    """Run nu.conv (accumulate False) or nu.conv.acc (True); return an errors code."""
    rc = _check_params(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    rc = _check_memories(space_size, unit, racc, rin, rw, p, rows, cols, err)
    if rc != errors.OK:
        return rc
    ib = space_base[IBUF + unit] + rin
    wb = space_base[WBUF + unit] + rw
    ab = space_base[ABUF + unit] + racc
    out_cb = p[OUT_CB]
    pixels = p[OUT_H] * p[OUT_W]
    k = p[IN_CB] * p[K_H] * p[K_W] * rows
    w = _weights(mem, wb, out_cb, k, cols)
    # ABUF bases are 64-byte aligned and racc % 4 == 0 (checked): whole int32s, host order
    # little-endian like the machine's.
    acc = mem[ab:ab + out_cb * pixels * cols * 4].view(np.int32)
    chunk = max(1, min(pixels, CHUNK_ELEMS // k))
    for p0 in range(0, pixels, chunk):
        n = min(chunk, pixels - p0)
        x = np.empty((n, k), dtype=np.int16)
        _im2col(mem, ib, p, rows, p0, x)
        y = _matmul(x, w)
        for ob in range(out_cb):
            for q in range(n):
                at = (ob * pixels + p0 + q) * cols
                for c in range(cols):
                    if accumulate:
                        acc[at + c] = wrap32(np.int64(acc[at + c]) + y[q, ob * cols + c])
                    else:
                        acc[at + c] = y[q, ob * cols + c]
    return errors.OK


@njit(cache=True)
def _check_rq(space_size: np.ndarray, space_base: np.ndarray, mem: np.ndarray, unit: int, p: np.ndarray,
              cols: int, err: np.ndarray) -> int:
    """nu.conv.rq's output stage: parameter ranges, rq_float 0 or 1, zp_out / lo / hi in int8 and
    lo <= hi, the table's alignment and bounds in WBUF, then each entry's M in [1, 2**31) and S in
    [0, 62] (rq_float: its scale a positive finite float32), in table order."""
    rc = check_param_range(p, GROUP, RQ_TABLE, RQ_FLOAT, err)
    if rc != errors.OK:
        return rc
    if p[RQ_FLOAT] != 0 and p[RQ_FLOAT] != 1:
        return bad_param(err, GROUP + RQ_FLOAT, p[RQ_FLOAT], 0)
    for j in (RQ_ZP_OUT, RQ_LO, RQ_HI):
        if p[j] < -128 or p[j] > 127:
            return bad_param(err, GROUP + j, p[j], 0)
    if p[RQ_LO] > p[RQ_HI]:
        return bad_param(err, GROUP + RQ_LO, p[RQ_LO], p[RQ_HI])
    wbuf, t = WBUF + unit, p[RQ_TABLE]
    if t % 4 != 0:
        return fail(err, errors.MISALIGNED, wbuf, t, t + 3, -1, t, 4, 0)
    n = sat_mul(p[OUT_CB], cols * RQ_ENTRY)
    first = clamp_addr(t)
    rc = check_bounds(space_size, wbuf, first, first + n - 1, err)
    if rc != errors.OK:
        return rc
    base = space_base[wbuf]
    for e in range(p[OUT_CB] * cols):
        at = t + e * RQ_ENTRY
        m = load_i32(mem, base + at + 4)
        s = load_i32(mem, base + at + 8)
        if p[RQ_FLOAT] == 1:
            if not f32.positive_finite(m):
                return fail(err, errors.BAD_PARAM, wbuf, at + 4, at + 7, -1, m, e, 0)
            continue
        if m <= 0:
            return fail(err, errors.BAD_PARAM, wbuf, at + 4, at + 7, -1, m, e, 0)
        if s < 0 or s > 62:
            return fail(err, errors.BAD_PARAM, wbuf, at + 8, at + 11, -1, s, e, 1)
    return errors.OK


@njit(cache=True)
def _check_psum(space_size: np.ndarray, unit: int, p: np.ndarray, n_bytes: int, err: np.ndarray) -> int:
    """nu.conv.acc.rq's partial sums: rq_psum in range, 4-aligned, its n_bytes inside ABUF."""
    rc = check_param_range(p, GROUP, RQ_PSUM, RQ_PSUM, err)
    if rc != errors.OK:
        return rc
    abuf, a = ABUF + unit, p[RQ_PSUM]
    rc = check_space(space_size, abuf, err)
    if rc != errors.OK:
        return rc
    if a % 4 != 0:
        return fail(err, errors.MISALIGNED, abuf, a, a + 3, -1, a, 4, 0)
    first = clamp_addr(a)
    return check_bounds(space_size, abuf, first, first + n_bytes - 1, err)


@njit(cache=True)
def nu_conv_rq(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int,
               racc: int, rin: int, rw: int, p: np.ndarray, rows: int, cols: int, err: np.ndarray,
               psum: bool = False) -> int:
    """Run nu.conv.rq: nu.conv's sums (psum, nu.conv.acc.rq: plus the int32 partial sums at
    ABUF[rq_psum], laid out as nu.conv.acc's accumulators), plus each column's bias (wrapping to
    int32), requantised by its (M, S) and written as int8 [out_cb][out_h][out_w][cols] to VBUF[racc]
    of the VU of the same number (the output stage's link, docs/architecture.md); return an errors
    code."""
    rc = _check_params(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    out_cb = p[OUT_CB]
    pixels = p[OUT_H] * p[OUT_W]
    in_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[IN_H]), p[IN_W]), rows)
    w_bytes = sat_mul(sat_mul(sat_mul(sat_mul(out_cb, p[IN_CB]), p[K_H]), p[K_W]), rows * cols)
    rc = _check_spans(space_size, unit, racc, rin, rw, rows, rows, sat_mul(sat_mul(out_cb, pixels), cols),
                      in_bytes, w_bytes, err, VBUF, 1)
    if rc != errors.OK:
        return rc
    rc = _check_rq(space_size, space_base, mem, unit, p, cols, err)
    if rc != errors.OK:
        return rc
    if psum:
        rc = _check_psum(space_size, unit, p, sat_mul(sat_mul(out_cb, pixels), cols * 4), err)
        if rc != errors.OK:
            return rc
    ib = space_base[IBUF + unit] + rin
    wb = space_base[WBUF + unit] + rw
    ab = space_base[VBUF + unit] + racc
    tb = space_base[WBUF + unit] + p[RQ_TABLE]
    zp_out, lo, hi = p[RQ_ZP_OUT], p[RQ_LO], p[RQ_HI]
    n_ch = out_cb * cols
    bias = np.empty(n_ch, np.int64)
    m = np.empty(n_ch, np.int64)
    s = np.empty(n_ch, np.int64)
    for e in range(n_ch):
        bias[e] = load_i32(mem, tb + e * RQ_ENTRY)
        m[e] = load_i32(mem, tb + e * RQ_ENTRY + 4)
        s[e] = load_i32(mem, tb + e * RQ_ENTRY + 8)
    fl = p[RQ_FLOAT] == 1
    scale = np.empty(n_ch, np.float64)
    for e in range(n_ch):
        scale[e] = f32.value(m[e]) if fl else 0.0
    k = p[IN_CB] * p[K_H] * p[K_W] * rows
    w = _weights(mem, wb, out_cb, k, cols)
    # ABUF bases are 64-byte aligned and rq_psum % 4 == 0 (checked): whole int32s, as nu.conv.acc reads them
    pb = space_base[ABUF + unit] + p[RQ_PSUM] if psum else 0
    part = mem[pb:pb + (out_cb * pixels * cols * 4 if psum else 0)].view(np.int32)
    chunk = max(1, min(pixels, CHUNK_ELEMS // k))
    for p0 in range(0, pixels, chunk):
        n = min(chunk, pixels - p0)
        x = np.empty((n, k), dtype=np.int16)
        _im2col(mem, ib, p, rows, p0, x)
        _out_stage(mem, ab, _matmul(x, w), p0, pixels, cols, bias, part, psum, fl, scale, m, s, zp_out, lo, hi)
    return errors.OK


@njit(cache=True)
def _out_stage(mem: np.ndarray, ab: int, y: np.ndarray, p0: int, pixels: int, cols: int, bias: np.ndarray,
               part: np.ndarray, psum: bool, fl: bool, scale: np.ndarray, m: np.ndarray, s: np.ndarray,
               zp_out: int, lo: int, hi: int) -> None:
    """The output stage of pixels p0 .. p0 + len(y) - 1: each sum (y) plus its column's bias (plus the partial
    sum in part), wrapped to int32, requantised and stored as int8 [block][pixel][cols] from ab; each step one
    loop over a pixel's columns, so that none branches per element."""
    v = np.empty(cols, np.int64)
    for ob in range(y.shape[1] // cols):
        for q in range(y.shape[0]):
            pat = (ob * pixels + p0 + q) * cols
            at = ab + pat
            e0 = ob * cols
            for c in range(cols):
                v[c] = np.int64(y[q, e0 + c]) + bias[e0 + c]
            if psum:
                for c in range(cols):
                    v[c] += part[pat + c]
            if fl:
                for c in range(cols):
                    mem[np.uint64(at + c)] = requant(wrap32(v[c]), scale[e0 + c], zp_out, lo, hi) & 0xFF
                continue
            for c in range(cols):
                # |v| <= 2**31 and M < 2**31: the product fits int64 with room for the rounding term
                mem[np.uint64(at + c)] = requant_i(wrap32(v[c]), m[e0 + c], s[e0 + c], zp_out, lo, hi) & 0xFF


@njit(cache=True)
def nu_macs(p: np.ndarray, rows: int, cols: int) -> int:
    """MACs of the command on the array: out_cb*in_cb*k_h*k_w*out_h*out_w*rows*cols (saturated)."""
    n = sat_mul(rows, cols)
    for j in (OUT_CB, IN_CB, K_H, K_W, OUT_H, OUT_W):
        n = sat_mul(n, max(p[j], 0))
    return n


@njit(cache=True)
def _check_dw_memories(space_size: np.ndarray, unit: int, racc: int, rin: int, rw: int,
                       p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    """nu.dwconv's unit, spaces, alignment and bounds: ABUF [in_cb][out_h][out_w][cols] int32,
    IBUF [in_cb][in_h][in_w][rows], WBUF per block [cols] int32 biases then [k_h][k_w][cols] int8."""
    if cols > rows:      # column c reads IBUF lane c of each pixel: there must be one
        return bad_param(err, -1, cols, rows)
    acc_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[OUT_H]), p[OUT_W]), cols * 4)
    in_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[IN_H]), p[IN_W]), rows)
    w_bytes = sat_mul(sat_mul(p[IN_CB], sat_mul(p[K_H], p[K_W]) + 4), cols)   # SPAN_LIMIT + 4 fits int64
    return _check_spans(space_size, unit, racc, rin, rw, rows, cols, acc_bytes, in_bytes, w_bytes, err)


@njit(cache=True)
def nu_dwconv(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int,
              racc: int, rin: int, rw: int, p: np.ndarray, accumulate: bool, rows: int, cols: int,
              err: np.ndarray) -> int:
    """Run nu.dwconv (accumulate False) or nu.dwconv.acc (True): per block cb and column c, ABUF (+)=
    bias c + sum over the window of (IBUF lane c - x_zp) * weight lane c, int32 wrapping; return an
    errors code."""
    rc = _check_params(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    rc = _check_dw_memories(space_size, unit, racc, rin, rw, p, rows, cols, err)
    if rc != errors.OK:
        return rc
    ib = space_base[IBUF + unit] + rin
    wb = space_base[WBUF + unit] + rw
    ab = space_base[ABUF + unit] + racc
    in_h, in_w, in_cb = p[IN_H], p[IN_W], p[IN_CB]
    out_h, out_w, k_h, k_w = p[OUT_H], p[OUT_W], p[K_H], p[K_W]
    zp = p[X_ZP]
    taps = k_h * k_w
    block = (4 + taps) * cols
    # The sums are kept modulo 2**32 in int32 lanes (twice as many to a vector as int64): the accumulator
    # keeps the low 32 bits of the exact sum, and these are the low 32 bits of every partial sum's.
    w = np.empty((taps, cols), dtype=np.int32)
    bias = np.empty(cols, dtype=np.int32)
    acc = np.empty(cols, dtype=np.int32)
    stride_h, stride_w, dil_h, dil_w = p[STRIDE_H], p[STRIDE_W], p[DIL_H], p[DIL_W]
    for cb in range(in_cb):
        for c in range(cols):
            bias[c] = load_i32(mem, wb + cb * block + 4 * c)
        for j in range(taps):
            for c in range(cols):
                w[j, c] = load_i8(mem, wb + cb * block + 4 * cols + j * cols + c)
        for oh in range(out_h):
            for ow in range(out_w):
                acc[:] = bias
                for kh in range(k_h):
                    ih = oh * stride_h + kh * dil_h
                    for kw in range(k_w):
                        iw = ow * stride_w + kw * dil_w
                        src = np.uint64(ib + ((cb * in_h + ih) * in_w + iw) * rows)
                        j = kh * k_w + kw
                        for c in range(cols):
                            acc[c] += np.int32((np.int32(mem[src + np.uint64(c)] ^ 0x80) - 0x80 - zp) * w[j, c])
                at = ab + ((cb * out_h + oh) * out_w + ow) * cols * 4
                for c in range(cols):
                    v = acc[c]
                    if accumulate:
                        v += load_i32(mem, at + 4 * c)
                    store_i32(mem, at + 4 * c, v)
    return errors.OK


@njit(cache=True)
def nu_dw_macs(p: np.ndarray, cols: int) -> int:
    """MACs of a nu.dwconv: in_cb*k_h*k_w*out_h*out_w*cols, one per column and tap (saturated)."""
    n = cols
    for j in (IN_CB, K_H, K_W, OUT_H, OUT_W):
        n = sat_mul(n, max(p[j], 0))
    return n
