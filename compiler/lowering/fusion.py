"""Fusion: fold a chain of ops into one kernel and lower it to a KernelIR.

A conv2d or dense absorbs the ops after it that act on its int8 output
elementwise: relu and clip narrow its output clamp (clip after clip is one
clip with both bounds composed), and one add whose first input is the conv
output becomes a residual add done in VBUF before the store, itself followed
by more relu / clip folded into the add's clamp.  A pooling or elementwise op
lowers onto the VU.  A longer chain (conv2d then conv2d, conv2d then
max_pool2d ...) is cut into such segments; the intermediate between two
segments stays on chip in DM when it fits (and the assembly says so), else it
goes through a DDR scratch buffer.
"""
from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from nnpsim.config import Config

from .. import cost
from ..errors import CompileError
from ..ir import Buffer, KernelIR
from ..ops import Conv2d, Dense, Elementwise, Op, Pool2d
from ..quant import f32_bits
from ..semantics import add_f32_params
from ..structure import tiling_key
from .double_buffer import Step, pipeline
from .layout import conv_view
from .nu import NuLowering, Residual, plan
from .tiling import MIN_TILES, conv_candidates, tile_count
from .units import SplitLowering, parts, shared_capacity
from .vu import ElementwiseLowering, PoolLowering


ESTIMATE_TILES = 24    # tiles lowered to estimate a tiling's cycles
_PICKS: dict[tuple, int] = {}   # a chain segment's tiling chosen by estimate, by structure and placement


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
    """The NU op with clamps folded in, the residual add (if any) and the add op itself."""
    head, residual, add_op = ops[0], None, None
    lo, hi = head.lo, head.hi
    for prev, op in zip(ops, ops[1:]):
        _check_link(prev, op)
        if isinstance(op, Elementwise) and op.mode == "clip":
            if residual is None:
                lo, hi = compose_clamp(lo, hi, op.lo, op.hi)
            else:
                residual = replace(residual, **dict(zip(("lo", "hi"), compose_clamp(residual.lo, residual.hi,
                                                                                    op.lo, op.hi))))
        elif isinstance(op, Elementwise) and op.mode == "add" and residual is None:
            residual, add_op = Residual(op.za, op.zb, op.ma, op.mb, op.shift, op.zp_out, op.lo, op.hi,
                                        _fadd_bits(op)), op
        else:
            raise CompileError(f"cannot fuse {op.kind} after {prev.kind}: a conv2d or dense kernel takes "
                               "relu / clip and one residual add (then relu / clip) after it")
    return replace(head, lo=lo, hi=hi), residual, add_op


def _fadd_bits(op: Elementwise) -> tuple[int, int, int] | None:
    """vu.fadd's (fscale, fscale_b, fbias) bits of a float-form add, else None."""
    if op.fscales is None:
        return None
    return tuple(f32_bits(v) for v in add_f32_params(*op.fscales, op.za, op.zb, op.zp_out))


def segments(ops: tuple[Op, ...]) -> list[tuple[Op, ...]]:
    """Cut a chain into kernels: an NU op with the relu / clip / one add it absorbs, or one op."""
    for prev, op in zip(ops, ops[1:]):
        _check_link(prev, op)
    out, i = [], 0
    while i < len(ops):
        j = i + 1
        if isinstance(ops[i], (Conv2d, Dense)):
            adds = 0
            while j < len(ops) and isinstance(ops[j], Elementwise) and (
                    ops[j].mode == "clip" or (ops[j].mode == "add" and adds == 0)):
                adds += ops[j].mode == "add"
                j += 1
        elif isinstance(ops[i], Elementwise):
            while j < len(ops) and isinstance(ops[j], Elementwise) and ops[j].mode == "clip":
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


def _nu_lowerings(seg, x: Buffer, y: Buffer, names: _Names, cfg: Config, name: str):
    """(factory of a fresh lowering, note) for every tiling candidate of an NU segment.

    With several NUs, also every tiling of the op split over all of them, by spatial tiles
    and (when there are enough output block groups) by output channels.
    """
    nu_op, residual, add_op = fuse_nu_chain(seg)
    p = plan(conv_view(nu_op, cfg.nu_rows), cfg)
    res_buf = names.extra(add_op.inputs[1]) if residual is not None else None

    def note(t, spread: str = "") -> str:
        return (f"{name} {' + '.join(o.kind for o in seg)}: tiling {t.th} rows x {t.tw} cols x {t.obt} output "
                f"blocks, {t.cbt} input blocks per NU chunk, weights {'resident' if t.resident else 'streamed'}"
                + {"fill": "", "requant": ", bias added by the requantiser",
                   "nu": ", bias by a NU pass"}[t.bias if nu_op.bias is not None else "fill"]
                + (", residual add fused in VBUF before the store" if residual is not None else "") + spread)

    for t in conv_candidates(p, cfg, residual is not None):
        yield (lambda t=t: NuLowering(p, t, x, y, name, residual, res_buf)), note(t)
    k = cfg.nu_count
    if k == 1:
        return
    for t in conv_candidates(p, shared_capacity(cfg, k, "nu"), residual is not None, MIN_TILES * k):
        ways = {"spatial": tile_count(p, t), "channel": -(-p.n_ob // t.obt)}
        for by in (by for by, n in ways.items() if n >= k):      # every part gets work
            def make(t=t, by=by):
                first, *rest = parts(by, k, cfg)
                low = NuLowering(p, t, x, y, name, residual, res_buf, first)
                return SplitLowering([low] + [NuLowering(p, t, x, y, name, residual, res_buf, pt, low)
                                              for pt in rest])
            yield make, note(t, f", split by {by} tiles over {k} NUs")


def estimate(make, cfg: Config) -> float:
    """Quick cycles of a lowering: the per-tile model on its first tiles, scaled to all of them."""
    low = make()
    steps = low.steps(limit=ESTIMATE_TILES)
    return cost.pipeline_cycles(steps, cfg) * low.n_tiles() / max(1, len(steps) - 1)


@dataclass
class Candidate:
    """One way to lower a chain: how to price it quickly, and how to build its KernelIR and Steps."""

    price: Callable[[], float]
    make: Callable[[], tuple[KernelIR, list[Step]]]

    @functools.cached_property
    def estimate(self) -> float:
        """The quick estimate of its cycles (computed once, on first use)."""
        return self.price()


def fold_clamps(seg: tuple[Op, ...]) -> Op:
    """An elementwise op with the relu / clip ops after it composed into its own clamp."""
    op = seg[0]
    for nxt in seg[1:]:
        lo, hi = compose_clamp(op.lo, op.hi, nxt.lo, nxt.hi)
        op = replace(op, lo=lo, hi=hi)
    return op


def _vu_lowering(op: Op, ins: list[Buffer], y: Buffer, cfg: Config, name: str):
    """The lowering of a VU op, its tiles dealt round robin over every VU, and its note."""
    lowering = PoolLowering if isinstance(op, Pool2d) else ElementwiseLowering
    args = (ins[0],) if isinstance(op, Pool2d) else (ins,)
    lows = []
    for part in parts("tile", cfg.vu_count, cfg) if cfg.vu_count > 1 else [None]:
        lows.append(lowering(op, *args, y, cfg, name, part=part, shared=lows[0] if lows else None))
    low, split = lows[0], SplitLowering(lows)
    spread = f", tiles dealt over {len(split.parts)} VUs" if len(split.parts) > 1 else ""
    if isinstance(op, Pool2d):
        note = f"{name} {op.kind}: tiling {low.cc} channels x {low.th} output rows per tile{spread}"
    else:
        note = f"{name} {op.kind}: tiling up to {low.budget} elements per tile{spread}"
    return (split if len(split.parts) > 1 else low), note


def _intermediate(k: int, tensor, cfg: Config) -> tuple[Buffer, str]:
    """Where the output of segment k lives: DM when it fits in half of it, else DDR scratch."""
    if tensor.nbytes <= cfg.dm_bytes // 2:
        return (Buffer(f"t{k}", "dm", tensor.nbytes, 64),
                f"intermediate t{k} ({tensor.dtype} {tensor.shape}) stays on chip in DM")
    return (Buffer(f"t{k}", "ddr", tensor.nbytes, dtype=tensor.dtype, shape=tensor.shape),
            f"intermediate t{k} ({tensor.dtype} {tensor.shape}) does not fit DM: DDR scratch buffer")


def lower_chain(ops: tuple[Op, ...], cfg: Config) -> Iterator[Candidate]:
    """The ways to lower the chain, each with its quick estimate (build them with .make()).

    A single conv2d / dense kernel gives one candidate per tiling (the caller prices the
    best few exactly); a chain of several kernels gives one, each NU kernel taking its best
    tiling by estimate.  Each kernel is pipelined on its own and the next starts after it: an
    intermediate is written whole before it is read.
    """
    segs = segments(ops)
    names = _Names(ops[0])
    y = _io_buffer("y", ops[-1].output)
    if len(segs) == 1 and isinstance(ops[0], (Conv2d, Dense)):
        for make, note in _nu_lowerings(ops, names.inputs[0], y, names, cfg, "L0"):
            yield Candidate(lambda make=make: estimate(make, cfg), lambda make=make, note=note: _kernel_ir(
                ops[0], [make()], names.inputs, y, [], [note]))
        return
    lows, mids, notes = [], [], []
    x = names.inputs[0]
    for k, seg in enumerate(segs):
        if k + 1 < len(segs):
            out, where = _intermediate(k + 1, seg[-1].output, cfg)
            mids.append(out)
            notes.append(where)
        else:
            out = y
        name = f"L{k}"
        if isinstance(seg[0], (Conv2d, Dense)):
            options = list(_nu_lowerings(seg, x, out, names, cfg, name))
            key = (tiling_key(seg), x.space, out.space, cfg)     # graph fusion prices many chains sharing segments
            if key not in _PICKS:
                _PICKS[key] = min(range(len(options)), key=lambda i: estimate(options[i][0], cfg))
            make, note = options[_PICKS[key]]
            low = make()
        else:
            ins = [x] + ([names.inputs[1] if k == 0 else names.extra(seg[0].inputs[1])]
                         if getattr(seg[0], "binary", False) else [])
            low, note = _vu_lowering(fold_clamps(seg), ins, out, cfg, name)
        lows.append(low)
        notes.append(note)
        x = out
    yield Candidate(lambda: 0.0, lambda: _kernel_ir(ops[0], lows, names.inputs, y, mids, notes))


def _kernel_ir(head: Op, lows, inputs: list[Buffer], y: Buffer, mids: list[Buffer],
               notes: list[str]) -> tuple[KernelIR, list[Step]]:
    parts = [low.steps() for low in lows]
    buffers = inputs + [y] + mids + [b for low in lows for b in low.buffers()]
    body = [stmt for steps in parts for stmt in pipeline(steps)]
    return KernelIR(head.kind, buffers, body, inputs, y, notes), [s for steps in parts for s in steps]
