"""compiler.passes.sync on random schedules: every conflict ordered, no wait more than needed."""
from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings, strategies as st

from compiler.errors import CompileError
from compiler.ir import Access, Buffer, Command, CuWait, Note
from compiler.passes.sync import dependencies, synchronise

MEM = Buffer("m", "vbuf", 64, addr=0)
DDR = Buffer("x", "ddr", 64)


@dataclass(eq=False)
class Fake(Command):
    """A command with given queue and byte ranges."""

    q: str
    ranges: tuple  # ((buf, lo, hi, write), ...)

    @property
    def queue(self) -> str:
        return self.q

    def accesses(self):
        return [Access(b, lo, hi, w) for b, lo, hi, w in self.ranges]


def conflicts(a: Fake, b: Fake) -> bool:
    return any(x[0] is y[0] and x[1] < y[2] and y[1] < x[2] and (x[3] or y[3])
               for x in a.ranges for y in b.ranges)


def happens_before(body, drop=None):
    """Is end(p) -> start(c) ordered for every conflict, over the annotated program?

    Nodes in order (CU step k, start k, end k) only have edges forward, so one
    pass computes every node's ancestors as a bitmask.  `drop` ignores one wait.
    """
    cmds = [s for s in body if isinstance(s, Command)]
    signals: dict[int, list] = {}
    for c in cmds:          # a semaphore's signallers share one queue: issue order is their order
        for s in (c.signal, c.signal2):
            if s is not None:
                signals.setdefault(s, []).append(c)
    taken: dict[int, int] = {}
    bit = {}
    end_anc: dict[int, int] = {}           # id(cmd) -> ancestors of its end, itself included
    start_anc: dict[int, int] = {}
    cu, last = 0, {}
    for s in body:
        if isinstance(s, Note):
            continue
        sem = s.sem if isinstance(s, CuWait) else s.wait
        token = 0
        if sem is not None:
            n = taken.get(sem, 0)
            taken[sem] = n + 1
            if s is not drop:
                token = end_anc[id(signals[sem][n])]
        if isinstance(s, CuWait):
            cu |= token
            continue
        anc = cu | token | (end_anc[id(last[s.queue])] if s.queue in last else 0)
        start_anc[id(s)] = anc
        bit[id(s)] = 1 << len(bit)
        end_anc[id(s)] = anc | bit[id(s)]
        last[s.queue] = s
    assert {k: len(v) for k, v in signals.items()} == taken, "every token is consumed exactly once"
    return all(start_anc[id(c)] & bit[id(p)]
               for i, c in enumerate(cmds) for p in cmds[:i]
               if p.queue != c.queue and conflicts(p, c))


@st.composite
def schedules(draw, most: int = 14):
    n = draw(st.integers(1, most))
    body = []
    for i in range(n):
        ranges = []
        for _ in range(draw(st.integers(1, 2))):
            buf = draw(st.sampled_from([MEM, MEM, DDR]))
            lo = draw(st.integers(0, 56))
            ranges.append((buf, lo, lo + draw(st.integers(1, 8)), draw(st.booleans())))
        body.append(Fake(q=draw(st.sampled_from(["nu0", "vu0", "dma0", "dma1"])), ranges=tuple(ranges),
                         comment=f"c{i}"))
        if draw(st.booleans()):
            body.append(Note(f"after c{i}"))
    return body


@settings(max_examples=100, deadline=None)
@given(schedules())
def test_every_conflict_is_ordered_and_no_wait_is_spare(body):
    out, report = synchronise(body)
    assert [s for s in out if isinstance(s, Command)] == [s for s in body if isinstance(s, Command)]
    assert sum(isinstance(s, Note) for s in out) == sum(isinstance(s, Note) for s in body)
    assert happens_before(out)
    waiting = [s for s in out if isinstance(s, CuWait) or (isinstance(s, Command) and s.wait is not None)]
    assert len(waiting) == report.waits + report.cu_waits
    for w in waiting:
        assert not happens_before(out, drop=w), f"wait at {w.comment} is not needed"


def test_double_buffered_pipeline_signals_both_consumers_of_a_conv():
    # conv k is needed by its drain (dma1) and by the load that refills its input buffer (dma0):
    # it signals both queues' semaphores, and neither waits through the CU; conv k + 2 needs two
    # producers (its load, and the drain that frees its accumulators): one of them through the CU
    ibuf = [Buffer(f"i{k}", "vbuf", 64, addr=64 * k) for k in range(2)]
    acc = [Buffer(f"a{k}", "vbuf", 64, addr=128 + 64 * k) for k in range(2)]
    body = []
    for k in range(4):
        body.append(Fake(q="dma0", ranges=((ibuf[k % 2], 0, 64, True),), comment=f"load{k}"))
        body.append(Fake(q="nu0", ranges=((ibuf[k % 2], 0, 64, False), (acc[k % 2], 0, 64, True)),
                         comment=f"conv{k}"))
        body.append(Fake(q="dma1", ranges=((acc[k % 2], 0, 64, False), (DDR, 0, 64, True)),
                         comment=f"drain{k}"))
    out, report = synchronise(body)
    assert happens_before(out)
    convs = [s for s in out if getattr(s, "q", "") == "nu0"]
    to = {v: k for k, v in report.semaphores.items()}
    assert [(to[c.signal], to[c.signal2]) for c in convs[:2]] == [(("nu0", "dma1"), ("nu0", "dma0"))] * 2
    loads = [s for s in out if getattr(s, "q", "") == "dma0"]
    assert [to[s.wait] if s.wait is not None else None for s in loads] == [None, None] + [("nu0", "dma0")] * 2
    assert report.cu_waits == 2 and all(to[s.sem] == ("dma1", "cu") for s in out if isinstance(s, CuWait))


def test_a_producer_three_queues_need_goes_through_the_cu():
    # a load read by the NU, the VU and another channel: more consumers than a command's two signals,
    # so the CU takes its one token before issuing the first of them
    load = Fake(q="dma0", ranges=((MEM, 0, 32, True),), comment="load")
    readers = [Fake(q=q, ranges=((MEM, 0, 32, False), (MEM, 32 + 8 * k, 40 + 8 * k, True)), comment=q)
               for k, q in enumerate(("nu0", "vu0", "dma1"))]
    out, report = synchronise([load] + readers)
    assert happens_before(out)
    assert isinstance(out[1], CuWait) and report.cu_waits == 1 and report.waits == 0
    assert load.signal == out[1].sem and load.signal2 is None
    two, report = synchronise([load] + readers[:2])
    assert happens_before(two) and report.cu_waits == 0 and report.waits == 2
    assert {load.signal, load.signal2} == {readers[0].wait, readers[1].wait}


def test_too_few_semaphores_is_a_compile_error():
    body = [Fake(q=q, ranges=((MEM, 0, 8, True),), comment=q) for q in ("dma0", "nu0", "vu0", "dma1")]
    with pytest.raises(CompileError, match="semaphores"):
        synchronise(body, semaphores=2)


@settings(max_examples=150, deadline=None)
@given(schedules(most=40))
def test_dependencies_are_the_latest_conflict_of_each_other_queue(body):
    # the access logs drop accesses a later one of the same queue hides, and grow past their first
    # 8 rows (up to 80 accesses here, most in one memory): the answer must not change
    cmds = [s for s in body if isinstance(s, Command)]
    want = []
    for i, c in enumerate(cmds):
        latest = {}
        for j in range(i):
            if cmds[j].queue != c.queue and conflicts(cmds[j], c):
                latest[cmds[j].queue] = j
        want.append(latest)
    assert dependencies(cmds) == want


def test_dependencies_of_no_commands_and_of_empty_accesses():
    # an empty access conflicts with nothing; a command with only empty ones, and no commands, are fine
    empty = Fake(q="dma0", ranges=((MEM, 8, 8, True),), comment="empty")
    reader = Fake(q="nu0", ranges=((MEM, 0, 16, False),), comment="reader")
    assert dependencies([]) == []
    assert dependencies([empty, reader]) == [{}, {}]
