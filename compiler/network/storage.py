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
from .partition import Group

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


def alias(graph) -> tuple[Aliases, frozenset[str]]:
    """Reshapes share their input's bytes; a concat's inputs are consecutive slices of its output.

    A reshape that would make two graph inputs/outputs share bytes copies instead, and a concat
    whose inputs are not whole slices of its output (an axis after one of size > 1) moves them
    by DMA (lowering.movement), as does one that would make two graph inputs/outputs share bytes
    or one with constant pieces (the kernel writes them at every run):
    their names are in the returned set.
    """
    al = Aliases(graph.values)
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
            roots = {al.find(v)[0] for v in (*node.inputs, node.output)}
            joined = sum(any(al.find(v)[0] == r for v in named) for r in roots)
            if int(np.prod(shape[:node.op.axis])) != 1 or joined > 1 or node.op.consts:
                copies.add(node.name)      # not a run of whole slices, two graph tensors, constants: moved by DMA
                continue
            off = 0
            for v in node.inputs:
                al.link(v, node.output, off, node.name)
                off += nbytes(graph.values[v])
    return al, frozenset(copies)


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
