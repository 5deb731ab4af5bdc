"""Broadcasting add and mul in static builds (compiler/lowering/vu.py) and in ONNX models
(compiler/onnx/elementwise.py): b with one value per channel ([1, C, 1, 1]) or one value only.

Hypothesis draws shapes that do not divide the hardware's sizes; every output is compared on every
element with the op's numpy model and with the unbroadcast op on b repeated to a's shape, race-checked.
ONNX models with a broadcasting QLinearAdd / QLinearMul (QOperator) or Add / Mul (QDQ) are compared with
onnxruntime, statically and over a range of input sizes.  Each wait of a broadcasting kernel is removed in
turn and the run must stop on a race or a deadlock.  Broadcasts that are not lowered are refused naming them;
broadcasts the importer reshapes into a lowered view (lowering.vu.broadcast_view) run bit-exact.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import CompileError, Graph, ops
from compiler.lowering.vu import broadcast_problem, broadcast_view

from tests.onnx_helpers import session
from tests.helpers.mutation import kill_all

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
KINDS = ["add", "mul", "float add", "float mul"]


def rand(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def binary(kind: str, shape, b_shape):
    if kind == "add":
        return ops.add(shape, za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1, b_shape=b_shape)
    if kind == "mul":
        return ops.mul(shape, za=3, zb=-2, multiplier=3 << 20, shift=26, zp_out=1, lo=-90, b_shape=b_shape)
    f = ops.add if kind == "float add" else ops.mul
    return f(shape, za=3, zb=-2, scale_a=0.02, scale_b=0.03, scale_out=0.04, zp_out=1, b_shape=b_shape)


B_SHAPES = {"per-channel": lambda n, c, h, w: (1, c, 1, 1), "scalar": lambda n, c, h, w: (1, 1, 1, 1),
            "per-image": lambda n, c, h, w: (n, 1, 1, 1), "per-image-channel": lambda n, c, h, w: (n, c, 1, 1),
            "plane": lambda n, c, h, w: (1, 1, h, w), "plane-per-image": lambda n, c, h, w: (n, 1, h, w)}


@pytest.mark.parametrize("kind", KINDS)
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3), c=st.integers(1, 70), h=st.integers(1, 40),
       w=st.integers(1, 50), form=st.sampled_from(sorted(B_SHAPES)))
def test_a_static_broadcasting_add_or_mul_is_bit_exact(kind, seed, n, c, h, w, form):
    shape = (n, c, h, w)
    b_shape = B_SHAPES[form](n, c, h, w)
    op = binary(kind, shape, b_shape)
    rng = np.random.default_rng(seed)
    a, b = rand(rng, shape), rand(rng, b_shape)
    b[b == -2] = 5                  # b = zb would make a product constant, whatever a
    y = compiler.build(op)(a, b, check_races=True)
    np.testing.assert_array_equal(y, op.reference(a, b))
    np.testing.assert_array_equal(y, binary(kind, shape, None).reference(a, np.broadcast_to(b, shape).copy()))
    assert y.size < 64 or len(np.unique(y)) > 3


@pytest.mark.parametrize("b_shape", [(1, 300), (5, 1)], ids=["per-feature", "per-row"])
def test_a_two_axis_tensor_broadcasts_per_feature_or_row(b_shape):
    rng = np.random.default_rng(3)
    op = binary("add", (5, 300), b_shape)
    a, b = rand(rng, (5, 300)), rand(rng, b_shape)
    np.testing.assert_array_equal(compiler.build(op)(a, b, check_races=True),
                                  binary("add", (5, 300), None).reference(a, np.broadcast_to(b, a.shape).copy()))


def test_removing_any_wait_of_a_static_broadcasting_kernel_is_caught():
    rng = np.random.default_rng(5)
    op = binary("add", (2, 9, 30, 41), (1, 9, 1, 1))
    kern = compiler.build(op)
    a, b = rand(rng, (2, 9, 30, 41)), rand(rng, (1, 9, 1, 1))
    np.testing.assert_array_equal(kern(a, b, check_races=True), op.reference(a, b))
    kill_all(kern, [a, b], "static broadcasting add")


@pytest.mark.parametrize("kind", ["add", "mul"])
@pytest.mark.parametrize("b_shape", [(1, 11, 1, 1), (1, 1, 40, 50), (1, 1, 1, 1)], ids=["per-channel", "plane",
                                                                                       "scalar"])
def test_a_conv_then_a_broadcasting_op_is_not_fused_as_a_residual(kind, b_shape):
    """A conv followed by a broadcasting add or mul: the op is a kernel of its own (its b is no residual
    tensor), reading the conv's output from DM row by row."""
    rng = np.random.default_rng(6)
    conv = ops.conv2d((1, 5, 40, 50), rng.integers(-20, 21, (11, 5, 3, 3)), rng.integers(-300, 300, 11), padding=1,
                      multiplier=rng.integers(2**29, 2**31, 11), shift=rng.integers(35, 38, 11))
    op = binary(kind, (1, 11, 40, 50), b_shape)
    x, b = rand(rng, (1, 5, 40, 50)), rand(rng, b_shape)
    b[b == -2] = 5
    kern = compiler.build(conv, op)
    y = kern(x, b, check_races=True)
    np.testing.assert_array_equal(y, op.reference(conv.reference(x), b))
    assert len(np.unique(y)) > 3


def test_a_static_graph_with_a_per_channel_operand():
    """x times a per-channel input s, then a conv, built without Dims: one static binary."""
    rng = np.random.default_rng(9)
    g = Graph("scaled")
    x, s = g.input("x", (1, 6, 14, 9)), g.input("s", (1, 6, 1, 1))
    m = g.add(binary("mul", (1, 6, 14, 9), (1, 6, 1, 1)), x, s, name="scale")
    g.output(g.add(ops.conv2d((1, 6, 14, 9), rng.integers(-20, 21, (4, 6, 3, 3)), padding=1,
                              multiplier=rng.integers(2**29, 2**31, 4), shift=rng.integers(35, 38, 4)), m,
                   name="conv"))
    lib = compiler.build(g)
    ins = {"x": rand(rng, (1, 6, 14, 9)), "s": rand(rng, (1, 6, 1, 1))}
    mod = compiler.GraphModule(lib)
    for k, v in ins.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    np.testing.assert_array_equal(mod.get_output(0), g.reference(ins)[0])


def test_broadcasts_that_are_not_lowered_are_refused_naming_them():
    with pytest.raises(CompileError, match=r"argument 0 \(add\): b of shape \(1, 1, 1, 9\) broadcast to "
                                           r"\(1, 7, 4, 9\): an add or mul broadcasts a b that is one value per "
                                           r"image and / or channel .* not one that repeats along the height or "
                                           r"width only"):
        compiler.build(binary("add", (1, 7, 4, 9), (1, 1, 1, 9)))
    with pytest.raises(CompileError, match=r"b of shape \(1, 1, 400, 400\) \(160000 bytes\) broadcast to "
                                           r"\(1, 2, 400, 400\) does not fit a quarter of VBUF"):
        compiler.build(binary("add", (1, 2, 400, 400), (1, 1, 400, 400)))
    g = Graph("rows")
    x, r = g.input("x", (1, 7, 4, 9)), g.input("r", (1, 7, 4, 1))
    g.output(g.add(binary("mul", (1, 7, 4, 9), (1, 7, 4, 1)), x, r, name="m"))
    with pytest.raises(CompileError, match=r"node m \(mul\): b of shape \(1, 7, 4, 1\) broadcast to \(1, 7, 4, 9\)"):
        compiler.build(g)


# ----------------------------------------------------------------------------- ONNX

def broadcast_model(fmt: str, c: int, b_shape: tuple, s_shape: tuple, hw=("h", "w"), swap_mul: bool = False):
    """x [1, c, H, W] + b (b_shape), then times s (s_shape), quantised: QLinearAdd / QLinearMul (qoperator) or
    Add / Mul between QuantizeLinear -> DequantizeLinear pairs (qdq).  H and W are symbolic (dim_params)."""
    consts = {"sx": (0.05, 3), "sb": (0.04, -2), "sy": (0.07, 1), "ss": (0.03, -5), "sz": (0.06, 2)}
    inits = []
    for k, (scale, zp) in consts.items():
        inits += [numpy_helper.from_array(np.array(scale, np.float32), k),
                  numpy_helper.from_array(np.array(zp, np.int8), "z" + k[1:])]
    q = [helper.make_node("QuantizeLinear", [v, "s" + v, "z" + v], [v + "q"]) for v in ("x", "b", "s")]
    mul_in = (["sq", "ss", "zs", "yq", "sy", "zy"] if swap_mul else ["yq", "sy", "zy", "sq", "ss", "zs"])
    if fmt == "qoperator":
        nodes = q + [
            helper.make_node("QLinearAdd", ["xq", "sx", "zx", "bq", "sb", "zb", "sy", "zy"], ["yq"],
                             domain="com.microsoft"),
            helper.make_node("QLinearMul", mul_in + ["sz", "zz"], ["zq"], domain="com.microsoft")]
    else:
        dq = [helper.make_node("DequantizeLinear", [v + "q", "s" + v, "z" + v], [v + "f"]) for v in ("x", "b", "s")]
        mul_f = ["sf", "yf"] if swap_mul else ["yf", "sf"]
        nodes = q + dq + [
            helper.make_node("Add", ["xf", "bf"], ["ya"]),
            helper.make_node("QuantizeLinear", ["ya", "sy", "zy"], ["yq"]),
            helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["yf"]),
            helper.make_node("Mul", mul_f, ["za_"]),
            helper.make_node("QuantizeLinear", ["za_", "sz", "zz"], ["zq"])]
    nodes.append(helper.make_node("DequantizeLinear", ["zq", "sz", "zz"], ["z"]))
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "bcast", [helper.make_tensor_value_info("x", f, [1, c, *hw]),
                                           helper.make_tensor_value_info("b", f, list(b_shape)),
                                           helper.make_tensor_value_info("s", f, list(s_shape))],
                          [helper.make_tensor_value_info("z", f, [1, c, *hw])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def run_and_compare(model, lib, graph_at, rng, c: int, h: int, w: int, b_shape, s_shape) -> None:
    """The binary's int8 output equals onnxruntime's (quantised at the output's scale) and the graph's model."""
    # s kept off 0: a product by an s that quantises to its zero point is constant, whatever x
    xs = {"x": rng.standard_normal((1, c, h, w)).astype(np.float32) * 3,
          "b": rng.standard_normal(b_shape).astype(np.float32) * 3,
          "s": (rng.uniform(0.3, 3, s_shape) * rng.choice([-1, 1], s_shape)).astype(np.float32)}
    want = session(model).run(None, xs)[0]
    quant = {k: graph_at.values[k].quant.quantize(v) for k, v in xs.items()}
    mod = compiler.GraphModule(lib)
    for k, v in quant.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    y = mod.get_output(0, quantized=True)
    np.testing.assert_array_equal(y, graph_at.values[graph_at.outputs[0]].quant.quantize(want))
    np.testing.assert_array_equal(y, graph_at.reference(quant)[0])
    assert len(np.unique(y)) > 3


SHAPES = [((1, 6, 1, 1), (1,)), ((6, 1, 1), (1, 1, 1, 1)), ((1,), (6, 1, 1)), ((9, 11), (1, 1, 9, 11))]


@functools.lru_cache(maxsize=None)
def static_onnx(fmt: str, b_shape: tuple, s_shape: tuple, swap_mul: bool):
    model = broadcast_model(fmt, 6, b_shape, s_shape, hw=(9, 11), swap_mul=swap_mul)
    g = compiler.from_onnx(model)
    return model, g, compiler.build(g)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("b_shape, s_shape", SHAPES, ids=["per-channel-4d", "per-channel-3d", "scalar", "plane"])
@pytest.mark.parametrize("swap_mul", [False, True], ids=["B-broadcasts", "A-broadcasts"])
def test_an_onnx_broadcasting_add_and_mul_are_bit_exact_with_onnxruntime(fmt, b_shape, s_shape, swap_mul):
    model, g, lib = static_onnx(fmt, b_shape, s_shape, swap_mul)
    kinds = [n.op.kind for n in g.nodes]
    assert "add" in kinds and "mul" in kinds
    assert all(getattr(n.op, "b_shape", None) is not None for n in g.nodes if n.op.kind in ("add", "mul"))
    rng = np.random.default_rng(len(b_shape) + 10 * swap_mul)
    for _ in range(2):
        run_and_compare(model, lib, g, rng, 6, 9, 11, b_shape, s_shape)


@functools.lru_cache(maxsize=None)
def dynamic_onnx(fmt: str):
    model = broadcast_model(fmt, 5, (1, 5, 1, 1), (1,))
    dg = compiler.from_onnx(model, dims={"h": (1, 30), "w": (2, 40)})
    return model, dg, compiler.build(dg)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(1, 30), w=st.integers(2, 40))
def test_an_onnx_broadcasting_model_with_symbolic_sizes_is_bit_exact(fmt, seed, h, w):
    model, dg, lib = dynamic_onnx(fmt)
    run_and_compare(model, lib, dg.make({"h": h, "w": w}), np.random.default_rng(seed), 5, h, w, (1, 5, 1, 1), (1,))


def test_onnx_broadcasts_the_old_rule_refused_now_import_and_are_bit_exact():
    """A b repeating along the height only (merged by broadcast_view into [1, C*H, W] against [1, 1, W]) and a
    broadcast A of QLinearAdd (onnxruntime's roles: add_roles_swapped) import, and agree with onnxruntime."""
    model = broadcast_model("qoperator", 6, (1, 1, 1, 11), (1,), hw=(9, 11))
    g = compiler.from_onnx(model)
    assert any(n.op.kind == "add" and n.op.shape == (1, 54, 11) for n in g.nodes)
    run_and_compare(model, compiler.build(g), g, np.random.default_rng(3), 6, 9, 11, (1, 1, 1, 11), (1,))
    for b_shape, reverse in (((1, 6, 1, 1), False), ((1, 1, 1, 11), True)):     # A a scalar per span, or not
        model = broadcast_model("qoperator", 6, b_shape, (1,), hw=(9, 11))
        add = model.graph.node[3]
        add.input[:] = ["bq", "sb", "zb", "xq", "sx", "zx", "sy", "zy"]
        g = compiler.from_onnx(model)
        assert [n.op.reverse for n in g.nodes if n.op.kind == "add"] == [reverse]
        run_and_compare(model, compiler.build(g), g, np.random.default_rng(4), 6, 9, 11, b_shape, (1,))


def test_broadcast_view_keeps_lowered_shapes_and_merges_the_rest():
    """Shapes the VU lowers as they stand (and a same-shape b) keep their view, so programs built before stay the
    same; the rest merge into (image, channel, positions) with the same bytes; four alternations are refused."""
    assert broadcast_view((1, 8, 5, 7), (1, 8, 5, 7)) == ((1, 8, 5, 7), (1, 8, 5, 7))
    assert broadcast_view((1, 8, 5, 7), (8, 1, 1)) == ((1, 8, 5, 7), (1, 8, 1, 1))
    assert broadcast_view((1, 56, 56, 96), (1, 1, 1, 96)) == ((1, 3136, 96), (1, 1, 96))
    assert broadcast_view((2, 3, 4, 5), (2, 1, 1, 5)) == ((2, 12, 5), (2, 1, 5))
    assert broadcast_view((2, 3, 4, 5), (4, 1)) == ((6, 4, 5), (1, 4, 1))
    assert broadcast_view((2, 3, 4, 5), (2, 1, 4, 1)) is None
    assert broadcast_view((4, 5), (1, 2, 1)) is None                               # more axes than the output
    for shape, b in (((3, 1, 37, 5), (3, 1, 1, 5)), ((7, 9), (7, 1)), ((6, 4, 5), (1, 4, 1))):
        view, bv = broadcast_view(shape, b)
        assert not broadcast_problem(type("Op", (), {"shape": view, "b_shape": bv})())
        a = np.arange(int(np.prod(shape))).reshape(shape)
        bb = np.arange(int(np.prod(b))).reshape(b) * 1000
        np.testing.assert_array_equal((a + bb).ravel(), (a.reshape(view) + bb.reshape(bv)).ravel())
