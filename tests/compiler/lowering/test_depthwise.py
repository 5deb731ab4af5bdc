"""Depthwise convolutions compiled onto nu.dwconv (race checking on) against tests/reference.py, bit for bit."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.build import build
from compiler.lowering.depthwise import depthwise_weights
from nnpsim.config import Config
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, rand8, requant_params, run, seeds


@st.composite
def depthwise_case(draw):
    c = draw(st.integers(2, 80))      # channels that do not fill the 32 columns (one is an ordinary conv)
    k = (draw(st.integers(1, 7)), draw(st.integers(1, 7)))  # up to 49 taps: more than the 32 rows
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 19))
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 19))
    return k, stride, dil, pad, (draw(st.integers(1, 2)), c, h, w)


@settings(max_examples=40, **SETTINGS)
@given(depthwise_case(), seeds, st.booleans(), st.booleans())
def test_depthwise_matches_reference(case, seed, with_bias, float_form):
    k, stride, dil, pad, xshape = case
    c = xshape[1]
    rng = np.random.default_rng(seed)
    w = rand8(rng, (c, 1) + k)
    bias = rng.integers(-(2**20), 2**20, size=c).astype(np.int32) if with_bias else None
    x_zp, zp = int(rng.integers(-128, 128)), int(rng.integers(-20, 20))
    lo, hi = int(rng.integers(-128, 0)), int(rng.integers(0, 128))
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=c, x_zp=x_zp, zp_out=zp, lo=lo, hi=hi)
    if float_form:
        kw["scale"] = rng.uniform(1e-4, 3e-2, size=c).astype(np.float32)
    else:
        kw["multiplier"], kw["shift"] = requant_params(rng, c, k[0] * k[1])
    op = ops.conv2d(xshape, w, bias, **kw)
    kernel = build(op)
    assert "nu.dwconv" in kernel.asm and "nu.conv " not in kernel.asm
    x = rand8(rng, xshape)
    got = run(kernel, x)
    np.testing.assert_array_equal(got, op.reference(x))
    if not float_form:
        np.testing.assert_array_equal(got, ref.conv2d(x, w, bias, **kw))


def test_depthwise_extremes_saturate():
    """Weights, inputs and biases at their extremes: accumulators near 2**31, outputs clamped both ways."""
    c, xshape = 40, (1, 40, 9, 11)
    w = np.where(np.arange(c)[:, None, None, None] % 2, -128, 127).astype(np.int8) * np.ones((1, 1, 3, 3), np.int8)
    bias = np.where(np.arange(c) % 3 == 0, 2**30, -(2**30)).astype(np.int32)
    x = np.where(np.indices(xshape).sum(axis=0) % 2, -128, 127).astype(np.int8)
    m, s = np.full(c, 2**30), np.full(c, 40)
    op = ops.conv2d(xshape, w, bias, padding=1, groups=c, x_zp=-128, multiplier=m, shift=s, zp_out=5)
    got = run(build(op), x)
    want = ref.conv2d(x, w, bias, padding=1, groups=c, x_zp=-128, multiplier=m, shift=s, zp_out=5)
    np.testing.assert_array_equal(got, want)
    assert got.min() == -128 and got.max() == 127


def test_depthwise_relu_fused():
    rng = np.random.default_rng(3)
    c, xshape = 33, (1, 33, 14, 14)
    w, bias = rand8(rng, (c, 1, 3, 3)), rng.integers(-9000, 9000, size=c).astype(np.int32)
    m, s = requant_params(rng, c, 9)
    conv = ops.conv2d(xshape, w, bias, stride=2, padding=1, groups=c, x_zp=2, multiplier=m, shift=s, zp_out=-7)
    relu = ops.relu(conv.output.shape, zp=-7)
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(run(build(conv, relu), x), relu.reference(conv.reference(x)))


def test_grouped_conv_keeps_nu_conv():
    """Two channels per group is not depthwise: it stays on nu.conv's block-diagonal weights."""
    rng = np.random.default_rng(4)
    w = rand8(rng, (8, 2, 3, 3))
    m, s = requant_params(rng, 8, 18)
    op = ops.conv2d((1, 8, 6, 6), w, None, padding=1, groups=4, multiplier=m, shift=s)
    kernel = build(op)
    assert "nu.dwconv" not in kernel.asm
    x = rand8(rng, (1, 8, 6, 6))
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))


def test_depthwise_on_an_array_with_fewer_columns_than_rows():
    """rows != cols: the blocks of IBUF and ABUF do not line up, so the block-diagonal nu.conv runs."""
    rng = np.random.default_rng(5)
    cfg = Config(nu_rows=32, nu_cols=16)
    w = rand8(rng, (20, 1, 3, 3))
    m, s = requant_params(rng, 20, 9)
    op = ops.conv2d((1, 20, 7, 7), w, None, padding=1, groups=20, multiplier=m, shift=s)
    kernel = build(op, config=cfg)
    assert "nu.dwconv" not in kernel.asm
    x = rand8(rng, (1, 20, 7, 7))
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))


def test_depthwise_weight_blocks():
    """Per block: the int32 biases little-endian, then [kh][kw][lane] weights; zero lanes past the channels."""
    w = np.arange(-20, 20, dtype=np.int8).reshape(10, 1, 2, 2)
    bias = np.arange(10, dtype=np.int32) * -1000
    nw = depthwise_weights(w, bias, 8)
    assert nw.blocks.shape == (2, 1, (4 + 4) * 8) and nw.cb_start == (0, 1) and nw.block_bytes == 64
    b1 = nw.blocks[1, 0]
    assert list(b1[:8].view("<i4")) == [-8000, -9000]
    assert (b1[8:32] == 0).all()
    taps = b1[32:].reshape(2, 2, 8)
    assert list(taps[1, 0, :2]) == [w[8, 0, 1, 0], w[9, 0, 1, 0]] and (taps[:, :, 2:] == 0).all()
