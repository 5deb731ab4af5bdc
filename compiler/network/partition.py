"""A graph's nodes grouped into kernels: each conv2d / dense takes the relu / clip after it and one
residual add (then relu / clip), then luts (and relu / clip), as build() fuses a chain; a lut takes the
luts and relu / clip after it; a per-tensor requantize after those is one more lut (QLinearConcat's of its
inputs); or one kernel per node (fuse=False).

An island of per-tensor elementwise ops of one int8 value x (ops.unary.per_tensor: each reads x or the
island's own results, with scalar constants at most) whose results but the last are read by the island
alone is one lut (ops.unary.composed): SiLU as x * sigmoid(x), HardSwish as x * hardsigmoid(x), GELU as
QOperator's chain of QLinear ops (x * 0.5 * (1 + erf(x / sqrt 2))).  The island's result is a function of the
int8 x alone, so nothing between x and it goes to DDR: after a conv, dense or lut whose every reader is in it,
the island is the kernel's epilogue; else it starts a kernel of its own.  The island may be of a reshape that
is the kernel's result's one reader (_reshaped: ConvNeXt's GELU of a dense's output).

A transpose between NCHW and NHWC (LAYOUT_TRANSPOSES) next to a kernel is a layout of that kernel's DDR bytes,
not a kernel: it folds into the kernel whose result it alone reads, which then writes NHWC, or into the conv or
pool that alone reads it, which then reads NHWC (Group.in_layout, out_layout).  A channel shuffle whose two
pieces end kernels (channel_shuffles) is no kernel either: each piece's kernel writes it pitched into the
shuffled tensor.  A transpose or slice that moves data and is read, through reshapes, by another alone is one
kernel with it, their index maps composed (_moves, ops.compose: ViT's slices of qkv and the transposes to heads);
an island or a per-tensor op that alone reads such a copy's result is a lut on the copy's tiles (_then_lut: ViT's
q and k times their scale)."""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import CompileError
from ..lowering.layout import pitched_layout
from ..lowering.movement import takes_lut
from ..ops import Conv2d, Dense, Elementwise, Lut, Op, Pool2d, clip, compose
from ..ops.unary import composed, per_tensor

LAYOUT_KINDS = ("reshape", "concat", "slice")       # kinds that may move no data (storage.alias)


@dataclass
class Group:
    """One kernel of the network: graph nodes fused into a chain of ops."""

    name: str
    nodes: list
    ops: tuple[Op, ...]
    inputs: list[str]          # graph values bound to the kernel's inputs (x, then b ...)
    output: str                # the graph value the kernel writes
    parts: list = field(default_factory=list)    # the kernels a fused kernel was merged from
    # a transpose folded in (_transposed), or a channel shuffle's piece (PIECE_LAYOUT): the layout its first op
    # reads x in / its last op writes in, whatever the layout plan chooses ('': the plan's)
    in_layout: str = ""
    out_layout: str = ""


LAYOUT_TRANSPOSES = {(0, 2, 3, 1): "out", (0, 3, 1, 2): "in"}
"""The 4-d transposes that are a layout: NCHW -> NHWC writes NHWC bytes of its input, NHWC -> NCHW reads
its output's NHWC bytes from its input's NCHW ones (ConvNeXt's around its LayerNorm)."""
FOLDS_INTO = (Conv2d, Pool2d, Elementwise)       # last ops that write a 4-d activation in NHWC (layout_plan)
READS_FOLDED = (Conv2d, Pool2d)                  # first ops that read one so: they always head a kernel


def reordered_io(graph, group: Group) -> bool:
    """Does the kernel read or write a value under another shape or order than its op's: an epilogue island
    read through a reshape (_reshaped: the value's bytes are the last op's in NCHW order), or a transpose folded
    in (in_layout, out_layout)?  The layout plan then keeps it NCHW, and fusion does not chain it."""
    return bool(group.in_layout or group.out_layout) or (
        tuple(group.ops[-1].output.shape) != tuple(graph.values[group.output].shape))


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

    The integer add and onnxruntime's float Add (qdq_add: fa + fb, one rounding) are symmetric;
    QLinearAdd rounds a and b differently, so its operands stay where they are (the add then runs as a
    kernel of its own, as a broadcasting one does).
    """
    if add.b_shape is not None or add.reverse:   # a broadcast b, or b in the A role: no residual, a kernel of its own
        return None
    if position == 0:
        return add
    if add.mode == "qdq_add":
        sa, sb, sy = add.fscales
        return replace(add, za=add.zb, zb=add.za, fscales=(sb, sa, sy))
    if add.is_float:
        return None
    return replace(add, za=add.zb, zb=add.za, ma=add.mb, mb=add.ma)


@dataclass
class _Walk:
    """What partition knows while it walks the graph: readers, graph outputs, nodes taken, graph order."""

    graph: object
    users_of: dict
    outputs: set
    taken: set
    order: dict
    copies: frozenset = frozenset()
    made_by: dict = field(default_factory=dict)


def _island(w: _Walk, root: str, shape: tuple[int, ...] | None = None) -> tuple[list, Lut] | None:
    """(the island's nodes in graph order, its lut) for the largest island of root (module docstring) of two
    nodes or more that holds a binary op or a requantize (luts and clips alone a chain fuses as it is; one op
    alone stays the op it is); else None.  `shape`: the lut's (default root's; a kernel that writes root's
    bytes under another shape)."""
    value = w.graph.values[root]
    if value.dtype != "int8":
        return None
    inside, found, grew = {root}, [], True
    while grew:
        grew = False
        for v in list(inside):
            for u in w.users_of[v]:
                if (id(u) not in w.taken and all(f is not u for f in found) and per_tensor(u.op)
                        and tuple(u.op.shape) == tuple(value.shape) and w.graph.values[u.output].dtype == "int8"
                        and all(i in inside for i in u.inputs)):
                    found.append(u)
                    inside.add(u.output)
                    grew = True
    found.sort(key=lambda n: w.order[id(n)])
    best = max((_ancestors(found, sink) for sink in found if _closed(w, _ancestors(found, sink), sink)),
               key=len, default=[])
    if len(best) < 2 or not any(n.op.binary or n.op.mode == "requantize" for n in best):
        return None
    at = {root: 0, **{n.output: k + 1 for k, n in enumerate(best)}}
    return best, composed([(n.op, tuple(at[i] for i in n.inputs)) for n in best], shape or value.shape)


def _ancestors(found: list, sink) -> list:
    """The nodes of `found` the sink's result depends on, the sink included, in graph order."""
    made = {n.output: n for n in found}
    keep, todo = {id(sink)}, [sink]
    while todo:
        for i in todo.pop().inputs:
            if i in made and id(made[i]) not in keep:
                keep.add(id(made[i]))
                todo.append(made[i])
    return [n for n in found if id(n) in keep]


def _closed(w: _Walk, nodes: list, sink) -> bool:
    """Does nothing outside `nodes` read their results but the sink's (and no graph output is among them)?"""
    ids = {id(n) for n in nodes}
    return all(n is sink or (n.output not in w.outputs and all(id(u) in ids for u in w.users_of[n.output]))
               for n in nodes)


def _epilogue_island(w: _Walk, cur: str) -> tuple[list, Lut] | None:
    """The island of a kernel's result cur when it reads all of cur (cur then stays on chip), or of the
    reshape of cur that is cur's one reader (_reshaped): the lut then keeps cur's shape, and the kernel
    writes the island's result in the bytes the reshape gives it."""
    through = _reshaped(w, cur)
    root = through[0].output if through else cur
    isl = None if cur in w.outputs or root in w.outputs else _island(w, root, w.graph.values[cur].shape)
    if isl is None or not all(any(u is n for n in isl[0]) for u in w.users_of[root]):
        return None
    return through + isl[0], isl[1]


def _reshaped(w: _Walk, cur: str) -> list:
    """[the reshape] when cur's one reader is a reshape that moves no data (not a copy), else []: an
    elementwise function of each byte is the same function under either shape (a dense's [N*H*W, C] output
    read as [N, H, W, C] by ConvNeXt's GELU)."""
    users = w.users_of[cur]
    if len(users) != 1 or users[0].op.kind != "reshape" or users[0].name in w.copies or id(users[0]) in w.taken:
        return []
    return [users[0]]


def _extend(w: _Walk, members: list, ops: list, inputs: list) -> None:
    """Grow a kernel headed by a conv2d, dense or elementwise op along its chain (module docstring)."""
    head = ops[0]
    added = isinstance(head, Elementwise) and head.mode != "clip"
    head_nu = isinstance(head, (Conv2d, Dense))
    while True:
        cur = members[-1].output
        isl = _epilogue_island(w, cur) if head_nu or _is_lut(head) else None
        if isl is not None:             # one lut, which ends the residual part too
            members += isl[0]
            ops.append(isl[1])
            added = True
            if tuple(isl[1].output.shape) != tuple(w.graph.values[members[-1].output].shape):
                return                  # written under the reshape's shape: an op after it has another shape
            continue
        users = w.users_of[cur]
        if cur in w.outputs or len(users) != 1 or id(users[0]) in w.taken:
            return
        nxt = users[0]
        if _is_clip(nxt.op) or (_is_lut(nxt.op) and (head_nu or _is_lut(head))):
            members.append(nxt)         # a lut ends the residual part: no add after it
            ops.append(nxt.op)
            added |= _is_lut(nxt.op)
        elif (head_nu or _is_lut(head)) and _lone_requantize(w, nxt, ops[-1]):
            members.append(nxt)         # QLinearConcat's requantize of its input: a table in the epilogue
            ops.append(composed([(nxt.op, (0,))], ops[-1].output.shape))
            added = True
        elif (head_nu and not added and isinstance(nxt.op, Elementwise) and nxt.op.is_add
              and len(nxt.inputs) == 2 and nxt.inputs[0] != nxt.inputs[1]   # not a constant b
              and _as_first_input(nxt.op, nxt.inputs.index(cur)) is not None):
            pos = nxt.inputs.index(cur)
            members.append(nxt)
            ops.append(_as_first_input(nxt.op, pos))
            inputs.append(nxt.inputs[1 - pos])
            added = True
        else:
            return


SHUFFLE_PERM = (0, 2, 1, 3, 4)


@dataclass(frozen=True)
class Shuffle:
    """ShuffleNetV2's channel shuffle of two pieces: Concat(a, b) on channels, Reshape [N, 2, C, H, W],
    Transpose SHUFFLE_PERM, Reshape [N, 2C, H, W].  Channel i of piece g is plane 2i + g of the transpose's
    output: each piece's kernel writes it there (PIECE_LAYOUT), and no node between moves data."""

    transpose: str
    concat: str
    pieces: tuple[str, str]
    out: str                   # the transpose's output, whose bytes the pieces are
    plane: int                 # bytes of one channel plane (H * W)


PIECE_LAYOUT = pitched_layout(2)


def channel_shuffles(graph) -> dict[str, Shuffle]:
    """Transpose node name -> its Shuffle, for each channel shuffle whose two pieces are results of ops that
    end a kernel and can write them pitched (FOLDS_INTO), read by the concat alone, no graph input or output
    among the values."""
    made = {n.output: n for n in graph.nodes}
    users = consumers(graph)
    io = set(graph.inputs) | set(graph.outputs)
    out = {}
    for t in graph.nodes:
        if t.op.kind != "transpose" or tuple(t.op.perm) != SHUFFLE_PERM or t.inputs[0] not in made:
            continue
        r1 = made[t.inputs[0]]
        cat = made.get(r1.inputs[0]) if r1.op.kind == "reshape" else None
        if cat is None or cat.op.kind != "concat" or cat.op.axis != 1 or len(cat.inputs) != 2 or cat.op.consts:
            continue
        shape = graph.values[cat.inputs[0]].shape
        pieces = tuple(cat.inputs)
        chain = [*pieces, cat.output, r1.output, t.output]
        if (len(shape) != 4 or not all(type(d) is int for d in shape) or shape[0] != 1
                or tuple(graph.values[cat.inputs[1]].shape) != tuple(shape) or pieces[0] == pieces[1]
                or tuple(graph.values[r1.output].shape) != (1, 2, *shape[1:])
                or any(v in io or graph.values[v].dtype != "int8" for v in chain)
                or any(len(users[v]) != 1 for v in chain)
                or not all(v in made and isinstance(made[v].op, FOLDS_INTO) for v in pieces)):
            continue
        out[t.name] = Shuffle(t.name, cat.name, pieces, t.output, shape[2] * shape[3])
    return out


def _shuffles(graph) -> tuple[dict[str, Shuffle], set[str]]:
    """The graph's channel shuffles and the values their kernels write pitched (their pieces)."""
    shuffles = channel_shuffles(graph)
    return shuffles, {v for sh in shuffles.values() for v in sh.pieces}


def _side(node) -> str | None:
    """Which end of a kernel a node folds into as a layout ("in", "out"), if it is a LAYOUT_TRANSPOSES one."""
    return LAYOUT_TRANSPOSES.get(tuple(node.op.perm)) if node.op.kind == "transpose" else None


def _transposed(w: _Walk, t, reader=None) -> bool:
    """Does transpose node t fold into a kernel as a layout (LAYOUT_TRANSPOSES): "out", into the kernel whose
    result it alone reads, or "in", into `reader`, the node that alone reads its result, as its x?"""
    side = _side(t)
    if side is None or t.name in w.copies or w.graph.values[t.output].dtype != "int8":
        return False
    if side == "out":
        return reader is None and t.inputs[0] not in w.outputs and len(w.users_of[t.inputs[0]]) == 1
    users = w.users_of[t.output]
    if reader is None:
        reader = users[0] if len(users) == 1 else None
    return (reader is not None and t.output not in w.outputs and len(users) == 1 and users[0] is reader
            and isinstance(reader.op, READS_FOLDED)
            and reader.inputs[0] == t.output and t.output not in reader.inputs[1:])


def _fold_out(w: _Walk, members: list, ops: list) -> str:
    """"nhwc" when the kernel's result is read by a transpose alone that folds into it ("out"): members and ops
    then end with it and a last op that writes NHWC; else ''."""
    users = w.users_of[members[-1].output]
    if (len(users) != 1 or id(users[0]) in w.taken or not isinstance(ops[-1], FOLDS_INTO)
            or len(ops[-1].output.shape) != 4 or _side(users[0]) != "out" or not _transposed(w, users[0])):
        return ""
    members.append(users[0])
    ops[-1] = replace(ops[-1], y_layout="nhwc")
    return "nhwc"


def _fold_in(w: _Walk, node, members: list, ops: list, inputs: list) -> str:
    """"nhwc" when node's x is the result of a transpose that folds into it ("in"): the kernel then reads
    the transpose's input in NHWC instead; else ''."""
    t = w.made_by.get(node.inputs[0])
    if t is None or id(t) in w.taken or not _transposed(w, t, node) or members[0] is not node:
        return ""
    members.insert(0, t)
    ops[0] = replace(ops[0], x_layout="nhwc")
    inputs[0] = t.inputs[0]
    return "nhwc"


def _moves(w: _Walk, node) -> tuple[list, Op] | None:
    """(nodes, the one copy they make) when node is a data-moving Transpose or Slice whose result is read, through
    reshapes that move nothing, by one more such op alone, and the two index maps compose (ops.compose): ViT's
    slice of q out of qkv, then its transpose to heads; the chain then grows as far as it composes."""
    if not _moving(w, node):
        return None
    members, op = [node], node.op
    while True:
        cur, through = members[-1].output, []
        users = w.users_of[cur]
        while (cur not in w.outputs and len(users) == 1 and users[0].op.kind == "reshape"
               and users[0].name not in w.copies and id(users[0]) not in w.taken):
            through.append(users[0])
            cur = users[0].output
            users = w.users_of[cur]
        nxt = users[0] if cur not in w.outputs and len(users) == 1 else None
        both = compose(op, nxt.op) if nxt is not None and _moving(w, nxt) else None
        if both is None:
            return (members, op) if len(members) > 1 else None
        members += through + [nxt]
        op = both


def _moving(w: _Walk, node) -> bool:
    """Is node a kernel that only moves data by an index map: a Transpose that is no layout (LAYOUT_TRANSPOSES
    folding into its reader), or a Slice that is no view (in copies)?"""
    if id(node) in w.taken or w.graph.values[node.output].dtype != "int8":
        return False
    if node.op.kind == "transpose":
        return not (_side(node) == "in" and _transposed(w, node))
    return node.op.kind == "slice" and node.name in w.copies


def _then_lut(w: _Walk, members: list, ops: list, pieces: set[str]) -> None:
    """A copy that takes a lut (lowering.movement.takes_lut) whose result is read by an island alone, or by one
    per-tensor op of it alone (ViT's q and k times a constant), either through a reshape that moves nothing:
    that island or op as a lut after the copy, which keeps the copy's shape and writes NCHW (never a channel
    shuffle's piece, which its kernel writes pitched)."""
    cur = members[-1].output
    if len(ops) != 1 or not takes_lut(ops[0]) or cur in w.outputs:
        return
    isl = _epilogue_island(w, cur)
    if isl is not None and isl[0][-1].output in pieces:
        return
    if isl is not None:
        members += isl[0]
        ops.append(isl[1])
        return
    through = _reshaped(w, cur)             # the op may read the copy's bytes under another shape
    root = through[0].output if through else cur
    users = w.users_of[root]
    u = users[0] if len(users) == 1 and root not in w.outputs else None
    if (u is not None and id(u) not in w.taken and per_tensor(u.op) and set(u.inputs) == {root}
            and w.graph.values[u.output].dtype == "int8" and u.output not in pieces):
        members += through + [u]
        ops.append(composed([(u.op, (0,))], ops[0].output.shape))


def _lone_requantize(w: _Walk, node, last: Op) -> bool:
    """Is node a per-tensor int8 requantize of the kernel's result, under its shape (an epilogue lut of one op)?"""
    return (isinstance(node.op, Elementwise) and node.op.mode == "requantize" and per_tensor(node.op)
            and w.graph.values[node.output].dtype == "int8" and tuple(node.op.shape) == tuple(last.output.shape))


def _head(w: _Walk, node) -> tuple[list, list, list]:
    """A new kernel's (nodes, ops, inputs): the island node starts (as its lut), or node alone."""
    if per_tensor(node.op) and len(set(node.inputs)) == 1:
        isl = _island(w, node.inputs[0])
        if isl is not None and any(n is node for n in isl[0]):
            return list(isl[0]), [isl[1]], [node.inputs[0]]
    return [node], [node.op], list(node.inputs)


def partition(graph, copies: frozenset[str] = frozenset()) -> list[Group]:
    """Fuse the graph's nodes into kernels, in an order where every kernel's inputs already exist.

    `copies` names the reshapes, concats and slices that must move their data (alias() says which):
    each is a kernel of its own.
    """
    w = _Walk(graph, consumers(graph), set(graph.outputs), set(), {id(n): k for k, n in enumerate(graph.nodes)},
              copies, {n.output: n for n in graph.nodes})
    groups: list[Group] = []
    shuffles, pieces = _shuffles(graph)
    for node in graph.nodes:
        if id(node) in w.taken:
            continue
        moved = _moves(w, node)
        if moved is not None or node.name in copies:
            members, ops = (moved[0], [moved[1]]) if moved is not None else ([node], [_copy_op(graph, node)])
            _then_lut(w, members, ops, pieces)
            w.taken.update(id(m) for m in members)
            groups.append(Group(node.name, members, tuple(ops), list(node.inputs[:1] if moved else node.inputs),
                                members[-1].output))
            continue
        if node.op.kind in LAYOUT_KINDS or node.name in shuffles or (_side(node) == "in" and _transposed(w, node)):
            continue                # moves no data: storage.alias, or a transpose its reader takes (_fold_in)
        members, ops, inputs = _head(w, node)
        read = _fold_in(w, node, members, ops, inputs)
        if isinstance(ops[0], (Conv2d, Dense, Elementwise)):
            _extend(w, members, ops, inputs)
        if takes_lut(ops[0]):           # a copy writes as its plan says, NCHW: nothing folds into its end
            _then_lut(w, members, ops, pieces)
            written = ""
        elif members[-1].output in pieces:
            written = _pitched(ops)
        else:
            written = "" if reordered_io(graph, Group("", members, tuple(ops), inputs, members[-1].output)) else (
                _fold_out(w, members, ops))
        w.taken.update(id(m) for m in members)
        groups.append(Group(node.name if read else members[0].name, members, tuple(ops), inputs, members[-1].output,
                            [], read, written))
    groups.sort(key=lambda g: w.order[id(g.nodes[-1])])
    return groups


def per_node(graph, copies: frozenset[str] = frozenset()) -> list[Group]:
    """One kernel per node, in graph order (layout-only nodes and channel shuffles move no data; copies are
    kernels of their own)."""
    out = []
    shuffles, pieces = _shuffles(graph)
    for node in graph.nodes:
        if node.name in copies:
            out.append(Group(node.name, [node], (_copy_op(graph, node),), list(node.inputs), node.output))
        elif node.op.kind not in LAYOUT_KINDS and node.name not in shuffles:
            ops = [node.op]
            written = _pitched(ops) if node.output in pieces else ""
            out.append(Group(node.name, [node], tuple(ops), list(node.inputs), node.output, [], "", written))
    return out


def _pitched(ops: list) -> str:
    """PIECE_LAYOUT, with the kernel's last op writing it: a piece of a channel shuffle."""
    ops[-1] = replace(ops[-1], y_layout=PIECE_LAYOUT)
    return PIECE_LAYOUT



def _copy_op(graph, node) -> Op:
    """An int8 copy of a reshape's input to its output (a clip that clips nothing); a concat that cannot
    alias its inputs, or a slice that is no view, is its own kernel (lowering.movement)."""
    if node.op.kind in ("concat", "slice"):
        return node.op
    if graph.values[node.output].dtype != "int8":
        raise CompileError(f"{node.name}: a reshape between two graph inputs/outputs of "
                           f"{graph.values[node.output].dtype} needs a copy, which only int8 has")
    return clip(graph.values[node.output].shape, -128, 127)
