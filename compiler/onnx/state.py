"""The importer state: what each ONNX tensor is, the initializers, quant params and the graph being built.

For every ONNX tensor the importer records what it is in integer terms:

  Q        an int8 (or int32) Value of the graph
  DQ       a float tensor that is a dequantised Value (DequantizeLinear of a Q)
  Const    an initializer or Constant (weights, scales, zero points, shapes)
  ConstDQ  a dequantised constant (QDQ weights and biases)
  Float    a float graph input, waiting for its QuantizeLinear
  Pending  the float result of Conv/Gemm/Add/... waiting for the QuantizeLinear that gives its
           output scale; Relu and Clip in between tighten its range
  Broken   the output of a node that could not be imported

The Importer holds these, the Graph being built and the problems found so far; its methods read
a node's inputs and attributes as the handlers need them (raising Problem naming what is wrong)
and add ops to the graph.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import CompileError
from ..graph import Graph, QuantParams
from .load import to_array
from .ort_graph import kernels, optimised
from .refusals import Refusal

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


@dataclass
class Q:
    """An int8 (or int32) Value of the graph."""

    value: str


@dataclass
class DQ:
    """A dequantised Value: a float tensor that is q applied to an int8 Value."""

    value: str
    q: QuantParams


@dataclass
class Const:
    """An initializer or Constant."""

    array: np.ndarray


@dataclass
class ConstDQ:
    """A dequantised constant (QDQ weights and biases)."""

    array: np.ndarray
    q: QuantParams


@dataclass
class Float:
    """A float graph input, waiting for its QuantizeLinear."""

    name: str


@dataclass
class Pending:
    """The float output of an op, made once the QuantizeLinear after it gives the output scale."""

    node: object                 # the ONNX NodeProto computing it
    make: Callable               # (out QuantParams, lo, hi, value name, node name) -> value name
    lo: float = -math.inf
    hi: float = math.inf
    uses: int = 0


class Broken:
    """The output of a node that could not be imported (its consumers stay silent)."""


class Problem(Exception):
    """A node that cannot be imported, and why."""

    def __init__(self, node, why: str):
        super().__init__(why)
        self.node = node


@dataclass
class Attr:
    """What type an attribute must have, and its value when the node does not give it."""

    kind: str               # "int", "ints", "float", "string", "tensor"
    default: object = None


_ATTR_TYPES = {1: "float", 2: "int", 3: "string", 4: "tensor", 6: "floats", 7: "ints"}


def describe(s: object) -> str:
    """What an input is, in a message: "the int8 tensor 'x'", "a constant of dtype ..."."""
    if s is None:
        return "nothing (the input is missing)"
    if isinstance(s, Q):
        return f"the int8 tensor {s.value!r}"
    if isinstance(s, DQ):
        return f"the dequantised tensor {s.value!r}"
    if isinstance(s, Const):
        return f"a constant of dtype {s.array.dtype} and shape {list(s.array.shape)}"
    if isinstance(s, ConstDQ):
        return f"a dequantised constant of shape {list(s.array.shape)}"
    if isinstance(s, Float):
        return f"the float graph input {s.name!r} (not quantised)"
    if isinstance(s, Pending):
        return f"the float output of node {s.node.name!r} ({s.node.op_type}), not followed by QuantizeLinear"
    return type(s).__name__


def brief(a: np.ndarray) -> str:
    """An array in a message: its value, or its first four values."""
    a = np.asarray(a).ravel()
    if a.size == 1:
        return f"{a[0]}"
    return f"[{', '.join(f'{v:.4g}' if a.dtype.kind == 'f' else str(v) for v in a[:4])}{', ...' if a.size > 4 else ''}]"


def as_int8(a: np.ndarray) -> np.ndarray:
    """uint8 values as the importer holds them: the int8 q - 128.

    The one decision behind uint8 support: a uint8 tensor q with zero point z is the int8 tensor
    q - 128 with zero point z - 128.  Every affine quantised op reads only q - z and writes
    round(...) + z clamped to the type's range, so it computes the same on both (the clamp to
    [0, 255] becomes [-128, 127], relu and clip bounds and tables move with the zero point); the
    runtime flips the top bit of uint8 graph inputs and outputs (compiler.runtime).  The float forms
    that add before rounding are the exception: Importer.uint8_kernel gives them uint8=True.
    """
    return (np.asarray(a).astype(np.int16) - 128).astype(np.int8)


# ---------------------------------------------------------------- the importer

@dataclass
class Importer:
    """The state of one import: the ONNX tensors, the Graph being built, the problems found."""

    onnx: object
    model: object
    arithmetic: str
    dims: dict
    g: Graph = field(default_factory=Graph)
    state: dict = field(default_factory=dict)
    problems: list[Refusal] = field(default_factory=list)
    node_names: dict = field(default_factory=dict)    # id(NodeProto) -> unique name
    aliases: dict = field(default_factory=dict)       # Value name -> further ONNX int8 tensor names
    float_shapes: dict = field(default_factory=dict)  # float graph input -> its shape
    uint8: set = field(default_factory=set)           # ONNX tensors whose quantised values are uint8
    readers: dict | None = None                       # ONNX tensor -> op types of the nodes reading it
    writers: dict | None = None                       # ONNX tensor -> op type of the node writing it
    resize_layouts: dict | None = None                # Resize node -> the layout onnxruntime runs it in (ort_layout)
    ort_kernels: dict | None = None                   # QDQ node's output -> how onnxruntime runs it (ort_graph)
    dynamic: bool = False                             # one sample of a DynamicGraph (compiler.dynamic lowers it)

    def problem(self, where: str, why: str) -> None:
        """Record a problem that is not a node's: where it is (an initializer, a graph input or output) and why."""
        self.problems.append(Refusal(where, why))

    def node_problem(self, node: NodeProto, why: str) -> None:
        """Record why a node cannot be imported (the refusal groups these by op type)."""
        op = node.op_type.decode("utf-8", "replace") if isinstance(node.op_type, bytes) else node.op_type
        self.problems.append(Refusal(self.where(node), why, op or "?", self.node_names.get(id(node), node.name)))

    def reader_ops(self, tensor: str) -> list[str]:
        """The op types of the nodes that read an ONNX tensor (the graph's, mapped once)."""
        if self.readers is None:
            self.readers = {}
            for n in self.model.graph.node:
                for i in n.input:
                    self.readers.setdefault(i, []).append(n.op_type)
        return self.readers.get(tensor, [])

    def writer_op(self, tensor: str) -> str:
        """The op type of the node that writes an ONNX tensor ("" for a graph input or initializer)."""
        if self.writers is None:
            self.writers = {o: n.op_type for n in self.model.graph.node for o in n.output}
        return self.writers.get(tensor, "")

    def ort_kernel(self, node: NodeProto) -> str | None:
        """How onnxruntime's default session runs this QDQ Add, Mul, Conv, Gemm or MatMul: "float", or fused on
        its "uint8" or "int8" kernel (ort_graph.kernels, asked once per model); None where it cannot tell."""
        if self.ort_kernels is None:
            try:
                self.ort_kernels = kernels(self.model, optimised(self.onnx, self.model))
            except Exception as exc:       # onnxruntime's own error types: the model's fault
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise Problem(node, f"onnxruntime cannot optimise the model to tell how it runs this node: "
                              f"{first}") from None
        return self.ort_kernels.get(node.output[0]) if node.output else None

    def where(self, node: NodeProto) -> str:
        """A node as a message names it: its unique name and its op type."""
        return f"node {self.node_names.get(id(node), node.name)!r} ({node.op_type})"

    def mark_broken(self, node: NodeProto) -> None:
        """Mark the outputs of a node that could not be imported (their readers stay silent)."""
        for o in node.output:
            if o:
                self.state[o] = Broken()

    def set(self, node: NodeProto, state: object) -> None:
        """Record what the node's output is (Q, DQ, Const, Pending, ...)."""
        self.state[node.output[0]] = state

    def name(self, node: NodeProto) -> str:
        """The node's unique name (a node without one is named after its op type and position)."""
        return self.node_names[id(node)]

    def value_name(self, base: str) -> str:
        """base, or base#k if the graph has a Value of that name already."""
        name, k = base, 1
        while name in self.g.values:
            k += 1
            name = f"{base}#{k}"
        return name

    def node_name(self, base: str) -> str:
        """base, or base#k if the graph has a node of that name already."""
        used = {n.name for n in self.g.nodes}
        name, k = base, 1
        while name in used:
            k += 1
            name = f"{base}#{k}"
        return name

    def emit(self, node_name: str, steps: list, inputs: tuple[str, ...], out_name: str, info: dict,
             int8_in_onnx: bool = True) -> str:
        """Add a chain of (suffix, op, quant) steps: the first reads `inputs`, the last writes out_name.

        info["onnx_outputs"] lists the ONNX int8 tensors equal to the result (not a float one).
        """
        prev = inputs
        for k, (suffix, op, q) in enumerate(steps):
            last = k == len(steps) - 1
            vname = self.value_name(out_name if last else f"{out_name}/{suffix}")
            nname = self.node_name(node_name if last else f"{node_name}/{suffix}")
            self.g.add(op, *prev, name=nname, output=vname, quant=q,
                       info={**info, "onnx_outputs": [out_name] if last and int8_in_onnx else []})
            prev = (vname,)
        return prev[0]

    def input(self, node: NodeProto, i: int) -> object:
        """What the node's input i is (Q, DQ, Const, ...), or None if it is missing."""
        if i >= len(node.input) or not node.input[i]:
            return None
        return self.state[node.input[i]]

    def const(self, node: NodeProto, i: int, what: str, optional: bool = False) -> np.ndarray | None:
        """The array of a constant input (None if it is optional and missing); Problem if it is not one."""
        s = self.input(node, i)
        if s is None:
            if optional:
                return None
            raise Problem(node, f"{what} (input {i}) is missing")
        if not isinstance(s, Const):
            raise Problem(node, f"{what} ({node.input[i]!r}) must be an initializer or Constant")
        return s.array

    def int8(self, node: NodeProto, i: int, what: str) -> str:
        """An int8 Value input (QOperator)."""
        s = self.input(node, i)
        if isinstance(s, Q) and self.g.values[s.value].dtype == "int8":
            return s.value
        raise Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must be an int8 "
                      f"tensor, got {describe(s)}")

    def dequantised(self, node: NodeProto, i: int, what: str) -> DQ:
        """A dequantised activation input (QDQ)."""
        s = self.input(node, i)
        if isinstance(s, DQ):
            return s
        raise Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must come from a "
                      f"DequantizeLinear of an int8 activation, got {describe(s)}")

    def params(self, node: NodeProto, si: int, zi: int, what: str, *, dtypes: tuple[str, ...] = ("int8", "uint8"),
               axis: int | None = None, per_channel: bool = False, missing: str | None = None) -> QuantParams:
        """QuantParams from a scale input and a zero-point input; a uint8 zero point z is the int8 z - 128
        (as_int8).  `missing` is the zero point's dtype when the input is absent (None: refused)."""
        scale = self.const(node, si, f"{what} scale")
        zp = self.const(node, zi, f"{what} zero point", optional=True)
        if scale.dtype != np.float32:
            raise Problem(node, f"{what} scale has dtype {scale.dtype}, expected float32")
        if zp is None:
            if missing is None:
                raise Problem(node, f"{what} zero point (input {zi}) is missing: the importer needs it to know "
                              "whether the tensor is int8 or uint8")
            zp = np.zeros(scale.shape, dtype=missing)
        if zp.dtype.name not in dtypes:
            raise Problem(node, f"{what} zero point has dtype {zp.dtype}, expected {' or '.join(dtypes)}")
        if zp.dtype == np.uint8:
            zp = as_int8(zp)
        if scale.ndim > 1 or scale.size == 0 or (scale.ndim == 1 and scale.size > 1 and not per_channel):
            raise Problem(node, f"{what} scale has shape {scale.shape}: expected a scalar"
                          + (" or a vector" if per_channel else " (per-tensor activations)"))
        if zp.shape != scale.shape and zp.size != 1:
            raise Problem(node, f"{what} zero point has shape {zp.shape}, its scale {scale.shape}")
        if scale.ndim == 1 and scale.size == 1:     # one scale is per tensor, whatever the axis says
            scale, zp = scale.reshape(()), zp.reshape(())
        if zp.size == 1 and scale.ndim == 1:
            zp = np.full(scale.shape, zp.ravel()[0])
        try:
            return QuantParams(scale, zp.astype(np.int64), axis if scale.ndim else None)
        except CompileError as exc:
            raise Problem(node, f"{what}: {exc}") from None

    def uint8_kernel(self, tensors: tuple[str, ...], node: NodeProto | None = None) -> bool:
        """Does onnxruntime run the op reading and writing these quantised ONNX tensors on its uint8 kernel
        (all of them uint8, or for a QDQ Add, Mul or AveragePool `node`, onnxruntime's optimised graph says so: its
        QDQS8ToU8 pass makes int8 groups uint8)?  The float forms that add a zero point before rounding
        (QLinearAdd, QLinearMul, QLinearAveragePool) round differently there than on the int8 view (as_int8),
        so they are imported with uint8=True (compiler.reference.excess); every other op computes the same on
        both."""
        if node is not None and self.arithmetic == "onnxruntime" and self.ort_kernel(node) in ("uint8", "int8"):
            return self.ort_kernel(node) == "uint8"
        return all(t in self.uint8 for t in tensors)

    def note_uint8(self, node: NodeProto, tensors: tuple[tuple[str, int], ...]) -> None:
        """Record which of a QOperator node's (ONNX tensor, zero-point input) pairs are uint8."""
        self.uint8.update(t for t, zi in tensors if self.is_uint8(node, zi))

    def is_uint8(self, node: NodeProto, zi: int, missing: str | None = None) -> bool:
        """Whether the zero point input zi (or, absent, the dtype `missing`) says the tensor is uint8."""
        zp = self.input(node, zi)
        return (zp.array.dtype == np.uint8) if isinstance(zp, Const) else missing == "uint8"

    def attrs(self, node: NodeProto, spec: dict[str, Attr]) -> dict:
        """The node's attributes by `spec`, defaults filled in; Problem for an unknown or mistyped one."""
        out = {k: a.default for k, a in spec.items()}
        seen = set()
        for a in node.attribute:
            if a.name in seen:
                raise Problem(node, f"attribute {a.name!r} is given twice")
            seen.add(a.name)
            if a.name not in spec:
                raise Problem(node, f"attribute {a.name!r} is not supported")
            kind = _ATTR_TYPES.get(a.type)
            if kind != spec[a.name].kind:
                raise Problem(node, f"attribute {a.name!r} has type {kind or a.type}, expected "
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
                out[a.name] = to_array(self.onnx, a.t)
        return out

    def shape(self, value: str) -> tuple[int, ...]:
        """The shape of a Value of the graph."""
        return self.g.values[value].shape
