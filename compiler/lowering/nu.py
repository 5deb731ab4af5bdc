"""Lowering of conv2d and dense (with their fused epilogue) onto the NU path.

Per tile of output rows x columns x output blocks: the input tile (halo
filled with x_zp by the DMA, channels blocked into IBUF rows) and, when they
change, the weight blocks are loaded; the bias is broadcast from DM into ABUF
by a stride-0 DMA; one nu.conv(.acc) per output block and input-block chunk
accumulates into ABUF; the result is drained ABUF -> VBUF, requantised per
channel in place by vu.requant.pc (or, with the bias in the requantiser, by
one vu.requant per channel into an int8 slot), an optional residual add
follows, and the tile is stored to DDR in NCHW.  With the NU's requantising
output stage (drain "nu"), the tile's one chunk runs as nu.conv.rq, which adds
the bias, requantises and writes int8 straight into VBUF: no ABUF slot, no
drain, no VU pass (docs/architecture.md, "The NU's output stage").  With
several chunks, the first ones accumulate into an ABUF slot (no bias in it)
and the last runs as nu.conv.acc.rq, which adds those partial sums in the
same stage: the tile starts on its first input blocks and ends with its store.
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from nnpsim.config import Config

from ..ir import RQ_ENTRY, Buffer, Dma, NuConv, Note, Ref, Vu
from ..errors import CompileError
from ..quant import f32_bits
from .conv_plan import (ROLES, ConvTiling, NuPlan, block_hull, buffer_needs, chunks, input_extent,
                        input_in_dm, psum_on_nu, role_depths, stage_bytes, staged_fold, staged_input,
                        table_on_nu, tap_stage_bytes)
from .double_buffer import Slots, Step
from .layout import (ConvView, act_strides, block_at, block_stride, block_diagonal, ddr_order, float_params,
                     float_table, layout_block, bias_blocks, bias_table, ms_table, nu_weights, rq_table)
from .depthwise import (defer_table, depthwise_weights, fill_halos, float_depthwise_weights, halo_prefilled,
                        interior_load, uses_depthwise_mode)
from .units import Part
from .vu import lut_load, lut_table, lut_vu

CH_IN, CH_W, CH_DRAIN, CH_OUT = 0, 1, 2, 3
BY_BLOCK_PIXELS = 64
"""The last tile runs block by block when a block has more pixels than this: its store (cols bytes a
pixel at DDR's 32 a cycle) then outlasts the 64 cycles of NU latency an extra command costs (7x7
blocks lost 16 to 47 cycles on MobileNetV2, 14x14 ones gained up to 130)."""
LATE_REQUANT = True
"""A drained tile's requantisation and store are issued one tile after its drain (Step.late): the CU,
which learns of the drain before issuing the requantisation (the NU that reuses the accumulators
needs the drain too), then finds it long done instead of stalling every other unit's issue while
it streams. It needs two slots for the drained accumulators: the next tile's drain comes first."""
RESIDENT_DMA_BYTES = 4096
"""Resident weights load in DMAs of at least this many bytes (whole output-block groups): DDR's
latency (100 cycles) then costs at most about as much as the transfer's 128 cycles at 32 bytes a cycle."""


@dataclass(frozen=True)
class Residual:
    """A fused residual add: y = add(conv(x), b), the conv's output the add's a (QLinearAdd's A role).

    mnemonic and scalars: the add's VU command and its scalars but lo, hi (lowering.vu.binary_command),
    as (name, value) pairs; lo and hi: its clamp, with the relu / clip after it composed in.
    """

    mnemonic: str
    scalars: tuple[tuple[str, int], ...]
    lo: int
    hi: int
    layout: str = "nchw"        # b's DDR layout (lowering.layout)


def plan(view: ConvView, cfg: Config, spec: str | None = None) -> NuPlan:
    """Weights in NU order (by the layout spec `spec`, when given) plus the output geometry."""
    dw = uses_depthwise_mode(view, cfg.nu_rows, cfg.nu_cols)
    if view.fmode is not None:       # float32 blocks: nu.fdwconv's, or block-diagonal (nu.f_* place the lanes)
        w = (float_depthwise_weights(view.fmode, cfg.nu_cols) if dw else
             block_diagonal(view.fmode.weight, view.groups, view.in_channels, cfg.nu_rows, cfg.nu_cols, np.float32))
    else:
        w = (depthwise_weights(view.weight, view.bias, cfg.nu_cols) if dw
             else nu_weights(view.weight, view.groups, view.in_channels, cfg.nu_rows, cfg.nu_cols, spec))
    return NuPlan(view, w, cfg.nu_rows, cfg.nu_cols, view.y_shape[2], view.y_shape[3],
                  view.weight.shape[2], view.weight.shape[3], dw)


class NuLowering:
    """Builds the Steps of one conv2d / dense (or one Part of it) for a given tiling.

    Parts of one op share its DDR constants: pass the first part's lowering as `shared`.
    `roles` names the buffers of each role and `depths` gives its slots (defaults: ROLES, DEPTHS).
    """

    def __init__(self, p: NuPlan, t: ConvTiling, x: Buffer, y: Buffer, name: str,
                 residual: Residual | None = None, res_buf: Buffer | None = None,
                 part: Part | None = None, shared: "NuLowering | None" = None,
                 roles: dict[str, str] | None = None, depths: dict[str, int] | None = None):
        self.p, self.t, self.x, self.y = p, t, x, y
        self.residual, self.res_buf, self.part = residual, res_buf, part
        self._rq_cache: list[tuple[str, dict, str]] | None = None
        self.by_block = False       # steps(): the tile being made runs and stores block by block
        self.name = name if part is None else name + part.suffix
        self.nu, self.vu = (0, 0) if part is None else (part.nu, part.vu)
        self.ch = 0 if part is None else part.ch    # logical DMA channels (schedule folds them)
        cols = p.cols
        if shared is not None:
            self._share_constants(shared)
        else:
            self._make_constants(name)
        if t.drain == "nu" and self.nu != self.vu:
            raise CompileError(f"{self.name}: nu.conv.rq on NU {self.nu} writes VBUF {self.nu}, but this part's "
                               f"tiles go to VU {self.vu}")
        if t.bias == "nu":
            self.bias_in = Buffer(f"{self.name}_bias_in", "ibuf", t.th * t.tw * p.rows, unit=self.nu)
            self.bias_w = Buffer(f"{self.name}_bias_wbuf", "wbuf", self.bias_w_ddr.nbytes, unit=self.nu)
        if table_on_nu(p, t):
            self.rq_w = Buffer(f"{self.name}_rq_wbuf", "wbuf", self.rq_ddr.nbytes, unit=self.nu)
        self.bias_dm = Buffer(f"{self.name}_bias_dm", "dm", p.n_ob * cols * 4)
        if p.view.act is not None:      # a fused lut: its table in this VU's VBUF (lut_table's DDR constant shared)
            self.act_ddr, self.act_vbuf = lut_table(p.view.act, name, self.name, self.vu,
                                                    shared.act_ddr if shared is not None else None)
        self.ms_vbuf = Buffer(f"{self.name}_ms_vbuf", "vbuf", p.n_ob * cols * p.view.table_entry, unit=self.vu)
        roles, depths = {**ROLES, **(roles or {})}, role_depths(p, t, depths)
        needs = buffer_needs(p, t, residual is not None, depths)
        self.slots = Slots()
        name, nu, vu = self.name, self.nu, self.vu
        self.role = {k: f"{name}_{v}" for k, v in roles.items()}
        # buffer_needs counts the NU bias pass's own buffers (bias_in, bias_w): not the slots'
        bias_in, bias_w = (t.th * t.tw * p.rows, p.n_ob * p.rows * cols) if t.bias == "nu" else (0, 0)
        self.slots.declare(self.role["in"], "ibuf", (needs["ibuf"] - bias_in) // depths["in"], depth=depths["in"],
                           unit=nu)
        self.w_res = Buffer(self.role["wres"], "wbuf", p.w.blocks.nbytes, unit=nu) if t.resident else None
        if not t.resident:
            self.slots.declare(self.role["wt"], "wbuf", (needs["wbuf"] - bias_w) // depths["wt"], depth=depths["wt"],
                               unit=nu)
        rq = t.drain == "nu"
        if not rq or psum_on_nu(p, t):
            self.slots.declare(self.role["acc"], "abuf", needs["abuf"] // depths["acc"], depth=depths["acc"], unit=nu)
        self.slots.declare(self.role["vacc"], "vbuf", t.obt * t.th * t.tw * cols * (1 if rq else 4),
                           depth=depths["vacc"], unit=vu)
        if residual is not None:
            self.slots.declare(self.role["res"], "vbuf", t.obt * t.th * t.tw * cols, depth=depths["res"], unit=vu)
        if t.bias == "requant":
            self.slots.declare(f"{name}_out", "vbuf", t.obt * t.th * t.tw * cols, depth=depths["out"], unit=vu)
        self.x_dm = Buffer(f"{name}_x_dm", "dm", p.view.x_shape_bytes) if input_in_dm(p, t) else None
        self.x_dm_rows: dict[tuple[int, int, int], set[int]] = {}     # (n, lo, hi) -> rows steps() loaded
        if staged_input(p, t) and self.x_dm is None:
            self.slots.declare(f"{name}_stage", "dm", stage_bytes(p, t), depth=depths["in"])
        if p.view.taps is not None:
            self.slots.declare(f"{name}_stage", "dm", tap_stage_bytes(p, t), depth=depths["in"])
        if staged_fold(p.view):
            kw, sw, dw = p.view.fold
            span = (t.tw - 1) * sw + (kw - 1) * dw + 1
            self.slots.declare(f"{name}_stage", "dm", p.view.x_shape[1] * input_extent(p, t.th, 0) * span,
                               depth=depths["in"])

    def _share_constants(self, other: "NuLowering") -> None:
        self.w_ddr, self.bias_ddr, self.ms_ddr = other.w_ddr, other.bias_ddr, other.ms_ddr
        if self.t.bias == "nu":
            self.bias_lanes_ddr, self.bias_w_ddr = other.bias_lanes_ddr, other.bias_w_ddr
        if table_on_nu(self.p, self.t):
            self.rq_ddr = other.rq_ddr

    def _make_constants(self, name: str) -> None:
        """The DDR constants: weights in NU order, the bias and (M, S) tables (and the bias pass's)."""
        p, t = self.p, self.t
        v, cols = p.view, p.cols
        # groups = 1: declared in its logical shape with the layout spec that blocks it, so the
        # binary records how the weights are stored; block-diagonal weights: as stored
        w_shape, w_layout = ((v.weight.shape, p.w.layout) if p.w.layout else (p.w.blocks.shape, ""))
        if v.fmode is not None:     # float32 weights, declared as their bits (a binary's dtypes are integers)
            self.w_ddr = Buffer(f"{name}_w", "ddr", p.w.blocks.nbytes, dtype="int32", shape=(p.w.blocks.size,),
                                data=p.w.blocks.reshape(-1).view(np.int32))
        else:
            self.w_ddr = Buffer(f"{name}_w", "ddr", p.w.blocks.nbytes, dtype="int8", shape=w_shape,
                                layout=w_layout, data=p.w.blocks)
        self.bias_ddr = Buffer(f"{name}_bias", "ddr", p.n_ob * cols * 4, dtype="int32",
                               shape=(p.n_ob * cols,), data=bias_table(v.bias, p.n_ob, cols))
        ms = ms_table(v.multiplier, v.shift, v.scale, p.n_ob, cols)
        self.ms_ddr = Buffer(f"{name}_{'fs' if v.scale is not None else 'ms'}", "ddr", ms.nbytes, dtype="int32",
                             shape=ms.shape, data=ms)
        if table_on_nu(p, t):
            table = (float_table(v.fmode.bias, v.fmode.y_scale, p.n_ob, cols) if v.fmode is not None
                     else rq_table(v.bias, v.multiplier, v.shift, v.scale, p.n_ob, cols))
            self.rq_ddr = Buffer(f"{name}_rq", "ddr", table.nbytes, dtype="int32", shape=table.shape, data=table)
        if t.bias == "nu":
            lanes, blocks = bias_blocks(v.bias, v.x_zp, p.n_ob, p.rows, cols)
            self.bias_lanes_ddr = Buffer(f"{name}_bias_rows", "ddr", p.rows, dtype="int8", shape=(p.rows,),
                                         data=lanes)
            self.bias_w_ddr = Buffer(f"{name}_bias_w", "ddr", blocks.nbytes, dtype="int8", shape=blocks.shape,
                                     data=blocks)

    def _bias_mode(self, mode: str) -> bool:
        # nu.dwconv starts its accumulators at the bias stored with its weights, nu.conv.rq adds it in
        # its output stage: no other bias path
        return (self.p.view.bias is not None and self.t.bias == mode and not self.p.depthwise
                and self.t.drain == "vu")

    @property
    def fills_bias(self) -> bool:
        """Is the bias broadcast into ABUF before the NU accumulates?"""
        return self._bias_mode("fill")

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses, DDR constants included."""
        out = [self.w_ddr] + ([self.act_ddr, self.act_vbuf] if self.p.view.act is not None else [])
        if self.t.drain == "nu":
            table = [self.rq_ddr, self.rq_w] if table_on_nu(self.p, self.t) else []
            return (out + table + ([self.w_res] if self.t.resident else [])
                    + ([self.x_dm] if self.x_dm is not None else []) + self.slots.all())
        if self.fills_bias:
            out += [self.bias_ddr, self.bias_dm]
        if not self._bias_mode("requant"):
            out += [self.ms_ddr, self.ms_vbuf]
        if self._bias_mode("nu"):
            out += [self.bias_lanes_ddr, self.bias_w_ddr, self.bias_in, self.bias_w]
        return (out + ([self.w_res] if self.t.resident else []) + ([self.x_dm] if self.x_dm is not None else [])
                + self.slots.all())

    # ---------------------------------------------------------------- steps

    def tiles(self) -> Iterator[tuple[range, int, int, int, int, bool, bool]]:
        """(output blocks, n, row, column, chunk index, load weights?, load input?) in loop order.

        Streamed weights: ob group > n > rows > columns > input chunk; a group's
        weights load with its first tile (every tile when there are several
        chunks).  Resident weights: n > rows > columns > ob group; the input
        tile loads once for all groups.
        """
        p, t = self.p, self.t
        groups = [range(ob0, min(p.n_ob, ob0 + t.obt)) for ob0 in range(0, p.n_ob, t.obt)]
        spatial = [(n, oh0, ow0) for n in range(p.view.x_shape[0]) for oh0 in range(0, p.oh, t.th)
                   for ow0 in range(0, p.ow, t.tw)]
        if self.part is not None:
            k, n = self.part.index, self.part.count
            spatial, groups = (spatial[k::n], groups) if self.part.by == "spatial" else (spatial, groups[k::n])
        n_chunks = len(chunks(p, t.cbt))
        if t.resident:
            for n, oh0, ow0 in spatial:
                for g, obs in enumerate(groups):
                    yield obs, n, oh0, ow0, 0, False, g == 0
            return
        for obs in groups:
            for k, (n, oh0, ow0) in enumerate(spatial):
                for j in range(n_chunks):
                    yield obs, n, oh0, ow0, j, k == 0 or n_chunks > 1, True

    def n_tiles(self) -> int:
        """How many tiles (Steps after the constants) the op has: tiles()'s count, without walking it."""
        p, t = self.p, self.t
        groups = -(-p.n_ob // t.obt)
        spatial = p.view.x_shape[0] * -(-p.oh // t.th) * -(-p.ow // t.tw)
        if self.part is not None:
            k, n = self.part.index, self.part.count
            if self.part.by == "spatial":
                spatial = len(range(k, spatial, n))
            else:
                groups = len(range(k, groups, n))
        return spatial * groups * (1 if t.resident else len(chunks(p, t.cbt)))

    def steps(self, limit: int | None = None) -> list[Step]:
        """Every tile of the op as a pipeline Step (the constants, then the first `limit` tiles)."""
        p, t = self.p, self.t
        self.x_dm_rows = {}         # every call loads the input rows afresh
        steps = [self._constants()]
        chunk_list = chunks(p, t.cbt)
        chunked_rq = psum_on_nu(p, t)
        inp = lo = psum = None
        last = self.n_tiles() - 1 if t.drain == "nu" else -1
        for k, (obs, n, oh0, ow0, j, load_w, load_x) in enumerate(self.tiles()):
            if limit is not None and k >= limit:
                break
            first, count = chunk_list[j]
            th, tw = min(t.th, p.oh - oh0), min(t.tw, p.ow - ow0)
            if j == 0:
                acc = self.slots.next(self.role["vacc" if t.drain == "nu" else "acc"])
                psum = self.slots.next(self.role["acc"]) if chunked_rq else None
            rq = t.drain == "nu" and j == len(chunk_list) - 1      # the output stage takes the last chunk
            step = Step()
            where = (f"{self.name}: tile ob {obs.start}..{obs.stop - 1} n {n} "
                     f"oh {oh0}..{oh0 + th - 1} ow {ow0}..{ow0 + tw - 1} chunk {j}")
            step.loads.append(Note(where + ": loads"))
            if load_w:
                self._load_weights(step, obs, first, count)
            if load_x:
                lo, hi = (block_hull(p, range(p.n_ob), first, count) if t.resident
                          else block_hull(p, obs, first, count))
                inp = self._load_input(step, n, oh0, ow0, th, tw, lo, hi)
            step.compute.append(Note(where + ": NU"))
            if j == 0 and self.fills_bias:
                self._fill_bias(step, acc, obs, th * tw)
            if j == 0 and self._bias_mode("nu"):
                self._bias_pass(step, acc, obs, th, tw)
            # the kernel's last tile on the output stage: one command and one store per output block, so
            # that the stores but the last overlap the NU (no later tile's compute hides them), where a
            # block's store outlasts the extra command's NU latency
            self.by_block = rq and k == last and th * tw > BY_BLOCK_PIXELS
            self._convs(step, acc if rq or not chunked_rq else psum, inp, obs, first, count, lo, th, tw,
                        accumulate=j > 0 or self.fills_bias or self._bias_mode("nu"), rq=rq,
                        psum=psum if rq else None)
            if j == len(chunk_list) - 1:
                step.epilogue.append(Note(where + ": epilogue"))
                self._epilogue(step, acc, obs, n, oh0, ow0, th, tw)
            self.by_block = False
            steps.append(step)
        if t.resident:
            # the first group's blocks with the constants, the others with the first tile's loads (issued
            # at once, behind them): what the NU waits for before it starts is the first group's
            first, *rest = self._resident_loads()
            steps[0].loads.append(first)
            if len(steps) > 1:
                steps[1].loads[1:1] = rest
            else:
                steps[0].loads += rest
        if p.depthwise:
            defer_table(steps, self.ms_vbuf)
            if halo_prefilled(self):
                fill_halos(self, self.ch + CH_IN, steps[0])
        return steps

    def _constants(self) -> Step:
        p, cols = self.p, self.p.cols
        step = Step()
        step.loads.append(Note(f"{self.name}: constants"))
        n, ch = p.n_ob * cols, self.ch + CH_W
        if self.fills_bias:
            step.loads.append(Dma(ch, Ref(self.bias_dm), Ref(self.bias_ddr), (n,), (4,), (4,), elem=4,
                                  comment=f"{self.name}: bias table -> dm"))
        if self._bias_mode("nu"):
            rows, pix = p.rows, self.t.th * self.t.tw
            step.loads.append(Dma(ch, Ref(self.bias_in), Ref(self.bias_lanes_ddr), (rows, pix), (1, 0),
                                  (1, rows), comment=f"{self.name}: constant input rows of the bias pass -> ibuf"))
            step.loads.append(Dma(ch, Ref(self.bias_w), Ref(self.bias_w_ddr), (self.bias_w.nbytes,), (1,),
                                  (1,), comment=f"{self.name}: bias weight blocks -> wbuf"))
        if p.view.act is not None:
            step.loads.append(lut_load(ch, self.act_vbuf, self.act_ddr, self.name))
        if table_on_nu(p, self.t):
            step.loads.append(Dma(ch, Ref(self.rq_w), Ref(self.rq_ddr), (self.rq_ddr.nbytes // 4,), (4,), (4,),
                                  elem=4, comment=f"{self.name}: (bias, M, S) table -> wbuf"))
        elif self.t.drain == "vu" and not self._bias_mode("requant"):
            words, what = ((n, "float32 scale") if p.view.scale is not None else (2 * n, "(M, S)"))
            step.loads.append(Dma(ch, Ref(self.ms_vbuf), Ref(self.ms_ddr), (words,), (4,), (4,), elem=4,
                                  comment=f"{self.name}: {what} table -> vbuf"))
        return step

    def _resident_loads(self) -> list[Dma]:
        """The weight blocks of the output-block groups the tiles use, in the order they use them, one
        DMA per run of groups of at least RESIDENT_DMA_BYTES: the sync pass orders each NU command
        after the DMA of its own blocks only, so the NU starts on the first group while the rest stream
        (not after every block has crossed DDR)."""
        p, group_bytes = self.p, self.p.w.span * self.p.w.block_bytes
        groups = list(dict.fromkeys(obs.start for obs, *_ in self.tiles()))
        runs: list[list[int]] = []      # [first block, end block] of each DMA
        for ob in groups:
            end = min(p.n_ob, ob + self.t.obt)
            if runs and runs[-1][1] == ob and (runs[-1][1] - runs[-1][0]) * group_bytes < RESIDENT_DMA_BYTES:
                runs[-1][1] = end
            else:
                runs.append([ob, end])
        return [Dma(self.ch + CH_W, Ref(self.w_res, lo * group_bytes), Ref(self.w_ddr, lo * group_bytes),
                    ((hi - lo) * group_bytes,), (1,), (1,), comment=f"{self.name}: weights ob {lo}..{hi - 1}, resident")
                for lo, hi in runs]

    def _load_weights(self, step: Step, obs: range, first: int, count: int) -> None:
        p = self.p
        wt = self.slots.next(self.role["wt"])
        blk = p.w.block_bytes
        src = Ref(self.w_ddr, (obs.start * p.w.span + first) * blk)
        step.loads.append(Dma(self.ch + CH_W, Ref(wt), src, (count * blk, len(obs)), (1, p.w.span * blk),
                              (1, count * blk), comment=f"{self.name}: weights ob {obs.start}.. -> {wt.name}"))

    def _load_input(self, step: Step, n: int, oh0: int, ow0: int, th: int, tw: int, lo: int, hi: int):
        """DMA the input tile, blocks [lo, hi), with its halo, into the next IBUF slot."""
        p, v, rows = self.p, self.p.view, self.p.rows
        inp = self.slots.next(self.role["in"])
        if v.taps is not None:
            self._load_taps(step, inp, n, oh0, ow0, th, tw, lo, hi)
            return inp
        ih, iw = input_extent(p, th, 0), input_extent(p, tw, 1)
        sn, sc, sh, sw = v.x_strides
        _, c, h, w = v.x_shape
        r0, plo_h, phi_h = _halo(oh0 * v.stride[0] - v.padding[0], ih, h)
        if v.fold is not None:
            self._load_folded(step, inp, n, r0, plo_h, phi_h, ow0, tw, ih)
            return inp
        c0, plo_w, phi_w = _halo(ow0 * v.stride[1] - v.padding[1], iw, w)
        full = min(hi, c // rows)                 # blocks with every channel real
        groups = [(lo, full, rows)] if full > lo else []
        if hi > max(lo, full):
            groups.append((max(lo, full), hi, c - max(lo, full) * rows))
        interior = p.depthwise and halo_prefilled(self)
        base, (sc, sw, sh) = Ref(self.x, n * sn + r0 * sh + c0 * sw), (sc, sw, sh)
        inner_w, inner_h = iw - plo_w - phi_w, ih - plo_h - phi_h
        if self.x_dm is not None and inner_h > 0 and groups:
            base, (sc, sw, sh) = self._input_from_dm(step, n, r0, inner_h, lo, hi), (h * w, 1, w)
            base = base + c0
        elif self.x_dm is None and staged_input(p, self.t) and inner_w < w and inner_h > 0 and groups:
            # NCHW rows shorter than the plane's: read the tile's rows whole (runs of rows x width) into
            # DM, then block them into IBUF from DM, which has no bursts
            chans = min(hi * rows, c) - lo * rows
            stage = self.slots.next(f"{self.name}_stage")
            step.loads.append(ddr_order(Dma(
                self.ch + CH_IN, Ref(stage), Ref(self.x, n * sn + lo * rows * v.x_strides[1] + r0 * sh),
                (w, inner_h, chans), (sw, sh, v.x_strides[1]), (1, w, inner_h * w),
                comment=f"{self.name}: input rows of blocks {lo}..{hi - 1} -> {stage.name}")))
            base, (sc, sw, sh) = Ref(stage, c0 - lo * rows * inner_h * w), (inner_h * w, 1, w)
        for g, (b0, b1, real) in enumerate(groups):
            # the partial last block's DMA on the weights' channel: its DDR latency overlaps the full
            # blocks' transfer instead of following it in one queue
            ch = self.ch + (CH_W if g and base.buf.space == "ddr" else CH_IN)
            src, bs = base + b0 * rows * sc, rows * sc
            if v.x_block and base.buf is self.x:      # blocked NC/bHWb: each block's own strides
                off, (_, sc, sh, sw) = block_at(v.x_shape, v.x_strides, v.x_block, b0 * rows)
                src = Ref(self.x, n * sn + off + r0 * sh + c0 * sw)
                bs = block_stride(v.x_shape, v.x_strides, v.x_block, rows)
            dst = Ref(inp, (b0 - lo) * ih * iw * rows)
            if interior:
                step.loads.append(interior_load(self, self.ch + CH_IN, dst, src, (real, iw, ih, b1 - b0),
                                                (plo_w, plo_h), (phi_w, phi_h),
                                                f"input blocks {b0}..{b1 - 1} -> {inp.name}", (sc, sw, sh, bs)))
                continue
            step.loads.append(ddr_order(Dma(
                ch, dst, src, (rows, iw, ih, b1 - b0), (sc, sw, sh, bs),
                (1, rows, iw * rows, ih * iw * rows), (0, plo_w, plo_h, 0), (rows - real, phi_w, phi_h, 0),
                pad_value=v.x_zp, comment=f"{self.name}: input blocks {b0}..{b1 - 1} -> {inp.name}")))
        return inp

    def _input_from_dm(self, step: Step, n: int, r0: int, inner_h: int, lo: int, hi: int) -> Ref:
        """Ref of image n's row r0, channel 0, in x_dm, after loading the rows [r0, r0 + inner_h) of the
        blocks [lo, hi) that no earlier tile loaded (each byte crosses DDR once: input_in_dm)."""
        v, rows = self.p.view, self.p.rows
        sn, sc, sh, sw = v.x_strides
        _, c, h, w = v.x_shape
        chans = min(hi * rows, c) - lo * rows
        have = self.x_dm_rows.setdefault((n, lo, hi), set())
        missing = [r for r in range(r0, r0 + inner_h) if r not in have]
        runs = [[missing[0], missing[0] + 1]] if missing else []
        for r in missing[1:]:
            if r == runs[-1][1]:
                runs[-1][1] += 1
            else:
                runs.append([r, r + 1])
        for a, b in runs:
            step.loads.append(ddr_order(Dma(
                self.ch + CH_IN, Ref(self.x_dm, ((n * c + lo * rows) * h + a) * w),
                Ref(self.x, n * sn + lo * rows * sc + a * sh), (w, b - a, chans), (sw, sh, sc), (1, w, h * w),
                comment=f"{self.name}: input rows {a}..{b - 1} of blocks {lo}..{hi - 1} -> {self.x_dm.name}")))
        have.update(missing)
        return Ref(self.x_dm, (n * c * h + r0) * w)

    def _load_folded(self, step: Step, inp: Buffer, n: int, r0: int, plo_h: int, phi_h: int,
                     ow0: int, tw: int, ih: int) -> None:
        """One DMA per kernel column j: rows j*C..j*C+C-1 get x shifted by j*dil_w (layout.fold_columns)."""
        v, rows = self.p.view, self.p.rows
        kw, sw, dw = v.fold
        sn, sc, sh, sx = v.x_strides
        _, c, h, w = v.x_shape
        if v.x_block and c > v.x_block:
            raise CompileError(f"{self.name}: a folded conv reads {c} channels, more than one block of "
                               f"{v.x_block} (blocked layout)")
        halos = [_strided_halo(ow0 * sw + j * dw - v.padding[1], sw, tw, w) for j in range(kw)]
        real = [(first, first + (tw - plo - phi - 1) * sw) for first, plo, phi in halos if plo + phi < tw]
        rows_real = ih - plo_h - phi_h
        base, strides, lo = Ref(self.x, n * sn + r0 * sh), (sc, sx, sh), 0
        if staged_fold(v) and real and rows_real > 0:
            # one DDR read of the rows' whole span (runs of the span) into DM, then the strided or
            # per-pixel gathers from DM, which has no bursts
            lo, span = min(a for a, _ in real), max(b for _, b in real) - min(a for a, _ in real) + 1
            stage = self.slots.next(f"{self.name}_stage")
            step.loads.append(ddr_order(Dma(
                self.ch + CH_IN, Ref(stage), base + lo * sx, (span, rows_real, c), (sx, sh, sc),
                (1, span, rows_real * span), comment=f"{self.name}: input rows' span -> {stage.name}")))
            base, strides = Ref(stage, -lo), (rows_real * span, 1, span)
        for j, (first, plo, phi) in enumerate(halos):
            src = base + (first if plo + phi < tw else lo) * strides[1]     # (all padding: reads nothing)
            step.loads.append(ddr_order(Dma(
                self.ch + CH_IN, Ref(inp, j * c), src, (c, tw, ih), (strides[0], sw * strides[1], strides[2]),
                (1, rows, tw * rows), (0, plo, plo_h), (0, phi, phi_h), pad_value=v.x_zp,
                comment=f"{self.name}: input, kernel column {j} -> rows {j * c}..{j * c + c - 1} of {inp.name}")))

    def _load_taps(self, step: Step, inp: Buffer, n: int, oh0: int, ow0: int, th: int, tw: int,
                   lo: int, hi: int) -> None:
        """The tile's input window into DM, its halo filled with x_zp there (one DDR read), then the
        taps of the blocks [lo, hi) gathered from it into their IBUF rows: one DMA per run of taps of
        one kernel row in one block, the run its fourth dim (layout.fold_taps)."""
        v, rows = self.p.view, self.p.rows
        f = v.taps
        sn, sc, sy, sx = v.x_strides
        _, c, h, w = v.x_shape
        ys, xs = ((th - 1) * f.stride[0] + (f.kh - 1) * f.dilation[0] + 1,
                  (tw - 1) * f.stride[1] + (f.kw - 1) * f.dilation[1] + 1)
        fy, ply, phy = _halo(oh0 * f.stride[0] - v.padding[0], ys, h)
        fx, plx, phx = _halo(ow0 * f.stride[1] - v.padding[1], xs, w)
        stage = self.slots.next(f"{self.name}_stage")
        step.loads.append(ddr_order(Dma(
            self.ch + CH_IN, Ref(stage), Ref(self.x, n * sn + fy * sy + fx * sx), (xs, ys, c), (sx, sy, sc),
            (1, xs, ys * xs), (plx, ply, 0), (phx, phy, 0), pad_value=v.x_zp,
            comment=f"{self.name}: input window, halo filled -> {stage.name}")))
        first, end = lo * f.per_block, min(hi * f.per_block, f.kh * f.kw)
        k = first
        while k < end:
            (i, j), (b, r) = divmod(k, f.kw), f.place(k)
            run = min(f.kw - j, end - k, f.per_block - k % f.per_block)     # same kernel row, same block
            step.loads.append(Dma(
                self.ch + CH_IN, Ref(inp, (b - lo) * th * tw * rows + r),
                Ref(stage, i * f.dilation[0] * xs + j * f.dilation[1]), (c, tw, th, run),
                (ys * xs, f.stride[1], f.stride[0] * xs, f.dilation[1]), (f.lane_step, rows, tw * rows, f.tap_step),
                comment=f"{self.name}: input, taps ({i}, {j}..{j + run - 1}) -> block {b} rows "
                        + (f"{r}.. every {f.lane_step}" if f.k_order else f"{r}..{r + run * c - 1}")
                        + f" of {inp.name}"))
            k += run

    def _bias_pass(self, step: Step, acc: Buffer, obs: range, th: int, tw: int) -> None:
        """Per output block, a 1x1 nu.conv of the constant rows that writes the bias into ABUF."""
        p = self.p
        params = {"in_h": th, "in_w": tw, "in_cb": 1, "out_h": th, "out_w": tw, "out_cb": 1, "k_h": 1, "k_w": 1,
                  "stride_h": 1, "stride_w": 1, "dil_h": 1, "dil_w": 1, "x_zp": p.view.x_zp}
        for k, ob in enumerate(obs):
            step.compute.append(NuConv(False, Ref(acc, k * th * tw * p.cols * 4), Ref(self.bias_in),
                                       Ref(self.bias_w, ob * p.rows * p.cols), dict(params), p.rows, p.cols,
                                       unit=self.nu, comment=f"{self.name}: bias pass ob {ob}"))

    def _fill_bias(self, step: Step, acc: Buffer, obs: range, pixels: int) -> None:
        # the early compute stage, not loads: loads run two tiles ahead of the drain that frees this
        # slot; early, before the next tile's loads, so that the CU does not issue it only after
        # waiting for the previous tile's NU work (which frees the input slot those loads reuse):
        # the NU would then idle while the fill runs.  On the drain channel, behind that drain.
        cols = self.p.cols
        step.early.append(Dma(self.ch + CH_DRAIN, Ref(acc), Ref(self.bias_dm, obs.start * cols * 4),
                              (cols, pixels, len(obs)), (4, 0, cols * 4), (4, cols * 4, pixels * cols * 4),
                              elem=4, comment=f"{self.name}: bias broadcast -> {acc.name}"))

    def _convs(self, step, acc, inp, obs, first, count, lo, th, tw, accumulate, rq=False, psum=None) -> None:
        """The tile's NU commands for one chunk into `acc` (ABUF; with rq, the output stage into VBUF,
        adding the partial sums in ABUF `psum` when given)."""
        p, v = self.p, self.p.view
        ih, iw = input_extent(p, th, 0), input_extent(p, tw, 1)
        params = {"in_h": ih, "in_w": iw, "in_cb": count, "out_h": th, "out_w": tw, "out_cb": 1,
                  "k_h": p.kh, "k_w": p.kw, "stride_h": v.stride[0], "stride_w": v.stride[1],
                  "dil_h": v.dilation[0], "dil_w": v.dilation[1], "x_zp": v.x_zp}
        if rq:
            params.update(rq_zp_out=v.zp_out, rq_lo=v.lo, rq_hi=v.hi)
            if v.fmode is None:
                params.update(rq_float=int(v.scale is not None))
        state = 8 if v.fmode is not None else 4     # bytes an output of the accumulators (the float mode's pairs)
        groups = self._conv_groups(obs, count)
        if self.by_block:
            groups = [(k + i, ob + i, 1) for k, ob, blocks in groups for i in range(blocks)]
        for k, ob, blocks in groups:
            rin = Ref(inp, (p.w.cb_start[ob] + first - lo) * ih * iw * p.rows)
            rw = (Ref(self.w_res, (ob * p.w.span + first) * p.w.block_bytes) if self.t.resident
                  else Ref(self.slots.current(self.role["wt"]), k * count * p.w.block_bytes))
            racc = Ref(acc, k * th * tw * p.cols * (1 if rq else state))
            many = dict(in_cb=blocks * count) if p.depthwise else dict(out_cb=blocks)
            if v.fmode is not None:     # where the lanes sit in MLAS's order; f_mode: continue the state
                many.update(float_params(v.fmode, v.groups, p.oh * p.ow, p.w.cb_start[ob] + first, ob, p.rows,
                                         p.cols),
                            f_mode=int(accumulate if not rq else psum is not None))
            step.compute.append(NuConv(accumulate and not rq and v.fmode is None, racc, rin, rw,
                                       dict(params, **many), p.rows, p.cols, unit=self.nu, depthwise=p.depthwise,
                                       rq=Ref(self.rq_w, ob * p.cols * RQ_ENTRY) if rq and not p.depthwise else None,
                                       psum=None if psum is None else Ref(psum, k * th * tw * p.cols * state),
                                       fmode=v.fmode is not None,
                                       comment=f"{self.name}: conv ob {ob}" + (f"..{ob + blocks - 1}" if blocks > 1
                                                                               else "") + (
                                           ", depthwise" if p.depthwise
                                           else ", plus partial sums, requantised into VBUF" if psum is not None
                                           else ", requantised into VBUF" if rq else "")))

    def _conv_groups(self, obs: range, count: int) -> list[tuple[int, int, int]]:
        """(position in the tile, first output block, blocks) of each NU command of a tile: one for
        all when their weights lie one after the other as [out_cb][in_cb] (streamed, or resident and
        one chunk) and they read the same input blocks (groups = 1), and for nu.dwconv (its blocks lie
        one after the other in IBUF, WBUF and ABUF); else one per block.  One command pays the NU's
        latency once."""
        p = self.p
        same = len({p.w.cb_start[ob] for ob in obs}) == 1 and (not self.t.resident or count == p.w.span)
        if p.depthwise or same:
            return [(0, obs.start, len(obs))]
        return [(k, ob, 1) for k, ob in enumerate(obs)]

    def _epilogue(self, step, acc, obs, n, oh0, ow0, th, tw) -> None:
        v, cols = self.p.view, self.p.cols
        pix, nob = th * tw, len(obs)
        if self.t.drain == "nu":        # nu.conv.rq left the int8 tile in VBUF
            self._finish(step, acc, obs, n, oh0, ow0, th, tw)
            return
        vacc = self.slots.next(self.role["vacc"])
        step.epilogue.append(Dma(self.ch + CH_DRAIN, Ref(vacc), Ref(acc), (nob * pix * cols,), (4,), (4,), elem=4,
                                 comment=f"{self.name}: drain {acc.name} -> {vacc.name}"))
        drained = len(step.epilogue)
        clamp = {"zp_out": v.zp_out, "lo": v.lo, "hi": v.hi}
        if self._bias_mode("requant"):
            out = self.slots.next(f"{self.name}_out")
            per_channel = self._channel_requants()
            for ob in obs:
                for c in range(min(cols, v.y_shape[1] - ob * cols)):
                    o, k = ob * cols + c, (ob - obs.start) * pix * cols
                    m, scalars, comment = per_channel[o]
                    step.epilogue.append(Vu(        # 4-D already: the search builds millions of these
                        m, Ref(out, k + c), Ref(vacc, 4 * (k + c)), None, "i8", "i32", 0, (pix, 1, 1, 1),
                        (cols, 0, 0, 0), (4 * cols, 0, 0, 0), scalars=dict(scalars), unit=self.vu, comment=comment))
        else:
            out = vacc
            e = v.table_entry
            step.epilogue.append(Vu(
                "vu.requant.fpc" if v.scale is not None else "vu.requant.pc", Ref(vacc), Ref(vacc),
                Ref(self.ms_vbuf, obs.start * cols * e), "i8", "i32", e,
                (cols, pix, nob), (1, cols, pix * cols), (4, cols * 4, pix * cols * 4), (e, 0, cols * e),
                scalars={"za": 0, **clamp}, unit=self.vu,
                comment=f"{self.name}: requantise in place in {vacc.name}"))
        self._finish(step, out, obs, n, oh0, ow0, th, tw)
        # the late stage runs after the next tile's drain: with one slot, that drain overwrites this one
        if LATE_REQUANT and len(self.slots.buffers[self.role["vacc"]]) > 1:
            step.late[:0] = step.epilogue[drained:]
            del step.epilogue[drained:]

    def _channel_requants(self) -> list[tuple[str, dict, str]]:
        """Each output channel's (mnemonic, scalars, comment) of its bias-and-requantise command, made
        once: a depthwise conv's tiles repeat them per channel and tile, which dominated compile time."""
        if self._rq_cache is None:
            v = self.p.view
            # the search lowers thousands of tilings of one view: made once for all of them, keyed by the
            # values the rows are made of (an id would be reused by another view once this one is freed)
            key = (self.name, v.zp_out, v.lo, v.hi, v.y_shape[1], *map(_exact, (v.scale, v.multiplier, v.shift, v.bias)))
            hit = _RQ_ROWS.get(key)
            if hit is None:
                clamp = {"zp_out": v.zp_out, "lo": v.lo, "hi": v.hi}
                rows = []
                for o in range(v.y_shape[1]):
                    if v.scale is not None:
                        m, sc = "vu.requant.f", {"fscale": f32_bits(v.scale[o])}
                    else:
                        m, sc = "vu.requant", {"ma": int(v.multiplier[o]), "shift": int(v.shift[o])}
                    rows.append((m, {"za": -int(v.bias[o]), **sc, **clamp},
                                 f"{self.name}: add bias and requantise channel {o}"))
                if len(_RQ_ROWS) >= 64:
                    _RQ_ROWS.clear()
                hit = _RQ_ROWS[key] = rows
            self._rq_cache = hit
        return self._rq_cache

    def _finish(self, step, out, obs, n, oh0, ow0, th, tw) -> None:
        """The int8 tile in VBUF `out`: the residual add, if any, then the store to DDR in NCHW."""
        v, cols, pix = self.p.view, self.p.cols, th * tw
        if self.residual is not None:
            self._residual(step, out, obs, n, oh0, ow0, th, tw)
        if v.act is not None:       # the fused lut, on the whole tile (pad lanes too: they are not stored)
            step.epilogue.append(lut_vu(Ref(out), Ref(self.act_vbuf), len(obs) * pix * cols, self.vu,
                                        f"{self.name}: activation table lookup in {out.name}"))
        o = v.y_shape[1]
        pieces = [range(ob, ob + 1) for ob in obs] if self.by_block else [obs]
        for b0, b1, real in [g for piece in pieces for g in _block_groups(piece, o, cols)]:
            off, (sn, sc, sh, sw) = block_at(v.y_shape, v.y_strides, v.y_block, b0 * cols)
            dst = Ref(self.y, n * sn + off + oh0 * sh + ow0 * sw)
            src = Ref(out, (b0 - obs.start) * pix * cols)
            bs = block_stride(v.y_shape, v.y_strides, v.y_block, cols)
            step.epilogue.append(ddr_order(Dma(self.ch + CH_OUT, dst, src, (real, tw, th, b1 - b0),
                                               (1, cols, tw * cols, pix * cols), (sc, sw, sh, bs),
                                               comment=f"{self.name}: store {out.name} -> y")))

    def _residual(self, step, vacc, obs, n, oh0, ow0, th, tw) -> None:
        v, cols, r = self.p.view, self.p.cols, self.residual
        pix, nob = th * tw, len(obs)
        res = self.slots.next(self.role["res"])
        strides, block = act_strides(v.y_shape, r.layout), layout_block(r.layout)
        for b0, b1, real in _block_groups(obs, v.y_shape[1], cols):
            off, (sn, sc, sh, sw) = block_at(v.y_shape, strides, block, b0 * cols)
            src = Ref(self.res_buf, n * sn + off + oh0 * sh + ow0 * sw)
            dst = Ref(res, (b0 - obs.start) * pix * cols)
            step.epilogue.append(ddr_order(Dma(
                self.ch + CH_OUT, dst, src, (cols, tw, th, b1 - b0),
                (sc, sw, sh, block_stride(v.y_shape, strides, block, cols)),
                (1, cols, tw * cols, pix * cols), (0, 0, 0, 0), (cols - real, 0, 0, 0),
                comment=f"{self.name}: residual -> {res.name}")))
        n_el = nob * pix * cols
        step.epilogue.append(Vu(r.mnemonic, Ref(vacc), Ref(vacc), Ref(res), "i8", "i8", 1, (n_el,), (1,), (1,), (1,),
                                scalars={**dict(r.scalars), "lo": r.lo, "hi": r.hi},
                                unit=self.vu, comment=f"{self.name}: residual add in {vacc.name}"))


_RQ_ROWS: dict[tuple, list] = {}
"""NuLowering._channel_requants' rows by the kernel's name and every value they are made of."""


def _exact(a: np.ndarray | None) -> tuple | None:
    """An array as a key: its dtype, shape and bytes (None stays None)."""
    if a is None:
        return None
    a = np.ascontiguousarray(a)
    return a.dtype.str, a.shape, a.tobytes()

def _halo(start: int, extent: int, size: int) -> tuple[int, int, int]:
    """(first real index, padding before, padding after) of a window [start, start + extent)."""
    plo = min(extent, max(0, -start))
    phi = min(extent - plo, max(0, start + extent - size))
    return max(0, min(start, size - 1)), plo, phi


def _strided_halo(start: int, step: int, n: int, size: int) -> tuple[int, int, int]:
    """(first real index, padding before, padding after) of the indices start + q * step, q < n."""
    plo = min(n, -(start // step)) if start < 0 else 0
    inside = max(plo, min(n, -(-(size - start) // step)) if size > start else 0)
    return (start + plo * step if plo < inside else 0), plo, n - inside


def _block_groups(obs: range, channels: int, cols: int) -> list[tuple[int, int, int]]:
    """(first block, end block, real channels per block): full blocks, then a partial last one."""
    full = min(obs.stop, channels // cols)
    out = [(obs.start, full, cols)] if full > obs.start else []
    if obs.stop > max(obs.start, full):
        out.append((max(obs.start, full), obs.stop, channels - max(obs.start, full) * cols))
    return out
