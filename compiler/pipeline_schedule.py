"""A chain's schedule made for tile-level pipelining (compiler.pipelining): its convs row tile by row tile.

The search's own chain schedule gives each block the tiling its quick estimate
likes best alone, in all of each local memory: often weights streamed one output
block at a time, so a producer finishes its first rows only at its very end, and
two blocks' buffers do not fit side by side.  This candidate gives every conv
block of the chain a tiling that walks rows outermost (weights resident, or every
output block in one tile) in an equal share of each local memory, the best such
by the same quick estimate, so that a consumer tile can follow the producer
tiles it reads and every block's buffers fit at once.  A pool or elementwise
block that reads a conv's rows (lowering.vu walks it rows outermost) takes a
row tile of its share of VBUF (vu_rows).  kernel.search prices it with the
chain's other schedule, each with and without interleaving, and keeps the
cheapest.
"""
from __future__ import annotations

from dataclasses import replace

from nnpsim.config import Config

from . import schedule as sm
from .errors import CompileError
from .lowering import driver, vu
from .lowering.conv_plan import ConvTiling, NuPlan
from .lowering.tiling import conv_candidates
from .structure import tiling_key


def row_major(p: NuPlan, t: ConvTiling) -> bool:
    """Does the lowering run the tiling's tiles row after row (every output block of a row before the next)?"""
    return t.resident or t.obt >= p.n_ob


def shared(cfg: Config, n: int) -> Config:
    """The configuration one of n blocks that live side by side may plan with: local memories divided."""
    return replace(cfg, ibuf_bytes=cfg.ibuf_bytes // n, wbuf_bytes=cfg.wbuf_bytes // n,
                   abuf_bytes=cfg.abuf_bytes // n, vbuf_bytes=cfg.vbuf_bytes // n)


SLACK = 1.2     # offered only when its blocks' quick estimates sum to at most this times the other schedule's

_PICKS: dict[tuple, tuple[int, float]] = {}
"""A conv block's row-major tiling (its position among them) and that tiling's quick estimate, by
what the estimate depends on: the block's structure, where it reads and writes, and its share of
the memories (graph fusion builds many chains that share blocks)."""


def quick(s: "sm.Schedule", cfg: Config) -> float:
    """The quick estimates of a schedule's conv blocks, summed (its VU blocks are the other schedule's)."""
    return sum(sm.estimate(s, cfg, k) for k, b in enumerate(s.blocks) if b.kind == "nu")


def row_by_row(base: "sm.Schedule", cfg: Config, than: "sm.Schedule | None" = None) -> "sm.Schedule | None":
    """The chain with every conv block tiled row by row in its share of the local memories (None: a block
    has no such tiling, the chain has fewer than two conv blocks, or its tiles are so small that its
    blocks one after another are estimated over SLACK times schedule `than`'s: interleaving could not win
    that back, and pricing it would only cost compile time)."""
    nu = [k for k, b in enumerate(base.blocks) if b.kind == "nu"]
    rows = vu_rows(base)
    if (len(nu) < 2 and not rows) or any(b.ctx["plan"].view.x_shape[0] != 1 for b in base.blocks if b.kind == "nu"):
        return None
    part = shared(cfg, len(base.blocks))
    found = driver.sites(base.ops, cfg)[0]
    s, quick_s = base.fork(), 0.0
    for k, b in enumerate(s.blocks):
        if b.kind != "nu":
            try:
                tile = vu.row_tile(driver.fold_clamps(b.seg), part) if k in rows else None
            except CompileError:      # not one row of its share
                return None
            sm._vu_steps(s, s.blocks[k], tile)
            continue
        p = b.ctx["plan"]
        try:
            tilings = [t for t in conv_candidates(p, part, b.ctx["residual"] is not None) if row_major(p, t)]
        except CompileError:          # no tile fits a share
            return None
        if not tilings:
            return None
        site = found[k]
        key = (tiling_key(site.seg), tuple(x.space for x in site.ins), site.out.space, site.res_buf is not None,
               site.in_rows, site.out_rows, part, cfg)
        if key not in _PICKS:
            trials = [sm._auto_nu(s, t, None, 1, k) for t in tilings]
            _PICKS[key] = sm.ranked_estimates(trials, cfg, 1, k, found)[0]
        pick, estimate = _PICKS[key]
        s = sm._auto_nu(s, tilings[pick], None, 1, k)
        quick_s += estimate             # what quick(s) would sum, block by block
    if than is not None and quick_s > SLACK * quick(than, cfg):
        return None
    return s


def vu_rows(s: "sm.Schedule") -> set[int]:
    """The VU blocks of a chain that read a conv's intermediate row by row (they walk rows outermost)."""
    found = driver.sites(s.ops, s.config)[0]
    return {k for k, (b, site) in enumerate(zip(s.blocks, found)) if b.kind != "nu" and site.in_rows}
