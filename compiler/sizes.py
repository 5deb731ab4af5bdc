"""Sizes of the on-chip memories, which both the lowering (what fits) and the passes (allocation) need."""
from __future__ import annotations

from nnpsim.config import Config


def capacities(config: Config) -> dict[str, int]:
    """Bytes of each on-chip memory (every unit's local buffers have the same size)."""
    return {"dm": config.dm_bytes, "ibuf": config.ibuf_bytes, "wbuf": config.wbuf_bytes,
            "abuf": config.abuf_bytes, "vbuf": config.vbuf_bytes}
