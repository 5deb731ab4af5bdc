"""Insert the semaphores a schedule needs: none missing, none more than needed.

Two commands conflict when their footprints overlap in one memory and one of
them writes.  Commands of one queue are ordered by the queue; commands of
different queues need a happens-before path from the earlier-issued to the
later-issued one.  This pass tracks, at compile time, what each queue and the
CU know has completed (vector clocks over per-queue sequence numbers, the same
happens-before the simulator's race checker uses) and adds an edge only for a
conflict that is not already ordered.

Each command has one `wait` and two signals (`signal`, `signal2`).  An edge
P -> C uses semaphore (P, C): producers in P signal it in P's order, consumers
in C wait on it in C's order, so the k-th wait is released by the k-th signal.
A producer needed by two queues (a tile's NU command is needed by the drain of
its result and by the load that reuses its input buffer; a drain by the
requantisation that reads it and by the NU command that reuses its
accumulators) signals both queues' semaphores.  A producer needed by more than
two, or the extra producers of a consumer needing several, go through the CU:
the CU waits on (P, cu) before issuing the consumer, which orders everything
issued after (the CU counts as one of a producer's two consumers).  A first
sweep plans which queues each producer is needed by; the second assigns
semaphores, giving a producer a signal only when some wait actually takes it,
so every token is consumed.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..errors import CompileError
from ..ir import Command, CuWait, Stmt

CU = "cu"
SIGNALS = 2
"""Semaphores a command can signal when it ends (its `signal` and `signal2` fields)."""


@dataclass
class SyncReport:
    """What sync inserted: command waits, CU waits, and the semaphores per (producer, consumer)."""

    waits: int
    cu_waits: int
    semaphores: dict[tuple[str, str], int]


def _region(acc) -> tuple[tuple[str, str], int, int]:
    """(memory key, lo, hi): DDR by buffer (the assembler places it), on-chip by address."""
    if acc.space == "ddr":
        return ("ddr", acc.buf.name), acc.lo, acc.hi
    memory, lo, hi = acc.absolute()
    return (memory, ""), lo, hi


def dependencies(cmds: list[Command]) -> list[dict[str, int]]:
    """For each command, the latest earlier conflicting command in each other queue."""
    names = sorted({c.queue for c in cmds})
    qid = {q: k for k, q in enumerate(names)}
    memories: dict[tuple[str, str], int] = {}
    first, mem, lo, hi, write = [0], [], [], [], []
    for c in cmds:
        for acc in c.accesses():
            key, a, b = _region(acc)
            if b > a:
                mem.append(memories.setdefault(key, len(memories)))
                lo.append(a)
                hi.append(b)
                write.append(acc.write)
        first.append(len(mem))
    latest = _scan(np.array(first, np.int64), np.array(mem, np.int64), np.array(lo, np.int64),
                   np.array(hi, np.int64), np.array(write, np.int64),
                   np.array([qid[c.queue] for c in cmds], np.int64), len(memories), len(names))
    deps: list[dict[str, int]] = [{} for _ in cmds]
    rows, cols = np.nonzero(latest >= 0)        # row by row, each row's queues in order
    for i, k, p in zip(rows.tolist(), cols.tolist(), latest[rows, cols].tolist()):
        deps[i][names[k]] = p
    return deps


@njit(cache=True)
def _scan(first, mem, lo, hi, write, queue, n_mem: int, n_queues: int):  # pragma: no cover (compiled)
    """latest[i, k]: the latest command before i in queue k (not i's) with an access conflicting with one of
    i's (-1: none).  Command i's accesses are first[i]:first[i + 1] of (memory, lo, hi, write).

    Each memory keeps a log of (lo, hi, write, command, queue); an access drops the earlier ones of its
    queue it hides (one inside [lo, hi) that it reads, or any inside it that it writes): such an entry can
    no longer be the latest conflict of that queue for any access, so a network's log stays as long as its
    live footprints instead of growing with every tile.  Compiled: the sync pass runs on every finalist
    of every search, and this scan was most of its time in Python."""
    n = first.shape[0] - 1
    latest = np.full((n, n_queues), -1, np.int64)
    logs = [np.empty((8, 5), np.int64) for _ in range(n_mem)]
    sizes = np.zeros(n_mem, np.int64)
    for i in range(n):
        q = queue[i]
        for a in range(first[i], first[i + 1]):
            m, l, h, w = mem[a], lo[a], hi[a], write[a]
            rows = logs[m]
            for r in range(sizes[m]):
                if rows[r, 4] != q and rows[r, 0] < h and l < rows[r, 1] and (w != 0 or rows[r, 2] != 0):
                    if rows[r, 3] > latest[i, rows[r, 4]]:
                        latest[i, rows[r, 4]] = rows[r, 3]
        for a in range(first[i], first[i + 1]):
            m, l, h, w = mem[a], lo[a], hi[a], write[a]
            rows = logs[m]
            kept = 0
            for r in range(sizes[m]):
                if not (rows[r, 4] == q and rows[r, 0] >= l and rows[r, 1] <= h and (w != 0 or rows[r, 2] == 0)):
                    if kept != r:
                        rows[kept, :] = rows[r, :]
                    kept += 1
            if kept == rows.shape[0]:
                bigger = np.empty((2 * kept, 5), np.int64)
                bigger[:kept] = rows[:kept]
                rows = bigger
                logs[m] = rows
            rows[kept, 0], rows[kept, 1], rows[kept, 2], rows[kept, 3], rows[kept, 4] = l, h, w, i, q
            sizes[m] = kept + 1
    return latest


def _later(a: list[int], b: list[int]) -> list[int]:
    """The elementwise maximum of two vector clocks (lists: a kernel has few queues, and numpy's
    per-call cost on a handful of elements is several times a list's)."""
    return [x if x >= y else y for x, y in zip(a, b)]


class _Clocks:
    """Compile-time vector clocks: per queue, how many of its commands are known complete."""

    def __init__(self, cmds: list[Command]):
        self.queues = sorted({c.queue for c in cmds})
        self.qi = {q: k for k, q in enumerate(self.queues)}
        counts: dict[str, int] = defaultdict(int)
        self.seq = []
        self.qj = []        # each command's queue by index (a command's queue is a property that formats it)
        for c in cmds:
            q = c.queue
            self.seq.append(counts[q])
            self.qj.append(self.qi[q])
            counts[q] += 1
        self.done = [None] * len(cmds)

    def zero(self) -> list[int]:
        return [0] * len(self.queues)

    def knows(self, vc: list[int], cmds: list[Command], j: int) -> bool:
        return vc[self.qj[j]] > self.seq[j]


def _frontier(unsat: list[int], cmds: list[Command], clocks: _Clocks) -> list[int]:
    """The producers not already implied by another one's completion, in issue order."""
    return sorted(p for p in unsat
                  if not any(o != p and clocks.knows(clocks.done[o], cmds, p) for o in unsat))


def _sweep(body: list[Stmt], cmds: list[Command], deps, clocks: _Clocks, targets, sems, limit,
           direct: int | None = None):
    """One pass in issue order; plans targets (targets None) or assigns semaphores.  A plan with a
    `direct` budget routes a producer through the CU once that many (producer, consumer) queue
    pairs are taken, so the pairs plus the CU's own stay within the semaphores there are."""
    index = {id(c): i for i, c in enumerate(cmds)}
    plan: dict[int, set[str]] = defaultdict(set)
    pairs: set[tuple[str, str]] = set()
    cu_vc = clocks.zero()
    last: dict[str, int] = {}
    out: list[Stmt] = []
    waits = cu_waits = 0

    def sem(p: int, consumer: str) -> int:
        key = (cmds[p].queue, consumer)
        if key not in sems:
            if len(sems) >= limit:
                raise CompileError(f"the schedule needs more than the {limit} semaphores of the configuration")
            sems[key] = len(sems)
        s, c = sems[key], cmds[p]
        if c.signal is None or c.signal == s:
            c.signal = s
        elif c.signal2 is None or c.signal2 == s:
            c.signal2 = s
        else:
            raise CompileError(f"internal: {c.comment!r} would signal a third semaphore")
        return s

    for stmt in body:
        if not isinstance(stmt, Command):
            out.append(stmt)
            continue
        i, q = index[id(stmt)], stmt.queue
        vc = list(cu_vc) if q not in last else _later(cu_vc, clocks.done[last[q]])
        unsat = _frontier([p for p in deps[i].values() if not clocks.knows(vc, cmds, p)], cmds, clocks)
        if targets is None:
            for p in unsat[:-1]:
                plan[p].add(CU)
                cu_vc = _later(cu_vc, clocks.done[p])
            if unsat:
                p, key = unsat[-1], (cmds[unsat[-1]].queue, q)
                if direct is not None and key not in pairs and len(pairs) >= direct:
                    plan[p].add(CU)
                    cu_vc = _later(cu_vc, clocks.done[p])
                else:
                    plan[p].add(q)
                    pairs.add(key)
                vc = _later(_later(vc, cu_vc), clocks.done[p])
        else:
            for p in unsat:
                if CU in targets[p] and not clocks.knows(cu_vc, cmds, p):
                    out.append(CuWait(sem(p, CU), f"cu waits for {cmds[p].queue}: {cmds[p].comment}"))
                    cu_waits += 1
                    cu_vc = _later(cu_vc, clocks.done[p])
            vc = _later(vc, cu_vc)
            rest = [p for p in unsat if not clocks.knows(vc, cmds, p)]
            if len(rest) > 1 or (rest and q not in targets[rest[0]]):
                raise CompileError(f"internal: sync plan inconsistent at {stmt.comment!r}")
            if rest:
                stmt.wait = sem(rest[0], q)
                waits += 1
                vc = _later(vc, clocks.done[rest[0]])
        vc[clocks.qi[q]] = clocks.seq[i] + 1
        clocks.done[i] = vc
        last[q] = i
        out.append(stmt)
    return out, plan, waits, cu_waits


def synchronise(body: list[Stmt], semaphores: int = 32) -> tuple[list[Stmt], SyncReport]:
    """The body with waits, signals and CU waits inserted (buffers must have addresses)."""
    body = [s for s in body if not isinstance(s, CuWait)]
    cmds = [s for s in body if isinstance(s, Command)]
    for c in cmds:
        c.wait = c.signal = c.signal2 = None
    deps = dependencies(cmds)
    try:
        return _assign(body, cmds, deps, semaphores)
    except CompileError as exc:
        # too many queue pairs (a whole network on several units): pairs past a budget go through
        # the CU, one semaphore per producer queue, instead of one per pair
        budget = semaphores - len({c.queue for c in cmds})
        if "semaphores of the configuration" not in str(exc) or budget < 1:
            raise
        for c in cmds:
            c.wait = c.signal = c.signal2 = None
        return _assign(body, cmds, deps, semaphores, budget)


def _assign(body: list[Stmt], cmds: list[Command], deps, semaphores: int, direct: int | None = None):
    """Plan which queues need each producer, then assign semaphores: (body, report).  A producer
    signals each of its consumers (the CU among them) when it has at most SIGNALS, else the CU's alone."""
    _, plan, _, _ = _sweep(body, cmds, deps, _Clocks(cmds), None, {}, semaphores, direct)
    targets = {p: cons if len(cons) <= SIGNALS else {CU} for p, cons in plan.items()}
    sems: dict[tuple[str, str], int] = {}
    out, _, waits, cu_waits = _sweep(body, cmds, deps, _Clocks(cmds), targets, sems, semaphores)
    return out, SyncReport(waits, cu_waits, dict(sems))

