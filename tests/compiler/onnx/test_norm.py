"""BatchNormalization (compiler/onnx/norm.py) against onnxruntime at ORT_ENABLE_ALL and ORT_DISABLE_ALL.

Two kinds of model.  Written with onnx.helper: DequantizeLinear -> BatchNormalization -> (Relu | Clip) ->
QuantizeLinear over random ranks, shapes and channel counts that divide nothing, the parameters float32
constants or dequantised ones (int8 per channel for scale and var, int32 for B and mean, as quantize_static
writes them).  Made by quantize_static (compiler.models.quantize): Conv -> Concat -> BatchNormalization ->
Relu -> Conv, where no conv can absorb the BN, in QOperator and QDQ form, int8 and uint8.  Each is imported,
compiled, run on the simulator (race-checked) and compared element for element with both levels.  DenseNet's
float tail (DequantizeLinear -> BatchNormalization -> Relu -> GlobalAveragePool -> Flatten -> QuantizeLinear)
likewise, written with onnx.helper and made by quantize_static.
"""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import compiler
from compiler import CompileError, models
from compiler.models import Net
from tests.helpers.bn_tail import cancelling_planes, large_pairs
from tests.helpers.qdq import LEVELS, SCALES, F, feeds_for, initializer, ort_float

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _stats(rng, c: int) -> list[np.ndarray]:
    return [rng.normal(1, 0.4, c), rng.normal(0, 0.5, c), rng.normal(0, 1, c), rng.uniform(0.05, 3, c)]


def _param_inputs(name: str, value: np.ndarray, dq: bool, int32: bool) -> tuple[list, list]:
    """(nodes, initializers) giving the float32 parameter `name`: itself, or a DequantizeLinear of its int8
    (per channel, axis 0) or int32 quantisation."""
    if not dq:
        return [], [initializer(name, value, np.float32)]
    qmax = (1 << 20) if int32 else 127
    s = (np.abs(value).max() / qmax + 1e-6) * np.ones(value.size)
    q = np.clip(np.rint(value / s), -qmax, qmax).astype(np.int32 if int32 else np.int8)
    inits = [initializer(name + "_q", q, q.dtype), initializer(name + "_s", s, np.float32),
             initializer(name + "_z", np.zeros(value.size), q.dtype)]
    return [helper.make_node("DequantizeLinear", [name + "_q", name + "_s", name + "_z"], [name], axis=0)], inits


def bn_model(shape: tuple, act: str, dq: bool, seed: int, epsilon: float = 1e-5) -> onnx.ModelProto:
    """x quantised, dequantised, BatchNormalization, then act ("relu", "clip", "none"), quantised, dequantised."""
    rng = np.random.default_rng(seed)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"])]
    inits = []
    for k, (s, z) in SCALES.items():
        inits += [initializer("s" + k, s, np.float32), initializer("z" + k, z, np.int8)]
    names = ["scale", "B", "mean", "var"]
    for name, value in zip(names, _stats(rng, shape[1])):
        n, i = _param_inputs(name, value, dq, name in ("B", "mean"))
        nodes, inits = nodes + n, inits + i
    nodes.append(helper.make_node("BatchNormalization", ["xf"] + names, ["u"], epsilon=epsilon))
    last = "u"
    if act == "relu":
        nodes.append(helper.make_node("Relu", ["u"], ["r"]))
        last = "r"
    elif act == "clip":
        inits += [initializer("lo", -0.6, np.float32), initializer("hi", 1.7, np.float32)]
        nodes.append(helper.make_node("Clip", ["u", "lo", "hi"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("out", F, list(shape))], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def ours(model: onnx.ModelProto, feeds: dict) -> tuple[np.ndarray, compiler.Graph]:
    """The network's float output on the simulator (race-checked), and its graph."""
    g = compiler.from_onnx(model)
    mod = compiler.GraphModule(compiler.build(g))
    for k, v in feeds.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    return mod.get_output(0), g


SHAPES = st.one_of(st.tuples(st.just(1), st.integers(1, 70)),
                   st.tuples(st.integers(1, 2), st.integers(1, 50), st.integers(1, 40)),
                   st.tuples(st.integers(1, 2), st.integers(1, 45), st.integers(1, 12), st.integers(1, 19)))


@SETTINGS
@given(shape=SHAPES, act=st.sampled_from(["relu", "clip", "none"]), dq=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_batch_norm_is_bit_exact_with_onnxruntime_at_both_levels(shape, act, dq, seed):
    model = bn_model(shape, act, dq, seed)
    feeds = feeds_for(model, seed)
    y, g = ours(model, feeds)
    kinds = [n.op.kind for n in g.nodes]
    assert kinds == ["batch_norm"], kinds        # the Relu or Clip is the op's clamp
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, feeds, level))


@pytest.mark.parametrize("shape, act", [((1, 5, 3, 4), "relu"), ((2, 7, 6), "none"), ((1, 33, 5, 2), "clip")])
def test_a_batch_norm_viewed_before_its_quantize_linear_runs_on_the_npu(shape, act):
    """BatchNormalization -> (act) -> Flatten -> QuantizeLinear: the view is of the rounded result."""
    model = bn_model(shape, act, True, 3)
    q = next(n for n in model.graph.node if n.output[0] == "yq")
    model.graph.node.insert(list(model.graph.node).index(q), helper.make_node("Flatten", [q.input[0]], ["flat"]))
    q.input[0] = "flat"
    model.graph.output[0].CopyFrom(helper.make_tensor_value_info("out", F, [shape[0], int(np.prod(shape[1:]))]))
    feeds = feeds_for(model, 1)
    y, g = ours(model, feeds)
    assert [n.op.kind for n in g.nodes] == ["batch_norm", "reshape"]
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, feeds, level))


def dense_block(c1: int, c2: int, h: int, w: int, seed: int) -> onnx.ModelProto:
    """Conv and Conv -> Concat -> BatchNormalization -> Relu -> Conv: DenseNet's pattern, in float."""
    n = Net("dense", (1, 6, h, w), seed)
    a = n.conv(n.input, c1, 3, 1, act="relu")
    b = n.conv(n.input, c2, 1, 1, act=None)
    n.output(n.conv(n.batch_norm(n.concat([a, b]), act="relu"), 9, 3, 1, act=None))
    return n.model()


@pytest.mark.parametrize("fmt, activations, c1, c2, h, w", [
    ("qoperator", "int8", 13, 22, 9, 11), ("qdq", "int8", 33, 7, 6, 13),
    ("qoperator", "uint8", 40, 24, 7, 5), ("qdq", "uint8", 5, 12, 11, 8)])
def test_quantize_static_dense_block_is_bit_exact_at_both_levels(fmt, activations, c1, c2, h, w):
    model = models.quantize(dense_block(c1, c2, h, w, 4), fmt, seed=2, samples=3, activations=activations)
    assert "BatchNormalization" in [n.op_type for n in model.graph.node]
    x = {"input": np.random.default_rng(h).standard_normal((1, 6, h, w)).astype(np.float32)}
    y, g = ours(model, x)
    assert [n.op.kind for n in g.nodes].count("batch_norm") == 1
    assert "clip" not in [n.op.kind for n in g.nodes]           # the Relu went into the batch_norm
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, x, level))


def _edited(model: onnx.ModelProto, **attrs) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.CopyFrom(model)
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    for k, v in attrs.items():
        bn.attribute.append(helper.make_attribute(k, v))
    return m


def test_refusals_name_the_node_and_the_reason():
    model = bn_model((1, 4, 3, 3), "relu", False, 1)
    with pytest.raises(CompileError, match=r"BatchNormalization.*training_mode = 1: only inference"):
        compiler.from_onnx(_edited(model, training_mode=1))
    m = _edited(model)
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    bn.input[0] = "x"                          # the float graph input itself, never quantised
    with pytest.raises(CompileError, match=r"BatchNormalization.*X \('x'\) must come from a DequantizeLinear"):
        compiler.from_onnx(m)
    m = _edited(model)
    var = next(i for i in m.graph.initializer if i.name == "var")
    var.CopyFrom(initializer("var", np.full(4, -1.0), np.float32))
    with pytest.raises(CompileError, match=r"BatchNormalization.*channel 0 folds to new_scale nan.*finite float32 "
                                           r"pairs only"):
        compiler.from_onnx(m)
    m = _edited(model)
    m.graph.input.append(helper.make_tensor_value_info("mean_in", F, [4]))
    bn = next(n for n in m.graph.node if n.op_type == "BatchNormalization")
    bn.input[3] = "mean_in"
    with pytest.raises(CompileError, match=r"BatchNormalization.*input_mean \('mean_in'\) must be a float32 "
                                           r"constant or a dequantised constant"):
        compiler.from_onnx(m)


def tail_model(shape: tuple, relu: bool, scale: np.ndarray, bias: np.ndarray, mean: np.ndarray, var: np.ndarray,
               epsilon: float) -> onnx.ModelProto:
    """DenseNet's QOperator tail: x quantised, DequantizeLinear -> BatchNormalization -> (Relu) ->
    GlobalAveragePool -> Flatten -> QuantizeLinear, dequantised to the float [N, C] output."""
    n, c = shape[:2]
    inits = [initializer(name, value, np.float32) for name, value in zip(("scale", "B", "mean", "var"),
                                                                         (scale, bias, mean, var))]
    for k, (sc, z) in SCALES.items():
        inits += [initializer("s" + k, sc, np.float32), initializer("z" + k, z, np.int8)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("BatchNormalization", ["xf", "scale", "B", "mean", "var"], ["u"], epsilon=epsilon)]
    if relu:
        nodes.append(helper.make_node("Relu", ["u"], ["r"]))
    nodes += [helper.make_node("GlobalAveragePool", ["r" if relu else "u"], ["g"]),
              helper.make_node("Flatten", ["g"], ["f"], axis=1),
              helper.make_node("QuantizeLinear", ["f", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["out"])]
    g = helper.make_graph(nodes, "tail", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("out", F, [n, c])], initializer=inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 15)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


def _tail_stats(rng, c: int) -> list[np.ndarray]:
    """BatchNormalization parameters: scales of either sign, some variances tiny (new_scale up to ~300)."""
    scale = rng.normal(0, 1.2, c)
    var = np.where(rng.random(c) < 0.3, rng.uniform(1e-9, 1e-6, c), rng.uniform(0.05, 3, c))
    return [scale, rng.normal(0, 0.5, c), rng.normal(0, 1, c), var]


def _assert_tail_on_the_npu(model: onnx.ModelProto, feeds: dict) -> None:
    """The whole tail is one batch_norm_global_avg on the NPU (the Flatten a reshape), bit-exact with
    onnxruntime at both levels."""
    y, g = ours(model, feeds)
    kinds = [n.op.kind for n in g.nodes]
    assert kinds == ["bnavg_pool2d", "reshape"], kinds
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(model, feeds, level))


TAIL_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 70).filter(lambda c: c % 32), st.integers(1, 9),
                        st.integers(1, 11))


@SETTINGS
@given(shape=TAIL_SHAPES, relu=st.booleans(), epsilon=st.sampled_from([1e-5, 1e-3]), seed=st.integers(0, 2**32 - 1))
def test_densenet_float_tail_runs_on_the_npu_bit_exact_at_both_levels(shape, relu, epsilon, seed):
    """Random shapes and parameters (negative scales, tiny variances) on random inputs."""
    rng = np.random.default_rng(seed)
    model = tail_model(shape, relu, *_tail_stats(rng, shape[1]), epsilon)
    _assert_tail_on_the_npu(model, feeds_for(model, seed))


@pytest.mark.parametrize("shape, relu", [((1, 37, 7, 7), True), ((2, 19, 5, 3), False), ((1, 45, 4, 4), True)])
def test_densenet_float_tail_sums_in_onnxruntimes_order(shape, relu):
    """Planes of as many codes k as -k under scales of 1e6: every order of the float32 sum rounds differently
    (tests.helpers.bn_tail), and the NPU still agrees with onnxruntime on every element."""
    rng = np.random.default_rng(shape[1])
    new_scale, bias = large_pairs(rng, shape[1])
    sx, zx = SCALES["x"]
    model = tail_model(shape, relu, new_scale, bias, np.zeros(shape[1]), np.full(shape[1], 1 - 1e-5), 1e-5)
    codes = cancelling_planes(rng, *shape, code=60)
    _assert_tail_on_the_npu(model, {"x": ((codes.astype(np.float32) - zx) * np.float32(sx)).astype(np.float32)})


def test_quantize_static_densenet_tail_runs_on_the_npu_bit_exact_at_both_levels():
    """DenseNet's last BN (QOperator, int8 and uint8): Relu then a float GlobalAveragePool, no QuantizeLinear
    after the BN.  onnxruntime runs DequantizeLinear -> BN -> Relu -> GlobalAveragePool -> Flatten ->
    QuantizeLinear in float; the NPU runs it as one vu.pool.faffavg pool, no host part left, bit-exact at both
    levels, and it builds with host fallback off."""
    for activations in ("int8", "uint8"):
        n = Net("tail", (1, 6, 5, 5), 3)
        y = n.batch_norm(n.concat([n.conv(n.input, 8, 3, 1), n.conv(n.input, 5, 1, 1)]), act="relu")
        n.output(n.gemm(n.flatten(n.global_avg_pool(y)), 4))
        model = models.quantize(n.model(), "qoperator", seed=1, samples=2, activations=activations)
        assert "BatchNormalization" in [n.op_type for n in model.graph.node]
        g = compiler.from_onnx(model)
        assert isinstance(g, compiler.Graph)            # no host part
        assert "bnavg_pool2d" in [n.op.kind for n in g.nodes]
        lib = compiler.build(g, host_fallback=False)
        assert "vu.pool.faffavg" in lib.asm
        mod = compiler.GraphModule(lib)
        for seed in range(3):
            x = {"input": np.random.default_rng(seed).standard_normal((1, 6, 5, 5)).astype(np.float32)}
            mod.set_input("input", x["input"])
            mod.run(check_races=True)
            for level in LEVELS.values():
                np.testing.assert_array_equal(mod.get_output(0), ort_float(model, x, level))


def test_a_batch_norm_clipped_before_its_float_pool_runs_on_the_host():
    """A Clip between the BN and the GlobalAveragePool is not a Relu: vu.pool.faffavg has no float clamp, so the
    island stays on the host (still bit-exact), and with host fallback off the pool is refused, saying why."""
    n = Net("tail", (1, 6, 5, 5), 3)
    y = n.batch_norm(n.concat([n.conv(n.input, 8, 3, 1), n.conv(n.input, 5, 1, 1)]), act="relu6")
    n.output(n.gemm(n.flatten(n.global_avg_pool(y)), 4))
    model = models.quantize(n.model(), "qoperator", seed=1, samples=2)
    hosted = compiler.from_onnx(model)
    (part,) = hosted.host_parts
    assert [op for _, op, _ in part.nodes][:3] == ["DequantizeLinear", "BatchNormalization", "Clip"]
    assert "BatchNormalization whose result stays float" in part.nodes[1][2]
    mod = compiler.GraphModule(compiler.build(hosted))
    x = {"input": np.random.default_rng(0).standard_normal((1, 6, 5, 5)).astype(np.float32)}
    mod.set_input("input", x["input"])
    mod.run(check_races=True)
    for level in LEVELS.values():
        np.testing.assert_array_equal(mod.get_output(0), ort_float(model, x, level))
    with pytest.raises(CompileError, match=r"GlobalAveragePool.*pools a BatchNormalization clipped to \[0.0, 6.0\]: "
                                           r"only a Relu may lie between them"):
        compiler.build(hosted, host_fallback=False)
