"""compiler.from_onnx: int8 ONNX models (onnxruntime's static quantizer) to a compiler Graph.

Both formats that `onnxruntime.quantization.quantize_static` writes are read:
QOperator (QLinearConv, QGemm, QLinearAdd, ... between a QuantizeLinear at the
input and a DequantizeLinear at the output) and QDQ (float Conv, Gemm, Add, ...
each between DequantizeLinear and QuantizeLinear nodes).  The importer tracks,
for every ONNX tensor, what it is in integer terms:

  _Q        an int8 (or int32) Value of the graph
  _DQ       a float tensor that is a dequantised Value (DequantizeLinear of a _Q)
  _Const    an initializer or Constant (weights, scales, zero points, shapes)
  _ConstDQ  a dequantised constant (QDQ weights and biases)
  _Float    a float graph input, waiting for its QuantizeLinear
  _Pending  the float result of Conv/Gemm/Add/... waiting for the QuantizeLinear
            that gives its output scale; Relu and Clip in between tighten its range

so that a QDQ group DQ -> Conv -> Q becomes the same conv2d node as a QLinearConv.
Layout ops (MaxPool, Flatten, Reshape) commute with per-tensor dequantisation
and act on the int8 Value directly.

Arithmetic: the mapping from ONNX scales to op keywords lives in one small
function per op family (_requant_args, _rescale_op, _add_args, _mul_args,
_avg_pool_ops, _global_pool_ops).  arithmetic="fixed" uses the integer
multiplier/shift keywords (compiler.quant, float64 ratio of the float32
scales); arithmetic="onnxruntime" the float32 forms of the ops, which match
onnxruntime's QLinear kernels bit for bit.
"""
from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np

from . import ops
from .errors import CompileError
from .graph import Graph, QuantParams
from .ops import Concat, Reshape
from .quant import ort_scale, quantize_multiplier, quantize_multipliers

ARITHMETIC = ("onnxruntime", "fixed")
MS = "com.microsoft"
INT8 = (-128, 127)

# ONNX op type -> what it becomes (the list quoted when a model uses anything else).
SUPPORTED = {
    "QuantizeLinear": "graph input quantisation; requantize; the output scale of a QDQ group",
    "DequantizeLinear": "graph output dequantisation; QDQ weights, biases and activations",
    "QLinearConv": "conv2d (groups, depthwise, stride, dilation, padding)",
    "Conv": "conv2d (QDQ)",
    "QLinearMatMul": "dense", "MatMul": "dense (QDQ)",
    "QGemm": "dense (com.microsoft)", "Gemm": "dense (QDQ)",
    "QLinearAdd": "add (com.microsoft)", "Add": "add (QDQ)",
    "QLinearMul": "mul (com.microsoft)", "Mul": "mul (QDQ)",
    "QLinearGlobalAveragePool": "global average pooling (com.microsoft)",
    "GlobalAveragePool": "global average pooling (QDQ)",
    "QLinearAveragePool": "average pooling (com.microsoft)", "AveragePool": "average pooling (QDQ)",
    "MaxPool": "max_pool2d (int8 or QDQ)",
    "Flatten": "reshape", "Reshape": "reshape",
    "Relu": "relu, or the output range of the op before it",
    "Clip": "clip, or the output range of the op before it",
    "Concat": "concat (inputs requantised to the output scale where they differ)",
    "QLinearConcat": "concat (com.microsoft)",
    "Identity": "nothing", "Constant": "a constant",
}
_DOMAIN = {"QLinearAdd", "QLinearMul", "QLinearGlobalAveragePool", "QLinearAveragePool", "QGemm",
           "QLinearConcat"}     # the com.microsoft ones; the rest are in the default domain


def from_onnx(model, *, arithmetic: str = "onnxruntime",
              dims: Mapping[str, int | tuple[int, ...]] | None = None) -> Graph:
    """A validated Graph from an int8 ONNX model (path, bytes or onnx.ModelProto).

    `dims` fixes symbolic dimensions: {"batch": 1} by dim_param name, or {"x": (1, 3, 224, 224)}
    by input name.  A range {"height": (32, 512)} (or a compiler.Dim) for a dim_param gives a
    compiler.dynamic_network.DynamicGraph instead, which build() makes one binary for the range.
    Raises CompileError listing every node that cannot be imported.
    """
    if arithmetic not in ARITHMETIC:
        raise CompileError(f"arithmetic must be one of {ARITHMETIC}, got {arithmetic!r}")
    onnx = _import_onnx()
    proto = _load(onnx, model)
    from .dynamic import network as dynamic_network
    fixed, ranges = dynamic_network.split_ranges(proto, dict(dims or {}))
    if ranges:
        return dynamic_network.from_onnx(proto, arithmetic, fixed, ranges)
    try:
        return _Importer(onnx, proto, arithmetic, dict(dims or {})).run()
    except CompileError:
        raise
    except Exception as exc:     # never a traceback for a bad model; the message says it is our bug
        raise CompileError(f"internal error while importing the model ({type(exc).__name__}: {exc}); "
                           "please report it with the model") from None


def _import_onnx():
    try:
        import onnx
        from onnx import numpy_helper  # noqa: F401
    except ImportError:
        raise CompileError("compiler.from_onnx needs the onnx package: "
                           "pip install nnp-toolchain[onnx]") from None
    return onnx


def _load(onnx, model):
    """The ModelProto of a path, bytes or ModelProto; CompileError if it is not one."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(onnx, bytes(model), "the model bytes")
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CompileError(f"cannot read ONNX model {os.fspath(model)!r}: {exc.strerror or exc}") from None
        proto = _parse(onnx, data, repr(os.fspath(model)))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            try:
                from onnx.external_data_helper import load_external_data_for_model
                load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
            except Exception as exc:
                raise CompileError(f"{os.fspath(model)!r}: cannot load external tensor data: {exc}") from None
        return proto
    raise CompileError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


def _parse(onnx, data: bytes, where: str):
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:      # protobuf's DecodeError and friends
        raise CompileError(f"{where} is not a valid ONNX model (truncated or corrupt: {exc})") from None
    if not proto.HasField("graph"):
        raise CompileError(f"{where} is not an ONNX model: it has no graph")
    return proto


# ---------------------------------------------------------------- arithmetic: one function per family
#
# arithmetic="onnxruntime": the float32 forms of the ops (docs/semantics.md), which onnxruntime's
# QLinear kernels compute bit for bit.  arithmetic="fixed": integer (M, S) pairs from the float64
# ratio of the float32 scales, within one output step.

def _requant_args(arithmetic: str, in_scale, w_scale, out_scale, zp_out: int) -> dict:
    """conv2d / dense keywords mapping the int32 accumulator (scale in_scale * w_scale) to the output."""
    if arithmetic == "onnxruntime":
        return {"scale": ort_scale(in_scale, np.asarray(w_scale, np.float32).ravel(), out_scale),
                "zp_out": int(zp_out)}
    ratio = np.float64(in_scale) * np.asarray(w_scale, dtype=np.float64).ravel() / np.float64(out_scale)
    m, s = quantize_multipliers(ratio)
    return {"multiplier": m, "shift": s, "zp_out": int(zp_out)}


def _rescale_op(arithmetic: str, shape, in_dtype: str, zx: int, in_scale, out_scale, zp_out: int,
                lo: int, hi: int) -> ops.Elementwise:
    """requantize: x (int8, or an int32 sum) with real value in_scale * (x - zx) to the output scale.

    With onnxruntime arithmetic the factor in_scale / out_scale is one float32 (as its requantiser
    takes it); a DequantizeLinear -> QuantizeLinear pair rounds twice instead, so that pattern is
    within one step, not exact (docs/runtime.md).
    """
    if arithmetic == "onnxruntime":
        scale = np.float32(np.float32(in_scale) / np.float32(out_scale))
        return ops.requantize(shape, in_dtype=in_dtype, zx=zx, scale=scale, zp_out=zp_out, lo=lo, hi=hi)
    m, s = quantize_multiplier(np.float64(in_scale) / np.float64(out_scale))
    if in_dtype == "int32":
        # ops.requantize proves (x - zx) * M fits 62 bits over the whole int32 range: give up
        # low multiplier bits (at most 2, from 31) rather than refuse a large zero-point offset.
        while ((1 << 31) + abs(zx)) * m >= ops.PRODUCT_LIMIT and s > 0:
            m, s = (m + 1) >> 1, s - 1
    return ops.requantize(shape, in_dtype=in_dtype, zx=zx, multiplier=m, shift=s, zp_out=zp_out,
                          lo=lo, hi=hi)


def _add_args(arithmetic: str, a_scale, b_scale, out_scale, zp_out: int) -> dict:
    """add keywords: the three float32 scales (onnxruntime), or two multipliers over ONE shift."""
    if arithmetic == "onnxruntime":
        return {"scale_a": np.float32(a_scale), "scale_b": np.float32(b_scale),
                "scale_out": np.float32(out_scale), "zp_out": int(zp_out)}
    ra = np.float64(a_scale) / np.float64(out_scale)
    rb = np.float64(b_scale) / np.float64(out_scale)
    big, shift = quantize_multiplier(max(ra, rb))
    small = int(round(min(ra, rb) * 2.0 ** shift))   # may lose low bits when the ratios differ a lot
    ma, mb = (big, small) if ra >= rb else (small, big)
    return {"ma": ma, "mb": mb, "shift": shift, "zp_out": int(zp_out)}


def _mul_args(arithmetic: str, a_scale, b_scale, out_scale, zp_out: int) -> dict:
    """mul keywords: the three float32 scales (onnxruntime), or one multiplier for a * b / out."""
    if arithmetic == "onnxruntime":
        return {"scale_a": np.float32(a_scale), "scale_b": np.float32(b_scale),
                "scale_out": np.float32(out_scale), "zp_out": int(zp_out)}
    m, s = quantize_multiplier(np.float64(a_scale) * np.float64(b_scale) / np.float64(out_scale))
    return {"multiplier": m, "shift": s, "zp_out": int(zp_out)}


def _avg_pool_ops(arithmetic: str, x_shape, kernel, stride, padding, count_include_pad: bool,
                  xq: QuantParams, yq: QuantParams, lo: int, hi: int) -> list[tuple[str, object, object]]:
    """Average pooling as (suffix, op, quant) steps.

    onnxruntime: one avg_pool2d in QLinearAveragePool's float form.  Fixed: same scale and zero
    point in and out (QDQ): one avg_pool2d.  No padding: sum_pool2d then requantize (one
    rounding).  Padding and different scales: avg_pool2d then requantize, two roundings, so up to
    one step more error than onnxruntime (documented in docs/runtime.md).
    """
    xs, xz, ys, yz = float(xq.scale), int(xq.zero_point), float(yq.scale), int(yq.zero_point)
    if arithmetic == "onnxruntime":
        avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz, scale_x=np.float32(xs),
                             scale_out=np.float32(ys), zp_out=yz)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if xq.same_as(yq):
        avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if not any(padding):
        total = ops.sum_pool2d(x_shape, kernel, stride, 0)
        k = kernel[0] * kernel[1]
        req = _rescale_op(arithmetic, total.output.shape, "int32", k * xz, xs / k, ys, yz, lo, hi)
        return [("sum", total, None), ("requant", req, yq)]
    avg = ops.avg_pool2d(x_shape, kernel, stride, padding, count_include_pad, xz)
    req = _rescale_op(arithmetic, avg.output.shape, "int8", xz, xs, ys, yz, lo, hi)
    return [("avg", avg, xq), ("requant", req, yq)]


def _global_pool_ops(arithmetic: str, x_shape, xq: QuantParams, yq: QuantParams, lo: int,
                     hi: int) -> list[tuple[str, object, object]]:
    """Global average pooling: QLinearGlobalAveragePool's float form (onnxruntime); fixed: one
    global_avg_pool2d when the scales agree, else sum then requantize."""
    if arithmetic == "onnxruntime":
        avg = ops.global_avg_pool2d(x_shape, x_zp=int(xq.zero_point), scale_x=np.float32(xq.scale),
                                    scale_out=np.float32(yq.scale), zp_out=int(yq.zero_point))
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    if xq.same_as(yq):
        avg = ops.global_avg_pool2d(x_shape)
        return [("avg", avg, yq)] + _clip_step(avg.output.shape, lo, hi, yq)
    n = x_shape[2] * x_shape[3]
    total = ops.sum_pool2d(x_shape, x_shape[2:], None, 0)
    req = _rescale_op(arithmetic, total.output.shape, "int32", n * int(xq.zero_point),
                      float(xq.scale) / n, float(yq.scale), int(yq.zero_point), lo, hi)
    return [("sum", total, None), ("requant", req, yq)]


def _clip_step(shape, lo: int, hi: int, q) -> list:
    return [] if (lo, hi) == INT8 else [("clip", ops.clip(shape, lo, hi), q)]


def _bounds(q: QuantParams, lo: float, hi: float) -> tuple[int, int]:
    """int8 bounds of a float clip [lo, hi] followed by QuantizeLinear (exact: quantising is monotone)."""
    def one(v: float, default: int) -> int:
        if math.isinf(v):
            return default
        r = float(np.rint(np.float32(v) / q.scale)) + int(q.zero_point)
        return int(min(max(r, -128), 127))
    return one(lo, -128), one(hi, 127)


# ---------------------------------------------------------------- what each ONNX tensor is

@dataclass
class _Q:
    value: str


@dataclass
class _DQ:
    value: str
    q: QuantParams


@dataclass
class _Const:
    array: np.ndarray


@dataclass
class _ConstDQ:
    array: np.ndarray
    q: QuantParams


@dataclass
class _Float:
    name: str


@dataclass
class _Pending:
    node: object                 # the ONNX NodeProto computing it
    make: Callable               # (out QuantParams, lo, hi, value name, node name) -> value name
    lo: float = -math.inf
    hi: float = math.inf
    uses: int = 0


class _Broken:
    """The output of a node that could not be imported (its consumers stay silent)."""


class _Problem(Exception):
    """A node that cannot be imported, and why."""

    def __init__(self, node, why: str):
        super().__init__(why)
        self.node = node


@dataclass
class _Attr:
    kind: str               # "int", "ints", "float", "string", "tensor"
    default: object = None


_ATTR_TYPES = {1: "float", 2: "int", 3: "string", 4: "tensor", 6: "floats", 7: "ints"}


# ---------------------------------------------------------------- the importer

@dataclass
class _Importer:
    onnx: object
    model: object
    arithmetic: str
    dims: dict
    g: Graph = field(default_factory=Graph)
    state: dict = field(default_factory=dict)
    problems: list = field(default_factory=list)
    node_names: dict = field(default_factory=dict)    # id(NodeProto) -> unique name
    aliases: dict = field(default_factory=dict)       # Value name -> further ONNX int8 tensor names
    float_shapes: dict = field(default_factory=dict)  # float graph input -> its shape

    def run(self) -> Graph:
        """Import every node; one CompileError listing all problems, else the validated graph."""
        graph = self.model.graph
        self.g.name = graph.name or "onnx"
        self._constants(graph)
        self._graph_inputs(graph)
        order = self._structure(graph)
        for node in order:
            self._import(node)
        if not self.problems:
            self._attach_aliases()
            self._graph_outputs(graph)
        if self.problems:
            raise CompileError(_report(self.problems))
        return self.g.validate()

    def _attach_aliases(self) -> None:
        """Record on each node every ONNX int8 tensor equal to its output (a Q that changed nothing)."""
        for value, names in self.aliases.items():
            p = self.g.producer(value)
            if p is not None:
                p.info.setdefault("onnx_outputs", []).extend(n for n in names if n not in p.info["onnx_outputs"])

    # -- model structure

    def _problem(self, where: str, why: str) -> None:
        self.problems.append(f"{where}: {why}")

    def _constants(self, graph) -> None:
        from onnx import numpy_helper
        for t in graph.initializer:
            if t.name in self.state:
                self._problem(f"initializer {t.name!r}", "defined twice")
                continue
            try:
                self.state[t.name] = _Const(_to_array(numpy_helper, t))
            except CompileError as exc:
                self._problem(f"initializer {t.name!r}", str(exc))
                self.state[t.name] = _Broken()
        for t in graph.sparse_initializer:
            self._problem(f"initializer {t.values.name!r}", "sparse initializers are not supported")
            self.state[t.values.name] = _Broken()

    def _graph_inputs(self, graph) -> None:
        seen = set()
        for vi in graph.input:
            if vi.name in seen:
                self._problem(f"graph input {vi.name!r}", "listed twice")
                continue
            seen.add(vi.name)
            if vi.name in self.state:      # an initializer also listed as input (old IR): a constant
                continue
            try:
                self._graph_input(vi)
            except CompileError as exc:
                self._problem(f"graph input {vi.name!r}", str(exc))
                self.state[vi.name] = _Broken()

    def _graph_input(self, vi) -> None:
        tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
        if tt is None:
            raise CompileError("is not a tensor")
        shape = self._input_shape(vi.name, tt)
        if tt.elem_type == self.onnx.TensorProto.FLOAT:
            self.state[vi.name] = _Float(vi.name)
            self.float_shapes[vi.name] = shape
        elif tt.elem_type == self.onnx.TensorProto.INT8:
            self.state[vi.name] = _Q(self.g.input(vi.name, shape))
        else:
            raise CompileError(f"has element type {_type_name(self.onnx, tt.elem_type)}; inputs must be "
                               "float32 (quantised by a QuantizeLinear) or int8")

    def _input_shape(self, name: str, tt) -> tuple[int, ...]:
        if name in self.dims and not isinstance(self.dims[name], int):
            try:
                return ops._shape(f"dims[{name!r}]", self.dims[name])
            except CompileError as exc:
                raise CompileError(str(exc)) from None
        if not tt.HasField("shape"):
            raise CompileError(f"has no shape: pass dims={{{name!r}: (N, C, H, W)}}")
        out = []
        for i, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value > 0:
                out.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param in self.dims:
                out.append(self.dims[d.dim_param])
            else:
                what = f"symbolic dimension {d.dim_param!r}" if d.dim_param else f"dimension {d.dim_value}"
                key = d.dim_param or name
                hint = f"{{{key!r}: 1}}" if d.dim_param else f"{{{name!r}: (N, C, H, W)}}"
                raise CompileError(f"axis {i} is a {what}: pass dims={hint}")
        return ops._shape(f"input {name!r} shape", out)

    def _structure(self, graph) -> list:
        """Nodes in dependency order; problems for dangling and doubly-defined tensors and cycles."""
        writer: dict[str, object] = {}
        names: set[str] = set()
        nodes = list(graph.node)    # one wrapper per node, kept alive: node_names is keyed by id()
        for i, node in enumerate(nodes):
            base = node.name or f"{node.op_type or 'node'}_{i}"
            name, k = base, 1
            while name in names:
                k += 1
                name = f"{base}#{k}"
            names.add(name)
            self.node_names[id(node)] = name
            for o in node.output:
                if not o:
                    continue
                if o in writer:
                    self._problem(self._where(node), f"output {o!r} is also written by "
                                  f"{self._where(writer[o])}")
                elif o in self.state:
                    self._problem(self._where(node), f"output {o!r} is also a graph input or initializer")
                else:
                    writer[o] = node
        ok = []
        for node in nodes:
            missing = [i for i in node.input if i and i not in writer and i not in self.state]
            if missing:
                self._problem(self._where(node), f"input {missing[0]!r} is not written by any node, "
                              "initializer or graph input")
                for o in node.output:
                    self.state.setdefault(o, _Broken())
            else:
                ok.append(node)
        order, stuck = _topo(ok, writer, self.state)
        if stuck:
            cycle = " -> ".join(self._where(n) for n in stuck)
            self._problem("graph", f"the nodes form a cycle (or depend on one): {cycle}")
        return order

    def _where(self, node) -> str:
        return f"node {self.node_names.get(id(node), node.name)!r} ({node.op_type})"

    def _graph_outputs(self, graph) -> None:
        """Mark the graph outputs, with the quantisation of their final DequantizeLinear."""
        renamed: dict[str, str] = {}
        seen = set()
        for vi in graph.output:
            name = vi.name
            if name in seen:
                self._problem(f"graph output {name!r}", "listed twice")
                continue
            seen.add(name)
            s = self.state.get(name)
            if not isinstance(s, (_DQ, _Q)):
                self._problem(f"graph output {name!r}", f"is {_describe(s)}: expected a (de)quantised tensor")
                continue
            value = renamed.get(s.value, s.value)
            v = self.g.values[value]
            if isinstance(s, _DQ):
                if v.quant is not None and not s.q.same_as(v.quant):
                    self._problem(f"graph output {name!r}", f"dequantised with {s.q}, but its value {value!r} was "
                                  f"quantised with {v.quant}")
                    continue
                v.quant = s.q
            if value in self.g.outputs or value in self.g.inputs:
                # Two outputs of one tensor (the quantizer folded a Relu/Clip between them), or an
                # input passed straight through: each output gets a Value of its own, a copy.
                copy = Reshape(v.shape, v.shape, v.dtype)
                value = self._emit(self._node_name(f"{name}/copy"), [("copy", copy, v.quant)], (value,),
                                   self._value_name(name), {"op_type": "Identity"}, int8_in_onnx=False)
            elif value != name and name not in self.g.values:
                # Name the output after the ONNX output: the user feeds and reads by ONNX names.
                self.g.rename(value, name)
                renamed[value] = name
                value = name
            self.g.output(value)

    # -- nodes

    def _import(self, node) -> None:
        ins = [self.state.get(i) for i in node.input if i]
        if any(isinstance(s, _Broken) for s in ins):
            self._mark_broken(node)
            return
        handler = _HANDLERS.get(node.op_type)
        domains = (MS,) if node.op_type in _DOMAIN else ("", "ai.onnx")
        if handler is None or node.domain not in domains:
            domain = f" in domain {node.domain!r}" if node.domain else ""
            self._problem(self._where(node), f"op type {node.op_type!r}{domain} is not supported")
            self._mark_broken(node)
            return
        try:
            _check_arity(node)
            handler(self, node)
        except _Problem as p:
            self._problem(self._where(p.node), str(p))
            self._mark_broken(node)
        except CompileError as exc:
            self._problem(self._where(node), str(exc))
            self._mark_broken(node)

    def _mark_broken(self, node) -> None:
        for o in node.output:
            if o:
                self.state[o] = _Broken()

    def _set(self, node, state) -> None:
        self.state[node.output[0]] = state

    def _name(self, node) -> str:
        return self.node_names[id(node)]

    def _value_name(self, base: str) -> str:
        name, k = base, 1
        while name in self.g.values:
            k += 1
            name = f"{base}#{k}"
        return name

    def _node_name(self, base: str) -> str:
        used = {n.name for n in self.g.nodes}
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}#{k}"
        return name

    def _emit(self, node_name: str, steps: list, inputs: tuple[str, ...], out_name: str, info: dict,
              int8_in_onnx: bool = True) -> str:
        """Add a chain of (suffix, op, quant) steps: the first reads `inputs`, the last writes out_name.
        info["onnx_outputs"] lists the ONNX int8 tensors equal to the result (not a float one)."""
        prev = inputs
        for k, (suffix, op, q) in enumerate(steps):
            last = k == len(steps) - 1
            vname = self._value_name(out_name if last else f"{out_name}/{suffix}")
            nname = self._node_name(node_name if last else f"{node_name}/{suffix}")
            self.g.add(op, *prev, name=nname, output=vname, quant=q,
                       info={**info, "onnx_outputs": [out_name] if last and int8_in_onnx else []})
            prev = (vname,)
        return prev[0]

    # -- reading inputs

    def _input(self, node, i: int):
        if i >= len(node.input) or not node.input[i]:
            return None
        return self.state[node.input[i]]

    def _const(self, node, i: int, what: str, optional: bool = False) -> np.ndarray | None:
        s = self._input(node, i)
        if s is None:
            if optional:
                return None
            raise _Problem(node, f"{what} (input {i}) is missing")
        if not isinstance(s, _Const):
            raise _Problem(node, f"{what} ({node.input[i]!r}) must be an initializer or Constant")
        return s.array

    def _q(self, node, i: int, what: str) -> str:
        """An int8 Value input (QOperator)."""
        s = self._input(node, i)
        if isinstance(s, _Q) and self.g.values[s.value].dtype == "int8":
            return s.value
        raise _Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must be an int8 "
                       f"tensor, got {_describe(s)}")

    def _dq(self, node, i: int, what: str) -> _DQ:
        """A dequantised activation input (QDQ)."""
        s = self._input(node, i)
        if isinstance(s, _DQ):
            return s
        raise _Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must come from a "
                       f"DequantizeLinear of an int8 activation, got {_describe(s)}")

    def _params(self, node, si: int, zi: int, what: str, *, dtypes=("int8",), axis=None,
                per_channel: bool = False) -> QuantParams:
        """QuantParams from a scale input and an optional zero-point input."""
        scale = self._const(node, si, f"{what} scale")
        zp = self._const(node, zi, f"{what} zero point", optional=True)
        if scale.dtype != np.float32:
            raise _Problem(node, f"{what} scale has dtype {scale.dtype}, expected float32")
        if zp is None:
            zp = np.zeros(scale.shape, dtype=np.uint8)     # ONNX's default zero point is uint8
        if zp.dtype.name not in dtypes:
            if zp.dtype == np.uint8 and "int8" in dtypes:
                raise _Problem(node, f"{what} is uint8 (zero point {_brief(zp)}): only int8 activations are "
                               "supported; quantise with activation_type=QuantType.QInt8")
            raise _Problem(node, f"{what} zero point has dtype {zp.dtype}, expected {' or '.join(dtypes)}")
        if scale.ndim > 1 or scale.size == 0 or (scale.ndim == 1 and scale.size > 1 and not per_channel):
            raise _Problem(node, f"{what} scale has shape {scale.shape}: expected a scalar"
                           + (" or a vector" if per_channel else " (per-tensor activations)"))
        if zp.shape != scale.shape and zp.size != 1:
            raise _Problem(node, f"{what} zero point has shape {zp.shape}, its scale {scale.shape}")
        if scale.ndim == 1 and scale.size == 1:     # one scale is per tensor, whatever the axis says
            scale, zp = scale.reshape(()), zp.reshape(())
        if zp.size == 1 and scale.ndim == 1:
            zp = np.full(scale.shape, zp.ravel()[0])
        try:
            return QuantParams(scale, zp.astype(np.int64), axis if scale.ndim else None)
        except CompileError as exc:
            raise _Problem(node, f"{what}: {exc}") from None

    def _attrs(self, node, spec: dict[str, _Attr]) -> dict:
        out = {k: a.default for k, a in spec.items()}
        seen = set()
        for a in node.attribute:
            if a.name in seen:
                raise _Problem(node, f"attribute {a.name!r} is given twice")
            seen.add(a.name)
            if a.name not in spec:
                raise _Problem(node, f"attribute {a.name!r} is not supported")
            kind = _ATTR_TYPES.get(a.type)
            if kind != spec[a.name].kind:
                raise _Problem(node, f"attribute {a.name!r} has type {kind or a.type}, expected "
                               f"{spec[a.name].kind}")
            if kind == "int":
                out[a.name] = int(a.i)
            elif kind == "ints":
                out[a.name] = tuple(int(v) for v in a.ints)
            elif kind == "float":
                out[a.name] = float(a.f)
            elif kind == "floats":
                out[a.name] = tuple(float(v) for v in a.floats)
            elif kind == "string":
                out[a.name] = a.s.decode("utf-8", "replace")
            else:
                from onnx import numpy_helper
                out[a.name] = _to_array(numpy_helper, a.t)
        return out

    def _shape(self, value: str) -> tuple[int, ...]:
        return self.g.values[value].shape


# ---------------------------------------------------------------- handlers

def _quantize_linear(im: _Importer, node) -> None:
    at = im._attrs(node, {"axis": _Attr("int", 1), "saturate": _Attr("int", 1),
                          "output_dtype": _Attr("int", 0), "block_size": _Attr("int", 0)})
    if at["output_dtype"] not in (0, im.onnx.TensorProto.INT8):
        raise _Problem(node, f"output_dtype {_type_name(im.onnx, at['output_dtype'])}: only int8 is supported")
    if at["block_size"]:
        raise _Problem(node, f"block_size = {at['block_size']}: blocked quantisation is not supported")
    s = im._input(node, 0)
    if isinstance(s, _Const):     # a float constant quantised in the graph (weights written as Q -> DQ)
        q = im._params(node, 1, 2, "quantisation", axis=at["axis"], per_channel=True)
        if s.array.dtype.kind != "f":
            raise _Problem(node, f"quantises a constant of dtype {s.array.dtype}")
        im._set(node, _Const(q.quantize(s.array) if not q.per_channel else _quantize_axis(node, s.array, q)))
        return
    q = im._params(node, 1, 2, "output")
    out = node.output[0]
    if isinstance(s, _Float):
        shape = im.float_shapes[s.name]
        if s.name in im.g.values:
            v = im.g.values[s.name]
            if not q.same_as(v.quant):
                raise _Problem(node, f"graph input {s.name!r} is quantised twice with different parameters "
                               f"({v.quant} and {q})")
            im._set(node, _Q(s.name))
        else:
            im._set(node, _Q(im.g.input(s.name, shape, quant=q)))
        im.aliases.setdefault(s.name, []).append(out)
    elif isinstance(s, _DQ):
        if q.same_as(s.q):
            im._set(node, _Q(s.value))
            im.aliases.setdefault(s.value, []).append(out)
        else:
            op = _rescale_op(im.arithmetic, im._shape(s.value), "int8", int(s.q.zero_point), float(s.q.scale),
                             float(q.scale), int(q.zero_point), -128, 127)
            im._set(node, _Q(im._emit(im._name(node), [("requant", op, q)], (s.value,), out,
                                      {"op_type": "QuantizeLinear"})))
    elif isinstance(s, _Pending):
        lo, hi = _bounds(q, s.lo, s.hi)
        name = im._name(s.node) if s.uses == 0 else f"{im._name(s.node)}/{im._name(node)}"
        s.uses += 1
        try:
            v = s.make(q, lo, hi, out, name)
        except _Problem:
            raise
        except CompileError as exc:         # an op refused its arguments: that is the float op's fault
            raise _Problem(s.node, str(exc)) from None
        im._set(node, _Q(v))
    else:
        raise _Problem(node, f"quantises {_describe(s)}: expected a float graph input, a dequantised "
                       "tensor or the output of a float op")


def _quantize_axis(node, a: np.ndarray, q: QuantParams) -> np.ndarray:
    if not -a.ndim <= q.axis < a.ndim or a.shape[q.axis] != q.scale.size:
        raise _Problem(node, f"{q.scale.size} per-channel scales along axis {q.axis} of shape {a.shape}")
    return q.quantize(a)


def _dequantize_linear(im: _Importer, node) -> None:
    at = im._attrs(node, {"axis": _Attr("int", 1), "block_size": _Attr("int", 0),
                          "output_dtype": _Attr("int", 0)})
    if at["block_size"]:
        raise _Problem(node, f"block_size = {at['block_size']}: blocked quantisation is not supported")
    s = im._input(node, 0)
    if isinstance(s, _Const):
        a = s.array
        if a.dtype not in (np.int8, np.int32):
            raise _Problem(node, f"dequantises a constant of dtype {a.dtype}: expected int8 weights or int32 bias"
                           + (" (uint8 weights are not supported)" if a.dtype == np.uint8 else ""))
        q = im._params(node, 1, 2, "weight" if a.dtype == np.int8 else "bias", dtypes=(a.dtype.name,),
                       axis=at["axis"], per_channel=True)
        if q.per_channel and not (-a.ndim <= q.axis < a.ndim and a.shape[q.axis] == q.scale.size):
            raise _Problem(node, f"{q.scale.size} per-channel scales along axis {q.axis} of a constant "
                           f"of shape {a.shape}")
        im._set(node, _ConstDQ(a, q))
    elif isinstance(s, _Q):
        if im.g.values[s.value].dtype != "int8":
            raise _Problem(node, f"dequantises {s.value!r} of dtype {im.g.values[s.value].dtype}")
        im._set(node, _DQ(s.value, im._params(node, 1, 2, "input")))
    else:
        raise _Problem(node, f"dequantises {_describe(s)}: expected an int8 tensor or constant")


_CONV_ATTRS = {"auto_pad": _Attr("string", "NOTSET"), "dilations": _Attr("ints"), "group": _Attr("int", 1),
               "kernel_shape": _Attr("ints"), "pads": _Attr("ints"), "strides": _Attr("ints")}


def _conv(im: _Importer, node) -> None:
    """Conv in QDQ: DQ(x), DQ(w), bias DQ(int32) or float -> pending conv2d."""
    at = im._attrs(node, _CONV_ATTRS)
    x = im._dq(node, 0, "X")
    w = _weight(im, node, 1, "W", ndim=4, axis=0)
    bias = _bias_input(im, node, 2)
    make = _conv_maker(im, node, x.value, x.q, w.array, w.q, bias, at)
    im._set(node, _Pending(node, make))


def _qlinear_conv(im: _Importer, node) -> None:
    """QLinearConv(x, xs, xz, w, ws, wz, ys, yz, B): conv2d."""
    at = im._attrs(node, _CONV_ATTRS)
    x = im._q(node, 0, "x")
    xq = im._params(node, 1, 2, "x")
    w = im._const(node, 3, "w")
    wq = _weight_params(im, node, w, 4, 5, axis=0, ndim=4)
    b = im._const(node, 8, "B", optional=True)
    bias = None if b is None else ("acc", b)
    yq = im._params(node, 6, 7, "y")
    make = _conv_maker(im, node, x, xq, w, wq, bias, at)
    im._set(node, _Q(make(yq, -128, 127, node.output[0], im._name(node))))


def _conv_maker(im: _Importer, node, x: str, xq: QuantParams, w: np.ndarray, wq: QuantParams, bias, at):
    x_shape = im._shape(x)
    if len(x_shape) != 4:
        raise _Problem(node, f"input has shape {list(x_shape)}: only 2-D convolution (NCHW) is supported")
    if at["kernel_shape"] is not None and tuple(at["kernel_shape"]) != w.shape[2:]:
        raise _Problem(node, f"kernel_shape {list(at['kernel_shape'])} does not match the weight "
                       f"{list(w.shape)}")
    stride, pads, dil = _geometry(node, at, x_shape[2:], w.shape[2:])
    o = w.shape[0]
    acc_scale = _acc_scale(xq, wq, o)
    b = _bias_values(node, bias, acc_scale)

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        args = _requant_args(im.arithmetic, xq.scale, _per_out(wq, o), yq.scale, int(yq.zero_point))
        op = ops.conv2d(x_shape, w, b, stride=stride, padding=pads, dilation=dil, groups=at["group"],
                        x_zp=int(xq.zero_point), lo=lo, hi=hi, **args)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [xq], "w_quant": wq}
        return im._emit(name, [("conv", op, yq)], (x,), out, info)
    return make


def _weight(im: _Importer, node, i: int, what: str, ndim: int, axis: int) -> _ConstDQ:
    s = im._input(node, i)
    if isinstance(s, _ConstDQ) and s.array.dtype == np.int8:
        _check_weight(node, s.array, s.q, ndim, axis)
        return s
    raise _Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must be int8 weights "
                   f"dequantised by a DequantizeLinear, got {_describe(s)}")


def _weight_params(im: _Importer, node, w: np.ndarray, si: int, zi: int, axis: int, ndim: int) -> QuantParams:
    if w.dtype != np.int8:
        raise _Problem(node, f"weights have dtype {w.dtype}: only int8 weights are supported")
    q = im._params(node, si, zi, "weight", axis=axis, per_channel=True)
    _check_weight(node, w, q, ndim, axis)
    return q


def _check_weight(node, w: np.ndarray, q: QuantParams, ndim: int, axis: int) -> None:
    if w.ndim != ndim:
        raise _Problem(node, f"weights have shape {list(w.shape)}, expected {ndim} dimensions")
    if q.per_channel and (q.axis % ndim != axis % ndim or q.scale.size != w.shape[axis]):
        raise _Problem(node, f"weight scales: {q.scale.size} along axis {q.axis}; expected one per output "
                       f"channel ({w.shape[axis]}, axis {axis % ndim}) or one per tensor")
    if np.any(q.zero_point != 0):
        raise _Problem(node, f"weight zero point {_brief(q.zero_point)}: only symmetric weights (zero point 0) "
                       "are supported")


def _per_out(wq: QuantParams, o: int) -> np.ndarray:
    return wq.scale if wq.per_channel else np.full(o, wq.scale, dtype=np.float32)


def _acc_scale(xq: QuantParams, wq: QuantParams, o: int) -> np.ndarray:
    """The accumulator's scale per output channel, as the quantizer writes it: float32(x_scale * w_scale)."""
    return (xq.scale * _per_out(wq, o)).astype(np.float32)


def _bias_input(im: _Importer, node, i: int):
    """("dq", int32, QuantParams), ("float", array) or None."""
    s = im._input(node, i)
    if s is None:
        return None
    if isinstance(s, _ConstDQ) and s.array.dtype == np.int32:
        return ("dq", s.array, s.q)
    if isinstance(s, _Const) and s.array.dtype.kind == "f":
        return ("float", s.array)
    raise _Problem(node, f"bias ({node.input[i]!r}) must be an int32 constant dequantised by a DequantizeLinear, "
                   f"or float, got {_describe(s)}")


def _bias_values(node, bias, acc_scale: np.ndarray) -> np.ndarray | None:
    """int32 bias in the accumulator's scale."""
    if bias is None:
        return None
    o = acc_scale.size
    kind, a = bias[0], np.asarray(bias[1])
    if a.size != o:
        raise _Problem(node, f"bias has {a.size} values for {o} output channels")
    a = a.reshape(o)
    if kind == "acc":
        if a.dtype != np.int32:
            raise _Problem(node, f"bias has dtype {a.dtype}, expected int32")
        return a.astype(np.int64)
    if kind == "dq":
        q = bias[2]
        if np.any(q.zero_point != 0):
            raise _Problem(node, f"bias zero point {_brief(q.zero_point)}: expected 0")
        scale = q.scale if q.per_channel else np.full(o, q.scale, dtype=np.float32)
        if scale.size != o:
            raise _Problem(node, f"bias has {scale.size} scales for {o} output channels")
        if np.array_equal(scale, acc_scale):
            return a.astype(np.int64)
        real = a.astype(np.float64) * scale.astype(np.float64)
    else:
        real = a.astype(np.float64)
    b = np.rint(real / acc_scale.astype(np.float64))    # rescaled to the accumulator: rounds once
    if not np.all(np.isfinite(b)) or np.abs(b).max() >= 1 << 31:
        raise _Problem(node, f"bias {_brief(real)} does not fit int32 at the accumulator scale {_brief(acc_scale)}")
    return b.astype(np.int64)


def _geometry(node, at: dict, hw: tuple[int, int], kernel: tuple[int, int], *, ceil_mode: int = 0,
              pad_ok: Callable[[tuple], bool] | None = None):
    """(stride, (top, left, bottom, right), dilation) from ONNX conv/pool attributes."""
    def pair(key, default):
        v = at.get(key)
        if v is None:
            return default
        if len(v) != 2:
            raise _Problem(node, f"{key} = {list(v)}: expected 2 values (2-D)")
        if min(v) < 1:
            raise _Problem(node, f"{key} = {list(v)} must be positive")
        return tuple(v)
    stride, dil = pair("strides", (1, 1)), pair("dilations", (1, 1))
    span = tuple(d * (k - 1) + 1 for d, k in zip(dil, kernel))
    mode = at.get("auto_pad", "NOTSET")
    if mode in ("NOTSET", ""):
        pads = at.get("pads") or (0, 0, 0, 0)
        if len(pads) != 4 or min(pads) < 0:
            raise _Problem(node, f"pads = {list(pads)}: expected 4 non-negative values")
        pads = tuple(pads)
    elif mode == "VALID":
        pads = (0, 0, 0, 0)
    elif mode in ("SAME_UPPER", "SAME_LOWER"):
        total = [max(0, (-(-n // s) - 1) * s + sp - n) for n, s, sp in zip(hw, stride, span)]
        small = [t // 2 for t in total]
        big = [t - t // 2 for t in total]
        begin, end = (small, big) if mode == "SAME_UPPER" else (big, small)
        pads = (begin[0], begin[1], end[0], end[1])
    else:
        raise _Problem(node, f"auto_pad = {mode!r} is not one of NOTSET, VALID, SAME_UPPER, SAME_LOWER")
    if ceil_mode:
        pads = _ceil_pads(node, hw, span, stride, pads)
    return stride, pads, dil


def _ceil_pads(node, hw, span, stride, pads) -> tuple[int, int, int, int]:
    """ceil_mode as extra bottom/right padding (windows must still start inside the input or padding)."""
    extra = []
    for n, sp, s, p0, p1 in zip(hw, span, stride, pads[:2], pads[2:]):
        full = n + p0 + p1
        if full < sp:
            raise _Problem(node, f"the window ({sp}) is larger than the padded input ({full})")
        out = -(-(full - sp) // s) + 1
        if (out - 1) * s >= n + p0:      # onnxruntime drops a last window that starts in the end padding
            out -= 1
        extra.append(max(0, (out - 1) * s + sp - full))
    return pads[0], pads[1], pads[2] + extra[0], pads[3] + extra[1]


# -- dense

def _gemm(im: _Importer, node) -> None:
    """Gemm in QDQ: DQ(A) [N, K], DQ(B) [K, O] or [O, K] (transB), bias C -> pending dense."""
    at = im._attrs(node, {"alpha": _Attr("float", 1.0), "beta": _Attr("float", 1.0),
                          "transA": _Attr("int", 0), "transB": _Attr("int", 0)})
    _gemm_checks(node, at)
    a = im._dq(node, 0, "A")
    w = _weight(im, node, 1, "B", ndim=2, axis=0 if at["transB"] else 1)
    bias = _bias_input(im, node, 2)
    make = _dense_maker(im, node, a.value, a.q, w.array.T if at["transB"] else w.array, w.q, bias)
    im._set(node, _Pending(node, make))


def _qgemm(im: _Importer, node) -> None:
    """QGemm(A, as, az, B, bs, bz, C, ys, yz) (com.microsoft): dense; no y scale means a float output."""
    at = im._attrs(node, {"alpha": _Attr("float", 1.0), "transA": _Attr("int", 0), "transB": _Attr("int", 0)})
    _gemm_checks(node, at)
    a = im._q(node, 0, "A")
    aq = im._params(node, 1, 2, "A")
    w = im._const(node, 3, "B")
    wq = _weight_params(im, node, w, 4, 5, axis=0 if at["transB"] else 1, ndim=2)
    c = im._const(node, 6, "C", optional=True)
    make = _dense_maker(im, node, a, aq, w.T if at["transB"] else w, wq, None if c is None else ("acc", c))
    if im._input(node, 7) is None:
        im._set(node, _Pending(node, make))
    else:
        yq = im._params(node, 7, 8, "y")
        im._set(node, _Q(make(yq, -128, 127, node.output[0], im._name(node))))


def _gemm_checks(node, at: dict) -> None:
    if at["transA"]:
        raise _Problem(node, "transA = 1 is not supported")
    if at["transB"] not in (0, 1):
        raise _Problem(node, f"transB = {at['transB']}: expected 0 or 1")
    for key in ("alpha", "beta"):
        if at.get(key, 1.0) != 1.0:
            raise _Problem(node, f"{key} = {at[key]}: only 1.0 is supported")


def _matmul(im: _Importer, node) -> None:
    """MatMul in QDQ: DQ(A) [N, K] @ DQ(B) [K, O] -> pending dense."""
    im._attrs(node, {})
    a = im._dq(node, 0, "A")
    w = _weight(im, node, 1, "B", ndim=2, axis=1)
    im._set(node, _Pending(node, _dense_maker(im, node, a.value, a.q, w.array, w.q, None)))


def _qlinear_matmul(im: _Importer, node) -> None:
    """QLinearMatMul(a, as, az, b, bs, bz, ys, yz): dense."""
    im._attrs(node, {})
    a = im._q(node, 0, "a")
    aq = im._params(node, 1, 2, "a")
    w = im._const(node, 3, "b")
    wq = _weight_params(im, node, w, 4, 5, axis=1, ndim=2)
    yq = im._params(node, 6, 7, "y")
    make = _dense_maker(im, node, a, aq, w, wq, None)
    im._set(node, _Q(make(yq, -128, 127, node.output[0], im._name(node))))


def _dense_maker(im: _Importer, node, x: str, xq: QuantParams, w: np.ndarray, wq: QuantParams, bias):
    x_shape = im._shape(x)
    if len(x_shape) != 2:
        raise _Problem(node, f"input has shape {list(x_shape)}: only 2-D [N, K] inputs are supported "
                       "(Flatten first)")
    if w.shape[0] != x_shape[1]:
        raise _Problem(node, f"weight [K, O] = {list(w.shape)} does not match the input's K = {x_shape[1]}")
    o = w.shape[1]
    if wq.per_channel:    # per output feature: the weight as given was [O, K] (axis 0) or [K, O] (axis 1)
        wq = QuantParams(wq.scale, wq.zero_point, 1)
    b = _bias_values(node, bias, _acc_scale(xq, wq, o))

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        args = _requant_args(im.arithmetic, xq.scale, _per_out(wq, o), yq.scale, int(yq.zero_point))
        op = ops.dense(x_shape, w, b, x_zp=int(xq.zero_point), lo=lo, hi=hi, **args)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [xq], "w_quant": wq}
        return im._emit(name, [("dense", op, yq)], (x,), out, info)
    return make


# -- elementwise

def _binary(kind: str):
    def handler(im: _Importer, node) -> None:
        """Add / Mul in QDQ: two dequantised activations of the same shape -> pending add / mul."""
        im._attrs(node, {})
        a, b = im._dq(node, 0, "A"), im._dq(node, 1, "B")
        im._set(node, _Pending(node, _binary_maker(im, node, kind, (a.value, a.q), (b.value, b.q))))
    return handler


def _qlinear_binary(kind: str):
    def handler(im: _Importer, node) -> None:
        """QLinearAdd / QLinearMul(A, As, Az, B, Bs, Bz, Cs, Cz) (com.microsoft)."""
        im._attrs(node, {})
        a, aq = im._q(node, 0, "A"), im._params(node, 1, 2, "A")
        b, bq = im._q(node, 3, "B"), im._params(node, 4, 5, "B")
        cq = im._params(node, 6, 7, "C")
        make = _binary_maker(im, node, kind, (a, aq), (b, bq))
        im._set(node, _Q(make(cq, -128, 127, node.output[0], im._name(node))))
    return handler


def _binary_maker(im: _Importer, node, kind: str, a, b):
    (av, aq), (bv, bq) = a, b
    shape, b_shape = im._shape(av), im._shape(bv)
    if b_shape != shape and _onnx_broadcast(shape, b_shape) is None and _onnx_broadcast(b_shape, shape) is not None:
        if kind == "add" and im.arithmetic == "onnxruntime":
            raise _Problem(node, f"A of shape {list(shape)} broadcasts to B's {list(b_shape)}: onnxruntime's float "
                           "add rounds A and B differently, so only B may broadcast")
        (av, aq), (bv, bq), shape, b_shape = (bv, bq), (av, aq), b_shape, shape      # a * b = b * a; a + b too
    bcast = None
    if b_shape != shape:
        bcast = _onnx_broadcast(shape, b_shape)
        if bcast is None:
            raise _Problem(node, f"inputs have shapes {list(shape)} and {list(b_shape)}: broadcasting is supported "
                           "for a B of one value per image and / or channel ([N, C, 1, 1], [C, 1, 1], a scalar) or "
                           "one plane ([1, 1, H, W], [H, W]), not one that repeats along the height or width only")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        za, zb = int(aq.zero_point), int(bq.zero_point)
        b_in = bv
        if bcast is not None and bcast != b_shape:      # B of a lower rank: the same bytes under A's rank
            b_in = im._emit(f"{name}/b", [("b", Reshape(b_shape, bcast), bq)], (bv,), f"{out}/b",
                            {"op_type": "Reshape"}, int8_in_onnx=False)
        if kind == "add":
            args = _add_args(im.arithmetic, aq.scale, bq.scale, yq.scale, int(yq.zero_point))
            op = ops.add(shape, za=za, zb=zb, lo=lo, hi=hi, b_shape=bcast, **args)
        else:
            args = _mul_args(im.arithmetic, aq.scale, bq.scale, yq.scale, int(yq.zero_point))
            op = ops.mul(shape, za=za, zb=zb, lo=lo, hi=hi, b_shape=bcast, **args)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [aq, bq]}
        return im._emit(name, [(kind, op, yq)], (av, b_in), out, info)
    return make


def _onnx_broadcast(shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """B's shape at A's rank (ONNX aligns shapes from the right) when the add and mul lowerings broadcast it
    (lowering.vu.broadcast_problem: one value per image and / or channel, or one plane); None otherwise."""
    from types import SimpleNamespace

    from .lowering.vu import broadcast_problem
    if len(b_shape) > len(shape):
        return None
    full = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    if broadcast_problem(SimpleNamespace(shape=tuple(shape), b_shape=full)):
        return None
    return full


def _relu_clip(im: _Importer, node) -> None:
    """Relu / Clip: folded into a pending op's range, or a clip on the int8 Value."""
    lo, hi = _clip_range(im, node)
    s = im._input(node, 0)
    if isinstance(s, _Pending):
        im._set(node, _Pending(s.node, s.make, max(s.lo, lo), min(s.hi, hi), s.uses))
        return
    if isinstance(s, _DQ):
        qlo, qhi = _bounds(s.q, lo, hi)
        if (qlo, qhi) == INT8:
            im._set(node, s)
            return
        v = im._emit(im._name(node), [("clip", ops.clip(im._shape(s.value), qlo, qhi), s.q)], (s.value,),
                     node.output[0], {"op_type": node.op_type}, int8_in_onnx=False)
        im._set(node, _DQ(v, s.q))
        return
    if isinstance(s, _Q) and im.g.values[s.value].dtype == "int8":     # Relu/Clip on int8 itself
        qlo = -128 if lo <= -128 else min(127, math.ceil(lo))
        qhi = 127 if hi >= 127 else max(-128, math.floor(hi))
        if qlo > qhi:
            raise _Problem(node, f"clip range [{lo}, {hi}] is empty on int8")
        op = ops.clip(im._shape(s.value), qlo, qhi)
        q = im.g.values[s.value].quant
        im._set(node, _Q(im._emit(im._name(node), [("clip", op, q)], (s.value,), node.output[0],
                                  {"op_type": node.op_type})))
        return
    raise _Problem(node, f"input is {_describe(s)}: expected a dequantised tensor or a quantised op's output")


def _clip_range(im: _Importer, node) -> tuple[float, float]:
    if node.op_type == "Relu":
        im._attrs(node, {})
        return 0.0, math.inf
    at = im._attrs(node, {"min": _Attr("float", -math.inf), "max": _Attr("float", math.inf)})
    lo, hi = at["min"], at["max"]
    for i, what in ((1, "min"), (2, "max")):
        a = im._const(node, i, what, optional=True)
        if a is None:
            continue
        if a.size != 1:
            raise _Problem(node, f"{what} has {a.size} values: expected a scalar")
        v = float(a.ravel()[0])
        lo, hi = (v, hi) if what == "min" else (lo, v)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise _Problem(node, f"clip range [{lo}, {hi}] is empty or not a number")
    return lo, hi


# -- pooling

_POOL_ATTRS = {"auto_pad": _Attr("string", "NOTSET"), "ceil_mode": _Attr("int", 0), "kernel_shape": _Attr("ints"),
               "pads": _Attr("ints"), "strides": _Attr("ints"), "dilations": _Attr("ints")}


def _pool_params(im: _Importer, node, x: str, at: dict, *, allow_ceil: bool):
    x_shape = im._shape(x)
    if len(x_shape) != 4:
        raise _Problem(node, f"input has shape {list(x_shape)}: only 2-D pooling (NCHW) is supported")
    k = at["kernel_shape"]
    if k is None or len(k) != 2 or min(k) < 1:
        raise _Problem(node, f"kernel_shape = {None if k is None else list(k)}: expected 2 positive values")
    if at.get("dilations") not in (None, (1, 1)):
        raise _Problem(node, f"dilations = {list(at['dilations'])}: pooling dilation is not supported")
    ceil = at.get("ceil_mode", 0)
    if ceil not in (0, 1):
        raise _Problem(node, f"ceil_mode = {ceil}: expected 0 or 1")
    stride, pads, _ = _geometry(node, at, x_shape[2:], tuple(k), ceil_mode=ceil)
    if ceil and not allow_ceil and pads != _geometry(node, at, x_shape[2:], tuple(k))[1]:
        raise _Problem(node, "ceil_mode = 1 changes the output size: not supported for average pooling")
    return x_shape, tuple(k), stride, pads


def _max_pool(im: _Importer, node) -> None:
    """MaxPool on int8 (QOperator) or on a dequantised tensor (QDQ): max_pool2d on the int8 Value."""
    at = im._attrs(node, {**_POOL_ATTRS, "storage_order": _Attr("int", 0)})
    if len(node.output) > 1 and node.output[1]:
        raise _Problem(node, "the Indices output is not supported")
    s = im._input(node, 0)
    if not (isinstance(s, _DQ) or (isinstance(s, _Q) and im.g.values[s.value].dtype == "int8")):
        raise _Problem(node, f"input is {_describe(s)}: expected int8 or a dequantised tensor")
    x_shape, k, stride, pads = _pool_params(im, node, s.value, at, allow_ceil=True)
    op = ops.max_pool2d(x_shape, k, stride, pads)
    q = s.q if isinstance(s, _DQ) else im.g.values[s.value].quant
    v = im._emit(im._name(node), [("max", op, q)], (s.value,), node.output[0], {"op_type": node.op_type},
                 int8_in_onnx=isinstance(s, _Q))
    im._set(node, _DQ(v, s.q) if isinstance(s, _DQ) else _Q(v))


def _average_pool(im: _Importer, node) -> None:
    """AveragePool in QDQ: pending average pooling."""
    at = im._attrs(node, {**_POOL_ATTRS, "count_include_pad": _Attr("int", 0)})
    x = im._dq(node, 0, "X")
    im._set(node, _Pending(node, _avg_maker(im, node, x.value, x.q, at)))


def _qlinear_average_pool(im: _Importer, node) -> None:
    """QLinearAveragePool(x, xs, xz, ys, yz) (com.microsoft)."""
    at = im._attrs(node, {**_POOL_ATTRS, "count_include_pad": _Attr("int", 0), "channels_last": _Attr("int", 0)})
    if at.pop("channels_last"):
        raise _Problem(node, "channels_last = 1 is not supported")
    x, xq = im._q(node, 0, "x"), im._params(node, 1, 2, "x")
    yq = im._params(node, 3, 4, "y")
    im._set(node, _Q(_avg_maker(im, node, x, xq, at)(yq, -128, 127, node.output[0], im._name(node))))


def _avg_maker(im: _Importer, node, x: str, xq: QuantParams, at: dict):
    x_shape, k, stride, pads = _pool_params(im, node, x, at, allow_ceil=False)
    cip = at["count_include_pad"]
    if cip not in (0, 1):
        raise _Problem(node, f"count_include_pad = {cip}: expected 0 or 1")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        steps = _avg_pool_ops(im.arithmetic, x_shape, k, stride, pads, bool(cip), xq, yq, lo, hi)
        return im._emit(name, steps, (x,), out, {"op_type": node.op_type, "in_quant": [xq]})
    return make


def _global_average_pool(im: _Importer, node) -> None:
    """GlobalAveragePool in QDQ: pending global average pooling."""
    im._attrs(node, {})
    x = im._dq(node, 0, "X")
    im._set(node, _Pending(node, _gap_maker(im, node, x.value, x.q)))


def _qlinear_global_average_pool(im: _Importer, node) -> None:
    """QLinearGlobalAveragePool(x, xs, xz, ys, yz) (com.microsoft)."""
    at = im._attrs(node, {"channels_last": _Attr("int", 0)})
    if at["channels_last"]:
        raise _Problem(node, "channels_last = 1 is not supported")
    x, xq = im._q(node, 0, "x"), im._params(node, 1, 2, "x")
    yq = im._params(node, 3, 4, "y")
    im._set(node, _Q(_gap_maker(im, node, x, xq)(yq, -128, 127, node.output[0], im._name(node))))


def _gap_maker(im: _Importer, node, x: str, xq: QuantParams):
    x_shape = im._shape(x)
    if len(x_shape) != 4:
        raise _Problem(node, f"input has shape {list(x_shape)}: only NCHW is supported")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        steps = _global_pool_ops(im.arithmetic, x_shape, xq, yq, lo, hi)
        return im._emit(name, steps, (x,), out, {"op_type": node.op_type, "in_quant": [xq]})
    return make


# -- layout

def _flatten(im: _Importer, node) -> None:
    """Flatten(axis): a Reshape to [prod(shape[:axis]), prod(shape[axis:])]."""
    at = im._attrs(node, {"axis": _Attr("int", 1)})
    _reshape_to(im, node, lambda shape: _flatten_shape(node, shape, at["axis"]))


def _flatten_shape(node, shape, axis: int) -> tuple[int, int]:
    if not -len(shape) <= axis <= len(shape):
        raise _Problem(node, f"axis = {axis} is outside the input's {len(shape)} dimensions")
    axis = axis + len(shape) if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def _reshape(im: _Importer, node) -> None:
    """Reshape(data, shape) with a constant shape (0 copies a dimension, -1 is inferred)."""
    at = im._attrs(node, {"allowzero": _Attr("int", 0)})
    target = im._const(node, 1, "shape")
    if target.dtype != np.int64 or target.ndim != 1:
        raise _Problem(node, f"shape must be a 1-D int64 constant, got {target.dtype} {list(target.shape)}")
    _reshape_to(im, node, lambda shape: _reshape_shape(node, shape, target, at["allowzero"]))


def _reshape_shape(node, shape, target: np.ndarray, allowzero: int) -> tuple[int, ...]:
    out = []
    for i, d in enumerate(int(t) for t in target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise _Problem(node, f"shape {target.tolist()}: 0 at axis {i} copies a dimension the input "
                               f"{list(shape)} does not have")
            d = shape[i]
        elif d < -1 or (d == 0 and allowzero):
            raise _Problem(node, f"shape {target.tolist()} has dimension {d}")
        out.append(d)
    total = math.prod(shape)
    if out.count(-1) > 1:
        raise _Problem(node, f"shape {target.tolist()} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known <= 0 or total % known:
            raise _Problem(node, f"cannot reshape {list(shape)} to {target.tolist()}")
        out[out.index(-1)] = total // known
    return tuple(out)


def _reshape_to(im: _Importer, node, new_shape: Callable) -> None:
    s = im._input(node, 0)
    if isinstance(s, _Const):           # constant folding (a weight reshaped in the graph)
        shape = new_shape(s.array.shape)
        if math.prod(shape) != s.array.size:
            raise _Problem(node, f"cannot reshape a constant of shape {list(s.array.shape)} to {list(shape)}")
        im._set(node, _Const(s.array.reshape(shape)))
        return
    if not isinstance(s, (_DQ, _Q)):
        raise _Problem(node, f"input is {_describe(s)}: expected int8 or a dequantised tensor")
    x_shape = im._shape(s.value)
    out_shape = new_shape(x_shape)
    dtype = im.g.values[s.value].dtype
    q = s.q if isinstance(s, _DQ) else im.g.values[s.value].quant
    op = Reshape(x_shape, out_shape, dtype)
    v = im._emit(im._name(node), [("reshape", op, q)], (s.value,), node.output[0], {"op_type": node.op_type},
                 int8_in_onnx=isinstance(s, _Q))
    im._set(node, _DQ(v, s.q) if isinstance(s, _DQ) else _Q(v))


def _concat(im: _Importer, node) -> None:
    """Concat of dequantised tensors (QDQ: pending, requantised to the output scale) or of int8 tensors."""
    at = im._attrs(node, {"axis": _Attr("int")})
    if at["axis"] is None:
        raise _Problem(node, "attribute 'axis' is required")
    states = [im._input(node, i) for i in range(len(node.input))]
    if states and all(isinstance(s, _Q) for s in states):
        im._set(node, _Q(_emit_concat(im, node, [(s.value, None) for s in states], None, at["axis"],
                                      node.output[0], im._name(node))))
        return
    ins = [im._dq(node, i, f"input {i}") for i in range(len(node.input))]

    def make(yq, lo, hi, out, name):
        return _emit_concat(im, node, [(s.value, s.q) for s in ins], yq, at["axis"], out, name, lo, hi)
    im._set(node, _Pending(node, make))


def _qlinear_concat(im: _Importer, node) -> None:
    """QLinearConcat(ys, yz, x0, x0s, x0z, x1, ...) (com.microsoft)."""
    at = im._attrs(node, {"axis": _Attr("int")})
    if at["axis"] is None:
        raise _Problem(node, "attribute 'axis' is required")
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise _Problem(node, f"has {len(node.input)} inputs: expected Y_scale, Y_zero_point and triples")
    yq = im._params(node, 0, 1, "Y")
    ins = [(im._q(node, i, f"input {(i - 2) // 3}"), im._params(node, i + 1, i + 2, f"input {(i - 2) // 3}"))
           for i in range(2, len(node.input), 3)]
    im._set(node, _Q(_emit_concat(im, node, ins, yq, at["axis"], node.output[0], im._name(node))))


def _emit_concat(im: _Importer, node, ins, yq, axis: int, out: str, name: str, lo: int = -128,
                 hi: int = 127) -> str:
    """Requantise each input whose scale differs from the output's (or when clipping), then Concat."""
    values = []
    for k, (v, q) in enumerate(ins):
        if q is not None and yq is not None and (not q.same_as(yq) or (lo, hi) != INT8):
            op = _rescale_op(im.arithmetic, im._shape(v), "int8", int(q.zero_point), float(q.scale),
                             float(yq.scale), int(yq.zero_point), lo, hi)
            v = im._emit(f"{name}/requant{k}", [(f"requant{k}", op, yq)], (v,), f"{out}/in{k}",
                         {"op_type": node.op_type}, int8_in_onnx=False)
        values.append(v)
    shapes = [im._shape(v) for v in values]
    ndim = len(shapes[0])
    if not -ndim <= axis < ndim:
        raise _Problem(node, f"axis = {axis} is outside the inputs' {ndim} dimensions")
    dtypes = {im.g.values[v].dtype for v in values}
    if len(dtypes) != 1:
        raise _Problem(node, f"inputs have different dtypes {sorted(dtypes)}")
    op = Concat(shapes, axis, dtypes.pop())
    return im._emit(name, [("concat", op, yq)], tuple(values), out, {"op_type": node.op_type})


def _identity(im: _Importer, node) -> None:
    im._attrs(node, {})
    im._set(node, im._input(node, 0))


def _constant(im: _Importer, node) -> None:
    from onnx import numpy_helper
    if len(node.attribute) != 1:
        raise _Problem(node, f"expected exactly one attribute, got {len(node.attribute)}")
    a = node.attribute[0]
    if a.name == "value" and a.type == 4:
        arr = _to_array(numpy_helper, a.t)
    elif a.name == "value_float" and a.type == 1:
        arr = np.array(a.f, dtype=np.float32)
    elif a.name == "value_floats" and a.type == 6:
        arr = np.array(a.floats, dtype=np.float32)
    elif a.name == "value_int" and a.type == 2:
        arr = np.array(a.i, dtype=np.int64)
    elif a.name == "value_ints" and a.type == 7:
        arr = np.array(a.ints, dtype=np.int64)
    else:
        raise _Problem(node, f"attribute {a.name!r} is not supported")
    im._set(node, _Const(arr))


# Most inputs each op takes (None: any number); every op has one output, MaxPool an optional second.
_MAX_INPUTS = {"QuantizeLinear": 3, "DequantizeLinear": 3, "QLinearConv": 9, "Conv": 3, "QLinearMatMul": 8,
               "MatMul": 2, "QGemm": 9, "Gemm": 3, "QLinearAdd": 8, "Add": 2, "QLinearMul": 8, "Mul": 2,
               "QLinearGlobalAveragePool": 5, "GlobalAveragePool": 1, "QLinearAveragePool": 5, "AveragePool": 1,
               "MaxPool": 1, "Flatten": 1, "Reshape": 2, "Relu": 1, "Clip": 3, "Concat": None,
               "QLinearConcat": None, "Identity": 1, "Constant": 0}


def _check_arity(node) -> None:
    most = _MAX_INPUTS[node.op_type]
    if most is not None and len(node.input) > most:
        raise _Problem(node, f"has {len(node.input)} inputs, {node.op_type} takes at most {most}")
    if not node.output or not node.output[0]:
        raise _Problem(node, "has no output")
    if len(node.output) > (2 if node.op_type == "MaxPool" else 1):
        raise _Problem(node, f"has {len(node.output)} outputs, {node.op_type} has one")


_HANDLERS: dict[str, Callable] = {
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "Conv": _conv, "QLinearConv": _qlinear_conv,
    "Gemm": _gemm, "QGemm": _qgemm, "MatMul": _matmul, "QLinearMatMul": _qlinear_matmul,
    "Add": _binary("add"), "Mul": _binary("mul"),
    "QLinearAdd": _qlinear_binary("add"), "QLinearMul": _qlinear_binary("mul"),
    "Relu": _relu_clip, "Clip": _relu_clip,
    "MaxPool": _max_pool, "AveragePool": _average_pool, "QLinearAveragePool": _qlinear_average_pool,
    "GlobalAveragePool": _global_average_pool, "QLinearGlobalAveragePool": _qlinear_global_average_pool,
    "Flatten": _flatten, "Reshape": _reshape, "Concat": _concat, "QLinearConcat": _qlinear_concat,
    "Identity": _identity, "Constant": _constant,
}
assert set(_HANDLERS) == set(SUPPORTED) == set(_MAX_INPUTS)


# ---------------------------------------------------------------- graph outputs and helpers



def _report(problems: list[str]) -> str:
    lines = "\n".join(f"  - {p}" for p in problems)
    supported = ", ".join(sorted(SUPPORTED))
    return (f"cannot import the ONNX model: {len(problems)} problem(s):\n{lines}\n"
            f"Supported ONNX ops: {supported}.  Activations must be int8 with per-tensor scales; weights int8, "
            "symmetric, per tensor or per output channel.")


def _topo(nodes: list, writer: dict, known: dict) -> tuple[list, list]:
    """Kahn's algorithm, stable in model order; (order, nodes that could not be placed)."""
    from collections import deque
    index = {id(n): i for i, n in enumerate(nodes)}
    ids = set(index)
    deps = {id(n): {id(writer[i]) for i in n.input if i and i in writer and i not in known
                    and id(writer[i]) in ids} for n in nodes}
    users: dict[int, list] = {}
    for n in nodes:
        for d in deps[id(n)]:
            users.setdefault(d, []).append(n)
    ready = deque(n for n in nodes if not deps[id(n)])
    order = []
    while ready:
        n = ready.popleft()
        order.append(n)
        for u in users.get(id(n), []):
            deps[id(u)].discard(id(n))
            if not deps[id(u)]:
                ready.append(u)
    placed = {id(n) for n in order}
    return order, [n for n in nodes if id(n) not in placed]


def _to_array(numpy_helper, t) -> np.ndarray:
    """An initializer's numpy value, or CompileError naming what is wrong with it."""
    if t.data_location == 1:
        raise CompileError(f"tensor {t.name!r} is stored in an external file: load the model with "
                           "onnx.load(path) or pass its path")
    if any(d < 0 for d in t.dims) or len(t.dims) > 8:
        raise CompileError(f"tensor {t.name!r} has dimensions {list(t.dims)}")
    if math.prod(t.dims) > 1 << 28:
        raise CompileError(f"tensor {t.name!r} with dimensions {list(t.dims)} is too large")
    try:
        a = numpy_helper.to_array(t)
    except Exception as exc:
        raise CompileError(f"tensor {t.name!r} (dimensions {list(t.dims)}) cannot be read: {exc}") from None
    return np.array(a)      # owned and writable


def _type_name(onnx, elem_type: int) -> str:
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)


def _describe(s) -> str:
    if s is None:
        return "nothing (the input is missing)"
    if isinstance(s, _Q):
        return f"the int8 tensor {s.value!r}"
    if isinstance(s, _DQ):
        return f"the dequantised tensor {s.value!r}"
    if isinstance(s, _Const):
        return f"a constant of dtype {s.array.dtype} and shape {list(s.array.shape)}"
    if isinstance(s, _ConstDQ):
        return f"a dequantised constant of shape {list(s.array.shape)}"
    if isinstance(s, _Float):
        return f"the float graph input {s.name!r} (not quantised)"
    if isinstance(s, _Pending):
        return f"the float output of node {s.node.name!r} ({s.node.op_type}), not followed by QuantizeLinear"
    return type(s).__name__


def _brief(a) -> str:
    a = np.asarray(a).ravel()
    if a.size == 1:
        return f"{a[0]}"
    return f"[{', '.join(f'{v:.4g}' if a.dtype.kind == 'f' else str(v) for v in a[:4])}{', ...' if a.size > 4 else ''}]"
