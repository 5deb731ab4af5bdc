"""The full-tap fold (schedule primitive im2col, lowering.layout.fold_taps): a conv's whole window
gathered into the NU's input rows, the NU running a 1x1 conv.  Compiled kernels on the simulator
(race checking on) against tests/reference.py, bit for bit, on random shapes that no tile divides."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler import schedule as sm
from compiler import search
from compiler.errors import CompileError
from compiler.build import build
from compiler.search import candidates
from compiler.lowering.layout import conv_view, fold_taps
from nnpsim.config import Config
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, rand8, requant_params, seeds

SMALL = dict(ibuf_bytes=8192, wbuf_bytes=16384, abuf_bytes=16384)     # several tiles, edge tiles
TWO_NUS = dict(nu_count=2, vu_count=2)                                # tiles dealt over two NUs


@st.composite
def tap_case(draw):
    c = draw(st.integers(1, 8))
    k = (draw(st.integers(3, 7)), draw(st.integers(3, 7)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 3)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 19))
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 19))
    return c, k, stride, dil, pad, (draw(st.integers(1, 2)), c, h, w), draw(st.integers(1, 40))


def folded_schedules(op, cfg: Config) -> list:
    """Every tiling of op with its taps folded, as the search builds them."""
    s = sm.Schedule(op, config=cfg).im2col("x")
    return [search._auto_nu(s, t, by, u) for t, by, u in search.nu_tilings(s.blocks[0], cfg)]


@settings(max_examples=40, **SETTINGS)
@given(tap_case(), seeds, st.booleans(), st.sampled_from([{}, SMALL, TWO_NUS]),
       st.sampled_from(["nchw", "nhwc"]), st.sampled_from(["nchw", "nhwc"]), st.data())
def test_tap_folded_conv_matches_reference(case, seed, with_bias, overrides, x_layout, y_layout, data):
    c, k, stride, dil, pad, xshape, o = case
    rng = np.random.default_rng(seed)
    w = rand8(rng, (o, c) + k)
    bias = rng.integers(-(2**15), 2**15, size=o).astype(np.int32) if with_bias else None
    m, s = requant_params(rng, o, c * k[0] * k[1])
    kw = dict(stride=stride, padding=pad, dilation=dil, x_zp=int(rng.integers(-128, 128)), multiplier=m,
              shift=s, zp_out=int(rng.integers(-20, 20)))
    op = replace(ops.conv2d(xshape, w, bias, **kw), x_layout=x_layout, y_layout=y_layout)   # DDR layouts
    cfg = Config(**overrides).validate()
    schedules = folded_schedules(op, cfg)
    kernel = build(op, config=cfg, schedule=data.draw(st.sampled_from(schedules)))
    assert "input, taps (0, 0.." in kernel.asm
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(kernel(x, check_races=True), ref.conv2d(x, w, bias, **kw))


def test_fold_taps_places_each_tap_in_one_block():
    """Tap k = i * KW + j of channel c is weight row (k // T) * rows + (k % T) * C + c, T = rows // C;
    the rows no tap fills are zero."""
    rng = np.random.default_rng(3)
    w = rand8(rng, (5, 3, 7, 7))
    view = fold_taps(conv_view(ops.conv2d((1, 3, 20, 20), w, stride=2, padding=3, multiplier=1, shift=8)), 32)
    assert view.taps.per_block == 10 and view.taps.blocks == 5 and view.weight.shape == (5, 160, 1, 1)
    folded = view.weight[:, :, 0, 0]
    filled = np.zeros(160, bool)
    for i in range(7):
        for j in range(7):
            b, r = view.taps.place(i * 7 + j)
            rows = b * 32 + r + np.arange(3)
            np.testing.assert_array_equal(folded[:, rows], w[:, :, i, j])
            filled[rows] = True
    assert not folded[:, ~filled].any()


def test_search_folds_the_taps_of_a_stem_and_keeps_the_column_fold_in_the_race():
    """A 3-channel 3x3 stride-2 stem: one block of taps (27 rows) against three passes of folded
    columns; both are candidates and the cheaper by the cost model (the tap fold) is built."""
    rng = np.random.default_rng(5)
    m, s = requant_params(rng, 32, 27)
    op = ops.conv2d((1, 3, 64, 64), rand8(rng, (32, 3, 3, 3)), None, stride=2, padding=1, multiplier=m, shift=s)
    found = [str(c) for c in candidates((op,), Config())]
    assert any("im2col" in c for c in found) and any("im2col" not in c for c in found)
    kernel = build(op)
    assert "s.im2col('x')" in str(kernel.schedule)
    x = rand8(rng, (1, 3, 64, 64))
    np.testing.assert_array_equal(kernel(x), op.reference(x))


def test_taps_are_not_folded_where_they_cost_more_passes():
    """64 channels of a 3x3 window: each tap fills two blocks, no fewer passes than nine taps."""
    rng = np.random.default_rng(6)
    op = ops.conv2d((1, 64, 8, 8), rand8(rng, (16, 64, 3, 3)), padding=1, multiplier=1, shift=10)
    assert not any("im2col" in str(c) for c in candidates((op,), Config()))


@pytest.mark.parametrize("make, message", [
    (lambda r: ops.conv2d((1, 40, 6, 6), rand8(r, (8, 40, 3, 3)), multiplier=1, shift=9), "C <= 32"),
    (lambda r: ops.conv2d((1, 4, 6, 6), rand8(r, (8, 4, 1, 1)), multiplier=1, shift=9), "more than one tap"),
    (lambda r: ops.conv2d((1, 4, 6, 6), rand8(r, (4, 1, 3, 3)), groups=4, multiplier=1, shift=9), "groups = 1"),
    (lambda r: ops.dense((3, 8), rand8(r, (8, 4)), multiplier=1, shift=9), "only a conv2d"),
])
def test_im2col_refuses_what_it_cannot_fold(make, message):
    with pytest.raises(CompileError, match=message):
        sm.Schedule(make(np.random.default_rng(0))).im2col("x")


def test_im2col_comes_first_and_once_and_replays_from_its_trace():
    rng = np.random.default_rng(1)
    op = ops.conv2d((1, 3, 9, 9), rand8(rng, (8, 3, 5, 5)), padding=2, multiplier=1, shift=12)
    with pytest.raises(CompileError, match="call it first"):
        sm.Schedule(op).split("oh", 4).im2col("x")
    with pytest.raises(CompileError, match="already gathers"):
        sm.Schedule(op).im2col("x").im2col("x")
    with pytest.raises(CompileError, match="only a conv2d's input x"):
        sm.Schedule(op).im2col("w")
    s = folded_schedules(op, Config())[0]
    again = sm.Schedule.from_trace(str(s), op)
    assert str(again) == str(s)
    x = rand8(rng, (1, 3, 9, 9))
    np.testing.assert_array_equal(build(op, schedule=again)(x, check_races=True), op.reference(x))
