"""Which nodes run on the host and the stages (compiler/onnx/placement.py): the registry's host nodes, the nodes a
float tensor ties to them, DequantizeLinear copied where both sides read it, stages in run order."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

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
    """On the NPU a BatchNormalization ends at a QuantizeLinear (through a Relu or Clip): else the host."""
    bn = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["u"])
    consts = {"s", "b", "m", "v"}.__contains__
    readers = {"u": [helper.make_node("Relu", ["u"], ["r"])], "r": [helper.make_node("QuantizeLinear", ["r"], ["q"])]}
    assert host_reason(bn, consts, lambda t: readers.get(t, [])) == ""
    readers["r"].append(helper.make_node("GlobalAveragePool", ["r"], ["g"]))
    assert "result stays float" in host_reason(bn, consts, lambda t: readers.get(t, []))


def test_a_model_the_npu_runs_whole_has_no_host_nodes():
    assert not any_host(onnx, models.tiny("qdq", size=8, samples=1))
