"""The import of one model: initializers, graph inputs, node order, each node through its handler, graph outputs.

Every problem is collected (a node whose input is broken stays silent), and one CompileError lists
them all with the ops supported; a model without problems gives the validated Graph.
"""
from __future__ import annotations

from collections import deque
from types import ModuleType
from typing import TYPE_CHECKING

from ..errors import CompileError
from ..graph import Graph
from ..ops import Reshape
from ..ops.checks import shape_arg
from . import fold
from .load import to_array, type_name
from .refusals import report
from .registry import OPS, check_arity
from .state import DQ, Broken, Const, Float, Importer, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import ModelProto


def import_graph(onnx: ModuleType, proto: ModelProto, arithmetic: str, dims: dict, dynamic: bool = False) -> Graph:
    """The validated Graph of a ModelProto whose dims are all fixed (dynamic: as one sample of a DynamicGraph);
    CompileError listing every problem."""
    try:
        return _run(Importer(onnx, proto, arithmetic, dims, dynamic=dynamic))
    except CompileError:
        raise
    except Exception as exc:     # never a traceback for a bad model; the message says it is our bug
        raise CompileError(f"internal error while importing the model ({type(exc).__name__}: {exc}); "
                           "please report it with the model") from None


def _run(im: Importer) -> Graph:
    """Import every node; one CompileError listing all problems, else the validated graph."""
    graph = im.model.graph
    im.g.name = graph.name or "onnx"
    _constants(im, graph)
    _graph_inputs(im, graph)
    order = _structure(im, graph)
    for node in order:
        _import_node(im, node)
    if not im.problems:
        _attach_aliases(im)
        _graph_outputs(im, graph)
    if im.problems:
        raise CompileError(report(im.problems, OPS, ADVICE))
    return im.g.validate()


def _attach_aliases(im: Importer) -> None:
    """Record on each node every ONNX int8 tensor equal to its output (a Q that changed nothing)."""
    for value, names in im.aliases.items():
        p = im.g.producer(value)
        if p is not None:
            p.info.setdefault("onnx_outputs", []).extend(n for n in names if n not in p.info["onnx_outputs"])


def _constants(im: Importer, graph) -> None:
    for t in graph.initializer:
        if t.name in im.state:
            im.problem(f"initializer {t.name!r}", "defined twice")
            continue
        try:
            im.state[t.name] = Const(to_array(im.onnx, t))
        except CompileError as exc:
            im.problem(f"initializer {t.name!r}", str(exc))
            im.state[t.name] = Broken()
    for t in graph.sparse_initializer:
        im.problem(f"initializer {t.values.name!r}", "sparse initializers are not supported")
        im.state[t.values.name] = Broken()


def _graph_inputs(im: Importer, graph) -> None:
    seen = set()
    for vi in graph.input:
        if vi.name in seen:
            im.problem(f"graph input {vi.name!r}", "listed twice")
            continue
        seen.add(vi.name)
        if vi.name in im.state:      # an initializer also listed as input (old IR): a constant
            continue
        try:
            _graph_input(im, vi)
        except CompileError as exc:
            im.problem(f"graph input {vi.name!r}", str(exc))
            im.state[vi.name] = Broken()


def _graph_input(im: Importer, vi) -> None:
    tt = vi.type.tensor_type if vi.type.HasField("tensor_type") else None
    if tt is None:
        raise CompileError("is not a tensor")
    shape = _input_shape(im, vi.name, tt)
    if tt.elem_type == im.onnx.TensorProto.FLOAT:
        im.state[vi.name] = Float(vi.name)
        im.float_shapes[vi.name] = shape
    elif tt.elem_type in (im.onnx.TensorProto.INT8, im.onnx.TensorProto.UINT8):
        im.state[vi.name] = Q(im.g.input(vi.name, shape))
        if tt.elem_type == im.onnx.TensorProto.UINT8:       # held as int8 q - 128 (state.as_int8)
            im.g.values[vi.name].host_dtype = "uint8"
            im.uint8.add(vi.name)
    else:
        raise CompileError(f"has element type {type_name(im.onnx, tt.elem_type)}; inputs must be "
                           "float32 (quantised by a QuantizeLinear), int8 or uint8")


def _input_shape(im: Importer, name: str, tt) -> tuple[int, ...]:
    if name in im.dims and not isinstance(im.dims[name], int):
        try:
            return shape_arg(f"dims[{name!r}]", im.dims[name])
        except CompileError as exc:
            raise CompileError(str(exc)) from None
    if not tt.HasField("shape"):
        raise CompileError(f"has no shape: pass dims={{{name!r}: (N, C, H, W)}}")
    out = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value") and d.dim_value > 0:
            out.append(int(d.dim_value))
        elif d.HasField("dim_param") and d.dim_param in im.dims:
            out.append(im.dims[d.dim_param])
        else:
            what = f"symbolic dimension {d.dim_param!r}" if d.dim_param else f"dimension {d.dim_value}"
            key = d.dim_param or name
            hint = f"{{{key!r}: 1}}" if d.dim_param else f"{{{name!r}: (N, C, H, W)}}"
            raise CompileError(f"axis {i} is a {what}: pass dims={hint}")
    return shape_arg(f"input {name!r} shape", out)


def _structure(im: Importer, graph) -> list:
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
        im.node_names[id(node)] = name
        for o in node.output:
            if not o:
                continue
            if o in writer:
                im.node_problem(node, f"output {o!r} is also written by "
                           f"{im.where(writer[o])}")
            elif o in im.state:
                im.node_problem(node, f"output {o!r} is also a graph input or initializer")
            else:
                writer[o] = node
    ok = []
    for node in nodes:
        missing = [i for i in node.input if i and i not in writer and i not in im.state]
        if missing:
            im.node_problem(node, f"input {missing[0]!r} is not written by any node, "
                       "initializer or graph input")
            for o in node.output:
                im.state.setdefault(o, Broken())
        else:
            ok.append(node)
    order, stuck = _topo(ok, writer, im.state)
    if stuck:
        cycle = " -> ".join(im.where(n) for n in stuck)
        im.problem("graph", f"the nodes form a cycle (or depend on one): {cycle}")
    return order


def _graph_outputs(im: Importer, graph) -> None:
    """Mark the graph outputs, with the quantisation of their final DequantizeLinear."""
    renamed: dict[str, str] = {}
    seen = set()
    for vi in graph.output:
        name = vi.name
        if name in seen:
            im.problem(f"graph output {name!r}", "listed twice")
            continue
        seen.add(name)
        s = im.state.get(name)
        if not isinstance(s, (DQ, Q)):
            im.problem(f"graph output {name!r}", f"is {describe(s)}: expected a (de)quantised tensor")
            continue
        value = renamed.get(s.value, s.value)
        v = im.g.values[value]
        if isinstance(s, DQ):
            if v.quant is not None and not s.q.same_as(v.quant):
                im.problem(f"graph output {name!r}", f"dequantised with {s.q}, but its value {value!r} was "
                           f"quantised with {v.quant}")
                continue
            v.quant = s.q
        if value in im.g.outputs or value in im.g.inputs:
            # Two outputs of one tensor (the quantizer folded a Relu/Clip between them), or an
            # input passed straight through: each output gets a Value of its own, a copy.
            copy = Reshape(v.shape, v.shape, v.dtype)
            value = im.emit(im.node_name(f"{name}/copy"), [("copy", copy, v.quant)], (value,),
                            im.value_name(name), {"op_type": "Identity"}, int8_in_onnx=False)
        elif value != name and name not in im.g.values:
            # Name the output after the ONNX output: the user feeds and reads by ONNX names.
            im.g.rename(value, name)
            renamed[value] = name
            value = name
        if name in im.uint8 or vi.type.tensor_type.elem_type == im.onnx.TensorProto.UINT8:
            im.g.values[value].host_dtype = "uint8"
        im.g.output(value)


def _import_node(im: Importer, node) -> None:
    """Import one node.  An op the importer does not know is refused even when an input is broken, so the
    refusal lists every such node, not only the first on each path; a known op after a broken input is silent."""
    op = OPS.get(node.op_type)
    known = op is not None and node.domain in op.domains
    if not known and not fold.folds(node):
        domain = f" in domain {node.domain!r}" if node.domain else ""
        im.node_problem(node, f"op type {node.op_type!r}{domain} is not supported")
        im.mark_broken(node)
        return
    ins = [im.state.get(i) for i in node.input if i]
    if any(isinstance(s, Broken) for s in ins):
        im.mark_broken(node)
        return
    try:
        if fold.folds(node) and ins and fold.constant_inputs(im, node):
            fold.fold(im, node)
        elif not known:
            raise fold.only_constant(im, node)
        else:
            check_arity(node)
            op.handler(im, node)
    except Problem as p:
        im.node_problem(p.node, str(p))
        im.mark_broken(node)
    except CompileError as exc:
        im.node_problem(node, str(exc))
        im.mark_broken(node)


ADVICE = ("Activations must be int8 or uint8 with per-tensor scales; weights int8 or uint8, symmetric (zero point "
          "0, or 128 for uint8), per tensor or per output channel.")


def _topo(nodes: list, writer: dict, known: dict) -> tuple[list, list]:
    """Kahn's algorithm, stable in model order; (order, nodes that could not be placed)."""
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
