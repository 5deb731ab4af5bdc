"""Lowering of softmax (ops.softmax) onto vu.softmax: tiles of whole rows through VBUF.

The tensor is seen as (outer, row, inner): the softmax axis, the dims after it (inner = 1 for the last
axis) and those before it.  A tile is (o, row, i) of that view, o outer and i inner indices, loaded by
one DMA into a VBUF slot as [o][row][i]: the tile's o * i rows interleave (a row's elements i apart,
neighbouring rows one apart), as the VU's float32 lanes take them.  One vu.softmax computes the tile in
place (n0 = row at stride i, n1 = i at stride 1, n2 = o at stride row * i), one DMA stores it.  The
exponential table (ops.softmax.exp_table, float32[256]) is a DDR constant loaded into VBUF once, before
the tiles.  A tile takes the inner dims whole when a row of them fits its slot (the tile is then one
dense DDR range), else whole bursts of them; three slots rotate (loaded, computed in place, stored).
Tiles of the inner dims whole ramp: the first and the last are small (edge_tile), the VU starting on the
first while the next loads and the last store short.
"""
from __future__ import annotations

import math

from nnpsim import timing
from nnpsim.config import Config
from nnpsim.timing import SOFTMAX_TABLE_BYTES

from ..errors import CompileError
from ..ir import Buffer, Dma, Note, Ref, Vu
from ..ops import Softmax
from ..ops.softmax import out_multiplier
from ..quant import f32_bits, f32_table
from .double_buffer import Slots, Step
from .movement import dma_boxes

MIN_TILE_BYTES = 2048       # below this a tile's DMA latency outweighs the overlap
INNER_STEP = 64             # inner indices a split tile takes in multiples of: whole 64-byte DDR bursts
CH_TABLE, CH_LOAD, CH_STORE = 0, (0, 1), (2, 3)


def tile_count(total: int, row: int, cfg: Config, ramped: bool) -> int:
    """How many tiles to cut `total` elements in rows of `row` into: each tile's command pays two stages of
    `row` cycles that overlap nothing (timing.vu_softmax_cycles), the first load and the last store
    overlap nothing either: n tiles cost about 2 * row * n + 2 * total / (n * ddr bytes a cycle) more than
    the bound, least at sqrt(total / (row * ddr bytes a cycle)).  Half that is taken (the first tiles' DMAs
    hide part of the stages: on the DFL's shapes half ran fastest), and 1/sqrt(2) of it where the tiles
    ramp (ramp: their edge tiles shorten that first load and last store; fastest on ViT's and the
    attention-like shapes of benchmarks/softmax.py)."""
    return max(1, math.isqrt(total // max(1, (2 if ramped else 4) * row * cfg.ddr_bytes_per_cycle)))


def edge_tile(tile: int, group: int, row: int, inner: int, cfg: Config) -> int:
    """The first and last tiles' outer indices: the most whole lane groups (one at least) whose command is
    no longer than a middle tile's load at DDR's pace, so that the VU starts on a small tile while the next
    loads (and the last store, behind the last command, is short)."""
    load = -(-tile * row * inner // cfg.ddr_bytes_per_cycle)
    edge = group
    while edge + group < tile and timing.vu_softmax_cycles((edge + group) * inner, row, cfg.vu_bytes_per_cycle,
                                                           cfg.vu_latency) <= load:
        edge += group
    return edge


def ramp(outer: int, tile: int, edge: int, group: int) -> list[tuple[int, int]]:
    """(first outer index, count) of each tile: tiles of at most `tile` between two edge tiles of `edge`,
    when there is a middle (the middle ones in whole lane groups of `group` outer indices)."""
    middle = outer - 2 * edge
    if outer <= tile or edge >= tile or middle <= 0:
        return [(o, min(tile, outer - o)) for o in range(0, outer, tile)]
    m = -(-middle // tile)
    even = min(tile, -(-middle // (m * group)) * group)
    sizes = [edge] + [even] * (m - 1) + [middle - even * (m - 1), edge]
    starts = [sum(sizes[:k]) for k in range(len(sizes))]
    return [(o, n) for o, n in zip(starts, sizes) if n > 0]


def tile_shape(op: Softmax, slot: int) -> tuple[int, int]:
    """(o, i): outer and inner indices of a tile of at most `slot` bytes (a whole row at least)."""
    outer, row, inner = op.view
    if row * inner <= slot:
        return min(outer, slot // (row * inner)), inner
    i = slot // row
    return 1, (i // INNER_STEP * INNER_STEP if i >= INNER_STEP else i)


class SoftmaxLowering:
    """A softmax's tiles: each a block of whole rows loaded into a VBUF slot, vu.softmax in place, stored."""

    def __init__(self, op: Softmax, ins: list[Buffer], y: Buffer, cfg: Config, name: str):
        self.op, self.x, self.y, self.name, self.cfg = op, ins[0], y, name, cfg
        outer, row, inner = op.view
        total = outer * row * inner
        room = (cfg.vbuf_bytes - SOFTMAX_TABLE_BYTES) // 3 // 64 * 64
        slot = max(row, min(room, max(MIN_TILE_BYTES, -(-total // tile_count(total, row, cfg, True)))))
        if row * inner > slot:          # tiles split the inner dims: they do not ramp
            slot = max(row, min(room, max(MIN_TILE_BYTES, -(-total // tile_count(total, row, cfg, False)))))
        if 3 * slot + SOFTMAX_TABLE_BYTES > cfg.vbuf_bytes:
            raise CompileError(f"softmax: a row of {row} elements needs three VBUF slots of {slot} bytes and the "
                               f"{SOFTMAX_TABLE_BYTES}-byte table, more than VBUF's {cfg.vbuf_bytes} bytes")
        self.tile = tile_shape(op, slot)
        lanes = max(1, cfg.vu_bytes_per_cycle // 4)
        self.group = lanes // math.gcd(lanes, inner)
        self.slots = Slots()
        self.role = f"{name}_t"
        self.slots.declare(self.role, "vbuf", self.tile[0] * row * self.tile[1], depth=3)
        table = f32_table(op.table())
        self.table_ddr = Buffer(f"{name}_exp", "ddr", SOFTMAX_TABLE_BYTES, dtype="int32", shape=table.shape,
                                data=table)
        self.table_vbuf = Buffer(f"{name}_exp_vbuf", "vbuf", SOFTMAX_TABLE_BYTES, align=64)

    def tiles(self) -> list[tuple[int, int, int, int]]:
        """Each tile's (first outer index, outer count, first inner index, inner count)."""
        outer, row, inner = self.op.view
        if self.tile[1] == inner:
            edge = edge_tile(self.tile[0], self.group, row, inner, self.cfg)
            return [(o, n, 0, inner) for o, n in ramp(outer, self.tile[0], edge, self.group)]
        return [(o, min(self.tile[0], outer - o), i, min(self.tile[1], inner - i))
                for o in range(0, outer, self.tile[0]) for i in range(0, inner, self.tile[1])]

    def n_tiles(self) -> int:
        """How many tiles the lowering has."""
        return len(self.tiles())

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses: the table in DDR and VBUF, the slots."""
        return [self.table_ddr, self.table_vbuf] + self.slots.all()

    def note(self) -> str:
        """The kernel header's line about the tiling."""
        outer, row, inner = self.op.view
        return (f"{self.name} softmax: rows of {row} over (outer {outer}, inner {inner}), tiles of "
                f"{self.tile[0]} x {row} x {self.tile[1]} through VBUF, one vu.softmax each")

    def steps(self, limit: int | None = None) -> list[Step]:
        """The table's load, then one Step per tile (the first `limit`)."""
        first = Step(loads=[Dma(CH_TABLE, Ref(self.table_vbuf), Ref(self.table_ddr), (SOFTMAX_TABLE_BYTES // 4,),
                                (4,), (4,), elem=4, comment=f"{self.name}: exponential table -> vbuf")])
        return [first] + [self._tile(k, *t) for k, t in enumerate(self.tiles()[:limit])]

    def _tile(self, k: int, o0: int, o: int, i0: int, i: int) -> Step:
        outer, row, inner = self.op.view
        slot = self.slots.next(self.role)
        where = f"{self.name}: tile outer {o0}..{o0 + o - 1} inner {i0}..{i0 + i - 1}"
        size, ddr_st, vbuf_st = (o, row, i), (row * inner, inner, 1), (row * i, i, 1)
        at = o0 * row * inner + i0
        s = Step()
        s.loads.append(Note(where + ": load"))
        s.loads += dma_boxes(CH_LOAD[k % 2], Ref(slot), 0, vbuf_st, Ref(self.x), at, ddr_st, size, 1, None, None,
                             where + f": {self.x.name} -> {slot.name}")
        s.compute.append(softmax_vu(self.op, Ref(slot), Ref(self.table_vbuf), size, f"{where}: softmax in place"))
        s.epilogue += dma_boxes(CH_STORE[k % 2], Ref(self.y), at, ddr_st, Ref(slot), 0, vbuf_st, size, 1, None,
                                None, where + f": {slot.name} -> {self.y.name}")
        return s


def softmax_vu(op: Softmax, a: Ref, table: Ref, size: tuple[int, int, int], comment: str) -> Vu:
    """vu.softmax in place over a dense [o][row][i] block at a: each of its o * i rows n0 = row long."""
    o, row, i = size
    sc = {"fscale": f32_bits(out_multiplier(op.y_scale)), "zp_out": op.zp_out, "lo": -128, "hi": 127}
    return Vu("vu.softmax", a, a, table, "i8", "i8", SOFTMAX_TABLE_BYTES, (row, i, o), (i, 1, row * i),
              (i, 1, row * i), (0,), scalars=sc, comment=comment)

