"""The reductions over H and W: ReduceMax (QDQ or int8), a max pool whose window is the plane, and ReduceMean
(QDQ), onnxruntime's float32 mean between DequantizeLinear and QuantizeLinear (ops.reduce_mean).

Max commutes with DequantizeLinear (its scale is positive), so, as for MaxPool, the reduction runs on the
int8 Value and the tensor stays dequantised at the input's parameters.  The mean waits for the
QuantizeLinear after it (a Pending op), whose scale it quantises to; a Relu or Clip in between narrows the
output range.  keepdims = 0 adds a Reshape to [N, C].
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from ..graph import QuantParams
from ..ops import Reshape
from .arithmetic import INT8
from .state import DQ, Attr, Importer, Pending, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def _plane(im: Importer, node: NodeProto, shape: tuple[int, ...]) -> bool:
    """Check that the node reduces H and W (axes [2, 3] or [-2, -1], as an attribute or, from opset 18, an
    input) of an NCHW tensor; return keepdims."""
    at = im.attrs(node, {"axes": Attr("ints", None), "keepdims": Attr("int", 1),
                         "noop_with_empty_axes": Attr("int", 0)})
    axes = at["axes"] if at["axes"] is not None else im.const(node, 1, "axes", optional=True)
    if axes is None or len(shape) != 4 or sorted(int(a) % 4 for a in np.ravel(axes)) != [2, 3]:
        raise Problem(node, f"reduces axes {None if axes is None else [int(a) for a in np.ravel(axes)]} of a "
                      f"tensor of shape {list(shape)}: only H and W (axes [2, 3]) of an NCHW tensor are reduced")
    if at["keepdims"] not in (0, 1):
        raise Problem(node, f"keepdims = {at['keepdims']}: expected 0 or 1")
    return bool(at["keepdims"])


def _flatten(shape: tuple[int, ...], keepdims: bool, q: QuantParams) -> list:
    """keepdims = 0: the step that drops the reduced axes ([N, C, 1, 1] -> [N, C])."""
    return [] if keepdims else [("reshape", Reshape((shape[0], shape[1], 1, 1), shape[:2]), q)]


def reduce_max(im: Importer, node: NodeProto) -> None:
    """ReduceMax(x, axes) over H and W of an NCHW int8 or dequantised tensor: max_pool2d with kernel (H, W)."""
    s = im.input(node, 0)
    if not (isinstance(s, DQ) or (isinstance(s, Q) and im.g.values[s.value].dtype == "int8")):
        raise Problem(node, f"input is {describe(s)}: expected int8 or a dequantised tensor")
    shape = im.shape(s.value)
    keepdims = _plane(im, node, shape)
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    steps = [("max", ops.max_pool2d(shape, shape[2:], 1, 0), q)] + _flatten(shape, keepdims, q)
    v = im.emit(im.name(node), steps, (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))


def reduce_mean(im: Importer, node: NodeProto) -> None:
    """ReduceMean(x, axes) over H and W of a dequantised NCHW tensor: a pending reduce_mean, made at the
    QuantizeLinear after it."""
    s = im.input(node, 0)
    if not isinstance(s, DQ):
        raise Problem(node, f"input is {describe(s)}: expected a dequantised tensor (DequantizeLinear -> "
                      "ReduceMean -> QuantizeLinear)")
    shape = im.shape(s.value)
    keepdims = _plane(im, node, shape)

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        op = ops.reduce_mean(shape, x_zp=int(s.q.zero_point), scale_x=s.q.scale, scale_out=yq.scale,
                             zp_out=int(yq.zero_point))
        steps = [("mean", op, yq)]
        if (lo, hi) != INT8:        # a Relu or Clip between the mean and its QuantizeLinear
            steps.append(("clip", ops.clip(op.output.shape, lo, hi), yq))
        info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [s.q]}
        return im.emit(name, steps + _flatten(shape, keepdims, yq), (s.value,), out, info)
    im.set(node, Pending(node, make))
