"""Tile-level interleaving inside a fused kernel: the kernels of a chain interleaved tile by tile (its notes
and a network's report call the choice "pipelining").

lowering.driver gives each kernel of a chain (L0, L1 ...) its tiles as Steps, and
the intermediate between two kernels stays in DM.  One after another, kernel k+1
starts only when the whole intermediate is complete, and each kernel fills and
drains its own double-buffering pipeline.  Interleaved, the Steps of every kernel
are merged into one list that lowering.double_buffer.pipeline issues as one
pipeline: a consumer tile is placed as soon as the producer tiles that write the
rows it reads (their footprints in the intermediate overlap its loads) are issued
`lag` tiles ahead of it, so the NU, VU and DMA work of different layers overlaps
and the fill and drain of one layer hide behind the other's tiles.  Intermediates
a producer stores row by row (lowering.driver keeps them in DM as (n, h, c, w):
a row tile is one contiguous range) gate consumer tiles by rows; any other
intermediate is written whole before it is read, as before.  A conv's consumer
may be a conv, or a pool or elementwise op whose VU lowering then walks rows
outermost (lowering.vu, rows=True: a pool tile reads its window's halo rows from
the producer's rows in DM), gated the same way.  A squeeze-excite multiply into a
conv walks rows outermost too and stores x * gate row by row (lowering.driver.gate_mul),
so the conv's row tiles are gated on it the same way.

The pipeline issues tile k's loads one iteration early and tile k's epilogue one
late, so a consumer tile sits at least GAP places after the producer tile whose
store it reads (empty Steps fill in when the producer has run out): its loads
then come after that store in issue order, which is the order the sync pass
orders memory by.  `check_order` verifies it on the merged body.

The halo rows between a consumer's row tiles are kept or recomputed, whichever
is priced lower.  Kept: the whole intermediate stays in DM, the producer computes
each row once and the consumer re-reads the halo rows from DM.  Recomputed
(lowering.ring): the intermediate is a ring of a few bands in DM, each band the
rows one consumer row tile reads; the producer computes each band as a row tile
of its own, so the rows neighbouring bands share are computed twice, and
`ring_order` runs the kernels' bands as a wavefront, each producer `ahead` bands
before its consumer, so that a band is read after it is written and before its
slot is written again (`check_ring` verifies it on the issued body).

The choice is priced: `choose` allocates, synchronises and replays
(cost.schedule_cycles) the chain one kernel after another, interleaved with
each lag in LAGS and recomputed with each (slots, ahead) in RINGS, and keeps
the cheapest (a variant whose buffers do not fit at once is out; one whose
order is the plain one or another lag's is not priced; a ring whose lower
bound, `ring_floor`, already reaches the best kept price is not replayed, since
recomputing only adds work where the kept intermediate fits DM); when the kept
intermediate would not fit DM (a DDR scratch buffer), a ring that fits is
taken even if dearer.  The kernel's notes say what was chosen and what each
cost, and kir.pipelining holds the Choice (a network's report prints it).
"""
from __future__ import annotations

from dataclasses import dataclass

from nnpsim.config import Config

from .errors import CompileError
from .cost import load_of
from .ir import Buffer, Command, Dma, KernelIR, Stmt, flat_body
from .lowering.double_buffer import Step, pipeline

GAP = 3             # places between a producer tile and the consumer tile that loads what it stored
LAGS = (1, 3)       # producer tiles a consumer tile trails by, beyond the ones it needs (priced)


@dataclass
class Choice:
    """How a chain's kernels were put in one body: lag None = one after another; ring = (slots, bands
    ahead) when the halo is recomputed through rings (lowering.ring) instead of kept."""

    lag: int | None
    cycles: int
    priced: dict[str, int | None]    # every variant priced: its name -> predicted cycles (None: does not fit)
    ring: tuple[int, int] | None = None
    why: str = ""                    # why the cheapest was not taken, if it was not

    @property
    def name(self) -> str:
        """The chosen variant as the notes name it."""
        return ring_name(*self.ring) if self.ring else variant_name(self.lag)

    def note(self) -> str:
        """The kernel header's line about it."""
        if self.ring:
            how = (f"halo recomputed, intermediates in rings of {self.ring[0]} bands, each producer "
                   f"{self.ring[1]} band(s) ahead of its consumer")
        else:
            how = ("one kernel after another" if self.lag is None
                   else f"interleaved tile by tile, each consumer tile {self.lag} producer tile(s) behind")
        return f"pipelining: {how} (predicted cycles: {prices_text(self.priced)}){self.why}"

    def as_meta(self) -> dict:
        """What a network's metadata records of it (the report prints it)."""
        return {"chosen": self.name, "cycles": self.cycles, "priced": dict(self.priced), "why": self.why}


def prices_text(priced: dict[str, int | None]) -> str:
    """Every variant priced, as the notes and the report list them."""
    return ", ".join(f"{k} {'does not fit' if v is None else f'{v:,}'}" for k, v in priced.items())


def variant_name(lag: int | None) -> str:
    """A variant as the notes name it."""
    return "one after another" if lag is None else f"interleaved lag {lag}"


def _footprints(step: Step, buf, write: bool) -> list[tuple[int, int]]:
    """[lo, hi) byte ranges of buf that a Step's commands write (or read)."""
    return [(a.lo, a.hi) for s in step.statements() if isinstance(s, Command)
            for a in s.accesses() if a.buf is buf and a.write == write and a.hi > a.lo]


def intermediate(producer: list[Step], consumer: list[Step]) -> Buffer | None:
    """The on-chip buffer the producer kernel writes and the consumer kernel reads (None if none)."""
    written = {id(a.buf): a.buf for st in producer for s in st.statements() if isinstance(s, Command)
               for a in s.accesses() if a.write and a.buf.space == "dm"}
    for st in consumer:
        for s in st.statements():
            if isinstance(s, Command):
                for a in s.accesses():
                    if not a.write and id(a.buf) in written:
                        return a.buf
    return None


def needs(producer: list[Step], consumer: list[Step]) -> list[int]:
    """For each consumer Step, the last producer Step whose writes it reads (-1: none); never decreasing."""
    buf = intermediate(producer, consumer)
    if buf is None:
        return [len(producer) - 1] * len(consumer)
    writes = [_footprints(st, buf, True) for st in producer]
    out, last = [], -1
    for st in consumer:
        reads = _footprints(st, buf, False)
        k = max((i for i, ws in enumerate(writes) for lo, hi in ws
                 if any(lo < rh and rl < hi for rl, rh in reads)), default=-1)
        last = max(last, k)
        out.append(last)
    return out


def merge(first: list[Step], owner: list[int], consumer: list[Step], need: list[int], lag: int) -> list[Step]:
    """first (owner[i]: the producer's Step index of first[i], or -1) and consumer merged: consumer
    Step j once producer Step min(need[j] + lag, last) is placed and need[j] at least GAP places back."""
    last = max(owner, default=-1)
    where: dict[int, int] = {}
    out: list[Step] = []
    i = j = 0
    while j < len(consumer):
        k = need[j]
        gate = min(k + lag, last) if k >= 0 else -1
        if gate < 0 or (gate in where and (k < 0 or len(out) - where[k] >= GAP)):
            out.append(consumer[j])
            j += 1
            continue
        if i < len(first):
            if owner[i] >= 0:
                where[owner[i]] = len(out)
            out.append(first[i])
            i += 1
        else:
            out.append(Step())
    return out + first[i:]


def interleave(steps: list[list[Step]], lag: int) -> list[Step]:
    """Every kernel's Steps in one list, each consumer gated on the producer tiles it reads."""
    merged = list(steps[0])
    owner = list(range(len(steps[0])))
    for prev, cur in zip(steps, steps[1:]):
        need = needs(prev, cur)
        mine = {id(s): k for k, s in enumerate(cur)}
        merged = merge(merged, owner, cur, need, lag)
        owner = [mine.get(id(s), -1) for s in merged]
    return merged


def check_order(steps: list[list[Step]], body: list[Stmt]) -> None:
    """Every read of an intermediate comes after every producer write that overlaps it, in issue order."""
    pos = {id(s): i for i, s in enumerate(body)}
    for prev, cur in zip(steps, steps[1:]):
        buf = intermediate(prev, cur)
        if buf is None:
            continue
        writes = [(pos[id(s)], a.lo, a.hi) for st in prev for s in st.statements() if isinstance(s, Command)
                  for a in s.accesses() if a.buf is buf and a.write]
        for st in cur:
            for s in st.statements():
                if not isinstance(s, Command):
                    continue
                for a in s.accesses():
                    if a.buf is buf and not a.write and any(p > pos[id(s)] and lo < a.hi and a.lo < hi
                                                          for p, lo, hi in writes):
                        raise CompileError(f"internal: interleaving reads {buf.name} before it is written "
                                           f"({s.comment})")


def body(steps: list[list[Step]], lag: int | None, merged: list[Step] | None = None) -> list[Stmt]:
    """The body of a variant: the kernels one after another (lag None) or interleaved (merged: the
    Steps interleave(steps, lag) gives, if the caller has them)."""
    if lag is None or len(steps) < 2:       # each kernel double-buffered, one after the other
        return [stmt for kernel in steps for stmt in pipeline(kernel)]
    out = pipeline(interleave(steps, lag) if merged is None else merged)
    check_order(steps, out)
    return out


def _order(merged: list[Step]) -> tuple[int, ...]:
    """The merged order of the kernels' Steps, padding left out."""
    return tuple(id(st) for st in merged if st.statements())


def scratch(kir: KernelIR) -> list[str]:
    """The DDR scratch buffers holding the kernel's intermediates (none when they all stay on chip)."""
    io = {b.name for b in kir.inputs} | {kir.output.name}
    return [b.name for b in kir.buffers if b.space == "ddr" and b.data is None and b.name not in io]


def choose(kir: KernelIR, steps: list[list[Step]], cfg: Config, price, rings=None,
           always: bool = False) -> tuple[list[Stmt], Choice]:
    """The cheapest body among the variants: (body, Choice).

    price(kir, cfg) allocates, synchronises and replays kir as it stands and gives its
    predicted cycles (CompileError when its buffers do not fit at once).  With rings
    (depth -> lowering.ring.RingKernel or None), the halo-recomputing variants are priced
    too (recompute_variants) when a kept intermediate would spill to DDR, or always if
    `always`: then a ring whose lower bound reaches the kept price is not replayed (when the
    kept intermediate fits DM); when one wins, kir takes its buffers and notes.
    """
    if len(steps) < 2:
        return body(steps, None), Choice(None, 0, {})
    priced: dict[str, int | None] = {}
    best = None
    seen = {_order([st for kernel in steps for st in kernel])}
    merged: dict[int, list[Step]] = {}      # each lag's interleaved Steps, made once
    for lag in (None,) + LAGS:
        if lag is not None:
            merged[lag] = interleave(steps, lag)
            order = _order(merged[lag])
            if order in seen:         # no consumer tile moves ahead (or as another lag): nothing new to price
                continue
            seen.add(order)
        kir.body = body(steps, lag, merged.get(lag))
        try:
            cycles = int(price(kir, cfg))
        except CompileError:
            if lag is None:
                raise
            priced[variant_name(lag)] = None
            continue
        priced[variant_name(lag)] = cycles
        if best is None or cycles < best[1]:
            best = (lag, cycles)
    kept = Choice(best[0], best[1], priced)
    spilled = scratch(kir)
    beat = None if spilled or not RING_BOUND else kept.cycles
    ring = (recompute_variants(rings, cfg, price, priced, beat)
            if rings is not None and (spilled or always) else None)
    if ring is not None and (ring[1] < kept.cycles or spilled):
        (depth, ahead), cycles, rk, out = ring
        why = (f"; kept would hold {', '.join(spilled)} in DDR" if spilled and cycles >= kept.cycles else "")
        # the ring kernel's own buffers, its I/O included: a network links a kernel by those objects
        kir.buffers, kir.notes = rk.kir.buffers, list(rk.kir.notes)
        kir.inputs, kir.output = rk.kir.inputs, rk.kir.output
        return out, Choice(None, cycles, priced, (depth, ahead), why)
    return body(steps, kept.lag, merged.get(kept.lag)), kept


def pipelined(kir: KernelIR, steps: list[list[Step]], cfg: Config, price, rings=None) -> list[Stmt]:
    """The chosen body (choose); a chain's kernel notes say how its kernels were put together, and
    kir.pipelining holds the Choice (None for one kernel)."""
    out, choice = choose(kir, steps, cfg, price, rings, RINGS_ALWAYS)
    kir.pipelining = choice if len(steps) > 1 else None
    if len(steps) > 1:
        kir.notes.append(choice.note())
    return out


# ------------------------------------------------------------------ halo recomputed (lowering.ring)

RINGS = ((2, 1), (3, 2))    # (slots per ring, bands a producer runs ahead): priced when the chain allows it
# Rings are priced for every chain that can recompute.  Where the kept intermediate fits DM they lost on
# every chain measured (benchmarks/halo.py: 7-38% dearer, the recomputed rows being extra NU work), so
# there a ring is replayed only when its lower bound (ring_floor) is under the best kept price: replaying
# every ring doubled a chain's compile time.  RINGS_ALWAYS = False prices rings only where a kept
# intermediate would spill to DDR; RING_BOUND = False replays every ring (benchmarks/halo.py does).
RINGS_ALWAYS = True
RING_BOUND = True


def ring_name(depth: int, ahead: int) -> str:
    """A recomputing variant as the notes name it."""
    return f"recompute ring {depth} ahead {ahead}"


def ring_order(rk, ahead: int) -> list[Step]:
    """The constants, then the kernels' bands as a wavefront: kernel k's band i in round i + k * ahead,
    GAP places after kernel k - 1's band i (empty Steps fill in)."""
    out = list(rk.constants)
    n, m = len(rk.banded), len(rk.banded[0])
    last: dict[tuple[int, int], int] = {}
    for r in range(m + (n - 1) * ahead):
        for k in range(n):
            i = r - k * ahead
            if not 0 <= i < m:
                continue
            if k > 0:
                out += [Step() for _ in range(GAP - (len(out) - last[k - 1, i]))]
            out += rk.banded[k][i]
            last[k, i] = len(out) - 1
    return out


def check_ring(rk, out: list[Stmt]) -> None:
    """Every band is read after its producer wrote it and before the next band of its slot is written,
    in issue order (which the sync pass orders memory by)."""
    pos = {id(s): i for i, s in enumerate(out)}

    def spans(steps: list[Step], ring, write: bool) -> list[int]:
        return [pos[id(s)] for st in steps for s in st.statements() if isinstance(s, Command)
                for a in s.accesses() if a.write == write and any(a.buf is b for b in ring.slots)]

    for k, ring in enumerate(rk.rings):
        depth = len(ring.slots)
        for i in range(len(ring.bands)):
            w, r = spans(rk.banded[k][i], ring, True), spans(rk.banded[k + 1][i], ring, False)
            nxt = spans(rk.banded[k][i + depth], ring, True) if i + depth < len(ring.bands) else []
            if not w or not r or max(w) > min(r) or (nxt and max(r) > min(nxt)):
                raise CompileError(f"internal: ring t{k} band {i} is not written, read and overwritten in order")


def ring_body(rk, ahead: int) -> list[Stmt]:
    """The body of a recomputing variant (checked)."""
    out = pipeline(ring_order(rk, ahead))
    check_ring(rk, out)
    return out


def bound_name(depth: int, ahead: int) -> str:
    """A recomputing variant left unreplayed, as the notes name its lower bound."""
    return f"{ring_name(depth, ahead)} at least"


def ring_floor(body: list, cfg: Config) -> int:
    """A lower bound on a body's cycles: its busiest NU, VU or memory port (cost.load_of), DMA queues
    aside (a queue's transfers overlap their latencies)."""
    cmds = [s for s in flat_body(body) if isinstance(s, Command)]
    dma = {c.queue for c in cmds if isinstance(c, Dma)}
    busy = load_of(cmds, cfg).busy
    return int(max((v for k, v in busy.items() if k not in dma), default=0))


def recompute_variants(rings, cfg: Config, price, priced: dict,
                       beat: int | None = None) -> tuple[tuple[int, int], int, object, list[Stmt]] | None:
    """The cheapest recomputing variant: ((depth, ahead), cycles, RingKernel, body), or None when the
    chain cannot recompute or no variant fits.  Every one priced goes into `priced`; with `beat`, a
    variant whose ring_floor is not under it is not replayed (its bound goes into `priced`)."""
    best = None
    for depth, ahead in RINGS:
        rk = rings(depth)
        if rk is None:
            return None
        out = ring_body(rk, ahead)
        rk.kir.body = out
        if beat is not None:
            floor = ring_floor(out, cfg)
            if floor >= beat:
                priced[bound_name(depth, ahead)] = floor
                continue
        try:
            cycles = int(price(rk.kir, cfg))
        except CompileError:
            priced[ring_name(depth, ahead)] = None
            continue
        priced[ring_name(depth, ahead)] = cycles
        if best is None or cycles < best[1]:
            best = ((depth, ahead), cycles, rk, out)
    return best
