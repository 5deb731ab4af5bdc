"""The handler table: every ONNX op the importer takes, its handler, what it becomes, its inputs and domain.

A model using an op not in OPS is refused with the list of these ops.  The table is also the
source of docs/operators.md (compiler.onnx.opdoc writes it): add a row here, run `make docs`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Callable

from . import activation, conv, elementwise, fold, movement, norm, pool, quant, reduce, shape, softmax
from .state import Importer, Problem

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

MS = "com.microsoft"


FORMS = ("QOperator", "QDQ", "int8")
RUNS = ("NPU", "host", "import")


@dataclass(frozen=True)
class Op:
    """One supported ONNX op: its handler, what it becomes, its arity and domain, and its row of docs/operators.md.

    A row gives only what differs from the defaults: `forms` () means QOperator for an op of the
    com.microsoft domain or named QLinear*, QDQ (the float op between DequantizeLinear and
    QuantizeLinear) otherwise (`forms_of`); `runs` is where its work happens: "NPU", "host", or
    "import" (absorbed or folded while importing: no code of its own).
    """

    handler: Callable[[Importer, NodeProto], None]
    becomes: str                          # what it becomes in the compiler's graph
    max_inputs: int | None                # None: any number
    outputs: int = 1                      # the most outputs it may have (all but the first unused)
    domains: tuple[str, ...] = ("", "ai.onnx")
    forms: tuple[str, ...] = ()           # of FORMS: QOperator, QDQ, int8 (on the quantised tensor itself)
    constraints: str = ""                 # what the importer requires of it, beyond the activation rules
    runs: str = "NPU"                     # of RUNS
    weight: int | None = None             # the input the NPU needs constant; a node with an activation there runs on the host
    quantised: bool = False               # the NPU needs its result quantised: one that stays float runs on the host


def _float_binary(kind: str, what: str) -> Op:
    """Sub, Div, Max or Min: onnxruntime's float32 op between DequantizeLinear and QuantizeLinear."""
    return Op(elementwise.binary(kind), f"qdq_binary {kind}: onnxruntime's float32 {what} between "
              f"DequantizeLinear and QuantizeLinear, on vu.f{kind} (QDQ, two inputs; either broadcast or a constant)", 2)


def _ms(handler: Callable, becomes: str, max_inputs: int | None, **kw) -> Op:
    """An op of onnxruntime's com.microsoft domain."""
    return Op(handler, becomes, max_inputs, domains=(MS,), **kw)


_WEIGHTS = "weights int8 or uint8, symmetric (zero point 0, or 128 for uint8), per tensor or per output channel"
_ANY_FORM = ("QOperator", "QDQ", "int8")
_PATCHES = "; a patch embedding (kernel = stride, 64 taps or more, no padding) becomes transpose + dense"
_BROADCAST = ("either operand broadcast (any numpy broadcast that merges into at most three axes of (image, "
              "channel, positions): lowering.vu.broadcast_view) or a constant, the other an activation of the "
              "output's shape")

OPS: dict[str, Op] = {
    "QuantizeLinear": Op(quant.quantize_linear,
                         "graph input quantisation; requantize; the output scale of a QDQ group", 3,
                         forms=("QOperator", "QDQ"), constraints="int8 or uint8 output; per tensor (per axis on "
                         "constants); no block_size"),
    "DequantizeLinear": Op(quant.dequantize_linear,
                           "graph output dequantisation; QDQ weights, biases and activations", 3,
                           forms=("QOperator", "QDQ"), constraints="int8 or uint8 activations; int8 or uint8 "
                           "weights, int32 biases; no block_size"),
    "QLinearConv": Op(conv.qlinear_conv, "conv2d", 9, constraints="2-D (NCHW); groups, depthwise, stride, "
                      "dilation, padding, auto_pad; " + _WEIGHTS + _PATCHES, weight=3),
    "Conv": Op(conv.conv, "conv2d", 3, constraints="2-D (NCHW); groups, depthwise, stride, dilation, padding, "
               "auto_pad; " + _WEIGHTS + "; bias int32 or float; one onnxruntime runs in float32 runs on the NU's "
               "float mode (nu.fconv; a depthwise one nu.fdwconv), bit for bit" + _PATCHES, weight=1),
    "QLinearMatMul": Op(conv.qlinear_matmul, "dense", 8, constraints="A [N, K]; B a constant; " + _WEIGHTS,
                        weight=3),
    "MatMul": Op(conv.matmul, "dense", 2, constraints="A [N, K]; B a constant; " + _WEIGHTS, weight=1),
    "QGemm": _ms(conv.qgemm, "dense", 9, constraints="transA 0, alpha 1; " + _WEIGHTS, weight=3),
    "Gemm": Op(conv.gemm, "dense", 3, constraints="transA 0, alpha and beta 1; " + _WEIGHTS, weight=1),
    "QLinearAdd": _ms(elementwise.qlinear_binary("add"), "add", 8,
                      constraints=_BROADCAST + "; onnxruntime's roles of A and B kept (add_roles_swapped)"),
    "Add": Op(elementwise.binary("add"), "add, or qdq_binary qdq_add", 2, constraints=_BROADCAST + " (dequantised); "
              "QLinearAdd's roles of A and B kept where onnxruntime fuses it; where it runs the Add in float32 (a "
              "float scalar constant, or unfused): qdq_add, on vu.fsub with b's scale negated"),
    "QLinearMul": _ms(elementwise.qlinear_binary("mul"), "mul", 8,
                      constraints=_BROADCAST + "; two activations (x * sigmoid(x))"),
    "Mul": Op(elementwise.binary("mul"), "mul", 2, constraints=_BROADCAST + " (dequantised)"),
    "Relu": Op(elementwise.relu_clip, "relu, or the output range of the op before it", 1, forms=_ANY_FORM),
    "Clip": Op(elementwise.relu_clip, "clip, or the output range of the op before it", 3, forms=_ANY_FORM,
               constraints="min and max constants"),
    "QLinearGlobalAveragePool": _ms(pool.qlinear_global_average_pool, "global average pooling", 5,
                                    constraints="NCHW (channels_last 0)"),
    "GlobalAveragePool": Op(pool.global_average_pool, "global average pooling; of a float BatchNormalization: "
                            "batch_norm_global_avg (see BatchNormalization)", 1, constraints="NCHW"),
    "QLinearAveragePool": _ms(pool.qlinear_average_pool, "average pooling", 5,
                              constraints="2-D (NCHW); no dilation; ceil_mode only where it changes nothing"),
    "AveragePool": Op(pool.average_pool, "average pooling", 1,
                      constraints="2-D (NCHW); no dilation; ceil_mode only where it changes nothing"),
    "MaxPool": Op(pool.max_pool, "max_pool2d", 1, outputs=2, forms=("QDQ", "int8"),
                  constraints="2-D (NCHW); no dilation; no Indices output"),
    "Flatten": Op(shape.flatten, "reshape", 1, forms=("QDQ", "int8")),
    "Reshape": Op(shape.reshape, "reshape", 2, forms=("QDQ", "int8"), constraints="a constant shape"),
    "Squeeze": Op(shape.squeeze, "reshape", 2, forms=("QDQ", "int8"), constraints="constant axes (an input from "
                  "opset 13, an attribute before)"),
    "Unsqueeze": Op(shape.unsqueeze, "reshape", 2, forms=("QDQ", "int8"), constraints="constant axes (an input "
                    "from opset 13, an attribute before)"),
    "Concat": Op(shape.concat, "concat (inputs requantised to the output scale where they differ)", None,
                 forms=("QDQ", "int8"), constraints="an input may be a per-tensor dequantised int8 constant "
                 "(requantised at import; the concat then copies by DMA)"),
    "QLinearConcat": _ms(shape.qlinear_concat, "concat (inputs requantised to the output scale where they differ)",
                         None, constraints="an input may be an int8 or uint8 initializer (requantised at import; the "
                         "concat then copies by DMA)"),
    "Identity": Op(shape.identity, "nothing", 1, forms=_ANY_FORM, runs="import"),
    "Constant": Op(shape.constant, "a constant", 0, forms=_ANY_FORM, runs="import"),
    "Shape": Op(fold.shape, "a constant (shapes are static)", 1, forms=_ANY_FORM, runs="import"),
    "Size": Op(fold.size, "a constant (shapes are static)", 1, forms=_ANY_FORM, runs="import"),
    "Sub": _float_binary("sub", "a - b"),
    "Div": _float_binary("div", "a / b"),
    "Max": _float_binary("max", "max(a, b)"),
    "Min": _float_binary("min", "min(a, b)"),
    "ReduceMax": Op(reduce.reduce_max, "max_pool2d with the plane as its window (ReduceMax over H and W, int8 or "
                    "QDQ; keepdims = 0: then a reshape to [N, C])", 2),
    "ReduceMean": Op(reduce.reduce_mean, "reduce_mean: onnxruntime's float32 mean over H and W, summed in its "
                     "order, between DequantizeLinear and QuantizeLinear, on vu.pool.fmean (keepdims = 0: then a "
                     "reshape to [N, C])", 2, constraints="axes [2, 3] (an attribute, or an input from opset 18)"),
    "Transpose": Op(movement.transpose, "transpose (any permutation; DMA through VBUF; int8, QDQ or a folded "
                    "constant); NCHW <-> NHWC next to a conv or pool: that kernel's DDR layout, no data moved", 1),
    "Slice": Op(movement.slice_, "slice (steps, negative and clamped starts / ends; DMA through VBUF)", 5),
    "Gather": Op(movement.gather, "slice (DMA through VBUF): a scalar index then a reshape dropping the axis, or "
                 "evenly spaced indices", 2, forms=("QDQ", "int8"), weight=1,
                 constraints="constant indices one slice picks (a scalar, or a 1-D list of evenly spaced ones); "
                 "indices of a tensor run on the host"),
    "Split": Op(movement.split, "one slice per output (equal or explicit sizes, opset 13 and 18 forms)", 2,
                outputs=1 << 16),
    "Pad": Op(movement.pad, "pad, constant mode (QDQ: the constant quantised exactly, 0.0 is the zero "
              "point; DMA padding)", 4),
    "Resize": Op(movement.resize, "resize, nearest: onnxruntime's index maps for every coordinate and nearest "
                 "mode; integer upsampling or a stride per axis (DMA, repeats on chip); resize_linear, linear: "
                 "onnxruntime's bilinear arithmetic (float on int8, fixed point where it runs NHWC, float "
                 "between DequantizeLinear and QuantizeLinear) on vu.lerp", 4,
                 constraints="linear: 4-D, scales [1, 1, h, w]; half_pixel, pytorch_half_pixel, align_corners or "
                 "asymmetric; no antialias; per-tensor quantisation"),
    "BatchNormalization": Op(norm.batch_normalization, "batch_norm: onnxruntime's float32 BatchNormalization "
                             "between DequantizeLinear and QuantizeLinear (a Relu or Clip between them in its "
                             "clamp), one vu.faffine; read by a float GlobalAveragePool (through at most a Relu, "
                             "then Flatten or Reshape to its QuantizeLinear): batch_norm_global_avg, onnxruntime's "
                             "BatchNormalization, Relu and MLAS's float32 global mean as one vu.pool.faffavg", 5,
                             constraints="inference (training_mode 0, one output, spatial 1); per-tensor X; "
                             "scale, B, mean, var float32 or dequantised constants; QDQ and QOperator models "
                             "alike (quantize_static leaves it in float)", quantised=True),
}

OPS["Softmax"] = Op(softmax.softmax, "softmax on vu.softmax: onnxruntime's QLinearSoftmax arithmetic (what "
                    "ORT_ENABLE_ALL fuses DQ -> Softmax -> Q into)", 1, constraints="any axis (before opset 13: "
                    "the dims from the axis on as one row); per-tensor scales; no Relu / Clip after it")
OPS["QLinearSoftmax"] = _ms(softmax.qlinear_softmax, "softmax on vu.softmax (onnxruntime's QLinearSoftmax)", 5,
                            constraints="any axis, default -1 (opset < 13: the dims from the axis on as one "
                            "row); per-tensor scales")


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


def forms_of(name: str, op: Op) -> tuple[str, ...]:
    """The forms an op is read in: its row's, or QOperator for com.microsoft and QLinear* ops, else QDQ."""
    if op.forms:
        return op.forms
    return ("QOperator",) if MS in op.domains or name.startswith("QLinear") else ("QDQ",)


def check_arity(node: NodeProto) -> None:
    """Problem unless the node has at most its op's inputs, an output, and at most its op's outputs."""
    op = OPS[node.op_type]
    if op.max_inputs is not None and len(node.input) > op.max_inputs:
        raise Problem(node, f"has {len(node.input)} inputs, {node.op_type} takes at most {op.max_inputs}")
    if not node.output or not node.output[0]:
        raise Problem(node, "has no output")
    if len(node.output) > op.outputs:
        raise Problem(node, f"has {len(node.output)} outputs, {node.op_type} has one")


def host_reason(node: NodeProto, constant: Callable[[str], bool],
                readers: Callable[[str], list[NodeProto]] = lambda t: []) -> str:
    """Why the node runs on the host ("" if it runs on the NPU or is absorbed at import): its op type has no
    NPU lowering, or only on constants (the folded ops), or its form has none (an activation as a matmul's or
    a conv's weights; a result that stays float where the NPU needs it quantised: `readers` gives the nodes
    reading a tensor).  The one place host fallback is decided per node (compiler.onnx.placement asks it)."""
    op = OPS.get(node.op_type)
    if op is None or node.domain not in op.domains:
        if fold.folds(node) and all(constant(i) for i in node.input if i):
            return ""
        domain = f" in domain {node.domain!r}" if node.domain else ""
        if fold.folds(node):
            return f"op type {node.op_type!r} runs on the NPU only as a constant folded at import"
        return f"op type {node.op_type!r}{domain} has no NPU lowering"
    if op.weight is not None and op.weight < len(node.input) and not constant(node.input[op.weight]):
        return f"{node.op_type} of two activations (input {op.weight} is not a constant) has no NPU lowering"
    if op.quantised and stays_float(node.output[0], readers):
        return (f"{node.op_type} whose result stays float (read by other than a QuantizeLinear, after a Relu, "
                "a Clip or a view at most) has no NPU lowering")
    return ""


VIEWS = ("Reshape", "Squeeze", "Unsqueeze", "Flatten")
"""The pure views: they move no element, so a float result seen through them is rounded once by the
QuantizeLinear after them, on the NPU as in onnxruntime (shape.py)."""


def stays_float(t: str, readers: Callable[[str], list[NodeProto]]) -> bool:
    """Does the float tensor t reach a node the NPU cannot bring it to?  The NPU takes it to a QuantizeLinear
    through Relu and Clip (the clamp its op absorbs) and views (VIEWS), and, DenseNet's tail, through a float
    GlobalAveragePool after at most a Relu (norm.BatchNormPending.pooled; ops.batch_norm_global_avg).  SSD's
    box decoding Unsqueezes a float Sub before its QuantizeLinear."""
    todo = [(t, "float")]
    while todo:
        tensor, stage = todo.pop()
        for r in readers(tensor):
            nxt = _FLOAT_TAIL.get((stage, r.op_type))
            if nxt is None or r.domain not in ("", "ai.onnx"):
                return True
            if nxt != "q":
                todo.append((r.output[0], nxt))
    return False


_FLOAT_TAIL = {**{(stage, "QuantizeLinear"): "q" for stage in ("float", "relu", "clip", "pooled")},
               ("float", "Relu"): "relu", ("relu", "Relu"): "relu", ("float", "Clip"): "clip", ("relu", "Clip"): "clip",
               ("clip", "Relu"): "clip", ("clip", "Clip"): "clip",
               ("float", "GlobalAveragePool"): "pooled", ("relu", "GlobalAveragePool"): "pooled",
               **{(stage, op): "clip" for stage in ("float", "relu", "clip") for op in VIEWS},
               **{("pooled", op): "pooled" for op in ("Relu", "Clip") + VIEWS}}
"""The walk stays_float takes from a float result: (where it is, the next reader's op) -> where it is then
("q": quantised, the NPU's; "clip": past a clamp or a view, so no pool follows); a reader not listed keeps it
float."""
