"""Reading the model: the onnx package (an optional extra), a path, bytes or a ModelProto, tensors.

Everything here raises CompileError with a message for the user: a missing onnx package, an
unreadable or corrupt file, external tensor data that cannot be loaded, a tensor too large or
of impossible dimensions.
"""
from __future__ import annotations

import math
import os
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np

from ..errors import CompileError

if TYPE_CHECKING:        # onnx is an optional extra, imported at run time in load.py only
    from onnx import ModelProto, TensorProto


def import_onnx() -> ModuleType:
    """The onnx module (with its checker, numpy_helper and shape_inference loaded), or CompileError saying how to install it."""
    try:
        import onnx
        from onnx import checker, numpy_helper, shape_inference  # noqa: F401
    except ImportError:
        raise CompileError("compiler.from_onnx needs the onnx package: "
                           "pip install nnp-toolchain[onnx]") from None
    return onnx


def load(onnx: ModuleType, model: str | os.PathLike | bytes | ModelProto) -> ModelProto:
    """The ModelProto of a path, bytes or ModelProto; CompileError if it is not one."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(onnx, bytes(model), source_name(model))
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CompileError(f"cannot read ONNX model {os.fspath(model)!r}: {exc.strerror or exc}") from None
        proto = _parse(onnx, data, source_name(model))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            try:
                from onnx.external_data_helper import load_external_data_for_model
                load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
            except Exception as exc:
                raise CompileError(f"{os.fspath(model)!r}: cannot load external tensor data: {exc}") from None
        return proto
    raise CompileError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


# The default domain's opsets the import accepts: QuantizeLinear and QLinearConv are in 10; 27 is the
# newest onnxruntime 1.32 runs (28 has no DequantizeLinear kernel).  The checker validates every node
# against its schema at the model's opset, and the handlers refuse attributes they do not know, so an
# opset in between whose op gained an attribute is refused by name, never misread.
OPSETS = range(10, 28)
MS_OPSETS = (1,)                # com.microsoft, the domain of QLinearAdd, QGemm, ...
DEFAULT_DOMAINS = ("", "ai.onnx")
# Quantisation parameters onnxruntime's type inference requires to be scalars (shape []), by op and
# input position (onnxruntime/core/graph/contrib_ops/quantization_defs.cc): a [1]-shaped one is refused.
SCALAR_INPUTS = {"QLinearAdd": (1, 2, 4, 5, 6, 7), "QLinearMul": (1, 2, 4, 5, 6, 7),
                 "QLinearAveragePool": (1, 2, 3, 4)}
POOL_OR_CONV = ("Conv", "QLinearConv", "MaxPool", "AveragePool", "QLinearAveragePool", "ConvInteger")
FULL_CHECK_BYTES = 256 << 20    # strict shape inference on models up to this size (it copies the model)


def source_name(model) -> str:
    """What messages call the model: its path, or "the model bytes", or "the model"."""
    if isinstance(model, (str, os.PathLike)):
        return repr(os.fspath(model))
    return "the model bytes" if isinstance(model, (bytes, bytearray, memoryview)) else "the model"


def check_model(onnx: ModuleType, proto: ModelProto, where: str) -> ModelProto:
    """The model if onnxruntime would load it: the ONNX checker, the opsets, node names and the
    attribute and shape rules onnxruntime adds; else one CompileError saying why.

    from_onnx runs it after the import, whose own messages (every problem, by node) come first."""
    _check_opsets(proto, where)
    # The checker requires every graph input and output to declare a shape; onnxruntime does not (and
    # an input's shape can come from dims=): a missing one is given an empty shape for the structural
    # check only, and taken away again, so that strict shape inference sees the model as it is.
    unshaped = [vi for vi in (*proto.graph.input, *proto.graph.output)
                if vi.type.HasField("tensor_type") and not vi.type.tensor_type.HasField("shape")]
    try:
        for vi in unshaped:
            vi.type.tensor_type.shape.SetInParent()
        onnx.checker.check_model(proto)
        for vi in unshaped:
            vi.type.tensor_type.ClearField("shape")
        unshaped = []
        inferred = None
        if proto.ByteSize() <= FULL_CHECK_BYTES:
            inferred = onnx.shape_inference.infer_shapes(proto, check_type=True, strict_mode=True)
    except Exception as exc:     # ValidationError, InferenceError; ValueError beyond protobuf's 2 GB
        raise CompileError(f"{where} is not a valid ONNX model: {_one_line(str(exc))}") from None
    finally:
        for vi in unshaped:
            vi.type.tensor_type.ClearField("shape")
    _check_nodes(onnx, proto, where)
    if inferred is not None:
        _check_output_types(onnx, proto, inferred, where)
    return proto


def _one_line(text: str) -> str:
    """The checker's message without its context block, on one line."""
    return " ".join(text.split("==> Context:")[0].split())


def _check_opsets(proto: ModelProto, where: str) -> None:
    versions: dict[str, list[int]] = {}
    for o in proto.opset_import:
        versions.setdefault("" if o.domain in DEFAULT_DOMAINS else o.domain, []).append(o.version)
    for domain, vs in versions.items():
        if len(vs) > 1:
            raise CompileError(f"{where}: opset_import lists the domain {domain or 'ai.onnx'!r} {len(vs)} times")
    if "" not in versions:
        raise CompileError(f"{where} has no opset_import for the default domain (ai.onnx): "
                           "it must say which opset its operators follow")
    if versions[""][0] not in OPSETS:
        raise CompileError(f"{where}: opset {versions[''][0]} of the default domain is not supported "
                           f"(supported: {OPSETS.start} to {OPSETS.stop - 1})")
    if "com.microsoft" in versions and versions["com.microsoft"][0] not in MS_OPSETS:
        raise CompileError(f"{where}: opset {versions['com.microsoft'][0]} of the domain com.microsoft is not "
                           f"supported (supported: {', '.join(map(str, MS_OPSETS))})")


def _check_nodes(onnx: ModuleType, proto: ModelProto, where: str) -> None:
    """What onnxruntime refuses and the checker lets through: repeated node names, auto_pad with
    pads, a [1]-shaped scale or zero point where a scalar is required."""
    names: set[str] = set()
    shapes = {t.name: list(t.dims) for t in proto.graph.initializer}
    for node in proto.graph.node:
        if node.op_type == "Constant":
            for a in node.attribute:
                if a.name == "value" and node.output:
                    shapes[node.output[0]] = list(a.t.dims)
    for node in proto.graph.node:
        label = f"node {node.name!r} ({node.op_type})" if node.name else f"a {node.op_type} node"
        if node.name and node.name in names:
            raise CompileError(f"{where}: two nodes are named {node.name!r}: node names must be unique")
        names.add(node.name)
        attrs = {a.name: a for a in node.attribute}
        if node.op_type in POOL_OR_CONV and "auto_pad" in attrs and "pads" in attrs \
                and attrs["auto_pad"].s not in (b"", b"NOTSET"):
            raise CompileError(f"{where}: {label} has both auto_pad = {attrs['auto_pad'].s.decode(errors='replace')}"
                               " and pads: give one of them")
        for k in SCALAR_INPUTS.get(node.op_type, ()) if node.domain == "com.microsoft" else ():
            if k < len(node.input) and shapes.get(node.input[k], []) != []:
                raise CompileError(f"{where}: {label} input {k} ({node.input[k]!r}) has shape "
                                   f"{shapes[node.input[k]]}: onnxruntime requires a scalar (shape [])")


# The element type of a com.microsoft op's output, which ONNX's shape inference does not know: the
# type of this input (onnxruntime's contrib schemas propagate it from there).
MS_OUTPUT_TYPE = {"QLinearAdd": 0, "QLinearMul": 0, "QLinearAveragePool": 0, "QLinearGlobalAveragePool": 0,
                  "QLinearConcat": 2, "QLinearLeakyRelu": 0, "QLinearSigmoid": 0}


def _check_output_types(onnx: ModuleType, proto: ModelProto, inferred: ModelProto, where: str) -> None:
    """A graph output declared of another element type than its producer gives (onnxruntime refuses
    it); the checker's strict inference covers the default domain, this the com.microsoft ops."""
    types = {vi.name: vi.type.tensor_type.elem_type for vi in (*inferred.graph.value_info, *proto.graph.input)
             if vi.type.HasField("tensor_type")}
    types.update({t.name: t.data_type for t in proto.graph.initializer})
    for node in proto.graph.node:
        if node.domain != "com.microsoft" or not node.output:
            continue
        if node.op_type in MS_OUTPUT_TYPE and MS_OUTPUT_TYPE[node.op_type] < len(node.input):
            types[node.output[0]] = types.get(node.input[MS_OUTPUT_TYPE[node.op_type]], 0)
        elif node.op_type == "QGemm":       # float without y_scale, else y_zero_point's type
            ins = list(node.input) + [""] * 9
            types[node.output[0]] = onnx.TensorProto.FLOAT if not ins[7] else types.get(ins[8], 0)
    for vi in proto.graph.output:
        declared = vi.type.tensor_type.elem_type if vi.type.HasField("tensor_type") else 0
        actual = types.get(vi.name, 0)
        if declared and actual and declared != actual:
            raise CompileError(f"{where}: graph output {vi.name!r} is declared {type_name(onnx, declared)}, but "
                               f"the tensor is {type_name(onnx, actual)}")


def _parse(onnx: ModuleType, data: bytes, where: str) -> ModelProto:
    try:
        proto = onnx.ModelProto()
        proto.ParseFromString(data)
    except Exception as exc:      # protobuf's DecodeError and friends
        raise CompileError(f"{where} is not a valid ONNX model (truncated or corrupt: {exc})") from None
    if not proto.HasField("graph"):
        raise CompileError(f"{where} is not an ONNX model: it has no graph")
    return proto


def to_array(onnx: ModuleType, t: TensorProto) -> np.ndarray:
    """An initializer's numpy value, or CompileError naming what is wrong with it."""
    if t.data_location == 1:
        raise CompileError(f"tensor {t.name!r} is stored in an external file: load the model with "
                           "onnx.load(path) or pass its path")
    if any(d < 0 for d in t.dims) or len(t.dims) > 8:
        raise CompileError(f"tensor {t.name!r} has dimensions {list(t.dims)}")
    if math.prod(t.dims) > 1 << 28:
        raise CompileError(f"tensor {t.name!r} with dimensions {list(t.dims)} is too large")
    try:
        a = onnx.numpy_helper.to_array(t)
    except Exception as exc:
        raise CompileError(f"tensor {t.name!r} (dimensions {list(t.dims)}) cannot be read: {exc}") from None
    return np.array(a)      # owned and writable


def type_name(onnx: ModuleType, elem_type: int) -> str:
    """The name of an ONNX element type (FLOAT, UINT8, ...), or its number if it has none."""
    try:
        return onnx.TensorProto.DataType.Name(elem_type)
    except ValueError:
        return str(elem_type)
