"""The plan of a conv on the NU, before any command: its tiling, its geometry and what a tiling needs.

A NuPlan is what the lowering derives once per conv2d / dense (its view, its
weights in NU order, its output geometry); a ConvTiling is one choice of tile
sizes, weight residency, bias mode and drain.  This module answers the
questions the tiling search (lowering.tiling, lowering.depthwise's narrow
tilings, compiler.schedule) and the lowering itself (lowering.nu) both ask of a
(plan, tiling) pair without building a command: which input blocks a chunk
reads, how many bytes of each memory the tiling's buffers take, whether the
NU's output stage requantises, whether the input goes through DM.  The plan
itself is built by nu.plan, which packs the weights (lowering.layout,
lowering.depthwise).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from nnpsim.timing import LUT_BYTES

from ..ir import RQ_ENTRY
from .layout import ConvView, NuWeights

VACC_DEPTH = 3      # drain, requantise and store of consecutive tiles overlap


@dataclass(frozen=True)
class ConvTiling:
    """Output rows and columns per tile, output blocks per tile, input blocks per NU chunk.

    resident: every weight block stays in WBUF for the whole kernel (one chunk),
    so the loops run over pixels outside and output blocks inside.
    bias: how a bias gets into the accumulators.  "fill": broadcast from DM
    into ABUF before the first nu.conv.acc (two ABUF port cycles per pixel and
    block, beside the drain's two).  "requant": requantise one channel per VU
    command with za = -bias (the requantiser computes (a - za) * M) into a
    separate int8 slot.  "nu": a first 1x1 nu.conv over a constant input tile
    with weights that multiply out to the bias (layout.bias_blocks).
    drain: how the accumulators reach VBUF.  "vu": drained by DMA as int32 and requantised by
    the VU.  "nu": nu.conv.rq's output stage adds the bias, requantises and writes int8 into
    VBUF (the bias mode is then unused); with several chunks the last one's nu.conv.acc.rq adds
    the others' partial sums from ABUF there (psum_on_nu).
    """

    th: int
    tw: int
    obt: int
    cbt: int
    resident: bool = False
    bias: str = "fill"
    drain: str = "vu"


@dataclass
class NuPlan:
    """Everything the lowering derives once per op, independent of the tiling."""

    view: ConvView
    w: NuWeights
    rows: int
    cols: int
    oh: int
    ow: int
    kh: int
    kw: int
    depthwise: bool = False     # nu.dwconv (compiler.lowering.depthwise) instead of block-diagonal nu.conv
    hulls: dict = field(default_factory=dict, repr=False, compare=False)   # tile_blocks' memo

    @property
    def n_ob(self) -> int:
        return self.w.out_cb


def input_extent(p: NuPlan, t: int, axis: int) -> int:
    """Input rows (axis 0) or columns (axis 1) a tile of t outputs reads."""
    k = (p.kh, p.kw)[axis]
    return (t - 1) * p.view.stride[axis] + (k - 1) * p.view.dilation[axis] + 1


def chunks(p: NuPlan, cbt: int) -> list[tuple[int, int]]:
    """(first, count) of the span-relative input blocks of each NU chunk."""
    return [(j, min(cbt, p.w.span - j)) for j in range(0, p.w.span, cbt)]


def block_hull(p: NuPlan, obs: range, first: int, count: int) -> tuple[int, int]:
    """Absolute input blocks [lo, hi) the chunk needs for the output blocks obs."""
    lo = min(p.w.cb_start[ob] for ob in obs) + first
    hi = max(p.w.cb_start[ob] for ob in obs) + first + count
    return lo, hi


DEPTHS = {"in": 2, "wt": 2, "acc": 2, "vacc": VACC_DEPTH, "res": 2, "out": 2}
"""Slots per role by default (double buffering; three accumulator copies in VBUF)."""

ROLES = {"in": "in", "wt": "wt", "wres": "wres", "acc": "acc", "vacc": "vacc", "res": "res"}
"""Each buffer role's name (after the lowering's name and an underscore) by default."""


def tile_blocks(p: NuPlan, t: ConvTiling) -> int:
    """The most input blocks one input tile load holds (memoised on the plan: every tiling asks)."""
    key = (t.obt, t.cbt, t.resident)
    if key not in p.hulls:
        if t.resident:
            lo, hi = block_hull(p, range(p.n_ob), 0, p.w.span)
            p.hulls[key] = hi - lo
        else:
            p.hulls[key] = max(hi - lo for ob0 in range(0, p.n_ob, t.obt) for first, count in chunks(p, t.cbt)
                               for lo, hi in [block_hull(p, range(ob0, min(p.n_ob, ob0 + t.obt)), first, count)])
    return p.hulls[key]


def role_depths(p: NuPlan, t: ConvTiling, depths: dict[str, int] | None = None) -> dict[str, int]:
    """Slots per role: `depths`, else DEPTHS, except that nu.conv.acc.rq's partial sums take one ABUF
    slot by default: only the NU touches them, in order (tile k+1's first chunk follows tile k's
    last on the same queue), while the drain a "vu" tiling has reads its slot from another queue."""
    d = {**DEPTHS, **(depths or {})}
    if psum_on_nu(p, t) and "acc" not in (depths or {}):
        d["acc"] = 1
    return d


def buffer_needs(p: NuPlan, t: ConvTiling, residual: bool, depths: dict[str, int] | None = None) -> dict[str, int]:
    """Bytes per memory a tiling needs (`depths` slots per role, by default role_depths')."""
    d = role_depths(p, t, depths)
    ih, iw = input_extent(p, t.th, 0), input_extent(p, t.tw, 1)
    blocks = tile_blocks(p, t)
    acc = t.obt * t.th * t.tw * p.cols * 4
    res = t.obt * t.th * t.tw * p.cols if residual else 0
    out = t.obt * t.th * t.tw * p.cols if t.bias == "requant" else 0
    on_nu = t.bias == "nu"
    if t.drain == "nu":     # int8 results straight into VBUF; the (bias, M, S) table in WBUF
        state = acc * 2 if p.view.fmode is not None else acc       # the float mode's (total, part) pairs
        w = p.w.blocks.nbytes if t.resident else d["wt"] * t.obt * min(t.cbt, p.w.span) * p.w.block_bytes
        return {"ibuf": d["in"] * blocks * ih * iw * p.rows, "wbuf": w + table_on_nu(p, t) * p.n_ob * p.cols * RQ_ENTRY,
                "abuf": d["acc"] * state if psum_on_nu(p, t) else 0,
                "vbuf": d["vacc"] * acc // 4 + d["res"] * res + act_bytes(p),
                "dm": d["in"] * tap_stage_bytes(p, t) + input_in_dm(p, t) * p.view.x_shape_bytes}
    return {"ibuf": d["in"] * blocks * ih * iw * p.rows + on_nu * t.th * t.tw * p.rows,
            "wbuf": ((p.w.blocks.nbytes if t.resident else d["wt"] * t.obt * min(t.cbt, p.w.span) * p.w.block_bytes)
                     + on_nu * p.n_ob * p.rows * p.cols),
            "abuf": d["acc"] * acc,
            "vbuf": (d["vacc"] * acc + d["res"] * res + d["out"] * out + p.n_ob * p.cols * p.view.table_entry
                     + act_bytes(p)),
            "dm": p.n_ob * p.cols * 4 + d["in"] * tap_stage_bytes(p, t) + input_in_dm(p, t) * p.view.x_shape_bytes}


def act_bytes(p: NuPlan) -> int:
    """VBUF bytes of a fused lut's table (vu.lut's 256 entries), 0 without one."""
    return 0 if p.view.act is None else LUT_BYTES


def requantises_on_nu(p: NuPlan) -> bool:
    """Can the NU's output stage (nu.conv.rq, nu.conv.acc.rq) finish this conv (output_stage_fits)?"""
    return output_stage_fits(p.view, p.depthwise)


def output_stage_fits(view: ConvView, depthwise: bool) -> bool:
    """Can the NU's output stage requantise a conv: with a requantisation, not on nu.dwconv (nu.fdwconv always
    quantises).  (A residual add still runs on the VU, on the int8 result in VBUF.)"""
    return (not depthwise or view.fmode is not None) and (view.scale is not None or view.multiplier is not None)


def table_on_nu(p: NuPlan, t: ConvTiling) -> bool:
    """Does the tiling's output stage read a requantiser's table from WBUF (nu.conv.rq, nu.fconv.rq)?  Not
    nu.fdwconv's, whose (bias, scale) rows lie in its weight blocks (lowering.depthwise)."""
    return t.drain == "nu" and not p.depthwise


def drains_on_nu(p: NuPlan, cbt: int) -> bool:
    """Can nu.conv.rq finish this conv in one command a tile: one chunk of cbt input blocks."""
    return requantises_on_nu(p) and cbt >= p.w.span


def psum_on_nu(p: NuPlan, t: ConvTiling) -> bool:
    """Does the tiling end each tile with nu.conv.acc.rq (the NU's output stage, several chunks)?"""
    return t.drain == "nu" and t.cbt < p.w.span


def fits(needs: dict[str, int], caps: dict[str, int]) -> bool:
    """Does every memory's need fit its capacity?"""
    return all(needs[k] <= caps[k] for k in needs)


STAGE_BYTES = 256 * 1024     # DM a staged input tile may take (two slots)


def staged_input(p: NuPlan, t: ConvTiling) -> bool:
    """Does an (unfolded, not depthwise) conv read NCHW input tiles through DM?  When a tile's rows
    are short runs in DDR (narrower than the plane and than a burst: a strided conv on a small map)."""
    v = p.view
    if v.fold is not None or v.taps is not None or p.depthwise or v.x_strides[1] == 1:
        return False
    w = v.x_shape[3]
    return input_extent(p, t.tw, 1) < min(w, 64) and stage_bytes(p, t) <= STAGE_BYTES // 2


DM_INPUT_BYTES = 512 * 1024     # DM a whole input kept on chip may take


def input_in_dm(p: NuPlan, t: ConvTiling) -> bool:
    """Does a staged conv keep its whole input in DM, each row loaded from DDR by the first tile that
    reads it?  When its weights stream by groups of output blocks, each group reading the whole input
    again: through DDR in short runs, that traffic would outweigh the weights'."""
    v = p.view
    if v.fold is not None or v.taps is not None or p.depthwise or v.x_strides[1] == 1 or t.resident:
        return False
    if len(set(p.w.cb_start)) != 1 or -(-p.n_ob // t.obt) < 2 or v.x_shape_bytes > DM_INPUT_BYTES:
        return False
    return input_extent(p, t.tw, 1) < min(v.x_shape[3], 64)


def stage_bytes(p: NuPlan, t: ConvTiling) -> int:
    """Bytes of one staged input tile: a chunk's channels x the tile's rows x the plane's width."""
    return min(p.view.x_shape[1], tile_blocks(p, t) * p.rows) * input_extent(p, t.th, 0) * p.view.x_shape[3]


def tap_stage_bytes(p: NuPlan, t: ConvTiling) -> int:
    """Bytes of one tap-folded conv's input window in DM (0 for any other conv): the channels x the
    rows x the columns, halo included, a full tile reads."""
    f, c = p.view.taps, p.view.x_shape[1]
    if f is None:
        return 0
    return (c * ((t.th - 1) * f.stride[0] + (f.kh - 1) * f.dilation[0] + 1)
            * ((t.tw - 1) * f.stride[1] + (f.kw - 1) * f.dilation[1] + 1))


def staged_fold(v: ConvView) -> bool:
    """Does a folded conv read its input through DM?  When its DDR gathers would be short runs: a
    stride over columns (single bytes) or channel-innermost x (a pixel's few channels)."""
    return v.fold is not None and (v.fold[1] > 1 or v.x_strides[1] == 1)



def powers_up_to(n: int) -> list[int]:
    """1, 2, 4 ... below n, then n: the sizes a tiling's dims are searched over."""
    out, v = [], 1
    while v < n:
        out.append(v)
        v *= 2
    return out + [n]
