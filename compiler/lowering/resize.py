"""Lowering of a linear Resize (ops.ResizeLinear) onto vu.lerp, tile by tile through VBUF.

The output is cut into bands of rows along the outer interpolated axis (ay) and chunks of the two axes
kept; the inner interpolated axis (ax) stays whole.  A tile's input is the band's input rows (the first
row of its first output to the second of its last: the indices only grow) over the chunk.  Each tile:

  load     the input box, DDR -> a VBUF slot (lowering.movement.dma_boxes), and the band's table
           (its ax column entries, then its rows' entries with the row indices relative to the band's
           first input row), DDR -> a table slot; the table of every band is one DDR constant
  compute  one vu.lerp: n0 along ax, n1 the band's rows, n2 and n3 the kept axes; a is the slot's plane
           (win_h band rows x win_w columns), the arithmetic onnxruntime's (ResizeLinear.form)
  store    the output box, slot -> DDR
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from nnpsim.config import Config
from nnpsim.timing import LERP_ENTRY
from nnpsim.units.vu import LERP_FIXED, LERP_FLOAT, LERP_QUANT

from ..ir import Buffer, Dma, Note, Ref, Vu
from ..ops import ResizeLinear
from ..ops.movement import ONE_10
from ..quant import f32_bits
from .double_buffer import Slots, Step
from .movement import CH_LOAD, CH_STORE, MIN_TILES, SLOT_BYTES, dma_boxes

FORMS = {"float": LERP_FLOAT, "fixed": LERP_FIXED, "qdq": LERP_QUANT}
"""vu.lerp's vu.ma for each of ResizeLinear's forms."""
SLOT_DEPTH = 3
"""Slots per role: a tile's load, lerp and store each hold one, so all three stages run at once (two
left the load of tile k + 2 waiting for tile k's store: LRASPP's x8 head 56,710 cycles, three 54,613)."""
FIXED_SHIFT = 2 * (ONE_10.bit_length() - 1)
"""The fixed form's sum is in 1/1024 of 1/1024: divided by 2**20."""


def _strides(shape) -> tuple[int, ...]:
    return tuple(int(math.prod(shape[k + 1:])) for k in range(len(shape)))


class LerpLowering:
    """A linear Resize's tiles: input box and band table loaded, one vu.lerp, the output stored."""

    def __init__(self, op: ResizeLinear, ins: list[Buffer], y: Buffer, cfg: Config, name: str):
        self.op, self.x, self.y, self.name = op, ins[0], y, name
        self.ay, self.ax = op.axes
        self.kept = tuple(k for k in range(4) if k not in op.axes)
        self.ty, self.tx = op.tables()
        total = math.prod(op.out_shape)
        self.budget = min(SLOT_BYTES, cfg.vbuf_bytes // 8, max(2048, -(-total // MIN_TILES)))
        self.rows, self.chunk = self._tile()
        self.bands = [(o, min(o + self.rows, op.out_shape[self.ay])) for o in range(0, op.out_shape[self.ay], self.rows)]
        self.table = self._table()
        self.slots = Slots(depth=SLOT_DEPTH)
        in_bytes = max(math.prod(self._in_size(b, self._chunk_box((0, 0)))) for b in self.bands)
        self.slots.declare(f"{name}_x", "vbuf", in_bytes)
        self.slots.declare(f"{name}_y", "vbuf", math.prod(self._out_size(self.bands[0], self._chunk_box((0, 0)))))
        tab_slot = LERP_ENTRY * (op.out_shape[self.ax] + self.rows)
        self.tab_res = (Buffer(f"{name}_tab", "vbuf", self.table.nbytes, 32)
                        if self.table.nbytes <= SLOT_DEPTH * tab_slot else None)
        if self.tab_res is None:
            self.slots.declare(f"{name}_tab", "vbuf", tab_slot, align=32)

    def _in_rows(self, band: tuple[int, int]) -> tuple[int, int]:
        """[first, last] input row of a band of output rows along ay."""
        return int(self.ty.i1[band[0]]), int(self.ty.i2[band[1] - 1])

    def _chunk_box(self, at: tuple[int, int]) -> dict[int, tuple[int, int]]:
        """The kept axes' [lo, hi) of the chunk starting at `at`."""
        return {k: (a, min(a + c, self.op.out_shape[k])) for k, a, c in zip(self.kept, at, self.chunk)}

    def _in_size(self, band, box) -> tuple[int, ...]:
        lo, hi = self._in_rows(band)
        return tuple(hi - lo + 1 if k == self.ay else self.op.in_shape[k] if k == self.ax else box[k][1] - box[k][0]
                     for k in range(4))

    def _out_size(self, band, box) -> tuple[int, ...]:
        return tuple(band[1] - band[0] if k == self.ay else self.op.out_shape[k] if k == self.ax
                     else box[k][1] - box[k][0] for k in range(4))

    def _tile(self) -> tuple[int, tuple[int, int]]:
        """(band rows, chunk of the kept axes): the most output rows whose input and output boxes fit the
        budget, then as much of the kept axes (inner first) as still fits."""
        op, ay, ax = self.op, self.ay, self.ax
        n_out = op.out_shape[ay]
        wi, wo = op.in_shape[ax], op.out_shape[ax]

        def fits(rows: int, planes: int) -> bool:
            worst = max(int(self.ty.i2[min(o + rows, n_out) - 1]) - int(self.ty.i1[o]) + 1
                        for o in range(0, n_out, rows))
            return planes * max(worst * wi, rows * wo) <= self.budget

        rows = n_out
        while rows > 1 and not fits(rows, 1):
            rows = -(-rows // 2)
        chunk = [1, 1]
        for j in (1, 0):                      # the inner kept axis first
            full = op.out_shape[self.kept[j]]
            while chunk[j] < full and fits(rows, math.prod(chunk) // chunk[j] * min(full, chunk[j] * 2)):
                chunk[j] = min(full, chunk[j] * 2)
        return rows, (chunk[0], chunk[1])

    def _table(self) -> Buffer:
        """Every band's table, one after another: its column entries, then its rows' (relative indices)."""
        fixed = self.op.form == "fixed"

        def entries(t, lo: int, hi: int, base: int) -> np.ndarray:
            w1 = t.w1[lo:hi].astype(np.int64) if fixed else np.asarray(t.w1[lo:hi], np.float32).view(np.int32)
            w2 = t.w2[lo:hi].astype(np.int64) if fixed else np.asarray(t.w2[lo:hi], np.float32).view(np.int32)
            return np.stack([t.i1[lo:hi] - base, t.i2[lo:hi] - base, w1, w2], 1).astype(np.int32)

        cols = entries(self.tx, 0, self.op.out_shape[self.ax], 0)
        parts, self.table_at = [], []
        for band in self.bands:
            self.table_at.append(sum(p.size for p in parts) * 4)
            parts += [cols, entries(self.ty, band[0], band[1], self._in_rows(band)[0])]
        data = np.concatenate([p.ravel() for p in parts]).astype("<i4").view(np.int8)
        return Buffer(f"{self.name}_lerp", "ddr", data.size, dtype="int8", shape=(data.size,), data=data)

    def _chunks(self) -> list[tuple[int, int]]:
        return list(itertools.product(*[range(0, self.op.out_shape[k], c) for k, c in zip(self.kept, self.chunk)]))

    def tiles(self) -> list[tuple[tuple[int, int], tuple[int, int]]]:
        """Each tile's (band, chunk start), the band innermost."""
        return [(band, at) for at in self._chunks() for band in self.bands]

    def n_tiles(self) -> int:
        """How many tiles the lowering has."""
        return len(self.bands) * len(self._chunks())

    def buffers(self) -> list[Buffer]:
        """Every buffer the lowering uses (the table constant and the slots)."""
        return [self.table] + ([self.tab_res] if self.tab_res is not None else []) + self.slots.all()

    def note(self) -> str:
        """The kernel header's line about the tiling."""
        op = self.op
        return (f"{self.name} {op.kind} ({op.form}, {op.coordinate_mode}): axes {list(op.axes)}, bands of "
                f"{self.rows} output rows x {list(self.chunk)} of axes {list(self.kept)} through VBUF, vu.lerp")

    def steps(self, limit: int | None = None) -> list[Step]:
        """One Step per tile (the first `limit`)."""
        return [self._step(k, band, at) for k, (band, at) in enumerate(self.tiles()[:limit])]

    def _step(self, k: int, band: tuple[int, int], at: tuple[int, int]) -> Step:
        op, ay, ax = self.op, self.ay, self.ax
        box = self._chunk_box(at)
        first = self._in_rows(band)[0]
        in_size, out_size = self._in_size(band, box), self._out_size(band, box)
        in_lo = tuple(first if d == ay else 0 if d == ax else box[d][0] for d in range(4))
        out_lo = tuple(band[0] if d == ay else 0 if d == ax else box[d][0] for d in range(4))
        xs, ys = self.slots.next(f"{self.name}_x"), self.slots.next(f"{self.name}_y")
        b = self.bands.index(band)
        tab = Ref(self.tab_res) + self.table_at[b] if self.tab_res is not None else Ref(self.slots.next(f"{self.name}_tab"))
        ist, ost = _strides(in_size), _strides(out_size)
        x_st, y_st = _strides(op.in_shape), _strides(op.out_shape)
        where = f"{self.name}: rows {band[0]}..{band[1] - 1}, kept {[box[d] for d in self.kept]}"
        ch, n_tab = CH_LOAD[k % 2], LERP_ENTRY * (op.out_shape[ax] + band[1] - band[0])
        s = Step()
        s.loads.append(Note(where + ": load"))
        s.loads += dma_boxes(ch, Ref(xs), 0, ist, Ref(self.x), sum(a * b for a, b in zip(in_lo, x_st)), x_st,
                             in_size, 1, None, None, where + f": {self.x.name} -> {xs.name}")
        if self.tab_res is None or k < len(self.bands):     # a resident table: each band's part once
            s.loads.append(Dma(ch, tab, Ref(self.table) + self.table_at[b], (n_tab,), (1,), (1,), elem=1,
                               comment=where + ": its table -> " + tab.buf.name))
        n = (out_size[ax], out_size[ay], out_size[self.kept[0]], out_size[self.kept[1]])
        s.compute.append(Vu("vu.lerp", Ref(ys), Ref(xs), tab, "i8", "i8", n_tab, n,
                            (ost[ax], ost[ay], ost[self.kept[0]], ost[self.kept[1]]),
                            (0, 0, ist[self.kept[0]], ist[self.kept[1]]), (0, 0, 0, 0),
                            (in_size[ay], in_size[ax]), (ist[ay], ist[ax]), self._scalars(), comment=where))
        s.epilogue += dma_boxes(CH_STORE[k % 2], Ref(self.y), sum(a * b for a, b in zip(out_lo, y_st)), y_st,
                                Ref(ys), 0, ost, out_size, 1, None, None, where + f": {ys.name} -> {self.y.name}")
        return s

    def _scalars(self) -> dict[str, int]:
        op = self.op
        sc = {"ma": FORMS[op.form], "za": op.za, "zp_out": op.zp_out, "lo": op.lo, "hi": op.hi}
        if op.form == "fixed":
            sc["shift"] = FIXED_SHIFT
        if op.form == "qdq":
            sc.update(fscale=f32_bits(op.scale_in), fscale_b=f32_bits(op.scale_out))
        return sc
