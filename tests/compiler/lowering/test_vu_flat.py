"""Elementwise ops on tensors of rank below 4 with several images (lowering.vu.elementwise_ncr): a detector's box
decoding on [anchors, 1].  Every operand holds the tensor as one run of bytes, so the lowering walks it as one;
each op is bit-exact with its numpy model, race-checked, priced exactly, and costs what the same bytes cost as
one image, where a tile per image would pay a DMA and a VU command per element."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import ops
from compiler.lowering.vu import elementwise_ncr

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TABLE = (np.arange(256) * 7 % 256 - 128).astype(np.int8)


def _op(kind: str, shape, b_shape=None):
    if kind == "add":
        return ops.add(shape, za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1, b_shape=b_shape)
    if kind == "float mul":
        return ops.mul(shape, za=3, zb=-2, scale_a=0.02, scale_b=0.03, scale_out=0.04, zp_out=1, b_shape=b_shape)
    if kind == "requantize":
        return ops.requantize(shape, in_dtype="int8", zx=2, scale=0.7, zp_out=-3)
    return ops.lut(shape, TABLE)


def _inputs(op, rng) -> list[np.ndarray]:
    return [rng.integers(-128, 128, t.shape).astype(np.int8) for t in op.inputs]


@pytest.mark.parametrize("kind", ["add", "float mul", "requantize", "lut"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 900), tail=st.sampled_from([(1,), (3,), (1, 1), (4, 1)]),
       scalar_b=st.booleans())
def test_an_op_on_several_images_of_few_elements_is_exact_and_costs_its_bytes(kind, seed, n, tail, scalar_b):
    shape = (n,) + tail
    b_shape = (1,) * len(shape) if scalar_b and kind in ("add", "float mul") else None
    op = _op(kind, shape, b_shape)
    assert elementwise_ncr(op) == (1, 1, int(np.prod(shape)))
    rng = np.random.default_rng(seed)
    xs = _inputs(op, rng)
    k = compiler.build(op)
    np.testing.assert_array_equal(k(*xs, check_races=True), op.reference(*xs))
    assert k.predicted_cycles == k.stats.cycles
    one = compiler.build(_op(kind, (1, int(np.prod(shape))), b_shape and (1, 1)))
    assert k.predicted_cycles <= one.predicted_cycles + 8


def test_a_four_axis_tensor_or_one_image_keeps_its_channels():
    assert elementwise_ncr(_op("add", (3, 5, 2, 7))) == (3, 5, 14)
    assert elementwise_ncr(_op("add", (1, 5, 7))) == (1, 5, 7)
    assert elementwise_ncr(_op("add", (6, 5, 7), (1, 5, 1))) == (6, 5, 7)      # b varies by channel
