"""The data-movement ops: Transpose, Slice, Split, Gather (constant indices), Pad (constant), nearest and linear
Resize.

Each moves elements without arithmetic, so it commutes with per-tensor dequantisation: on an int8
tensor (QOperator) or on a dequantised one (QDQ: DQ -> op -> Q) it becomes the same op on the int8
Value, keeping its quantisation.  A constant input is folded.  Pad's constant is quantised with
the input's parameters and must come back exactly (0.0 is the zero point); Resize takes onnxruntime's
index maps (compiler.ops.nearest_map), so the int8 result is what onnxruntime computes on int8 and,
nearest picking values rather than mixing them, on the dequantised floats.

A linear Resize mixes values, so it is onnxruntime's arithmetic (compiler.ops.resize_linear): on an int8
(or uint8) tensor its float kernel, or its fixed-point one where its layout pass runs the Resize in NHWC
(ort_layout asks onnxruntime which, at its default level); between DequantizeLinear and QuantizeLinear
the float kernel on the dequantised values, pending until the QuantizeLinear gives the output scale.

A Gather of a tensor with constant indices that one slice picks (a scalar index, then a reshape dropping the axis:
SSD's boxes of its one image; or evenly spaced indices) is that slice; other indices are refused.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np

from ..errors import CompileError
from ..graph import QuantParams
from ..ops import Op, Pad, Reshape, Transpose, resize_linear, resize_nearest, slice_op
from .ort_layout import resize_layouts
from .state import DQ, Attr, Const, Importer, Pending, Problem, Q, brief, describe

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import NodeProto


def _source(im: Importer, node: NodeProto) -> tuple[object, tuple[int, ...], str]:
    """(state, shape, dtype) of a movement op's data input: int8 / int32, dequantised, or a constant."""
    s = im.input(node, 0)
    if isinstance(s, Const):
        return s, tuple(s.array.shape), str(s.array.dtype)
    if isinstance(s, (Q, DQ)):
        v = im.g.values[s.value]
        return s, tuple(v.shape), v.dtype
    raise Problem(node, f"input is {describe(s)}: expected an int8 tensor, a dequantised one or a constant")


def _emit(im: Importer, node: NodeProto, s, op: Op, out: str, name: str) -> None:
    """The op on the int8 Value behind s, its result recorded for ONNX tensor `out`."""
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    try:
        v = im.emit(name, [(op.kind, op, q)], (s.value,), out, {"op_type": node.op_type},
                    int8_in_onnx=isinstance(s, Q))
    except CompileError as exc:
        raise Problem(node, str(exc)) from None
    im.state[out] = DQ(v, s.q) if isinstance(s, DQ) else Q(v)


def _moved(im: Importer, node: NodeProto, make: Callable[[tuple[int, ...], str], Op]) -> None:
    """Import a one-output movement node: the op make(shape, dtype) on its input (folded if constant)."""
    s, shape, dtype = _source(im, node)
    try:
        op = make(shape, "int8" if isinstance(s, Const) else dtype)
    except CompileError as exc:
        raise Problem(node, str(exc)) from None
    if isinstance(s, Const):
        im.set(node, Const(np.ascontiguousarray(op._compute(s.array))))
        return
    _emit(im, node, s, op, node.output[0], im.name(node))


def transpose(im: Importer, node: NodeProto) -> None:
    """Transpose(perm; default: the axes reversed)."""
    at = im.attrs(node, {"perm": Attr("ints")})
    _moved(im, node, lambda shape, dt: Transpose(shape, at["perm"] if at["perm"] is not None
                                                 else tuple(range(len(shape)))[::-1], dt))


def _ints(im: Importer, node: NodeProto, i: int, what: str, optional: bool = False) -> tuple[int, ...] | None:
    a = im.const(node, i, what, optional=optional)
    if a is None:
        return None
    if a.dtype not in (np.int32, np.int64) or a.ndim != 1:
        raise Problem(node, f"{what} must be a 1-D int32 / int64 constant, got {a.dtype} {list(a.shape)}")
    return tuple(int(v) for v in a)


def slice_(im: Importer, node: NodeProto) -> None:
    """Slice(data, starts, ends, axes, steps), opset 10 on: clamped and negative as ONNX defines."""
    im.attrs(node, {})
    starts, ends = _ints(im, node, 1, "starts"), _ints(im, node, 2, "ends")
    axes, steps = _ints(im, node, 3, "axes", True), _ints(im, node, 4, "steps", True)
    _moved(im, node, lambda shape, dt: slice_op(shape, starts, ends, axes, steps, dt))


def gather(im: Importer, node: NodeProto) -> None:
    """Gather(data, indices) along `axis` with constant indices one slice picks: a scalar (then a reshape dropping
    the axis) or a 1-D run of evenly spaced indices (negative ones counting from the end)."""
    at = im.attrs(node, {"axis": Attr("int", 0)})
    idx = im.const(node, 1, "indices")
    s, shape, dtype = _source(im, node)       # constant data with constant indices was folded (fold.py)
    n = len(shape)
    if not -n <= at["axis"] < n:
        raise Problem(node, f"axis = {at['axis']} is outside the input's {n} dimensions")
    axis, d = at["axis"] % n, shape[at["axis"] % n]
    flat = [int(v) for v in np.ravel(idx)]
    if idx.dtype not in (np.int32, np.int64) or idx.ndim > 1 or not flat or any(not -d <= v < d for v in flat):
        raise Problem(node, f"indices {brief(idx)} ({idx.dtype} {list(idx.shape)}): expected int32 / int64 indices "
                      f"in [-{d}, {d}) as a scalar or a 1-D list")
    first, *rest = [v % d for v in flat]
    step = rest[0] - first if rest else 1
    if step == 0 or any(b - a != step for a, b in zip([first, *rest], rest)):
        raise Problem(node, f"indices {brief(idx)}: the NPU gathers a scalar index or evenly spaced ones (one slice)")
    last = first + step * len(rest)
    end = last + 1 if step > 0 else (last - 1 if last > 0 else -d - 1)     # ONNX's end past the first element
    try:
        cut = slice_op(shape, (first,), (end,), (axis,), (step,), dtype)
    except CompileError as exc:
        raise Problem(node, str(exc)) from None
    out_shape = shape[:axis] + tuple(idx.shape) + shape[axis + 1:]
    steps = [("slice", cut)] + ([("view", Reshape(cut.output.shape, out_shape, dtype))] if idx.ndim == 0 else [])
    q = s.q if isinstance(s, DQ) else im.g.values[s.value].quant
    v = im.emit(im.name(node), [(k, op, q) for k, op in steps], (s.value,), node.output[0], {"op_type": node.op_type},
                int8_in_onnx=isinstance(s, Q))
    im.set(node, DQ(v, s.q) if isinstance(s, DQ) else Q(v))


def split(im: Importer, node: NodeProto) -> None:
    """Split(input, split) along `axis`: explicit sizes (an input from opset 13, an attribute before),
    else equal parts (num_outputs from opset 18; the last part smaller when the axis does not divide)."""
    at = im.attrs(node, {"axis": Attr("int", 0), "split": Attr("ints"), "num_outputs": Attr("int")})
    sizes = _ints(im, node, 1, "split", True) if len(node.input) > 1 and node.input[1] else at["split"]
    s, shape, dtype = _source(im, node)
    n = len(shape)
    if not -n <= at["axis"] < n:
        raise Problem(node, f"axis = {at['axis']} is outside the input's {n} dimensions")
    axis, k = at["axis"] % n, len(node.output)
    d = shape[axis]
    if sizes is None:
        parts = at["num_outputs"] or k
        if parts != k:
            raise Problem(node, f"num_outputs = {parts} but the node has {k} outputs")
        each = -(-d // parts)
        sizes = tuple(min(each, d - j * each) for j in range(parts))
    if len(sizes) != k or sum(sizes) != d or min(sizes) < 1:
        raise Problem(node, f"split sizes {list(sizes)} do not cut axis {axis} of {d} into the node's {k} outputs")
    at0 = 0
    for j, (size, out) in enumerate(zip(sizes, node.output)):
        try:
            op = slice_op(shape, (at0,), (at0 + size,), (axis,), None, "int8" if isinstance(s, Const) else dtype)
        except CompileError as exc:
            raise Problem(node, str(exc)) from None
        at0 += size
        if not out:
            continue
        if isinstance(s, Const):
            im.state[out] = Const(np.ascontiguousarray(op._compute(s.array)))
        else:
            _emit(im, node, s, op, out, f"{im.name(node)}/{j}")


def pad(im: Importer, node: NodeProto) -> None:
    """Pad(data, pads, constant_value, axes), mode constant; on a dequantised input the constant is
    quantised with the input's parameters (it must be one of its values: 0.0 is the zero point)."""
    at = im.attrs(node, {"mode": Attr("string", "constant")})
    if at["mode"] != "constant":
        raise Problem(node, f"mode {at['mode']!r}: only constant padding is supported")
    s, shape, dtype = _source(im, node)
    pads = _ints(im, node, 1, "pads")
    axes = _ints(im, node, 3, "axes", True)
    n = len(shape)
    if axes is not None:
        if len(pads) != 2 * len(axes):
            raise Problem(node, f"pads has {len(pads)} entries for {len(axes)} axes")
        full = [0] * (2 * n)
        for j, a in enumerate(axes):
            if not -n <= a < n:
                raise Problem(node, f"axis {a} is outside the input's {n} dimensions")
            full[a % n], full[a % n + n] = pads[j], pads[j + len(axes)]
        pads = tuple(full)
    value = im.const(node, 2, "constant_value", optional=True)
    value = np.zeros((), np.float32 if isinstance(s, DQ) else dtype) if value is None else value.reshape(-1)[:1]
    q = _pad_value(node, s, value)
    _moved(im, node, lambda shape, dt: Pad(shape, pads, q, dt))


def _pad_value(node: NodeProto, s, value: np.ndarray) -> int:
    """Pad's constant as the int8 the tensor holds: the value itself on an integer tensor, quantised
    (exactly) on a dequantised one."""
    v = np.asarray(value).reshape(-1)
    v = v[0] if v.size else 0
    if isinstance(s, Const):
        if np.asarray(v).dtype.kind == "f":
            raise Problem(node, "padding a float constant is not supported")
        return int(v)
    if isinstance(s, DQ):
        scale, zp = np.float32(s.q.scale), int(s.q.zero_point)
        qv = int(np.clip(np.rint(np.float32(v) / scale) + zp, -128, 127))
        if np.float32((qv - zp) * scale) != np.float32(v):
            raise Problem(node, f"constant_value {np.format_float_positional(np.float32(v))} is not a value of the int8 tensor (scale "
                          f"{np.format_float_positional(scale)}, zero point {zp})")
        return qv
    if np.asarray(v).dtype.kind == "f":
        raise Problem(node, f"constant_value {v} is a float, the input an integer tensor")
    return int(v)


def resize(im: Importer, node: NodeProto) -> None:
    """Resize(X, roi, scales, sizes), mode nearest (onnxruntime's index maps) or linear (its arithmetic),
    opset 11 on."""
    at = im.attrs(node, {"mode": Attr("string", "nearest"),
                         "coordinate_transformation_mode": Attr("string", "half_pixel"),
                         "nearest_mode": Attr("string", "round_prefer_floor"),
                         "cubic_coeff_a": Attr("float", -0.75), "exclude_outside": Attr("int", 0),
                         "extrapolation_value": Attr("float", 0.0), "antialias": Attr("int", 0),
                         "keep_aspect_ratio_policy": Attr("string", "stretch"), "axes": Attr("ints")})
    if at["mode"] not in ("nearest", "linear"):
        raise Problem(node, f"mode {at['mode']!r}: only nearest and linear are supported")
    if at["keep_aspect_ratio_policy"] != "stretch" or at["axes"] is not None:
        raise Problem(node, "keep_aspect_ratio_policy and axes are not supported")
    s, shape, _ = _source(im, node)
    out, f = _resize_size(im, node, shape)
    mode = at["coordinate_transformation_mode"]
    if at["mode"] == "linear":
        _linear(im, node, s, shape, out, f, mode, at)
        return
    _moved(im, node, lambda shape, dt: resize_nearest(shape, out, f, mode, at["nearest_mode"], dt))


def _resize_size(im: Importer, node: NodeProto, shape: tuple[int, ...]) -> tuple[tuple[int, ...], list]:
    """(output shape, float32 scales) from the scales or sizes input, as onnxruntime derives each from the other."""
    scales = im.const(node, 2, "scales", optional=True) if len(node.input) > 2 and node.input[2] else None
    sizes = _ints(im, node, 3, "sizes", True) if len(node.input) > 3 and node.input[3] else None
    if (scales is None or scales.size == 0) == (sizes is None):
        raise Problem(node, "give exactly one of scales and sizes")
    if sizes is not None:
        if len(sizes) != len(shape):
            raise Problem(node, f"sizes {list(sizes)} for an input of {len(shape)} dimensions")
        return tuple(sizes), [np.float32(o) / np.float32(i) for o, i in zip(sizes, shape)]
    f = [np.float32(v) for v in scales.reshape(-1)]
    if len(f) != len(shape) or min(f) <= 0:
        raise Problem(node, f"scales {[float(v) for v in f]} for an input of {len(shape)} dimensions")
    return tuple(int(np.float32(v) * np.float32(d)) for v, d in zip(f, shape)), f


def _linear(im: Importer, node: NodeProto, s, shape, out, f, mode: str, at: dict) -> None:
    """A linear Resize: on the int8 tensor now, or pending its QuantizeLinear on a dequantised one."""
    if at["antialias"] or at["exclude_outside"]:
        raise Problem(node, "antialias and exclude_outside are not supported for a linear resize")
    if isinstance(s, Const):
        raise Problem(node, "a linear resize of a constant is not supported")
    if isinstance(s, Q) and im.g.values[s.value].dtype != "int8":
        raise Problem(node, f"a linear resize of an {im.g.values[s.value].dtype} tensor is not supported")
    if isinstance(s, DQ) and s.q.per_channel:
        raise Problem(node, "a linear resize of a per-channel dequantised tensor is not supported")
    layout = _layout(im, node)

    def make(yq: QuantParams | None, lo: int, hi: int, name_out: str, name: str) -> str:
        if yq is None:          # on the int8 tensor: onnxruntime's int8 (uint8) kernel
            off = -128 if _uint8_tensor(im, node.input[0]) else 0
            kw = dict(za=off, zp_out=off)
        else:
            kw = dict(quantized=True, za=int(s.q.zero_point), zp_out=int(yq.zero_point), scale_in=s.q.scale,
                      scale_out=yq.scale, lo=lo, hi=hi)
        try:
            op = resize_linear(shape, out, f, mode, layout=layout, **kw)
        except CompileError as exc:
            raise Problem(node, str(exc)) from None
        q = yq if yq is not None else im.g.values[s.value].quant
        return im.emit(name, [(op.kind, op, q)], (s.value,), name_out, {"op_type": node.op_type},
                       int8_in_onnx=yq is None)
    if isinstance(s, DQ):
        im.set(node, Pending(node, make))
        return
    im.set(node, Q(make(None, -128, 127, node.output[0], im.name(node))))


def _layout(im: Importer, node: NodeProto) -> str:
    """The layout onnxruntime runs this Resize in at its default level (asked once per model)."""
    if im.resize_layouts is None:
        try:
            im.resize_layouts = resize_layouts(im.onnx, im.model)
        except Exception as exc:       # onnxruntime's own error types: the model's fault
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise Problem(node, f"onnxruntime cannot optimise the model to tell how it runs this resize: "
                          f"{first}") from None
    if node.name not in im.resize_layouts:
        raise Problem(node, f"onnxruntime's optimised graph has no Resize named {node.name!r} of one layout "
                      "(unnamed or same-named Resizes in different layouts): its arithmetic is unknown")
    return im.resize_layouts[node.name]


QUANTISED_OUTPUT = {"QuantizeLinear": 2, "QLinearConv": 7, "QLinearMatMul": 7, "QGemm": 8, "QLinearAdd": 7,
                    "QLinearMul": 7, "QLinearConcat": 1, "QLinearAveragePool": 4, "QLinearGlobalAveragePool": 4,
                    "QLinearSigmoid": 4, "QLinearLeakyRelu": 4}
"""The input holding the output's zero point of each op writing a quantised tensor (others keep their input's)."""


def _uint8_tensor(im: Importer, name: str) -> bool:
    """Is the quantised ONNX tensor uint8 (its writer's output zero point, back through the ops that keep
    their input's type)?"""
    writers = {o: n for n in im.model.graph.node for o in n.output}
    while name in writers and name not in im.uint8:
        node = writers[name]
        k = QUANTISED_OUTPUT.get(node.op_type)
        if k is not None:
            return im.is_uint8(node, k, "uint8")
        name = node.input[0]
    return name in im.uint8
