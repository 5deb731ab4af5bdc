"""Spreading one op over several NUs or VUs: each unit lowers a Part of its tiles.

A Part is an ordinary lowering restricted to every `count`-th tile (or tile
group), with its own buffers in its unit's local memories and its own logical
DMA channels; the parts of one op share its DDR constants.  SplitLowering
runs the parts side by side: its Step k merges step k of every part, so the
double-buffering pipeline and the cost model see one tile per unit at a time
(different units' resources are different resources to the cost model, the
DDR port is one), and the sync pass orders whatever they share.

Parts share their loads: when two parts load the same DDR box into the same
layout (the weights of a spatial split, the input tiles of a channel split,
the constants of any), the steps are aligned so that both loads fall in one
merged Step, and only the first part reads DDR; the others copy the first
part's freshly loaded buffer on chip (local port to local port, 64 bytes a
cycle against DDR's 32 shared by every transfer), so the data crosses DDR
once for all units.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace

from nnpsim.config import Config

from ..ir import Buffer, Dma
from .double_buffer import Step


ROLE_CHANNELS = (0, 1, 2, 3)
"""A lowering's DMA channel per role: input loads, weight (or second operand) loads, the ABUF -> VBUF
drain, stores (nu.CH_IN .. CH_OUT, vu.CH_A, CH_B, CH_OUT)."""


@dataclass(frozen=True)
class Part:
    """Share `index` of `count` of an op's tiles, on NU `nu` and VU `vu`.

    by "spatial": every `count`-th spatial tile; by "channel": every `count`-th
    group of output blocks (NU ops); VU ops split their tiles by "tile".
    """

    by: str
    index: int
    count: int
    nu: int = 0
    vu: int = 0
    ch: int = 0         # added to the lowering's DMA channel of each role (0-3): 0, SplitLowering maps them
    channels: tuple[int, ...] = ROLE_CHANNELS   # the DMA channel of each role

    @property
    def suffix(self) -> str:
        """What the part adds to its buffers' names."""
        return f"u{self.index}"


def parts(by: str, count: int, cfg: Config) -> list[Part]:
    """`count` parts, part k on NU k and VU k modulo the units the configuration has, with the DMA
    channel of each role (role_channels)."""
    return [Part(by, k, count, k % cfg.nu_count, k % cfg.vu_count, 0, role_channels(k, count, by, cfg))
            for k in range(count)]


def role_channels(k: int, count: int, by: str, cfg: Config) -> tuple[int, ...]:
    """The DMA channel of each role (ROLE_CHANNELS) for part k of `count`.

    Four channels per part when there are enough.  Else, with at least four, the NU parts keep a
    drain queue each (ABUF -> VBUF moves four bytes an output, the most on-chip traffic of a
    1x1 conv, and a drain waits for its NU: behind another part's drain it holds that part up too)
    and share the rest, stores with the weights: on ResNet-50's 1x1 layers at 28x28 on two NUs
    1.93 -> 1.32 of the bound, against each part's roles on the same four queues; other maps
    (part k staggered by one to three channels, drains beside stores) lost up to 2.3x on some
    layers.  VU parts (no drain), and fewer than four channels: part k's roles from channel 4k,
    modulo the channels.
    """
    n = cfg.dma_channels
    if n >= 4 * count:
        return tuple(4 * k + r for r in range(4))
    if by != "tile" and n >= 4:
        return (0, 1, 2 + k % (n - 2), 1)
    return tuple((4 * k + r) % n for r in range(4))


def shared_capacity(cfg: Config, count: int, spread: str) -> Config:
    """The configuration one of `count` parts may plan with: memories it shares are divided.

    spread "nu": parts are on different NUs and share DM, and VBUFs when there
    are fewer VUs than parts; spread "vu": parts are on different VUs and share DM.
    """
    on_vu = -(-count // cfg.vu_count) if spread == "nu" else 1
    return replace(cfg, dm_bytes=cfg.dm_bytes // count, vbuf_bytes=cfg.vbuf_bytes // on_vu)


class SplitLowering:
    """Several Parts of one op run side by side (the lowering interface: steps, n_tiles, buffers)."""

    def __init__(self, lowerings: list):
        self.parts = [low for low in lowerings if low.n_tiles() > 0] or lowerings[:1]

    def n_tiles(self) -> int:
        """Tiles of the busiest part (each merged Step holds one tile per part)."""
        return max(low.n_tiles() for low in self.parts)

    def steps(self, limit: int | None = None) -> list[Step]:
        """The parts' steps side by side, aligned on their shared loads (the constants of every part
        first); a load another part makes in the same Step becomes a copy of that part's buffer."""
        lists = [low.steps(limit) if limit is not None else low.steps() for low in self.parts]
        for low, steps in zip(self.parts, lists):
            _map_channels(steps, getattr(low, "part", None))
        out = []
        for row in aligned(lists):
            merged = Step()
            for step in row:
                if step is not None:
                    merged.loads += step.loads
                    merged.early += step.early
                    merged.compute += step.compute
                    merged.epilogue += step.epilogue
                    merged.late += step.late
            merged.loads = share_loads(merged.loads)
            out.append(merged)
        return out

    def buffers(self) -> list[Buffer]:
        """Every buffer of every part, the shared DDR constants once."""
        seen: dict[int, Buffer] = {}
        for low in self.parts:
            for b in low.buffers():
                seen.setdefault(id(b), b)
        return list(seen.values())


def _map_channels(steps: list[Step], part: Part | None) -> None:
    """Put a part's DMAs, on their role's channel as the lowering numbers them, onto the part's."""
    if part is None:
        return
    for step in steps:
        for stmt in step.statements():
            if isinstance(stmt, Dma):
                stmt.chan = part.channels[stmt.chan - part.ch]


def load_key(stmt) -> tuple | None:
    """What a DDR -> on-chip DMA writes, as a key equal for two loads that write the same bytes in the
    same layout (None for any other statement)."""
    if not isinstance(stmt, Dma) or stmt.src.buf.space != "ddr" or stmt.dst.buf.space == "ddr":
        return None
    return (id(stmt.src.buf), stmt.src.offset, stmt.size, stmt.src_stride, stmt.dst_stride, stmt.pad_lo,
            stmt.pad_hi, stmt.pad_value, stmt.elem)


def aligned(lists: list[list[Step]]) -> list[list[Step | None]]:
    """Rows of one step per part (None: the part waits), so that the parts' loads of the same data fall
    in one row.

    A part whose next step loads data that another part loads too, later, waits for it; one that
    loads nothing shared goes on.  The shared loads come in the same order in every part (the
    same loop nest over a different share of the tiles), so the parts meet; should they not, a
    row in which every part would wait lets them all go (they then load separately).
    """
    keys = [[frozenset(k for s in step.loads if (k := load_key(s)) is not None) for step in steps]
            for steps in lists]
    holders = Counter(k for part in keys for k in set().union(*part))
    shared = {k for k, n in holders.items() if n > 1}
    sig = [[ks & shared for ks in part] for part in keys]
    ahead = [Counter(k for ks in part for k in ks) for part in sig]
    pos = [0] * len(lists)
    rows = []
    while any(p < len(steps) for p, steps in zip(pos, lists)):
        now = [sig[i][p] if p < len(lists[i]) else None for i, p in enumerate(pos)]
        go = [now[i] is not None and all(j == i or (now[i] & ahead[j].keys()) <= (now[j] or frozenset())
                                         for j in range(len(lists)))
              for i in range(len(lists))]
        if not any(go):
            go = [s is not None for s in now]
        rows.append([lists[i][pos[i]] if go[i] else None for i in range(len(lists))])
        for i in range(len(lists)):
            if go[i]:
                ahead[i].subtract(now[i])
                pos[i] += 1
    return rows


def share_loads(loads: list) -> list:
    """loads with each repeated DDR load (load_key) replaced by an on-chip copy of the first one's
    destination, on the repeating part's own channel."""
    first: dict[tuple, Dma] = {}
    out = []
    for s in loads:
        k = load_key(s)
        if k is None or k not in first:
            if k is not None:
                first[k] = s
            out.append(s)
            continue
        src = first[k]
        out.append(Dma(s.chan, s.dst, src.dst, src.size, src.dst_stride, s.dst_stride, elem=src.elem,
                       comment=f"{s.comment} (a copy of {src.dst.buf.name}: one DDR read for both)"))
    return out
