"""build(): the one front door of the compiler, and Built, what every kind of build returns.

    build(op, *more)        an op, or a chain (each output feeds the next op's first input): a Kernel
    build(dynamic_op, ...)  an op with a compiler.Dim in its shape: one program for its whole range
                            (a DynamicKernel)
    build(graph)            a compiler.Graph: the whole network in one program (a Library); with Dims in
                            its inputs, or a DynamicGraph, one program for their whole range
    build(hosted)           a compiler.host.HostedGraph (from_onnx of a model with host parts): a program per
                            NPU stage and the host parts between them (a HostedLibrary); host_fallback=False
                            refuses it, listing every node the NPU cannot run
"""
from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from nnpsim.config import Config
from nnpsim.stats import Stats

from .dims import DynamicOp
from .dynamic.graph import DynamicGraph
from .dynamic.kernel import build_dynamic
from .dynamic.network import build_dynamic_network
from .errors import CompileError
from .graph import Graph
from .graphcheck import check_machine
from .host import HostedGraph, HostPart, nodes_text
from .kernel import compile_kernel
from .library import HostedLibrary, Library
from .network.build import build_network
from .ops import Op
from .schedule import Schedule
from .sizes import check_layer


@runtime_checkable
class Built(Protocol):
    """What build() returns (a compiler.kernel.Kernel, a compiler.dynamic.kernel.DynamicKernel or a
    compiler.library.Library): run it on the simulator, save its binary, read its assembly and the
    statistics of its last run."""

    asm: str
    stats: Stats | None

    def run(self, *inputs: np.ndarray) -> np.ndarray | list[np.ndarray]:
        """Run on the simulator; the output (a list of them if several)."""

    def save(self, path: str | Path) -> None:
        """Write the binary that `nnpsim run` accepts."""


def build(op: Op | DynamicOp | Graph | DynamicGraph | HostedGraph, *more_ops: Op | DynamicOp,
          config: Config | None = None, schedule: Schedule | None = None, fuse: bool = True,
          host_fallback: bool = True) -> Built:
    """Compile an op, a chain, a dynamic op or a graph into one program (see the module docstring).

    A chain's each output feeds the next op's first input.  With `schedule`, use it (it is replayed on these ops: CompileError if it does not fit them)
    instead of searching.  Given an op with a compiler.Dim in its shape, one program for its whole range
    (compiler.dynamic.kernel.DynamicKernel).  Given a compiler.Graph instead, compile the whole network into
    one program (a compiler.library.Library); fuse=False keeps one kernel per graph node.  A HostedGraph
    gives a compiler.library.HostedLibrary, or with host_fallback=False the importer's refusal of the model.
    """
    cfg = (config or Config()).validate()
    if isinstance(op, (Graph, DynamicGraph, HostedGraph)) and (more_ops or schedule is not None):
        raise CompileError("build(graph) takes the graph alone")
    if isinstance(op, HostedGraph):
        return build_hosted(op, cfg, fuse, host_fallback)
    if isinstance(op, DynamicGraph):
        return build_dynamic_network(op, cfg)
    if isinstance(op, Graph):
        if op.dims:
            return build_dynamic_network(op.dynamic(), cfg)
        return _build_graph(op, cfg, fuse)
    for o in (op, *more_ops):
        if isinstance(o, Op):
            check_op_sizes(o.kind, o, cfg)
    if isinstance(op, DynamicOp):
        return build_dynamic(op, *more_ops, config=cfg, schedule=schedule, fuse=fuse)
    return compile_kernel((op,) + more_ops, cfg, schedule)


def _build_graph(graph: Graph, cfg: Config, fuse: bool) -> Library:
    """A static graph's one program, every node's sizes checked first and all its data checked to fit DDR."""
    for node in graph.nodes:
        check_op_sizes(f"node {node.name} ({node.op.kind})", node.op, cfg)
    lib = build_network(graph, cfg, fuse=fuse)
    check_machine(lib.program, cfg, "the network")       # all its data (weights, tensors, arena) in DDR
    return lib


def build_hosted(hosted: HostedGraph, cfg: Config, fuse: bool, host_fallback: bool) -> HostedLibrary:
    """A program per NPU stage and the host parts between them, each host part's session made once to check it
    (onnxruntime is needed here already); with host_fallback=False, the refusal of the model for the NPU alone."""
    if not host_fallback:
        hosted.npu_only()            # raises the importer's CompileError listing every node the NPU cannot run
        raise CompileError(f"{hosted.name}: {nodes_text(sum(len(p.nodes) for p in hosted.host_parts))} run only on the "
                           "host, and host_fallback=False")
    stages: list[Library | HostPart] = []
    tensors = []
    for st in hosted.stages:
        if isinstance(st, HostPart):
            st.session()
            stages.append(st)
            tensors.append((st.inputs, st.outputs))
        else:
            stages.append(_build_graph(st, cfg, fuse))
            tensors.append(hosted.stage_tensors(st.inputs, st.outputs))
    return HostedLibrary(hosted.name, stages, hosted.inputs, hosted.outputs, cfg, tensors)


def check_op_sizes(what: str, op: Op, cfg: Config) -> None:
    """CompileError, before any search, unless the op has a lowering and its tensors and constants fit the
    configured DDR and its output the search's bound (compiler.sizes.check_layer)."""
    if not op.lowered:
        raise CompileError(f"{what}: {op.kind} has no NPU lowering yet (its numpy model is compiler.ops.{op.kind}; "
                           "docs/semantics.md)")
    consts = [np.asarray(v) for v in vars(op).values() if isinstance(v, np.ndarray)]
    tensors = [(c.shape, 1) for c in consts] + [(t.shape, np.dtype(t.dtype).itemsize)
                                                          for t in (*op.inputs, op.output)]
    check_layer(what, tensors, cfg)
