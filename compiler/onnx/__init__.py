"""compiler.from_onnx: int8 ONNX models (onnxruntime's static quantizer) to a compiler Graph.

Both formats that `onnxruntime.quantization.quantize_static` writes are read:
QOperator (QLinearConv, QGemm, QLinearAdd, ... between a QuantizeLinear at the
input and a DequantizeLinear at the output) and QDQ (float Conv, Gemm, Add, ...
each between DequantizeLinear and QuantizeLinear nodes).  The importer tracks,
for every ONNX tensor, what it is in integer terms (an int8 Value, a dequantised
one, a constant, a float op waiting for its QuantizeLinear: compiler.onnx.state),
so that a QDQ group DQ -> Conv -> Q becomes the same conv2d node as a QLinearConv.
Layout ops (MaxPool, Flatten, Reshape) commute with per-tensor dequantisation
and act on the int8 Value directly.

Arithmetic: arithmetic="onnxruntime" uses the float32 forms of the ops, which match
onnxruntime's QLinear kernels bit for bit; arithmetic="fixed" the integer
multiplier/shift keywords (compiler.quant, float64 ratio of the float32 scales).
The choice is made in one function per op family, in compiler.onnx.arithmetic.

The modules, each importing only those above it (onnx itself, an optional extra, only in load; its
reference evaluator in fold):

  load         the onnx package, the model from a path, bytes or a ModelProto, its tensors
  ort_graph    onnxruntime's optimised graph of the model: how it runs each QDQ Add, Mul, Conv, Gemm, MatMul
  arithmetic   the arithmetic forms: ONNX scales to the keywords of the compiler's ops
  refusals     what an import refuses, and the one message listing it by op type
  state        what each ONNX tensor is; the Importer: inputs, attributes, quant params, the graph built
  quant        QuantizeLinear, DequantizeLinear
  conv         Conv, QLinearConv, Gemm, QGemm, MatMul, QLinearMatMul (and the window geometry)
  elementwise  Add, Mul, QLinearAdd, QLinearMul, Relu, Clip
  pool         MaxPool, AveragePool, QLinearAveragePool, GlobalAveragePool, QLinearGlobalAveragePool
  shape        Flatten, Reshape, Concat, QLinearConcat, Identity, Constant
  fold         Shape, Size and every node of constants folded at import (onnx's reference evaluator)
  registry     the handler table: op type -> handler, what it becomes, inputs, domain, its docs row
  importer     one import: initializers, graph inputs, node order, the handlers, graph outputs
  placement    host fallback: which nodes run on the host, the model cut into NPU stages and host parts
  dynamic      symbolic dimensions given as ranges: a DynamicGraph
  opdoc        docs/operators.md from the handler table (not imported by the package)
  __init__     from_onnx
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Mapping

from ..dynamic.graph import DynamicGraph
from ..errors import CompileError
from ..graph import Graph
from ..host import HostedGraph
from .arithmetic import ARITHMETIC
from .dynamic import dynamic_graph, split_ranges
from .importer import import_graph
from .load import check_model, import_onnx, load, source_name
from .placement import any_host, hosted_graph

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import ModelProto

__all__ = ["from_onnx"]


def from_onnx(model: str | os.PathLike | bytes | ModelProto, *, arithmetic: str = "onnxruntime",
              dims: Mapping[str, int | tuple[int, ...]] | None = None,
              host_fallback: bool = True) -> Graph | DynamicGraph | HostedGraph:
    """A validated Graph from an int8 ONNX model (path, bytes or onnx.ModelProto).

    A model with nodes the NPU does not run (compiler.onnx.placement) gives a compiler.host.HostedGraph: NPU
    stages and host parts run by onnxruntime; host_fallback=False refuses it instead, listing those nodes.

    `dims` fixes symbolic dimensions: {"batch": 1} by dim_param name, or {"x": (1, 3, 224, 224)}
    by input name.  A range {"height": (32, 512)} (or a compiler.Dim) for a dim_param gives a
    compiler.dynamic.graph.DynamicGraph instead, which build() makes one binary for the range.
    Raises CompileError listing every node that cannot be imported.
    """
    if arithmetic not in ARITHMETIC:
        raise CompileError(f"arithmetic must be one of {ARITHMETIC}, got {arithmetic!r}")
    if dims is not None and (not isinstance(dims, Mapping) or not all(isinstance(k, str) for k in dims)):
        shown = " ".join(repr(dims).split())       # one line, whatever the value's repr
        raise CompileError(f"dims must map names to sizes, shapes or ranges, e.g. {{'batch': 1}}; "
                           f"got {shown[:200]}")
    onnx = import_onnx()
    proto = load(onnx, model)
    fixed, ranges = split_ranges(proto, dict(dims or {}))
    if ranges:
        graph = dynamic_graph(onnx, proto, arithmetic, fixed, ranges)
    else:
        graph = host_fallback and _hosted(onnx, proto, arithmetic, dict(dims or {}), source_name(model))
        graph = graph or import_graph(onnx, proto, arithmetic, dict(dims or {}))
    check_model(onnx, proto, source_name(model))    # what onnxruntime would refuse, refused too
    return graph


def _hosted(onnx, proto: ModelProto, arithmetic: str, dims: dict, where: str) -> HostedGraph | None:
    """The model cut into NPU stages and host parts, or None if every node runs on the NPU (the whole model
    checked as onnxruntime checks it first, so that each stage is cut from a valid model)."""
    if not any_host(onnx, proto):
        return None
    try:
        check_model(onnx, proto, where)
    except CompileError:
        return None                 # the import names every problem first, then the checker's
    return hosted_graph(onnx, proto, arithmetic, dims)
