"""Binary ONNX ops (compiler/onnx/elementwise.py) against onnxruntime: Sub, Div, Max, Min, Add and Mul in QDQ
form, QLinearAdd / QLinearMul in QOperator form, with b broadcast (per channel, per plane, scalar, same
shape, and any numpy broadcast that merges into three axes), a constant or the broadcast operand on either
side (QLinearAdd's arithmetic follows onnxruntime's roles: add_roles_swapped), int8 and uint8, and two
activations (SiLU's x * sigmoid(x) shape: QLinearMul of two activations).

Each model is written with onnx.helper, imported, compiled, run on the simulator (race-checked) and compared
element for element with onnxruntime at ORT_ENABLE_ALL and ORT_DISABLE_ALL.  Sub, Div, Max and Min run in
float32 between DequantizeLinear and QuantizeLinear at both levels (onnxruntime fuses only Add and Mul), so
they are bit-exact with both; QDQ Add and Mul take QLinearAdd's / QLinearMul's arithmetic (the fusion of the
default level): bit-exact with ORT_ENABLE_ALL, and within its difference from ORT_DISABLE_ALL.  Shapes are
random and need not divide 32.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from onnx import helper

import compiler
from compiler import CompileError
from compiler.lowering.vu import broadcast_view
from tests.helpers.qdq import LEVELS, SCALES, ZP_TYPES, F, dims, feeds_for, initializer, ort_float

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
    model = bcast_model("mul", "qoperator", "int8", (2, 3, 4, 5), (2, 1, 4, 1), "input", "A", 1)
    with pytest.raises(CompileError, match=r"QLinearMul.*shapes \[2, 3, 4, 5\] and \[2, 1, 4, 1\]: the broadcast "
                                           r"alternates between repeated and varying axes more than three times"):
        compiler.from_onnx(model)
    model = bcast_model("add", "qdq", "int8", (1, 3, 1, 5), (1, 1, 4, 1), "input", "A", 1)
    with pytest.raises(CompileError, match=r"Add.*one activation must have the output's shape"):
        compiler.from_onnx(model)



# ------------------------------------------------------------------ general broadcasting, either side, int8 and uint8

BSCALES = {"x": (0.043, 5), "b": (0.031, -9), "y": (0.057, 3)}
"""(scale, zero point as int8; uint8 adds 128) of x, b and y in the broadcast models."""


def bcast_model(kind: str, form: str, dtype: str, x_shape: tuple, b_shape: tuple, b: str, side: str,
                seed: int) -> onnx.ModelProto:
    """kind(x, b) (side "A": x is input A; "B": x is input B) of a full x and a broadcast b ("input": a quantised
    graph input, "const": an initializer), QLinearAdd / QLinearMul (form "qoperator") or DQ -> Add / Mul -> Q
    ("qdq"), activations of `dtype`; the output dequantised."""
    elem, np_t, lo = ZP_TYPES[dtype]
    rng = np.random.default_rng(seed)
    inits = [initializer(f"s{k}", s, np.float32) for k, (s, _) in BSCALES.items()]
    inits += [initializer(f"z{k}", z + lo + 128, np_t) for k, (_, z) in BSCALES.items()]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    inputs = [helper.make_tensor_value_info("x", F, list(x_shape))]
    if b == "input":
        inputs.append(helper.make_tensor_value_info("b", F, list(b_shape)))
        nodes.append(helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]))
    else:
        inits.append(initializer("bq", rng.integers(lo, lo + 256, b_shape), np_t))
    out_shape = list(np.broadcast_shapes(x_shape, b_shape))
    pair = [("xq", "x"), ("bq", "b")][::1 if side == "A" else -1]
    if form == "qoperator":
        ins = [t for name, k in pair for t in (name, f"s{k}", f"z{k}")] + ["sy", "zy"]
        op = {"add": "QLinearAdd", "mul": "QLinearMul"}[kind]
        nodes.append(helper.make_node(op, ins, ["yq"], domain="com.microsoft"))
    else:
        nodes += [helper.make_node("DequantizeLinear", [name, f"s{k}", f"z{k}"], [name + "f"]) for name, k in pair]
        nodes += [helper.make_node(kind.capitalize(), [name + "f" for name, _ in pair], ["r"]),
                  helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"])]
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"]))
    g = helper.make_graph(nodes, "bcast", inputs, [helper.make_tensor_value_info("out", F, out_shape)],
                          initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@st.composite
def broadcast_pairs(draw):
    """(x shape, b shape): rank 1 to 4, sizes to 37, b each axis 1 or x's, then maybe fewer (leading) axes."""
    rank = draw(st.integers(1, 4))
    x = tuple(draw(st.integers(1, 37)) for _ in range(rank))
    b = tuple(d if draw(st.booleans()) else 1 for d in x)
    return x, b[draw(st.integers(0, rank - 1)):]


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pair=broadcast_pairs(), kind=st.sampled_from(["add", "mul"]), form=st.sampled_from(["qoperator", "qdq"]),
       dtype=st.sampled_from(["int8", "uint8"]), b=st.sampled_from(["input", "const"]),
       side=st.sampled_from(["A", "B"]), seed=st.integers(0, 2**32 - 1))
def test_any_broadcast_either_side_is_bit_exact_with_onnxruntime(pair, kind, form, dtype, b, side, seed):
    """QOperator: equal to onnxruntime at both levels; QDQ: equal to ORT_ENABLE_ALL (its QLinear fusion), within a
    step of ORT_DISABLE_ALL's float.  A broadcast that merges into more than three axes is refused in one line."""
    x_shape, b_shape = pair
    model = bcast_model(kind, form, dtype, x_shape, b_shape, b, side, seed)
    feeds = feeds_for(model, seed)
    event("refused" if broadcast_view(x_shape, b_shape) is None else "compiled")
    if broadcast_view(x_shape, b_shape) is None:
        with pytest.raises(CompileError, match="alternates between repeated and varying axes"):
            compiler.from_onnx(model)
        return
    g = compiler.from_onnx(model)
    mod = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    y = mod.get_output(0)
    want = ort_float(model, feeds, LEVELS["default"])
    np.testing.assert_array_equal(y, want)
    plain = ort_float(model, feeds, LEVELS["disable"])
    if form == "qoperator":
        np.testing.assert_array_equal(y, plain)
    else:
        assert np.abs(y - plain).max(initial=0) <= BSCALES["y"][0] * 1.01


SIDES = {"A scalar per span: roles swapped": ((1, 256, 1, 1), (1, 256, 3, 5)),
         "A broadcast outside the span: A keeps its role": ((1, 1, 256), (3, 5, 256)),
         "A a same-shape constant": ((3, 5, 256), (3, 5, 256))}


@pytest.mark.parametrize("case", sorted(SIDES))
@pytest.mark.parametrize("dtype", ["int8", "uint8"])
def test_qlinear_add_takes_onnxruntimes_roles_for_each_side(case, dtype):
    """The importer's add (reverse or not, as add_roles_swapped says) equals onnxruntime on every element, where the
    other choice of roles differs: scales are searched until the two part, A a constant of every value."""
    a_shape, b_shape = SIDES[case]
    _, np_t, lo = ZP_TYPES[dtype]
    rng = np.random.default_rng(7)
    a = (np.arange(np.prod(a_shape)) % 256 + lo).reshape(a_shape).astype(np_t)
    b_int8 = rng.integers(-128, 128, b_shape).astype(np.int8)
    for _ in range(400):
        sa, sb, sy = rng.uniform(0.002, 0.2, 3).astype(np.float32)
        za, zb, zy = (int(v) for v in rng.integers(lo, lo + 256, 3))
        g = compiler.from_onnx(_qlinear_add_const_a(a, (sa, za), b_shape, (sb, zb), (sy, zy), np_t))
        (op,) = [n.op for n in g.nodes if n.op.kind == "add"]
        ours = g.reference({"bf": b_int8})[0]
        other = replace(op, reverse=not op.reverse).reference(b_int8.reshape(op.shape))
        if np.array_equal(ours.ravel(), other.ravel()):
            continue
        model = _qlinear_add_const_a(a, (sa, za), b_shape, (sb, zb), (sy, zy), np_t)
        feed = {"bf": g.values["bf"].quant.dequantize(b_int8).astype(np.float32)}
        for level in LEVELS.values():
            np.testing.assert_array_equal(g.values[g.outputs[0]].quant.dequantize(ours), ort_float(model, feed, level))
        return
    pytest.fail("no scales where the two roles round apart: the test would not tell them apart")


def _qlinear_add_const_a(a, aq, b_shape, bq, yq, np_t) -> onnx.ModelProto:
    """QLinearAdd(A a constant, B a quantised input) then DequantizeLinear."""
    inits = [initializer("a", a, np_t)]
    for k, (s, z) in (("a", aq), ("b", bq), ("y", yq)):
        inits += [initializer(f"s{k}", s, np.float32), initializer(f"z{k}", z, np_t)]
    nodes = [helper.make_node("QuantizeLinear", ["bf", "sb", "zb"], ["bq"]),
             helper.make_node("QLinearAdd", ["a", "sa", "za", "bq", "sb", "zb", "sy", "zy"], ["yq"],
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "roles", [helper.make_tensor_value_info("bf", F, list(b_shape))],
                          [helper.make_tensor_value_info("out", F, None)], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("const_side", ["A", "B"])
def test_a_constant_operand_after_a_conv_is_a_kernel_of_its_own(const_side):
    """QLinearAdd of a same-shape constant and a QLinearConv's output: on A's side the constant takes A's role
    (reverse), which the conv's fused residual epilogue (the conv's output in A's role) cannot compute; on B's it
    is no second input to fuse.  Either way the add is a kernel of its own, equal to onnxruntime at both levels."""
    rng = np.random.default_rng(5)
    shape = (1, 7, 9, 11)
    inits = [initializer("w", rng.integers(-20, 20, (7, 3, 3, 3)), np.int8), initializer("bias", rng.integers(
        -300, 300, 7), np.int32), initializer("c", rng.integers(-128, 128, shape), np.int8)]
    for k, (s, z) in {"x": (0.04, 2), "w": (0.01, 0), "y": (0.05, -3), "c": (0.03, 6), "o": (0.06, 1)}.items():
        inits += [initializer(f"s{k}", s, np.float32), initializer(f"z{k}", z, np.int8)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["yq"],
                              pads=[1, 1, 1, 1]),
             helper.make_node("QLinearAdd", (["c", "sc", "zc", "yq", "sy", "zy"] if const_side == "A" else
                                             ["yq", "sy", "zy", "c", "sc", "zc"]) + ["so", "zo"], ["oq"],
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["oq", "so", "zo"], ["out"])]
    g = helper.make_graph(nodes, "conv_add", [helper.make_tensor_value_info("x", F, [1, 3, 9, 11])],
                          [helper.make_tensor_value_info("out", F, list(shape))], initializer=inits)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    graph = compiler.from_onnx(model)
    assert [n.op.reverse for n in graph.nodes if n.op.kind == "add"] == [const_side == "A"]
    lib = compiler.build(graph)
    assert len(lib.layers) == 2                       # the conv, then the add: no fused residual
    mod = compiler.GraphModule(lib)
    feeds = feeds_for(model, 5)
    mod.set_input("x", feeds["x"])
    mod.run(check_races=True)
    for level in LEVELS.values():
        np.testing.assert_array_equal(mod.get_output(0), ort_float(model, feeds, level))
