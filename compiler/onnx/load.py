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
    """The onnx module (with onnx.numpy_helper loaded), or CompileError saying how to install it."""
    try:
        import onnx
        from onnx import numpy_helper  # noqa: F401
    except ImportError:
        raise CompileError("compiler.from_onnx needs the onnx package: "
                           "pip install nnp-toolchain[onnx]") from None
    return onnx


def load(onnx: ModuleType, model: str | os.PathLike | bytes | ModelProto) -> ModelProto:
    """The ModelProto of a path, bytes or ModelProto; CompileError if it is not one."""
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        return _parse(onnx, bytes(model), "the model bytes")
    if isinstance(model, (str, os.PathLike)):
        try:
            with open(model, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise CompileError(f"cannot read ONNX model {os.fspath(model)!r}: {exc.strerror or exc}") from None
        proto = _parse(onnx, data, repr(os.fspath(model)))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer):
            try:
                from onnx.external_data_helper import load_external_data_for_model
                load_external_data_for_model(proto, os.path.dirname(os.path.abspath(model)))
            except Exception as exc:
                raise CompileError(f"{os.fspath(model)!r}: cannot load external tensor data: {exc}") from None
        return proto
    raise CompileError(f"from_onnx takes a path, bytes or an onnx.ModelProto, got {type(model).__name__}")


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
