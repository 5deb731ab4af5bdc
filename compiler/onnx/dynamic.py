"""An ONNX model whose symbolic dimensions range: `dims={"height": (32, 512)}` gives a DynamicGraph.

The DynamicGraph imports the model again at each set of dim values it is asked for (the static
import, compiler.onnx.importer); building it is compiler.dynamic.network's.
"""
from __future__ import annotations

from types import ModuleType
from typing import TYPE_CHECKING

from ..dims import Dim
from ..dynamic.graph import DynamicGraph
from ..errors import CompileError
from .importer import import_graph

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import ModelProto


def split_ranges(proto: ModelProto, dims: dict) -> tuple[dict, dict[str, Dim]]:
    """dims split into the fixed ones and the ranges (a dim_param name with (lo, hi) or a Dim)."""
    params = {d.dim_param for vi in proto.graph.input for d in vi.type.tensor_type.shape.dim if d.dim_param}
    inputs = {vi.name for vi in proto.graph.input}
    fixed, ranges = {}, {}
    for key, v in dims.items():
        if isinstance(v, Dim):
            ranges[key] = Dim(key, v.lo, v.hi) if v.name != key else v
        elif key in params and key not in inputs and isinstance(v, (tuple, list)):
            if len(v) != 2:
                raise CompileError(f"dims[{key!r}] = {v!r}: a symbolic dimension takes one size or a range "
                                   f"(lo, hi)")
            ranges[key] = Dim(key, *v)
        else:
            fixed[key] = v
    return fixed, ranges


def dynamic_graph(onnx: ModuleType, proto: ModelProto, arithmetic: str, fixed: dict,
                  ranges: dict[str, Dim]) -> DynamicGraph:
    """The DynamicGraph of an ONNX model whose symbolic dimensions `ranges` vary."""
    dg = DynamicGraph(lambda values: import_graph(onnx, proto, arithmetic, {**fixed, **values}, dynamic=True),
                      tuple(ranges.values()))
    dg.at(dg.high)        # import errors now, at the largest shape
    return dg
