"""The search's conv -> VU-rows candidate (search._conv_then_rows): the conv its best row-major tiling in all
the memories, the pool or elementwise consumer a row tile in the VBUF the conv leaves, interleaved."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import compiler
from compiler import interleave, kernel, ops, search
from compiler import pipeline as compile_pipeline
from compiler.lowering import driver
from compiler.schedule import Schedule
from nnpsim.config import Config
from tests.helpers.networks import SMALL_VU, conv_op, conv_pool


def _int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def built(chain, cfg: Config, lag: int | None):
    """The chain on _conv_then_rows's schedule, one kernel after another (lag None) or interleaved."""
    s = search._conv_then_rows(Schedule(*chain, config=cfg), cfg, driver.sites(tuple(chain), cfg)[0])
    assert s is not None, "no conv-then-rows schedule for the chain"
    kir, steps = driver.lower(s[0], cfg)
    kir.body = interleave.body(steps, lag)
    predicted, usage, report = compile_pipeline.schedule(kir, cfg)
    return kernel.finish(tuple(chain), kir, cfg, predicted, usage, report), steps


def stem(rng, h: int, w: int):
    """A ResNet stem at h x w: 7x7/2 conv + relu, 3 -> 64 channels, into a 3x3/2 max pool, pad 1."""
    a = conv_op(rng, (1, 3, h, w), 64, k=7, stride=2, relu=True)
    return a, ops.max_pool2d(a.output.shape, 3, 2, 1)


@settings(max_examples=6, deadline=None)
@given(c=st.integers(1, 20), h=st.integers(5, 23), w=st.integers(3, 21), lag=st.sampled_from([1, 3]),
       kind=st.sampled_from(["max", "avg", "sum"]), seed=st.integers(0, 99))
def test_random_conv_then_rows_chains_match_numpy_and_their_price(c, h, w, lag, kind, seed):
    """Random shapes (none need divide a tile): bit-exact with numpy, race-free, priced exactly."""
    rng = np.random.default_rng(seed)
    chain = conv_pool(rng, c, h, w, kind)
    k, _ = built(chain, Config(**SMALL_VU), lag)
    x = _int8(rng, chain[0].x_shape)
    want = chain[1].reference(chain[0].reference(x))
    np.testing.assert_array_equal(k(x, check_races=True), want)
    assert k.stats.cycles == k.predicted_cycles


def test_the_pool_follows_the_conv_row_band_by_row_band():
    """Every pool tile takes all channels of a few rows, so the pool starts before the conv ends."""
    rng = np.random.default_rng(3)
    chain = stem(rng, 61, 67)
    cfg = Config()
    k, steps = built(chain, cfg, 1)
    needs = interleave.needs(steps[0], steps[1])
    assert len(set(needs)) > 1 and needs[0] < len(steps[0]) - 1, needs
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), chain[1].reference(chain[0].reference(x)))
    assert k.stats.cycles == k.predicted_cycles


def test_a_stem_builds_cheaper_with_the_candidate(monkeypatch):
    """compiler.build of a stem takes the interleaved candidate where it is priced lower than every other
    (the pool no longer waits for the whole conv), bit-exact with numpy."""
    rng = np.random.default_rng(5)
    chain = stem(rng, 96, 90)
    cfg = Config()
    with_it = compiler.build(*chain, config=cfg)
    monkeypatch.setattr(search, "_conv_then_rows", lambda *a: None)
    without = compiler.build(*chain, config=cfg)
    assert with_it.predicted_cycles < without.predicted_cycles
    assert any(n.startswith("pipelining: interleaved") for n in with_it.ir.notes), with_it.ir.notes
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(with_it(x, check_races=True), chain[1].reference(chain[0].reference(x)))
    assert with_it.stats.cycles == with_it.predicted_cycles


def test_a_chain_of_two_convs_gets_no_conv_then_rows_candidate():
    """Two conv blocks and no VU block reading rows: row_by_row's and fitted's business, not this one's."""
    rng = np.random.default_rng(1)
    chain = (conv_op(rng, (1, 4, 8, 8), 8), conv_op(rng, (1, 8, 8, 8), 8))
    cfg = Config(**SMALL_VU)
    assert search._conv_then_rows(Schedule(*chain, config=cfg), cfg, driver.sites(chain, cfg)[0]) is None
