"""Shared pieces of the ONNX tests: quantised test models and the comparison with onnxruntime.

`agreement(model, graph)` runs onnxruntime on the quantised model and the graph's
numpy reference on the same int8 inputs, and compares them two ways:
  per node  - each node computed on onnxruntime's own int8 inputs (so one early
              rounding difference does not spread), against onnxruntime's output;
  end to end - the graph's outputs against onnxruntime's outputs, from a session on the
              model exactly as given: exposing a QDQ group's QuantizeLinear output as a
              graph output stops onnxruntime fusing the group into QLinearConv, and it then
              runs the group in float (a tie-near element can round one step apart), so the
              per-node session is not the model's own arithmetic.
Differences are in output steps (int8 units).

`quantised(case, fmt)` builds one of the small test networks (NETWORKS) with compiler.models.Net and
quantises it with onnxruntime (memoised); `run_ort` and the `qlinear_*` wrappers run a single node on
onnxruntime's CPU provider.
"""
from __future__ import annotations

import functools
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from compiler import models
from compiler.graph import Graph
from compiler.models import Net
from compiler.onnx.state import as_int8


@dataclass
class Agreement:
    """Per-node and end-to-end differences between the graph's reference and onnxruntime."""

    elements: int = 0          # per-node elements compared
    equal: int = 0
    max_step: int = 0          # largest |difference| per node, in output steps
    worst: str = ""            # the node where it happened
    end_elements: int = 0
    end_equal: int = 0
    end_max_step: int = 0
    nodes: dict = field(default_factory=dict)   # node name -> (elements, equal, max step)

    @property
    def equal_fraction(self) -> float:
        return self.equal / max(1, self.elements)

    @property
    def end_equal_fraction(self) -> float:
        return self.end_equal / max(1, self.end_elements)

    def __str__(self) -> str:
        return (f"per node: {self.equal}/{self.elements} equal ({100 * self.equal_fraction:.3f}%), max "
                f"{self.max_step} step(s) at {self.worst or '-'}; end to end: {self.end_equal}/"
                f"{self.end_elements} equal ({100 * self.end_equal_fraction:.3f}%), max {self.end_max_step}")


# The input holding the output's zero point, for each op writing a quantised tensor (others keep their input's type).
_OUT_ZP = {"QuantizeLinear": 2, "QLinearConv": 7, "QLinearMatMul": 7, "QGemm": 8, "QLinearAdd": 7, "QLinearMul": 7,
           "QLinearConcat": 1, "QLinearAveragePool": 4, "QLinearGlobalAveragePool": 4}


def quantised_type(model: onnx.ModelProto, name: str) -> int:
    """The element type (INT8 or UINT8) of a quantised tensor of the model, from its zero points."""
    inits = {t.name: t.data_type for t in model.graph.initializer}
    writer = {o: n for n in model.graph.node for o in n.output}
    while name in writer:
        node = writer[name]
        k = _OUT_ZP.get(node.op_type)
        if k is not None:
            return inits.get(node.input[k], TensorProto.INT8) if k < len(node.input) else TensorProto.UINT8
        name = node.input[0]
    return next((vi.type.tensor_type.elem_type for vi in model.graph.input if vi.name == name), TensorProto.INT8)


def session(model: onnx.ModelProto, extra_outputs: list[str] = ()) -> ort.InferenceSession:
    """An onnxruntime CPU session on `model`, with quantised tensors `extra_outputs` exposed as outputs."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    have = {o.name for o in m.graph.output}
    for name in extra_outputs:
        if name not in have:
            m.graph.output.append(helper.make_tensor_value_info(name, quantised_type(model, name), None))
            have.add(name)
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    return ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def random_inputs(graph: Graph, rng: np.random.Generator) -> tuple[dict, dict]:
    """(int8 inputs, float inputs that quantise exactly to them) for every graph input."""
    q, x = {}, {}
    for name in graph.inputs:
        v = graph.values[name]
        q[name] = rng.integers(-128, 128, v.shape, dtype=np.int8)
        x[name] = v.quant.dequantize(q[name]) if v.quant is not None else q[name]
    return q, x


def agreement(model: onnx.ModelProto, graph: Graph, seed: int = 0, runs: int = 2) -> Agreement:
    """Compare graph.evaluate with onnxruntime on `runs` random inputs (see the module docstring)."""
    rng = np.random.default_rng(seed)
    tapped = {n.name: n.info["onnx_outputs"][0] for n in graph.nodes if n.info.get("onnx_outputs")}
    sess = session(model, sorted(set(tapped.values())))
    names = [o.name for o in sess.get_outputs()]
    untapped = session(model)
    onnx_outputs = [o.name for o in model.graph.output]
    result = Agreement()
    for _ in range(runs):
        q, x = random_inputs(graph, rng)
        got = {k: as_int8(v) if v.dtype == np.uint8 else v for k, v in zip(names, sess.run(None, x))}
        ends_ort = {k: as_int8(v) if v.dtype == np.uint8 else v for k, v in zip(onnx_outputs, untapped.run(None, x))}
        forced = {_node(graph, n).output: got[t] for n, t in tapped.items()}
        mine = graph.evaluate(q, forced=forced)
        for n, t in tapped.items():
            _tally(result, n, mine[_node(graph, n).output], got[t])
        ends = graph.reference(q)
        for value, onnx_name in zip(graph.outputs, onnx_outputs):
            want = ends_ort[onnx_name]
            if want.dtype != np.int8:
                want = graph.values[value].quant.quantize(want)
            d = np.abs(ends[graph.outputs.index(value)].astype(np.int64) - want.astype(np.int64))
            result.end_elements += d.size
            result.end_equal += int((d == 0).sum())
            result.end_max_step = max(result.end_max_step, int(d.max()))
    return result


def _node(graph: Graph, name: str):
    return next(n for n in graph.nodes if n.name == name)


def _tally(r: Agreement, node: str, mine: np.ndarray, theirs: np.ndarray) -> None:
    d = np.abs(mine.astype(np.int64) - theirs.astype(np.int64))
    e, eq, mx = r.nodes.get(node, (0, 0, 0))
    r.nodes[node] = (e + d.size, eq + int((d == 0).sum()), max(mx, int(d.max())))
    r.elements += d.size
    r.equal += int((d == 0).sum())
    if d.max() > r.max_step:
        r.max_step, r.worst = int(d.max()), node


def nnpc_compile_tiny(tmp_path: Path, *flags: str, out: str = "t.nnp") -> tuple[subprocess.CompletedProcess, Path]:
    """`nnpc compile` (run as `python -m compiler`) of the tiny QOperator model, saved once under tmp_path,
    with `flags`: (the finished process, its text output captured; the .nnp written)."""
    from compiler import models

    path = tmp_path / "tiny.onnx"
    if not path.exists():
        onnx.save(models.tiny("qoperator"), str(path))
    target = tmp_path / out
    done = subprocess.run([sys.executable, "-m", "compiler", "compile", str(path), "-o", str(target), *flags],
                          capture_output=True, text=True)
    return done, target


# ---------------------------------------------------------------- test networks, quantised by onnxruntime


SHAPE = (1, 3, 12, 12)


def convs(n: Net) -> None:
    x = n.conv(n.input, 8, 3, 2)                       # stride 2
    x = n.conv(x, 8, 3, 1, dilation=2)                 # dilation 2
    x = n.conv(x, 8, 3, 1, groups=2)                   # groups
    x = n.conv(x, 8, 3, 1, groups=8, act="relu6")      # depthwise, ReLU6 folded into the range
    n.output(n.conv(x, 6, 1, act=None, bias=False))    # 1x1, no bias


def residual(n: Net) -> None:
    x = n.conv(n.input, 8, 3, 1)
    y = n.conv(n.conv(x, 8, 3, 1), 8, 3, 1, act=None)
    n.output(n.add(y, x, act="relu"))


def pools(n: Net) -> None:
    x = n.conv(n.input, 8, 3, 1)
    m = n.max_pool(x, 3, 2, 1)                         # padded max pool
    a = n.avg_pool(x, 3, 3, 0)                         # odd window, no padding
    g = n.flatten(n.global_avg_pool(m))
    n.output(a, n.gemm(g, 10))


def dense(n: Net) -> None:
    x = n.conv(n.input, 8, 3, 1, act="relu6")
    y = n.conv(x, 8, 1, act=None)
    cat = n.concat([x, n.mul(x, y), y])                # three inputs with three different scales
    g = n.flatten(n.global_avg_pool(n.max_pool(cat, 3, 2, 1)))
    n.output(n.matmul(g, 5), n.gemm(g, 7, act="relu"))


def kept_activations(n: Net) -> None:
    x = n.conv(n.input, 8, 3, 1, act=None)
    r = n.relu(x)                                      # x has two readers: the Relu stays in the graph
    y = n.add(x, n.conv(r, 8, 3, 1, act=None))
    n.output(n.reshape(y, (1, -1)), n.clip(y, -1.0, 2.0))


CASES = {f.__name__: f for f in (convs, residual, pools, dense, kept_activations)}


def _even_avg(n: Net) -> None:
    n.output(n.avg_pool(n.conv(n.input, 8, 3, 1), 2, 2, 0))


def _padded_avg(n: Net) -> None:
    n.output(n.avg_pool(n.conv(n.input, 8, 3, 1), 3, 1, 1, count_include_pad=0),
             n.avg_pool(n.conv(n.input, 8, 3, 1), 3, 1, 1, count_include_pad=1))


# Networks for the documented approximations of fixed arithmetic (not in CASES).
NETWORKS = {**CASES, "even_avg": _even_avg, "padded_avg": _padded_avg}


@functools.lru_cache(maxsize=None)
def quantised(case: str, fmt: str, per_channel: bool = True, shape=SHAPE, seed: int = 1, activations: str = "int8",
              weights: str = "int8") -> onnx.ModelProto:
    net = Net(case, shape, seed)
    NETWORKS[case](net)
    return models.quantize(net.model(), fmt, seed=seed, per_channel=per_channel, samples=3, activations=activations,
                           weights=weights)


# ---------------------------------------------------------------- one node on onnxruntime


F32 = np.float32


I8 = TensorProto.INT8


def run_ort(op_type: str, inputs: dict[str, np.ndarray], consts: dict[str, np.ndarray], order: list[str],
            out_type=I8, domain: str = "", **attrs) -> np.ndarray:
    """Run one node op_type(order...) with `inputs` fed and `consts` as initializers; its only output."""
    infos = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
             for k, v in inputs.items()]
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in consts.items()]
    node = helper.make_node(op_type, order, ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], op_type, infos, [helper.make_tensor_value_info("y", out_type, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, inputs)[0]


def qlinear_conv(x, w, bias, sx, zx, sw, sy, zy, *, stride, pad, dil, groups) -> np.ndarray:
    consts = {"sx": F32(sx), "zx": np.int8(zx), "w": w, "sw": np.asarray(sw, F32),
              "zw": np.zeros(np.shape(sw), np.int8), "sy": F32(sy), "zy": np.int8(zy)}
    order = ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy"]
    if bias is not None:
        consts["b"] = np.asarray(bias, np.int32)
        order.append("b")
    return run_ort("QLinearConv", {"x": x}, consts, order, group=groups, strides=list(stride), pads=list(pad),
                   dilations=list(dil))


def qlinear_binary(op_type: str, a, b, sa, za, sb, zb, sy, zy, dtype=np.int8) -> np.ndarray:
    """One QLinearAdd / QLinearMul on onnxruntime; dtype: the tensors' and zero points' (int8 or uint8)."""
    consts = {"sa": F32(sa), "za": dtype(za), "sb": F32(sb), "zb": dtype(zb), "sy": F32(sy), "zy": dtype(zy)}
    return run_ort(op_type, {"a": a, "b": b}, consts, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"],
                   out_type=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), domain="com.microsoft")


def qlinear_pool(op_type: str, x, sx, zx, sy, zy, dtype=np.int8, **attrs) -> np.ndarray:
    """One QLinearAveragePool / QLinearGlobalAveragePool on onnxruntime; dtype as for qlinear_binary."""
    consts = {"sx": F32(sx), "zx": dtype(zx), "sy": F32(sy), "zy": dtype(zy)}
    return run_ort(op_type, {"x": x}, consts, ["x", "sx", "zx", "sy", "zy"],
                   out_type=helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), domain="com.microsoft", **attrs)


def linear_resize_model(x_shape, out_shape, mode: str, form: str, *, scales=None, sx=0.05, zx=-3, sy=0.07, zy=5,
                        dtype: int = I8) -> onnx.ModelProto:
    """x -> Resize(linear, mode) -> y, by `sizes` (or by `scales` when given), the input `dtype`, in one of
    three forms: "int8" (the Resize on the int8 tensor), "qdq" (DequantizeLinear(sx, zx) -> Resize ->
    QuantizeLinear(sy, zy)), "conv" (an identity 1x1 QLinearConv first: onnxruntime's layout pass then runs the
    int8 Resize in NHWC, in fixed point)."""
    npdt = helper.tensor_dtype_to_np_dtype(dtype).type
    inits = [helper.make_tensor("roi", TensorProto.FLOAT, [0], [])]
    if scales is None:
        inits.append(numpy_helper.from_array(np.asarray(out_shape, np.int64), "sizes"))
        resize_in = ["", "sizes"]
    else:
        inits.append(numpy_helper.from_array(np.asarray(scales, F32), "scales"))
        resize_in = ["scales"]
    src, nodes = "x", []
    if form == "qdq":
        inits += [numpy_helper.from_array(F32(sx), "sx"), numpy_helper.from_array(npdt(zx), "zx"),
                  numpy_helper.from_array(F32(sy), "sy"), numpy_helper.from_array(npdt(zy), "zy")]
        nodes.append(helper.make_node("DequantizeLinear", ["x", "sx", "zx"], ["xd"]))
        src = "xd"
    elif form == "conv":
        c = x_shape[1]
        inits += [numpy_helper.from_array(F32(1), "s1"), numpy_helper.from_array(npdt(0), "z0"),
                  numpy_helper.from_array(np.eye(c, dtype=np.int8).reshape(c, c, 1, 1), "w"),
                  numpy_helper.from_array(np.int8(0), "wz")]
        nodes.append(helper.make_node("QLinearConv", ["x", "s1", "z0", "w", "s1", "wz", "s1", "z0"], ["xc"]))
        src = "xc"
    out = "yf" if form == "qdq" else "y"
    nodes.append(helper.make_node("Resize", [src, "roi"] + resize_in, [out], mode="linear",
                                  coordinate_transformation_mode=mode))
    if form == "qdq":
        nodes.append(helper.make_node("QuantizeLinear", ["yf", "sy", "zy"], ["y"]))
    graph = helper.make_graph(nodes, "resize_linear", [helper.make_tensor_value_info("x", dtype, list(x_shape))],
                              [helper.make_tensor_value_info("y", dtype, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])
    model.ir_version = 9
    return model


def ort_levels(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The model's outputs from onnxruntime at ORT_ENABLE_ALL and at ORT_DISABLE_ALL (one thread each)."""
    out = []
    for level in (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL):
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        out.append(sess.run(None, feeds))
    return out[0], out[1]
