"""The event engine: CU semantics and timing, units' timing, queues, semaphores, barriers, errors."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa_spec import load_isa
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.runlog import (BARRIER, END, ISSUE, SIGNAL, STALL_BANDWIDTH, STALL_QUEUE_FULL,
                           STALL_SEMAPHORE, START, TAKE)
from nnpsim.simulator import Simulator
from nnpsim.timing import dma_cycles, nu_conv_cycles, vu_cycles

from tests.helpers.machine import ins, program, setp_all, small_config

pytestmark = pytest.mark.usefixtures("warm_engine")

ISA = load_isa()
M32 = 0xFFFFFFFF


def s32(v: int) -> int:
    v &= M32
    return v - (1 << 32) if v >> 31 else v


def run(words, cfg=None, max_cycles=None, data=b"", lines=None) -> Simulator:
    sim = Simulator(cfg or small_config())
    sim.load(program(words, data, lines=lines))
    sim.run(max_cycles=max_cycles)
    return sim


def run_error(words, cfg=None, max_cycles=None, lines=None) -> SimError:
    sim = Simulator(cfg or small_config())
    sim.load(program(words, lines=lines))
    with pytest.raises(SimError) as info:
        sim.run(max_cycles=max_cycles)
    assert info.value.log is sim.last_log
    return info.value


# --- CU: an independent Python model of every pure instruction -----------------------------

R_OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
         "and": lambda a, b: a & b, "or": lambda a, b: a | b, "xor": lambda a, b: a ^ b,
         "sll": lambda a, b: (a & M32) << (b & 31), "srl": lambda a, b: (a & M32) >> (b & 31),
         "sra": lambda a, b: a >> (b & 31), "slt": lambda a, b: int(a < b),
         "sltu": lambda a, b: int((a & M32) < (b & M32)), "min": min, "max": max,
         "mulhu": lambda a, b: ((a & M32) * (b & M32)) >> 32}
I_OPS = {"addi": R_OPS["add"], "muli": R_OPS["mul"], "andi": R_OPS["and"], "ori": R_OPS["or"],
         "xori": R_OPS["xor"], "slti": R_OPS["slt"], "sltiu": R_OPS["sltu"]}
SH_OPS = {"slli": R_OPS["sll"], "srli": R_OPS["srl"], "srai": R_OPS["sra"]}
BRANCHES = {"beq": lambda a, b: a == b, "bne": lambda a, b: a != b, "blt": lambda a, b: a < b,
            "bge": lambda a, b: a >= b, "bltu": lambda a, b: (a & M32) < (b & M32),
            "bgeu": lambda a, b: (a & M32) >= (b & M32)}

reg = st.integers(0, 7)
imm32 = st.integers(-(1 << 31), (1 << 31) - 1)
alu = st.one_of(
    st.tuples(st.sampled_from(sorted(R_OPS)), reg, reg, reg),
    st.tuples(st.sampled_from(sorted(I_OPS)), reg, reg, imm32),
    st.tuples(st.sampled_from(sorted(SH_OPS)), reg, reg, st.integers(0, 31)),
    st.tuples(st.just("li"), reg, st.just(0), st.integers(-(1 << 31), (1 << 32) - 1)),
    st.tuples(st.sampled_from(sorted(BRANCHES)), reg, reg, st.integers(1, 3)),
    st.tuples(st.just("setp"), st.sampled_from([0, 33, 70]), reg, imm32),
)


def encode_alu(op):
    m, x, y, z = op
    if m in R_OPS:
        return ins(m, rd=x, rs1=y, rs2=z)
    if m in I_OPS or m in SH_OPS:
        return ins(m, rd=x, rs1=y, imm=z)
    if m == "li":
        return ins(m, rd=x, imm=z)
    if m == "setp":
        return ins(m, param=x, rs1=y, imm=z)
    return ins(m, rs1=x, rs2=y, off=8 * z)  # forward branch skipping z - 1 instructions


def model_cu(ops, penalty):
    """Registers, parameters, cycles and instructions of a forward-only program before its halt."""
    regs, params = [0] * 32, list(ISA.param_file())
    pc, t, n = 0, 0, 0
    while pc < len(ops):
        n += 1
        m, x, y, z = ops[pc]
        nxt, cost = pc + 1, 1
        if m in R_OPS:
            regs[x] = s32(R_OPS[m](regs[y], regs[z]))
        elif m in I_OPS:
            regs[x] = s32(I_OPS[m](regs[y], z))
        elif m in SH_OPS:
            regs[x] = s32(SH_OPS[m](regs[y], z))
        elif m == "li":
            regs[x] = s32(z)
        elif m == "setp":
            params[x] = s32(regs[y] + z)
        elif BRANCHES[m](regs[x], regs[y]):
            nxt, cost = pc + z, 1 + penalty
        regs[0] = 0
        pc, t = nxt, t + cost
    return regs, params, t, n


@settings(max_examples=150, deadline=None)
@given(st.lists(alu, min_size=1, max_size=40), st.integers(0, 3))
def test_cu_matches_python_model(ops, penalty):
    # a branch may jump past the end: land on the halts padded after the program
    words = [encode_alu(op) for op in ops] + [ins("halt")] * 3
    regs, params, t, n = model_cu(ops, penalty)
    sim = run(words, small_config(branch_penalty=penalty))
    log = sim.last_log
    assert list(log.registers) == regs
    assert log.cycles == t + 1  # halt at cycle t, the run ends at the next cycle
    assert list(log.params) == params
    assert log.instructions == n + 1


def test_loop_counts_and_taken_branch_penalty():
    # li r1, 5; L: addi r2, r2, 7; loop r1, L; halt
    words = [ins("li", rd=1, imm=5), ins("addi", rd=2, rs1=2, imm=7), ins("loop", rd=1, off=-8), ins("halt")]
    for penalty in (0, 2, 5):
        log = run(words, small_config(branch_penalty=penalty)).last_log
        assert log.registers[2] == 35 and log.registers[1] == 0
        # li + 5 * addi + 4 taken loops + 1 fall-through loop + halt (the run ends after it)
        assert log.cycles == 1 + 5 + 4 * (1 + penalty) + 1 + 1
        assert log.instructions == 1 + 5 + 5 + 1


def test_jal_jalr_and_wrapping():
    words = [ins("li", rd=1, imm=0x7FFFFFFF), ins("addi", rd=1, rs1=1, imm=1),  # wraps
             ins("jal", rd=5, off=16), ins("li", rd=9, imm=99),                    # skipped
             ins("jalr", rd=6, rs1=0, imm=6 * 8 + 3),                              # & ~7 -> 0x30
             ins("li", rd=9, imm=98),                                              # skipped
             ins("li", rd=0, imm=1234), ins("halt")]
    log = run(words).last_log
    assert log.registers[1] == -(1 << 31)
    assert log.registers[5] == 24 and log.registers[6] == 40
    assert log.registers[9] == 0 and log.registers[0] == 0


# --- commands -------------------------------------------------------------------------------

def dma_words(ch, dspace, rd, sspace, rs, size0, size1=1, **sync):
    return setp_all({"dma.size0": size0, "dma.size1": size1, "dma.src_stride0": 1,
                     "dma.src_stride1": size0, "dma.dst_stride0": 1, "dma.dst_stride1": size0}) + [
        ins("dma", ch=ch, dspace=dspace, rd=rd, sspace=sspace, rs=rs, **sync)]


def test_dma_alone_matches_formula_and_moves_bytes():
    cfg = small_config(ddr_burst_bytes=64)
    data = bytes(np.random.default_rng(1).integers(0, 256, 600, dtype=np.uint8))
    words = [ins("li", rd=1, imm=0), ins("li", rd=2, imm=0x100)] + dma_words(0, 1, 2, 0, 1, 200, 3) + [ins("halt")]
    sim = run(words, cfg, data=data)
    log = sim.last_log
    issue = log.cmd_issue[0]
    assert log.cmd_start[0] == issue + 1
    assert log.cmd_bytes[0] == 600
    # 600 contiguous bytes from DDR address 0 touch ten 64-byte bursts: 640 bytes stream
    assert log.cmd_ddr_burst_bytes[0] == 640
    assert log.cmd_end[0] - log.cmd_start[0] == dma_cycles(
        640, cfg.ddr_bytes_per_cycle, cfg.ddr_latency, cfg.dm_bytes_per_cycle, cfg.dm_latency)
    assert log.cycles == log.cmd_end[0]
    assert sim.memory.view(1, 0x100, 600).tobytes() == data
    # with 1-byte bursts the transfer streams exactly its bytes
    log = run(words, small_config(ddr_burst_bytes=1), data=data).last_log
    assert log.cmd_ddr_burst_bytes[0] == 600
    assert log.cmd_end[0] - log.cmd_start[0] == dma_cycles(
        600, cfg.ddr_bytes_per_cycle, cfg.ddr_latency, cfg.dm_bytes_per_cycle, cfg.dm_latency)


@pytest.mark.parametrize("to_ddr", [False, True])
def test_strided_single_bytes_cost_a_burst_each(to_ddr):
    # 256 single bytes 128 apart in DDR (each a run of its own, in a 64-byte burst of its own)
    # against the same number of bytes contiguous: the gather from DDR (or the scatter into it)
    # streams 64 times the bytes through DDR's 32 B/cycle
    cfg = small_config(ddr_burst_bytes=64)
    n = 256
    cycles = []
    for ddr_stride in (1, 128):
        stride = {"dma.dst_stride0": ddr_stride, "dma.src_stride0": 1} if to_ddr else {
            "dma.src_stride0": ddr_stride, "dma.dst_stride0": 1}
        dspace, sspace = (0, 1) if to_ddr else (1, 0)
        words = setp_all({"dma.size0": n, **stride}) + [
            ins("dma", ch=0, dspace=dspace, rd=0, sspace=sspace, rs=0), ins("halt")]
        log = run(words, cfg).last_log
        assert log.cmd_bytes[0] == n
        assert log.cmd_ddr_burst_bytes[0] == n * (1 if ddr_stride == 1 else cfg.ddr_burst_bytes)
        cycles.append(int(log.cmd_end[0] - log.cmd_start[0]) - cfg.ddr_latency)
    assert cycles == [n // 32, cfg.ddr_burst_bytes * n // 32]


def test_two_dma_channels_share_ddr():
    # 32 B/cycle DDR, 100 cycles latency; two 640-byte loads ddr -> dm issued back to back.
    cfg = small_config()
    words = ([ins("li", rd=1, imm=0), ins("li", rd=2, imm=0x1000)] + dma_words(0, 1, 0, 0, 0, 640)
             + [ins("dma", ch=1, dspace=1, rd=2, sspace=0, rs=1), ins("halt")])
    log = run(words, cfg).last_log
    s0, s1 = log.cmd_start
    assert s1 == s0 + 1
    # ch0 streams alone for one cycle (32 B), then both at 16 B/cycle until ch0 has moved
    # 640 B (38 cycles more), then ch1 alone at 32 B/cycle.
    a0 = s0 + 100
    e0 = a0 + 1 + (640 - 32) // 16
    moved1 = 16 * (e0 - (a0 + 1))
    e1 = e0 + -(-(640 - moved1) // 32)
    assert (log.cmd_end[0], log.cmd_end[1]) == (e0, e1)
    bw = log.stall_reason == STALL_BANDWIDTH
    assert sorted(zip(log.stall_agent[bw], log.stall_start[bw], log.stall_end[bw])) == [
        (3, a0 + 1, e0), (4, a0 + 1, e0)]
    ddr = log.ctr_id == 0
    assert list(zip(log.ctr_cycle[ddr], log.ctr_value[ddr])) == [(a0, 32), (e1, 0)]


def test_local_buffers_have_separate_read_and_write_ports():
    # ch0 copies dm -> vbuf while ch1 copies vbuf -> dm: each memory is read by one and written
    # by the other, so neither is slowed: min(128 B/cycle dm, 64 B/cycle vbuf) after
    # max(8, 2) cycles of latency.  Two copies that both write vbuf share its write port.
    cfg = small_config()
    n = 1280
    setup = ([ins("li", rd=1, imm=0), ins("li", rd=2, imm=0x2000), ins("li", rd=3, imm=0x1000)]
             + dma_words(0, 32, 1, 1, 2, n))
    log = run(setup + [ins("dma", ch=1, dspace=1, rd=1, sspace=32, rs=3), ins("halt")], cfg).last_log
    assert [int(e - s) for s, e in zip(log.cmd_start, log.cmd_end)] == [8 + n // 64] * 2
    assert not (log.stall_reason == STALL_BANDWIDTH).any()
    log = run(setup + [ins("dma", ch=1, dspace=32, rd=3, sspace=1, rs=1), ins("halt")], cfg).last_log
    assert (log.stall_reason == STALL_BANDWIDTH).sum() == 2
    assert int(log.cmd_end[1] - log.cmd_start[1]) > 8 + n // 64 + n // 256


def nu_words(unit=0, acc=False, **sync):
    p = {"nu.in_h": 3, "nu.in_w": 4, "nu.k_h": 2, "nu.k_w": 2, "nu.out_h": 2, "nu.out_w": 3}
    return setp_all(p) + [ins("nu.conv.acc" if acc else "nu.conv", unit=unit, racc=0, rin=0, rw=0, **sync)]


def test_nu_timing_and_semaphore_handoff():
    cfg = small_config()
    # dma ch0 signals s1; the conv waits on s1; the CU waits for the conv's s2
    words = (dma_words(0, 8, 0, 0, 0, 64, signal=1) + nu_words(wait=1, signal=2)
             + [ins("sem.wait", sem=2), ins("halt")])
    log = run(words, cfg).last_log
    assert log.cmd_start[1] == log.cmd_end[0]          # signal in phase 1, take in phase 2
    assert log.cmd_end[1] - log.cmd_start[1] == nu_conv_cycles(1, 1, 2, 2, 2, 3, cfg.nu_rows, cfg.nu_latency)
    assert log.cmd_macs[1] == 2 * 2 * 2 * 3 * 32 * 32
    assert log.cycles == log.cmd_end[1] + 2            # CU takes s2 at end, halts next cycle
    kinds = list(zip(log.sync_kind, log.sync_agent, log.sync_sem, log.sync_cmd))
    i = kinds.index((END, 3, -1, 0))
    assert kinds[i + 1] == (SIGNAL, 3, 1, 0)
    assert kinds[i + 2] == (TAKE, 1, 1, 1) and kinds[i + 3] == (START, 1, -1, 1)
    sem_stall = log.stall_reason == STALL_SEMAPHORE
    assert (0, log.cmd_end[1]) in set(zip(log.stall_agent[sem_stall], log.stall_end[sem_stall]))
    assert (1, log.cmd_issue[1] + 1, log.cmd_start[1]) in set(
        zip(log.stall_agent[sem_stall], log.stall_start[sem_stall], log.stall_end[sem_stall]))


def test_vu_timing():
    cfg = small_config()
    words = setp_all({"vu.n0": 100, "vu.n1": 3, "vu.d_stride0": 1, "vu.d_stride1": 100,
                      "vu.a_stride0": 1, "vu.a_stride1": 100}) + [
        ins("vu.clip", unit=0, rd=0, ra=0), ins("halt")]
    log = run(words, cfg).last_log
    assert log.cmd_end[0] - log.cmd_start[0] == vu_cycles(300, 1, 1, cfg.vu_bytes_per_cycle, cfg.vu_latency)


def test_queue_full_back_pressure_and_param_snapshot():
    cfg = small_config(queue_depth=2)
    words = []
    for k in range(5):
        words += [ins("setpi", param=ISA.params["vu.n0"], imm=10 + k), ins("vu.clip", unit=0, rd=0, ra=0)]
    words.append(ins("halt"))
    log = run(words, cfg).last_log
    assert list(log.cmd_params[:, 0]) == [10, 11, 12, 13, 14]
    full = log.stall_reason == STALL_QUEUE_FULL
    assert full.sum() >= 1 and (log.stall_agent[full] == 0).all()
    # a stalled issue completes in the cycle the head of the full queue starts
    for c in range(3, 5):
        assert log.cmd_issue[c] in set(log.cmd_start[:c])
    assert (np.diff(log.cmd_start) > 0).all()
    assert (log.cmd_start[1:] == log.cmd_end[:-1]).all()  # in-order, back to back
    occ = log.ctr_id == 2
    assert log.ctr_value[occ].max() == 2


def test_barrier_waits_for_masked_queues():
    words = (setp_all({"vu.n0": 500}) + [ins("vu.clip", unit=0, rd=0, ra=0)]
             + [ins("barrier", mask=ISA.constants["Q_ALL"]), ins("li", rd=3, imm=1), ins("halt")])
    log = run(words).last_log
    b = list(log.sync_kind).index(BARRIER)
    assert log.sync_cycle[b] == log.cmd_end[0]
    assert log.cycles == log.cmd_end[0] + 3


def test_log_tables_grow():
    n = 700
    words = setp_all({"dma.size0": 4}) + [ins("dma", ch=k % 4, dspace=1, rd=0, sspace=0, rs=0) for k in range(n)]
    log = run(words + [ins("halt")]).last_log
    assert log.n_commands == n and (log.cmd_end > log.cmd_start).all()
    assert (log.sync_kind == ISSUE).sum() == n and (log.sync_kind == END).sum() == n


# --- errors ---------------------------------------------------------------------------------

def test_deadlock_cu_waits_forever():
    lines = [("k.s", 1), ("k.s", 2)]
    e = run_error([ins("nop"), ins("sem.wait", sem=3)], lines=lines)
    assert e.code == errors.DEADLOCK and e.cycle == 1
    assert "s3" in str(e) and "k.s:2" in str(e) and "sem.wait at 0x8" in str(e)


def test_deadlock_queue_head_and_halted_cu():
    e = run_error(setp_all({"vu.n0": 4}) + [ins("vu.clip", unit=0, rd=0, ra=0, wait=5), ins("halt")])
    assert e.code == errors.DEADLOCK
    assert "vu0 command #0" in str(e) and "waits on s5" in str(e) and "halted" in str(e)
    assert e.log.cmd_start[0] == -1
    waits = e.log.stall_reason == STALL_SEMAPHORE
    assert list(zip(e.log.stall_agent[waits], e.log.stall_start[waits], e.log.stall_end[waits])) == [
        (2, e.log.cmd_issue[0] + 1, -1)]


def test_cycle_limit():
    e = run_error([ins("jal", rd=0, off=0)], max_cycles=1000)
    assert e.code == errors.CYCLE_LIMIT and e.cycle == 1000
    assert e.log.instructions == -(-1000 // 3)


def test_a_command_signals_its_second_semaphore_at_the_same_end():
    # dma ch0 fills DM; a conv waits on its signal=s1 and a copy on ch1 on its signal2=s4: both
    # take their token in the cycle the load ends, and the CU waits for neither
    cfg = small_config()
    words = (dma_words(0, 8, 0, 0, 0, 64, signal=1, signal2=4) + nu_words(wait=1, signal=2)
             + dma_words(1, 1, 0, 1, 0, 64, wait=4, signal=5)
             + [ins("sem.wait", sem=2), ins("sem.wait", sem=5), ins("halt")])
    log = run(words, cfg).last_log
    assert list(log.cmd_signal) == [1, 2, 5] and list(log.cmd_signal2) == [4, -1, -1]
    assert log.cmd_start[1] == log.cmd_start[2] == log.cmd_end[0]
    kinds = list(zip(log.sync_kind, log.sync_agent, log.sync_sem, log.sync_cmd))
    i = kinds.index((END, 3, -1, 0))
    assert kinds[i + 1:i + 3] == [(SIGNAL, 3, 1, 0), (SIGNAL, 3, 4, 0)]
    assert sum(k == SIGNAL for k, *_ in kinds) == 4 and sum(k == TAKE for k, *_ in kinds) == 4


def test_a_second_signal_to_the_same_semaphore_adds_a_second_token():
    # signal=s3, signal2=s3: two tokens, so both the CU's waits on s3 complete
    words = [setp_all({"vu.n0": 4})[0], ins("vu.clip", unit=0, rd=0, ra=0, signal=3, signal2=3),
             ins("sem.wait", sem=3), ins("sem.wait", sem=3), ins("halt")]
    log = run(words).last_log
    assert [s for k, s in zip(log.sync_kind, log.sync_sem) if k == SIGNAL] == [3, 3]
    assert log.cycles == log.cmd_end[0] + 3          # the two takes, then halt
    e = run_error([ins("vu.clip", unit=0, rd=0, ra=0, signal=3), ins("sem.wait", sem=3), ins("sem.wait", sem=3),
                   ins("halt")])
    assert e.code == errors.DEADLOCK


def test_unit_and_semaphore_beyond_config():
    e = run_error([ins("nu.conv", unit=1, racc=0, rin=0, rw=0), ins("halt")])
    assert e.code == errors.ILLEGAL_INSTRUCTION and "nu1 does not exist" in str(e) and "nu.conv at 0x0" in str(e)
    e = run_error([ins("dma", ch=6, dspace=1, rd=0, sspace=0, rs=0), ins("halt")])
    assert e.code == errors.ILLEGAL_INSTRUCTION and "dma6 does not exist" in str(e) and "(it has 4)" in str(e)
    e = run_error([ins("sem.signal", sem=40), ins("halt")])
    assert e.code == errors.BAD_SEMAPHORE and "s40" in str(e)
    e = run_error([ins("dma", ch=0, dspace=1, rd=0, sspace=0, rs=0, signal=33), ins("halt")])
    assert e.code == errors.BAD_SEMAPHORE
    e = run_error([ins("dma", ch=0, dspace=1, rd=0, sspace=0, rs=0, signal=1, signal2=35), ins("halt")])
    assert e.code == errors.BAD_SEMAPHORE and "s35" in str(e)


def test_pc_leaves_program():
    e = run_error([ins("nop")])
    assert e.code == errors.PC_OUT_OF_RANGE and e.cycle == 1 and "0x8" in str(e)


def test_kernel_error_names_unit_memory_and_instruction():
    words = [ins("li", rd=1, imm=16 * 1024 - 8)] + dma_words(2, 1, 1, 0, 0, 64) + [ins("halt")]
    lines = [("a.s", n + 1) for n in range(len(words))]
    e = run_error(words, lines=lines)
    assert e.code == errors.OUT_OF_BOUNDS
    msg = str(e)
    assert "dma2" in msg and "dm" in msg and "a.s:" in msg and "dma at 0x" in msg
    assert "0x3ff8" in msg and "cycle" in msg
    assert e.log.cmd_start[0] == -1 and e.log.cmd_issue[0] >= 0


def test_determinism():
    words = (dma_words(0, 8, 0, 0, 0, 64, signal=1) + nu_words(wait=1, signal=2)
             + dma_words(1, 32, 0, 0, 0, 300) + [ins("sem.wait", sem=2), ins("halt")])
    a, b = run(words).last_log, run(words).last_log
    for name in a.__dataclass_fields__:
        x, y = getattr(a, name), getattr(b, name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, name
