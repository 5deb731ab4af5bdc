"""Networks with data movement between convolutions, quantised by onnxruntime in both forms and compiled
into one program: a ShuffleNetV2 unit (Split, two branches, Concat, the Reshape-Transpose-Reshape channel
shuffle) and a YOLO-style neck (nearest Resize x2, Concat with a skip, Pad, Slice); every output equal
to onnxruntime's."""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
import pytest

import compiler
from compiler import GraphModule, from_onnx, models
from compiler.models import Net

SHAPE = (1, 8, 10, 9)
LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def _shufflenet_unit(n: Net) -> None:
    x = n.conv(n.input, 16, 1)
    a = n._node("Split", [x, n._init("sp", np.array([8, 8], np.int64))], (1, 8, 10, 9), "half_a", axis=1)
    n.nodes[-1].output.append("half_b")
    n.shapes["half_b"] = (1, 8, 10, 9)
    b = n.conv(n.conv("half_b", 8, 1), 8, 3, groups=8, act=None)
    b = n.conv(b, 8, 1)
    y = n.concat([a, b], 1)
    y = n.reshape(y, (1, 2, 8, 10, 9))
    y = n._node("Transpose", [y], (1, 8, 2, 10, 9), perm=[0, 2, 1, 3, 4])
    y = n.reshape(y, (1, 16, 10, 9))
    n.output(n.conv(y, 8, 3))


def _yolo_neck(n: Net) -> None:
    x = n.conv(n.input, 12, 3)
    small = n.conv(x, 16, 3, stride=2)                                    # 5 x 5
    up = n._node("Resize", [small, "", n._init("sc", np.array([1, 1, 2, 2], np.float32))], (1, 16, 10, 10),
                 mode="nearest", coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    skip = n._node("Pad", [x, n._init("pads", np.array([0, 0, 0, 0, 0, 0, 0, 1], np.int64))], (1, 12, 10, 10),
                   mode="constant")
    y = n.concat([up, skip], 1)
    y = n._node("Slice", [y, n._init("st", np.array([1], np.int64)), n._init("en", np.array([9], np.int64)),
                          n._init("ax", np.array([3], np.int64))], (1, 28, 10, 8))
    n.output(n.conv(y, 8, 3))


NETS = {"shufflenet_unit": _shufflenet_unit, "yolo_neck": _yolo_neck}


@functools.lru_cache(maxsize=None)
def _quantised(case: str, fmt: str):
    net = Net(case, SHAPE, seed=3)
    NETS[case](net)
    return models.quantize(net.model(), fmt, seed=3, samples=3)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("case", sorted(NETS))
def test_network_matches_onnxruntime(case, fmt):
    model = _quantised(case, fmt)
    graph = from_onnx(model)
    kinds = {node.op.kind for node in graph.nodes}
    assert {"shufflenet_unit": {"slice", "concat", "transpose"}, "yolo_neck": {"resize", "pad", "slice"}}[case] <= kinds
    lib = compiler.build(graph)
    rng = np.random.default_rng(7)
    x = rng.standard_normal(SHAPE).astype(np.float32)
    m = GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    q = graph.values[graph.outputs[0]].quant
    got = q.quantize(m.get_output(0)).astype(int)
    runs = []
    for level in LEVELS:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(
            None, {model.graph.input[0].name: x})[0]
        runs.append(q.quantize(want).astype(int))
    if fmt == "qoperator":      # QOperator: the int8 output itself is onnxruntime's
        np.testing.assert_array_equal(got, runs[0])
    else:                       # QDQ: each element between onnxruntime's two levels' results
        assert ((np.minimum(*runs) <= got) & (got <= np.maximum(*runs))).all()
