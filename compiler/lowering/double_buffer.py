"""Double buffering: alternate buffer slots per tile and issue tile k+1's loads before tile k's compute.

A lowering describes each tile as a Step of three statement lists: loads (DMA
into on-chip buffers), compute, and epilogue (drain, requantise, store).  The
pipeline issues loads(0), then for every k: loads(k+1), compute(k),
epilogue(k-1), so the DMA for the next tile runs while the units work on this
one, and the CU never blocks on a result before the next compute is queued.  Slots gives each role (input tile, weights, accumulators ...) two
buffers and hands them out alternately; the sync pass then orders each reuse.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir import Buffer, Stmt


@dataclass
class Step:
    """One tile's statements, by pipeline stage."""

    loads: list[Stmt] = field(default_factory=list)
    compute: list[Stmt] = field(default_factory=list)
    epilogue: list[Stmt] = field(default_factory=list)
    early: list[Stmt] = field(default_factory=list)    # compute issued before the next tile's loads
    late: list[Stmt] = field(default_factory=list)     # epilogue work issued one tile after the epilogue

    def statements(self) -> list[Stmt]:
        """Every statement of the tile, stage by stage."""
        return self.loads + self.early + self.compute + self.epilogue + self.late


class Slots:
    """`depth` buffers per role, handed out round robin."""

    def __init__(self, depth: int = 2):
        self.depth = depth
        self.buffers: dict[str, list[Buffer]] = {}
        self.count: dict[str, int] = {}

    def declare(self, role: str, space: str, nbytes: int, align: int = 32, depth: int | None = None,
                unit: int = 0) -> None:
        """Create the slots of a role (`depth` of them, the default depth unless given) on unit `unit`."""
        n = depth or self.depth
        self.buffers[role] = [Buffer(f"{role}{k}", space, nbytes, align, unit=unit) for k in range(n)]
        self.count[role] = 0

    def next(self, role: str) -> Buffer:
        """The next slot of a role."""
        k = self.count[role]
        self.count[role] = k + 1
        return self.buffers[role][k % len(self.buffers[role])]

    def current(self, role: str) -> Buffer:
        """The slot most recently handed out for a role."""
        return self.buffers[role][(self.count[role] - 1) % len(self.buffers[role])]

    def all(self) -> list[Buffer]:
        """Every slot of every role."""
        return [b for bufs in self.buffers.values() for b in bufs]


def pipeline(steps: list[Step]) -> list[Stmt]:
    """Issue order early(k), loads(k+1), compute(k), epilogue(k-1): next loads lead, epilogues lag.

    early(k) is compute that may start before the next tile's loads are issued (the bias fill of
    the accumulators: the CU often waits before those loads, for the unit that frees their slot).

    Loads lead so the DMA runs ahead of compute; epilogues lag so that when the
    CU has to wait for a result (a producer two queues need is waited on by
    the CU), the compute of the next tile is already queued behind it.  Issue
    order is program order for the sync pass, so a buffer that loads(k) write
    and epilogue(k) read needs three slots (loads(k+1) come before
    epilogue(k-1)); with two slots, write it in the compute stage.
    """
    if not steps:
        return []
    out = list(steps[0].loads)
    for k, step in enumerate(steps):
        out += step.early
        if k + 1 < len(steps):
            out += steps[k + 1].loads
        out += step.compute
        if k > 0:
            out += steps[k - 1].epilogue
        if k > 1:
            out += steps[k - 2].late
    if len(steps) > 1:
        out += steps[-2].late
    return out + steps[-1].epilogue + steps[-1].late
