"""The event-driven engine: one jitted loop that runs a whole program.

Each processed cycle t goes through the three phases of docs/architecture.md
("One cycle, in order"): completions, starts (NU.., VU.., DMA..), the CU.  The
engine then jumps straight to the next cycle at which something can change:
a command's end, a DMA transfer's first streamed byte or its end under the
current port shares, a queue head that became startable (t + 1), or the CU's
next synchronising instruction.  Pure CU instructions (ALU, branches, setp)
touch nothing another agent sees, so the CU runs them in a tight loop up to
that horizon without returning to the event loop.

Everything the run does is appended to row tables; the loop reserves room
for one cycle's rows before each cycle (growing a table inside numba when it
runs short), so the phase functions only write.  nnpsim.simulator turns the
tables into a RunLog after the run.

The phase functions are inlined into the loop (inline="always"): a call
between jitted functions pays reference counting on every array argument,
which cost about a third of the engine's time per command.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from . import errors
from .cu import (C_F0, C_F1, C_F2, C_IMM, C_ISA, C_OP, C_RD, C_RS1, C_RS2, C_SIGNAL, C_SIGNAL2, C_UNIT,
                 C_WAIT, MASK32, OP_BARRIER, OP_DMA, OP_HALT, OP_NU, OP_SEM_SIGNAL, OP_SEM_WAIT,
                 OP_SYNC, OP_VU, OP_LD, exec_pure, load_word, unset_mask, wrap32)
from .runlog import (BARRIER, CMD_COLS, CTR_COLS, CTR_DDR_BYTES, END, ISSUE, LOAD, M_AGENT, M_BYTES,
                     M_DDR_BURST, M_END, M_FIELDS, M_ISSUE, M_MACS, M_OP, M_PARAMS, M_PC, M_REGS, M_SIGNAL, M_SIGNAL2, M_UNSET,
                     M_START, M_WAIT, SIGNAL, STALL_BANDWIDTH, STALL_BARRIER, STALL_COLS,
                     STALL_QUEUE_FULL, STALL_SEMAPHORE, START, SYNC_COLS, TAKE)
from .state import (K_AGENT_MASK, K_AGENTS, K_COLS, K_DDR_BURST, K_DEPTH, K_DMA, K_DMA_BASE, K_MAX_CYCLES,
                    K_NU, K_NU_BASE, K_NU_LAT, K_P_IN_CB, K_P_K_H, K_P_K_W, K_P_OUT_CB,
                    K_P_OUT_H, K_P_OUT_W, K_PENALTY, K_ROWS, K_SEMS, K_VU, K_VU_BASE, K_VU_BPC,
                    K_VU_LAT, S_BASE, S_BW, S_LAT, S_SIZE, SPACE_DDR)
from .timing import (PORT_SPACES, cu_sync_cycles, dma_latency, dma_stream_bytes, nu_conv_cycles, port_share,
                     nu_dwconv_cycles, read_port, write_port)
from .units.dma import dma_burst_bytes, dma_bytes, dma_copy
from .units.nu import (NU_CONV_ACC, NU_CONV_ACC_RQ, NU_CONV_RQ, NU_DWCONV, NU_DWCONV_ACC, NU_FCONV, nu_conv, nu_conv_rq,
                       nu_dw_macs, nu_dwconv, nu_macs)
from .units.nu_float import nu_float
from .units.vu import vu_duration, vu_exec

INF = 1 << 62
CU_RUNNING, CU_STALLED, CU_HALTED = range(3)

# Slots of the scalar state vector `st` (int64): the CU's registers of state,
# row counts of the tables, and what the caller reads back after the run.
(ST_CYCLE, ST_PC, ST_CU_STATE, ST_INSTR, ST_NCMD, ST_NSYNC, ST_NCTR, ST_NSTALL, ST_ERR_AGENT,
 ST_ERR_CMD, ST_ERR_PC, ST_STALL_REASON, ST_STALL_ARG, ST_CU_TIME, ST_CU_STALL_ROW,
 ST_DDR_USE) = range(16)
N_STATE = 16

# Columns of the per-agent table `ag` (int64 [agents, N_AG]).
(A_RUN, A_END, A_IDLE, A_QHEAD, A_QCOUNT, A_STREAM, A_LEFT, A_RATE, A_FULL, A_SRC, A_DST,
 A_BW_STALL) = range(12)
N_AG = 12

@njit(cache=True)
def _reserve(table: np.ndarray, used: int, room: int) -> np.ndarray:
    """The table, doubled as often as needed to hold `room` more rows after `used`."""
    size = table.shape[0]
    while used + room > size:
        size *= 2
    if size == table.shape[0]:
        return table
    bigger = np.zeros((size, table.shape[1]), dtype=np.int64)
    bigger[:table.shape[0]] = table
    return bigger


@njit(cache=True, inline="always")
def _log(table: np.ndarray, st: np.ndarray, count: int, v0: int, v1: int, v2: int, v3: int,
         v4: int) -> int:
    """Append a row (its first table.shape[1] of v0..v4) at st[count]; return its index."""
    n = st[count]
    table[n, 0] = v0
    table[n, 1] = v1
    table[n, 2] = v2
    if table.shape[1] > 3:
        table[n, 3] = v3
    if table.shape[1] > 4:
        table[n, 4] = v4
    st[count] = n + 1
    return n


@njit(cache=True, inline="always")
def _advance_streams(ag: np.ndarray, dma0: int, since: int, t: int) -> None:
    """Subtract the bytes every streaming DMA moved in cycles since..t-1 (rates were constant)."""
    for a in range(dma0, ag.shape[0]):
        if ag[a, A_RUN] >= 0:
            ag[a, A_LEFT] -= ag[a, A_RATE] * (t - since)


@njit(cache=True, inline="always")
def _complete(t: int, ag: np.ndarray, dma0: int, cmd: np.ndarray, sems: np.ndarray,
              sync: np.ndarray, stall: np.ndarray, st: np.ndarray) -> None:
    """Phase 1: end every command whose end is t, signalling its semaphores (signal, then signal2)."""
    for a in range(1, ag.shape[0]):
        c = ag[a, A_RUN]
        if c < 0:
            continue
        if a >= dma0:
            done = ag[a, A_STREAM] <= t and ag[a, A_LEFT] <= 0
        else:
            done = ag[a, A_END] == t
        if not done:
            continue
        ag[a, A_RUN] = -1
        ag[a, A_IDLE] = t
        ag[a, A_RATE] = 0
        cmd[c, M_END] = t
        _log(sync, st, ST_NSYNC, END, t, a, -1, c)
        if ag[a, A_BW_STALL] >= 0:
            stall[ag[a, A_BW_STALL], 3] = t
            ag[a, A_BW_STALL] = -1
        s = cmd[c, M_SIGNAL]
        if s >= 0:
            sems[s] += 1
            _log(sync, st, ST_NSYNC, SIGNAL, t, a, s, c)
        s = cmd[c, M_SIGNAL2]
        if s >= 0:
            sems[s] += 1
            _log(sync, st, ST_NSYNC, SIGNAL, t, a, s, c)


@njit(cache=True, inline="always")
def _drained(ag: np.ndarray) -> bool:
    """Every queue empty and every unit idle."""
    for a in range(1, ag.shape[0]):
        if ag[a, A_RUN] >= 0 or ag[a, A_QCOUNT] > 0:
            return False
    return True


@njit(cache=True, inline="always")
def _head(ag: np.ndarray, queue: np.ndarray, a: int) -> int:
    """The command at the head of agent a's queue, or -1."""
    return queue[a, ag[a, A_QHEAD]] if ag[a, A_QCOUNT] > 0 else -1


@njit(cache=True, inline="always")
def _startable(ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, sems: np.ndarray) -> bool:
    """Some idle unit's head command needs no token or has one available."""
    for a in range(1, ag.shape[0]):
        c = _head(ag, queue, a)
        if ag[a, A_RUN] < 0 and c >= 0:
            w = cmd[c, M_WAIT]
            if w < 0 or sems[w] > 0:
                return True
    return False


@njit(cache=True, inline="always")
def _execute(t: int, a: int, c: int, ag: np.ndarray, cmd: np.ndarray, mem: np.ndarray,
             space: np.ndarray, cfg: np.ndarray, p: np.ndarray, err: np.ndarray) -> int:
    """Apply command c's effect on unit a now and schedule its end; an errors code."""
    nnu = cfg[K_NU]
    rows = cfg[K_ROWS]
    p[:] = cmd[c, M_PARAMS:M_PARAMS + 32]
    r0 = cmd[c, M_REGS]
    r1 = cmd[c, M_REGS + 1]
    r2 = cmd[c, M_REGS + 2]
    f0 = cmd[c, M_FIELDS]
    f1 = cmd[c, M_FIELDS + 1]
    f2 = cmd[c, M_FIELDS + 2]
    if a < 1 + nnu and f0 >= NU_FCONV:
        code, dur, macs = nu_float(mem, space[S_BASE], space[S_SIZE], a - 1, r0, r1, r2, p, f0, rows, cfg[K_COLS],
                                   cfg[K_NU_LAT], err)
        if code == 0:
            cmd[c, M_MACS] = macs
            ag[a, A_END] = t + max(dur, 1)
    elif a < 1 + nnu and (f0 == NU_DWCONV or f0 == NU_DWCONV_ACC):
        code = nu_dwconv(mem, space[S_BASE], space[S_SIZE], a - 1, r0, r1, r2, p, f0 == NU_DWCONV_ACC,
                         rows, cfg[K_COLS], err)
        if code == 0:
            cmd[c, M_MACS] = nu_dw_macs(p, cfg[K_COLS])
            dur = nu_dwconv_cycles(p[cfg[K_P_IN_CB]], p[cfg[K_P_K_H]], p[cfg[K_P_K_W]], p[cfg[K_P_OUT_H]],
                                   p[cfg[K_P_OUT_W]], rows, cfg[K_NU_LAT])
            ag[a, A_END] = t + max(dur, 1)
    elif a < 1 + nnu:
        if f0 == NU_CONV_RQ or f0 == NU_CONV_ACC_RQ:
            code = nu_conv_rq(mem, space[S_BASE], space[S_SIZE], a - 1, r0, r1, r2, p, rows, cfg[K_COLS], err,
                              f0 == NU_CONV_ACC_RQ)
        else:
            code = nu_conv(mem, space[S_BASE], space[S_SIZE], a - 1, r0, r1, r2, p, f0 == NU_CONV_ACC, rows,
                           cfg[K_COLS], err)
        if code == 0:
            cmd[c, M_MACS] = nu_macs(p, rows, cfg[K_COLS])
            dur = nu_conv_cycles(p[cfg[K_P_OUT_CB]], p[cfg[K_P_IN_CB]], p[cfg[K_P_K_H]],
                                 p[cfg[K_P_K_W]], p[cfg[K_P_OUT_H]], p[cfg[K_P_OUT_W]], rows,
                                 cfg[K_NU_LAT])
            ag[a, A_END] = t + max(dur, 1)
    elif a < 1 + nnu + cfg[K_VU]:
        code = vu_exec(mem, space[S_BASE], space[S_SIZE], a - 1 - nnu, f0, r0, r1, r2, f1, f2, p, err)
        if code == 0:
            ag[a, A_END] = t + max(vu_duration(f0, p, f1, f2, cfg[K_VU_BPC], cfg[K_VU_LAT]), 1)
    else:
        code = dma_copy(mem, space[S_BASE], space[S_SIZE], f0, r0, f1, r1, p, err)
        if code == 0:
            cmd[c, M_BYTES] = dma_bytes(p)
            src_burst, dst_burst = dma_burst_bytes(p, f0, r0, f1, r1, cfg[K_DDR_BURST])
            cmd[c, M_DDR_BURST] = src_burst + dst_burst
            ag[a, A_LEFT] = dma_stream_bytes(cmd[c, M_BYTES], src_burst, dst_burst)
            ag[a, A_STREAM] = t + dma_latency(space[S_LAT, f1], space[S_LAT, f0])
            ag[a, A_SRC] = f1
            ag[a, A_DST] = f0
            ag[a, A_FULL] = min(space[S_BW, f1], space[S_BW, f0])
            ag[a, A_RATE] = 0
    return code


@njit(cache=True, inline="always")
def _start(t: int, ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, sems: np.ndarray,
           mem: np.ndarray, space: np.ndarray, cfg: np.ndarray, p: np.ndarray, err: np.ndarray,
           sync: np.ndarray, ctr: np.ndarray, stall: np.ndarray, st: np.ndarray) -> int:
    """Phase 2: idle units, in agent order, start their head command if its wait is met."""
    for a in range(1, ag.shape[0]):
        c = _head(ag, queue, a)
        if ag[a, A_RUN] >= 0 or c < 0:
            continue
        w = cmd[c, M_WAIT]
        if w >= 0:
            if sems[w] == 0:
                continue
            sems[w] -= 1
            _log(sync, st, ST_NSYNC, TAKE, t, a, w, c)
            ready = max(cmd[c, M_ISSUE] + 1, ag[a, A_IDLE])
            if t > ready:
                _log(stall, st, ST_NSTALL, a, STALL_SEMAPHORE, ready, t, 0)
        ag[a, A_QHEAD] = (ag[a, A_QHEAD] + 1) % queue.shape[1]
        ag[a, A_QCOUNT] -= 1
        _log(ctr, st, ST_NCTR, t, a, ag[a, A_QCOUNT], 0, 0)
        code = _execute(t, a, c, ag, cmd, mem, space, cfg, p, err)
        if code != 0:
            st[ST_ERR_AGENT] = a
            st[ST_ERR_CMD] = c
            st[ST_ERR_PC] = cmd[c, M_PC]
            return code
        cmd[c, M_START] = t
        ag[a, A_RUN] = c
        _log(sync, st, ST_NSYNC, START, t, a, -1, c)
    return 0


@njit(cache=True, inline="always")
def _share_ports(t: int, ag: np.ndarray, dma0: int, space: np.ndarray, port_n: np.ndarray,
                 ctr: np.ndarray, stall: np.ndarray, st: np.ndarray) -> None:
    """Each streaming DMA transfer's bytes per cycle from t on: its least port share."""
    port_n[:] = 0
    for a in range(dma0, ag.shape[0]):
        if ag[a, A_RUN] >= 0 and ag[a, A_STREAM] <= t:
            src, dst = read_port(ag[a, A_SRC]), write_port(ag[a, A_DST])
            port_n[src] += 1
            if dst != src:
                port_n[dst] += 1
    ddr = 0
    for a in range(dma0, ag.shape[0]):
        if ag[a, A_RUN] < 0 or ag[a, A_STREAM] > t:
            continue
        src, dst = read_port(ag[a, A_SRC]), write_port(ag[a, A_DST])
        r = min(port_share(space[S_BW, src % PORT_SPACES], port_n[src]),
                port_share(space[S_BW, dst % PORT_SPACES], port_n[dst]))
        ag[a, A_RATE] = r
        if ag[a, A_SRC] == SPACE_DDR or ag[a, A_DST] == SPACE_DDR:
            ddr += r
        if r < ag[a, A_FULL]:
            if ag[a, A_BW_STALL] < 0:
                ag[a, A_BW_STALL] = _log(stall, st, ST_NSTALL, a, STALL_BANDWIDTH, t, -1, 0)
        elif ag[a, A_BW_STALL] >= 0:
            stall[ag[a, A_BW_STALL], 3] = t
            ag[a, A_BW_STALL] = -1
    if ddr != st[ST_DDR_USE]:
        st[ST_DDR_USE] = ddr
        _log(ctr, st, ST_NCTR, t, CTR_DDR_BYTES, ddr, 0, 0)


@njit(cache=True, inline="always")
def _next_unit_event(t: int, ag: np.ndarray, dma0: int) -> int:
    """The next cycle at which a running command ends or a DMA transfer starts streaming."""
    nxt = INF
    for a in range(1, ag.shape[0]):
        if ag[a, A_RUN] < 0:
            continue
        if a < dma0:
            e = ag[a, A_END]
        elif ag[a, A_STREAM] > t:
            e = ag[a, A_STREAM]
        else:
            e = t + max((ag[a, A_LEFT] + ag[a, A_RATE] - 1) // ag[a, A_RATE], 1)
        nxt = min(nxt, e)
    return nxt


@njit(cache=True, inline="always")
def _issue(t: int, i: int, op: int, prog: np.ndarray, regs: np.ndarray, params: np.ndarray,
           ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, cfg: np.ndarray, err: np.ndarray,
           sync: np.ndarray, ctr: np.ndarray, st: np.ndarray) -> tuple[int, int, int]:
    """Issue the command at instruction i: (errors code, stall reason or -1, stall argument)."""
    unit = prog[i, C_UNIT]
    if op == OP_NU:
        count, a, base = cfg[K_NU], 1 + unit, cfg[K_NU_BASE]
    elif op == OP_VU:
        count, a, base = cfg[K_VU], 1 + cfg[K_NU] + unit, cfg[K_VU_BASE]
    else:
        count, a, base = cfg[K_DMA], 1 + cfg[K_NU] + cfg[K_VU] + unit, cfg[K_DMA_BASE]
    w = prog[i, C_WAIT]
    sg = prog[i, C_SIGNAL]
    sg2 = prog[i, C_SIGNAL2]
    if unit >= count:
        err[4] = unit
        return errors.ILLEGAL_INSTRUCTION, -1, 0
    if w >= cfg[K_SEMS] or sg >= cfg[K_SEMS] or sg2 >= cfg[K_SEMS]:
        err[4] = w if w >= cfg[K_SEMS] else (sg if sg >= cfg[K_SEMS] else sg2)
        return errors.BAD_SEMAPHORE, -1, 0
    if ag[a, A_QCOUNT] == queue.shape[1]:
        return 0, STALL_QUEUE_FULL, a
    c = st[ST_NCMD]
    st[ST_NCMD] = c + 1
    cmd[c, M_AGENT] = a
    cmd[c, M_OP] = prog[i, C_ISA]
    cmd[c, M_PC] = 8 * i
    cmd[c, M_ISSUE] = t
    cmd[c, M_START] = -1
    cmd[c, M_END] = -1
    cmd[c, M_REGS] = regs[prog[i, C_RD]] & MASK32
    cmd[c, M_REGS + 1] = regs[prog[i, C_RS1]] & MASK32
    cmd[c, M_REGS + 2] = 0 if op == OP_DMA else regs[prog[i, C_RS2]] & MASK32
    cmd[c, M_FIELDS] = prog[i, C_F0]
    cmd[c, M_FIELDS + 1] = 0 if op == OP_NU else prog[i, C_F1]
    cmd[c, M_FIELDS + 2] = prog[i, C_F2] if op == OP_VU else 0
    cmd[c, M_FIELDS + 3] = 0
    cmd[c, M_WAIT] = w
    cmd[c, M_SIGNAL] = sg
    cmd[c, M_SIGNAL2] = sg2
    cmd[c, M_BYTES] = 0
    cmd[c, M_DDR_BURST] = 0
    cmd[c, M_MACS] = 0
    cmd[c, M_PARAMS:M_PARAMS + 32] = params[base:base + 32]
    cmd[c, M_UNSET] = unset_mask(params, base)
    queue[a, (ag[a, A_QHEAD] + ag[a, A_QCOUNT]) % queue.shape[1]] = c
    ag[a, A_QCOUNT] += 1
    _log(sync, st, ST_NSYNC, ISSUE, t, 0, -1, c)
    _log(ctr, st, ST_NCTR, t, a, ag[a, A_QCOUNT], 0, 0)
    return 0, -1, 0


@njit(cache=True, inline="always")
def _cu_sync(t: int, i: int, prog: np.ndarray, regs: np.ndarray, params: np.ndarray,
             ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, sems: np.ndarray,
             cfg: np.ndarray, err: np.ndarray, sync: np.ndarray, ctr: np.ndarray,
             st: np.ndarray, mem: np.ndarray, space: np.ndarray) -> tuple[int, int, int]:
    """Try synchronising instruction i: (errors code, stall reason or -1, stall argument)."""
    op = prog[i, C_OP]
    if op == OP_LD:
        addr = wrap32(regs[prog[i, C_RS1]] + prog[i, C_IMM])
        code, v = load_word(mem, space[S_BASE, SPACE_DDR], space[S_SIZE, SPACE_DDR], addr, err)
        if code == 0:
            _log(sync, st, ST_NSYNC, LOAD, t, 0, addr, i)    # the race checker's read of DDR
            if prog[i, C_RD] != 0:
                regs[prog[i, C_RD]] = v
        return code, -1, 0
    if op == OP_HALT:
        st[ST_CU_STATE] = CU_HALTED
        return 0, -1, 0
    if op == OP_SEM_SIGNAL or op == OP_SEM_WAIT:
        s = prog[i, C_IMM]
        if s >= sems.shape[0]:
            err[4] = s
            return errors.BAD_SEMAPHORE, -1, 0
        if op == OP_SEM_SIGNAL:
            sems[s] += 1
            _log(sync, st, ST_NSYNC, SIGNAL, t, 0, s, -1)
        elif sems[s] > 0:
            sems[s] -= 1
            _log(sync, st, ST_NSYNC, TAKE, t, 0, s, -1)
        else:
            return 0, STALL_SEMAPHORE, s
        return 0, -1, 0
    if op == OP_BARRIER:
        mask = prog[i, C_IMM]
        for a in range(1, ag.shape[0]):
            if mask & cfg[K_AGENT_MASK + a] and (ag[a, A_QCOUNT] > 0 or ag[a, A_RUN] >= 0):
                return 0, STALL_BARRIER, mask
        _log(sync, st, ST_NSYNC, BARRIER, t, 0, mask, -1)
        return 0, -1, 0
    return _issue(t, i, op, prog, regs, params, ag, queue, cmd, cfg, err, sync, ctr, st)


@njit(cache=True, inline="always")
def _run_pure(prog: np.ndarray, regs: np.ndarray, params: np.ndarray, st: np.ndarray,
              horizon: int, penalty: int) -> None:
    """Execute pure instructions from the CU's pc while its ready time is before `horizon`."""
    pc = st[ST_PC]
    cu_time = st[ST_CU_TIME]
    n = 0
    while cu_time < horizon:
        i = pc >> 3
        if pc < 0 or i >= prog.shape[0] or prog[i, C_OP] >= OP_SYNC:
            break
        pc, cyc = exec_pure(prog, i, regs, params, penalty)
        cu_time += cyc
        n += 1
    st[ST_PC] = pc
    st[ST_CU_TIME] = cu_time
    st[ST_INSTR] += n


@njit(cache=True, inline="always")
def _cu_phase(t: int, t_units: int, prog: np.ndarray, regs: np.ndarray, params: np.ndarray,
              ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, sems: np.ndarray,
              cfg: np.ndarray, err: np.ndarray, sync: np.ndarray, ctr: np.ndarray,
              stall: np.ndarray, st: np.ndarray, mem: np.ndarray, space: np.ndarray) -> int:
    """Phase 3: the CU executes (or retries) one instruction at t, then pure ones up to t_units."""
    pc = st[ST_PC]
    i = pc >> 3
    if pc < 0 or i >= prog.shape[0]:
        err[5] = pc
        st[ST_ERR_AGENT] = 0
        st[ST_ERR_CMD] = -1
        st[ST_ERR_PC] = pc
        return errors.PC_OUT_OF_RANGE
    if prog[i, C_OP] < OP_SYNC:
        _run_pure(prog, regs, params, st, min(t_units, cfg[K_MAX_CYCLES]), cfg[K_PENALTY])
        return 0
    code, reason, arg = _cu_sync(t, i, prog, regs, params, ag, queue, cmd, sems, cfg, err, sync,
                                 ctr, st, mem, space)
    if code != 0:
        st[ST_ERR_AGENT] = 0
        st[ST_ERR_CMD] = -1
        st[ST_ERR_PC] = pc
        return code
    if reason >= 0:
        if st[ST_CU_STATE] != CU_STALLED:
            st[ST_CU_STATE] = CU_STALLED
            st[ST_CU_STALL_ROW] = _log(stall, st, ST_NSTALL, 0, reason, t, -1, 0)
        st[ST_STALL_REASON] = reason
        st[ST_STALL_ARG] = arg
        return 0
    if st[ST_CU_STATE] == CU_STALLED:
        stall[st[ST_CU_STALL_ROW], 3] = t
        st[ST_CU_STATE] = CU_RUNNING
    st[ST_INSTR] += 1
    st[ST_PC] = pc + 8
    st[ST_CU_TIME] = t + cu_sync_cycles()
    return 0


@njit(cache=True, inline="always")
def _open_waits(t: int, ag: np.ndarray, queue: np.ndarray, cmd: np.ndarray, stall: np.ndarray,
                st: np.ndarray) -> None:
    """Open semaphore-wait stalls for queue heads still waiting for a token at cycle t."""
    for a in range(1, ag.shape[0]):
        c = _head(ag, queue, a)
        if ag[a, A_RUN] < 0 and c >= 0 and cmd[c, M_WAIT] >= 0:
            ready = max(cmd[c, M_ISSUE] + 1, ag[a, A_IDLE])
            if ready <= t:
                _log(stall, st, ST_NSTALL, a, STALL_SEMAPHORE, ready, -1, 0)


def _build():
    @njit(cache=True)
    def run_engine(prog, mem, space, cfg, regs, params, st, err, cmd, sync, ctr, stall):
        """Run the program from pc 0 at cycle 0 to halt or an error; see the module docstring."""
        n_ag = cfg[K_AGENTS]
        dma0 = 1 + cfg[K_NU] + cfg[K_VU]
        max_cycles = cfg[K_MAX_CYCLES]
        queue = np.zeros((n_ag, cfg[K_DEPTH]), dtype=np.int64)
        ag = np.zeros((n_ag, N_AG), dtype=np.int64)
        ag[:, A_RUN] = -1
        ag[:, A_BW_STALL] = -1
        sems = np.zeros(cfg[K_SEMS], dtype=np.int64)
        port_n = np.zeros(2 * PORT_SPACES, dtype=np.int64)
        p = np.zeros(32, dtype=np.int64)
        st[ST_CU_STATE] = CU_RUNNING
        t = 0
        since = 0
        code = 0
        while True:
            # room for every row one cycle can add (at most 5 sync rows per agent: end, two signals,
            # take, start; ...)
            cmd = _reserve(cmd, st[ST_NCMD], 1)
            sync = _reserve(sync, st[ST_NSYNC], 5 * n_ag + 1)
            ctr = _reserve(ctr, st[ST_NCTR], n_ag + 3)
            stall = _reserve(stall, st[ST_NSTALL], 3 * n_ag + 1)

            _advance_streams(ag, dma0, since, t)
            since = t
            _complete(t, ag, dma0, cmd, sems, sync, stall, st)
            if st[ST_CU_STATE] == CU_HALTED and _drained(ag):
                if st[ST_DDR_USE] != 0:
                    _log(ctr, st, ST_NCTR, t, CTR_DDR_BYTES, 0, 0, 0)
                break
            if t >= max_cycles:
                code = errors.CYCLE_LIMIT
                _open_waits(t - 1, ag, queue, cmd, stall, st)
                break
            code = _start(t, ag, queue, cmd, sems, mem, space, cfg, p, err, sync, ctr, stall, st)
            if code != 0:
                break
            _share_ports(t, ag, dma0, space, port_n, ctr, stall, st)
            t_units = _next_unit_event(t, ag, dma0)

            state = st[ST_CU_STATE]
            if state == CU_STALLED or (state == CU_RUNNING and st[ST_CU_TIME] == t):
                code = _cu_phase(t, t_units, prog, regs, params, ag, queue, cmd, sems, cfg, err,
                                 sync, ctr, stall, st, mem, space)
                if code != 0:
                    break

            t_next = t_units
            if _startable(ag, queue, cmd, sems):
                t_next = min(t_next, t + 1)
            state = st[ST_CU_STATE]
            if state == CU_RUNNING or (state == CU_HALTED and st[ST_CU_TIME] > t):
                t_next = min(t_next, st[ST_CU_TIME])
            if t_next >= INF:
                code = errors.DEADLOCK
                _open_waits(t, ag, queue, cmd, stall, st)
                break
            t = min(t_next, max_cycles)

        err[0] = code
        st[ST_CYCLE] = t
        heads = np.full(n_ag, -1, dtype=np.int64)
        for a in range(1, n_ag):
            heads[a] = _head(ag, queue, a)
        return cmd, sync, ctr, stall, sems, heads

    return run_engine


_run_engine = None


def engine():
    """The compiled engine (built on first use, then cached on disk by numba)."""
    global _run_engine
    if _run_engine is None:
        _run_engine = _build()
    return _run_engine


def new_tables(n_commands: int = 256) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Empty command, sync, counter and stall tables for a run (grown by the engine as needed)."""
    return (np.zeros((n_commands, CMD_COLS), dtype=np.int64),
            np.zeros((4 * n_commands, SYNC_COLS), dtype=np.int64),
            np.zeros((4 * n_commands, CTR_COLS), dtype=np.int64),
            np.zeros((n_commands, STALL_COLS), dtype=np.int64))
