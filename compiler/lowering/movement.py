"""Lowering of the data-movement ops (Transpose, Slice, Pad, nearest Resize, Concat, Strided) onto DMA boxes.

Every op is first described as a MovePlan: the output seen as a box of `shape` (a row-major view
of its bytes: a nearest upsampling by s splits an axis into (n, s)), and pieces, each a sub-box of
the output filled from one input by byte strides per output dim (0 along a repeated dim), the
rest of the output `fill` (Pad's constant).  The output is cut into tiles, boxes of the plan's
shape; each tile goes through a VBUF slot:

  load     one DMA per piece it meets, DDR -> slot: the DDR side walks the input in its own
           order (dims sorted by the input's strides, layout.ddr_order), the slot side scatters
           into the tile's output order, so a permutation costs nothing but on-chip addressing;
           Pad's constant is the same DMA's padding; a repeated dim is loaded once (index 0); where
           the runs would be short, a dense range of the input into a staging slot (dense_range),
           in DM when it has room
  gather   (repeats, a staged range) one DMA slot -> slot on chip, reading index 0 of every
           repeated dim with stride 0, or the staged range by the input's strides (from DM: on
           the store's channel, so that the loads' channels stream loads alone)
  store    one DMA, slot -> DDR, runs along the output's inner dims

Tiles are sized so that both the input's innermost dim and the output's have long runs (whole
bursts: docs/timing.md), and a slot holds at most SLOT_BYTES.  No VU and no NU command.
"""
from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from nnpsim.config import Config
from nnpsim.timing import burst_bytes

from ..errors import CompileError
from ..ir import Buffer, Dma, Note, Ref
from ..ops import Concat, Op, Pad, Resize, ResizeLinear, Slice, Strided, Transpose
from .double_buffer import Slots, Step
from .layout import ddr_order
from .vu import lut_load, lut_table, lut_vu

SLOT_BYTES = 32 * 1024      # a tile's VBUF slot; three rotate (loaded, expanded in place, stored)
MIN_TILE_BYTES = 2048       # below this a tile's DMA latency outweighs overlapping loads and stores
MIN_TILES = 2
"""Tiles a tensor is cut into at least, so that loads and stores overlap: in benchmarks/movement.py four
or eight tiles ran slower (each DMA pays DDR's latency on its channel's in-order queue)."""
STAGED_TILES = 4
"""Tiles at least when the loads stage dense ranges in DM: in benchmarks/movement.py two tiles left the
gathers and stores after the loads, unoverlapped, and eight or sixteen paid DDR's latency more often."""
STAGING_DEPTH = 3
"""Staged ranges in DM in flight: a load reuses the range whose gather was issued three tiles before,
not two (with two, each pair of loads waited for the gathers of the pair before)."""
RUN = 128                   # elements of a tile along the input's and the output's innermost dims, at least
CH_LOAD, CH_STORE = (0, 1), (2, 3)
"""Channels taken in turn: a tile's DMA pays DDR's latency while the one before it on the other channel
streams (one channel's queue is in order).  A tile's gather on chip follows its load on that channel."""


@dataclass(frozen=True)
class Piece:
    """Output elements [lo, hi) (per plan dim) copied from input `src`: output index i reads the
    input element at base + sum((i - lo) * strides), in elements."""

    src: int
    lo: tuple[int, ...]
    hi: tuple[int, ...]
    base: int
    strides: tuple[int, ...]


@dataclass(frozen=True)
class MovePlan:
    """The output as a box of `shape`, the pieces that fill it and the value of the rest (None: none)."""

    shape: tuple[int, ...]
    pieces: tuple[Piece, ...]
    fill: int | None
    elem: int


def _strides(shape) -> tuple[int, ...]:
    out, step = [], 1
    for d in reversed(shape):
        out.append(step)
        step *= d
    return tuple(reversed(out))


def merged_transpose(shape: tuple[int, ...], perm: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(input shape, perm) with size-1 axes dropped and axes that stay adjacent and in order merged."""
    keep = [a for a in range(len(shape)) if shape[a] > 1]
    perm = [p for p in perm if shape[p] > 1]
    rank = {a: k for k, a in enumerate(keep)}
    perm = [rank[p] for p in perm]
    dims = [shape[a] for a in keep]
    groups: list[list[int]] = []          # runs of output axes whose input axes follow one another
    for p in perm:
        if groups and groups[-1][-1] + 1 == p:
            groups[-1].append(p)
        else:
            groups.append([p])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])
    new_shape = tuple(math.prod(dims[a] for a in groups[g]) for g in order)
    new_perm = tuple(order.index(g) for g in range(len(groups)))
    return (new_shape or (1,)), (new_perm or (0,))


def _transpose_plan(op: Transpose, elem: int) -> MovePlan:
    shape, perm = merged_transpose(op.in_shape, op.perm)
    st = _strides(shape)
    out = tuple(shape[p] for p in perm)
    return MovePlan(out, (Piece(0, (0,) * len(out), out, 0, tuple(st[p] for p in perm)),), None, elem)


def _strided_plan(op: Strided, elem: int) -> MovePlan:
    """The copy's one piece, with size-1 dims dropped and a dim merged into the one outside it where that
    one's stride steps over it whole (the DMA's runs grow)."""
    dims: list[list[int]] = []                 # [size, stride], outer first
    for n, st in zip(op.out_shape, op.strides):
        if n == 1:
            continue
        if dims and dims[-1][1] == n * st:
            dims[-1] = [dims[-1][0] * n, st]
        else:
            dims.append([n, st])
    out = tuple(n for n, _ in dims) or (1,)
    strides = tuple(st for _, st in dims) or (1,)
    return MovePlan(out, (Piece(0, (0,) * len(out), out, op.base, strides),), None, elem)


def _slice_plan(op: Slice, elem: int) -> MovePlan:
    st = _strides(op.in_shape)
    base = sum(s * t for s, t in zip(op.starts, st))
    out = op.counts
    return MovePlan(out, (Piece(0, (0,) * len(out), out, base, tuple(t * s for t, s in zip(st, op.steps))),),
                    None, elem)


def _pad_plan(op: Pad, elem: int) -> MovePlan:
    n, out = len(op.in_shape), op.output.shape
    st = _strides(op.in_shape)
    lo = tuple(max(0, op.pads[k]) for k in range(n))
    hi = tuple(min(out[k], op.pads[k] + op.in_shape[k]) for k in range(n))
    base = sum((lo[k] - op.pads[k]) * st[k] for k in range(n))
    covered = all(a == 0 and b == d for a, b, d in zip(lo, hi, out))
    return MovePlan(out, (Piece(0, lo, hi, base, st),), None if covered else op.value, elem)


def _concat_plan(op: Concat, elem: int) -> MovePlan:
    out = op.output.shape
    pieces, at = [], 0
    for k, s in enumerate(op.shapes):
        lo = tuple(at if d == op.axis else 0 for d in range(len(out)))
        hi = tuple(at + s[d] if d == op.axis else out[d] for d in range(len(out)))
        pieces.append(Piece(k, lo, hi, 0, _strides(s)))
        at += s[op.axis]
    return MovePlan(out, tuple(pieces), None, elem)


def const_buffers(op: Op, name: str) -> dict[int, Buffer]:
    """The DDR buffers holding a concat's constant pieces (the program's data), by piece."""
    return {k: Buffer(f"{name}_c{k}", "ddr", a.nbytes, dtype=str(a.dtype), shape=a.shape,
                      data=np.ascontiguousarray(a)) for k, a in getattr(op, "consts", ())}


def axis_map(m: tuple[int, ...], n_in: int, axis: int) -> tuple[int, tuple[tuple[int, int], ...]]:
    """An index map as (first index, ((size, input step) per plan dim, outer first)): a progression
    a + o * d, or a repeat o // s (each input index s times); CompileError for any other map."""
    n = len(m)
    d = m[1] - m[0] if n > 1 else 1
    if all(m[o] == m[0] + o * d for o in range(n)) and d >= 0:
        return m[0], ((n, d),)
    s = n // n_in
    if s > 1 and n == s * n_in and all(m[o] == o // s for o in range(n)):
        return 0, ((n_in, 1), (s, 0))
    raise CompileError(f"resize axis {axis}: the nearest index map {list(m[:12])}{'...' if n > 12 else ''} is "
                       f"neither an integer upsampling (each input index repeated alike) nor a stride")


def _resize_plan(op: Resize, elem: int) -> MovePlan:
    st = _strides(op.in_shape)
    shape, strides, base = [], [], 0
    for k, (m, d) in enumerate(zip(op.maps, op.in_shape)):
        first, dims = axis_map(m, d, k)
        base += first * st[k]
        for size, step in dims:
            shape.append(size)
            strides.append(step * st[k])
    shape = tuple(shape)
    return MovePlan(shape, (Piece(0, (0,) * len(shape), shape, base, tuple(strides)),), None, elem)


def move_plan(op: Op) -> MovePlan:
    """The op's MovePlan (CompileError for an op this lowering does not move)."""
    elem = np.dtype(op.output.dtype).itemsize
    plans = {Transpose: _transpose_plan, Slice: _slice_plan, Pad: _pad_plan, Concat: _concat_plan,
             Resize: _resize_plan, Strided: _strided_plan}
    if type(op) not in plans:
        raise CompileError(f"{op.kind} is not a data-movement op")
    return plans[type(op)](op, elem)


def is_movement(op: Op) -> bool:
    """Is the op a kernel of its own with no choices: DMA boxes alone (this module), or a linear Resize
    (lowering.resize: DMA boxes and one vu.lerp a tile)?"""
    return isinstance(op, (Transpose, Slice, Pad, Resize, Concat, ResizeLinear, Strided))


def takes_lut(op: Op) -> bool:
    """Can a lut follow the op in its own kernel, one vu.lut on each tile in its slot before the store: a
    Transpose, a Slice or a Strided copy of int8 (LUT_FOLLOWS)?"""
    return isinstance(op, LUT_FOLLOWS) and op.output.dtype == "int8"


LUT_FOLLOWS = (Transpose, Slice, Strided)
"""The copies whose kernel applies a lut after them (network.partition: ViT's q and k, scaled after their copy
to heads)."""


def tile_shape(plan: MovePlan, budget: int) -> tuple[int, ...]:
    """A tile of at most `budget` elements: the output's and the first piece's input innermost dims
    RUN long first (repeated dims whole), then grown inner dim first."""
    shape, st = plan.shape, plan.pieces[0].strides
    n = len(shape)
    big = [d for d in range(n) if shape[d] > 1] or [n - 1]
    oi = big[-1]
    moving = [d for d in big if st[d] != 0]
    ii = min(moving, key=lambda d: (abs(st[d]), -d)) if moving else oi
    t = [1] * n
    for d in big:
        if st[d] == 0:
            t[d] = shape[d]
    cap = max(RUN, math.isqrt(max(1, budget // max(1, math.prod(t)))))
    for d in dict.fromkeys((oi, ii)):
        t[d] = min(shape[d], cap)
    for d in dict.fromkeys([oi, ii] + big[::-1]):
        rest = math.prod(t) // t[d]
        t[d] = max(t[d], min(shape[d], budget // rest))
    return tuple(t)


@lru_cache(maxsize=1024)
def burst_tile(plan: MovePlan, budget: int, burst: int) -> tuple[int, ...]:
    """The tile of at most `budget` elements whose loads and stores touch the fewest DDR bursts (then the
    fewest tiles): tile_shape's, or one whose extents along the output's and the input's innermost dims are
    whole or whole bursts (a plan of one piece that repeats nothing and pads nothing; else tile_shape's).
    ViT-tiny's k, [192, 197] read at strides (1, 576): tile_shape's 137 x 138 touches 112,448 burst bytes,
    64 x 197 the 75,648 it moves."""
    first = tile_shape(plan, budget)
    if len(plan.pieces) != 1 or plan.fill is not None or 0 in plan.pieces[0].strides:
        return first
    shape, st = plan.shape, plan.pieces[0].strides
    big = [d for d in range(len(shape)) if shape[d] > 1]
    if not big:
        return first
    oi, ii = big[-1], min(big, key=lambda d: (abs(st[d]), -d))
    per = max(1, burst // plan.elem)
    options = {d: sorted({first[d], shape[d], *range(per, min(shape[d], budget) + 1, per)})[-MAX_OPTIONS:]
               for d in (oi, ii)}
    best, key = first, (tile_bursts(plan, first, burst), math.prod(-(-n // t) for n, t in zip(shape, first)))
    for a, b in itertools.product(options[oi], options[ii]):
        t = [1] * len(shape)
        t[oi], t[ii] = a, b if ii != oi else a
        if math.prod(t) > budget:
            continue
        for d in big[::-1]:                    # the other dims grown, inner first
            if d not in (oi, ii):
                t[d] = max(1, min(shape[d], budget // (math.prod(t) // t[d])))
        cand = tuple(t)
        k = (tile_bursts(plan, cand, burst), math.prod(-(-n // x) for n, x in zip(shape, cand)))
        if k < key:
            best, key = cand, k
    return best


MAX_OPTIONS = 12
"""Extents burst_tile tries along each of the two innermost dims (the largest whole-burst ones, the whole dim
and tile_shape's): at most 144 tilings priced, each by its distinct tiles."""


def tile_bursts(plan: MovePlan, tile: tuple[int, ...], burst: int) -> int:
    """DDR burst bytes of every tile's load and store (one piece, from 64-byte aligned buffers): each distinct
    (tile size, start residues modulo the burst) priced once, times the tiles that share it."""
    pc, e = plan.pieces[0], plan.elem
    out_st = _strides(plan.shape)
    kinds = Counter()
    for lo in itertools.product(*[range(0, n, t) for n, t in zip(plan.shape, tile)]):
        size = tuple(min(t, n - a) for a, t, n in zip(lo, tile, plan.shape))
        src = pc.base + sum(a * x for a, x in zip(lo, pc.strides))
        dst = sum(a * x for a, x in zip(lo, out_st))
        kinds[size, src * e % burst, dst * e % burst] += 1
    return sum(n * (ddr_bytes(size, pc.strides, e, burst, src) + ddr_bytes(size, out_st, e, burst, dst))
               for (size, src, dst), n in kinds.items())


class MoveLowering:
    """A movement op's tiles: each loaded into a VBUF slot, expanded (repeats), stored."""

    def __init__(self, op: Op, ins: list[Buffer], y: Buffer, cfg: Config, name: str, table: np.ndarray | None = None):
        self.op, self.y, self.name = op, y, name
        # a lut after the copy (takes_lut): its table in VBUF, one vu.lut on each tile in its slot
        self.table = lut_table(table, name, name, 0) if table is not None else None
        self.consts = const_buffers(op, name)
        given = iter(ins)
        self.ins = [self.consts[k] if k in self.consts else next(given) for k in range(len(ins) + len(self.consts))]
        self.plan = p = move_plan(op)
        e = p.elem
        self.repeats = any(v == 0 and n > 1 for v, n in zip(p.pieces[0].strides, p.shape))
        self.burst, self.cap = cfg.ddr_burst_bytes, min(2 * SLOT_BYTES, cfg.vbuf_bytes // 4)
        self.tile = self._tile_for(cfg, MIN_TILES)
        # a one-piece plan whose DDR runs are short (a stepped or backward innermost dim, a crop of
        # short rows) reads a dense range of the input into a staging slot instead, when that
        # touches fewer bursts; the gather then picks the elements on chip
        self.staging = self._staged(self.tile)
        # staged ranges land in DM when it has room: the gathers (DM -> VBUF) then share no port
        # with the loads, and run on the stores' channels so that the loads stream back to back
        self.in_dm = self.staging and STAGING_DEPTH * self.cap <= cfg.dm_bytes // 2
        if self.in_dm and self._staged(tile := self._tile_for(cfg, STAGED_TILES)):
            self.tile = tile
        self.slots = Slots()
        self.role = f"{name}_t"
        # two slots only when every tile writes its slot in the compute stage (a gather from DM on the
        # store's channel: the slot's next gather queues behind its store there); a tile that loads into
        # its slot (one whose range would not pay: often an edge tile) writes it in the loads stage,
        # issued before the store of the tile two before, so it needs three (double_buffer.pipeline)
        two = self.in_dm and all(self._staged(t) for t in self._tile_sizes())
        self.slots.declare(self.role, "vbuf", math.prod(self.tile) * e, depth=2 if two else 3)
        if self.staging:
            self.slots.declare(self.role + "in", "dm" if self.in_dm else "vbuf", self.cap,
                               depth=STAGING_DEPTH if self.in_dm else 2)
        self._range: tuple = ()

    def _tile_for(self, cfg: Config, least: int) -> tuple[int, ...]:
        """The tile shape when the output is cut into `least` tiles at least."""
        e = self.plan.elem
        total = math.prod(self.plan.shape) * e
        slot = min(SLOT_BYTES, cfg.vbuf_bytes // 4, max(MIN_TILE_BYTES, -(-total // least)))
        return burst_tile(self.plan, max(1, slot // e), cfg.ddr_burst_bytes)

    def _staged(self, tile: tuple[int, ...]) -> bool:
        """Does a tile of this shape load a dense range (dense_range) rather than its elements?"""
        p = self.plan
        if len(p.pieces) != 1 or p.fill is not None:
            return False
        box = tuple(1 if st == 0 else t for st, t in zip(p.pieces[0].strides, tile))
        return dense_range(p.pieces[0].strides, box, p.elem, self.burst, self.cap) is not None

    def _tile_sizes(self) -> list[tuple[int, ...]]:
        """The distinct sizes of the tiles (whole, and cut by the output's edge along each dim)."""
        per_dim = [sorted({min(t, s), s % t or t}) for s, t in zip(self.plan.shape, self.tile)]
        return list(itertools.product(*per_dim))

    def tiles(self) -> list[tuple[int, ...]]:
        """Each tile's first output index (per plan dim), row-major over the tile grid."""
        ranges = [range(0, s, t) for s, t in zip(self.plan.shape, self.tile)]
        return [tuple(lo) for lo in itertools.product(*ranges)]

    def n_tiles(self) -> int:
        """How many tiles the lowering has."""
        return math.prod(-(-s // t) for s, t in zip(self.plan.shape, self.tile))

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses (a concat's constant pieces, a lut's table, the slots)."""
        return list(self.consts.values()) + list(self.table or ()) + self.slots.all()

    def note(self) -> str:
        """The kernel header's line about the tiling."""
        return (f"{self.name} {self.op.kind}: output as {list(self.plan.shape)}, tiles of {list(self.tile)} "
                f"through VBUF ({len(self.plan.pieces)} piece(s){', padded' if self.plan.fill is not None else ''}"
                f"{', then a vu.lut in place' if self.table else ''})")

    def steps(self, limit: int | None = None) -> list[Step]:
        """One Step per tile (the first `limit`)."""
        out = []
        for k, lo in enumerate(self.tiles()[:limit]):
            out.append(self._tile(k, lo))
        if self.table and out:
            out[0].loads.insert(0, lut_load(CH_LOAD[0], self.table[1], self.table[0], self.name))
        return out

    def _tile(self, k: int, lo: tuple[int, ...]) -> Step:
        p, e = self.plan, self.plan.elem
        hi = tuple(min(a + t, s) for a, t, s in zip(lo, self.tile, p.shape))
        size = tuple(b - a for a, b in zip(lo, hi))
        dense = _strides(size)
        slot = self.slots.next(self.role)
        s = Step()
        where = f"{self.name}: tile {list(lo)}"
        s.loads.append(Note(where + ": load"))
        ch = CH_LOAD[k % 2]
        self._range = ()
        for pc in p.pieces:
            a = tuple(max(x, y) for x, y in zip(lo, pc.lo))
            b = tuple(min(x, y) for x, y in zip(hi, pc.hi))
            if any(x >= y for x, y in zip(a, b)):
                continue
            src_off = pc.base + sum((x - y) * st for x, y, st in zip(a, pc.lo, pc.strides))
            box = tuple(1 if st == 0 else y - x for x, y, st in zip(a, b, pc.strides))
            dst_off = sum((x - y) * d for x, y, d in zip(a, lo, dense))
            pad = None
            if p.fill is not None:       # the DMA reads from the first element inside the padding
                pad = (tuple(x - y for x, y in zip(a, lo)), tuple(y - x for x, y in zip(b, hi)))
                box, dst_off = size, 0
            s.loads += self._load(ch, slot, dst_off, dense, pc, src_off, box, pad, where)
        if p.fill is not None and not any(self._meets(pc, lo, hi) for pc in p.pieces):
            s.loads += dma_boxes(ch, Ref(slot), 0, dense, Ref(self.ins[0]), 0, (0,) * len(size), size, e,
                                 ((0,) * len(size), size), p.fill, where + ": padding alone")
        if self._range or self.repeats:
            s.compute.append(Note(where + ": gather on chip"))
            s.compute += self._gather(CH_STORE[k % 2] if self.in_dm else ch, slot, size, dense, where)
        if self.table:
            s.compute.append(lut_vu(Ref(slot), Ref(self.table[1]), math.prod(size), 0, where + ": lut in place"))
        out_st = _strides(p.shape)
        y_off = sum(x * st for x, st in zip(lo, out_st))
        s.epilogue += dma_boxes(CH_STORE[k % 2], Ref(self.y), y_off, out_st, Ref(slot), 0, dense, size, e, None,
                                None, where + f": {slot.name} -> {self.y.name}")
        return s

    @staticmethod
    def _meets(pc: Piece, lo, hi) -> bool:
        return all(max(x, y) < min(u, v) for x, y, u, v in zip(lo, pc.lo, hi, pc.hi))

    def _load(self, ch: int, slot: Buffer, dst_off: int, dense, pc: Piece, src_off: int, box, pad,
              where: str) -> list[Dma]:
        """A piece's part of the tile from DDR: into the slot, or (staging) a dense range of the input
        spanning the dims dense_range picks into the staging slot, which the gather then picks from."""
        e, src = self.plan.elem, self.ins[pc.src]
        dims = dense_range(pc.strides, box, e, self.burst, self.cap) if self.staging else None
        if dims is None:
            return dma_boxes(ch, Ref(slot), dst_off, dense, Ref(src), src_off, pc.strides, box, e, pad,
                             self.plan.fill, where + f": {src.name} -> {slot.name}")
        low = src_off + sum(min(0, (box[d] - 1) * pc.strides[d]) for d in dims)
        length = sum((box[d] - 1) * abs(pc.strides[d]) for d in dims) + 1
        outer = [d for d in range(len(box)) if d not in dims and box[d] > 1]
        size = tuple(box[d] for d in outer) + (length,)
        inner = _strides(size)
        self._range = (dims, outer, src_off - low, inner)
        return dma_boxes(ch, Ref(self.slots.next(self.role + "in")), 0, inner, Ref(src), low,
                         tuple(pc.strides[d] for d in outer) + (1,), size, e, None, None,
                         where + f": {src.name} range -> staging")

    def _gather(self, ch: int, slot: Buffer, size, dense, where: str) -> list[Dma]:
        """The on-chip DMA that repeats (stride 0 along the repeated dims) and picks a staged range's
        elements (the input's strides inside the range)."""
        e, st = self.plan.elem, self.plan.pieces[0].strides
        if not self._range:                            # repeats in place: index 0 of each repeated dim
            src_st, src, first = tuple(0 if v == 0 else x for v, x in zip(st, dense)), slot, 0
        else:
            dims, outer, first, inner = self._range
            src = self.slots.current(self.role + "in")
            src_st = [0] * len(size)
            for d in dims:
                src_st[d] = st[d]
            for d, v in zip(outer, inner):
                src_st[d] = v
            src_st = tuple(0 if v == 0 else x for v, x in zip(st, src_st))
        return dma_boxes(ch, Ref(slot), 0, dense, Ref(src), first, src_st, size, e, None, None,
                         where + f": {src.name} -> {slot.name} on chip")


def ddr_bytes(size, strides, elem: int, burst: int, start: int = 0) -> int:
    """Bytes of the DDR bursts a box of `size` read with element `strides` touches, from byte `start` of an
    aligned buffer (nnpsim.timing.burst_bytes, the simulator's count, over its four innermost DDR dims)."""
    dims = sorted(_merge(size, strides, strides, (0,) * len(size), (0,) * len(size)), key=lambda d: abs(d[1]))
    inner, outer = dims[:4], dims[4:]
    inner += [[1, 0, 0, 0, 0]] * (4 - len(inner))
    n = [d[0] for d in inner]
    st = [d[1] * elem for d in inner]
    return math.prod(d[0] for d in outer) * int(burst_bytes(start % burst, *n, *st, elem, burst))


def dense_range(strides, box, elem: int, burst: int, cap: int) -> tuple[int, ...] | None:
    """The dims (least input stride first) whose whole span a load of `box` should read densely, so that
    it touches fewer DDR bursts than reading its elements (None: read them directly).

    Each index of the other dims then reads one run of the span.  The range must fit `cap` bytes, and
    win by a tenth at least (the gather on chip costs a DMA of its own).
    """
    moving = sorted((d for d in range(len(box)) if box[d] > 1 and strides[d] != 0), key=lambda d: abs(strides[d]))
    if not moving:
        return None
    best, pick = ddr_bytes(box, strides, elem, burst), None
    span = 1
    for k, d in enumerate(moving):
        span += (box[d] - 1) * abs(strides[d])
        rest = [x for x in range(len(box)) if x not in moving[:k + 1]]
        size = tuple(box[x] for x in rest) + (span,)
        if math.prod(size) * elem > cap:
            break
        cost = ddr_bytes(size, tuple(strides[x] for x in rest) + (1,), elem, burst)
        if cost * 10 < best * 9:
            best, pick = cost, tuple(moving[:k + 1])
    return pick


def _merge(size, a_st, b_st, lo, hi) -> list[list[int]]:
    """Dims (outer first) as [size, a stride, b stride, pad lo, pad hi], unpadded size-1 dims dropped and
    unpadded neighbours that continue each other on both sides merged."""
    dims = [[n, x, y, l, h] for n, x, y, l, h in zip(size, a_st, b_st, lo, hi) if n > 1 or l or h]
    out: list[list[int]] = []
    for d in reversed(dims):                # inner first
        if out and not (d[3] or d[4] or out[-1][3] or out[-1][4]) and \
                d[1] == out[-1][1] * out[-1][0] and d[2] == out[-1][2] * out[-1][0]:
            out[-1][0] *= d[0]
        else:
            out.append(list(d))
    return out[::-1] or [[1, 0, 0, 0, 0]]


def dma_boxes(ch: int, dst: Ref, dst_off: int, dst_st, src: Ref, src_off: int, src_st, size, elem: int,
              pad, fill, comment: str) -> list[Dma]:
    """The DMAs copying a box of `size` (outer first, element strides and offsets on both sides, pad:
    (lo, hi) per dim or None) as 4-D boxes: dims merged, the DDR side's order innermost, dims past four
    one DMA per index (an index in the padding: a DMA of padding alone)."""
    lo, hi = pad if pad is not None else ((0,) * len(size), (0,) * len(size))
    dims = _merge(size, dst_st, src_st, lo, hi)
    inner, outer = dims[-4:], dims[:-4]
    out = []
    for idx in itertools.product(*[range(d[0]) for d in outer]):
        doff = dst_off + sum(i * d[1] for i, d in zip(idx, outer))
        in_pad = any(i < d[3] or i >= d[0] - d[4] for i, d in zip(idx, outer))
        soff = src_off + sum((i - d[3]) * d[2] for i, d in zip(idx, outer))
        rev = inner[::-1]                                    # innermost first, as the DMA numbers dims
        plo = tuple(d[0] if in_pad and k == 0 else d[3] for k, d in enumerate(rev))
        phi = tuple(0 if in_pad else d[4] for d in rev)
        cmd = Dma(ch, dst + doff * elem, src + (0 if in_pad else soff) * elem, tuple(d[0] for d in rev),
                  tuple(d[2] * elem for d in rev), tuple(d[1] * elem for d in rev), plo, phi,
                  fill or 0, elem, comment=comment)
        out.append(ddr_order(cmd))
    return out
