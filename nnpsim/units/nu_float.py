"""NU float32 mode: nu.fconv, nu.fconv.rq and nu.fdwconv, onnxruntime's float Conv of a QDQ group it does not
fuse (DequantizeLinear -> Conv -> QuantizeLinear run by MLAS), bit for bit (docs/architecture.md, the float mode).

Each input is dequantised as DequantizeLinear does, x = f32(f32(IBUF - x_zp) * fx_scale), and multiplied by a
float32 weight; an output's products are added in MLAS's order, which depends on the whole conv's K (input
channels per group * k_h * k_w) and not on the command, so a command is told where its lanes sit in that order
(nu.f_c0, nu.f_cpg, nu.f_o0, nu.f_opg) and carries the (total, part) float32 state of an output between the
commands that split its input channels:

  * f_step >= 1 (MLAS's sgemm, StrideK = f_step): a slice starts at each K index k > 0 with k % f_step == 0:
    total += part, part = 0; then part = fma(x, w, part);
  * f_step = 0 (MLAS's M = 1 kernel): groups of 4 from k = 0, then one of 2, then one of 1 at the tail; at each
    group start k > 0, total += part, part = 0; then part += f32(x * w) (no FMA).

A command may hold only part of the conv's window (nu.f_top, f_left, f_bottom, f_right: the kernel rows and
columns it skips, each of whose reads is padding): its tap (i, j) of channel rel then sits at K index
rel * KH * KW + (f_top + i) * KW + f_left + j of the conv's KH x KW window.  A skipped product is an exact zero,
and adding one changes at most the sign of a zero sum, which quantises alike; so a kept product starts a slice
or group when one starts between it and the kept product before it, and the outputs are MLAS's.

The last command (nu.fconv.rq; nu.fdwconv always) adds total + part, then the column's float32 bias, and
quantises as QuantizeLinear: clip(rne(clamp(f32(y / scale), -128 - zp, 127 - zp)) + zp, lo, hi), nan to the
low end (a Relu or Clip before the QuantizeLinear is that clip, quantisation being monotone).  Float32 values are
carried as float64 holding them exactly and rounded by f32.r32 / f32.fma32 after every operation.

Parameter snapshot: nu.conv's group (nnpsim.units.nu) plus fx_scale, f_step, f_c0, f_cpg, f_o0, f_opg, f_mode,
f_top, f_left, f_bottom, f_right, which must keep this order (the checks walk them as one run).  Check order:
nu.conv's parameters, then the float ones (ranges, fx_scale a positive finite float32, f_step >= 0, f_c0 and
f_o0 >= 0, f_cpg and f_opg >= 1, f_mode 0 or 1, f_top ... f_right >= 0, f_cpg * KH * KW < K_LIMIT, the
output stage's (rq_zp_out, rq_lo, rq_hi; nu.fconv.rq: its table), then spaces, alignment
(state and WBUF 4 bytes, IBUF rows) and bounds.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from .. import errors
from ..isa_layout import ABUF, IBUF, VBUF, WBUF, offsets
from ..timing import nu_fconv_cycles, nu_fdwconv_cycles
from . import f32
from .checks import bad_param, check_bounds, check_param_range, check_space, clamp_addr, fail, load_i32, sat_mul
from .nu import (DIL_H, DIL_W, GROUP, IN_CB, IN_H, IN_W, K_H, K_W, NU_FCONV_RQ, NU_FDWCONV, OUT_CB, OUT_H, OUT_W,
                 RQ_ENTRY, RQ_HI, RQ_LO, RQ_PSUM, RQ_TABLE, RQ_ZP_OUT, STRIDE_H, STRIDE_W, X_ZP, _check_params,
                 _check_spans, nu_dw_macs, nu_macs)

FX_SCALE, F_STEP, F_C0, F_CPG, F_O0, F_OPG, F_MODE, F_TOP, F_LEFT, F_BOTTOM, F_RIGHT = offsets(
    *(f"nu.{n}" for n in ("fx_scale", "f_step", "f_c0", "f_cpg", "f_o0", "f_opg", "f_mode", "f_top", "f_left",
                          "f_bottom", "f_right")))
K_LIMIT = 1 << 40        # a conv's K (f_cpg * KH * KW) lies below it: K indices stay far inside int64
STATE = 8                # an output's (total, part) float32 pair in ABUF
M1_GROUP = 4             # MLAS's M = 1 kernel: K in groups of 4, then 2, then 1


@njit(cache=True)
def _window(p: np.ndarray) -> tuple[int, int]:
    """The conv's window KH x KW: the command's k_h x k_w and the rows and columns it skips (ranges checked)."""
    return p[F_TOP] + p[K_H] + p[F_BOTTOM], p[F_LEFT] + p[K_W] + p[F_RIGHT]


@njit(cache=True)
def _check_float(p: np.ndarray, err: np.ndarray) -> int:
    """The float mode's own parameters and the output stage's zero point and clamp."""
    rc = check_param_range(p, GROUP, FX_SCALE, F_RIGHT, err)
    if rc != errors.OK:
        return rc
    if not f32.positive_finite(p[FX_SCALE]):
        return bad_param(err, GROUP + FX_SCALE, p[FX_SCALE], 0)
    for j in (F_STEP, F_C0, F_O0):
        if p[j] < 0:
            return bad_param(err, GROUP + j, p[j], 0)
    for j in (F_CPG, F_OPG):
        if p[j] < 1:
            return bad_param(err, GROUP + j, p[j], 0)
    if p[F_MODE] != 0 and p[F_MODE] != 1:
        return bad_param(err, GROUP + F_MODE, p[F_MODE], 0)
    for j in (F_TOP, F_LEFT, F_BOTTOM, F_RIGHT):
        if p[j] < 0:
            return bad_param(err, GROUP + j, p[j], 0)
    kh, kw = _window(p)
    if sat_mul(p[F_CPG], sat_mul(kh, kw)) >= K_LIMIT:
        return bad_param(err, GROUP + F_CPG, p[F_CPG], K_LIMIT)
    rc = check_param_range(p, GROUP, RQ_ZP_OUT, RQ_HI, err)
    if rc != errors.OK:
        return rc
    for j in (RQ_ZP_OUT, RQ_LO, RQ_HI):
        if p[j] < -128 or p[j] > 127:
            return bad_param(err, GROUP + j, p[j], 0)
    if p[RQ_LO] > p[RQ_HI]:
        return bad_param(err, GROUP + RQ_LO, p[RQ_LO], p[RQ_HI])
    return errors.OK


@njit(cache=True)
def _check_group(p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    """The checks every float command starts with: nu.conv's parameters, then the float mode's."""
    rc = _check_params(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    return _check_float(p, err)


@njit(cache=True)
def _check_table(space_size: np.ndarray, space_base: np.ndarray, mem: np.ndarray, unit: int, p: np.ndarray,
                 cols: int, err: np.ndarray) -> int:
    """nu.fconv.rq's (bias, scale, unused) table: rq_table 4-aligned, inside WBUF, each scale a positive finite
    float32 (in table order)."""
    rc = check_param_range(p, GROUP, RQ_TABLE, RQ_TABLE, err)
    if rc != errors.OK:
        return rc
    wbuf, t = WBUF + unit, p[RQ_TABLE]
    if t % 4 != 0:
        return fail(err, errors.MISALIGNED, wbuf, t, t + 3, -1, t, 4, 0)
    first = clamp_addr(t)
    rc = check_bounds(space_size, wbuf, first, first + sat_mul(p[OUT_CB], cols * RQ_ENTRY) - 1, err)
    if rc != errors.OK:
        return rc
    for e in range(p[OUT_CB] * cols):
        at = t + e * RQ_ENTRY
        s = load_i32(mem, space_base[wbuf] + at + 4)
        if not f32.positive_finite(s):
            return fail(err, errors.BAD_PARAM, wbuf, at + 4, at + 7, -1, s, e, 0)
    return errors.OK


@njit(cache=True)
def _check_state(space_size: np.ndarray, unit: int, at: int, n_bytes: int, err: np.ndarray) -> int:
    """A (total, part) state operand: its ABUF, at % 4 == 0, its n_bytes inside."""
    abuf = ABUF + unit
    rc = check_space(space_size, abuf, err)
    if rc != errors.OK:
        return rc
    if at % 4 != 0:
        return fail(err, errors.MISALIGNED, abuf, at, at + 3, -1, at, 4, 0)
    first = clamp_addr(at)
    return check_bounds(space_size, abuf, first, first + n_bytes - 1, err)


@njit(cache=True)
def _check_fconv(space_size: np.ndarray, space_base: np.ndarray, mem: np.ndarray, unit: int, racc: int, rin: int,
                 rw: int, p: np.ndarray, rows: int, cols: int, final: bool, err: np.ndarray) -> int:
    """Every check of nu.fconv (final False) or nu.fconv.rq (True), in the module docstring's order."""
    rc = _check_group(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    outputs = sat_mul(sat_mul(p[OUT_CB], p[OUT_H]), sat_mul(p[OUT_W], cols))
    in_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[IN_H]), p[IN_W]), rows)
    w_bytes = sat_mul(sat_mul(sat_mul(sat_mul(p[OUT_CB], p[IN_CB]), sat_mul(p[K_H], p[K_W])), rows * cols), 4)
    if final:
        rc = _check_table(space_size, space_base, mem, unit, p, cols, err)
        if rc != errors.OK:
            return rc
        rc = _check_spans(space_size, unit, racc, rin, rw, rows, 4, outputs, in_bytes, w_bytes, err, VBUF, 1)
        if rc == errors.OK and p[F_MODE] == 1:
            rc = check_param_range(p, GROUP, RQ_PSUM, RQ_PSUM, err)
            if rc == errors.OK:
                rc = _check_state(space_size, unit, p[RQ_PSUM], sat_mul(outputs, STATE), err)
        return rc
    return _check_spans(space_size, unit, racc, rin, rw, rows, 4, sat_mul(outputs, STATE), in_bytes, w_bytes, err)


@njit(cache=True)
def _inputs(mem: np.ndarray, ib: int, n: int, zp: int, xs: float) -> np.ndarray:
    """The n IBUF bytes from ib dequantised: f32(f32(x - zp) * xs) (x - zp is exact in float32)."""
    x = np.empty(n, np.float64)
    for i in range(n):
        x[i] = f32.r32(float((np.int64(mem[np.uint64(ib + i)]) ^ 0x80) - 0x80 - zp) * xs)
    return x


@njit(cache=True)
def _slice(k: int, step: int, kk: int) -> int:
    """The slice (f_step >= 1) or M = 1 group (f_step = 0) of K index k of kk per output; -1 gives 0."""
    if k < 0:
        return 0
    if step > 0:
        return k // step
    q = kk - kk % M1_GROUP
    if k < q:
        return k // M1_GROUP
    return q // M1_GROUP + (1 if kk - q == 3 and k - q == 2 else 0)


@njit(cache=True)
def _prev(k: int, i: int, j: int, k_h: int, k_w: int, big_w: int, khw: int) -> int:
    """The K index of the product before tap (i, j) at K index k in the same output's order, skipped taps left out:
    the tap to its left, the last of the row above, or the last tap of the channel before (-1 before the first)."""
    if j > 0:
        return k - 1
    if i > 0:
        return k - big_w + k_w - 1
    return k - khw + (k_h - 1) * big_w + k_w - 1


@njit(cache=True)
def _add(xf: float, wv: float, part: float, fused: bool) -> float:
    """One product into a slice's chain (fma) or an M = 1 group's sum (rounded product, then rounded sum)."""
    return f32.fma32(xf, wv, part) if fused else f32.r32(part + f32.r32(xf * wv))


@njit(cache=True)
def _walk(x: np.ndarray, w: np.ndarray, p: np.ndarray, rows: int, cols: int, tot: np.ndarray,
          part: np.ndarray) -> None:
    """Add the command's products to the (tot, part) state [out_cb][pixels][cols], each output's in increasing K."""
    in_h, in_w, in_cb = p[IN_H], p[IN_W], p[IN_CB]
    out_h, out_w, k_h, k_w = p[OUT_H], p[OUT_W], p[K_H], p[K_W]
    step, cpg, opg = p[F_STEP], p[F_CPG], p[F_OPG]
    big_h, big_w = _window(p)
    pixels, khw = out_h * out_w, big_h * big_w
    kk = cpg * khw
    fused = step > 0
    for ob in range(p[OUT_CB]):
        for c in range(cols):
            g = (p[F_O0] + ob * cols + c) // opg
            for cb in range(in_cb):
                for r in range(rows):
                    rel = p[F_C0] + cb * rows + r - g * cpg     # the lane's channel within the column's group
                    if rel < 0 or rel >= cpg:
                        continue
                    for i in range(k_h):
                        for j in range(k_w):
                            k = rel * khw + (p[F_TOP] + i) * big_w + p[F_LEFT] + j
                            start = _slice(k, step, kk) != _slice(_prev(k, i, j, k_h, k_w, big_w, khw), step, kk)
                            wv = np.float64(w[(((ob * in_cb + cb) * k_h + i) * k_w + j) * rows * cols + r * cols + c])
                            for q in range(pixels):
                                ih = (q // out_w) * p[STRIDE_H] + i * p[DIL_H]
                                iw = (q % out_w) * p[STRIDE_W] + j * p[DIL_W]
                                xf = x[((cb * in_h + ih) * in_w + iw) * rows + r]
                                e = (ob * pixels + q) * cols + c
                                if start:
                                    tot[e] = f32.r32(tot[e] + part[e])
                                    part[e] = 0.0
                                part[e] = _add(xf, wv, part[e], fused)


@njit(cache=True)
def quantize(y: float, scale: float, zp: int, lo: int, hi: int) -> int:
    """QuantizeLinear of float32 y then the clamp: clip(rne(clamp(f32(y / scale), -128 - zp, 127 - zp)) + zp,
    lo, hi); nan gives the low end, -128 - zp (maxps returns its second operand for nan)."""
    v = f32.r32(y / scale)
    if v != v:
        v = float(-128 - zp)
    v = min(max(v, float(-128 - zp)), float(127 - zp))
    r = f32.rne(v) + zp
    return lo if r < lo else (hi if r > hi else r)


@njit(cache=True)
def _load_state(mem: np.ndarray, at: int, n: int, tot: np.ndarray, part: np.ndarray) -> None:
    s = mem[at:at + n * STATE].view(np.float32)
    for e in range(n):
        tot[e] = np.float64(s[2 * e])
        part[e] = np.float64(s[2 * e + 1])


@njit(cache=True)
def nu_fconv(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int, racc: int, rin: int,
             rw: int, p: np.ndarray, final: bool, rows: int, cols: int, err: np.ndarray) -> int:
    """Run nu.fconv (final False: the state into ABUF[racc]) or nu.fconv.rq (True: quantised into VBUF[racc]);
    return an errors code."""
    rc = _check_fconv(space_size, space_base, mem, unit, racc, rin, rw, p, rows, cols, final, err)
    if rc != errors.OK:
        return rc
    n = p[OUT_CB] * p[OUT_H] * p[OUT_W] * cols
    tot, part = np.zeros(n, np.float64), np.zeros(n, np.float64)
    if p[F_MODE] == 1:
        _load_state(mem, space_base[ABUF + unit] + (p[RQ_PSUM] if final else racc), n, tot, part)
    x = _inputs(mem, space_base[IBUF + unit] + rin, p[IN_CB] * p[IN_H] * p[IN_W] * rows, p[X_ZP],
                f32.value(p[FX_SCALE]))
    wb = space_base[WBUF + unit] + rw
    w = mem[wb:wb + p[OUT_CB] * p[IN_CB] * p[K_H] * p[K_W] * rows * cols * 4].view(np.float32)
    _walk(x, w, p, rows, cols, tot, part)
    if not final:
        s = mem[space_base[ABUF + unit] + racc:space_base[ABUF + unit] + racc + n * STATE].view(np.float32)
        for e in range(n):
            s[2 * e] = np.float32(tot[e])
            s[2 * e + 1] = np.float32(part[e])
        return errors.OK
    tb = space_base[WBUF + unit] + p[RQ_TABLE]
    ob_pixels = p[OUT_H] * p[OUT_W] * cols
    at = space_base[VBUF + unit] + racc
    for e in range(n):
        col = (e // ob_pixels) * cols + e % cols        # its (bias, scale) entry: block, then column
        bias = f32.value(load_i32(mem, tb + col * RQ_ENTRY))
        scale = f32.value(load_i32(mem, tb + col * RQ_ENTRY + 4))
        y = f32.r32(f32.r32(tot[e] + part[e]) + bias)
        mem[np.uint64(at + e)] = quantize(y, scale, p[RQ_ZP_OUT], p[RQ_LO], p[RQ_HI]) & 0xFF
    return errors.OK


@njit(cache=True)
def _check_fdw(space_size: np.ndarray, mem: np.ndarray, space_base: np.ndarray, unit: int, racc: int, rin: int,
               rw: int, p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    """nu.fdwconv's checks: nu.conv's parameters, the float ones, cols <= rows, spaces, alignment, bounds, then each
    block's output scales positive finite float32s (in block and column order)."""
    rc = _check_group(p, rows, cols, err)
    if rc != errors.OK:
        return rc
    if cols > rows:      # column c reads IBUF lane c of each pixel: there must be one
        return bad_param(err, -1, cols, rows)
    outputs = sat_mul(sat_mul(p[IN_CB], p[OUT_H]), sat_mul(p[OUT_W], cols))
    in_bytes = sat_mul(sat_mul(sat_mul(p[IN_CB], p[IN_H]), p[IN_W]), rows)
    w_bytes = sat_mul(sat_mul(p[IN_CB], sat_mul(p[K_H], p[K_W]) + 2), cols * 4)
    rc = _check_spans(space_size, unit, racc, rin, rw, rows, 4, outputs, in_bytes, w_bytes, err, VBUF, 1)
    if rc != errors.OK:
        return rc
    block = (2 + p[K_H] * p[K_W]) * cols * 4
    for cb in range(p[IN_CB]):
        for c in range(cols):
            at = rw + cb * block + (cols + c) * 4
            s = load_i32(mem, space_base[WBUF + unit] + at)
            if not f32.positive_finite(s):
                return fail(err, errors.BAD_PARAM, WBUF + unit, at, at + 3, -1, s, cb * cols + c, 0)
    return errors.OK


@njit(cache=True)
def _dw_sum(x: np.ndarray, wf: np.ndarray, w0: int, cb: int, c: int, q: int, p: np.ndarray, rows: int,
            cols: int) -> tuple[float, float]:
    """The (total, part) of nu.fdwconv's output pixel q of column c in block cb: its window's products of IBUF lane c
    in MLAS's M = 1 order (K indices in the conv's whole window)."""
    in_h, in_w, out_w, k_h, k_w = p[IN_H], p[IN_W], p[OUT_W], p[K_H], p[K_W]
    big_h, big_w = _window(p)
    kk = big_h * big_w
    tot, part = 0.0, 0.0
    for i in range(k_h):
        for j in range(k_w):
            ih = (q // out_w) * p[STRIDE_H] + i * p[DIL_H]
            iw = (q % out_w) * p[STRIDE_W] + j * p[DIL_W]
            k = (p[F_TOP] + i) * big_w + p[F_LEFT] + j
            if _slice(k, 0, kk) != _slice(_prev(k, i, j, k_h, k_w, big_w, kk), 0, kk):
                tot, part = f32.r32(tot + part), 0.0
            part = _add(x[((cb * in_h + ih) * in_w + iw) * rows + c], np.float64(wf[w0 + (2 + i * k_w + j) * cols + c]),
                        part, False)
    return tot, part


@njit(cache=True)
def nu_fdwconv(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int, racc: int, rin: int,
               rw: int, p: np.ndarray, rows: int, cols: int, err: np.ndarray) -> int:
    """Run nu.fdwconv: per block cb and column c, the window's products of IBUF lane c in MLAS's M = 1 order, plus
    the bias, quantised into VBUF[racc] [in_cb][out_h][out_w][cols]; return an errors code."""
    rc = _check_fdw(space_size, mem, space_base, unit, racc, rin, rw, p, rows, cols, err)
    if rc != errors.OK:
        return rc
    in_h, in_w, in_cb = p[IN_H], p[IN_W], p[IN_CB]
    out_h, out_w, k_h, k_w = p[OUT_H], p[OUT_W], p[K_H], p[K_W]
    taps = k_h * k_w
    x = _inputs(mem, space_base[IBUF + unit] + rin, in_cb * in_h * in_w * rows, p[X_ZP], f32.value(p[FX_SCALE]))
    wb = space_base[WBUF + unit] + rw
    wf = mem[wb:wb + in_cb * (2 + taps) * cols * 4].view(np.float32)
    at = space_base[VBUF + unit] + racc
    for cb in range(in_cb):
        w0 = cb * (2 + taps) * cols
        for c in range(cols):
            bias, scale = np.float64(wf[w0 + c]), np.float64(wf[w0 + cols + c])
            for q in range(out_h * out_w):
                tot, part = _dw_sum(x, wf, w0, cb, c, q, p, rows, cols)
                y = f32.r32(f32.r32(tot + part) + bias)
                mem[np.uint64(at + (cb * out_h * out_w + q) * cols + c)] = quantize(
                    y, scale, p[RQ_ZP_OUT], p[RQ_LO], p[RQ_HI]) & 0xFF
    return errors.OK


@njit(cache=True)
def nu_float(mem: np.ndarray, space_base: np.ndarray, space_size: np.ndarray, unit: int, racc: int, rin: int,
             rw: int, p: np.ndarray, op: int, rows: int, cols: int, latency: int, err: np.ndarray
             ) -> tuple[int, int, int]:
    """Run the float-mode command of op code `op` (NU_FCONV, NU_FCONV_RQ or NU_FDWCONV): (errors code, its
    cycles, its MACs), the engine's one entry to the float mode.  A refused command is not priced (0, 0): its
    parameters may be what its checks refuse, a window of no taps among them."""
    if op == NU_FDWCONV:
        rc = nu_fdwconv(mem, space_base, space_size, unit, racc, rin, rw, p, rows, cols, err)
        if rc != errors.OK:
            return rc, 0, 0
        return rc, nu_fdwconv_cycles(p[IN_CB], p[K_H], p[K_W], p[OUT_H], p[OUT_W], rows, latency), nu_dw_macs(p, cols)
    rc = nu_fconv(mem, space_base, space_size, unit, racc, rin, rw, p, op == NU_FCONV_RQ, rows, cols, err)
    if rc != errors.OK:
        return rc, 0, 0
    return (rc, nu_fconv_cycles(p[OUT_CB], p[IN_CB], p[K_H], p[K_W], p[OUT_H], p[OUT_W], rows, latency),
            nu_macs(p, rows, cols))
