"""ops.reduce_mean (compiler/ops/pool.py) and its model, reference.mean_sum_f32 / reduce_mean_f32: onnxruntime's
ReduceMean over H and W on every element and every bit, at ORT_ENABLE_ALL and ORT_DISABLE_ALL.

The float32 sum's order is what these tests pin down: onnxruntime sums each plane with Eigen's 4-lane
vectorised redux from the plane's first 16-byte-aligned float, so the float tests compare whole float32
results (where any other order shows), and the QDQ tests pick output scales that put the mean near a
rounding tie, where the order decides the int8 result."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

from compiler import CompileError, Dim, ops
from compiler.reference import MEAN_LANES, mean_sum_f32

LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
SIDES = st.one_of(st.integers(1, 9), st.sampled_from([13, 14, 17, 28, 56]))


def _session(nodes, inputs, inits, out_type, level) -> ort.InferenceSession:
    g = helper.make_graph(nodes, "mean", inputs, [helper.make_tensor_value_info("y", out_type, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])


def float_mean(x: np.ndarray, level) -> np.ndarray:
    """onnxruntime's float32 ReduceMean of x over axes [2, 3]."""
    node = helper.make_node("ReduceMean", ["x"], ["y"], axes=[2, 3], keepdims=1)
    vi = helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)
    return _session([node], [vi], [], TensorProto.FLOAT, level).run(None, {"x": x})[0]


def qdq_mean(xq: np.ndarray, sx, zx, sy, zy, level) -> np.ndarray:
    """onnxruntime's DequantizeLinear -> ReduceMean(axes [2, 3]) -> QuantizeLinear of int8 xq."""
    nodes = [helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("ReduceMean", ["xf"], ["r"], axes=[2, 3], keepdims=1),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["y"])]
    inits = [numpy_helper.from_array(np.float32(sx), "sx"), numpy_helper.from_array(np.int8(zx), "zx"),
             numpy_helper.from_array(np.float32(sy), "sy"), numpy_helper.from_array(np.int8(zy), "zy")]
    vi = helper.make_tensor_value_info("xq", TensorProto.INT8, xq.shape)
    return _session(nodes, [vi], inits, TensorProto.INT8, level).run(None, {"xq": xq})[0]


def _model_mean(x: np.ndarray, shift: int = 0) -> np.ndarray:
    """mean_sum_f32 / (H * W) of float x, its rows `shift` floats further from a 16-byte boundary."""
    n, c, h, w = x.shape
    phases = (np.arange(n * c) * (h * w) + shift) % MEAN_LANES
    return (mean_sum_f32(x.reshape(n * c, h * w), phases) / np.float32(h * w)).reshape(n, c, 1, 1)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2), c=st.integers(1, 24), h=SIDES, w=SIDES)
def test_the_float32_sum_is_onnxruntimes_on_every_bit(seed, n, c, h, w):
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((n, c, h, w)) * rng.uniform(0.01, 100)).astype(np.float32)
    want = _model_mean(x)
    for level in LEVELS:
        np.testing.assert_array_equal(float_mean(x, level).view(np.int32), want.view(np.int32))


def test_the_order_is_visible_a_plain_sum_differs():
    """The float test can tell orders apart: a left-to-right sum misses onnxruntime's result on most planes."""
    x = (np.random.default_rng(1).standard_normal((1, 64, 13, 17)) * 10).astype(np.float32)
    seq = (np.cumsum(x.reshape(64, -1), axis=1, dtype=np.float32)[:, -1] / np.float32(13 * 17)).reshape(1, 64, 1, 1)
    got = float_mean(x, LEVELS[1])
    assert np.array_equal(got, _model_mean(x))
    assert (got != seq).sum() > 16


def test_the_order_follows_the_planes_address():
    """A plane's packets start at its first 16-byte-aligned float: an input one float off a boundary (onnxruntime
    reads the numpy buffer in place) shifts every plane's phase by one, and the model follows it."""
    rng = np.random.default_rng(2)
    shape = (1, 7, 11, 9)
    buf = np.empty(int(np.prod(shape)) + 8, np.float32)
    off = (-(buf.ctypes.data // 4)) % MEAN_LANES + 1
    x = buf[off:off + int(np.prod(shape))].reshape(shape)
    x[...] = rng.standard_normal(shape) * 10
    got = float_mean(x, LEVELS[1])
    assert np.array_equal(got, _model_mean(x, shift=1))
    assert not np.array_equal(got, _model_mean(x))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2), c=st.integers(1, 40), h=SIDES, w=SIDES,
       tie=st.booleans())
def test_reduce_mean_is_onnxruntimes_qdq_reduce_mean_on_every_element(seed, n, c, h, w, tie):
    rng = np.random.default_rng(seed)
    sx = np.float32(rng.uniform(0.001, 0.2))
    # tie: sy = 2 sx / HW (times a power of two) puts the exact mean on half-integers, where the order rounds it
    sy = np.float32(sx * np.float32(2.0 / (h * w)) * np.float32(rng.choice([1, 64]))) if tie else \
        np.float32(sx * rng.uniform(0.05, 2.0))
    zx, zy = (int(v) for v in rng.integers(-128, 128, 2))
    xq = rng.integers(-128, 128, (n, c, h, w)).astype(np.int8)
    mine = ops.reduce_mean(xq.shape, x_zp=zx, scale_x=sx, scale_out=sy, zp_out=zy).reference(xq)
    assert mine.shape == (n, c, 1, 1) and mine.dtype == np.int8
    for level in LEVELS:
        np.testing.assert_array_equal(mine, qdq_mean(xq, sx, zx, sy, zy, level))


@pytest.mark.parametrize("kw, message", [
    ({"scale_x": 0.0, "scale_out": 0.1}, "scale_x"),
    ({"scale_x": 0.1, "scale_out": float("inf")}, "scale_out"),
    ({"scale_x": 0.1, "scale_out": 0.1, "zp_out": 128}, "zp_out"),
    ({"scale_x": 0.1, "scale_out": 0.1, "x_zp": -129}, "x_zp"),
])
def test_bad_arguments_are_refused_naming_them(kw, message):
    with pytest.raises(CompileError, match=message):
        ops.reduce_mean((1, 4, 7, 7), **kw)


def test_a_symbolic_shape_is_refused():
    with pytest.raises(CompileError, match="static shapes"):
        ops.reduce_mean((1, 4, Dim("h", 2, 9), 7), scale_x=0.1, scale_out=0.1)
