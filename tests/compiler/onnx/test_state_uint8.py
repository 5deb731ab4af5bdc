"""uint8 activations (and the uint8 weights of older quantisers), bit for bit with onnxruntime.

The importer holds a uint8 tensor q with zero point z as the int8 tensor q - 128 with zero point
z - 128 (compiler.onnx.state.as_int8); every affine op computes the same on both, and GraphModule
flips the top bit of uint8 graph inputs and outputs.  The test networks of tests/onnx_helpers.py
are quantised by onnxruntime with uint8 activations in both forms, per channel and per tensor;
a mixed model holds uint8 and int8 tensors side by side.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import CompileError, from_onnx
from compiler.onnx.state import as_int8
from compiler.reference import add_f32

from tests.onnx_helpers import CASES, SHAPE, agreement, quantised, session

FMTS = ("qoperator", "qdq")


def _exact(model, seed=5):
    g = from_onnx(model)
    a = agreement(model, g, seed=seed, runs=2)
    assert a.elements > 0 and a.equal == a.elements, str(a)
    assert a.end_elements > 0 and a.end_equal == a.end_elements, str(a)
    return g


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_uint8_networks_are_bit_exact(case, fmt):
    model = quantised(case, fmt, activations="uint8")
    zps = [t for t in model.graph.initializer if t.name.endswith("zero_point") and t.data_type == TensorProto.UINT8]
    assert zps, "the quantiser wrote no uint8 zero point"
    _exact(model)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("case", ["convs", "dense"])
def test_uint8_per_tensor_weights(case, fmt):
    _exact(quantised(case, fmt, per_channel=False, activations="uint8"))


def _retype(model: onnx.ModelProto, names: set[str]) -> onnx.ModelProto:
    """The model with the int8 initializers `names` made uint8 (values and zero points + 128: the same reals)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for t in m.graph.initializer:
        if t.name in names:
            assert t.data_type == TensorProto.INT8, t.name
            t.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(t).astype(np.int16) + 128).astype(np.uint8),
                                               t.name))
    return m


def test_mixed_uint8_and_int8_tensors():
    """Every other activation of a QDQ model uint8, the rest int8: convs, concat, mul and pools read and
    write both (onnxruntime runs it, fused where it can)."""
    model = quantised("dense", "qdq")
    zps = sorted(t.name for t in model.graph.initializer if t.name.endswith("zero_point")
                 and t.data_type == TensorProto.INT8 and numpy_helper.to_array(t).ndim == 0)
    assert len(zps) >= 6
    mixed = _retype(model, set(zps[::2]))
    _exact(mixed)
    _exact(_retype(model, set(zps[1::2])))


@pytest.mark.parametrize("fmt, activations", [("qoperator", "uint8"), ("qdq", "uint8"), ("qdq", "int8")])
def test_uint8_weights(fmt, activations):
    """Older quantisers write uint8 weights with zero point 128 (symmetric): u8 x u8 convs and matmuls, and in
    QDQ beside int8 activations too (onnxruntime has no QLinearConv of int8 activations and uint8 weights)."""
    model = quantised("dense", fmt, activations=activations)
    inits = {t.name: t for t in model.graph.initializer}
    weights = {n.input[k] for n in model.graph.node for k in ((3,) if n.op_type in ("QLinearConv", "QLinearMatMul",
               "QGemm") else (0,) if n.op_type == "DequantizeLinear" else ()) if inits.get(n.input[k]) is not None
               and inits[n.input[k]].data_type == TensorProto.INT8}
    zps = {n.input[k + 2] for n in model.graph.node for k in ((3,) if n.op_type != "DequantizeLinear" else (0,))
           if len(n.input) > k + 2 and n.input[k] in weights}
    assert weights and zps
    _exact(_retype(model, weights | zps))


def test_asymmetric_uint8_weights_are_refused_in_their_own_terms():
    model = quantised("residual", "qoperator", activations="uint8")
    conv = next(n for n in model.graph.node if n.op_type == "QLinearConv")
    m = _retype(model, {conv.input[3], conv.input[5]})
    zp = next(t for t in m.graph.initializer if t.name == conv.input[5])
    zp.CopyFrom(numpy_helper.from_array(np.full(numpy_helper.to_array(zp).shape, 131, np.uint8), zp.name))
    with pytest.raises(CompileError, match=r"weight zero point \[131, 131, 131, 131, \.\.\.\]: only symmetric "
                                           r"weights \(zero point 128\) are supported"):
        from_onnx(m)


def test_runtime_flips_uint8_at_the_boundary():
    """A QOperator model whose graph input and output are the uint8 tensors themselves: GraphModule takes and
    gives uint8, equal to onnxruntime's, and float in and out agree too."""
    model = quantised("convs", "qoperator", activations="uint8")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    q_in = next(n for n in m.graph.node if n.op_type == "QuantizeLinear")
    dq_out = next(n for n in m.graph.node if n.op_type == "DequantizeLinear")
    keep = [n for n in m.graph.node if n is not q_in and n is not dq_out]
    del m.graph.node[:]
    m.graph.node.extend(keep)
    for n in m.graph.node:
        n.input[:] = ["raw" if i == q_in.output[0] else i for i in n.input]
    del m.graph.input[:], m.graph.output[:]
    m.graph.input.append(helper.make_tensor_value_info("raw", TensorProto.UINT8, list(SHAPE)))
    m.graph.output.append(helper.make_tensor_value_info(dq_out.input[0], TensorProto.UINT8, None))
    x = np.random.default_rng(0).integers(0, 256, SHAPE, dtype=np.uint8)
    want = session(m).run(None, {"raw": x})[0]
    assert want.dtype == np.uint8
    g = from_onnx(m)
    assert [g.values[v].host_dtype for v in (*g.inputs, *g.outputs)] == ["uint8", "uint8"]
    gm = compiler.GraphModule(compiler.build(g))
    gm.set_input(0, x)
    gm.run()
    got = gm.get_output(0, quantized=True)
    assert got.dtype == np.uint8 and np.array_equal(got, want)
    with pytest.raises(CompileError, match=r"input raw takes float32 \(quantised as the model says\) or uint8, "
                                           r"got int8"):
        gm.set_input(0, x.view(np.int8))


def test_clip_on_a_uint8_tensor_itself():
    """Clip with uint8 bounds on the quantised tensor (not folded into the conv): its bounds move by 128 too."""
    model = quantised("convs", "qoperator", activations="uint8")
    m = onnx.ModelProto()
    m.CopyFrom(model)
    convs = [n for n in m.graph.node if n.op_type == "QLinearConv"]
    t = convs[0].output[0]
    m.graph.initializer.extend([numpy_helper.from_array(np.uint8(130), "lo8"),
                                numpy_helper.from_array(np.uint8(200), "hi8")])
    m.graph.node.insert(list(m.graph.node).index(convs[1]), helper.make_node("Clip", [t, "lo8", "hi8"], ["clipped"],
                                                                              name="raw_clip"))
    convs[1].input[0] = "clipped"
    g = _exact(m)
    clip = next(n for n in g.nodes if n.name == "raw_clip")
    assert (clip.op.lo, clip.op.hi) == (2, 72)


# ---------------------------------------------------------------- onnxruntime's uint8 kernels, end to end

def _uint8_chain(shape, s: dict) -> onnx.ModelProto:
    """QLinearAdd(a, b) -> QLinearMul(., b) -> QLinearAveragePool(3x3, padded): uint8 graph inputs and
    outputs, every tensor uint8 (the float forms whose uint8 arithmetic differs from the int8 view's)."""
    U8 = TensorProto.UINT8
    nodes = [helper.make_node("QLinearAdd", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"], domain="com.microsoft"),
             helper.make_node("QLinearMul", ["y", "sy", "zy", "b", "sb", "zb", "sm", "zm"], ["m"], domain="com.microsoft"),
             helper.make_node("QLinearAveragePool", ["m", "sm", "zm", "sp", "zp"], ["p"], domain="com.microsoft",
                              kernel_shape=[3, 3], strides=[1, 2], pads=[1, 1, 1, 1], count_include_pad=0)]
    inits = [numpy_helper.from_array(np.array(v, np.float32 if k.startswith("s") else np.uint8), k) for k, v in s.items()]
    g = helper.make_graph(nodes, "u8chain", [helper.make_tensor_value_info(n, U8, list(shape)) for n in "ab"],
                          [helper.make_tensor_value_info(n, U8, None) for n in "ymp"], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def _compiled_against_ort(model, feeds: dict) -> None:
    """The compiled network's uint8 outputs equal onnxruntime's at ORT_ENABLE_ALL and ORT_DISABLE_ALL."""
    g = from_onnx(model)
    gm = compiler.GraphModule(compiler.build(g))
    for k, name in enumerate(g.inputs):
        gm.set_input(k, feeds[name])
    gm.run(check_races=True)
    got = [gm.get_output(k, quantized=True) for k in range(gm.num_outputs)]
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)
        for name, o, w in zip("ymp", got, want):
            assert o.dtype == w.dtype == np.uint8 and o.shape == w.shape, (name, o.dtype, o.shape, w.dtype, w.shape)
            bad = np.flatnonzero(o != w)
            assert bad.size == 0, f"{name}: {bad.size} of {w.size} differ at {level}, first {bad[:4]}"


def test_uint8_add_mul_and_average_pool_every_pair_on_the_machine():
    """Every uint8 (a, b) pair, shuffled over a [1, 16, 64, 64] tensor, at scales where the int8 view's own float
    arithmetic rounds some elements differently from onnxruntime's uint8 kernels (two of 65536 in the add,
    more after it): the compiled network (vu.mode) gives onnxruntime's bytes."""
    rng = np.random.default_rng(7)
    pairs = np.stack(np.meshgrid(np.arange(256), np.arange(256)), -1).reshape(-1, 2)[rng.permutation(65536)]
    a, b = (pairs[:, k].astype(np.uint8).reshape(1, 16, 64, 64) for k in (0, 1))
    s = {"sa": 0.43928102, "za": 199, "sb": 0.57594436, "zb": 119, "sy": 0.026692126, "zy": 175,
         "sm": 12.5, "zm": 90, "sp": 9.75, "zp": 140}
    model = _uint8_chain(a.shape, s)
    g = from_onnx(model)
    assert [n.op.uint8 for n in g.nodes] == [True, True, True]
    y = sem_add_int8_view(a, b, s)
    want = session(model).run(None, {"a": a, "b": b})[0]
    assert (y != want).sum() > 0          # the int8 view's arithmetic is not onnxruntime's here
    _compiled_against_ort(model, {"a": a, "b": b})


def sem_add_int8_view(a, b, s) -> np.ndarray:
    """QLinearAdd computed on the int8 views with the zero points less 128 (what the importer did before
    uint8=True), back as uint8."""
    y = add_f32(as_int8(a), as_int8(b), s["za"] - 128, s["zb"] - 128, np.float32(s["sa"]), np.float32(s["sb"]),
                np.float32(s["sy"]), s["zy"] - 128, -128, 127)
    return (y.astype(np.int16) + 128).astype(np.uint8)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(1, 2), st.integers(1, 40), st.integers(1, 13), st.integers(1, 37), st.integers(0, 2**32 - 1))
def test_uint8_add_mul_and_average_pool_random_shapes(n, c, h, w, seed):
    """Random shapes (none a multiple of the 32 x 32 array needed), scales and uint8 zero points."""
    rng = np.random.default_rng(seed)
    sa, sb, sp = (float(v) for v in 2.0 ** rng.uniform(-6, 0, 3))
    sy = float(max(sa, sb) * 2.0 ** rng.uniform(-1, 2))
    s = {"sa": sa, "za": 0, "sb": sb, "zb": 0, "sy": sy, "zy": 0, "sm": sy * sb * 40, "zm": 0, "sp": sp, "zp": 0}
    s.update({k: int(v) for k, v in zip(("za", "zb", "zy", "zm", "zp"), rng.integers(0, 256, 5))})
    a, b = (rng.integers(0, 256, (n, c, h, w)).astype(np.uint8) for _ in range(2))
    _compiled_against_ort(_uint8_chain(a.shape, s), {"a": a, "b": b})


def _residual_model(c: int, h: int, w: int, p: dict) -> onnx.ModelProto:
    """uint8 QLinearConv (1x1, per-channel int8 weights) then QLinearAdd of a second uint8 input: a residual add
    the network build fuses into the conv's kernel (vu.fadd in the NU epilogue)."""
    U8 = TensorProto.UINT8
    nodes = [helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sc", "zc", "bias"], ["c"]),
             helper.make_node("QLinearAdd", ["c", "sc", "zc", "b", "sb", "zb", "sy", "zy"], ["y"], domain="com.microsoft")]
    inits = [numpy_helper.from_array(np.asarray(v, t), k) for k, (v, t) in p.items()]
    g = helper.make_graph(nodes, "residual", [helper.make_tensor_value_info(n, U8, [1, c, h, w]) for n in "xb"],
                          [helper.make_tensor_value_info("y", U8, None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def test_uint8_residual_add_fused_into_the_conv():
    """A case (seed found by search) where the int8 view's QLinearAdd arithmetic, on onnxruntime's own conv output,
    is 8 elements off; the compiled network, whose conv kernel adds the residual, is exact at both levels."""
    rng = np.random.default_rng(7)
    c, h, w = 16, 64, 64
    p = {"sx": (0.05, np.float32), "zx": (int(rng.integers(0, 256)), np.uint8),
         "w": (rng.integers(-30, 31, (c, c, 1, 1)), np.int8), "sw": (2.0 ** rng.uniform(-8, -5, c), np.float32),
         "zw": (np.zeros(c), np.int8), "sc": (float(2.0 ** rng.uniform(-5, -2)), np.float32),
         "zc": (int(rng.integers(0, 256)), np.uint8), "bias": (rng.integers(-2000, 2000, c), np.int32),
         "sb": (float(2.0 ** rng.uniform(-6, 0)), np.float32), "zb": (int(rng.integers(0, 256)), np.uint8),
         "sy": (float(2.0 ** rng.uniform(-5, -1)), np.float32), "zy": (int(rng.integers(0, 256)), np.uint8)}
    model = _residual_model(c, h, w, p)
    x, b = (rng.integers(0, 256, (1, c, h, w)).astype(np.uint8) for _ in range(2))
    conv_out = session(model, ["c"]).run(["c"], {"x": x, "b": b})[0]
    want = session(model).run(None, {"x": x, "b": b})[0]
    s = {k: p[k][0] for k in ("sb", "zb", "sy", "zy")}
    view = add_f32(as_int8(conv_out), as_int8(b), p["zc"][0] - 128, s["zb"] - 128, np.float32(p["sc"][0]),
                   np.float32(s["sb"]), np.float32(s["sy"]), s["zy"] - 128, -128, 127)
    assert (view != as_int8(want)).sum() == 8
    g = from_onnx(model)
    lib = compiler.build(g)
    assert len(lib.layers) == 1, [layer.get("name") for layer in lib.layers]     # the add is in the conv's kernel
    gm = compiler.GraphModule(lib)
    gm.set_input(0, x)
    gm.set_input(1, b)
    gm.run(check_races=True)
    got = gm.get_output(0, quantized=True)
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        ref = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            None, {"x": x, "b": b})[0]
        np.testing.assert_array_equal(got, ref)
