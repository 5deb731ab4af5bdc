"""ReduceMax over H and W (compiler/onnx/reduce.py) against onnxruntime at both optimisation levels: QDQ, the
axes as an attribute (opset 13) or an input (opset 18), keepdims 1 and 0, random shapes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import compiler

from tests.helpers.qdq import LEVELS, SCALES, F, dims, feeds_for, initializer

pytestmark = pytest.mark.usefixtures("warm_engine")


def reduce_max_model(c: int, h: int, w: int, keepdims: int, opset: int) -> onnx.ModelProto:
    """x quantised, ReduceMax over H and W between DQ and Q (the same parameters, as quantize_static gives)."""
    axes = {"axes": [2, 3]} if opset < 18 else {}
    inputs = ["xf"] + (["axes"] if opset >= 18 else [])
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("ReduceMax", inputs, ["r"], keepdims=keepdims, **axes),
             helper.make_node("QuantizeLinear", ["r", "sx", "zx"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sx", "zx"], ["out"])]
    inits = [initializer("sx", SCALES["x"][0], np.float32), initializer("zx", SCALES["x"][1], np.int8)]
    inits += [initializer("axes", [2, 3], np.int64)] if opset >= 18 else []
    out = [1, c, 1, 1] if keepdims else [1, c]
    g = helper.make_graph(nodes, "rmax", [helper.make_tensor_value_info("x", F, [1, c, h, w])],
                          [helper.make_tensor_value_info("out", F, out)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("keepdims, opset", [(1, 13), (0, 18), (1, 18)])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**dims)
def test_reduce_max_over_the_plane_is_bit_exact_at_both_levels(keepdims, opset, seed, c, h, w):
    model = reduce_max_model(c, h, w, keepdims, opset)
    feeds = feeds_for(model, seed)
    g = compiler.from_onnx(model)
    assert [n.op.kind for n in g.nodes][0] == "max_pool2d"
    mod = compiler.GraphModule(compiler.build(g))
    mod.set_input("x", g.values["x"].quant.quantize(feeds["x"]))
    mod.run(check_races=True)
    y = mod.get_output(0, quantized=True)
    s, z = SCALES["x"]
    for level in LEVELS.values():
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            None, feeds)[0]
        np.testing.assert_array_equal(y, (np.rint(want / np.float32(s)) + z).astype(np.int8))


def reduce_mean_model(n: int, c: int, h: int, w: int, keepdims: int, opset: int, *, axes=(2, 3), relu=False,
                      sy: float = 0.02, dtype=np.int8) -> onnx.ModelProto:
    """x quantised (dtype), ReduceMean over H and W between DQ and Q (output scale sy, a Relu before the Q if
    relu), then DQ: the form quantize_static gives ReduceMean in both QDQ and QOperator mode."""
    zx, zy = (5, -3) if dtype == np.int8 else (131, 120)
    kw = {"axes": list(axes)} if opset < 18 else {}
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("ReduceMean", ["xf"] + (["axes"] if opset >= 18 else []), ["r"], keepdims=keepdims,
                              **kw)]
    nodes += [helper.make_node("Relu", ["r"], ["rr"])] if relu else []
    nodes += [helper.make_node("QuantizeLinear", ["rr" if relu else "r", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    inits = [initializer("sx", 0.043, np.float32), initializer("zx", zx, dtype),
             initializer("sy", sy, np.float32), initializer("zy", zy, dtype)]
    inits += [initializer("axes", list(axes), np.int64)] if opset >= 18 else []
    g = helper.make_graph(nodes, "rmean", [helper.make_tensor_value_info("x", F, [n, c, h, w])],
                          [helper.make_tensor_value_info("out", F, [n, c, 1, 1] if keepdims else [n, c])],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def _run_both(model: onnx.ModelProto, seed: int) -> None:
    """Import, compile and run model on the simulator (race-checked); its output equals onnxruntime's at both
    levels on every element."""
    feeds = feeds_for(model, seed)
    g = compiler.from_onnx(model)
    assert "mean_pool2d" in [n.op.kind for n in g.nodes]
    lib = compiler.build(g)
    assert "vu.pool.fmean" in lib.asm
    mod = compiler.GraphModule(lib)
    mod.set_input("x", feeds["x"])
    mod.run(check_races=True)
    y = mod.get_output(0)
    for level in LEVELS.values():
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            None, feeds)[0]
        np.testing.assert_array_equal(y, want)


@pytest.mark.parametrize("keepdims, opset, axes", [(1, 13, (2, 3)), (0, 13, (-2, -1)), (0, 18, (2, 3)),
                                                   (1, 18, (-1, -2))])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**dims, n=st.integers(1, 2), tie=st.booleans())
def test_reduce_mean_over_the_plane_is_bit_exact_at_both_levels(keepdims, opset, axes, seed, c, h, w, n, tie):
    # tie: an output scale putting means on half-integers, where onnxruntime's summation order decides
    sy = float(np.float32(0.043) * np.float32(2.0 / (h * w))) if tie else 0.0131
    _run_both(reduce_mean_model(n, c, h, w, keepdims, opset, axes=axes, sy=sy), seed)


@pytest.mark.parametrize("relu, dtype, c, h, w", [(True, np.int8, 37, 7, 7), (False, np.uint8, 19, 13, 17),
                                                  (True, np.uint8, 70, 14, 14)])
def test_reduce_mean_with_relu_and_in_uint8(relu, dtype, c, h, w):
    _run_both(reduce_mean_model(1, c, h, w, 0, 13, relu=relu, dtype=dtype), 11)


@pytest.mark.parametrize("change, message", [
    (lambda m: m.graph.node[2].attribute[0].ints.__setitem__(slice(None), [1, 2]), r"axes \[1, 2\]"),
    (lambda m: m.graph.node[2].attribute[1].__setattr__("i", 2), "keepdims = 2"),
])
def test_reduce_mean_refuses_other_axes_in_one_line(change, message):
    m = reduce_mean_model(1, 4, 5, 5, 1, 13)
    change(m)
    with pytest.raises(compiler.CompileError, match=message):
        compiler.from_onnx(m)


@pytest.mark.parametrize("fmt, activations", [("qoperator", "int8"), ("qdq", "int8"), ("qoperator", "uint8")])
def test_reduce_mean_as_quantize_static_writes_it(fmt, activations):
    """onnxruntime's quantize_static leaves ReduceMean between DequantizeLinear and QuantizeLinear in both
    formats (no QLinear form); conv -> ReLU -> ReduceMean -> Gemm, MnasNet's head, imports and runs on the NPU:
    bit-exact with onnxruntime in QOperator form, and in QDQ form between its two levels' results (its DQ ->
    Conv -> Q runs in float at ORT_DISABLE_ALL) and equal to ORT_ENABLE_ALL's."""
    from compiler import models
    net = models.Net("head", (1, 8, 9, 11), seed=3)
    net.output(net.gemm(net.reduce_mean(net.conv(net.input, 40, 3, 1, act="relu")), 10))
    model = models.quantize(net.model(), fmt, seed=2, samples=3, activations=activations)
    kinds = [n.op_type for n in model.graph.node]
    at = kinds.index("ReduceMean")
    assert kinds[at - 1] == "DequantizeLinear" and kinds[at + 1] == "QuantizeLinear"
    x = np.random.default_rng(4).standard_normal((1, 8, 9, 11)).astype(np.float32)
    mod = compiler.GraphModule(compiler.build(compiler.from_onnx(model)))
    assert "vu.pool.fmean" in mod.lib.asm
    mod.set_input(0, x)
    mod.run(check_races=True)
    y = mod.get_output(0)
    outs = []
    for level in LEVELS.values():
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        outs.append(ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            None, {model.graph.input[0].name: x})[0])
    np.testing.assert_array_equal(y, outs[0])
    if fmt == "qoperator":
        np.testing.assert_array_equal(y, outs[1])
    else:
        assert ((np.minimum(*outs) <= y) & (y <= np.maximum(*outs))).all()
