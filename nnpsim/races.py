"""Data-race checker: replays a run's synchronisation as vector clocks over exact byte footprints.

Happens-before (docs/architecture.md, "Synchronisation") runs through
program order in each queue, the CU's issue of a command, semaphore tokens
(FIFO per semaphore: the k-th take of a semaphore receives the k-th signal's
token, which carries the signaller's vector clock) and barriers (the CU joins
the clocks of every unit in the mask).  The clock component of an agent is
the 1-based index of its command, so an epoch (agent, clock) names a command.

Accesses are replayed in the order commands start, which extends
happens-before (a command that happens before another ended before the other
started).  Shadow memory keeps, per byte, the epoch of the last write and,
per agent, the clock of its last read (FastTrack); it is paged, and only
the 4 KiB pages that can hold a race cost memory or time: a page that no
command writes, or that one agent alone touches, is skipped.  Within a page,
a byte's history is kept once per granule: the largest power of two that
divides every offset where an access to the page starts or ends, so every
access covers whole granules and their bytes share one history (a page of
whole 64-byte rows costs 64 entries, not 4096), with the same verdict and
the same first byte as a byte-by-byte check.  A pattern is walked as runs of bytes (a run that
starts inside or at the end of the one before it is merged into it: a byte one pattern touches again
cannot race anew, since only the command's own accesses came between), kept as entries of evenly
spaced runs (a tile's rows are one entry: marking pages costs an entry, not a row), and each shadow page keeps
the latest write and read clock of every agent: when all of them happen before the command, no
granule can race and the page's granules are filled without being checked one by one.

A run stopped by a command that read a bad value (a zero divisor, a bad
per-channel multiplier) is checked a little further: the read may have come
before a write it was meant to wait for.  The failing command is replayed as
if it had started, then every issued command that will start whatever the
failing one does (its queue ahead of it needs no token, or only tokens already
signalled to a semaphore that no other unit and no `sem.wait` takes), with the
clock it will have.  None of them can be ordered after the failing command, so
a conflict between them is a race in every run, never a false report.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from isa_spec import DecodeError, decode, load_isa

from . import errors
from .config import Config
from .errors import SimError
from .footprint import (BASE, DIMS, DMA_AGENT, NU_AGENT, N, S, SPACE, VU_AGENT, WIDTH, WRITE, agent_units,
                        build_patterns, footprint_rules, pattern_bytes, run_count, space_name, space_sizes, walked_dims)
from .runlog import BARRIER, ISSUE, LOAD, SIGNAL, START, TAKE
from .state import SPACE_DDR

PAGE_BITS = 12
PAGE = 1 << PAGE_BITS
MASK_BITS = 16
MAX_AGENTS = 31     # reader sets are int32 bit masks
MAX_PENDING_ELEMENTS = 1 << 24     # a command that never ran is replayed only if its footprint is this small
# Barrier mask bit of unit 0 of each kind (Q_NU0, Q_VU0, Q_DMA0); unit k is that bit + k.
FIRST_MASK_BIT = {kind: load_isa().constants[q].bit_length() - 1
                  for kind, q in ((NU_AGENT, "Q_NU0"), (VU_AGENT, "Q_VU0"), (DMA_AGENT, "Q_DMA0"))}

# _command_clocks error codes (a malformed RunLog, not a program error)
LOG_OK, LOG_BAD_INDEX, LOG_EMPTY_SEMAPHORE = 0, 1, 2


class RunLogError(ValueError):
    """The RunLog contradicts itself (an engine bug, not a program error)."""


@njit(cache=True)
def _join(dst: np.ndarray, src: np.ndarray) -> None:
    for i in range(dst.shape[0]):
        if src[i] > dst[i]:
            dst[i] = src[i]


@njit(cache=True)
def _command_clocks(kind: np.ndarray, agent: np.ndarray, sem: np.ndarray, cmd: np.ndarray,
                    cmd_agent: np.ndarray, cmd_clock: np.ndarray, n_agents: int,
                    mask_agent: np.ndarray) -> tuple[np.ndarray, int, int]:
    """Vector clock each command runs with; (clocks, status, index of the bad event)."""
    n = cmd_agent.shape[0]
    m = kind.shape[0]
    clocks = np.zeros((n, n_agents), np.int32)
    pending = np.zeros((n, n_agents), np.int32)
    started = np.zeros(n, np.bool_)
    vc = np.zeros((n_agents, n_agents), np.int32)   # vc[0] is the CU's
    n_sem = 1
    n_sig = 0
    for e in range(m):
        if kind[e] == SIGNAL or kind[e] == TAKE:
            if sem[e] < 0 or sem[e] > 1 << 20:
                return clocks, LOG_BAD_INDEX, e
            n_sem = max(n_sem, sem[e] + 1)
            if kind[e] == SIGNAL:
                n_sig += 1
    tokens = np.zeros((max(n_sig, 1), n_agents), np.int32)
    nxt = np.full(max(n_sig, 1), -1, np.int64)
    head = np.full(n_sem, -1, np.int64)
    tail = np.full(n_sem, -1, np.int64)
    sig = 0
    for e in range(m):
        k, c, a = kind[e], cmd[e], agent[e]
        if c < -1 or c >= n or a < 0 or a >= n_agents or (c >= 0 and cmd_agent[c] != a and k != ISSUE):
            return clocks, LOG_BAD_INDEX, e
        if k == ISSUE:
            if c < 0:
                return clocks, LOG_BAD_INDEX, e
            _join(pending[c], vc[0])
        elif k == START:
            if c < 0:
                return clocks, LOG_BAD_INDEX, e
            _join(vc[a], pending[c])
            vc[a, a] = cmd_clock[c]
            clocks[c, :] = vc[a]
            started[c] = True
        elif k == SIGNAL:
            s = sem[e]
            tokens[sig, :] = clocks[c] if c >= 0 else vc[0]
            if tail[s] >= 0:
                nxt[tail[s]] = sig
            else:
                head[s] = sig
            tail[s] = sig
            sig += 1
        elif k == TAKE:
            s = sem[e]
            t = head[s]
            if t < 0:
                return clocks, LOG_EMPTY_SEMAPHORE, e
            head[s] = nxt[t]
            if head[s] < 0:
                tail[s] = -1
            if c < 0:
                _join(vc[0], tokens[t])
            elif started[c]:
                _join(vc[a], tokens[t])
                _join(clocks[c], tokens[t])
            else:
                _join(pending[c], tokens[t])
        elif k == BARRIER:
            for bit in range(MASK_BITS):
                if (sem[e] >> bit) & 1 and mask_agent[bit] >= 0:
                    _join(vc[0], vc[mask_agent[bit]])
    return clocks, LOG_OK, -1


@njit(cache=True)
def _hit(found: np.ndarray, c: int, writes: int, other: int, other_clock: int, other_writes: int,
         space: int, byte: int) -> np.ndarray:
    found[0], found[1], found[2], found[3] = 1, c, writes, other
    found[4], found[5], found[6], found[7] = other_clock, other_writes, space, byte
    return found


@njit(cache=True, inline="always")
def _low_bit(off: int) -> int:
    """log2 of the largest power of two dividing off (PAGE_BITS for 0: a page edge cuts nothing)."""
    if off == 0:
        return PAGE_BITS
    b = 0
    while not (off >> b) & 1:
        b += 1
    return b


@njit(cache=True, inline="always")
def _grown(a: np.ndarray, used: int) -> np.ndarray:
    """`a` (rows), doubled when it is full."""
    if used < a.shape[0]:
        return a
    bigger = np.empty((2 * a.shape[0], a.shape[1]), a.dtype)
    bigger[:used] = a[:used]
    return bigger


RUN_LO, RUN_HI, RUN_N, RUN_STEP = 0, 1, 2, 3
"""Columns of a run entry: RUN_N runs, the k-th the bytes [lo + k * step, hi + k * step)."""


@njit(cache=True)
def _runs(pats: np.ndarray, order: np.ndarray, size: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Every pattern's runs clipped to their memory, once: (first entry of pattern [i, j] of the i-th command
    in start order, flattened with one more entry at the end; the entries [lo, hi, n, step], RUN_*).

    Runs are visited in run_at's order (an odometer over walked_dims).  A run that starts inside or at the
    end of the one before it is merged into it: the bytes first seen in the same order, so the same first
    race (module doc), in fewer runs (a box of whole rows is one run, not one per row; a row of overlapping
    pooling windows one, not one per window).  The fastest dim left whose runs lie apart, in rising order,
    is one entry of n runs where all of them lie inside the memory (a tile's rows: one entry, not one per
    row); those runs never touch, so none would merge."""
    n_pat = pats.shape[1]
    first = np.zeros(order.shape[0] * n_pat + 1, np.int64)
    out = np.empty((1024, 4), np.int64)
    dim_n = np.empty(DIMS, np.int64)
    dim_s = np.empty(DIMS, np.int64)
    idx = np.zeros(DIMS, np.int64)
    n = 0
    for i in range(order.shape[0]):
        for j in range(n_pat):
            pat = pats[order[i], j]
            first[i * n_pat + j] = n
            sp = pat[SPACE]
            if run_count(pat) == 0 or sp < 0 or sp >= size.shape[0]:
                continue
            out, n = _pattern_runs(pat, size[sp], dim_n, dim_s, idx, out, n)
    first[-1] = n
    return first, out[:n]


@njit(cache=True)
def _pattern_runs(pat: np.ndarray, size: int, dim_n: np.ndarray, dim_s: np.ndarray, idx: np.ndarray,
                  out: np.ndarray, n: int) -> tuple[np.ndarray, int]:
    """One pattern's entries appended to out from row n (_runs); (out, its new count)."""
    nw, addr, length = walked_dims(pat, dim_n, dim_s)
    fold = 0        # the fastest dims whose runs continue or overlap the one before: one run, no steps
    while fold < nw and 0 < dim_s[fold] <= length:
        length += (dim_n[fold] - 1) * dim_s[fold]
        fold += 1
    cnt, step = 1, 0
    if fold < nw and dim_s[fold] > length:      # runs apart, in rising order: an entry's n runs
        cnt, step = dim_n[fold], dim_s[fold]
        fold += 1
    nw -= fold
    dim_n[:nw], dim_s[:nw] = dim_n[fold:fold + nw].copy(), dim_s[fold:fold + nw].copy()
    idx[:nw] = 0
    start = n
    while True:
        if cnt > 1 and addr >= 0 and addr + (cnt - 1) * step + length <= size:
            out = _grown(out, n)
            out[n, RUN_LO], out[n, RUN_HI], out[n, RUN_N], out[n, RUN_STEP] = addr, addr + length, cnt, step
            n += 1
        else:
            for k in range(cnt):        # clipped one by one
                a, b = max(addr + k * step, 0), min(addr + k * step + length, size)
                if b <= a:
                    continue
                if n > start and out[n - 1, RUN_N] == 1 and out[n - 1, RUN_LO] <= a <= out[n - 1, RUN_HI]:
                    out[n - 1, RUN_HI] = max(out[n - 1, RUN_HI], b)   # bytes seen again: nothing new
                else:
                    out = _grown(out, n)
                    out[n, RUN_LO], out[n, RUN_HI], out[n, RUN_N], out[n, RUN_STEP] = a, b, 1, 0
                    n += 1
        w = 0
        while w < nw:           # the odometer: dim w steps, the faster ones wrap
            idx[w] += 1
            addr += dim_s[w]
            if idx[w] < dim_n[w]:
                break
            addr -= dim_n[w] * dim_s[w]
            idx[w] = 0
            w += 1
        if w == nw:
            return out, n


@njit(cache=True)
def _mark_pages(pats: np.ndarray, order: np.ndarray, cmd_agent: np.ndarray, first: np.ndarray, runs: np.ndarray,
                page_base: np.ndarray, total_pages: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per global page: a bit mask of the agents that write it, of those that read it, and its granule.

    The granule is the largest power of two dividing every offset inside the page where an access
    starts or ends: every access covers whole granules, so the bytes of a granule share their whole
    history and one shadow entry per granule checks exactly what one per byte would.  An entry of runs
    less than a page apart marks every page from its first byte to its last (none lies between two runs)
    with the granule of its first run's ends and its step, which divides every run's ends (a finer
    granule than the least one is as exact).
    """
    writers = np.zeros(total_pages, np.int32)
    readers = np.zeros(total_pages, np.int32)
    gran = np.full(total_pages, PAGE_BITS, np.int8)
    n_pat = pats.shape[1]
    for i in range(order.shape[0]):
        bit = np.int32(1 << cmd_agent[order[i]])
        for j in range(n_pat):
            pat = pats[order[i], j]
            base, masks = page_base[pat[SPACE]], writers if pat[WRITE] else readers
            for r in range(first[i * n_pat + j], first[i * n_pat + j + 1]):
                lo, hi, cnt, step = runs[r, RUN_LO], runs[r, RUN_HI], runs[r, RUN_N], runs[r, RUN_STEP]
                if cnt > 1 and step < PAGE:
                    g = min(_low_bit(lo & (PAGE - 1)), _low_bit(hi & (PAGE - 1)), _low_bit(step & (PAGE - 1)))
                    _mark(masks, gran, base + (lo >> PAGE_BITS), base + ((hi + (cnt - 1) * step - 1) >> PAGE_BITS),
                          g, g, g, bit)
                    continue
                for k in range(cnt):
                    a, b = lo + k * step, hi + k * step
                    _mark(masks, gran, base + (a >> PAGE_BITS), base + ((b - 1) >> PAGE_BITS),
                          _low_bit(a & (PAGE - 1)), PAGE_BITS, _low_bit(b & (PAGE - 1)), bit)
    return writers, readers, gran


@njit(cache=True, inline="always")
def _mark(masks: np.ndarray, gran: np.ndarray, first_page: int, last_page: int, g_first: int, g_mid: int,
          g_last: int, bit: np.int32) -> None:
    """Pages first_page..last_page touched by the agent `bit`; the access's granule in its first page, in
    the pages between and in its last."""
    gran[first_page] = min(gran[first_page], g_first)
    gran[last_page] = min(gran[last_page], g_last)
    for g in range(first_page, last_page + 1):
        masks[g] |= bit
        gran[g] = min(gran[g], g_mid)


@njit(cache=True, inline="always")
def _shared(writers: int, readers: int) -> bool:
    """A page can hold a race only if it is written and more than one agent touches it."""
    both = writers | readers
    return writers != 0 and (both & (both - 1)) != 0


@njit(cache=True)
def _shadow_blocks(writers: np.ndarray, readers: np.ndarray,
                   n_agents: int) -> tuple[np.ndarray, int, np.ndarray, np.ndarray, int]:
    """Shadow block numbers of the pages that can race (_shared): write block per page, read block per
    (read page, agent); -1 for none (a page no command writes, or one agent's alone, needs no shadow)."""
    wblk = np.full(writers.shape[0], -1, np.int32)
    nw = 0
    read_page = np.full(writers.shape[0], -1, np.int32)
    n_read_pages = 0
    for g in range(writers.shape[0]):
        if not _shared(writers[g], readers[g]):
            continue
        wblk[g] = nw
        nw += 1
        if readers[g]:
            read_page[g] = n_read_pages
            n_read_pages += 1
    rblk = np.full((n_read_pages, n_agents), -1, np.int32)
    nr = 0
    for g in range(writers.shape[0]):
        if read_page[g] >= 0:
            for a in range(n_agents):
                if (readers[g] >> a) & 1:
                    rblk[read_page[g], a] = nr
                    nr += 1
    return wblk, nw, read_page, rblk, nr


@njit(cache=True, inline="always")
def _page_ordered(w_max: np.ndarray, r_max: np.ndarray, vc: np.ndarray, me: int, is_write: int) -> bool:
    """Every other agent's latest write to the page (and, for a write, latest read) happens before vc: then
    no granule of the page holds a clock past vc, and the granule-by-granule check would find nothing."""
    for a in range(vc.shape[0]):
        if a != me and (w_max[a] > vc[a] or (is_write and r_max[a] > vc[a])):
            return False
    return True


@njit(cache=True)
def _find_race(pats: np.ndarray, order: np.ndarray, cmd_agent: np.ndarray, cmd_clock: np.ndarray,
               clocks: np.ndarray, size: np.ndarray, n_agents: int) -> np.ndarray:
    """First race in start order: [found, cmd, writes, other agent, other clock, other writes, space, byte]."""
    found = np.zeros(8, np.int64)
    page_base = np.zeros(size.shape[0] + 1, np.int64)
    for sp in range(size.shape[0]):
        page_base[sp + 1] = page_base[sp] + (size[sp] + PAGE - 1) // PAGE
    first, runs = _runs(pats, order, size)
    writers, readers_of, gran = _mark_pages(pats, order, cmd_agent, first, runs, page_base, page_base[-1])
    wblk, nw, read_page, rblk, nr = _shadow_blocks(writers, readers_of, n_agents)
    w_agent = np.zeros((nw, PAGE), np.int16)
    w_clock = np.zeros((nw, PAGE), np.int32)
    r_clock = np.zeros((nr, PAGE), np.int32)
    w_max = np.zeros((nw, n_agents), np.int32)     # per shadow page and agent, its latest write's clock
    r_max = np.zeros((nw, n_agents), np.int32)     # ... and its latest read's
    readers = np.empty(n_agents, np.int64)
    reader_blk = np.empty(n_agents, np.int64)
    n_pat = pats.shape[1]
    for ci in range(order.shape[0]):
        c = order[ci]
        me, clock, vc = cmd_agent[c], cmd_clock[c], clocks[c]
        for j in range(n_pat):
            sp, is_write = pats[c, j, SPACE], pats[c, j, WRITE]
            for r in range(first[ci * n_pat + j], first[ci * n_pat + j + 1]):
                for kk in range(runs[r, RUN_N]):
                    lo, hi = runs[r, RUN_LO] + kk * runs[r, RUN_STEP], runs[r, RUN_HI] + kk * runs[r, RUN_STEP]
                    addr = lo
                    while addr < hi:
                        g = page_base[sp] + (addr >> PAGE_BITS)
                        off0 = addr & (PAGE - 1)
                        off1 = min(PAGE, off0 + hi - addr)
                        wb = wblk[g]
                        if wb < 0:              # no race can touch this page
                            addr += off1 - off0
                            continue
                        rp = read_page[g]
                        rb = rblk[rp, me] if rp >= 0 else -1
                        sh = gran[g]
                        k0, k1 = off0 >> sh, off1 >> sh
                        if _page_ordered(w_max[wb], r_max[wb], vc, me, is_write):
                            if is_write:
                                w_agent[wb, k0:k1] = me
                                w_clock[wb, k0:k1] = clock
                            else:
                                r_clock[rb, k0:k1] = clock
                        else:
                            n_readers = 0
                            if is_write and rp >= 0:
                                for o in range(n_agents):
                                    if o != me and rblk[rp, o] >= 0:
                                        readers[n_readers], reader_blk[n_readers] = o, rblk[rp, o]
                                        n_readers += 1
                            for k in range(k0, k1):     # one shadow entry per granule
                                wa, wc = w_agent[wb, k], w_clock[wb, k]
                                if wc > 0 and wa != me and wc > vc[wa]:
                                    return _hit(found, c, is_write, wa, wc, 1, sp, addr + (k << sh) - off0)
                                if is_write:
                                    for i in range(n_readers):
                                        o = readers[i]
                                        if r_clock[reader_blk[i], k] > vc[o]:
                                            return _hit(found, c, 1, o, r_clock[reader_blk[i], k], 0, sp,
                                                        addr + (k << sh) - off0)
                                    w_agent[wb, k], w_clock[wb, k] = me, clock
                                else:
                                    r_clock[rb, k] = clock
                        if is_write:
                            w_max[wb, me] = max(w_max[wb, me], clock)
                        else:
                            r_max[wb, me] = max(r_max[wb, me], clock)
                        addr += off1 - off0
    return found


def _local_clocks(cmd_agent: np.ndarray, n_agents: int) -> tuple[np.ndarray, list[np.ndarray]]:
    """1-based position of each command in its agent's queue, and each agent's command ids."""
    clock = np.zeros(cmd_agent.shape[0], np.int32)
    per_agent = []
    for a in range(n_agents):
        ids = np.flatnonzero(cmd_agent == a)
        clock[ids] = np.arange(1, ids.size + 1)
        per_agent.append(ids)
    return clock, per_agent


def _mask_agents(kind: np.ndarray, unit: np.ndarray) -> np.ndarray:
    """Agent id of every barrier mask bit (-1 where the configuration has no such unit)."""
    out = np.full(MASK_BITS, -1, np.int64)
    for a in range(kind.shape[0]):
        if int(kind[a]) in FIRST_MASK_BIT:
            bit = FIRST_MASK_BIT[int(kind[a])] + unit[a]
            if bit < MASK_BITS:
                out[bit] = a
    return out


def describe_command(log, program, c: int) -> str:
    """'dma0 `dma` at pc 0x40 (k.s:12)' for command c."""
    isa = load_isa()
    op = int(log.cmd_op[c])
    mnemonic = isa.instructions[op].mnemonic if 0 <= op < len(isa.instructions) else f"op{op}"
    pc = int(log.cmd_pc[c])
    where = source_of(program, pc)
    return f"{log.agents[int(log.cmd_agent[c])]} `{mnemonic}` at pc {pc:#x}" + (f" ({where})" if where else "")


def source_of(program, pc: int) -> str:
    """'file:line' of the instruction at byte address pc, or '' when unknown."""
    lines = getattr(program, "lines", None)
    i = pc // 8
    if lines is None or not 0 <= i < len(lines) or lines[i] is None:
        return ""
    return f"{lines[i][0]}:{lines[i][1]}"


def _bytes_of(pats: np.ndarray, c: int, space: int, write: int, size: int) -> np.ndarray:
    parts = [pattern_bytes(p, size) for p in pats[c] if p[WIDTH] > 0 and p[SPACE] == space and p[WRITE] == write]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)


def _race_message(log, program, pats, size, hit, other: int, fault_cmd: int, loads: CuLoads) -> str:
    _, c, writes, _, _, other_writes, space, _ = (int(v) for v in hit)
    overlap = np.intersect1d(_bytes_of(pats, c, space, writes, size[space]),
                             _bytes_of(pats, other, space, other_writes, size[space]))
    lo, hi = int(overlap[0]), int(overlap[-1])
    span = f"byte {lo:#x}" if lo == hi else f"bytes {lo:#x}..{hi:#x}"
    count = "" if overlap.size == hi - lo + 1 else f", {overlap.size} of them overlap"
    verb = {0: "reads", 1: "writes"}

    def side(cmd: int, w: int) -> str:
        if cmd >= loads.first:
            return f"{loads.describe(program, cmd)} {verb[w]} them (cycle {loads.cycle[cmd - loads.first]})"
        end, start = int(log.cmd_end[cmd]), int(log.cmd_start[cmd])
        cycles = f"cycles {start}..{end}" if end >= 0 else f"from cycle {start}"
        if start < 0:
            cycles = ("failing at cycle " if cmd == fault_cmd else "issued, not started by cycle ") + str(log.cycles)
        return f"{describe_command(log, program, cmd)} {verb[w]} them ({cycles})"

    return (f"data race on {space_name(space)} {span}{count}: {side(other, other_writes)}, and "
            f"{side(c, writes)}; no semaphore, issue order or barrier orders the two")


def check(log, program, config: Config, fault_cmd: int = -1) -> None:
    """Raise SimError(DATA_RACE) for the first race (earliest start) in the run `log`.

    fault_cmd: the command that stopped the run by reading a bad value (-1: none); the
    check then also covers it and the commands that start whatever it does (module doc).
    """
    n = int(np.asarray(log.cmd_op).shape[0])
    if n == 0:
        return
    if len(log.agents) > MAX_AGENTS:
        raise RunLogError(f"run log: {len(log.agents)} agents, the checker handles at most {MAX_AGENTS}")
    kind, unit = agent_units(log.agents)
    cmd_agent = np.asarray(log.cmd_agent, np.int64)
    if cmd_agent.min() < 0 or cmd_agent.max() >= len(log.agents):
        raise RunLogError("run log: a command's agent is not in the agent list")
    sync = [np.asarray(getattr(log, f), np.int64) for f in ("sync_kind", "sync_agent", "sync_sem", "sync_cmd")]
    pats = build_patterns(footprint_rules(), np.asarray(log.cmd_op, np.int64), unit[cmd_agent],
                          np.asarray(log.cmd_regs, np.int64), np.asarray(log.cmd_fields, np.int64),
                          np.asarray(log.cmd_params, np.int64), config.nu_rows, config.nu_cols)
    size = space_sizes(config)
    if 0 <= fault_cmd < n and program is not None:
        sync = [np.concatenate(pair) for pair in zip(sync, _continuation(log, program, fault_cmd, pats, size))]
    loads = CuLoads(sync, np.asarray(log.sync_cycle, np.int64), n)
    if loads.count:
        sync, cmd_agent, pats = loads.as_commands(sync, cmd_agent, pats)
    cmd_clock, per_agent = _local_clocks(cmd_agent, len(log.agents))
    clocks, status, bad = _command_clocks(*sync, cmd_agent, cmd_clock, len(log.agents), _mask_agents(kind, unit))
    if status != LOG_OK:
        what = ("takes a token no signal gave" if status == LOG_EMPTY_SEMAPHORE
                else "names a bad agent, command or semaphore")
        raise RunLogError(f"run log: sync event {bad} {what}")
    starts = sync[0] == START
    order = sync[3][starts]
    hit = _find_race(pats, order, cmd_agent, cmd_clock, clocks, size, len(log.agents))
    if not hit[0]:
        return
    other = int(per_agent[int(hit[3])][int(hit[4]) - 1])
    c = int(hit[1])
    start = int(log.cmd_start[c]) if c < n else int(loads.cycle[c - n])
    raise SimError(_race_message(log, program, pats, size, hit, other, fault_cmd, loads),
                   code=errors.DATA_RACE, cycle=start if start >= 0 else int(log.cycles))


class CuLoads:
    """The CU's `ld`s of a run (LOAD sync events) as commands of agent 0 that read 4 bytes of DDR.

    The CU's own clock component counts its loads: a load starts where the CU runs it, with the
    CU's clock (what its `sem.wait`s and barriers joined), and a command the CU issues after it
    carries that count, so FastTrack orders the two as it orders any two commands.
    """

    def __init__(self, sync: list[np.ndarray], cycles: np.ndarray, n_commands: int):
        self.at = np.flatnonzero(sync[0] == LOAD)
        self.count = int(self.at.size)
        self.first = n_commands                        # command id of the first load
        self.addr = sync[2][self.at]
        self.pc = sync[3][self.at] * 8
        self.cycle = cycles[self.at]

    def as_commands(self, sync: list[np.ndarray], cmd_agent: np.ndarray,
                    pats: np.ndarray) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
        """(sync with each LOAD as agent 0's START of its command, cmd_agent and pats extended)."""
        sync = [a.copy() for a in sync]
        sync[0][self.at] = START
        sync[1][self.at] = 0
        sync[3][self.at] = self.first + np.arange(self.count)
        extra = np.zeros((self.count,) + pats.shape[1:], pats.dtype)
        extra[:, 0, SPACE] = SPACE_DDR
        extra[:, 0, BASE] = self.addr
        extra[:, 0, WIDTH] = 4
        extra[:, 0, N:N + DIMS] = 1
        return sync, np.concatenate([cmd_agent, np.zeros(self.count, np.int64)]), np.concatenate([pats, extra])

    def describe(self, program, c: int) -> str:
        """'cu `ld` at pc 0x40 (k.s:12)' for load command c."""
        pc = int(self.pc[c - self.first])
        where = source_of(program, pc)
        return f"cu `ld` at pc {pc:#x}" + (f" ({where})" if where else "")


def _continuation(log, program, fault_cmd: int, pats: np.ndarray, size: np.ndarray) -> list[np.ndarray]:
    """Sync events (kind, agent, sem, cmd) for the failing command's start and the starts that follow regardless."""
    private = _private_semaphores(program, log.agents)
    kind, sem = np.asarray(log.sync_kind, np.int64), np.asarray(log.sync_sem, np.int64)
    known = (sem >= 0) & (sem < len(private))
    tokens = (np.bincount(sem[known & (kind == SIGNAL)], minlength=len(private))
              - np.bincount(sem[known & (kind == TAKE)], minlength=len(private)))     # signalled, not yet taken
    queues: dict[int, list[int]] = {}
    for c in np.flatnonzero(np.asarray(log.cmd_start) < 0):
        queues.setdefault(int(log.cmd_agent[c]), []).append(int(c))
    events = [(START, int(log.cmd_agent[fault_cmd]), -1, fault_cmd)]
    queues.pop(int(log.cmd_agent[fault_cmd]), None)      # nothing behind the failing command starts
    progress = True
    while progress:
        progress = False
        for a, pending in queues.items():
            while pending:
                c, s = pending[0], int(log.cmd_wait[pending[0]])
                if not _replayable(pats[c], size) or (s >= 0 and not (s < len(private) and private[s] == a
                                                                         and tokens[s] > 0)):
                    break
                if s >= 0:
                    tokens[s] -= 1
                    events.append((TAKE, a, s, c))
                events.append((START, a, -1, c))
                pending.pop(0)
                progress = True
    return [np.array(col, np.int64) for col in zip(*events)]


def _private_semaphores(program, agents: list[str]) -> list[int]:
    """Per semaphore, the one agent whose commands wait on it anywhere in the program (-1: none, or shared)."""
    names = {name: a for a, name in enumerate(agents)}
    waiters: dict[int, set[int]] = {}
    for word in np.unique(np.asarray(program.code, np.uint64)):
        try:
            instr, operands = decode(int(word))
        except DecodeError:
            continue
        sem = operands.get("sem") if instr.mnemonic == "sem.wait" else operands.get("wait")
        if sem is None:
            continue
        if instr.unit == "CU":
            who = -1
        else:
            who = names.get(f"{instr.unit.lower()}{operands.get('ch', operands.get('unit'))}", -1)
        waiters.setdefault(sem, set()).add(who)
    out = [-1] * (max(waiters, default=-1) + 1)
    for sem, who in waiters.items():
        if len(who) == 1:
            out[sem] = next(iter(who))
    return out


def _replayable(pats: np.ndarray, size: np.ndarray) -> bool:
    """Every pattern of a command that never ran lies inside its memory and is small enough to replay."""
    for pat in pats:
        n, stride = pat[N:N + DIMS], pat[S:S + DIMS]
        if pat[WIDTH] <= 0 or ((n == 0).any() and (n >= 0).all()):
            continue            # touches nothing: e.g. the read side of a DMA that only fills padding
        sp = int(pat[SPACE])
        if not 0 <= sp < size.shape[0] or (n < 1).any() or int(np.prod(n, dtype=np.float64)) > MAX_PENDING_ELEMENTS:
            return False
        reach = (n - 1) * stride
        lo = int(pat[BASE] + reach[reach < 0].sum())
        hi = int(pat[BASE] + reach[reach > 0].sum() + pat[WIDTH])
        if lo < 0 or hi > size[sp]:
            return False
    return True
