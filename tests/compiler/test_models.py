"""compiler.models: the standard networks build, quantise (small inputs for speed) and import.

Observed agreement with onnxruntime under arithmetic="fixed", per node on
onnxruntime's own inputs: ResNet-18, ResNet-50 and MobileNetV2, both formats,
>= 99.99% of elements equal at size 32 and 99.999% at 224, never more than 1 step.
End to end the logits differ by up to a few steps: a 1-step difference early on
propagates (docs/runtime.md has the figures).
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest

from compiler import CompileError, from_onnx, models

from tests.onnx_helpers import agreement

SIZE = 32
# name -> (conv2d, add, max_pool2d, dense) node counts in the imported graph
STRUCTURE = {"resnet18": (20, 8, 1, 1), "resnet50": (53, 16, 1, 1), "mobilenetv2": (52, 10, 0, 1)}


@functools.lru_cache(maxsize=None)
def built(name: str, fmt: str) -> onnx.ModelProto:
    return models.build(name, fmt, size=SIZE, classes=10, seed=0, samples=2)


def test_names():
    assert models.names() == ("resnet18", "resnet50", "mobilenetv2")


@pytest.mark.parametrize("fmt", models.FORMATS)
@pytest.mark.parametrize("name", models.names())
def test_network_builds_quantises_and_imports(name, fmt):
    model = built(name, fmt)
    graph = from_onnx(model, arithmetic="fixed")
    assert graph.validate() is graph
    kinds = [n.op.kind for n in graph.nodes]
    assert tuple(kinds.count(k) for k in ("conv2d", "add", "max_pool2d", "dense")) == STRUCTURE[name]
    assert graph.values[graph.inputs[0]].shape == (1, 3, SIZE, SIZE)
    assert [graph.values[o].shape for o in graph.outputs] == [(1, 10)]
    assert graph.values[graph.outputs[0]].quant is not None


@pytest.mark.parametrize("fmt", models.FORMATS)
@pytest.mark.parametrize("name", models.names())
def test_network_matches_onnxruntime_node_by_node(name, fmt):
    model = built(name, fmt)
    a = agreement(model, from_onnx(model, arithmetic="fixed"), seed=1, runs=1)
    assert a.max_step <= 1 and a.equal_fraction >= 0.999, f"{name} {fmt}: {a}"


@pytest.mark.parametrize("fmt", models.FORMATS)
def test_tiny(fmt):
    model = models.tiny(fmt)
    g = from_onnx(model, arithmetic="fixed")
    assert [n.op.kind for n in g.nodes] == ["conv2d", "max_pool2d", "conv2d", "add", "conv2d", "sum_pool2d",
                                            "requantize", "reshape", "dense"]
    a = agreement(model, g, seed=2)
    assert a.max_step <= 1 and a.equal_fraction >= 0.99, a


def test_float_models_are_standard_shapes_and_seeded():
    m = models.float_model("resnet18", size=64, classes=7, seed=3)
    onnx.checker.check_model(m)
    assert [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim] == [1, 3, 64, 64]
    assert [d.dim_value for d in m.graph.output[0].type.tensor_type.shape.dim] == [1, 7]
    assert models.float_model("resnet18", 64, 7, 3).SerializeToString() == m.SerializeToString()
    assert models.float_model("resnet18", 64, 7, 4).SerializeToString() != m.SerializeToString()
    ops = [n.op_type for n in models.float_model("mobilenetv2", 32, 10).graph.node]
    assert ops.count("Clip") == 35 and "BatchNormalization" not in ops     # ReLU6 everywhere, BN folded away


def test_he_initialisation():
    m = models.float_model("resnet50", size=32, classes=10, seed=0)
    w = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    conv = w["conv2.w"]                        # the first bottleneck's 1x1, fan-in 64
    assert conv.shape == (64, 64, 1, 1) and abs(conv.std() - np.sqrt(2 / 64)) < 0.01


@pytest.mark.parametrize("call, match", [
    (lambda: models.build("vgg16"), "unknown network 'vgg16'"),
    (lambda: models.float_model("resnet18", size=16), "size must be an integer >= 32, got 16"),
    (lambda: models.float_model("resnet18", classes=0), "classes must be an integer >= 1"),
    (lambda: models.quantize(models.float_model("tiny", 8), "qint"), "fmt must be one of"),
    (lambda: models.tiny(samples=0), "samples must be an integer >= 1"),
])
def test_errors(call, match):
    with pytest.raises(CompileError, match=match):
        call()
