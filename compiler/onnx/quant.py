"""QuantizeLinear and DequantizeLinear: where int8 tensors become float and back.

uint8 tensors become int8 ones here and in Importer.params (state.as_int8: q - 128, zero point z - 128).
A QuantizeLinear quantises a float graph input, requantises a dequantised tensor, makes the
pending float op before it (its output scale, and the range a Relu or Clip in between gave), or
quantises a float constant.  A DequantizeLinear marks an int8 tensor or constant as dequantised.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import CompileError
from ..graph import QuantParams
from .arithmetic import int8_bounds, rescale_op
from .load import type_name
from .state import DQ, Attr, Const, ConstDQ, Float, Importer, Pending, Problem, Q, as_int8, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def quantize_linear(im: Importer, node: NodeProto) -> None:
    """QuantizeLinear(x, scale, zero point) of a float input, a dequantised tensor, a float op or a constant."""
    at = im.attrs(node, {"axis": Attr("int", 1), "saturate": Attr("int", 1),
                         "output_dtype": Attr("int", 0), "block_size": Attr("int", 0)})
    if at["output_dtype"] not in (0, im.onnx.TensorProto.INT8, im.onnx.TensorProto.UINT8):
        raise Problem(node, f"output_dtype {type_name(im.onnx, at['output_dtype'])}: only int8 and uint8 are "
                      "supported")
    missing = "int8" if at["output_dtype"] == im.onnx.TensorProto.INT8 else "uint8"     # ONNX's default: uint8
    if at["block_size"]:
        raise Problem(node, f"block_size = {at['block_size']}: blocked quantisation is not supported")
    s = im.input(node, 0)
    if isinstance(s, Const):     # a float constant quantised in the graph (weights written as Q -> DQ)
        q = im.params(node, 1, 2, "quantisation", axis=at["axis"], per_channel=True, missing=missing)
        if s.array.dtype.kind != "f":
            raise Problem(node, f"quantises a constant of dtype {s.array.dtype}")
        im.set(node, Const(q.quantize(s.array) if not q.per_channel else _quantize_axis(node, s.array, q)))
        return
    q = im.params(node, 1, 2, "output", missing=missing)
    out = node.output[0]
    if im.is_uint8(node, 2, missing):
        im.uint8.add(out)
    if isinstance(s, Float):
        shape = im.float_shapes[s.name]
        if s.name in im.g.values:
            v = im.g.values[s.name]
            if not q.same_as(v.quant):
                raise Problem(node, f"graph input {s.name!r} is quantised twice with different parameters "
                              f"({v.quant} and {q})")
            im.set(node, Q(s.name))
        else:
            im.set(node, Q(im.g.input(s.name, shape, quant=q)))
            im.g.values[s.name].host_dtype = "uint8" if out in im.uint8 else ""
        im.aliases.setdefault(s.name, []).append(out)
    elif isinstance(s, DQ):
        if q.same_as(s.q):
            im.set(node, Q(s.value))
            im.aliases.setdefault(s.value, []).append(out)
        else:
            op = rescale_op(im.arithmetic, im.shape(s.value), "int8", int(s.q.zero_point), float(s.q.scale),
                            float(q.scale), int(q.zero_point), -128, 127)
            im.set(node, Q(im.emit(im.name(node), [("requant", op, q)], (s.value,), out,
                                   {"op_type": "QuantizeLinear"})))
    elif isinstance(s, Pending):
        lo, hi = int8_bounds(q, s.lo, s.hi)
        name = im.name(s.node) if s.uses == 0 else f"{im.name(s.node)}/{im.name(node)}"
        s.uses += 1
        try:
            v = s.make(q, lo, hi, out, name)
        except Problem:
            raise
        except CompileError as exc:         # an op refused its arguments: that is the float op's fault
            raise Problem(s.node, str(exc)) from None
        im.set(node, Q(v))
    else:
        raise Problem(node, f"quantises {describe(s)}: expected a float graph input, a dequantised "
                      "tensor or the output of a float op")


def _quantize_axis(node, a: np.ndarray, q: QuantParams) -> np.ndarray:
    if not -a.ndim <= q.axis < a.ndim or a.shape[q.axis] != q.scale.size:
        raise Problem(node, f"{q.scale.size} per-channel scales along axis {q.axis} of shape {a.shape}")
    return q.quantize(a)


def dequantize_linear(im: Importer, node: NodeProto) -> None:
    """DequantizeLinear(x, scale, zero point) of an int8 or uint8 tensor, of int8 or uint8 weights, of an int32 bias."""
    at = im.attrs(node, {"axis": Attr("int", 1), "block_size": Attr("int", 0),
                         "output_dtype": Attr("int", 0)})
    if at["block_size"]:
        raise Problem(node, f"block_size = {at['block_size']}: blocked quantisation is not supported")
    s = im.input(node, 0)
    if isinstance(s, Const):
        a = s.array
        if a.dtype not in (np.int8, np.uint8, np.int32):
            raise Problem(node, f"dequantises a constant of dtype {a.dtype}: expected int8 or uint8 weights or "
                          "int32 bias")
        q = im.params(node, 1, 2, "bias" if a.dtype == np.int32 else "weight",
                      dtypes=(a.dtype.name,), axis=at["axis"], per_channel=True,
                      missing=a.dtype.name)
        if a.dtype == np.uint8:
            im.uint8.add(node.output[0])        # a uint8 constant operand (Add, Mul) of a uint8 kernel
            a = as_int8(a)
        if q.per_channel and not (-a.ndim <= q.axis < a.ndim and a.shape[q.axis] == q.scale.size):
            raise Problem(node, f"{q.scale.size} per-channel scales along axis {q.axis} of a constant "
                          f"of shape {a.shape}")
        im.set(node, ConstDQ(a, q))
    elif isinstance(s, Q):
        if im.g.values[s.value].dtype != "int8":
            raise Problem(node, f"dequantises {s.value!r} of dtype {im.g.values[s.value].dtype}")
        im.set(node, DQ(s.value, im.params(node, 1, 2, "input")))
        if im.is_uint8(node, 2):
            im.uint8.add(node.output[0])
    else:
        raise Problem(node, f"dequantises {describe(s)}: expected an int8 tensor or constant")
