"""The reductions: ReduceMax over H and W (QDQ or int8), as a max pool whose window is the plane.

Max commutes with DequantizeLinear (its scale is positive), so, as for MaxPool, the reduction runs on the
int8 Value and the tensor stays dequantised at the input's parameters.  keepdims = 0 adds a Reshape to
[N, C].
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .. import ops
from ..ops import Reshape
from .state import DQ, Attr, Importer, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def reduce_max(im: Importer, node: NodeProto) -> None:
    """ReduceMax(x, axes) over H and W of an NCHW int8 or dequantised tensor: max_pool2d with kernel (H, W)."""
    at = im.attrs(node, {"axes": Attr("ints", None), "keepdims": Attr("int", 1),
                         "noop_with_empty_axes": Attr("int", 0)})
    s = im.input(node, 0)
    if not (isinstance(s, DQ) or (isinstance(s, Q) and im.g.values[s.value].dtype == "int8")):
        raise Problem(node, f"input is {describe(s)}: expected int8 or a dequantised tensor")
    shape = im.shape(s.value)
    axes = at["axes"] if at["axes"] is not None else im.const(node, 1, "axes", optional=True)
    if axes is None or len(shape) != 4 or sorted(int(a) % 4 for a in np.ravel(axes)) != [2, 3]:
        raise Problem(node, f"reduces axes {None if axes is None else [int(a) for a in np.ravel(axes)]} of a "
                      f"tensor of shape {list(shape)}: only H and W (axes [2, 3]) of an NCHW tensor are reduced")
    if at["keepdims"] not in (0, 1):
        raise Problem(node, f"keepdims = {at['keepdims']}: expected 0 or 1")
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    steps = [("max", ops.max_pool2d(shape, shape[2:], 1, 0), q)]
    if not at["keepdims"]:
        steps.append(("reshape", Reshape((shape[0], shape[1], 1, 1), shape[:2]), q))
    v = im.emit(im.name(node), steps, (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))
