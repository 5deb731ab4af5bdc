"""ONNX models of a conv's activation as x * act(x) (SiLU, HardSwish) and of a squeeze-excite block, as
onnxruntime's quantizer writes them, for the fusion tests; and the comparison with onnxruntime at both levels.

  self_product_model  QuantizeLinear -> QLinearConv -> (QLinearSigmoid | DQ -> HardSigmoid -> Q) ->
                      QLinearMul(conv output, activation) -> DequantizeLinear, built with onnx.helper
                      (any shape, no calibration: hypothesis draws them)
  se_block            a float depthwise conv -> x * act(x) -> squeeze-excite (GlobalAveragePool -> 1x1 conv
                      relu -> 1x1 conv -> act -> Mul by the channel gate) -> 1x1 projection conv, quantised
                      by compiler.models.quantize (QOperator or QDQ)
  run_both            the compiled network's int8 output and onnxruntime's at ORT_DISABLE_ALL and ORT_ENABLE_ALL
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import models
from compiler.models import Net

LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL")
ACTS = ("silu", "hardswish")


def self_product_model(shape, out_ch: int, act: str, rng: np.random.Generator, act_first: bool = False
                       ) -> onnx.ModelProto:
    """x -> Q -> QLinearConv 3x3 pad 1 -> c; c * act(c) by QLinearMul (act_first: act(c) as its first operand)."""
    c = shape[1]
    f = {"sx": 0.05, "sw": 0.02, "sc": float(rng.uniform(0.02, 0.08)), "ss": 1 / 256,
         "sy": float(rng.uniform(0.02, 0.1))}
    z = {"zx": int(rng.integers(-10, 10)), "zw": 0, "zc": int(rng.integers(-20, 20)), "zs": -128,
         "zy": int(rng.integers(-40, 0))}
    inits = [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in f.items()]
    inits += [numpy_helper.from_array(np.array(v, np.int8), k) for k, v in z.items()]
    inits += [numpy_helper.from_array(rng.integers(-90, 90, (out_ch, c, 3, 3)).astype(np.int8), "w"),
              numpy_helper.from_array(rng.integers(-800, 800, out_ch).astype(np.int32), "b")]
    node = helper.make_node
    nodes = [node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             node("QLinearConv", ["xq", "sx", "zx", "w", "sw", "zw", "sc", "zc", "b"], ["cq"], pads=[1, 1, 1, 1])]
    if act == "silu":
        nodes.append(node("QLinearSigmoid", ["cq", "sc", "zc", "ss", "zs"], ["aq"], domain="com.microsoft"))
    else:       # MobileNetV3's QOperator form: HardSigmoid stays float between DequantizeLinear and QuantizeLinear
        nodes += [node("DequantizeLinear", ["cq", "sc", "zc"], ["cf"]),
                  node("HardSigmoid", ["cf"], ["af"], alpha=1 / 6), node("QuantizeLinear", ["af", "ss", "zs"], ["aq"])]
    a, b = (("aq", "ss", "zs"), ("cq", "sc", "zc")) if act_first else (("cq", "sc", "zc"), ("aq", "ss", "zs"))
    nodes += [node("QLinearMul", [*a, *b, "sy", "zy"], ["yq"], domain="com.microsoft"),
              node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    out = [shape[0], out_ch, shape[2], shape[3]]
    g = helper.make_graph(nodes, "selfmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def _act(n: Net, x: str, act: str) -> str:
    """act(x) as its float node: Sigmoid, or HardSigmoid(alpha 1/6) as quant_pre_process writes HardSwish's."""
    if act == "silu":
        return n._node("Sigmoid", [x], n.shapes[x])
    return n._node("HardSigmoid", [x], n.shapes[x], alpha=1 / 6)


@functools.lru_cache(maxsize=None)
def se_block(fmt: str, act: str, shape: tuple = (1, 24, 13, 11), mid: int = 8, out: int = 40) -> onnx.ModelProto:
    """A depthwise conv -> x * act(x) -> squeeze-excite -> 1x1 projection, quantised by onnxruntime (memoised)."""
    n = Net(f"se_{act}", shape, 3)
    x = n.conv(n.input, shape[1], 3, 1, groups=shape[1], act=None)
    x = n.mul(x, _act(n, x, act))
    gate = _act(n, n.conv(n.conv(n.global_avg_pool(x), mid, 1, 1, act="relu"), shape[1], 1, 1, act=None), act)
    n.output(n.conv(n.mul(x, gate), out, 1, 1, act=None))
    return models.quantize(n.model(), fmt, seed=1, samples=3)


def run_both(m: onnx.ModelProto, lib, x: np.ndarray, races: bool = True) -> tuple:
    """(the GraphModule run on x, race-checked; onnxruntime's outputs at each of LEVELS)."""
    mod = compiler.GraphModule(lib)
    mod.set_input(0, x)
    mod.run(check_races=races)
    return mod, [outs[0] for outs in ort_levels(m, x)]


def assert_as_ort(mod, g, m: onnx.ModelProto, x: np.ndarray, fmt: str) -> None:
    """Every output of the run as onnxruntime's: QOperator bit-exact at both LEVELS; QDQ inside the range of
    the two levels on every element (they may differ: an op in float32 at one, fused into an integer kernel
    at the other) and bit-exact where they agree."""
    levels = ort_levels(m, x)
    for k in range(len(levels[0])):
        got = mod.get_output(k, quantized=True)
        want = [g.values[g.outputs[k]].quant.quantize(outs[k]) for outs in levels]
        if fmt == "qoperator":
            for level, w in zip(LEVELS, want):
                np.testing.assert_array_equal(got, w, err_msg=f"{level} output {k}")
            continue
        lo, hi = np.minimum(*want), np.maximum(*want)
        assert ((lo <= got) & (got <= hi)).all(), f"output {k}: {int(((got < lo) | (got > hi)).sum())} outside"


def ort_levels(m: onnx.ModelProto, x: np.ndarray) -> list[list[np.ndarray]]:
    """onnxruntime's outputs of m on x, every output, at each of LEVELS (one thread)."""
    want = []
    for level in LEVELS:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        opts.intra_op_num_threads = 1
        sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        want.append(sess.run(None, {sess.get_inputs()[0].name: x}))
    return want
