"""Which nodes run on the host and the stages (compiler/onnx/placement.py): the registry's host nodes, the nodes a
float tensor ties to them (and a float op reading another one's unrounded result), DequantizeLinear copied where
both sides read it, stages in run order."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import models
from compiler.host import HostedGraph
from compiler.onnx.placement import Model, any_host, plan
from compiler.onnx.registry import host_reason
from tests.helpers.hosted import model
from tests.helpers.qdq import LEVELS, ZP_TYPES, feeds_for, initializer, ort_float


def _names(m: Model, nodes) -> list[str]:
    return [m.nodes[i].name for i in nodes]


def test_layernorm_between_convs_is_npu_host_npu_with_the_qdq_nodes_at_its_edges():
    m = Model(onnx, model("layernorm"))
    stages = plan(m)
    assert [side for side, _ in stages] == ["npu", "host", "npu"]
    host = {m.nodes[i].op_type for i in m.host}
    assert host == {"LayerNormalization", "QuantizeLinear", "DequantizeLinear"}
    assert all(m.nodes[i].op_type in ("QLinearConv", "QuantizeLinear", "DequantizeLinear")
               for side, nodes in stages if side == "npu" for i in nodes)
    assert m.host[next(i for i in m.host if m.nodes[i].op_type == "LayerNormalization")] == \
        "op type 'LayerNormalization' has no NPU lowering"


def test_a_dequantize_read_by_both_sides_is_copied_not_moved():
    """x -> Q -> DQ -> {Conv (NPU), Hardmax (host)}: the DQ runs in the NPU stage and in the host part."""
    w = numpy_helper.from_array(np.ones((2, 2, 1, 1), np.int8), "w")
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z"), w]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wd"], name="dqw"),
             helper.make_node("Conv", ["xd", "wd"], ["c"], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "s", "z"], ["cq"], name="cq"),
             helper.make_node("DequantizeLinear", ["cq", "s", "z"], ["y"], name="y"),
             helper.make_node("Hardmax", ["xd"], ["h"], name="hardmax")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3]),
                               helper.make_tensor_value_info("h", TensorProto.FLOAT, [1, 2, 3, 3])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    assert any_host(onnx, proto)
    m = Model(onnx, proto)
    stages = plan(m)
    assert _names(m, m.host) == ["hardmax"]
    (npu,), (host,) = ([n for s, n in stages if s == side] for side in ("npu", "host"))
    assert "dq" in _names(m, npu) and "dq" in _names(m, host) and "conv" in _names(m, npu)


def test_the_registry_decides_per_node_and_form():
    consts = {"w", "shape"}.__contains__
    assert host_reason(helper.make_node("MatMul", ["a", "w"], ["y"]), consts) == ""
    assert "of two activations" in host_reason(helper.make_node("MatMul", ["a", "b"], ["y"]), consts)
    assert host_reason(helper.make_node("Expand", ["shape", "w"], ["y"]), consts) == ""       # folded at import
    assert "folded at import" in host_reason(helper.make_node("Expand", ["a", "w"], ["y"]), consts)
    assert host_reason(helper.make_node("Gather", ["a", "w"], ["y"]), consts) == ""           # a slice
    assert "not a constant" in host_reason(helper.make_node("Gather", ["a", "b"], ["y"]), consts)
    assert "has no NPU lowering" in host_reason(helper.make_node("TopK", ["a", "w"], ["y", "i"]), consts)
    assert host_reason(helper.make_node("Conv", ["a", "w"], ["y"]), consts) == ""


def test_a_batch_norm_runs_on_the_host_when_its_result_stays_float():
    """On the NPU a BatchNormalization ends at a QuantizeLinear (through Relu, Clip and views), or at a float
    GlobalAveragePool through a Relu at most whose result ends at one (through views, Relu, Clip): DenseNet's
    tail.  Anything else keeps it float: the host."""
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["u"])
    consts = {"s", "b", "m", "v"}.__contains__

    def reason(chain: list[str]) -> str:
        """host_reason of bn whose result runs through the ops of chain, one after the other."""
        readers = {}
        for k, op in enumerate(chain):
            readers[f"t{k}" if k else "u"] = [helper.make_node(op, [f"t{k}" if k else "u"], [f"t{k + 1}"])]
        return host_reason(bn, consts, lambda t: readers.get(t, []))

    for chain in (["QuantizeLinear"], ["Relu", "QuantizeLinear"], ["Clip", "Relu", "QuantizeLinear"],
                  ["GlobalAveragePool", "QuantizeLinear"], ["Relu", "GlobalAveragePool", "Flatten", "QuantizeLinear"],
                  ["Relu", "GlobalAveragePool", "Reshape", "Relu", "QuantizeLinear"], ["Flatten", "QuantizeLinear"],
                  ["Relu", "Unsqueeze", "Clip", "QuantizeLinear"]):
        assert reason(chain) == "", chain
    for chain in (["GlobalAveragePool", "Softmax"], ["Clip", "GlobalAveragePool", "QuantizeLinear"],
                  ["Relu", "GlobalAveragePool", "Sigmoid", "QuantizeLinear"], ["Flatten", "GlobalAveragePool"],
                  ["Relu", "Add"], ["Relu", "GlobalAveragePool", "GlobalAveragePool", "QuantizeLinear"]):
        assert "result stays float" in reason(chain), chain
    readers = {"u": [helper.make_node("Relu", ["u"], ["r"])], "r": [helper.make_node("QuantizeLinear", ["r"], ["q"]),
                                                                     helper.make_node("Sigmoid", ["r"], ["g"])]}
    assert "result stays float" in host_reason(bn, consts, lambda t: readers.get(t, []))


def test_a_model_the_npu_runs_whole_has_no_host_nodes():
    assert not any_host(onnx, models.tiny("qdq", size=8, samples=1))


def test_a_float_op_reading_another_ones_unrounded_result_runs_on_the_host_with_it():
    """yolov8's box decoding: s = c - x is quantised and also read in float by x2 - s.  The NPU keeps only the
    rounded s, so both Subs (and the Slice feeding the first) run on the host; the model then agrees with
    onnxruntime at both levels."""
    f = TensorProto.FLOAT
    inits = [numpy_helper.from_array(np.float32(0.05), "s"), numpy_helper.from_array(np.int8(3), "z"),
             numpy_helper.from_array(np.arange(-12, 12, dtype=np.int8).reshape(1, 2, 12), "c"),
             numpy_helper.from_array(np.array([0], np.int64), "st"),
             numpy_helper.from_array(np.array([2], np.int64), "en"),
             numpy_helper.from_array(np.array([1], np.int64), "ax")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("DequantizeLinear", ["c", "s", "z"], ["cd"], name="dqc"),
             helper.make_node("Slice", ["xd", "st", "en", "ax"], ["xs"], name="slice"),
             helper.make_node("Sub", ["cd", "xs"], ["d"], name="sub"),
             helper.make_node("QuantizeLinear", ["d", "s", "z"], ["dq8"], name="qd"),
             helper.make_node("Sub", ["cd", "d"], ["e"], name="sub2"),
             helper.make_node("QuantizeLinear", ["e", "s", "z"], ["eq8"], name="qe"),
             helper.make_node("QLinearAdd", ["dq8", "s", "z", "eq8", "s", "z", "s", "z"], ["yq"], name="add",
                              domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["y"], name="dqy")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", f, [1, 4, 12])],
                              [helper.make_tensor_value_info("y", f, [1, 2, 12])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    m = Model(onnx, proto)
    plan(m)
    assert {"sub", "sub2", "slice"} <= set(_names(m, m.host)) and "add" not in _names(m, m.host)
    assert "unrounded" in m.host[next(i for i in m.host if m.nodes[i].name == "sub2")]
    hosted = compiler.from_onnx(proto)
    mod = compiler.GraphModule(compiler.build(hosted))
    x = np.random.default_rng(2).standard_normal((1, 4, 12)).astype(np.float32) * 0.4
    mod.set_input(0, x)
    mod.run(check_races=True)
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        sess = ort.InferenceSession(proto.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        np.testing.assert_array_equal(mod.get_output(0), sess.run(None, {"x": x})[0])


def test_a_shape_of_a_tensor_nonzero_sizes_is_not_a_constant():
    """Shape of x (static) is known at import; Shape of NonZero(x) is not, so no stage takes it for a constant
    and reads NonZero's output before the host part that makes it (torchvision's whole SSD graph did)."""
    nodes = [helper.make_node("Shape", ["x"], ["sx"]), helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Shape", ["nz"], ["snz"])]
    g = helper.make_graph(nodes, "nz", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 4])],
                          [helper.make_tensor_value_info(o, TensorProto.INT64, None) for o in ("sx", "snz")])
    proto = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m = Model(onnx, proto)
    assert "sx" in m.consts and "snz" not in m.consts


VIEW_ARGS = {"Unsqueeze": lambda shape, rng: [int(rng.integers(0, len(shape) + 1))],
         "Squeeze": lambda shape, rng: [0],
         "Flatten": lambda shape, rng: int(rng.integers(0, len(shape) + 1)),
         "Reshape": lambda shape, rng: [shape[1] * shape[0], -1, *shape[3:]]}
"""Each view of the float difference d (of shape [1, ...]): its axes, axis or target shape, at random."""


def _decoding(view: str, reader: str, dtype: str, shape: tuple, seed: int) -> onnx.ModelProto:
    """SSD's box decoding in small: d = DQ(a) - DQ(b), then the view, then a QuantizeLinear: straight (reader
    "quantize"), after a Relu ("relu"), or after a float Concat of the view and a dequantised constant ("concat")."""
    _, np_t, lo = ZP_TYPES[dtype]
    rng = np.random.default_rng(seed)
    arg = VIEW_ARGS[view](shape, rng)
    inits = [initializer("sa", 0.05, np.float32), initializer("za", lo + 131, np_t),
             initializer("sb", 0.03, np.float32), initializer("zb", lo + 120, np_t),
             initializer("sy", 0.07, np.float32), initializer("zy", lo + 125, np_t)]
    nodes = [helper.make_node("QuantizeLinear", [x, f"s{x}", f"z{x}"], [f"{x}q"]) for x in "ab"]
    nodes += [helper.make_node("DequantizeLinear", [f"{x}q", f"s{x}", f"z{x}"], [f"{x}f"]) for x in "ab"]
    nodes.append(helper.make_node("Sub", ["af", "bf"], ["d"], name="sub"))
    if view == "Flatten":
        nodes.append(helper.make_node(view, ["d"], ["v"], name="view", axis=arg))
    else:
        inits.append(initializer("arg", arg, np.int64))
        nodes.append(helper.make_node(view, ["d", "arg"], ["v"], name="view"))
    viewed = np.empty(shape)
    viewed = {"Unsqueeze": lambda: np.expand_dims(viewed, arg[0]), "Squeeze": lambda: viewed[0],
              "Flatten": lambda: viewed.reshape(int(np.prod(shape[:arg])), -1),
              "Reshape": lambda: viewed.reshape(arg)}[view]().shape
    if reader == "concat":
        c = rng.integers(lo, lo + 256, (*viewed[:-1], 5))
        inits.append(initializer("c", c, np_t))
        nodes += [helper.make_node("DequantizeLinear", ["c", "sy", "zy"], ["cf"]),
                  helper.make_node("Concat", ["v", "cf"], ["cat"], name="concat", axis=-1)]
        viewed = (*viewed[:-1], viewed[-1] + 5)
    elif reader == "relu":
        nodes.append(helper.make_node("Relu", ["v"], ["cat"], name="relu"))
    nodes += [helper.make_node("QuantizeLinear", ["v" if reader == "quantize" else "cat", "sy", "zy"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    graph = helper.make_graph(nodes, "decode", [helper.make_tensor_value_info(x, TensorProto.FLOAT, list(shape))
                                                 for x in "ab"],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(viewed))], inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(m, full_check=True)
    return m


def _agrees(proto: onnx.ModelProto, seed: int) -> np.ndarray:
    """Our output of the model (built, race-checked), asserted bit-exact with onnxruntime's at both levels."""
    feeds = feeds_for(proto, seed)
    mod = compiler.GraphModule(compiler.build(compiler.from_onnx(proto)))
    for k, v in feeds.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    y = mod.get_output(0)
    for level in LEVELS.values():
        np.testing.assert_array_equal(y, ort_float(proto, feeds, level))
    assert len(np.unique(y)) > 1
    return y


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=st.sampled_from(sorted(VIEW_ARGS)), reader=st.sampled_from(["quantize", "relu"]),
       dtype=st.sampled_from(sorted(ZP_TYPES)), seed=st.integers(0, 2**32 - 1),
       shape=st.lists(st.integers(2, 23), min_size=2, max_size=3).map(lambda s: (1, *s)))
def test_a_view_of_a_float_result_before_its_quantize_runs_on_the_npu(view, reader, dtype, seed, shape):
    """Sub -> view -> (Relu) -> QuantizeLinear: the NPU rounds the Sub to the QuantizeLinear's scale (and the
    Relu's range) and views the int8 result, which is onnxruntime's (rounding commutes with a view): no host part."""
    proto = _decoding(view, reader, dtype, shape, seed)
    assert not any_host(onnx, proto)
    assert isinstance(compiler.from_onnx(proto), compiler.Graph)
    _agrees(proto, seed)


@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(view=st.sampled_from(sorted(VIEW_ARGS)), dtype=st.sampled_from(sorted(ZP_TYPES)), seed=st.integers(0, 2**32 - 1),
       shape=st.lists(st.integers(2, 23), min_size=2, max_size=3).map(lambda s: (1, *s)))
def test_a_view_of_a_float_result_read_unrounded_runs_on_the_host_with_its_producer(view, dtype, seed, shape):
    """Sub -> view -> Concat (float) -> QuantizeLinear: the Concat reads the Sub unrounded, which the NPU never
    holds, so the Sub, the view and the Concat run on the host (the DequantizeLinears with them), and the model
    agrees with onnxruntime at both levels."""
    proto = _decoding(view, "concat", dtype, shape, seed)
    m = Model(onnx, proto)
    plan(m)
    assert {"sub", "view", "concat"} <= set(_names(m, m.host))
    assert "views Sub 'sub'" in m.host[next(i for i in m.host if m.nodes[i].name == "view")]
    assert isinstance(compiler.from_onnx(proto), HostedGraph)
    _agrees(proto, seed)


def test_a_view_of_a_dequantised_or_quantised_tensor_is_no_float_result():
    """DQ -> Slice -> Reshape -> Concat: the Reshape views a dequantised tensor (the NPU views its int8 Value), so
    neither it nor the Slice runs on the host; nor does a Reshape of an int8 tensor before a QLinearConcat."""
    consts = [initializer("s", 0.05, np.float32), initializer("z", 3, np.int8), initializer("st", [0], np.int64),
              initializer("en", [3], np.int64), initializer("ax", [2], np.int64),
              initializer("to", [1, 4, 15], np.int64)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq"),
             helper.make_node("Slice", ["xd", "st", "en", "ax"], ["xs"], name="slice"),
             helper.make_node("Reshape", ["xs", "to"], ["r"], name="view"),
             helper.make_node("Concat", ["r", "r"], ["cat"], name="concat", axis=2),
             helper.make_node("QuantizeLinear", ["cat", "s", "z"], ["cq"], name="qc"),
             helper.make_node("Reshape", ["cq", "to2"], ["cr"], name="int8_view"),
             helper.make_node("QLinearConcat", ["s", "z", "cr", "s", "z", "k", "s", "z"], ["yq"], name="qcat",
                              axis=1, domain="com.microsoft"),
             helper.make_node("DequantizeLinear", ["yq", "s", "z"], ["y"], name="dqy")]
    consts += [initializer("to2", [1, 2, 60], np.int64),
               initializer("k", np.random.default_rng(4).integers(-128, 128, (1, 2, 60)), np.int8)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 6, 5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 60])], consts)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    assert not any_host(onnx, proto) and plan(Model(onnx, proto)) is None
    _agrees(proto, 5)
