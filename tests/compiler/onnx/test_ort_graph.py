"""compiler/onnx/ort_graph.py: which QDQ groups onnxruntime's default session fuses, and the importer following it.

A QDQ Add is fused into QLinearAdd unless onnxruntime's QDQS8ToU8 pass leaves an input's int8 DequantizeLinear
alone, which it does when that input's QuantizeLinear is read by a second DequantizeLinear (here: the int8
input also dequantised to a graph output, as a tensor read by two nodes of a network is).  Then the Add runs
in float32 at every level, and the import must compute DequantizeLinear, float32 add, QuantizeLinear rather
than QLinearAdd's two fused multiply-adds.  Each model is written with onnx.helper, imported, compiled, run
on the simulator (race-checked) and compared element for element with onnxruntime at ORT_ENABLE_ALL and at
ORT_DISABLE_ALL; shapes are random and need not divide 32.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import helper

import compiler
from compiler.onnx.ort_graph import kernels, optimised
from compiler.reference import add_f32, mul_f32
from tests.helpers.qdq import LEVELS, F, initializer

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
TIE_SCALES = {"x": (0.08999801, 100), "b": (0.045158107, -122), "y": (0.061002694, -3)}
"""Scales at which QLinearAdd's arithmetic and the float add differ on 2 of the 65536 code pairs (and its int8
and uint8 kernels on one)."""
MUL_SCALES = {"x": (0.08612045, 110), "b": (0.023138829, -54), "y": (0.3063033, 7)}
"""Scales at which QLinearMul's int8 and uint8 kernels differ on 2 of the 65536 code pairs."""


def add_model(x_shape, b_shape, scales, *, shared: bool, b_const: np.ndarray | None = None,
              op: str = "Add") -> onnx.ModelProto:
    """Q(DQ(Q(x)) + DQ(b)) (op: or Mul), b a quantised input or an int8 constant; shared: Q(x) is also
    dequantised to a second graph output (the Add then stays float in onnxruntime)."""
    inits = []
    for k, (s, z) in scales.items():
        inits += [initializer("s" + k, s, np.float32), initializer("z" + k, z, np.int8)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["bq", "sb", "zb"], ["bf"]),
             helper.make_node(op, ["xf", "bf"], ["r"], name=op.lower()),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    inputs = [helper.make_tensor_value_info("x", F, list(x_shape))]
    if b_const is None:
        nodes.insert(0, helper.make_node("QuantizeLinear", ["b", "sb", "zb"], ["bq"]))
        inputs.append(helper.make_tensor_value_info("b", F, list(b_shape)))
    else:
        inits.append(initializer("bq", b_const, np.int8))
    outs = [helper.make_tensor_value_info("out", F, list(x_shape))]
    if shared:
        nodes.append(helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x_again"]))
        outs.append(helper.make_tensor_value_info("x_again", F, list(x_shape)))
    g = helper.make_graph(nodes, "add", inputs, outs, initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def codes_feed(codes: np.ndarray, scale: float, zp: int) -> np.ndarray:
    """Floats that QuantizeLinear turns back into exactly these int8 codes."""
    return ((codes.astype(np.float32) - np.float32(zp)) * np.float32(scale)).astype(np.float32)


def check_both_levels(model: onnx.ModelProto, feeds: dict, levels=tuple(LEVELS)) -> compiler.Graph:
    """The simulator's int8 output equals onnxruntime's at ORT_ENABLE_ALL and at ORT_DISABLE_ALL (or `levels`)."""
    g = compiler.from_onnx(model)
    mod = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        mod.set_input(k, g.values[k].quant.quantize(v))
    mod.run(check_races=True)
    ours = mod.get_output(0, quantized=True)
    q = g.values[g.outputs[0]].quant
    for level in (LEVELS[k] for k in levels):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.intra_op_num_threads = 1
        y = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_array_equal(ours, q.quantize(y), err_msg=f"against onnxruntime at {level}")
    return g


def test_onnxruntime_is_asked_which_adds_it_fuses():
    shape = (1, 3, 4, 5)
    for shared, kernel in ((False, "uint8"), (True, "float")):
        m = add_model(shape, shape, TIE_SCALES, shared=shared)
        opt = optimised(onnx, m)
        assert ("QLinearAdd" in {n.op_type for n in opt.graph.node}) == (kernel != "float")
        assert kernels(m, opt) == {"r": kernel}      # int8 in the model, uint8 after onnxruntime's QDQS8ToU8


def test_an_unnamed_float_add_is_told_by_its_output_a_fused_one_is_left_out():
    for shared, want in ((True, {"r": "float"}), (False, {})):
        m = add_model((1, 2, 3, 3), (1, 2, 3, 3), TIE_SCALES, shared=shared)
        for n in m.graph.node:
            n.name = ""
        assert kernels(m, optimised(onnx, m)) == want


def code_pairs(scales) -> tuple[np.ndarray, np.ndarray, dict]:
    """Every (x, b) pair of int8 codes as [256, 256] arrays, and the float feeds that quantise to them."""
    a, b = np.meshgrid(np.arange(-128, 128), np.arange(-128, 128), indexing="ij")
    feeds = {"x": codes_feed(a, *scales["x"])[None, None], "b": codes_feed(b, *scales["b"])[None, None]}
    return a, b, feeds


def test_every_code_pair_of_a_float_add_is_exact():
    """All 65536 (x, b) codes at scales where QLinearAdd's rounding differs from the float add on two of them:
    the float Add (shared input) is exact at both levels."""
    a, b, feeds = code_pairs(TIE_SCALES)
    (sa, za), (sb, zb), (sy, zy) = TIE_SCALES["x"], TIE_SCALES["b"], TIE_SCALES["y"]
    shape = (1, 1, 256, 256)
    g = check_both_levels(add_model(shape, shape, TIE_SCALES, shared=True), feeds)
    ours = g.reference({k: g.values[k].quant.quantize(v) for k, v in feeds.items()})[0][0, 0]
    for uint8 in (False, True):         # either QLinearAdd kernel would differ somewhere
        assert (add_f32(a, b, za, zb, sa, sb, sy, zy, -128, 127, uint8=uint8) != ours).any()


@pytest.mark.parametrize("op, scales, kernel", [("Add", TIE_SCALES, add_f32), ("Mul", MUL_SCALES, mul_f32)])
def test_every_code_pair_of_a_fused_add_or_mul_runs_the_uint8_kernel(op, scales, kernel):
    """The int8 model's fused Add / Mul is exact at the default level, where onnxruntime runs the uint8 kernel
    (its QDQS8ToU8 pass), on every code pair; the int8 kernel would differ on some."""
    a, b, feeds = code_pairs(scales)
    (sa, za), (sb, zb), (sy, zy) = scales["x"], scales["b"], scales["y"]
    shape = (1, 1, 256, 256)
    g = check_both_levels(add_model(shape, shape, scales, shared=False, op=op), feeds, levels=("default",))
    assert [n.op.uint8 for n in g.nodes if n.op.kind == op.lower()] == [True]
    int8_kernel = kernel(a, b, za, zb, sa, sb, sy, zy, -128, 127, uint8=False)
    assert (int8_kernel != g.reference({k: g.values[k].quant.quantize(v) for k, v in feeds.items()})[0][0, 0]).any()


B_FORMS = {"same": lambda c, h, w: (1, c, h, w), "channel": lambda c, h, w: (1, c, 1, 1),
           "plane": lambda c, h, w: (1, 1, h, w), "scalar": lambda c, h, w: (1,)}


@SETTINGS
@given(form=st.sampled_from(sorted(B_FORMS)), const=st.booleans(), seed=st.integers(0, 2**32 - 1),
       c=st.integers(1, 40), h=st.integers(1, 13), w=st.integers(1, 37))
def test_float_add_with_broadcast_and_constant_b_is_bit_exact(form, const, seed, c, h, w):
    rng = np.random.default_rng(seed)
    scales = {k: (float(rng.uniform(0.005, 0.1)), int(rng.integers(-128, 128))) for k in ("x", "b", "y")}
    b_shape = B_FORMS[form](c, h, w)
    b_const = rng.integers(-128, 128, b_shape).astype(np.int8) if const else None
    feeds = {"x": (rng.standard_normal((1, c, h, w)) * 3).astype(np.float32)}
    if not const:
        feeds["b"] = (rng.standard_normal(b_shape) * 3).astype(np.float32)
    g = check_both_levels(add_model((1, c, h, w), b_shape, scales, shared=True, b_const=b_const), feeds)
    assert any(n.op.kind == "qdq_add" for n in g.nodes)       # the float add (vu.fsub with b's scale negated)
