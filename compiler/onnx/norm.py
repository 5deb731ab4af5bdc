"""BatchNormalization left in the graph (one no conv absorbs: after a Concat, as in DenseNet), as ops.batch_norm.

quantize_static leaves it in float, in QDQ and QOperator models alike: DequantizeLinear, BatchNormalization,
perhaps a Relu or Clip, QuantizeLinear.  It becomes a Pending float op (so the Relu narrows its clamp) that
the QuantizeLinear makes into one batch_norm, on vu.faffine.  Its parameters are float32 constants or
dequantised constants (the quantizer writes B and mean as int32 biases, scale and var as weights), taken as
onnxruntime's DequantizeLinear computes them.

DenseNet's last one feeds a float GlobalAveragePool, perhaps through a Relu (DequantizeLinear,
BatchNormalization, Relu, GlobalAveragePool, Flatten, QuantizeLinear in its QOperator form): the pool takes
the pending BatchNormalization whole (BatchNormPending.pooled) and becomes one pending
batch_norm_global_avg, on vu.pool.faffavg, so no float value leaves the VU.  Which such islands the NPU
takes is decided in registry.host_reason.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import ops
from ..graph import QuantParams
from .arithmetic import INT8
from .state import Attr, Const, ConstDQ, Importer, Pending, Problem, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

PARAMS = ((1, "scale"), (2, "B"), (3, "input_mean"), (4, "input_var"))
"""BatchNormalization's parameter inputs, by index and the name the ONNX spec gives them."""


def batch_normalization(im: Importer, node: NodeProto) -> None:
    """BatchNormalization(X, scale, B, input_mean, input_var) in inference on a dequantised activation."""
    at = im.attrs(node, {"epsilon": Attr("float", 1e-5), "momentum": Attr("float", 0.9),
                         "training_mode": Attr("int", 0), "spatial": Attr("int", 1)})
    if at["training_mode"] != 0:
        raise Problem(node, f"training_mode = {at['training_mode']}: only inference (training_mode 0) is imported")
    if at["spatial"] != 1:
        raise Problem(node, f"spatial = {at['spatial']}: only spatial 1 (one mean and variance per channel)")
    if len(node.input) != 5:
        raise Problem(node, f"has {len(node.input)} inputs: BatchNormalization takes X, scale, B, mean and var")
    x = im.dequantised(node, 0, "X")
    if x.q.per_channel:
        raise Problem(node, f"X is dequantised per channel ({x.q}): a per-tensor activation is expected")
    shape = im.shape(x.value)
    if len(shape) < 2:
        raise Problem(node, f"X has shape {list(shape)}: BatchNormalization needs a channel axis (axis 1)")
    scale, bias, mean, var = (_param(im, node, i, what, shape[1]) for i, what in PARAMS)

    params = {"scale": scale, "bias": bias, "mean": mean, "var": var, "epsilon": at["epsilon"],
              "za": int(x.q.zero_point), "scale_x": x.q.scale}
    info = {"op_type": node.op_type, "onnx_node": node.name, "in_quant": [x.q]}

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        op = ops.batch_norm(shape, **params, scale_out=yq.scale, zp_out=int(yq.zero_point), lo=lo, hi=hi)
        return im.emit(name, [("batch_norm", op, yq)], (x.value,), out, info)

    def pool(gap, relu: bool) -> Callable:
        """make() of QuantizeLinear(GlobalAveragePool(gap) of this op, through a Relu if relu)."""
        if len(shape) != 4:
            raise Problem(gap, f"pools a BatchNormalization of shape {list(shape)}: only NCHW is pooled")

        def made(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
            op = ops.batch_norm_global_avg(shape, **params, scale_out=yq.scale, zp_out=int(yq.zero_point),
                                           relu=relu)
            steps = [("bnavg", op, yq)]
            if (lo, hi) != INT8:        # a Relu or Clip after the pool
                steps.append(("clip", ops.clip(op.output.shape, lo, hi), yq))
            return im.emit(name, steps, (x.value,), out, {**info, "op_type": "GlobalAveragePool",
                                                          "onnx_node": gap.name})
        return made
    im.set(node, BatchNormPending(node, make, pool=pool))


@dataclass
class BatchNormPending(Pending):
    """A pending BatchNormalization, which a float GlobalAveragePool after it may take whole (pooled)."""

    pool: Callable | None = None     # (the pool's node, relu) -> make of the pooled op

    def pooled(self, gap) -> Callable:
        """make() of QuantizeLinear(GlobalAveragePool(this)), a Problem unless only a Relu lies between."""
        if (self.lo, self.hi) not in ((-math.inf, math.inf), (0.0, math.inf)):
            raise Problem(gap, f"pools a BatchNormalization clipped to [{self.lo}, {self.hi}]: only a Relu may lie "
                          "between them")
        return self.pool(gap, self.lo == 0.0)


def _param(im: Importer, node, i: int, what: str, channels: int) -> np.ndarray:
    """A parameter as the float32 values onnxruntime reads: a float32 constant, or a dequantised one."""
    s = im.input(node, i)
    if isinstance(s, ConstDQ):
        a = s.q.dequantize(s.array)
    elif isinstance(s, Const) and s.array.dtype == np.float32:
        a = s.array
    else:
        raise Problem(node, f"{what} ({node.input[i]!r}) must be a float32 constant or a dequantised constant, "
                      f"got {describe(s)}")
    if a.shape != (channels,):
        raise Problem(node, f"{what} has shape {list(a.shape)}: expected one value per channel, [{channels}]")
    return a
