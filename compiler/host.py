"""Host parts: the ONNX subgraphs of a network that run on the host, through onnxruntime, and the staged graph.

A model whose ops the NPU does not all run (compiler.onnx.placement decides which, from the registry) is cut
into stages run one after another: NPU stages (a compiler Graph each, one program each once built) and host
parts (an ONNX model each, run by onnxruntime).  Tensors cross between them in the ONNX model's own types
(int8, uint8, or float where the model has them there).

onnxruntime is an optional extra: only a model with host parts imports it (`import_ort`), and says which
extra to install if it is missing.  A host part's session is made once, single-threaded and at SESSION_LEVEL,
so that its results are reproducible (docs/runtime.md, "Host fallback").
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Callable

import numpy as np

from .errors import CompileError
from .graph import Graph

SESSION_LEVEL = "ORT_ENABLE_ALL"
"""The graph optimisation level of every host part's session: onnxruntime's default, the level a user's own
session of the whole model runs at, so that the host part fuses its nodes (a DQ -> op -> Q group into a QLinear
kernel, say) exactly as that session does."""

DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64, "int8": np.int8,
          "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32, "uint32": np.uint32,
          "int64": np.int64, "uint64": np.uint64, "bool": np.bool_}
"""The element types a tensor between stages may have, by the name the compiled file gives them."""

ONNX_DTYPES = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
               10: "float16", 11: "float64", 12: "uint32", 13: "uint64"}
"""ONNX's TensorProto element types by number, as DTYPES names them."""


def nodes_text(n: int) -> str:
    """`1 node` or `n nodes`, for the stage lines of reports and messages."""
    return f"{n} node" if n == 1 else f"{n} nodes"


def import_ort() -> ModuleType:
    """The onnxruntime module, or CompileError (one line) saying which extra to install."""
    try:
        import onnxruntime
    except ImportError:
        raise CompileError("this model has host parts, which run on onnxruntime: "
                           "pip install 'nnp-toolchain[onnx]'") from None
    return onnxruntime


@dataclass
class HostPart:
    """One host part: an ONNX model (its bytes) of the nodes it runs, its boundary tensors and its MACs.

    `inputs` and `outputs` are tensor descriptions {"name", "dtype" (of DTYPES), "shape" (sizes; a string or
    None for an axis the model leaves open)}; `nodes` are [name, op_type, why it runs on the host]."""

    name: str
    model: bytes
    inputs: list[dict]
    outputs: list[dict]
    nodes: list[list[str]]
    macs: int = 0

    @property
    def sha256(self) -> str:
        """The SHA-256 of the model's bytes, which the compiled file records."""
        return hashlib.sha256(self.model).hexdigest()

    @property
    def ops(self) -> str:
        """Its op types, in node order, each once: the ops column of the layer table."""
        return ", ".join(dict.fromkeys(n[1] for n in self.nodes))

    def session(self):
        """An onnxruntime session of the part: single-threaded, sequential, at SESSION_LEVEL (CompileError, one
        line, if onnxruntime refuses the model)."""
        ort = import_ort()
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = 1
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, SESSION_LEVEL)
        opts.log_severity_level = 3
        try:
            return ort.InferenceSession(self.model, opts, providers=["CPUExecutionProvider"])
        except Exception as exc:        # onnxruntime's own exception types (an optional extra)
            raise CompileError(f"host part {self.name}: onnxruntime cannot load it: {' '.join(str(exc).split())[:300]}"
                               ) from None


def run_part(part: HostPart, session, env: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a host part's session on its inputs, taken from env by name; its outputs by name."""
    feeds = {t["name"]: env[t["name"]] for t in part.inputs}
    try:
        results = session.run([t["name"] for t in part.outputs], feeds)
    except Exception as exc:        # onnxruntime's own exception types
        raise CompileError(f"host part {part.name}: onnxruntime cannot run it: {' '.join(str(exc).split())[:300]}"
                           ) from None
    return {t["name"]: np.asarray(r) for t, r in zip(part.outputs, results)}


def check_array(t: dict, a: np.ndarray, what: str) -> np.ndarray:
    """The array as a stage takes tensor t, or CompileError naming its dtype or shape."""
    a = np.asarray(a)
    want = np.dtype(DTYPES[t["dtype"]])
    if a.dtype != want:
        raise CompileError(f"{what} {t['name']} takes {t['dtype']}, got {a.dtype}")
    fixed = [d if isinstance(d, int) else None for d in t["shape"]]
    if a.ndim != len(fixed) or any(d is not None and d != n for d, n in zip(fixed, a.shape)):
        shown = tuple(d if d is not None else "?" for d in fixed)
        raise CompileError(f"{what} {t['name']} has shape {shown}, got {a.shape}")
    return a


@dataclass
class HostedGraph:
    """A network cut into stages run in order: NPU Graphs and HostParts (what from_onnx returns for a model
    with host parts; build() compiles it into a compiler.library.HostedLibrary).

    `npu_only` imports the whole model for the NPU alone again, which refuses it with the importer's listing
    of every node that cannot run (build(..., host_fallback=False))."""

    name: str
    stages: list[Graph | HostPart]
    inputs: list[dict]
    outputs: list[dict]
    tensors: dict[str, dict]              # every tensor between stages, described, by name
    npu_only: Callable[[], Graph] = field(repr=False, default=None)

    def stage_tensors(self, names_in: list[str], names_out: list[str]) -> tuple[list[dict], list[dict]]:
        """A stage's inputs and outputs described, in the order its program takes and gives them."""
        return [self.tensors[n] for n in names_in], [self.tensors[n] for n in names_out]

    @property
    def host_parts(self) -> list[HostPart]:
        return [s for s in self.stages if isinstance(s, HostPart)]

    def __str__(self) -> str:
        rows = [f"{self.name}: {len(self.stages)} stages"]
        for s in self.stages:
            if isinstance(s, HostPart):
                rows.append(f"  {s.name} (host): {nodes_text(len(s.nodes))}: {s.ops}")
            else:
                rows.append(f"  {s.name} (npu): {nodes_text(len(s.nodes))}")
        return "\n".join(rows)
