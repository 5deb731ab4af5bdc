"""RunLog: everything a run did, as numpy arrays, for stats, traces and the race checker."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Sync event kinds (LOAD: the CU's `ld`, agent 0, sem = the DDR byte address, cmd = the instruction index)
ISSUE, START, END, SIGNAL, TAKE, BARRIER, LOAD = range(7)
# Stall reasons
STALL_QUEUE_FULL, STALL_SEMAPHORE, STALL_BARRIER, STALL_BANDWIDTH = range(4)
# Counter ids besides queue occupancy (id = agent)
CTR_DDR_BYTES = 0

# Columns of the engine's command table (one row per issued command).
(M_AGENT, M_OP, M_PC, M_ISSUE, M_START, M_END, M_REGS, _R1, _R2, M_FIELDS, _F1, _F2, _F3,
 M_WAIT, M_SIGNAL, M_BYTES, M_MACS, M_PARAMS) = range(18)
M_UNSET = M_PARAMS + 32   # bit j: parameter group_base + j was never written before the issue
M_DDR_BURST = M_UNSET + 1  # a DMA's DDR burst bytes, its DDR sides summed (timing.burst_bytes)
M_SIGNAL2 = M_DDR_BURST + 1  # the second semaphore the command signals when it ends, or -1
CMD_COLS = M_SIGNAL2 + 1
SYNC_COLS, CTR_COLS, STALL_COLS = 5, 3, 4


@dataclass
class RunLog:
    """One run: commands, synchronisation events, counters and stalls (see docs/timing.md)."""

    cycles: int
    instructions: int
    agents: list[str]
    cmd_agent: np.ndarray
    cmd_op: np.ndarray
    cmd_pc: np.ndarray
    cmd_issue: np.ndarray
    cmd_start: np.ndarray
    cmd_end: np.ndarray
    cmd_regs: np.ndarray
    cmd_fields: np.ndarray
    cmd_params: np.ndarray
    cmd_wait: np.ndarray
    cmd_signal: np.ndarray
    cmd_bytes: np.ndarray
    cmd_macs: np.ndarray
    sync_kind: np.ndarray
    sync_cycle: np.ndarray
    sync_agent: np.ndarray
    sync_sem: np.ndarray
    sync_cmd: np.ndarray
    ctr_cycle: np.ndarray
    ctr_id: np.ndarray
    ctr_value: np.ndarray
    stall_agent: np.ndarray
    stall_reason: np.ndarray
    stall_start: np.ndarray
    stall_end: np.ndarray
    error: object | None = None
    registers: np.ndarray = field(default_factory=lambda: np.zeros(32, dtype=np.int64))
    params: np.ndarray = field(default_factory=lambda: np.zeros(256, dtype=np.int64))
    pc: int = 0                  # the CU's pc when the run ended
    cmd_unset: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per command, bit j set: its group's parameter j still held its reset value, never written."""
    cmd_ddr_burst_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per DMA command, the bytes of the DDR bursts its DDR side(s) touch (read and written summed)."""
    cmd_signal2: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per command, the second semaphore it signals when it ends (-1: none)."""

    @property
    def n_commands(self) -> int:
        return len(self.cmd_agent)

    @classmethod
    def from_tables(cls, cycles: int, instructions: int, agents: list[str], cmd: np.ndarray,
                    sync: np.ndarray, ctr: np.ndarray, stall: np.ndarray) -> "RunLog":
        """Split the engine's row tables (already cut to their used rows) into named columns."""
        def c(j: int) -> np.ndarray:
            return np.ascontiguousarray(cmd[:, j])
        unset = c(M_UNSET) if cmd.shape[1] > M_UNSET else np.zeros(len(cmd), np.int64)
        burst = c(M_DDR_BURST) if cmd.shape[1] > M_DDR_BURST else np.zeros(len(cmd), np.int64)
        signal2 = c(M_SIGNAL2) if cmd.shape[1] > M_SIGNAL2 else np.full(len(cmd), -1, np.int64)
        return cls(
            cmd_unset=unset, cmd_ddr_burst_bytes=burst, cmd_signal2=signal2,
            cycles=int(cycles), instructions=int(instructions), agents=list(agents),
            cmd_agent=c(M_AGENT), cmd_op=c(M_OP), cmd_pc=c(M_PC), cmd_issue=c(M_ISSUE),
            cmd_start=c(M_START), cmd_end=c(M_END),
            cmd_regs=np.ascontiguousarray(cmd[:, M_REGS:M_REGS + 3]),
            cmd_fields=np.ascontiguousarray(cmd[:, M_FIELDS:M_FIELDS + 4]),
            cmd_params=np.ascontiguousarray(cmd[:, M_PARAMS:M_PARAMS + 32]),
            cmd_wait=c(M_WAIT), cmd_signal=c(M_SIGNAL), cmd_bytes=c(M_BYTES), cmd_macs=c(M_MACS),
            sync_kind=np.ascontiguousarray(sync[:, 0]), sync_cycle=np.ascontiguousarray(sync[:, 1]),
            sync_agent=np.ascontiguousarray(sync[:, 2]), sync_sem=np.ascontiguousarray(sync[:, 3]),
            sync_cmd=np.ascontiguousarray(sync[:, 4]),
            ctr_cycle=np.ascontiguousarray(ctr[:, 0]), ctr_id=np.ascontiguousarray(ctr[:, 1]),
            ctr_value=np.ascontiguousarray(ctr[:, 2]),
            stall_agent=np.ascontiguousarray(stall[:, 0]), stall_reason=np.ascontiguousarray(stall[:, 1]),
            stall_start=np.ascontiguousarray(stall[:, 2]), stall_end=np.ascontiguousarray(stall[:, 3]),
        )
