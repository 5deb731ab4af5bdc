"""An independent numpy model of the op semantics of docs/semantics.md, for tests only.

Every function takes and returns numpy arrays, computes in int64 and checks
that no intermediate leaves int64 (docs/semantics.md: no silent overflow).  This file
must not import the compiler: tests compare the compiler against it.
"""
from __future__ import annotations

import numpy as np

I64_LIMIT = 1 << 62  # |v| below this leaves room for the rounding term (<= 2**61)


def _i64(a) -> np.ndarray:
    return np.asarray(a, dtype=np.int64)


def _check_fits(v: np.ndarray, what: str) -> None:
    if v.size and np.abs(v).max() >= I64_LIMIT:
        raise OverflowError(f"{what} leaves 62 bits")


def rshift_round(v, s) -> np.ndarray:
    """(v + 2**(s-1)) >> s for s >= 1 and v for s == 0 (round half up), elementwise."""
    v, s = np.broadcast_arrays(_i64(v), _i64(s))
    if (s < 0).any() or (s > 62).any():
        raise ValueError("shift must be in [0, 62]")
    half = np.where(s > 0, np.left_shift(np.int64(1), np.maximum(s - 1, 0)), 0)
    return np.right_shift(v + half, s)


def requantize_acc(acc, multiplier, shift, zp_out=0, lo=-128, hi=127, axis=None) -> np.ndarray:
    """clip(rshift_round(acc * M, S) + zp_out, lo, hi) as int8; M, S per tensor or along `axis`."""
    acc = _i64(acc)
    m, s = _i64(multiplier), _i64(shift)
    if axis is not None and m.ndim:
        shape = [1] * acc.ndim
        shape[axis] = -1
        m, s = m.reshape(shape), s.reshape(shape)
    prod = acc * m
    _check_fits(prod, "requantise product")
    y = rshift_round(prod, s) + zp_out
    return np.clip(y, lo, hi).astype(np.int8)


def _padding4(padding) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) from an int, an (h, w) pair or a 4-tuple."""
    if np.ndim(padding) == 0:
        p = int(padding)
        return p, p, p, p
    p = tuple(int(v) for v in padding)
    if len(p) == 2:
        return p[0], p[1], p[0], p[1]
    return p  # type: ignore[return-value]


def _pair(v) -> tuple[int, int]:
    if np.ndim(v) == 0:
        return int(v), int(v)
    a, b = v
    return int(a), int(b)


def _pad_nchw(x: np.ndarray, pad4, value) -> np.ndarray:
    t, l, b, r = pad4
    return np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)), constant_values=value)


def _out_size(n: int, k: int, stride: int, dil: int, lo: int, hi: int) -> int:
    return (n + lo + hi - dil * (k - 1) - 1) // stride + 1


def _window_views(xp: np.ndarray, kh: int, kw: int, stride, dilation, oh: int, ow: int):
    """Yield (i, j, view [N, C, OH, OW]) for each kernel tap of a padded input."""
    sh, sw = stride
    dh, dw = dilation
    for i in range(kh):
        for j in range(kw):
            h0, w0 = i * dh, j * dw
            yield i, j, xp[:, :, h0:h0 + sh * (oh - 1) + 1:sh, w0:w0 + sw * (ow - 1) + 1:sw]


def conv2d_acc(x, w, bias=None, stride=1, padding=0, dilation=1, groups=1, x_zp=0) -> np.ndarray:
    """int64 accumulators [N, O, OH, OW] of a grouped convolution before requantisation."""
    x, w = _i64(x), _i64(w)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    stride, dilation, pad4 = _pair(stride), _pair(dilation), _padding4(padding)
    oh = _out_size(h, kh, stride[0], dilation[0], pad4[0], pad4[2])
    ow = _out_size(wd, kw, stride[1], dilation[1], pad4[1], pad4[3])
    xp = _pad_nchw(x, pad4, x_zp) - x_zp
    og = o // groups
    acc = np.zeros((n, o, oh, ow), dtype=np.int64)
    for g in range(groups):
        xg = xp[:, g * cg:(g + 1) * cg]
        wg = w[g * og:(g + 1) * og]
        for i, j, view in _window_views(xg, kh, kw, stride, dilation, oh, ow):
            acc[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", view, wg[:, :, i, j])
    if bias is not None:
        acc += _i64(bias)[None, :, None, None]
    return acc


def conv2d(x, w, bias=None, *, stride=1, padding=0, dilation=1, groups=1, x_zp=0,
           multiplier, shift, zp_out=0, lo=-128, hi=127) -> np.ndarray:
    """Quantised conv2d of section 4 (int8 NCHW out)."""
    acc = conv2d_acc(x, w, bias, stride, padding, dilation, groups, x_zp)
    return requantize_acc(acc, multiplier, shift, zp_out, lo, hi, axis=1)


def dense(x, w, bias=None, *, x_zp=0, multiplier, shift, zp_out=0, lo=-128, hi=127) -> np.ndarray:
    """Quantised dense layer: x [N, K] times w [K, O], then requantise per output."""
    acc = (_i64(x) - x_zp) @ _i64(w)
    if bias is not None:
        acc = acc + _i64(bias)[None, :]
    return requantize_acc(acc, multiplier, shift, zp_out, lo, hi, axis=1)


def _pool_setup(x, kernel, stride, padding):
    x = _i64(x)
    kh, kw = _pair(kernel)
    stride = _pair(kernel if stride is None else stride)
    pad4 = _padding4(padding)
    oh = _out_size(x.shape[2], kh, stride[0], 1, pad4[0], pad4[2])
    ow = _out_size(x.shape[3], kw, stride[1], 1, pad4[1], pad4[3])
    return x, kh, kw, stride, pad4, oh, ow


def _real_counts(x, kh, kw, stride, pad4, oh, ow) -> np.ndarray:
    """Number of real (non-padding) elements in each window, [OH, OW]."""
    ones = np.ones((1, 1) + x.shape[2:], dtype=np.int64)
    counts = np.zeros((oh, ow), dtype=np.int64)
    for _, _, view in _window_views(_pad_nchw(ones, pad4, 0), kh, kw, stride, (1, 1), oh, ow):
        counts += view[0, 0]
    if (counts == 0).any():
        raise ValueError("a pooling window lies entirely in the padding")
    return counts


def max_pool2d(x, kernel, stride=None, padding=0) -> np.ndarray:
    """Max over each window; padding never wins."""
    x, kh, kw, stride, pad4, oh, ow = _pool_setup(x, kernel, stride, padding)
    _real_counts(x, kh, kw, stride, pad4, oh, ow)
    xp = _pad_nchw(x, pad4, np.iinfo(np.int64).min)
    out = np.full(x.shape[:2] + (oh, ow), np.iinfo(np.int64).min, dtype=np.int64)
    for _, _, view in _window_views(xp, kh, kw, stride, (1, 1), oh, ow):
        out = np.maximum(out, view)
    return out.astype(np.int8)


def sum_pool2d(x, kernel, stride=None, padding=0, pad_value=0) -> np.ndarray:
    """Sum over each window as int32; padding contributes pad_value (0 for sum_pool2d)."""
    x, kh, kw, stride, pad4, oh, ow = _pool_setup(x, kernel, stride, padding)
    xp = _pad_nchw(x, pad4, pad_value)
    out = np.zeros(x.shape[:2] + (oh, ow), dtype=np.int64)
    for _, _, view in _window_views(xp, kh, kw, stride, (1, 1), oh, ow):
        out += view
    return out.astype(np.int32)


def div_round_away(s, n) -> np.ndarray:
    """sign(s) * ((|s| + n // 2) // n): division rounding half away from zero."""
    s, n = _i64(s), _i64(n)
    return np.sign(s) * ((np.abs(s) + n // 2) // n)


def avg_pool2d(x, kernel, stride=None, padding=0, count_include_pad=True, x_zp=0) -> np.ndarray:
    """Average pooling of section 4 (padding counts as x_zp only with count_include_pad)."""
    x, kh, kw, stride, pad4, oh, ow = _pool_setup(x, kernel, stride, padding)
    counts = _real_counts(x, kh, kw, stride, pad4, oh, ow)
    pad_value = x_zp if count_include_pad else 0
    s = sum_pool2d(x, (kh, kw), stride, pad4, pad_value).astype(np.int64)
    n = np.full((oh, ow), kh * kw, dtype=np.int64) if count_include_pad else counts
    return np.clip(div_round_away(s, n), -128, 127).astype(np.int8)


def global_avg_pool2d(x) -> np.ndarray:
    """avg_pool2d over the whole plane: [N, C, 1, 1]."""
    x = np.asarray(x)
    return avg_pool2d(x, x.shape[2:])


def add(a, b, *, za=0, zb=0, ma, mb, shift, zp_out=0, lo=-128, hi=127) -> np.ndarray:
    """clip(rshift_round((a - za) * ma + (b - zb) * mb, shift) + zp_out, lo, hi)."""
    v = (_i64(a) - za) * ma + (_i64(b) - zb) * mb
    _check_fits(v, "add")
    return np.clip(rshift_round(v, shift) + zp_out, lo, hi).astype(np.int8)


def mul(a, b, *, za=0, zb=0, multiplier, shift, zp_out=0, lo=-128, hi=127) -> np.ndarray:
    """clip(rshift_round((a - za) * (b - zb) * M, S) + zp_out, lo, hi)."""
    v = (_i64(a) - za) * (_i64(b) - zb) * multiplier
    _check_fits(v, "mul")
    return np.clip(rshift_round(v, shift) + zp_out, lo, hi).astype(np.int8)


def relu(x, zp=0) -> np.ndarray:
    """max(x, zp)."""
    return np.maximum(_i64(x), zp).astype(np.int8)


def clip(x, lo, hi) -> np.ndarray:
    """clip(x, lo, hi)."""
    return np.clip(_i64(x), lo, hi).astype(np.int8)


def requantize(x, *, zx=0, multiplier, shift, zp_out=0, lo=-128, hi=127, axis=None) -> np.ndarray:
    """clip(rshift_round((x - zx) * M, S) + zp_out, lo, hi) for int32 or int8 x."""
    return requantize_acc(_i64(x) - zx, multiplier, shift, zp_out, lo, hi, axis)
