"""Whole networks: a compiler.Graph compiled into ONE program (a compiler.library.Library).

The passes, in order (each a function of its own):
  partition     fuse the graph's nodes into kernels: a conv2d / dense takes the relu / clip
                after it and one residual add (then relu / clip), as build() fuses a chain
                (network.partition)
  fuse          kernels linked output to first input (conv -> conv, conv -> pool, bottlenecks,
                inverted residuals) merge into one where the cost model predicts it pays
                (network.fusion); build(graph, fuse=False) skips both: one kernel per node
  layouts       each activation's DDR layout, transforms where two kernels disagree (network.layout_plan)
  alias         reshapes and channel concats move no data: their tensors share storage (network.storage)
  plan_arena    intermediates go to one DDR arena, reusing bytes by liveness (first fit,
                as TVM's graph memory planner); the graph's inputs and outputs are named buffers
  lower         each kernel is tiled and scheduled alone, as build() does for a chain (compiler.search)
  link          each kernel's buffers are renamed into the network's, and its input and
                output buffers pointed at the arena or the named buffers (network.link)
  synchronise   one sync pass over the whole program: a later layer waits only for what it
                reads or overwrites, so layers overlap where the data allows
  reroll        repeated tiles become counted loops again (passes.loops), after that sync: the
                kernels' own loops are expanded when they are linked, since the waits between
                layers change the first and last tiles of each
  emit          assembly with a label per layer and the graph's description as data, assembled

The binary carries what a runtime needs in its DDR buffer `nnp_graph` (compiler.library).
"""
from __future__ import annotations

import gc
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

from isa_spec.program import Program
from nnpsim.config import Config, shape_target

from .. import compile_cache, cost
from ..assembler import assemble
from ..errors import CompileError
from ..ir import Buffer, KernelIR
from ..library import GRAPH_FORMAT, Library, graph_buffer, tensor_meta
from ..lowering.layout import layout_block
from ..passes import emit, loops, sync
from ..passes.emit import incbin_name
from ..pipeline import refuse_broadcast
from ..roofline import bound_cycles
from ..search import best_schedule, cached_choice
from ..structure import tiling_key
from . import fusion, layout_plan, parallel
from .layout_plan import best_price, planned
from .link import Layer, label, link
from .partition import Group, partition, per_node
from .storage import ARENA, alias, nbytes, plan_arena, slice_views


def _pipelining(kir) -> dict | None:
    """A fused kernel's pipelining decision as the metadata records it (None: one anchor)."""
    choice = getattr(kir, "pipelining", None)
    return choice.as_meta() if choice is not None else None


@contextmanager
def fewer_collections(young: int = 100_000) -> Iterator[None]:
    """Run the body with the cyclic garbage collector's youngest generation collected only every
    `young` allocations: a network's compile allocates millions of short-lived IR objects, few of
    them in cycles, and the default (every 700) spends a fifth of the compile scanning them."""
    old = gc.get_threshold()
    gc.set_threshold(max(young, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def progress(items: list, what: str) -> Iterable:
    """items, with a tqdm progress bar on a terminal (none without tqdm, or when output is redirected)."""
    try:
        from tqdm import tqdm
    except ImportError:
        return items
    return tqdm(items, desc=what, unit="layer", disable=None, leave=False)


class Kernels:
    """Each group compiled once (by its nodes); predicted cycles shared by groups of the same structure."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.chosen: dict[tuple, int] = {}
        self.prices: dict[tuple, int] = {}
        self.built: dict[tuple, tuple] = {}

    def compile(self, g: Group) -> tuple:
        """(kir, predicted cycles, on-chip usage) of the group's kernel alone."""
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
        if key in self.chosen or not any(layout_block(getattr(op, "x_layout", "nchw")) for op in g.ops):
            return self.chosen.get(key)
        return self.chosen.get(tiling_key(planned(g, "nhwc").ops))

    def price(self, g: Group) -> int:
        """Predicted cycles of the group's kernel alone (built only if no group of its structure was, and
        the compile cache does not hold its search's choice: then the choice is recorded unbuilt)."""
        key = tiling_key(g.ops)
        if key not in self.prices:
            hit = cached_choice(g.ops, self.cfg, self._hint(g, key))
            if hit is None:
                self.compile(g)
            else:
                self.chosen[key], self.prices[key] = hit
        return self.prices[key]


def plan_kernels(graph, cfg: Config, fuse: bool = True, copies: frozenset[str] | None = None,
                 kernels: Kernels | None = None, layouts: bool = True) -> tuple[list[Group], list]:
    """The network's kernels in run order and the fusion decisions (library.Decision) made.

    A fused kernel's Group lists the kernels it was merged from in .parts.  With `layouts`, a
    kernel is priced in the DDR layout it does best in (the layout plan comes after fusion).
    """
    if copies is None:
        copies = alias(graph)[1]
    decisions = []
    if fuse:
        groups = partition(graph, copies)
        kernels = kernels or Kernels(cfg)
        price = (lambda g: best_price(g, kernels.price)) if layouts else kernels.price
        groups, decisions = fusion.fuse(graph, groups, price, cfg.dm_bytes)
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
    key = compile_cache.key("network", graph, cfg, fuse, layouts, blocked) if compile_cache.enabled() else None
    hit = compile_cache.get("network", key, _whole_entry)
    if hit is not None:
        program, meta, asm, files, predicted = hit
        return Library(program, meta, cfg, asm, read_back(program, files), predicted)
    with fewer_collections(), compile_cache.remembered("search", parallel.prefetch(graph, cfg, fuse, layouts)):
        lib = _build_network(graph, cfg, fuse, layouts, blocked)
    compile_cache.put("network", key, (lib.program, lib.meta, lib.asm, stored_files(lib.program, lib.files),
                                       lib.predicted_cycles))
    compile_cache.prune()
    return lib


def _whole_entry(v: object) -> bool:
    """Is v a network entry as build_network writes it: (Program, meta, asm, stored_files, predicted cycles),
    every file the program does not hold given whole?"""
    return (isinstance(v, tuple) and len(v) == 5 and isinstance(v[0], Program) and isinstance(v[1], dict)
            and isinstance(v[2], str) and isinstance(v[3], dict) and type(v[4]) is int
            and all(isinstance(f, bytes) or (f is None and _span(v[0], name) is not None) for name, f in v[3].items()))


def stored_files(program: Program, files: dict[str, bytes]) -> dict[str, bytes | None]:
    """A network entry's .incbin files: None for each the program's data holds as it is, at its buffer (a
    network's weights, which would be stored twice and read twice on every hit), read_back gives it again."""
    return {name: None if _held(program, name) == data else data for name, data in files.items()}


def read_back(program: Program, stored: dict[str, bytes | None]) -> dict[str, bytes]:
    """The .incbin files of a network entry (stored_files): each None read from the program's data."""
    return {name: _held(program, name) if data is None else data for name, data in stored.items()}


def _held(program: Program, name: str) -> bytes | None:
    """The bytes of the program's buffer whose .incbin file is `name` (None: no such buffer, or data short of it)."""
    span = _span(program, name)
    return None if span is None else bytes(program.data[span[0]:span[1]])


def _span(program: Program, name: str) -> tuple[int, int] | None:
    """Where in the program's data its buffer whose .incbin file is `name` lies (None: nowhere)."""
    buf = program.buffers.get(name.removesuffix(".bin")) if isinstance(name, str) else None
    if buf is None or incbin_name(buf) != name:
        return None
    start = buf.addr - program.data_base
    end = start + buf.nbytes
    return (start, end) if 0 <= start and end <= len(program.data) else None


def _build_network(graph, cfg: Config, fuse: bool, layouts: bool, blocked: bool) -> Library:
    graph.validate()
    for node in graph.nodes:
        refuse_broadcast(node.op, f"node {node.name}")
    al, copies = alias(graph)
    kernels = Kernels(cfg)
    groups, decisions = plan_kernels(graph, cfg, fuse, copies, kernels, layouts)
    plan = None
    if layouts:
        plan = layout_plan.plan_layouts(graph, groups, al, kernels.price, cfg.nu_cols if blocked else 0)
        graph, groups = layout_plan.apply(graph, groups, plan)
        al = alias(graph, slice_views(graph, copies))[0]
    storage = plan_arena(graph, groups, al)
    ddr = {name: Buffer(name, "ddr", nbytes(graph.values[v]), dtype=graph.values[v].dtype,
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
        layers.append(Layer(g.name, label(g.name, k), " + ".join(o.kind for o in g.ops),
                            [list(graph.values[v].shape) for v in g.inputs],
                            list(graph.values[g.output].shape), sum(int(getattr(o, "macs", 0)) for o in g.ops),
                            int(predicted), int(bound_cycles(g.ops, cfg)), [n.name for n in g.nodes],
                            {m: int(n) for m, n in usage.items()}, _pipelining(kir)))
    body, report = sync.synchronise(body, cfg.semaphores)
    body = loops.reroll(body)
    predicted = cost.schedule_cycles(body, cfg)
    meta = {"format": GRAPH_FORMAT, "predicted_cycles": int(predicted),
            "inputs": [tensor_meta(graph.values[v], storage.named[v]) for v in graph.inputs],
            "outputs": [tensor_meta(graph.values[v], storage.named[v]) for v in graph.outputs],
            "layers": [vars(layer) for layer in layers],
            "arena": {"bytes": storage.arena_bytes, "naive_bytes": storage.naive_bytes},
            "fused": bool(fuse), "onchip_peak": onchip,
            "layout": plan.as_meta() if plan is not None else None,
            "fusion": [{"members": d.members, "ops": d.ops, "apart_cycles": d.apart_cycles,
                        "fused_cycles": d.fused_cycles, "fused": d.fused, "why": d.why} for d in decisions]}
    ins = [ddr[storage.named[v]] for v in graph.inputs]
    outs = [ddr[storage.named[v]] for v in graph.outputs if ddr[storage.named[v]] not in ins]
    arena = [ddr[ARENA]] if ARENA in ddr else []
    kir = KernelIR("network", ins + outs + arena + buffers + [graph_buffer(meta)], body, ins,
                   ddr[storage.named[graph.outputs[0]]])
    header = [f"network: {len(groups)} layers, arena {storage.arena_bytes} bytes "
              f"(one buffer per tensor: {storage.naive_bytes})",
              f"sync: {report.waits} command waits, {report.cu_waits} CU waits",
              f"predicted cycles: {predicted}"]
    asm = emit.emit(kir, header, target=shape_target(cfg))
    files = emit.constant_files(kir)
    return Library(assemble(asm, files, "network.s"), meta, cfg, asm, files, int(predicted))


