"""Softmax and QLinearSoftmax imported from ONNX (compiler/onnx/softmax.py), compiled and run on the simulator
against onnxruntime at ORT_ENABLE_ALL and ORT_DISABLE_ALL: a lone QLinearSoftmax on random shapes, axes and
opsets; YOLOv8's DFL head (Conv -> Reshape -> Transpose -> Softmax over axis 1 -> Conv) quantised by
onnxruntime in QOperator and QDQ form; refusals in one line."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

import compiler
from compiler import GraphModule, from_onnx, models
from compiler.models import Net

LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def _ort(model, feed: dict, level) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feed)


def _qlinear_softmax_model(shape, axis, opset, xs, xz, ys, yz):
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [xs]), helper.make_tensor("xz", TensorProto.INT8, [], [xz]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [ys]), helper.make_tensor("yz", TensorProto.INT8, [], [yz])]
    attrs = {"opset": opset} if axis is None else {"opset": opset, "axis": axis}
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "qsoftmax", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, shape)], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    return m


def _run(model, q: np.ndarray) -> np.ndarray:
    """The model compiled (its softmax on the NPU: a vu.softmax in the program) and run on int8 q."""
    lib = compiler.build(from_onnx(model))
    assert "vu.softmax" in lib.asm
    m = GraphModule(lib)
    m.set_input(0, q)
    m.run(check_races=True)
    return m.get_output(0, quantized=True)


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(1, 19), min_size=1, max_size=4), st.data())
def test_lone_qlinear_softmax_is_onnxruntime_at_both_levels(shape, data):
    """Any axis (or none: the opset's default), opset 13 (one axis) or 11 (the dims from the axis on as one row)."""
    rank = len(shape)
    axis = data.draw(st.one_of(st.none(), st.integers(-rank, rank - 1)))
    opset = data.draw(st.sampled_from([11, 13]))
    if axis is None and opset < 13 and rank < 2:
        axis = 0
    xs, ys = data.draw(st.floats(0.004, 0.4)), data.draw(st.sampled_from([1 / 256, 0.02]))
    yz = data.draw(st.sampled_from([-128, 0, 5]))
    model = _qlinear_softmax_model(shape, axis, opset, xs, int(data.draw(st.integers(-20, 20))), ys, yz)
    q = np.random.default_rng(rank).integers(-128, 128, shape).astype(np.int8)
    got = _run(model, q)
    for level in LEVELS:
        np.testing.assert_array_equal(got, _ort(model, {"x": q}, level)[0])


def _dfl(anchors: int, opset: int = 17):
    """YOLOv8's distribution-focal head: a conv's 64 channels as 4 x 16 bins per anchor, the softmax over the
    16 bins (axis 1 after the transpose), a 1x1 conv of 16 -> 1 reading the expectation."""
    net = Net("dfl", (1, 8, 1, anchors), seed=3)
    c = net.conv(net.input, 64, 1, act=None)
    r = net.reshape(c, (1, 4, 16, anchors))
    t = net._node("Transpose", [r], (1, 16, 4, anchors), perm=[0, 2, 1, 3])
    s = net._node("Softmax", [t], (1, 16, 4, anchors), axis=1)
    net.output(net.conv(s, 1, 1, act=None))
    model = net.model()
    model.opset_import[0].version = opset
    return model


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_dfl_head_quantised_by_onnxruntime(fmt, dtype):
    """QOperator (QLinearSoftmax) equals onnxruntime at both levels; QDQ (DQ -> Softmax -> Q) equals it at
    ORT_ENABLE_ALL (which fuses it into QLinearSoftmax), and at ORT_DISABLE_ALL (MLAS's float Softmax) lies
    within the two levels' difference on every element; uint8 activations and weights alike (held as int8,
    q - 128: the softmax of the shifted codes is the same)."""
    model = models.quantize(_dfl(37), fmt, seed=2, samples=3, activations=dtype, weights=dtype)
    assert any(n.op_type == ("QLinearSoftmax" if fmt == "qoperator" else "Softmax") for n in model.graph.node)
    x = np.random.default_rng(5).standard_normal((1, 8, 1, 37)).astype(np.float32)
    lib = compiler.build(from_onnx(model))
    assert "vu.softmax" in lib.asm
    m = GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    got = m.get_output(0)
    fused, unfused = (_ort(model, {"input": x}, level)[0] for level in LEVELS)
    np.testing.assert_array_equal(got, fused)
    if fmt == "qoperator":
        np.testing.assert_array_equal(got, unfused)
    assert (np.abs(got - unfused) <= np.abs(fused - unfused)).all()


def _qdq_softmax_model(shape, opset: int, **axis):
    """DequantizeLinear -> Softmax (axis as given, or the opset's default) -> QuantizeLinear of int8 x."""
    inits = [helper.make_tensor("s", TensorProto.FLOAT, [], [0.08]), helper.make_tensor("z", TensorProto.INT8, [], [3]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [1 / 256]), helper.make_tensor("yz", TensorProto.INT8, [], [-128])]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s", "z"], ["f"]),
             helper.make_node("Softmax", ["f"], ["g"], **axis),
             helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.INT8, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize("shape, opset, axis", [((1, 16, 4, 50), 17, {"axis": 1}), ((2, 3, 7), 11, {}),
                                                ((2, 3, 7), 11, {"axis": 2}), ((4, 9), 13, {})])
def test_qdq_softmax_is_fused_onnxruntime_and_keeps_the_unfused_argmax(shape, opset, axis):
    """DQ -> Softmax -> Q alone (opset 11's default axis 1 takes the dims from it on as one row): equal to
    onnxruntime at ORT_ENABLE_ALL; at ORT_DISABLE_ALL (float Softmax, then QuantizeLinear) within the two
    levels' difference, its maximum in every row where onnxruntime's is."""
    model = _qdq_softmax_model(shape, opset, **axis)
    q = np.random.default_rng(8).integers(-128, 128, shape).astype(np.int8)
    got = _run(model, q)
    fused, unfused = (_ort(model, {"x": q}, level)[0] for level in LEVELS)
    np.testing.assert_array_equal(got, fused)
    mine, theirs = got.astype(np.int32), unfused.astype(np.int32)
    assert (np.abs(mine - theirs) <= np.abs(fused.astype(np.int32) - theirs)).all()
    a = axis.get("axis", 1 if opset < 13 else -1) % len(shape)
    rows = (-1, int(np.prod(shape[a:]))) if opset < 13 else None
    m, t = (v.reshape(rows) if rows else np.moveaxis(v, a, -1) for v in (mine, theirs))
    assert (np.take_along_axis(m, t.argmax(axis=-1)[..., None], -1) == m.max(axis=-1, keepdims=True)).all()


@pytest.mark.parametrize("attrs, match", [
    ({"opset": 13, "axis": 3}, "axis = 3 is out of range for an input of rank 2"),
    ({"axis": -1}, "has no opset attribute"),
])
def test_qlinear_softmax_refusals_name_the_node(attrs, match):
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [0.1]), helper.make_tensor("xz", TensorProto.INT8, [], [0]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [1 / 256]), helper.make_tensor("yz", TensorProto.INT8, [], [-128])]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.INT8, [3, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, [3, 5])], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(compiler.CompileError, match=match):
        from_onnx(m)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("axis", [1, -1])
def test_softmax_between_convs_in_a_network(fmt, axis):
    """Conv -> Softmax (over the channels, or the rows of a plane) -> Conv as one program: the softmax reads
    and writes NCHW whatever layouts the convs take; equal to onnxruntime's fused level on every element."""
    net = Net("conv_softmax_conv", (1, 8, 14, 14), seed=3)
    c = net.conv(net.input, 40, 3, act="relu")
    net.output(net.conv(net._node("Softmax", [c], (1, 40, 14, 14), axis=axis), 24, 3, act=None))
    model = models.quantize(net.model(), fmt, seed=2, samples=3)
    x = np.random.default_rng(5).standard_normal((1, 8, 14, 14)).astype(np.float32)
    lib = compiler.build(from_onnx(model))
    assert "vu.softmax" in lib.asm
    m = GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    fused, unfused = (_ort(model, {"input": x}, level)[0] for level in LEVELS)
    np.testing.assert_array_equal(m.get_output(0), fused)
    if fmt == "qoperator":
        np.testing.assert_array_equal(m.get_output(0), unfused)
