"""A graph's nodes grouped into kernels: each conv2d / dense takes the relu / clip after it and one
residual add (then relu / clip), then luts (and relu / clip), as build() fuses a chain; a lut takes the
luts and relu / clip after it; or one kernel per node (fuse=False).

A lut L of the kernel's output x whose only reader is a mul of x by L(x) (SiLU as x * sigmoid(x),
HardSwish as x * hardsigmoid(x): the two readers of x) is taken with that mul as one lut
(ops.times_self): the product is a function of the int8 x alone, so neither x nor L(x) goes to DDR."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import CompileError
from ..ops import Conv2d, Dense, Elementwise, Lut, Op, clip, times_self

LAYOUT_KINDS = ("reshape", "concat")


@dataclass
class Group:
    """One kernel of the network: graph nodes fused into a chain of ops."""

    name: str
    nodes: list
    ops: tuple[Op, ...]
    inputs: list[str]          # graph values bound to the kernel's inputs (x, then b ...)
    output: str                # the graph value the kernel writes
    parts: list = field(default_factory=list)    # the kernels a fused kernel was merged from


def consumers(graph) -> dict[str, list]:
    """The nodes reading each value of the graph."""
    out: dict[str, list] = {name: [] for name in graph.values}
    for node in graph.nodes:
        for v in node.inputs:
            out[v].append(node)
    return out


def _is_clip(op) -> bool:
    return isinstance(op, Elementwise) and op.mode == "clip"


def _is_lut(op) -> bool:
    return isinstance(op, Lut)


def _as_first_input(add: Elementwise, position: int) -> Elementwise | None:
    """The add with its operands swapped when the chain value is its second input (None: cannot be).

    The integer add is symmetric; onnxruntime's float add rounds a and b differently, so its
    operands stay where they are (the add then runs as a kernel of its own, as a broadcasting one does).
    """
    if add.b_shape is not None or add.reverse:   # a broadcast b, or b in the A role: no residual, a kernel of its own
        return None
    if position == 0:
        return add
    if add.is_float:
        return None
    return replace(add, za=add.zb, zb=add.za, ma=add.mb, mb=add.ma)


def _self_product(users: list, users_of: dict, cur: str, outputs: set, taken: set) -> tuple | None:
    """(lut node, mul node, the two as one lut) when cur's two readers are a lut L of cur and a same-shape
    mul of cur by L(cur) that alone reads L(cur); else None."""
    if len(users) != 2 or any(id(u) in taken for u in users):
        return None
    act, mul = users if _is_lut(users[0].op) else users[::-1]
    if not (_is_lut(act.op) and act.inputs == (cur,) and act.output not in outputs
            and users_of[act.output] == [mul] and isinstance(mul.op, Elementwise) and mul.op.mode == "mul"
            and mul.op.b_shape is None and mul.op.b_const is None and set(mul.inputs) == {cur, act.output}):
        return None
    return act, mul, times_self(act.op, mul.op, act_first=mul.inputs[0] == act.output)


def partition(graph, copies: frozenset[str] = frozenset()) -> list[Group]:
    """Fuse the graph's nodes into kernels, in an order where every kernel's inputs already exist.

    `copies` names reshapes that must move their data (alias() says which): each is a kernel
    of its own, an int8 copy through the VU.
    """
    users_of = consumers(graph)
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
                users = users_of[cur]
                both = None if cur in outputs or not (head_nu or _is_lut(node.op)) else _self_product(
                    users, users_of, cur, outputs, taken)
                if both is not None:            # x * lut(x): one lut, which ends the residual part too
                    members += both[:2]
                    ops.append(both[2])
                    added = True
                    continue
                if cur in outputs or len(users) != 1 or id(users[0]) in taken:
                    break
                nxt = users[0]
                if _is_clip(nxt.op) or (_is_lut(nxt.op) and (head_nu or _is_lut(node.op))):
                    members.append(nxt)         # a lut ends the residual part: no add after it
                    ops.append(nxt.op)
                    added |= _is_lut(nxt.op)
                elif (head_nu and not added and isinstance(nxt.op, Elementwise) and nxt.op.mode == "add"
                      and len(nxt.inputs) == 2 and nxt.inputs[0] != nxt.inputs[1]   # not a constant b
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



def _copy_op(graph, node) -> Op:
    """An int8 copy of a reshape's input to its output (a clip that clips nothing); a concat that cannot
    alias its inputs is its own kernel (lowering.movement)."""
    if node.op.kind == "concat":
        return node.op
    if graph.values[node.output].dtype != "int8":
        raise CompileError(f"{node.name}: a reshape between two graph inputs/outputs of "
                           f"{graph.values[node.output].dtype} needs a copy, which only int8 has")
    return clip(graph.values[node.output].shape, -128, 127)
