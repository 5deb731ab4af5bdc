"""The schedule search: the candidates of a chain, ranked by quick estimates and their floors, the
finalists lowered and priced by the compile pipeline, the best kept.

  all_candidates  every schedule considered: for one conv2d / dense kernel one per tiling (and split
                  over NUs); for a chain one with each block's best tiling, one without im2col, and
                  one with its convs row by row for interleaving (row_by_row)
  ranked          the best by the per-tile quick estimate (driver.estimate), pruned by estimate_floor
  search          the FINALISTS best lowered, scheduled and priced (compiler.pipeline); the cheapest,
                  the shortest program among those within NEAR of it
  row_by_row      a chain's schedule made for tile-level interleaving (compiler.interleave): every conv
                  block of the chain a tiling that walks rows outermost (weights resident, or every
                  output block in one tile) in an equal share of each local memory, the best such by
                  the same quick estimate, so that a consumer tile can follow the producer tiles it
                  reads and every block's buffers fit at once; a pool or elementwise block that reads
                  a conv's rows takes a row tile of its share of VBUF (vu_rows)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from itertools import product

import numpy as np

from nnpsim import timing
from nnpsim.config import Config

from . import compile_cache, cost, interleave
from .cost import SPACE_ID
from .errors import CompileError
from .ir import KernelIR
from .lowering import driver, vu
from .lowering.layout import conv_view, fold_taps
from .lowering.conv_plan import DEPTHS, ConvTiling, NuPlan, buffer_needs, chunks, fits, psum_on_nu
from .lowering.nu import NuLowering
from .lowering.tiling import MIN_TILES, conv_candidates, row_tile, tile_count, value_facts
from .lowering.units import shared_capacity
from .lowering.vu import default_pool_engine
from .ops import Conv2d, Op
from .passes import loops
from .passes.sync import SyncReport
from .pipeline import check_ops, fold_channels, lowered, schedule
from .roofline import bound_cycles
from .schedule import BIAS_INTRINSICS, Block, Schedule
from .sizes import capacities, check_tiles
from .structure import tiling_key

FINALISTS = 6   # tilings the quick per-tile model ranks best, then priced by replaying their schedule
ONE_TILE_PIXELS, ONE_TILE_CYCLES, ONE_TILE_FINALISTS = 64, 8000, 32
"""A chain whose output maps have at most ONE_TILE_PIXELS pixels runs in one spatial tile: the quick
model, which prices a pipeline's start and end crudely, ranks its tilings worst (MobileNetV2's
576 -> 160 1x1 conv at 7x7: the best by replay 27th of 40).  When its roofline bound is also at most
ONE_TILE_CYCLES, replaying one is cheap: up to ONE_TILE_FINALISTS are priced."""
SMALL_CYCLES, SMALL_FINALISTS = 16000, 12
"""A chain with a roofline bound of at most SMALL_CYCLES is replayed in a few milliseconds a finalist,
and the quick model ranks its tilings poorly too (a pipeline of a few tiles or chunks: MobileNetV2's
576 -> 96 1x1 conv at 14x14, the best by replay 10th of 81): up to SMALL_FINALISTS are priced."""
NEAR = 0.02     # finalists predicted within 2% of the fastest count as fast: the shortest program wins


PICKS_KEPT = 1 << 12
"""Entries each memo of picks keeps (a process may compile for many configurations): the oldest goes."""


def memo(table: dict, key: tuple, compute: Callable[[], object]) -> object:
    """table[key], computed by compute() the first time; beyond PICKS_KEPT entries the oldest is dropped."""
    if key not in table:
        if len(table) >= PICKS_KEPT:
            del table[next(iter(table))]
        table[key] = compute()
    return table[key]


def forget() -> None:
    """Empty every memo of picks: what follows chooses as a fresh process would."""
    for table in (_CHAIN_PICKS, _ROW_PICKS, _FIT_OPTIONS):
        table.clear()


# ---------------------------------------------------------------------- the automatic schedules

def _nu_steps(s: Schedule, b: Block, t: ConvTiling, by: str | None, units: int, in_depth: int = 2) -> Schedule:
    """The primitives that give block b the tiling t (split over `units` NUs by `by`; its input tiles in
    `in_depth` IBUF slots)."""
    p, kw = b.ctx["plan"], {"block": b.name}
    if t.th < p.oh:
        s.split("oh", t.th, **kw)
    if t.tw < p.ow:
        s.split("ow", t.tw, **kw)
    if t.obt < p.n_ob:
        s.split("oc", t.obt * p.cols, **kw)
    if t.cbt < p.w.span and t.cbt * p.rows < b.extents["ic"]:
        s.split("ic", t.cbt * p.rows, **kw)
    s.cache_read("x", "ibuf", "in", **kw)
    s.double_buffer("in", **kw) if in_depth == 2 else s.double_buffer("in", in_depth, **kw)
    if t.resident:
        s.cache_read("w", "wbuf", "wres", **kw).compute_at("wres", "root", **kw)
        if "oc.o" in b.loops and b.loops[-1] != "oc.o":
            s.reorder(*[l for l in b.loops if l != "oc.o"], "oc.o", **kw)
    else:
        s.cache_read("w", "wbuf", "wt", **kw).double_buffer("wt", **kw)
    if t.drain == "vu":
        s.cache_write("y", "abuf", "acc", **kw).double_buffer("acc", **kw)
    elif psum_on_nu(p, t):          # the partial sums: one slot (conv_plan.role_depths)
        s.cache_write("y", "abuf", "acc", **kw)
    s.cache_write("y", "vbuf", "vacc", **kw).double_buffer("vacc", DEPTHS["vacc"], **kw)
    if b.ctx["residual"] is not None:
        s.cache_read("b", "vbuf", "res", **kw).double_buffer("res", **kw)
    if t.drain == "nu":
        s.tensorize("requant", b.rq_intrinsic(), **kw)
    s.tensorize("conv", b.stages()["conv"][0], **kw)
    if p.view.bias is not None:
        s.tensorize("bias", b.rq_intrinsic() if t.drain == "nu" else "nu.dwconv" if p.depthwise
                    else {v: k for k, v in BIAS_INTRINSICS.items()}[t.bias], **kw)
    for stage in ("requant", "add"):
        if stage in b.stages() and stage not in b.intrinsics:
            s.tensorize(stage, b.stages()[stage][0], **kw)
    for step in b.ctx["default_layout"]:
        name, args = step.split("(")
        args = tuple(int(a) for a in args.rstrip(")").split(","))
        if name == "split":
            s.buffer_split("w", *args, **kw)
        else:
            s.buffer_reorder("w", *args, **kw)
    if by == "channel":
        s.parallel("oc.o", units, **kw)
    elif by == "spatial":
        spatial = b.spatial_loops()
        if len(spatial) > 1:
            s.fuse(*spatial, **kw)
        s.parallel("+".join(spatial), units, **kw)
    return s


def _vu_steps(s: Schedule, b: Block, tile: int | tuple[int, int] | None = None) -> Schedule:
    """The primitives of the VU lowering's own tile choice for block b (or of the tile given)."""
    cfg, kw = s.config, {"block": b.name}
    if b.kind == "movement":         # its tiles are the lowering's own: nothing to decide
        return s
    op = driver.fold_clamps(b.seg)
    tile = tile or driver.vu_tile(op, cfg)
    if b.kind == "pool":
        cc, th = tile
        if cc < b.extents["c"]:
            s.split("c", cc, **kw)
        if th < b.extents["oh"]:
            s.split("oh", th, **kw)
        s.cache_read("x", "vbuf", "in", **kw).double_buffer("in", **kw)
        s.cache_write("y", "vbuf", "out", **kw).double_buffer("out", **kw)
    else:
        s.fuse("c", "r", **kw)
        if tile < b.extents["c"] * b.extents["r"]:
            s.split("c+r", tile, **kw)
        for k, t in enumerate(op.inputs):
            name = "ab"[k]
            s.cache_read(t.name, "vbuf", name, **kw).double_buffer(name, 3 if name == "a" else 2, **kw)
    for stage, allowed in b.stages().items():
        s.tensorize(stage, default_pool_engine(op, cfg, tile) if stage == "pool" else allowed[0], **kw)
    tiles = int(np.prod([b.loop_extent(l) for l in b.loops]))
    units = min(cfg.vu_count, tiles)
    if units > 1:
        if len(b.loops) > 1:
            s.fuse(*b.loops, **kw)
        s.parallel(b.loops[0], units, **kw)
    return s


def nu_tilings(b: Block, cfg: Config) -> list[tuple[ConvTiling, str | None, int]]:
    """(tiling, split, units) of every candidate of an NU block: every fitting tiling on one NU and,
    with several NUs, split over all of them by spatial tiles and (with enough groups) output channels."""
    p, residual = b.ctx["plan"], b.ctx["residual"] is not None
    out = [(t, None, 1) for t in conv_candidates(p, cfg, residual)]
    k = cfg.nu_count
    # part j runs on NU j and VU j % vu_count, and the output stage writes VBUF j: with fewer VUs than
    # NUs, no tiling on it (and the chunked ones drain through the VU instead); the float mode has no
    # other way out of the NU, so its convs then stay on one NU
    if k > 1 and (cfg.vu_count >= k or p.view.fmode is None):
        for t in conv_candidates(p, shared_capacity(cfg, k, "nu"), residual, MIN_TILES * k, cfg.vu_count >= k):
            ways = {"spatial": tile_count(p, t), "channel": -(-p.n_ob // t.obt)}
            out += [(t, by, k) for by, n in ways.items() if n >= k]
    return out


_CHAIN_PICKS: dict[tuple, tuple[int, float]] = {}
"""A chain block's tiling chosen by the quick estimate (its position among the block's tilings) and that
tiling's quick estimate, by the block's site_key, the configuration and the tilings themselves (at most
PICKS_KEPT of them)."""


def all_candidates(ops: tuple[Op, ...], cfg: Config, segments: list | None = None,
                   quick: list[float] | None = None) -> list[Schedule]:
    """The schedules the automatic search ranks, each made of primitives.

    A single conv2d / dense kernel: one per tiling (and split over NUs); a chain: one, each NU
    block taking its best tiling by the quick estimate and each VU block its lowering's tile,
    and one with its convs row by row for interleaving (row_by_row).  Given a list `quick`, a
    chain with conv blocks puts in it each candidate's quick estimate of its first conv block,
    which the picks computed already (the search ranks a chain's candidates by it: _ranked).
    """
    base = Schedule(*ops, config=cfg, segments=segments)
    if len(base.blocks) == 1 and base.blocks[0].kind == "nu":
        return [_auto_nu(f, t, by, k) for f in _folds(base, 0) for t, by, k in nu_tilings(f.blocks[0], cfg)]
    found = driver.sites(ops, cfg)[0]
    s, s_quick = _chain(base, cfg, found, True)
    # a gathered window takes IBUF a ring of recomputed halos may need: the chain without it too
    gathers = any(b.kind == "nu" and b.ctx["plan"].view.taps is not None for b in s.blocks)
    plain = [_chain(base, cfg, found, False)] if gathers else []
    more = interleavable(base, cfg, s, s_quick, found)
    made = [(s, s_quick)] + plain + more + grown(base, more)
    made += finer_prologue(base, made)
    if quick is not None and s_quick:
        quick += [q[0] for _, q in made]
    return [c for c, _ in made]


def interleavable(base: Schedule, cfg: Config, than: Schedule, than_quick: list[float],
                  found: list) -> list[tuple[Schedule, list[float]]]:
    """A chain's candidates tiled for interleaving, each with its conv blocks' quick estimates: row_by_row's
    (equal shares; None past SLACK times `than`'s estimates) and fitted's (tilings chosen together), whichever
    exist."""
    rows, fit = _row_by_row(base, cfg, sum(than_quick)), _fitted(base, cfg, found)
    if fit is not None and str(fit[0]) in {str(than), str(rows[0] if rows else None)}:   # nothing new to price
        fit = None
    own = _conv_then_rows(base, cfg, found)
    if own is not None and str(own[0]) in {str(than), str(rows[0] if rows else None), str(fit[0] if fit else None)}:
        own = None
    return [c for c in (rows, fit, own) if c is not None]


def candidate(ops: tuple[Op, ...], cfg: Config, k: int, segments: list | None = None) -> Schedule | None:
    """all_candidates(ops, cfg, segments)[k] (None when there are not k + 1), building only what it takes:
    a network's repeated layers and its other layouts rebuild the candidate a chain of the same
    shapes chose, and a chain's other candidates (row_by_row prices tilings) would be wasted."""
    if k < 0:
        return None
    base = Schedule(*ops, config=cfg, segments=segments)
    if len(base.blocks) == 1 and base.blocks[0].kind == "nu":
        n = 0
        for f in _folds(base, 0):
            tilings = nu_tilings(f.blocks[0], cfg)
            if k < n + len(tilings):
                return _auto_nu(f, *tilings[k - n])
            n += len(tilings)
        return None
    found = driver.sites(ops, cfg)[0]
    s, s_quick = _chain(base, cfg, found, True)
    if k == 0:
        return s
    gathers = any(b.kind == "nu" and b.ctx["plan"].view.taps is not None for b in s.blocks)
    if gathers and k == 1:
        return _chain(base, cfg, found, False)[0]
    more = interleavable(base, cfg, s, s_quick, found) if k >= 1 + gathers else []
    more += grown(base, more)
    if k - 1 - gathers < len(more):
        return more[k - 1 - gathers][0]
    made = [(s, s_quick)] + ([(_chain(base, cfg, found, False)[0], [])] if gathers else []) + more
    finer = finer_prologue(base, made)
    return finer[k - len(made)][0] if k - len(made) < len(finer) else None


PROLOGUE_SPLIT = 4
"""A chain's BatchNormalization prologue on the VU (DenseNet's before its convs) is also offered with its tile a
PROLOGUE_SPLIT-th of its own (finer_prologue)."""


def finer_prologue(base: Schedule, made: list[tuple[Schedule, list[float]]]) -> list[tuple[Schedule, list[float]]]:
    """Each candidate whose first block is a BatchNormalization on the VU before a conv, again with that block's tile
    a PROLOGUE_SPLIT-th of its own (and the candidate's quick estimates, which do not see it).  The VU's
    largest tile leaves DenseNet's first conv waiting for a third of the input's affine: in smaller tiles
    the conv starts sooner and the two interleave (its 56 x 56 dense layers 2% fewer cycles).  Offered
    beside the candidate, never instead: the replay decides."""
    first = base.blocks[0]
    # a squeeze-excite mul prologue gains in its kernel and loses in MobileNetV3-small's network (272,650 ->
    # 275,893 cycles: fusion takes the cheaper kernel, the layers around it overlap it less)
    if first.kind != "elementwise" or first.seg[0].kind != "batch_norm" or not any(
            b.kind == "nu" for b in base.blocks[1:]):
        return []
    total = first.extents["c"] * first.extents["r"]
    tile = driver.vu_tile(driver.fold_clamps(first.seg), base.config) // PROLOGUE_SPLIT
    if tile < 1 or tile >= total:
        return []
    out = []
    for s, q in made:
        d = base.fork()
        for name, args, kw in s.trace:
            if kw.get("block", "L0") == "L0" and name == "split" and args[0] == "c+r":
                continue          # the block's own tile: replaced below
            getattr(d, name)(*args, **kw)
            if kw.get("block", "L0") == "L0" and name == "fuse" and tuple(args) == ("c", "r"):
                d.split("c+r", tile)
        out.append((d, q))
    return out


DW_IN_DEPTH = 3
"""IBUF slots of the input tiles of a depthwise conv that reads an intermediate in DM, in grown()'s candidates."""


def grown(base: Schedule, made: list[tuple[Schedule, list[float]]]) -> list[tuple[Schedule, list[float]]]:
    """Each interleavable candidate whose conv blocks include a depthwise one reading an intermediate, again
    with that block's tile the largest of every output block that fits what the other blocks leave of each
    local memory (if larger than its own), its input tiles in DW_IN_DEPTH IBUF slots where they fit (and the candidate's quick
    estimates: the per-tile model, block by block, sees neither).  A depthwise block's quick estimate is
    its VU requantisation, whatever its tile, but each nu.dwconv pays the NU's latency and at least
    nu.rows cycles a block, in the NU the chain's other convs share: an equal share of ABUF gave
    MobileNetV2's 28 x 28 depthwise conv one row a tile, where two fit (18% fewer cycles).  And its NU
    work is short beside its VU's, so its next input's DMA from DM, issued behind the other kernels'
    tiles, is what it waits for: a third slot lets it start a tile sooner (the 56 x 56 block, 6%).
    Offered beside the candidate, never instead: the replay decides."""
    out = []
    caps = capacities(base.config)
    for s, q in made:
        if any(b.kind != "nu" for b in s.blocks):
            continue
        tilings = [b.tiling() for b in s.blocks]
        needs = [buffer_needs(b.ctx["plan"], t, b.ctx["residual"] is not None) for b, t in zip(s.blocks, tilings)]
        depths = [2] * len(tilings)
        for k, b in enumerate(s.blocks):
            p = b.ctx["plan"]
            if k == 0 or not p.depthwise:
                continue
            left = {m: c - sum(n.get(m, 0) for j, n in enumerate(needs) if j != k) for m, c in caps.items()}
            residual, pixels = b.ctx["residual"] is not None, tilings[k].th * tilings[k].tw
            for depth in (DW_IN_DEPTH, 2):
                t = row_tile(p, left, residual, {"in": depth})
                if t is not None and t.th * t.tw > pixels:
                    tilings[k], depths[k] = replace(tilings[k], th=t.th, tw=t.tw, obt=t.obt), depth
                    break
                if depth > 2 and fits(buffer_needs(p, tilings[k], residual, {"in": depth}), left):
                    depths[k] = depth       # no larger tile, the same one in more slots
                    break
        if depths == [2] * len(tilings) and tilings == [b.tiling() for b in s.blocks]:
            continue
        d = base.fork()
        for k, (t, depth) in enumerate(zip(tilings, depths)):
            d = _nu_steps(d, d.blocks[k], t, None, 1, depth)
        out.append((d, q))
    return out


def _chain(base: Schedule, cfg: Config, found: list, fold: bool) -> tuple[Schedule, list[float]]:
    """A chain's schedule: each NU block its best tiling by the quick estimate (fold: im2col allowed),
    each VU block its lowering's tile; and the quick estimate of each NU block, in order."""
    s, quick = base.fork(), []
    for k in range(len(s.blocks)):
        if s.blocks[k].kind != "nu":
            _vu_steps(s, s.blocks[k])
            continue
        folds = _folds(s, k) if fold else [s]
        options = [(f, t, by, u) for f in folds for t, by, u in nu_tilings(f.blocks[k], cfg)]
        # a pick is a position in this list: the list itself is in the key
        key = (site_key(found[k], s.blocks[k]), cfg, tuple((f is not s, *o) for f, *o in options))
        # graph fusion prices many chains that share segments: a pick found builds only its own trial
        pick, guess = memo(_CHAIN_PICKS, key, lambda: ranked_estimates(
            [_auto_nu(*o, k) for o in options], cfg, 1, k, found)[0])
        s = _auto_nu(*options[pick], k)
        quick.append(guess)
    return s, quick


def site_key(site: driver.Site, b: Block) -> tuple:
    """What an NU block's tilings and quick estimates depend on at a site of its chain, for the memos of
    picks: its structure (tiling_key), the values its tilings depend on (tiling.value_facts), where
    it reads and writes, and whether its input and output are kept row by row."""
    return (tiling_key(site.seg), value_facts(b.ctx["plan"]), tuple(x.space for x in site.ins), site.out.space,
            site.res_buf is not None, site.in_rows, site.out_rows)


def _folds(s: Schedule, k: int) -> list[Schedule]:
    """s and, when gathering block k's whole window into the input rows (im2col) takes fewer NU passes
    per output block than its own view (kernel columns folded, or none), s with that fold too."""
    b = s.blocks[k]
    p = b.ctx["plan"]
    if p.depthwise or not isinstance(b.seg[0], Conv2d) or p.view.taps is not None:
        return [s]
    folded = fold_taps(conv_view(driver.fuse_nu_chain(b.seg)[0]), s.config.nu_rows)
    if folded is None or folded.taps.blocks >= p.w.span * p.kh * p.kw:
        return [s]
    return [s, s.fork().im2col("x", block=b.name)]


def _auto_nu(s: Schedule, t: ConvTiling, by: str | None, units: int, k: int = 0) -> Schedule:
    new = s.fork()
    return _nu_steps(new, new.blocks[k], t, by, units)


def estimate(s: Schedule, cfg: Config, k: int = 0, found: list | None = None) -> float:
    """Quick cycles of block k of a schedule (the per-tile model on its first tiles, scaled);
    `found`: the chain's driver.sites, if the caller has them."""
    return driver.estimate(_block_lowering(s, cfg, k, found), cfg)


def _block_lowering(s: Schedule, cfg: Config, k: int, found: list | None):
    if found is None:
        found = driver.sites(s.ops, cfg)[0]
    return driver.lowering(found[k], s.blocks[k].choice(cfg), cfg)[0]


def ranked(trials: list[Schedule], cfg: Config, top: int, k: int = 0, found: list | None = None) -> list[int]:
    """Positions of the `top` schedules with the least quick estimate of block k, best first (ties: the
    earlier), as sorting all of them by estimate() would give.

    Each is first given its estimate_floor, which needs no tile lowered; they are priced in order
    of it, and the ones whose floor exceeds the top-th best estimate so far are never lowered.
    """
    return [i for i, _ in ranked_estimates(trials, cfg, top, k, found)]


def ranked_estimates(trials: list[Schedule], cfg: Config, top: int, k: int = 0,
                     found: list | None = None) -> list[tuple[int, float]]:
    """ranked(), each position with its quick estimate."""
    if found is None and trials:
        found = driver.sites(trials[0].ops, cfg)[0]
    lows = [_block_lowering(t, cfg, k, found) for t in trials]
    floors = [estimate_floor(low, cfg) for low in lows]
    quick: dict[int, float] = {}
    for i in sorted(range(len(trials)), key=lambda i: (floors[i], i)):
        if len(quick) >= top and floors[i] > sorted(quick.values())[top - 1]:
            break
        quick[i] = driver.estimate(lows[i], cfg)
    return [(i, quick[i]) for i in sorted(quick, key=lambda i: (quick[i], i))[:top]]


def estimate_floor(low, cfg: Config) -> float:
    """A floor under driver.estimate(low): the NU's and the VU's busy cycles on the tiles it prices,
    scaled as it scales them, counted from the tiling alone (0 for a VU kernel's lowering).

    driver.estimate charges each tile its busiest resource; an NU lowering's tiles keep one NU
    and one VU busy with at least their nu.conv and requantising commands (nu.lowering's
    _convs and _epilogue), whatever else the tile does, and DDR with their weights and stores;
    every command costs a cycle more.
    """
    parts = getattr(low, "parts", [low])
    if not all(isinstance(part, NuLowering) for part in parts):
        return 0.0
    busy, weights, stores, priced, tiles, cmds = [], [], 0, [], [], 0
    for part in parts:
        b, w, st, n_priced, n_tiles, n_cmds = _busy_floor(part, cfg)
        busy.append(b)
        weights.append(w)
        stores += st
        priced.append(n_priced)
        tiles.append(n_tiles)
        cmds += n_cmds
    # every part's DMAs share DDR's one port; the parts' NUs and VUs are their own.  Parts split by
    # spatial tiles load the same weights, and a load two parts make in one step crosses DDR once
    # (units.share_loads): only the largest part's weights are sure to cross it.  The margin covers
    # the estimate's port time summed transfer by transfer in floating point.  On top of its busiest
    # resource the estimate charges every command a cycle of the CU's issue (cost.pipeline_cycles).
    shared = getattr(parts[0], "part", None) is not None and parts[0].part.by == "spatial"
    ddr = stores + (max(weights) if shared else sum(weights))
    floor = max(max(busy), ddr / timing.memory_port(cfg, SPACE_ID["ddr"])[0]) + cmds
    return floor * max(tiles) / max(1, max(priced)) * (1 - 1e-9)


def _busy_floor(low: NuLowering, cfg: Config) -> tuple[int, int, int, int, int, int]:
    """(the larger of NU and VU busy cycles, the DDR bytes of the weights (streamed, or resident: loaded
    with the first tiles), those of the output stores, over the tiles driver.estimate prices; those
    tiles; all tiles; the commands those tiles issue at least)."""
    p, t, v = low.p, low.t, low.p.view
    streamed = not t.resident and not p.depthwise
    stores = low.y.space == "ddr"
    ddr = cmds = 0
    w_bytes = sum(d.nbytes for d in low._resident_loads()) if t.resident else 0
    cols, n_chunks, channels = p.cols, chunks(p, t.cbt), v.y_shape[1]
    per_channel = low._bias_mode("requant")
    requant = (("vu.requant.f" if v.scale is not None else "vu.requant") if per_channel
               else ("vu.requant.fpc" if v.scale is not None else "vu.requant.pc"))
    nu = vu = n = 0
    for obs, _, oh0, ow0, j, load_w, _ in low.tiles():
        n += 1
        if n > driver.ESTIMATE_TILES:       # the rest are only counted (n_tiles), not walked
            break
        count = n_chunks[j][1]
        th, tw = min(t.th, p.oh - oh0), min(t.tw, p.ow - ow0)
        last = j == len(n_chunks) - 1
        # its nu.conv, its weights' DMA, the store of its output (nu._finish) and its drain (nu._epilogue)
        cmds += 1 + (streamed and load_w) + last + (last and t.drain == "vu")
        if streamed and load_w:
            w_bytes += count * p.w.block_bytes * len(obs)
        if stores and last:
            ddr += sum(max(0, min(cols, channels - ob * cols)) for ob in obs) * th * tw
        f = v.fmode is not None
        if p.depthwise:
            nu += _nu_floor(True, f, len(obs) * count, p.kh, p.kw, th, tw, cfg.nu_rows, cfg.nu_latency)
        else:
            # one command for every block of the tile (nu._conv_groups), or one per block: no less
            nu += _nu_floor(False, f, count, p.kh, p.kw, th, tw, cfg.nu_rows, cfg.nu_latency, len(obs))
        if j == len(n_chunks) - 1 and t.drain == "vu":     # the NU's output stage needs no VU pass
            pix = th * tw
            if per_channel:
                cycles = cost._vu_cycles(requant, "i32", "i8", pix, 1, cfg.vu_bytes_per_cycle, cfg.vu_latency)
                real = sum(max(0, min(cols, channels - ob * cols)) for ob in obs)
                vu += cycles * real
                cmds += real
            else:
                vu += cost._vu_cycles(requant, "i32", "i8", cols * pix * len(obs), 1, cfg.vu_bytes_per_cycle,
                                      cfg.vu_latency)
                cmds += 1
    return max(nu, vu), w_bytes, ddr, min(n, driver.ESTIMATE_TILES), low.n_tiles(), cmds


@lru_cache(maxsize=1 << 12)
def _nu_floor(depthwise: bool, fmode: bool, in_cb: int, kh: int, kw: int, oh: int, ow: int, rows: int,
              latency: int, out_cb: int = 1) -> int:
    if fmode:       # the float mode's commands (cost.nu_cycles)
        return int(timing.nu_fdwconv_cycles(in_cb, kh, kw, oh, ow, rows, latency) if depthwise
                   else timing.nu_fconv_cycles(out_cb, in_cb, kh, kw, oh, ow, rows, latency))
    if depthwise:
        return int(timing.nu_dwconv_cycles(in_cb, kh, kw, oh, ow, rows, latency))
    return int(timing.nu_conv_cycles(out_cb, in_cb, kh, kw, oh, ow, rows, latency))


# ---------------------------------------------------------------------- row by row

def row_major(p: NuPlan, t: ConvTiling) -> bool:
    """Does the lowering run the tiling's tiles row after row (every output block of a row before the next)?"""
    return t.resident or t.obt >= p.n_ob


def shared(cfg: Config, n: int) -> Config:
    """The configuration one of n blocks that live side by side may plan with: local memories divided."""
    return replace(cfg, ibuf_bytes=cfg.ibuf_bytes // n, wbuf_bytes=cfg.wbuf_bytes // n,
                   abuf_bytes=cfg.abuf_bytes // n, vbuf_bytes=cfg.vbuf_bytes // n)


SLACK = 1.2     # offered only when its blocks' quick estimates sum to at most this times the other schedule's

_ROW_PICKS: dict[tuple, tuple[int, float]] = {}
"""A conv block's row-major tiling (its position among them) and that tiling's quick estimate, by
what the estimate depends on: the block's site_key, its share of the memories, the configuration and
the tilings themselves (graph fusion builds many chains that share blocks); at most PICKS_KEPT of them."""


def quick(s: Schedule, cfg: Config) -> float:
    """The quick estimates of a schedule's conv blocks, summed (its VU blocks are the other schedule's)."""
    return sum(estimate(s, cfg, k) for k, b in enumerate(s.blocks) if b.kind == "nu")


def row_by_row(base: Schedule, cfg: Config, than: float | None = None) -> Schedule | None:
    """The chain with every conv block tiled row by row in its share of the local memories (None: a block
    has no such tiling, the chain has fewer than two conv blocks, or its tiles are so small that its
    blocks one after another are estimated over SLACK times `than`, the other schedule's quick(): interleaving
    could not win that back, and pricing it would only cost compile time)."""
    made = _row_by_row(base, cfg, than)
    return None if made is None else made[0]


def _row_by_row(base: Schedule, cfg: Config, than: float | None) -> tuple[Schedule, list[float]] | None:
    """row_by_row(base, cfg, than) and the quick estimate of each of its conv blocks, in order."""
    nu = [k for k, b in enumerate(base.blocks) if b.kind == "nu"]
    rows = vu_rows(base)
    if (len(nu) < 2 and not rows) or any(b.ctx["plan"].view.x_shape[0] != 1 for b in base.blocks if b.kind == "nu"):
        return None
    part = shared(cfg, len(base.blocks))
    found = driver.sites(base.ops, cfg)[0]
    s, guesses = base.fork(), []
    for k, b in enumerate(s.blocks):
        if b.kind != "nu":
            try:
                tile = vu.row_tile(driver.fold_clamps(b.seg), part) if k in rows else None
            except CompileError:      # not one row of its share
                return None
            _vu_steps(s, s.blocks[k], tile)
            continue
        p = b.ctx["plan"]
        try:
            tilings = [t for t in conv_candidates(p, part, b.ctx["residual"] is not None) if row_major(p, t)]
        except CompileError:          # no tile fits a share
            return None
        if not tilings:
            return None
        key = (site_key(found[k], b), part, cfg, tuple(tilings))
        pick, guess = memo(_ROW_PICKS, key, lambda: ranked_estimates(
            [_auto_nu(s, t, None, 1, k) for t in tilings], cfg, 1, k, found)[0])
        s = _auto_nu(s, tilings[pick], None, 1, k)
        guesses.append(guess)           # what quick(s) would sum, block by block
    if than is not None and sum(guesses) > SLACK * than:
        return None
    return s, guesses


def _conv_then_rows(base: Schedule, cfg: Config, found: list) -> tuple[Schedule, list[float]] | None:
    """A chain of one conv block and VU blocks that read its rows (the stem's conv -> max pool): the conv its
    best row-major tiling in the whole of the local memories (im2col allowed, as _chain), each VU block a
    row tile in the VBUF the conv leaves (None: another chain, a batch over 1, or no such tiling or tile).
    row_by_row halves every memory for the conv, though a pool takes only VBUF: the conv's tiles come out
    so small that the chain is not offered, and its pool, one channel slice of every row, cannot follow it."""
    nu = [k for k, b in enumerate(base.blocks) if b.kind == "nu"]
    rows = vu_rows(base)
    if len(nu) != 1 or not rows or len(rows) + 1 != len(base.blocks) or base.blocks[nu[0]].ctx["plan"].view.x_shape[0] != 1:
        return None
    k = nu[0]
    options = []
    for f in _folds(base, k):
        b = f.blocks[k]
        p, residual = b.ctx["plan"], b.ctx["residual"] is not None
        options += [(f, t, buffer_needs(p, t, residual)["vbuf"]) for t in conv_candidates(p, cfg, residual)
                    if row_major(p, t)]
    if not options:
        return None
    pick, guess = ranked_estimates([_auto_nu(f, t, None, 1, k) for f, t, _ in options], cfg, 1, k, found)[0]
    f, t, vbuf = options[pick]
    s = _auto_nu(f, t, None, 1, k)
    if vbuf >= cfg.vbuf_bytes:
        return None
    left = replace(cfg, vbuf_bytes=(cfg.vbuf_bytes - vbuf) // len(rows))
    for j in sorted(rows):
        try:
            tile = vu.row_tile(driver.fold_clamps(s.blocks[j].seg), left)
        except CompileError:      # not one row in the VBUF left
            return None
        _vu_steps(s, s.blocks[j], tile)
    return s, [guess]


FIT_TOP = 4     # row-major tilings per conv block and share of the memories that fitted() combines

_FIT_OPTIONS: dict[tuple, list] = {}
"""A conv block's row-major tilings for fitted(): (tiling, quick estimate, buffer needs), by what they
depend on (the block's site_key, the chain's length, the configuration); at most PICKS_KEPT."""


def fitted(base: Schedule, cfg: Config, found: list) -> Schedule | None:
    """The chain with every conv block tiled row by row, the tilings chosen together: of the
    combinations of each block's best few (fit_options), the one with the least summed quick estimate
    whose buffers fit the local memories side by side (None: a chain of fewer than two blocks, not
    all convs, of a batch over 1, or no combination fits).  row_by_row gives every block an equal
    share instead, which a block that needs little of a memory wastes (an expand conv on the NU's
    output stage takes no ABUF, a depthwise one little IBUF and WBUF), so its tiles come out smaller
    than they need be and pay the NU's latency more often."""
    made = _fitted(base, cfg, found)
    return None if made is None else made[0]


def _fitted(base: Schedule, cfg: Config, found: list) -> tuple[Schedule, list[float]] | None:
    """fitted(base, cfg, found) and the quick estimate of each of its conv blocks, in order."""
    blocks = base.blocks
    if len(blocks) < 2 or any(b.kind != "nu" or b.ctx["plan"].view.x_shape[0] != 1 for b in blocks):
        return None
    options = []
    for k in range(len(blocks)):
        key = (site_key(found[k], blocks[k]), len(blocks), cfg)
        opts = memo(_FIT_OPTIONS, key, lambda: fit_options(base, cfg, k, found))
        if not opts:
            return None
        options.append(opts)
    caps = capacities(cfg)
    best, least = None, None
    for combo in product(*options):
        if all(sum(o[2].get(m, 0) for o in combo) <= caps[m] for m in ("ibuf", "wbuf", "abuf", "vbuf")):
            total = sum(o[1] for o in combo)
            if least is None or total < least:
                best, least = combo, total
    if best is None:
        return None
    s = base.fork()
    for k, (t, _, _) in enumerate(best):
        s = _auto_nu(s, t, None, 1, k)
    return s, [guess for _, guess, _ in best]


def fit_options(base: Schedule, cfg: Config, k: int, found: list) -> list[tuple[ConvTiling, float, dict]]:
    """Conv block k's row-major tilings that fitted() combines: the FIT_TOP best by the quick estimate
    in all of each local memory, and in a half, a third ... (one share per block of the chain), each
    with its estimate and buffer needs."""
    b = base.blocks[k]
    p, residual = b.ctx["plan"], b.ctx["residual"] is not None
    out: dict[ConvTiling, tuple[ConvTiling, float, dict]] = {}
    for n in range(1, len(base.blocks) + 1):
        try:
            tilings = [t for t in conv_candidates(p, shared(cfg, n), residual) if row_major(p, t) and t not in out]
        except CompileError:          # no tile fits this share
            continue
        if not tilings:
            continue
        picks = ranked_estimates([_auto_nu(base, t, None, 1, k) for t in tilings], cfg, FIT_TOP, k, found)
        for i, guess in picks:
            out[tilings[i]] = (tilings[i], guess, buffer_needs(p, tilings[i], residual))
    return list(out.values())


def vu_rows(s: Schedule) -> set[int]:
    """The VU blocks of a chain that read a conv's intermediate row by row, or write one a conv reads so (they
    walk rows outermost)."""
    found = driver.sites(s.ops, s.config)[0]
    return {k for k, (b, site) in enumerate(zip(s.blocks, found)) if b.kind != "nu" and (site.in_rows or site.out_rows)}


# ---------------------------------------------------------------------- the search

def candidates(ops: tuple[Op, ...], cfg: Config) -> list[Schedule]:
    """Every schedule the search considers for the chain, best first by the quick estimate."""
    found = all_candidates(check_ops(ops), cfg)
    return [found[k] for k in _ranked(found, cfg)]


def _ranked(found: list[Schedule], cfg: Config, top: int | None = None, quick: list[float] | None = None) -> list[int]:
    """Positions of the candidates (the `top` first), best first by the quick estimate of their first
    conv block (none: in the order given); `quick`: those estimates, when all_candidates gave them."""
    nu = [k for k, b in enumerate(found[0].blocks) if b.kind == "nu"]
    if len(found) == 1 or not nu:
        return list(range(len(found)))[:top]
    if quick is not None and len(quick) == len(found):      # what ranked() would sort them by
        return sorted(range(len(found)), key=lambda i: (quick[i], i))[:top]
    # by the first conv block: a chain's candidates (its own schedule, row_by_row's) differ only in their conv blocks, and a VU block has no quick estimate
    return ranked(found, cfg, len(found) if top is None else top, nu[0])


Priced = tuple[int, dict[str, int], SyncReport]
"""A scheduled kernel's (predicted cycles, on-chip usage, sync report), as compiler.pipeline.schedule gives it."""


def search(ops: tuple[Op, ...], cfg: Config, choice: int | None = None,
           segments: list | None = None) -> tuple[Schedule, KernelIR, Priced, int]:
    """The chain's best schedule: (schedule, its scheduled flat KernelIR, (predicted, usage, report), k).

    The FINALISTS best by the quick estimate are lowered, allocated, synchronised and priced
    flat; among those within NEAR of the fastest the shortest program wins.  k is the
    winner's position among the chain's candidates; given back as `choice` for a chain of the
    same shapes, only that candidate is built (a network's repeated layers).  The winner's k
    is kept in the compile cache (compiler.compile_cache): on a hit only candidate k is built.
    """
    ops = check_ops(ops)
    for op in ops:              # bounded: a layer past compiler.sizes.MAX_TILES is refused before any candidate
        check_tiles(op.kind, op.output.shape, cfg)
    key = compile_cache.key("search", ops, cfg, choice, segments) if compile_cache.wanted("search") else None
    hit = _hit(key)
    if hit is not None:
        return _search(ops, cfg, hit[0], segments)
    try:
        found = _search(ops, cfg, choice, segments)
    except CompileError as exc:      # no candidate builds: remembered too (fusion tries many such chains)
        compile_cache.put("search", key, ("error", str(exc)))
        raise
    compile_cache.put("search", key, (found[3], int(found[2][0])))
    return found


def cached_choice(ops: tuple[Op, ...], cfg: Config, choice: int | None = None) -> tuple[int, int] | None:
    """(k, predicted cycles) of search(ops, cfg, choice) if the compile cache holds it, building nothing
    (CompileError if it holds the search's refusal)."""
    ops = check_ops(ops)
    return _hit(compile_cache.key("search", ops, cfg, choice, None) if compile_cache.wanted("search") else None)


def _hit(key: str | None) -> tuple[int, int] | None:
    """The search entry under key: (k, predicted), None, or the refusal it records raised again."""
    hit = compile_cache.get("search", key, valid_choice)
    if hit is not None and hit[0] == "error":
        raise CompileError(hit[1])
    return hit


def valid_choice(v: object) -> bool:
    """Is v a search entry: (k >= 0, predicted cycles), or ("error", the CompileError's message)?"""
    if isinstance(v, tuple) and len(v) == 2 and v[0] == "error":
        return isinstance(v[1], str)
    return isinstance(v, tuple) and len(v) == 2 and all(type(x) is int for x in v) and v[0] >= 0


def _search(ops: tuple[Op, ...], cfg: Config, choice: int | None,
            segments: list | None) -> tuple[Schedule, KernelIR, Priced, int]:
    chosen = candidate(ops, cfg, choice, segments) if choice is not None else None
    if chosen is not None:           # only that candidate is built: the others would go unused
        found, order = {choice: chosen}, [choice]
    else:
        quick: list[float] = []
        found = all_candidates(ops, cfg, segments, quick)
        order = _ranked(found, cfg, _finalists(ops, cfg), quick)
    why, priced_all = "", []
    for k in order:
        try:
            kir = lowered(found[k], cfg)
            if _loses(kir, priced_all, cfg):
                continue
            # a chain's pipelining pass priced the body it chose: the same body, allocated and synchronised
            # again, would replay to the same cycles
            known = kir.pipelining.cycles if kir.pipelining is not None else None
            priced_all.append((found[k], kir, schedule(kir, cfg, reroll=False, cycles=known), k))
        except CompileError as exc:
            why = str(exc)
    if not priced_all:
        if choice is not None:
            return _search(ops, cfg, None, segments)
        raise CompileError(f"{ops[0].kind} cannot be compiled for this configuration: {why}")
    # intermediates stay on chip where some finalist manages it (a ring may be dearer than a DDR scratch buffer)
    priced_all = [p for p in priced_all if not interleave.scratch(p[1])] or priced_all
    fastest = min(p[2][0] for p in priced_all)
    near = [p for p in priced_all if p[2][0] <= fastest * (1 + NEAR)]
    return min(near, key=lambda p: (cost.instructions(p[1].body), p[2][0])) if len(near) > 1 else near[0]


def _loses(kir: KernelIR, priced_all: list, cfg: Config) -> bool:
    """Can a lowered finalist of one kernel be left unpriced: its cycles' lower bound (cost.floor_cycles)
    is over NEAR above a finalist priced already that it could not displace (one that keeps every
    intermediate on chip, or any when it spills too), or it spills where one priced does not?  The
    choice below is then the same with or without it.  A chain's finalist was priced by its pipelining
    pass (compiler.interleave) already, its rings too: none is skipped."""
    if kir.pipelining is not None or not priced_all:
        return False
    fold_channels(kir, cfg)         # the channels the body will run on (schedule folds them too)
    on_chip = [p[2][0] for p in priced_all if not interleave.scratch(p[1])]
    if interleave.scratch(kir):
        if on_chip:
            return True
        rivals = [p[2][0] for p in priced_all]
    else:
        rivals = on_chip
    return bool(rivals) and not cost.floor_cycles(kir.body, cfg) <= min(rivals) * (1 + NEAR)


def _finalists(ops: tuple[Op, ...], cfg: Config) -> int:
    """How many candidates the search replays: more for a small kernel (ONE_TILE_*, SMALL_*)."""
    shape, bound = ops[-1].output.shape, bound_cycles(ops, cfg)
    if len(shape) == 4 and shape[2] * shape[3] <= ONE_TILE_PIXELS and bound <= ONE_TILE_CYCLES:
        return ONE_TILE_FINALISTS
    return SMALL_FINALISTS if bound <= SMALL_CYCLES else FINALISTS


def best_schedule(ops: tuple[Op, ...], cfg: Config, choice: int | None = None,
                  reroll: bool = True) -> tuple[KernelIR, Priced, int]:
    """The chain's cheapest scheduled KernelIR among the finalists: (kir, (predicted, usage, report), k).

    Unless reroll is False (a network rerolls its whole program instead) the winner's tiles
    are rolled into loops and it is priced again.
    """
    _, kir, (predicted, usage, report), k = search(ops, cfg, choice)
    if reroll:
        kir.body = loops.reroll(kir.body)
        predicted = cost.schedule_cycles(kir.body, cfg)
    return kir, (predicted, usage, report), k


def choose(given: Schedule | None, ops: tuple[Op, ...], cfg: Config, segments: list) -> Schedule:
    """The schedule to build with: the search's best, or the given one replayed on these ops and
    this configuration (which checks it: CompileError if it does not fit them)."""
    if given is None:
        return search(ops, cfg, segments=segments)[0]
    if not isinstance(given, Schedule):
        raise CompileError(f"schedule= takes a compiler.Schedule (Schedule.from_trace reads its text), "
                           f"not {type(given).__name__}")
    s = given.replay(*ops, config=cfg, segments=segments)
    s.check()
    return s
