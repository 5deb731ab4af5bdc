"""ops.softmax (compiler/ops/softmax.py): its numpy reference against onnxruntime's QLinearSoftmax on every
element, at ORT_ENABLE_ALL and ORT_DISABLE_ALL, on random ranks, shapes, scales and zero points; refusals."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from compiler import CompileError, ops

LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def qlinear_softmax(x: np.ndarray, x_scale: float, x_zp: int, y_scale: float, y_zp: int, level) -> np.ndarray:
    """onnxruntime's QLinearSoftmax over the last axis of int8 x."""
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [x_scale]),
             helper.make_tensor("xz", TensorProto.INT8, [], [x_zp]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [y_scale]),
             helper.make_tensor("yz", TensorProto.INT8, [], [y_zp])]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=-1, opset=13)
    graph = helper.make_graph([node], "softmax", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


def _case(rng: np.random.Generator):
    rank = int(rng.integers(1, 5))
    shape = tuple(int(v) for v in rng.integers(1, 7, size=rank - 1)) + (int(rng.choice([1, 2, 16, 17, 33,
                                                                                          int(rng.integers(1, 90))])),)
    x = rng.integers(-128, 128, size=shape).astype(np.int8)
    x_scale = float(np.float32(rng.choice([rng.uniform(0.002, 0.05), rng.uniform(0.05, 0.6)])))
    y_scale = float(np.float32(rng.choice([1 / 256, 1 / 255, rng.uniform(0.001, 0.05)])))
    y_zp = int(rng.choice([-128, 0, int(rng.integers(-128, 128))]))
    return x, x_scale, int(rng.integers(-128, 128)), y_scale, y_zp


@pytest.mark.parametrize("seed", range(6))
def test_softmax_is_onnxruntime_qlinear_softmax_on_every_element(seed):
    rng = np.random.default_rng(seed)
    for _ in range(25):
        x, x_scale, x_zp, y_scale, y_zp = _case(rng)
        mine = ops.softmax(x.shape, x_scale=x_scale, y_scale=y_scale, zp_out=y_zp).reference(x)
        for level in LEVELS:
            theirs = qlinear_softmax(x, x_scale, x_zp, y_scale, y_zp, level)
            assert np.array_equal(mine, theirs), (x.shape, x_scale, y_scale, y_zp, level,
                                                  np.argwhere(mine != theirs)[:4].tolist())


def test_softmax_saturates_where_the_float32_product_overflows():
    """A row of one element: e[0] * floor(1 / y_scale) is inf in float32, onnxruntime saturates at 127."""
    x = np.array([[-7], [3], [65]], np.int8)
    mine = ops.softmax(x.shape, x_scale=0.38, y_scale=1 / 256, zp_out=-128).reference(x)
    assert (mine == 127).all()
    for level in LEVELS:
        assert np.array_equal(mine, qlinear_softmax(x, 0.38, 0, 1 / 256, -128, level))


def test_softmax_table_is_onnxruntimes_exponentials():
    op = ops.softmax((2, 16), x_scale=0.1, y_scale=1 / 256)
    t = op.table()
    assert t.dtype == np.float32 and t.shape == (256,)
    assert (np.diff(t) > 0).all()                     # increasing in x - max
    shift = (np.log(np.float64(np.finfo(np.float32).max) / 16) - 5) / np.float64(np.float32(0.1))
    assert t[255] == np.float32(np.exp(shift * np.float64(np.float32(0.1))))


@pytest.mark.parametrize("kw, match", [
    (dict(shape=(), x_scale=0.1, y_scale=0.1), "at least one dimension"),
    (dict(shape=(2, 3), x_scale=0.0, y_scale=0.1), "x_scale"),
    (dict(shape=(2, 3), x_scale=0.1, y_scale=float("inf")), "y_scale"),
    (dict(shape=(2, 3), x_scale=0.1, y_scale=0.1, zp_out=128), "zp_out"),
    (dict(shape=(2, 0), x_scale=0.1, y_scale=0.1), "shape"),
])
def test_softmax_refusals_name_the_argument(kw, match):
    shape = kw.pop("shape")
    with pytest.raises(CompileError, match=match):
        ops.softmax(shape, **kw)


def qdq_softmax(x: np.ndarray, x_scale: float, y_scale: float, y_zp: int, level) -> np.ndarray:
    """onnxruntime on DequantizeLinear -> Softmax(axis=-1) -> QuantizeLinear of int8 x."""
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [x_scale]),
             helper.make_tensor("xz", TensorProto.INT8, [], [0]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [y_scale]),
             helper.make_tensor("yz", TensorProto.INT8, [], [y_zp])]
    nodes = [helper.make_node("DequantizeLinear", ["x", "xs", "xz"], ["f"]),
             helper.make_node("Softmax", ["f"], ["g"], axis=-1),
             helper.make_node("QuantizeLinear", ["g", "ys", "yz"], ["y"])]
    graph = helper.make_graph(nodes, "qdq_softmax", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)], inits)
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None,
                                                                                                       {"x": x})[0]


def test_qdq_softmax_is_the_reference_when_fused_and_within_one_code_when_not():
    """At ORT_ENABLE_ALL onnxruntime fuses DQ -> Softmax -> Q into QLinearSoftmax: the reference exactly.
    At ORT_DISABLE_ALL it runs MLAS's float Softmax, then quantises: a code apart on some elements (so the
    two levels differ from each other there too), never more."""
    rng = np.random.default_rng(7)
    differ = total = 0
    for _ in range(40):
        x, x_scale, _, y_scale, y_zp = _case(rng)
        mine = ops.softmax(x.shape, x_scale=x_scale, y_scale=y_scale, zp_out=y_zp).reference(x)
        assert np.array_equal(mine, qdq_softmax(x, x_scale, y_scale, y_zp, LEVELS[0]))
        unfused = qdq_softmax(x, x_scale, y_scale, y_zp, LEVELS[1]).astype(np.int32)
        assert np.abs(unfused - mine).max() <= 1
        differ, total = differ + int(np.sum(unfused != mine)), total + x.size
    assert differ < total // 20


def test_softmax_over_another_axis_is_the_rows_along_it():
    """axis=1 of [1, 16, 4, A] (YOLOv8's DFL): onnxruntime's QLinearSoftmax at opset 13 transposes the axis
    last; the reference equals it on every element at both levels."""
    rng = np.random.default_rng(11)
    x = rng.integers(-128, 128, (1, 16, 4, 37)).astype(np.int8)
    op = ops.softmax(x.shape, x_scale=0.07, y_scale=1 / 256, zp_out=-128, axis=1)
    assert op.row == 16 and op.view == (1, 16, 4 * 37)
    for level in LEVELS:
        assert np.array_equal(op.reference(x), qlinear_softmax_axis(x, 0.07, 3, 1 / 256, -128, 1, level))
    with pytest.raises(CompileError, match="axis = 4 is out of range"):
        ops.softmax(x.shape, x_scale=0.07, y_scale=1 / 256, axis=4)


def qlinear_softmax_axis(x, x_scale, x_zp, y_scale, y_zp, axis, level):
    """onnxruntime's QLinearSoftmax (opset 13 semantics) over `axis` of int8 x."""
    inits = [helper.make_tensor("xs", TensorProto.FLOAT, [], [x_scale]),
             helper.make_tensor("xz", TensorProto.INT8, [], [x_zp]),
             helper.make_tensor("ys", TensorProto.FLOAT, [], [y_scale]),
             helper.make_tensor("yz", TensorProto.INT8, [], [y_zp])]
    node = helper.make_node("QLinearSoftmax", ["x", "xs", "xz", "ys", "yz"], ["y"], domain="com.microsoft",
                            axis=axis, opset=13)
    graph = helper.make_graph([node], "softmax", [helper.make_tensor_value_info("x", TensorProto.INT8, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.INT8, x.shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13),
                                                    helper.make_opsetid("com.microsoft", 1)])
    so = ort.SessionOptions()
    so.graph_optimization_level = level
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"]).run(None,
                                                                                                       {"x": x})[0]
