"""Shape arithmetic and constant subgraphs, folded at import.

Every shape is static by the time a node is imported (the importer knows the shape of each Value),
so Shape and Size of any tensor are constants, and a node of FOLDABLE whose inputs are all
constants (initializers, Constant nodes, earlier folds) becomes a constant too: the chains
torch.onnx.export writes for `x.view(x.size(0), -1)` or a channel shuffle (Shape, Gather,
Unsqueeze, Concat, then Reshape) and constant subgraphs of any depth.

A folded node is evaluated by onnx's reference evaluator (onnx.reference), one node at a time.
FOLDABLE holds only ops whose result there is exactly onnxruntime's: data movement, integer and
boolean arithmetic (integer Div truncates toward zero in both), casts, and the float32 operations
IEEE 754 rounds correctly (add, sub, mul, div, sqrt, floor, ceil).  QuantizeLinear and
DequantizeLinear are never folded: the importer reads the quantisation from them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np

from .state import DQ, Attr, Const, ConstDQ, Float, Importer, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

FOLDABLE = frozenset({
    # data movement and shapes
    "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Reshape", "Flatten", "Transpose", "Expand",
    "Tile", "Split", "ConstantOfShape", "Range", "Cast", "Identity", "Shape", "Size",
    # integer, boolean and exactly rounded float arithmetic
    "Add", "Sub", "Mul", "Div", "Neg", "Abs", "Min", "Max", "Floor", "Ceil", "Sqrt", "ReduceProd",
    "Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where",
})
MAX_ELEMENTS = 1 << 24      # a folded constant larger than this is refused (a shape gone wrong)
DOMAINS = ("", "ai.onnx")


def folds(node: NodeProto) -> bool:
    """Whether the node's op is one the importer folds when its inputs are constants."""
    return node.op_type in FOLDABLE and node.domain in DOMAINS


def constant_inputs(im: Importer, node: NodeProto) -> bool:
    """Whether every given input of the node is a constant."""
    return all(isinstance(im.state[i], Const) for i in node.input if i)


def only_constant(im: Importer, node: NodeProto) -> Problem:
    """The refusal of a folding-only op on a tensor that is not constant."""
    bad = [(k, im.state[i]) for k, i in enumerate(node.input) if i and not isinstance(im.state[i], Const)]
    what = f"input {bad[0][0]} is {describe(bad[0][1])}" if bad else "it has no inputs"
    return Problem(node, f"op type {node.op_type!r} is folded at import only, on constant inputs and shapes: "
                   + what)


def fold(im: Importer, node: NodeProto) -> None:
    """Evaluate a node of constants with onnx's reference evaluator; each output becomes a constant."""
    from onnx.reference import ReferenceEvaluator

    ins = {i: im.state[i].array for i in node.input if i}
    _check_size(node, ins)
    opsets = {(o.domain or ""): o.version for o in im.model.opset_import if o.domain in DOMAINS}
    try:
        outs = ReferenceEvaluator(node, opsets=opsets or None).run(None, ins)
    except Exception as exc:          # the reference evaluator raises what numpy raises
        raise Problem(node, f"cannot fold on its constant inputs: {type(exc).__name__}: {exc}") from None
    for name, a in zip(node.output, outs):
        a = np.array(a)
        if a.size > MAX_ELEMENTS:
            raise Problem(node, f"folds to a constant of shape {list(a.shape)}, too large")
        if name:
            im.state[name] = Const(a)


def _check_size(node, ins: dict) -> None:
    """Refuse, before evaluating, the ops whose output size comes from a value (a bad shape must not eat memory)."""
    vals = [ins.get(i) if i else None for i in node.input]
    if node.op_type == "ConstantOfShape" and vals and vals[0] is not None:
        n = math.prod(int(v) for v in vals[0].ravel())
    elif node.op_type == "Expand" and len(vals) == 2 and vals[1] is not None:
        n = math.prod(max(int(v), 1) for v in vals[1].ravel()) * max(1, vals[0].size)
    elif node.op_type == "Tile" and len(vals) == 2 and vals[1] is not None:
        n = math.prod(max(int(v), 0) for v in vals[1].ravel()) * vals[0].size
    elif node.op_type == "Range" and len(vals) == 3 and all(v is not None for v in vals):
        start, limit, delta = (float(v.ravel()[0]) if v.size else 0.0 for v in vals)
        n = math.ceil((limit - start) / delta) if delta and math.isfinite((limit - start) / delta) else 0
    else:
        return
    if n > MAX_ELEMENTS:
        raise Problem(node, f"would fold to a constant of {n} elements, too large")


def _shape(im: Importer, node, s) -> tuple[int, ...]:
    if isinstance(s, (Q, DQ)):
        return im.shape(s.value)
    if isinstance(s, (Const, ConstDQ)):
        return s.array.shape
    if isinstance(s, Float):
        return im.float_shapes[s.name]
    raise Problem(node, f"input is {describe(s)}: its shape is not known at import")


def shape(im: Importer, node: NodeProto) -> None:
    """Shape(x, start, end): the static shape of any tensor the importer has, a constant."""
    at = im.attrs(node, {"start": Attr("int", 0), "end": Attr("int")})
    dims = _shape(im, node, im.input(node, 0))
    im.set(node, Const(np.array(dims[slice(at["start"], at["end"])], np.int64)))


def size(im: Importer, node: NodeProto) -> None:
    """Size(x): the static element count of any tensor the importer has, a constant."""
    im.attrs(node, {})
    im.set(node, Const(np.array(math.prod(_shape(im, node, im.input(node, 0))), np.int64)))
