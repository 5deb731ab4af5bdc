"""Models with nodes the NPU does not run, for the host fallback tests: quantised by onnxruntime from float
graphs written with compiler.models.Net, and the sessions they are compared with.

  layernorm   conv -> LayerNormalization (over C, H and W) -> conv
  attention   conv -> tokens -> q, k, v (dense) -> softmax(q k^T) v between activations -> conv
  detector    conv -> conv -> TopK of the flattened map, NonZero of a threshold (a detector's tail)
"""
from __future__ import annotations

import functools

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

import compiler
from compiler import models
from compiler.models import Net

SHAPE = (1, 4, 4, 4)
LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def layernorm(net: Net) -> None:
    c = net.conv(net.input, 8, 3, 1)
    s = net._init("ln.s", net.rng.uniform(0.5, 1.5, (8, 4, 4)).astype(np.float32))
    b = net._init("ln.b", net.rng.normal(0, 0.1, (8, 4, 4)).astype(np.float32))
    ln = net._node("LayerNormalization", [c, s, b], net.shapes[c], "ln", axis=1)
    net.output(net.conv(ln, 8, 3, 1))


def attention(net: Net) -> None:
    c = net.conv(net.input, 8, 3, 1)
    t = net._node("Transpose", [net.reshape(c, (8, 16))], (16, 8), perm=[1, 0])
    q, k, v = (net.matmul(t, 8) for _ in range(3))
    kt = net._node("Transpose", [k], (8, 16), perm=[1, 0])
    s = net._node("MatMul", [q, kt], (16, 16), "scores")
    p = net._node("Softmax", [s], (16, 16), "softmax", axis=-1)
    o = net._node("MatMul", [p, v], (16, 8), "mix")
    back = net.reshape(net._node("Transpose", [o], (8, 16), perm=[1, 0]), (1, 8, 4, 4))
    net.output(net.conv(back, 8, 3, 1))


def detector(net: Net) -> None:
    flat = net.reshape(net.conv(net.conv(net.input, 8, 3, 1), 8, 3, 1, act=None), (1, 128))
    k = net._init("k", np.array([5], np.int64))
    net.nodes.append(helper.make_node("TopK", [flat, k], ["scores", "boxes"], name="topk", axis=-1))
    net.shapes.update(scores=(1, 5), boxes=(1, 5))
    keep = net._node("Greater", [flat, net._init("threshold", np.float32(0.5))], (1, 128), "keep")
    net.output("scores", "boxes", net._node("NonZero", [keep], (2, 0), "picked"))


def _detector_types(model) -> None:
    """The detector's int64 outputs, NonZero's count of a size known only at run time."""
    for o in model.graph.output:
        if o.name in ("boxes", "picked"):
            o.type.tensor_type.elem_type = TensorProto.INT64
        if o.name == "picked":
            o.type.tensor_type.shape.dim[1].dim_param = "found"


BUILDERS = {"layernorm": layernorm, "attention": attention, "detector": detector}


def model(name: str, fmt: str = "qoperator"):
    """One of BUILDERS' networks, quantised by onnxruntime (QOperator or QDQ, int8, per channel)."""
    net = Net(name, SHAPE, 1)
    BUILDERS[name](net)
    float_model = net.model()
    if name == "detector":
        _detector_types(float_model)
    return models.quantize(float_model, fmt, seed=1, samples=3)


def ort_outputs(model, x: np.ndarray, level) -> list[np.ndarray]:
    """onnxruntime's outputs of the whole model at one optimisation level."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


@functools.lru_cache(maxsize=None)
def compiled(name: str, fmt: str = "qoperator"):
    """(the quantised model, its HostedGraph, its HostedLibrary), built once per process."""
    m = model(name, fmt)
    hosted = compiler.from_onnx(m)
    return m, hosted, compiler.build(hosted)


def inputs(seed: int) -> np.ndarray:
    """A random input: standard normal, at a random scale (some saturate the input's quantisation)."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(SHAPE) * rng.choice([0.5, 1.0, 4.0])).astype(np.float32)
