"""The unary table op: lut, any int8 -> int8 function of one quantised input as its 256 values (vu.lut)."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from nnpsim.timing import LUT_BYTES

from .. import reference as sem
from ..dims import has_dims
from ..errors import CompileError
from .checks import shape_arg
from .elementwise import Elementwise

LUT_ENTRIES = LUT_BYTES
"""A table's entries (vu.lut's): one int8 output per int8 input, entry x + 128 for input x."""


@dataclass(frozen=True, eq=False, repr=False)
class Lut(Elementwise):
    """y = clip(table[x + 128], lo, hi) over a tensor of any shape: a unary activation as its table.

    lo and hi are the clamps of relu / clip ops fused after it (lowering.driver.fold_clamps); entries()
    is the table the VU runs with them applied.
    """

    table: np.ndarray | None = None

    def entries(self) -> np.ndarray:
        """The int8[256] table with the op's clamp applied: what vu.lut looks up."""
        return sem.clip(self.table, self.lo, self.hi)

    def then(self, other: "Lut") -> "Lut":
        """This table followed by other's: one lookup for both (the layouts of x and of other's y)."""
        return replace(self, table=table_arg("table", sem.lut(self.entries(), other.entries())), lo=-128, hi=127,
                       y_layout=other.y_layout)

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        return sem.lut(arrays[0], self.entries())


def table_arg(name: str, v) -> np.ndarray:
    """An int8[256] table, read-only: int values in [-128, 127] in any integer dtype."""
    a = np.asarray(v)
    if a.shape != (LUT_ENTRIES,):
        raise CompileError(f"{name} must hold {LUT_ENTRIES} entries (one per int8 input), got shape {a.shape}")
    if not np.issubdtype(a.dtype, np.integer):
        raise CompileError(f"{name} must be integers, got dtype {a.dtype}")
    bad = (a < -128) | (a > 127)
    if bad.any():
        k = int(np.argmax(bad))
        raise CompileError(f"{name}[{k}] = {int(a[k])} is out of the int8 range [-128, 127]")
    out = a.astype(np.int8)
    out.flags.writeable = False
    return out


def lut(shape, table) -> Lut:
    """y = table[x + 128] for int8 x of any shape: table is int8[256], entry k the output for input k - 128."""
    if has_dims(shape):
        raise CompileError("lut: a table lookup has no dynamic lowering yet; give the tensor's shape as integers")
    return Lut("lut", shape_arg("shape", shape), table=table_arg("table", table))


def times_self(act: Lut, mul: Elementwise, act_first: bool) -> Lut:
    """x * act(x) (SiLU as x * sigmoid(x), HardSwish as x * hardsigmoid(x)) as one table: the mul's own arithmetic
    (its reference, QLinearMul's or the integer form) on every code and its image under act, then the mul's layout.

    act_first: act(x) is the mul's first operand.  Exact because the product is a function of the int8 x alone.
    """
    if mul.mode != "mul" or mul.b_shape is not None or mul.b_const is not None or tuple(mul.shape) != tuple(act.shape):
        raise CompileError(f"times_self: {mul.kind} of shape {tuple(mul.shape)} is no same-shape mul of the "
                           f"lut's {tuple(act.shape)}")
    codes, image = np.arange(-128, 128, dtype=np.int8), act.entries()
    flat = replace(mul, shape=(LUT_ENTRIES,))         # the same arithmetic over the 256 codes
    table = flat.reference(image, codes) if act_first else flat.reference(codes, image)
    return replace(act, table=table_arg("table", table), lo=-128, hi=127, y_layout=mul.y_layout)
