"""The layout ops and constants: Flatten, Reshape, Concat, QLinearConcat, Identity and Constant.

Flatten and Reshape commute with per-tensor dequantisation and act on the int8 Value (or fold a
constant); Concat requantises each input whose scale differs from the output's.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from ..ops import Concat, Reshape
from .arithmetic import INT8, rescale_op
from .load import to_array
from .state import DQ, Attr, Const, Importer, Pending, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def flatten(im: Importer, node: NodeProto) -> None:
    """Flatten(axis): a Reshape to [prod(shape[:axis]), prod(shape[axis:])]."""
    at = im.attrs(node, {"axis": Attr("int", 1)})
    _reshape_to(im, node, lambda shape: _flatten_shape(node, shape, at["axis"]))


def _flatten_shape(node, shape, axis: int) -> tuple[int, int]:
    if not -len(shape) <= axis <= len(shape):
        raise Problem(node, f"axis = {axis} is outside the input's {len(shape)} dimensions")
    axis = axis + len(shape) if axis < 0 else axis
    return math.prod(shape[:axis]), math.prod(shape[axis:])


def reshape(im: Importer, node: NodeProto) -> None:
    """Reshape(data, shape) with a constant shape (0 copies a dimension, -1 is inferred)."""
    at = im.attrs(node, {"allowzero": Attr("int", 0)})
    target = im.const(node, 1, "shape")
    if target.dtype != np.int64 or target.ndim != 1:
        raise Problem(node, f"shape must be a 1-D int64 constant, got {target.dtype} {list(target.shape)}")
    _reshape_to(im, node, lambda shape: _reshape_shape(node, shape, target, at["allowzero"]))


def _reshape_shape(node, shape, target: np.ndarray, allowzero: int) -> tuple[int, ...]:
    out = []
    for i, d in enumerate(int(t) for t in target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise Problem(node, f"shape {target.tolist()}: 0 at axis {i} copies a dimension the input "
                              f"{list(shape)} does not have")
            d = shape[i]
        elif d < -1 or (d == 0 and allowzero):
            raise Problem(node, f"shape {target.tolist()} has dimension {d}")
        out.append(d)
    total = math.prod(shape)
    if out.count(-1) > 1:
        raise Problem(node, f"shape {target.tolist()} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known <= 0 or total % known:
            raise Problem(node, f"cannot reshape {list(shape)} to {target.tolist()}")
        out[out.index(-1)] = total // known
    return tuple(out)


def _reshape_to(im: Importer, node, new_shape: Callable) -> None:
    s = im.input(node, 0)
    if isinstance(s, Const):           # constant folding (a weight reshaped in the graph)
        shape = new_shape(s.array.shape)
        if math.prod(shape) != s.array.size:
            raise Problem(node, f"cannot reshape a constant of shape {list(s.array.shape)} to {list(shape)}")
        im.set(node, Const(s.array.reshape(shape)))
        return
    if not isinstance(s, (DQ, Q)):
        raise Problem(node, f"input is {describe(s)}: expected int8 or a dequantised tensor")
    x_shape = im.shape(s.value)
    out_shape = new_shape(x_shape)
    dtype = im.g.values[s.value].dtype
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    op = Reshape(x_shape, out_shape, dtype)
    v = im.emit(im.name(node), [("reshape", op, q)], (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))


def concat(im: Importer, node: NodeProto) -> None:
    """Concat of dequantised tensors (QDQ: pending, requantised to the output scale) or of int8 tensors."""
    at = im.attrs(node, {"axis": Attr("int")})
    if at["axis"] is None:
        raise Problem(node, "attribute 'axis' is required")
    states = [im.input(node, i) for i in range(len(node.input))]
    if states and all(isinstance(s, Q) for s in states):
        im.set(node, Q(_emit_concat(im, node, [(s.value, None) for s in states], None, at["axis"],
                                    node.output[0], im.name(node))))
        return
    ins = [im.dequantised(node, i, f"input {i}") for i in range(len(node.input))]

    def make(yq, lo, hi, out, name):
        return _emit_concat(im, node, [(s.value, s.q) for s in ins], yq, at["axis"], out, name, lo, hi)
    im.set(node, Pending(node, make))


def qlinear_concat(im: Importer, node: NodeProto) -> None:
    """QLinearConcat(ys, yz, x0, x0s, x0z, x1, ...) (com.microsoft)."""
    at = im.attrs(node, {"axis": Attr("int")})
    if at["axis"] is None:
        raise Problem(node, "attribute 'axis' is required")
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise Problem(node, f"has {len(node.input)} inputs: expected Y_scale, Y_zero_point and triples")
    yq = im.params(node, 0, 1, "Y")
    ins = [(im.int8(node, i, f"input {(i - 2) // 3}"), im.params(node, i + 1, i + 2, f"input {(i - 2) // 3}"))
           for i in range(2, len(node.input), 3)]
    im.set(node, Q(_emit_concat(im, node, ins, yq, at["axis"], node.output[0], im.name(node))))


def _emit_concat(im: Importer, node, ins, yq, axis: int, out: str, name: str, lo: int = -128,
                 hi: int = 127) -> str:
    """Requantise each input whose scale differs from the output's (or when clipping), then Concat."""
    values = []
    for k, (v, q) in enumerate(ins):
        if q is not None and yq is not None and (not q.same_as(yq) or (lo, hi) != INT8):
            op = rescale_op(im.arithmetic, im.shape(v), "int8", int(q.zero_point), float(q.scale),
                            float(yq.scale), int(yq.zero_point), lo, hi)
            v = im.emit(f"{name}/requant{k}", [(f"requant{k}", op, yq)], (v,), f"{out}/in{k}",
                        {"op_type": node.op_type}, int8_in_onnx=False)
        values.append(v)
    shapes = [im.shape(v) for v in values]
    ndim = len(shapes[0])
    if not -ndim <= axis < ndim:
        raise Problem(node, f"axis = {axis} is outside the inputs' {ndim} dimensions")
    dtypes = {im.g.values[v].dtype for v in values}
    if len(dtypes) != 1:
        raise Problem(node, f"inputs have different dtypes {sorted(dtypes)}")
    op = Concat(shapes, axis, dtypes.pop())
    return im.emit(name, [("concat", op, yq)], tuple(values), out, {"op_type": node.op_type})


def identity(im: Importer, node: NodeProto) -> None:
    """Identity: its output is its input."""
    im.attrs(node, {})
    im.set(node, im.input(node, 0))


def constant(im: Importer, node: NodeProto) -> None:
    """Constant (value, value_float(s) or value_int(s)): a constant."""
    if len(node.attribute) != 1:
        raise Problem(node, f"expected exactly one attribute, got {len(node.attribute)}")
    a = node.attribute[0]
    if a.name == "value" and a.type == 4:
        arr = to_array(im.onnx, a.t)
    elif a.name == "value_float" and a.type == 1:
        arr = np.array(a.f, dtype=np.float32)
    elif a.name == "value_floats" and a.type == 6:
        arr = np.array(a.floats, dtype=np.float32)
    elif a.name == "value_int" and a.type == 2:
        arr = np.array(a.i, dtype=np.int64)
    elif a.name == "value_ints" and a.type == 7:
        arr = np.array(a.ints, dtype=np.int64)
    else:
        raise Problem(node, f"attribute {a.name!r} is not supported")
    im.set(node, Const(arr))
