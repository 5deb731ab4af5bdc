"""Machine state as flat arrays: memory layout, agents, ports and the engine's config vector."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from isa_spec import Isa, load_isa

from .config import Config
from .isa_layout import DDR as SPACE_DDR
from .isa_layout import DM as SPACE_DM
from .isa_layout import GROUP_BASE, LOCAL_SPACES, N_SPACES, offset, space_name
from .timing import memory_port

PORT_ALIGN = 64

# Rows of the `space` table handed to the engine (int64 [4, N_SPACES]).
S_BASE, S_SIZE, S_BW, S_LAT = range(4)

# Agent kinds
CU, NU, VU, DMA = range(4)

# Indices of the engine's config vector.
(K_NU, K_VU, K_DMA, K_AGENTS, K_DEPTH, K_SEMS, K_PENALTY, K_ROWS, K_COLS, K_NU_LAT,
 K_VU_BPC, K_VU_LAT, K_MAX_CYCLES, K_DMA_BASE, K_NU_BASE, K_VU_BASE,
 K_P_OUT_CB, K_P_IN_CB, K_P_K_H, K_P_K_W, K_P_OUT_H, K_P_OUT_W, K_DDR_BURST) = range(23)
K_AGENT_MASK = 24          # barrier mask bit of agent a at K_AGENT_MASK + a
N_CONFIG = K_AGENT_MASK + 1 + 4 + 4 + 8

NU_TIMING_PARAMS = ("nu.out_cb", "nu.in_cb", "nu.k_h", "nu.k_w", "nu.out_h", "nu.out_w")


def space_sizes(cfg: Config) -> np.ndarray:
    """Size in bytes of every memory space (0 where the configuration has none)."""
    size = np.zeros(N_SPACES, dtype=np.int64)
    size[SPACE_DDR] = cfg.ddr_bytes
    size[SPACE_DM] = cfg.dm_bytes
    for k in range(cfg.nu_count):
        size[LOCAL_SPACES["ibuf"] + k] = cfg.ibuf_bytes
        size[LOCAL_SPACES["wbuf"] + k] = cfg.wbuf_bytes
        size[LOCAL_SPACES["abuf"] + k] = cfg.abuf_bytes
    for k in range(cfg.vu_count):
        size[LOCAL_SPACES["vbuf"] + k] = cfg.vbuf_bytes
    return size


def space_table(cfg: Config) -> tuple[np.ndarray, int]:
    """The engine's space table (base, size, port bandwidth, port latency) and total memory bytes."""
    table = np.zeros((4, N_SPACES), dtype=np.int64)
    table[S_SIZE] = space_sizes(cfg)
    base = 0
    for s in range(N_SPACES):
        table[S_BASE, s] = base
        base += -(-int(table[S_SIZE, s]) // PORT_ALIGN) * PORT_ALIGN
        table[S_BW, s], table[S_LAT, s] = memory_port(cfg, s)
    return table, base


def agent_names(cfg: Config) -> list[str]:
    """Agent names by id: cu, nu0.., vu0.., dma0.."""
    return (["cu"] + [f"nu{k}" for k in range(cfg.nu_count)] + [f"vu{k}" for k in range(cfg.vu_count)]
            + [f"dma{k}" for k in range(cfg.dma_channels)])


def agent_of(cfg: Config, kind: int, index: int) -> int:
    """Agent id of unit `index` of a kind (NU, VU or DMA)."""
    if kind == NU:
        return 1 + index
    if kind == VU:
        return 1 + cfg.nu_count + index
    return 1 + cfg.nu_count + cfg.vu_count + index


def config_vector(cfg: Config, max_cycles: int, isa: Isa | None = None) -> np.ndarray:
    """Every number the engine needs from the configuration and the ISA, as int64."""
    isa = isa or load_isa()
    k = np.zeros(N_CONFIG, dtype=np.int64)
    k[K_NU], k[K_VU], k[K_DMA] = cfg.nu_count, cfg.vu_count, cfg.dma_channels
    k[K_AGENTS] = 1 + cfg.nu_count + cfg.vu_count + cfg.dma_channels
    k[K_DEPTH], k[K_SEMS], k[K_PENALTY] = cfg.queue_depth, cfg.semaphores, cfg.branch_penalty
    k[K_ROWS], k[K_COLS], k[K_NU_LAT] = cfg.nu_rows, cfg.nu_cols, cfg.nu_latency
    k[K_VU_BPC], k[K_VU_LAT] = cfg.vu_bytes_per_cycle, cfg.vu_latency
    k[K_MAX_CYCLES] = max_cycles
    k[K_DDR_BURST] = cfg.ddr_burst_bytes
    k[K_DMA_BASE], k[K_NU_BASE], k[K_VU_BASE] = GROUP_BASE["DMA"], GROUP_BASE["NU"], GROUP_BASE["VU"]
    for slot, name in zip(range(K_P_OUT_CB, K_P_OUT_W + 1), NU_TIMING_PARAMS):
        k[slot] = offset(name)
    for kind, prefix, count in ((NU, "Q_NU", cfg.nu_count), (VU, "Q_VU", cfg.vu_count),
                                (DMA, "Q_DMA", cfg.dma_channels)):
        for i in range(count):
            k[K_AGENT_MASK + agent_of(cfg, kind, i)] = isa.constants[f"{prefix}{i}"]
    return k


@dataclass
class Memory:
    """Every memory of the machine in one flat byte array, addressed by space id."""

    mem: np.ndarray
    table: np.ndarray

    @classmethod
    def for_config(cls, cfg: Config) -> "Memory":
        """Zeroed memories laid out for `cfg`."""
        table, total = space_table(cfg)
        return cls(np.zeros(total, dtype=np.uint8), table)

    @property
    def space_base(self) -> np.ndarray:
        return self.table[S_BASE]

    @property
    def space_size(self) -> np.ndarray:
        return self.table[S_SIZE]

    def view(self, space: int, addr: int, nbytes: int) -> np.ndarray:
        """A writable byte view of [addr, addr + nbytes) of a space; ValueError if it leaves the space."""
        size = int(self.table[S_SIZE, space])
        if addr < 0 or nbytes < 0 or addr + nbytes > size:
            raise ValueError(f"bytes [{addr:#x}, {addr + nbytes:#x}) leave {space_name(space)} "
                             f"(size {size:#x})")
        base = int(self.table[S_BASE, space]) + addr
        return self.mem[base:base + nbytes]
