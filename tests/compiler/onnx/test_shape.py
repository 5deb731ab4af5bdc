"""Squeeze, Unsqueeze and Concat with constant pieces (compiler/onnx/shape.py) against onnxruntime.

Squeeze and Unsqueeze of int8 tensors import as a Reshape (metadata: no host part, no data moved), in the
attribute form (opset 11) and the input form (opset 13).  Concat takes a constant piece (ViT's class token: an
int8 or uint8 initializer in QLinearConcat, a dequantised one in QDQ) requantised at import by the same op
as an activation piece, written by the concat's own DMA kernel.  Random shapes (not multiples of 32), random
inputs, int8 and uint8, onnxruntime at both optimisation levels.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import compiler
from compiler import CompileError, Graph
from tests.helpers.qdq import LEVELS, ZP_TYPES, F, feeds_for, initializer, ort_float

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _model(nodes, inputs, inits, opset: int, out_shape: tuple) -> onnx.ModelProto:
    g = helper.make_graph(nodes, "shape", inputs, [helper.make_tensor_value_info("out", F, list(out_shape))],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _run(model: onnx.ModelProto, seed: int) -> tuple[np.ndarray, object]:
    """Ours (compiled, race-checked) against onnxruntime at both levels; returns our output and the graph."""
    feeds = feeds_for(model, seed)
    g = compiler.from_onnx(model)
    m = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        m.set_input(k, v)
    m.run(check_races=True)
    y = m.get_output(0)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, feeds, level))
    return y, g


def _squeeze_model(shape: tuple, axes: tuple, opset: int, dtype: str) -> onnx.ModelProto:
    """x -> Q -> Unsqueeze(axes) -> Squeeze(the same axes) -> Squeeze() -> DQ (int8 or uint8 in between)."""
    _, np_t, lo = ZP_TYPES[dtype]
    inits = [initializer("s", 0.05, np.float32), initializer("z", lo + 131, np_t)]
    args = {}
    if opset >= 13:
        inits.append(initializer("axes", list(axes), np.int64))
        ins = ["axes"]
    else:
        ins, args = [], {"axes": list(axes)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("Unsqueeze", ["xq", *ins], ["u"], **args),
             helper.make_node("Squeeze", ["u", *ins], ["v"], **args),
             helper.make_node("Unsqueeze", ["v", *ins], ["w"], **args),
             helper.make_node("Squeeze", ["w"], ["q"]),
             helper.make_node("DequantizeLinear", ["q", "s", "z"], ["out"])]
    return _model(nodes, [helper.make_tensor_value_info("x", F, list(shape))], inits, opset, shape)


@SETTINGS
@given(shape=st.lists(st.integers(2, 37), min_size=1, max_size=3).map(tuple), opset=st.sampled_from([11, 13]),
       dtype=st.sampled_from(["int8", "uint8"]), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_squeeze_and_unsqueeze_are_reshapes_on_the_npu(shape, opset, dtype, seed, data):
    n = data.draw(st.integers(1, 2))
    rank = len(shape) + n                            # the Unsqueeze's output: axes index it
    axes = tuple(data.draw(st.lists(st.integers(-rank, rank - 1), min_size=n, max_size=n,
                                    unique_by=lambda a: a % rank)))
    model = _squeeze_model(shape, axes, opset, dtype)
    _, g = _run(model, seed)
    assert isinstance(g, Graph)                       # every node on the NPU: no host part
    assert {n.op.kind for n in g.nodes} == {"reshape"}


def test_squeeze_refusals_quote_the_axes():
    model = _squeeze_model((3, 4), (0,), 13, "int8")
    model.graph.node[2].input[1] = "three"          # Squeeze axis 0 of [1, 3, 4]: fine; axis 1 (size 3) is not
    model.graph.initializer.append(initializer("three", [1], np.int64))
    with pytest.raises(CompileError, match=r"Squeeze.*axes \[1\] of shape \[1, 3, 4\]: only axes of size 1"):
        compiler.from_onnx(model, host_fallback=False)
    model = _squeeze_model((3, 4), (5,), 13, "int8")
    with pytest.raises(CompileError, match=r"Unsqueeze.*axes \[5\] reach outside 3 dimensions"):
        compiler.from_onnx(model, host_fallback=False)


def _concat_model(form: str, dtype: str, x_shape: tuple, c_shape: tuple, axis: int, first: bool,
                  same_scale: bool, seed: int) -> onnx.ModelProto:
    """Concat(c, x) (first) or (x, c) along axis of a quantised x (at the output's scale) and a constant c,
    QLinearConcat or DQ -> Concat -> Q; c's scale the output's or its own (requantised at import)."""
    _, np_t, lo = ZP_TYPES[dtype]
    rng = np.random.default_rng(seed)
    sc, zc = (0.06, 7) if same_scale else (0.045, -20)
    inits = [initializer("sx", 0.06, np.float32), initializer("zx", lo + 135, np_t),
             initializer("sc", sc, np.float32), initializer("zc", lo + 128 + zc, np_t),
             initializer("sy", 0.06, np.float32), initializer("zy", lo + 135, np_t),
             initializer("c", rng.integers(lo, lo + 256, c_shape), np_t)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    pieces = [("c", "sc", "zc"), ("xq", "sx", "zx")][:: 1 if first else -1]
    if form == "qoperator":
        ins = ["sy", "zy"] + [t for p in pieces for t in p]
        nodes.append(helper.make_node("QLinearConcat", ins, ["yq"], axis=axis, domain="com.microsoft"))
    else:
        nodes += [helper.make_node("DequantizeLinear", list(p), [p[0] + "f"]) for p in pieces]
        nodes += [helper.make_node("Concat", [p[0] + "f" for p in pieces], ["cat"], axis=axis),
                  helper.make_node("QuantizeLinear", ["cat", "sy", "zy"], ["yq"])]
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"]))
    out = tuple(d + c_shape[axis] if k == axis else d for k, d in enumerate(x_shape))
    return _model(nodes, [helper.make_tensor_value_info("x", F, list(x_shape))], inits, 13, out)


@SETTINGS
@given(shape=st.lists(st.integers(1, 37), min_size=2, max_size=4).map(tuple),
       form=st.sampled_from(["qoperator", "qdq"]), dtype=st.sampled_from(["int8", "uint8"]), first=st.booleans(),
       same=st.booleans(),
       seed=st.integers(0, 2**32 - 1), data=st.data())
def test_concat_with_a_constant_piece_is_bit_exact_with_onnxruntime(shape, form, dtype, first, same, seed, data):
    axis = data.draw(st.integers(0, len(shape) - 1))
    c_shape = tuple(data.draw(st.integers(1, 9)) if k == axis else d for k, d in enumerate(shape))
    model = _concat_model(form, dtype, shape, c_shape, axis, first, same, seed)
    y, g = _run(model, seed)
    (cat,) = [n.op for n in g.nodes if n.op.kind == "concat"]
    assert [k for k, _ in cat.consts] == [0 if first else 1] and len(cat.inputs) == 1
    assert len(np.unique(y)) > 1


@SETTINGS
@given(shape=st.lists(st.integers(2, 29), min_size=1, max_size=3).map(lambda s: (1, *s)),
       dtype=st.sampled_from(["int8", "uint8"]), seed=st.integers(0, 2**32 - 1), data=st.data())
def test_a_view_of_a_float_island_is_its_table_then_a_reshape(shape, dtype, seed, data):
    """DQ -> Sigmoid -> Unsqueeze -> QuantizeLinear: the island's table is onnxruntime's for the QuantizeLinear
    after the view, and the view a Reshape of the table's int8 result (which alone is the ONNX tensor)."""
    _, np_t, lo = ZP_TYPES[dtype]
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)))
    inits = [initializer("s", 0.05, np.float32), initializer("z", lo + 131, np_t),
             initializer("sy", 0.004, np.float32), initializer("zy", lo, np_t), initializer("ax", [axis], np.int64)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xf"]),
             helper.make_node("Sigmoid", ["xf"], ["sg"]),
             helper.make_node("Unsqueeze", ["sg", "ax"], ["u"]),
             helper.make_node("QuantizeLinear", ["u", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    out = np.expand_dims(np.empty(shape), axis).shape
    _, g = _run(_model(nodes, [helper.make_tensor_value_info("x", F, list(shape))], inits, 13, out), seed)
    assert [(n.op.kind, n.info["onnx_outputs"]) for n in g.nodes] == [("lut", []), ("reshape", ["yq"])]
