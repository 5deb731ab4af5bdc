"""ReduceMax over H and W (compiler/onnx/reduce.py) against onnxruntime at both optimisation levels: QDQ, the
axes as an attribute (opset 13) or an input (opset 18), keepdims 1 and 0, random shapes."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
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
