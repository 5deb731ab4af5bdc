"""The movement lowering's staged loads (compiler/lowering/movement.py): strided slices and nearest
downsamplings whose DDR runs are short read dense ranges into DM and pick on chip; random shapes
(odd sizes, steps 2 and 3, starts not 0, backwards) bit-exact with numpy and priced exactly, on the
default machine and on one whose DM is too small to stage in; the slots of a tile that loads into its
slot directly beside staged ones (ConvNeXt's Transpose)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import CompileError, build, ops
from compiler.ir import Buffer, Dma
from compiler.lowering.double_buffer import pipeline
from compiler.lowering.movement import CH_STORE, STAGED_TILES, MoveLowering, tile_bursts, tile_shape
from nnpsim.config import Config

SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL_DM = Config(dm_bytes=64 * 1024)


def _run(op, x, cfg=None):
    k = build(op, config=cfg)
    y = k(x, check_races=True)
    np.testing.assert_array_equal(y, op.reference(x))
    assert k.predicted_cycles == k.stats.cycles          # the cost model prices the staged schedule exactly
    return k


def _lowering(op, cfg=None) -> MoveLowering:
    x = Buffer("x", "ddr", op.inputs[0].nbytes)
    y = Buffer("y", "ddr", op.output.nbytes)
    return MoveLowering(op, [x], y, cfg or Config(), "L0")


@st.composite
def strided_slices(draw):
    """A 4-D slice stepping by 2, 3 or -2 along rows and columns, from a start not 0 where room allows."""
    c, h, w = draw(st.integers(1, 16)), draw(st.integers(3, 45)), draw(st.integers(3, 99))
    starts, steps, counts = [0, 0], [1, 1], [1, c]
    for d in (h, w):
        step = draw(st.sampled_from([2, 3, -2]))
        s = draw(st.integers(0, d - 1))
        room = (d - 1 - s) // step + 1 if step > 0 else s // -step + 1
        starts.append(s), steps.append(step), counts.append(draw(st.integers(1, room)))
    return (1, c, h, w), tuple(starts), tuple(steps), tuple(counts)


@SETTINGS
@given(strided_slices(), st.booleans(), st.integers(0, 2 ** 31))
def test_random_strided_slices(case, small_dm, seed):
    shape, starts, steps, counts = case
    x = np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8)
    _run(ops.Slice(shape, starts, steps, counts), x, SMALL_DM if small_dm else None)


@SETTINGS
@given(st.integers(1, 12), st.integers(2, 30), st.integers(2, 60), st.sampled_from([2, 3]), st.integers(0, 2 ** 31))
def test_random_nearest_downsamplings(c, oh, ow, s, seed):
    shape = (1, c, oh * s + s - 1, ow * s)           # rows that do not divide by the factor too
    op = ops.resize_nearest(shape, (1, c, oh, ow), (1, 1, 1 / s, 1 / s), "asymmetric", "floor")
    _run(op, np.random.default_rng(seed).integers(-128, 128, shape, dtype=np.int8))


@pytest.mark.parametrize("cfg", [None, SMALL_DM], ids=["dm", "small-dm"])
@pytest.mark.parametrize("op", [ops.Slice((1, 24, 61, 97), (0, 0, 1, 96), (1, 1, 3, -2), (1, 24, 20, 48)),
                                ops.Slice((1, 40, 45, 99), (0, 1, 2, 1), (1, 1, 2, 3), (1, 39, 22, 33))],
                         ids=["step3-backwards", "odd-starts"])
def test_staged_tiles_reuse_their_slots(op, cfg):
    """Enough tiles that every staged range and output slot is reused (odd sizes, steps 3 and -2)."""
    low = _lowering(op, cfg)
    assert low.staging and low.in_dm == (cfg is None)
    assert low.n_tiles() >= (STAGED_TILES if low.in_dm else 2)
    _run(op, np.random.default_rng(5).integers(-128, 128, op.inputs[0].shape, dtype=np.int8), cfg)


def test_every_other_row_and_column_stages_in_dm():
    """The stride-2 pick of 32x80x80 reads every other row whole into DM, in four tiles at least, its
    gathers on the stores' channels; bit-exact, priced exactly, within 1.5x its DDR bound."""
    op = ops.slice_op((1, 32, 80, 80), [0, 0], [80, 80], [2, 3], [2, 2])
    low = _lowering(op)
    assert low.staging and low.in_dm and low.n_tiles() >= STAGED_TILES
    assert {b.space for b in low.buffers()} == {"dm", "vbuf"}
    for k, step in enumerate(low.steps()):
        gathers = [s for s in step.compute if isinstance(s, Dma)]
        assert gathers and all(g.chan == CH_STORE[k % 2] and g.src.buf.space == "dm" for g in gathers)
    k = _run(op, np.random.default_rng(3).integers(-128, 128, op.inputs[0].shape, dtype=np.int8))
    assert k.stats.cycles <= 1.5 * k.roofline_cycles


def test_small_dm_stages_in_vbuf():
    """Where DM cannot hold three staged ranges beside what it keeps, they stay in VBUF, gathered on the
    loads' channels, still exact."""
    op = ops.slice_op((1, 8, 40, 40), [1, 1], [40, 40], [2, 3], [2, 2])
    low = _lowering(op, SMALL_DM)
    assert low.staging and not low.in_dm
    assert {b.space for b in low.buffers()} == {"vbuf"}
    _run(op, np.random.default_rng(4).integers(-128, 128, op.inputs[0].shape, dtype=np.int8), SMALL_DM)


EDGE_LOADS = ops.Transpose((1, 63, 19, 4), (0, 3, 2, 1))
"""Tiles of 4 x 8 x 63 of its [4, 19, 63] output stage ranges in DM, but the last tile, of 3 rows along
19, loads directly (its short runs touch fewer bursts than the range)."""


def test_edge_tiles_that_load_into_their_slot_get_three_slots():
    """A tile loading into its slot writes it in the loads stage, before the store of the tile two before
    is issued: with two slots that store would read the later tile's data, properly
    synchronised, so no race; three slots make it exact, priced exactly."""
    low = _lowering(EDGE_LOADS)
    assert low.staging and low.in_dm
    direct = [k for k, st in enumerate(low.steps())
              if any(isinstance(s, Dma) and s.dst.buf.space == "vbuf" for s in st.loads)]
    assert direct and min(direct) >= 2            # a direct load whose slot an earlier tile still stores
    assert len([b for b in low.buffers() if b.name.startswith(low.role) and b.space == "vbuf"]) == 3
    x = np.random.default_rng(7).integers(-128, 128, EDGE_LOADS.inputs[0].shape, dtype=np.int8)
    _run(EDGE_LOADS, x)


def test_two_slots_for_a_tile_that_loads_into_its_slot_are_refused():
    """The schedule the lowering made before (two slots): the pipeline's tile order check refuses it."""
    low = _lowering(EDGE_LOADS)
    low.slots.declare(low.role, "vbuf", math.prod(low.tile) * low.plan.elem, depth=2)
    with pytest.raises(CompileError, match=r"tile 2 writes L0_t0 before tile 0 reads it"):
        pipeline(low.steps())


def test_tiles_take_whole_bursts_where_tile_shape_cuts_them():
    """ViT-tiny's k ([192, 197] read at strides (1, 576)) and ConvNeXt's NCHW -> NHWC of 384 x 14 x 14: the
    tiles burst_tile picks touch no more DDR bursts than tile_shape's, here far fewer, and the kernels read
    and write no burst they do not fill; exact, priced exactly."""
    vit_k = ops.compose(ops.slice_op((1, 197, 3, 3, 64), [1], [2], [2]), ops.Transpose((1, 197, 3, 64), (0, 2, 3, 1)))
    convnext = ops.Transpose((1, 384, 14, 14), (0, 2, 3, 1))
    for op in (vit_k, convnext):
        low = _lowering(op)
        budget = math.prod(low.tile)
        assert tile_bursts(low.plan, low.tile, 64) < tile_bursts(low.plan, tile_shape(low.plan, budget), 64)
        k = _run(op, np.random.default_rng(2).integers(-128, 128, op.inputs[0].shape, dtype=np.int8))
        assert k.stats.ddr_burst_bytes == 2 * op.output.nbytes
