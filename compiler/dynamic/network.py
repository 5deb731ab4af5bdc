"""Whole networks over a range of shapes: a graph with compiler.Dims built into one binary.

A DynamicGraph (compiler.dynamic.graph) is a function from dim values to a static
compiler.Graph and its Dims.  Building it:

  sample     the graph at the low end of every range, at the high end, and with one dim at a time
             high: the same nodes with the same parameters, only the shapes differ
  shapes     every tensor's axes as a Dim, a size, or a derived Dim (compiler.symbolic): a conv or pool of stride s
             makes (h + add) // s + 1 of its input's h, a Dim of its own in the argument block
             (the host writes it; the simulator checks it against its parent before a run)
  fold       a relu / clip into the conv, add or mul before it (its output range) where nothing else
             reads that op's output
  lower      each node a dynamic op over its input's symbolic shape, lowered alone
             (compiler/dynamic/), all reading the one argument block; a reshape is
             its input's buffer under another shape (no program), a concat one DDR -> DDR DMA
             per input (dynamic/concat.py), a dense the 1x1 conv it equals
  fuse       runs of ops where each reads only the one before into one program (intermediates in
             DM), a residual's add or mul after a run's last conv included (dynamic/fused.py)
  link       the programs in graph order (no barrier: each ends waiting for its last stores), each
             op written in a scope binding its buffers to the graph's tensors (dynamic/chain.link);
             intermediates through DDR, each sized for the largest shape
  describe   the graph description (compiler.library's nnp_graph JSON) with the Dims, so that
             GraphModule.set_input and `nnpsim run --input` take any in-range shape
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from nnpsim.config import Config

from ..assembler import assemble
from ..dims import Dim, DynamicOp, at, axis_rule
from ..errors import CompileError
from ..library import GRAPH_FORMAT, Library, buffer_name, graph_buffer, tensor_meta
from ..ops import Concat, Conv2d, Elementwise, Reshape
from ..roofline import bound_cycles
from ..symbolic import Shapes, global_pool, layout_shape, output_shape, show_axes
from .chain import link
from .common import check_ddr_half, checked
from .concat import lower_concat
from .fused import fusable, keeps_dims
from .fused import prepare as fused_prepare
from .graph import DynamicGraph, input_shapes
from .kernel import folded, lowering

_RESERVED = ({"args", "main", "dm", "Q_ALL"} | {f"r{k}" for k in range(32)}
             | {f"s{k}" for k in range(32)} | {f"ch{k}" for k in range(8)} | {f"vu{k}" for k in range(8)}
             | {f"nu{k}" for k in range(8)} | {f"{m}{k}" for m in ("ibuf", "wbuf", "abuf", "vbuf") for k in range(8)})


# ----------------------------------------------------------------------------- shapes

def _broadcast_b(op) -> bool:
    """Is op an add / mul whose b broadcasts (compiler.ops: b_shape)?"""
    return isinstance(op, Elementwise) and op.b_shape is not None


def _broadcasts(op, ins: list[tuple]) -> bool:
    """Do a binary op's inputs of symbolic shapes `ins` agree with its broadcast b (a fixed b_shape)?"""
    return _broadcast_b(op) and tuple(ins[1]) == tuple(op.b_shape) and all(
        isinstance(a, Dim) or a == s for a, s in zip(ins[0], op.shape))


def _concat_maker(op: Concat, x: tuple, ins: list[tuple]):
    """make(shape of input 0) -> the Concat at the dim values that shape gives (the inputs agree off the axis,
    so input 0 holds every Dim of them)."""
    def make(shape):
        values = {d.name: v for d, v in zip(x, shape) if isinstance(d, Dim)}
        return dataclasses.replace(op, shapes=tuple(at(t, values) for t in ins))
    return make


def _retarget(op, shape):
    """op over another input shape (every other parameter kept; a global pool's window is the new plane)."""
    if isinstance(op, Elementwise):
        return dataclasses.replace(op, shape=shape)
    if global_pool(op):
        return dataclasses.replace(op, x_shape=shape, kernel=tuple(shape[2:]), stride=tuple(shape[2:]))
    return dataclasses.replace(op, x_shape=shape)


_SHAPE_FIELDS = ("shape", "x_shape", "shapes", "in_shape", "out_shape")


def _same_parameters(a, b) -> bool:
    """Two ops equal in every field but their shape."""
    if type(a) is not type(b):
        return False
    for f in dataclasses.fields(a):
        if f.name in _SHAPE_FIELDS or (f.name in ("kernel", "stride") and global_pool(a) and global_pool(b)):
            continue
        u, v = getattr(a, f.name), getattr(b, f.name)
        if isinstance(u, np.ndarray) or isinstance(v, np.ndarray):
            if u is None or v is None or not np.array_equal(u, v):
                return False
        elif isinstance(u, tuple) and any(isinstance(e, np.ndarray) for e in u):
            if len(u) != len(v) or not all(np.array_equal(p, q) for p, q in zip(u, v)):
                return False
        elif u != v:
            return False
    return True


@dataclass
class Plan:
    """A dynamic network's nodes as dynamic ops, with every tensor's symbolic shape."""

    graph: object                          # the static Graph at the largest shape
    shapes: dict[str, tuple]               # tensor -> axes (Dim or int)
    dims: tuple[Dim, ...]                  # the argument block: the graph's dims, then the derived ones
    derived: dict[str, tuple[str, int, int]]
    ops: list                              # (node, DynamicOp, output, ops), in graph order; clips folded


def plan(dg: DynamicGraph) -> Plan:
    """Symbolic shapes and dynamic ops of every node, checked against the graph at every sample."""
    high = dg.at(dg.high)
    shapes = Shapes(dg.dims)
    sym = dict(input_shapes(dg))
    for node in high.nodes:
        ins = [sym[v] for v in node.inputs]
        if isinstance(node.op, (Reshape, Concat)):
            sym[node.output] = layout_shape(node, ins, dg, shapes)
            continue
        if len(ins) == 2 and ins[0] != ins[1] and not _broadcasts(node.op, ins):
            raise CompileError(f"node {node.name} ({node.op.kind}): its inputs' shapes differ ({show_axes(ins[0])} and "
                               f"{show_axes(ins[1])}); a dynamic network broadcasts only a fixed per-channel or scalar b")
        sym[node.output] = output_shape(node, ins[0], shapes)
    samples = [dg.low, dg.high] + [{**dg.low, d.name: d.hi} for d in dg.dims]
    for base in samples:
        g, values = dg.at(base), shapes.values(base)
        if [n.name for n in g.nodes] != [n.name for n in high.nodes]:
            raise CompileError(f"the graph at {base} has other nodes than at the largest shape: a dynamic network "
                               f"must keep its structure across the range")
        for n, m in zip(g.nodes, high.nodes):
            if not _same_parameters(n.op, m.op):
                raise CompileError(f"node {n.name} ({n.op.kind}) has other parameters at {base} than at the "
                                   f"largest shape (padding that depends on the size, say)")
        for v, axes in sym.items():
            if tuple(g.values[v].shape) != at(axes, values):
                raise CompileError(f"tensor {v} is {tuple(g.values[v].shape)} at {base}; its shape "
                                   f"{show_axes(axes)} says {at(axes, values)}")
    dims = tuple(shapes.dims)
    low, hi = shapes.values(dg.low), shapes.values(dg.high)
    ops = []
    for node in high.nodes:
        x = sym[node.inputs[0]]
        if isinstance(node.op, Reshape):          # the same bytes: its output is its input's buffer
            continue
        if isinstance(node.op, Concat):
            if node.op.consts:
                raise CompileError(f"node {node.name} (concat): constant pieces have a static lowering only (over a "
                                   "range of shapes the constant's place moves)")
            ins = [sym[v] for v in node.inputs]
            make = _concat_maker(node.op, x, ins)
            first = {v: k for k, v in reversed(list(enumerate(node.inputs)))}   # one name per tensor
            names = tuple(f"x{first[v]}" for v in node.inputs)
        else:
            if getattr(node.op, "reverse", False):
                raise CompileError(f"node {node.name} ({node.op.kind}): b in the first operand's role (reverse) has a "
                                   "static lowering only")
            make = (lambda op: lambda s: _retarget(op, s))(node.op)
            names = ("a", "b") if len(node.inputs) == 2 else ("x",)
        b = getattr(node.op, "b_shape", None)
        ops.append((node, DynamicOp(node.op.kind, x, dims, make, make(at(x, hi)), make(at(x, low)), names,
                                    None if b is None else (x, b))))
    return Plan(high, sym, dims, shapes.derived, _fold_clips(high, ops))


def _fold_clips(graph, ops: list) -> list:
    """(node, op, output, what) with each clip folded into the op before it where that op's output has no
    other reader and is not a graph output."""
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers[v] = readers.get(v, 0) + 1
    out: list = []
    producer: dict[str, int] = {}
    for node, op in ops:
        src = node.inputs[0]
        k = producer.get(src)
        if (k is not None and len(node.inputs) == 1 and readers.get(src) == 1 and src not in graph.outputs):
            merged = folded(out[k][1], op, reads_its_output=True)
            if merged is not None:
                prev = out[k]
                out[k] = (prev[0], merged, node.output, f"{prev[3]} + {node.op.kind}")
                producer[node.output] = k
                continue
        producer[node.output] = len(out)
        out.append((node, op, node.output, node.op.kind))
    return out


# ----------------------------------------------------------------------------- build

def build_dynamic_network(dg: DynamicGraph, cfg: Config) -> Library:
    """Compile a DynamicGraph into one program (a compiler.library.Library) for its whole range."""
    p = plan(dg)
    g = p.graph
    check_ddr_half("the network's tensors", sum(int(np.prod(g.values[v].shape)) for v in
                                               {*g.inputs, *(out for _, _, out, _ in p.ops)}), dg.dims, cfg)
    used = set(_RESERVED)
    buffers = {v: buffer_name(v, used) for v in list(g.inputs) + list(g.outputs)}
    runs = fused_runs(p, cfg)
    written = {out for _, _, out, _ in p.ops}
    for node in g.nodes:                                        # in graph order: a reshape after its input
        if isinstance(node.op, Reshape) and node.output not in g.outputs:
            buffers[node.output] = buffers[node.inputs[0]]      # the same bytes under another shape
        elif node.output in written and node.output not in buffers:
            buffers[node.output] = buffer_name(f"t_{node.output}", used)
    runs += [[_copy(node, p)] for node in g.nodes if isinstance(node.op, Reshape) and node.output in g.outputs]
    position = {n.name: k for k, n in enumerate(g.nodes)}
    runs.sort(key=lambda run: position[run[0][0].name])
    programs, layers = [], []
    for run in runs:
        (node, op, _, _), (_, _, output, _) = run[0], run[-1]
        if buffers[output] == buffers[node.inputs[0]]:          # a flatten: no program
            continue
        nodes = [n for n, _, _, _ in run]
        chain, add = _joined(run)
        try:
            if add is not None:
                lower = fused_prepare([o for _, o, _, _ in chain], cfg, add[:2])
            elif len(run) > 1:
                lower = fused_prepare([o for _, o, _, _ in run], cfg)
            elif isinstance(op.largest, Concat):
                lower = checked(lambda b, op=op, shapes=[p.shapes[v] for v in node.inputs]:
                                lower_concat(b, op, cfg, shapes))
            else:
                lower = checked(lowering(op, cfg))
        except CompileError as exc:
            raise CompileError(f"node {node.name} ({node.op.kind}): {exc}") from None
        bind = {name: buffers[v] for name, v in zip(op.names, node.inputs)}
        bind["y"] = buffers[output]
        if add is not None:
            bind["xr"] = buffers[add[2]]
        programs.append((lower, bind))
        # link numbers the programs, and a flatten has none: the label is the program's index
        layers.append({"name": node.name, "label": f"L{len(programs) - 1}_layer",
                       "ops": " -> ".join(w for _, _, _, w in run),
                       "in_shapes": [list(g.values[v].shape) for v in node.inputs],
                       "out_shape": list(g.values[output].shape),
                       "macs": sum(int(getattr(n.op, "macs", 0)) for n in nodes),
                       "predicted_cycles": 0, "bound_cycles": int(bound_cycles(tuple(n.op for n in nodes), cfg)),
                       "nodes": [n.name for n in nodes], "onchip": {}})

    inner = sum(int(np.prod(g.values[out].shape)) for _, _, out, _ in p.ops if out not in g.outputs)

    def io(v):
        t = tensor_meta(g.values[v], buffers[v])
        t["shape"] = [d.name if isinstance(d, Dim) else d for d in p.shapes[v]]
        return t

    meta = {"format": GRAPH_FORMAT, "inputs": [io(v) for v in g.inputs], "outputs": [io(v) for v in g.outputs],
            "layers": layers, "arena": {"bytes": inner, "naive_bytes": inner},   # one buffer per tensor
            "fused": True,            # runs fused on chip where they can be (fused_runs); no on-chip peak yet
            "fusion": [], "dims": [[d.name, d.lo, d.hi] for d in p.dims],
            "derived": {k: list(v) for k, v in p.derived.items()}}
    notes = {buffers[v]: " ".join(d.name if isinstance(d, Dim) else str(d) for d in p.shapes[v])
             for v in list(g.inputs) + list(g.outputs)}
    derived = " ".join(f"{k}={axis_rule(a, b, c)}" for k, (a, b, c) in p.derived.items())
    blob = graph_buffer(meta)
    asm, files = link(cfg, programs, notes, derived, blob.data)
    return Library(assemble(asm, files, "dynamic_network.s"), meta, cfg, asm, files, 0)


def _copy(node, p: Plan) -> tuple:
    """A reshape that is a graph output as a run of its own: its input copied to the output's buffer (a
    one-input concat along axis 1), the bytes unchanged."""
    x = p.shapes[node.inputs[0]]
    if len(x) < 2 or isinstance(x[1], Dim):
        raise CompileError(f"node {node.name} (reshape): a graph output reshaped from {show_axes(x)} needs a copy, "
                           f"which needs a fixed axis 1")
    op = Concat((at(x, {d.name: d.hi for d in p.dims}),), 1, node.op.dtype)
    return (node, DynamicOp("reshape", x, p.dims, None, op, op, ("x0",)), node.output, "reshape")


def _joined(run: list) -> tuple[list, tuple | None]:
    """A run ending in a join (an add or mul after a fused chain, fused_runs): (the chain's entries, (the
    add's DynamicOp, which of its inputs the chain's output is, its other input)); else (run, None)."""
    node, op = run[-1][0], run[-1][1]
    if len(run) < 2 or op.names != ("a", "b"):
        return run, None
    side = node.inputs.index(run[-2][2])
    return run[:-1], (op, side, node.inputs[1 - side])


def _joins(p: Plan, run: list, entry, readers: dict[str, int]) -> bool:
    """Can the add or mul `entry` end the run (its input from the run's last op, a conv, the other from DDR:
    a residual's join) as the fused chain's epilogue?"""
    node, op = entry[0], entry[1]
    last = run[-1]
    if op.names != ("a", "b") or _joined(run)[1] is not None or not isinstance(last[1].largest, Conv2d):
        return False
    if not (isinstance(op.largest, Elementwise) and op.largest.mode in ("add", "mul") and op.in_shapes is None):
        return False
    if last[2] not in node.inputs or node.inputs[0] == node.inputs[1] or readers.get(last[2]) != 1:
        return False
    if last[2] in p.graph.outputs or p.shapes[node.inputs[0]] != p.shapes[node.inputs[1]]:
        return False
    return all(keeps_dims(o) for _, o, _, _ in run)


def fused_runs(p: Plan, cfg: Config) -> list[list]:
    """p.ops cut into runs to lower as one fused program (intermediates in DM, never in DDR): each op
    reads the one before, which nothing else reads and which is no graph output, every op keeps the Dims
    (dynamic/fused.fusable) and the run fits on chip; a run whose last op is a conv may end in
    an add or mul that reads it and a tensor in DDR (a residual's join: the add runs on the conv's rows
    on chip); every other op is a run of its own."""
    readers: dict[str, int] = {}
    for node in p.graph.nodes:
        for v in node.inputs:
            readers[v] = readers.get(v, 0) + 1
    runs: list[list] = []
    for entry in p.ops:
        node, op = entry[0], entry[1]
        last = runs[-1][-1] if runs else None
        if last is not None and _joins(p, runs[-1], entry, readers):
            chain = [o for _, o, _, _ in runs[-1]]
            try:
                fused_prepare(chain, cfg, (op, node.inputs.index(last[2])))
            except CompileError:         # does not fit on chip, or no fused form: the add alone
                runs.append([entry])
                continue
            runs[-1].append(entry)
            continue
        if (last is not None and op.names == ("x",) and last[1].names == ("x",) and node.inputs[0] == last[2]
                and readers.get(last[2]) == 1 and last[2] not in p.graph.outputs
                and fusable([o for _, o, _, _ in runs[-1]] + [op])):
            try:
                fused_prepare([o for _, o, _, _ in runs[-1]] + [op], cfg)
            except CompileError:         # does not fit on chip: start a new run
                runs.append([entry])
                continue
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs
