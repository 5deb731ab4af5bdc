"""A fused chain of dynamic ops: one loop of row steps, every intermediate in DM.

Every op keeps the Dims (a conv or max pool of stride 1 and same padding), so
op k's output has the input's height and width.  Each op's output, and the
input, is a whole plane of one image in DM.  In step t op k adds its rows
[t * th - D_k, (t + 1) * th - D_k) clamped to the image, D_k = k * th plus
the bottom paddings of ops 0..k: op k works k steps behind the input, so the
rows it reads (with the halo below) were added by op k-1 the step before.
No row is computed twice and no halo read twice; sizes come from the
argument block, th from a table by width (priced per step as the busier of
NU and VU), the last rows are a clamp.

The chain is one program section: its ops share the CU's row-tile registers
(common.TileRegs), each runs its one-op tile body (conv.tile_body,
pool.tile_body) in a scope of its own names (`F<k>_`) with its input in DM,
its own two sets of IBUF, ABUF and VBUF, its own weights and tables, and the
next semaphores of the chain's pool: the units work on several ops at once
(a conv with few channels takes the full-tap fold, each tap loaded from the
DM plane with its own padding).  Before op k the CU waits for op k-1's store
of the step before (when it had rows); the mutation test finds every wait
needed.

A network's residual join may end the chain (lower_fused(add=...)): an add or
mul of the last conv's output and a tensor in DDR (buffer xr) runs on the
conv's rows in VBUF before their store, the other input's rows loaded per
step beside them.  docs/dynamic.md.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from nnpsim.config import Config

from ..dims import Dim, DynamicOp
from ..errors import CompileError
from ..ops import Conv2d, Pool2d
from . import conv as conv_lowering
from . import pool as pool_lowering
from .asm import ZERO, Mem, Program, Reg, Scope, Sem, semaphores
from .common import (Part, TileIO, TileRegs, args_buffer, axis_name, ddr_io, dma_box, drain, load_size,
                     one_program, target_notes, tile_registers)
from .conv import TILE_OVERHEAD, Region
from .elementwise import vu_command


def keeps_dims(op: DynamicOp) -> bool:
    """Has op a tile body that keeps the Dims: a conv or max pool of stride 1 and same padding?"""
    big = op.largest
    if isinstance(big, Conv2d):
        ekh, ekw = ((k - 1) * d + 1 for k, d in zip(big.kernel, big.dilation))
    elif isinstance(big, Pool2d) and big.mode == "max":
        ekh, ekw = big.kernel
    else:
        return False
    pt, pl, pb, pr = big.padding
    return big.stride == (1, 1) and pt + pb == ekh - 1 and pl + pr == ekw - 1


def fusable(ops: list[DynamicOp]) -> bool:
    """True if there are two ops or more and every op keeps the Dims and has a tile body."""
    return len(ops) >= 2 and all(map(keeps_dims, ops))


class _Plan:
    """The ops' buffer shares, delays, semaphores, DM planes and the rows-per-step table."""

    def __init__(self, ops: list[DynamicOp], cfg: Config, add: tuple[DynamicOp, int] | None = None):
        self.ops, self.cfg, self.K = ops, cfg, len(ops)
        self.add = add
        convs = [k for k, o in enumerate(ops) if isinstance(o.largest, Conv2d)]
        big = ops[0].largest
        _, _, self.h_max, self.w_max = big.x_shape
        pads = [o.largest.padding for o in ops]
        self.S = {k: sum(p[2] for p in pads[:k + 1]) for k in range(-1, self.K)}     # bottom pads up to op k
        self.out_c = {k: o.largest.output.shape[1] for k, o in enumerate(ops)}
        self.out_c[-1] = big.x_shape[1]
        self.geo: dict[int, conv_lowering._Geometry] = {}
        alone = {k: conv_lowering._Geometry(ops[k], cfg, taps=True) for k in convs}
        wbuf = sum(-(-g0.wtotal // 64) * 64 for g0 in alone.values())
        table = sum(g0.tab for g0 in alone.values())
        if wbuf > cfg.wbuf_bytes:
            raise CompileError(f"the convs' weights need {wbuf} bytes of WBUF together, it has {cfg.wbuf_bytes}")
        if not conv_lowering.tables_fit(table, cfg):
            raise CompileError(f"the convs' (M, S) tables need {table} bytes of VBUF, more than half its "
                               f"{cfg.vbuf_bytes}")
        at, dm = self._conv_regions(alone, table)
        pool_bytes = (cfg.vbuf_bytes - at) // max(1, self.K - len(convs)) // 128 * 128
        for k in range(self.K):
            if k not in convs:
                self.vset[k] = (at, pool_bytes // 2 // 64 * 64)
                at += pool_bytes
        # every op's output (and the input) as whole planes of one image in DM, after the bias tables
        self.plane_at = {}
        for k in range(-1, self.K - 1):
            self.plane_at[k] = dm
            dm += -(-self.out_c[k] * self.h_max * self.w_max // 64) * 64
        if dm > cfg.dm_bytes:
            raise CompileError(f"the intermediates of one image need {dm:,} bytes of DM at the largest shape, "
                               f"it has {cfg.dm_bytes:,}")
        self.widths = list(self.geo[convs[0]].widths) if convs else self._widths()
        self.rows = {w: self._choose(w) for w in self.widths}
        count = Scope(Program(), sems=semaphores(1 << 16))      # counted where there is no limit
        _semaphores(count, self)
        if count.sems.next > cfg.semaphores:
            raise CompileError(f"{self.K} ops need {count.sems.next} semaphores, the machine has {cfg.semaphores}")
        self.cmd = vu_command(add[0].largest) if add is not None else None
        if self.cmd is not None and self.cmd.mnemonic not in ("vu.add", "vu.mul", "vu.fadd", "vu.fmul"):
            raise CompileError(f"an add after a fused chain: {self.cmd.mnemonic} has no fused form")

    def _conv_regions(self, alone: dict[int, conv_lowering._Geometry], table: int) -> tuple[int, int]:
        """Each conv's region (self.geo, self.vset), the residual's VBUF area; returns the VBUF and DM offsets
        after them.

        Every op has its own two sets (the ops run at once, each on its own tile): IBUF split between the
        convs, ABUF between the convs whose sums go through it (not nu.conv.rq's), VBUF after the tables in
        shares by what a row needs: a conv's int32 sums 4, nu.conv.rq's int8 rows 1, a pool's rows 2."""
        cfg, convs = self.cfg, list(alone)
        acc = [k for k in convs if not alone[k].rq]
        ishare = cfg.ibuf_bytes // max(1, len(convs)) // (2 * cfg.nu_rows) * (2 * cfg.nu_rows)
        ashare = cfg.abuf_bytes // max(1, len(acc)) // 256 * 256
        vfree = (cfg.vbuf_bytes - table) // 256 * 256
        weight = {k: 4 if k in acc else 1 if k in convs else 2 for k in range(self.K)}
        if self.add is not None:     # the residual's rows beside the last conv's, as many bytes
            if self.K - 1 not in convs or not alone[self.K - 1].rq:
                raise CompileError("an add after a fused chain needs the chain's last op to be a conv that "
                                   "requantises on the NU (nu.conv.rq)")
            weight["add"] = 1
        vunit = vfree // sum(weight.values()) // 256 * 256
        self.vset = {}
        at, wbuf, tab, dm = table, 0, 0, 0
        for k in convs:
            g0 = alone[k]
            a = acc.index(k) * ashare if k in acc else 0
            vshare = weight[k] * vunit
            self.geo[k] = conv_lowering._Geometry(self.ops[k], cfg, taps=True, region=Region(
                tab, at, wbuf, dm, convs.index(k) * ishare, a, ishare, ashare if k in acc else 0,
                min(vshare, 2 * ashare) if k in acc else vshare))
            self.vset[k] = (at, self.geo[k].vb)
            at += vshare
            wbuf += -(-g0.wtotal // 64) * 64
            dm += -(-g0.out_cb * g0.C * 4 // 64) * 64
            tab += g0.tab
        if self.add is not None:
            self.res_at = at                # two sets of the last conv's set size (its rows, [block][pixel][C])
            at += vunit
        return at, dm

    def _widths(self) -> list[int]:
        w = self.ops[0].x_shape[3]
        return list(range(w.lo, w.hi + 1)) if isinstance(w, Dim) else [w]

    def rows_of(self, k: int, th: int) -> int:
        """The most output rows op k adds in one step of th rows."""
        return min(self.h_max, th)

    def _fits(self, th: int, w: int) -> bool:
        for k, o in enumerate(self.ops):
            rows = self.rows_of(k, th)
            if k in self.geo:
                if self.geo[k].fit(w) < rows:
                    return False
            elif pool_lowering.set_bytes(o, rows) > self.vset[k][1]:
                return False
        return True

    def _price(self, th: int, w: int) -> int:
        """Predicted cycles over sample heights: per step the NU's work or the VU's, whichever is more, and
        an overhead per op; the steps the wavefront takes to fill and drain included."""
        nu = vu = 0
        for k, o in enumerate(self.ops):
            if k in self.geo:
                g = self.geo[k]
                nu += conv_lowering.nu_cycles(g, th, w)
                if not g.rq:        # else nu.conv.rq requantises on the NU
                    vu += 2 * th * w * g.o * 4 // self.cfg.vu_bytes_per_cycle
                if self.add is not None and k == self.K - 1:
                    vu += th * w * g.o // self.cfg.vu_bytes_per_cycle
            else:
                kh, kw = o.largest.kernel
                vu += self.out_c[k] * th * w * kh * kw // self.cfg.vu_bytes_per_cycle
        total = 0
        for n, h in conv_lowering.sample_heights(self.ops[0]):
            steps = -(-(h + self.S[self.K - 1]) // th) + self.K - 1
            total += n * steps * (max(nu, vu) + self.K * TILE_OVERHEAD)
        return total

    def _choose(self, w: int) -> int:
        options = [th for th in range(1, self.h_max + 1) if self._fits(th, w)]
        if not options:
            raise CompileError(f"one row of the last op at width {w} does not fit every op's buffers")
        return min(options, key=lambda th: (self._price(th, w), -th))


@dataclass(frozen=True)
class _Sems:
    """The chain's semaphores: each op's (a conv's or a pool's), then the join's."""

    ops: list
    res: Sem | None = None      # the residual's rows loaded
    add: Sem | None = None      # the add done, block by block


def _semaphores(b: Scope, p: _Plan) -> _Sems:
    """Each op's semaphores from b's pool in chain order (the ops run at once: each has its own; a conv of
    two sets needs no afree), then the join's."""
    ops = [conv_lowering.conv_semaphores(b.sems, marker=False) if k in p.geo
           else pool_lowering.pool_semaphores(b, run=False) for k in range(p.K)]
    return _Sems(ops, *(b.sems.take("res", "add") if p.add is not None else ()))


def _check(ops: list[DynamicOp], add: tuple[DynamicOp, int] | None) -> None:
    """CompileError unless each op takes the channels the one before gives, and the join the chain's shape."""
    for k in range(1, len(ops)):
        if ops[k].x_shape[1] != ops[k - 1].largest.output.shape[1]:
            raise CompileError(f"op {k} ({ops[k].kind}) takes {ops[k].x_shape[1]} channels but op {k - 1} gives "
                               f"{ops[k - 1].largest.output.shape[1]}")
    x = ops[-1].x_shape
    if add is not None and tuple(add[0].x_shape) != (x[0], ops[-1].largest.output.shape[1], x[2], x[3]):
        raise CompileError("an add after a fused chain must have the chain's output shape")


def prepare(ops: list[DynamicOp], cfg: Config,
            add: tuple[DynamicOp, int] | None = None) -> Callable[[Scope], Part]:
    """A fused dynamic chain planned (what does not fit raises here): the function that writes it into a
    scope (its buffers, constants and code, ending on its drain); with add = (an add or mul, which of its
    inputs the chain's output is), that op too, its other input from DDR buffer xr."""
    _check(ops, add)
    p = _Plan(ops, cfg, add)
    return lambda b: _write(b, p)


def lower_fused(b: Scope, ops: list[DynamicOp], cfg: Config, add: tuple[DynamicOp, int] | None = None) -> Part:
    """Write a fused dynamic chain into b (prepare's add=); its Part's rows: the last op's rows per step by
    width."""
    return prepare(ops, cfg, add)(b)


def program(ops: list[DynamicOp], cfg: Config,
            add: tuple[DynamicOp, int] | None = None) -> tuple[str, dict[str, bytes], dict[int, int]]:
    """A fused dynamic chain as a program of its own: (assembly, .incbin files, the last op's rows per tile
    by width)."""
    asm, files, part = one_program(cfg, lambda b: lower_fused(b, ops, cfg, add))
    return asm, files, part.rows


def _write(b: Scope, p: _Plan) -> Part:
    """The chain's buffers, constants and code into b, ending on its drain."""
    first = p.ops[0]
    n, c, h, w = first.x_shape
    _data(b, p)
    r = tile_registers(b)
    s = _semaphores(b, p)
    step = r.oh         # the step's first input row (r.oh is free: every op keeps the height)
    _sizes(b, p, r)
    _constants(b, p, r, s)
    b.i("li", r.i, 0)
    b.i("li", r.args, 1)         # r.args: 1 until the first tile has waited for the weights
    b.i("li", r.b, 0)
    b.i("li", r.pend, 0)
    b.at(b.label("batch"))
    b.i("li", step, 0)
    b.at(b.label("step"))
    b.i("mul", r.hw, r.h, r.w)                   # every plane, in DM and DDR: h * w per channel
    b.i("add", r.ohw, r.hw, ZERO)
    _stage_input(b, p, r, step)
    for k in range(p.K):
        _op(b.sub(prefix=f"F{k}_"), p, r, s, k, step)
    t = r.t
    b.comment("next step: flip the sets, until the last op has its last row")
    b.i("xori", r.b, r.b, 1)
    b.i("add", step, step, r.max)
    b.i("muli", t[0], r.max, p.K - 1)
    b.i("sub", t[0], step, t[0])
    b.i("addi", t[0], t[0], -p.S[p.K - 1])
    b.i("blt", t[0], r.h, b.label("step"))
    b.i("addi", r.i, r.i, 1)
    b.i("blt", r.i, r.n, b.label("batch"))
    drain(b, r.pend, s.ops[-1].store)
    b.fold_channels(p.cfg.dma_channels)
    kinds = " -> ".join(o.kind for o in p.ops)
    title = [f"dynamic fused chain: {kinds}", "steps of th rows (th read from a table by width); op k adds its "
             "rows k steps behind the input; intermediates in DM"]
    return Part(title, target_notes(first, [axis_name(n), str(p.out_c[p.K - 1]), axis_name(h), axis_name(w)]),
                p.rows)


def _data(b: Scope, p: _Plan) -> None:
    """The argument block, x, y (and the join's xr), each conv's constants and the rows-per-step table."""
    first, prog = p.ops[0], b.prog
    args_buffer(b, first.dims)
    x_max, y_max = first.largest.x_shape, p.ops[-1].largest.output.shape
    prog.buffer(b.buf("x").name, "int8", x_max, int(np.prod(x_max)))
    prog.buffer(b.buf("y").name, "int8", y_max, int(np.prod(y_max)))
    if p.add is not None:       # the add's other input, as large as y
        prog.buffer(b.buf("xr").name, "int8", y_max, int(np.prod(y_max)))
    for k, g in p.geo.items():
        conv_lowering.constant_data(b.sub(prefix=f"F{k}_"), g)
    prog.table(b.label("fused_rows"), [p.rows[w] for w in p.widths],
               f"last op's rows per tile, by width from {p.widths[0]}")


def _sizes(b: Scope, p: _Plan, r: TileRegs) -> None:
    """The sizes from the argument block, and the rows per step for this width from the table."""
    first, t = p.ops[0], r.t
    n, _, h, w = first.x_shape
    index = {d.name: k for k, d in enumerate(first.dims)}
    b.i("la", r.args, b.buf("args"))
    for reg, d in ((r.n, n), (r.h, h), (r.w, w)):
        load_size(b, reg, d, index, r.args)
    b.i("add", r.ow, r.w, ZERO)                     # every op keeps the width
    b.comment("the last op's rows per tile for this width (the compiler's table)")
    b.i("slli", t[0], r.w, 2)
    b.i("la", t[1], b.label("fused_rows") - 4 * p.widths[0])
    b.i("add", t[0], t[0], t[1])
    b.i("ld", r.max, t[0], 0)


def _constants(b: Scope, p: _Plan, r: TileRegs, s: _Sems) -> None:
    """Each conv's constants queued: the first conv's weights signal as for one conv; the others' go on ch0
    ahead of every load (their NU commands wait for their loads, queued behind them)."""
    first_conv = min(p.geo, default=None)
    for k, g in p.geo.items():
        b.comment(f"op {k} ({p.ops[k].kind}): constants")
        conv_lowering.load_constants(b.sub(prefix=f"F{k}_"), r, s.ops[k], g, signal=k == first_conv,
                                     on_loads=k != first_conv)


def _stage_input(b: Scope, p: _Plan, r: TileRegs, step: Reg) -> None:
    """The input's rows of this step DDR -> DM (op 0's plane)."""
    t, c = r.t, p.ops[0].x_shape[1]
    b.comment("the input's rows of this step DDR -> DM, whole rows per channel (DDR bursts; IBUF takes them")
    b.comment("from DM)")
    _step_rows(b, p, r, -1, step, t[0], t[1])
    b.i("beq", t[1], ZERO, b.label("staged"))
    b.i("mul", t[2], t[1], r.w)
    dma_box(b, 1, [(t[2], 1, 1, 0, 0), (c, r.hw, r.hw, 0, 0)])
    b.i("mul", t[4], r.i, r.hw)
    b.i("muli", t[4], t[4], c)
    b.i("mul", t[5], t[0], r.w)
    b.i("add", t[4], t[4], t[5])
    b.i("la", t[3], b.buf("x"))
    b.i("add", t[4], t[4], t[3])
    b.i("addi", t[5], t[5], p.plane_at[-1])
    b.i("dma", b.ch(0), Mem("dm", t[5]), Mem("ddr", t[4]))     # op 0's loads from DM queue behind it on ch0
    b.at(b.label("staged"))


def _step_rows(b: Scope, p: _Plan, r: TileRegs, k: int, step: Reg, first: Reg, count: Reg) -> None:
    """first, count := the rows op k (k = -1: the input) adds in the step starting at row `step`: [clamp(step -
    D), clamp(step + th - D)) clamped to [0, h), D = k * th + the bottom pads up to op k.  Op k's rows then
    need rows of op k-1 that op k-1 added a step earlier at the latest."""
    b.i("muli", first, r.max, max(k, 0))
    b.i("sub", first, step, first)
    b.i("addi", first, first, -p.S[k])
    b.i("add", count, first, r.max)
    for reg in (first, count):
        b.i("min", reg, reg, r.h)
        b.i("max", reg, reg, ZERO)
    b.i("sub", count, count, first)


def _reuse_needs_wait(p: _Plan) -> bool:
    """Must the last op wait for its store of two steps ago before reusing those buffers?  Not when the op
    before it ran in the step between on the same units and queues (a conv before anything, or a pool
    before a pool): the CU waited for that op's store, queued behind the last op's; and it ran whenever the
    last op runs if the last op takes no rows below its own (bottom padding 0)."""
    if p.add is not None:       # its residual's rows are loaded into the set the store of two steps ago read
        return True
    last, before = p.K - 1, p.K - 2
    same_units = before in p.geo or last not in p.geo
    return not (same_units and p.ops[last].largest.padding[2] == 0)


def _op(b: Scope, p: _Plan, r: TileRegs, s: _Sems, k: int, step: Reg) -> None:
    """Op k's rows of this step, in its scope (F<k>_): after op k-1's store of the step before."""
    t = r.t
    b.comment(f"---- op {k}: {p.ops[k].kind}, its rows of this step (op k works {k} steps behind the input)")
    if k:
        b.comment("op k-1's rows of the step before are in DM: wait for its store if it had any")
        b.i("sub", t[2], step, r.max)
        _step_rows(b, p, r, k - 1, t[2], t[0], t[1])
        b.i("beq", t[1], ZERO, b.label("ready"))
        b.i("sem.wait", s.ops[k - 1].store)
        b.at(b.label("ready"))
    _step_rows(b, p, r, k, step, r.oh0, r.th)
    b.i("beq", r.th, ZERO, b.label("skip"))
    if k == p.K - 1 and _reuse_needs_wait(p):
        b.comment("its buffers of two steps ago are reused: wait for that store")
        b.i("li", t[0], 2)
        b.i("blt", r.pend, t[0], b.label("free"))
        b.i("sem.wait", s.ops[k].store)
        b.i("addi", r.pend, r.pend, -1)
        b.at(b.label("free"))
    if k in p.geo:
        _conv_tile(b, p, r, s, k)
    else:
        o, (at, size) = p.ops[k], p.vset[k]
        _, pl, _, pr = o.largest.padding
        b.i("addi", r.wp, r.w, pl + pr)
        pool_lowering.fixed_params(b, o)
        pool_lowering.tile_body(b, r, s.ops[k], o, _io(p, k, r), pool_lowering.Tiles(size, at))
    if k == p.K - 1:
        b.i("addi", r.pend, r.pend, 1)
    b.at(b.label("skip"))


def _conv_tile(b: Scope, p: _Plan, r: TileRegs, s: _Sems, k: int) -> None:
    """Conv op k's tile (the join's residual loads and add when it ends the chain with one); only the first
    conv waits for its weights: the others' are queued on ch0 ahead of the loads."""
    g, first = p.geo[k], k == min(p.geo)
    conv_lowering.padded_width(b, r, g)
    conv_lowering.fixed_params(b, g)
    join = k == p.K - 1 and p.add is not None
    if join:
        _residual_loads(b, p, g, r, s)
    conv_lowering.tile_body(b, r, s.ops[k], g, _io(p, k, r), weights_wait=first,
                            epilogue=_add_epilogue(p, g, r, s) if join else None)
    if first:
        b.i("li", r.args, 0)


def _io(p: _Plan, k: int, r: TileRegs) -> TileIO:
    """Op k's input: the DM plane of op k-1 (or of the input); output: its DM plane, DDR y for the last op."""
    def src(b: Scope, reg: Reg, start: Reg, tmp: Reg, j: int = k - 1) -> None:
        b.i("mul", reg, start, r.w)
        b.i("addi", reg, reg, p.plane_at[j])

    def dst(b: Scope, reg: Reg, tmp: Reg) -> None:
        b.i("mul", reg, r.oh0, r.ow)
        b.i("addi", reg, reg, p.plane_at[k])
    if k == p.K - 1:
        return TileIO(src, ddr_io(r, p.ops[0].largest.x_shape[1], p.out_c[k]).dst, "dm", "ddr")
    return TileIO(src, dst, "dm", "dm")


def _residual_loads(b: Scope, p: _Plan, g, r: TileRegs, s: _Sems) -> None:
    """The add's other input, the step's rows of the last conv's output, DDR (buffer xr) -> VBUF laid out as
    the conv's rows ([block][pixel][C], the set's residual area), one DMA a block on ch1; the last signals."""
    o, t = p.out_c[p.K - 1], r.t
    b.comment("the residual's rows of this step: DDR -> VBUF as the conv's rows lie ([block][pixel][C])")
    pix, src, dst = t[0], t[1], t[2]
    b.i("mul", pix, r.th, r.ow)
    ddr_io(r, o, o, y="xr").dst(b, src, t[3])
    b.i("muli", dst, r.b, g.vb)
    b.i("addi", dst, dst, p.res_at)
    b.i("muli", t[3], r.ohw, g.C)
    b.i("slli", t[4], pix, g.C.bit_length() - 1)
    for ob in range(g.out_cb):
        cv = min(g.C, o - ob * g.C)
        if ob:
            b.i("add", src, src, t[3])
            b.i("add", dst, dst, t[4])
        dma_box(b, 1, [(pix, 1, g.C, 0, 0), (cv, r.ohw, 1, 0, 0)])
        sig = {"signal": s.res} if ob == g.out_cb - 1 else {}
        b.i("dma", b.ch(1), Mem("vbuf0", dst), Mem("ddr", src), **sig)


def _add_epilogue(p: _Plan, g, r: TileRegs, s: _Sems) -> Callable:
    """The tile body's hook before block ob's store: the add of the block's rows and the residual's on the
    VU (the first block's add behind a one-element vu.mov that takes the residual's token), in place in
    the add's a operand; returns (the store's source, the semaphore it waits for)."""
    side, cmd, nu = p.add[1], p.cmd, s.ops[-1].nu

    def epilogue(b: Scope, ob: int, ysrc: Reg, cv) -> tuple:
        res = r.t[11]
        b.i("addi", res, ysrc, p.res_at - g.sets)       # the residual area: the same offset in its set
        if ob == 0:
            b.setp("vu.n0", 1)
            for q in ("n1", "n2", "n3"):
                b.setp(f"vu.{q}", 1)
            b.i("vu.mov", "vu0", "i8", res, "i8", res, wait=s.res)
            for q, v in (("d_stride0", 1), ("a_stride0", 1), ("b_stride0", 1), ("d_stride1", g.C),
                         ("a_stride1", g.C), ("b_stride1", g.C), *cmd.scalars.items()):
                b.setp(f"vu.{q}", v)
            b.setp("vu.n1", r.pix)
        b.setp("vu.n0", cv)
        x, y = (ysrc, res) if side == 0 else (res, ysrc)
        b.i(cmd.mnemonic, "vu0", x, x, y, wait=nu, signal=s.add)
        return x, s.add
    return epilogue
