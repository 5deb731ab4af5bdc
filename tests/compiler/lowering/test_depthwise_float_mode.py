"""Depthwise convs in the NU's float mode compiled onto nu.fdwconv (lowering.depthwise): MLAS's float Conv and
QuantizeLinear on every element (tests/helpers/mlas.py), race checking on, the cost model's cycles the
simulator's, on arrays, NU and VU counts and DMA channels of several sizes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.build import build
from compiler.lowering.depthwise import float_depthwise_weights
from nnpsim.config import Config
from tests.helpers import mlas
from tests.helpers.kernels import SETTINGS, seeds

F32 = np.float32


@st.composite
def float_depthwise_case(draw):
    c = draw(st.integers(2, 80))      # channels that need not fill a block of columns
    k = (draw(st.sampled_from([1, 3, 5])), draw(st.sampled_from([1, 3, 5])))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 17))
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 17))
    return k, stride, dil, pad, (draw(st.integers(1, 2)), c, h, w)


def _float_depthwise(rng, case, relu: bool):
    """A QDQ depthwise conv as an ops.conv2d in float mode, and its parameters as tests.helpers.mlas takes them."""
    k, stride, dil, pad, shape = case
    c = shape[1]
    q = {"xs": F32(rng.uniform(0.02, 0.08)), "xz": int(rng.integers(-20, 20)),
         "w": rng.integers(-127, 128, (c, 1) + k).astype(np.int8), "ws": rng.uniform(0.002, 0.01, c).astype(F32),
         "bias": rng.integers(-3000, 3000, c).astype(np.int32), "ys": F32(0.05 * np.sqrt(k[0] * k[1])),
         "yz": int(rng.integers(-10, 10))}
    q["bias_scale"] = (q["xs"] * q["ws"]).astype(F32)
    op = ops.float_mode(
        ops.conv2d(shape, q["w"], q["bias"], stride=stride, padding=pad, dilation=dil, groups=c, x_zp=q["xz"],
                   scale=q["ws"], zp_out=q["yz"], lo=q["yz"] if relu else -128),
        q["xs"], q["ws"], q["ys"], (q["bias"].astype(F32) * q["bias_scale"]).astype(F32))
    return op, q


@settings(max_examples=14, **SETTINGS)
@given(float_depthwise_case(), seeds, st.booleans(), st.sampled_from([(32, 1, 1), (8, 1, 1), (16, 2, 2), (8, 2, 1)]),
       st.sampled_from([1, 2, 4]))
def test_a_float_depthwise_conv_on_nu_fdwconv_is_mlas_and_priced_exactly(case, seed, relu, machine, channels):
    """build() lowers it to nu.fdwconv alone (no integer or block-diagonal conv, no VU requantisation), and every
    output is MLAS's (M = 1 groups of 4 over each window, then the bias and QuantizeLinear): op.reference's, and
    tests.helpers.mlas's where it applies (no dilation)."""
    rng = np.random.default_rng(seed)
    op, q = _float_depthwise(rng, case, relu)
    array, nus, vus = machine
    kernel = build(op, config=Config(nu_rows=array, nu_cols=array, nu_count=nus, vu_count=vus,
                                     dma_channels=channels))
    used = {line.split()[0] for line in kernel.asm.splitlines() if line.strip().startswith(("nu.", "vu."))}
    assert used == {"nu.fdwconv"}, used
    x = rng.integers(-128, 128, op.x_shape).astype(np.int8)
    _, stride, dil, pad, _ = case
    got = kernel(x, check_races=True)
    np.testing.assert_array_equal(got, op.reference(x))
    if dil == (1, 1) and got.shape[2] * got.shape[3] > 1:     # tests.helpers.mlas has no dilation, nor MLAS's
        # kernel for one output pixel; op.reference, its model of the rest, has dilation
        np.testing.assert_array_equal(got, mlas.qdq_conv(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"],
                                                         q["bias_scale"], q["ys"], q["yz"], stride=stride, pads=pad,
                                                         group=op.groups, lo=0.0 if relu else -np.inf))
    assert kernel.predicted_cycles == kernel.stats.cycles


def test_float_depthwise_weights_are_nu_fdwconvs_rows():
    """Per block of cols channels: the float32 biases, the output scale in every lane (padding lanes too: the NU
    checks each), then tap (i, j) of channel b * cols + c at row 2 + i * kw + j, lane c; zeros past the channels."""
    rng = np.random.default_rng(4)
    op, q = _float_depthwise(rng, ((3, 5), (1, 1), (1, 1), (1, 2, 1, 2), (1, 11, 6, 7)), False)
    w = float_depthwise_weights(op.fmode, 4)
    assert w.blocks.dtype == F32 and w.blocks.shape == (3, 1, (2 + 15) * 4) and w.cb_start == (0, 1, 2)
    rows = w.blocks.reshape(3, 17, 4)
    for ch in range(12):
        b, c = divmod(ch, 4)
        real = ch < 11
        assert rows[b, 0, c] == (op.fmode.bias[ch] if real else 0) and rows[b, 1, c] == q["ys"]
        np.testing.assert_array_equal(rows[b, 2:, c], op.fmode.weight[ch, 0].reshape(-1) if real else 0)
    assert w.block_bytes == 17 * 4 * 4
