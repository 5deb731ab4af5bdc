"""Unary activations as lookup tables: QLinearSigmoid / QLinearLeakyRelu, and QDQ float islands.

An int8 activation takes 256 values, so any elementwise function of it alone is a table (ops.lut, one
vu.lut).  The tables are onnxruntime's own results: the importer runs the very nodes of the model, with
onnxruntime, on the 256 codes, at ORT_DISABLE_ALL and at ORT_ENABLE_ALL (where it may fuse DQ -> op -> Q
into a QLinear op), and takes the table only if both agree and every code gives the same result
wherever it sits in the tensor (MLAS's vector bodies and scalar tails); otherwise the node is refused.

QOperator: QLinearSigmoid and QLinearLeakyRelu (com.microsoft) on an int8 tensor.

QDQ: DequantizeLinear, then an island of float elementwise nodes whose only non-constant input is that
one int8 Value (dequantised once or several times: HardSwish as x * HardSigmoid(x), SiLU as
x * Sigmoid(x), Gelu through Erf), every constant a scalar, then QuantizeLinear.  The island is a
Pending float tensor (state.Pending, its make an _Island) until the QuantizeLinear gives its output
scale; a float op on it, or on a dequantised tensor, extends it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable

import numpy as np

from .. import ops
from ..graph import QuantParams
from .state import DQ, Attr, Const, Importer, Pending, Problem, Q, as_int8

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto

CODES = np.arange(-128, 128, dtype=np.int8)
"""Every int8 code, in table order (entry k is code k - 128)."""
PROBE = np.concatenate([np.roll(CODES, k) for k in (0, 1, 3, 7, 13)] + [CODES[:5], CODES[200:217]])
"""The codes at many positions, some in an odd-length tail: a kernel's result must not depend on where."""
UNARY = ("Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "LeakyRelu", "Elu", "Selu", "Celu", "Gelu", "Erf", "Exp",
         "Log", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Neg", "Abs", "Sqrt", "Reciprocal", "Sin", "Cos",
         "Floor", "Ceil", "Round", "Sign", "Relu", "Clip", "Identity", "Cast")
"""Float elementwise ops of one input an island takes (Relu, Clip, Identity and Cast only inside one)."""
BINARY = ("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "PRelu")
"""Float elementwise ops of two inputs an island takes: both from the island, or one a scalar constant."""
INSIDE_ONLY = ("Relu", "Clip", "Identity", "Cast") + BINARY
"""Ops another handler imports outside an island: here only when an input is an island."""


@dataclass
class _Island:
    """A float tensor computed from one int8 Value by elementwise nodes; called as Pending.make."""

    im: Importer
    value: str                          # the int8 Value it is a function of
    q: QuantParams                      # that Value's dequantisation
    roots: list[str]                    # the ONNX tensors that are its DequantizeLinear outputs
    nodes: list = field(default_factory=list)

    def extended(self, node: NodeProto, other: "_Island | None" = None) -> "_Island":
        """This island with node after it (and other's nodes and roots, an island of the same Value)."""
        roots, nodes = list(self.roots), list(self.nodes)
        for r in (other.roots if other else []):
            roots += [r] if r not in roots else []
        for n in (other.nodes if other else []):
            nodes += [n] if all(n is not m for m in nodes) else []
        return _Island(self.im, self.value, self.q, roots, nodes + [node])

    def __call__(self, yq: QuantParams, lo: int, hi: int, out: str, name: str) -> str:
        """The QuantizeLinear of the island: its table, as onnxruntime computes it, on the int8 Value."""
        im = self.im
        qnode, last = _quantizer(im, out), self.nodes[-1].output[0]
        link = [] if qnode.input[0] == last else [im.onnx.helper.make_node("Identity", [last], [qnode.input[0]])]
        table = evaluate(im, self.nodes + link + [qnode], {r: self.q for r in self.roots}, out, self.nodes[-1])
        op = ops.lut(im.shape(self.value), np.clip(table, lo, hi))
        kinds = " -> ".join(n.op_type for n in self.nodes)
        return im.emit(name, [("lut", op, yq)], (self.value,), out,
                       {"op_type": f"QDQ island ({kinds})", "onnx_node": self.nodes[-1].name})


def _island(im: Importer, node: NodeProto, i: int) -> _Island | None:
    """Input i as an island: a dequantised activation starts one, an island's Pending is one; else None."""
    s = im.input(node, i)
    if isinstance(s, DQ):
        if s.q.per_channel:
            raise Problem(node, f"input {node.input[i]!r} is dequantised per channel: a table needs one scale")
        return _Island(im, s.value, s.q, [node.input[i]])
    if isinstance(s, Pending) and isinstance(s.make, _Island):
        if s.lo != -np.inf or s.hi != np.inf:      # a range another handler folded in: not a node of ours
            raise Problem(node, f"input {node.input[i]!r} is a float island with a range folded in")
        return s.make
    return None


def _scalar(im: Importer, node: NodeProto, i: int) -> bool:
    """Is input i a constant of one value (an island's only kind of other operand)?"""
    s = im.input(node, i)
    return isinstance(s, Const) and s.array.size == 1


def float_unary(im: Importer, node: NodeProto) -> None:
    """A float elementwise op of one input (Sigmoid, HardSwish, Tanh, Erf ...) on an island or a dequantised
    tensor; its other inputs (Clip's bounds) scalar constants."""
    isl = _island(im, node, 0)
    if isl is None:
        raise Problem(node, f"input {node.input[0]!r} must come from a DequantizeLinear of an int8 activation "
                      "(or a float elementwise island on one)")
    for i in range(1, len(node.input)):
        if node.input[i] and not _scalar(im, node, i):
            raise Problem(node, f"input {i} ({node.input[i]!r}) must be a scalar constant in a float island")
    if len(node.output) != 1:
        raise Problem(node, f"has {len(node.output)} outputs: an island's op has one")
    im.set(node, Pending(node, isl.extended(node)))


def float_binary(im: Importer, node: NodeProto) -> None:
    """A float op of two inputs in an island: both from islands of the same int8 Value, or one a scalar
    constant."""
    a, b = _island(im, node, 0), _island(im, node, 1)
    if a is None and b is None:
        raise Problem(node, "neither input is a float island on a dequantised activation")
    if a is not None and b is not None:
        if a.value != b.value or not a.q.same_as(b.q):
            raise Problem(node, f"its inputs are functions of two tensors ({a.value!r} and {b.value!r}): "
                          "an island has one int8 input")
        im.set(node, Pending(node, a.extended(node, b)))
        return
    k = 1 if a is not None else 0
    if not _scalar(im, node, k):
        raise Problem(node, f"input {k} ({node.input[k]!r}) must be a scalar constant in a float island "
                      "(a tensor operand makes it no function of one activation)")
    im.set(node, Pending(node, (a or b).extended(node)))


def island_or(handler: Callable[[Importer, NodeProto], None], binary: bool) -> Callable[[Importer, NodeProto], None]:
    """A handler that takes the node into a float island when an input is one, else runs `handler`."""
    def wrapped(im: Importer, node: NodeProto) -> None:
        """The node in a float island (an input is one), else its own handler."""
        isl = [i for i in range(min(len(node.input), 2 if binary else 1))
               if isinstance(im.input(node, i), Pending) and isinstance(im.input(node, i).make, _Island)]
        if not isl and not (binary and _starts_island(im, node)):
            handler(im, node)
        elif binary:
            float_binary(im, node)
        else:
            float_unary(im, node)
    wrapped.__doc__ = handler.__doc__
    return wrapped


def _starts_island(im: Importer, node: NodeProto) -> bool:
    """A binary op of a dequantised activation and a scalar constant whose result goes on to a float op (Gelu's
    x / sqrt(2) before Erf), not straight to QuantizeLinear (a QDQ Sub / Div / Add / Mul of its own)."""
    ins = [im.input(node, i) for i in range(min(len(node.input), 2))]
    one_dq = sum(isinstance(s, DQ) for s in ins) == 1 and any(_scalar(im, node, i) for i in range(len(ins)))
    return one_dq and any(op != "QuantizeLinear" for op in im.reader_ops(node.output[0]))


def island_only(im: Importer, node: NodeProto) -> None:
    """An op the importer takes only inside a float island."""
    if node.op_type in BINARY:
        float_binary(im, node)
    else:
        float_unary(im, node)


def qlinear_lookup(im: Importer, node: NodeProto) -> None:
    """QLinearSigmoid / QLinearLeakyRelu(X, X_scale, X_zp, Y_scale, Y_zp) (com.microsoft): a lut whose table
    onnxruntime's own kernel gives (QLinearLookupBase: the table it builds itself)."""
    im.attrs(node, {"alpha": Attr("float", 0.01)} if node.op_type == "QLinearLeakyRelu" else {})
    x = im.int8(node, 0, "X")
    im.params(node, 1, 2, "X")
    yq = im.params(node, 3, 4, "Y")
    table = evaluate(im, [node], {node.input[0]: None}, node.output[0], node)
    op = ops.lut(im.shape(x), table)
    im.set(node, Q(im.emit(im.name(node), [("lut", op, yq)], (x,), node.output[0], {"op_type": node.op_type})))


def _quantizer(im: Importer, out: str) -> NodeProto:
    """The model's QuantizeLinear node that writes out (the one being imported)."""
    return next(n for n in im.model.graph.node if n.op_type == "QuantizeLinear" and n.output[0] == out)


def evaluate(im: Importer, nodes: list, feeds: dict[str, QuantParams | None], out: str, blame: NodeProto) -> np.ndarray:
    """The int8[256] table of `out`: the nodes run by onnxruntime on every int8 code, fed to each tensor
    of feeds (dequantised by its QuantParams, or as int8 for None), their other inputs the model's
    scalar constants; Problem if the two optimisation levels disagree or a code's result depends on
    where it sits."""
    model = _table_model(im, nodes, feeds, out, blame)
    try:
        got = [_run(model, level) for level in ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL")]
    except Exception as exc:       # onnxruntime's own error types (Fail, InvalidGraph ...): the model's fault
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Problem(blame, f"onnxruntime cannot run it on the 256 codes: {first}") from None
    for y in got:
        by_code = {}
        for c, v in zip(PROBE.tolist(), y.tolist()):
            if by_code.setdefault(c, v) != v:
                raise Problem(blame, f"onnxruntime maps code {c} to {by_code[c]} and {v} at different "
                              "positions: no table gives its result")
    if not np.array_equal(got[0], got[1]):
        k = int(np.argmax(got[0] != got[1]))
        raise Problem(blame, f"onnxruntime maps code {int(PROBE[k])} to {int(got[0][k])} at ORT_DISABLE_ALL and "
                      f"{int(got[1][k])} at ORT_ENABLE_ALL: no one table gives its result")
    return got[0][:256].astype(np.int8)


def _table_model(im: Importer, nodes: list, feeds: dict, out: str, blame: NodeProto):
    """The ONNX model of the nodes on the codes: one input, the feeds, the scalar constants, int8 `out`."""
    onnx = im.onnx
    h = onnx.helper
    made = {o for n in nodes for o in n.output}
    inits, pre = [], []
    for k, (name, q) in enumerate(feeds.items()):
        if q is None:
            pre.append(h.make_node("Identity", ["nnp_codes"], [name]))
            continue
        s, z = f"nnp_scale_{k}", f"nnp_zp_{k}"
        inits += [onnx.numpy_helper.from_array(np.asarray(q.scale, np.float32), s),
                  onnx.numpy_helper.from_array(np.asarray(q.zero_point, np.int8), z)]
        pre.append(h.make_node("DequantizeLinear", ["nnp_codes", s, z], [name]))
    seen = set()
    for n in nodes:
        for i in n.input:
            if not i or i in made or i in feeds or i in seen:
                continue
            s = im.state.get(i)
            if not isinstance(s, Const) or s.array.size != 1:
                raise Problem(blame, f"{i!r} is not a scalar constant: a table is a function of one activation")
            # a uint8 zero point (the island's QuantizeLinear) as the importer holds uint8: q - 128
            value = as_int8(s.array) if s.array.dtype == np.uint8 else s.array
            inits.append(onnx.numpy_helper.from_array(value, i))
            seen.add(i)
    graph = h.make_graph(pre + list(nodes), "nnp_table",
                         [h.make_tensor_value_info("nnp_codes", onnx.TensorProto.INT8, [len(PROBE)])],
                         [h.make_tensor_value_info(out, onnx.TensorProto.INT8, None)], inits)
    model = h.make_model(graph, opset_imports=list(im.model.opset_import))
    model.ir_version = im.model.ir_version
    return model


def _run(model, level: str) -> np.ndarray:
    """The model run by onnxruntime at one optimisation level on PROBE."""
    import onnxruntime as ort      # optional extra, required by from_onnx

    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {"nnp_codes": PROBE})[0].ravel()
