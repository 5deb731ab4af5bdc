"""Perfetto/Chrome trace: valid JSON, one slice per command at its cycles, tracks, counters, determinism."""
from __future__ import annotations

import json

import numpy as np

from isa_spec import load_isa
from nnpsim.runlog import CTR_DDR_BYTES, STALL_BANDWIDTH, STALL_SEMAPHORE, TAKE
from nnpsim.trace import trace_json, write_trace
from tests.helpers.races import SMALL, CuWait, conv, row, run_conv, schedule, vu

ISA = load_isa()


def sample_log():
    """A run with every unit kind, waits, counters and stalls."""
    prog = [row(0, ("ibuf0", 0), ("ddr", 0x40), 64, signal=0, dur=30),
            row(1, ("wbuf0", 0), ("ddr", 0x1000), 144, signal=1, dur=20), CuWait(1),
            conv(0, 0, 0, 0, in_h=4, in_w=4, out_h=2, out_w=2, k_h=3, k_w=3, wait=0, signal=2, dur=25),
            row(2, ("vbuf0", 0), ("abuf0", 0), 64, wait=2, signal=3, dur=9),
            vu(0, "vu.clip", 64, 0, n0=64, d_stride0=1, a_stride0=1, wait=3, dur=5)]
    log = schedule(prog)
    log.ctr_cycle = np.array([0, 1, 1, 5, 30])
    log.ctr_id = np.array([3, 3, CTR_DDR_BYTES, 1, CTR_DDR_BYTES])
    log.ctr_value = np.array([1, 0, 32, 1, 0])
    log.stall_agent = np.array([0, 1, 3])
    log.stall_reason = np.array([STALL_SEMAPHORE, STALL_SEMAPHORE, STALL_BANDWIDTH])
    log.stall_start = np.array([3, 4, 5])
    log.stall_end = np.array([21, 31, 9])
    return log


def events(log, program=None):
    return json.loads(trace_json(log, program, SMALL))["traceEvents"]


def test_every_command_is_one_slice_at_its_cycles():
    log = sample_log()
    slices = [e for e in events(log) if e["ph"] == "X" and e["cat"] != "stall"]
    assert len(slices) == len(log.cmd_agent)
    for e in slices:
        c = e["args"]["command"]
        assert e["tid"] == log.cmd_agent[c]
        assert e["ts"] == log.cmd_start[c] and e["dur"] == log.cmd_end[c] - log.cmd_start[c]
        assert e["name"] == ISA.instructions[log.cmd_op[c]].mnemonic
        assert e["args"]["pc"] == hex(log.cmd_pc[c]) and e["args"]["issue_cycle"] == log.cmd_issue[c]


def test_slice_args_name_params_operands_and_sync():
    log = sample_log()

    class Prog:
        lines = [("t.s", n + 1) for n in range(10)]

    by_cmd = {e["args"]["command"]: e for e in events(log, Prog()) if e["ph"] == "X" and e["cat"] != "stall"}
    nu = by_cmd[2]["args"]
    # every nu.* parameter: nu.conv's 13, the output stage's 6 (nu.conv.rq's 5, nu.conv.acc.rq's rq_psum) and the
    # float mode's 11
    assert nu["params"]["nu.k_h"] == 3 and nu["params"]["nu.in_w"] == 4 and len(nu["params"]) == 30
    assert nu["operands"] == {"acc": "abuf0[0x0]", "in": "ibuf0[0x0]", "w": "wbuf0[0x0]"}
    assert nu["wait"] == "s0" and nu["signal"] == "s2" and nu["source"] == "t.s:4"
    d = by_cmd[1]["args"]
    assert d["operands"] == {"dst": "wbuf0[0x0]", "src": "ddr[0x1000]"} and d["bytes"] == 144
    assert d["params"]["dma.size0"] == 144 and d["wait"] is None
    v = by_cmd[4]["args"]
    assert v["operands"] == {"d": "vbuf0[0x40]", "a": "vbuf0[0x0]"} and v["params"]["vu.n0"] == 64


def test_tracks_are_named_and_slices_nest():
    log = sample_log()
    ev = events(log)
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    n = len(log.agents)
    assert [names[a] for a in range(n)] == log.agents
    assert names[n + 1] == "nu0 stalls"
    assert any(e["name"] == "process_name" and e["args"]["name"] == "NNP-1" for e in ev)
    for tid in names:
        spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["ph"] == "X" and e["tid"] == tid)
        assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), f"overlapping slices on track {tid}"


def test_stalls_on_their_tracks():
    log = sample_log()
    stalls = [e for e in events(log) if e["ph"] == "X" and e["cat"] == "stall"]
    got = sorted((e["tid"], e["ts"], e["dur"], e["name"]) for e in stalls)
    n = len(log.agents)
    assert got == [(0, 3, 18, "stall: semaphore wait"), (n + 1, 4, 27, "stall: semaphore wait"),
                   (n + 3, 5, 4, "stall: memory bandwidth")]


def test_semaphore_stall_names_its_semaphore():
    log = schedule([row(0, ("dm", 0), ("ddr", 0), 8, signal=2, dur=20), CuWait(2)])
    take = int(log.sync_cycle[list(log.sync_kind).index(TAKE)])
    log.stall_agent, log.stall_reason = np.array([0]), np.array([STALL_SEMAPHORE])
    log.stall_start, log.stall_end = np.array([take - 15]), np.array([take])
    (e,) = [e for e in events(log) if e["ph"] == "X" and e["cat"] == "stall"]
    assert e["args"] == {"agent": "cu", "reason": "semaphore wait", "semaphore": "s2"} and e["dur"] == 15


def test_counters_present():
    log = sample_log()
    counters = [(e["ts"], e["name"], e["args"]) for e in events(log) if e["ph"] == "C"]
    assert sorted(counters, key=str) == sorted([
        (0, "queue dma0", {"commands": 1}), (1, "queue dma0", {"commands": 0}),
        (1, "DDR bytes/cycle", {"bytes": 32}), (5, "queue nu0", {"commands": 1}),
        (30, "DDR bytes/cycle", {"bytes": 0})], key=str)


def test_unfinished_command_runs_to_the_last_cycle():
    log = schedule([row(0, ("dm", 0), ("ddr", 0), 8, dur=100)])
    log.cycles = 40
    log.cmd_end = np.array([-1])
    (e,) = [e for e in events(log) if e["ph"] == "X"]
    assert e["dur"] == 40 - log.cmd_start[0] and e["args"]["unfinished"] is True


def test_deterministic_and_documents_its_time_unit(tmp_path):
    log = sample_log()
    write_trace(tmp_path / "a.json", log, None, SMALL)
    write_trace(tmp_path / "b.json", sample_log(), None, SMALL)
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    doc = json.loads((tmp_path / "a.json").read_text())
    assert doc["otherData"]["time_unit"] == "1 us of trace time = 1 clock cycle"
    assert doc["otherData"]["cycles"] == log.cycles


def test_real_run_trace(tmp_path):
    sim, stats = run_conv()
    path = tmp_path / "t.json"
    sim.run(trace=path)         # run again, now writing the trace
    log = sim.last_log
    doc = json.loads(path.read_text())
    slices = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["cat"] != "stall"]
    assert sorted(e["args"]["command"] for e in slices) == list(range(len(log.cmd_agent)))
    assert {e["name"] for e in slices} == {"dma", "nu.conv"}
    assert all(e["args"]["source"].startswith("conv.s:") for e in slices)
    assert any(e["ph"] == "C" and e["name"] == "DDR bytes/cycle" for e in doc["traceEvents"])
    assert any(e["ph"] == "C" and e["name"] == "queue nu0" for e in doc["traceEvents"])
    assert doc["otherData"]["cycles"] == log.cycles == stats.cycles
