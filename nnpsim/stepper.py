"""A cycle-stepped reference engine in plain Python, for tests only.

It ticks every cycle through the three phases of docs/architecture.md and
applies the per-cycle DMA port-share rule literally, cycle by cycle.  It calls
the same unit kernels (for functional effects), the same timing formulas and
the same pure-instruction semantics as the event engine, so a difference
between the two is a difference in scheduling, which is what it checks.
"""
from __future__ import annotations

import numpy as np

from isa_spec import load_isa

from . import errors
from .config import Config
from .cu import (C_F0, C_F1, C_F2, C_IMM, C_ISA, C_OP, C_RD, C_RS1, C_RS2, C_SIGNAL, C_SIGNAL2, C_UNIT,
                 C_WAIT, MASK32, OP_BARRIER, OP_DMA, OP_HALT, OP_NU, OP_SEM_SIGNAL, OP_SEM_WAIT,
                 OP_SYNC, OP_VU, OP_LD, PARAM_REGS, exec_pure, load_word, new_param_file,
                 unset_mask, wrap32)
from .runlog import (BARRIER, CMD_COLS, CTR_DDR_BYTES, END, ISSUE, LOAD, M_AGENT, M_BYTES, M_DDR_BURST, M_END,
                     M_FIELDS, M_ISSUE, M_MACS, M_OP, M_PARAMS, M_PC, M_REGS, M_SIGNAL, M_SIGNAL2, M_START, M_UNSET,
                     M_WAIT, SIGNAL, STALL_BANDWIDTH, STALL_BARRIER, STALL_QUEUE_FULL,
                     STALL_SEMAPHORE, START, TAKE, RunLog)
from .state import (K_AGENT_MASK, K_DMA_BASE, K_NU_BASE, K_P_IN_CB, K_P_K_H, K_P_K_W,
                    K_P_OUT_CB, K_P_OUT_H, K_P_OUT_W, K_VU_BASE, S_BASE, S_BW, S_LAT, S_SIZE,
                    SPACE_DDR, Memory, agent_names, config_vector)
from .timing import (PORT_SPACES, cu_sync_cycles, dma_latency, dma_stream_bytes, nu_conv_cycles, port_share,
                     nu_dwconv_cycles, read_port, write_port)
from .units.dma import dma_burst_bytes, dma_bytes, dma_copy
from .units.nu import (NU_CONV_ACC, NU_CONV_ACC_RQ, NU_CONV_RQ, NU_DWCONV, NU_DWCONV_ACC, NU_FCONV, nu_conv, nu_conv_rq,
                       nu_dw_macs, nu_dwconv, nu_macs)
from .units.nu_float import nu_float
from .units.vu import vu_duration, vu_exec


class _Stop(Exception):
    def __init__(self, code: int):
        self.code = code


class Stepper:
    """The machine stepped one cycle at a time."""

    def __init__(self, table: np.ndarray, memory: Memory, config: Config, max_cycles: int):
        isa = load_isa()
        self.prog, self.memory, self.cfg = table, memory, config
        self.k = config_vector(config, max_cycles, isa)
        self.max_cycles = max_cycles
        self.nnu, self.nvu, self.ndma = config.nu_count, config.vu_count, config.dma_channels
        self.n_ag = 1 + self.nnu + self.nvu + self.ndma
        self.dma0 = 1 + self.nnu + self.nvu
        self.regs = np.zeros(32, dtype=np.int64)
        self.params = new_param_file(isa)
        self.err = np.zeros(8, dtype=np.int64)
        self.sems = [0] * config.semaphores
        self.queues: list[list[int]] = [[] for _ in range(self.n_ag)]
        self.running = [-1] * self.n_ag
        self.end_t = [0] * self.n_ag
        self.idle_since = [0] * self.n_ag
        self.stream_at = [0] * self.n_ag
        self.remaining = [0] * self.n_ag
        self.full_rate = [0] * self.n_ag
        self.ports = [(0, 0)] * self.n_ag
        self.bw_stall = [-1] * self.n_ag
        self.cmd: list[np.ndarray] = []
        self.sync: list[tuple] = []
        self.ctr: list[tuple] = []
        self.stall: list[list[int]] = []
        self.pc = 0
        self.cu_time = 0
        self.cu_state = "running"
        self.cu_stall_row = -1
        self.instructions = 0
        self.ddr_use = 0
        self.t = 0

    def run(self) -> tuple[RunLog, int]:
        """Step until halt and drain, or an error; the RunLog and the error code (0 if none)."""
        code = errors.OK
        try:
            while True:
                self._completions()
                if self.cu_state == "halted" and self._drained():
                    if self.ddr_use:
                        self.ctr.append((self.t, CTR_DDR_BYTES, 0))
                    break
                if self.t >= self.max_cycles:
                    raise _Stop(errors.CYCLE_LIMIT)
                self._starts()
                self._stream()
                self._cu()
                if self._deadlocked():
                    raise _Stop(errors.DEADLOCK)
                self.t += 1
        except _Stop as stop:
            code = stop.code
        if code in (errors.DEADLOCK, errors.CYCLE_LIMIT):
            self._open_waits(self.t if code == errors.DEADLOCK else self.t - 1)
        return self._log(), code

    def _open_waits(self, last: int) -> None:
        """Semaphore-wait stalls, still open, of queue heads that were waiting when the run stopped."""
        for a in range(1, self.n_ag):
            if self.running[a] < 0 and self.queues[a]:
                row = self.cmd[self.queues[a][0]]
                ready = max(int(row[M_ISSUE]) + 1, self.idle_since[a])
                if row[M_WAIT] >= 0 and ready <= last:
                    self.stall.append([a, STALL_SEMAPHORE, ready, -1])

    def _drained(self) -> bool:
        return all(r < 0 for r in self.running[1:]) and not any(self.queues[1:])

    def _completions(self) -> None:
        t = self.t
        for a in range(1, self.n_ag):
            c = self.running[a]
            if c < 0:
                continue
            if a >= self.dma0:
                done = self.stream_at[a] <= t and self.remaining[a] <= 0
            else:
                done = self.end_t[a] == t
            if not done:
                continue
            self.running[a] = -1
            self.idle_since[a] = t
            self.cmd[c][M_END] = t
            self.sync.append((END, t, a, -1, c))
            if self.bw_stall[a] >= 0:
                self.stall[self.bw_stall[a]][3] = t
                self.bw_stall[a] = -1
            for s in (int(self.cmd[c][M_SIGNAL]), int(self.cmd[c][M_SIGNAL2])):
                if s >= 0:
                    self.sems[s] += 1
                    self.sync.append((SIGNAL, t, a, s, c))

    def _starts(self) -> None:
        t, k, mem = self.t, self.k, self.memory
        for a in range(1, self.n_ag):
            if self.running[a] >= 0 or not self.queues[a]:
                continue
            c = self.queues[a][0]
            row = self.cmd[c]
            w = int(row[M_WAIT])
            if w >= 0:
                if self.sems[w] == 0:
                    continue
                self.sems[w] -= 1
                self.sync.append((TAKE, t, a, w, c))
                ready = max(int(row[M_ISSUE]) + 1, self.idle_since[a])
                if t > ready:
                    self.stall.append([a, STALL_SEMAPHORE, ready, t])
            self.queues[a].pop(0)
            self.ctr.append((t, a, len(self.queues[a])))
            p = row[M_PARAMS:M_PARAMS + 32].copy()
            r0, r1, r2 = (int(v) for v in row[M_REGS:M_REGS + 3])
            f0, f1, f2 = (int(v) for v in row[M_FIELDS:M_FIELDS + 3])
            sb, ss = mem.table[S_BASE], mem.table[S_SIZE]
            if a < 1 + self.nnu and f0 >= NU_FCONV:
                code, dur, macs = nu_float(mem.mem, sb, ss, a - 1, r0, r1, r2, p, f0, self.cfg.nu_rows,
                                           self.cfg.nu_cols, self.cfg.nu_latency, self.err)
                if code == 0:
                    row[M_MACS] = macs
                    self.end_t[a] = t + max(dur, 1)
            elif a < 1 + self.nnu and (f0 == NU_DWCONV or f0 == NU_DWCONV_ACC):
                code = nu_dwconv(mem.mem, sb, ss, a - 1, r0, r1, r2, p, f0 == NU_DWCONV_ACC,
                                 self.cfg.nu_rows, self.cfg.nu_cols, self.err)
                if code == 0:
                    row[M_MACS] = nu_dw_macs(p, self.cfg.nu_cols)
                    dur = nu_dwconv_cycles(*(int(p[k[j]]) for j in (K_P_IN_CB, K_P_K_H, K_P_K_W, K_P_OUT_H,
                                                                     K_P_OUT_W)),
                                           self.cfg.nu_rows, self.cfg.nu_latency)
                    self.end_t[a] = t + max(dur, 1)
            elif a < 1 + self.nnu:
                if f0 == NU_CONV_RQ or f0 == NU_CONV_ACC_RQ:
                    code = nu_conv_rq(mem.mem, sb, ss, a - 1, r0, r1, r2, p, self.cfg.nu_rows, self.cfg.nu_cols,
                                      self.err, f0 == NU_CONV_ACC_RQ)
                else:
                    code = nu_conv(mem.mem, sb, ss, a - 1, r0, r1, r2, p, f0 == NU_CONV_ACC, self.cfg.nu_rows,
                                   self.cfg.nu_cols, self.err)
                if code == 0:
                    row[M_MACS] = nu_macs(p, self.cfg.nu_rows, self.cfg.nu_cols)
                    dur = nu_conv_cycles(*(int(p[k[j]]) for j in (K_P_OUT_CB, K_P_IN_CB, K_P_K_H, K_P_K_W,
                                                                   K_P_OUT_H, K_P_OUT_W)),
                                         self.cfg.nu_rows, self.cfg.nu_latency)
                    self.end_t[a] = t + max(dur, 1)
            elif a < self.dma0:
                code = vu_exec(mem.mem, sb, ss, a - 1 - self.nnu, f0, r0, r1, r2, f1, f2, p, self.err)
                if code == 0:
                    dur = vu_duration(f0, p, f1, f2, self.cfg.vu_bytes_per_cycle, self.cfg.vu_latency)
                    self.end_t[a] = t + max(dur, 1)
            else:
                code = dma_copy(mem.mem, sb, ss, f0, r0, f1, r1, p, self.err)
                if code == 0:
                    row[M_BYTES] = dma_bytes(p)
                    src_burst, dst_burst = dma_burst_bytes(p, f0, r0, f1, r1, self.cfg.ddr_burst_bytes)
                    row[M_DDR_BURST] = src_burst + dst_burst
                    self.remaining[a] = int(dma_stream_bytes(int(row[M_BYTES]), src_burst, dst_burst))
                    lat, bw = mem.table[S_LAT], mem.table[S_BW]
                    self.stream_at[a] = t + dma_latency(int(lat[f1]), int(lat[f0]))
                    self.ports[a] = (read_port(f1), write_port(f0))
                    self.full_rate[a] = min(int(bw[f1]), int(bw[f0]))
            if code != 0:
                raise _Stop(code)
            row[M_START] = t
            self.running[a] = c
            self.sync.append((START, t, a, -1, c))

    def _stream(self) -> None:
        """Move this cycle's bytes of every streaming DMA transfer at its port share."""
        t, bw = self.t, self.memory.table[S_BW]
        streaming = [a for a in range(self.dma0, self.n_ag)
                     if self.running[a] >= 0 and self.stream_at[a] <= t]
        users: dict[int, int] = {}
        for a in streaming:
            for port in set(self.ports[a]):
                users[port] = users.get(port, 0) + 1
        ddr = 0
        for a in streaming:
            src, dst = self.ports[a]
            r = min(port_share(int(bw[src % PORT_SPACES]), users[src]),
                    port_share(int(bw[dst % PORT_SPACES]), users[dst]))
            self.remaining[a] -= r
            if SPACE_DDR in (src, dst):
                ddr += r
            if r < self.full_rate[a]:
                if self.bw_stall[a] < 0:
                    self.bw_stall[a] = len(self.stall)
                    self.stall.append([a, STALL_BANDWIDTH, t, -1])
            elif self.bw_stall[a] >= 0:
                self.stall[self.bw_stall[a]][3] = t
                self.bw_stall[a] = -1
        if ddr != self.ddr_use:
            self.ddr_use = ddr
            self.ctr.append((t, CTR_DDR_BYTES, ddr))

    def _cu(self) -> None:
        t = self.t
        if not (self.cu_state == "stalled" or (self.cu_state == "running" and self.cu_time == t)):
            return
        i = self.pc >> 3
        if self.pc < 0 or i >= len(self.prog):
            self.err[5] = self.pc
            raise _Stop(errors.PC_OUT_OF_RANGE)
        op = int(self.prog[i, C_OP])
        if op < OP_SYNC:
            pc, cyc = exec_pure(self.prog, i, self.regs, self.params, self.cfg.branch_penalty)
            self.pc = int(pc)
            self.instructions += 1
            self.cu_time = t + int(cyc)
            return
        stall = self._cu_sync(op, i)
        if stall is not None:
            if self.cu_state != "stalled":
                self.cu_state = "stalled"
                self.cu_stall_row = len(self.stall)
                self.stall.append([0, stall, t, -1])
            return
        if self.cu_state == "stalled":
            self.stall[self.cu_stall_row][3] = t
            self.cu_state = "running"
        if op == OP_HALT:
            self.cu_state = "halted"
        self.instructions += 1
        self.pc += 8
        self.cu_time = t + int(cu_sync_cycles())

    def _cu_sync(self, op: int, i: int) -> int | None:
        """Execute a synchronising instruction; its stall reason if it must wait, else None."""
        t, row, nsem = self.t, self.prog[i], len(self.sems)
        if op == OP_LD:
            m = self.memory
            addr = int(wrap32(self.regs[row[C_RS1]] + row[C_IMM]))
            code, v = load_word(m.mem, int(m.table[S_BASE, SPACE_DDR]), int(m.table[S_SIZE, SPACE_DDR]), addr,
                                self.err)
            if code:
                raise _Stop(code)
            self.sync.append((LOAD, t, 0, addr, i))
            if row[C_RD] != 0:
                self.regs[row[C_RD]] = v
            return None
        if op == OP_HALT:
            return None
        if op in (OP_SEM_SIGNAL, OP_SEM_WAIT):
            s = int(row[C_IMM])
            if s >= nsem:
                self._cu_error(errors.BAD_SEMAPHORE, s)
            if op == OP_SEM_SIGNAL:
                self.sems[s] += 1
                self.sync.append((SIGNAL, t, 0, s, -1))
                return None
            if self.sems[s] == 0:
                return STALL_SEMAPHORE
            self.sems[s] -= 1
            self.sync.append((TAKE, t, 0, s, -1))
            return None
        if op == OP_BARRIER:
            mask = int(row[C_IMM])
            for a in range(1, self.n_ag):
                if mask & int(self.k[K_AGENT_MASK + a]) and (self.queues[a] or self.running[a] >= 0):
                    return STALL_BARRIER
            self.sync.append((BARRIER, t, 0, mask, -1))
            return None
        unit = int(row[C_UNIT])
        kind = {OP_NU: (self.nnu, 1, K_NU_BASE), OP_VU: (self.nvu, 1 + self.nnu, K_VU_BASE),
                OP_DMA: (self.ndma, self.dma0, K_DMA_BASE)}
        count, first, base_slot = kind[op]
        w, sg, sg2 = int(row[C_WAIT]), int(row[C_SIGNAL]), int(row[C_SIGNAL2])
        if unit >= count:
            self._cu_error(errors.ILLEGAL_INSTRUCTION, unit)
        if max(w, sg, sg2) >= nsem:
            self._cu_error(errors.BAD_SEMAPHORE, next(s for s in (w, sg, sg2) if s >= nsem))
        a = first + unit
        if len(self.queues[a]) == self.cfg.queue_depth:
            return STALL_QUEUE_FULL
        c = len(self.cmd)
        base = int(self.k[base_slot])
        new = np.zeros(CMD_COLS, dtype=np.int64)
        new[M_AGENT], new[M_OP], new[M_PC], new[M_ISSUE] = a, row[C_ISA], self.pc, t
        new[M_START] = new[M_END] = -1
        new[M_REGS] = self.regs[row[C_RD]] & MASK32
        new[M_REGS + 1] = self.regs[row[C_RS1]] & MASK32
        new[M_REGS + 2] = 0 if op == OP_DMA else self.regs[row[C_RS2]] & MASK32
        new[M_FIELDS] = row[C_F0]
        new[M_FIELDS + 1] = 0 if op == OP_NU else row[C_F1]
        new[M_FIELDS + 2] = row[C_F2] if op == OP_VU else 0
        new[M_WAIT], new[M_SIGNAL], new[M_SIGNAL2] = w, sg, sg2
        new[M_PARAMS:M_PARAMS + 32] = self.params[base:base + 32]
        new[M_UNSET] = unset_mask(self.params, base)
        self.cmd.append(new)
        self.queues[a].append(c)
        self.sync.append((ISSUE, t, 0, -1, c))
        self.ctr.append((t, a, len(self.queues[a])))
        return None

    def _cu_error(self, code: int, value: int) -> None:
        self.err[4] = value
        raise _Stop(code)

    def _deadlocked(self) -> bool:
        """Nothing in flight, no queue head can start and the CU can make no progress by itself."""
        if any(r >= 0 for r in self.running[1:]):
            return False
        for a in range(1, self.n_ag):
            if self.queues[a]:
                w = int(self.cmd[self.queues[a][0]][M_WAIT])
                if w < 0 or self.sems[w] > 0:
                    return False
        if self.cu_state == "running":
            return False
        return not (self.cu_state == "halted" and self.cu_time > self.t)

    def _log(self) -> RunLog:
        cmd = np.array(self.cmd, dtype=np.int64).reshape(-1, CMD_COLS)
        sync = np.array(self.sync, dtype=np.int64).reshape(-1, 5)
        ctr = np.array(self.ctr, dtype=np.int64).reshape(-1, 3)
        stall = np.array(self.stall, dtype=np.int64).reshape(-1, 4)
        log = RunLog.from_tables(self.t, self.instructions, agent_names(self.cfg), cmd, sync, ctr, stall)
        log.registers = self.regs
        log.params = self.params[:PARAM_REGS]
        log.pc = self.pc
        return log


def step_program(table: np.ndarray, memory: Memory, config: Config,
                 max_cycles: int) -> tuple[RunLog, int]:
    """Run a decoded program with the cycle-stepped engine; the RunLog and the error code."""
    return Stepper(table, memory, config, max_cycles).run()
