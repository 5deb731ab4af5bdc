"""Softmax over one axis of an int8 tensor (the last by default), as onnxruntime's QLinearSoftmax computes it.

onnxruntime (contrib_ops/cpu/quantization/qlinear_softmax.cc, float EXP_OUT_DTYPE) builds a float32
table of 256 exponentials, one per difference d = x - max(row) in [-255, 0]:

    shift  = max(0, ln(FLT_MAX / D) - 5) / x_scale          (double; D the row length)
    e[d]   = float32(exp((d + shift) * x_scale))            (double exp, then rounded to float32)

then, per row, sums e over the row in float32 from the first element to the last, and quantises each
element as

    y = clip(nearbyint(float32(e / sum) * floor(1 / y_scale)) + y_zp, -128, 127)

every product and quotient rounded to float32 (an overflow to inf saturates at 127).  The zero point of x
cancels in x - max, so only x_scale enters.  The exact order matters: the sum is sequential, the
quotient is taken before the product (onnxruntime 1.32; tests/compiler/ops/test_softmax.py checks every
element against it).  A softmax over another axis is the same computation on the rows along that axis
(onnxruntime transposes the axis last, computes, and transposes back); D is that axis' length.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .base import INT8, Op, Tensor
from .checks import f32_scale_arg, int_arg, shape_arg

DIFFS = 256
"""The table's entries: one per difference x - max(row), from -255 to 0."""


def exp_table(x_scale: np.float32, row: int) -> np.ndarray:
    """onnxruntime's float32[256] exponentials, entry d + 255 for the difference d = x - max(row)."""
    shift = max(0.0, float(np.log(np.float64(np.finfo(np.float32).max) / row)) - 5.0) / np.float64(x_scale)
    d = np.arange(-(DIFFS - 1), 1, dtype=np.float64)
    with np.errstate(over="ignore"):
        return np.exp((d + shift) * np.float64(x_scale)).astype(np.float32)


def out_multiplier(y_scale: np.float32) -> np.float32:
    """floor(1 / y_scale) in float32: onnxruntime's output multiplier."""
    return np.float32(np.floor(np.float32(1.0) / y_scale))


def softmax_rows(x: np.ndarray, table: np.ndarray, mult: np.float32, zp_out: int) -> np.ndarray:
    """The quantised softmax of each last-axis row of int8 x, in onnxruntime's float32 order."""
    xi = x.astype(np.int32)
    e = table[xi - xi.max(axis=-1, keepdims=True) + DIFFS - 1]
    total = np.zeros(x.shape[:-1], np.float32)
    for k in range(x.shape[-1]):           # sequential, as onnxruntime sums
        total = total + e[..., k]
    with np.errstate(over="ignore"):
        q = np.rint((e / total[..., None]).astype(np.float32) * mult) + np.float32(zp_out)
    return np.clip(q, *INT8).astype(np.int8)


@dataclass(frozen=True, eq=False, repr=False)
class Softmax(Op):
    """y = QLinearSoftmax(x) over axis `axis` (non-negative) of an int8 tensor of any rank (at least 1)."""

    shape: tuple[int, ...]
    x_scale: np.float32
    y_scale: np.float32
    zp_out: int = 0
    axis: int = -1
    coerced: bool = False               # opsets before 13: the dims from axis on are one row (ONNX's 2-D view)
    kind: str = field(init=False, default="softmax")
    lowered: ClassVar[bool] = True      # vu.softmax, tiles of whole rows (compiler/lowering/softmax.py)

    def __post_init__(self):
        object.__setattr__(self, "axis", self.axis % len(self.shape))

    @property
    def row(self) -> int:
        """The length of the rows the softmax runs over: the axis, or the dims from it on when coerced."""
        return int(np.prod(self.shape[self.axis:], dtype=np.int64)) if self.coerced else self.shape[self.axis]

    @property
    def view(self) -> tuple[int, int, int]:
        """(outer, row, inner): the tensor as the dims before the axis, the row, the dims after it."""
        outer = int(np.prod(self.shape[:self.axis], dtype=np.int64))
        return outer, self.row, int(np.prod(self.shape, dtype=np.int64)) // (outer * self.row)

    @property
    def table_bytes(self) -> int:
        """Bytes of its exponential table, a DDR constant (the roofline counts it)."""
        return 4 * DIFFS

    def table(self) -> np.ndarray:
        """The float32[256] exponentials of this op's scale and row length."""
        return exp_table(self.x_scale, self.row)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.shape, "int8"),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.shape, "int8")

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        if self.coerced:
            rows = arrays[0].reshape(self.view[:2])
            return softmax_rows(rows, self.table(), out_multiplier(self.y_scale), self.zp_out).reshape(self.shape)
        rows = np.moveaxis(arrays[0], self.axis, -1)
        return np.moveaxis(softmax_rows(rows, self.table(), out_multiplier(self.y_scale), self.zp_out), -1, self.axis)


def softmax(shape, *, x_scale, y_scale, zp_out: int = 0, axis: int = -1, coerced: bool = False) -> Softmax:
    """The int8 softmax over `axis` (default the last) of shape, onnxruntime's QLinearSoftmax: float32 scales;
    coerced: over the dims from axis on as one row (Softmax before opset 13)."""
    shape = shape_arg("shape", shape)
    return Softmax(shape, f32_scale_arg("x_scale", x_scale), f32_scale_arg("y_scale", y_scale),
                   int_arg("zp_out", zp_out, *INT8), int_arg("axis", axis, -len(shape), len(shape) - 1),
                   bool(coerced))
