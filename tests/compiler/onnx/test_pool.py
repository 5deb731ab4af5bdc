"""A QDQ AveragePool that onnxruntime runs unfused (compiler/onnx/pool.py, quantize_linear_pool) against onnxruntime.

Written with onnx.helper as DenseNet's transitions are quantised: QuantizeLinear, DequantizeLinear, AveragePool,
QuantizeLinear, read by two DequantizeLinears (each dense layer's Concat reads the transition's output).  In an
int8 model onnxruntime's QDQS8ToU8 pass then leaves the output QuantizeLinear int8 and makes the input one uint8,
so the group is not fused into a QLinearAveragePool: onnxruntime's default session runs a float AveragePool
(on NCHWc blocks when the channels are a multiple of its block, 16 here, else MLAS's plain pool) and then
QuantizeLinear, which rounds before it adds the zero point.  The tests check that this is how onnxruntime ran
the model, then compare every element with it.  An odd output zero point and the input's own scale (as
quantize_static gives a pool) make ties frequent, where adding the zero point before rounding is a step off.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import compiler
from compiler.onnx.ort_graph import kernels, optimised
from tests.helpers.qdq import LEVELS, F, feeds_for, initializer, ort_float

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pool_model(shape: tuple, kernel: tuple, stride: tuple, pads: tuple, include_pad: int, y: tuple) -> onnx.ModelProto:
    """x quantised (scale 0.05, zero point 3), dequantised, AveragePool, quantised by y = (scale, zero point) and
    dequantised twice: the outputs out and out2."""
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("AveragePool", ["xf"], ["p"], name="pool", kernel_shape=list(kernel),
                              strides=list(stride), pads=list(pads), count_include_pad=include_pad),
             helper.make_node("QuantizeLinear", ["p", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out2"])]
    inits = [initializer("sx", 0.05, np.float32), initializer("zx", 3, np.int8),
             initializer("sy", y[0], np.float32), initializer("zy", y[1], np.int8)]
    out = [shape[0], shape[1]] + [(shape[2 + i] + pads[i] + pads[2 + i] - kernel[i]) // stride[i] + 1 for i in (0, 1)]
    g = helper.make_graph(nodes, "avg", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info(o, F, out) for o in ("out", "out2")], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def ours(model: onnx.ModelProto, feeds: dict) -> tuple[np.ndarray, compiler.Graph]:
    """The first output on the simulator (race-checked), and the imported graph."""
    g = compiler.from_onnx(model)
    mod = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    return mod.get_output(0), g


def _kernel(model: onnx.ModelProto) -> str | None:
    """How onnxruntime's default session runs the pool (ort_graph.kernels)."""
    return kernels(model, optimised(onnx, model)).get("p")


@st.composite
def pools(draw):
    """A pool's input shape, kernel, stride, pads (each smaller than the kernel) and count_include_pad."""
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(2, 4))      # a 1 x 1 window is imported as a view
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 2))
    pads = tuple(draw(st.integers(0, k - 1)) for k in (kh, kw, kh, kw))
    h, w = kh + draw(st.integers(0, 12)), kw + draw(st.integers(0, 30))
    return (1, 16 * draw(st.integers(1, 3)), h, w), (kh, kw), (sh, sw), pads, draw(st.integers(0, 1))


@SETTINGS
@given(case=pools(), own_scale=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_an_unfused_nchwc_average_pool_is_onnxruntimes_default_bit_for_bit(case, own_scale, seed):
    """Channels a multiple of 16: onnxruntime's default session pools on NCHWc blocks (the window in order, as
    vu.pool.favg sums it); ORT_DISABLE_ALL's MLAS pool adds each column's rows first, a float32 rounding
    apart, so it is at most a step from the default and from ours."""
    model = pool_model(*case, y=(0.05, -7) if own_scale else (0.0625, 5))
    assert _kernel(model) == "nchwc"
    feeds = feeds_for(model, seed)
    y, g = ours(model, feeds)
    assert [n.op.kind for n in g.nodes] == ["avg_pool2d", "reshape"] and g.nodes[0].op.quantize_linear   # out2 a copy
    np.testing.assert_array_equal(y, ort_float(model, feeds, LEVELS["default"]))
    step = 0.05 if own_scale else 0.0625
    assert np.abs(y - ort_float(model, feeds, LEVELS["disable"])).max(initial=0) <= step * 1.001


@pytest.mark.parametrize("shape, kernel, stride, pads, include_pad", [
    ((1, 13, 5, 23), (1, 3), (1, 2), (0, 1, 0, 2), 0), ((2, 7, 9, 14), (2, 2), (3, 3), (1, 1, 0, 0), 1),
    ((1, 20, 6, 40), (1, 5), (2, 1), (0, 0, 0, 4), 1)])
def test_an_unfused_mlas_average_pool_sums_as_its_window_order_where_mlas_does(shape, kernel, stride, pads,
                                                                              include_pad):
    """Channels not a multiple of 16: MLAS's plain pool at both levels, which adds the window in order where a
    window has one row or the stride is over 2 (its generic kernel): bit for bit with both levels."""
    model = pool_model(shape, kernel, stride, pads, include_pad, y=(0.05, -7))
    assert _kernel(model) == "float"
    feeds = feeds_for(model, 11)
    y, g = ours(model, feeds)
    assert [n.op.kind for n in g.nodes] == ["avg_pool2d", "reshape"] and g.nodes[0].op.quantize_linear   # out2 a copy
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, feeds, level))
