"""Tile-size choice: candidates that fit the on-chip buffers, ranked by the cost model.

For the NU path a tiling is (output rows, output columns, output blocks, input
blocks per chunk, weights resident or streamed).  For each (output blocks, chunk) pair the largest spatial
tile that fits is taken (whole rows first, then fewer columns);
compiler.schedule.candidates turns each into a Schedule, and the search of
compiler.kernel lowers, allocates, synchronises and prices the best of them by
compiler.cost.schedule_cycles: the cheapest wins.
"""
from __future__ import annotations

from dataclasses import replace

from nnpsim.config import Config

from ..errors import CompileError
from ..sizes import capacities
from .conv_plan import ConvTiling, NuPlan, buffer_needs, fits, powers_up_to, requantises_on_nu
from .depthwise import narrow_tilings
from .layout import bias_blocks


# NU passes per output pixel and block at or below which the bias broadcast (two ABUF port cycles
# per pixel and block, beside the drain's two) would dominate: offer the other bias modes.
SHALLOW = 16


MIN_TILES = 4           # below this many spatial tiles, smaller ones are worth pricing


def tile_count(p: NuPlan, t: ConvTiling) -> int:
    """Spatial tiles of a tiling."""
    return p.view.x_shape[0] * -(-p.oh // t.th) * -(-p.ow // t.tw)


def _largest_spatial(p: NuPlan, obt: int, cbt: int, caps, residual: bool,
                     resident: bool = False, drain: str = "vu", depths: dict[str, int] | None = None) -> ConvTiling | None:
    for tw in sorted(set([p.ow] + powers_up_to(p.ow)), reverse=True):
        best = None
        for th in powers_up_to(p.oh):
            t = ConvTiling(th, tw, obt, cbt, resident, drain=drain)
            if fits(buffer_needs(p, t, residual, depths), caps):
                best = t
        if best is not None:
            return best
    return None


def row_tile(p: NuPlan, caps, residual: bool, depths: dict[str, int] | None = None) -> ConvTiling | None:
    """The largest tile holding every output block (weights streamed, one chunk: a tiling that walks rows
    outermost) whose buffers, `depths` slots per role, fit `caps` (None: none does)."""
    return _largest_spatial(p, p.n_ob, p.w.span, caps, residual, depths=depths)


def bias_modes(p: NuPlan) -> tuple[str, ...]:
    """The bias modes beside "fill" that a shallow conv's tilings are also offered in, which its values decide."""
    if p.view.bias is None or p.w.span * p.kh * p.kw > SHALLOW or p.depthwise or p.view.fmode is not None:
        return ()
    # the VU adds a bias to the accumulator in its own wide arithmetic, which does not wrap: an
    # accumulator that may wrap (as onnxruntime's does) takes its bias on the NU
    return (() if p.view.may_wrap else ("requant",)) + (
        ("nu",) if bias_blocks(p.view.bias, p.view.x_zp, p.n_ob, p.rows, p.cols) else ())


def value_facts(p: NuPlan) -> tuple:
    """What conv_candidates reads of a plan's values rather than its shapes (structure.tiling_key leaves
    values out): a memo of tilings keyed by the shapes must be keyed by these too."""
    return bias_modes(p), requantises_on_nu(p)


def conv_candidates(p: NuPlan, cfg: Config, residual: bool = False,
                    min_tiles: int = MIN_TILES, output_stage: bool = True) -> list[ConvTiling]:
    """Tilings that fit the buffers: per (output blocks, chunk) pair the largest spatial tile
    (and, when that leaves fewer than min_tiles tiles, the same split by rows), in every offered bias mode;
    on the NU's output stage too unless output_stage is False (parts whose NU has no VU of its number)."""
    caps = capacities(cfg)
    if p.view.fmode is not None and not output_stage:
        raise CompileError("a conv in the NU's float mode ends on the NU's output stage (nu.fconv.rq), which "
                           "this part's NU, without a VU of its number, has not")
    out = []
    # several chunks end on the NU's output stage (nu.conv.acc.rq) when the conv requantises: the NU's
    # work is a fill tiling's, the rest less (no bias broadcast, drain or VU pass) and the buffers
    # smaller, so the fill tiling would only cost the search time (never faster on MobileNetV2's layers)
    staged = output_stage and requantises_on_nu(p)
    for obt in powers_up_to(p.n_ob):
        for cbt in powers_up_to(p.w.span):
            t = _largest_spatial(p, obt, cbt, caps, residual, drain="nu" if staged and cbt < p.w.span else "vu")
            if t is not None:
                out.append(t)
        # depthwise weights are a few hundred bytes a block: streamed, each tile's block rides on an
        # idle channel, while resident ones only hold back the first tile
        t = None if p.depthwise else _largest_spatial(p, obt, p.w.span, caps, residual, resident=True)
        if t is not None:
            out.append(t)
    if p.depthwise:
        out += narrow_tilings(p, caps, residual)
    # few tiles leave nothing to overlap: also offer the spatial tile split in 2 and 4 (by rows)
    out += [replace(t, th=-(-t.th // k)) for t in list(out) for k in (2, 4)
            if t.th >= k and tile_count(p, t) < min_tiles]
    modes = bias_modes(p)
    out += [c for t in out if t.drain == "vu" for mode in modes for c in [replace(t, bias=mode)]
            if fits(buffer_needs(p, c, residual), caps)]
    # one chunk on the NU's output stage (nu.conv.rq): no drain, no VU pass, beside the fill tiling
    out += [c for t in out if staged and t.bias == "fill" and t.drain == "vu" and t.cbt >= p.w.span
            for c in [replace(t, drain="nu")] if fits(buffer_needs(p, c, residual), caps)]
    if p.view.fmode is not None:       # nu.fconv.rq quantises: the float mode has no other output path
        out = [t for t in out if t.drain == "nu"]
    if not out:
        needs = buffer_needs(p, ConvTiling(1, 1, 1, 1), residual)
        worst = max(needs, key=lambda k: needs[k] / caps[k])
        raise CompileError(f"no tile fits: even a 1x1 tile needs {needs[worst]} bytes of {worst} "
                           f"(capacity {caps[worst]})")
    return out
