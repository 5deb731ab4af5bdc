"""Which nodes run on the host and the stages (compiler/onnx/placement.py): the registry's host nodes, the nodes a
float tensor ties to them (and a float op reading another one's unrounded result), DequantizeLinear copied where
both sides read it, stages in run order."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import models
from compiler.onnx.placement import Model, any_host, plan
from compiler.onnx.registry import host_reason
from tests.helpers.hosted import model


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
    assert host_reason(helper.make_node("Gather", ["shape", "w"], ["y"]), consts) == ""       # folded at import
    assert "folded at import" in host_reason(helper.make_node("Gather", ["a", "w"], ["y"]), consts)
    assert "has no NPU lowering" in host_reason(helper.make_node("TopK", ["a", "w"], ["y", "i"]), consts)
    assert host_reason(helper.make_node("Conv", ["a", "w"], ["y"]), consts) == ""


def test_a_batch_norm_runs_on_the_host_when_its_result_stays_float():
    """On the NPU a BatchNormalization ends at a QuantizeLinear (through a Relu or Clip), or at a float
    GlobalAveragePool through a Relu at most whose result ends at one (through Flatten, Reshape, Relu, Clip):
    DenseNet's tail.  Anything else keeps it float: the host."""
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
                  ["Relu", "GlobalAveragePool", "Reshape", "Relu", "QuantizeLinear"]):
        assert reason(chain) == "", chain
    for chain in (["GlobalAveragePool", "Softmax"], ["Clip", "GlobalAveragePool", "QuantizeLinear"],
                  ["Relu", "GlobalAveragePool", "Sigmoid", "QuantizeLinear"], ["Flatten", "QuantizeLinear"],
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
