"""Whole networks: a compiler.Graph compiled into ONE program.

The passes, in order (each a function of its own):
  partition     fuse the graph's nodes into kernels: a conv2d / dense takes the relu / clip
                after it and one residual add (then relu / clip), as build() fuses a chain
  fuse          kernels linked output to first input (conv -> conv, conv -> pool, bottlenecks,
                inverted residuals) merge into one where the cost model predicts it pays
                (graph_fusion); build(graph, fuse=False) skips both: one kernel per node
  alias         reshapes and channel concats move no data: their tensors share storage
  plan_arena    intermediates go to one DDR arena, reusing bytes by liveness (first fit,
                as TVM's graph memory planner); the graph's inputs and outputs are named buffers
  lower         each kernel is tiled and scheduled alone, as build() does for a chain
  link          each kernel's buffers are renamed into the network's, and its input and
                output buffers pointed at the arena or the named buffers
  synchronise   one sync pass over the whole program: a later layer waits only for what it
                reads or overwrites, so layers overlap where the data allows
  reroll        repeated tiles become counted loops again (passes.loops), after that sync: the
                kernels' own loops are expanded when they are linked, since the waits between
                layers change the first and last tiles of each
  emit          assembly with a label per layer and the graph's description as data, assembled

The binary carries what a runtime needs in its DDR buffer `nnp_graph` (UTF-8
JSON): the inputs and outputs (buffer, shape, dtype, quantisation) and the
layer table.  compiler.runtime.GraphModule runs it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from nnpsim.config import Config, shape_target

from . import cost
from .errors import CompileError
from .ir import Buffer, Command, CuWait, KernelIR, Label, Note, Ref
from .ops import Conv2d, Dense, Elementwise, Op, clip
from .passes import alloc, emit, loops, sync
from .roofline import bound_cycles
from .structure import VALUE_ONLY, tiling_key  # noqa: F401  (re-exported)

GRAPH_BUFFER = "nnp_graph"
GRAPH_FORMAT = "nnp-graph/1"
ARENA = "arena"
ARENA_ALIGN = 64
LAYOUT_KINDS = ("reshape", "concat")


# ----------------------------------------------------------------------------- partition

@dataclass
class Group:
    """One kernel of the network: graph nodes fused into a chain of ops."""

    name: str
    nodes: list
    ops: tuple[Op, ...]
    inputs: list[str]          # graph values bound to the kernel's inputs (x, then b ...)
    output: str                # the graph value the kernel writes
    parts: list = field(default_factory=list)    # the kernels a fused kernel was merged from


def _consumers(graph) -> dict[str, list]:
    out: dict[str, list] = {name: [] for name in graph.values}
    for node in graph.nodes:
        for v in node.inputs:
            out[v].append(node)
    return out


def _is_clip(op) -> bool:
    return isinstance(op, Elementwise) and op.mode == "clip"


def _as_first_input(add: Elementwise, position: int) -> Elementwise | None:
    """The add with its operands swapped when the chain value is its second input (None: cannot be).

    The integer add is symmetric; onnxruntime's float add rounds a and b differently, so its
    operands stay where they are (the add then runs as a kernel of its own, as a broadcasting one does).
    """
    if add.b_shape is not None:          # a broadcast b is no residual: the add runs as a kernel of its own
        return None
    if position == 0:
        return add
    if add.is_float:
        return None
    return replace(add, za=add.zb, zb=add.za, ma=add.mb, mb=add.ma)


def partition(graph, copies: frozenset[str] = frozenset()) -> list[Group]:
    """Fuse the graph's nodes into kernels, in an order where every kernel's inputs already exist.

    `copies` names reshapes that must move their data (alias() says which): each is a kernel
    of its own, an int8 copy through the VU.
    """
    consumers = _consumers(graph)
    outputs = set(graph.outputs)
    order = {id(n): k for k, n in enumerate(graph.nodes)}
    taken: set[int] = set()
    groups: list[Group] = []
    for node in graph.nodes:
        if id(node) in taken:
            continue
        if node.name in copies:
            groups.append(Group(node.name, [node], (_copy_op(graph, node),), list(node.inputs), node.output))
            continue
        if node.op.kind in LAYOUT_KINDS:
            continue
        members, ops, inputs = [node], [node.op], list(node.inputs)
        if isinstance(node.op, (Conv2d, Dense, Elementwise)):
            added = isinstance(node.op, Elementwise) and node.op.mode != "clip"
            head_nu = isinstance(node.op, (Conv2d, Dense))
            while True:
                cur = members[-1].output
                users = consumers[cur]
                if cur in outputs or len(users) != 1 or id(users[0]) in taken:
                    break
                nxt = users[0]
                if _is_clip(nxt.op):
                    members.append(nxt)
                    ops.append(nxt.op)
                elif (head_nu and not added and isinstance(nxt.op, Elementwise) and nxt.op.mode == "add"
                      and nxt.inputs[0] != nxt.inputs[1]
                      and _as_first_input(nxt.op, nxt.inputs.index(cur)) is not None):
                    pos = nxt.inputs.index(cur)
                    members.append(nxt)
                    ops.append(_as_first_input(nxt.op, pos))
                    inputs.append(nxt.inputs[1 - pos])
                    added = True
                else:
                    break
        taken.update(id(m) for m in members)
        groups.append(Group(members[0].name, members, tuple(ops), inputs, members[-1].output))
    groups.sort(key=lambda g: order[id(g.nodes[-1])])
    return groups


def per_node(graph, copies: frozenset[str] = frozenset()) -> list[Group]:
    """One kernel per node, in graph order (layout-only nodes move no data; copies are kernels of their own)."""
    out = []
    for node in graph.nodes:
        if node.name in copies:
            out.append(Group(node.name, [node], (_copy_op(graph, node),), list(node.inputs), node.output))
        elif node.op.kind not in LAYOUT_KINDS:
            out.append(Group(node.name, [node], (node.op,), list(node.inputs), node.output))
    return out


# ----------------------------------------------------------------------------- storage

@dataclass
class Slot:
    """Where a tensor's bytes live: a named DDR buffer (or the arena) and the offset in it."""

    buffer: str
    offset: int


class _Aliases:
    """Union-find with offsets: a tensor lives at `offset` bytes into its root tensor."""

    def __init__(self, values):
        self.parent = {v: (v, 0) for v in values}

    def find(self, v: str) -> tuple[str, int]:
        off = 0
        while self.parent[v][0] != v:
            v, step = self.parent[v]
            off += step
        return v, off

    def link(self, child: str, parent: str, off: int, where: str) -> None:
        """`child` lives at `off` bytes into `parent`."""
        rc, oc = self.find(child)
        rp, op = self.find(parent)
        if rc == rp:
            if oc != op + off:
                raise CompileError(f"{where}: {child} would live at two places of {rp}")
            return
        self.parent[rc] = (rp, op + off - oc)


def _copy_op(graph, node) -> Op:
    """An int8 copy of a reshape's input to its output (a clip that clips nothing)."""
    if graph.values[node.output].dtype != "int8":
        raise CompileError(f"{node.name}: a reshape between two graph inputs/outputs of "
                           f"{graph.values[node.output].dtype} needs a copy, which only int8 has")
    return clip(graph.values[node.output].shape, -128, 127)


def alias(graph) -> tuple[_Aliases, frozenset[str]]:
    """Reshapes share their input's bytes; a concat's inputs are consecutive slices of its output.

    A reshape that would make two graph inputs/outputs share bytes copies instead: its name is
    in the returned set.
    """
    al = _Aliases(graph.values)
    named = set(graph.inputs) | set(graph.outputs)
    copies = set()
    for node in graph.nodes:
        if node.op.kind == "reshape":
            ends = [{v for v in named if al.find(v)[0] == al.find(x)[0]} for x in (node.inputs[0], node.output)]
            if ends[0] and ends[1] and al.find(node.inputs[0])[0] != al.find(node.output)[0]:
                copies.add(node.name)
                continue
            al.link(node.output, node.inputs[0], 0, node.name)
        elif node.op.kind == "concat":
            shape = graph.values[node.output].shape
            if int(np.prod(shape[:node.op.axis])) != 1:
                raise CompileError(f"{node.name}: concat along axis {node.op.axis} of {shape} is not a "
                                   "run of whole slices (only a leading-size-1 concat is supported)")
            off = 0
            for v in node.inputs:
                al.link(v, node.output, off, node.name)
                off += _nbytes(graph.values[v])
    return al, frozenset(copies)


def _nbytes(value) -> int:
    return int(np.prod(value.shape)) * np.dtype(value.dtype).itemsize


def buffer_name(value_name: str, used: set[str]) -> str:
    """An assembler-safe, unique DDR buffer name for a graph input or output."""
    base = re.sub(r"\W", "_", value_name).strip("_") or "t"
    base = base if base[0].isalpha() else f"t_{base}"
    name, k = base, 1
    while name in used or name in (ARENA, GRAPH_BUFFER):
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name


@dataclass
class Storage:
    """Every tensor's slot, the named buffers and the arena plan."""

    slots: dict[str, Slot]
    named: dict[str, str]                  # graph input/output value -> buffer name
    arena_bytes: int
    naive_bytes: int                       # one buffer per intermediate tensor, no reuse


def plan_arena(graph, groups: list[Group], al: _Aliases) -> Storage:
    """Named buffers for the graph's inputs and outputs; arena offsets by liveness for the rest."""
    used: set[str] = set()
    named = {v: buffer_name(v, used) for v in list(graph.inputs) + list(graph.outputs)}
    roots: dict[str, list[str]] = {}
    for v in graph.values:
        roots.setdefault(al.find(v)[0], []).append(v)
    root_buffer: dict[str, str] = {}
    for root, members in roots.items():
        io = [v for v in members if v in named]
        if len(io) > 1:
            raise CompileError(f"graph tensors {', '.join(io)} share storage (a reshape or concat joins "
                               "them): give each graph input and output its own data")
        if io:
            v = io[0]
            if al.find(v)[1] != 0 or _nbytes(graph.values[v]) != _nbytes(graph.values[root]):
                raise CompileError(f"graph input/output {v} is a slice of {root}: not supported")
            root_buffer[root] = named[v]
    spans: dict[str, list[int]] = {}
    for k, g in enumerate(groups):
        for v in g.inputs + [g.output]:
            root = al.find(v)[0]
            if root not in root_buffer:
                span = spans.setdefault(root, [k, k])
                span[0], span[1] = min(span[0], k), max(span[1], k)
    bufs = {root: Buffer(root, "dm", _nbytes(graph.values[root]), ARENA_ALIGN) for root in spans}
    arena = alloc.place(list(bufs.values()), {b: tuple(spans[r]) for r, b in bufs.items()}, 1 << 40, ARENA)
    slots = {}
    for v in graph.values:
        root, off = al.find(v)
        if root in root_buffer:
            slots[v] = Slot(root_buffer[root], off)
        elif root in bufs:
            slots[v] = Slot(ARENA, bufs[root].addr + off)
    naive = sum(b.nbytes for b in bufs.values())
    return Storage(slots, named, arena, naive)


# ----------------------------------------------------------------------------- lower and link

@dataclass
class Layer:
    """One kernel of the network as the layer table reports it."""

    name: str
    label: str
    ops: str
    in_shapes: list[list[int]]
    out_shape: list[int]
    macs: int
    predicted_cycles: int
    bound_cycles: int
    nodes: list[str] = field(default_factory=list)      # the graph nodes the kernel runs
    onchip: dict[str, int] = field(default_factory=dict)  # peak bytes of each on-chip memory
    pipelining: dict | None = None   # a fused kernel's pipelining.Choice (as_meta): chosen variant, every price


def _label(name: str, k: int) -> str:
    return f"layer{k}_" + re.sub(r"\W", "_", name)[:40]


def _retarget(cmd: Command, mapping: dict[Buffer, Ref]) -> None:
    """Point every address of cmd whose buffer is in mapping at its new place."""
    for attr in ("dst", "src", "racc", "rin", "rw", "d", "a", "b"):
        ref = getattr(cmd, attr, None)
        if isinstance(ref, Ref) and ref.buf in mapping:
            new = mapping[ref.buf]
            setattr(cmd, attr, Ref(new.buf, new.offset + ref.offset))


def link(k: int, group: Group, kir: KernelIR, storage: Storage,
         ddr: dict[str, Buffer]) -> tuple[list, list[Buffer]]:
    """The kernel's statements and own buffers, renamed, with its I/O pointed at the network's buffers."""
    label = _label(group.name, k)
    mapping = {}
    for buf, value in zip(kir.inputs + [kir.output], group.inputs + [group.output]):
        slot = storage.slots[value]
        mapping[buf] = Ref(ddr[slot.buffer], slot.offset)
    own = [buf for buf in kir.buffers if buf not in mapping]
    for buf in own:
        buf.name = f"{label}_{buf.name}"
    body = loops.flatten(kir.body)          # (best_schedule was asked for a flat body: a no-op)
    for stmt in body:
        if isinstance(stmt, Command):
            _retarget(stmt, mapping)
    title = f"layer {k}: {group.name}: " + " + ".join(o.kind for o in group.ops) + "".join(
        f"; {n}" for n in kir.notes if n.startswith("pipelining:"))      # compiler.pipelining's choice
    return [Label(label), Note(title)] + [s for s in body if not isinstance(s, CuWait)], own


# ----------------------------------------------------------------------------- the library

@dataclass
class Library:
    """A compiled network: one program, its graph description and layer table."""

    program: object
    meta: dict
    config: Config
    asm: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    predicted_cycles: int = 0

    @property
    def layers(self) -> list[dict]:
        return self.meta["layers"]

    @property
    def arena_bytes(self) -> int:
        return self.meta["arena"]["bytes"]

    def save(self, path: str | Path) -> None:
        """Write the binary; compiler.load(path) and `nnpsim run` read it."""
        self.program.save(path)

    def layer_table(self) -> str:
        """One line per layer: ops, shapes, predicted cycles and roofline bound."""
        rows = [f"{'layer':<28} {'ops':<34} {'output':<18} {'predicted':>11} {'bound':>10}"]
        for layer in self.layers:
            rows.append(f"{layer['name'][:28]:<28} {layer['ops'][:34]:<34} {str(layer['out_shape']):<18} "
                        f"{layer['predicted_cycles']:>11,} {layer['bound_cycles']:>10,}")
        a = self.meta["arena"]
        rows.append(f"arena {a['bytes']:,} bytes (one buffer per tensor: {a['naive_bytes']:,})")
        return "\n".join(rows)

    def fusion_report(self) -> str:
        """Every fusion decision with its predicted gain, then the on-chip high-water marks."""
        from .graph_fusion import Decision

        if not self.meta.get("fused", True):
            rows = ["fusion: off (one kernel per node)"]
        else:
            made = [Decision(**d) for d in self.meta.get("fusion", [])]
            rows = [f"fusion: {sum(d.fused for d in made)} of {len(made)} merges priced faster fused"]
            rows += [f"  {d.line()}" for d in made]
            rows += pipelining_lines(self.meta.get("layers", []))
        plan = self.meta.get("layout")
        rows += plan["lines"] if plan else ["layouts: not planned (every activation NCHW in DDR)"]
        peak = self.meta.get("onchip_peak", {})
        rows.append("on-chip high-water (bytes): " + ", ".join(f"{m} {n:,}" for m, n in sorted(peak.items())))
        return "\n".join(rows)


def _pipelining(kir) -> dict | None:
    """A fused kernel's pipelining decision as the metadata records it (None: one anchor)."""
    choice = getattr(kir, "pipelining", None)
    return choice.as_meta() if choice is not None else None


def pipelining_lines(layers: list[dict]) -> list[str]:
    """The report's lines on each fused kernel's pipelining: the variant chosen and every variant's price."""
    from .pipelining import prices_text

    rows = []
    for layer in layers:
        p = layer.get("pipelining")
        if p:
            rows.append(f"  {layer['name']} ({layer['ops']}): {p['chosen']} "
                        f"(predicted cycles: {prices_text(p['priced'])}){p.get('why', '')}")
    return ([f"pipelining: {len(rows)} fused kernels"] + rows) if rows else []


def _tensor_meta(value, buffer: str) -> dict:
    q = getattr(value, "quant", None)
    out = {"name": value.name, "buffer": buffer, "shape": list(value.shape), "dtype": value.dtype}
    if q is not None:
        out["scale"] = np.asarray(q.scale, np.float32).ravel().tolist()
        out["zero_point"] = np.asarray(q.zero_point).astype(int).ravel().tolist()
        out["axis"] = q.axis
    return out


def _graph_buffer(meta: dict) -> Buffer:
    blob = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8).view(np.int8)
    return Buffer(GRAPH_BUFFER, "ddr", blob.size, dtype="int8", shape=(blob.size,), data=blob)


def progress(items: list, what: str):
    """items, with a tqdm progress bar on a terminal (none without tqdm, or when output is redirected)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=what, unit="layer", disable=None, leave=False)


class _Kernels:
    """Each group compiled once (by its nodes); predicted cycles shared by groups of the same structure."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.chosen: dict[tuple, int] = {}
        self.prices: dict[tuple, int] = {}
        self.built: dict[tuple, tuple] = {}

    def compile(self, g: Group) -> tuple:
        """(kir, predicted cycles, on-chip usage) of the group's kernel alone."""
        from .kernel import best_schedule

        mine = (tuple(n.name for n in g.nodes), tiling_key(g.ops))   # one node set may be built in two layouts
        if mine not in self.built:
            key = tiling_key(g.ops)
            kir, (predicted, usage, _), self.chosen[key] = best_schedule(g.ops, self.cfg, self._hint(g, key),
                                                                         reroll=False)
            self.prices[key] = int(predicted)
            self.built[mine] = (kir, int(predicted), usage)
        return self.built[mine]

    def _hint(self, g: Group, key: tuple) -> int | None:
        """The candidate to build alone: the one a group of this structure chose; in a blocked layout,
        the one NHWC chose (the layouts differ only in DDR strides: one build instead of the finalists)."""
        from .layout_plan import with_layout
        from .lowering.layout import layout_block

        if key in self.chosen or not any(layout_block(getattr(op, "x_layout", "nchw")) for op in g.ops):
            return self.chosen.get(key)
        return self.chosen.get(tiling_key(with_layout(g.ops, "nhwc")))

    def price(self, g: Group) -> int:
        """Predicted cycles of the group's kernel alone (built only if no group of its structure was)."""
        key = tiling_key(g.ops)
        if key not in self.prices:
            self.compile(g)
        return self.prices[key]


def plan_kernels(graph, cfg: Config, fuse: bool = True, copies: frozenset[str] | None = None,
                 kernels: _Kernels | None = None, layouts: bool = True) -> tuple[list[Group], list]:
    """The network's kernels in run order and the fusion decisions (graph_fusion.Decision) made.

    A fused kernel's Group lists the kernels it was merged from in .parts.  With `layouts`, a
    kernel is priced in the DDR layout it does best in (the layout plan comes after fusion).
    """
    from . import graph_fusion
    from .layout_plan import best_price

    if copies is None:
        copies = alias(graph)[1]
    decisions = []
    if fuse:
        groups = partition(graph, copies)
        kernels = kernels or _Kernels(cfg)
        price = (lambda g: best_price(g, kernels.price)) if layouts else kernels.price
        groups, decisions = graph_fusion.fuse(graph, groups, price, cfg.dm_bytes)
    else:
        groups = per_node(graph, copies)
    if not groups:
        raise CompileError("the graph has no node that runs on the machine")
    return groups, decisions


def build_network(graph, cfg: Config, fuse: bool = True, layouts: bool = True, blocked: bool = True) -> Library:
    """Compile a validated graph into one program (see the module docstring for the passes).

    fuse=False keeps one kernel per node (no epilogues, no multi-anchor fusion): the baseline
    the benchmarks compare against.  layouts=False keeps every activation NCHW in DDR (no
    layout plan, no transforms); blocked=False plans NCHW and NHWC only (no blocked layout).
    """
    from . import layout_plan

    from .kernel import refuse_broadcast
    graph.validate()
    for node in graph.nodes:
        refuse_broadcast(node.op, f"node {node.name}")
    al, copies = alias(graph)
    kernels = _Kernels(cfg)
    groups, decisions = plan_kernels(graph, cfg, fuse, copies, kernels, layouts)
    plan = None
    if layouts:
        plan = layout_plan.plan_layouts(graph, groups, al, kernels.price, cfg.nu_cols if blocked else 0)
        graph, groups = layout_plan.apply(graph, groups, plan)
        al = alias(graph)[0]
    storage = plan_arena(graph, groups, al)
    ddr = {name: Buffer(name, "ddr", _nbytes(graph.values[v]), dtype=graph.values[v].dtype,
                        shape=tuple(graph.values[v].shape)) for v, name in storage.named.items()}
    if storage.arena_bytes:
        ddr[ARENA] = Buffer(ARENA, "ddr", storage.arena_bytes, dtype="int8", shape=(storage.arena_bytes,))
    body, layers, buffers = [], [], []
    onchip: dict[str, int] = {}
    for k, g in enumerate(progress(groups, "compiling layers")):
        kir, predicted, usage = kernels.compile(g)
        for memory, n in usage.items():
            onchip[memory] = max(onchip.get(memory, 0), int(n))
        stmts, own = link(k, g, kir, storage, ddr)
        body += stmts
        buffers += own
        layers.append(Layer(g.name, _label(g.name, k), " + ".join(o.kind for o in g.ops),
                            [list(graph.values[v].shape) for v in g.inputs],
                            list(graph.values[g.output].shape), sum(int(getattr(o, "macs", 0)) for o in g.ops),
                            int(predicted), int(bound_cycles(g.ops, cfg)), [n.name for n in g.nodes],
                            {m: int(n) for m, n in usage.items()}, _pipelining(kir)))
    body, report = sync.synchronise(body, cfg.semaphores)
    body = loops.reroll(body)
    meta = {"format": GRAPH_FORMAT,
            "inputs": [_tensor_meta(graph.values[v], storage.named[v]) for v in graph.inputs],
            "outputs": [_tensor_meta(graph.values[v], storage.named[v]) for v in graph.outputs],
            "layers": [vars(layer) for layer in layers],
            "arena": {"bytes": storage.arena_bytes, "naive_bytes": storage.naive_bytes},
            "fused": bool(fuse), "onchip_peak": onchip,
            "layout": plan.as_meta() if plan is not None else None,
            "fusion": [{"members": d.members, "ops": d.ops, "apart_cycles": d.apart_cycles,
                        "fused_cycles": d.fused_cycles, "fused": d.fused, "why": d.why} for d in decisions]}
    ins = [ddr[storage.named[v]] for v in graph.inputs]
    outs = [ddr[storage.named[v]] for v in graph.outputs if ddr[storage.named[v]] not in ins]
    arena = [ddr[ARENA]] if ARENA in ddr else []
    kir = KernelIR("network", ins + outs + arena + buffers + [_graph_buffer(meta)], body, ins,
                   ddr[storage.named[graph.outputs[0]]])
    predicted = cost.schedule_cycles(kir.body, cfg)
    header = [f"network: {len(groups)} layers, arena {storage.arena_bytes} bytes "
              f"(one buffer per tensor: {storage.naive_bytes})",
              f"sync: {report.waits} command waits, {report.cu_waits} CU waits",
              f"predicted cycles: {predicted}"]
    asm = emit.emit(kir, header, target=shape_target(cfg))
    files = emit.constant_files(kir)
    from .kernel import assemble
    return Library(assemble(asm, files, "network.s"), meta, cfg, asm, files, int(predicted))


def read_meta(program) -> dict:
    """The graph description a network binary carries (CompileError if it carries none)."""
    buf = program.buffers.get(GRAPH_BUFFER)
    if buf is None:
        raise CompileError(f"the binary has no {GRAPH_BUFFER} buffer: it was not built from a graph")
    start = buf.addr - program.data_base
    raw = bytes(program.data[start:start + int(np.prod(buf.shape))])
    try:
        meta = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CompileError(f"the binary's {GRAPH_BUFFER} buffer is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != GRAPH_FORMAT:
        raise CompileError(f"the binary's {GRAPH_BUFFER} buffer is not a {GRAPH_FORMAT} description")
    return meta


def load(path: str | Path, config: Config | None = None) -> Library:
    """Read a network binary written by Library.save."""
    from isa_spec.program import BinaryError, Program

    try:
        program = Program.load(path)
    except (OSError, BinaryError) as exc:
        raise CompileError(f"cannot load {path}: {exc}") from None
    return Library(program, read_meta(program), (config or Config()).validate())
