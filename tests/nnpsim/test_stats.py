"""Stats: utilisation, MACs, bytes per memory, stalls; JSON form and the terminal summary."""
from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from nnpsim.config import Config
from nnpsim.runlog import STALL_BANDWIDTH, STALL_BARRIER, STALL_QUEUE_FULL, STALL_SEMAPHORE, TAKE
from nnpsim.stats import STALL_NAMES, Stats, format_summary, summarize, taken_semaphores
from tests.helpers.races import SMALL, Barrier, CuWait, conv, dma, row, run_conv, schedule, vu


def program():
    """DMA with padding, a conv and a VU op, with known durations, bytes and MACs."""
    pad = dma(0, ("ibuf0", 0), ("ddr", 0x100), sizes=(6, 6, 1, 1), dst_strides=(1, 6, 0, 0),
              src_strides=(1, 4, 0, 0), pad_lo=(1, 1, 0, 0), pad_hi=(1, 1, 0, 0), signal=0, dur=40)
    weights = row(1, ("wbuf0", 0), ("dm", 0), 144, signal=1, dur=25)
    cv = conv(0, 0, 0, 0, in_h=4, in_w=4, out_h=2, out_w=2, k_h=3, k_w=3, wait=0, dur=30, macs=2 * 2 * 9 * 16)
    out = dma(2, ("vbuf0", 0), ("abuf0", 0), sizes=(16, 1, 1, 1), dst_strides=(4, 0, 0, 0),
              src_strides=(4, 0, 0, 0), elem=4, dur=12)
    clip = vu(0, "vu.clip", 64, 0, n0=64, d_stride0=1, a_stride0=1, dur=7)
    return [pad, weights, CuWait(1), cv, Barrier(0x0001), out, Barrier(0x0400), clip]


def test_counts_and_utilisation_match_the_program():
    log = schedule(program())
    s = summarize(log, None, SMALL)
    assert s.cycles == log.cycles and s.instructions == log.instructions and s.commands == 5
    expect_busy = {"nu0": 30, "vu0": 7, "dma0": 40, "dma1": 25, "dma2": 12, "dma3": 0}
    assert {u: v.busy_cycles for u, v in s.units.items()} == expect_busy
    assert {u: v.commands for u, v in s.units.items()} == {"nu0": 1, "vu0": 1, "dma0": 1, "dma1": 1,
                                                           "dma2": 1, "dma3": 0}
    assert s.units["dma0"].busy_pct == pytest.approx(100 * 40 / log.cycles, abs=0.01)
    assert s.macs == 576 and s.peak_macs_per_cycle == 16
    assert s.macs_per_cycle == pytest.approx(576 / log.cycles, abs=1e-3)
    assert s.mac_utilization_pct == pytest.approx(100 * 576 / (16 * log.cycles), abs=0.01)


def test_bytes_per_memory_from_dma_spaces():
    s = summarize(schedule(program()), None, SMALL)
    m = {k: (v.read_bytes, v.written_bytes) for k, v in s.memory.items()}
    # padded load: 36 bytes written (padding included), 16 read; weights 144; abuf -> vbuf 64
    assert m == {"ddr": (16, 0), "dm": (144, 0), "ibuf0": (0, 36), "wbuf0": (0, 144), "abuf0": (64, 0),
                 "vbuf0": (0, 64)}
    assert s.ddr_bytes_per_cycle == pytest.approx(16 / s.cycles, abs=1e-3)


def test_time_follows_the_clock():
    log = schedule(program())
    s = summarize(log, None, replace(SMALL, clock_ghz=0.5))
    assert s.time_ns == pytest.approx(2 * log.cycles) and s.time_us == pytest.approx(2 * log.cycles / 1000)


def test_stalls_per_agent_and_reason():
    log = schedule(program())
    log.stall_agent = np.array([0, 0, 0, 1, 3, 3, 0])
    log.stall_reason = np.array([STALL_QUEUE_FULL, STALL_SEMAPHORE, STALL_BARRIER, STALL_SEMAPHORE,
                                 STALL_BANDWIDTH, STALL_BANDWIDTH, STALL_QUEUE_FULL])
    log.stall_start = np.array([1, 5, 20, 3, 10, 30, 50])
    log.stall_end = np.array([4, 9, 26, 8, 15, -1, 52])
    s = summarize(log, None, SMALL)
    assert s.stalls == {"cu": {"barrier": 6, "queue_full": 5, "semaphore_wait": 4},
                        "nu0": {"semaphore_wait": 5},
                        "dma0": {"memory_bandwidth": 5 + log.cycles - 30}}
    assert s.semaphore_waits == 2 and s.semaphore_wait_cycles == 9


def test_unfinished_command_is_busy_to_the_end():
    log = schedule([row(0, ("dm", 0), ("ddr", 0), 8, dur=100), row(1, ("dm", 8), ("ddr", 8), 8, dur=5)])
    log.cycles = 50
    log.cmd_end = np.array([-1, log.cmd_end[1]])
    s = summarize(log, None, SMALL)
    assert s.units["dma0"].busy_cycles == 50 - log.cmd_start[0]
    assert s.units["dma1"].busy_cycles == 5


def test_json_has_top_level_integer_cycles_and_round_trips():
    s = summarize(schedule(program()), None, SMALL)
    doc = json.loads(s.to_json())
    assert isinstance(doc["cycles"], int) and doc["cycles"] == s.cycles
    assert doc["units"]["nu0"]["busy_cycles"] == 30
    assert doc["memory"]["wbuf0"]["written_bytes"] == 144
    assert set(doc) == set(Stats.__dataclass_fields__)


def test_summary_table_names_every_unit_and_memory():
    s = summarize(schedule(program()), None, SMALL)
    text = format_summary(s)
    for unit in s.units:
        assert any(line.split()[:1] == [unit] for line in text.splitlines())
    assert f"cycles       {s.cycles:,}" in text and "576" in text
    line = next(l for l in text.splitlines() if l.startswith("wbuf0"))
    assert line.split()[1:] == ["0", "144"]


def test_real_run_stats():
    _, s = run_conv()
    assert s.macs == 2 * 2 * 9 * 32 * 32
    assert s.peak_macs_per_cycle == Config().peak_macs_per_cycle
    assert s.memory["ddr"].read_bytes == 512 + 9216 and s.memory["ddr"].written_bytes == 512
    assert s.memory["abuf0"].read_bytes == 512
    assert s.units["nu0"].commands == 1 and s.units["dma2"].commands == 1
    assert s.semaphore_waits >= 1 and s.error is None


def test_ddr_bytes_moved_and_burst_bytes():
    from nnpasm import assemble
    from nnpsim.simulator import Simulator
    # 8 bytes 128 apart read from DDR (a 64-byte burst each), then 100 contiguous bytes written
    # at DDR 32 (bytes 32..131: three bursts)
    src = """
        setpi   dma.size0, 8
        setpi   dma.src_stride0, 128
        setpi   dma.dst_stride0, 1
        li      r1, 0x1000
        dma     ch0, dm[r0], ddr[r1], signal=s0
        setpi   dma.size0, 100
        setpi   dma.src_stride0, 1
        li      r2, 32
        dma     ch1, ddr[r2], dm[r0], wait=s0
        halt
    """
    from nnpsim.config import Config
    sim = Simulator(Config(ddr_burst_bytes=64))
    sim.load(assemble(src, "b.s"))
    s = sim.run()
    assert (s.memory["ddr"].read_bytes, s.memory["ddr"].written_bytes) == (8, 100)
    assert (s.ddr_bytes, s.ddr_burst_bytes, s.ddr_burst_size) == (108, 8 * 64 + 3 * 64, 64)
    assert s.ddr_burst_use_pct == round(100 * 108 / 704, 2)
    assert "DDR bursts   108 bytes moved in 704 bytes of 64-byte bursts (15.3% used)" in format_summary(s)
    assert json.loads(s.to_json())["ddr_burst_bytes"] == 704


def test_program_without_commands():
    from nnpasm import assemble
    from nnpsim.simulator import Simulator
    from nnpsim.trace import trace_json
    sim = Simulator()
    sim.load(assemble("    nop\n    halt\n", "h.s"))
    s = sim.run(check_races=True)
    assert s.commands == 0 and s.macs == 0 and s.memory == {} and s.stalls == {}
    assert s.cycles == sim.last_log.cycles and s.instructions == 2
    assert all(u.busy_cycles == 0 and u.busy_pct == 0.0 for u in s.units.values())
    assert "cycles" in format_summary(s)
    doc = json.loads(trace_json(sim.last_log, None, Config()))
    assert not [e for e in doc["traceEvents"] if e["ph"] == "X"]


def test_semaphore_waits_by_semaphore():
    """A wait ending at cycle t is attributed to the token its agent took at t; open waits only to the total."""
    log = schedule(program())
    take = log.sync_kind == TAKE
    takes = list(zip(log.sync_agent[take].tolist(), log.sync_cycle[take].tolist(), log.sync_sem[take].tolist()))
    assert len(takes) == 2              # the CU's sem.wait s1 and the conv's wait on s0
    (a0, t0, s0), (a1, t1, s1) = takes
    log.stall_agent = np.array([a0, a1, 3])
    log.stall_reason = np.array([STALL_SEMAPHORE] * 3)
    log.stall_start = np.array([t0 - 7, t1 - 2, 40])
    log.stall_end = np.array([t0, t1, -1])
    s = summarize(log, None, SMALL)
    assert {k: (v.waits, v.wait_cycles) for k, v in s.semaphores.items()} == {f"s{s0}": (1, 7), f"s{s1}": (1, 2)}
    assert s.semaphore_waits == 3 and s.semaphore_wait_cycles == 9 + log.cycles - 40
    assert f"s{s0}: 1 (7 cycles)" in format_summary(s)


def test_real_run_semaphore_breakdown_adds_up():
    _, s = run_conv()
    assert s.semaphores and set(s.semaphores) <= {"s0", "s1", "s2"}
    assert sum(v.waits for v in s.semaphores.values()) == s.semaphore_waits
    assert sum(v.wait_cycles for v in s.semaphores.values()) == s.semaphore_wait_cycles


def _stalls_row_by_row(log) -> dict[str, dict[str, int]]:
    """The stall summary by its definition, one stall row at a time (what the vectorised one must equal)."""
    out: dict[str, dict[str, int]] = {}
    for a, reason, start, end in zip(log.stall_agent.tolist(), log.stall_reason.tolist(), log.stall_start.tolist(),
                                     log.stall_end.tolist()):
        c = 0 if start < 0 else max((log.cycles if end < 0 else end) - start, 0)
        per = out.setdefault(log.agents[a], {})
        name = STALL_NAMES.get(reason, f"reason{reason}")
        per[name] = per.get(name, 0) + c
    return {a: dict(sorted(v.items())) for a, v in sorted(out.items(), key=lambda kv: log.agents.index(kv[0]))}


def _semaphores_row_by_row(log) -> dict[str, tuple[int, int]]:
    """Semaphore waits by their definition: each wait whose (agent, end) is a taken token's, the last such take."""
    sem_of = taken_semaphores(log)
    out: dict[int, list[int]] = {}
    for a, reason, start, end in zip(log.stall_agent.tolist(), log.stall_reason.tolist(), log.stall_start.tolist(),
                                     log.stall_end.tolist()):
        s = sem_of.get((a, end)) if reason == STALL_SEMAPHORE else None
        if s is not None:
            w = out.setdefault(s, [0, 0])
            w[0] += 1
            w[1] += end - start
    return {f"s{s}": tuple(out[s]) for s in sorted(out)}


@pytest.mark.parametrize("seed", range(4))
def test_stall_and_semaphore_sums_equal_their_row_by_row_definitions(seed):
    """Random stall and take rows (open waits, unknown reasons, several takes at one (agent, cycle), waits no take
    ends): the vectorised sums equal the row-by-row ones."""
    rng = np.random.default_rng(seed)
    log = schedule(program())
    n_agents, n = len(log.agents), int(rng.integers(0, 60))
    log.stall_agent = rng.integers(0, n_agents, n)
    log.stall_reason = rng.choice([STALL_QUEUE_FULL, STALL_SEMAPHORE, STALL_BARRIER, STALL_BANDWIDTH, 7], n)
    log.stall_start = rng.integers(-1, log.cycles, n)
    log.stall_end = np.where(rng.random(n) < 0.2, -1, log.stall_start + rng.integers(0, 9, n))
    k = int(rng.integers(0, 40))
    log.sync_kind = np.concatenate([log.sync_kind, np.full(k, TAKE)])
    log.sync_agent = np.concatenate([log.sync_agent, rng.integers(0, n_agents, k)])
    log.sync_cycle = np.concatenate([log.sync_cycle, rng.choice(log.stall_end, k) if n else rng.integers(0, 9, k)])
    log.sync_sem = np.concatenate([log.sync_sem, rng.integers(0, 4, k)])
    log.sync_cmd = np.concatenate([log.sync_cmd, np.full(k, -1)])
    s = summarize(log, None, SMALL)
    assert s.stalls == _stalls_row_by_row(log)
    assert {k: (v.waits, v.wait_cycles) for k, v in s.semaphores.items()} == _semaphores_row_by_row(log)
