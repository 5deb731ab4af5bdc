"""Spreading one op over several NUs or VUs: each unit lowers a Part of its tiles.

A Part is an ordinary lowering restricted to every `count`-th tile (or tile
group), with its own buffers in its unit's local memories and its own logical
DMA channels; the parts of one op share its DDR constants.  SplitLowering
runs the parts side by side: its Step k merges step k of every part, so the
double-buffering pipeline and the cost model see one tile per unit at a time
(different units' resources are different resources to the cost model, the
DDR port is one), and the sync pass orders whatever they share.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from nnpsim.config import Config

from ..ir import Buffer
from .double_buffer import Step


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
    ch: int = 0         # added to the lowering's logical DMA channels (0-3)

    @property
    def suffix(self) -> str:
        """What the part adds to its buffers' names."""
        return f"u{self.index}"


def parts(by: str, count: int, cfg: Config) -> list[Part]:
    """`count` parts, part k on NU k and VU k modulo the units the configuration has.

    Each part gets its own four DMA channels when there are enough, else the parts' channels
    are staggered so that the same role (say, every part's drain) is not all on one queue.
    """
    step = 4
    return [Part(by, k, count, k % cfg.nu_count, k % cfg.vu_count, step * k) for k in range(count)]


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
        """Step k holds step k of every part (the constants of every part first)."""
        lists = [low.steps(limit) if limit is not None else low.steps() for low in self.parts]
        out = []
        for k in range(max(len(steps) for steps in lists)):
            merged = Step()
            for steps in lists:
                if k < len(steps):
                    merged.loads += steps[k].loads
                    merged.early += steps[k].early
                    merged.compute += steps[k].compute
                    merged.epilogue += steps[k].epilogue
            out.append(merged)
        return out

    def buffers(self) -> list[Buffer]:
        """Every buffer of every part, the shared DDR constants once."""
        seen: dict[int, Buffer] = {}
        for low in self.parts:
            for b in low.buffers():
                seen.setdefault(id(b), b)
        return list(seen.values())
