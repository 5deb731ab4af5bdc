"""Every timing formula of NNP-1, shared by the simulator and the compiler's cost model.

The functions take plain integers so that numba-compiled engine code and
plain Python (the compiler) call the very same code.  docs/timing.md states
each formula in words.  The formulas an instruction's `timing` key may name
are listed in nnp1.toml's [timing] table; nnpsim.semantics checks at import
that each is a function here.
"""
from __future__ import annotations

import numpy as np
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
def nu_dwconv_cycles(in_cb: int, k_h: int, k_w: int, out_h: int, out_w: int, rows: int, latency: int) -> int:
    """Cycles of nu.dwconv: each column is one channel, its rows hold the taps of rows // taps pixels
    at once (one tap group per pass when the window has more taps than rows); per block and pass
    max(pixel groups, weight load)."""
    taps = k_h * k_w
    if taps <= rows:
        per_cycle, passes = rows // taps, 1
    else:
        per_cycle, passes = 1, (taps + rows - 1) // rows
    pixels = out_h * out_w
    groups = (pixels + per_cycle - 1) // per_cycle
    per_pass = groups if groups > rows else rows
    return latency + in_cb * passes * per_pass


NU_F32_PASSES = 4
"""Passes the NU's float32 mode takes over each of nu.conv's (nu.dwconv's): a float32 multiply-add runs at a
quarter of the int8 rate."""


@njit(cache=True)
def nu_fconv_cycles(out_cb: int, in_cb: int, k_h: int, k_w: int, out_h: int, out_w: int,
                    rows: int, latency: int) -> int:
    """Cycles of nu.fconv and nu.fconv.rq: nu.conv's work, NU_F32_PASSES times over."""
    return latency + NU_F32_PASSES * (nu_conv_cycles(out_cb, in_cb, k_h, k_w, out_h, out_w, rows, latency) - latency)


@njit(cache=True)
def nu_fdwconv_cycles(in_cb: int, k_h: int, k_w: int, out_h: int, out_w: int, rows: int, latency: int) -> int:
    """Cycles of nu.fdwconv: nu.dwconv's work, NU_F32_PASSES times over."""
    return latency + NU_F32_PASSES * (nu_dwconv_cycles(in_cb, k_h, k_w, out_h, out_w, rows, latency) - latency)


@njit(cache=True)
def vu_cycles(n_out: int, window: int, elem_bytes: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of a VU command: latency plus its bytes of work over the datapath width."""
    work = n_out * window * elem_bytes
    return latency + (work + bytes_per_cycle - 1) // bytes_per_cycle


@njit(cache=True)
def vu_pool_cycles(n_out: int, window: int, d_bytes: int, a_bytes: int, b_bytes: int, bytes_per_cycle: int,
                   latency: int) -> int:
    """Cycles of a pooling command that accumulates inside the VU: latency plus its window elements at
    a's width, and each output's d and b once, over the datapath width."""
    work = n_out * (window * a_bytes + d_bytes + b_bytes)
    return latency + (work + bytes_per_cycle - 1) // bytes_per_cycle


LUT_BYTES = 256
"""Entries of vu.lut's table: one int8 per int8 input."""


@njit(cache=True)
def vu_lut_cycles(n_out: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of vu.lut: latency, then its 256-byte table into the lanes' lookup RAM and one byte an output,
    over the datapath width."""
    return latency + (LUT_BYTES + n_out + bytes_per_cycle - 1) // bytes_per_cycle


AFFINE_PAIR_BYTES = 8
"""Bytes of vu.faffine's (scale, offset) pair: two float32s."""


@njit(cache=True)
def vu_affine_cycles(n_out: int, n0: int, per_row: bool, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of vu.faffine: latency, then one byte an output, and its (scale, offset) pair once a row of n0
    outputs when the pair stays put along n0 (per_row: a channel's pair broadcast to its lanes), else once an
    output, over the datapath width."""
    reads = n_out // n0 if per_row else n_out
    return latency + (n_out + AFFINE_PAIR_BYTES * reads + bytes_per_cycle - 1) // bytes_per_cycle


LERP_ENTRY = 16
"""Bytes of a vu.lerp table entry: two int32 indices and two 32-bit weights."""


@njit(cache=True)
def vu_lerp_cycles(n_out: int, n0: int, n1: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of vu.lerp: latency, then each output's two neighbour pairs (a read each) and the table's
    n0 + n1 entries into the lanes' table RAM, over the datapath width."""
    return latency + (2 * n_out + LERP_ENTRY * (n0 + n1) + bytes_per_cycle - 1) // bytes_per_cycle


@njit(cache=True)
def slide_span(n: int, step: int, win: int) -> int:
    """Input rows (or columns) n windows of `win` at `step` apart cover: gaps between windows are never read."""
    reach = (n - 1) * step + win
    return reach if reach < n * win else n * win


SLIDE_FADDERS = 3
"""Float32 adders each lane of the sliding-window engine chains (docs/architecture.md, "The sliding-window
engine"): a lane takes up to three of its output's window elements a cycle, rounding after each add."""


@njit(cache=True)
def vu_slide_cycles(n0: int, n1: int, planes: int, step_w: int, step_h: int, win_h: int, win_w: int,
                    d_bytes: int, b_bytes: int, b_per_plane: bool, fadd: bool, bytes_per_cycle: int,
                    latency: int) -> int:
    """Cycles of the sliding-window engine: each plane's input bytes once, each output's d once and b once an
    output (once a plane when b is one count a plane), or, for the float form, its adds (each window element
    but the first, which loads the lane's sum) over SLIDE_FADDERS adders a lane if that is more."""
    n_out = n0 * n1 * planes
    stream = planes * slide_span(n1, step_h, win_h) * slide_span(n0, step_w, win_w) + n_out * d_bytes
    stream += planes * b_bytes if b_per_plane else n_out * b_bytes
    adds = (n_out * (win_h * win_w - 1) + SLIDE_FADDERS - 1) // SLIDE_FADDERS if fadd else 0
    work = stream if stream > adds else adds
    return latency + (work + bytes_per_cycle - 1) // bytes_per_cycle


SOFTMAX_TABLE_BYTES = 1024
"""Bytes of vu.softmax's table: 256 float32 exponentials, one per difference x - max(row) in [-255, 0]."""


@njit(cache=True)
def vu_softmax_cycles(rows: int, n0: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of vu.softmax: latency, its float32 table into the lanes' lookup RAM, then each float32 lane
    takes a row of n0 through three pipelined stages (max, the in-order sum, the quotients), one element a
    cycle each: a group of lanes takes n0 cycles a stage, and the groups overlap but for the first two stages."""
    lanes = max(1, bytes_per_cycle // 4)
    table = (SOFTMAX_TABLE_BYTES + bytes_per_cycle - 1) // bytes_per_cycle
    return latency + table + ((rows + lanes - 1) // lanes + 2) * n0


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


@njit(cache=True)
def dma_stream_bytes(nbytes: int, src_burst_bytes: int, dst_burst_bytes: int) -> int:
    """Bytes a DMA transfer streams at its port shares: its bytes, or the DDR bursts of its DDR side(s)
    if more (burst_bytes of the source if in DDR, of the destination if in DDR, else 0)."""
    return max(nbytes, src_burst_bytes, dst_burst_bytes)


@njit(cache=True)
def _box_residues(out: np.ndarray, tmp: np.ndarray, cls: np.ndarray, base: int,
                  n: tuple[int, int, int, int], s: tuple[int, int, int, int], mask: int) -> None:
    """out[r] = how many of the points base + sum_k i_k * s_k (0 <= i_k < n_k) are r modulo mask + 1.

    One dim at a time, without visiting the points: modulo a power of two B, i * s_k
    cycles through the multiples of g = gcd(s_k, B) every B / g steps, so whole cycles
    spread each count evenly over its residue class modulo g and only the rest of a
    cycle is walked.  A dim costs O(B + (residues held so far) * min(n_k, B / g)).
    """
    burst = mask + 1
    out[:] = 0
    out[base & mask] = 1
    for k in range(4):
        nk = n[k]
        if nk <= 1:
            continue
        step = s[k] & mask
        if step == 0:
            for r in range(burst):
                out[r] *= nk
            continue
        g = step & -step
        period = burst // g
        full = nk // period
        rest = nk - full * period
        if full > 0:
            cls[:g] = 0
            for r in range(burst):
                cls[r & (g - 1)] += out[r]
            for r in range(burst):
                tmp[r] = full * cls[r & (g - 1)]
        else:
            tmp[:] = 0
        if rest > 0:
            for r in range(burst):
                v = out[r]
                if v != 0:
                    q = r
                    for _ in range(rest):
                        tmp[q] += v
                        q = (q + step) & mask
        out[:] = tmp


@njit(cache=True)
def _dims_from(n: tuple[int, int, int, int], j: int, less: int) -> tuple[int, int, int, int]:
    """n with the dims below j set to 1 (held at index 0) and dim j reduced by `less`."""
    return (n[0] - less if j == 0 else (1 if j > 0 else n[0]),
            n[1] - less if j == 1 else (1 if j > 1 else n[1]),
            n[2] - less if j == 2 else (1 if j > 2 else n[2]),
            n[3] - less if j == 3 else (1 if j > 3 else n[3]))


@njit(cache=True)
def burst_bytes(addr: int, n0: int, n1: int, n2: int, n3: int, s0: int, s1: int, s2: int, s3: int,
                elem: int, burst: int) -> int:
    """Bytes of the aligned `burst`-byte bursts that a 4-D box's contiguous runs touch, run by run.

    The box: elements of `elem` bytes at addr + sum_k i_k * s_k (0 <= i_k < n_k), dim 0
    fastest (a DMA's source or destination side).  A run is a maximal stretch of the
    access order in which every byte follows the previous one in memory; each run costs
    the bursts [a * burst, (a + 1) * burst) it overlaps, a burst touched by two runs
    counting twice.  `burst` is a power of two; 0 for an empty box.  docs/timing.md has
    the rule and an example.

    The leading dims whose elements follow end to end (s_0 == elem, s_1 == n_0 * elem,
    ...) make pieces of `run` bytes; the other dims place the pieces.  A piece at
    residue r (mod burst) touches (r + run - 1) // burst + 1 bursts, so the residues'
    counts give the sum.  Consecutive pieces can still join (when the carry into dim j
    moves the address by exactly `run`): each such join whose address is not a burst
    boundary counted one burst twice.  Cost: O(burst) per dim, not per element.
    """
    if n0 < 1 or n1 < 1 or n2 < 1 or n3 < 1:
        return 0
    n = (n0, n1, n2, n3)
    s = (s0, s1, s2, s3)
    mask = burst - 1
    run = elem
    d = 0
    while d < 4 and (n[d] == 1 or s[d] == run):
        run *= n[d]
        d += 1
    scratch = np.empty(3 * burst, np.int64)
    out, tmp, cls = scratch[:burst], scratch[burst:2 * burst], scratch[2 * burst:]
    outer = _dims_from(n, d, 0)
    _box_residues(out, tmp, cls, addr, outer, s, mask)
    pieces = outer[0] * outer[1] * outer[2] * outer[3]
    q = (run - 1) // burst
    t = (run - 1) & mask
    bursts = pieces * (q + 1)
    for r in range(burst - t, burst):
        bursts += out[r]
    for j in range(d, 4):
        if n[j] <= 1:
            continue
        delta = s[j]
        for k in range(d, j):
            delta -= (n[k] - 1) * s[k]
        if delta != run:
            continue
        joined = _dims_from(n, j, 1)
        _box_residues(out, tmp, cls, addr + s[j], joined, s, mask)
        bursts -= joined[0] * joined[1] * joined[2] * joined[3] - out[0]
    return bursts * burst


def memory_port(cfg: Config, space: int) -> tuple[int, int]:
    """(bytes per cycle, latency) of the DMA port of memory space `space`."""
    if space == DDR:
        return cfg.ddr_bytes_per_cycle, cfg.ddr_latency
    if space == DM:
        return cfg.dm_bytes_per_cycle, cfg.dm_latency
    return cfg.local_bytes_per_cycle, cfg.local_latency
