"""The public op constructors: validated, immutable descriptions of quantised layers.

Each constructor checks every argument and raises CompileError naming the
argument and saying why.  An op knows its input and output tensors (names,
shapes, dtypes) and computes its own reference result with compiler.reference.

Every requantising op has two forms (docs/semantics.md): the integer one,
with a multiplier and shift, and the float one, with float32 scales, which
computes what onnxruntime computes bit for bit (conv2d, dense, requantize:
`scale=`; add, mul: `scale_a=`, `scale_b=`, `scale_out=`; avg_pool2d,
global_avg_pool2d: `scale_x=`, `scale_out=`, `zp_out=`).

The modules: base (Tensor, Op, value ranges), checks (argument checks), nu (conv2d, dense),
pool (the pools, and reduce_mean: ReduceMean over the plane), elementwise (add, mul, qdq_binary, relu, clip, requantize), layout (Reshape, Concat), unary
(lut: a unary activation as its 256-entry table), movement (Transpose, Slice, Pad, nearest and linear Resize, Strided: a
chain of them composed), softmax
(QLinearSoftmax over one axis, on vu.softmax), norm (batch_norm: BatchNormalization as a per-channel float32
affine; batch_norm_global_avg: it, a Relu and the float GlobalAveragePool after it as one pool).
"""
from .base import ACC_LIMIT, DTYPES, GLOBAL_SCALE_RANGE, INT8, INT32, PRODUCT_LIMIT, Op, Tensor, check_inputs
from .checks import check_accumulator
from .elementwise import FLOAT_BINARY, Elementwise, add, clip, mul, qdq_binary, relu, requantize
from .layout import Concat, Reshape, at_values, check_dtype
from .movement import (LINEAR_FORMS, MOVEMENT_OPS, LinearAxis, Pad, Resize, ResizeLinear, Slice, Strided, Transpose,
                       compose, linear_axis, nearest_map, resize_linear, resize_nearest, slice_op)
from .nu import Conv2d, Dense, FloatConv, conv2d, dense, float_mode
from .pool import Pool2d, avg_pool2d, global_avg_pool2d, max_pool2d, reduce_mean, sum_pool2d
from .unary import LUT_ENTRIES, Lut, lut, times_self
from .softmax import Softmax, softmax
from .norm import BatchNorm, BatchNormPool, batch_norm, batch_norm_global_avg

__all__ = ["ACC_LIMIT", "DTYPES", "FLOAT_BINARY", "GLOBAL_SCALE_RANGE", "INT8", "INT32", "PRODUCT_LIMIT", "Concat",
           "Conv2d", "Dense", "Elementwise", "Op", "Pool2d", "Reshape", "Tensor", "add", "at_values", "avg_pool2d",
           "FloatConv", "float_mode",
           "check_accumulator", "check_dtype", "check_inputs", "clip", "conv2d", "dense", "global_avg_pool2d",
           "max_pool2d", "mul", "qdq_binary", "relu", "requantize", "sum_pool2d", "LUT_ENTRIES", "Lut", "lut", "times_self",
           "MOVEMENT_OPS", "Pad", "Resize", "Slice", "Strided", "Transpose", "compose", "nearest_map", "resize_nearest", "slice_op",
           "Softmax", "softmax", "reduce_mean", "BatchNorm", "batch_norm", "BatchNormPool", "batch_norm_global_avg", "LINEAR_FORMS", "LinearAxis",
           "ResizeLinear", "linear_axis", "resize_linear"]
