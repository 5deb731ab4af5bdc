"""How a compiled network's output agrees with onnxruntime's, and the onnxruntime session to compare with
(the demo, compiler.sweep and the benchmarks use them)."""
from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:          # onnx and onnxruntime are optional extras: only their types are named here
    from onnx import ModelProto
    from onnxruntime import InferenceSession


@dataclass
class Agreement:
    """How one dequantised output compares with onnxruntime's."""

    equal: bool     # bit for bit
    steps: int      # largest difference, in steps of the output's scale
    top1: bool      # the same arg max in every batch row


def agreement(ours: np.ndarray, theirs: np.ndarray, scale) -> Agreement:
    """Compare our output with onnxruntime's: bit for bit, largest difference in output steps, top-1."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.shape != theirs.shape:
        raise AssertionError(f"output shapes differ: {ours.shape} against onnxruntime's {theirs.shape}")
    step = float(np.max(np.asarray(scale, np.float64))) if ours.dtype.kind == "f" else 1.0
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    rows = ours.shape[0] if ours.ndim else 1
    top1 = np.array_equal(ours.reshape(rows, -1).argmax(1), theirs.reshape(rows, -1).argmax(1))
    # Both sides dequantise as (q - zp) * scale in float32, so equal floats mean equal int8.
    return Agreement(bool(np.array_equal(ours, theirs)), int(np.rint(diff.max() / step)) if diff.size else 0,
                     bool(top1))


def onnxruntime_session(model: ModelProto | bytes | str, threads: int = 1) -> InferenceSession:
    """An onnxruntime CPU session; one thread by default (same results, steadier timing on a shared machine)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    raw = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(raw, opts, providers=["CPUExecutionProvider"])


def have_onnx() -> bool:
    """Whether the optional onnx extra (onnx and onnxruntime) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))
