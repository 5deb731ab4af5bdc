"""Softmax on vu.softmax: QLinearSoftmax (com.microsoft, quantize_static's QOperator form) and Softmax
between DequantizeLinear and QuantizeLinear (QDQ).

The axis: Softmax from opset 13, and QLinearSoftmax with opset >= 13, take one axis; before 13 the dims
from the axis on are one row, ONNX's coerced 2-D view.  The default axis is -1, but 1 for Softmax before
opset 13 (QLinearSoftmax's schema gives -1 whatever its opset: onnxruntime 1.32 runs it so).  Either runs on
the NPU over any axis: the lowering walks the rows along it in place (compiler/lowering/softmax.py), so
YOLOv8's DFL softmax over 16 channels needs no Transpose.  The arithmetic is onnxruntime's QLinearSoftmax
(compiler/ops/softmax.py): at ORT_ENABLE_ALL onnxruntime fuses DequantizeLinear -> Softmax ->
QuantizeLinear into it, bit for bit; at ORT_DISABLE_ALL it runs MLAS's float Softmax then
QuantizeLinear, a code apart on a few elements (tests/compiler/onnx/test_softmax.py checks both).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import ops
from ..errors import CompileError
from ..graph import QuantParams
from .state import Attr, Importer, Pending, Problem, Q

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

OPSET13 = 13


def _axis(node: NodeProto, axis: int, opset: int, rank: int) -> tuple[int, bool]:
    """(axis, coerced) of a softmax of a rank-`rank` tensor at `opset`; Problem for an axis out of range."""
    if not -rank <= axis < rank:
        raise Problem(node, f"axis = {axis} is out of range for an input of rank {rank}")
    axis %= rank
    return axis, opset < OPSET13 and axis < rank - 1


def _op(node: NodeProto, shape: tuple[int, ...], axis: int, coerced: bool, xq: QuantParams,
        yq: QuantParams) -> ops.Softmax:
    """The softmax op, its scales per tensor (Problem otherwise, or for any refusal of ops.softmax)."""
    for what, q in (("x", xq), ("y", yq)):
        if q.scale.ndim:
            raise Problem(node, f"{what} is quantised per channel: a softmax takes one scale")
    try:
        return ops.softmax(shape, x_scale=xq.scale, y_scale=yq.scale, zp_out=int(yq.zero_point), axis=axis,
                           coerced=coerced)
    except CompileError as exc:
        raise Problem(node, str(exc)) from None


def qlinear_softmax(im: Importer, node: NodeProto) -> None:
    """QLinearSoftmax(X, X_scale, X_zp, Y_scale, Y_zp; axis, opset) (com.microsoft)."""
    at = im.attrs(node, {"axis": Attr("int", -1), "opset": Attr("int")})   # the schema's default, any opset
    if at["opset"] is None:
        raise Problem(node, "has no opset attribute (onnxruntime requires one)")
    x = im.int8(node, 0, "X")
    xq, yq = im.params(node, 1, 2, "X"), im.params(node, 3, 4, "Y")
    shape = im.shape(x)
    axis, coerced = _axis(node, at["axis"], at["opset"], len(shape))
    op = _op(node, shape, axis, coerced, xq, yq)
    im.set(node, Q(im.emit(im.name(node), [("softmax", op, yq)], (x,), node.output[0],
                           {"op_type": node.op_type, "in_quant": [xq]})))


def softmax(im: Importer, node: NodeProto) -> None:
    """Softmax in QDQ: pending until the QuantizeLinear after it gives the output's scale."""
    opset = next((o.version for o in im.model.opset_import if o.domain in ("", "ai.onnx")), OPSET13)
    at = im.attrs(node, {"axis": Attr("int", 1 if opset < OPSET13 else -1)})
    x = im.dequantised(node, 0, "input")
    shape = im.shape(x.value)
    axis, coerced = _axis(node, at["axis"], opset, len(shape))

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        if (lo, hi) != (-128, 127):
            raise Problem(node, "a Relu or Clip after a Softmax is not supported (its codes are clamped as they are)")
        op = _op(node, shape, axis, coerced, x.q, yq)
        return im.emit(name, [("softmax", op, yq)], (x.value,), out, {"op_type": node.op_type, "in_quant": [x.q]})

    im.set(node, Pending(node, make))
