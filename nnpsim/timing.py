"""Every timing formula of NNP-1, shared by the simulator and the compiler's cost model.

The functions take plain integers so that numba-compiled engine code and
plain Python (the compiler) call the very same code.  docs/timing.md states
each formula in words.  The formulas an instruction's `timing` key may name
are listed in nnp1.toml's [timing] table; nnpsim.semantics checks at import
that each is a function here.
"""
from __future__ import annotations

from numba import njit

from .config import Config
from .isa_layout import DDR, DM


@njit(cache=True)
def cu_cycles(taken: bool, branch_penalty: int) -> int:
    """Cycles of one CU instruction: 1, plus the penalty for a taken branch."""
    return 1 + branch_penalty if taken else 1


@njit(cache=True)
def cu_sync_cycles() -> int:
    """Cycles of a synchronising CU instruction (halt, sem.*, barrier, a command issue) once it completes."""
    return 1


@njit(cache=True)
def nu_conv_cycles(out_cb: int, in_cb: int, k_h: int, k_w: int, out_h: int, out_w: int,
                   rows: int, latency: int) -> int:
    """Cycles of nu.conv: pipeline fill, then per weight block max(pixels, weight load)."""
    pixels = out_h * out_w
    per_block = pixels if pixels > rows else rows
    return latency + out_cb * in_cb * k_h * k_w * per_block


@njit(cache=True)
def vu_cycles(n_out: int, window: int, elem_bytes: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of a VU command: latency plus its bytes of work over the datapath width."""
    work = n_out * window * elem_bytes
    return latency + (work + bytes_per_cycle - 1) // bytes_per_cycle


@njit(cache=True)
def vu_elem_bytes(d_bytes: int, a_bytes: int, b_bytes: int) -> int:
    """The elem_bytes of vu_cycles: the widest operand element, an (M, S) pair counting as one int32."""
    return max(d_bytes, a_bytes, min(b_bytes, 4))


@njit(cache=True)
def dma_latency(src_latency: int, dst_latency: int) -> int:
    """Cycles a DMA transfer waits before its first byte moves."""
    return src_latency if src_latency > dst_latency else dst_latency


PORT_SPACES = 64
"""Port numbers: a memory space's read port is its space id, its write port the id plus
PORT_SPACES; DDR has one port for both directions (its bandwidth is shared "in all")."""


@njit(cache=True)
def read_port(space: int) -> int:
    """The DMA port a transfer reading memory space `space` streams through."""
    return space


@njit(cache=True)
def write_port(space: int) -> int:
    """The DMA port a transfer writing memory space `space` streams through."""
    return space if space == DDR else space + PORT_SPACES


@njit(cache=True)
def port_share(bytes_per_cycle: int, streams: int) -> int:
    """Bytes per cycle one of `streams` concurrent transfers gets from a memory port."""
    share = bytes_per_cycle // streams
    return share if share > 0 else 1


@njit(cache=True)
def dma_cycles(nbytes: int, src_bw: int, src_lat: int, dst_bw: int, dst_lat: int) -> int:
    """Cycles of a DMA transfer that shares no memory port with another."""
    rate = src_bw if src_bw < dst_bw else dst_bw
    return dma_latency(src_lat, dst_lat) + (nbytes + rate - 1) // rate


def memory_port(cfg: Config, space: int) -> tuple[int, int]:
    """(bytes per cycle, latency) of the DMA port of memory space `space`."""
    if space == DDR:
        return cfg.ddr_bytes_per_cycle, cfg.ddr_latency
    if space == DM:
        return cfg.dm_bytes_per_cycle, cfg.dm_latency
    return cfg.local_bytes_per_cycle, cfg.local_latency
