"""Perfetto / Chrome trace-event JSON of a run: one track per unit, one slice per command.

Time axis: 1 microsecond of trace time is 1 clock cycle (whatever the
configured clock), so a slice's ts and dur are exact cycle counts; the
metadata (`otherData`) says so and gives the clock.  Open the file in
https://ui.perfetto.dev or chrome://tracing.

Tracks (threads of process "NNP-1"): tid 0 is the CU (its stall slices),
tid a is agent a of the RunLog (nu0.., vu0.., dma0..), tid n_agents + a the
stalls of unit a (kept apart so that they never break slice nesting).
Counter tracks: "queue <unit>" (commands waiting in each queue) and
"DDR bytes/cycle" (DDR bandwidth in use).  Output is deterministic.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from isa_spec import load_isa

from .config import Config
from .footprint import agent_units
from .isa_layout import ABUF, GROUP_BASE, IBUF, VBUF, WBUF, space_name
from .races import source_of
from .runlog import CTR_DDR_BYTES, STALL_SEMAPHORE, RunLog
from .stats import STALL_NAMES, taken_semaphores

PID = 1
GROUP_PREFIX = {"DMA": "dma.", "NU": "nu.", "VU": "vu."}
DTYPE_NAMES = {0: "i8", 2: "i32"}


def _where(space: int, addr: int) -> str:
    return f"{space_name(space)}[{addr:#x}]"


def _operands(instr, unit: int, regs: list[int], fields: list[int]) -> dict:
    """Memory operands (space[address]) and type fields of one command."""
    if instr.unit == "DMA":
        return {"dst": _where(fields[0], regs[0]), "src": _where(fields[1], regs[1])}
    if instr.unit == "NU":
        return {"acc": _where(ABUF + unit, regs[0]), "in": _where(IBUF + unit, regs[1]),
                "w": _where(WBUF + unit, regs[2])}
    out = {"d": _where(VBUF + unit, regs[0]), "a": _where(VBUF + unit, regs[1])}
    if "rb" in instr.fields:
        out["b"] = _where(VBUF + unit, regs[2])
    for name, col in (("sdt", 1), ("ddt", 2)):
        if name in instr.fields:
            out[name] = DTYPE_NAMES.get(fields[col], str(fields[col]))
    return out


def _group_params(unit_kind: str, params: list[int]) -> dict[str, int]:
    isa = load_isa()
    base, prefix = GROUP_BASE[unit_kind], GROUP_PREFIX[unit_kind]
    return {name: params[num - base] for name, num in isa.params.items() if name.startswith(prefix)}


def _sem(v: int) -> str | None:
    return None if v < 0 else f"s{v}"


def _command_events(log: RunLog, program) -> list[dict]:
    isa = load_isa()
    _, unit_of = agent_units(log.agents)
    cols = [np.asarray(getattr(log, f)).tolist() for f in
            ("cmd_agent", "cmd_op", "cmd_pc", "cmd_issue", "cmd_start", "cmd_end", "cmd_regs", "cmd_fields",
             "cmd_params", "cmd_wait", "cmd_signal", "cmd_signal2", "cmd_bytes", "cmd_macs")]
    events = []
    for c, (a, op, pc, issue, start, end, regs, fields, params, wait, signal, signal2, nbytes,
            macs) in enumerate(zip(*cols)):
        if start < 0:
            continue
        instr = isa.instructions[op] if 0 <= op < len(isa.instructions) else None
        args = {"command": c, "pc": f"{pc:#x}"}
        where = source_of(program, pc)
        if where:
            args["source"] = where
        args["issue_cycle"] = issue
        if instr is not None and instr.unit in GROUP_BASE:
            args["operands"] = _operands(instr, int(unit_of[a]), regs, fields)
            args["params"] = _group_params(instr.unit, params)
        args.update({"bytes": nbytes, "macs": macs, "wait": _sem(wait), "signal": _sem(signal),
                     "signal2": _sem(signal2)})
        if end < 0:
            args["unfinished"] = True
            end = log.cycles
        events.append({"ph": "X", "pid": PID, "tid": a, "ts": start, "dur": max(end - start, 0),
                       "name": instr.mnemonic if instr is not None else f"op{op}",
                       "cat": log.agents[a].rstrip("0123456789"), "args": args})
    return events


def _stall_events(log: RunLog) -> list[dict]:
    n = len(log.agents)
    sem_of = taken_semaphores(log)
    events = []
    for a, reason, start, end in zip(*(np.asarray(getattr(log, f)).tolist() for f in
                                       ("stall_agent", "stall_reason", "stall_start", "stall_end"))):
        args = {"agent": log.agents[a], "reason": STALL_NAMES.get(reason, f"reason{reason}").replace("_", " ")}
        if reason == STALL_SEMAPHORE and (a, end) in sem_of:
            args["semaphore"] = f"s{sem_of[(a, end)]}"
        end = log.cycles if end < 0 else end
        events.append({"ph": "X", "pid": PID, "tid": a if a == 0 else n + a, "ts": start,
                       "dur": max(end - start, 0), "name": f"stall: {args['reason']}", "cat": "stall",
                       "args": args})
    return events


def _counter_events(log: RunLog) -> list[dict]:
    events = []
    for t, cid, value in zip(*(np.asarray(getattr(log, f)).tolist() for f in ("ctr_cycle", "ctr_id", "ctr_value"))):
        if cid == CTR_DDR_BYTES:
            events.append({"ph": "C", "pid": PID, "ts": t, "name": "DDR bytes/cycle", "args": {"bytes": value}})
        elif 0 < cid < len(log.agents):
            events.append({"ph": "C", "pid": PID, "ts": t, "name": f"queue {log.agents[cid]}",
                           "args": {"commands": value}})
    return events


def _metadata_events(log: RunLog) -> list[dict]:
    n = len(log.agents)
    events = [{"ph": "M", "pid": PID, "name": "process_name", "args": {"name": "NNP-1"}}]
    tracks = [(a, name) for a, name in enumerate(log.agents)]
    tracks += [(n + a, f"{name} stalls") for a, name in enumerate(log.agents) if a > 0]
    for tid, name in tracks:
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_name", "args": {"name": name}})
        sort = 2 * tid if tid < n else 2 * (tid - n) + 1
        events.append({"ph": "M", "pid": PID, "tid": tid, "name": "thread_sort_index", "args": {"sort_index": sort}})
    return events


def trace_events(log: RunLog, program) -> list[dict]:
    """Every trace event of the run, in a fixed order."""
    slices = sorted(_command_events(log, program) + _stall_events(log), key=lambda e: (e["tid"], e["ts"]))
    counters = sorted(_counter_events(log), key=lambda e: (e["ts"], e["name"]))
    return _metadata_events(log) + slices + counters


def trace_json(log: RunLog, program, config: Config) -> str:
    """The trace document as text: one event per line."""
    other = {"time_unit": "1 us of trace time = 1 clock cycle", "clock_ghz": config.clock_ghz,
             "cycles": int(log.cycles), "instructions": int(log.instructions),
             "error": None if getattr(log, "error", None) is None else str(log.error)}
    body = ",\n".join(json.dumps(e, separators=(",", ":")) for e in trace_events(log, program))
    return ('{"traceEvents":[\n' + body + '\n],\n"otherData":' + json.dumps(other, separators=(",", ":"))
            + "}\n")


def write_trace(path, log: RunLog, program, config: Config) -> None:
    """Write the Perfetto/Chrome trace of `log` to `path` (OSError if it cannot be written)."""
    Path(path).write_text(trace_json(log, program, config))
