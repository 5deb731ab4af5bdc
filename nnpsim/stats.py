"""Run statistics: cycles and time, unit utilisation, MACs, bytes per memory, stalls.

Everything is derived from a RunLog.  A command that started but had not
ended when the run stopped counts as busy up to the last cycle; DMA traffic
counts every command that started (its copy is applied when it starts).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import numpy as np

from .config import Config
from .footprint import DMA_ELEM, DMA_PAD_HI0, DMA_PAD_LO0, DMA_SIZE0, RULE_DMA, footprint_rules, space_name
from .param_warnings import run_warnings
from .runlog import STALL_BANDWIDTH, STALL_BARRIER, STALL_QUEUE_FULL, STALL_SEMAPHORE, TAKE, RunLog

STALL_NAMES = {STALL_QUEUE_FULL: "queue_full", STALL_SEMAPHORE: "semaphore_wait",
               STALL_BARRIER: "barrier", STALL_BANDWIDTH: "memory_bandwidth"}


@dataclass
class UnitStats:
    """One NU, VU or DMA channel."""

    commands: int
    busy_cycles: int
    busy_pct: float


@dataclass
class MemoryTraffic:
    """Bytes DMA moved out of (read) and into (written) one memory."""

    read_bytes: int
    written_bytes: int


@dataclass
class SemaphoreWaits:
    """Waits for one semaphore's tokens that ended with a token taken."""

    waits: int
    wait_cycles: int


@dataclass
class Stats:
    """Summary of one run (see docs/simulator.md, "The summary")."""

    cycles: int
    clock_ghz: float
    time_ns: float
    time_us: float
    instructions: int
    commands: int
    units: dict[str, UnitStats]
    macs: int
    macs_per_cycle: float
    peak_macs_per_cycle: int
    mac_utilization_pct: float
    memory: dict[str, MemoryTraffic]
    ddr_bytes_per_cycle: float
    peak_ddr_bytes_per_cycle: int
    ddr_utilization_pct: float
    ddr_bytes: int
    """Bytes DMA moved out of and into DDR (memory["ddr"]: read plus written)."""
    ddr_burst_bytes: int
    """Bytes of the aligned DDR bursts those transfers touched, read and written sides summed
    (docs/timing.md, DDR bursts): what DDR's port had to move for them."""
    ddr_burst_size: int
    ddr_burst_use_pct: float
    """ddr_bytes / ddr_burst_bytes in percent: how much of the bursts was wanted."""
    stalls: dict[str, dict[str, int]]
    semaphore_waits: int
    semaphore_wait_cycles: int
    semaphores: dict[str, SemaphoreWaits]
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    """Commands that read a parameter never set, where its reset value spoils the result."""

    def to_dict(self) -> dict:
        """Plain nested dict (JSON types only)."""
        return asdict(self)

    def to_json(self) -> str:
        """The stats as a JSON document; the total cycle count is the top-level integer "cycles"."""
        return json.dumps(self.to_dict(), indent=2) + "\n"


def _pct(part: float, whole: float) -> float:
    return round(100.0 * part / whole, 2) if whole > 0 else 0.0


def _durations(start: np.ndarray, end: np.ndarray, cycles: int) -> np.ndarray:
    """end - start, with an open end (-1) closed at `cycles`; 0 for never started."""
    start = np.asarray(start, np.int64)
    end = np.where(np.asarray(end, np.int64) < 0, cycles, end)
    return np.where(start < 0, 0, np.maximum(end - start, 0))


def _units(log: RunLog) -> dict[str, UnitStats]:
    n_agents = len(log.agents)
    agent = np.asarray(log.cmd_agent, np.int64)
    busy = np.bincount(agent, _durations(log.cmd_start, log.cmd_end, log.cycles), n_agents)
    count = np.bincount(agent, minlength=n_agents)
    return {log.agents[a]: UnitStats(int(count[a]), int(busy[a]), _pct(busy[a], log.cycles))
            for a in range(1, n_agents)}


def _dma_read_bytes(params: np.ndarray) -> np.ndarray:
    """Bytes each DMA reads from its source: the inner (unpadded) box."""
    inner = (params[:, DMA_SIZE0:DMA_SIZE0 + 4] - params[:, DMA_PAD_LO0:DMA_PAD_LO0 + 4]
             - params[:, DMA_PAD_HI0:DMA_PAD_HI0 + 4])
    return np.prod(np.maximum(inner, 0), axis=1) * params[:, DMA_ELEM]


def _memory(log: RunLog) -> dict[str, MemoryTraffic]:
    ops = np.asarray(log.cmd_op, np.int64)
    classes = footprint_rules()
    valid = (ops >= 0) & (ops < classes.size)
    is_dma = valid & (classes[np.where(valid, ops, 0)] == RULE_DMA) & (np.asarray(log.cmd_start) >= 0)
    fields = np.asarray(log.cmd_fields, np.int64)[is_dma]
    written = np.asarray(log.cmd_bytes, np.int64)[is_dma]
    read = _dma_read_bytes(np.asarray(log.cmd_params, np.int64)[is_dma])
    out: dict[str, MemoryTraffic] = {}
    for space in sorted(set(fields[:, 0].tolist()) | set(fields[:, 1].tolist())):
        out[space_name(space)] = MemoryTraffic(int(read[fields[:, 1] == space].sum()),
                                               int(written[fields[:, 0] == space].sum()))
    return out


def _stalls(log: RunLog) -> dict[str, dict[str, int]]:
    """Stall cycles per agent (in agent order) and reason (by name), summed over the stall rows (vectorised:
    a network has thousands)."""
    cycles = _durations(log.stall_start, log.stall_end, log.cycles)
    agent = np.asarray(log.stall_agent, np.int64)
    reason = np.asarray(log.stall_reason, np.int64)
    out: dict[str, dict[str, int]] = {}
    for a in np.unique(agent).tolist():
        mine = agent == a
        reasons, at = np.unique(reason[mine], return_inverse=True)
        sums = np.zeros(reasons.size, np.int64)
        np.add.at(sums, at, cycles[mine])
        per = {STALL_NAMES.get(r, f"reason{r}"): int(c) for r, c in zip(reasons.tolist(), sums.tolist())}
        out[log.agents[a]] = dict(sorted(per.items()))
    return out


def taken_semaphores(log: RunLog) -> dict[tuple[int, int], int]:
    """(agent, cycle) -> semaphore of every token taken: a wait by agent a that ends at t took it."""
    take = np.asarray(log.sync_kind) == TAKE
    return {(a, t): s for a, t, s in zip(np.asarray(log.sync_agent)[take].tolist(),
                                         np.asarray(log.sync_cycle)[take].tolist(),
                                         np.asarray(log.sync_sem)[take].tolist())}


def _last_takes(log: RunLog, agent: int) -> tuple[np.ndarray, np.ndarray]:
    """The cycles at which `agent` took a token, sorted and distinct, and the semaphore taken at each (the last
    row's, as taken_semaphores keeps it)."""
    take = (np.asarray(log.sync_kind) == TAKE) & (np.asarray(log.sync_agent) == agent)
    cycle = np.asarray(log.sync_cycle, np.int64)[take][::-1]        # last first: np.unique keeps the first
    sem = np.asarray(log.sync_sem, np.int64)[take][::-1]
    cycles, first = np.unique(cycle, return_index=True)
    return cycles, sem[first]


def _semaphores(log: RunLog) -> dict[str, SemaphoreWaits]:
    """Semaphore waits by semaphore (only waits that ended with a token taken: taken_semaphores' (agent, end)),
    vectorised per agent."""
    waits = np.asarray(log.stall_reason) == STALL_SEMAPHORE
    agent = np.asarray(log.stall_agent, np.int64)[waits]
    start = np.asarray(log.stall_start, np.int64)[waits]
    end = np.asarray(log.stall_end, np.int64)[waits]
    sems, spans = [], []
    for a in np.unique(agent).tolist():
        mine = agent == a
        cycles, sem = _last_takes(log, a)
        if cycles.size == 0:
            continue
        at = np.minimum(np.searchsorted(cycles, end[mine]), cycles.size - 1)
        hit = cycles[at] == end[mine]
        sems.append(sem[at][hit])
        spans.append((end[mine] - start[mine])[hit])
    if not sems:
        return {}
    sem_all, span_all = np.concatenate(sems), np.concatenate(spans)
    ids, at = np.unique(sem_all, return_inverse=True)
    total = np.zeros(ids.size, np.int64)
    np.add.at(total, at, span_all)
    count = np.bincount(at, minlength=ids.size)
    return {f"s{s}": SemaphoreWaits(int(n), int(c)) for s, n, c in zip(ids.tolist(), count.tolist(), total.tolist())}


def summarize(log: RunLog, program, config: Config, warnings: bool = True) -> Stats:
    """Statistics of the run recorded in `log` (with its parameter warnings unless told not to)."""
    cycles = int(log.cycles)
    macs = int(np.asarray(log.cmd_macs, np.int64).sum())
    memory = _memory(log)
    ddr = memory.get("ddr", MemoryTraffic(0, 0))
    ddr_bytes = ddr.read_bytes + ddr.written_bytes
    ddr_rate = ddr_bytes / cycles if cycles else 0.0
    started = np.asarray(log.cmd_start) >= 0
    burst = np.asarray(log.cmd_ddr_burst_bytes, np.int64)
    ddr_burst = int(burst[started[:burst.size]].sum()) if burst.size else 0
    sem_stalls = np.asarray(log.stall_reason) == STALL_SEMAPHORE
    error = getattr(log, "error", None)
    return Stats(
        cycles=cycles, clock_ghz=float(config.clock_ghz),
        time_ns=round(cycles / config.clock_ghz, 3), time_us=round(cycles / config.clock_ghz / 1000, 6),
        instructions=int(log.instructions), commands=int(len(log.cmd_agent)), units=_units(log),
        macs=macs, macs_per_cycle=round(macs / cycles, 3) if cycles else 0.0,
        peak_macs_per_cycle=config.peak_macs_per_cycle,
        mac_utilization_pct=_pct(macs, cycles * config.peak_macs_per_cycle),
        memory=memory, ddr_bytes_per_cycle=round(ddr_rate, 3),
        peak_ddr_bytes_per_cycle=config.ddr_bytes_per_cycle,
        ddr_utilization_pct=_pct(ddr_rate, config.ddr_bytes_per_cycle),
        ddr_bytes=ddr_bytes, ddr_burst_bytes=ddr_burst, ddr_burst_size=config.ddr_burst_bytes,
        ddr_burst_use_pct=_pct(ddr_bytes, ddr_burst),
        stalls=_stalls(log), semaphore_waits=int(sem_stalls.sum()),
        semaphore_wait_cycles=int(_durations(log.stall_start, log.stall_end, cycles)[sem_stalls].sum()),
        semaphores=_semaphores(log),
        error=None if error is None else str(error),
        warnings=run_warnings(log, program) if warnings else [])


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    """Text columns: the first left-aligned, the others right-aligned."""
    widths = [max(len(r[i]) for r in [header] + rows) for i in range(len(header))]
    return ["  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
            for r in [header] + rows]


def format_summary(stats: Stats) -> str:
    """A readable multi-line summary for the terminal."""
    s = stats
    lines = [f"cycles       {s.cycles:,}  ({s.time_us:,.3f} us at {s.clock_ghz:g} GHz)",
             f"instructions {s.instructions:,} (CU), {s.commands:,} commands issued",
             f"MACs         {s.macs:,}  ({s.macs_per_cycle:,.1f} per cycle, {s.mac_utilization_pct:.1f}% of "
             f"peak {s.peak_macs_per_cycle:,})",
             f"DDR          {s.ddr_bytes_per_cycle:,.2f} bytes/cycle ({s.ddr_utilization_pct:.1f}% of "
             f"{s.peak_ddr_bytes_per_cycle} peak)",
             f"DDR bursts   {s.ddr_bytes:,} bytes moved in {s.ddr_burst_bytes:,} bytes of {s.ddr_burst_size}-byte "
             f"bursts ({s.ddr_burst_use_pct:.1f}% used)", ""]
    lines += _table(["unit", "commands", "busy cycles", "busy %"],
                    [[u, f"{v.commands:,}", f"{v.busy_cycles:,}", f"{v.busy_pct:.1f}"] for u, v in s.units.items()])
    if s.memory:
        lines.append("")
        lines += _table(["memory", "DMA read bytes", "DMA written bytes"],
                        [[m, f"{v.read_bytes:,}", f"{v.written_bytes:,}"] for m, v in s.memory.items()])
    if s.stalls:
        reasons = list(STALL_NAMES.values())
        lines.append("")
        lines += _table(["stall cycles"] + [r.replace("_", " ") for r in reasons],
                        [[a] + [f"{v.get(r, 0):,}" for r in reasons] for a, v in s.stalls.items()])
    lines.append("")
    per = ", ".join(f"{k}: {v.waits:,} ({v.wait_cycles:,} cycles)" for k, v in s.semaphores.items())
    lines.append(f"semaphore waits: {s.semaphore_waits:,} ({s.semaphore_wait_cycles:,} cycles)"
                 + (f"; {per}" if per else ""))
    lines += [f"warning: {w}" for w in s.warnings]
    if s.error:
        lines.append(f"stopped by error: {s.error}")
    return "\n".join(lines) + "\n"
