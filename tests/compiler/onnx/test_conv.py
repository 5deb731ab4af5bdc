"""Gemm and QGemm (compiler/onnx/conv.py) as GoogLeNet's classifier has them: Flatten, transB = 1, per-channel
weights and a bias the quantiser clipped near 2**31 at a tiny accumulator scale, so that the int32 accumulators
can wrap.  onnxruntime's wrap (its QGemm, and the QGemm it fuses a QDQ Gemm into at ORT_ENABLE_ALL), and so do
the compiled network's; ORT_DISABLE_ALL runs the QDQ Gemm in float, where nothing wraps.  A QDQ Conv onnxruntime
runs in float32 at both levels: MLAS's order of additions (tests/helpers/mlas.py), which the importer's conv on the
NU's float mode (nu.fconv) follows bit for bit; a network where onnxruntime fuses one conv and runs the next in
float takes the integer conv for the one and the float mode for the other."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, assume, example, given, settings, strategies as st
from onnx import TensorProto, helper

import compiler
from compiler.onnx.ort_graph import optimised
from compiler.reference import quantize_f32

from tests.helpers import mlas
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


def assert_varied(got: np.ndarray) -> None:
    """The output is no constant the model could match by chance (a saturated scale): over min(20, an eighth) of
    its elements distinct codes from 64 elements on (a relu zeroes about half), at least 3 from 16 (the relu's
    zero and the saturated code leave few others in a small output), unjudged below (a relu may zero a handful
    all)."""
    if got.size >= 64:
        assert len(np.unique(got)) > min(20, got.size // 8)
    elif got.size >= 16:
        assert len(np.unique(got)) >= 3


def float_conv_model(c: int, h: int, w: int, o: int, k: int, stride: int, group: int, relu: bool,
                     seed: int, pads: tuple[int, int, int, int] | None = None,
                     dilation: int = 1) -> tuple[onnx.ModelProto, dict]:
    """x -> Q -> DQ -> Conv(DQ(w) per channel, DQ(bias)) [-> Relu] -> Q -> DQ, the input's Q also dequantised to a
    second output: onnxruntime's QDQS8ToU8 pass leaves that int8 pair, so it runs the conv in float at both
    levels.  The model and its parameters (as tests.helpers.mlas.qdq_conv takes them); pads (top, left, bottom,
    right) k // 2 each unless given."""
    rng = np.random.default_rng(seed)
    ws = rng.uniform(0.002, 0.01, o).astype(np.float32)
    p = {"xs": np.float32(0.05), "xz": 3, "w": rng.integers(-127, 128, (o, c // group, k, k)).astype(np.int8),
         "ws": ws, "bias": rng.integers(-3000, 3000, o).astype(np.int32), "bias_scale": np.float32(0.05) * ws,
         "ys": np.float32(0.004 * np.sqrt(c // group * k * k)), "yz": -4, "stride": (stride, stride),
         "pads": tuple(pads) if pads is not None else (k // 2,) * 4, "group": group, "dil": (dilation, dilation)}
    inits = [initializer("sx", p["xs"], np.float32), initializer("zx", p["xz"], np.int8),
             initializer("w", p["w"], np.int8), initializer("sw", ws, np.float32),
             initializer("zw", np.zeros(o), np.int8), initializer("bias", p["bias"], np.int32),
             initializer("sb", p["bias_scale"], np.float32), initializer("zb", np.zeros(o), np.int32),
             initializer("sy", p["ys"], np.float32), initializer("zy", p["yz"], np.int8)]
    act = [helper.make_node("Relu", ["yc"], ["yf"])] if relu else []
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x_again"]),
             helper.make_node("DequantizeLinear", ["w", "sw", "zw"], ["wf"], axis=0),
             helper.make_node("DequantizeLinear", ["bias", "sb", "zb"], ["bf"], axis=0),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["yc" if relu else "yf"], name="conv", group=group,
                              kernel_shape=[k, k], strides=[stride, stride], pads=list(p["pads"]),
                              dilations=[dilation, dilation]), *act,
             helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    pt, pl, pb, pr = p["pads"]
    span = (k - 1) * dilation + 1
    oh, ow = (h + pt + pb - span) // stride + 1, (w + pl + pr - span) // stride + 1
    g = helper.make_graph(nodes, "float_conv", [helper.make_tensor_value_info("x", F, [1, c, h, w])],
                          [helper.make_tensor_value_info("out", F, [1, o, oh, ow]),
                           helper.make_tensor_value_info("x_again", F, [1, c, h, w])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, p


@pytest.mark.parametrize("c, h, w, o, k, stride, group, relu", [
    (13, 11, 10, 9, 3, 1, 1, False),      # K = 117 < 128: one fused multiply-add chain
    (300, 10, 20, 7, 1, 1, 1, False),     # K = 300, N = 200: slices of 128
    (40, 5, 10, 6, 3, 1, 1, True),        # K = 360, N = 50 < K: slices of 256
    (12, 17, 15, 12, 5, 1, 12, False),    # depthwise (M = 1): products summed in groups of 4
    (24, 13, 13, 15, 3, 2, 3, True),      # three groups of five filters
])
def test_a_qdq_conv_onnxruntime_runs_in_float(c, h, w, o, k, stride, group, relu):
    """onnxruntime runs this conv in float32 at both levels: tests.helpers.mlas models it on every element, and the
    importer lowers it to the NU's float mode (nu.fconv; nu.fdwconv when depthwise), whose reference and compiled
    network give onnxruntime's codes on every element at both levels."""
    model, p = float_conv_model(c, h, w, o, k, stride, group, relu, seed=c + h + k)
    ops = {n.op_type for n in optimised(onnx, model).graph.node}
    assert "QLinearConv" not in ops and ops & {"Conv", "FusedConv"}       # FusedConv: MLAS's conv, then its Relu
    feeds = feeds_for(model, c * h)
    x = quantize_f32(feeds["x"], p["xs"], p["xz"])
    theirs = {name: np.rint(ort_float(model, feeds, level) / p["ys"]).astype(np.int64) + p["yz"]
              for name, level in LEVELS.items()}
    lo = 0.0 if relu else -np.inf
    model_codes = mlas.qdq_conv(x, p["xs"], p["xz"], p["w"], p["ws"], p["bias"], p["bias_scale"], p["ys"], p["yz"],
                                stride=p["stride"], pads=p["pads"], group=group, lo=lo)
    for codes in theirs.values():
        np.testing.assert_array_equal(model_codes, codes)
    xf, wf, bf = mlas.dequantised(x, p["xs"], p["xz"], p["w"], p["ws"], p["bias"], p["bias_scale"])
    y = mlas.conv_f32(xf, wf, bf, stride=p["stride"], pads=p["pads"], group=group)
    np.testing.assert_array_equal(y.view(np.int32), _ort_conv(xf, wf, bf, p).view(np.int32))   # every bit
    graph = compiler.from_onnx(model)
    lib = compiler.build(graph)
    # a depthwise conv (one filter a group) on nu.fdwconv, any other on block-diagonal nu.fconv.rq
    assert ("nu.fdwconv" if group == c == o else "nu.fconv.rq") in lib.asm and "nu.conv" not in lib.asm
    compiled = np.rint(lib.run(x, check_races=True)[0] / p["ys"]).astype(np.int64) + p["yz"]
    for codes in theirs.values():
        np.testing.assert_array_equal(graph.reference(x)[0], codes)
        np.testing.assert_array_equal(compiled, codes)
    assert len(np.unique(compiled)) > 40


@pytest.mark.parametrize("c, h, w, o, dil, group", [
    (130, 3, 2, 5, 4, 1),       # only the centre tap reads a pixel; K = 1170 spans two slices of 1024
    (24, 7, 2, 8, 3, 1),        # the outer columns read only padding, every row a pixel
    (64, 8, 8, 16, 36, 1),      # DeepLabV3's ASPP: a 73 x 73 window over 8 x 8
    (12, 3, 3, 12, 2, 12),      # depthwise 5 x 5 dilated 2 (M = 1 groups of the whole window)
])
def test_a_dilated_qdq_conv_whose_outer_taps_read_only_padding(c, h, w, o, dil, group):
    """ASPP's dilated convs over small maps: the NU runs only the taps that read a pixel (nu.f_top ... skip the
    others, whose zero products still count in MLAS's K), so the input tile is the map, not the dilated window;
    onnxruntime's codes on every element at both levels, race-checked, priced exactly."""
    k = 5 if group > 1 else 3
    model, p = float_conv_model(c, h, w, o, k, 1, group, False, seed=c + dil, pads=(dil * (k // 2),) * 4,
                                dilation=dil)
    feeds = feeds_for(model, c * h)
    x = quantize_f32(feeds["x"], p["xs"], p["xz"])
    theirs = [np.rint(ort_float(model, feeds, level) / p["ys"]).astype(np.int64) + p["yz"]
              for level in LEVELS.values()]
    model_codes = mlas.qdq_conv(x, p["xs"], p["xz"], p["w"], p["ws"], p["bias"], p["bias_scale"], p["ys"], p["yz"],
                                pads=p["pads"], group=group, dil=p["dil"])
    lib = compiler.build(compiler.from_onnx(model))
    assert ("nu.f_top" in lib.asm or "nu.f_left" in lib.asm) and "nu.conv" not in lib.asm
    mod = compiler.GraphModule(lib)
    mod.set_input("x", feeds["x"])
    mod.run(check_races=True)
    got = np.rint(mod.get_output(0) / p["ys"]).astype(np.int64) + p["yz"]
    for codes in theirs:
        np.testing.assert_array_equal(model_codes, codes)
        np.testing.assert_array_equal(got, codes)
    assert lib.predicted_cycles == mod.stats.cycles
    assert_varied(got)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@example(45, 13, 17, 5, 2, (2, 1, 0, 2), True, 1)         # two blocks, the second partial; stride 2, uneven pads
@example(70, 9, 30, 3, 1, (1, 1, 1, 1), False, 2)         # three blocks
@given(st.integers(2, 80), st.integers(3, 18), st.integers(3, 18), st.sampled_from([3, 5]), st.integers(1, 2),
       st.tuples(*[st.integers(0, 2)] * 4), st.booleans(), st.integers(0, 999))
def test_a_qdq_depthwise_conv_onnxruntime_runs_in_float_is_nu_fdwconv(c, h, w, k, stride, pads, relu, seed):
    """A depthwise QDQ conv onnxruntime runs in float32 at both levels (channels that need not fill the NU's
    blocks, strides 1 and 2, any pads, 3 x 3 and 5 x 5) compiles to nu.fdwconv as its one NU command:
    onnxruntime's codes on every element at both levels, the race checker on, and the cost model's cycles the
    simulator's."""
    pads = tuple(min(q, k - 1) for q in pads)
    assume(h + pads[0] + pads[2] >= k and w + pads[1] + pads[3] >= k)
    model, p = float_conv_model(c, h, w, c, k, stride, c, relu, seed, pads)
    ops = {n.op_type for n in optimised(onnx, model).graph.node}
    assert "QLinearConv" not in ops and ops & {"Conv", "FusedConv"}
    feeds = feeds_for(model, seed)
    lib = compiler.build(compiler.from_onnx(model))
    used = {line.split()[0] for line in lib.asm.splitlines() if line.strip().startswith("nu.")}
    assert used == {"nu.fdwconv"}, used         # (x_again, the copy of the input, takes a VU command)
    mod = compiler.GraphModule(lib)
    mod.set_input("x", feeds["x"])
    mod.run(check_races=True)
    got = np.rint(mod.get_output(0) / p["ys"]).astype(np.int64) + p["yz"]
    for level in LEVELS.values():
        np.testing.assert_array_equal(got, np.rint(ort_float(model, feeds, level) / p["ys"]).astype(np.int64) + p["yz"])
    assert lib.predicted_cycles == mod.stats.cycles
    assert_varied(got)


def _ort_conv(xf: np.ndarray, wf: np.ndarray, bf: np.ndarray, p: dict) -> np.ndarray:
    """onnxruntime's float Conv of the dequantised operands at ORT_DISABLE_ALL (the QDQ model's own float conv)."""
    k = wf.shape[2]
    conv = helper.make_node("Conv", ["x", "w", "b"], ["y"], group=p["group"], kernel_shape=[k, k],
                            strides=list(p["stride"]), pads=list(p["pads"]))
    g = helper.make_graph([conv], "conv", [helper.make_tensor_value_info("x", F, list(xf.shape))],
                          [helper.make_tensor_value_info("y", F, None)],
                          [initializer("w", wf, np.float32), initializer("b", bf, np.float32)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return ort_float(m, {"x": xf}, LEVELS["disable"])


def _qdq_conv_nodes(rng, name: str, x: str, c: int, o: int, k: int, scales: tuple[float, float]) -> tuple[list, list]:
    """(nodes, initializers) of DQ(w) per channel and DQ(bias) -> Conv(x) -> QuantizeLinear, output name + "_q"."""
    xs, ys = scales
    ws = rng.uniform(0.002, 0.01, o).astype(np.float32)
    inits = [initializer(f"{name}_w", rng.integers(-127, 128, (o, c, k, k)), np.int8),
             initializer(f"{name}_sw", ws, np.float32), initializer(f"{name}_zw", np.zeros(o), np.int8),
             initializer(f"{name}_b", rng.integers(-3000, 3000, o), np.int32),
             initializer(f"{name}_sb", np.float32(xs) * ws, np.float32), initializer(f"{name}_zb", np.zeros(o), np.int32),
             initializer(f"{name}_sy", ys, np.float32), initializer(f"{name}_zy", -4, np.int8)]
    nodes = [helper.make_node("DequantizeLinear", [f"{name}_w", f"{name}_sw", f"{name}_zw"], [f"{name}_wf"], axis=0),
             helper.make_node("DequantizeLinear", [f"{name}_b", f"{name}_sb", f"{name}_zb"], [f"{name}_bf"], axis=0),
             helper.make_node("Conv", [x, f"{name}_wf", f"{name}_bf"], [f"{name}_y"], name=name, kernel_shape=[k, k],
                              pads=[k // 2] * 4),
             helper.make_node("QuantizeLinear", [f"{name}_y", f"{name}_sy", f"{name}_zy"], [f"{name}_q"])]
    return nodes, inits


def test_a_network_where_onnxruntime_fuses_one_conv_and_runs_the_next_in_float():
    """x's int8 QuantizeLinear is also dequantised to an output, so onnxruntime runs the first conv in float (its
    input int8, its output made uint8 by QDQS8ToU8) and fuses the second into QLinearConv: the importer takes the
    float mode for the first (nu.fconv) and the integer conv for the second, and the compiled network gives
    onnxruntime's default-level codes on every element, each within its two levels' difference."""
    rng = np.random.default_rng(25)
    c, h, w = 20, 9, 11
    conv1, inits1 = _qdq_conv_nodes(rng, "conv1", "xf", c, 16, 3, (0.05, 0.3))
    conv2, inits2 = _qdq_conv_nodes(rng, "conv2", "y1f", 16, 8, 3, (0.3, 0.5))
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x_again"]), *conv1,
             helper.make_node("DequantizeLinear", ["conv1_q", "conv1_sy", "conv1_zy"], ["y1f"]), *conv2,
             helper.make_node("DequantizeLinear", ["conv2_q", "conv2_sy", "conv2_zy"], ["out"])]
    g = helper.make_graph(nodes, "two_convs", [helper.make_tensor_value_info("x", F, [1, c, h, w])],
                          [helper.make_tensor_value_info("out", F, [1, 8, h, w]),
                           helper.make_tensor_value_info("x_again", F, [1, c, h, w])],
                          [initializer("sx", 0.05, np.float32), initializer("zx", 3, np.int8), *inits1, *inits2])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    kinds = {n.op_type: n.name for n in optimised(onnx, model).graph.node if "Conv" in n.op_type}
    assert kinds["Conv"] == "conv1" and kinds["QLinearConv"].startswith("conv2") and len(kinds) == 2
    feeds = feeds_for(model, 3)
    x = quantize_f32(feeds["x"], np.float32(0.05), 3)
    levels = [np.rint(ort_float(model, feeds, level) / np.float32(0.5)).astype(np.int64) - 4
              for level in (LEVELS["default"], LEVELS["disable"])]
    lib = compiler.build(compiler.from_onnx(model))
    assert "nu.fconv.rq" in lib.asm and "nu.conv" in lib.asm
    ours = np.rint(lib.run(x, check_races=True)[0] / np.float32(0.5)).astype(np.int64) - 4
    np.testing.assert_array_equal(ours, levels[0])
    assert ((np.minimum(*levels) <= ours) & (ours <= np.maximum(*levels))).all() and len(np.unique(ours)) > 20
