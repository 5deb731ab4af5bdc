"""The ONNX front door agrees with onnxruntime about validity: what onnxruntime refuses, from_onnx refuses
with one line saying why (compiler/onnx/load.py check_model).  Each model is built with onnx.helper and
given to onnxruntime too, so a case onnxruntime accepts cannot hide here."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import from_onnx
from compiler.errors import CompileError

SHAPE = [1, 4, 6, 6]


def _init(name: str, value, dtype) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype=dtype), name)


def build(kind: str = "conv", *, opsets=(("", 17), ("com.microsoft", 1)), scale_shape=(), out_type=None,
          conv_attrs=None, same_names: bool = False) -> onnx.ModelProto:
    """float x -> QuantizeLinear -> QLinearConv (or QLinearAdd of x with itself) -> DequantizeLinear -> y;
    out_type set: the graph ends at the int8 tensor and declares it of that type."""
    inits = [_init("xs", np.full(scale_shape, 0.05), np.float32), _init("xz", 0, np.int8),
             _init("ys", 0.1, np.float32), _init("yz", 3, np.int8)]
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"], name="q")]
    if kind == "conv":
        w = np.random.default_rng(0).integers(-20, 20, (4, 4, 3, 3)).astype(np.int8)
        inits += [_init("w", w, np.int8), _init("ws", 0.02, np.float32), _init("wz", 0, np.int8)]
        attrs = {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], **(conv_attrs or {})}
        nodes.append(helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["yq"],
                                      name="conv", **attrs))
    else:
        nodes.append(helper.make_node("QLinearAdd", ["xq", "xs", "xz", "xq", "xs", "xz", "ys", "yz"], ["yq"],
                                      name="add", domain="com.microsoft"))
    if out_type is None:
        nodes.append(helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"], name="q" if same_names
                                      else "dq"))
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, SHAPE)
    else:
        out = helper.make_tensor_value_info("yq", out_type, SHAPE)
    graph = helper.make_graph(nodes, "front_door", [helper.make_tensor_value_info("x", TensorProto.FLOAT, SHAPE)],
                              [out], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 8
    return model


def ort_refuses(model: onnx.ModelProto) -> bool:
    """onnxruntime refuses to make a session of the model, or to run it, at both optimisation levels."""
    refused = []
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.log_severity_level = 4
        try:
            sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
            sess.run(None, {"x": np.zeros(SHAPE, np.float32)})
            refused.append(False)
        except Exception:       # noqa: BLE001 - onnxruntime's own exception types vary by failure
            refused.append(True)
    assert refused[0] == refused[1], "onnxruntime's verdict depends on the optimisation level"
    return refused[0]


@pytest.mark.parametrize("kind", ["conv", "add"])
def test_valid_models_are_accepted_by_both(kind):
    model = build(kind)
    assert not ort_refuses(model)
    from_onnx(model)
    from_onnx(model.SerializeToString())
    one = build(kind, scale_shape=(1,)) if kind == "conv" else None     # [1] where ORT allows it (QLinearConv)
    if one is not None:
        assert not ort_refuses(one)
        from_onnx(one)


def _no_default_opset():
    return build(opsets=(("com.microsoft", 1),))


REFUSED = [
    ("opset 1", lambda: build(opsets=(("", 1), ("com.microsoft", 1))), "opset 1 of the default domain"),
    ("opset 10000", lambda: build(opsets=(("", 10000), ("com.microsoft", 1))), "opset 10000 of the default domain"),
    ("no opset_import", lambda: build(opsets=()), "no opset_import for the default domain"),
    ("no default opset", _no_default_opset, "no opset_import for the default domain"),
    ("duplicate node names", lambda: build(same_names=True), "two nodes are named 'q'"),
    ("auto_pad with pads", lambda: build(conv_attrs={"auto_pad": "SAME_UPPER"}), "both auto_pad = SAME_UPPER and pads"),
    ("float output on int8", lambda: build(out_type=TensorProto.FLOAT), "differs from existing elem type"),
    ("float output on int8 of QLinearAdd", lambda: build("add", out_type=TensorProto.FLOAT),
     "is declared FLOAT, but the tensor is INT8"),
    ("[1] scale of QLinearAdd", lambda: build("add", scale_shape=(1,)), "has shape [1]: onnxruntime requires a scalar"),
    ("opset 9", lambda: build(opsets=(("", 9), ("com.microsoft", 1))), "opset 9 of the default domain"),
    ("com.microsoft opset 2", lambda: build("add", opsets=(("", 17), ("com.microsoft", 2))),
     "opset 2 of the domain com.microsoft"),
]


@pytest.mark.parametrize("make, words", [r[1:] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_models_onnxruntime_refuses_are_refused_in_one_line(make, words):
    model = make()
    assert ort_refuses(model)
    with pytest.raises(CompileError) as info:
        from_onnx(model)
    msg = str(info.value)
    assert words in msg and "\n" not in msg, msg


def test_checker_errors_are_one_line_naming_the_source(tmp_path):
    """A model the ONNX checker refuses (an IR version newer than it knows) gives its message on one line,
    with the file's name when it came from a file."""
    model = build()
    model.ir_version = 99
    assert ort_refuses(model)
    path = tmp_path / "m.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(CompileError) as info:
        from_onnx(path)
    msg = str(info.value)
    assert msg.startswith(f"{str(path)!r}") and "\n" not in msg and "not a valid ONNX model" in msg, msg


def test_the_check_leaves_the_model_as_it_was():
    """A graph output without a shape (onnxruntime allows it; the checker's structural pass does not) is
    accepted, and the model given is not changed by the check."""
    model = build()
    model.graph.output[0].type.tensor_type.ClearField("shape")
    before = model.SerializeToString()
    assert not ort_refuses(model)
    from_onnx(model)
    assert model.SerializeToString() == before
