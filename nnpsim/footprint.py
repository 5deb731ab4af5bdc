"""Exact byte footprints of DMA, NU and VU commands, as affine access patterns.

A pattern is one operand of one command: elements of `WIDTH` bytes at
`BASE + sum(i_k * S_k)` for `i_k < N_k`, k = 0..5, in memory space `SPACE`,
read (`WRITE` = 0) or written (1).  A command has at most `MAX_PATTERNS`
patterns (unused rows have WIDTH 0).  Duplicated elements (overlapping
convolution or pooling windows) are allowed: the union is the exact byte set.

The rules follow docs/architecture.md: a DMA reads the inner (unpadded) box of
its source and writes the whole destination box, padding included; an NU
reads IBUF (only the pixels its windows touch) and WBUF and writes ABUF (and
reads it for nu.conv.acc; nu.conv.rq writes VBUF instead and reads its table in WBUF, and
nu.conv.acc.rq also reads its partial sums in ABUF; nu.dwconv reads only the first cols bytes of each IBUF pixel and
one cols-byte weight row per block and tap; the float mode's nu.fconv reads float32 weights and writes its
(total, part) state in ABUF, reading it too when it continues, nu.fconv.rq writes VBUF, reads its table and the
state it continues, nu.fdwconv reads nu.dwconv's lanes and float32 rows and writes VBUF); a VU reads a (every pooling window) and b (when the
op has one; vu.lut's whole 256-byte table, vu.softmax's whole 1024-byte one; vu.lerp's n0 + n1 table
entries, and for a the whole win_h x win_w plane at each output its table may pick from) and writes d.  Which rule an instruction follows, and its VU
operands' widths, come from its row of nnpsim.semantics.
"""
from __future__ import annotations

import re

import numpy as np
from numba import njit

from isa_spec import load_isa

from .config import Config
from .isa_layout import ABUF, IBUF, VBUF, WBUF, offset, space_name  # noqa: F401  (space_name: re-exported)
from .state import space_sizes  # noqa: F401  (re-exported for the race checker)
from .semantics import FOOTPRINTS, SEMANTICS
from .timing import LERP_ENTRY
from .units.vu import N_CODES, operand_bytes

MAX_PATTERNS = 5
DIMS = 6
SPACE, WRITE, BASE, WIDTH, N, S = 0, 1, 2, 3, 4, 4 + DIMS
PATTERN_COLS = 4 + 2 * DIMS

# Footprint rules, numbered in the order of semantics.FOOTPRINTS.
(RULE_NONE, RULE_DMA, RULE_NU, RULE_NU_ACC, RULE_VU_MAP, RULE_VU_WINDOW, RULE_NU_DW,
 RULE_NU_DW_ACC, RULE_NU_RQ, RULE_NU_ACC_RQ, RULE_VU_LUT, RULE_VU_LERP, RULE_NU_F, RULE_NU_F_RQ,
 RULE_NU_F_DW) = range(len(FOOTPRINTS))
assert FOOTPRINTS == ("none", "dma", "nu", "nu_acc", "vu_map", "vu_window", "nu_dw", "nu_dw_acc", "nu_rq", "nu_acc_rq",
                      "vu_lut", "vu_lerp", "nu_f", "nu_f_rq", "nu_f_dw")

# Agent kinds, as named in RunLog.agents ("cu", "nu0", "vu0", "dma0", ...).
CU, NU_AGENT, VU_AGENT, DMA_AGENT = 0, 1, 2, 3
_AGENT_KINDS = {"cu": CU, "nu": NU_AGENT, "vu": VU_AGENT, "dma": DMA_AGENT}
_AGENT_NAME = re.compile(r"(cu|nu|vu|dma)(\d*)\Z")

# Parameter positions inside a command's 32-entry group snapshot (from nnp1.toml).
DMA_SIZE0, DMA_SRC_STRIDE0, DMA_DST_STRIDE0 = offset("dma.size0"), offset("dma.src_stride0"), offset("dma.dst_stride0")
DMA_PAD_LO0, DMA_PAD_HI0, DMA_ELEM = offset("dma.pad_lo0"), offset("dma.pad_hi0"), offset("dma.elem")
NU_IN_H, NU_IN_W, NU_IN_CB = offset("nu.in_h"), offset("nu.in_w"), offset("nu.in_cb")
NU_OUT_H, NU_OUT_W, NU_OUT_CB = offset("nu.out_h"), offset("nu.out_w"), offset("nu.out_cb")
NU_K_H, NU_K_W = offset("nu.k_h"), offset("nu.k_w")
NU_STRIDE_H, NU_STRIDE_W = offset("nu.stride_h"), offset("nu.stride_w")
NU_DIL_H, NU_DIL_W = offset("nu.dil_h"), offset("nu.dil_w")
NU_RQ_TABLE, NU_RQ_PSUM = offset("nu.rq_table"), offset("nu.rq_psum")
NU_F_MODE = offset("nu.f_mode")
RQ_ENTRY = 12
F_STATE = 8              # the float mode's (total, part) float32 pair an output in ABUF
VU_N0 = offset("vu.n0")
VU_D_STRIDE0, VU_A_STRIDE0, VU_B_STRIDE0 = offset("vu.d_stride0"), offset("vu.a_stride0"), offset("vu.b_stride0")
VU_WIN_H, VU_WIN_W = offset("vu.win_h"), offset("vu.win_w")
VU_WIN_STRIDE_H, VU_WIN_STRIDE_W = offset("vu.win_stride_h"), offset("vu.win_stride_w")


def footprint_rules() -> np.ndarray:
    """Footprint rule (RULE_*) of every instruction, indexed like load_isa().instructions."""
    return np.array([FOOTPRINTS.index(SEMANTICS[i.mnemonic].footprint) for i in load_isa().instructions],
                    np.int64)


def agent_units(agents: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(kind, unit index) of every agent name; ValueError on a name that is not cu/nuK/vuK/dmaK."""
    kind = np.zeros(len(agents), np.int64)
    unit = np.zeros(len(agents), np.int64)
    for a, name in enumerate(agents):
        m = _AGENT_NAME.match(name)
        if m is None:
            raise ValueError(f"agent name {name!r} is not cu, nuK, vuK or dmaK")
        kind[a], unit[a] = _AGENT_KINDS[m.group(1)], int(m.group(2) or 0)
    return kind, unit


@njit(cache=True)
def _clear(pat: np.ndarray) -> None:
    pat[:] = 0
    for k in range(DIMS):
        pat[N + k] = 1


@njit(cache=True)
def window_dims(out: int, step: int, k: int, dil: int) -> tuple[int, int, int, int]:
    """Index set {o*step + j*dil}: as one dense dim when it has no holes, else two dims."""
    if k == 1:
        return out, step, 1, 0
    if out == 1:
        return k, dil, 1, 0
    if step == 1 and dil <= out:
        return out + (k - 1) * dil, 1, 1, 0
    if dil == 1 and step <= k:
        return (out - 1) * step + k, 1, 1, 0
    return out, step, k, dil


@njit(cache=True)
def _dma(pats: np.ndarray, regs: np.ndarray, fields: np.ndarray, p: np.ndarray) -> None:
    elem = p[DMA_ELEM]
    dst, src = pats[0], pats[1]
    _clear(dst)
    dst[SPACE], dst[WRITE], dst[BASE], dst[WIDTH] = fields[0], 1, regs[0], elem
    _clear(src)
    src[SPACE], src[WRITE], src[BASE], src[WIDTH] = fields[1], 0, regs[1], elem
    for k in range(4):
        size = p[DMA_SIZE0 + k]
        inner = size - p[DMA_PAD_LO0 + k] - p[DMA_PAD_HI0 + k]
        dst[N + k], dst[S + k] = max(size, 0), p[DMA_DST_STRIDE0 + k]
        src[N + k], src[S + k] = max(inner, 0), p[DMA_SRC_STRIDE0 + k]


@njit(cache=True)
def _input_windows(ibuf: np.ndarray, unit: int, base: int, width: int, p: np.ndarray, rows: int) -> None:
    """The IBUF an NU command reads: per input block, the k_h x k_w windows of its output pixels,
    `width` bytes of each pixel's rows lanes."""
    in_w, in_h, in_cb = p[NU_IN_W], p[NU_IN_H], p[NU_IN_CB]
    out_h, out_w = p[NU_OUT_H], p[NU_OUT_W]
    k_h, k_w = p[NU_K_H], p[NU_K_W]
    _clear(ibuf)
    ibuf[SPACE], ibuf[BASE], ibuf[WIDTH] = IBUF + unit, base, width
    pix = in_w * rows
    nw0, sw0, nw1, sw1 = window_dims(out_w, p[NU_STRIDE_W], k_w, p[NU_DIL_W])
    nh0, sh0, nh1, sh1 = window_dims(out_h, p[NU_STRIDE_H], k_h, p[NU_DIL_H])
    ibuf[N + 0], ibuf[S + 0] = nw0, sw0 * rows
    ibuf[N + 1], ibuf[S + 1] = nw1, sw1 * rows
    ibuf[N + 2], ibuf[S + 2] = nh0, sh0 * pix
    ibuf[N + 3], ibuf[S + 3] = nh1, sh1 * pix
    ibuf[N + 4], ibuf[S + 4] = in_cb, in_h * pix


@njit(cache=True)
def _nu(pats: np.ndarray, unit: int, acc: bool, regs: np.ndarray, p: np.ndarray,
        rows: int, cols: int) -> None:
    in_cb = p[NU_IN_CB]
    out_h, out_w, out_cb = p[NU_OUT_H], p[NU_OUT_W], p[NU_OUT_CB]
    k_h, k_w = p[NU_K_H], p[NU_K_W]
    ibuf, wbuf, abuf = pats[0], pats[1], pats[2]
    _input_windows(ibuf, unit, regs[1], rows, p, rows)
    _clear(wbuf)
    wbuf[SPACE], wbuf[BASE], wbuf[WIDTH] = WBUF + unit, regs[2], out_cb * in_cb * k_h * k_w * rows * cols
    _clear(abuf)
    abuf[SPACE], abuf[WRITE], abuf[BASE], abuf[WIDTH] = ABUF + unit, 1, regs[0], out_cb * out_h * out_w * cols * 4
    if acc:
        pats[3, :] = abuf
        pats[3, WRITE] = 0


@njit(cache=True)
def _nu_rq(pats: np.ndarray, unit: int, psum: bool, regs: np.ndarray, p: np.ndarray, rows: int, cols: int) -> None:
    """nu.conv.rq: nu.conv's IBUF windows and WBUF weights, its (bias, M, S) table in WBUF, and VBUF
    [out_cb][out_h][out_w][cols] int8 written; nu.conv.acc.rq (psum) also reads ABUF [out_cb][out_h]
    [out_w][cols] int32 at rq_psum."""
    _nu(pats, unit, False, regs, p, rows, cols)
    pixels = p[NU_OUT_CB] * p[NU_OUT_H] * p[NU_OUT_W] * cols
    pats[2, SPACE], pats[2, WIDTH] = VBUF + unit, pixels
    _clear(pats[3])
    pats[3, SPACE], pats[3, BASE], pats[3, WIDTH] = WBUF + unit, p[NU_RQ_TABLE], p[NU_OUT_CB] * cols * RQ_ENTRY
    if psum:
        _clear(pats[4])
        pats[4, SPACE], pats[4, BASE], pats[4, WIDTH] = ABUF + unit, p[NU_RQ_PSUM], pixels * 4


@njit(cache=True)
def _nu_dw(pats: np.ndarray, unit: int, acc: bool, regs: np.ndarray, p: np.ndarray, rows: int,
           cols: int) -> None:
    """nu.dwconv(.acc): the input windows' first cols lanes of each IBUF pixel, WBUF per block cols int32
    biases and [k_h][k_w][cols] weights, ABUF [in_cb][out_h][out_w][cols] int32 (read too when it
    accumulates)."""
    in_cb = p[NU_IN_CB]
    out_h, out_w = p[NU_OUT_H], p[NU_OUT_W]
    k_h, k_w = p[NU_K_H], p[NU_K_W]
    ibuf, wbuf, abuf = pats[0], pats[1], pats[2]
    _input_windows(ibuf, unit, regs[1], min(rows, cols), p, rows)
    _clear(wbuf)
    wbuf[SPACE], wbuf[BASE], wbuf[WIDTH] = WBUF + unit, regs[2], in_cb * (4 + k_h * k_w) * cols
    _clear(abuf)
    abuf[SPACE], abuf[WRITE], abuf[BASE], abuf[WIDTH] = ABUF + unit, 1, regs[0], in_cb * out_h * out_w * cols * 4
    if acc:
        pats[3, :] = abuf
        pats[3, WRITE] = 0


@njit(cache=True)
def _nu_f(pats: np.ndarray, unit: int, final: bool, regs: np.ndarray, p: np.ndarray, rows: int, cols: int) -> None:
    """nu.fconv: nu.conv's IBUF windows, float32 WBUF weights, ABUF [out_cb][out_h][out_w][cols] (total, part)
    pairs written (and read when f_mode = 1); nu.fconv.rq (final): VBUF int8 written, its (bias, scale) table in
    WBUF, and the state read from ABUF at rq_psum when f_mode = 1."""
    _nu(pats, unit, False, regs, p, rows, cols)
    outputs = p[NU_OUT_CB] * p[NU_OUT_H] * p[NU_OUT_W] * cols
    pats[1, WIDTH] *= 4
    pats[2, WIDTH] = outputs * F_STATE
    _clear(pats[3])
    if not final:
        if p[NU_F_MODE] == 1:
            pats[3, :] = pats[2]
            pats[3, WRITE] = 0
        return
    pats[2, SPACE], pats[2, WIDTH] = VBUF + unit, outputs
    pats[3, SPACE], pats[3, BASE], pats[3, WIDTH] = WBUF + unit, p[NU_RQ_TABLE], p[NU_OUT_CB] * cols * RQ_ENTRY
    _clear(pats[4])
    if p[NU_F_MODE] == 1:
        pats[4, SPACE], pats[4, BASE], pats[4, WIDTH] = ABUF + unit, p[NU_RQ_PSUM], outputs * F_STATE


@njit(cache=True)
def _nu_f_dw(pats: np.ndarray, unit: int, regs: np.ndarray, p: np.ndarray, rows: int, cols: int) -> None:
    """nu.fdwconv: nu.dwconv's IBUF lanes, WBUF per block (2 + k_h * k_w) * cols float32s, VBUF [in_cb][out_h]
    [out_w][cols] int8 written."""
    _nu_dw(pats, unit, False, regs, p, rows, cols)
    pats[1, WIDTH] = p[NU_IN_CB] * (2 + p[NU_K_H] * p[NU_K_W]) * cols * 4
    pats[2, SPACE], pats[2, WIDTH] = VBUF + unit, p[NU_IN_CB] * p[NU_OUT_H] * p[NU_OUT_W] * cols


@njit(cache=True)
def _vu_operand(pat: np.ndarray, space: int, write: int, base: int, width: int,
                p: np.ndarray, stride0: int) -> None:
    _clear(pat)
    pat[SPACE], pat[WRITE], pat[BASE], pat[WIDTH] = space, write, base, width
    for k in range(4):
        pat[N + k], pat[S + k] = p[VU_N0 + k], p[stride0 + k]


@njit(cache=True)
def _vu(pats: np.ndarray, window: bool, unit: int, regs: np.ndarray, fields: np.ndarray, p: np.ndarray) -> None:
    op, sdt, ddt = fields[0], fields[1], fields[2]
    d_width, a_width, b_width = operand_bytes(op, sdt, ddt)
    space = VBUF + unit
    _vu_operand(pats[0], space, 1, regs[0], d_width, p, VU_D_STRIDE0)
    _vu_operand(pats[1], space, 0, regs[1], a_width, p, VU_A_STRIDE0)
    if window:
        pats[1, N + 4], pats[1, S + 4] = p[VU_WIN_W], p[VU_WIN_STRIDE_W]
        pats[1, N + 5], pats[1, S + 5] = p[VU_WIN_H], p[VU_WIN_STRIDE_H]
    if b_width:
        _vu_operand(pats[2], space, 0, regs[2], b_width, p, VU_B_STRIDE0)


@njit(cache=True)
def _vu_lut(pats: np.ndarray, unit: int, regs: np.ndarray, fields: np.ndarray, p: np.ndarray) -> None:
    """vu.lut, vu.softmax: d and a element by element, and the whole table at b (its row's b width), read once."""
    _vu(pats, False, unit, regs, fields, p)
    _clear(pats[2])
    pats[2, SPACE], pats[2, BASE], pats[2, WIDTH] = VBUF + unit, regs[2], operand_bytes(fields[0], 0, 0)[2]


@njit(cache=True)
def _vu_lerp(pats: np.ndarray, unit: int, regs: np.ndarray, fields: np.ndarray, p: np.ndarray) -> None:
    """vu.lerp: d element by element, a the window its table entries index, b its n0 + n1 entries, read once."""
    _vu(pats, True, unit, regs, fields, p)
    _clear(pats[2])
    pats[2, SPACE], pats[2, BASE], pats[2, WIDTH] = VBUF + unit, regs[2], LERP_ENTRY * (p[VU_N0] + p[VU_N0 + 1])


@njit(cache=True)
def build_patterns(rules: np.ndarray, cmd_op: np.ndarray, cmd_unit: np.ndarray,
                   cmd_regs: np.ndarray, cmd_fields: np.ndarray, cmd_params: np.ndarray,
                   rows: int, cols: int) -> np.ndarray:
    """Access patterns [n, MAX_PATTERNS, PATTERN_COLS] of every command (see the module doc).

    `rules` is footprint_rules(); a VU command's op code (its fields[0]) gives its widths.
    """
    n = cmd_op.shape[0]
    pats = np.zeros((n, MAX_PATTERNS, PATTERN_COLS), np.int64)
    for c in range(n):
        op = cmd_op[c]
        rule = rules[op] if 0 <= op < rules.shape[0] else RULE_NONE
        if rule == RULE_DMA:
            _dma(pats[c], cmd_regs[c], cmd_fields[c], cmd_params[c])
        elif rule == RULE_NU or rule == RULE_NU_ACC:
            _nu(pats[c], cmd_unit[c], rule == RULE_NU_ACC or cmd_fields[c, 0] != 0,
                cmd_regs[c], cmd_params[c], rows, cols)
        elif rule == RULE_NU_RQ or rule == RULE_NU_ACC_RQ:
            _nu_rq(pats[c], cmd_unit[c], rule == RULE_NU_ACC_RQ, cmd_regs[c], cmd_params[c], rows, cols)
        elif rule == RULE_NU_DW or rule == RULE_NU_DW_ACC:
            _nu_dw(pats[c], cmd_unit[c], rule == RULE_NU_DW_ACC, cmd_regs[c], cmd_params[c], rows, cols)
        elif rule == RULE_NU_F or rule == RULE_NU_F_RQ:
            _nu_f(pats[c], cmd_unit[c], rule == RULE_NU_F_RQ, cmd_regs[c], cmd_params[c], rows, cols)
        elif rule == RULE_NU_F_DW:
            _nu_f_dw(pats[c], cmd_unit[c], cmd_regs[c], cmd_params[c], rows, cols)
        elif (rule == RULE_VU_MAP or rule == RULE_VU_WINDOW) and 0 <= cmd_fields[c, 0] < N_CODES:
            _vu(pats[c], rule == RULE_VU_WINDOW, cmd_unit[c], cmd_regs[c], cmd_fields[c], cmd_params[c])
        elif rule == RULE_VU_LUT and 0 <= cmd_fields[c, 0] < N_CODES:
            _vu_lut(pats[c], cmd_unit[c], cmd_regs[c], cmd_fields[c], cmd_params[c])
        elif rule == RULE_VU_LERP:
            _vu_lerp(pats[c], cmd_unit[c], cmd_regs[c], cmd_fields[c], cmd_params[c])
    return pats


# The run walkers are inlined into their callers at numba IR level: with cache=True a call
# across cached functions is not inlined by LLVM, and per-run calls cost 15x the work.
# (numba's cache would not see an edit here from races.py; nnpsim.jitcache keys the whole
# cache on the sources, so it does.)
@njit(cache=True, inline="always")
def _walked(pat: np.ndarray, k: int, dense: int) -> bool:
    """Dim k is iterated run by run: not the dense (run) dim, and not a repeat of the same bytes (stride 0)."""
    return k != dense and pat[S + k] != 0


@njit(cache=True, inline="always")
def run_dim(pat: np.ndarray) -> int:
    """A dim whose elements touch end to end, walked as one contiguous run; -1 if none."""
    for k in range(DIMS):
        if pat[N + k] > 1 and (pat[S + k] == pat[WIDTH] or pat[S + k] == -pat[WIDTH]):
            return k
    return -1


@njit(cache=True, inline="always")
def run_count(pat: np.ndarray) -> int:
    """Number of contiguous runs pattern `pat` is walked as (0 if it is empty).

    The byte set, not the access order, is what counts: one dim with elements
    end to end becomes a run, and dims of stride 0 (the same bytes again) are
    walked once.
    """
    if pat[WIDTH] <= 0:
        return 0
    for k in range(DIMS):
        if pat[N + k] <= 0:
            return 0
    d = run_dim(pat)
    count = 1
    for k in range(DIMS):
        if _walked(pat, k, d):
            count *= pat[N + k]
    return count


@njit(cache=True, inline="always")
def _run_zero(pat: np.ndarray) -> tuple[int, int, int]:
    """(the run dim or -1, run 0's first byte, every run's length)."""
    addr = pat[BASE]
    length = pat[WIDTH]
    d = run_dim(pat)
    if d >= 0:
        length = pat[N + d] * pat[WIDTH]
        if pat[S + d] < 0:
            addr += (pat[N + d] - 1) * pat[S + d]
    return d, addr, length


@njit(cache=True, inline="always")
def run_at(pat: np.ndarray, r: int) -> tuple[int, int]:
    """(first byte, length) of run number r of `pat` (0 <= r < run_count(pat))."""
    d, addr, length = _run_zero(pat)
    for k in range(DIMS):
        if _walked(pat, k, d):
            n = pat[N + k]
            addr += (r % n) * pat[S + k]
            r //= n
    return addr, length


@njit(cache=True, inline="always")
def walked_dims(pat: np.ndarray, n_out: np.ndarray, s_out: np.ndarray) -> tuple[int, int, int]:
    """The dims run_at steps through, fastest first (their counts and strides into n_out, s_out; dims
    of one element left out), with run 0's first byte and every run's length: (dims, first, length).
    Walking them as an odometer visits the runs in run_at's order without its divisions."""
    d, addr, length = _run_zero(pat)
    nw = 0
    for k in range(DIMS):
        if _walked(pat, k, d) and pat[N + k] > 1:
            n_out[nw], s_out[nw] = pat[N + k], pat[S + k]
            nw += 1
    return nw, addr, length


@njit(cache=True)
def pattern_bytes(pat: np.ndarray, size: int) -> np.ndarray:
    """Sorted distinct byte addresses of `pat` inside [0, size)."""
    runs = run_count(pat)
    total = 0
    for r in range(runs):
        a, n = run_at(pat, r)
        lo, hi = max(a, 0), min(a + n, size)
        if hi > lo:
            total += hi - lo
    out = np.empty(total, np.int64)
    i = 0
    for r in range(runs):
        a, n = run_at(pat, r)
        for b in range(max(a, 0), min(a + n, size)):
            out[i] = b
            i += 1
    return np.unique(out)
