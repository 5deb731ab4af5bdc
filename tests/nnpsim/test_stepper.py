"""The event engine against the cycle-stepped reference on random programs: same cycles, same memory."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import build, ops
from isa_spec import decode, encode, load_isa
from nnpsim import Simulator, errors
from nnpsim.cu import decode_for_engine
from nnpsim.simulator import run_program
from nnpsim.stepper import step_program

from tests.helpers.machine import assert_same, ins, random_memory, small_config

pytestmark = pytest.mark.usefixtures("warm_engine")

ISA = load_isa()
N_SEMS = 6
ALU = ["add", "sub", "mul", "xor", "sll", "sra", "slt", "min"]


def setp(name: str, value: int) -> int:
    return ins("setpi", param=ISA.params[name], imm=value)


@st.composite
def configs(draw):
    return small_config(
        nu_count=draw(st.integers(1, 2)), vu_count=draw(st.integers(1, 2)),
        dma_channels=draw(st.integers(1, 4)), queue_depth=draw(st.integers(1, 4)),
        branch_penalty=draw(st.integers(0, 3)), semaphores=8,
        ddr_bytes_per_cycle=draw(st.sampled_from([4, 8, 32])), ddr_latency=draw(st.integers(0, 20)),
        ddr_burst_bytes=draw(st.sampled_from([1, 8, 32, 64, 128])),
        dm_bytes_per_cycle=draw(st.sampled_from([8, 16, 128])), dm_latency=draw(st.integers(0, 8)),
        local_bytes_per_cycle=draw(st.sampled_from([4, 16, 64])), local_latency=draw(st.integers(0, 3)),
        nu_latency=draw(st.integers(0, 10)), vu_latency=draw(st.integers(0, 8)),
        vu_bytes_per_cycle=draw(st.sampled_from([8, 64])))


def box_extent(sizes, strides, elem):
    """[lo, hi) of the bytes a box touches, relative to its base address."""
    lo = sum(min(0, (n - 1) * st_) for n, st_ in zip(sizes, strides))
    hi = sum(max(0, (n - 1) * st_) for n, st_ in zip(sizes, strides))
    return lo, hi + elem


def dma_strides(draw, sizes, elem):
    """Strides of one side: contiguous, reversed, repeated (0), gapped or odd, dim by dim."""
    out, dense = [], elem
    for n in sizes:
        kind = draw(st.sampled_from(["dense", "dense", "reverse", "zero", "gap", "odd"]))
        out.append({"dense": dense, "reverse": -dense, "zero": 0, "gap": dense + elem * draw(st.integers(1, 8)),
                    "odd": draw(st.integers(-40, 40))}[kind])
        dense *= n
    return out


def dma_command(draw, cfg, ch, wait, signal):
    """A 3-D copy between any two of DDR, DM, IBUF and VBUF: elem 1, 2 or 4, random strides on
    both sides (contiguous, reversed, repeated, gapped, odd), unaligned addresses, and padding."""
    spaces = [0, 0, 1] + [8 + k for k in range(cfg.nu_count)] + [32 + k for k in range(cfg.vu_count)]
    sizes = {0: cfg.ddr_bytes, 1: cfg.dm_bytes, 8: cfg.ibuf_bytes, 9: cfg.ibuf_bytes,
             32: cfg.vbuf_bytes, 33: cfg.vbuf_bytes}
    elem = draw(st.sampled_from([1, 1, 2, 4]))
    size = [draw(st.integers(1, 48)), draw(st.integers(1, 3)), draw(st.integers(1, 2))]
    pad_lo, pad_hi = [0, 0, 0], [0, 0, 0]
    if draw(st.booleans()):
        for k in range(3):
            pad_lo[k] = draw(st.integers(0, size[k]))
            pad_hi[k] = draw(st.integers(0, size[k] - pad_lo[k]))
    inner = [n - a - b for n, a, b in zip(size, pad_lo, pad_hi)]
    src_stride, dst_stride = dma_strides(draw, inner, elem), dma_strides(draw, size, elem)
    src, dst = draw(st.sampled_from(spaces)), draw(st.sampled_from(spaces))
    words = [setp(f"dma.{name}{k}", v[k]) for name, v in (("size", size), ("src_stride", src_stride),
                                                           ("dst_stride", dst_stride), ("pad_lo", pad_lo),
                                                           ("pad_hi", pad_hi)) for k in range(3)]
    regs = []
    for space, box, strides in ((dst, size, dst_stride), (src, inner, src_stride)):
        lo, hi = box_extent(box, strides, elem) if min(box) > 0 else (0, 0)
        regs.append(draw(st.integers(-lo, min(sizes[space], 4096) - hi)))
    return words + [setp("dma.elem", elem), ins("li", rd=10, imm=regs[0]), ins("li", rd=11, imm=regs[1]),
                    ins("dma", ch=ch, dspace=dst, rd=10, sspace=src, rs=11, wait=wait, signal=signal)]


def nu_command(draw, unit, wait, signal):
    kh, kw, oh, ow = (draw(st.integers(1, n)) for n in (2, 2, 3, 3))
    words = [setp("nu.k_h", kh), setp("nu.k_w", kw), setp("nu.out_h", oh), setp("nu.out_w", ow),
             setp("nu.in_h", oh + kh - 1), setp("nu.in_w", ow + kw - 1),
             setp("nu.x_zp", draw(st.integers(-128, 127))),
             ins("li", rd=10, imm=4 * draw(st.integers(0, 64))),
             ins("li", rd=11, imm=32 * draw(st.integers(0, 64))),
             ins("li", rd=12, imm=32 * draw(st.integers(0, 64)))]
    m = draw(st.sampled_from(["nu.conv", "nu.conv.acc"]))
    return words + [ins(m, unit=unit, racc=10, rin=11, rw=12, wait=wait, signal=signal)]


def vu_command(draw, unit, wait, signal):
    n0, n1 = draw(st.integers(1, 64)), draw(st.integers(1, 3))
    lo = draw(st.integers(-128, 127))
    words = [setp("vu.n0", n0), setp("vu.n1", n1), setp("vu.d_stride0", 1), setp("vu.d_stride1", n0),
             setp("vu.a_stride0", 1), setp("vu.a_stride1", n0), setp("vu.b_stride0", 1),
             setp("vu.b_stride1", n0), setp("vu.lo", lo), setp("vu.hi", draw(st.integers(lo, 127)))]
    words += [ins("li", rd=r, imm=draw(st.integers(0, 2048))) for r in (10, 11, 12)]
    if draw(st.booleans()):
        return words + [ins("vu.clip", unit=unit, rd=10, ra=11, wait=wait, signal=signal)]
    words += [setp("vu.ma", draw(st.integers(0, 1 << 20))), setp("vu.mb", draw(st.integers(0, 1 << 20))),
              setp("vu.shift", draw(st.integers(0, 30)))]
    return words + [ins("vu.add", unit=unit, rd=10, ra=11, rb=12, wait=wait, signal=signal)]


def agent_of(cfg, kind, unit):
    return {"nu": 1 + unit, "vu": 1 + cfg.nu_count + unit, "dma": 1 + cfg.nu_count + cfg.vu_count + unit}[kind]


def command(draw, cfg, consumer, balance, sync):
    kind = draw(st.sampled_from(["dma", "dma", "dma", "nu", "vu"]))
    count = {"dma": cfg.dma_channels, "nu": cfg.nu_count, "vu": cfg.vu_count}[kind]
    unit = draw(st.integers(0, count - 1))
    wait = signal = None
    if sync:
        # only the semaphore's one consumer waits on it, and only for a token already signalled
        # earlier in program order: such programs cannot deadlock
        mine = [s for s in range(N_SEMS) if consumer[s] == agent_of(cfg, kind, unit) and balance[s] > 0]
        if mine and draw(st.booleans()):
            wait = draw(st.sampled_from(mine))
            balance[wait] -= 1
        if draw(st.booleans()):
            signal = draw(st.integers(0, N_SEMS - 1))
            balance[signal] += 1
    build = {"dma": lambda: dma_command(draw, cfg, unit, wait, signal),
             "nu": lambda: nu_command(draw, unit, wait, signal),
             "vu": lambda: vu_command(draw, unit, wait, signal)}[kind]
    words = build()
    if sync and draw(st.booleans()):
        # a second signal (possibly the first one's semaphore again: two tokens)
        signal2 = draw(st.integers(0, N_SEMS - 1))
        balance[signal2] += 1
        instr, operands = decode(int(words[-1]))
        words[-1] = encode(instr, {**operands, "signal2": signal2})
    return words


def alu(draw):
    m = draw(st.sampled_from(ALU))
    return ins(m, rd=draw(st.integers(1, 7)), rs1=draw(st.integers(0, 7)), rs2=draw(st.integers(0, 7)))


@st.composite
def programs(draw, deadlock=False, fault=False):
    cfg = draw(configs())
    n_agents = 1 + cfg.nu_count + cfg.vu_count + cfg.dma_channels
    consumer = [draw(st.integers(0, n_agents - 1)) for _ in range(N_SEMS)]
    balance = [0] * N_SEMS
    words = [ins("li", rd=r, imm=draw(st.integers(-1000, 1000))) for r in range(1, 8)]
    n_items = draw(st.integers(4, 24))
    fault_at = draw(st.integers(0, n_items - 1)) if fault else -1
    for i in range(n_items):
        if i == fault_at:  # a copy that leaves DM, on some channel, between two items
            words += [setp("dma.size0", 64), setp("dma.dst_stride0", 1), ins("li", rd=13, imm=cfg.dm_bytes - 32),
                      ins("dma", ch=draw(st.integers(0, cfg.dma_channels - 1)), dspace=1, rd=13, sspace=0, rs=0)]
        item = draw(st.sampled_from(["alu", "cmd", "cmd", "cmd", "cmd", "loop", "signal", "wait", "wait",
                                     "barrier"]))
        if item == "alu":
            words += [alu(draw) for _ in range(draw(st.integers(1, 6)))]
        elif item == "cmd":
            words += command(draw, cfg, consumer, balance, sync=True)
        elif item == "loop":
            body = []
            for _ in range(draw(st.integers(1, 4))):
                body += command(draw, cfg, consumer, balance, sync=False) if draw(st.booleans()) else [alu(draw)]
            body.append(ins("beq", rs1=0, rs2=1, off=16))  # never taken unless r1 == 0
            body.append(ins("nop"))
            words += [ins("li", rd=20, imm=draw(st.integers(1, 6)))] + body
            words.append(ins("loop", rd=20, off=-8 * len(body)))
        elif item == "signal":
            s = draw(st.integers(0, N_SEMS - 1))
            balance[s] += 1
            words.append(ins("sem.signal", sem=s))
        elif item == "wait":
            mine = [s for s in range(N_SEMS) if consumer[s] == 0 and balance[s] > 0]
            if mine:
                s = draw(st.sampled_from(mine))
                balance[s] -= 1
                words.append(ins("sem.wait", sem=s))
        else:
            words.append(ins("barrier", mask=draw(st.integers(0, 0xFFFF))))
    if deadlock:
        s = draw(st.integers(0, N_SEMS - 1))
        if draw(st.booleans()):
            words.append(ins("sem.wait", sem=6))
        else:
            words += setp_vu_clip(s)
    words.append(ins("halt"))
    seed = draw(st.integers(0, 2**32 - 1))
    return cfg, np.array(words, dtype=np.uint64), seed


def setp_vu_clip(sem):
    return [setp("vu.n0", 4), ins("vu.clip", unit=0, rd=0, ra=0, wait=7, signal=sem)]


def run_both(cfg, words, seed, max_cycles=10**6):
    table = decode_for_engine(words)
    mem_e, mem_s = random_memory(cfg, seed), random_memory(cfg, seed)
    log_e, failure = run_program(table, mem_e, cfg, max_cycles)
    log_s, code = step_program(table, mem_s, cfg, max_cycles)
    return log_e, failure, mem_e, log_s, code, mem_s


@settings(max_examples=300, deadline=None)
@given(programs())
def test_event_engine_matches_stepper(case):
    cfg, words, seed = case
    log_e, failure, mem_e, log_s, code, mem_s = run_both(cfg, words, seed)
    assert failure is None, str(failure)
    assert code == errors.OK
    assert (log_e.cmd_end > log_e.cmd_start).all() and (log_e.cmd_start > log_e.cmd_issue).all()
    assert_same(log_e, mem_e, log_s, mem_s)


@settings(max_examples=60, deadline=None)
@given(programs(deadlock=True))
def test_deadlock_reported_alike(case):
    cfg, words, seed = case
    log_e, failure, mem_e, log_s, code, mem_s = run_both(cfg, words, seed)
    assert failure is not None and failure.code == errors.DEADLOCK and code == errors.DEADLOCK
    assert failure.cycle == log_s.cycles
    assert_same(log_e, mem_e, log_s, mem_s)


@settings(max_examples=40, deadline=None)
@given(programs(fault=True))
def test_unit_error_reported_alike(case):
    cfg, words, seed = case
    log_e, failure, mem_e, log_s, code, mem_s = run_both(cfg, words, seed)
    assert failure is not None and failure.code == code == errors.OUT_OF_BOUNDS
    assert failure.cycle == log_s.cycles and "dm" in str(failure)
    assert_same(log_e, mem_e, log_s, mem_s)


@settings(max_examples=60, deadline=None)
@given(programs(), st.integers(0, 400))
def test_cycle_limit_alike(case, limit):
    cfg, words, seed = case
    log_e, failure, mem_e, log_s, code, mem_s = run_both(cfg, words, seed, max_cycles=limit)
    if failure is None:
        assert code == errors.OK and log_e.cycles <= limit
    else:
        assert failure.code == code == errors.CYCLE_LIMIT and failure.cycle == limit
    assert_same(log_e, mem_e, log_s, mem_s)


@settings(max_examples=10, deadline=None)
@given(programs())
def test_event_engine_is_deterministic(case):
    cfg, words, seed = case
    table = decode_for_engine(words)
    runs = []
    for _ in range(2):
        mem = random_memory(cfg, seed)
        log, failure = run_program(table, mem, cfg, 10**6)
        assert failure is None
        runs.append((log, mem))
    assert_same(runs[0][0], runs[0][1], runs[1][0], runs[1][1])


def test_softmax_kernel_alike_on_both_engines():
    """A compiled vu.softmax kernel (its table loaded by DMA, rows along a middle axis) on the event engine
    and the cycle-stepped reference: the same cycles, command times and memory, the rows the numpy model's."""
    op = ops.softmax((1, 16, 3, 10), x_scale=0.05, y_scale=1 / 256, zp_out=-128, axis=1)
    kernel = build(op, config=small_config(vbuf_bytes=4096))
    sim = Simulator(kernel.config)
    sim.load(kernel.program)
    x = np.random.default_rng(4).integers(-128, 128, op.shape).astype(np.int8)
    sim.write("x", x)
    mem_s = copy.deepcopy(sim.memory)
    log_e, failure = run_program(sim._table, sim.memory, kernel.config, 10**6)
    log_s, code = step_program(sim._table, mem_s, kernel.config, 10**6)
    assert failure is None and code == errors.OK
    assert_same(log_e, sim.memory, log_s, mem_s)
    assert np.array_equal(sim.read("y"), op.reference(x))
