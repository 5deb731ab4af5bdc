"""The schedule search (compiler.search): a finalist left unpriced by its lower bound changes no choice."""
from __future__ import annotations

import numpy as np

from compiler import ops, search
from nnpsim.config import Config
from tests.helpers.kernels import rand8


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
    from compiler.lowering import driver
    from compiler.schedule import Schedule
    from tests.helpers.networks import conv_conv, conv_pool, inverted

    rng = np.random.default_rng(11)
    chains = [conv_conv(rng, 8, 11), conv_conv(rng, 24, 17, out=40), inverted(rng, 8, 13), inverted(rng, 16, 9, 2),
              conv_pool(rng, 16, 19, 21)]
    ranked = 0
    for n, chain in enumerate(chains):
        cfg = Config(nu_count=1 + n % 2, vu_count=1 + n % 2)
        search._CHAIN_PICKS.clear()
        search._ROW_PICKS.clear()
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
