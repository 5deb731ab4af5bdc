"""The handler table: every ONNX op the importer takes, its handler, what it becomes, its inputs and domain.

A model using an op not in OPS is refused with the list of these ops.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from . import activation, conv, elementwise, pool, quant, shape
from .state import Importer, Problem

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

MS = "com.microsoft"


@dataclass(frozen=True)
class Op:
    """One supported ONNX op."""

    handler: Callable[[Importer, NodeProto], None]
    becomes: str                          # what it becomes in the compiler's graph
    max_inputs: int | None                # None: any number
    outputs: int = 1                      # the most outputs it may have (all but the first unused)
    domains: tuple[str, ...] = ("", "ai.onnx")


def _ms(handler: Callable, becomes: str, max_inputs: int | None) -> Op:
    """An op of onnxruntime's com.microsoft domain."""
    return Op(handler, becomes, max_inputs, domains=(MS,))


OPS: dict[str, Op] = {
    "QuantizeLinear": Op(quant.quantize_linear,
                         "graph input quantisation; requantize; the output scale of a QDQ group", 3),
    "DequantizeLinear": Op(quant.dequantize_linear,
                           "graph output dequantisation; QDQ weights, biases and activations", 3),
    "QLinearConv": Op(conv.qlinear_conv, "conv2d (groups, depthwise, stride, dilation, padding)", 9),
    "Conv": Op(conv.conv, "conv2d (QDQ)", 3),
    "QLinearMatMul": Op(conv.qlinear_matmul, "dense", 8),
    "MatMul": Op(conv.matmul, "dense (QDQ)", 2),
    "QGemm": _ms(conv.qgemm, "dense (com.microsoft)", 9),
    "Gemm": Op(conv.gemm, "dense (QDQ)", 3),
    "QLinearAdd": _ms(elementwise.qlinear_binary("add"), "add (com.microsoft)", 8),
    "Add": Op(elementwise.binary("add"), "add (QDQ)", 2),
    "QLinearMul": _ms(elementwise.qlinear_binary("mul"), "mul (com.microsoft)", 8),
    "Mul": Op(elementwise.binary("mul"), "mul (QDQ)", 2),
    "Relu": Op(elementwise.relu_clip, "relu, or the output range of the op before it", 1),
    "Clip": Op(elementwise.relu_clip, "clip, or the output range of the op before it", 3),
    "QLinearGlobalAveragePool": _ms(pool.qlinear_global_average_pool, "global average pooling (com.microsoft)", 5),
    "GlobalAveragePool": Op(pool.global_average_pool, "global average pooling (QDQ)", 1),
    "QLinearAveragePool": _ms(pool.qlinear_average_pool, "average pooling (com.microsoft)", 5),
    "AveragePool": Op(pool.average_pool, "average pooling (QDQ)", 1),
    "MaxPool": Op(pool.max_pool, "max_pool2d (int8 or QDQ)", 1, outputs=2),
    "Flatten": Op(shape.flatten, "reshape", 1),
    "Reshape": Op(shape.reshape, "reshape", 2),
    "Concat": Op(shape.concat, "concat (inputs requantised to the output scale where they differ)", None),
    "QLinearConcat": _ms(shape.qlinear_concat, "concat (com.microsoft)", None),
    "Identity": Op(shape.identity, "nothing", 1),
    "Constant": Op(shape.constant, "a constant", 0),
}


# unary activations as lookup tables (activation.py): the QLinear ops, the float ops of a QDQ island,
# and the ops other handlers import that join an island when an input is one (wrapped, so keep this last)
OPS["QLinearSigmoid"] = _ms(activation.qlinear_lookup, "lut: onnxruntime's table of the 256 codes (com.microsoft)", 5)
OPS["QLinearLeakyRelu"] = _ms(activation.qlinear_lookup, "lut: onnxruntime's table of the 256 codes (com.microsoft)",
                              5)
for _t in activation.UNARY + activation.BINARY:
    if _t in OPS and _t in activation.INSIDE_ONLY:
        OPS[_t] = replace(OPS[_t], handler=activation.island_or(OPS[_t].handler, _t in activation.BINARY),
                          becomes=OPS[_t].becomes + "; inside a QDQ float island, part of its lut")
    elif _t not in OPS:
        OPS[_t] = Op(activation.island_only if _t in activation.INSIDE_ONLY else activation.float_unary,
                     ("only inside a QDQ float island: part of its lut" if _t in activation.INSIDE_ONLY else
                      "lut (QDQ): the float elementwise island it starts or extends, DequantizeLinear to "
                      "QuantizeLinear, as one table onnxruntime computes"), 3 if _t == "Clip" else 2 if _t in
                     activation.BINARY else 1, domains=("", "ai.onnx", MS) if _t == "Gelu" else ("", "ai.onnx"))

def check_arity(node: NodeProto) -> None:
    """Problem unless the node has at most its op's inputs, an output, and at most its op's outputs."""
    op = OPS[node.op_type]
    if op.max_inputs is not None and len(node.input) > op.max_inputs:
        raise Problem(node, f"has {len(node.input)} inputs, {node.op_type} takes at most {op.max_inputs}")
    if not node.output or not node.output[0]:
        raise Problem(node, "has no output")
    if len(node.output) > op.outputs:
        raise Problem(node, f"has {len(node.output)} outputs, {node.op_type} has one")
