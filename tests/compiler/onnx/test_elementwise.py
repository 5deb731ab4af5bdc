"""Binary ONNX ops (compiler/onnx/elementwise.py) against onnxruntime: Sub, Div, Max, Min, Add and Mul in QDQ
form, QLinearAdd / QLinearMul in QOperator form, with b broadcast (per channel, per plane, scalar, same
shape), a constant on either side, and two activations (SiLU's x * sigmoid(x) shape: QLinearMul of two
activations).

Each model is written with onnx.helper, imported, compiled, run on the simulator (race-checked) and compared
element for element with onnxruntime at ORT_ENABLE_ALL and ORT_DISABLE_ALL.  Sub, Div, Max and Min run in
float32 between DequantizeLinear and QuantizeLinear at both levels (onnxruntime fuses only Add and Mul), so
they are bit-exact with both; QDQ Add and Mul take QLinearAdd's / QLinearMul's arithmetic (the fusion of the
default level): bit-exact with ORT_ENABLE_ALL, and within its difference from ORT_DISABLE_ALL.  Shapes are
random and need not divide 32.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import compiler
from compiler import CompileError
from tests.helpers.qdq import LEVELS, SCALES, F, dims, feeds_for, initializer

pytestmark = pytest.mark.usefixtures("warm_engine")
QDQ_OPS = {"sub": "Sub", "div": "Div", "max": "Max", "min": "Min", "add": "Add", "mul": "Mul"}
B_FORMS = {"same": lambda c, h, w: (1, c, h, w), "channel": lambda c, h, w: (1, c, 1, 1),
           "channel-3d": lambda c, h, w: (c, 1, 1), "plane": lambda c, h, w: (1, 1, h, w),
           "scalar": lambda c, h, w: (1,)}


def _model(nodes, inputs, c: int, h: int, w: int, inits) -> onnx.ModelProto:
    for k, (s, z) in SCALES.items():
        inits += [initializer("s" + k, s, np.float32), initializer("z" + k, z, np.int8)]
    g = helper.make_graph(nodes + [helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])], "bin",
                          [helper.make_tensor_value_info(n, F, list(s)) for n, s in inputs],
                          [helper.make_tensor_value_info("out", F, [1, c, h, w])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def qdq_model(kind: str, c: int, h: int, w: int, b_shape: tuple, b: str, swap: bool, seed: int) -> onnx.ModelProto:
    """x [1, c, h, w] quantised, then kind(x, b) (swap: kind(b, x)) between DQ and Q.  b: "input" (a quantised
    activation), "const" (an int8 initializer and its DequantizeLinear) or "float" (a float scalar)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"])]
    inputs, inits = [("x", (1, c, h, w))], []
    if b == "input":
        inputs.append(("b", b_shape))
        nodes += [helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"])]
    elif b == "const":
        q = rng.integers(-128, 128, b_shape).astype(np.int8)
        q[q == SCALES["b"][1]] = 1         # no zero divisor
        inits.append(initializer("bq", q, np.int8))
    if b == "float":
        value = float(rng.choice([-1, 1]) * rng.uniform(0.2, 6))
        inits.append(initializer("bf", np.full(b_shape, value), np.float32))
    else:
        nodes.append(helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bf"]))
    operands = ["bf", "xf"] if swap else ["xf", "bf"]
    nodes += [helper.make_node(QDQ_OPS[kind], operands, ["r"]), helper.make_node("QuantizeLinear", ["r", "sy", "zy"],
                                                                                 ["yq"])]
    return _model(nodes, inputs, c, h, w, inits)


def qlinear_model(kind: str, c: int, h: int, w: int, b_shape: tuple, b: str, swap: bool, seed: int):
    """QLinearAdd / QLinearMul(x, b) (swap: (b, x)); b "input", "const" (an int8 initializer) or "self" (x
    itself, after a QLinearSigmoid-free path: x * x, two activations)."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    inputs, inits = [("x", (1, c, h, w))], []
    if b == "input":
        inputs.append(("b", b_shape))
        nodes.append(helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]))
    elif b == "const":
        inits.append(initializer("bq", rng.integers(-128, 128, b_shape), np.int8))
    bname = "xq" if b == "self" else "bq"
    bscale = ["sx", "zx"] if b == "self" else ["sb", "zb"]
    pair = [[bname, *bscale], ["xq", "sx", "zx"]] if swap else [["xq", "sx", "zx"], [bname, *bscale]]
    op = {"add": "QLinearAdd", "mul": "QLinearMul"}[kind]
    nodes.append(helper.make_node(op, pair[0] + pair[1] + ["sy", "zy"], ["yq"], domain="com.microsoft"))
    return _model(nodes, inputs, c, h, w, inits)


def ort_int8(model: onnx.ModelProto, feeds: dict, level) -> np.ndarray:
    """onnxruntime's output, quantised back to int8 at the output scale (exact: it is a dequantised int8)."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    y = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    s, z = SCALES["y"]
    return (np.rint(y / np.float32(s)) + z).astype(np.int8)


def run_ours(model: onnx.ModelProto, feeds: dict) -> tuple[np.ndarray, compiler.Graph]:
    g = compiler.from_onnx(model)
    mod = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        mod.set_input(k, g.values[k].quant.quantize(v))
    mod.run(check_races=True)
    y = mod.get_output(0, quantized=True)
    np.testing.assert_array_equal(y, g.reference({k: g.values[k].quant.quantize(v) for k, v in feeds.items()})[0])
    return y, g


SETTINGS = settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", ["sub", "div", "max", "min"])
@pytest.mark.parametrize("b", ["input", "const"])
@SETTINGS
@given(form=st.sampled_from(sorted(B_FORMS)), swap=st.booleans(), **dims)
def test_qdq_float_ops_are_bit_exact_with_onnxruntime_at_both_levels(kind, b, form, swap, seed, c, h, w):
    if kind == "div" and b == "input":
        form = "same"          # an activation divisor: both shapes alike keeps the test about the arithmetic
    model = qdq_model(kind, c, h, w, B_FORMS[form](c, h, w), b, swap, seed)
    feeds = feeds_for(model, seed)
    y, g = run_ours(model, feeds)
    assert any(n.op.kind == kind for n in g.nodes)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_int8(model, feeds, level))


@pytest.mark.parametrize("kind", ["sub", "div", "max", "min", "add"])
@pytest.mark.parametrize("swap", [False, True])
def test_a_float_scalar_constant_is_exact(kind, swap):
    model = qdq_model(kind, 5, 7, 9, (1,), "float", swap, 11)
    feeds = feeds_for(model, 3)
    y, _ = run_ours(model, feeds)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_int8(model, feeds, level))
    assert len(np.unique(y)) > 5


@pytest.mark.parametrize("kind", ["add", "mul"])
@SETTINGS
@given(form=st.sampled_from(sorted(B_FORMS)), b=st.sampled_from(["input", "const"]), **dims)
def test_qdq_add_and_mul_with_a_constant_follow_the_fused_default_level(kind, form, b, seed, c, h, w):
    """QLinearAdd / QLinearMul arithmetic: equal to ORT_ENABLE_ALL; ORT_DISABLE_ALL's float runs at most a step off."""
    model = qdq_model(kind, c, h, w, B_FORMS[form](c, h, w), b, False, seed)
    feeds = feeds_for(model, seed)
    y, _ = run_ours(model, feeds)
    np.testing.assert_array_equal(y, ort_int8(model, feeds, LEVELS["default"]))
    assert np.abs(y.astype(int) - ort_int8(model, feeds, LEVELS["disable"]).astype(int)).max() <= 1


@pytest.mark.parametrize("kind", ["add", "mul"])
@SETTINGS
@given(form=st.sampled_from(sorted(B_FORMS)), b=st.sampled_from(["input", "const", "self"]), swap=st.booleans(),
       **dims)
def test_qlinear_add_and_mul_with_constants_and_two_activations(kind, form, b, swap, seed, c, h, w):
    if kind == "add" and swap and form != "same" or kind == "add" and swap and b == "const":
        swap = False           # QLinearAdd's arithmetic is not symmetric: only B broadcasts or is constant
    b_shape = (1, c, h, w) if b == "self" else B_FORMS[form](c, h, w)
    model = qlinear_model(kind, c, h, w, b_shape, b, swap, seed)
    feeds = feeds_for(model, seed)
    y, _ = run_ours(model, feeds)
    np.testing.assert_array_equal(y, ort_int8(model, feeds, LEVELS["default"]))


def test_refusals_name_the_node_and_the_reason():
    model = qdq_model("mul", 4, 5, 6, (1,), "float", False, 1)
    with pytest.raises(CompileError, match=r"Mul.*float constant .* a float constant is taken as one finite value "
                                           r"in Add, Sub, Div, Max or Min"):
        compiler.from_onnx(model)
    model = qlinear_model("add", 4, 5, 6, (1, 4, 1, 1), "const", True, 1)
    with pytest.raises(CompileError, match=r"QLinearAdd.*A of shape \[1, 4, 1, 1\] broadcasts to B's "
                                           r"\[1, 4, 5, 6\] \(or is a constant\)"):
        compiler.from_onnx(model)
    model = qdq_model("sub", 4, 5, 6, (1, 1, 1, 6), "const", False, 1)
    with pytest.raises(CompileError, match=r"Sub.*broadcasting is supported for a B of one value per image"):
        compiler.from_onnx(model)

