"""The compiler's own numpy model of what each op computes (docs/semantics.md).

Ops use it for `.reference()`.  It is written independently of tests/reference.py
(im2col here, per-tap accumulation there) so that tests can compare the two.
Everything is int64 inside; inputs are assumed validated by compiler.ops.
"""
from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view


def rshift_round(v: np.ndarray, s: np.ndarray | int) -> np.ndarray:
    """Rounding arithmetic right shift: floor((v + 2**(s-1)) / 2**s), v itself for s = 0."""
    v = np.asarray(v, dtype=np.int64)
    s = np.asarray(s, dtype=np.int64)
    bias = np.where(s == 0, 0, np.left_shift(np.int64(1), np.maximum(s, 1) - 1))
    return (v + bias) >> s


def requant(v: np.ndarray, m, s, zp_out: int, lo: int, hi: int) -> np.ndarray:
    """clip(rshift_round(v * m, s) + zp_out, lo, hi) as int8; m and s broadcast against v."""
    y = rshift_round(np.asarray(v, dtype=np.int64) * np.asarray(m, dtype=np.int64), s)
    return np.clip(y + zp_out, lo, hi).astype(np.int8)


def _channel_view(a: np.ndarray, ndim: int) -> np.ndarray:
    """A per-channel vector shaped to broadcast along axis 1 of an ndim array."""
    a = np.asarray(a, dtype=np.int64)
    return a.reshape((1, -1) + (1,) * (ndim - 2)) if a.ndim else a


def pad_plane(x: np.ndarray, pad: tuple[int, int, int, int], value: int) -> np.ndarray:
    """Pad H and W of an NCHW array by (top, left, bottom, right) with value."""
    t, l, b, r = pad
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def windows(xp: np.ndarray, k: tuple[int, int], stride: tuple[int, int],
            dil: tuple[int, int]) -> np.ndarray:
    """[N, C, OH, OW, KH, KW] view of the windows of a padded NCHW array."""
    span = (dil[0] * (k[0] - 1) + 1, dil[1] * (k[1] - 1) + 1)
    v = sliding_window_view(xp, span, axis=(2, 3))
    return v[:, :, ::stride[0], ::stride[1], ::dil[0], ::dil[1]]


def conv2d_acc(x, w, bias, stride, pad, dil, groups, x_zp) -> np.ndarray:
    """int64 accumulators [N, O, OH, OW] = bias + sum of (xpad - x_zp) * w per group."""
    xp = pad_plane(np.asarray(x, dtype=np.int64), pad, x_zp) - x_zp
    w = np.asarray(w, dtype=np.int64)
    o, cg, kh, kw = w.shape
    win = windows(xp, (kh, kw), stride, dil)            # N, C, OH, OW, KH, KW
    n, _, oh, ow = win.shape[:4]
    win = win.reshape(n, groups, cg, oh, ow, kh, kw)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    acc = np.einsum("ngchwij,gocij->ngohw", win, wg).reshape(n, o, oh, ow)
    if bias is not None:
        acc = acc + _channel_view(bias, 4)
    return acc


def conv2d(x, w, bias, stride, pad, dil, groups, x_zp, m, s, zp_out, lo, hi) -> np.ndarray:
    """Quantised conv2d: accumulate, then requantise per output channel."""
    acc = conv2d_acc(x, w, bias, stride, pad, dil, groups, x_zp)
    return requant(acc, _channel_view(m, 4), _channel_view(s, 4), zp_out, lo, hi)


def dense(x, w, bias, x_zp, m, s, zp_out, lo, hi) -> np.ndarray:
    """Quantised dense: (x - x_zp) @ w + bias, requantised per output feature."""
    acc = (np.asarray(x, dtype=np.int64) - x_zp) @ np.asarray(w, dtype=np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requant(acc, _channel_view(m, 2), _channel_view(s, 2), zp_out, lo, hi)


def pool_windows(x, k, stride, pad, fill: int) -> np.ndarray:
    """[N, C, OH, OW, KH, KW] windows of x padded with fill."""
    return windows(pad_plane(np.asarray(x, dtype=np.int64), pad, fill), k, stride, (1, 1))


def real_counts(h: int, w: int, k, stride, pad) -> np.ndarray:
    """[OH, OW] number of non-padding elements in each window."""
    ones = np.ones((1, 1, h, w), dtype=np.int64)
    return pool_windows(ones, k, stride, pad, 0).sum(axis=(4, 5))[0, 0]


def max_pool2d(x, k, stride, pad) -> np.ndarray:
    """Window maximum; padding is below every int8 so it never wins."""
    return pool_windows(x, k, stride, pad, -129).max(axis=(4, 5)).astype(np.int8)


def sum_pool2d(x, k, stride, pad) -> np.ndarray:
    """Window sum as int32, padding contributing 0."""
    return pool_windows(x, k, stride, pad, 0).sum(axis=(4, 5)).astype(np.int32)


def divide_round(s: np.ndarray, n: np.ndarray) -> np.ndarray:
    """sign(s) * ((|s| + n // 2) // n), saturated to int8."""
    q = (np.abs(s) + n // 2) // n
    return np.clip(np.where(s < 0, -q, q), -128, 127).astype(np.int8)


def avg_pool2d(x, k, stride, pad, count_include_pad: bool, x_zp: int) -> np.ndarray:
    """Window average rounded half away from zero (section 4)."""
    x = np.asarray(x)
    fill = x_zp if count_include_pad else 0
    s = pool_windows(x, k, stride, pad, fill).sum(axis=(4, 5))
    if count_include_pad:
        n = np.int64(k[0] * k[1])
    else:
        n = real_counts(x.shape[2], x.shape[3], k, stride, pad)
    return divide_round(s, n)


def add(a, b, za, zb, ma, mb, shift, zp_out, lo, hi) -> np.ndarray:
    """Quantised addition with two multipliers and one shift."""
    v = (np.asarray(a, dtype=np.int64) - za) * ma + (np.asarray(b, dtype=np.int64) - zb) * mb
    return np.clip(rshift_round(v, shift) + zp_out, lo, hi).astype(np.int8)


def mul(a, b, za, zb, m, shift, zp_out, lo, hi) -> np.ndarray:
    """Quantised multiplication."""
    v = (np.asarray(a, dtype=np.int64) - za) * (np.asarray(b, dtype=np.int64) - zb)
    return requant(v, m, shift, zp_out, lo, hi)


def clip(x, lo: int, hi: int) -> np.ndarray:
    """clip(x, lo, hi) as int8 (ReLU is clip(x, zp, 127))."""
    return np.clip(np.asarray(x, dtype=np.int64), lo, hi).astype(np.int8)


def lut(x, table: np.ndarray) -> np.ndarray:
    """table[x + 128]: each int8 x through a 256-entry int8 table (vu.lut)."""
    return np.asarray(table, dtype=np.int8)[np.asarray(x, dtype=np.int64) + 128]


def requantize(x, zx, m, s, zp_out, lo, hi) -> np.ndarray:
    """clip(rshift_round((x - zx) * M, S) + zp_out, lo, hi); M, S per tensor or along axis 1."""
    x = np.asarray(x, dtype=np.int64)
    return requant(x - zx, _channel_view(m, x.ndim), _channel_view(s, x.ndim), zp_out, lo, hi)


# ---------------------------------------------------------------- float32 forms (onnxruntime arithmetic)
#
# onnxruntime's integer kernels requantise through float32 (docs/semantics.md, "Float32 forms").
# Every value below is a numpy float32 and every operation rounds to float32 once, as the SSE/AVX
# instructions of MLAS do; fma_f32 is the one fused multiply-add (a single rounding), which the
# AVX2 QLinearAdd kernel uses.

F32 = np.float32
INT_MIN_F32 = F32(2.0 ** 31)


def f32(v) -> np.ndarray:
    """v as float32 (integers are converted with round-half-even, as cvtdq2ps / cvtsi2ss do)."""
    return np.asarray(v).astype(F32)


def fma_f32(a, b, c) -> np.ndarray:
    """a * b + c in float32 with one rounding (vfmadd): exact in float64, then rounded to float32 once."""
    a, b, c = (np.asarray(v, F32).astype(np.float64) for v in (a, b, c))
    p = a * b                                   # exact: 24 + 24 significant bits
    s = p + c
    t = s - p
    err = (p - (s - t)) + (c - t)               # TwoSum: s + err == p + c exactly
    near = s.astype(F32)
    nd = near.astype(np.float64)
    # the only double-rounding hazard: s exactly halfway between two float32 values and err != 0,
    # where the exact value lies on err's side of the midpoint
    other = np.where(nd > s, np.nextafter(near, F32(-np.inf)), np.nextafter(near, F32(np.inf)))
    od = other.astype(np.float64)
    halfway = (nd != s) & (np.abs(nd - s) == np.abs(od - s))
    flip = halfway & (((err > 0) & (od > nd)) | ((err < 0) & (od < nd)))
    return np.where(flip, od, nd).astype(F32)


def cvt_int8(t, uint8: bool = False) -> np.ndarray:
    """int64 of a float32 rounded half to even then saturated to int8, as cvtps2dq + packs give it.

    cvtps2dq returns INT_MIN (0x80000000) for nan and for |t| >= 2**31, so such t give -128.  uint8: t is
    the result of a uint8 kernel, packed to [0, 255] (INT_MIN to 0), returned as the int8 view q - 128.
    """
    t = np.asarray(t, F32)
    inside = np.abs(t) < INT_MIN_F32
    r = np.where(inside, np.rint(np.where(inside, t, F32(0))), F32(-(2.0 ** 31))).astype(np.int64)
    return np.clip(r - excess(uint8), -128, 127)


def excess(uint8: bool) -> int:
    """How far a uint8 value q lies above its int8 view q - 128 (the importer's, compiler.onnx.state.as_int8):
    the float forms that add a zero point before rounding (QLinearAdd, QLinearMul, QLinearAveragePool) round
    differently on the two, so their uint8 forms compute on the view plus this (vu.mode on the VU)."""
    return 128 if uint8 else 0


def requant_f32(v, scale, zp_out: int, lo: int = -128, hi: int = 127) -> np.ndarray:
    """MlasRequantizeOutput: clip(rne(clamp(f32(v) * scale, -128 - zp, 127 - zp)) + zp, lo, hi) as int8.

    v is an exact integer (the int32 accumulator, bias included); scale a float32 broadcast against v.
    """
    x = f32(np.asarray(v, dtype=np.int64)) * np.asarray(scale, F32)
    x = np.clip(x, F32(-128 - zp_out), F32(127 - zp_out))
    return np.clip(np.rint(x).astype(np.int64) + zp_out, lo, hi).astype(np.int8)


def wrap32(v) -> np.ndarray:
    """int64 v modulo 2**32 as a signed int32: the NU's accumulators, and onnxruntime's (MLAS sums products,
    zero-point terms and the bias in int32 lanes that wrap), so the float forms need no overflow proof."""
    return (np.asarray(v, dtype=np.int64) + (1 << 31)) % (1 << 32) - (1 << 31)


def conv2d_f32(x, w, bias, stride, pad, dil, groups, x_zp, scale, zp_out, lo, hi) -> np.ndarray:
    """QLinearConv: integer accumulators (wrapping to int32), then requant_f32 by each output channel's scale."""
    acc = wrap32(conv2d_acc(x, w, bias, stride, pad, dil, groups, x_zp))
    return requant_f32(acc, _f32_channel_view(scale, 4), zp_out, lo, hi)


def dense_f32(x, w, bias, x_zp, scale, zp_out, lo, hi) -> np.ndarray:
    """QLinearMatMul (bias: QGemm): (x - x_zp) @ w + bias wrapping to int32, requant_f32 per output feature."""
    acc = (np.asarray(x, dtype=np.int64) - x_zp) @ np.asarray(w, dtype=np.int64)
    if bias is not None:
        acc = acc + np.asarray(bias, dtype=np.int64)
    return requant_f32(wrap32(acc), _f32_channel_view(scale, 2), zp_out, lo, hi)


def requantize_f32(x, zx, scale, zp_out, lo, hi) -> np.ndarray:
    """requant_f32(x - zx) with a float32 scale per tensor or per channel along axis 1."""
    x = np.asarray(x, dtype=np.int64)
    return requant_f32(x - zx, _f32_channel_view(scale, x.ndim), zp_out, lo, hi)


def _f32_channel_view(a, ndim: int) -> np.ndarray:
    a = np.asarray(a, F32)
    return a.reshape((1, -1) + (1,) * (ndim - 2)) if a.ndim else a


def add_f32_params(scale_a, scale_b, scale_out, za: int, zb: int, zp_out: int, uint8: bool = False) -> tuple:
    """(ra, rb, c) of QLinearAdd: ra = sa / sy, rb = sb / sy, c = zp_out - fma(ra, za, rb * zb), float32
    (uint8: the zero points of the uint8 tensors, each the int8 view's + 128)."""
    o = excess(uint8)
    ra = F32(scale_a) / F32(scale_out)
    rb = F32(scale_b) / F32(scale_out)
    c = F32(zp_out + o) - fma_f32(ra, F32(za + o), rb * F32(zb + o))[()]
    return F32(ra), F32(rb), F32(c)


def add_f32(a, b, za, zb, scale_a, scale_b, scale_out, zp_out, lo, hi, uint8: bool = False) -> np.ndarray:
    """QLinearAdd (AVX2 kernel): clip(cvt_int8(fma(a, ra, fma(b, rb, c))), lo, hi) as int8 (uint8: on the
    uint8 values a + 128 and b + 128, the result's view)."""
    o = excess(uint8)
    ra, rb, c = add_f32_params(scale_a, scale_b, scale_out, za, zb, zp_out, uint8)
    t = fma_f32(f32(np.asarray(a, np.int64) + o), ra, fma_f32(f32(np.asarray(b, np.int64) + o), rb, c))
    return np.clip(cvt_int8(t, uint8), lo, hi).astype(np.int8)


def mul_f32_ratio(scale_a, scale_b, scale_out) -> np.float32:
    """QLinearMul's factor (sa * sb) / sy in float32, in that order."""
    return F32(F32(F32(scale_a) * F32(scale_b)) / F32(scale_out))


def mul_f32(a, b, za, zb, scale_a, scale_b, scale_out, zp_out, lo, hi, uint8: bool = False) -> np.ndarray:
    """QLinearMul: clip(cvt_int8(f32((a - za) * (b - zb)) * r + f32(zp_out)), lo, hi) as int8 (uint8: the
    uint8 zero point zp_out + 128 added, the result's view)."""
    p = (np.asarray(a, dtype=np.int64) - za) * (np.asarray(b, dtype=np.int64) - zb)
    t = f32(p) * mul_f32_ratio(scale_a, scale_b, scale_out) + F32(zp_out + excess(uint8))
    return np.clip(cvt_int8(t, uint8), lo, hi).astype(np.int8)


QDQ_BINARY = ("qdq_add", "sub", "div", "max", "min")
"""The float32 binary ops onnxruntime runs between DequantizeLinear and QuantizeLinear (vu.fsub ... vu.fmin);
qdq_add is its float Add (an Add it does not fuse into QLinearAdd)."""


_QDQ_UFUNC = {"qdq_add": np.add, "sub": np.subtract, "div": np.divide, "max": np.maximum, "min": np.minimum}


def qdq_binary_f32(mode: str, a, b, za, zb, scale_a, scale_b, scale_out, zp_out, lo, hi) -> np.ndarray:
    """DequantizeLinear a and b (f32(x - z) * s), one float32 add / sub / div / max / min, QuantizeLinear."""
    fa, fb = dequantize_f32(a, scale_a, za), dequantize_f32(b, scale_b, zb)
    with np.errstate(all="ignore"):
        r = _QDQ_UFUNC[mode](fa, fb)
        return np.clip(quantize_f32(r, scale_out, zp_out), lo, hi).astype(np.int8)


def global_avg_pool_scale(scale_x, scale_out, n: int) -> np.float32:
    """QLinearGlobalAveragePool's factor sx / (sy * n) in float32, in that order."""
    return F32(F32(scale_x) / F32(F32(scale_out) * F32(n)))


def global_avg_pool2d_f32(x, x_zp, scale_x, scale_out, zp_out) -> np.ndarray:
    """QLinearGlobalAveragePool: requant_f32(sum(x) - x_zp * H*W) by sx / (sy * H*W), [N, C, 1, 1]."""
    x = np.asarray(x, dtype=np.int64)
    n = x.shape[2] * x.shape[3]
    acc = x.sum(axis=(2, 3), keepdims=True) - x_zp * n
    return requant_f32(acc, global_avg_pool_scale(scale_x, scale_out, n), zp_out)


def avg_pool_is_global(x_shape, k, pad) -> bool:
    """onnxruntime runs a QLinearAveragePool whose kernel is the whole plane, unpadded, as the global one."""
    return tuple(k) == tuple(x_shape[2:]) and not any(pad)


def avg_pool2d_f32(x, k, stride, pad, count_include_pad: bool, x_zp, scale_x, scale_out, zp_out,
                   uint8: bool = False, quantize_linear: bool = False) -> np.ndarray:
    """QLinearAveragePool: a float32 sum of sx * (x - x_zp) in window order, / count, / sy, + zp_out (uint8: the
    uint8 zero point zp_out + 128, the result's view).  quantize_linear: the same window average, then
    QuantizeLinear (quantize_f32: / sy, rounded, + zp_out), as onnxruntime's float AveragePool on NCHWc blocks
    (MLAS's SpoolKernel: from 0.0, the window's elements in order, padding skipped) and the QuantizeLinear after."""
    x = np.asarray(x, dtype=np.int64)
    if avg_pool_is_global(x.shape, k, pad) and not quantize_linear:
        return global_avg_pool2d_f32(x, x_zp, scale_x, scale_out, zp_out)
    real = F32(scale_x) * f32(pad_plane(x, pad, x_zp) - x_zp)     # padding dequantises to +0.0
    win = windows(real, k, stride, (1, 1))
    total = np.zeros(win.shape[:4], F32)
    for i in range(k[0]):                      # one rounding per element, in row-major window order
        for j in range(k[1]):
            total = total + win[..., i, j]
    if count_include_pad:
        count = F32(k[0] * k[1])
    else:
        count = f32(real_counts(x.shape[2], x.shape[3], k, stride, pad))
    if quantize_linear:
        return quantize_f32(total / count, scale_out, zp_out)
    t = (total / count) / F32(scale_out) + F32(zp_out + excess(uint8))
    return cvt_int8(t, uint8).astype(np.int8)


def quantize_f32(x, scale, zp: int) -> np.ndarray:
    """QuantizeLinear: clip(rne(clamp(f32(x) / scale, -128 - zp, 127 - zp)) + zp) as int8; nan gives -128."""
    v = f32(x) / F32(scale)
    v = np.where(np.isnan(v), F32(-128 - zp), v)      # maxps returns its second operand for nan
    v = np.clip(v, F32(-128 - zp), F32(127 - zp))
    return (np.rint(v).astype(np.int64) + zp).astype(np.int8)


MLAS_STRIDE = 128
"""MLAS_SGEMM_STRIDEN and MLAS_SGEMM_STRIDEK: the N x K blocks of MLAS's float32 GEMM."""


def mlas_step(n: int, k: int, m: int) -> int:
    """The K slice of MLAS's float32 GEMM of M filters over N output positions and depth K (nu.f_step): StrideK,
    doubled while StrideN halves above 16 and at least N when N < K, halved while StrideK / 2 >= K when N >= K;
    0 for M = 1 (its M = 1 kernel: K in groups of 4, then 2, then 1, without FMA)."""
    if m == 1:
        return 0
    sn, sk = MLAS_STRIDE, MLAS_STRIDE
    if n >= k:
        while sk // 2 >= k:
            sk, sn = sk // 2, sn * 2
    else:
        while sn > 16 and sn // 2 >= n:
            sk, sn = sk * 2, sn // 2
    return sk


def _mlas_starts(k: int, step: int) -> list[int]:
    """The first K index of every slice (step >= 1) or M = 1 group (step = 0) of a depth-k sum."""
    if step:
        return list(range(0, k, step))
    q = k - k % 4
    return list(range(0, q, 4)) + ([q] if k > q else []) + ([q + 2] if k - q == 3 else [])


def conv2d_mlas(x, xs, x_zp, wf, bf, stride, pad, dil, groups, ys, zp_out, lo, hi) -> np.ndarray:
    """The NU's float32 mode (nu.fconv): onnxruntime's float Conv of a QDQ group, DequantizeLinear's
    f32(x - x_zp) * xs against float32 weights wf [O, C / groups, KH, KW], the products of each output added in
    MLAS's order (mlas_step of N = OH * OW, K = C / groups * KH * KW and the group's filters), then the float32
    bias bf, QuantizeLinear by ys and the clamp [lo, hi]."""
    xf = f32(pad_plane(np.asarray(x, np.int64), pad, x_zp) - x_zp) * F32(xs)
    o, cg, kh, kw = wf.shape
    win = windows(xf, (kh, kw), stride, dil)                 # N, C, OH, OW, KH, KW
    n, _, oh, ow = win.shape[:4]
    cols = win.reshape(n, groups, cg, oh * ow, kh, kw).transpose(0, 1, 2, 4, 5, 3).reshape(n, groups, -1, oh * ow)
    wg = np.asarray(wf, F32).reshape(groups, o // groups, -1)
    k, step = cg * kh * kw, mlas_step(oh * ow, cg * kh * kw, o // groups)
    starts = _mlas_starts(k, step)
    total = np.zeros((n, groups, o // groups, oh * ow), F32)
    for a, b in zip(starts, starts[1:] + [k]):
        part = np.zeros_like(total)
        for j in range(a, b):
            prod = wg[None, :, :, j, None], cols[:, :, None, j, :]
            part = fma_f32(*prod, part) if step else (part + (prod[0] * prod[1]).astype(F32)).astype(F32)
        total = (total + part).astype(F32)
    y = (total.reshape(n, o, oh, ow) + np.asarray(bf, F32).reshape(1, -1, 1, 1)).astype(F32)
    return np.clip(quantize_f32(y, ys, zp_out), lo, hi).astype(np.int8)


def dequantize_f32(q, scale, zp: int) -> np.ndarray:
    """DequantizeLinear: f32(q - zp) * scale."""
    return f32(np.asarray(q, dtype=np.int64) - zp) * F32(scale)


MEAN_LANES = 4
"""Float32 lanes of onnxruntime's ReduceMean sum: Eigen's SSE packet (the x86-64 wheel is built for SSE2)."""


def _lane_sum(v: np.ndarray) -> np.ndarray:
    """Eigen's predux of 4-lane packets v[..., 4]: (v0 + v2) + (v1 + v3), each sum rounded to float32."""
    return (v[..., 0] + v[..., 2]) + (v[..., 1] + v[..., 3])


def _eigen_sum_rows(v: np.ndarray, phase: int) -> np.ndarray:
    """Sums of the rows of v [rows, n] (float32) whose first elements all lie `phase` floats past a 16-byte
    boundary, in the order of Eigen's vectorised redux (Redux.h, LinearVectorizedTraversal): packets of 4
    from the first aligned element, two running packets, folded, then the unaligned head and the tail."""
    n, p = v.shape[1], MEAN_LANES
    a0 = min((p - phase % p) % p, n)
    size, size2 = (n - a0) // p * p, (n - a0) // (2 * p) * (2 * p)
    if size == 0:                     # too short to vectorise: one element after the other
        total = v[:, 0]
        for j in range(1, n):
            total = total + v[:, j]
        return total
    acc0 = v[:, a0:a0 + p]
    if size > p:
        acc1 = v[:, a0 + p:a0 + 2 * p]
        for j in range(a0 + 2 * p, a0 + size2, 2 * p):
            acc0, acc1 = acc0 + v[:, j:j + p], acc1 + v[:, j + p:j + 2 * p]
        acc0 = acc0 + acc1
        if size > size2:
            acc0 = acc0 + v[:, a0 + size2:a0 + size2 + p]
    total = _lane_sum(acc0)
    for j in list(range(a0)) + list(range(a0 + size, n)):
        total = total + v[:, j]
    return total


def mean_sum_f32(v: np.ndarray, phases: np.ndarray) -> np.ndarray:
    """Float32 sums of the rows of v [rows, n] as onnxruntime's ReduceMean adds them: row r starts phases[r]
    floats past a 16-byte boundary (its offset in the 64-byte-aligned tensor, mod 4)."""
    v = np.asarray(v, F32)
    out = np.zeros(v.shape[0], F32)
    for ph in range(MEAN_LANES):
        rows = np.flatnonzero(np.asarray(phases) % MEAN_LANES == ph)
        if rows.size:
            out[rows] = _eigen_sum_rows(v[rows], ph)
    return out


def reduce_mean_f32(x, x_zp, scale_x, scale_out, zp_out) -> np.ndarray:
    """DequantizeLinear -> ReduceMean over H and W -> QuantizeLinear, as onnxruntime's CPU kernels compute it:
    f32(x - x_zp) * sx, each plane summed in Eigen's order (mean_sum_f32), / f32(H * W), quantised: [N, C, 1, 1]."""
    x = np.asarray(x)
    n, c, h, w = x.shape
    rows = dequantize_f32(x, scale_x, x_zp).reshape(n * c, h * w)
    total = mean_sum_f32(rows, np.arange(n * c) * (h * w) % MEAN_LANES)
    return quantize_f32(total / F32(h * w), scale_out, zp_out).reshape(n, c, 1, 1)


def global_sum_f32(v: np.ndarray) -> np.ndarray:
    """Float32 sums of the rows of v [rows, n] as MLAS's global pool adds them (MlasPoolGlobalKernel): element
    k in lane k mod 4 of a register that starts at zero, the lanes folded (l0 + l2) + (l1 + l3)
    (MlasReduceAddFloat32x4), then the n mod 4 last elements one at a time."""
    v = np.asarray(v, F32)
    n = v.shape[1]
    body = n // MEAN_LANES * MEAN_LANES
    acc = np.zeros((v.shape[0], MEAN_LANES), F32)
    for j in range(0, body, MEAN_LANES):
        acc = acc + v[:, j:j + MEAN_LANES]
    total = _lane_sum(acc)
    for j in range(body, n):
        total = total + v[:, j]
    return total


def batch_norm_global_avg_f32(x, za: int, scale_x, new_scale, new_bias, relu: bool, scale_out,
                              zp_out: int) -> np.ndarray:
    """DequantizeLinear, onnxruntime's BatchNormalization (x * new_scale + new_bias along axis 1, two roundings),
    Relu if asked, GlobalAveragePool (MLAS's global sum, global_sum_f32, / f32(H * W)), QuantizeLinear:
    [N, C, 1, 1] int8."""
    x = np.asarray(x)
    n, c, h, w = x.shape
    with np.errstate(all="ignore"):
        u = dequantize_f32(x, scale_x, za) * _f32_channel_view(new_scale, 4) + _f32_channel_view(new_bias, 4)
        if relu:
            u = np.maximum(u, F32(0))
        total = global_sum_f32(u.reshape(n * c, h * w))
        return quantize_f32(total / F32(h * w), scale_out, zp_out).reshape(n, c, 1, 1)


def batch_norm_params(scale, bias, mean, var, epsilon) -> tuple[np.ndarray, np.ndarray]:
    """onnxruntime's BatchNormalization (batch_norm.h) folded per channel, each float32 op rounded once:
    inv_std = 1 / sqrt(var + epsilon), new_scale = inv_std * scale, new_bias = bias - mean * new_scale."""
    with np.errstate(all="ignore"):
        inv_std = F32(1) / np.sqrt(f32(var) + F32(epsilon))
        new_scale = inv_std * f32(scale)
        return new_scale, f32(bias) - f32(mean) * new_scale


def channel_affine_f32(x, za: int, scale_x, new_scale, new_bias, scale_out, zp_out: int, lo: int,
                       hi: int) -> np.ndarray:
    """DequantizeLinear, then onnxruntime's BatchNormalization x * new_scale + new_bias along axis 1 (a
    product and a sum, each rounded to float32: no FMA), then QuantizeLinear, clipped to [lo, hi]."""
    x = np.asarray(x)
    with np.errstate(all="ignore"):
        fx = dequantize_f32(x, scale_x, za)
        u = fx * _f32_channel_view(new_scale, x.ndim) + _f32_channel_view(new_bias, x.ndim)
        return np.clip(quantize_f32(u, scale_out, zp_out), lo, hi).astype(np.int8)
