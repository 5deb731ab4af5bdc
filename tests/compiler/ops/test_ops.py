"""compiler.ops: validation errors, tensors, and .reference() against tests/reference.py."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.errors import CompileError
from tests import reference as ref

seeds = st.integers(0, 2**32 - 1)


def rand8(rng, shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


@st.composite
def conv_params(draw):
    groups = draw(st.sampled_from([1, 2, 4]))
    cg, og = draw(st.integers(1, 4)), draw(st.integers(1, 3))
    if draw(st.booleans()):            # depthwise
        cg, og = 1, 1
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, 3)) for _ in range(4))
    min_h = max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2])
    min_w = max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3])
    h, w = draw(st.integers(min_h, min_h + 8)), draw(st.integers(min_w, min_w + 8))
    return groups, cg, og, k, stride, dil, pad, (draw(st.integers(1, 2)), groups * cg, h, w)


@settings(max_examples=80, deadline=None)
@given(conv_params(), seeds, st.booleans(), st.booleans())
def test_conv2d_reference_agrees(params, seed, with_bias, per_channel):
    groups, cg, og, k, stride, dil, pad, xshape = params
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**24), 2**24, size=o).astype(np.int32) if with_bias else None
    m = rng.integers(1, 2**31, size=o) if per_channel else int(rng.integers(1, 2**31))
    s = rng.integers(0, 40, size=o) if per_channel else int(rng.integers(0, 40))
    x_zp, zp = (int(v) for v in rng.integers(-128, 128, size=2))
    lo = int(rng.integers(-128, 128))
    hi = int(rng.integers(lo, 128))
    op = ops.conv2d(xshape, w, bias, stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=x_zp,
                    multiplier=m, shift=s, zp_out=zp, lo=lo, hi=hi)
    x = rand8(rng, xshape)
    want = ref.conv2d(x, w, bias, stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=x_zp,
                      multiplier=np.broadcast_to(m, (o,)), shift=np.broadcast_to(s, (o,)), zp_out=zp,
                      lo=lo, hi=hi)
    assert op.output.shape == want.shape and op.output.dtype == "int8"
    np.testing.assert_array_equal(op.reference(x), want)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 5), st.integers(1, 70), st.integers(1, 40), seeds)
def test_dense_reference_agrees(n, k, o, seed):
    rng = np.random.default_rng(seed)
    w, bias = rand8(rng, (k, o)), rng.integers(-1000, 1000, size=o).astype(np.int32)
    m, s = rng.integers(1, 2**31, size=o), rng.integers(0, 40, size=o)
    op = ops.dense((n, k), w, bias, x_zp=-7, multiplier=m, shift=s, zp_out=4, lo=-100, hi=100)
    x = rand8(rng, (n, k))
    want = ref.dense(x, w, bias, x_zp=-7, multiplier=m, shift=s, zp_out=4, lo=-100, hi=100)
    np.testing.assert_array_equal(op.reference(x), want)


@st.composite
def pool_params(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = None if draw(st.booleans()) else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 9))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 9))
    return k, stride, pad, (draw(st.integers(1, 2)), draw(st.integers(1, 3)), h, w)


@settings(max_examples=80, deadline=None)
@given(pool_params(), seeds, st.booleans(), st.integers(-128, 127))
def test_pool_reference_agrees(params, seed, cip, x_zp):
    k, stride, pad, shape = params
    x = rand8(np.random.default_rng(seed), shape)
    np.testing.assert_array_equal(ops.max_pool2d(shape, k, stride, pad).reference(x),
                                  ref.max_pool2d(x, k, stride, pad))
    got = ops.sum_pool2d(shape, k, stride, pad).reference(x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, ref.sum_pool2d(x, k, stride, pad))
    np.testing.assert_array_equal(ops.avg_pool2d(shape, k, stride, pad, cip, x_zp).reference(x),
                                  ref.avg_pool2d(x, k, stride, pad, count_include_pad=cip, x_zp=x_zp))
    np.testing.assert_array_equal(ops.global_avg_pool2d(shape).reference(x), ref.global_avg_pool2d(x))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), seeds)
def test_elementwise_reference_agrees(shape, seed):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    za, zb, zp = (int(v) for v in rng.integers(-128, 128, size=3))
    ma, mb, s = int(rng.integers(0, 2**31)), int(rng.integers(0, 2**31)), int(rng.integers(0, 63))
    lo = int(rng.integers(-128, 128))
    hi = int(rng.integers(lo, 128))
    kw = dict(zp_out=zp, lo=lo, hi=hi)
    np.testing.assert_array_equal(ops.add(shape, za=za, zb=zb, ma=ma, mb=mb, shift=s, **kw).reference(a, b),
                                  ref.add(a, b, za=za, zb=zb, ma=ma, mb=mb, shift=s, **kw))
    m = max(ma, 1)
    np.testing.assert_array_equal(ops.mul(shape, za=za, zb=zb, multiplier=m, shift=s, **kw).reference(a, b),
                                  ref.mul(a, b, za=za, zb=zb, multiplier=m, shift=s, **kw))
    np.testing.assert_array_equal(ops.relu(shape, zp).reference(a), ref.relu(a, zp))
    np.testing.assert_array_equal(ops.clip(shape, lo, hi).reference(a), ref.clip(a, lo, hi))
    np.testing.assert_array_equal(
        ops.requantize(shape, in_dtype="int8", zx=za, multiplier=m, shift=s, **kw).reference(a),
        ref.requantize(a, zx=za, multiplier=m, shift=s, **kw))
    x32 = rng.integers(-(2**31), 2**31, size=shape).astype(np.int32)
    np.testing.assert_array_equal(
        ops.requantize(shape, in_dtype="int32", multiplier=m, shift=s, **kw).reference(x32),
        ref.requantize(x32, multiplier=m, shift=s, **kw))


def test_requantize_per_channel():
    rng = np.random.default_rng(5)
    x = rng.integers(-(2**31), 2**31, size=(2, 3, 4)).astype(np.int32)
    m, s = rng.integers(1, 2**31, size=3), rng.integers(20, 40, size=3)
    op = ops.requantize((2, 3, 4), in_dtype="int32", multiplier=m, shift=s)
    np.testing.assert_array_equal(op.reference(x), ref.requantize(x, multiplier=m, shift=s, axis=1))


def test_tensors_and_names():
    w = np.ones((8, 3, 3, 3), np.int8)
    op = ops.conv2d((1, 3, 10, 12), w, stride=2, padding=1, multiplier=2**30, shift=8)
    assert [t.name for t in op.inputs] == ["x"] and op.output.name == "y"
    assert op.output.shape == (1, 8, 5, 6)
    assert [t.name for t in ops.add((4,), ma=1, mb=1, shift=0).inputs] == ["a", "b"]
    assert ops.sum_pool2d((1, 1, 4, 4), 2).output.dtype == "int32"
    assert ops.requantize((4,), in_dtype="int32", multiplier=1, shift=0).inputs[0].dtype == "int32"


W = np.ones((4, 2, 3, 3), np.int8)
BAD = [
    (lambda: ops.conv2d((1, 2, 8), W, multiplier=1, shift=0), "x_shape"),
    (lambda: ops.conv2d((1, 2, 8, 0), W, multiplier=1, shift=0), r"x_shape\[3\]"),
    (lambda: ops.conv2d((1, 2, 8, 8), W.astype(np.float32), multiplier=1, shift=0), "weight"),
    (lambda: ops.conv2d((1, 2, 8, 8), W.astype(np.int64) * 200, multiplier=1, shift=0), "weight"),
    (lambda: ops.conv2d((1, 3, 8, 8), W, multiplier=1, shift=0), "input channels"),
    (lambda: ops.conv2d((1, 4, 8, 8), W, groups=3, multiplier=1, shift=0), "groups"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, stride=0, multiplier=1, shift=0), "stride"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, padding=(1, 2, 3), multiplier=1, shift=0), "padding"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, dilation=(1, 5), multiplier=1, shift=0), "window"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=[1, 2], shift=0), "multiplier"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=2**31, shift=0), "multiplier"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=1, shift=63), "shift"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, x_zp=128, multiplier=1, shift=0), "x_zp"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=1, shift=0, lo=5, hi=4), "lo"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, np.zeros(3, np.int32), multiplier=1, shift=0), "bias"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, [2**31 - 1] * 4, multiplier=1, shift=0), "overflow"),
    (lambda: ops.dense((2, 5), np.ones((4, 3), np.int8), multiplier=1, shift=0), "K"),
    (lambda: ops.dense((1, 70000), np.full((70000, 1), -128, np.int8), x_zp=127, multiplier=1,
                                 shift=0), "overflow"),
    (lambda: ops.max_pool2d((1, 1, 4, 4), 2, padding=2), "padding"),
    (lambda: ops.max_pool2d((1, 1, 4, 4), 5), "window"),
    (lambda: ops.avg_pool2d((1, 1, 4, 4), 2, count_include_pad=1), "count_include_pad"),
    (lambda: ops.add((2, 2), ma=-1, mb=1, shift=0), "ma"),
    (lambda: ops.mul((2, 2), multiplier=0, shift=0), "multiplier"),
    (lambda: ops.relu((2,), zp=200), "zp"),
    (lambda: ops.clip((2,), 3, 2), "lo"),
    (lambda: ops.requantize((2,), in_dtype="int16", multiplier=1, shift=0), "in_dtype"),
    (lambda: ops.requantize((2,), in_dtype="int32", zx=5, multiplier=2**31 - 1, shift=0), "62 bits"),
    (lambda: ops.requantize((4,), in_dtype="int8", multiplier=[1, 2], shift=0), "channel"),
    # the float forms (onnxruntime arithmetic)
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=1, shift=0, scale=0.5), "not both"),
    (lambda: ops.conv2d((1, 2, 8, 8), W), "multiplier=, shift= or scale="),
    (lambda: ops.conv2d((1, 2, 8, 8), W, multiplier=1), "multiplier=, shift= or scale="),
    (lambda: ops.conv2d((1, 2, 8, 8), W, scale=[0.5, 0.25]), r"shape \(4,\)"),
    (lambda: ops.conv2d((1, 2, 8, 8), W, scale=[0.5, 0.25, 0.0, 1.0]), r"scale\[2\] = 0.0 is not a positive"),
    (lambda: ops.dense((2, 5), np.ones((5, 3), np.int8), scale=float("nan")), "scale = nan"),
    (lambda: ops.dense((2, 5), np.ones((5, 3), np.int8), scale=1e-50), r"as float32: 0.0"),
    (lambda: ops.dense((2, 5), np.ones((5, 3), np.int8), scale="big"), "must be a number"),
    (lambda: ops.add((2, 2), scale_a=0.1, scale_b=0.1), "missing scale_out"),
    (lambda: ops.add((2, 2), ma=1, mb=1, shift=0, scale_a=0.1), "not both"),
    (lambda: ops.add((2, 2), scale_a=1e30, scale_b=0.1, scale_out=1e-30), r"scale_a / scale_out = inf"),
    (lambda: ops.add((2, 2), scale_a=-0.1, scale_b=0.1, scale_out=0.1), "scale_a = -0.1"),
    (lambda: ops.mul((2, 2), scale_a=1e-30, scale_b=1e-30, scale_out=1.0), r"scale_a \* scale_b / scale_out"),
    (lambda: ops.mul((2, 2), multiplier=3, shift=1, scale_out=1.0), "not both"),
    (lambda: ops.requantize((2, 3), in_dtype="int32", scale=[0.5, 0.5]), r"shape \(3,\)"),
    (lambda: ops.requantize((6,), in_dtype="int32", scale=[0.5] * 6), "channel axis"),
    (lambda: ops.avg_pool2d((1, 1, 4, 4), 2, zp_out=3), "zp_out = 3 needs scale_x= and scale_out="),
    (lambda: ops.avg_pool2d((1, 1, 4, 4), 2, scale_x=0.1), "both scale_x= and scale_out="),
    (lambda: ops.avg_pool2d((1, 1, 4, 4), 2, scale_x=0.1, scale_out=0.1, zp_out=128), "zp_out = 128"),
    (lambda: ops.global_avg_pool2d((1, 1, 4, 4), scale_x=1.0, scale_out=2.0**-16), r"outside \[2\*\*-32, 256\)"),
    (lambda: ops.global_avg_pool2d((1, 1, 4096, 4096), scale_x=1.0, scale_out=1.0 / 4096), "int32"),
]


@pytest.mark.parametrize("make,match", BAD)
def test_bad_arguments_are_compile_errors(make, match):
    with pytest.raises(CompileError, match=match):
        make()


def test_reference_checks_inputs():
    op = ops.relu((2, 3))
    with pytest.raises(CompileError, match="shape"):
        op.reference(np.zeros((3, 2), np.int8))
    with pytest.raises(CompileError, match="dtype"):
        op.reference(np.zeros((2, 3), np.int32))
    with pytest.raises(CompileError, match="2 input"):
        ops.add((2,), ma=1, mb=1, shift=0).reference(np.zeros(2, np.int8))
    assert isinstance(CompileError("x"), ValueError)


@settings(max_examples=60, deadline=None)
@given(conv_params(), seeds, st.booleans(), st.booleans())
def test_conv2d_f32_reference_is_the_integer_accumulator_through_requant_f32(params, seed, with_bias, per_channel):
    """The float form's reference: tests/reference.py's accumulators, then requant_f32 per output channel."""
    from compiler.reference import requant_f32
    groups, cg, og, k, stride, dil, pad, xshape = params
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**24), 2**24, size=o).astype(np.int32) if with_bias else None
    scale = (2.0 ** rng.uniform(-16, -4, size=o if per_channel else 1)).astype(np.float32)
    x_zp, zp = (int(v) for v in rng.integers(-128, 128, size=2))
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=x_zp)
    op = ops.conv2d(xshape, w, bias, **kw, scale=scale if per_channel else scale[0], zp_out=zp)
    x = rand8(rng, xshape)
    acc = ref.conv2d_acc(x, w, bias, **kw)
    want = requant_f32(acc, np.broadcast_to(scale, (o,))[None, :, None, None], zp)
    np.testing.assert_array_equal(op.reference(x), want)


def test_float_forms_keep_the_integer_fields_empty_and_say_so():
    c = ops.conv2d((1, 2, 8, 8), W, scale=np.float32(0.25))
    assert c.multiplier is None and c.shift is None and c.scale.dtype == np.float32 and c.scale.shape == (4,)
    assert ops.add((3,), scale_a=0.1, scale_b=0.2, scale_out=0.3).is_float
    assert not ops.add((3,), ma=1, mb=1, shift=0).is_float
    p = ops.avg_pool2d((1, 1, 4, 4), 4, scale_x=0.1, scale_out=0.2)
    assert p.is_float and p.is_global and p.zp_out == 0
    assert not ops.avg_pool2d((1, 1, 4, 4), 4, padding=1, scale_x=0.1, scale_out=0.2).is_global
