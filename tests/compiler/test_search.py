"""The schedule search (compiler.search): a finalist left unpriced by its lower bound changes no choice."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

import compiler
from compiler import ops, search
from compiler.lowering import driver
from compiler.lowering.conv_plan import buffer_needs
from compiler.schedule import Schedule
from compiler.sizes import capacities
from nnpsim.config import Config
from tests.helpers.kernels import rand8
from tests.helpers.networks import SMALL_NU, conv_conv, conv_op, conv_pool, dw_op, inverted


def _conv(rng: np.random.Generator):
    c, o = int(rng.integers(1, 100)), int(rng.integers(1, 100))
    h, w = int(rng.integers(3, 28)), int(rng.integers(3, 28))
    k = int(rng.choice([1, 3]))
    groups = c if k == 3 and rng.random() < 0.3 else 1
    if groups > 1:
        o = c
    return ops.conv2d((1, c, h, w), rand8(rng, (o, c // groups, k, k)), rng.integers(-99, 99, o).astype(np.int32),
                      stride=int(rng.integers(1, 3)), padding=k // 2, groups=groups, multiplier=2**30, shift=24)


def test_the_bound_skips_finalists_and_keeps_every_choice(monkeypatch):
    # every finalist priced (the bound switched off) against the search as it runs: the same winner,
    # cycles, usage and program, on random convs (shapes dividing nothing, depthwise, strided, one NU
    # or two); and the bound must have skipped some finalists, or it was never put to the test
    skipped = []
    real = search._loses

    def counting(kir, priced_all, cfg):
        out = real(kir, priced_all, cfg)
        skipped.append(out)
        return out

    rng = np.random.default_rng(7)
    for n in range(5):
        op = _conv(rng)
        cfg = Config(nu_count=1 + n % 2, vu_count=1 + n % 2, dma_channels=(4, 2)[n % 3 == 2])
        monkeypatch.setattr(search, "_loses", counting)
        s1, kir1, (p1, u1, _), k1 = search._search((op,), cfg, None, None)
        monkeypatch.setattr(search, "_loses", lambda *a: False)
        s2, kir2, (p2, u2, _), k2 = search._search((op,), cfg, None, None)
        assert (k1, p1, u1, str(s1)) == (k2, p2, u2, str(s2))
        assert search.cost.instructions(kir1.body) == search.cost.instructions(kir2.body)
    assert any(skipped)


def test_a_chains_candidates_are_ranked_by_the_estimates_their_picks_made():
    # all_candidates hands the search each chain candidate's quick estimate of its first conv block, from
    # the picks that chose its tilings; ranking by them must be what estimating each candidate again gives,
    # and the row-by-row candidate's SLACK test must see quick() of the chain's own schedule
    rng = np.random.default_rng(11)
    chains = [conv_conv(rng, 8, 11), conv_conv(rng, 24, 17, out=40), inverted(rng, 8, 13), inverted(rng, 16, 9, 2),
              conv_pool(rng, 16, 19, 21)]
    ranked = 0
    for n, chain in enumerate(chains):
        cfg = Config(nu_count=1 + n % 2, vu_count=1 + n % 2)
        search.forget()
        for _ in range(2):                  # the second time from the memos of picks
            quick: list[float] = []
            found = search.all_candidates(tuple(chain), cfg, None, quick)
            first = next(k for k, b in enumerate(found[0].blocks) if b.kind == "nu")
            sites = driver.sites(tuple(chain), cfg)[0]
            assert quick == [search.estimate(s, cfg, first, sites) for s in found]
            assert search._ranked(found, cfg, None, quick) == search._ranked(found, cfg)
            own, own_quick = search._chain(Schedule(*chain, config=cfg), cfg, sites, True)
            assert sum(own_quick) == search.quick(own, cfg)
            assert [str(s) for s in found] == [str(s) for s in search.all_candidates(tuple(chain), cfg)]
        ranked += len(found) > 1
    assert ranked >= 2, "too few chains with several candidates to rank"


# ---------------------------------------------------------------------- fitted: tilings chosen together

def _assert_exact(chain: list, cfg: Config, schedule: Schedule, rng: np.random.Generator) -> None:
    """The chain built with `schedule` equals its ops' references in turn, race-free, priced exactly."""
    k = compiler.build(*chain, config=cfg, schedule=schedule)
    x = rand8(rng, chain[0].inputs[0].shape)
    want = x
    for op in chain:
        want = op.reference(want)
    np.testing.assert_array_equal(k(x, check_races=True), want)
    assert k.stats.cycles == k.predicted_cycles


def _fit_case(seed: int, hw: int, stride: int, cfg: Config):
    rng = np.random.default_rng(seed)
    chain = inverted(rng, int(rng.integers(3, 40)), hw, stride)
    return rng, chain, Schedule(*chain, config=cfg)


@pytest.mark.parametrize("seed, hw, stride, small", [(1, 13, 1, False), (2, 23, 2, True), (3, 17, 1, True)])
def test_fitted_tiles_every_conv_row_by_row_in_memories_shared(seed, hw, stride, small):
    """An inverted residual at sizes no tile divides: every block's tiling is row-major, the blocks'
    buffers fit the local memories side by side, the search offers the schedule (unless another
    candidate has the same tilings), and its kernel equals numpy's reference, race-free, in the
    cycles predicted."""
    cfg = Config(**SMALL_NU) if small else Config()
    rng, chain, base = _fit_case(seed, hw, stride, cfg)
    fit = search.fitted(base, cfg, driver.sites(tuple(chain), cfg)[0])
    assert fit is not None
    need = {m: 0 for m in ("ibuf", "wbuf", "abuf", "vbuf")}
    for b in fit.blocks:
        p, t = b.ctx["plan"], b.tiling()
        assert search.row_major(p, t), t
        for m, v in buffer_needs(p, t, b.ctx["residual"] is not None).items():
            if m in need:
                need[m] += v
    caps = capacities(cfg)
    assert all(need[m] <= caps[m] for m in need), need
    offered = [str(s) for s in search.all_candidates(tuple(chain), cfg)]
    assert str(fit) in offered
    _assert_exact(chain, cfg, fit, rng)


def test_fitted_needs_a_chain_of_convs():
    cfg = Config()
    rng, chain, _ = _fit_case(4, 9, 1, cfg)
    pool = ops.max_pool2d(chain[0].output.shape, 2)
    for ops_ in ((chain[0],), (chain[0], pool)):
        assert search.fitted(Schedule(*ops_, config=cfg), cfg, driver.sites(ops_, cfg)[0]) is None


# ---------------------------------------------------------------------- grown: the depthwise tile as large as fits

@pytest.mark.parametrize("seed, hw, stride, small", [(5, 19, 1, False), (6, 21, 2, False), (7, 15, 1, False),
                                                     (11, 17, 2, True)])
def test_grown_gives_the_depthwise_conv_the_largest_tile_that_fits_beside_the_others(seed, hw, stride, small):
    """An inverted residual at sizes no tile divides: each grown candidate differs from the interleavable one
    it comes from only in its depthwise block, whose tile is row-major and either the largest of every
    output block that fits (twice the rows or the columns does not) or its own in more IBUF slots; every block's
    buffers fit side by side at their slots; the search offers it; and its kernel equals numpy's
    reference, race-free, in the cycles predicted."""
    cfg = Config(**SMALL_NU) if small else Config()
    rng, chain, base = _fit_case(seed, hw, stride, cfg)
    found = driver.sites(tuple(chain), cfg)[0]
    made = search.interleavable(base, cfg, *search._chain(base, cfg, found, True), found)
    grown = search.grown(base, made)
    assert grown
    caps = capacities(cfg)
    offered = [str(s) for s in search.all_candidates(tuple(chain), cfg)]
    for g, _ in grown:
        src = next(s for s, _ in made if [b.tiling() for k, b in enumerate(s.blocks) if k != 1]
                   == [b.tiling() for k, b in enumerate(g.blocks) if k != 1])
        old, new = src.blocks[1].tiling(), g.blocks[1].tiling()
        p = g.blocks[1].ctx["plan"]
        assert p.depthwise and search.row_major(p, new) and new.obt == p.n_ob
        depths = g.blocks[1].lowering_depths()
        if (new.th, new.tw) == (old.th, old.tw):        # no larger tile fits: the same one in more slots
            assert depths["in"] == search.DW_IN_DEPTH > src.blocks[1].lowering_depths()["in"]
        assert new.th * new.tw >= old.th * old.tw
        need = {m: 0 for m in caps}
        for b in g.blocks:
            for m, v in buffer_needs(b.ctx["plan"], b.tiling(), False, b.lowering_depths()).items():
                need[m] += v
        assert all(need[m] <= caps[m] for m in caps), need
        for bigger in ({"th": new.th * 2}, {"tw": new.tw * 2}):
            t = replace(new, **bigger)
            if (new.th, new.tw) != (old.th, old.tw) and t.th <= p.oh and t.tw <= p.ow:
                more = dict(need)
                for m, v in buffer_needs(p, t, False, depths).items():
                    more[m] += v - buffer_needs(p, new, False, depths)[m]
                assert any(more[m] > caps[m] for m in caps), (new, t)
        assert str(g) in offered
        _assert_exact(chain, cfg, g, rng)


def test_the_search_takes_the_grown_depthwise_tile_where_it_is_cheaper():
    """MobileNetV2's 32 -> 192 -> 32 block at 28 x 28: an equal share of ABUF allows the depthwise conv one
    row a tile, two fit beside the other convs (which drain on the NU); the search's choice is the grown
    candidate, and no candidate is cheaper by more than the search's NEAR."""
    rng = np.random.default_rng(8)
    cfg = Config()
    e = conv_op(rng, (1, 32, 28, 28), 192, k=1, relu=True)
    d = dw_op(rng, e.output.shape, lo=-2, hi=100)
    chain = (e, d, conv_op(rng, d.output.shape, 32, k=1))
    base = Schedule(*chain, config=cfg)
    found = driver.sites(chain, cfg)[0]
    made = search.interleavable(base, cfg, *search._chain(base, cfg, found, True), found)
    grown = {str(g) for g, _ in search.grown(base, made)}
    k = compiler.build(*chain, config=cfg)
    assert str(k.schedule) in grown
    for s in search.all_candidates(chain, cfg):
        try:
            other = compiler.build(*chain, config=cfg, schedule=s).predicted_cycles
        except compiler.CompileError:
            continue
        assert k.predicted_cycles <= other * (1 + search.NEAR)


# ---------------------------------------------------------------------- the memos of picks

def _shallow_pair(rng: np.random.Generator, bias: np.ndarray | None = None):
    """A 1x1 conv + relu into a 1x1 conv, both shallow enough to be offered other bias modes."""
    a = conv_op(rng, (1, 24, 9, 11), 40, k=1, relu=True)
    if bias is not None:          # the same shapes, a bias too large to put on the NU (layout.bias_blocks)
        a = ops.conv2d(a.x_shape, a.weight, bias, x_zp=a.x_zp, multiplier=a.multiplier, shift=a.shift,
                       zp_out=a.zp_out, lo=a.lo)
    return a, conv_op(rng, a.output.shape, 24, k=1)


def test_a_memo_of_picks_made_for_one_chain_is_not_taken_by_another_of_its_shapes():
    # two chains of the same shapes whose values offer different tilings (the first conv's bias fits the
    # NU's bias rows in one, not in the other): compiled one after the other in one process, the second
    # is given the candidates and the kernel a fresh process gives it, and agrees with numpy
    rng = np.random.default_rng(5)
    small = _shallow_pair(rng)
    big = _shallow_pair(np.random.default_rng(5), rng.integers(600_000, 900_000, 40).astype(np.int32))
    cfg = Config()
    assert (search.conv_candidates(Schedule(*small, config=cfg).blocks[0].ctx["plan"], cfg)
            != search.conv_candidates(Schedule(*big, config=cfg).blocks[0].ctx["plan"], cfg))
    search.forget()
    fresh = [str(s) for s in search.all_candidates(big, cfg)]
    k_fresh = compiler.build(*big, config=cfg)
    search.forget()
    search.all_candidates(small, cfg)
    assert [str(s) for s in search.all_candidates(big, cfg)] == fresh
    compiler.build(*small, config=cfg)
    k = compiler.build(*big, config=cfg)
    assert k.program.to_bytes() == k_fresh.program.to_bytes()
    x = rand8(rng, big[0].x_shape)
    np.testing.assert_array_equal(k(x), big[1].reference(big[0].reference(x)))


def _bn_conv(rng: np.random.Generator, c: int, hw: int, out: int) -> tuple:
    """DenseNet's dense-layer head: a BatchNormalization (with its Relu) on the VU, then a 1x1 conv."""
    bn = ops.batch_norm((1, c, hw, hw), scale=rng.uniform(0.5, 1.5, c).astype(np.float32),
                        bias=rng.normal(0, 0.3, c).astype(np.float32), mean=rng.normal(0, 0.2, c).astype(np.float32),
                        var=rng.uniform(0.5, 2, c).astype(np.float32), za=int(rng.integers(-5, 6)), scale_x=0.05,
                        scale_out=0.04, zp_out=-128, lo=-128)
    return bn, conv_op(rng, bn.output.shape, out, k=1, relu=True)


@pytest.mark.parametrize("seed, c, hw, out", [(1, 24, 30, 40), (2, 64, 56, 128)])
def test_a_batch_norm_prologue_is_offered_in_finer_tiles_and_each_candidate_rebuilds(seed, c, hw, out):
    """Every candidate of a BatchNormalization -> conv chain is offered again with the prologue's tile a
    PROLOGUE_SPLIT-th of its own; candidate(k) rebuilds each as all_candidates gives it, and the search's
    choice is exact and priced exactly (a BN whose whole input is one tile has nothing to split)."""
    rng = np.random.default_rng(seed)
    cfg = Config()
    chain = _bn_conv(rng, c, hw, out)
    found = search.all_candidates(chain, cfg)
    base = Schedule(*chain, config=cfg)
    tile = driver.vu_tile(driver.fold_clamps(base.blocks[0].seg), cfg) // search.PROLOGUE_SPLIT
    finer = [s for s in found if ("split", ("c+r", tile), {}) in s.trace]
    assert len(finer) == (len(found) // 2 if tile < c * hw * hw else 0)
    assert [str(search.candidate(chain, cfg, k)) for k in range(len(found))] == [str(s) for s in found]
    assert search.candidate(chain, cfg, len(found)) is None
    _assert_exact(list(chain), cfg, compiler.build(*chain, config=cfg).schedule, rng)
    for s in finer:
        _assert_exact(list(chain), cfg, s, rng)
