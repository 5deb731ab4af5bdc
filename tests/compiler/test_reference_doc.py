"""docs/semantics.md cannot go stale: its numpy functions agree with compiler.reference on random inputs.

The page's ```python blocks are extracted and run in one namespace; every op
is then compared with the compiler's model on random shapes, values and
parameters (non-zero zero points, shifts 0..62, negative values, per-channel
and per-tensor multipliers).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler import reference as sem
from compiler.errors import CompileError
from compiler.quant import quantize_multiplier
from tests.helpers.semantics_doc import DOC, PAGE, page_namespace

OPS = ["rshift_round", "requant", "scale_to_multiplier", "conv2d", "dense", "max_pool2d", "avg_pool2d",
       "sum_pool2d", "global_avg_pool2d", "add", "mul", "relu", "clip", "requantize",
       "conv2d_acc", "fma", "cvt", "requant_f32", "add_f32", "mul_f32", "avg_pool2d_f32",
       "global_avg_pool2d_f32", "quantize_f32", "dequantize_f32", "reduce_mean_f32"]
seeds = st.integers(0, 2**32 - 1)




def test_page_defines_every_op():
    missing = [name for name in OPS if not callable(DOC.get(name))]
    assert not missing, f"docs/semantics.md defines no {missing}"


def test_no_document_outside_the_repository_is_cited():
    for path in [PAGE.parent.parent / "README.md", *sorted(PAGE.parent.glob("*.md"))]:
        text = path.read_text()
        for word in ("brief", "NNP_SPEC", "shared/"):
            assert word not in text, f"{path.name} mentions {word!r}"


def rand8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def multipliers(rng, n: int, magnitude: float) -> tuple[np.ndarray, np.ndarray]:
    """n (M, S) pairs, S anywhere in [0, 62]; M mostly sized so that magnitude * M * 2**-S lands in int8."""
    s = rng.integers(0, 63, size=n)
    factor = 2.0 ** rng.uniform(-3, 8, size=n) / max(magnitude, 1.0)
    m = np.clip(np.round(factor * 2.0 ** s), 1, 2**31 - 1).astype(np.int64)
    return m, s.astype(np.int64)


def clamp(rng) -> tuple[int, int, int]:
    zp = int(rng.integers(-128, 128))
    lo = int(rng.integers(-128, 128)) if rng.random() < 0.5 else (zp if rng.random() < 0.5 else -128)
    hi = int(rng.integers(lo, 128)) if rng.random() < 0.5 else 127
    return zp, lo, hi


def same(got, want):
    want = np.asarray(want)
    assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
    np.testing.assert_array_equal(got, want)


# ---------------------------------------------------------------- scalar rules

@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**62) + 2**61, 2**62 - 2**61 - 1), st.integers(0, 62))
def test_rshift_round(v, s):
    same(DOC["rshift_round"](v, s), sem.rshift_round(v, s))
    assert int(DOC["rshift_round"](v, s)) == (v + (2 ** (s - 1) if s else 0)) // 2**s     # exact floor


def test_rshift_round_examples_in_the_text():
    assert int(DOC["rshift_round"](-5, 1)) == -2 and int(DOC["rshift_round"](5, 1)) == 3
    assert int(DOC["round_div"](-5, 2)) == -3 and int(DOC["round_div"](5, 2)) == 3


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.floats(min_value=2.0**-32, max_value=2.0**31 - 1, allow_nan=False),
                 st.integers(1, 62).map(lambda s: 2.0 ** (31 - s) * (1 - 2.0**-33))))   # M rounds up to 2**31
def test_scale_to_multiplier(scale):
    assert DOC["scale_to_multiplier"](scale) == quantize_multiplier(scale)


@pytest.mark.parametrize("scale", [2.0**-34, 2.0**32])
def test_scale_out_of_range_is_refused_by_both(scale):
    with pytest.raises(AssertionError):
        DOC["scale_to_multiplier"](scale)
    with pytest.raises(CompileError):
        quantize_multiplier(scale)


# ---------------------------------------------------------------- conv2d and dense

@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 2, 3]))
    cg, og = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, 3)) for _ in range(4))
    min_h = max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2])
    min_w = max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3])
    h, w = draw(st.integers(min_h, min_h + 7)), draw(st.integers(min_w, min_w + 7))
    return dict(groups=groups, cg=cg, og=og, k=k, stride=stride, dil=dil, pad=pad,
                n=draw(st.integers(1, 2)), h=h, w=w, bias=draw(st.booleans()), per_channel=draw(st.booleans()),
                seed=draw(seeds))


@settings(max_examples=120, deadline=None)
@given(conv_cases())
def test_conv2d(case):
    rng = np.random.default_rng(case["seed"])
    g, o = case["groups"], case["groups"] * case["og"]
    x = rand8(rng, (case["n"], g * case["cg"], case["h"], case["w"]))
    w = rand8(rng, (o, case["cg"]) + case["k"])
    bias = rng.integers(-(2**30), 2**30, size=o).astype(np.int32) if case["bias"] else None
    x_zp = int(rng.integers(-128, 128))
    m, s = multipliers(rng, o, 128.0 * np.abs(w).reshape(o, -1).sum(axis=1).mean())
    if not case["per_channel"]:
        m, s = int(m[0]), int(s[0])
    zp, lo, hi = clamp(rng)
    got = DOC["conv2d"](x, w, bias, stride=case["stride"], padding=case["pad"], dilation=case["dil"], groups=g,
                        x_zp=x_zp, M=m, S=s, zp_out=zp, lo=lo, hi=hi)
    same(got, sem.conv2d(x, w, bias, case["stride"], case["pad"], case["dil"], g, x_zp, m, s, zp, lo, hi))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 4), st.integers(1, 60), st.integers(1, 20), st.booleans(), st.booleans(), seeds)
def test_dense(n, k, o, with_bias, per_channel, seed):
    rng = np.random.default_rng(seed)
    x, w = rand8(rng, (n, k)), rand8(rng, (k, o))
    bias = rng.integers(-(2**30), 2**30, size=o).astype(np.int32) if with_bias else None
    x_zp = int(rng.integers(-128, 128))
    m, s = multipliers(rng, o, 128.0 * np.abs(w).sum(axis=0).mean())
    if not per_channel:
        m, s = int(m[0]), int(s[0])
    zp, lo, hi = clamp(rng)
    got = DOC["dense"](x, w, bias, x_zp=x_zp, M=m, S=s, zp_out=zp, lo=lo, hi=hi)
    same(got, sem.dense(x, w, bias, x_zp, m, s, zp, lo, hi))


# ---------------------------------------------------------------- pooling

@st.composite
def pool_cases(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = (draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)),
           draw(st.integers(0, k[0] - 1)), draw(st.integers(0, k[1] - 1)))
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 10))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 10))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 4)), h, w), k, stride, pad, draw(seeds)


@settings(max_examples=120, deadline=None)
@given(pool_cases(), st.booleans())
def test_pooling(case, count_include_pad):
    shape, k, stride, pad, seed = case
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    x_zp = int(rng.integers(-128, 128))
    same(DOC["max_pool2d"](x, k, stride, pad), sem.max_pool2d(x, k, stride, pad))
    same(DOC["sum_pool2d"](x, k, stride, pad), sem.sum_pool2d(x, k, stride, pad))
    same(DOC["avg_pool2d"](x, k, stride, pad, count_include_pad, x_zp),
         sem.avg_pool2d(x, k, stride, pad, count_include_pad, x_zp))
    op = ops.avg_pool2d(shape, k, stride, pad, count_include_pad=count_include_pad, x_zp=x_zp)
    same(DOC["avg_pool2d"](x, k, stride, pad, count_include_pad, x_zp), op.reference(x))


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 2), st.integers(1, 5), st.integers(1, 9), st.integers(1, 9), seeds)
def test_global_avg_pool2d(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    x = rand8(rng, (n, c, h, w))
    same(DOC["global_avg_pool2d"](x), ops.global_avg_pool2d(x.shape).reference(x))


# ---------------------------------------------------------------- elementwise

shapes = st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple)


@settings(max_examples=120, deadline=None)
@given(shapes, seeds)
def test_add_and_mul(shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    za, zb = (int(v) for v in rng.integers(-128, 128, size=2))
    (ma, mb), (s, _) = multipliers(rng, 2, 256.0)
    if rng.random() < 0.2:
        ma = 0                                   # one input ignored: legal
    zp, lo, hi = clamp(rng)
    got = DOC["add"](a, b, za=za, zb=zb, ma=int(ma), mb=int(mb), shift=int(s), zp_out=zp, lo=lo, hi=hi)
    same(got, sem.add(a, b, za, zb, int(ma), int(mb), int(s), zp, lo, hi))
    (m,), (s,) = multipliers(rng, 1, 256.0 * 256.0)
    got = DOC["mul"](a, b, za=za, zb=zb, M=int(m), S=int(s), zp_out=zp, lo=lo, hi=hi)
    same(got, sem.mul(a, b, za, zb, int(m), int(s), zp, lo, hi))


@settings(max_examples=80, deadline=None)
@given(shapes, seeds)
def test_relu_and_clip(shape, seed):
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    zp, lo, hi = clamp(rng)
    same(DOC["relu"](x, zp), ops.relu(shape, zp).reference(x))
    same(DOC["clip"](x, lo, hi), sem.clip(x, lo, hi))
    same(DOC["clip"](x, lo, hi), ops.clip(shape, lo, hi).reference(x))


@settings(max_examples=150, deadline=None)
@given(shapes, st.sampled_from(["int8", "int32"]), st.booleans(), seeds)
def test_requantize(shape, dtype, per_channel, seed):
    rng = np.random.default_rng(seed)
    per_channel = per_channel and len(shape) >= 2
    if dtype == "int8":
        x, zx = rand8(rng, shape), int(rng.integers(-128, 128))
    else:
        x = rng.integers(-(2**31), 2**31, size=shape).astype(np.int32) >> int(rng.integers(0, 31))
        zx = int(rng.integers(-(2**31), 2**31)) >> int(rng.integers(0, 32))
    magnitude = float(np.abs(x.astype(np.int64) - zx).mean()) + 1.0
    m, s = multipliers(rng, shape[1] if per_channel else 1, magnitude)
    limit = (2**62 - 1) // (max(127 - zx, zx + 128) if dtype == "int8" else 2**31 + abs(zx))
    m = np.minimum(m, limit)                     # the op's 62-bit limit on (x - zx) * M
    if not per_channel:
        m, s = int(m[0]), int(s[0])
    zp, lo, hi = clamp(rng)
    got = DOC["requantize"](x, zx=zx, M=m, S=s, zp_out=zp, lo=lo, hi=hi)
    same(got, sem.requantize(x, zx, m, s, zp, lo, hi))
    op = ops.requantize(shape, in_dtype=dtype, zx=zx, multiplier=m, shift=s, zp_out=zp, lo=lo, hi=hi)
    same(got, op.reference(x))


# ---------------------------------------------------------------- float32 forms

F32 = np.float32


def scales(rng, n: int, lo: float = -8.0, hi: float = 0.0) -> np.ndarray:
    """n float32 scales spread over [2**lo, 2**hi], a fifth of them powers of two (exact ties)."""
    s = (2.0 ** rng.uniform(lo, hi, size=n)).astype(F32)
    pow2 = rng.random(n) < 0.2
    s[pow2] = (2.0 ** rng.integers(int(lo), int(hi) + 1, size=int(pow2.sum()))).astype(F32)
    return s


def same_f32(got, want):
    got, want = np.asarray(got, F32), np.asarray(want, F32)
    assert got.shape == want.shape, (got.shape, want.shape)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@settings(max_examples=150, deadline=None)
@given(seeds)
def test_fma_and_cvt(seed):
    rng = np.random.default_rng(seed)
    a = rng.integers(-255, 256, size=60).astype(F32)
    b = scales(rng, 60, -10, 4)
    c = rng.uniform(-400, 400, size=60).astype(F32)
    c[::3] = rng.integers(-300, 300, size=20) + F32(0.5)     # near halves, where a double rounding would show
    same_f32(DOC["fma"](a, b, c), sem.fma_f32(a, b, c))
    t = np.concatenate([rng.uniform(-300, 300, 40), rng.integers(-200, 200, 20) + 0.5,
                        [2.0**31, -2.0**31, 2.0**31 - 128, np.inf, -np.inf, np.nan]]).astype(F32)
    same(DOC["cvt"](t), sem.cvt_int8(t))


def test_fma_rounds_once():
    """1 * (64 - 2**-40) + 2**30 (+ 128): a double rounding lands on a float32 midpoint; one rounding does not."""
    a = np.full(4, 1 + 2.0**-23, F32)
    b = np.array([64, -64, 64, -64], F32) * F32(1 - 2.0**-23)
    c = np.array([2.0**30, 2.0**30 + 128, 2.0**30 + 128, 2.0**30 + 256], F32)
    want = np.array([2.0**30, 2.0**30 + 128, 2.0**30 + 128, 2.0**30 + 256], F32)
    same_f32(sem.fma_f32(a, b, c), want)
    same_f32(DOC["fma"](a, b, c), want)
    assert not np.array_equal((a.astype(np.float64) * b + c).astype(F32), want)     # naive: differs


@settings(max_examples=200, deadline=None)
@given(st.sampled_from([300, 2**14, 2**24 + 7, 2**31 - 1]), st.booleans(), seeds)
def test_requant_f32(magnitude, per_channel, seed):
    rng = np.random.default_rng(seed)
    acc = rng.integers(-magnitude, magnitude + 1, size=(3, 5, 4)).astype(np.int64)
    s = scales(rng, 5, -30, 2) if per_channel else scales(rng, 1, -30, 2)[0]
    zp, lo, hi = clamp(rng)
    view = s.reshape(1, 5, 1) if per_channel else s
    same(DOC["requant_f32"](acc, view, zp, lo, hi), sem.requant_f32(acc, view, zp, lo, hi))
    same(DOC["requant_f32"](acc, view, zp, lo, hi), sem.requantize_f32(acc, 0, s, zp, lo, hi))


@settings(max_examples=60, deadline=None)
@given(conv_cases())
def test_conv2d_f32(case):
    rng = np.random.default_rng(case["seed"])
    g, o = case["groups"], case["groups"] * case["og"]
    x = rand8(rng, (case["n"], g * case["cg"], case["h"], case["w"]))
    w = rand8(rng, (o, case["cg"]) + case["k"])
    bias = rng.integers(-(2**20), 2**20, size=o).astype(np.int32) if case["bias"] else None
    x_zp = int(rng.integers(-128, 128))
    s = scales(rng, o, -14, -4) if case["per_channel"] else scales(rng, 1, -14, -4)[0]
    zp, lo, hi = clamp(rng)
    kw = dict(stride=case["stride"], padding=case["pad"], dilation=case["dil"], groups=g, x_zp=x_zp)
    acc = DOC["conv2d_acc"](x, w, bias, **kw)
    got = DOC["requant_f32"](acc, np.reshape(s, (1, -1, 1, 1)) if np.ndim(s) else s, zp, lo, hi)
    same(got, sem.conv2d_f32(x, w, bias, case["stride"], case["pad"], case["dil"], g, x_zp, s, zp, lo, hi))
    same(got, sem.conv2d_f32(x, w, bias, case["stride"], case["pad"], case["dil"], g, x_zp,
                             np.broadcast_to(s, (o,)), zp, lo, hi))


@settings(max_examples=100, deadline=None)
@given(shapes, seeds)
def test_add_and_mul_f32(shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    za, zb = (int(v) for v in rng.integers(-128, 128, size=2))
    sa, sb, sy = scales(rng, 3, -6, 0)
    zp, lo, hi = clamp(rng)
    u8 = bool(rng.integers(0, 2))            # onnxruntime's uint8 kernels, on the int8 views
    kw = dict(za=za, zb=zb, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zp, lo=lo, hi=hi, uint8=u8)
    same(DOC["add_f32"](a, b, **kw), sem.add_f32(a, b, za, zb, sa, sb, sy, zp, lo, hi, u8))
    sy = F32(sy * 64)
    kw["scale_out"] = sy
    same(DOC["mul_f32"](a, b, **kw), sem.mul_f32(a, b, za, zb, sa, sb, sy, zp, lo, hi, u8))


@settings(max_examples=80, deadline=None)
@given(pool_cases(), st.booleans(), st.booleans(), st.booleans())
def test_pooling_f32(case, count_include_pad, whole_plane, quantize_linear):
    shape, k, stride, pad, seed = case
    rng = np.random.default_rng(seed)
    if whole_plane:                       # onnxruntime's fallback to the global average pool
        k, pad = shape[2:], (0, 0, 0, 0)
    x = rand8(rng, shape)
    x_zp, zp = (int(v) for v in rng.integers(-128, 128, size=2))
    sx, sy = scales(rng, 2, -6, 0)
    u8 = bool(rng.integers(0, 2)) and not whole_plane and not quantize_linear
    got = DOC["avg_pool2d_f32"](x, k, stride, pad, count_include_pad, x_zp=x_zp, scale_x=sx, scale_out=sy,
                                zp_out=zp, uint8=u8, quantize_linear=quantize_linear)
    same(got, sem.avg_pool2d_f32(x, k, stride, pad, count_include_pad, x_zp, sx, sy, zp, u8, quantize_linear))
    same(DOC["global_avg_pool2d_f32"](x, x_zp=x_zp, scale_x=sx, scale_out=sy, zp_out=zp),
         sem.global_avg_pool2d_f32(x, x_zp, sx, sy, zp))


@settings(max_examples=40, deadline=None)
@given(seeds, st.integers(1, 2), st.integers(1, 9), st.integers(1, 23), st.integers(1, 23), st.booleans())
def test_reduce_mean_f32(seed, n, c, h, w, tie):
    rng = np.random.default_rng(seed)
    x = rand8(rng, (n, c, h, w))
    x_zp, zp = (int(v) for v in rng.integers(-128, 128, size=2))
    sx, sy = scales(rng, 2, -6, 0)
    if tie:                               # means on half-integers: the summation order decides
        sy = F32(sx * F32(2.0 / (h * w)))
    same(DOC["reduce_mean_f32"](x, x_zp=x_zp, scale_x=sx, scale_out=sy, zp_out=zp),
         sem.reduce_mean_f32(x, x_zp, sx, sy, zp))


@settings(max_examples=100, deadline=None)
@given(seeds)
def test_quantize_and_dequantize_f32(seed):
    rng = np.random.default_rng(seed)
    s = scales(rng, 1, -10, 3)[0]
    zp = int(rng.integers(-128, 128))
    x = np.concatenate([rng.uniform(-300, 300, 50) * s, (rng.integers(-300, 300, 30) + 0.5) * s,
                        [np.nan, np.inf, -np.inf, 0.0, -0.0]]).astype(F32)
    same(DOC["quantize_f32"](x, s, zp), sem.quantize_f32(x, s, zp))
    q = np.arange(-128, 128).astype(np.int8)
    same_f32(DOC["dequantize_f32"](q, s, zp), sem.dequantize_f32(q, s, zp))


# ---------------------------------------------------------------- the comparison can fail

def test_outputs_are_not_degenerate():
    """On a plain case every op's output spreads over many values (the comparisons above are not all on clamps)."""
    rng = np.random.default_rng(11)
    x, w = rand8(rng, (1, 8, 9, 9)), rand8(rng, (16, 8, 3, 3))
    m, s = quantize_multiplier(1 / (74.0 * 74.0 * math.sqrt(72)) * 30)
    y = DOC["conv2d"](x, w, None, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), x_zp=-3, M=m, S=s)
    assert len(np.unique(y)) > 60
    y = DOC["add"](x, x[:, ::-1], za=4, zb=-7, ma=3 << 14, mb=5 << 13, shift=15, zp_out=2)
    assert len(np.unique(y)) > 100
    assert len(np.unique(DOC["avg_pool2d"](x, (2, 2), (1, 1), (1, 1, 1, 1), False, 0))) > 60


@pytest.mark.parametrize("original, changed", [
    ("constant_values=x_zp) - x_zp", "constant_values=0) - x_zp"),     # padding filled with 0, not x_zp
    ("half = np.where(s > 0", "half = np.where(s > 1"),                # rounding dropped for s = 1
    ("q = (np.abs(s) + n // 2) // n", "q = (np.abs(s) + n // 2 - 1) // n"),   # halves rounded down
])
def test_a_changed_formula_is_caught(original, changed):
    text = PAGE.read_text()
    assert original in text
    bad = page_namespace(text.replace(original, changed))
    rng = np.random.default_rng(5)
    x = rand8(rng, (1, 4, 6, 6))
    w = rand8(rng, (4, 4, 3, 3))
    mismatches = 0
    for s in range(0, 16):
        want = sem.conv2d(x, w, None, (1, 1), (1, 1, 1, 1), (1, 1), 1, 17, 1 << 20, 20 + s, 0, -128, 127)
        got = bad["conv2d"](x, w, None, stride=(1, 1), padding=(1, 1, 1, 1), dilation=(1, 1), x_zp=17,
                            M=1 << 20, S=20 + s)
        mismatches += not np.array_equal(got, want)
        got = bad["rshift_round"](np.arange(-64, 64), 1)
        mismatches += not np.array_equal(got, sem.rshift_round(np.arange(-64, 64), 1))
    xs = rand8(rng, (1, 2, 5, 5))
    mismatches += not np.array_equal(bad["avg_pool2d"](xs, (2, 2), (1, 1), (0, 0, 0, 0)),
                                     sem.avg_pool2d(xs, (2, 2), (1, 1), (0, 0, 0, 0), True, 0))
    assert mismatches, "the test would not notice this change"


@pytest.mark.parametrize("original, changed", [
    ("return np.clip(np.rint(v).astype(np.int64) + zp_out, lo, hi)",
     "return np.clip(np.floor(v + 0.5).astype(np.int64) + zp_out, lo, hi)"),        # ties rounded up
    ("return np.clip(cvt(fma(f32(a), ra, fma(f32(b), rb, c)), uint8), lo, hi)",
     "return np.clip(cvt(c + f32(a) * ra + f32(b) * rb, uint8), lo, hi)"),           # the SSE2 kernel
    ("cvt(f32(p) * r + zy, uint8)", "cvt(f32(p) * r, uint8) + zy"),                  # zp after rounding
])
def test_a_changed_float_formula_is_caught(original, changed):
    text = PAGE.read_text()
    assert original in text
    bad = page_namespace(text.replace(original, changed))
    acc = np.arange(-301, 301)
    mismatches = int(not np.array_equal(bad["requant_f32"](acc, F32(0.5), 3), sem.requant_f32(acc, F32(0.5), 3)))
    a = np.repeat(np.arange(-128, 128), 256).astype(np.int8)
    b = np.tile(np.arange(-128, 128), 256).astype(np.int8)
    for sa, sb, sy, za, zb, zp in [(0.05, 0.031, 0.07, 3, -9, 11), (0.3, 0.2, 0.11, -100, 42, -7),
                                   (0.0123, 0.0456, 0.0391, 17, 5, -60)]:
        kw = dict(za=za, zb=zb, scale_a=F32(sa), scale_b=F32(sb), scale_out=F32(sy), zp_out=zp)
        mismatches += not np.array_equal(bad["add_f32"](a, b, **kw),
                                         sem.add_f32(a, b, za, zb, F32(sa), F32(sb), F32(sy), zp, -128, 127))
        kw["scale_out"] = F32(sy * 50)
        mismatches += not np.array_equal(bad["mul_f32"](a, b, **kw),
                                         sem.mul_f32(a, b, za, zb, F32(sa), F32(sb), F32(sy * 50), zp, -128, 127))
    assert mismatches, "the test would not notice this change"


@given(seeds)
@settings(max_examples=20, deadline=None)
def test_softmax_matches_the_page(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(v) for v in rng.integers(1, 5, size=int(rng.integers(0, 3)))) + (int(rng.integers(1, 40)),)
    x, xs, ys = rand8(rng, shape), float(rng.uniform(0.002, 0.5)), float(rng.uniform(0.001, 0.05))
    zp = int(rng.integers(-128, 128))
    assert np.array_equal(DOC["softmax"](x, xs, ys, zp), ops.softmax(shape, x_scale=xs, y_scale=ys, zp_out=zp)
                          .reference(x))
