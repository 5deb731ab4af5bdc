"""Fusion over the graph: kernels that hold several anchors (convolutions, dense, pooling), decided by cost.

network.partition gives every anchor its epilogue (relu / clip, one residual add, then luts).
This pass then looks at the kernels whose output feeds exactly one other kernel,
as that kernel's first input (a chain: conv -> conv, conv -> pool, a ResNet
bottleneck conv1 -> conv2 -> conv3 + shortcut add, a MobileNet inverted residual
expand -> depthwise -> project + add).  Walking each chain, it prices the kernel
so far extended by the next one against the two apart, with the compiler's cost
model (cost.schedule_cycles of each best schedule, the same prices the layer table
reports), and extends it only when the fused kernel is predicted faster.  Inside a
fused kernel the intermediates stay on chip in DM (lowering.driver); a chain whose
intermediate would not fit half of DM is fused only if it can recompute its halos
instead (lowering.ring: the intermediate is a ring of row bands, far smaller), and
its kernel then prefers a ring to a DDR scratch buffer (interleave.choose).  Every decision is recorded
with its predicted gain (library.Decision; `nnpc compile --report` prints them).

build(graph, fuse=False) skips the pass and the epilogues too: one kernel per node
(network.per_node).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from ..errors import CompileError
from ..library import Decision
from ..ops import Conv2d, Dense, Elementwise, Pool2d
from .partition import Group, reordered_io

MAX_ANCHORS = 4     # anchors in one fused kernel: a bottleneck or inverted residual has three
CHAINABLE = (Conv2d, Dense, Elementwise, Pool2d)


def links(graph, groups: list) -> dict[int, int]:
    """k -> j where kernel k's output feeds kernel j alone, as its first input and nowhere else."""
    users: dict[str, list[int]] = {}
    for j, g in enumerate(groups):
        for v in g.inputs:
            users.setdefault(v, []).append(j)
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for v in node.inputs:
            readers[v] = readers.get(v, 0) + 1
    out = {}
    outputs = set(graph.outputs)
    for k, g in enumerate(groups):
        v = g.output
        js = users.get(v, [])
        if v in outputs or len(js) != 1 or readers.get(v, 0) != 1:
            continue
        j = js[0]
        h = groups[j]
        if h.inputs[0] != v or v in h.inputs[1:]:
            continue
        # a fused kernel may end by writing pitched (a shuffle's piece): no other reordered end inside one
        if not all(isinstance(op, CHAINABLE) for op in g.ops + h.ops) or reordered_io(graph, g) or h.in_layout or (
                reordered_io(graph, replace(h, out_layout=""))):
            continue
        out[k] = j
    return out


def chains(graph, groups: list) -> list[list[int]]:
    """Maximal runs of linked kernels (indices into groups), each of two or more."""
    nxt = links(graph, groups)
    heads = set(nxt) - set(nxt.values())
    out = []
    for k in sorted(heads):
        run = [k]
        while run[-1] in nxt:
            run.append(nxt[run[-1]])
        out.append(run)
    return out


def anchors(ops) -> int:
    """Convolutions, dense and pooling ops in a chain."""
    return sum(isinstance(op, (Conv2d, Dense, Pool2d)) for op in ops)


def merged(parts: list[Group]) -> Group:
    """One kernel of several linked kernels: their ops in order, the first's inputs then the others' second ones."""
    return replace(parts[0], nodes=[n for g in parts for n in g.nodes], ops=tuple(op for g in parts for op in g.ops),
                   inputs=list(parts[0].inputs) + [v for g in parts[1:] for v in g.inputs[1:]],
                   output=parts[-1].output, parts=list(parts), out_layout=parts[-1].out_layout)


def ring_bytes(parts: list) -> int | None:
    """DM the chain's intermediates take as the smallest rings (two bands of one output row's window:
    lowering.ring), or None when the chain cannot recompute its halos (a kernel not a conv, a batch
    above 1, a residual add before the last)."""
    heads = [g.ops[0] for g in parts]
    if not all(isinstance(h, Conv2d) and h.x_shape[0] == 1 for h in heads) or any(
            isinstance(o, Elementwise) and o.is_add for g in parts[:-1] for o in g.ops):
        return None
    total = 0
    for g, h in zip(parts, heads[1:]):
        _, c, _, w = g.ops[-1].output.shape
        total += 2 * ((h.weight.shape[2] - 1) * h.dilation[0] + 1) * c * w
    return total


def too_big_intermediate(parts: list, dm_bytes: int) -> str:
    """Why the chain's intermediates cannot all stay in DM ('' if they can, whole or as rings of bands
    whose halos are recomputed: lowering.ring)."""
    for g in parts[:-1]:
        t = g.ops[-1].output
        if t.nbytes > dm_bytes // 2:
            ring = ring_bytes(parts)
            if ring is not None and ring <= dm_bytes // 2:
                return ""
            return (f"intermediate {g.output} ({t.nbytes:,} bytes) does not fit half of DM ({dm_bytes // 2:,})"
                    + ("" if ring is None else f", nor as the smallest rings ({ring:,} bytes)"))
    return ""


def _try(parts: list, price: Callable, dm_bytes: int) -> tuple[int | None, str]:
    """(predicted cycles of the parts fused, or None; why not)."""
    why = too_big_intermediate(parts, dm_bytes)
    if not why and anchors([o for g in parts for o in g.ops]) > MAX_ANCHORS:
        why = f"more than {MAX_ANCHORS} anchors"
    if why:
        return None, why
    try:
        return int(price(merged(parts))), ""
    except CompileError as exc:
        return None, f"cannot be built: {exc}"


def _ops(parts: list) -> str:
    return " -> ".join("+".join(o.kind for o in g.ops) for g in parts)


def fuse(graph, groups: list, price: Callable, dm_bytes: int) -> tuple[list, list[Decision]]:
    """The kernels with every chain fused where the cost model says it pays; the decisions made.

    price(group) gives the predicted cycles of a kernel alone, or raises CompileError.  When
    extending a kernel of several by the next one does not pay, its last kernel may be handed
    over instead: fused with the next one, if the kernel without it plus that pair price lower
    than the kernel plus the next one alone (MobileNetV2's expand conv whose 1.2 MB output only
    a ring fits belongs with the depthwise conv after it, not the project conv before it).
    """
    fused_at: dict[int, list[int]] = {}
    decisions: list[Decision] = []
    for run in chains(graph, groups):
        cur, sofar = [run[0]], [price(groups[run[0]])]     # sofar[m]: cycles of cur[:m + 1] fused
        for j in run[1:]:
            parts = [groups[i] for i in cur + [j]]
            alone = price(groups[j])
            apart = sofar[-1] + alone
            cycles, why = _try(parts, price, dm_bytes)
            ok = cycles is not None and cycles < apart
            decisions.append(Decision([g.name for g in parts], _ops(parts), int(apart), cycles, ok, why))
            if ok:
                cur, sofar = cur + [j], sofar + [cycles]
                continue
            if len(cur) > 1:
                pair = [groups[cur[-1]], groups[j]]
                pair_cycles, why = _try(pair, price, dm_bytes)
                if pair_cycles is not None:
                    handed = sofar[-2] + pair_cycles
                    ok = handed < apart
                    decisions.append(Decision([g.name for g in pair], _ops(pair), int(apart), int(handed), ok,
                                              f"{pair[0].name} handed over from {groups[cur[0]].name}'s kernel: "
                                              "both kernels' cycles"))
                    if ok:
                        if len(cur) > 2:
                            fused_at[cur[-2]] = cur[:-1]
                        cur, sofar = [cur[-1], j], [price(pair[0]), pair_cycles]
                        continue
                fused_at[cur[-1]] = cur
            cur, sofar = [j], [alone]
        if len(cur) > 1:
            fused_at[cur[-1]] = cur
    inside = {i for run in fused_at.values() for i in run}
    out = []
    for k, g in enumerate(groups):
        if k in fused_at:
            out.append(merged([groups[i] for i in fused_at[k]]))
        elif k not in inside:
            out.append(g)
    return out, decisions
