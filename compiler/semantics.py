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


def requantize(x, zx, m, s, zp_out, lo, hi) -> np.ndarray:
    """clip(rshift_round((x - zx) * M, S) + zp_out, lo, hi); M, S per tensor or along axis 1."""
    x = np.asarray(x, dtype=np.int64)
    return requant(x - zx, _channel_view(m, x.ndim), _channel_view(s, x.ndim), zp_out, lo, hi)
