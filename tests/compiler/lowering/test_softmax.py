"""ops.softmax on vu.softmax (compiler/lowering/softmax.py): kernels over random shapes and axes (rows
of 1, of 16, of lengths that divide nothing, of 1000, along the last axis and others), compared on every
element with the op's numpy model of onnxruntime, race-checked, the cost model's prediction equal to the
simulator's cycles; on small machines (tiles that split the inner dims, one DMA channel); every removed
wait caught, the table's load included; a row that cannot fit VBUF refused in one CompileError."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler import CompileError, build, ops
from compiler.ir import Buffer
from compiler.lowering.softmax import SoftmaxLowering
from compiler.quant import quantize_multipliers
from nnpsim import timing
from nnpsim.config import Config
from tests.helpers.mutation import kill_all

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(op, cfg=None):
    x = np.random.default_rng(op.row * 7 + len(op.shape)).integers(-128, 128, op.shape).astype(np.int8)
    kernel = build(op, config=cfg) if cfg else build(op)
    y = kernel(x, check_races=True)
    assert np.array_equal(y, op.reference(x)), np.argwhere(y != op.reference(x))[:4].tolist()
    assert kernel.predicted_cycles == kernel.stats.cycles
    assert "vu.softmax" in kernel.asm
    return kernel


@SETTINGS
@given(st.lists(st.integers(1, 23), min_size=1, max_size=4), st.data())
def test_softmax_on_random_shapes_and_axes(shape, data):
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    shape[axis] = data.draw(st.sampled_from([1, 16, 17, 33, shape[axis]]))
    x_scale = data.draw(st.floats(0.003, 0.5))
    y_scale = data.draw(st.sampled_from([1 / 256, 1 / 255, 0.01]))
    check(ops.softmax(tuple(shape), x_scale=x_scale, y_scale=y_scale, zp_out=data.draw(st.integers(-128, 127)),
                      axis=axis))


@pytest.mark.parametrize("shape, axis", [((1, 16, 4, 525), 1), ((3, 1000), -1), ((2, 7, 1000), 1), ((5, 1), -1)])
def test_softmax_dfl_and_long_rows(shape, axis):
    """The DFL's layout (16 channels of [1, 16, 4, A]), rows of 1000 along the last axis and along a middle
    one, rows of one element."""
    check(ops.softmax(shape, x_scale=0.06, y_scale=1 / 256, zp_out=-128, axis=axis))


def test_softmax_on_small_machines_splits_rows_over_tiles():
    """A 4 KiB VBUF cuts the inner dims into bursts (a row's elements stay together); one DMA channel."""
    op = ops.softmax((2, 16, 3, 150), x_scale=0.1, y_scale=1 / 256, zp_out=-128, axis=1)
    kernel = check(op, Config(vbuf_bytes=4096).validate())
    assert kernel.asm.count("vu.softmax vu0") > 2
    check(op, Config(dma_channels=1).validate())


def test_softmax_tiles_ramp_at_both_ends():
    """ViT-tiny's attention (591 rows of 197): the first and last tiles are whole lane groups smaller than the
    middle ones, the first command no longer than a middle tile's load; the tiles cover every row once."""
    cfg = Config()
    op = ops.softmax((1, 3, 197, 197), x_scale=0.06, y_scale=1 / 256, zp_out=-128, axis=-1)
    low = SoftmaxLowering(op, [Buffer("x", "ddr", 1)], Buffer("y", "ddr", 1), cfg, "S")
    tiles = low.tiles()
    counts = [n for _, n, _, _ in tiles]
    assert [o for o, *_ in tiles] == [sum(counts[:k]) for k in range(len(counts))] and sum(counts) == 591
    assert counts[0] == counts[-1] < min(counts[1:-1]) and counts[0] % low.group == 0
    load = -(-low.tile[0] * 197 // cfg.ddr_bytes_per_cycle)        # a middle tile at its most
    assert timing.vu_softmax_cycles(counts[0], 197, cfg.vu_bytes_per_cycle, cfg.vu_latency) <= load
    check(op)


def test_softmax_row_too_long_for_vbuf_is_one_compile_error():
    with pytest.raises(CompileError, match="a row of 2000 elements needs three VBUF slots"):
        build(ops.softmax((2, 2000), x_scale=0.1, y_scale=1 / 256), config=Config(vbuf_bytes=4096).validate())


@pytest.mark.parametrize("shape, axis", [((6, 16, 2, 20), 1), ((200, 33), -1)])
def test_every_removed_wait_is_caught(shape, axis):
    """Each wait of a softmax kernel, the one ordering the first vu.softmax after its table's load included.
    (Tiles that split the inner dims are left out: their stores' DDR intervals interleave, so the sync pass,
    which orders by intervals, orders two stores whose bytes are disjoint; the race checker rightly finds
    nothing when that wait goes.)"""
    op = ops.softmax(shape, x_scale=0.05, y_scale=1 / 256, zp_out=-128, axis=axis)
    kernel = build(op, config=Config(vbuf_bytes=4096).validate())
    assert "exponential table -> vbuf" in kernel.asm and kernel.asm.count("vu.softmax vu0") > 3
    x = np.random.default_rng(3).integers(-128, 128, op.shape).astype(np.int8)
    kill_all(kernel, [x], f"softmax {shape} axis {axis}")


def test_conv_then_softmax_reads_the_intermediate_from_dm():
    """conv2d -> softmax over its channels in one build: the intermediate stays in DM, the softmax's tiles
    load from there."""
    rng = np.random.default_rng(0)
    m, s = quantize_multipliers(rng.uniform(0.3, 1, 64) / 800)
    conv = ops.conv2d((1, 8, 4, 25), rng.integers(-128, 128, (64, 8, 1, 1)).astype(np.int8), None,
                      multiplier=m, shift=s)
    op = ops.softmax(conv.output.shape, x_scale=0.05, y_scale=1 / 256, zp_out=-128, axis=1)
    kernel = build(conv, op)
    x = rng.integers(-128, 128, (1, 8, 4, 25)).astype(np.int8)
    assert np.array_equal(kernel(x, check_races=True), op.reference(conv.reference(x)))
    assert kernel.predicted_cycles == kernel.stats.cycles and "stays on chip in DM" in kernel.asm
