"""Layout planning over the graph: each kernel's DDR activation layout, and transforms where two disagree.

A pre-schedule pass over a network's kernels (network.Group), before they are lowered.
Every kernel can keep its activations in DDR as NCHW, NHWC or blocked NC/bHWb, b the NU
array's columns (lowering.layout): on chip nothing changes, only the DMA's DDR strides, so
the choice is a question of DDR bursts (docs/timing.md): a conv's input tile is a pixel's
channels at a time in NHWC (runs of C bytes, 32 when a tile takes one block), a row of a
plane at a time in NCHW (runs of a tile's width, 7 bytes in ResNet's last stage) and a
tile row of a block in blocked (the width times 32), and a 64-byte burst makes the short
runs pay for whole bursts.

The plan prices every kernel in each layout it can take with the compiler's cost model
(the same price the fusion pass and the layer table use) and the transforms the choice
would need, then settles each kernel's layout by coordinate descent on the total,
from two starts (each kernel at its cheapest alone; every kernel NCHW): move a kernel,
or the run of same-layout kernels around it, to a layout that lowers kernels +
transforms, until none does; the lower of the two ends wins.  A transform is a kernel of its own (an
int8 identity clip whose input and output layouts differ: the DMA gathers one layout
into VBUF and scatters it in the other), inserted only on a value whose stored bytes
differ from a reader's layout (a tensor of one block is the same in NHWC and blocked).  Fixed to NCHW: the graph's inputs and outputs (the model's
layout), tensors that share storage through a reshape, concat or slice view (their bytes are read
under another shape), int32 tensors (no transform kernel moves them) and the kernels
that touch them.  Tensors of fewer than three dims, or of one channel or one pixel, have one layout.  Weights never
move at run time: their layout is folded into the constants (lowering.layout).
"""
from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from ..errors import CompileError
from ..graph import Node, Value
from ..lowering.layout import LAYOUTS, canonical, layout_block, layouts_for, same_bytes
from ..ops import Conv2d, Dense, Elementwise, Op, Pool2d, clip
from .partition import Group, reordered_io

MAX_ROUNDS = 8          # coordinate-descent sweeps; each strictly lowers the total, so this only bounds time
PLANNABLE = (Conv2d, Dense, Elementwise, Pool2d)


def with_layout(ops: tuple[Op, ...], layout: str) -> tuple[Op, ...]:
    """The ops with every activation they keep in DDR (and DM, between fused parts) in `layout`."""
    return tuple(replace(op, x_layout=layout, y_layout=layout) if hasattr(op, "x_layout") else op for op in ops)


def planned(group: Group, layout: str) -> Group:
    """The kernel with its ops in `layout` (with_layout), but for the ends a transpose folded into it fixes
    (Group.in_layout, out_layout)."""
    ops = list(with_layout(group.ops, layout))
    if group.in_layout:
        ops[0] = replace(ops[0], x_layout=group.in_layout)
    if group.out_layout:
        ops[-1] = replace(ops[-1], y_layout=group.out_layout)
    return replace(group, ops=tuple(ops))


def best_price(group, price: Callable[[object], int], layouts: tuple[str, ...] = LAYOUTS) -> int:
    """The kernel's predicted cycles in the layout it does best in (fusion prices a merge by it)."""
    return min(_prices(group, layouts, price).values())


def _prices(group, layouts, price: Callable[[object], int]) -> dict[str, int]:
    """layout -> predicted cycles of the kernel in it, for the layouts it can be built in (CompileError
    from the last when none).  A blocked layout whose blocks hold every channel of every tensor the
    kernel touches stores NHWC's bytes: it takes NHWC's price without a build."""
    out, err = {}, None
    for lay in layouts:
        if "nhwc" in out and layout_block(lay) and _one_block(group.ops, layout_block(lay)):
            out[lay] = out["nhwc"]
            continue
        try:
            out[lay] = int(price(planned(group, lay)))
        except CompileError as exc:
            err = exc
    if not out:
        raise err
    return out


def _one_block(ops, block: int) -> bool:
    """Does every activation the ops read or write have at most `block` channels?"""
    return all(len(t.shape) < 3 or t.shape[1] <= block for op in ops for t in list(op.inputs) + [op.output])


def transform_op(shape: tuple[int, ...], src: str, dst: str) -> Elementwise:
    """The transform kernel's op: an int8 copy (a clip that clips nothing) from layout src to dst."""
    return replace(clip(tuple(shape), -128, 127), x_layout=src, y_layout=dst)


@dataclass
class Transform:
    """One transform inserted: `value` stored in `src` copied to `out` in `dst`, for `readers`."""

    value: str
    src: str
    dst: str
    out: str
    readers: list[str]
    cycles: int

    def line(self) -> str:
        """One line of the report."""
        who = ", ".join(self.readers)
        return f"transform {self.value}: {self.src} -> {self.dst} ({self.cycles:,} predicted cycles) for {who}"


@dataclass
class LayoutPlan:
    """Each kernel's layout, each value's stored layout, the transforms and the prices behind them."""

    kernels: dict[str, str]                       # group name -> its layout
    stored: dict[str, str]                        # value -> the layout its bytes are stored in
    prices: dict[str, dict[str, int]]             # group name -> layout -> predicted cycles
    transforms: list[Transform] = field(default_factory=list)
    fixed: dict[str, str] = field(default_factory=dict)   # group name -> why it keeps NCHW

    @property
    def total(self) -> int:
        """Predicted cycles of the kernels in their layouts plus the transforms."""
        return sum(self.prices[g][lay] for g, lay in self.kernels.items()) + sum(t.cycles for t in self.transforms)

    def lines(self) -> list[str]:
        """The report: every kernel's layout with its prices, then the transforms."""
        seen = dict.fromkeys(LAYOUTS + tuple(lay for p in self.prices.values() for lay in p))
        counts = {lay: sum(v == lay for v in self.kernels.values()) for lay in seen}
        rows = [f"layouts: {', '.join(f'{n} {lay}' for lay, n in counts.items())} kernels, "
                f"{len(self.transforms)} transforms, {self.total:,} predicted cycles"]
        for g, lay in self.kernels.items():
            priced = ", ".join(f"{k} {v:,}" for k, v in self.prices[g].items())
            why = f" (fixed: {self.fixed[g]})" if g in self.fixed else ""
            rows.append(f"  {g}: {lay} [{priced}]{why}")
        rows += [f"  {t.line()}" for t in self.transforms]
        return rows

    def as_meta(self) -> dict:
        """The plan as JSON-able data (the network binary's description carries it)."""
        return {"kernels": dict(self.kernels), "prices": {g: dict(p) for g, p in self.prices.items()},
                "fixed": dict(self.fixed), "stored": dict(self.stored), "lines": self.lines(),
                "transforms": [vars(t) | {"readers": list(t.readers)} for t in self.transforms]}


def _activation(graph, v: str) -> bool:
    """Does v have a layout at all (three dims or more, neither the channels nor the plane of size 1:
    NCHW and NHWC are then the same bytes)?"""
    shape = graph.values[v].shape
    return len(shape) >= 3 and shape[1] > 1 and math.prod(shape[2:]) > 1


def pinned_values(graph, al) -> dict[str, str]:
    """Values kept NCHW whatever their kernels choose, with why."""
    out = {}
    for v in list(graph.inputs) + list(graph.outputs):
        out[v] = "graph input/output"
    members: dict[str, list[str]] = {}
    for v in graph.values:
        members.setdefault(al.find(v)[0], []).append(v)
    for vs in members.values():
        if len(vs) > 1:
            for v in vs:
                out.setdefault(v, "shares storage through a reshape, concat or slice view")
    for v, value in graph.values.items():
        if value.dtype != "int8":
            out.setdefault(v, f"{value.dtype}")
    return {v: why for v, why in out.items() if _activation(graph, v)}


def candidates(graph, group, pinned: dict[str, str], block: int = 32) -> tuple[tuple[str, ...], str]:
    """The layouts a kernel may take (blocked in blocks of `block`) and, if only NCHW, why."""
    if not all(isinstance(op, PLANNABLE) for op in group.ops):
        kinds = ", ".join(sorted({op.kind for op in group.ops if not isinstance(op, PLANNABLE)}))
        return ("nchw",), f"runs {kinds}"
    for v in group.inputs + [group.output]:
        if v in pinned and graph.values[v].dtype != "int8":
            return ("nchw",), f"{v} is {pinned[v]}"
    if group.in_layout or group.out_layout:
        return ("nchw",), (f"an end fixed by what it holds (reads {group.in_layout or 'the plan'}'s bytes, writes "
                           f"{group.out_layout or 'the plan'}'s): a transpose folded in, or a channel shuffle's piece")
    if reordered_io(graph, group):
        return ("nchw",), f"writes {group.output} under the shape {tuple(group.ops[-1].output.shape)}"
    return layouts_for(block), ""


def _stored(graph, groups, choice: dict[str, str], pinned) -> dict[str, str]:
    stored = {v: "nchw" for v in graph.values if _activation(graph, v)}
    for g in groups:
        if g.output in stored and g.output not in pinned:
            stored[g.output] = choice[g.name]
    return stored


def _needed(graph, groups, choice: dict[str, str], pinned) -> dict[tuple[str, str, str], list[str]]:
    """(value, stored layout, wanted layout) -> the readers (kernel names; 'graph output') of each transform."""
    stored = _stored(graph, groups, choice, pinned)
    need: dict[tuple[str, str, str], list[str]] = {}
    for g in groups:
        lay = choice[g.name]
        for v in dict.fromkeys(g.inputs):
            if v in stored and not same_bytes(graph.values[v].shape, stored[v], lay):
                need.setdefault((v, stored[v], lay), []).append(g.name)
        v = g.output
        if v in pinned and not same_bytes(graph.values[v].shape, lay, "nchw"):
            # the kernel writes its own layout; the value must be NCHW
            need.setdefault((v, lay, "nchw"), []).append(f"{pinned[v]}")
    return need


def plan_layouts(graph, groups: list, al, price: Callable[[object], int], block: int = 32) -> LayoutPlan:
    """Each kernel's DDR activation layout and the transforms it needs, by the cost model.

    price(group) gives the predicted cycles of a kernel (network.Group) alone; `block` is the
    channels per block of the blocked layout (the NU array's columns).
    """
    pinned = pinned_values(graph, al)
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise CompileError("layout planning needs unique kernel names")
    prices, fixed, allowed = {}, {}, {}
    for g in groups:
        lays, why = candidates(graph, g, pinned, block)
        allowed[g.name] = lays
        if why:
            fixed[g.name] = why
        prices[g.name] = _prices(g, lays, price)
        allowed[g.name] = tuple(prices[g.name])
    moves: dict[tuple, int] = {}

    def move_cost(v: str, src: str, dst: str) -> int:
        shape = tuple(graph.values[v].shape)
        key = (shape, canonical(shape, src), canonical(shape, dst))     # one price per pair of byte orders
        src, dst = key[1:]
        if key not in moves:
            moves[key] = int(price(_transform_group("price", v, "price", graph, src, dst)))
        return moves[key]

    def total(choice: dict[str, str]) -> int:
        kernels = sum(prices[n][choice[n]] for n in names)
        return kernels + sum(move_cost(v, s, d) for v, s, d in _needed(graph, groups, choice, pinned))

    near = _neighbours(groups, pinned)

    def descend(choice: dict[str, str]) -> tuple[dict[str, str], int]:
        best = total(choice)
        for _ in range(MAX_ROUNDS):
            improved = False
            for n in names:
                for lay in allowed[n]:
                    if lay == choice[n]:
                        continue
                    # the kernel alone, then with the run of kernels around it that share its layout (a
                    # chain may only pay as a whole: one kernel moved alone costs two transforms)
                    for moved in ([n], _run(n, choice, near)):
                        trial = dict(choice, **{m: lay for m in moved if lay in allowed[m]})
                        t = total(trial)
                        if t < best:
                            choice, best, improved = trial, t, True
                            break
            if not improved:
                break
        return choice, best

    # two starts: each kernel at its cheapest alone, and every kernel in the model's layout (no
    # transform at all); the lower total wins, the model's layout on a tie
    starts = [{n: "nchw" if "nchw" in prices[n] else next(iter(prices[n])) for n in names},
              {n: min(prices[n], key=prices[n].get) for n in names}]
    choice, _ = min((descend(c) for c in starts), key=lambda cb: cb[1])
    stored = _stored(graph, groups, choice, pinned)
    transforms = [Transform(v, s, d, _moved_name(graph, v, d) if d != "nchw" or v not in pinned else v,
                            readers, move_cost(v, s, d))
                  for (v, s, d), readers in _needed(graph, groups, choice, pinned).items()]
    return LayoutPlan(dict(choice), stored, prices, transforms, fixed)


def _neighbours(groups, pinned) -> dict[str, set[str]]:
    """Kernel -> the kernels it shares an unpinned value with (writer and readers)."""
    touch: dict[str, set[str]] = {}
    for g in groups:
        for v in g.inputs + [g.output]:
            if v not in pinned:
                touch.setdefault(v, set()).add(g.name)
    near: dict[str, set[str]] = {g.name: set() for g in groups}
    for names in touch.values():
        for n in names:
            near[n] |= names - {n}
    return near


def _run(n: str, choice: dict[str, str], near: dict[str, set[str]]) -> list[str]:
    """n and every kernel reachable from it through kernels in n's layout."""
    seen, todo = {n}, [n]
    while todo:
        for m in near[todo.pop()]:
            if m not in seen and choice[m] == choice[n]:
                seen.add(m)
                todo.append(m)
    return sorted(seen)


def _moved_name(graph, v: str, layout: str) -> str:
    base = f"{v}.{layout}"
    name, k = base, 1
    while name in graph.values:
        k += 1
        name = f"{base}{k}"
    return name


def _transform_group(name: str, v: str, out: str, graph, src: str, dst: str):
    op = transform_op(graph.values[v].shape, src, dst)
    return Group(name, [Node(name, op, (v,), out)], (op,), [v], out)


def apply(graph, groups: list, plan: LayoutPlan) -> tuple[object, list]:
    """(graph with the transforms' values added, the kernels in their layouts with the transforms
    placed right after the kernel that writes what they move, or first for a graph input).

    The graph itself is not changed: a shallow copy gains the new values.
    """
    g2 = copy.copy(graph)
    g2.values = dict(graph.values)
    out = [planned(g, plan.kernels[g.name]) for g in groups]
    by_name = {g.name: k for k, g in enumerate(out)}
    after: dict[int, list] = {}
    for t in plan.transforms:
        value = graph.values[t.value]
        if t.out == t.value:            # a pinned value: its writer stores to a new value, moved back to NCHW
            tmp = _moved_name(g2, t.value, t.src)
            g2.values[tmp] = Value(tmp, value.shape, value.dtype, value.quant)
            k = next(k for k, g in enumerate(groups) if g.output == t.value)
            out[k] = replace(out[k], output=tmp)
            tg = _transform_group(f"layout.{t.value}.{t.src}_to_{t.dst}", tmp, t.value, g2, t.src, t.dst)
        else:
            g2.values[t.out] = Value(t.out, value.shape, value.dtype, value.quant)
            for r in t.readers:
                k = by_name[r]
                out[k] = replace(out[k], inputs=[t.out if v == t.value else v for v in out[k].inputs])
            k = next((k for k, g in enumerate(groups) if g.output == t.value), -1)
            tg = _transform_group(f"layout.{t.value}.{t.src}_to_{t.dst}", t.value, t.out, g2, t.src, t.dst)
        after.setdefault(k, []).append(tg)
    ordered = list(after.get(-1, []))
    for k, g in enumerate(out):
        ordered.append(g)
        ordered += after.get(k, [])
    return g2, ordered
