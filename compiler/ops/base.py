"""The op base: a DDR tensor, the Op every op derives from, and the value ranges ops share."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from ..errors import CompileError

DTYPES = ("int8", "int32")      # of a graph value and a layout op
INT8 = (-128, 127)
INT32 = (-(1 << 31), (1 << 31) - 1)
ACC_LIMIT = 1 << 31
PRODUCT_LIMIT = 1 << 62
GLOBAL_SCALE_RANGE = (2.0 ** -32, 256.0)    # onnxruntime refuses a global average pool factor outside it


@dataclass(frozen=True)
class Tensor:
    """A named DDR tensor of an op: logical shape and dtype ("int8" or "int32")."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    @property
    def size(self) -> int:
        return int(np.prod(self.shape))

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize


@dataclass(frozen=True, eq=False)
class Op:
    """Base of every op: inputs, output, and a reference computed by compiler.reference."""

    kind: str = field(init=False, default="op")
    lowered: ClassVar[bool] = True      # False: a numpy model only, refused by build()

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        raise NotImplementedError

    @property
    def output(self) -> Tensor:
        raise NotImplementedError

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The op's result on numpy inputs (checked against the op's input tensors)."""
        arrays = check_inputs(self, inputs)
        return self._compute(*arrays)

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def __repr__(self) -> str:
        ins = ", ".join(f"{t.name}{list(t.shape)}" for t in self.inputs)
        return f"{self.kind}({ins}) -> {list(self.output.shape)} {self.output.dtype}"


def check_inputs(op: Op, inputs) -> list[np.ndarray]:
    """The inputs as numpy arrays, or CompileError naming the one that does not fit."""
    if len(inputs) != len(op.inputs):
        names = ", ".join(t.name for t in op.inputs)
        raise CompileError(f"{op.kind} takes {len(op.inputs)} input(s) ({names}), got {len(inputs)}")
    out = []
    for t, a in zip(op.inputs, inputs):
        a = np.asarray(a)
        if a.shape != t.shape:
            raise CompileError(f"{op.kind}: input {t.name} has shape {a.shape}, expected {t.shape}")
        if a.dtype != np.dtype(t.dtype):
            raise CompileError(f"{op.kind}: input {t.name} has dtype {a.dtype}, expected {t.dtype}")
        out.append(a)
    return out
