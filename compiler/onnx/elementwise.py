"""The elementwise ops: Add and Mul (QDQ), QLinearAdd and QLinearMul, Relu and Clip.

B may broadcast (one value per image and / or channel, or one plane).  A Relu or Clip after a
pending op narrows that op's output range; on a dequantised or int8 tensor it is a clip.
"""
from __future__ import annotations

import math
from types import SimpleNamespace
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import ops
from ..graph import QuantParams
from ..ops import Reshape
from ..lowering.vu import broadcast_problem
from .arithmetic import INT8, add_args, int8_bounds, mul_args
from .state import DQ, Attr, Importer, Pending, Problem, Q, as_int8, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def binary(kind: str) -> Callable[[Importer, NodeProto], None]:
    """The handler of Add (kind "add") or Mul ("mul") in QDQ."""
    def handler(im: Importer, node: NodeProto) -> None:
        """Add / Mul in QDQ: two dequantised activations of the same shape -> pending add / mul."""
        im.attrs(node, {})
        a, b = im.dequantised(node, 0, "A"), im.dequantised(node, 1, "B")
        im.set(node, Pending(node, _binary_maker(im, node, kind, (a.value, a.q), (b.value, b.q))))
    return handler


def qlinear_binary(kind: str) -> Callable[[Importer, NodeProto], None]:
    """The handler of QLinearAdd (kind "add") or QLinearMul ("mul")."""
    def handler(im: Importer, node: NodeProto) -> None:
        """QLinearAdd / QLinearMul(A, As, Az, B, Bs, Bz, Cs, Cz) (com.microsoft)."""
        im.attrs(node, {})
        a, aq = im.int8(node, 0, "A"), im.params(node, 1, 2, "A")
        b, bq = im.int8(node, 3, "B"), im.params(node, 4, 5, "B")
        cq = im.params(node, 6, 7, "C")
        make = _binary_maker(im, node, kind, (a, aq), (b, bq))
        im.set(node, Q(make(cq, -128, 127, node.output[0], im.name(node))))
    return handler


def _binary_maker(im: Importer, node, kind: str, a, b):
    (av, aq), (bv, bq) = a, b
    shape, b_shape = im.shape(av), im.shape(bv)
    if b_shape != shape and _onnx_broadcast(shape, b_shape) is None and _onnx_broadcast(b_shape, shape) is not None:
        if kind == "add" and im.arithmetic == "onnxruntime":
            raise Problem(node, f"A of shape {list(shape)} broadcasts to B's {list(b_shape)}: onnxruntime's float "
                          "add rounds A and B differently, so only B may broadcast")
        (av, aq), (bv, bq), shape, b_shape = (bv, bq), (av, aq), b_shape, shape      # a * b = b * a; a + b too
    bcast = None
    if b_shape != shape:
        bcast = _onnx_broadcast(shape, b_shape)
        if bcast is None:
            raise Problem(node, f"inputs have shapes {list(shape)} and {list(b_shape)}: broadcasting is supported "
                          "for a B of one value per image and / or channel ([N, C, 1, 1], [C, 1, 1], a scalar) or "
                          "one plane ([1, 1, H, W], [H, W]), not one that repeats along the height or width only")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        za, zb = int(aq.zero_point), int(bq.zero_point)
        b_in = bv
        if bcast is not None and bcast != b_shape:      # B of a lower rank: the same bytes under A's rank
            b_in = im.emit(f"{name}/b", [("b", Reshape(b_shape, bcast), bq)], (bv,), f"{out}/b",
                           {"op_type": "Reshape"}, int8_in_onnx=False)
        if kind == "add":
            args = add_args(im.arithmetic, aq.scale, bq.scale, yq.scale, int(yq.zero_point))
            op = ops.add(shape, za=za, zb=zb, lo=lo, hi=hi, b_shape=bcast, **args)
        else:
            args = mul_args(im.arithmetic, aq.scale, bq.scale, yq.scale, int(yq.zero_point))
            op = ops.mul(shape, za=za, zb=zb, lo=lo, hi=hi, b_shape=bcast, **args)
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [aq, bq]}
        return im.emit(name, [(kind, op, yq)], (av, b_in), out, info)
    return make


def _onnx_broadcast(shape: tuple[int, ...], b_shape: tuple[int, ...]) -> tuple[int, ...] | None:
    """B's shape at A's rank (ONNX aligns shapes from the right) when the add and mul lowerings broadcast it
    (lowering.vu.broadcast_problem: one value per image and / or channel, or one plane); None otherwise."""
    if len(b_shape) > len(shape):
        return None
    full = (1,) * (len(shape) - len(b_shape)) + tuple(b_shape)
    if broadcast_problem(SimpleNamespace(shape=tuple(shape), b_shape=full)):
        return None
    return full


def relu_clip(im: Importer, node: NodeProto) -> None:
    """Relu / Clip: folded into a pending op's range, or a clip on the int8 Value."""
    lo, hi = _clip_range(im, node)
    s = im.input(node, 0)
    if isinstance(s, Pending):
        im.set(node, Pending(s.node, s.make, max(s.lo, lo), min(s.hi, hi), s.uses))
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

