"""What an import refuses, and the one message that lists it: every node that cannot run, grouped by op type.

The first line of the message is a summary that stands alone (how many nodes of which op types
cannot run, and how many other problems); then one line per op type (its count, why, and the first
few node names), then one line per problem that is not a node's (an initializer, a graph input or
output, a cycle), then the supported ops.  `nnpc` prints the message as it is: its first line after
`nnpc: error: `, the listing below it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable

SHOWN = 3        # node names shown per group; the rest are counted


@dataclass(frozen=True)
class Refusal:
    """One problem of an import: where it is, why, and the node's op type and name if it is a node's."""

    where: str            # "node 'conv1' (Conv)", "initializer 'w'", "graph output 'y'", "graph"
    why: str
    op_type: str = ""     # "" for a problem that is not a node's
    node: str = ""

    def __str__(self) -> str:
        return f"{self.where}: {self.why}"


def _names(nodes: list[str]) -> str:
    shown = ", ".join(repr(n) for n in nodes[:SHOWN])
    more = len(nodes) - SHOWN
    noun = "node" if len(nodes) == 1 else "nodes"
    return f"{noun} {shown}" + (f" and {more} more" if more > 0 else "")


def _group_line(op_type: str, rows: list[Refusal]) -> str:
    """One op type on one line: `node 'n' (Op): why` for one node, else `Op x58: why (nodes 'a', 'b', 'c' and
    55 more)`, a reason shared by several nodes once with their names, one given by one node as that node's."""
    if len(rows) == 1:
        return str(rows[0])
    by_why: dict[str, list[Refusal]] = {}
    for r in rows:
        by_why.setdefault(r.why, []).append(r)
    parts = [str(same[0]) if len(same) == 1 else f"{why} ({_names([r.node for r in same])})"
             for why, same in by_why.items()]
    return f"{op_type} x{len(rows)}: " + "; ".join(parts)


def report(problems: Iterable[Refusal], supported: Iterable[str], advice: str) -> str:
    """The refusal message: a one-line summary, one line per op type and per other problem, the supported ops."""
    problems = list(problems)
    nodes = [p for p in problems if p.op_type]
    others = [p for p in problems if not p.op_type]
    counts = Counter(p.op_type for p in nodes)
    order = sorted(counts, key=lambda t: (-counts[t], t))
    parts = []
    if nodes:
        kinds = ", ".join(f"{t} {counts[t]}" for t in order)
        parts.append(f"{len(nodes)} node{'s' if len(nodes) != 1 else ''} of {len(order)} op type"
                     f"{'s' if len(order) != 1 else ''} cannot run ({kinds})")
    if others:
        parts.append(f"{len(others)} {'other ' if nodes else ''}problem{'s' if len(others) != 1 else ''}")
    lines = [f"cannot import the ONNX model: {' and '.join(parts)}"]
    lines += [f"  {_group_line(t, [p for p in nodes if p.op_type == t])}" for t in order]
    lines += [f"  {p}" for p in others]
    lines.append(f"Supported ONNX ops: {', '.join(sorted(supported))} (docs/operators.md says what each "
                 f"takes).  {advice}")
    return "\n".join(lines)
