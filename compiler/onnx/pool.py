"""Pooling: MaxPool (int8 or QDQ), AveragePool and QLinearAveragePool, GlobalAveragePool and QLinearGlobalAveragePool.

Max pooling commutes with per-tensor dequantisation and acts on the int8 Value; average pooling
takes the steps compiler.onnx.arithmetic chooses.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from .. import ops
from ..graph import QuantParams
from .arithmetic import avg_pool_ops, global_pool_ops
from .conv import geometry
from .norm import BatchNormPending
from .state import DQ, Attr, Importer, Pending, Problem, Q, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


_POOL_ATTRS = {"auto_pad": Attr("string", "NOTSET"), "ceil_mode": Attr("int", 0), "kernel_shape": Attr("ints"),
               "pads": Attr("ints"), "strides": Attr("ints"), "dilations": Attr("ints")}


def _pool_params(im: Importer, node, x: str, at: dict, *, allow_ceil: bool):
    x_shape = im.shape(x)
    if len(x_shape) != 4:
        raise Problem(node, f"input has shape {list(x_shape)}: only 2-D pooling (NCHW) is supported")
    k = at["kernel_shape"]
    if k is None or len(k) != 2 or min(k) < 1:
        raise Problem(node, f"kernel_shape = {None if k is None else list(k)}: expected 2 positive values")
    if at.get("dilations") not in (None, (1, 1)):
        raise Problem(node, f"dilations = {list(at['dilations'])}: pooling dilation is not supported")
    ceil = at.get("ceil_mode", 0)
    if ceil not in (0, 1):
        raise Problem(node, f"ceil_mode = {ceil}: expected 0 or 1")
    stride, pads, _ = geometry(node, at, x_shape[2:], tuple(k), ceil_mode=ceil)
    if ceil and not allow_ceil and pads != geometry(node, at, x_shape[2:], tuple(k))[1]:
        raise Problem(node, "ceil_mode = 1 changes the output size: not supported for average pooling")
    return x_shape, tuple(k), stride, pads


def max_pool(im: Importer, node: NodeProto) -> None:
    """MaxPool on int8 (QOperator) or on a dequantised tensor (QDQ): max_pool2d on the int8 Value."""
    at = im.attrs(node, {**_POOL_ATTRS, "storage_order": Attr("int", 0)})
    if len(node.output) > 1 and node.output[1]:
        raise Problem(node, "the Indices output is not supported")
    s = im.input(node, 0)
    if not (isinstance(s, DQ) or (isinstance(s, Q) and im.g.values[s.value].dtype == "int8")):
        raise Problem(node, f"input is {describe(s)}: expected int8 or a dequantised tensor")
    x_shape, k, stride, pads = _pool_params(im, node, s.value, at, allow_ceil=True)
    op = ops.max_pool2d(x_shape, k, stride, pads)
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    v = im.emit(im.name(node), [("max", op, q)], (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))


def average_pool(im: Importer, node: NodeProto) -> None:
    """AveragePool in QDQ: pending average pooling."""
    at = im.attrs(node, {**_POOL_ATTRS, "count_include_pad": Attr("int", 0)})
    x = im.dequantised(node, 0, "X")
    im.set(node, Pending(node, _avg_maker(im, node, x.value, x.q, at, node.input[0])))


def qlinear_average_pool(im: Importer, node: NodeProto) -> None:
    """QLinearAveragePool(x, xs, xz, ys, yz) (com.microsoft)."""
    at = im.attrs(node, {**_POOL_ATTRS, "count_include_pad": Attr("int", 0), "channels_last": Attr("int", 0)})
    if at.pop("channels_last"):
        raise Problem(node, "channels_last = 1 is not supported")
    x, xq = im.int8(node, 0, "x"), im.params(node, 1, 2, "x")
    yq = im.params(node, 3, 4, "y")
    im.note_uint8(node, ((node.input[0], 2), (node.output[0], 4)))
    im.set(node, Q(_avg_maker(im, node, x, xq, at, node.input[0])(yq, -128, 127, node.output[0], im.name(node))))


def _avg_maker(im: Importer, node, x: str, xq: QuantParams, at: dict, x_onnx: str):
    """make(yq, lo, hi, out, name) of the pool; x_onnx: its input as ONNX names it (Importer.uint8_kernel)."""
    x_shape, k, stride, pads = _pool_params(im, node, x, at, allow_ceil=False)
    cip = at["count_include_pad"]
    if cip not in (0, 1):
        raise Problem(node, f"count_include_pad = {cip}: expected 0 or 1")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        ql = quantize_linear_pool(im, node)
        uint8 = not ql and im.uint8_kernel((x_onnx, out), node if _asks_ort(im, node) else None)
        steps = avg_pool_ops(im.arithmetic, x_shape, k, stride, pads, bool(cip), xq, yq, lo, hi, uint8, ql)
        return im.emit(name, steps, (x,), out, {"op_type": node.op_type, "in_quant": [xq]})
    return make


def _asks_ort(im: Importer, node: NodeProto) -> bool:
    """Is this a QDQ AveragePool whose kernel onnxruntime's optimised graph tells (a static graph: the float
    forms of a dynamic one are QLinearAveragePool's)?"""
    return node.op_type == "AveragePool" and im.arithmetic == "onnxruntime" and not im.dynamic


def quantize_linear_pool(im: Importer, node: NodeProto) -> bool:
    """Does onnxruntime run this QDQ AveragePool unfused, a float AveragePool then QuantizeLinear, which rounds
    before it adds the zero point (an int8 model's pool whose QuantizeLinear several DequantizeLinears read:
    DenseNet's transitions)?  Its NCHWc kernel sums the window in order, as vu.pool.favg does; MLAS's plain
    kernel (channels not a multiple of its block) adds each column's rows first, a float32 rounding apart."""
    return _asks_ort(im, node) and im.ort_kernel(node) in ("nchwc", "float")


def global_average_pool(im: Importer, node: NodeProto) -> None:
    """GlobalAveragePool in QDQ: pending global average pooling; of a pending BatchNormalization (DenseNet's
    float tail): the pending pooled BatchNormalization."""
    im.attrs(node, {})
    s = im.input(node, 0)
    if isinstance(s, BatchNormPending):
        im.set(node, Pending(node, s.pooled(node)))
        return
    x = im.dequantised(node, 0, "X")
    im.set(node, Pending(node, _gap_maker(im, node, x.value, x.q)))


def qlinear_global_average_pool(im: Importer, node: NodeProto) -> None:
    """QLinearGlobalAveragePool(x, xs, xz, ys, yz) (com.microsoft)."""
    at = im.attrs(node, {"channels_last": Attr("int", 0)})
    if at["channels_last"]:
        raise Problem(node, "channels_last = 1 is not supported")
    x, xq = im.int8(node, 0, "x"), im.params(node, 1, 2, "x")
    yq = im.params(node, 3, 4, "y")
    im.set(node, Q(_gap_maker(im, node, x, xq)(yq, -128, 127, node.output[0], im.name(node))))


def _gap_maker(im: Importer, node, x: str, xq: QuantParams):
    x_shape = im.shape(x)
    if len(x_shape) != 4:
        raise Problem(node, f"input has shape {list(x_shape)}: only NCHW is supported")

    def make(yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        steps = global_pool_ops(im.arithmetic, x_shape, xq, yq, lo, hi)
        return im.emit(name, steps, (x,), out, {"op_type": node.op_type, "in_quant": [xq]})
    return make

