"""The refusal of a model with unsupported ops: one CompileError listing every such node, grouped by op type.

The unsupported ops are placed on one path behind each other (the old importer reported only the
first of each path) and on branches; a known op behind an unsupported one stays silent.
"""
from __future__ import annotations

import pytest
from onnx import TensorProto, helper, numpy_helper

import numpy as np

from compiler import CompileError, from_onnx
from compiler.onnx.refusals import Refusal, report

# Ops no handler takes (nor is meant to): the test needs refusals that stay refusals.
ODD = ("Hardmax", "LpNormalization")


def _model(chain: list[str], branches: int) -> object:
    """x -> Q -> DQ -> chain[0] -> chain[1] -> ... -> Q -> DQ -> y, and `branches` more Hardmax off the DQ."""
    inits = [numpy_helper.from_array(np.float32(0.1), "s"), numpy_helper.from_array(np.int8(0), "z")]
    nodes = [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"], name="q_in"),
             helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"], name="dq_in")]
    prev = "xd"
    for k, op in enumerate(chain):
        nodes.append(helper.make_node(op, [prev], [f"t{k}"], name=f"{op.lower()}{k}"))
        prev = f"t{k}"
    outs = [prev]
    for b in range(branches):
        nodes.append(helper.make_node("Hardmax", ["xd"], [f"b{b}"], name=f"branch{b}"))
        outs.append(f"b{b}")
    tail = []
    for o in outs:
        tail += [helper.make_node("QuantizeLinear", [o, "s", "z"], [f"{o}_q"], name=f"{o}_quant"),
                 helper.make_node("DequantizeLinear", [f"{o}_q", "s", "z"], [f"{o}_y"], name=f"{o}_dequant")]
    graph = helper.make_graph(nodes + tail, "odd", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 3, 3])],
                              [helper.make_tensor_value_info(f"{o}_y", TensorProto.FLOAT, None) for o in outs], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_every_unsupported_node_is_listed_by_op_type():
    model = _model(["Hardmax", "Relu", "LpNormalization", "Hardmax", "Hardmax", "LpNormalization"], branches=3)
    with pytest.raises(CompileError) as e:
        from_onnx(model, host_fallback=False)
    lines = str(e.value).splitlines()
    assert lines[0] == ("cannot import the ONNX model: 8 nodes of 2 op types cannot run (Hardmax 6, "
                        "LpNormalization 2)")
    assert lines[1] == ("  Hardmax x6: op type 'Hardmax' is not supported (nodes 'hardmax0', 'branch0', 'branch1' "
                        "and 3 more)")
    assert lines[2] == ("  LpNormalization x2: op type 'LpNormalization' is not supported (nodes "
                        "'lpnormalization2', 'lpnormalization5')")
    assert lines[3].startswith("Supported ONNX ops: Abs, Add, ") and len(lines) == 4
    assert "relu1" not in str(e.value), "a supported op behind a refused one must stay silent"


def test_one_node_is_named_as_before():
    with pytest.raises(CompileError) as e:
        from_onnx(_model(["LpNormalization"], branches=0), host_fallback=False)
    assert str(e.value).splitlines()[:2] == [
        "cannot import the ONNX model: 1 node of 1 op type cannot run (LpNormalization 1)",
        "  node 'lpnormalization0' (LpNormalization): op type 'LpNormalization' is not supported"]


def test_reasons_within_an_op_type_and_other_problems():
    rows = [Refusal("node 'a' (Conv)", "why one", "Conv", "a"), Refusal("node 'b' (Conv)", "why two", "Conv", "b"),
            Refusal("node 'c' (Conv)", "why one", "Conv", "c"), Refusal("initializer 'w'", "cannot be read")]
    lines = report(rows, ["Conv"], "advice.").splitlines()
    assert lines == ["cannot import the ONNX model: 3 nodes of 1 op type cannot run (Conv 3) and 1 other problem",
                     "  Conv x3: why one (nodes 'a', 'c'); node 'b' (Conv): why two",
                     "  initializer 'w': cannot be read",
                     "Supported ONNX ops: Conv (docs/operators.md says what each takes).  advice."]
    assert report(rows[3:], ["Conv"], "a.").splitlines()[0] == "cannot import the ONNX model: 1 problem"


def test_an_op_type_that_is_not_utf8_is_listed_not_a_crash():
    """protobuf hands back an op type of invalid UTF-8 as bytes (the fuzzer's find): sorted with the others."""
    raw = _model(["Hardmax", "LpNormalization"], branches=1).SerializeToString()
    assert raw.count(b"Hardmax") >= 1
    with pytest.raises(CompileError) as e:
        from_onnx(raw.replace(b"Hardmax", b"Hard\xffax"), host_fallback=False)
    first = str(e.value).splitlines()[0]
    assert "internal error" not in str(e.value) and first.startswith("cannot import the ONNX model: ")
    assert "Hard\ufffdax" in str(e.value)
