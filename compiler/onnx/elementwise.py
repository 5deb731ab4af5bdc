"""The elementwise ops: Add, Mul, Sub, Div, Max and Min (QDQ), QLinearAdd and QLinearMul, Relu and Clip.

Either input may broadcast to the other (any numpy broadcast lowering.vu.broadcast_view merges into three
axes; QLinearAdd's roles as onnxruntime gives them: arithmetic.add_roles_swapped), and either may be a constant
(an int8 or uint8 initializer, a dequantised one, or in QDQ a float scalar).  Sub, Div, Max and Min, and an Add
onnxruntime leaves unfused (qdq_add), are its float ops between DequantizeLinear and QuantizeLinear
(ops.qdq_binary).  A Relu or Clip after a pending op narrows that op's output range; on a dequantised or int8
tensor it is a clip.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import ops
from ..graph import QuantParams
from ..ops import FLOAT_BINARY, Reshape
from ..lowering.vu import broadcast_view
from .arithmetic import INT8, add_args, add_roles_swapped, int8_bounds, mul_args
from .state import DQ, Attr, Const, ConstDQ, Importer, Pending, Problem, Q, as_int8, brief, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


@dataclass(frozen=True)
class Operand:
    """One input of a binary op: an int8 Value, or an int8 constant (value None), and its quantisation."""

    value: str | None
    q: QuantParams
    shape: tuple[int, ...]
    const: np.ndarray | None = None


COMMUTATIVE = ("add", "qdq_add", "mul", "max", "min")


def binary(kind: str) -> Callable[[Importer, NodeProto], None]:
    """The handler of Add, Mul (QDQ), Sub, Div, Max or Min (kind "add", ... "min")."""
    def handler(im: Importer, node: NodeProto) -> None:
        """Add / Mul / Sub / Div / Max / Min in QDQ: dequantised activations or constants -> a pending op."""
        im.attrs(node, {})
        if len(node.input) != 2:
            raise Problem(node, f"has {len(node.input)} inputs: {node.op_type} is imported with two")
        a, b = (_qdq_operand(im, node, i, what) for i, what in ((0, "A"), (1, "B")))
        op_kind = kind
        # onnxruntime runs an Add with a float constant, or one it leaves unfused, in float: qdq_add; a dynamic
        # graph keeps QLinearAdd's arithmetic, since the float island (qdq_binary) has a static lowering only
        if kind == "add" and (a.q is None or b.q is None or (
                im.arithmetic == "onnxruntime" and not im.dynamic and im.ort_kernel(node) == "float")):
            op_kind = "qdq_add"
        a, b = (_float_scalar(node, op_kind, o) for o in (a, b))
        im.set(node, Pending(node, _binary_maker(im, node, op_kind, a, b, tuple(node.input[:2]))))
    return handler


def qlinear_binary(kind: str) -> Callable[[Importer, NodeProto], None]:
    """The handler of QLinearAdd (kind "add") or QLinearMul ("mul")."""
    def handler(im: Importer, node: NodeProto) -> None:
        """QLinearAdd / QLinearMul(A, As, Az, B, Bs, Bz, Cs, Cz) (com.microsoft); A or B may be an initializer."""
        im.attrs(node, {})
        a = _qlinear_operand(im, node, 0, im.params(node, 1, 2, "A"), "A")
        b = _qlinear_operand(im, node, 3, im.params(node, 4, 5, "B"), "B")
        cq = im.params(node, 6, 7, "C")
        im.note_uint8(node, ((node.input[0], 2), (node.input[3], 5), (node.output[0], 7)))
        make = _binary_maker(im, node, kind, a, b, (node.input[0], node.input[3]))
        im.set(node, Q(make(cq, -128, 127, node.output[0], im.name(node))))
    return handler


def _qdq_operand(im: Importer, node, i: int, what: str) -> Operand:
    """A dequantised activation, a dequantised int8 constant (per tensor), or a float constant (q None)."""
    s = im.input(node, i)
    if isinstance(s, DQ):
        return Operand(s.value, s.q, im.shape(s.value))
    if isinstance(s, ConstDQ) and s.array.dtype == np.int8 and s.q.scale.ndim == 0:
        return Operand(None, s.q, tuple(s.array.shape), s.array)
    if isinstance(s, Const) and s.array.dtype.kind == "f":
        return Operand(None, None, tuple(s.array.shape), s.array.astype(np.float32))
    raise Problem(node, f"{what} ({node.input[i] if i < len(node.input) else '?'!r}) must be a dequantised int8 "
                  f"activation, a per-tensor dequantised int8 constant or a float constant, got {describe(s)}")


def _qlinear_operand(im: Importer, node, i: int, q: QuantParams, what: str) -> Operand:
    """An int8 Value, or an int8 or uint8 initializer (held as int8: state.as_int8), with its QuantParams."""
    s = im.input(node, i)
    if isinstance(s, Const) and s.array.dtype in (np.int8, np.uint8):
        return Operand(None, q, tuple(s.array.shape), as_int8(s.array) if s.array.dtype == np.uint8 else s.array)
    v = im.int8(node, i, what)
    return Operand(v, q, im.shape(v))


def _float_scalar(node, kind: str, o: Operand) -> Operand:
    """A float scalar constant c as the int8 constant sign(c) with scale |c| (f32(+-1) * |c| is c exactly),
    for the float ops; other float constants are refused."""
    if o.q is not None:
        return o
    c = o.const
    if kind not in FLOAT_BINARY or c.size != 1 or not np.isfinite(c).all():
        raise Problem(node, f"takes the float constant {brief(c)} (not quantised): a float constant is taken as one "
                      f"finite value in Add, Sub, Div, Max or Min; quantise it (a DequantizeLinear of int8)")
    v = float(c.ravel()[0])
    q = QuantParams(np.float32(abs(v) if v != 0 else 1.0), np.int64(0))
    return Operand(None, q, o.shape, np.full(o.shape, np.sign(v), np.int8))


def _binary_maker(im: Importer, node, kind: str, a: Operand, b: Operand, onnx_inputs: tuple[str, ...]):
    """make(yq, lo, hi, out, name) of the op; onnx_inputs: A and B as ONNX names them (Importer.uint8_kernel).

    The activation of the output's shape is the op's a, the other operand its b (broadcast or constant);
    b's broadcast is seen through lowering.vu.broadcast_view (Reshapes around the op where it merges axes).
    """
    if a.value is None and b.value is None:
        raise Problem(node, "both inputs are constants: nothing to run")
    out_shape = _out_shape(node, a.shape, b.shape)
    onnx_shapes = (a.shape, b.shape)
    swapped = a.value is None or a.shape != out_shape
    if swapped:                                       # the Value of the output's shape goes first
        a, b = b, a
    if a.value is None or a.shape != out_shape:
        raise Problem(node, f"inputs have shapes {list(b.shape)} and {list(a.shape)}: one activation must have "
                      "the output's shape (neither broadcasts to the other)")
    reverse = swapped and kind not in COMMUTATIVE
    if kind == "add" and im.arithmetic == "onnxruntime":
        reverse = add_roles_swapped(*onnx_shapes) != swapped     # QLinearAdd's A role on the op's b
    view = broadcast_view(out_shape, b.shape)
    if view is None:
        raise Problem(node, f"inputs have shapes {list(out_shape)} and {list(b.shape)}: the broadcast alternates "
                      "between repeated and varying axes more than three times (after merging adjacent axes)")
    shape, bcast = view
    bcast = None if bcast == shape else bcast
    b_const = None if b.const is None else b.const.reshape(bcast or shape)

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        ins = (_viewed(im, a.value, a.q, out_shape, shape, f"{name}/a", f"{out}/a"),)
        if b.value is not None:
            ins += (_viewed(im, b.value, b.q, b.shape, bcast or shape, f"{name}/b", f"{out}/b"),)
        common = dict(za=int(a.q.zero_point), zb=int(b.q.zero_point), lo=lo, hi=hi, b_shape=bcast, b_const=b_const)
        uint8 = im.uint8_kernel(onnx_inputs + (out,), node if node.op_type in ("Add", "Mul") else None)
        if kind == "add":
            args = add_args(im.arithmetic, a.q.scale, b.q.scale, yq.scale, int(yq.zero_point), uint8)
            op = ops.add(shape, **common, **args, **({"reverse": True} if reverse else {}))
        elif kind == "mul":
            op = ops.mul(shape, **common, **mul_args(im.arithmetic, a.q.scale, b.q.scale, yq.scale,
                                                     int(yq.zero_point), uint8))
        else:
            op = ops.qdq_binary(kind, shape, **common, scale_a=a.q.scale, scale_b=b.q.scale, scale_out=yq.scale,
                                zp_out=int(yq.zero_point), reverse=reverse)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [a.q, b.q]}
        back = [] if shape == out_shape else [("view", Reshape(shape, out_shape), yq)]
        return im.emit(name, [(kind, op, yq)] + back, ins, out, info)
    return make


def _viewed(im: Importer, value: str, q: QuantParams, shape: tuple, view: tuple, name: str, out: str) -> str:
    """The int8 Value seen at the shape `view` (a Reshape, moving no data), or itself when shapes agree."""
    if tuple(shape) == tuple(view):
        return value
    return im.emit(name, [("view", Reshape(shape, view), q)], (value,), out, {"op_type": "Reshape"},
                   int8_in_onnx=False)


def _out_shape(node, a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, ...]:
    """The ONNX (numpy) broadcast of the two shapes, or Problem."""
    try:
        return tuple(int(v) for v in np.broadcast_shapes(a, b))
    except ValueError:
        raise Problem(node, f"inputs of shapes {list(a)} and {list(b)} do not broadcast") from None


def relu_clip(im: Importer, node: NodeProto) -> None:
    """Relu / Clip: folded into a pending op's range, or a clip on the int8 Value."""
    lo, hi = _clip_range(im, node)
    s = im.input(node, 0)
    if isinstance(s, Pending):
        im.set(node, replace(s, lo=max(s.lo, lo), hi=min(s.hi, hi)))     # keeps its kind (norm.BatchNormPending)
        return
    if isinstance(s, DQ):
        qlo, qhi = int8_bounds(s.q, lo, hi)
        if (qlo, qhi) == INT8:
            im.set(node, s)
            return
        v = im.emit(im.name(node), [("clip", ops.clip(im.shape(s.value), qlo, qhi), s.q)], (s.value,),
                    node.output[0], {"op_type": node.op_type}, int8_in_onnx=False)
        im.set(node, DQ(v, s.q))
        return
    if isinstance(s, Q) and im.g.values[s.value].dtype == "int8":     # Relu/Clip on int8 itself
        qlo = -128 if lo <= -128 else min(127, math.ceil(lo))
        qhi = 127 if hi >= 127 else max(-128, math.floor(hi))
        if qlo > qhi:
            raise Problem(node, f"clip range [{lo}, {hi}] is empty on int8")
        op = ops.clip(im.shape(s.value), qlo, qhi)
        q = im.g.values[s.value].quant
        im.set(node, Q(im.emit(im.name(node), [("clip", op, q)], (s.value,), node.output[0],
                               {"op_type": node.op_type})))
        return
    raise Problem(node, f"input is {describe(s)}: expected a dequantised tensor or a quantised op's output")


def _clip_range(im: Importer, node: NodeProto) -> tuple[float, float]:
    if node.op_type == "Relu":
        im.attrs(node, {})
        return 0.0, math.inf
    at = im.attrs(node, {"min": Attr("float", -math.inf), "max": Attr("float", math.inf)})
    lo, hi = at["min"], at["max"]
    for i, what in ((1, "min"), (2, "max")):
        a = im.const(node, i, what, optional=True)
        if a is None:
            continue
        if a.size != 1:
            raise Problem(node, f"{what} has {a.size} values: expected a scalar")
        v = float(as_int8(a).ravel()[0]) if a.dtype == np.uint8 else float(a.ravel()[0])     # a raw uint8 clip
        lo, hi = (v, hi) if what == "min" else (lo, v)
    if math.isnan(lo) or math.isnan(hi) or lo > hi:
        raise Problem(node, f"clip range [{lo}, {hi}] is empty or not a number")
    return lo, hi

