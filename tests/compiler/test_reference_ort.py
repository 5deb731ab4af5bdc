"""The float forms against onnxruntime itself, bit for bit (issue 11, docs/semantics.md "Float32 forms").

Every case builds a single-op ONNX model with onnx.helper, runs it on onnxruntime's CPU provider with
default session options, and checks that compiler.reference' float32 function, the op's .reference()
and the compiled kernel (compiler.build(op) on the simulator, race checking on) all give exactly
onnxruntime's int8 output.  The int8 inputs are exhaustive where that is cheap (all 65536 pairs of
QLinearAdd / QLinearMul), and the requantisation sweep drives accumulators over the whole int32 range,
with power-of-two scales that make exact ties.

onnxruntime's QLinearAdd depends on the CPU: with AVX2 and FMA it runs the fused multiply-add kernel the
float form models; without them its SSE2 kernel rounds differently, so that test is skipped there.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from compiler import ops
from compiler import reference as sem
from compiler.build import build
from compiler.quant import ort_scale
from compiler.onnx.state import as_int8
from tests.onnx_helpers import F32, qlinear_binary, qlinear_conv, qlinear_pool, run_ort

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**32 - 1)


def cpu_has(*flags: str) -> bool:
    """Does /proc/cpuinfo list every flag (False where there is no /proc/cpuinfo)?"""
    info = Path("/proc/cpuinfo")
    words = set(info.read_text().split()) if info.exists() else set()
    return all(f in words for f in flags)


# ---------------------------------------------------------------- onnxruntime


# ---------------------------------------------------------------- helpers

def rand8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def kernel_output(op, *inputs) -> np.ndarray:
    """The compiled kernel's output on the simulator, race checking on."""
    return build(op)(*inputs, check_races=True)


def same(*outputs: np.ndarray) -> None:
    """Every output equals the first (onnxruntime's), dtype and shape included."""
    want = outputs[0]
    for got in outputs[1:]:
        assert got.dtype == want.dtype and got.shape == want.shape, (got.dtype, got.shape, want.dtype, want.shape)
        diff = np.flatnonzero(got != want)
        assert diff.size == 0, f"{diff.size} of {want.size} differ, first at {diff[:5]}: " \
                               f"{got.ravel()[diff[:5]]} instead of {want.ravel()[diff[:5]]}"


def spread(y: np.ndarray, at_least: int = 8) -> None:
    """The output covers many int8 values: the agreement is not only on saturated or constant outputs."""
    assert len(np.unique(y)) >= min(at_least, y.size // 2), np.unique(y)


def y_scale_for(acc: np.ndarray, scale_without_y: np.ndarray, rng) -> np.float32:
    """An output scale that maps |acc * scale| to about 30 (a few times a power of two: exact ties)."""
    typical = float(np.abs(acc.astype(np.float64) * scale_without_y).mean()) + 1e-30
    sy = typical / 30.0 * 2.0 ** rng.uniform(-1, 1)
    return F32(2.0 ** np.round(np.log2(sy))) if rng.random() < 0.3 else F32(sy)


# ---------------------------------------------------------------- QLinearConv, QLinearMatMul, QGemm

@st.composite
def conv_cases(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3, 4]))
    depthwise = groups > 1 and draw(st.booleans())
    cg, og = (1, 1) if depthwise else (draw(st.integers(1, 24)), draw(st.integers(1, 20)))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 11))
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 11))
    return dict(groups=groups, cg=cg, og=og, k=k, stride=stride, dil=dil, pad=pad, n=draw(st.integers(1, 2)),
                h=h, w=w, bias=draw(st.booleans()), per_channel=draw(st.booleans()), seed=draw(seeds))


@settings(max_examples=40, **SETTINGS)
@given(conv_cases())
def test_qlinearconv(case):
    """Per-tensor and per-channel weight scales, groups and depthwise, padding, stride, dilation, bias."""
    rng = np.random.default_rng(case["seed"])
    g, o = case["groups"], case["groups"] * case["og"]
    x = rand8(rng, (case["n"], g * case["cg"], case["h"], case["w"]))
    w = rand8(rng, (o, case["cg"]) + case["k"])
    bias = rng.integers(-(2**18), 2**18, size=o).astype(np.int32) if case["bias"] else None
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sx = F32(2.0 ** rng.uniform(-8, -2))
    sw = (2.0 ** rng.uniform(-9, -5, size=o)).astype(F32) if case["per_channel"] else F32(2.0 ** rng.uniform(-9, -5))
    geometry = dict(stride=case["stride"], pad=case["pad"], dil=case["dil"], groups=g)
    acc = sem.conv2d_acc(x, w, bias, case["stride"], case["pad"], case["dil"], g, zx)
    sy = y_scale_for(acc, sx * np.broadcast_to(sw, (o,))[None, :, None, None], rng)
    want = qlinear_conv(x, w, bias, sx, zx, sw, sy, zy, **geometry)
    scale = ort_scale(sx, sw, sy)
    op = ops.conv2d(x.shape, w, bias, stride=case["stride"], padding=case["pad"], dilation=case["dil"], groups=g,
                    x_zp=zx, scale=scale, zp_out=zy)
    model = sem.conv2d_f32(x, w, bias, case["stride"], case["pad"], case["dil"], g, zx,
                           np.broadcast_to(scale, (o,)), zy, -128, 127)
    same(want, model, op.reference(x), kernel_output(op, x))


def test_requantisation_sweep_through_qlinearconv():
    """Accumulators over the whole int32 range, every int8 input against 160 biases and weights.

    A 1x1 QLinearConv of one input channel with x_zp = 0 gives acc[o, p] = bias[o] + x[p] * w[o].
    Biases up to 2**31 put accumulators beyond 2**24 (where int32 to float32 rounds).  Every other
    channel has a power-of-two scale 2**-e and a bias that is an odd multiple of 2**(e-1): exact
    halves, which must round to even, at every magnitude.
    """
    rng = np.random.default_rng(2024)
    o = 160
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 1, 16, 16)
    w = rand8(rng, (o, 1, 1, 1))
    magnitude = np.repeat([300, 2**14, 2**20, 2**25, 2**31 - 2**20], o // 5).astype(np.int64)
    e = np.maximum(0, np.floor(np.log2(magnitude)).astype(np.int64) - 6)     # |acc| * 2**-e is about 64
    bias = rng.integers(-magnitude, magnitude) >> e << e
    pow2 = np.arange(o) % 2 == 0
    bias = np.where(pow2 & (e > 0), bias + (np.int64(1) << np.maximum(e - 1, 0)), bias).astype(np.int32)
    sw = (2.0 ** -e.astype(np.float64) * np.where(pow2, 1.0, rng.uniform(0.5, 2.0, size=o))).astype(F32)
    acc = bias.astype(np.int64)[:, None] + x.reshape(1, -1).astype(np.int64) * w.reshape(o, 1)
    scale = ort_scale(F32(1.0), sw, F32(1.0))
    v = sem.f32(acc) * scale[:, None]
    halves = (np.abs(v) < 100) & (v - np.floor(v) == 0.5)
    assert halves.sum() > 300 and (halves & (np.abs(acc) > 2**24)).sum() >= 20     # ties, small and large
    for zy in (0, -37, 101):
        want = qlinear_conv(x, w, bias, 1.0, 0, sw, 1.0, zy, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1)
        op = ops.conv2d(x.shape, w, bias, scale=scale, zp_out=zy)
        got = sem.requant_f32(acc, scale[:, None], zy).reshape(want.shape)
        same(want, got, op.reference(x), kernel_output(op, x))
        spread(want, 200)
        assert not np.array_equal(want.reshape(o, -1)[halves], np.floor(v[halves] + 0.5) + zy)   # not half up


@settings(max_examples=25, **SETTINGS)
@given(st.integers(1, 30), st.integers(1, 70), st.integers(1, 40), st.booleans(), seeds)
def test_qlinearmatmul(m, k, n, per_column, seed):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, (m, k)), rand8(rng, (k, n))
    za, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sa = F32(2.0 ** rng.uniform(-8, -2))
    sb = (2.0 ** rng.uniform(-9, -5, size=n)).astype(F32) if per_column else F32(2.0 ** rng.uniform(-9, -5))
    acc = (a.astype(np.int64) - za) @ b.astype(np.int64)
    sy = y_scale_for(acc, sa * np.broadcast_to(sb, (n,)), rng)
    consts = {"sa": sa, "za": np.int8(za), "b": b, "sb": np.asarray(sb, F32), "zb": np.zeros(np.shape(sb), np.int8),
              "sy": sy, "zy": np.int8(zy)}
    want = run_ort("QLinearMatMul", {"a": a}, consts, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"])
    scale = ort_scale(sa, sb, sy)
    op = ops.dense(a.shape, b, None, x_zp=za, scale=scale, zp_out=zy)
    same(want, sem.dense_f32(a, b, None, za, np.broadcast_to(scale, (n,)), zy, -128, 127), op.reference(a),
         kernel_output(op, a))


@settings(max_examples=15, **SETTINGS)
@given(st.integers(1, 20), st.integers(1, 60), st.integers(1, 30), seeds)
def test_qgemm_with_bias(m, k, n, seed):
    """com.microsoft QGemm (alpha 1): the dense layer with a bias."""
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, (m, k)), rand8(rng, (k, n))
    bias = rng.integers(-(2**14), 2**14, size=n).astype(np.int32)
    za, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sa, sb = F32(0.02), (2.0 ** rng.uniform(-9, -5, size=n)).astype(F32)
    acc = (a.astype(np.int64) - za) @ b.astype(np.int64) + bias
    sy = y_scale_for(acc, sa * sb, rng)
    consts = {"sa": sa, "za": np.int8(za), "b": b, "sb": sb, "zb": np.zeros(n, np.int8), "bias": bias, "sy": sy,
              "zy": np.int8(zy)}
    want = run_ort("QGemm", {"a": a}, consts, ["a", "sa", "za", "b", "sb", "zb", "bias", "sy", "zy"],
                   domain="com.microsoft")
    op = ops.dense(a.shape, b, bias, x_zp=za, scale=ort_scale(sa, sb, sy), zp_out=zy)
    same(want, op.reference(a), kernel_output(op, a))


# ---------------------------------------------------------------- QLinearAdd, QLinearMul: every int8 pair

PAIRS = (np.repeat(np.arange(-128, 128), 256).astype(np.int8).reshape(256, 256),
         np.tile(np.arange(-128, 128), 256).astype(np.int8).reshape(256, 256))
SCALE_SETS = [(0.05, 0.031, 0.07, 3, -9, 11), (0.3, 0.2, 0.11, -100, 42, -7), (0.0123, 0.0456, 0.0391, 17, 5, -60),
              (0.5, 0.25, 0.5, 0, 0, 0), (0.00781, 0.125, 0.0625, -128, 127, 127)]


def random_scale_sets(n: int, seed: int) -> list[tuple]:
    rng = np.random.default_rng(seed)
    return [tuple(float(s) for s in 2.0 ** rng.uniform(-6, 0, size=3)) + tuple(int(z) for z in rng.integers(-128, 128, 3))
            for _ in range(n)]


@pytest.mark.skipif(not cpu_has("avx2", "fma"), reason="onnxruntime's QLinearAdd uses its AVX2 + FMA kernel "
                    "only on such CPUs (docs/semantics.md, CPU dependence)")
@pytest.mark.parametrize("sa, sb, sy, za, zb, zy", SCALE_SETS + random_scale_sets(6, 1))
def test_qlinearadd_every_int8_pair(sa, sb, sy, za, zb, zy):
    a, b = PAIRS
    want = qlinear_binary("QLinearAdd", a, b, sa, za, sb, zb, sy, zy)
    op = ops.add(a.shape, za=za, zb=zb, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zy)
    same(want, sem.add_f32(a, b, za, zb, F32(sa), F32(sb), F32(sy), zy, -128, 127), op.reference(a, b),
         kernel_output(op, a, b))
    spread(want, 40)


@pytest.mark.skipif(not cpu_has("avx2", "fma"), reason="onnxruntime's QLinearAdd uses its AVX2 + FMA kernel "
                    "only on such CPUs (docs/semantics.md, CPU dependence)")
def test_qlinearadd_beyond_int32_is_minus_128_as_in_onnxruntime():
    """a * 2**25 + b reaches 2**31 for a > 64: cvtps2dq's INT_MIN, so -128 where 127 would be expected."""
    a, b = PAIRS
    want = qlinear_binary("QLinearAdd", a, b, 2.0**25, 0, 1.0, 0, 1.0, 0)
    op = ops.add(a.shape, scale_a=2.0**25, scale_b=1.0, scale_out=1.0)
    same(want, op.reference(a, b), kernel_output(op, a, b))
    assert (want[a > 64] == -128).all() and (want[(a > 0) & (a < 64)] == 127).all()


@pytest.mark.parametrize("sa, sb, sy, za, zb, zy", SCALE_SETS + random_scale_sets(6, 2))
def test_qlinearmul_every_int8_pair(sa, sb, sy, za, zb, zy):
    a, b = PAIRS
    sy = float(F32(sa * sb * 300 * (1 + sy)))  # (a - za) * (b - zb) reaches 2**16: map it over int8
    want = qlinear_binary("QLinearMul", a, b, sa, za, sb, zb, sy, zy)
    op = ops.mul(a.shape, za=za, zb=zb, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zy)
    same(want, sem.mul_f32(a, b, za, zb, F32(sa), F32(sb), F32(sy), zy, -128, 127), op.reference(a, b),
         kernel_output(op, a, b))
    spread(want, 40)


def qdq_island(op_type: str, a, b, sa, za, sb, zb, sy, zy, level) -> np.ndarray:
    """DequantizeLinear(a), DequantizeLinear(b), op_type, QuantizeLinear on onnxruntime at `level`."""
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["fa"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["fb"]),
             helper.make_node(op_type, ["fa", "fb"], ["fy"]),
             helper.make_node("QuantizeLinear", ["fy", "sy", "zy"], ["y"])]
    inits = [numpy_helper.from_array(np.asarray(v, t), n) for n, v, t in
             (("sa", sa, F32), ("za", za, np.int8), ("sb", sb, F32), ("zb", zb, np.int8), ("sy", sy, F32),
              ("zy", zy, np.int8))]
    g = helper.make_graph(nodes, op_type, [helper.make_tensor_value_info(n, TensorProto.INT8, list(a.shape))
                                           for n in "ab"],
                          [helper.make_tensor_value_info("y", TensorProto.INT8, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
        None, {"a": a, "b": b})[0]


QDQ_OP_TYPES = {"qdq_add": "Add", "sub": "Sub", "div": "Div", "max": "Max", "min": "Min"}
FUSED_AT_DEFAULT = ("qdq_add",)     # onnxruntime's default level makes DQ -> Add -> Q a QLinearAdd


@pytest.mark.parametrize("mode", ops.FLOAT_BINARY)
@pytest.mark.parametrize("sa, sb, sy, za, zb, zy", SCALE_SETS[:2] + random_scale_sets(2, 3))
def test_qdq_float_binary_every_int8_pair_at_both_levels(mode, sa, sb, sy, za, zb, zy):
    """Sub, Div (b = zb: x / 0 and 0 / 0 included), Max, Min between DQ and Q: onnxruntime runs them in float at
    both optimisation levels, Add unfused at ORT_DISABLE_ALL; qdq_binary_f32, the op's reference and the compiled
    kernel give its bytes."""
    a, b = PAIRS
    sy = float(F32(sy * 20)) if mode == "div" else sy
    zy //= 4                        # the results over most of int8, not piled at one end
    op = ops.qdq_binary(mode, a.shape, za=za, zb=zb, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zy)
    ours = sem.qdq_binary_f32(mode, a, b, za, zb, F32(sa), F32(sb), F32(sy), zy, -128, 127)
    levels = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    for level in levels[1:] if mode in FUSED_AT_DEFAULT else levels:
        same(qdq_island(QDQ_OP_TYPES[mode], a, b, sa, za, sb, zb, sy, zy, level), ours)
    same(ours, op.reference(a, b), kernel_output(op, a, b))
    spread(ours, 12)          # a large output scale (random sets) leaves some twenty levels


# ---------------------------------------------------------------- QLinearAveragePool, QLinearGlobalAveragePool

@st.composite
def pool_cases(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 13))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 13))
    return (draw(st.integers(1, 2)), draw(st.integers(1, 6)), h, w), k, stride, pad, draw(seeds)


@settings(max_examples=40, **SETTINGS)
@given(pool_cases(), st.booleans(), st.sampled_from(["window", "window", "whole_plane"]))
def test_qlinearaveragepool(case, count_include_pad, kind):
    """A float32 window sum; a kernel equal to the unpadded plane is onnxruntime's global average pool."""
    shape, k, stride, pad, seed = case
    if kind == "whole_plane":
        k, pad = shape[2:], (0, 0, 0, 0)
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sx, sy = (F32(s) for s in 2.0 ** rng.uniform(-6, 0, size=2))
    want = qlinear_pool("QLinearAveragePool", x, sx, zx, sy, zy, kernel_shape=list(k), strides=list(stride),
                        pads=list(pad), count_include_pad=int(count_include_pad))
    op = ops.avg_pool2d(shape, k, stride, pad, count_include_pad, zx, scale_x=sx, scale_out=sy, zp_out=zy)
    same(want, sem.avg_pool2d_f32(x, k, stride, pad, count_include_pad, zx, sx, sy, zy), op.reference(x),
         kernel_output(op, x))


@settings(max_examples=25, **SETTINGS)
@given(st.integers(1, 2), st.integers(1, 12), st.integers(1, 14), st.integers(1, 14), seeds)
def test_qlinearglobalaveragepool(n, c, h, w, seed):
    rng = np.random.default_rng(seed)
    x = rand8(rng, (n, c, h, w))
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sx = F32(2.0 ** rng.uniform(-6, 0))
    sy = F32(sx * 2.0 ** rng.uniform(-1, 1)) if rng.random() < 0.7 else sx
    want = qlinear_pool("QLinearGlobalAveragePool", x, sx, zx, sy, zy, channels_last=0)
    op = ops.global_avg_pool2d(x.shape, x_zp=zx, scale_x=sx, scale_out=sy, zp_out=zy)
    same(want, sem.global_avg_pool2d_f32(x, zx, sx, sy, zy), op.reference(x), kernel_output(op, x))


def test_pools_spread_over_int8():
    """A plain case of each pool gives many output values (the comparisons above are not on constants)."""
    rng = np.random.default_rng(8)
    x = rand8(rng, (1, 8, 12, 12))
    y = qlinear_pool("QLinearAveragePool", x, 0.05, 3, 0.02, -4, kernel_shape=[2, 2], strides=[1, 1],
                     pads=[1, 1, 1, 1], count_include_pad=0)
    same(y, sem.avg_pool2d_f32(x, (2, 2), (1, 1), (1, 1, 1, 1), False, 3, F32(0.05), F32(0.02), -4))
    spread(y, 100)
    y = qlinear_pool("QLinearGlobalAveragePool", x, 0.05, 3, 0.004, -4, channels_last=0)
    same(y, sem.global_avg_pool2d_f32(x, 3, F32(0.05), F32(0.004), -4))
    spread(y, 5)


# ---------------------------------------------------------------- uint8: onnxruntime's uint8 kernels

U8_RAW = (np.repeat(np.arange(256), 256).astype(np.uint8).reshape(256, 256),
          np.tile(np.arange(256), 256).astype(np.uint8).reshape(256, 256))     # every uint8 pair
U8_PAIRS = tuple(as_int8(v) for v in U8_RAW)                                  # as the importer holds them: q - 128
# Scale and uint8 zero-point sets on which the int8 view's arithmetic (zero points - 128, no uint8=True)
# differs from onnxruntime's uint8 kernel in at least one of the 65536 pairs: QLinearAdd adds the uint8
# values and QLinearMul the uint8 zero point in float32 before rounding.
U8_ADD_SETS = [(0.43928102, 0.57594436, 0.026692126, 199, 119, 175), (0.25705948, 0.036229186, 0.6636923, 254, 55, 156),
               (0.2840401, 0.064075828, 0.016761132, 78, 40, 1), (0.9137091, 0.7824313, 0.06444075, 239, 111, 198)]
U8_MUL_SETS = [(0.58614725, 0.085294165, 0.038911477, 248, 203, 208), (0.029173005, 0.034306638, 0.016091913, 74, 99, 18)]


@pytest.mark.skipif(not cpu_has("avx2", "fma"), reason="onnxruntime's QLinearAdd uses its AVX2 + FMA kernel "
                    "only on such CPUs (docs/semantics.md, CPU dependence)")
@pytest.mark.parametrize("sa, sb, sy, za, zb, zy", U8_ADD_SETS)
def test_qlinearadd_every_uint8_pair(sa, sb, sy, za, zb, zy):
    """uint8 QLinearAdd: add_f32(uint8=True), the op's reference and the compiled kernel (vu.mode) on the int8
    views give onnxruntime's uint8 results less 128, where the int8 view's own arithmetic does not."""
    a, b = U8_PAIRS
    want = as_int8(qlinear_binary("QLinearAdd", *U8_RAW, sa, za, sb, zb, sy, zy, dtype=np.uint8))
    args = (a, b, za - 128, zb - 128, F32(sa), F32(sb), F32(sy), zy - 128, -128, 127)
    assert not np.array_equal(sem.add_f32(*args), want)
    op = ops.add(a.shape, za=za - 128, zb=zb - 128, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zy - 128, uint8=True)
    same(want, sem.add_f32(*args, uint8=True), op.reference(a, b), kernel_output(op, a, b))
    spread(want, 40)


@pytest.mark.parametrize("sa, sb, sy, za, zb, zy", U8_MUL_SETS)
def test_qlinearmul_every_uint8_pair(sa, sb, sy, za, zb, zy):
    a, b = U8_PAIRS
    sy = float(F32(sa * sb * 300 * (1 + sy)))
    want = as_int8(qlinear_binary("QLinearMul", *U8_RAW, sa, za, sb, zb, sy, zy, dtype=np.uint8))
    args = (a, b, za - 128, zb - 128, F32(sa), F32(sb), F32(sy), zy - 128, -128, 127)
    assert not np.array_equal(sem.mul_f32(*args), want)
    op = ops.mul(a.shape, za=za - 128, zb=zb - 128, scale_a=sa, scale_b=sb, scale_out=sy, zp_out=zy - 128, uint8=True)
    same(want, sem.mul_f32(*args, uint8=True), op.reference(a, b), kernel_output(op, a, b))
    spread(want, 40)


def _uint8_avg_pool(x_u8, k, stride, pad, cip, sx, zx, sy, zy):
    """(onnxruntime's uint8 QLinearAveragePool as int8 views, the op with uint8=True, its int8-view input)."""
    want = as_int8(qlinear_pool("QLinearAveragePool", x_u8, sx, zx, sy, zy, dtype=np.uint8, kernel_shape=list(k),
                                strides=list(stride), pads=list(pad), count_include_pad=int(cip)))
    op = ops.avg_pool2d(x_u8.shape, k, stride, pad, cip, zx - 128, scale_x=sx, scale_out=sy, zp_out=zy - 128,
                        uint8=True)
    return want, op, as_int8(x_u8)


def test_qlinearaveragepool_uint8_adds_the_uint8_zero_point():
    """A case where adding the int8 view's zero point in float32 rounds 6 elements one step off (seed found by
    search); the uint8 form (vu.mode on vu.pool.favg, and on vu.slide.favg) gives onnxruntime's."""
    rng = np.random.default_rng(1093)
    x = rng.integers(0, 256, (1, 8, 32, 32)).astype(np.uint8)
    zx, zy = 63, 128
    sx, sy = F32(0.04007455334067345), F32(1.0820008516311646)
    want, op, xv = _uint8_avg_pool(x, (2, 2), (1, 1), (0, 0, 0, 0), True, sx, zx, sy, zy)
    assert (sem.avg_pool2d_f32(xv, (2, 2), (1, 1), (0, 0, 0, 0), True, zx - 128, sx, sy, zy - 128) != want).sum() == 6
    same(want, op.reference(xv), kernel_output(op, xv))


@settings(max_examples=12, **SETTINGS)
@given(pool_cases(), st.booleans())
def test_qlinearaveragepool_uint8(case, count_include_pad):
    shape, k, stride, pad, seed = case
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, shape).astype(np.uint8)
    zx, zy = (int(v) for v in rng.integers(0, 256, size=2))
    sx, sy = (F32(s) for s in 2.0 ** rng.uniform(-6, 0, size=2))
    want, op, xv = _uint8_avg_pool(x, k, stride, pad, count_include_pad, sx, zx, sy, zy)
    same(want, op.reference(xv), kernel_output(op, xv))


# ---------------------------------------------------------------- int32 accumulators that wrap

def test_qgemm_and_qlinearconv_accumulators_wrap_as_in_onnxruntime():
    """A bias near 2**31 (a quantiser clips it there at tiny scales: GoogLeNet's classifier) and positive
    products: onnxruntime's int32 accumulators wrap, and so do the float form's (reference.wrap32, the NU)."""
    rng = np.random.default_rng(25)
    k, n = 70, 37
    a = rand8(rng, (3, k))
    w = rng.integers(0, 128, (n, k)).astype(np.int8)         # [O, K], transB = 1
    bias = (2**31 - 1 - rng.integers(0, 1_200_000, n)).astype(np.int32)
    sa, sw, sy = F32(0.01), (2.0 ** rng.uniform(-9, -7, size=n)).astype(F32), F32(2.0**-8)
    acc = (a.astype(np.int64) + 128) @ w.T.astype(np.int64) + bias
    assert 0 < (acc >= 2**31).sum() < acc.size              # some wrap, some do not
    consts = {"sa": sa, "za": np.int8(-128), "b": w, "sb": sw, "zb": np.zeros(n, np.int8), "bias": bias, "sy": sy,
              "zy": np.int8(3)}
    want = run_ort("QGemm", {"a": a}, consts, ["a", "sa", "za", "b", "sb", "zb", "bias", "sy", "zy"],
                   domain="com.microsoft", transB=1)
    op = ops.dense(a.shape, w.T, bias, x_zp=-128, scale=ort_scale(sa, sw, sy), zp_out=3)
    same(want, sem.dense_f32(a, w.T, bias, -128, ort_scale(sa, sw, sy), 3, -128, 127), op.reference(a),
         kernel_output(op, a))
    assert not np.array_equal(want, sem.requant_f32(acc, ort_scale(sa, sw, sy), 3))    # the exact sums differ
    x = rand8(rng, (1, k, 5, 6))
    w4 = w.reshape(n, k, 1, 1)
    want = qlinear_conv(x, w4, bias, sa, -128, sw, sy, 3, stride=(1, 1), pad=(0, 0, 0, 0), dil=(1, 1), groups=1)
    op = ops.conv2d(x.shape, w4, bias, x_zp=-128, scale=ort_scale(sa, sw, sy), zp_out=3)
    same(want, op.reference(x), kernel_output(op, x))


# ---------------------------------------------------------------- QuantizeLinear, DequantizeLinear (host side)

@pytest.mark.parametrize("seed", range(8))
def test_quantizelinear(seed):
    rng = np.random.default_rng(seed)
    zp = int(rng.integers(-128, 128))
    scale = F32(2.0 ** int(rng.integers(-8, 4))) if seed % 2 else F32(2.0 ** rng.uniform(-10, 3))
    x = np.concatenate([rng.uniform(-300, 300, 3000) * scale,
                        (rng.integers(-300, 300, 2000) + 0.5) * scale,        # exact ties with a power of two
                        [np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-40]]).astype(F32)
    want = run_ort("QuantizeLinear", {"x": x}, {"s": scale, "z": np.int8(zp)}, ["x", "s", "z"])
    same(want, sem.quantize_f32(x, scale, zp))
    spread(want, 200)


@pytest.mark.parametrize("seed", range(4))
def test_dequantizelinear(seed):
    rng = np.random.default_rng(seed)
    zp, scale = int(rng.integers(-128, 128)), F32(2.0 ** rng.uniform(-10, 3))
    q = np.arange(-128, 128).astype(np.int8)
    want = run_ort("DequantizeLinear", {"q": q}, {"s": scale, "z": np.int8(zp)}, ["q", "s", "z"],
                   out_type=TensorProto.FLOAT)
    got = sem.dequantize_f32(q, scale, zp)
    assert got.dtype == want.dtype == np.float32
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
