"""The lowering driver: a chain of ops cut into kernels (segments), each lowered as its schedule says (lower).

A conv2d or dense absorbs the ops after it that act on its int8 output
elementwise: relu and clip narrow its output clamp (clip after clip is one
clip with both bounds composed), and one add whose first input is the conv
output becomes a residual add done in VBUF before the store, itself followed
by more relu / clip folded into the add's clamp; then lut ops (and relu / clip
after them) compose into one 256-entry table, which one vu.lut applies to each
tile in VBUF before its store.  A lut absorbs the luts and clips after it likewise.  A pooling or elementwise op
lowers onto the VU.  A longer chain (conv2d then conv2d, conv2d then
max_pool2d ...) is cut into such segments; the intermediate between two
segments stays on chip in DM when it fits (and the assembly says so), else it
goes through a DDR scratch buffer; compiler.pipelining also prices a chain of
convs with its intermediates in rings of row bands whose halos are recomputed
(lowering.ring), taken instead of a DDR scratch buffer when it fits.

lower(schedule, config) carries out a compiler.schedule.Schedule: it reads the
schedule's choices() (a NuChoice or VuChoice per segment) and never imports
compiler.schedule, which sits above the lowering.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from nnpsim.config import Config

from .. import cost
from ..errors import CompileError
from ..ir import Buffer, KernelIR
from .. import reference as sem
from ..ops import Conv2d, Dense, Elementwise, Lut, Op, Pool2d, ResizeLinear, Softmax
from .double_buffer import Step
from .layout import row_strides
from .movement import MoveLowering, is_movement, takes_lut
from .resize import LerpLowering
from .softmax import SoftmaxLowering
from .conv_plan import ConvTiling, NuPlan
from .nu import NuLowering, Residual
from .units import SplitLowering, parts
from .vu import ElementwiseLowering, PoolLowering, binary_command, row_walk


ESTIMATE_TILES = 24    # tiles lowered to estimate a tiling's cycles
ALL_INT8 = np.arange(-128, 128, dtype=np.int8)
"""Every int8 value in table order (entry k is input k - 128): a clamp as a table."""


def compose_clamp(lo: int, hi: int, lo2: int, hi2: int) -> tuple[int, int]:
    """(L, H) with clip(clip(v, lo, hi), lo2, hi2) == clip(v, L, H) for every v."""
    return min(max(lo, lo2), hi2), min(max(hi, lo2), hi2)


def _io_buffer(name: str, t) -> Buffer:
    return Buffer(name, "ddr", t.nbytes, dtype=t.dtype, shape=t.shape)


def _check_link(prev: Op, nxt: Op) -> None:
    src, dst = prev.output, nxt.inputs[0]
    if src.shape != dst.shape or src.dtype != dst.dtype:
        raise CompileError(f"{prev.kind} gives {src.dtype} {src.shape} but {nxt.kind} takes "
                           f"{dst.dtype} {dst.shape} as its first input")


def fuse_nu_chain(ops: tuple[Op, ...]) -> tuple[Conv2d | Dense, Residual | None, Op | None]:
    """The NU op with clamps folded in (and the luts after them, as one table: its act), the residual add
    (if any) and the add op itself."""
    head, residual, add_op, act = ops[0], None, None, None
    lo, hi = head.lo, head.hi
    for prev, op in zip(ops, ops[1:]):
        _check_link(prev, op)
        if isinstance(op, Lut) or (act is not None and isinstance(op, Elementwise) and op.mode == "clip"):
            act = fused_table(act, op)
        elif isinstance(op, Elementwise) and op.mode == "clip":
            if residual is None:
                lo, hi = compose_clamp(lo, hi, op.lo, op.hi)
            else:
                residual = replace(residual, **dict(zip(("lo", "hi"), compose_clamp(residual.lo, residual.hi,
                                                                                    op.lo, op.hi))))
        elif isinstance(op, Elementwise) and op.is_add and residual is None:
            mnemonic, scalars = binary_command(op)
            residual, add_op = Residual(mnemonic, tuple(scalars.items()), op.lo, op.hi, op.x_layout), op
        else:
            raise CompileError(f"cannot fuse {op.kind} after {prev.kind}: a conv2d or dense kernel takes "
                               "relu / clip and one residual add (then relu / clip), then luts, after it")
    # the segment stores what its last op writes, in that op's layout
    out = {"y_layout": ops[-1].y_layout} if isinstance(head, Conv2d) and len(ops) > 1 else {}
    head = replace(head, lo=lo, hi=hi, act=act, **out)
    return (head.live() if isinstance(head, Conv2d) else head), residual, add_op


def fused_table(act, op: Elementwise):
    """The table of a lut (or relu / clip) op applied after the table `act` (None: no table yet)."""
    entries = op.entries() if isinstance(op, Lut) else sem.clip(ALL_INT8, op.lo, op.hi)
    return entries if act is None else sem.lut(act, entries)


def _epilogue_op(op: Op, has_lut: bool, adds: int) -> bool:
    """Does an NU kernel take op after what it took so far: relu / clip, a lut, or its one residual add
    (same-shape b an input, in B's role, before any lut)?"""
    if isinstance(op, Lut):
        return True
    return isinstance(op, Elementwise) and (op.mode == "clip" or (
        op.is_add and op.b_shape is None and op.b_const is None and not op.reverse and adds == 0
        and not has_lut))


def segments(ops: tuple[Op, ...]) -> list[tuple[Op, ...]]:
    """Cut a chain into kernels: an NU op with the relu / clip / one add it absorbs, or one op."""
    for prev, op in zip(ops, ops[1:]):
        _check_link(prev, op)
    out, i = [], 0
    while i < len(ops):
        j = i + 1
        if isinstance(ops[i], (Conv2d, Dense)):
            adds, has_lut = 0, False
            while j < len(ops) and _epilogue_op(ops[j], has_lut, adds):
                adds += ops[j].is_add
                has_lut |= isinstance(ops[j], Lut)
                j += 1
        elif takes_lut(ops[i]):                    # a copy's luts (and clips): one table on its tiles
            while j < len(ops) and (isinstance(ops[j], Lut) or (isinstance(ops[j], Elementwise)
                                                                 and ops[j].mode == "clip")):
                j += 1
        elif isinstance(ops[i], Elementwise):      # clips after it, luts after a lut: one table
            while j < len(ops) and isinstance(ops[j], Elementwise) and (
                    ops[j].mode == "clip" or (isinstance(ops[i], Lut) and isinstance(ops[j], Lut))):
                j += 1
        out.append(ops[i:j])
        i = j
    return out


class _Names:
    """Kernel input buffers: the head's (x, or a and b), then b, b2, b3 ... for later second inputs."""

    def __init__(self, head: Op):
        self.inputs = [_io_buffer(t.name, t) for t in head.inputs]

    def extra(self, tensor) -> Buffer:
        """A new kernel input for a later op's second operand."""
        used = {b.name for b in self.inputs}
        name = next(n for n in ["b"] + [f"b{k}" for k in range(2, 100)] if n not in used)
        buf = _io_buffer(name, tensor)
        self.inputs.append(buf)
        return buf


@dataclass
class NuChoice:
    """What a schedule decided for a conv2d / dense kernel (compiler.schedule builds it).

    plan: the op's NuPlan (weights stored by the schedule's layout); tiling: tile sizes, weights
    resident or streamed, bias mode; split: "spatial" or "channel" tiles dealt over `units` NUs
    (None: one NU); roles and depths: the names and slots of its buffers (conv_plan.ROLES, conv_plan.DEPTHS).
    """

    plan: NuPlan
    tiling: ConvTiling
    residual: Residual | None = None
    split: str | None = None
    units: int = 1
    roles: dict[str, str] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)


@dataclass
class VuChoice:
    """What a schedule decided for a pooling / elementwise kernel: its tile (an elementwise op's
    element budget, a pool's (channels, output rows)), the VUs its tiles are dealt over, its
    buffers' names and slots, and a pool's window instruction (None: the cheaper)."""

    tile: int | tuple[int, int] | None = None
    units: int = 1
    roles: dict[str, str] = field(default_factory=dict)
    depths: dict[str, int] = field(default_factory=dict)
    engine: str | None = None


@dataclass
class Site:
    """Where one kernel of a chain reads and writes: its ops, name, inputs, output, residual input."""

    seg: tuple[Op, ...]
    name: str
    ins: list[Buffer]
    out: Buffer
    res_buf: Buffer | None = None
    where: str = ""          # where its output lives, when it is an intermediate
    in_rows: bool = False    # its input is an intermediate in DM stored row by row (row_strides)
    out_rows: bool = False   # its output likewise


def _by_rows(seg: tuple[Op, ...], nxt: tuple[Op, ...], out: Buffer) -> bool:
    """Is the intermediate between two kernels kept row by row?  In DM, from a conv2d kernel with no
    residual add (that reads its DDR input with the output's strides) into a conv2d kernel or a VU
    kernel that walks rows outermost (vu.row_walk: a pool, an elementwise op); or from a squeeze-excite
    multiply (a mul by a per-channel b) walking rows outermost into a conv2d kernel, which then starts
    on the first rows of x * gate (its prologue) instead of on the whole."""
    if out.space == "dm" and isinstance(nxt[0], Conv2d) and gate_mul(seg[0]):
        return True
    return (out.space == "dm" and isinstance(seg[0], Conv2d) and (isinstance(nxt[0], Conv2d) or row_walk(nxt[0]))
            and not any(isinstance(o, Elementwise) and o.is_add for o in seg))


def gate_mul(op: Op) -> bool:
    """Is op a squeeze-excite multiply: a mul of an NCHW tensor of several rows by b of one value per channel?"""
    return (isinstance(op, Elementwise) and op.mode == "mul" and row_walk(op) and op.b_shape is not None
            and op.b_const is None and len(op.b_shape) == 4 and op.b_shape[2:] == (1, 1) and op.b_shape[1] > 1)


def sites(ops: tuple[Op, ...], cfg: Config) -> tuple[list[Site], list[Buffer], Buffer, list[Buffer]]:
    """Each kernel's Site, the chain's input buffers, its output and the intermediates between kernels."""
    segs = segments(ops)
    names = _Names(ops[0])
    y = _io_buffer("y", ops[-1].output)
    out_sites, mids = [], []
    x, in_rows = names.inputs[0], False
    for k, seg in enumerate(segs):
        where, out_rows = "", False
        if k + 1 < len(segs):
            out, where = _intermediate(k + 1, seg[-1].output, cfg)
            out_rows = _by_rows(seg, segs[k + 1], out)
            where += ", row by row (n, h, c, w)" if out_rows else ""
            mids.append(out)
        else:
            out = y
        if isinstance(seg[0], (Conv2d, Dense)):
            _, residual, add_op = fuse_nu_chain(seg)
            res = names.extra(add_op.inputs[1]) if residual is not None else None
            out_sites.append(Site(seg, f"L{k}", [x], out, res, where, in_rows, out_rows))
        elif is_movement(seg[0]):
            if k and len(seg[0].inputs) > 1:
                raise CompileError(f"{seg[0].kind} of {len(seg[0].inputs)} inputs after another op: a chain's "
                                   "later ops take one input from the op before")
            out_sites.append(Site(seg, f"L{k}", names.inputs if k == 0 else [x], out, None, where))
        else:
            ins = [x] + ([names.inputs[1] if k == 0 else names.extra(seg[0].inputs[1])]
                         if len(seg[0].inputs) > 1 else [])      # a binary op's b, unless a constant
            out_sites.append(Site(seg, f"L{k}", ins, out, None, where, in_rows, out_rows))
        x, in_rows = out, out_rows
    return out_sites, names.inputs, y, mids


def nu_note(site: Site, c: NuChoice) -> str:
    """The kernel header's line about an NU kernel's tiling."""
    t, v = c.tiling, c.plan.view
    spread = f", split by {c.split} tiles over {c.units} NUs" if c.split else ""
    return (f"{site.name} {' + '.join(o.kind for o in site.seg)}: tiling {t.th} rows x {t.tw} cols x {t.obt} output "
            f"blocks, {t.cbt} input blocks per NU chunk, weights {'resident' if t.resident else 'streamed'}"
            + {"fill": "", "requant": ", bias added by the requantiser",
               "nu": ", bias by a NU pass"}[t.bias if v.bias is not None else "fill"]
            + (", residual add fused in VBUF before the store" if c.residual is not None else "") + spread)


Lowering = (NuLowering | ElementwiseLowering | PoolLowering | SplitLowering | MoveLowering | SoftmaxLowering
            | LerpLowering)
"""What lowers one kernel of a chain: one unit's lowering, or several units' side by side."""


def nu_lowering(site: Site, c: NuChoice, cfg: Config) -> NuLowering | SplitLowering:
    """The lowering of an NU kernel as chosen (its parts side by side when split over NUs)."""
    args = (_placed(c.plan, site), c.tiling, site.ins[0], site.out, site.name, c.residual, site.res_buf)
    kw = dict(roles=c.roles, depths=c.depths)
    if c.split is None:
        return NuLowering(*args, **kw)
    first, *rest = parts(c.split, c.units, cfg)
    low = NuLowering(*args, first, **kw)
    return SplitLowering([low] + [NuLowering(*args, pt, low, **kw) for pt in rest])


def _placed(p: NuPlan, site: Site) -> NuPlan:
    """The plan with the strides of an intermediate kept row by row."""
    if not (site.in_rows or site.out_rows):
        return p
    v = p.view
    return replace(p, view=replace(v, x_strides=row_strides(v.x_shape) if site.in_rows else v.x_strides,
                                   y_strides=row_strides(v.y_shape) if site.out_rows else v.y_strides,
                                   x_block=0 if site.in_rows else v.x_block,
                                   y_block=0 if site.out_rows else v.y_block))


def lowering(site: Site, c: NuChoice | VuChoice, cfg: Config) -> tuple[Lowering, str]:
    """(lowering, note) of one kernel of a chain, as its choice says."""
    if isinstance(c, NuChoice):
        return nu_lowering(site, c, cfg), nu_note(site, c)
    if is_movement(site.seg[0]) or isinstance(site.seg[0], Softmax):
        own = (SoftmaxLowering if isinstance(site.seg[0], Softmax) else
               LerpLowering if isinstance(site.seg[0], ResizeLinear) else MoveLowering)
        table = None
        for op in site.seg[1:]:                 # a copy's luts and clips (takes_lut): one table
            table = fused_table(table, op)
        low = (own(site.seg[0], site.ins, site.out, cfg, site.name) if table is None else
               MoveLowering(site.seg[0], site.ins, site.out, cfg, site.name, table))
        return low, low.note()
    return _vu_lowering(fold_clamps(site.seg), site.ins, site.out, cfg, site.name, c, site.in_rows, site.out_rows)


def estimate(low, cfg: Config) -> float:
    """Quick cycles of a lowering: the per-tile model on its first tiles, scaled to all of them."""
    steps = low.steps(limit=ESTIMATE_TILES)
    return cost.pipeline_cycles(steps, cfg) * low.n_tiles() / max(1, len(steps) - 1)


def fold_clamps(seg: tuple[Op, ...]) -> Op:
    """An elementwise op with the relu / clip ops after it composed into its own clamp."""
    op = seg[0]
    for nxt in seg[1:]:
        if isinstance(nxt, Lut):        # a lut after a lut (with its clamp): one table
            op = op.then(nxt)
            continue
        lo, hi = compose_clamp(op.lo, op.hi, nxt.lo, nxt.hi)
        op = replace(op, lo=lo, hi=hi)
    return op


def _vu_lowering(op: Op, ins: list[Buffer], y: Buffer, cfg: Config, name: str, c: VuChoice,
                 rows: bool = False, out_rows: bool = False) -> tuple[Lowering, str]:
    """The lowering of a VU op, its tiles dealt round robin over c.units VUs, and its note (rows: its input
    is kept row by row, walk rows outermost; out_rows: its output likewise)."""
    lowering = PoolLowering if isinstance(op, Pool2d) else ElementwiseLowering
    args = (ins[0],) if isinstance(op, Pool2d) else (ins,)
    engine = {"engine": c.engine} if isinstance(op, Pool2d) else {"out_rows": out_rows}
    lows = []
    for part in parts("tile", c.units, cfg) if c.units > 1 else [None]:
        lows.append(lowering(op, *args, y, cfg, name, c.tile, part=part, shared=lows[0] if lows else None,
                             roles=c.roles, depths=c.depths, rows=rows, **engine))
    low, split = lows[0], SplitLowering(lows)
    spread = f", tiles dealt over {len(split.parts)} VUs" if len(split.parts) > 1 else ""
    spread += ", rows outermost" if rows or out_rows else ""
    if isinstance(op, Pool2d):
        note = f"{name} {op.kind}: tiling {low.cc} channels x {low.th} output rows per tile{spread}"
    else:
        note = f"{name} {op.kind}: tiling up to {low.budget} elements per tile{spread}"
    return (split if len(split.parts) > 1 else low), note


def vu_tile(op: Op, cfg: Config) -> int | tuple[int, int]:
    """The tile a VU kernel takes by default: an elementwise op's element budget, a pool's (channels, rows)."""
    x = Buffer("x", "ddr", 1)
    if isinstance(op, Pool2d):
        low = PoolLowering(op, x, x, cfg, "L")
        return low.cc, low.th
    return ElementwiseLowering(op, [x, x], x, cfg, "L").budget


def stays_in_dm(nbytes: int, cfg: Config) -> bool:
    """Does an intermediate of nbytes stay on chip between two kernels: at most half of DM?"""
    return nbytes <= cfg.dm_bytes // 2


def _intermediate(k: int, tensor, cfg: Config) -> tuple[Buffer, str]:
    """Where the output of segment k lives: DM when it fits in half of it (stays_in_dm), else DDR scratch."""
    if stays_in_dm(tensor.nbytes, cfg):
        return (Buffer(f"t{k}", "dm", tensor.nbytes, 64),
                f"intermediate t{k} ({tensor.dtype} {tensor.shape}) stays on chip in DM")
    return (Buffer(f"t{k}", "ddr", tensor.nbytes, dtype=tensor.dtype, shape=tensor.shape),
            f"intermediate t{k} ({tensor.dtype} {tensor.shape}) does not fit DM: DDR scratch buffer")


def lower(sched, cfg: Config) -> tuple[KernelIR, list[list[Step]]]:
    """A checked compiler.schedule.Schedule lowered: the KernelIR's buffers and notes (its body is
    left to the pipeline) and each kernel's Steps."""
    found, inputs, y, mids = sites(sched.ops, cfg)
    lows, notes = [], []
    for site, choice in zip(found, sched.choices()):
        low, note = lowering(site, choice, cfg)
        lows.append(low)
        notes += ([site.where] if site.where else []) + [note]
    steps = [low.steps() for low in lows]
    buffers = inputs + [y] + mids + [b for low in lows for b in low.buffers()]
    return KernelIR(sched.ops[0].kind, buffers, [], inputs, y, notes), steps

