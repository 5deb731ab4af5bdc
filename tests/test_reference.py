"""tests/reference.py against slow scalar loops in plain Python ints, and hand-computed cases."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests import reference as ref


# ---- scalar models: one Python int at a time, written straight from docs/semantics.md ----

def s_rshift_round(v: int, s: int) -> int:
    return v if s == 0 else (v + (1 << (s - 1))) >> s


def s_requant(acc: int, m: int, s: int, zp: int, lo: int, hi: int) -> int:
    return min(max(s_rshift_round(acc * m, s) + zp, lo), hi)


def s_conv2d(x, w, bias, stride, pad4, dil, groups, x_zp, m, s, zp, lo, hi):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    t, l, b, r = pad4
    oh = (h + t + b - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (wd + l + r - dil[1] * (kw - 1) - 1) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, oh, ow), dtype=np.int8)
    for ni in range(n):
        for oc in range(o):
            g = oc // og
            for y in range(oh):
                for xx in range(ow):
                    acc = 0 if bias is None else int(bias[oc])
                    for ci in range(cg):
                        for i in range(kh):
                            for j in range(kw):
                                hy = y * stride[0] + i * dil[0] - t
                                wx = xx * stride[1] + j * dil[1] - l
                                inside = 0 <= hy < h and 0 <= wx < wd
                                v = int(x[ni, g * cg + ci, hy, wx]) if inside else x_zp
                                acc += (v - x_zp) * int(w[oc, ci, i, j])
                    out[ni, oc, y, xx] = s_requant(acc, int(m[oc]), int(s[oc]), zp, lo, hi)
    return out


def s_pool(x, k, stride, pad4, kind, count_include_pad=True, x_zp=0):
    n, c, h, wd = x.shape
    t, l, b, r = pad4
    oh = (h + t + b - k[0]) // stride[0] + 1
    ow = (wd + l + r - k[1]) // stride[1] + 1
    out = np.zeros((n, c, oh, ow), dtype=np.int32 if kind == "sum" else np.int8)
    for ni in range(n):
        for ci in range(c):
            for y in range(oh):
                for xx in range(ow):
                    real, pads = [], 0
                    for i in range(k[0]):
                        for j in range(k[1]):
                            hy, wx = y * stride[0] + i - t, xx * stride[1] + j - l
                            if 0 <= hy < h and 0 <= wx < wd:
                                real.append(int(x[ni, ci, hy, wx]))
                            else:
                                pads += 1
                    if kind == "max":
                        out[ni, ci, y, xx] = max(real)
                    elif kind == "sum":
                        out[ni, ci, y, xx] = sum(real)
                    else:
                        total = sum(real) + (pads * x_zp if count_include_pad else 0)
                        cnt = k[0] * k[1] if count_include_pad else len(real)
                        q = (abs(total) + cnt // 2) // cnt
                        out[ni, ci, y, xx] = q if total >= 0 else -q
    return out


# ---- strategies ----

int8s = st.integers(-128, 127)


def arr(rng, shape, lo=-128, hi=127, dtype=np.int8):
    return rng.integers(lo, hi + 1, size=shape).astype(dtype)


@st.composite
def clamp(draw):
    lo = draw(int8s)
    return lo, draw(st.integers(lo, 127))


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg = draw(st.integers(1, 3))
    og = draw(st.integers(1, 2))
    kh, kw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad4 = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (kh - 1) + 1 - pad4[0] - pad4[2]), 6))
    w = draw(st.integers(max(1, dil[1] * (kw - 1) + 1 - pad4[1] - pad4[3]), 6))
    n = draw(st.integers(1, 2))
    return groups, cg, og, (kh, kw), stride, dil, pad4, (n, groups * cg, h, w), draw(st.integers(0, 2**32 - 1))


# ---- rounding and requantisation ----

@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**61), 2**61), st.integers(0, 62))
def test_rshift_round_matches_scalar(v, s):
    assert int(ref.rshift_round(v, s)) == s_rshift_round(v, s)


def test_rshift_round_halves_go_up_for_both_signs():
    # 5/2 = 2.5 -> 3; -5/2 = -2.5 -> -2; -7/4 = -1.75 -> -2; 6/4 = 1.5 -> 2
    assert ref.rshift_round([5, -5, -7, 6, -6, 7], [1, 1, 2, 2, 2, 0]).tolist() == [3, -2, -2, 2, -1, 7]


def test_rshift_round_rejects_bad_shift():
    with pytest.raises(ValueError):
        ref.rshift_round(1, 63)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**31), 2**31 - 1), st.integers(1, 2**31 - 1), st.integers(0, 62), int8s, clamp())
def test_requantize_acc_matches_scalar(acc, m, s, zp, lohi):
    lo, hi = lohi
    got = ref.requantize_acc(np.array([acc]), m, s, zp, lo, hi)
    assert got.dtype == np.int8 and int(got[0]) == s_requant(acc, m, s, zp, lo, hi)


def test_requantize_saturates_and_clamps():
    acc = np.array([10**6, -(10**6), 3, -3])
    # M = 2**30, S = 31: acc / 2; 3/2 = 1.5 -> 2, -3/2 = -1.5 -> -1
    assert ref.requantize_acc(acc, 2**30, 31).tolist() == [127, -128, 2, -1]
    assert ref.requantize_acc(acc, 2**30, 31, zp_out=5, lo=0, hi=100).tolist() == [100, 0, 7, 4]


def test_requantize_per_channel_along_axis():
    acc = np.array([[[4]], [[4]]])  # two channels
    got = ref.requantize_acc(acc[None], [2**30, 2**30], [31, 30], axis=1)
    assert got.ravel().tolist() == [2, 4]


def test_requantize_int32_overflow_is_an_error():
    with pytest.raises(OverflowError):
        ref.requantize(np.array([2**31 - 1], dtype=np.int32), zx=-(2**31), multiplier=2**31 - 1, shift=0)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["int8", "int32"]))
def test_requantize_op_matches_scalar(seed, dtype):
    rng = np.random.default_rng(seed)
    lo32 = -128 if dtype == "int8" else -(2**31)
    hi32 = 127 if dtype == "int8" else 2**31 - 1
    x = arr(rng, (2, 3, 5), lo32, hi32, np.int64).astype(dtype)
    zx = int(rng.integers(-128, 128)) if dtype == "int8" else 0
    m, s = int(rng.integers(1, 2**31)), int(rng.integers(0, 63))
    got = ref.requantize(x, zx=zx, multiplier=m, shift=s, zp_out=3, lo=-100, hi=120)
    want = [s_requant(int(v) - zx, m, s, 3, -100, 120) for v in x.ravel()]
    assert got.ravel().tolist() == want


# ---- conv2d and dense ----

@settings(max_examples=60, deadline=None)
@given(conv_case(), st.booleans())
def test_conv2d_matches_scalar(case, with_bias):
    groups, cg, og, k, stride, dil, pad4, xshape, seed = case
    rng = np.random.default_rng(seed)
    o = groups * og
    x = arr(rng, xshape)
    w = arr(rng, (o, cg) + k)
    bias = arr(rng, (o,), -(2**20), 2**20, np.int32) if with_bias else None
    m = rng.integers(2**30, 2**31, size=o)
    s = rng.integers(8, 24, size=o)
    x_zp, zp = int(rng.integers(-128, 128)), int(rng.integers(-128, 128))
    lo = int(rng.integers(-128, 0))
    got = ref.conv2d(x, w, bias, stride=stride, padding=pad4, dilation=dil, groups=groups, x_zp=x_zp,
                     multiplier=m, shift=s, zp_out=zp, lo=lo, hi=127)
    want = s_conv2d(x, w, bias, stride, pad4, dil, groups, x_zp, m, s, zp, lo, 127)
    assert got.dtype == np.int8
    np.testing.assert_array_equal(got, want)


def test_conv2d_padding_forms_agree():
    rng = np.random.default_rng(1)
    x, w = arr(rng, (1, 2, 5, 5)), arr(rng, (3, 2, 3, 3))
    a = ref.conv2d_acc(x, w, padding=1, x_zp=7)
    b = ref.conv2d_acc(x, w, padding=(1, 1), x_zp=7)
    c = ref.conv2d_acc(x, w, padding=(1, 1, 1, 1), x_zp=7)
    assert a.shape == (1, 3, 5, 5)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


def test_conv2d_padding_with_x_zp_contributes_nothing():
    x = np.full((1, 1, 1, 1), 10, dtype=np.int8)
    w = np.ones((1, 1, 3, 3), dtype=np.int8)
    # only the centre tap is real: (10 - 4) * 1
    assert ref.conv2d_acc(x, w, padding=1, x_zp=4).item() == 6


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 40), st.integers(1, 6), st.integers(0, 2**32 - 1))
def test_dense_matches_scalar(n, k, o, seed):
    rng = np.random.default_rng(seed)
    x, w = arr(rng, (n, k)), arr(rng, (k, o))
    bias = arr(rng, (o,), -5000, 5000, np.int32)
    m, s = rng.integers(2**30, 2**31, size=o), rng.integers(10, 20, size=o)
    x_zp = int(rng.integers(-128, 128))
    got = ref.dense(x, w, bias, x_zp=x_zp, multiplier=m, shift=s, zp_out=-3, lo=-128, hi=90)
    for i in range(n):
        for j in range(o):
            acc = int(bias[j]) + sum((int(x[i, q]) - x_zp) * int(w[q, j]) for q in range(k))
            assert int(got[i, j]) == s_requant(acc, int(m[j]), int(s[j]), -3, -128, 90)


# ---- pooling ----

@st.composite
def pool_case(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad4 = (draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)),
            draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)))
    h = draw(st.integers(max(1, k[0] - pad4[0] - pad4[2]), 7))
    w = draw(st.integers(max(1, k[1] - pad4[1] - pad4[3]), 7))
    return k, stride, pad4, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w), draw(st.integers(0, 2**32 - 1))


@settings(max_examples=60, deadline=None)
@given(pool_case())
def test_max_and_sum_pool_match_scalar(case):
    k, stride, pad4, shape, seed = case
    x = arr(np.random.default_rng(seed), shape)
    np.testing.assert_array_equal(ref.max_pool2d(x, k, stride, pad4), s_pool(x, k, stride, pad4, "max"))
    got = ref.sum_pool2d(x, k, stride, pad4)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, s_pool(x, k, stride, pad4, "sum"))


@settings(max_examples=60, deadline=None)
@given(pool_case(), st.booleans(), int8s)
def test_avg_pool_matches_scalar(case, cip, x_zp):
    k, stride, pad4, shape, seed = case
    x = arr(np.random.default_rng(seed), shape)
    got = ref.avg_pool2d(x, k, stride, pad4, count_include_pad=cip, x_zp=x_zp)
    np.testing.assert_array_equal(got, s_pool(x, k, stride, pad4, "avg", cip, x_zp))


def test_max_pool_padding_never_wins():
    x = np.full((1, 1, 2, 2), -128, dtype=np.int8)
    assert (ref.max_pool2d(x, 3, 1, 1) == -128).all()


def test_pool_window_all_padding_is_an_error():
    with pytest.raises(ValueError):
        ref.max_pool2d(np.zeros((1, 1, 2, 2), np.int8), 1, 1, (1, 0, 0, 0))


def test_avg_pool_rounds_half_away_from_zero():
    x = np.array([[[[1, 2]], [[-1, -2]], [[-1, -1]]]], dtype=np.int8)  # 1.5, -1.5, -1
    assert ref.avg_pool2d(x, (1, 2)).ravel().tolist() == [2, -2, -1]


def test_avg_pool_count_include_pad_and_x_zp():
    x = np.array([[[[9]]]], dtype=np.int8)
    # 3x3 window, one real element 9 and eight paddings worth x_zp = 3: (9 + 24) / 9 = 3.67 -> 4
    assert ref.avg_pool2d(x, 3, 1, 1, count_include_pad=True, x_zp=3).item() == 4
    assert ref.avg_pool2d(x, 3, 1, 1, count_include_pad=False, x_zp=3).item() == 9


def test_global_avg_pool():
    rng = np.random.default_rng(3)
    x = arr(rng, (2, 3, 4, 5))
    got = ref.global_avg_pool2d(x)
    assert got.shape == (2, 3, 1, 1)
    s = x.astype(np.int64).sum(axis=(2, 3))
    np.testing.assert_array_equal(got[:, :, 0, 0], np.sign(s) * ((np.abs(s) + 10) // 20))


# ---- elementwise ----

@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_add_mul_match_scalar(seed):
    rng = np.random.default_rng(seed)
    a, b = arr(rng, (3, 7)), arr(rng, (3, 7))
    za, zb, zp = (int(v) for v in rng.integers(-128, 128, size=3))
    ma, mb, m = (int(v) for v in rng.integers(1, 2**31, size=3))
    s = int(rng.integers(0, 63))
    got_add = ref.add(a, b, za=za, zb=zb, ma=ma, mb=mb, shift=s, zp_out=zp, lo=-120, hi=110)
    got_mul = ref.mul(a, b, za=za, zb=zb, multiplier=m, shift=s, zp_out=zp, lo=-120, hi=110)
    for i, (va, vb) in enumerate(zip(a.ravel().tolist(), b.ravel().tolist())):
        want = min(max(s_rshift_round((va - za) * ma + (vb - zb) * mb, s) + zp, -120), 110)
        assert int(got_add.ravel()[i]) == want
        want = min(max(s_rshift_round((va - za) * (vb - zb) * m, s) + zp, -120), 110)
        assert int(got_mul.ravel()[i]) == want


def test_relu_and_clip():
    x = np.array([-128, -5, 0, 5, 127], dtype=np.int8)
    assert ref.relu(x).tolist() == [0, 0, 0, 5, 127]
    assert ref.relu(x, zp=-5).tolist() == [-5, -5, 0, 5, 127]
    assert ref.clip(x, -6, 6).tolist() == [-6, -5, 0, 5, 6]
