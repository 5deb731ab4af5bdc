"""onnxruntime's float Conv of a QDQ group it does not fuse (DequantizeLinear -> Conv -> QuantizeLinear run in
float32 by MLAS on one thread), modelled bit for bit: the independent model the float-conv tests check
onnxruntime and the importer against.

onnxruntime's Conv (core/providers/cpu/nn/conv.cc, MlasConv) computes, per image and group, the GEMM
Y[M, N] = W[M, K] @ col[K, N] of the group's filters (M of them) and its im2col matrix (K = channels * kh * kw in
that order, N = output positions), adds the float bias, and the QuantizeLinear after it divides by the output
scale (compiler.reference.quantize_f32).  MLAS's order of the float32 additions (mlas/lib/sgemm.cpp):

  * M = 1 (one filter per group: a depthwise conv): MlasSgemmKernelM1Avx takes K in groups of 4, then a group
    of 2, then 1; each group's products are rounded and summed left to right (vmulps, vaddps; no FMA), and the
    group's sum is then added to C (the first group's sum is C);
  * otherwise: K in slices of StrideK (128, doubled while StrideN = 128 halves and stays above 16 and at least
    N when N < K; halved while StrideK / 2 >= K when N >= K); within a slice one fused multiply-add chain per
    output (vfmadd231ps, from 0), and each slice's sum added to C.

N = 1 (MLAS's M1 kernel on the transposed problem) is not modelled; the callers keep N > 1.
"""
from __future__ import annotations

import numpy as np

from compiler.reference import fma_f32, quantize_f32

F32 = np.float32
STRIDE = 128
"""MLAS_SGEMM_STRIDEN and MLAS_SGEMM_STRIDEK."""


def stride_k(n: int, k: int) -> int:
    """The K slice of MlasSgemmOperation for an N x K problem (its N / K stride exchange)."""
    sn, sk = STRIDE, STRIDE
    if n >= k:
        while sk // 2 >= k:
            sk, sn = sk // 2, sn * 2
    else:
        while sn > 16 and sn // 2 >= n:
            sk, sn = sk * 2, sn // 2
    return sk


def sgemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """MLAS's float32 a [M, K] @ b [K, N] (N > 1), its additions in their order (module docstring)."""
    m, k = a.shape
    n = b.shape[1]
    assert n > 1, "N = 1 takes MLAS's transposed M1 kernel, which is not modelled"
    if m == 1:
        total, start = None, 0
        while start < k:
            size = 4 if k - start >= 4 else 2 if k - start >= 2 else 1
            part = (a[:, start, None] * b[start][None]).astype(F32)
            for j in range(start + 1, start + size):
                part = (part + (a[:, j, None] * b[j][None]).astype(F32)).astype(F32)
            total = part if total is None else (total + part).astype(F32)
            start += size
        return total
    step = stride_k(n, k)
    total = None
    for start in range(0, k, step):
        part = np.zeros((m, n), F32)
        for j in range(start, min(start + step, k)):
            part = fma_f32(a[:, j, None], b[j][None], part)
        total = part if total is None else (total + part).astype(F32)
    return total


def im2col(x: np.ndarray, kernel: tuple[int, int], stride: tuple[int, int], pads: tuple[int, int, int, int],
           dil: tuple[int, int] = (1, 1)) -> np.ndarray:
    """x [C, H, W] float32 -> [C * kh * kw, OH * OW], rows in (channel, kernel row, kernel column) order; padding 0."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dil
    xp = np.pad(x, ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh, ow = (xp.shape[1] - (kh - 1) * dh - 1) // sh + 1, (xp.shape[2] - (kw - 1) * dw - 1) // sw + 1
    rows = [xp[c, i * dh:i * dh + sh * oh:sh, j * dw:j * dw + sw * ow:sw].reshape(-1)
            for c in range(x.shape[0]) for i in range(kh) for j in range(kw)]
    return np.stack(rows)


def conv_f32(x: np.ndarray, w: np.ndarray, bias: np.ndarray, *, stride=(1, 1), pads=(0, 0, 0, 0),
             group: int = 1, dil=(1, 1)) -> np.ndarray:
    """MlasConv's float32 output of x [N, C, H, W], w [O, C / group, kh, kw] and bias [O], bit for bit."""
    o, cpg, kh, kw = w.shape
    opg = o // group
    images = []
    for img in np.asarray(x, F32):
        cols = [sgemm(w[g * opg:(g + 1) * opg].reshape(opg, -1),
                      im2col(img[g * cpg:(g + 1) * cpg], (kh, kw), stride, pads, dil)) for g in range(group)]
        images.append((np.concatenate(cols) + np.asarray(bias, F32)[:, None]).astype(F32))
    oh = (x.shape[2] + pads[0] + pads[2] - (kh - 1) * dil[0] - 1) // stride[0] + 1
    ow = (x.shape[3] + pads[1] + pads[3] - (kw - 1) * dil[1] - 1) // stride[1] + 1
    return np.stack(images).reshape(len(images), o, oh, ow)


def dequantised(x: np.ndarray, xs, xz: int, w: np.ndarray, ws: np.ndarray, bias: np.ndarray | None,
                bias_scale: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The float32 conv operands DequantizeLinear gives: f32(x - xz) * xs, f32(w) * ws per output channel and
    f32(bias) * bias_scale (zeros without a bias)."""
    xf = (np.asarray(x, np.int64) - xz).astype(F32) * F32(xs)
    wf = (np.asarray(w).astype(F32) * np.asarray(ws, F32).reshape(-1, 1, 1, 1)).astype(F32)
    bf = (np.zeros(wf.shape[0], F32) if bias is None
          else (np.asarray(bias).astype(F32) * np.asarray(bias_scale, F32)).astype(F32))
    return xf, wf, bf


def qdq_conv(x: np.ndarray, xs, xz: int, w: np.ndarray, ws: np.ndarray, bias: np.ndarray | None,
             bias_scale: np.ndarray | None, ys, yz: int, *, stride=(1, 1), pads=(0, 0, 0, 0), group: int = 1,
             lo: float = -np.inf, hi: float = np.inf, dil=(1, 1)) -> np.ndarray:
    """The int8 codes onnxruntime gives for DQ(x) -> Conv(DQ(w) per output channel, DQ(bias)) [-> Relu / Clip
    to [lo, hi]] -> Q(ys, yz), x int8 [N, C, H, W], w int8 [O, C / group, kh, kw]."""
    y = conv_f32(*dequantised(x, xs, xz, w, ws, bias, bias_scale), stride=stride, pads=pads, group=group, dil=dil)
    return quantize_f32(np.clip(y, F32(lo), F32(hi)).astype(F32), F32(ys), int(yz))
