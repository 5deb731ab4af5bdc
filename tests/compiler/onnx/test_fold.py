"""Shape arithmetic and constant subgraphs folded at import (compiler.onnx.fold).

The chains are those torch.onnx.export writes (torch is not a test dependency, so they are written
node by node with onnx.helper as the exporter writes them): `x.view(x.size(0), -1)` and the shape
arithmetic of ShuffleNet's channel shuffle (Shape, Gather, Div, Unsqueeze, Concat, Reshape).  Each
model is quantised by onnxruntime in both forms and checked element for element against it.
"""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from compiler import CompileError, from_onnx, models
from compiler.models import Net

from tests.onnx_helpers import agreement

FMTS = ("qoperator", "qdq")


def _const(net: Net, name: str, value) -> str:
    """A Constant node, as the exporter writes scalars and small lists."""
    a = np.asarray(value, np.int64)
    net.nodes.append(helper.make_node("Constant", [], [name], name=name, value=numpy_helper.from_array(a, name)))
    net.shapes[name] = a.shape
    return name


def _dim(net: Net, x: str, axis: int, tag: str) -> str:
    """Shape(x) -> Gather(axis) -> Unsqueeze(0): one dimension of x as a 1-element int64 tensor."""
    s = net._node("Shape", [x], (len(net.shapes[x]),), f"{tag}_shape")
    g = net._node("Gather", [s, _const(net, f"{tag}_i", axis)], (), f"{tag}_gather", axis=0)
    return net._node("Unsqueeze", [g, _const(net, f"{tag}_ax", [0])], (1,), f"{tag}_unsq")


def view_flatten(net: Net) -> None:
    """conv, then x.view(x.size(0), -1), then a Gemm head."""
    x = net.conv(net.input, 6, 3, 1)
    n = _dim(net, x, 0, "n")
    shape = net._node("Concat", [n, _const(net, "minus1", [-1])], (2,), "view_shape", axis=0)
    flat = net._node("Reshape", [x, shape], (net.shapes[x][0], int(np.prod(net.shapes[x][1:]))), "view")
    net.output(net.gemm(flat, 5))


def shuffle_shapes(net: Net, groups: int = 2) -> None:
    """The shape arithmetic of a channel shuffle: view(n, g, c // g, h, w), then view(n, -1, h, w)."""
    x = net.conv(net.input, 8, 3, 1)
    n, c, h, w = net.shapes[x]
    dims = [_dim(net, x, k, f"d{k}") for k in range(4)]
    per = net._node("Div", [dims[1], _const(net, "groups", [groups])], (1,), "per_group")
    five = net._node("Concat", [dims[0], _const(net, "g", [groups]), per, dims[2], dims[3]], (5,), "shape5", axis=0)
    y = net._node("Reshape", [x, five], (n, groups, c // groups, h, w), "view5")
    back = net._node("Concat", [dims[0], _const(net, "m1", [-1]), dims[2], dims[3]], (4,), "shape4", axis=0)
    z = net._node("Reshape", [y, back], (n, c, h, w), "view4")
    net.output(net.conv(z, 4, 1, act=None))


def constant_subgraph(net: Net) -> None:
    """A reshape target computed from initializers only: Range, Mul, ReduceProd, Cast, Where, ConstantOfShape."""
    x = net.conv(net.input, 4, 3, 1)
    n, c, h, w = net.shapes[x]
    r = net._node("Range", [net._init("r0", np.array(1, np.int64)), net._init("r1", np.array(4, np.int64)),
                            net._init("r2", np.array(1, np.int64))], (3,), "range")          # [1, 2, 3]
    p = net._node("ReduceProd", [r], (1,), "prod", keepdims=1)                                  # [6]
    ones = net._node("ConstantOfShape", [net._init("two", np.array([2], np.int64))], (2,), "ones",
                     value=numpy_helper.from_array(np.array([1], np.int64)))                      # [1, 1]
    f = net._node("Cast", [net._init("hf", np.array([float(c * h * w)], np.float32))], (1,), "cast",
                  to=TensorProto.INT64)
    q = net._node("Div", [f, p], (1,), "per")                                                    # c*h*w / 6
    cond = net._node("Equal", [q, q], (1,), "eq")
    q = net._node("Where", [cond, q, _const(net, "never", [7])], (1,), "where")
    shape = net._node("Concat", [ones, p, q], (4,), "shape", axis=0)
    y = net._node("Reshape", [x, shape], (1, 1, 6, c * h * w // 6), "rs")
    net.output(net.flatten(y))


CHAINS = {f.__name__: f for f in (view_flatten, shuffle_shapes, constant_subgraph)}
SHAPES = {"view_flatten": (1, 3, 7, 5), "shuffle_shapes": (1, 3, 6, 9), "constant_subgraph": (1, 3, 6, 6)}


def _model(name: str, fmt: str):
    net = Net(name, SHAPES[name], seed=2)
    CHAINS[name](net)
    return models.quantize(net.model(), fmt, seed=2, samples=2)


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("name", sorted(CHAINS))
def test_shape_chains_fold_and_match_onnxruntime(name, fmt):
    model = _model(name, fmt)
    folded = {"Shape", "Gather", "Unsqueeze", "Range", "ReduceProd", "Div", "Where"}
    assert folded & {n.op_type for n in model.graph.node}, "the quantiser removed the chain"
    g = from_onnx(model)
    assert {n.op.kind for n in g.nodes} <= {"conv2d", "dense", "reshape", "requantize"}, [n.op.kind for n in g.nodes]
    a = agreement(model, g, seed=1, runs=2)
    assert a.end_elements > 0 and a.end_equal == a.end_elements, f"{name} {fmt}: {a}"


def test_view_target_is_the_exported_shape():
    g = from_onnx(_model("view_flatten", "qdq"))
    rs = next(n for n in g.nodes if n.op.kind == "reshape")
    assert g.values[rs.output].shape == (1, 6 * 7 * 5)


def test_expand_of_an_activation_is_refused_as_fold_only():
    net = Net("g", (1, 3, 6, 6), 0)
    x = net.conv(net.input, 4, 3, 1)
    net.output(net.conv(x, 4, 1))
    model = models.quantize(net.model(), "qdq", samples=1)
    dq = next(n for n in model.graph.node if n.op_type == "DequantizeLinear" and n.output[0].startswith("relu"))
    conv = next(n for n in model.graph.node if n.op_type == "Conv" and dq.output[0] in n.input)
    model.graph.initializer.append(numpy_helper.from_array(np.array([1, 4, 6, 6], np.int64), "to"))
    model.graph.node.insert(list(model.graph.node).index(conv),
                            helper.make_node("Expand", [dq.output[0], "to"], ["picked"], name="pick"))
    conv.input[0] = "picked"
    with pytest.raises(CompileError, match=r"node 'pick' \(Expand\): op type 'Expand' is folded at import only, "
                                           r"on constant inputs and shapes: input 0 is the dequantised tensor"):
        from_onnx(model, host_fallback=False)


def test_a_fold_too_large_is_refused():
    model = _model("view_flatten", "qdq")
    model.graph.initializer.append(numpy_helper.from_array(np.array([1 << 20, 1 << 20], np.int64), "huge"))
    model.graph.node.insert(0, helper.make_node("ConstantOfShape", ["huge"], ["big"], name="big"))
    model.graph.output.append(helper.make_tensor_value_info("big", TensorProto.FLOAT, None))
    with pytest.raises(CompileError, match=r"node 'big' \(ConstantOfShape\): would fold to a constant of "
                                           r"1099511627776 elements, too large"):
        from_onnx(model)
