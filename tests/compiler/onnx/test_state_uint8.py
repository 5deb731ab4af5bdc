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
import pytest
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import CompileError, from_onnx

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
