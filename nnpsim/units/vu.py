"""VU: every vector-unit command over its 4-D iteration space (docs/architecture.md, VU).

The op code of a command is its instruction's opcode in nnp1.toml, and which
op it is, its operands' element widths and whether it walks a pooling window
all come from nnpsim.semantics; the parameter offsets come from the TOML
(nnpsim.isa_layout).  Check order: op and unit, dtypes, parameter ranges,
counts (n0..n3, then the window of pool ops), scalar parameters of the op
(shift, lo, hi, ma, mb, then zp_out, fscale, fscale_b, fbias of the float
ops), the VBUF space, alignment of int32 operands (d, a, b), bounds (d, a,
b); then, reading the sources in element order (n0 fastest), per-element
checks (table M and S or float scale, divisor, overflow; vu.softmax checks its
256 table entries before any element).  Results go to a
temporary first, so a failing command writes nothing and in-place commands
see only old values.  The float ops compute in IEEE float32 (units/f32.py).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit

from .. import errors
from . import f32, vu_rows
from ..isa_layout import GROUP_BASE, MAX_UNITS, VBUF, offset, offsets
from ..semantics import DDT, SDT, rows_of, unit_op_codes
from ..timing import (AFFINE_PAIR_BYTES, LERP_ENTRY, LUT_BYTES, SOFTMAX_TABLE_BYTES, slide_span, vu_affine_cycles,
                      vu_cycles, vu_elem_bytes, vu_lerp_cycles, vu_lut_cycles, vu_pool_cycles, vu_slide_cycles,
                      vu_softmax_cycles)
from .vu_rows import requant
from .checks import (MAX_ELEMENTS, bad_param, check_aligned, check_bounds, check_counts,
                     check_param_range, check_space, fail, footprint, load_i32, load_i8,
                     store_i32)

OPS = ("requant", "requant_pc", "add", "mul", "clip", "pool_max", "pool_sum", "divr", "mov",
       "requant_f", "requant_fpc", "fadd", "fmul", "pool_favg", "pool_acc", "pool_avg",
       "slide_acc", "slide_avg", "slide_favg", "lut", "fsub", "fdiv", "fmax", "fmin", "softmax",
       "pool_fmean", "faffine", "lerp", "pool_faffavg")
"""The ops this kernel implements (a semantics row's `op`); import nnpsim checks every VU row names one."""
_CODE = {op: code for op, code in unit_op_codes("VU").items() if op in OPS}
(VU_REQUANT, VU_REQUANT_PC, VU_ADD, VU_MUL, VU_CLIP, VU_POOL_MAX, VU_POOL_SUM, VU_DIVR, VU_MOV,
 VU_REQUANT_F, VU_REQUANT_FPC, VU_FADD, VU_FMUL, VU_POOL_FAVG, VU_POOL_ACC, VU_POOL_AVG,
 VU_SLIDE_ACC, VU_SLIDE_AVG, VU_SLIDE_FAVG, VU_LUT, VU_FSUB, VU_FDIV, VU_FMAX, VU_FMIN,
 VU_SOFTMAX, VU_POOL_FMEAN, VU_FAFFINE, VU_LERP, VU_POOL_FAFFAVG) = (_CODE[op] for op in OPS)
VU_OPS: dict[str, int] = {r.mnemonic: _CODE[r.op] for r in rows_of("VU") if r.op in OPS}
"""Op code of each VU mnemonic (the engine's decoder puts it in the command)."""

N_CODES = 256
IS_OP = np.zeros(N_CODES, np.bool_)
IS_WINDOW = np.zeros(N_CODES, np.bool_)
IS_POOL_TIMED = np.zeros(N_CODES, np.bool_)
IS_SLIDE = np.zeros(N_CODES, np.bool_)
WIDTHS = np.zeros((N_CODES, 3), np.int64)
"""Per op code: a VU op at all, one that walks a pooling window, one timed by timing.vu_pool_cycles,
one run by the sliding-window engine (timing.vu_slide_cycles), element bytes of d, a, b."""
for _row in (r for r in rows_of("VU") if r.op in OPS):
    _c = _CODE[_row.op]
    IS_OP[_c], IS_WINDOW[_c], WIDTHS[_c] = True, _row.footprint in ("vu_window", "vu_lerp"), _row.widths
    IS_POOL_TIMED[_c] = _row.timing == "vu_pool_cycles"
    IS_SLIDE[_c] = _row.timing == "vu_slide_cycles"

if WIDTHS[VU_LUT, 2] != LUT_BYTES:
    raise ImportError("nnpsim.semantics: vu.lut's b width must be timing.LUT_BYTES, its table's entries")
if WIDTHS[VU_SOFTMAX, 2] != SOFTMAX_TABLE_BYTES:
    raise ImportError("nnpsim.semantics: vu.softmax's b width must be timing.SOFTMAX_TABLE_BYTES, its table's bytes")
if WIDTHS[VU_FAFFINE, 2] != AFFINE_PAIR_BYTES or WIDTHS[VU_POOL_FAFFAVG, 2] != AFFINE_PAIR_BYTES:
    raise ImportError("nnpsim.semantics: vu.faffine's b width must be timing.AFFINE_PAIR_BYTES, its pair's bytes")
if WIDTHS[VU_LERP, 2] != LERP_ENTRY:
    raise ImportError("nnpsim.semantics: vu.lerp's b width must be timing.LERP_ENTRY, one table entry")
LERP_FLOAT, LERP_FIXED, LERP_QUANT = 0, 1, 2
"""vu.lerp's arithmetic, chosen by vu.ma: float32 truncated, fixed point, float32 then QuantizeLinear."""
LERP_MAX_WEIGHT = 1 << 16       # a fixed-point weight's bound: the products and their sum stay far inside int64
TWO31 = float(1 << 31)
GROUP = GROUP_BASE["VU"]
N0 = offsets("vu.n0", "vu.n1", "vu.n2", "vu.n3")[0]
D_STRIDE, A_STRIDE, B_STRIDE = (offsets(*(f"vu.{x}_stride{k}" for k in range(4)))[0] for x in "dab")
if not (A_STRIDE == D_STRIDE + 4 and B_STRIDE == A_STRIDE + 4):
    raise ImportError("nnp1.toml: the vu d, a and b strides must follow one another")
WIN_H, WIN_W = offsets("vu.win_h", "vu.win_w")
WIN_STRIDE_H, WIN_STRIDE_W = offset("vu.win_stride_h"), offset("vu.win_stride_w")
ZA, ZB, MA, MB, SHIFT, ZP_OUT, LO, HI = (offset(f"vu.{n}") for n in ("za", "zb", "ma", "mb", "shift",
                                                                      "zp_out", "lo", "hi"))
FSCALE, FSCALE_B, FBIAS = offsets("vu.fscale", "vu.fscale_b", "vu.fbias")
PHASE = offset("vu.mode")     # vu.pool.fmean's lane phase
RELU = offset("vu.mode")      # vu.pool.faffavg's ReLU switch
U8 = offset("vu.mode")        # the uint8 switch of vu.fadd, vu.fmul, vu.pool.favg and vu.slide.favg
FAVG_QUANTIZE_LINEAR = 2      # vu.mode of vu.pool.favg / vu.slide.favg: QuantizeLinear's form (round, then the zero point)
LAST = max(N0 + 3, B_STRIDE + 3, WIN_H, WIN_W, WIN_STRIDE_H, WIN_STRIDE_W, ZA, ZB, MA, MB, SHIFT, ZP_OUT, LO, HI,
           FSCALE, FSCALE_B, FBIAS, PHASE)
MEAN_LANES = 4
"""Float32 lanes of vu.pool.fmean's sum (onnxruntime's Eigen SSE packet: reference.MEAN_LANES)."""
DT_I8, DT_I32 = 0, 2
FIT_LIMIT = 1 << 62      # |intermediate| must stay below this (room for the rounding term)
M_LIMIT = 1 << 31
SLIDE_MAX_COLS = 1024
"""Columns the sliding-window engine's int32 column sums cover (docs/architecture.md, "The sliding-window engine")."""
SLIDE_LINE_BYTES = 4096
"""Bytes of its line buffer: win_h input rows of the columns a command's windows span."""
# ILLEGAL_INSTRUCTION err[6]: what was illegal
BAD_OP, BAD_UNIT, BAD_SDT, BAD_DDT = 0, 1, 2, 3


@njit(cache=True)
def _is_window(op: int) -> bool:
    return IS_WINDOW[op]


@njit(cache=True)
def _width(code: int, sdt: int, ddt: int) -> int:
    if code == SDT:
        return 1 << sdt
    if code == DDT:
        return 1 << ddt
    return code


@njit(cache=True)
def operand_bytes(op: int, sdt: int, ddt: int) -> tuple[int, int, int]:
    """Element bytes of d, a, b (b = 0: no b operand; a requant.pc entry is an (M, S) pair)."""
    w = WIDTHS[op]
    return _width(w[0], sdt, ddt), _width(w[1], sdt, ddt), _width(w[2], sdt, ddt)


@njit(cache=True)
def _check_op(op: int, unit: int, sdt: int, ddt: int, err: np.ndarray) -> int:
    ill = errors.ILLEGAL_INSTRUCTION
    if op < 0 or op >= N_CODES or not IS_OP[op]:
        return fail(err, ill, -1, -1, -1, -1, op, BAD_OP, 0)
    if unit < 0 or unit >= MAX_UNITS:
        return fail(err, ill, -1, -1, -1, -1, unit, BAD_UNIT, 0)
    if op == VU_REQUANT or op == VU_REQUANT_PC or op == VU_MOV or op == VU_REQUANT_F or op == VU_REQUANT_FPC:
        if sdt != DT_I8 and sdt != DT_I32:
            return fail(err, ill, -1, -1, -1, -1, sdt, BAD_SDT, 0)
    if op == VU_MOV and ddt != DT_I8 and ddt != DT_I32:
        return fail(err, ill, -1, -1, -1, -1, ddt, BAD_DDT, 0)
    return errors.OK


@njit(cache=True)
def _is_fbin(op: int) -> bool:
    """One of the float32 binary ops between DequantizeLinear and QuantizeLinear (vu.fsub ... vu.fmin)?"""
    return op == VU_FSUB or op == VU_FDIV or op == VU_FMAX or op == VU_FMIN


@njit(cache=True)
def _is_float(op: int) -> bool:
    return (op == VU_REQUANT_F or op == VU_REQUANT_FPC or op == VU_FADD or op == VU_FMUL or op == VU_POOL_FAVG
            or op == VU_SLIDE_FAVG or _is_fbin(op) or op == VU_SOFTMAX
            or op == VU_POOL_FMEAN or op == VU_FAFFINE or op == VU_POOL_FAFFAVG)


@njit(cache=True)
def _is_table(op: int) -> bool:
    """An op whose b is one table read whole (vu.lut, vu.softmax), not an operand the b strides walk?"""
    return op == VU_LUT or op == VU_SOFTMAX


@njit(cache=True)
def _reads_u8(op: int) -> bool:
    """The float forms that add a zero point before rounding, which vu.mode switches to uint8 operands."""
    return op == VU_FADD or op == VU_FMUL or op == VU_POOL_FAVG or op == VU_SLIDE_FAVG


@njit(cache=True)
def _pool_form(op: int) -> int:
    """The vu.pool.* op whose arithmetic a vu.slide.* op computes (itself for any other op)."""
    if op == VU_SLIDE_ACC:
        return VU_POOL_ACC
    if op == VU_SLIDE_AVG:
        return VU_POOL_AVG
    if op == VU_SLIDE_FAVG:
        return VU_POOL_FAVG
    return op


@njit(cache=True)
def _slide_steps(p: np.ndarray) -> tuple[int, int]:
    """(step_w, step_h): the window's step in columns and rows, from the a strides over the window strides
    (1 along a count of 1, whose stride nothing reads)."""
    step_w = p[A_STRIDE] // p[WIN_STRIDE_W] if p[N0] > 1 else 1
    step_h = p[A_STRIDE + 1] // p[WIN_STRIDE_H] if p[N0 + 1] > 1 else 1
    return step_w, step_h


@njit(cache=True)
def _check_slide(p: np.ndarray, err: np.ndarray) -> int:
    """The engine's grid (window strides >= 1, the a strides of n0 and n1 whole steps of them where those
    counts exceed 1) and its line buffer."""
    for ws, at in ((p[WIN_STRIDE_W], WIN_STRIDE_W), (p[WIN_STRIDE_H], WIN_STRIDE_H)):
        if ws < 1:
            return bad_param(err, GROUP + at, ws, 0)
    for k, ws in ((0, p[WIN_STRIDE_W]), (1, p[WIN_STRIDE_H])):
        a = p[A_STRIDE + k]
        if p[N0 + k] > 1 and (a < ws or a % ws != 0):
            return bad_param(err, GROUP + A_STRIDE + k, a, ws)
    step_w, _ = _slide_steps(p)
    cols = slide_span(p[N0], step_w, p[WIN_W])
    if cols > SLIDE_MAX_COLS:
        return bad_param(err, GROUP + N0, p[N0], cols)
    if p[WIN_H] * cols > SLIDE_LINE_BYTES:
        return bad_param(err, GROUP + WIN_H, p[WIN_H], cols)
    return errors.OK


@njit(cache=True)
def _check_float_scalars(op: int, p: np.ndarray, err: np.ndarray) -> int:
    """zp_out in int8; fscale (fscale_b) a positive finite float32 (vu.fsub's fscale_b nonzero finite), fbias
    finite, where the op reads them."""
    if op != VU_FADD and (p[ZP_OUT] < -128 or p[ZP_OUT] > 127):      # fadd's zero points are in fbias
        return bad_param(err, GROUP + ZP_OUT, p[ZP_OUT], 0)
    if op != VU_REQUANT_FPC and not f32.positive_finite(p[FSCALE]):
        return bad_param(err, GROUP + FSCALE, p[FSCALE], 0)
    if op == VU_FSUB:       # a negative b scale makes vu.fsub onnxruntime's float Add: fa - (-fb) = fa + fb
        if not f32.nonzero_finite(p[FSCALE_B]):
            return bad_param(err, GROUP + FSCALE_B, p[FSCALE_B], 0)
    elif (op == VU_FADD or op == VU_POOL_FAVG or op == VU_SLIDE_FAVG or _is_fbin(op) or op == VU_POOL_FMEAN
            or op == VU_POOL_FAFFAVG) and not f32.positive_finite(p[FSCALE_B]):
        return bad_param(err, GROUP + FSCALE_B, p[FSCALE_B], 0)
    if op == VU_POOL_FMEAN and (p[PHASE] < 0 or p[PHASE] >= MEAN_LANES):
        return bad_param(err, GROUP + PHASE, p[PHASE], MEAN_LANES - 1)
    if op == VU_POOL_FAFFAVG and p[RELU] != 0 and p[RELU] != 1:
        return bad_param(err, GROUP + RELU, p[RELU], 1)
    if op == VU_FADD and not f32.finite(p[FBIAS]):
        return bad_param(err, GROUP + FBIAS, p[FBIAS], 0)
    if (_is_fbin(op) or op == VU_FAFFINE) and not f32.positive_finite(p[FBIAS]):       # the output scale
        return bad_param(err, GROUP + FBIAS, p[FBIAS], 0)
    favg_ql = _pool_form(op) == VU_POOL_FAVG and p[U8] == FAVG_QUANTIZE_LINEAR
    if _reads_u8(op) and p[U8] != 0 and p[U8] != 1 and not favg_ql:
        return bad_param(err, GROUP + U8, p[U8], 0)
    return errors.OK


@njit(cache=True)
def _check_scalars(op: int, p: np.ndarray, err: np.ndarray) -> int:
    if op == VU_REQUANT or op == VU_ADD or op == VU_MUL:
        if p[SHIFT] < 0 or p[SHIFT] > 62:
            return bad_param(err, GROUP + SHIFT, p[SHIFT], 0)
    if op == VU_REQUANT or op == VU_REQUANT_PC or op == VU_ADD or op == VU_MUL or op == VU_CLIP or _is_float(op):
        lo, hi = p[LO], p[HI]
        if lo < -128 or lo > 127:
            return bad_param(err, GROUP + LO, lo, 0)
        if hi < -128 or hi > 127:
            return bad_param(err, GROUP + HI, hi, 0)
        if lo > hi:
            return bad_param(err, GROUP + LO, lo, hi)
    if op == VU_REQUANT or op == VU_ADD or op == VU_MUL:
        if p[MA] < 0 or p[MA] >= M_LIMIT:
            return bad_param(err, GROUP + MA, p[MA], 0)
    if op == VU_ADD:
        if p[MB] < 0 or p[MB] >= M_LIMIT:
            return bad_param(err, GROUP + MB, p[MB], 0)
    if _is_float(op):
        rc = _check_float_scalars(op, p, err)
        if rc != errors.OK:
            return rc
    if IS_SLIDE[op]:
        return _check_slide(p, err)
    if op == VU_LERP:
        return _check_lerp(p, err)
    return errors.OK


@njit(cache=True)
def _check_lerp(p: np.ndarray, err: np.ndarray) -> int:
    """vu.lerp: its form (vu.ma 0, 1 or 2), lo <= hi in int8, zp_out in [-256, 255] (a uint8 tensor's int8
    view adds -128 after the truncation), the fixed form's shift, the quantising form's scales."""
    form, lo, hi, zp = p[MA], p[LO], p[HI], p[ZP_OUT]
    if form < LERP_FLOAT or form > LERP_QUANT:
        return bad_param(err, GROUP + MA, form, 0)
    if lo < -128 or lo > 127:
        return bad_param(err, GROUP + LO, lo, 0)
    if hi < lo or hi > 127:
        return bad_param(err, GROUP + HI, hi, lo)
    if zp < -256 or zp > 255 or (form == LERP_QUANT and (zp < -128 or zp > 127)):
        return bad_param(err, GROUP + ZP_OUT, zp, 0)
    if p[ZA] < -256 or p[ZA] > 255:
        return bad_param(err, GROUP + ZA, p[ZA], 0)
    if form == LERP_FIXED and (p[SHIFT] < 0 or p[SHIFT] > 62):
        return bad_param(err, GROUP + SHIFT, p[SHIFT], 0)
    if form == LERP_QUANT:
        if not f32.positive_finite(p[FSCALE]):
            return bad_param(err, GROUP + FSCALE, p[FSCALE], 0)
        if not f32.positive_finite(p[FSCALE_B]):
            return bad_param(err, GROUP + FSCALE_B, p[FSCALE_B], 0)
    return errors.OK


@njit(cache=True)
def _check_params(op: int, p: np.ndarray, err: np.ndarray) -> int:
    rc = check_param_range(p, GROUP, 0, LAST, err)
    if rc != errors.OK:
        return rc
    rc = check_counts(p, GROUP, N0, 4, MAX_ELEMENTS, err)
    if rc != errors.OK:
        return rc
    if _is_window(op):      # a pool reads its window at every output; vu.lerp picks four of its plane
        n_out = p[N0] * p[N0 + 1] * p[N0 + 2] * p[N0 + 3]
        rc = check_counts(p, GROUP, WIN_H, 2, MAX_ELEMENTS if op == VU_LERP else MAX_ELEMENTS // n_out, err)
        if rc != errors.OK:
            return rc
    return _check_scalars(op, p, err)


@njit(cache=True)
def _check_operands(space_size: np.ndarray, space: int, op: int, rd: int, ra: int, rb: int,
                    sdt: int, ddt: int, p: np.ndarray, err: np.ndarray) -> int:
    """Alignment of the int32 operands (d, a, b), then bounds (d, a with its window, b)."""
    d_bytes, a_bytes, b_bytes = operand_bytes(op, sdt, ddt)
    counts = np.ones((3, 6), dtype=np.int64)
    strides = np.zeros((3, 6), dtype=np.int64)
    addrs = (rd, ra, rb)
    nbytes = (d_bytes, a_bytes, b_bytes)
    if op == VU_LERP:       # vu.lerp's b: its n0 column then n1 row entries, one range
        nbytes = (d_bytes, a_bytes, LERP_ENTRY * (p[N0] + p[N0 + 1]))
    for x in range(2 if _is_table(op) or op == VU_LERP else 3):    # a table's b: b_bytes at b, not walked
        counts[x, :4] = p[N0:N0 + 4]
        strides[x, :4] = p[D_STRIDE + 4 * x:D_STRIDE + 4 * x + 4]
    if _is_window(op):
        counts[1, 4] = p[WIN_H]
        counts[1, 5] = p[WIN_W]
        strides[1, 4] = p[WIN_STRIDE_H]
        strides[1, 5] = p[WIN_STRIDE_W]
    n_operands = 3 if b_bytes > 0 else 2
    for x in range(n_operands):
        if nbytes[x] >= 4 and not (op == VU_LUT and x == 2) and not (op == VU_LERP and x == 2):
            rc = check_aligned(space, addrs[x], counts[x, :4], strides[x, :4],
                               GROUP + D_STRIDE + 4 * x, 4, err)
            if rc != errors.OK:
                return rc
    if op == VU_LERP:
        rc = check_aligned(space, rb, counts[2, :4], strides[2, :4], GROUP + B_STRIDE, 4, err)
        if rc != errors.OK:
            return rc
    for x in range(n_operands):
        first, last = footprint(addrs[x], counts[x], strides[x], nbytes[x])
        rc = check_bounds(space_size, space, first, last, err)
        if rc != errors.OK:
            return rc
    return errors.OK


@njit(cache=True)
def _mul_fits(x: int, y: int) -> bool:
    """|x * y| < 2**62, decided without overflow (|x|, |y| < 2**62)."""
    ax = x if x >= 0 else -x
    ay = y if y >= 0 else -y
    if ax < M_LIMIT and ay < M_LIMIT:
        return True
    if ax == 0 or ay == 0:
        return True
    return ay <= (FIT_LIMIT - 1) // ax


@njit(cache=True)
def rshift_round(v: int, s: int) -> int:
    """(v + 2**(s-1)) >> s for s >= 1 (round half up), v for s = 0."""
    if s == 0:
        return v
    return (v + (np.int64(1) << (s - 1))) >> s


@njit(cache=True)
def _clip(v: int, lo: int, hi: int) -> int:
    return lo if v < lo else (hi if v > hi else v)


@njit(cache=True)
def _load(mem: np.ndarray, at: int, nbytes: int) -> int:
    return load_i8(mem, at) if nbytes == 1 else load_i32(mem, at)


@njit(cache=True)
def _overflow(err: np.ndarray, space: int, at: int, nbytes: int, e: int) -> int:
    return fail(err, errors.ARITH_OVERFLOW, space, at, at + nbytes - 1, -1, e, 0, 0)


@njit(cache=True)
def requant_i(v: int, m: int, s: int, zp_out: int, lo: int, hi: int) -> int:
    """clip(round_half_up(v * M / 2**S) + zp_out, lo, hi) for 0 <= S <= 62 and v * M inside int64:
    rshift_round without its branch ((1 << S) >> 1 is its rounding term, 0 for S = 0)."""
    return _clip((((v * m) + ((np.int64(1) << s) >> 1)) >> s) + zp_out, lo, hi)


@njit(cache=True)
def _fop(fa: float, fb: float, op: int) -> float:
    """The float32 operation of vu.fsub / vu.fdiv / vu.fmax / vu.fmin, rounded once (nan for 0 / 0)."""
    if op == VU_FSUB:
        return f32.r32(fa - fb)
    if op == VU_FMAX:
        return fa if fa >= fb else fb
    if op == VU_FMIN:
        return fa if fa <= fb else fb
    if fb == 0.0:       # b's zero is +0.0: f32(0) * fscale_b
        return math.nan if fa == 0.0 else (math.inf if fa > 0.0 else -math.inf)
    return f32.r32(fa / fb)


@njit(cache=True)
def fbin(x: int, y: int, op: int, sa: float, sb: float, so: float, zp_out: int, lo: int, hi: int) -> int:
    """DequantizeLinear both (x = a - za, y = b - zb), the float32 op, QuantizeLinear (MlasQuantizeLinear:
    divide, clamp to [-128 - zp, 127 - zp] (nan to the low end, as maxps gives it), rne, + zp), clip."""
    return quantize_out(_fop(f32.r32(f32.i2f(x) * sa), f32.r32(f32.i2f(y) * sb), op), so, zp_out, lo, hi)


@njit(cache=True)
def quantize_out(t: float, so: float, zp_out: int, lo: int, hi: int) -> int:
    """QuantizeLinear of the float32 t (MlasQuantizeLinear: divide by the output scale, clamp to
    [-128 - zp, 127 - zp] (nan to the low end, as maxps gives it), rne, + zp), then clip."""
    t = f32.r32(t / so) if not math.isnan(t) else t
    t = float(-128 - zp_out) if math.isnan(t) else max(t, float(-128 - zp_out))
    t = min(t, float(127 - zp_out))
    return _clip(f32.rne(t) + zp_out, lo, hi)


@njit(cache=True)
def faffine(x: int, sa: float, s: float, c: float, so: float, zp_out: int, lo: int, hi: int) -> int:
    """vu.faffine on x = a - za: DequantizeLinear, f32(fa * s), f32(+ c) (two roundings, as onnxruntime's
    BatchNormalization computes x * new_scale + new_bias), QuantizeLinear, clip."""
    return quantize_out(f32.r32(f32.r32(f32.r32(f32.i2f(x) * sa) * s) + c), so, zp_out, lo, hi)


@njit(cache=True)
def _favg(mem: np.ndarray, at: int, p: np.ndarray, n: int, sx: float, sy: float, lo: int, hi: int) -> int:
    """Window sum of sx * f32(a - za) in float32, element by element, / n, / sy, + zp_out, cvt8, clip
    (vu.mode 1: + f32(zp_out + 128), the result less 128; vu.mode 2: / n, then QuantizeLinear by sy and zp_out)."""
    total = 0.0
    for wh in range(p[WIN_H]):
        for ww in range(p[WIN_W]):
            x = load_i8(mem, at + wh * p[WIN_STRIDE_H] + ww * p[WIN_STRIDE_W])
            total = f32.r32(total + f32.r32(sx * f32.i2f(x - p[ZA])))
    if p[U8] == FAVG_QUANTIZE_LINEAR:
        return quantize_out(f32.r32(total / f32.i2f(n)), sy, p[ZP_OUT], lo, hi)
    o = 128 * p[U8]
    t = f32.r32(f32.r32(f32.r32(total / f32.i2f(n)) / sy) + float(p[ZP_OUT] + o))
    return _clip(f32.cvt8_excess(t, o), lo, hi)


@njit(cache=True)
def _win_f32(mem: np.ndarray, at: int, p: np.ndarray, j: int, sx: float) -> float:
    """Window element j (row-major over win_h x win_w) dequantised: f32(sx * f32(a - za))."""
    wh, ww = j // p[WIN_W], j % p[WIN_W]
    return f32.r32(sx * f32.i2f(load_i8(mem, at + wh * p[WIN_STRIDE_H] + ww * p[WIN_STRIDE_W]) - p[ZA]))


@njit(cache=True)
def _sum4(mem: np.ndarray, at: int, p: np.ndarray, sx: float, phase: int) -> float:
    """The window's float32 sum in a 4-lane SIMD reduction's order (Eigen's redux, as onnxruntime's ReduceMean
    runs it): element 0 in lane `phase`; packets from the first lane-0 element, two running packets folded into
    one, then (l0 + l2) + (l1 + l3), then the elements before the first packet and after the last, in order."""
    n = p[WIN_H] * p[WIN_W]
    a0 = min((MEAN_LANES - phase) % MEAN_LANES, n)
    size = (n - a0) // MEAN_LANES * MEAN_LANES
    size2 = (n - a0) // (2 * MEAN_LANES) * (2 * MEAN_LANES)
    if size == 0:
        total = _win_f32(mem, at, p, 0, sx)
        for j in range(1, n):
            total = f32.r32(total + _win_f32(mem, at, p, j, sx))
        return total
    acc = np.zeros(2 * MEAN_LANES)
    for k in range(MEAN_LANES):
        acc[k] = _win_f32(mem, at, p, a0 + k, sx)
    if size > MEAN_LANES:
        for k in range(MEAN_LANES):
            acc[MEAN_LANES + k] = _win_f32(mem, at, p, a0 + MEAN_LANES + k, sx)
        for i in range(a0 + 2 * MEAN_LANES, a0 + size2, 2 * MEAN_LANES):
            for k in range(2 * MEAN_LANES):
                acc[k] = f32.r32(acc[k] + _win_f32(mem, at, p, i + k, sx))
        for k in range(MEAN_LANES):
            acc[k] = f32.r32(acc[k] + acc[MEAN_LANES + k])
            if size > size2:
                acc[k] = f32.r32(acc[k] + _win_f32(mem, at, p, a0 + size2 + k, sx))
    total = f32.r32(f32.r32(acc[0] + acc[2]) + f32.r32(acc[1] + acc[3]))
    for j in range(a0):
        total = f32.r32(total + _win_f32(mem, at, p, j, sx))
    for j in range(a0 + size, n):
        total = f32.r32(total + _win_f32(mem, at, p, j, sx))
    return total


@njit(cache=True)
def _fmean(mem: np.ndarray, at: int, p: np.ndarray, e: int, sx: float, sy: float, lo: int, hi: int) -> int:
    """vu.pool.fmean's output e: _sum4 of its window / f32(n), then QuantizeLinear by sy and zp_out (as fbin)."""
    n = p[WIN_H] * p[WIN_W]
    t = f32.r32(_sum4(mem, at, p, sx, (p[PHASE] + e * n) % MEAN_LANES) / f32.i2f(n))
    t = f32.r32(t / sy) if not math.isnan(t) else t
    t = float(-128 - p[ZP_OUT]) if math.isnan(t) else max(t, float(-128 - p[ZP_OUT]))
    t = min(t, float(127 - p[ZP_OUT]))
    return _clip(f32.rne(t) + p[ZP_OUT], lo, hi)


@njit(cache=True)
def _faffavg(mem: np.ndarray, at: int, p: np.ndarray, sx: float, s: float, c: float, sy: float, lo: int,
             hi: int) -> int:
    """vu.pool.faffavg's output: each window element dequantised, f32(f32(fa * s) + c) (BatchNormalization),
    max(v, 0) when vu.mode is 1 (Relu), summed as MLAS's global pool (element k in lane k mod 4, each lane from
    0.0, folded (l0 + l2) + (l1 + l3), then the n mod 4 last elements in order), / f32(n), QuantizeLinear."""
    n = p[WIN_H] * p[WIN_W]
    lanes = np.zeros(MEAN_LANES)
    total = 0.0
    body = n // MEAN_LANES * MEAN_LANES
    for j in range(n):
        v = f32.r32(f32.r32(_win_f32(mem, at, p, j, sx) * s) + c)
        if p[RELU] == 1 and not v > 0.0:       # max(v, 0): a negative v (or -0.0) is 0.0
            v = 0.0
        if j < body:
            lanes[j % MEAN_LANES] = f32.r32(lanes[j % MEAN_LANES] + v)
        else:
            if j == body:
                total = f32.r32(f32.r32(lanes[0] + lanes[2]) + f32.r32(lanes[1] + lanes[3]))
            total = f32.r32(total + v)
    if body == n:
        total = f32.r32(f32.r32(lanes[0] + lanes[2]) + f32.r32(lanes[1] + lanes[3]))
    return quantize_out(f32.r32(total / f32.i2f(n)), sy, p[ZP_OUT], lo, hi)


@njit(cache=True)
def _div_round(x: int, n: int) -> int:
    """saturate8(sign(x) * ((|x| + n // 2) // n)), n > 0: the quotient rounded half away from zero."""
    q = ((x if x >= 0 else -x) + n // 2) // n
    return _clip(q if x >= 0 else -q, -128, 127)


@njit(cache=True)
def _requant_fast(mem: np.ndarray, base: int, op: int, ra: int, rb: int, a_bytes: int, p: np.ndarray,
                  out: np.ndarray) -> bool:
    """out for vu.requant / vu.requant.pc when no element fails a check; False (out unusable) if one might.

    The conv epilogue runs millions of these elements.  This loop has no early
    exit: it folds every element's checks into one flag, and a command that
    trips it (a bad (M, S) entry, or |a - za| >= 2**31, where the product
    check needs the exact test) reruns through _compute's general loop, which
    reports the first failure in element order.  Same arithmetic otherwise (requant_i).
    """
    za, zp_out, lo, hi = p[ZA], p[ZP_OUT], p[LO], p[HI]
    per_channel = op == VU_REQUANT_PC
    m, s = p[MA], p[SHIFT]
    ok = True
    e = 0
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                a_row = base + ra + i3 * p[A_STRIDE + 3] + i2 * p[A_STRIDE + 2] + i1 * p[A_STRIDE + 1]
                b_row = base + rb + i3 * p[B_STRIDE + 3] + i2 * p[B_STRIDE + 2] + i1 * p[B_STRIDE + 1]
                for i0 in range(p[N0]):
                    x = _load(mem, a_row + i0 * p[A_STRIDE], a_bytes) - za
                    if per_channel:
                        m = load_i32(mem, b_row + i0 * p[B_STRIDE])
                        s = load_i32(mem, b_row + i0 * p[B_STRIDE] + 4)
                        ok &= (m > 0) & (s >= 0) & (s <= 62)
                        s = min(max(s, 0), 62)
                    ok &= (x < M_LIMIT) & (x > -M_LIMIT)
                    out[e] = requant_i(x, m, s, zp_out, lo, hi)
                    e += 1
    return ok


@njit(cache=True)
def _lut(mem: np.ndarray, base: int, ra: int, rb: int, p: np.ndarray, out: np.ndarray) -> None:
    """vu.lut: out[e] = the table's int8 at b + a + 128 (inside the checked 256 bytes for every int8 a)."""
    e = 0
    table = base + rb + 128
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                a_row = base + ra + i3 * p[A_STRIDE + 3] + i2 * p[A_STRIDE + 2] + i1 * p[A_STRIDE + 1]
                for i0 in range(p[N0]):
                    out[e] = load_i8(mem, table + load_i8(mem, a_row + i0 * p[A_STRIDE]))
                    e += 1


@njit(cache=True)
def _softmax(mem: np.ndarray, base: int, space: int, ra: int, rb: int, p: np.ndarray, out: np.ndarray,
             err: np.ndarray) -> int:
    """vu.softmax: each row's max, its table entries summed in float32 from the first element to the last,
    then each entry's quotient by the sum, its product with fscale, rne, zp_out and the clamp (every
    operation rounded to float32).  The table must hold 256 positive finite float32s (checked first, so
    the sum is positive and no quotient is nan)."""
    table = np.empty(256, np.float64)
    for k in range(256):
        at = rb + 4 * k
        bits = load_i32(mem, base + at)
        if not f32.positive_finite(bits):
            return fail(err, errors.BAD_PARAM, space, at, at + 3, -1, bits, k, 0)
        table[k] = f32.value(bits)
    scale, zp_out, lo, hi = f32.value(p[FSCALE]), p[ZP_OUT], p[LO], p[HI]
    e = 0
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                a_row = base + ra + i3 * p[A_STRIDE + 3] + i2 * p[A_STRIDE + 2] + i1 * p[A_STRIDE + 1]
                top = -128
                for i0 in range(p[N0]):
                    top = max(top, load_i8(mem, a_row + i0 * p[A_STRIDE]))
                total = 0.0
                for i0 in range(p[N0]):
                    total = f32.r32(total + table[load_i8(mem, a_row + i0 * p[A_STRIDE]) - top + 255])
                for i0 in range(p[N0]):
                    q = f32.r32(table[load_i8(mem, a_row + i0 * p[A_STRIDE]) - top + 255] / total)
                    q = f32.r32(q * scale)          # q <= 1 * fscale; a sum of inf makes it 0
                    out[e] = _clip(f32.rne(min(q, 1024.0)) + zp_out, lo, hi)
                    e += 1
    return errors.OK


@njit(cache=True)
def _lerp_entry(mem: np.ndarray, base: int, space: int, at: int, size: int, form: int, e: int,
                err: np.ndarray) -> int:
    """A vu.lerp table entry's check: both indices in [0, size), both weights float32 bits of a value in
    [0, 1] (the float forms) or integers in [0, LERP_MAX_WEIGHT] (fixed)."""
    for k in range(2):
        i = load_i32(mem, base + at + 4 * k)
        if i < 0 or i >= size:
            return fail(err, errors.BAD_PARAM, space, at + 4 * k, at + 4 * k + 3, -1, i, e, k)
    for k in range(2):
        w = load_i32(mem, base + at + 8 + 4 * k)
        if form == LERP_FIXED:
            bad = w < 0 or w > LERP_MAX_WEIGHT
        else:
            bad = not f32.finite(w) or not 0.0 <= f32.value(w) <= 1.0
        if bad:
            return fail(err, errors.BAD_PARAM, space, at + 8 + 4 * k, at + 11 + 4 * k, -1, w, e, 2 + k)
    return errors.OK


@njit(cache=True)
def _weight(mem: np.ndarray, at: int, form: int) -> float:
    """A vu.lerp weight: its float32 value, or (fixed) its integer."""
    w = load_i32(mem, at)
    return float(w) if form == LERP_FIXED else f32.value(w)


@njit(cache=True)
def _lerp_value(taps: np.ndarray, w: np.ndarray, form: int, p: np.ndarray) -> int:
    """One vu.lerp output from its four neighbours (a - za) and weights (11, 21, 12, 22), before the clip."""
    if form == LERP_FIXED:
        total = 0
        for k in range(4):
            total += np.int64(w[k]) * taps[k]
        q = (total if total >= 0 else -total) >> p[SHIFT]
        return (q if total >= 0 else -q) + p[ZP_OUT]
    fs = f32.value(p[FSCALE]) if form == LERP_QUANT else 1.0
    v = 0.0
    for k in range(4):
        t = f32.r32(w[k] * f32.r32(f32.i2f(taps[k]) * fs))
        v = t if k == 0 else f32.r32(v + t)
    if form == LERP_FLOAT:      # C's cast toward zero (cvttss2si: out of range or nan is INT_MIN)
        return (np.int64(math.trunc(v)) if abs(v) < TWO31 else -(1 << 31)) + p[ZP_OUT]
    t = f32.r32(v / f32.value(p[FSCALE_B])) if not math.isnan(v) else v
    t = float(-128 - p[ZP_OUT]) if math.isnan(t) else max(t, float(-128 - p[ZP_OUT]))   # maxps: nan is low
    t = min(t, float(127 - p[ZP_OUT]))
    return f32.rne(t) + p[ZP_OUT]


@njit(cache=True)
def _lerp(mem: np.ndarray, base: int, space: int, ra: int, rb: int, p: np.ndarray, out: np.ndarray,
          err: np.ndarray) -> int:
    """vu.lerp: each output from its column entry (b + 16 i0) and row entry (b + 16 (n0 + i1)), in element order."""
    form, za, lo, hi = p[MA], p[ZA], p[LO], p[HI]
    n0 = p[N0]
    taps = np.zeros(4, np.int64)
    w = np.zeros(4, np.float64)
    e = 0
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                row = rb + LERP_ENTRY * (n0 + i1)
                rc = _lerp_entry(mem, base, space, row, p[WIN_H], form, e, err)
                if rc != errors.OK:
                    return rc
                y1, y2 = load_i32(mem, base + row), load_i32(mem, base + row + 4)
                wy1, wy2 = _weight(mem, base + row + 8, form), _weight(mem, base + row + 12, form)
                a_row = ra + i3 * p[A_STRIDE + 3] + i2 * p[A_STRIDE + 2] + i1 * p[A_STRIDE + 1]
                for i0 in range(n0):
                    col = rb + LERP_ENTRY * i0
                    rc = _lerp_entry(mem, base, space, col, p[WIN_W], form, e, err)
                    if rc != errors.OK:
                        return rc
                    x1, x2 = load_i32(mem, base + col), load_i32(mem, base + col + 4)
                    wx1, wx2 = _weight(mem, base + col + 8, form), _weight(mem, base + col + 12, form)
                    at = base + a_row + i0 * p[A_STRIDE]
                    k = 0
                    for y in (y1, y2):
                        for x in (x1, x2):
                            taps[k] = load_i8(mem, at + y * p[WIN_STRIDE_H] + x * p[WIN_STRIDE_W]) - za
                            k += 1
                    for k, (a, b) in enumerate(((wx2, wy2), (wx1, wy2), (wx2, wy1), (wx1, wy1))):
                        w[k] = a * b if form == LERP_FIXED else f32.r32(a * b)
                    out[e] = _clip(_lerp_value(taps, w, form, p), lo, hi)
                    e += 1
    return errors.OK


@njit(cache=True)
def _has_rows(op: int) -> bool:
    """An op that units/vu_rows runs a row at a time."""
    return op == VU_REQUANT_F or op == VU_REQUANT_FPC or op == VU_FADD or op == VU_FMUL


@njit(cache=True)
def _compute_rows(mem: np.ndarray, base: int, op: int, ra: int, rb: int, a_bytes: int, p: np.ndarray,
                  out: np.ndarray) -> bool:
    """out by vu_rows' loops, one row of n0 elements at a time; False (out unusable) if the op has no such
    loop or an element might fail a check (then _compute's general loop reports the first failure).  Each
    op's rows run in a vu_rows function of its own, which LLVM vectorises where this one's shared loop
    defeated it (vu.requant.fpc 40% faster on MobileNetV2's runs)."""
    za, zb, zp_out, lo, hi, o = p[ZA], p[ZB], p[ZP_OUT], p[LO], p[HI], 128 * p[U8]
    if op == VU_FMUL and not (-M_LIMIT // 2 < za < M_LIMIT // 2 and -M_LIMIT // 2 < zb < M_LIMIT // 2):
        return False        # a product might leave 2**62: _mul_fits decides per element
    if base % 4 != 0:
        return False        # the word views need int32 operands at absolute multiples of 4
    fx = f32.value(p[FSCALE]) if op != VU_REQUANT_FPC else 0.0
    n = (p[N0], p[N0 + 1], p[N0 + 2], p[N0 + 3])
    sa = (p[A_STRIDE], p[A_STRIDE + 1], p[A_STRIDE + 2], p[A_STRIDE + 3])
    sb = (p[B_STRIDE], p[B_STRIDE + 1], p[B_STRIDE + 2], p[B_STRIDE + 3])
    if op == VU_FMUL:
        vu_rows.fmul_block(mem, base + ra, base + rb, n, sa, sb, za, zb, fx, o, zp_out, lo, hi, out)
        return True
    if op == VU_FADD:
        vu_rows.fadd_block(mem, base + ra, base + rb, n, sa, sb, fx, f32.value(p[FSCALE_B]), f32.value(p[FBIAS]), o,
                           lo, hi, out)
        return True
    words, floats = vu_rows.views(mem)
    if op == VU_REQUANT_FPC and a_bytes == 4 and (sa[0] == 4 or n[0] == 1) and (sb[0] == 4 or n[0] == 1):
        # every operand checked 4-byte aligned: the row strides are whole words
        return vu_rows.requant_fpc_block(words, floats, (base + ra) >> 2, (base + rb) >> 2, n,
                                         (sa[0] >> 2, sa[1] >> 2, sa[2] >> 2, sa[3] >> 2),
                                         (sb[0] >> 2, sb[1] >> 2, sb[2] >> 2, sb[3] >> 2), za, zp_out, lo, hi, out)
    return vu_rows.requant_f_block(mem, words, floats, base + ra, base + rb, n, sa, sb, a_bytes == 4,
                                   op == VU_REQUANT_FPC, za, fx, zp_out, lo, hi, out)


@njit(cache=True)
def _compute(mem: np.ndarray, base: int, space: int, op: int, ra: int, rb: int, a_bytes: int,
             p: np.ndarray, out: np.ndarray, err: np.ndarray) -> int:
    """out[e] = result of element e (n0 fastest); per-element checks first-failure in e order."""
    if (op == VU_REQUANT or op == VU_REQUANT_PC) and _requant_fast(mem, base, op, ra, rb, a_bytes, p, out):
        return errors.OK
    if _has_rows(op) and _compute_rows(mem, base, op, ra, rb, a_bytes, p, out):
        return errors.OK
    if op == VU_LUT:
        _lut(mem, base, ra, rb, p, out)
        return errors.OK
    if op == VU_SOFTMAX:
        return _softmax(mem, base, space, ra, rb, p, out, err)
    if op == VU_LERP:
        return _lerp(mem, base, space, ra, rb, p, out, err)
    op = _pool_form(op)     # the sliding-window engine computes the same values; only its timing differs
    za, zb, ma, mb, shift = p[ZA], p[ZB], p[MA], p[MB], p[SHIFT]
    zp_out, lo, hi = p[ZP_OUT], p[LO], p[HI]
    fx, fy, fc = 0.0, 0.0, 0.0
    if _is_float(op):      # checked finite (and positive) in _check_float_scalars where the op reads them
        fx, fy, fc = f32.value(p[FSCALE]), f32.value(p[FSCALE_B]), f32.value(p[FBIAS])
    e = 0
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                a_row = ra + i3 * p[A_STRIDE + 3] + i2 * p[A_STRIDE + 2] + i1 * p[A_STRIDE + 1]
                b_row = rb + i3 * p[B_STRIDE + 3] + i2 * p[B_STRIDE + 2] + i1 * p[B_STRIDE + 1]
                for i0 in range(p[N0]):
                    a_at = a_row + i0 * p[A_STRIDE]
                    b_at = b_row + i0 * p[B_STRIDE]
                    if op == VU_POOL_FMEAN:
                        out[e] = _fmean(mem, base + a_at, p, e, fx, fy, lo, hi)
                        e += 1
                        continue
                    if op == VU_POOL_FAFFAVG:
                        sbits, cbits = load_i32(mem, base + b_at), load_i32(mem, base + b_at + 4)
                        if not f32.finite(sbits):
                            return fail(err, errors.BAD_PARAM, space, b_at, b_at + 3, -1, sbits, e, 0)
                        if not f32.finite(cbits):
                            return fail(err, errors.BAD_PARAM, space, b_at + 4, b_at + 7, -1, cbits, e, 1)
                        out[e] = _faffavg(mem, base + a_at, p, fx, f32.value(sbits), f32.value(cbits), fy, lo, hi)
                        e += 1
                        continue
                    if op == VU_POOL_FAVG:
                        n = load_i32(mem, base + b_at)
                        if n <= 0:
                            return fail(err, errors.DIV_BY_ZERO, space, b_at, b_at + 3, -1, n, e, 0)
                        out[e] = _favg(mem, base + a_at, p, n, fx, fy, lo, hi)
                        e += 1
                        continue
                    if op == VU_POOL_MAX or op == VU_POOL_SUM or op == VU_POOL_ACC or op == VU_POOL_AVG:
                        best = -128
                        total = 0
                        for wh in range(p[WIN_H]):
                            for ww in range(p[WIN_W]):
                                x = load_i8(mem, base + a_at + wh * p[WIN_STRIDE_H]
                                            + ww * p[WIN_STRIDE_W])
                                best = max(best, x)
                                total += x
                        if op == VU_POOL_MAX:
                            out[e] = best
                        elif total < -M_LIMIT or total >= M_LIMIT:     # the int32 accumulator
                            return _overflow(err, space, a_at, 1, e)
                        elif op == VU_POOL_AVG:
                            n = load_i32(mem, base + b_at)
                            if n <= 0:
                                return fail(err, errors.DIV_BY_ZERO, space, b_at, b_at + 3, -1, n, e, 0)
                            out[e] = _div_round(total, n)
                        else:
                            out[e] = total
                        e += 1
                        continue
                    x = _load(mem, base + a_at, a_bytes)
                    if op == VU_REQUANT_F or op == VU_REQUANT_FPC:
                        s = fx
                        if op == VU_REQUANT_FPC:
                            bits = load_i32(mem, base + b_at)
                            if not f32.positive_finite(bits):
                                return fail(err, errors.BAD_PARAM, space, b_at, b_at + 3, -1, bits, e, 0)
                            s = f32.value(bits)
                        out[e] = requant(x - za, s, zp_out, lo, hi)
                    elif op == VU_FADD:
                        o = 128 * p[U8]
                        t = f32.fma32(float(x + o), fx, f32.fma32(float(load_i8(mem, base + b_at) + o), fy, fc))
                        out[e] = _clip(f32.cvt8_excess(t, o), lo, hi)
                    elif op == VU_FMUL:
                        d = load_i8(mem, base + b_at) - zb
                        if not _mul_fits(x - za, d):
                            return _overflow(err, space, a_at, 1, e)
                        o = 128 * p[U8]
                        t = f32.r32(f32.r32(f32.i2f((x - za) * d) * fx) + float(zp_out + o))
                        out[e] = _clip(f32.cvt8_excess(t, o), lo, hi)
                    elif op == VU_FAFFINE:
                        sbits = load_i32(mem, base + b_at)
                        cbits = load_i32(mem, base + b_at + 4)
                        if not f32.finite(sbits):
                            return fail(err, errors.BAD_PARAM, space, b_at, b_at + 3, -1, sbits, e, 0)
                        if not f32.finite(cbits):
                            return fail(err, errors.BAD_PARAM, space, b_at + 4, b_at + 7, -1, cbits, e, 1)
                        out[e] = faffine(x - za, fx, f32.value(sbits), f32.value(cbits), fc, zp_out, lo, hi)
                    elif _is_fbin(op):
                        out[e] = fbin(x - za, load_i8(mem, base + b_at) - zb, op, fx, fy, fc, zp_out, lo, hi)
                    elif op == VU_REQUANT or op == VU_REQUANT_PC:
                        m, s = ma, shift
                        if op == VU_REQUANT_PC:
                            m = load_i32(mem, base + b_at)
                            s = load_i32(mem, base + b_at + 4)
                            if m <= 0:
                                return fail(err, errors.BAD_PARAM, space, b_at, b_at + 3, -1, m, e, 0)
                            if s < 0 or s > 62:
                                return fail(err, errors.BAD_PARAM, space, b_at + 4, b_at + 7, -1, s, e, 1)
                        if not _mul_fits(x - za, m):
                            return _overflow(err, space, a_at, a_bytes, e)
                        v = rshift_round((x - za) * m, s) + zp_out
                        out[e] = _clip(v, lo, hi)
                    elif op == VU_ADD or op == VU_MUL:
                        y = load_i8(mem, base + b_at)
                        if op == VU_ADD:
                            if not (_mul_fits(x - za, ma) and _mul_fits(y - zb, mb)):
                                return _overflow(err, space, a_at, 1, e)
                            t = (x - za) * ma + (y - zb) * mb
                            if t >= FIT_LIMIT or t <= -FIT_LIMIT:
                                return _overflow(err, space, a_at, 1, e)
                        else:
                            if not _mul_fits(x - za, y - zb):
                                return _overflow(err, space, a_at, 1, e)
                            t = (x - za) * (y - zb)
                            if not _mul_fits(t, ma):
                                return _overflow(err, space, a_at, 1, e)
                            t = t * ma
                        out[e] = _clip(rshift_round(t, shift) + zp_out, lo, hi)
                    elif op == VU_CLIP:
                        out[e] = _clip(x, lo, hi)
                    elif op == VU_DIVR:
                        n = load_i32(mem, base + b_at)
                        if n <= 0:
                            return fail(err, errors.DIV_BY_ZERO, space, b_at, b_at + 3, -1, n, e, 0)
                        out[e] = _div_round(x, n)
                    elif op == VU_MOV:
                        out[e] = x
                    else:       # a semantics row whose op has no case here: loud, never another op
                        return fail(err, errors.ILLEGAL_INSTRUCTION, -1, -1, -1, -1, op, BAD_OP, 0)
                    e += 1
    return errors.OK


@njit(cache=True)
def _store(mem: np.ndarray, base: int, rd: int, p: np.ndarray, d_bytes: int,
           out: np.ndarray) -> None:
    """Write out (n0 fastest) to d: int8 saturated, or int32."""
    n0, sd = p[N0], p[D_STRIDE]
    e = 0
    for i3 in range(p[N0 + 3]):
        for i2 in range(p[N0 + 2]):
            for i1 in range(p[N0 + 1]):
                at = base + rd + i3 * p[D_STRIDE + 3] + i2 * p[D_STRIDE + 2] + i1 * p[D_STRIDE + 1]
                if d_bytes == 1:
                    _store_i8_row(mem, at, sd, n0, out, e)
                else:
                    for i0 in range(n0):
                        store_i32(mem, at + i0 * sd, out[e + i0])
                e += n0


@njit(cache=True, inline="always")
def _store_i8_row(mem: np.ndarray, at: int, sd: int, n: int, out: np.ndarray, e: int) -> None:
    """n results from out[e] to int8 bytes at at, at + sd, ... (saturated)."""
    for i in range(n):
        v = out[e + i]
        mem[np.uint64(at)] = (-128 if v < -128 else (127 if v > 127 else v)) & 0xFF
        at += sd


@njit(cache=True)
def vu_exec(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int, op: int,
            rd: int, ra: int, rb: int, sdt: int, ddt: int, p: np.ndarray, err: np.ndarray) -> int:
    """Run one VU command (op from VU_OPS); return an errors code, filling err on failure."""
    rc = _check_op(op, unit, sdt, ddt, err)
    if rc != errors.OK:
        return rc
    rc = _check_params(op, p, err)
    if rc != errors.OK:
        return rc
    space = VBUF + unit
    rc = check_space(space_size, space, err)
    if rc != errors.OK:
        return rc
    rc = _check_operands(space_size, space, op, rd, ra, rb, sdt, ddt, p, err)
    if rc != errors.OK:
        return rc
    d_bytes, a_bytes, _ = operand_bytes(op, sdt, ddt)
    out = np.empty(p[N0] * p[N0 + 1] * p[N0 + 2] * p[N0 + 3], dtype=np.int64)
    base = space_base[space]
    rc = _compute(mem, base, space, op, ra, rb, a_bytes, p, out, err)
    if rc != errors.OK:
        return rc
    _store(mem, base, rd, p, d_bytes, out)
    return errors.OK


@njit(cache=True)
def vu_work(op: int, p: np.ndarray, sdt: int, ddt: int) -> tuple[int, int, int]:
    """(n_out, window, elem_bytes) of a command, the inputs of timing.vu_cycles (0s when invalid)."""
    if op < 0 or op >= N_CODES or not IS_OP[op] or sdt < 0 or sdt > 2 or ddt < 0 or ddt > 2:
        return 0, 0, 0
    n_out = 1
    for j in range(4):
        if p[N0 + j] < 1 or p[N0 + j] > MAX_ELEMENTS // n_out:
            return 0, 0, 0
        n_out *= p[N0 + j]
    window = 1
    if _is_window(op):
        if p[WIN_H] < 1 or p[WIN_W] < 1 or p[WIN_H] > MAX_ELEMENTS or p[WIN_W] > MAX_ELEMENTS:
            return 0, 0, 0
        window = p[WIN_H] * p[WIN_W]
    d_bytes, a_bytes, b_bytes = operand_bytes(op, sdt, ddt)
    if op == VU_LUT or op == VU_FAFFINE:   # one int8 lane an output; the table's or the pairs' bytes are
        return n_out, window, 1            # timing.vu_lut_cycles' and vu_affine_cycles' own terms
    if op == VU_LERP:       # one int8 lane an output, one window read; its table is its timing's term
        return n_out, 1, 1
    if op == VU_SOFTMAX:    # float32 lanes; the table and the row stages are timing.vu_softmax_cycles' terms
        return n_out, window, 4
    return n_out, window, vu_elem_bytes(d_bytes, a_bytes, b_bytes)


@njit(cache=True)
def vu_duration(op: int, p: np.ndarray, sdt: int, ddt: int, bytes_per_cycle: int, latency: int) -> int:
    """Cycles of a VU command by its instruction's timing formula (vu_cycles, vu_pool_cycles, vu_slide_cycles,
    vu_lut_cycles, vu_softmax_cycles or vu_affine_cycles)."""
    n_out, window, elem = vu_work(op, p, sdt, ddt)
    if elem > 0 and op == VU_LUT:
        return vu_lut_cycles(n_out, bytes_per_cycle, latency)
    if elem > 0 and op == VU_SOFTMAX:
        return vu_softmax_cycles(n_out // p[N0], p[N0], bytes_per_cycle, latency)
    if elem > 0 and op == VU_FAFFINE:
        return vu_affine_cycles(n_out, p[N0], p[B_STRIDE] == 0, bytes_per_cycle, latency)
    if elem > 0 and op == VU_LERP:
        return vu_lerp_cycles(n_out, p[N0], p[N0 + 1], bytes_per_cycle, latency)
    if elem > 0 and IS_SLIDE[op]:
        d_bytes, a_bytes, b_bytes = operand_bytes(op, sdt, ddt)
        step_w, step_h = p[WIN_W], p[WIN_H]      # an off-grid command fails; charge it no reuse
        if p[WIN_STRIDE_W] >= 1 and p[WIN_STRIDE_H] >= 1:
            sw, sh = _slide_steps(p)
            step_w, step_h = max(sw, 1), max(sh, 1)
        b_per_plane = p[B_STRIDE] == 0 and p[B_STRIDE + 1] == 0
        return vu_slide_cycles(p[N0], p[N0 + 1], p[N0 + 2] * p[N0 + 3], step_w, step_h, p[WIN_H], p[WIN_W],
                               d_bytes, b_bytes, b_per_plane, op == VU_SLIDE_FAVG, bytes_per_cycle, latency)
    if elem > 0 and IS_POOL_TIMED[op]:
        d_bytes, a_bytes, b_bytes = operand_bytes(op, sdt, ddt)
        return vu_pool_cycles(n_out, window, d_bytes, a_bytes, b_bytes, bytes_per_cycle, latency)
    return vu_cycles(n_out, window, elem, bytes_per_cycle, latency)
