"""The layout ops and constants: Flatten, Reshape, Squeeze, Unsqueeze, Concat, QLinearConcat, Identity and Constant.

Flatten, Reshape, Squeeze and Unsqueeze commute with per-tensor dequantisation and act on the int8 Value (or fold a
constant); on a float result (a pending op's, state.Pending) they act on the int8 Value the QuantizeLinear after
them rounds it to, since rounding commutes with a view (a view read otherwise runs on the host with the op:
compiler.onnx.placement).  Concat requantises each input whose scale differs from the output's.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import reference as sem
from ..ops import Concat, Reshape
from .arithmetic import INT8, rescale_op
from .load import to_array
from .state import DQ, Attr, Const, ConstDQ, Importer, Pending, Problem, Q, as_int8, describe

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


def squeeze(im: Importer, node: NodeProto) -> None:
    """Squeeze(data, axes): a Reshape dropping the axes (an input from opset 13, an attribute before; none
    given: every axis of size 1)."""
    axes = _axes(im, node)
    _reshape_to(im, node, lambda shape: _squeezed(node, shape, axes))


def unsqueeze(im: Importer, node: NodeProto) -> None:
    """Unsqueeze(data, axes): a Reshape inserting axes of size 1 (axes of the output, an input from opset 13,
    an attribute before)."""
    axes = _axes(im, node)
    if axes is None:
        raise Problem(node, "axes are required")
    _reshape_to(im, node, lambda shape: _unsqueezed(node, shape, axes))


def _axes(im: Importer, node) -> tuple[int, ...] | None:
    """Squeeze's or Unsqueeze's axes: the attribute, or the constant int64 input 1 (None if neither)."""
    at = im.attrs(node, {"axes": Attr("ints")})
    given = im.const(node, 1, "axes", optional=True)
    if given is not None and (given.dtype != np.int64 or given.ndim > 1):
        raise Problem(node, f"axes must be a 1-D int64 constant, got {given.dtype} {list(given.shape)}")
    axes = at["axes"] if given is None else [int(v) for v in np.ravel(given)]
    return None if axes is None else tuple(int(v) for v in axes)


def _normal_axes(node, axes: tuple[int, ...], rank: int) -> set[int]:
    """The axes as indices in [0, rank), or Problem for one outside or repeated."""
    if any(not -rank <= a < rank for a in axes):
        raise Problem(node, f"axes {list(axes)} reach outside {rank} dimensions")
    out = {a % rank for a in axes}
    if len(out) != len(axes):
        raise Problem(node, f"axes {list(axes)} repeat an axis")
    return out


def _squeezed(node, shape, axes) -> tuple[int, ...]:
    if axes is None:
        return tuple(d for d in shape if d != 1)
    drop = _normal_axes(node, axes, len(shape))
    if any(shape[a] != 1 for a in drop):
        raise Problem(node, f"axes {list(axes)} of shape {list(shape)}: only axes of size 1 are squeezed")
    return tuple(d for k, d in enumerate(shape) if k not in drop)


def _unsqueezed(node, shape, axes) -> tuple[int, ...]:
    rank = len(shape) + len(axes)
    new = _normal_axes(node, axes, rank)
    rest = iter(shape)
    return tuple(1 if k in new else next(rest) for k in range(rank))


def _reshape_to(im: Importer, node, new_shape: Callable) -> None:
    s = im.input(node, 0)
    if isinstance(s, Const):           # constant folding (a weight reshaped in the graph)
        shape = new_shape(s.array.shape)
        if math.prod(shape) != s.array.size:
            raise Problem(node, f"cannot reshape a constant of shape {list(s.array.shape)} to {list(shape)}")
        im.set(node, Const(s.array.reshape(shape)))
        return
    if isinstance(s, Pending):
        im.set(node, Pending(s.node, _viewed_maker(im, node, s, new_shape), s.lo, s.hi))
        return
    if not isinstance(s, (DQ, Q)):
        raise Problem(node, f"input is {describe(s)}: expected int8, a dequantised tensor or a float result")
    x_shape = im.shape(s.value)
    out_shape = new_shape(x_shape)
    dtype = im.g.values[s.value].dtype
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    op = Reshape(x_shape, out_shape, dtype)
    v = im.emit(im.name(node), [("reshape", op, q)], (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))


def _viewed_maker(im: Importer, node, s: Pending, new_shape: Callable) -> Callable:
    """Pending.make of a view of a float result: the result rounded by the QuantizeLinear after the view (its
    scale, its range), then the view of that int8 Value.  Rounding commutes with a view, so this is what
    onnxruntime computes; the view's ONNX output is the tensor the QuantizeLinear writes."""
    def make(yq, lo: int, hi: int, out: str, name: str) -> str:
        v = s.make(yq, lo, hi, out, name)          # named `out`: a float island finds its QuantizeLinear by it
        unviewed = im.value_name(f"{out}/unviewed")
        im.g.rename(v, unviewed)
        im.g.producer(unviewed).info["onnx_outputs"] = []       # not the ONNX tensor: its shape is the view's
        x_shape = im.shape(unviewed)
        out_shape = new_shape(x_shape)
        op = Reshape(x_shape, out_shape, im.g.values[unviewed].dtype)
        return im.emit(im.name(node), [("reshape", op, yq)], (unviewed,), out, {"op_type": node.op_type})
    return make


def concat(im: Importer, node: NodeProto) -> None:
    """Concat of dequantised tensors or constants (QDQ: pending, requantised to the output scale) or of int8
    tensors."""
    at = im.attrs(node, {"axis": Attr("int")})
    if at["axis"] is None:
        raise Problem(node, "attribute 'axis' is required")
    states = [im.input(node, i) for i in range(len(node.input))]
    if states and all(isinstance(s, Q) for s in states):
        im.set(node, Q(_emit_concat(im, node, [(s.value, None, None) for s in states], None, at["axis"],
                                    node.output[0], im.name(node))))
        return
    ins = [_qdq_piece(im, node, i) for i in range(len(node.input))]

    def make(yq, lo, hi, out, name):
        return _emit_concat(im, node, ins, yq, at["axis"], out, name, lo, hi)
    im.set(node, Pending(node, make))


def _qdq_piece(im: Importer, node, i: int) -> tuple:
    """A QDQ Concat's input i as (Value, quant, None), or a per-tensor dequantised int8 constant as (None, quant,
    its int8 array)."""
    s = im.input(node, i)
    if isinstance(s, ConstDQ) and s.q.scale.ndim == 0 and s.array.dtype == np.int8:
        return None, s.q, s.array
    d = im.dequantised(node, i, f"input {i}")
    return d.value, d.q, None


def qlinear_concat(im: Importer, node: NodeProto) -> None:
    """QLinearConcat(ys, yz, x0, x0s, x0z, x1, ...) (com.microsoft); an input may be an int8 or uint8 initializer."""
    at = im.attrs(node, {"axis": Attr("int")})
    if at["axis"] is None:
        raise Problem(node, "attribute 'axis' is required")
    if len(node.input) < 5 or (len(node.input) - 2) % 3:
        raise Problem(node, f"has {len(node.input)} inputs: expected Y_scale, Y_zero_point and triples")
    yq = im.params(node, 0, 1, "Y")
    ins = []
    for i in range(2, len(node.input), 3):
        what, s = f"input {(i - 2) // 3}", im.input(node, i)
        q = im.params(node, i + 1, i + 2, what)
        if isinstance(s, Const) and s.array.dtype in (np.int8, np.uint8):
            ins.append((None, q, as_int8(s.array) if s.array.dtype == np.uint8 else s.array))
        else:
            ins.append((im.int8(node, i, what), q, None))
    im.set(node, Q(_emit_concat(im, node, ins, yq, at["axis"], node.output[0], im.name(node))))


def _emit_concat(im: Importer, node, ins, yq, axis: int, out: str, name: str, lo: int = -128,
                 hi: int = 127) -> str:
    """Requantise each input whose scale differs from the output's (or when clipping), then Concat; ins are
    (Value, quant, None) or (None, quant, constant).  A constant is requantised here as onnxruntime does it
    (QLinearConcat's table, and the float Concat between DequantizeLinear and QuantizeLinear alike: a
    DequantizeLinear then a QuantizeLinear, float32)."""
    values, shapes, consts = [], [], []
    for k, (v, q, const) in enumerate(ins):
        shape = im.shape(v) if const is None else tuple(const.shape)
        if q is not None and yq is not None and (not q.same_as(yq) or (lo, hi) != INT8):
            if const is not None:
                f = sem.dequantize_f32(const, np.float32(q.scale), int(q.zero_point))
                const = np.clip(sem.quantize_f32(f, np.float32(yq.scale), int(yq.zero_point)), lo, hi).astype(np.int8)
            else:
                op = rescale_op(im.arithmetic, shape, "int8", int(q.zero_point), float(q.scale),
                                float(yq.scale), int(yq.zero_point), lo, hi)
                v = im.emit(f"{name}/requant{k}", [(f"requant{k}", op, yq)], (v,), f"{out}/in{k}",
                            {"op_type": node.op_type}, int8_in_onnx=False)
        shapes.append(shape)
        if const is None:
            values.append(v)
        else:
            consts.append((k, const))
    ndim = len(shapes[0])
    if not -ndim <= axis < ndim:
        raise Problem(node, f"axis = {axis} is outside the inputs' {ndim} dimensions")
    dtypes = {im.g.values[v].dtype for v in values} | ({"int8"} if consts else set())
    if len(dtypes) != 1:
        raise Problem(node, f"inputs have different dtypes {sorted(dtypes)}")
    op = Concat(shapes, axis, dtypes.pop(), tuple(consts))
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
