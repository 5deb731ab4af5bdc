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

Each op runs its one-op tile body (dynamic/conv.py, dynamic/pool.py) with
its input in DM, its own two sets of IBUF, ABUF and VBUF, its own weights,
tables and semaphores: the units work on several ops at once (a conv with
few channels takes the full-tap fold, each tap loaded from the DM plane with
its own padding).  Before op k the CU waits for op k-1's store of the step
before (when it had rows); the mutation test finds every wait needed.

A network's residual join may end the chain (lower_fused(add=...)): an add or
mul of the last conv's output and a tensor in DDR (buffer xr) runs on the
conv's rows in VBUF before their store, the other input's rows loaded per
step beside them.  docs/compiler.md, "Dynamic shapes".
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp
from ..dynamic import pool as pool_lowering
from ..dynamic.asm import Instr, Line, Program, Scope
from ..dynamic import conv as conv_lowering
from ..dynamic.asm import semaphores
from ..dynamic.common import TileIO as ScopeIO
from ..dynamic.common import TileRegs, tile_registers
from ..errors import CompileError
from ..ops import Conv2d, Pool2d
from ..dynamic.common import ddr_io as scope_ddr_io
from ..dynamic.conv import TILE_OVERHEAD, Region
from .dynamic import (RB, RH, RHW, RI, RMAX, RN, ROH, ROH0, ROHW, ROW, RPEND, RTH, RW, Emit, TileIO, _size,
                      axis_name, ddr_io, drain_and_halt, fold_channels, scope_data, scope_lines, target_notes)

RF0 = ROH           # the step's first input row (ROH is free: every op keeps the height)
POOL_STORE = str(pool_lowering.pool_semaphores(Scope(Program()), run=False).store)   # a pool's store, as _sems renames
T = [f"r{k}" for k in range(19, 31)]
SEMS = {"conv": 7, "pool": 3}
CONV_SEMS = conv_lowering.conv_semaphores(semaphores())     # a conv's, before the op's base is added


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
        self.geo: dict[int, object] = {}
        wbuf = dm = table = 0
        for k in convs:
            g0 = conv_lowering._Geometry(ops[k], cfg, taps=True)
            wbuf += -(-g0.wtotal // 64) * 64
            table += g0.tab
        if wbuf > cfg.wbuf_bytes:
            raise CompileError(f"the convs' weights need {wbuf} bytes of WBUF together, it has {cfg.wbuf_bytes}")
        if table > cfg.vbuf_bytes // 2:
            raise CompileError(f"the convs' (M, S) tables need {table} bytes of VBUF, more than half its "
                               f"{cfg.vbuf_bytes}")
        # Every op has its own two sets (the ops run at once, each on its own tile): IBUF split between the
        # convs, ABUF between the convs whose sums go through it (not nu.conv.rq's), VBUF after the tables in
        # shares by what a row needs: a conv's int32 sums 4, nu.conv.rq's int8 rows 1, a pool's rows 2.
        nc, npool = len(convs), self.K - len(convs)
        acc = [k for k in convs if not conv_lowering._Geometry(ops[k], cfg, taps=True).rq]
        ishare = cfg.ibuf_bytes // max(1, nc) // (2 * cfg.nu_rows) * (2 * cfg.nu_rows)
        ashare = cfg.abuf_bytes // max(1, len(acc)) // 256 * 256
        vfree = (cfg.vbuf_bytes - table) // 256 * 256
        weight = {k: 4 if k in acc else 1 if k in convs else 2 for k in range(self.K)}
        if add is not None:     # the residual's rows beside the last conv's, as many bytes
            last = conv_lowering._Geometry(ops[-1], cfg, taps=True)
            if self.K - 1 not in convs or not last.rq:
                raise CompileError("an add after a fused chain needs the chain's last op to be a conv that "
                                   "requantises on the NU (nu.conv.rq)")
            weight["add"] = 1
        vunit = vfree // sum(weight.values()) // 256 * 256
        self.vset = {}
        at, wbuf, tab = table, 0, 0
        for k in range(self.K):
            if k in convs:
                g0 = conv_lowering._Geometry(ops[k], cfg, taps=True)
                a = acc.index(k) * ashare if k in acc else 0
                vshare = weight[k] * vunit
                self.geo[k] = conv_lowering._Geometry(ops[k], cfg, taps=True, region=Region(
                    tab, at, wbuf, dm, convs.index(k) * ishare, a, ishare, ashare if k in acc else 0,
                    min(vshare, 2 * ashare) if k in acc else vshare))
                self.vset[k] = (at, self.geo[k].vb)
                at += vshare
                wbuf += -(-g0.wtotal // 64) * 64
                dm += -(-g0.out_cb * g0.C * 4 // 64) * 64
                tab += g0.tab
        if add is not None:
            self.res_at = at                # two sets of the last conv's set size (its rows, [block][pixel][C])
            at += vunit
        pool_bytes = (cfg.vbuf_bytes - at) // max(1, npool) // 128 * 128
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
        self.sem_base, base = [], 0
        for k in range(self.K):
            self.sem_base.append(base)
            base += SEMS["conv" if k in self.geo else "pool"]
        base += 2 if add is not None else 0        # the residual's load and the add (s7, s8 of the last op)
        if base > cfg.semaphores:
            raise CompileError(f"{self.K} ops need {base} semaphores, the machine has {cfg.semaphores}")

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


def _sems(text: str, base: int) -> str:
    return re.sub(r"\bs(\d+)\b", lambda m: f"s{int(m.group(1)) + base}", text)


def _step_rows(em: Emit, p: _Plan, k: int, step: str, first: str, count: str) -> None:
    """first, count := the rows op k (k = -1: the input) adds in the step starting at row `step`: [clamp(step -
    D), clamp(step + th - D)) clamped to [0, h), D = k * th + the bottom pads up to op k.  Op k's rows then
    need rows of op k-1 that op k-1 added a step earlier at the latest."""
    i = em.i
    i(f"muli    {first}, {RMAX}, {max(k, 0)}")
    i(f"sub     {first}, {step}, {first}")
    i(f"addi    {first}, {first}, {-p.S[k]}")
    i(f"add     {count}, {first}, {RMAX}")
    for r in (first, count):
        i(f"min     {r}, {r}, {RH}")
        i(f"max     {r}, {r}, r0")
    i(f"sub     {count}, {count}, {first}")


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


def _io(p: _Plan, k: int) -> TileIO:
    """Op k's input: the DM plane of op k-1 (or of the input); output: its DM plane, DDR y for the last op."""
    def src(em, reg, start, tmp, j=k - 1):
        em.i(f"mul     {reg}, {start}, {RW}")
        em.i(f"addi    {reg}, {reg}, {p.plane_at[j]}")

    def dst(em, reg, tmp):
        em.i(f"mul     {reg}, {ROH0}, {ROW}")
        em.i(f"addi    {reg}, {reg}, {p.plane_at[k]}")
    if k == p.K - 1:
        return TileIO(src, ddr_io(p.ops[0].largest.x_shape[1], p.out_c[k]).dst, "dm", "ddr")
    return TileIO(src, dst, "dm", "dm")


def _conv_io(p: _Plan, k: int, r: TileRegs) -> ScopeIO:
    """_io for a conv's tile body, which is written through a Scope."""
    def src(b, reg, start, tmp, j=k - 1):
        b.i("mul", reg, start, r.w)
        b.i("addi", reg, reg, p.plane_at[j])

    def dst(b, reg, tmp):
        b.i("mul", reg, r.oh0, r.ow)
        b.i("addi", reg, reg, p.plane_at[k])
    if k == p.K - 1:
        return ScopeIO(src, scope_ddr_io(r, p.ops[0].largest.x_shape[1], p.out_c[k]).dst, "dm", "ddr")
    return ScopeIO(src, dst, "dm", "dm")


def _conv_tile(p: _Plan, k: int, g, weights_wait: bool):
    """A builder of conv op k's tile body (its add epilogue when it ends the chain with one)."""
    def build(b) -> None:
        r = tile_registers(b)
        s = conv_lowering.conv_semaphores(b.sems)
        epilogue = _add_epilogue(p, g, r) if k == p.K - 1 and p.add is not None else None
        conv_lowering.tile_body(b, r, s, g, _conv_io(p, k, r), weights_wait=weights_wait, epilogue=epilogue)
    return build


def _pool_tile(em: Emit, o: DynamicOp, io: TileIO, vset: tuple[int, int]) -> None:
    """Pool op o's tile written by the builder (dynamic/pool.py), its lines added to em's: a bridge until
    this module is built on the builder too (the registers and semaphores are the same numbers)."""
    prog = Program()
    b = Scope(prog)
    r, s = tile_registers(b), pool_lowering.pool_semaphores(b, run=False)

    def text(write: Callable) -> Callable:
        def call(b: Scope, *regs) -> None:
            em = Emit([])
            write(em, *map(str, regs))
            prog.text.extend(Line(line) for line in em.L)
        return call
    _, pl, _, pr = o.largest.padding
    b.i("addi", r.wp, r.w, pl + pr)
    pool_lowering.fixed_params(b, o)
    pool_lowering.tile_body(b, r, s, o, ScopeIO(text(io.src), text(io.dst), io.src_space, io.dst_space),
                            pool_lowering.Tiles(vset[1], vset[0]))
    em.L += [item.text() if isinstance(item, Instr) else item.text for item in prog.text]


def program_text(p: _Plan) -> str:
    """The assembly of the fused chain."""
    ops, cfg = p.ops, p.cfg
    first, lastop = ops[0], ops[-1]
    n, c, h, w = first.x_shape
    idx = {d.name: k for k, d in enumerate(first.dims)}
    kinds = " -> ".join(o.kind for o in ops)
    L = [f"; dynamic fused chain: {kinds}", "; steps of th rows (th read from a table by width); op k adds its rows "
         "k steps behind the input; intermediates in DM", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += ["        " + s for s in target_notes(first, [axis_name(n), str(p.out_c[p.K - 1]), axis_name(h), axis_name(w)])]
    x_max, y_max = first.largest.x_shape, lastop.largest.output.shape
    L += ["", "        .data", f"        .buffer args, int32, ({len(first.dims)},)",
          f"        .space {4 * len(first.dims)}", "        .align 64",
          f"        .buffer x, int8, ({', '.join(map(str, x_max))},)", f"        .space {int(np.prod(x_max))}",
          "        .align 64", f"        .buffer y, int8, ({', '.join(map(str, y_max))},)",
          f"        .space {int(np.prod(y_max))}"]
    if p.add is not None:       # the add's other input, as large as y
        L += ["        .align 64", f"        .buffer xr, int8, ({', '.join(map(str, y_max))},)",
              f"        .space {int(np.prod(y_max))}"]
    for k, g in p.geo.items():
        L += scope_data(lambda b, g=g: conv_lowering.constant_data(b, g), f"F{k}_")[0]
    L += ["        .align 64", f"fused_rows:                             ; last op's rows per tile, by width from "
          f"{p.widths[0]}", *(f"        .word {p.rows[w]}" for w in p.widths), "", "        .text", "main:"]
    em = Emit(L)
    e, i = em.e, em.i
    i("la      r1, args")
    for reg, d in ((RN, n), (RH, h), (RW, w)):
        _size(L, reg, d, idx)
    i(f"add     {ROW}, {RW}, r0")                     # every op keeps the width
    e("        ; the last op's rows per tile for this width (the compiler's table)")
    i(f"slli    {T[0]}, {RW}, 2")
    i(f"la      {T[1]}, fused_rows - {4 * p.widths[0]}")
    i(f"add     {T[0]}, {T[0]}, {T[1]}")
    i(f"ld      {RMAX}, {T[0]}, 0")
    first_conv = min(p.geo, default=None)
    for k, g in p.geo.items():
        e(f"        ; op {k} ({ops[k].kind}): constants")
        # the first conv's weights signal as for one conv; the others' go on ch0 ahead of every load (their
        # NU commands wait for their loads, queued behind them)
        lines = scope_lines(lambda b, g=g, k=k: conv_lowering.load_constants(
            b, tile_registers(b), conv_lowering.conv_semaphores(b.sems), g, signal=k == first_conv,
            on_loads=k != first_conv), f"F{k}_")
        L += [_sems(line, p.sem_base[k]) for line in lines]
    i(f"li      {RI}, 0")
    i("li      r1, 1")                             # r1: 1 until the first tile has waited for the weights
    i(f"li      {RB}, 0")
    i(f"li      {RPEND}, 0")
    last_store = _sems(str(CONV_SEMS.store) if p.K - 1 in p.geo else POOL_STORE, p.sem_base[-1])
    e("batch:")
    i(f"li      {RF0}, 0")
    e("step:")
    i(f"mul     {RHW}, {RH}, {RW}")                   # every plane, in DM and DDR: h * w per channel
    i(f"add     {ROHW}, {RHW}, r0")
    e("        ; the input's rows of this step DDR -> DM, whole rows per channel (DDR bursts; IBUF takes them")
    e("        ; from DM)")
    _step_rows(em, p, -1, RF0, T[0], T[1])
    i(f"beq     {T[1]}, r0, staged")
    i(f"mul     {T[2]}, {T[1]}, {RW}")
    em.dma_box(1, [(T[2], 1, 1, 0, 0), (c, RHW, RHW, 0, 0)])
    i(f"mul     {T[4]}, {RI}, {RHW}")
    i(f"muli    {T[4]}, {T[4]}, {c}")
    i(f"mul     {T[5]}, {T[0]}, {RW}")
    i(f"add     {T[4]}, {T[4]}, {T[5]}")
    i(f"la      {T[3]}, x")
    i(f"add     {T[4]}, {T[4]}, {T[3]}")
    i(f"addi    {T[5]}, {T[5]}, {p.plane_at[-1]}")
    i(f"dma     ch0, dm[{T[5]}], ddr[{T[4]}]")       # op 0's loads from DM queue behind it on ch0
    e("staged:")
    prev_store = None
    for k, o in enumerate(ops):
        sub = Emit([])
        sub.e(f"        ; ---- op {k}: {o.kind}, its rows of this step (op k works {k} steps behind the input)")
        if prev_store:
            sub.e("        ; op k-1's rows of the step before are in DM: wait for its store if it had any")
            sub.i(f"sub     {T[2]}, {RF0}, {RMAX}")
            _step_rows(sub, p, k - 1, T[2], T[0], T[1])
            sub.i(f"beq     {T[1]}, r0, F{k}_ready")
            sub.i("sem.wait PREV")
            sub.e(f"F{k}_ready:")
        _step_rows(sub, p, k, RF0, ROH0, RTH)
        sub.i(f"beq     {RTH}, r0, F{k}_skip")
        if k == p.K - 1 and _reuse_needs_wait(p):
            sub.e("        ; its buffers of two steps ago are reused: wait for that store")
            sub.i(f"li      {T[0]}, 2")
            sub.i(f"blt     {RPEND}, {T[0]}, F{k}_free")
            sub.i(f"sem.wait {CONV_SEMS.store if k in p.geo else POOL_STORE}")
            sub.i(f"addi    {RPEND}, {RPEND}, -1")
            sub.e(f"F{k}_free:")
        io = _io(p, k)
        if k in p.geo:
            g = p.geo[k]
            sub.L += scope_lines(lambda b, g=g: conv_lowering.padded_width(b, tile_registers(b), g))
            sub.L += scope_lines(lambda b, g=g: conv_lowering.fixed_params(b, g))
            if k == p.K - 1 and p.add is not None:
                _residual_loads(sub, p, g)
            # only the first conv waits for its weights: the others' are queued on ch0 ahead of the loads
            sub.L += scope_lines(_conv_tile(p, k, g, k == first_conv), f"F{k}_")
            if k == first_conv:
                sub.i("li      r1, 0")
            store = str(CONV_SEMS.store)
        else:
            _pool_tile(sub, o, io, p.vset[k])
            store = POOL_STORE
        if k == p.K - 1:
            sub.i(f"addi    {RPEND}, {RPEND}, 1")
        sub.e(f"F{k}_skip:")
        text = _sems("\n".join(sub.L), p.sem_base[k])
        L += (text.replace("PREV", prev_store) if prev_store else text).split("\n")
        prev_store = _sems(store, p.sem_base[k])
    e("        ; next step: flip the sets, until the last op has its last row")
    i(f"xori    {RB}, {RB}, 1")
    i(f"add     {RF0}, {RF0}, {RMAX}")
    i(f"muli    {T[0]}, {RMAX}, {p.K - 1}")
    i(f"sub     {T[0]}, {RF0}, {T[0]}")
    i(f"addi    {T[0]}, {T[0]}, {-p.S[p.K - 1]}")
    i(f"blt     {T[0]}, {RH}, step")
    i(f"addi    {RI}, {RI}, 1")
    i(f"blt     {RI}, {RN}, batch")
    L += drain_and_halt(RPEND, last_store)
    return "\n".join(L) + "\n"


S_RES, S_ADD = "s7", "s8"      # the last op's: its residual rows loaded, its add done (block by block)


def _residual_loads(em: Emit, p: _Plan, g) -> None:
    """The add's other input, the step's rows of the last conv's output, DDR (buffer xr) -> VBUF laid out as
    the conv's rows ([block][pixel][C], the set's residual area), one DMA a block on ch1; the last signals."""
    o = p.out_c[p.K - 1]
    em.e("        ; the residual's rows of this step: DDR -> VBUF as the conv's rows lie ([block][pixel][C])")
    pix, src, dst = T[0], T[1], T[2]
    em.i(f"mul     {pix}, {RTH}, {ROW}")
    ddr_io(o, o, y="xr").dst(em, src, T[3])
    em.i(f"muli    {dst}, {RB}, {g.vb}")
    em.i(f"addi    {dst}, {dst}, {p.res_at}")
    em.i(f"muli    {T[3]}, {ROHW}, {g.C}")
    em.i(f"slli    {T[4]}, {pix}, {g.C.bit_length() - 1}")
    for ob in range(g.out_cb):
        cv = min(g.C, o - ob * g.C)
        if ob:
            em.i(f"add     {src}, {src}, {T[3]}")
            em.i(f"add     {dst}, {dst}, {T[4]}")
        em.dma_box(1, [(pix, 1, g.C, 0, 0), (cv, ROHW, 1, 0, 0)])
        sig = f", signal={S_RES}" if ob == g.out_cb - 1 else ""
        em.i(f"dma     ch1, vbuf0[{dst}], ddr[{src}]{sig}")


def _add_epilogue(p: _Plan, g, r: TileRegs):
    """The tile body's hook before block ob's store: the add of the block's rows and the residual's on the
    VU (the first block's add behind a one-element vu.mov that takes the residual's token), in place in
    the add's a operand; returns (the store's source, the semaphore it waits for).  Written through the
    conv's Scope."""
    add, side = p.add
    from ..dynamic.elementwise import vu_command
    cmd = vu_command(add.largest)
    if cmd.mnemonic not in ("vu.add", "vu.mul", "vu.fadd", "vu.fmul"):
        raise CompileError(f"an add after a fused chain: {cmd.mnemonic} has no fused form")

    def epilogue(b, ob: int, ysrc, cv) -> tuple:
        res = r.t[11]
        b.i("addi", res, ysrc, p.res_at - g.sets)       # the residual area: the same offset in its set
        if ob == 0:
            b.setp("vu.n0", 1)
            for q in ("n1", "n2", "n3"):
                b.setp(f"vu.{q}", 1)
            b.i("vu.mov", "vu0", "i8", res, "i8", res, wait=S_RES)
            for q, v in (("d_stride0", 1), ("a_stride0", 1), ("b_stride0", 1), ("d_stride1", g.C),
                         ("a_stride1", g.C), ("b_stride1", g.C), *cmd.scalars.items()):
                b.setp(f"vu.{q}", v)
            b.setp("vu.n1", r.pix)
        b.setp("vu.n0", cv)
        x, y = (ysrc, res) if side == 0 else (res, ysrc)
        b.i(cmd.mnemonic, "vu0", x, x, y, wait=CONV_SEMS.nu, signal=S_ADD)
        return x, S_ADD
    return epilogue


def lower_fused(ops: list[DynamicOp], cfg: Config,
                add: tuple[DynamicOp, int] | None = None) -> tuple[str, dict[str, bytes], dict[int, int]]:
    """A fused dynamic chain's (assembly, .incbin files, last op's rows per tile by width); with add = (an
    add or mul, which of its inputs the chain's output is), that op too, its other input from DDR buffer
    xr."""
    for k in range(1, len(ops)):
        if ops[k].x_shape[1] != ops[k - 1].largest.output.shape[1]:
            raise CompileError(f"op {k} ({ops[k].kind}) takes {ops[k].x_shape[1]} channels but op {k - 1} gives "
                               f"{ops[k - 1].largest.output.shape[1]}")
    x = ops[-1].x_shape
    if add is not None and tuple(add[0].x_shape) != (x[0], ops[-1].largest.output.shape[1], x[2], x[3]):
        raise CompileError("an add after a fused chain must have the chain's output shape")
    p = _Plan(ops, cfg, add)
    files = {}
    for k, g in p.geo.items():
        files.update({f"F{k}_{name}.bin": blob for name, blob in conv_lowering.constants(g).items()})
    return fold_channels(program_text(p), cfg.dma_channels), files, p.rows
