"""Halo recomputed: a chain of convs whose intermediates live in rings of row bands in DM.

Kept (lowering.driver), an intermediate lives whole in DM and each of its rows is
computed once; a consumer row tile re-reads its halo rows from there.  Here every
conv -> conv intermediate is instead a ring of `depth` slots in DM, each slot one
*band*: the rows one consumer row tile reads (its window, halo included).  The
producer computes each band as one row tile of its own, so the rows two
neighbouring bands share (the halo) are computed twice, but no row has to outlive
its band: the ring takes depth bands, not the whole map.

The bands are derived from the last conv backwards: its row tiles (the schedule's)
give the bands of its input; the producer's row tiles are those bands (its tile
height the tallest band, its column tile shrunk to keep the tile's area), which
give the bands of the producer's own input, and so on.  Every conv of the chain
thus has one row tile per band, band i of every kernel with the same index i, and
band i lives in slot i % depth of each ring.  compiler.pipelining orders the bands
(ring_order) so that a band is read after it is written and before its slot is
written again, and prices the result beside the kept variants.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace

from nnpsim.config import Config

from ..errors import CompileError
from ..ir import Buffer, KernelIR
from ..ops import Conv2d, Elementwise
from .conv_plan import ConvTiling, NuPlan, chunks, input_extent
from .double_buffer import Step
from .driver import NuChoice, nu_note, segments, sites
from .layout import row_strides
from .nu import NuLowering


@dataclass
class Ring:
    """One intermediate as a ring: its slots (one band each) and each band's rows [lo, hi)."""

    slots: list[Buffer]
    bands: list[tuple[int, int]]
    rows: int                   # rows a slot holds: the tallest band

    def slot(self, band: int) -> Buffer:
        """The slot band `band` lives in."""
        return self.slots[band % len(self.slots)]


def bands(p: NuPlan, starts: list[int], th: int) -> list[tuple[int, int]]:
    """Input rows [lo, hi) each consumer row tile (first output rows `starts`, th rows each) reads."""
    v, h = p.view, p.view.x_shape[2]
    out = []
    for oh0 in starts:
        n = min(th, p.oh - oh0)
        top = oh0 * v.stride[0] - v.padding[0]
        out.append((min(max(top, 0), h), min(max(top + input_extent(p, n, 0), 0), h)))
    return out


def ring_able(ops, choices: list) -> str:
    """Why the chain cannot recompute its halos ('' if it can): every kernel a conv on one NU, batch 1,
    no residual add before the last, none but the first gathering its windows into IBUF rows."""
    segs = segments(ops)
    if len(segs) < 2:
        return "one kernel"
    for k, (seg, c) in enumerate(zip(segs, choices)):
        if not isinstance(seg[0], Conv2d) or not isinstance(c, NuChoice):
            return f"{seg[0].kind} is not a conv"
        if c.split is not None:
            return "split over units"
        if seg[0].x_shape[0] != 1:
            return "batch above 1"
        if k + 1 < len(segs) and any(isinstance(o, Elementwise) and o.is_add for o in seg):
            return "residual add before the last conv"
        if k > 0 and c.plan.view.taps is not None:     # its plan's kernel is the gathered one, 1 x 1
            return "a conv after the first gathers its windows (im2col)"
    return ""


class RingNu(NuLowering):
    """A conv of a ring chain: its row tiles start at `starts` (one per band), it reads band i of
    ring `src` (when its input is one) and writes band i into ring `dst` (when its output is one)."""

    def __init__(self, *args, starts: list[int], src: Ring | None, dst: Ring | None, **kw):
        super().__init__(*args, **kw)
        self.starts, self.src, self.dst = starts, src, dst
        self.current = 0      # the band of the tile being lowered: tiles() sets it as steps() walks them

    def tiles(self) -> Iterator[tuple[range, int, int, int, int, bool, bool]]:
        """One row tile per band (then columns, output-block groups or chunks), row after row."""
        p, t = self.p, self.t
        groups = [range(ob0, min(p.n_ob, ob0 + t.obt)) for ob0 in range(0, p.n_ob, t.obt)]
        n_chunks = len(chunks(p, t.cbt))
        first = True
        for band, oh0 in enumerate(self.starts):
            self.current = band
            for ow0 in range(0, p.ow, t.tw):
                if t.resident:
                    for g, obs in enumerate(groups):
                        yield obs, 0, oh0, ow0, 0, False, g == 0
                    continue
                for j in range(n_chunks):      # row_major: one output-block group
                    yield groups[0], 0, oh0, ow0, j, first or n_chunks > 1, True
                first = False

    def tile_bands(self) -> list[int]:
        """The band of each tile, in tiles() order."""
        return [self.current for _ in self.tiles()]

    def _load_input(self, step, n, oh0, ow0, th, tw, lo, hi):
        if self.src is None:
            return super()._load_input(step, n, oh0, ow0, th, tw, lo, hi)
        b = self.current
        r0, r1 = self.src.bands[b]
        p, x, v = self.p, self.x, self.p.view
        # the band seen as the whole input: its first row is row 0, the rows above it are padding
        self.p = replace(p, view=replace(v, x_shape=(1, v.x_shape[1], r1 - r0, v.x_shape[3]),
                                         padding=(v.padding[0] + r0, *v.padding[1:])))
        self.x = self.src.slot(b)
        try:
            return super()._load_input(step, n, oh0, ow0, th, tw, lo, hi)
        finally:
            self.p, self.x = p, x

    def _finish(self, step, out, obs, n, oh0, ow0, th, tw):
        if self.dst is None:
            return super()._finish(step, out, obs, n, oh0, ow0, th, tw)
        y = self.y
        self.y = self.dst.slot(self.current)
        try:
            super()._finish(step, out, obs, n, 0, ow0, th, tw)     # the band's first row is the slot's row 0
        finally:
            self.y = y


@dataclass
class RingKernel:
    """A chain lowered with its halos recomputed: the KernelIR (body left to the pipeline), each
    kernel's constants Step and its tile Steps by band."""

    kir: KernelIR
    constants: list[Step]
    banded: list[list[list[Step]]]      # kernel -> band -> Steps
    rings: list[Ring]


def row_after_row(c: NuChoice) -> ConvTiling:
    """The choice's tiling, or one that runs row after row (every output block in one tile, as
    pipeline_schedule.row_major asks) with about the same accumulator and weight tile: the columns
    and input blocks per chunk (unless nu.conv.rq drains it) shrink as the output blocks grow."""
    t, n_ob = c.tiling, c.plan.n_ob
    if t.resident or t.obt >= n_ob:
        return t
    # nu.conv.rq's output stage must see the whole sum: its input blocks stay in one chunk
    cbt = t.cbt if t.drain == "nu" else max(1, t.cbt * t.obt // n_ob)
    return replace(t, obt=n_ob, tw=max(1, t.tw * t.obt // n_ob), cbt=cbt)


def _tilings(choices: list[NuChoice]) -> tuple[list[ConvTiling], list[list[int]], list]:
    """Each conv's tiling and row-tile starts, and each intermediate's bands, from the last conv back."""
    last = choices[-1]
    t = row_after_row(last)
    tilings, starts = [t], [list(range(0, last.plan.oh, t.th))]
    band_lists = []
    for k in range(len(choices) - 1, 0, -1):
        b = bands(choices[k].plan, starts[0], tilings[0].th)
        if any(hi <= lo for lo, hi in b):
            raise CompileError("a band is empty (a window of padding alone)")
        rows = max(hi - lo for lo, hi in b)
        pt = row_after_row(choices[k - 1])
        tw = max(1, min(pt.tw, pt.th * pt.tw // rows))
        tilings.insert(0, replace(pt, th=rows, tw=tw))
        starts.insert(0, [lo for lo, _ in b])
        band_lists.insert(0, b)
    return tilings, starts, band_lists


def lower_ring(sched, cfg: Config, depth: int) -> RingKernel | None:
    """The chain of sched with every intermediate a ring of `depth` bands (None: it cannot be)."""
    choices = sched.choices()
    if ring_able(sched.ops, choices) or depth < 2:
        return None
    found, inputs, y, _ = sites(sched.ops, cfg)
    try:
        tilings, starts, band_lists = _tilings(choices)
    except CompileError:
        return None
    if len(starts[-1]) < 2:
        return None       # one band: the ring would be the whole intermediate
    rings = []
    for k, b in enumerate(band_lists):
        _, c, _, w = choices[k].plan.view.y_shape
        rows = tilings[k].th
        rings.append(Ring([Buffer(f"t{k}_ring{j}", "dm", rows * c * w, 64) for j in range(depth)], b, rows))
    lows, notes = [], []
    for k, (site, c) in enumerate(zip(found, choices)):
        src = rings[k - 1] if k > 0 else None
        dst = rings[k] if k < len(rings) else None
        v = c.plan.view
        if src is not None:
            v = replace(v, x_strides=row_strides((1, v.x_shape[1], src.rows, v.x_shape[3])))
        if dst is not None:
            v = replace(v, y_strides=row_strides((1, v.y_shape[1], dst.rows, v.y_shape[3])))
        p = replace(c.plan, view=v)
        if p.depthwise and dst is not None and tilings[k].th >= p.oh:
            return None       # lowering.depthwise would place the halo as for one tile over the plane
        low = RingNu(p, tilings[k], site.ins[0], site.out, site.name, c.residual, site.res_buf,
                     roles=c.roles, depths=c.depths, starts=starts[k], src=src, dst=dst)
        lows.append(low)
        if dst is not None:
            notes.append(f"intermediate t{k} ({site.seg[-1].output.dtype} {site.seg[-1].output.shape}) recomputed "
                         f"halo: a ring of {depth} bands of {dst.rows} rows in DM, {len(dst.bands)} bands")
        notes.append(nu_note(site, replace(c, tiling=tilings[k])))
    constants, banded = [], []
    for low in lows:
        steps = low.steps()
        constants.append(steps[0])
        per = [[] for _ in starts[-1]]
        for b, st in zip(low.tile_bands(), steps[1:]):
            per[b].append(st)
        banded.append(per)
    buffers = inputs + [y] + [s for r in rings for s in r.slots] + [b for low in lows for b in low.buffers()]
    return RingKernel(KernelIR(sched.ops[0].kind, buffers, [], inputs, y, notes), constants, banded, rings)
