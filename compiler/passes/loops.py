"""Reroll: runs of tiles that differ only in their addresses become counted loops.

The lowering unrolls every tile, and allocation, synchronisation and pricing
work on that flat body, where they are exact.  This pass runs after them.  It
looks for a block of statements repeated E >= 2 times in a row: the same
commands with the same parameters, queues, waits, signals and CU waits (so
semaphore tokens balance the same way in every iteration), where each
address either moves by a constant stride per iteration (a DDR tile
position) or rotates through at most MAX_CYCLE places (the double-buffered
slots).  Each such run becomes a Loop whose body is the first block with
those addresses as LoopRefs; the edge tiles around it (the first ones, whose
waits differ while the pipeline fills, partial tiles, the last ones) stay
outside as they were.  The dynamic sequence of commands, parameters and
addresses is exactly the flat body's, so results, synchronisation and the
race checker's verdict are unchanged; only the CU's instruction count moves
(fewer `li`, a few `addi` / `xori` per iteration and the `loop`).

Search: statements are reduced to keys (everything but addresses and
comments); candidate periods are the most frequent distances between equal
keys; for each period, a stretch where key[i] == key[i + period] is a
repeat, which is then cut where some address stops following its pattern.
Candidates are taken greedily by statements saved.  The address patterns
also give the registers the emitter needs (passes.families); a candidate that
would need more than MAX_FAMILIES loop registers is refused, and so is one
whose loop would not take fewer CU instructions than its iterations did.
A body of up to CHECK_WHOLE statements is left flat if the rolled one is not
shorter as a whole.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from ..ir import Command, CuWait, Dma, Loop, LoopRef, Note, NuConv, Ref, Vu, copy_command, flat_body, ref_fields
from .emit import Emitter
from .families import address_value, families, registers_needed

MAX_CYCLE = 4           # longest rotation of an address (slots) a loop follows
MAX_PERIODS = 24        # candidate periods tried per body
MAX_FAMILIES = 20       # registers a loop may tie up for its moving addresses
MIN_SAVED = 8           # statements a loop must save
MIN_GAIN = 4            # and CU instructions
CHECK_WHOLE = 2000      # statements up to which the rerolled body is checked to be shorter as a whole
SETUP = 33              # at most: the count, a register for every pinned address, `loop`


# ----------------------------------------------------------------------------- keys

def _space(ref: Ref) -> object:
    """Where an address lives, as far as a loop may not change it: a DDR buffer, an on-chip memory."""
    return ("ddr", ref.buf.name) if ref.buf.space == "ddr" else ref.buf.memory


def _key(stmt) -> tuple:
    """Everything about a statement a loop iteration must repeat exactly (not addresses, comments)."""
    if isinstance(stmt, Note):
        return ("note",)
    if isinstance(stmt, CuWait):
        return ("cu.wait", stmt.sem)
    if isinstance(stmt, Dma):
        rest = (stmt.chan, stmt.size, stmt.src_stride, stmt.dst_stride, stmt.pad_lo, stmt.pad_hi,
                stmt.pad_value, stmt.elem)
    elif isinstance(stmt, NuConv):
        rest = (stmt.unit, stmt.acc, stmt.depthwise, stmt.fmode, tuple(stmt.params.items()), stmt.rows, stmt.cols,
                None if stmt.rq is None else (id(stmt.rq.buf), stmt.rq.offset),
                None if stmt.psum is None else (id(stmt.psum.buf), stmt.psum.offset))
    elif isinstance(stmt, Vu):
        rest = (stmt.mnemonic, stmt.unit, stmt.d_type, stmt.a_type, stmt.b_bytes, stmt.n, stmt.d_stride,
                stmt.a_stride, stmt.b_stride, stmt.win, stmt.win_stride, tuple(stmt.scalars.items()))
    else:                                   # a Label (or anything else) never repeats
        return ("unique", id(stmt))
    spaces = tuple(None if getattr(stmt, f) is None else _space(getattr(stmt, f)) for f in ref_fields(stmt))
    return (type(stmt).__name__, rest, stmt.wait, stmt.signal, stmt.signal2, spaces)


# ----------------------------------------------------------------------------- address patterns

def _prefix(vals: np.ndarray, bufs: np.ndarray) -> np.ndarray:
    """Per address row (vals, bufs: [addresses, iterations]), how many iterations from the first
    keep one pattern: a constant step within one buffer, or a rotation of period <= MAX_CYCLE."""
    s, e = vals.shape
    if e < 2:
        return np.full(s, e, dtype=np.int64)

    def through(bad: np.ndarray, lead: int) -> np.ndarray:
        if bad.shape[1] == 0:
            return np.full(s, lead, dtype=np.int64)
        return np.where(bad.any(axis=1), bad.argmax(axis=1), bad.shape[1]) + lead

    d = np.diff(vals, axis=1)
    best = np.minimum(through(d != d[:, :1], 1), through(bufs[:, 1:] != bufs[:, :1], 1))
    for period in range(2, min(MAX_CYCLE, e) + 1):        # (a rotation as long as the run always fits)
        bad = (vals[:, period:] != vals[:, :-period]) | (bufs[:, period:] != bufs[:, :-period])
        best = np.maximum(best, through(bad, period))
    return best


def _runs(ok: np.ndarray, min_len: int) -> list[tuple[int, int]]:
    """[start, end) of the stretches of True in ok at least min_len long."""
    edges = np.diff(np.concatenate([[0], ok.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    keep = ends - starts >= min_len
    return list(zip(starts[keep].tolist(), ends[keep].tolist()))


@dataclass
class _Candidate:
    start: int
    period: int
    extent: int

    @property
    def end(self) -> int:
        return self.start + self.period * self.extent

    @property
    def saved(self) -> int:
        return self.period * (self.extent - 1)


def _address_table(body: list) -> tuple[np.ndarray, np.ndarray]:
    """Per statement and address field (up to three): the address as a number and the identity
    of its buffer; -1 where the statement has no such field."""
    vals = np.full((len(body), 3), -1, dtype=np.int64)
    bufs = np.full((len(body), 3), -1, dtype=np.int64)
    for i, stmt in enumerate(body):
        if isinstance(stmt, Command):
            for k, f in enumerate(ref_fields(stmt)):
                ref = getattr(stmt, f)
                if ref is not None:
                    vals[i, k], bufs[i, k] = address_value(ref), id(ref.buf)
    return vals, bufs


def _streams(table, start: int, period: int, extent: int) -> tuple[np.ndarray, np.ndarray]:
    """The addresses of a repeated block: values and buffer identities [fields, iterations]."""
    vals, bufs = table
    rows = start + np.arange(period)[:, None] + period * np.arange(extent)[None, :]
    present = bufs[start:start + period] != -1                        # [period, 3]
    v = vals[rows].transpose(0, 2, 1)[present]                        # [fields, extent]
    b = bufs[rows].transpose(0, 2, 1)[present]
    return v, b


def _regular_spans(vals: np.ndarray, bufs: np.ndarray) -> list[tuple[int, int]]:
    """Maximal [a, b) iteration spans (b - a >= 2) over which every address keeps a pattern."""
    e = vals.shape[1]
    out, a = [], 0
    while e - a >= 2:
        b = a + (int(_prefix(vals[:, a:], bufs[:, a:]).min()) if len(vals) else e - a)
        if b - a >= 2:
            out.append((a, b))
            a = b
        else:
            a += 1
    return out


def _periods(keys: np.ndarray) -> list[int]:
    """The most frequent distances between a key and its next few equal keys (candidate lengths
    of a loop body: a body of two different tiles repeats at the distance of every second key)."""
    order = np.lexsort((np.arange(len(keys)), keys))
    k, pos = keys[order], order
    gaps: Counter = Counter()
    for step in range(1, MAX_CYCLE + 1):
        same = k[step:] == k[:-step]
        gaps.update((pos[step:] - pos[:-step])[same].tolist())
    return [int(g) for g, _ in gaps.most_common(MAX_PERIODS)]


# ----------------------------------------------------------------------------- the pass

def _make_loop(body: list, c: _Candidate, var: str) -> Loop:
    """The Loop of candidate c: its first block with the moving addresses as LoopRefs."""
    stmts = []
    for j in range(c.period):
        stmt = body[c.start + j]
        if isinstance(stmt, Command):
            moved = {}
            for f in ref_fields(stmt):
                refs = [getattr(body[c.start + j + v * c.period], f) for v in range(c.extent)]
                if refs[0] is None:
                    continue
                vals = [address_value(r) for r in refs]
                if all(v == vals[0] for v in vals) and all(r.buf is refs[0].buf for r in refs):
                    continue
                moved[f] = _loop_ref(refs, vals, var)
            stmt = copy_command(stmt, moved)
        elif isinstance(stmt, CuWait):
            stmt = CuWait(stmt.sem, stmt.comment)
        stmts.append(stmt)
    return Loop(var, c.extent, stmts)


def _loop_ref(refs: list[Ref], vals: list[int], var: str) -> LoopRef:
    e = len(vals)
    steps = {vals[v + 1] - vals[v] for v in range(e - 1)}
    same_buf = all(r.buf is refs[0].buf for r in refs)
    if len(steps) == 1 and same_buf:
        return LoopRef(refs[0].buf, refs[0].offset, var, steps.pop())
    for period in range(2, MAX_CYCLE + 1):
        if all(vals[v] == vals[v - period] and refs[v].buf is refs[v - period].buf for v in range(period, e)):
            cycle = tuple(Ref(r.buf, r.offset) for r in refs[:period])
            return LoopRef(refs[0].buf, refs[0].offset, var, 0, cycle)
    raise AssertionError("internal: an address with no pattern in a loop")


def _instructions(stmts: list) -> int:
    """CU instructions of stmts, emitted from the reset state."""
    em = Emitter()
    return sum(em.count(s) for s in stmts)


def _shorter(body: list, c: _Candidate, loop: Loop) -> bool:
    """Does the loop take fewer CU instructions than the statements it replaces?  (Setting up
    and stepping its registers may cost more.)  Clearly so when the iterations it saves hold
    more commands than twice what a loop can add (its set-up and pinned addresses, each
    family's register and step, an `addi` per moving address); otherwise both are emitted,
    after the repeated statements once, so that registers and parameters hold what they would
    hold in the program."""
    issued = sum(1 for s in loop.body if isinstance(s, (Command, CuWait)))
    moving = sum(1 for s in loop.body if isinstance(s, Command) for f in ref_fields(s)
                 if isinstance(getattr(s, f), LoopRef))
    most = SETUP + 2 * registers_needed(families(loop.body)) + moving
    if (c.extent - 1) * issued >= 2 * most + MIN_GAIN:
        return True
    region = body[c.start:c.end]
    warm = Emitter()
    for s in region:
        warm.count(s)
    again = warm.fork()
    return warm.count(loop) + MIN_GAIN <= sum(again.count(s) for s in region)


def _candidates(body: list, keys: np.ndarray) -> list[_Candidate]:
    out = []
    table = _address_table(body)
    for period in _periods(keys):
        if period < 1 or 2 * period > len(keys):
            continue
        eq = keys[:-period] == keys[period:]
        for x0, x1 in _runs(eq, period):
            extent = (x1 - x0) // period + 1
            spare = (x1 - x0) % period
            start = next((q for q in range(x0, x0 + spare + 1) if isinstance(body[q], Note)), x0)
            for a, b in _regular_spans(*_streams(table, start, period, extent)):
                c = _Candidate(start + a * period, period, b - a)
                if c.saved >= MIN_SAVED:
                    out.append(c)
    return out


def reroll(body: list, first_var: int = 0) -> list:
    """The body with runs of repeated blocks as Loops (see the module docstring); the identity
    on a body with no repeats.  Loop variables are named i<first_var>, i<first_var + 1> ..."""
    if any(isinstance(s, Loop) for s in body):
        raise ValueError("reroll takes a flat body")
    intern: dict[tuple, int] = {}
    keys = np.array([intern.setdefault(_key(s), len(intern)) for s in body], dtype=np.int64)
    if len(keys) < 2 * MIN_SAVED:
        return list(body)
    cands = sorted(_candidates(body, keys), key=lambda c: (-c.saved, c.start, c.period))
    taken = np.zeros(len(body), dtype=bool)
    chosen = []
    for c in cands:
        if taken[c.start:c.end].any():
            continue
        loop = _make_loop(body, c, "i")
        if registers_needed(families(loop.body)) > MAX_FAMILIES or not _shorter(body, c, loop):
            continue
        taken[c.start:c.end] = True
        chosen.append(c)
    chosen.sort(key=lambda c: c.start)
    out, i, n = [], 0, first_var
    for c in chosen:
        out += body[i:c.start]
        out.append(_make_loop(body, c, f"i{n}"))
        n += 1
        i = c.end
    out += body[i:]
    # each loop was shorter where it stands; a small body is also checked whole (a loop changes
    # what the registers hold after it), a large one has loops that save far more than that
    if chosen and len(body) <= CHECK_WHOLE and _instructions(out) >= _instructions(body):
        return list(body)
    return out


def flatten(body: list) -> list:
    """The body with every Loop expanded (the inverse of reroll)."""
    return flat_body(body)
