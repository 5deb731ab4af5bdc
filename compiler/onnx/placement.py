"""Host fallback: which nodes of a model run on the host, and the model cut into stages (a HostedGraph).

A node runs on the host when the registry says its op type or form has no NPU lowering (registry.host_reason,
the one place that decides), or when it must stay with such a node because the NPU cannot hand over the
tensor between them: the NPU takes and gives only quantised tensors (int8, uint8) across a stage boundary.
So a float (or int64, bool, ...) tensor never crosses one: the node on the other side of it joins the host
part, except a DequantizeLinear feeding a host node and an NPU node alike, which each side runs for itself
(it is copied), and the model's own edges (a QuantizeLinear of a float graph input, a DequantizeLinear to a
graph output), which the NPU's runtime does on the host exactly as onnxruntime.  A host part thus keeps the
model's own QuantizeLinear and DequantizeLinear nodes at its edges.

The stages alternate, NPU then host: each node is placed in the earliest stage of its side after every stage
its inputs come from.  An NPU stage is imported like any model (compiler.onnx.importer); a host stage's
nodes, one host part per connected group, become ONNX models of their own.  Constants (initializers,
Constant nodes, folded shape arithmetic, the DequantizeLinear of a constant) belong to no stage: each stage
that reads one gets its own copy.
"""
from __future__ import annotations

import math
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CompileError
from ..graph import Graph
from ..host import DTYPES, ONNX_DTYPES, HostedGraph, HostPart, run_part
from . import fold
from .importer import import_graph
from .load import check_model
from .registry import VIEWS, host_reason, stays_float

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import ModelProto

QUANTISED = ("int8", "uint8")
MAC_OPS = {"MatMul": 1, "QLinearMatMul": 3, "MatMulInteger": 1, "Gemm": 1, "QGemm": 3, "Conv": 1,
           "QLinearConv": 3, "ConvInteger": 1}
"""Host ops whose MACs the report counts, by the input that holds the weights (or the second operand)."""


class Model:
    """The facts placement needs about a model: its nodes, who writes and reads each tensor, the constants,
    each tensor's element type, the graph's inputs and outputs."""

    def __init__(self, onnx: ModuleType, proto: ModelProto, typed: bool = True):
        self.onnx, self.proto = onnx, proto
        self.nodes = list(proto.graph.node)
        self.init = {t.name for t in proto.graph.initializer}
        self.inputs = [vi.name for vi in proto.graph.input if vi.name not in self.init]
        self.outputs = [vi.name for vi in proto.graph.output]
        self.producer = {o: i for i, n in enumerate(self.nodes) for o in n.output if o}
        self.consumers: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for t in dict.fromkeys(x for x in n.input if x):
                self.consumers.setdefault(t, []).append(i)
        self.types, self.shapes = self._types() if typed else ({}, {})
        self.consts = self._constants(typed)

    def _constants(self, typed: bool) -> set[str]:
        """Tensors known at import: initializers, Constant nodes, Shape and Size outputs (typed: of a tensor whose
        shape inference knows all of it, not one a NonZero sizes), folds of constants, the DequantizeLinear of a
        constant (a QDQ weight)."""
        out = set(self.init)
        for n in self.nodes:
            ins = [i for i in n.input if i]
            known = n.op_type in ("Shape", "Size") and (not typed or (ins and self.static(ins[0])))
            if n.op_type == "Constant" or known or (
                    ins and all(i in out for i in ins) and (fold.folds(n) or n.op_type == "DequantizeLinear")):
                out.update(o for o in n.output if o)
        return out

    def static(self, tensor: str) -> bool:
        """Whether the tensor is an initializer or shape inference knows every dimension of it."""
        return tensor in self.init or _static(self.shapes.get(tensor))

    def _types(self) -> dict[str, str]:
        """Each tensor's element type (of host.DTYPES), from ONNX's shape inference, and for what it leaves
        open (com.microsoft ops and what follows them) from the ops themselves."""
        onnx, proto = self.onnx, self.proto
        try:
            inferred = onnx.shape_inference.infer_shapes(proto).graph
            vis = [*inferred.value_info, *inferred.input, *inferred.output]
        except Exception:           # the checker of the whole model has the last word; here, the ops' own rules
            vis = [*proto.graph.value_info, *proto.graph.input, *proto.graph.output]
        types = {vi.name: ONNX_DTYPES.get(vi.type.tensor_type.elem_type, "") for vi in vis
                 if vi.type.HasField("tensor_type") and vi.type.tensor_type.elem_type}
        shapes = {vi.name: s for vi in vis if (s := _desc(vi)["shape"]) is not None}
        types.update({t.name: ONNX_DTYPES.get(t.data_type, "") for t in proto.graph.initializer})
        for n in self.nodes:
            t = _output_type(n, types)
            for o in n.output:
                if o and not types.get(o):
                    types[o] = t
        return types, shapes

    def quantised(self, t: str) -> bool:
        """Whether the tensor is int8 or uint8: what may cross between the NPU and the host."""
        return self.types.get(t, "") in QUANTISED

    def name(self, i: int) -> str:
        return self.nodes[i].name

    def readers(self, t: str) -> list:
        """The nodes that read tensor t."""
        return [self.nodes[i] for i in self.consumers.get(t, [])]


OUTPUT_ZERO_POINT = {"QLinearConcat": 1, "QGemm": 8, "QLinearConv": 7, "QLinearMatMul": 7, "QLinearAdd": 7,
                     "QLinearMul": 7, "QLinearAveragePool": 4, "QLinearGlobalAveragePool": 4, "QLinearSoftmax": 4,
                     "QLinearSigmoid": 4, "QLinearLeakyRelu": 4}
"""The input that holds a QLinear op's output zero point, whose type the output has (onnxruntime's contrib
schemas); QGemm without a y scale (input 7) gives float."""


def _output_type(n, types: dict[str, str]) -> str:
    """The element type a node's outputs have by its op, where ONNX's inference leaves them open."""
    ins = list(n.input) + [""] * 9
    if n.op_type == "DequantizeLinear":
        return "float32"
    if n.op_type == "QuantizeLinear":
        return types.get(ins[2], "uint8") if ins[2] else "uint8"
    if n.op_type == "QGemm" and not ins[7]:
        return "float32"
    if n.op_type in OUTPUT_ZERO_POINT:
        return types.get(ins[OUTPUT_ZERO_POINT[n.op_type]], "uint8") or "uint8"
    return types.get(ins[0], "") if ins[0] else ""


def any_host(onnx: ModuleType, proto: ModelProto) -> bool:
    """Whether any node of the model runs on the host by the registry (host_reason), without the cost of types:
    a model without one imports as it always has (the NPU's, or refused as ever)."""
    m = Model(onnx, proto, typed=False)
    return any(host_reason(n, m.consts.__contains__, m.readers) or _unrounded(m, n) for n in m.nodes)


def host_nodes(m: Model) -> dict[int, str]:
    """The nodes that run on the host (index: why): the registry's, and the nodes a non-quantised tensor ties
    to them (the module docstring)."""
    host = {i: why for i, n in enumerate(m.nodes)
            if (why := host_reason(n, m.consts.__contains__, m.readers) or _unrounded(m, n))}
    changed = bool(host)
    while changed:
        changed = False
        for t, p in m.producer.items():
            if t in m.consts or m.quantised(t):
                continue
            users = m.consumers.get(t, [])
            why = _tied(m, t, p, users, host)
            if why and p not in host:
                host[p], changed = why, True
            if p in host:
                for c in users:
                    if c not in host:
                        host[c], changed = f"reads the float tensor {t!r} of the host part", True
    return host


FLOAT_BINARY_OPS = ("Add", "Sub", "Mul", "Div", "Max", "Min")
"""The float binary ops of QDQ form, whose operands the NPU takes only dequantised (or constant)."""
SEEN_THROUGH = VIEWS + ("Relu", "Clip", "Identity", "Transpose", "Slice", "Split", "Pad", "MaxPool")
"""Ops that give of a dequantised tensor a dequantised one (they move or pick elements), and of a float result
at most a float result: what _float_result looks through for the node that computed a tensor."""


def _unrounded(m: Model, node) -> str:
    """Why a node runs on the host because it reads a float op's result unrounded, where the NPU holds that result
    only until the QuantizeLinear that rounds it ("" if not): a float binary op reading another one's result that a
    QuantizeLinear also rounds (yolov8's box decoding, Sub -> Sub with the first Sub's output also quantised), or
    a view (registry.VIEWS) of a float result read by other than a QuantizeLinear (through views, Relu, Clip).
    A view of a float result that only QuantizeLinears read stays on the NPU: it views the rounded tensor
    (SSD's box decoding, Sub -> Unsqueeze -> QuantizeLinear)."""
    if node.domain not in ("", "ai.onnx"):
        return ""
    if node.op_type in VIEWS and node.input:
        p = _float_result(m, node.input[0])
        if p is not None and stays_float(node.output[0], m.readers):
            return (f"views {m.nodes[p].op_type} {m.nodes[p].name!r}'s float result {node.input[0]!r} for a reader "
                    "other than a QuantizeLinear: the NPU holds a float result only until its QuantizeLinear")
    if node.op_type not in FLOAT_BINARY_OPS:
        return ""
    for t in node.input:
        p = m.producer.get(t)
        if p is None or t in m.consts or m.nodes[p].op_type not in FLOAT_BINARY_OPS:
            continue
        if any(m.nodes[c].op_type == "QuantizeLinear" for c in m.consumers.get(t, [])):
            return (f"reads {m.nodes[p].op_type} {m.nodes[p].name!r}'s float result {t!r} unrounded, which a "
                    "QuantizeLinear also rounds: the NPU keeps only the rounded tensor")
    return ""


def _float_result(m: Model, t: str) -> int | None:
    """The node whose float result the tensor t is, seen through SEEN_THROUGH (None if t is a constant, a graph
    input, quantised, or dequantised: a DequantizeLinear's output, or one moved by SEEN_THROUGH)."""
    while t not in m.consts and not m.quantised(t) and (p := m.producer.get(t)) is not None:
        n = m.nodes[p]
        if n.op_type == "DequantizeLinear" or _output_type(n, m.types) in QUANTISED:
            return None
        if n.op_type not in SEEN_THROUGH or not n.input:
            return p
        t = n.input[0]
    return None


def _tied(m: Model, t: str, p: int, users: list[int], host: dict[int, str]) -> str:
    """Why the producer of the non-quantised tensor t must run on the host ("" if it need not)."""
    op = m.nodes[p].op_type
    to_host = any(c in host for c in users)
    if op == "DequantizeLinear":      # copied where a host and an NPU node share it; else with its side
        src = m.producer.get(m.nodes[p].input[0])
        if to_host and all(c in host for c in users) and t not in m.outputs:
            return "dequantises for the host part"
        if t in m.outputs and not users and src in host:
            return "dequantises the host part's graph output"
        return ""
    if to_host:
        return f"gives the float tensor {t!r} to the host part"
    if t in m.outputs:
        return f"gives the graph output {t!r} in {m.types.get(t) or 'float'} (no DequantizeLinear)"
    return ""


def _copied(m: Model, host: dict[int, str]) -> set[int]:
    """Nodes every stage that reads them runs for itself: constants, and the DequantizeLinear nodes of the NPU
    side whose output is not a graph output."""
    out = set()
    for i, n in enumerate(m.nodes):
        outs = [o for o in n.output if o]
        if outs and all(o in m.consts for o in outs):
            out.add(i)
        elif n.op_type == "DequantizeLinear" and i not in host and not set(outs) & set(m.outputs):
            out.add(i)
    return out


def _stages(m: Model, host: dict[int, str], copied: set[int]) -> dict[int, int]:
    """Each staged node's stage: even for the NPU, odd for the host, the earliest after its inputs' stages."""
    stage: dict[int, int] = {}

    def after(i: int) -> int:
        lo = 0
        for t in m.nodes[i].input:
            p = m.producer.get(t)
            if p is not None and t not in m.consts:
                lo = max(lo, after(p) if p in copied else stage[p])
        return lo

    for i in range(len(m.nodes)):        # the checker holds the nodes in topological order
        if i in copied:
            continue
        lo = after(i)
        stage[i] = lo + ((lo % 2 == 0) == (i in host))
    return stage


def _closure(m: Model, staged: list[int], copied: set[int]) -> list[int]:
    """The nodes a stage runs: its own and every copied node they read from, in model order."""
    out, todo = set(staged), list(staged)
    while todo:
        for t in m.nodes[todo.pop()].input:
            p = m.producer.get(t)
            if p is not None and p in copied and p not in out:
                out.add(p)
                todo.append(p)
    return sorted(out)


def _groups(m: Model, nodes: list[int]) -> list[list[int]]:
    """The connected groups of a host stage's nodes (by the tensors between them), in model order."""
    parent = {i: i for i in nodes}

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i in nodes:
        for t in m.nodes[i].input:
            p = m.producer.get(t)
            if p in parent and t not in m.consts:
                parent[root(p)] = root(i)
    groups: dict[int, list[int]] = {}
    for i in nodes:
        groups.setdefault(root(i), []).append(i)
    return sorted(groups.values(), key=lambda g: g[0])


def plan(m: Model) -> list[tuple[str, list[int]]] | None:
    """The stages in run order, ("npu" | "host", the nodes each runs, copies included); None if every node runs
    on the NPU.  A host stage gives one entry per connected group (a host part each)."""
    host = host_nodes(m)
    if not host:
        return None
    copied = _copied(m, host)
    stage = _stages(m, host, copied)
    out = []
    for k in range(max(stage.values(), default=0) + 1):
        mine = [i for i, s in stage.items() if s == k]
        if not mine:
            continue
        groups = _groups(m, mine) if k % 2 else [mine]
        out += [("host" if k % 2 else "npu", _closure(m, g, copied)) for g in groups]
    m.host = host
    return out


# ----------------------------------------------------------------------------- the stages as models

def hosted_graph(onnx: ModuleType, proto: ModelProto, arithmetic: str, dims: dict) -> HostedGraph | None:
    """The model cut into NPU stages and host parts, or None if every node runs on the NPU."""
    m = Model(onnx, _fixed(onnx, proto, dims))
    stages = plan(m)
    if stages is None:
        return None
    ins = [set(_inputs(m, nodes)) for _, nodes in stages]
    known = {vi.name: _desc(vi) for vi in m.proto.graph.input if vi.name not in m.init}
    out: list[Graph | HostPart] = []
    for k, (side, nodes) in enumerate(stages):
        later = set(m.outputs).union(*ins[k + 1:])
        outs = [o for i in nodes for o in m.nodes[i].output if o in later and o not in m.consts]
        feeds = [known[t] for t in _inputs(m, nodes)]
        if side == "npu":
            out.append(_npu_stage(m, nodes, feeds, outs, arithmetic, f"{m.proto.graph.name or 'onnx'}.npu{k}"))
            got = {t["name"]: t for t in _graph_outputs(out[-1], m)}
        else:
            out.append(_host_part(m, nodes, feeds, outs, f"host{len([s for s in out if isinstance(s, HostPart)])}"))
            got = {t["name"]: t for t in out[-1].outputs}
        to_npu = set().union(*(ins[j] for j in range(k + 1, len(stages)) if stages[j][0] == "npu"))
        if side == "host":
            _npu_shapes(out[-1], to_npu)
        known.update(got)
    return HostedGraph(m.proto.graph.name or "onnx", out, [known[t] for t in m.inputs],
                       [known[t] for t in m.outputs], known,
                       lambda: import_graph(onnx, proto, arithmetic, dims))


def _fixed(onnx: ModuleType, proto: ModelProto, dims: dict) -> ModelProto:
    """A copy of the model with its inputs' dims fixed as `dims` says and every node named (as the importer
    names an unnamed one), so that every stage calls a node what the whole model does."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    for vi in copy.graph.input:
        shape = vi.type.tensor_type.shape
        given = dims.get(vi.name)
        for k, d in enumerate(shape.dim):
            v = given[k] if isinstance(given, (tuple, list)) and k < len(given) else dims.get(d.dim_param)
            if isinstance(v, int) and (d.dim_param or not d.dim_value):
                d.Clear()
                d.dim_value = v
    names = {n.name for n in copy.graph.node if n.name}
    for i, n in enumerate(copy.graph.node):
        if not n.name:
            base = name = f"{n.op_type or 'node'}_{i}"
            k = 1
            while name in names:
                k += 1
                name = f"{base}#{k}"
            n.name = name
            names.add(name)
    return copy


def _inputs(m: Model, nodes: list[int]) -> list[str]:
    """The tensors a stage reads that it neither writes nor holds as initializers, in first-use order."""
    made = {o for i in nodes for o in m.nodes[i].output}
    return list(dict.fromkeys(t for i in nodes for t in m.nodes[i].input
                              if t and t not in made and t not in m.init))


def _desc(vi) -> dict:
    """A graph input's or output's tensor description (host.HostPart): name, dtype, shape."""
    tt = vi.type.tensor_type
    shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim] \
        if tt.HasField("shape") else None
    return {"name": vi.name, "dtype": ONNX_DTYPES.get(tt.elem_type, str(tt.elem_type)), "shape": shape}


def _static(shape) -> bool:
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)


def _npu_shapes(part: HostPart, to_npu: set[str]) -> None:
    """CompileError unless every output of the host part the NPU reads has a static shape (the NPU's programs
    are built for one shape)."""
    for t in part.outputs:
        if t["name"] in to_npu and not _static(t["shape"]):
            raise CompileError(f"host fallback: tensor {t['name']!r} goes from host part {part.name} to the NPU, "
                               f"but its shape {t['shape']} is not static (the NPU's programs are built for one shape)")


def _probe(m: Model, sub: ModelProto, feeds: list[dict]) -> dict[str, list]:
    """The shape of every tensor of a host part whose inputs have static shapes, from onnxruntime's run of it on
    zeros with every tensor an output: what ONNX's inference cannot say past an op of com.microsoft."""
    if not all(_static(t["shape"]) for t in feeds):
        return {}
    probe = m.onnx.ModelProto()
    probe.CopyFrom(sub)
    have = {o.name for o in probe.graph.output}
    probe.graph.output.extend(m.onnx.helper.make_empty_tensor_value_info(o) for n in probe.graph.node
                              for o in n.output if o and o not in have)
    part = HostPart("probe", probe.SerializeToString(), feeds, [{"name": o.name} for o in probe.graph.output], [])
    got = run_part(part, part.session(), {t["name"]: np.zeros(t["shape"], DTYPES[t["dtype"]]) for t in feeds})
    return {name: list(a.shape) for name, a in got.items()}


def _sub_model(m: Model, nodes: list[int], feeds: list[dict], outs: list[str], name: str) -> ModelProto:
    """The ONNX model of one stage: its nodes (a Shape of a tensor from elsewhere as its constant), the
    initializers they read, its inputs and outputs."""
    onnx, helper = m.onnx, m.onnx.helper
    body = [_shape_const(m, m.nodes[i]) for i in nodes]
    used = {t for n in body for t in n.input}
    inits = [t for t in m.proto.graph.initializer if t.name in used]
    elem = {v: k for k, v in ONNX_DTYPES.items()}
    inputs = [helper.make_tensor_value_info(t["name"], elem[t["dtype"]], t["shape"]) for t in feeds
              if t["name"] in used]
    outputs = [helper.make_tensor_value_info(o, elem.get(m.types.get(o), onnx.TensorProto.FLOAT), None)
               for o in outs]
    graph = helper.make_graph(body, name, inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=list(m.proto.opset_import), ir_version=m.proto.ir_version)


def _shape_const(m: Model, node):
    """A Shape or Size of a tensor whose shape the model's inference knows as a Constant node (the stage needs
    no input for it); any other node as it is."""
    if node.op_type not in ("Shape", "Size") or not node.input or node.input[0] in m.init \
            or not m.static(node.input[0]):
        return node
    shape = m.shapes.get(node.input[0])
    if node.op_type == "Size":
        value = [math.prod(shape)]
    else:
        attrs = {a.name: a.i for a in node.attribute}
        value = list(shape)[slice(attrs.get("start", 0), attrs.get("end", None))]
    arr = m.onnx.numpy_helper.from_array(np.asarray(value, np.int64).reshape(
        () if node.op_type == "Size" else (len(value),)))
    return m.onnx.helper.make_node("Constant", [], [node.output[0]], name=node.name, value=arr)


def _npu_stage(m: Model, nodes: list[int], feeds: list[dict], outs: list[str], arithmetic: str, name: str) -> Graph:
    """An NPU stage imported like a whole model (every problem refused as ever, naming the stage's nodes)."""
    sub = _sub_model(m, nodes, feeds, outs, name)
    graph = import_graph(m.onnx, sub, arithmetic, {})
    check_model(m.onnx, sub, f"the NPU stage {name}")
    graph.name = name
    return graph


def _graph_outputs(g: Graph, m: Model) -> list[dict]:
    """An NPU stage's outputs as tensor descriptions, in the model's element types."""
    return [{"name": o, "dtype": m.types.get(o) or "float32", "shape": list(g.values[o].shape)} for o in g.outputs]


def _host_part(m: Model, nodes: list[int], feeds: list[dict], outs: list[str], name: str) -> HostPart:
    """A host part: the ONNX model of its nodes, its boundary tensors (shapes from ONNX's inference of the part),
    the nodes it runs with why, its MACs."""
    sub = _sub_model(m, nodes, feeds, outs, name)
    try:
        inferred = m.onnx.shape_inference.infer_shapes(sub).graph
        shapes = {vi.name: _desc(vi)["shape"] for vi in (*inferred.value_info, *inferred.output, *inferred.input)}
    except Exception:           # onnxruntime checks the part when it makes its session
        shapes = {}
    used = {t for n in sub.graph.node for t in n.input}
    inputs = [t for t in feeds if t["name"] in used]
    if not all(_static(shapes.get(o)) or (shapes.get(o) and None not in shapes[o]) for n in sub.graph.node
               for o in n.output if o):
        shapes = {**_probe(m, sub, inputs), **{k: v for k, v in shapes.items() if v and None not in v}}
    outputs = [{"name": o, "dtype": m.types.get(o) or "float32", "shape": shapes.get(o)} for o in outs]
    staged = [i for i in nodes if i in m.host]
    macs = sum(_macs(m.nodes[i], shapes) for i in staged)
    return HostPart(name, sub.SerializeToString(), inputs, outputs,
                    [[m.name(i), m.nodes[i].op_type, m.host[i]] for i in staged], macs)


def _macs(node, shapes: dict) -> int:
    """A host node's multiply-accumulates (MatMul, Gemm, Conv and their quantised forms; 0 for any other)."""
    k = MAC_OPS.get(node.op_type)
    if k is None or k >= len(node.input) or not node.output:
        return 0
    w, y = shapes.get(node.input[k]), shapes.get(node.output[0])
    if not w or not y or not all(isinstance(d, int) for d in (*w, *y)):
        return 0
    if "Conv" in node.op_type:
        depth = math.prod(w[1:])
    elif "Gemm" in node.op_type:
        trans = {a.name: a.i for a in node.attribute}.get("transB", 0)
        depth = w[1] if trans else w[0]
    else:
        depth = w[-2] if len(w) >= 2 else w[0]
    return math.prod(y) * depth
