"""Fuzz the simulator with random programs; check determinism and isolation.

Property: a random instruction stream (any mnemonic, any operand values in
their fields' ranges, random parameters and data, random machine sizes) run
with a cycle limit ends at halt or with the simulator's own SimError (with a
known error code and a message), never another exception, never a crash
signal (a batch runs in a subprocess).  The same binary and inputs give the
same memories, registers, cycles, statistics and trace in two processes; one
run leaves nothing behind that changes the next.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from hypothesis import event, given
from hypothesis import strategies as st

from isa_spec.program import Program
from nnpsim import SimError, Simulator
from nnpsim import errors
from nnpsim.config import Config

from .strategies import (MAX_CYCLES, SMALL, budget, configs, example_programs, program_fingerprint, random_program,
                         run_one, run_python, seeded_program, time_limit)


@given(prog=random_program(), config=configs(), races=st.booleans())
@budget(300)
def test_random_programs_end_in_halt_or_sim_error(prog, config, races):
    res = run_one(prog, config, races)
    event(errors.NAMES.get(res.get("error"), "halted"))


@given(words=st.lists(st.integers(0, (1 << 64) - 1), min_size=1, max_size=16))
@budget(60)
def test_random_words_end_in_halt_or_sim_error(words):
    """Arbitrary 64-bit words (mostly undecodable) are rejected as illegal instructions."""
    prog = Program(np.array(words, dtype=np.uint64))
    res = run_one(prog, Config(**SMALL))
    assert "error" in res or "cycles" in res


@given(prog=random_program(max_len=12), config=configs())
@budget(40)
def test_a_failed_run_still_gives_stats_and_trace(prog, config, tmp_path_factory):
    """Faults never lose work (Python API): a SimError carries the stats, the trace is written."""
    trace = tmp_path_factory.mktemp("trace") / "t.json"
    sim = Simulator(config)
    try:
        sim.load(prog)
    except SimError:
        return
    try:
        stats = sim.run(max_cycles=MAX_CYCLES, trace=str(trace))
    except SimError as exc:
        assert exc.stats is not None and exc.stats.cycles == exc.cycle, (exc.stats, exc.cycle)
        stats = exc.stats
    doc = json.loads(trace.read_text())
    assert doc["otherData"]["cycles"] == stats.cycles


def test_known_errors_are_reachable():
    """The generator reaches the errors that matter (so the fuzzer is not vacuous)."""
    from isa_spec import encode, load_isa
    isa = load_isa()
    w = lambda m, **ops: encode(m, ops, isa)  # noqa: E731
    cases = {
        errors.PC_OUT_OF_RANGE: [w("nop")],
        errors.CYCLE_LIMIT: [w("beq", rs1=0, rs2=0, off=0)],
        errors.DEADLOCK: [w("sem.wait", sem=3), w("halt")],
        errors.OUT_OF_BOUNDS: [w("li", rd=1, imm=(1 << 32) - 64), w("dma", ch=0, dspace=1, rd=1, sspace=0, rs=0,
                                                                    wait=None, signal=None), w("halt")],
        errors.ILLEGAL_INSTRUCTION: [w("nu.conv", unit=3, racc=0, rin=0, rw=0, wait=None, signal=None), w("halt")],
    }
    for code, words in cases.items():
        res = run_one(Program(np.array(words, dtype=np.uint64)), Config(**SMALL))
        assert res.get("error") == code, (errors.NAMES[code], res)


def test_huge_vu_iterations_are_bad_parameters():
    """Found by the long run (16:45): vu.n0 * vu.n1 >= 2**32 (vu.n0 = 2**31 - 1, vu.n1 = 2) made the
    engine raise MemoryError (the VU allocates n0*n1*n2*n3 int64 results) instead of a SimError;
    in the tree of 16:55 these stop with 'bad command parameter' at once."""
    from isa_spec import encode, load_isa
    isa = load_isa()
    for n0, n1, op in [((1 << 31) - 1, 2, "vu.clip"), (1 << 30, 3, "vu.requant"), ((1 << 31) - 1, (1 << 31) - 1, "vu.clip")]:
        ops = {"unit": 0, "rd": 0, "ra": 0, "wait": None, "signal": None} | ({"sdt": 0} if op == "vu.requant" else {})
        words = [encode("setpi", {"param": isa.params["vu.n0"], "imm": n0}, isa),
                 encode("setpi", {"param": isa.params["vu.n1"], "imm": n1}, isa), encode(op, ops, isa),
                 encode("halt", {}, isa)]
        with time_limit(30, "a huge VU command"):
            res = run_one(Program(np.array(words, dtype=np.uint64)), Config(**SMALL), check_races=True)
        assert res.get("error") == errors.BAD_PARAM, res


BATCH = r"""
import sys
from hypothesis import given, settings, HealthCheck
from tests.fuzz.strategies import random_program
from tests.fuzz.strategies import configs, run_one
@settings(max_examples=int(sys.argv[1]), deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(prog=random_program(), config=configs())
def batch(prog, config):
    run_one(prog, config, check_races=True)
batch()
print("done")
"""


def test_random_programs_never_crash_the_process():
    """A batch in a child process: a segfault or abort in jitted code shows as a signal."""
    proc = run_python(BATCH, str(budget(150).max_examples), timeout=3600)
    assert proc.returncode == 0 and "done" in proc.stdout, (
        f"status {proc.returncode} (negative: killed by signal {-proc.returncode})\n{proc.stderr[-4000:]}")


# ---------------------------------------------------------------------------
# Determinism across processes, isolation within one.
# ---------------------------------------------------------------------------

DETERMINISM = r"""
import hashlib, json, sys
from isa_spec.program import Program
from tests.fuzz.strategies import SMALL, dumps, run_one
from nnpsim.config import Config
out = {}
for path in sys.argv[1:]:
    prog = Program.load(path)
    config = Config() if prog.buffers else Config(**SMALL)
    trace = path + ".%d.trace.json" % __import__("os").getpid()
    res = run_one(prog, config, check_races=True, trace=trace)
    try:
        res["trace"] = hashlib.sha256(open(trace, "rb").read()).hexdigest()
    except FileNotFoundError:
        res["trace"] = None
    out[path] = res
print(dumps(out))
"""


def determinism_binaries(tmp_path: Path) -> list[str]:
    """The examples and a few seeded random programs, as binary files."""
    import random
    progs = dict(example_programs())
    rng = random.Random(11)
    for i in range(4):
        progs[f"random{i}"] = seeded_program(rng, 30)
    paths = []
    for name, prog in progs.items():
        p = tmp_path / f"{name}.bin"
        prog.save(p)
        paths.append(str(p))
    return paths


def test_same_binary_same_results_in_two_processes(tmp_path):
    paths = determinism_binaries(tmp_path)
    first = run_python(DETERMINISM, *paths)
    second = run_python(DETERMINISM, *paths)
    for proc in (first, second):
        assert proc.returncode == 0, proc.stderr[-3000:]
    a, b = json.loads(first.stdout), json.loads(second.stdout)
    assert a == b
    assert any("cycles" in r for r in a.values()) and all(r["trace"] for r in a.values() if "cycles" in r)


@given(a=random_program(max_len=25), b=random_program(max_len=25), config=configs())
@budget(30)
def test_one_run_leaves_nothing_behind(a, b, config):
    """Run a on a fresh simulator; then b, then a again on one simulator; and a on another fresh one."""
    fresh = run_one(a, config)
    sim = Simulator(config)
    for prog in (b, a):
        try:
            sim.load(prog)
            stats = sim.run(max_cycles=MAX_CYCLES)
            again = program_fingerprint(sim, stats)
        except SimError as exc:
            again = {"error": exc.code, "message": str(exc), "cycle": exc.cycle}
    assert again == fresh
    assert run_one(a, config) == fresh
