"""Small QDQ models' shared pieces for the ONNX op tests: the scales, initializers, random float feeds, the two
onnxruntime optimisation levels compared against, and the hypothesis shape strategies."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from hypothesis import strategies as st
from onnx import TensorProto, numpy_helper

F = TensorProto.FLOAT
SCALES = {"x": (0.05, 3), "b": (0.04, -7), "y": (0.07, -2)}
"""(scale, int8 zero point) of the input x, the second operand b and the output y."""
LEVELS = {"default": ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL}
dims = dict(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), h=st.integers(1, 13), w=st.integers(1, 37))
ZP_TYPES = {"int8": (TensorProto.INT8, np.int8, -128), "uint8": (TensorProto.UINT8, np.uint8, 0)}
"""(ONNX element type, numpy dtype, lowest value) of each quantised activation type."""


def initializer(name: str, value, dtype) -> onnx.TensorProto:
    """An initializer named name holding value as dtype."""
    return numpy_helper.from_array(np.asarray(value, dtype), name)


def feeds_for(model: onnx.ModelProto, seed: int) -> dict:
    """Seeded N(0, 2.5) float32 arrays for every graph input of model."""
    rng = np.random.default_rng(seed)
    out = {}
    for i in model.graph.input:
        shape = [d.dim_value for d in i.type.tensor_type.shape.dim]
        out[i.name] = (rng.standard_normal(shape) * 2.5).astype(np.float32)
    return out


def ort_float(model: onnx.ModelProto, feeds: dict, level) -> np.ndarray:
    """onnxruntime's first (float, dequantised) output of model at one optimisation level, on one thread."""
    opts = ort.SessionOptions()
    opts.graph_optimization_level = level
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, feeds)[0]
