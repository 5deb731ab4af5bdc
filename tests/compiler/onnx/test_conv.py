"""Gemm and QGemm (compiler/onnx/conv.py) as GoogLeNet's classifier has them: Flatten, transB = 1, per-channel
weights and a bias the quantiser clipped near 2**31 at a tiny accumulator scale, so that the int32 accumulators
can wrap.  onnxruntime's wrap (its QGemm, and the QGemm it fuses a QDQ Gemm into at ORT_ENABLE_ALL), and so do
the compiled network's; ORT_DISABLE_ALL runs the QDQ Gemm in float, where nothing wraps."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import compiler

from tests.helpers.qdq import LEVELS, ZP_TYPES, feeds_for, initializer, ort_float

pytestmark = pytest.mark.usefixtures("warm_engine")
I8, F = TensorProto.INT8, TensorProto.FLOAT


def _weights(rng, k: int, o: int) -> dict:
    """Per-channel int8 weights [O, K] (transB = 1) leaning positive, and int32 biases within 2 * 10**6 of
    2**31 - 1 (as quantize_static clips a bias whose scale x_scale * w_scale is tiny)."""
    return {"w": rng.integers(-20, 128, (o, k)).astype(np.int8),
            "sw": (2.0 ** rng.uniform(-9, -6, o)).astype(np.float32),
            "bias": (2**31 - 1 - rng.integers(0, 2_000_000, o)).astype(np.int32)}


def qgemm_model(k: int, hw: int, o: int, p: dict) -> onnx.ModelProto:
    """x int8 [1, K, hw, hw] -> QLinearGlobalAveragePool -> Flatten -> QGemm(transB = 1) -> int8 [1, O]."""
    nodes = [helper.make_node("QLinearGlobalAveragePool", ["x", "sx", "zx", "sg", "zg"], ["g"], domain="com.microsoft",
                              channels_last=0),
             helper.make_node("Flatten", ["g"], ["f"], axis=1),
             helper.make_node("QGemm", ["f", "sg", "zg", "w", "sw", "zw", "bias", "sy", "zy"], ["y"],
                              domain="com.microsoft", alpha=1.0, transA=0, transB=1)]
    inits = [initializer("sx", 0.05, np.float32), initializer("zx", -128, np.int8),
             initializer("sg", 0.03, np.float32), initializer("zg", -128, np.int8),
             initializer("w", p["w"], np.int8), initializer("sw", p["sw"], np.float32),
             initializer("zw", np.zeros(o), np.int8), initializer("bias", p["bias"], np.int32),
             initializer("sy", 2.0**-7, np.float32), initializer("zy", 5, np.int8)]
    g = helper.make_graph(nodes, "classifier", [helper.make_tensor_value_info("x", I8, [1, k, hw, hw])],
                          [helper.make_tensor_value_info("y", I8, [1, o])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 10
    return m


def gemm_qdq_model(k: int, o: int, p: dict, flatten_qdq: bool = True) -> onnx.ModelProto:
    """QDQ: x float [1, K, 1, 1] -> Q -> DQ -> Flatten -> Q -> DQ (as quantize_static writes it; flatten_qdq=False
    leaves that pair out) -> Gemm(DQ(w) transB = 1, DQ(bias)) -> Q -> DQ."""
    flat = ([helper.make_node("Flatten", ["xf"], ["f0"], axis=1),
             helper.make_node("QuantizeLinear", ["f0", "sx", "zx"], ["fq"]),
             helper.make_node("DequantizeLinear", ["fq", "sx", "zx"], ["f"])] if flatten_qdq
            else [helper.make_node("Flatten", ["xf"], ["f"], axis=1)])
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]), *flat,
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bias", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["yf"], transB=1),
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    sb = (np.float32(0.03) * p["sw"]).astype(np.float32)
    inits = [initializer("sx", 0.03, np.float32), initializer("zx", -128, np.int8),
             initializer("w", p["w"], np.int8), initializer("sw", p["sw"], np.float32),
             initializer("zw", np.zeros(o), np.int8), initializer("bias", p["bias"], np.int32),
             initializer("sb", sb, np.float32), initializer("zb", np.zeros(o), np.int32),
             initializer("sy", 2.0**-7, np.float32), initializer("zy", 5, np.int8)]
    g = helper.make_graph(nodes, "classifier_qdq", [helper.make_tensor_value_info("x", F, [1, k, 1, 1])],
                          [helper.make_tensor_value_info("y", F, [1, o])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 21)])
    m.ir_version = 10
    return m


def _ort(model: onnx.ModelProto, feeds: dict, level) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


def _run(model: onnx.ModelProto, x: np.ndarray, quantized: bool) -> np.ndarray:
    g = compiler.from_onnx(model)
    assert [n.op.kind for n in g.nodes][-1] == "dense"
    m = compiler.GraphModule(compiler.build(g))
    m.set_input(0, x)
    m.run(check_races=True)
    return m.get_output(0, quantized=quantized)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(40, 300), st.integers(1, 7), st.integers(3, 70), st.integers(0, 2**32 - 1))
def test_qgemm_classifier_wraps_like_onnxruntime_at_both_levels(k, hw, o, seed):
    rng = np.random.default_rng(seed)
    p = _weights(rng, k, o)
    model = qgemm_model(k, hw, o, p)
    x = rng.integers(-128, 128, (1, k, hw, hw)).astype(np.int8)
    y = _run(model, x, quantized=True)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, _ort(model, {"x": x}, level))


def test_qgemm_classifier_whose_accumulators_overflow():
    """Large inputs on positive weights: most accumulators pass 2**31 and wrap (the exact sums would saturate
    the outputs at 127; onnxruntime's wrapped ones are mostly at -128)."""
    rng = np.random.default_rng(3)
    k, o = 1024, 40
    p = _weights(rng, k, o)
    model = qgemm_model(k, 1, o, p)
    x = np.full((1, k, 1, 1), 127, np.int8)
    acc = 255 * p["w"].astype(np.int64).sum(1) + p["bias"]
    assert (acc >= 2**31).sum() > o // 2
    y = _run(model, x, quantized=True)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, _ort(model, {"x": x}, level))
    assert (y.ravel()[acc >= 2**31] < 0).all()


def test_qdq_gemm_classifier_equals_the_fused_qgemm():
    """The QDQ form: ORT_ENABLE_ALL fuses it into QGemm (int32, wrapping) and the compiled network equals it;
    ORT_DISABLE_ALL's float Gemm does not wrap, and every element lies between the two levels."""
    rng = np.random.default_rng(5)
    k, o = 260, 33
    p = _weights(rng, k, o)
    model = gemm_qdq_model(k, o, p)
    x = (rng.uniform(0, 7.6, (1, k, 1, 1))).astype(np.float32)
    x[0, :k // 2] = 7.6                                        # some accumulators past 2**31
    y = _run(model, x, quantized=False)
    default, plain = _ort(model, {"x": x}, LEVELS["default"]), _ort(model, {"x": x}, LEVELS["disable"])
    np.testing.assert_array_equal(y, default)
    assert ((y >= np.minimum(default, plain)) & (y <= np.maximum(default, plain))).all()
    assert not np.array_equal(default, plain)                   # the case does wrap


def test_qdq_gemm_that_onnxruntime_runs_in_float_may_not_wrap():
    """Without the Q -> DQ pair after the Flatten onnxruntime does not fuse the Gemm: it runs it in float at both
    levels, where a bias near 2**31 does not wrap, so the importer keeps the overflow proof and refuses."""
    rng = np.random.default_rng(5)
    k, o = 260, 33
    p = _weights(rng, k, o)
    model = gemm_qdq_model(k, o, p, flatten_qdq=False)
    x = np.full((1, k, 1, 1), 7.6, np.float32)
    default, plain = _ort(model, {"x": x}, LEVELS["default"]), _ort(model, {"x": x}, LEVELS["disable"])
    np.testing.assert_array_equal(default, plain)             # float at both levels: no wrap
    with pytest.raises(compiler.CompileError, match=r"node 'Gemm_5' \(Gemm\): dense: output channel \d+ can reach "
                                                    r"\|acc\| = \d+ >= 2\*\*31.*onnxruntime runs this node in float"):
        compiler.from_onnx(model)


def test_qdq_gemm_whose_input_is_read_twice_runs_in_float_and_may_not_wrap():
    """Its input straight from a DequantizeLinear, but that tensor's QuantizeLinear also dequantised to a second
    output: onnxruntime's QDQS8ToU8 pass leaves the int8 pair, so it does not fuse the Gemm (its optimised graph,
    which the importer asks, says so) and runs it in float at both levels, where nothing wraps: refused."""
    rng = np.random.default_rng(5)
    k, o = 260, 33
    model = gemm_qdq_model(k, o, _weights(rng, k, o))
    model.graph.node.append(helper.make_node("DequantizeLinear", ["fq", "sx", "zx"], ["f_again"]))
    model.graph.output.append(helper.make_tensor_value_info("f_again", F, [1, k]))
    x = np.full((1, k, 1, 1), 7.6, np.float32)
    default, plain = _ort(model, {"x": x}, LEVELS["default"]), _ort(model, {"x": x}, LEVELS["disable"])
    np.testing.assert_array_equal(default, plain)             # float at both levels: no wrap
    with pytest.raises(compiler.CompileError, match=r"node 'Gemm_\d+' \(Gemm\): dense: output channel \d+ can "
                                                    r"reach \|acc\| = \d+ >= 2\*\*31.*onnxruntime runs this node in float"):
        compiler.from_onnx(model)


def patch_model(form: str, dtype: str, c: int, h: int, w: int, k: int, o: int, seed: int) -> onnx.ModelProto:
    """A patch embedding: x -> Q -> QLinearConv (qoperator) or DQ -> Conv -> Q (qdq), kernel = stride = k, no
    padding, per-channel int8 weights and an int32 bias, activations int8 or uint8; the output dequantised."""
    _, np_t, lo = ZP_TYPES[dtype]
    rng = np.random.default_rng(seed)
    inits = [initializer("sx", 0.05, np.float32), initializer("zx", lo + 131, np_t),
             initializer("w", rng.integers(-30, 30, (o, c, k, k)), np.int8),
             initializer("sw", rng.uniform(0.002, 0.004, o), np.float32), initializer("zw", np.zeros(o), np.int8),
             initializer("bias", rng.integers(-2000, 2000, o), np.int32),
             initializer("sb", np.float32(0.05) * rng.uniform(0.002, 0.004, o).astype(np.float32), np.float32),
             initializer("zb", np.zeros(o), np.int32),
             initializer("sy", 0.09, np.float32), initializer("zy", lo + 121, np_t)]
    geo = dict(kernel_shape=[k, k], strides=[k, k])
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    if form == "qoperator":
        nodes.append(helper.make_node("QLinearConv", ["xq", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["yq"],
                                      **geo))
    else:
        nodes += [helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
                  helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
                  helper.make_node("DequantizeLinear", ["bias", "sb", "zb"], ["bf"], axis=0),
                  helper.make_node("Conv", ["xf", "wf", "bf"], ["yf"], **geo),
                  helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"])]
    nodes.append(helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"]))
    g = helper.make_graph(nodes, "patches", [helper.make_tensor_value_info("x", F, [1, c, h, w])],
                          [helper.make_tensor_value_info("out", F, [1, o, h // k, w // k])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("form, dtype, c, h, w, k, o", [("qoperator", "int8", 3, 32, 48, 16, 40),
                                                       ("qdq", "uint8", 5, 24, 16, 8, 37)])
def test_a_patch_embedding_runs_as_a_dense_over_its_patches(form, dtype, c, h, w, k, o):
    """ViT's 16 x 16 patch embedding (its NU conv plan keeps every tap of a weight block on chip: no tile fits)
    imports as Transpose + dense (patchify), bit-exact with onnxruntime at both levels (QDQ: ORT_ENABLE_ALL's
    QLinearConv; ORT_DISABLE_ALL's float conv within a step)."""
    model = patch_model(form, dtype, c, h, w, k, o, 3)
    g = compiler.from_onnx(model)
    assert "dense" in [n.op.kind for n in g.nodes] and "conv2d" not in [n.op.kind for n in g.nodes]
    mod = compiler.GraphModule(compiler.build(g))
    feeds = feeds_for(model, 3)
    mod.set_input("x", feeds["x"])
    mod.run(check_races=True)
    y = mod.get_output(0)
    np.testing.assert_array_equal(y, ort_float(model, feeds, LEVELS["default"]))
    plain = ort_float(model, feeds, LEVELS["disable"])
    if form == "qoperator":
        np.testing.assert_array_equal(y, plain)
    else:
        assert np.abs(y - plain).max() <= 0.09 * 1.01
    assert len(np.unique(y)) > 10
