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

from ..errors import CompileError
from ..ir import ON_CHIP, Buffer, Command, Stmt


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
    order = [(0, steps[0].loads)]            # (tile, statements) in issue order
    for k, step in enumerate(steps):
        order.append((k, step.early))
        if k + 1 < len(steps):
            order.append((k + 1, steps[k + 1].loads))
        order.append((k, step.compute))
        if k > 0:
            order.append((k - 1, steps[k - 1].epilogue))
        if k > 1:
            order.append((k - 2, steps[k - 2].late))
    if len(steps) > 1:
        order.append((len(steps) - 2, steps[-2].late))
    order += [(len(steps) - 1, steps[-1].epilogue), (len(steps) - 1, steps[-1].late)]
    check_tile_order(order)
    return [stmt for _, stmts in order for stmt in stmts]


LEAD = 3
"""Tiles a statement may be issued ahead of one of an earlier tile (loads(k+1) come before late(k-2))."""


def check_tile_order(order: list[tuple[int, list[Stmt]]]) -> None:
    """CompileError unless every two accesses of different tiles to overlapping on-chip bytes, one a
    write, are issued in tile order (order: (tile, statements) in issue order)."""
    seen: dict[int, list[tuple[int, int, int, bool]]] = {}      # buffer id -> (tile, lo, hi, write)
    newest = 0
    for k, stmts in order:
        newest = max(newest, k)
        for stmt in stmts:
            if not isinstance(stmt, Command):
                continue
            for a in stmt.accesses():
                if a.buf.space not in ON_CHIP or a.hi <= a.lo:
                    continue
                log = seen.setdefault(id(a.buf), [])
                for j, lo, hi, w in log:
                    if j > k and (w or a.write) and lo < a.hi and a.lo < hi:
                        raise CompileError(f"internal: tile {j} {'writes' if w else 'reads'} {a.buf.name} before "
                                           f"tile {k} {'writes' if a.write else 'reads'} it, in issue order "
                                           f"({stmt.comment})")
                if log and log[0][0] < newest - LEAD:      # no later statement is that many tiles behind
                    log[:] = [e for e in log if e[0] >= newest - LEAD]
                log.append((k, a.lo, a.hi, a.write))
