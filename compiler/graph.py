"""A whole network as a dataflow graph of compiler.ops nodes over named tensors.

A Graph holds Values (named int8/int32 tensors, with the quantisation that maps
them to real numbers where known) and Nodes (one compiler.ops op each, reading
Values in the order of the op's inputs and writing one Value): the NU and VU
ops and the layout ops Reshape (Flatten is a Reshape) and Concat, all in
compiler.ops.  `Graph.validate()` checks the whole thing and sorts the
nodes topologically; `Graph.reference()` runs it with each op's numpy model.

    g = Graph()
    x = g.input("x", (1, 3, 32, 32), quant=QuantParams(0.02, -3))
    y = g.add(ops.conv2d((1, 3, 32, 32), w, multiplier=m, shift=s), x, name="conv1")
    g.output(y)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Iterable, Mapping

import numpy as np

from . import reference as _sem
from .dims import Dim, DynamicOp, at, collect, has_dims, infer_values
from .dynamic.graph import DynamicGraph
from .errors import CompileError
from .ops import DTYPES, Op, Tensor, at_values, check_dtype
from .ops.checks import shape_arg
from .symbolic import Shapes, output_shape

_MAX_PROBLEMS = 30      # validate() lists at most this many problems, then counts the rest


# ---------------------------------------------------------------- quantisation

@dataclass(frozen=True, eq=False)
class QuantParams:
    """real = scale * (q - zero_point); per tensor (scale shape ()) or per channel along `axis`."""

    scale: np.ndarray           # float32, shape () or (C,)
    zero_point: np.ndarray      # int64, same shape as scale
    axis: int | None = None

    def __post_init__(self):
        scale = np.asarray(self.scale, dtype=np.float32)
        zp = np.asarray(self.zero_point)
        if zp.dtype.kind not in "iu":
            if zp.dtype.kind == "f" and np.all(np.isfinite(zp)) and np.all(zp == np.round(zp)):
                zp = zp.astype(np.int64)
            else:
                raise CompileError(f"zero_point must be integers, got {zp!r}")
        zp = zp.astype(np.int64)
        if zp.ndim == 0 and scale.ndim == 1:
            zp = np.full(scale.shape, int(zp), dtype=np.int64)
        if scale.ndim > 1 or scale.size == 0:
            raise CompileError(f"scale must be a scalar or a vector, got shape {scale.shape}")
        if zp.shape != scale.shape:
            raise CompileError(f"zero_point has shape {zp.shape}, scale has {scale.shape}")
        if not (np.all(np.isfinite(scale)) and np.all(scale > 0)):
            bad = scale[~(np.isfinite(scale) & (scale > 0))].ravel()[0]
            raise CompileError(f"scale must be positive and finite, got {bad}")
        if scale.ndim == 1 and self.axis is None:
            raise CompileError(f"a per-channel scale ({scale.size} values) needs an axis")
        object.__setattr__(self, "scale", scale)
        object.__setattr__(self, "zero_point", zp)
        if self.axis is not None:
            object.__setattr__(self, "axis", int(self.axis))

    @property
    def per_channel(self) -> bool:
        return self.scale.ndim == 1

    def same_as(self, other: QuantParams | None) -> bool:
        """The same mapping to reals (bitwise equal scales and zero points)."""
        if other is None or self.per_channel != other.per_channel:
            return False
        if self.per_channel and self.axis != other.axis:
            return False
        return (self.scale.shape == other.scale.shape and np.array_equal(self.scale, other.scale)
                and np.array_equal(self.zero_point, other.zero_point))

    def _along(self, a: np.ndarray, ndim: int) -> np.ndarray:
        """scale or zero point shaped to broadcast against an ndim array."""
        if not self.per_channel:
            return a
        axis = self.axis % ndim
        return a.reshape((1,) * axis + (-1,) + (1,) * (ndim - axis - 1))

    def quantize(self, x: np.ndarray) -> np.ndarray:
        """ONNX QuantizeLinear to int8, as onnxruntime computes it (compiler.reference.quantize_f32)."""
        x = np.asarray(x)
        return _sem.quantize_f32(x, self._along(self.scale, x.ndim), self._along(self.zero_point, x.ndim))

    def dequantize(self, q: np.ndarray) -> np.ndarray:
        """ONNX DequantizeLinear, as onnxruntime computes it (compiler.reference.dequantize_f32)."""
        q = np.asarray(q)
        return _sem.dequantize_f32(q, self._along(self.scale, q.ndim), self._along(self.zero_point, q.ndim))

    def __str__(self) -> str:
        if not self.per_channel:
            return f"s={_num(self.scale)} zp={int(self.zero_point)}"
        zps = np.unique(self.zero_point)
        zp = f"zp={int(zps[0])}" if zps.size == 1 else f"zp={int(zps.min())}..{int(zps.max())}"
        return (f"s[{self.scale.size}, axis {self.axis}]={_num(self.scale.min())}..{_num(self.scale.max())} "
                f"{zp}")

    def __repr__(self) -> str:
        return f"QuantParams({self})"


def _num(v) -> str:
    return f"{float(v):.4g}"


# ---------------------------------------------------------------- values and nodes

@dataclass
class Value:
    """A named tensor of the graph: shape, dtype ("int8" | "int32") and its quantisation if known."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    quant: QuantParams | None = None

    def __str__(self) -> str:
        return f"{self.name}{list(self.shape)}"


@dataclass
class Node:
    """One op of the graph: reads `inputs` (Value names, in the order of op.inputs), writes `output`."""

    name: str
    op: Op
    inputs: tuple[str, ...]
    output: str
    info: dict = field(default_factory=dict)   # ONNX-level facts for printing (op_type, scales, ...)


# ---------------------------------------------------------------- the graph

class Graph:
    """A dataflow graph of ops over named Values; build it with input(), add() and output()."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.values: dict[str, Value] = {}
        self.nodes: list[Node] = []
        self.inputs: list[str] = []
        self.outputs: list[str] = []

    # -- building

    def input(self, name: str, shape: tuple[int, ...], dtype: str = "int8",
              quant: QuantParams | None = None) -> str:
        """Declare a graph input; returns its Value name.  A compiler.Dim for its batch, height or width
        makes the graph dynamic: one binary for the whole range (`compiler.build(graph)`)."""
        if has_dims(shape):
            shape = tuple(shape)
            fixed = shape_arg(f"input {name!r} shape", [1 if isinstance(d, Dim) else d for d in shape])
            shape = tuple(d if isinstance(d, Dim) else n for d, n in zip(shape, fixed))
            collect({**{i: self.values[i].shape for i in self.inputs}, f"input {name}": shape})
        else:
            shape = shape_arg(f"input {name!r} shape", shape)
        self._new_value(name, shape, check_dtype(dtype), quant)
        self.inputs.append(name)
        return name

    @property
    def dims(self) -> tuple:
        """The compiler.Dims of the graph's inputs, in first-use order (none: a static graph)."""
        return tuple(collect({i: self.values[i].shape for i in self.inputs if i in self.values}))

    def add(self, op: Op, *inputs: str, name: str | None = None, output: str | None = None,
            quant: QuantParams | None = None, info: dict | None = None) -> str:
        """Append a node computing `op` on the named Values; returns its output Value name.  An op made
        with Dims (a compiler.dims.DynamicOp) reads Values of the same symbolic shapes."""
        if not isinstance(op, (Op, DynamicOp)):
            raise CompileError(f"node {name!r}: op must be a compiler.ops op, got {type(op).__name__}")
        name = name or self._fresh(op.kind)
        if any(n.name == name for n in self.nodes):
            raise CompileError(f"node name {name!r} is already used")
        output = output or name
        for problem in _input_problems(self, name, op, inputs):
            raise CompileError(problem)
        out = _symbolic_output(self, name, op) if isinstance(op, DynamicOp) else op.output
        self._new_value(output, out.shape, out.dtype, quant)
        self.nodes.append(Node(name, op, tuple(inputs), output, dict(info or {})))
        return output

    def output(self, *names: str) -> None:
        """Mark Values as graph outputs, in order."""
        for n in names:
            if n not in self.values:
                raise CompileError(f"output {n!r} is not a value of the graph")
            if n in self.outputs:
                raise CompileError(f"output {n!r} is already an output")
            self.outputs.append(n)

    def _new_value(self, name, shape, dtype, quant) -> None:
        if not isinstance(name, str) or not name:
            raise CompileError(f"a value name must be a non-empty string, got {name!r}")
        if name in self.values:
            raise CompileError(f"value name {name!r} is already used")
        if quant is not None:
            _check_quant(name, shape, quant)
        self.values[name] = Value(name, tuple(shape), dtype, quant)

    def _fresh(self, base: str) -> str:
        used = {n.name for n in self.nodes} | set(self.values)
        i = len(self.nodes)
        while f"{base}_{i}" in used:
            i += 1
        return f"{base}_{i}"

    def producer(self, value: str) -> Node | None:
        """The node writing `value` (None for graph inputs)."""
        return next((n for n in self.nodes if n.output == value), None)

    def consumers(self, value: str) -> list[Node]:
        """The nodes reading `value`."""
        return [n for n in self.nodes if value in n.inputs]

    def rename(self, old: str, new: str) -> None:
        """Rename a Value everywhere it is used."""
        if old not in self.values:
            raise CompileError(f"no value {old!r} to rename")
        if new in self.values:
            raise CompileError(f"value name {new!r} is already used")
        v = self.values.pop(old)
        v.name = new
        self.values[new] = v
        self.nodes = [Node(n.name, n.op, tuple(new if i == old else i for i in n.inputs),
                           new if n.output == old else n.output, n.info) for n in self.nodes]
        self.inputs = [new if i == old else i for i in self.inputs]
        self.outputs = [new if i == old else i for i in self.outputs]

    # -- checking

    def validate(self) -> Graph:
        """Check names, shapes, dtypes, producers and acyclicity; sort nodes topologically."""
        problems = self._problems()
        if not problems:
            order, cycle = _toposort(self)
            if cycle:
                problems.append("cycle: " + " -> ".join(cycle))
            else:
                self.nodes = order
        if problems:
            more = len(problems) - _MAX_PROBLEMS
            lines = problems[:_MAX_PROBLEMS] + ([f"... and {more} more"] if more > 0 else [])
            raise CompileError(f"graph {self.name!r} is invalid:\n  " + "\n  ".join(lines))
        return self

    def _problems(self) -> list[str]:
        out: list[str] = []
        for key, v in self.values.items():
            if v.name != key:
                out.append(f"value {key!r} is filed under the wrong name (its name is {v.name!r})")
            if v.dtype not in DTYPES:
                out.append(f"value {key!r} has dtype {v.dtype!r}, expected one of {DTYPES}")
            if v.quant is not None:
                try:
                    _check_quant(key, v.shape, v.quant)
                except CompileError as exc:
                    out.append(str(exc))
        out += _name_problems(self)
        for n in self.nodes:
            out += _input_problems(self, n.name, n.op, n.inputs)
            v = self.values.get(n.output)
            if v is None:
                out.append(f"node {n.name!r}: output value {n.output!r} does not exist")
            elif not hasattr(n.op, "make") and (v.shape, v.dtype) != (n.op.output.shape, n.op.output.dtype):
                out.append(f"node {n.name!r} ({n.op.kind}): output {n.output!r} is {list(v.shape)} {v.dtype}, "
                           f"the op writes {list(n.op.output.shape)} {n.op.output.dtype}")
        produced = {n.output for n in self.nodes} | set(self.inputs)
        for n in self.nodes:
            for i in n.inputs:
                if i in self.values and i not in produced:
                    out.append(f"node {n.name!r} reads {i!r}, which no node writes and is not a graph input")
        for o in self.outputs:
            if o not in self.values:
                out.append(f"graph output {o!r} is not a value")
            elif o not in produced:
                out.append(f"graph output {o!r} is neither written by a node nor a graph input")
        if not self.outputs:
            out.append("the graph has no outputs")
        return out

    # -- running

    def dynamic(self) -> DynamicGraph:
        """The compiler.dynamic.graph.DynamicGraph of a graph with Dims: the static graph per dim values."""
        dims = self.dims
        if not dims:
            raise CompileError(f"graph {self.name!r} has no compiler.Dim in its inputs' shapes")
        self.validate()
        return DynamicGraph(self.at, dims)

    def at(self, values: Mapping[str, int]) -> Graph:
        """The static graph for these values of the inputs' Dims (each checked against its range)."""
        for d in self.dims:
            v = values.get(d.name)
            if v is None or not d.lo <= v <= d.hi:
                raise CompileError(f"dimension {d.name} = {v} is outside its range [{d.lo}, {d.hi}]")
        full = _derived_shapes(self).values(dict(values))
        g = Graph(self.name)
        for i in self.inputs:
            v = self.values[i]
            g.input(i, at(v.shape, full), v.dtype, v.quant)
        for n in self.nodes:
            op = n.op.static(full) if isinstance(n.op, DynamicOp) else at_values(n.op, full)
            g.add(op, *n.inputs, name=n.name, output=n.output, quant=self.values[n.output].quant, info=n.info)
        g.outputs = list(self.outputs)
        return g

    def reference(self, *inputs, **kw) -> list[np.ndarray]:
        """Run on numpy inputs (positional in the order of .inputs, or one dict by name); the outputs."""
        values = self.evaluate(*inputs, **kw)
        return [values[o] for o in self.outputs]

    def evaluate(self, *inputs, forced: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
        """Every Value as each node's .reference computes it.  Values in `forced` are what the
        nodes after them read instead (to check each node on someone else's inputs).  A graph with Dims
        runs as its static graph at the inputs' shapes."""
        if self.dims:
            given = _bind_symbolic(self, inputs)
            values = infer_values(self.dims, {i: self.values[i].shape for i in self.inputs},
                                  {i: np.shape(a) for i, a in given.items()})
            return self.at(values).evaluate(given, forced=forced)
        self.validate()
        env = dict(_bind_inputs(self, inputs))
        computed = dict(env)
        forced = forced or {}
        for n in self.nodes:
            try:
                computed[n.output] = n.op.reference(*(env[i] for i in n.inputs))
            except CompileError as exc:
                raise CompileError(f"node {n.name!r}: {exc}") from None
            env[n.output] = computed[n.output]
            if n.output in forced:
                env[n.output] = np.asarray(forced[n.output]).astype(computed[n.output].dtype)
        return computed

    # -- printing

    def __str__(self) -> str:
        lines = [f"graph {self.name}: {len(self.inputs)} input(s), {len(self.outputs)} output(s), "
                 f"{len(self.nodes)} node(s)"]
        for i in self.inputs:
            lines.append(f"  input   {_value_text(self.values[i])}")
        width = max([len(n.name) for n in self.nodes] + [4])
        kinds = max([len(n.op.kind) for n in self.nodes] + [4])
        for n in self.nodes:
            ins = ", ".join(_shape_text(self.values.get(i), i) for i in n.inputs)
            out = self.values.get(n.output)
            text = f"  {n.name:<{width}}  {n.op.kind:<{kinds}}  {ins} -> {_shape_text(out, n.output)}"
            if out is not None:
                text += f" {out.dtype}" + (f"  {out.quant}" if out.quant is not None else "")
            extra = _info_text(n.info)
            lines.append(text + (f"  [{extra}]" if extra else ""))
        for o in self.outputs:
            v = self.values.get(o)
            lines.append(f"  output  {_value_text(v) if v else o}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return (f"<Graph {self.name!r}: {len(self.nodes)} nodes, inputs {self.inputs}, "
                f"outputs {self.outputs}>")


def _derived_shapes(g: Graph) -> Shapes:
    """The graph's shape bookkeeping for Dims: the input Dims plus the derived ones (a strided window's
    ((h + add) >> s) + 1), kept on the graph so that every node sees the same derived Dim objects."""
    if getattr(g, "_derived", None) is None:
        g._derived = Shapes(g.dims)
    return g._derived


def _symbolic_output(g: Graph, name: str, op) -> Tensor:
    """The output of a DynamicOp node: its shape with Dims (derived ones for a strided window)."""
    shape = output_shape(SimpleNamespace(op=op.largest, name=name), op.x_shape, _derived_shapes(g))
    return Tensor("y", tuple(shape), op.largest.output.dtype)


def _check_quant(name: str, shape: tuple[int, ...], q: QuantParams) -> None:
    if not isinstance(q, QuantParams):
        raise CompileError(f"value {name!r}: quant must be a QuantParams, got {type(q).__name__}")
    if q.per_channel:
        if not -len(shape) <= q.axis < len(shape):
            raise CompileError(f"value {name!r}: quantisation axis {q.axis} is outside its "
                               f"{len(shape)} dimensions")
        if q.scale.size != shape[q.axis]:
            raise CompileError(f"value {name!r}: {q.scale.size} per-channel scales for "
                               f"{shape[q.axis]} channels (axis {q.axis} of {list(shape)})")


def _name_problems(g: Graph) -> list[str]:
    out = []
    seen_nodes: set[str] = set()
    writers: dict[str, str] = {}
    for n in g.nodes:
        if n.name in seen_nodes:
            out.append(f"node name {n.name!r} is used twice")
        seen_nodes.add(n.name)
        if n.output in writers:
            out.append(f"value {n.output!r} is written by node {writers[n.output]!r} and by {n.name!r}")
        writers.setdefault(n.output, n.name)
    for i in g.inputs:
        if i not in g.values:
            out.append(f"graph input {i!r} is not a value")
        if i in writers:
            out.append(f"graph input {i!r} is also written by node {writers[i]!r}")
    for i in sorted({i for i in g.inputs if g.inputs.count(i) > 1}):
        out.append(f"graph input {i!r} is listed twice")
    for o in sorted({o for o in g.outputs if g.outputs.count(o) > 1}):
        out.append(f"graph output {o!r} is listed twice")
    return out


def _input_problems(g: Graph, name: str, op: Op, inputs: Iterable[str]) -> list[str]:
    """What is wrong with feeding `inputs` (Value names) to `op`."""
    inputs = tuple(inputs)
    if isinstance(op, DynamicOp):
        shapes = op.in_shapes or (op.x_shape,) * len(op.names)
        want = [Tensor(t, s, f.dtype) for t, s, f in zip(op.names, shapes, op.largest.inputs)]
    else:
        want = op.inputs
    if len(inputs) != len(want):
        return [f"node {name!r} ({op.kind}) takes {len(want)} input(s) "
                f"({', '.join(t.name for t in want)}), got {len(inputs)}: {list(inputs)}"]
    out = []
    for t, i in zip(want, inputs):
        v = g.values.get(i)
        if v is None:
            out.append(f"node {name!r} ({op.kind}): input {t.name} = {i!r} is not a value of the graph")
        elif (v.shape, v.dtype) != (t.shape, t.dtype):
            out.append(f"node {name!r} ({op.kind}): input {t.name} = {i!r} is {_axes_text(v.shape)} {v.dtype}, "
                       f"the op expects {_axes_text(t.shape)} {t.dtype}")
    return out


def _toposort(g: Graph) -> tuple[list[Node], list[str] | None]:
    """Nodes in dependency order (stable), or None and a cycle as a list of node names."""
    writer = {n.output: n for n in g.nodes}
    order: list[Node] = []
    state: dict[str, int] = {}        # 1 = on the stack, 2 = done
    for root in g.nodes:
        if state.get(root.name):
            continue
        stack = [(root, iter(root.inputs))]
        state[root.name] = 1
        path = [root]
        while stack:
            node, it = stack[-1]
            nxt = next((writer[i] for i in it if i in writer), None)
            if nxt is None:
                stack.pop()
                path.pop()
                state[node.name] = 2
                order.append(node)
            elif state.get(nxt.name) == 1:
                names = [p.name for p in path]
                cyc = names[names.index(nxt.name):]
                return [], cyc + [nxt.name]
            elif not state.get(nxt.name):
                state[nxt.name] = 1
                stack.append((nxt, iter(nxt.inputs)))
                path.append(nxt)
    return order, None


def _bind_symbolic(g: Graph, inputs) -> dict[str, np.ndarray]:
    """The inputs of a graph with Dims by name (positional in the order of .inputs, or one dict)."""
    if len(inputs) == 1 and isinstance(inputs[0], Mapping):
        given = dict(inputs[0])
    elif len(inputs) == len(g.inputs):
        given = dict(zip(g.inputs, inputs))
    else:
        raise CompileError(f"the graph takes {len(g.inputs)} input(s) {g.inputs}, got {len(inputs)}")
    missing = [i for i in g.inputs if i not in given]
    if missing:
        raise CompileError(f"inputs by name: missing {missing} (the graph's inputs are {g.inputs})")
    return given


def _bind_inputs(g: Graph, inputs) -> dict[str, np.ndarray]:
    if len(inputs) == 1 and isinstance(inputs[0], Mapping):
        given = dict(inputs[0])
        missing = [i for i in g.inputs if i not in given]
        extra = [k for k in given if k not in g.inputs]
        if missing or extra:
            raise CompileError(f"inputs by name: missing {missing}, unknown {extra} (the graph's inputs "
                               f"are {g.inputs})")
    else:
        if len(inputs) != len(g.inputs):
            raise CompileError(f"the graph takes {len(g.inputs)} input(s) {g.inputs}, got {len(inputs)}")
        given = dict(zip(g.inputs, inputs))
    out = {}
    for name in g.inputs:
        v, a = g.values[name], np.asarray(given[name])
        if a.shape != v.shape or a.dtype != np.dtype(v.dtype):
            raise CompileError(f"input {name!r} is {list(a.shape)} {a.dtype}, expected "
                               f"{list(v.shape)} {v.dtype}")
        out[name] = a
    return out


def _axes_text(shape) -> str:
    """A shape as text, a Dim as `name in [lo, hi]`."""
    return "[" + ", ".join(map(str, shape)) + "]"


def _shape_text(v: Value | None, name: str) -> str:
    return f"{name}?" if v is None else f"{v.name}{_axes_text(v.shape)}"


def _value_text(v: Value) -> str:
    return f"{v.name}{_axes_text(v.shape)} {v.dtype}" + (f"  {v.quant}" if v.quant is not None else "")


def _info_text(info: dict) -> str:
    """The printable ONNX facts of a node: op type and weight quantisation, briefly."""
    parts = []
    if "op_type" in info:
        parts.append(str(info["op_type"]))
    for key in ("w_quant", "note"):
        if key in info:
            parts.append(f"{key.split('_')[0]} {info[key]}" if key == "w_quant" else str(info[key]))
    return ", ".join(parts)
