"""Where a network's tensors live in DDR: reshapes and concats alias their inputs' bytes, the graph's
inputs and outputs get named buffers, and every other tensor an offset in one arena, reusing bytes by
liveness (first fit, as TVM's graph memory planner)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import CompileError
from ..ir import Buffer
from ..library import ARENA, buffer_name
from ..passes import alloc
from .partition import Group, channel_shuffles

ARENA_ALIGN = 64


@dataclass
class Slot:
    """Where a tensor's bytes live: a named DDR buffer (or the arena) and the offset in it."""

    buffer: str
    offset: int


class Aliases:
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

    def members(self, root: str) -> dict[str, int]:
        """Every tensor living in `root`'s bytes, with its offset there."""
        return {v: off for v in self.parent for r, off in [self.find(v)] if r == root}

    def reroot(self, root: str, new: str) -> None:
        """Make `new`, a member of `root`, the root of its tensors (offsets measured from it)."""
        shift = self.find(new)[1]
        for v, off in self.members(root).items():
            self.parent[v] = (new, off - shift)


def alias(graph, views: frozenset[str] | None = None) -> tuple[Aliases, frozenset[str]]:
    """Reshapes share their input's bytes; a concat's inputs are consecutive slices of its output; a
    slice that is one contiguous run of its input (Slice.view_offset) is a view of it.

    A reshape that would make two graph inputs/outputs share bytes copies instead, and a concat
    whose inputs are not whole slices of its output (an axis after one of size > 1) moves them
    by DMA (lowering.movement), as does one that would make two graph inputs/outputs share bytes, one
    with a graph input/output among its pieces, or one with constant pieces (the kernel writes them at
    every run).  A slice is a view only where
    the tensors sharing bytes stay consistent (_view_fits); else it is a kernel.  The returned set
    names the nodes that move data.  `views` fixes which slices are views (slice_views of a first
    call: the graph with the layout plan's transforms keeps the choice its kernels were planned with).
    A channel shuffle's pieces (partition.channel_shuffles) live in its transpose's output, plane 2i + g
    for channel i of piece g: its concat, reshapes and transpose move no data.
    """
    al = Aliases(graph.values)
    named = set(graph.inputs) | set(graph.outputs)
    copies = set()
    slices = []
    shuffles = channel_shuffles(graph)
    shuffled = {sh.concat: sh for sh in shuffles.values()}
    for node in graph.nodes:
        if node.name in shuffled:      # its pieces are the shuffle's planes, written pitched (partition.Shuffle)
            sh = shuffled[node.name]
            for g, v in enumerate(sh.pieces):
                al.link(v, sh.out, g * sh.plane * np.dtype(graph.values[v].dtype).itemsize, node.name)
        elif node.op.kind == "reshape":
            ends = [{v for v in named if al.find(v)[0] == al.find(x)[0]} for x in (node.inputs[0], node.output)]
            if ends[0] and ends[1] and al.find(node.inputs[0])[0] != al.find(node.output)[0]:
                copies.add(node.name)
                continue
            al.link(node.output, node.inputs[0], 0, node.name)
        elif node.op.kind == "concat":
            shape = graph.values[node.output].shape
            roots = {al.find(v)[0] for v in (*node.inputs, node.output)}
            joined = sum(any(al.find(v)[0] == r for v in named) for r in roots)
            # a graph tensor among the pieces would be part of another tensor's bytes (plan_arena: its own buffer)
            named_piece = any(al.find(u)[0] == al.find(v)[0] for v in node.inputs for u in named)
            if int(np.prod(shape[:node.op.axis])) != 1 or joined > 1 or named_piece or node.op.consts:
                copies.add(node.name)      # not a run of whole slices, graph tensors, constants: moved by DMA
                continue
            off = 0
            for v in node.inputs:
                al.link(v, node.output, off, node.name)
                off += nbytes(graph.values[v])
        elif node.op.kind == "slice":
            slices.append(node)
    # tensors no kernel writes as themselves: a shuffle's pieces are written plane by plane, so the
    # transpose's output stands for them in _view_fits
    derived = {n.output for n in graph.nodes if n.op.kind in ("reshape", "concat") and n.name not in copies} | {
        v for sh in shuffles.values() for v in sh.pieces}
    moved: set[str] = set() if views is None else {n.name for n in slices if n.name not in views}
    base = dict(al.parent)
    while True:                # after every concat, so that a view never makes a concat's pieces move
        al.parent = dict(base)
        viewed = derived | {n.output for n in slices if n.name not in moved}
        refused = next((n for n in slices if n.name not in moved
                        and not _view_fits(graph, al, n, viewed, named, views is not None)), None)
        if refused is None:
            return al, frozenset(copies | moved)
        moved.add(refused.name)     # it moves its data: its output is written, so every view is judged again


def slice_views(graph, copies: frozenset[str]) -> frozenset[str]:
    """The slices alias() made views: those not among the nodes that move data."""
    return frozenset(n.name for n in graph.nodes if n.op.kind == "slice" and n.name not in copies)


def _view_fits(graph, al: Aliases, node, derived: set[str], named: set[str], given: bool) -> bool:
    """Link the slice's output into its input if the tensors sharing bytes then stay consistent: one of
    them spans the rest (it becomes the root), the tensors kernels write (not in `derived`: views,
    reshapes, concats) do not overlap, and a graph input/output is that whole span.  `given`: the view
    was decided before (alias's `views`), so it must fit."""
    off = node.op.view_offset()
    trial = Aliases(())
    trial.parent = dict(al.parent)
    try:
        if off is None:
            raise CompileError(f"{node.name}: not one run of its input")
        trial.link(node.output, node.inputs[0], off, node.name)
    except CompileError:
        if given:
            raise
        return False
    root = trial.find(node.output)[0]
    members = trial.members(root)
    lo = min(members.values())
    hi = max(o + nbytes(graph.values[v]) for v, o in members.items())
    span = [v for v, o in members.items() if o == lo and nbytes(graph.values[v]) == hi - lo]
    written = sorted((o, o + nbytes(graph.values[v])) for v, o in members.items()
                     if v not in derived)
    io = [v for v in members if v in named]
    fits = span and all(a[1] <= b[0] for a, b in zip(written, written[1:])) and len(io) <= 1 and (
        not io or io[0] in span)
    if not fits:
        if given:
            raise CompileError(f"{node.name}: the slice was planned as a view of {node.inputs[0]} but cannot be one")
        return False
    trial.reroot(root, io[0] if io else span[0])
    al.parent = trial.parent
    return True


def nbytes(value) -> int:
    """The bytes of a graph Value."""
    return int(np.prod(value.shape)) * np.dtype(value.dtype).itemsize


@dataclass
class Storage:
    """Every tensor's slot, the named buffers and the arena plan."""

    slots: dict[str, Slot]
    named: dict[str, str]                  # graph input/output value -> buffer name
    arena_bytes: int
    naive_bytes: int                       # one buffer per intermediate tensor, no reuse


def plan_arena(graph, groups: list[Group], al: Aliases) -> Storage:
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
            if al.find(v)[1] != 0 or nbytes(graph.values[v]) != nbytes(graph.values[root]):
                raise CompileError(f"graph input/output {v} is a slice of {root}: not supported")
            root_buffer[root] = named[v]
    spans: dict[str, list[int]] = {}
    for k, g in enumerate(groups):
        for v in g.inputs + [g.output]:
            root = al.find(v)[0]
            if root not in root_buffer:
                span = spans.setdefault(root, [k, k])
                span[0], span[1] = min(span[0], k), max(span[1], k)
    bufs = {root: Buffer(root, "dm", nbytes(graph.values[root]), ARENA_ALIGN) for root in spans}
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
