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
    of: tuple[str, ...] = ()         # the modes of the elementwise ops composed into it; (): a table of its own

    def entries(self) -> np.ndarray:
        """The int8[256] table with the op's clamp applied: what vu.lut looks up."""
        return sem.clip(self.table, self.lo, self.hi)

    def then(self, other: "Lut") -> "Lut":
        """This table followed by other's: one lookup for both (the layouts of x and of other's y)."""
        return replace(self, table=table_arg("table", sem.lut(self.entries(), other.entries())), lo=-128, hi=127,
                       y_layout=other.y_layout, of=self.of + other.of if self.of and other.of else ())

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


def per_tensor(op) -> bool:
    """Is op an elementwise int8 op whose parameters are the tensor's (no per-channel constant, no broadcast
    operand)?  A chain of such ops of one input is a function of each int8 code alone (composed)."""
    if type(op) not in (Elementwise, Lut) or op.in_dtype != "int8":
        return False
    if op.b_shape is not None and (op.b_const is None or op.b_const.size != 1):
        return False
    if op.b_const is not None and op.b_const.size != 1:
        return False
    return all(a is None or np.size(a) == 1 for a in (op.ma, op.mb, op.shift, op.scale))


def composed(steps: list[tuple[Elementwise, tuple[int, ...]]], shape) -> Lut:
    """One table for per-tensor ops of one int8 input x: steps[k] = (op, args), args the indices of its operands
    among (x, step 0's result, step 1's, ...); the last step's result is the table's.  Each op's own arithmetic
    (its reference) runs on the 256 codes, so the table is exact: every op is elementwise with the tensor's
    parameters, so the result is a function of the int8 x alone (SiLU's x * sigmoid(x), GELU's chain of
    QLinear ops)."""
    for op, _ in steps:
        if not per_tensor(op):
            raise CompileError(f"composed: {op.kind} of shape {tuple(op.shape)} has per-channel parameters or a "
                               "broadcast operand: no table of one code holds it")
    values = [np.arange(-128, 128, dtype=np.int8)]
    for op, args in steps:
        flat = replace(op, shape=(LUT_ENTRIES,), b_shape=None if op.b_shape is None else (1,),
                       b_const=None if op.b_const is None else op.b_const.reshape(1))
        values.append(flat._compute(*[values[a] for a in args]))
    return Lut("lut", shape_arg("shape", shape), table=table_arg("table", values[-1]), y_layout=steps[-1][0].y_layout,
               of=tuple(op.mode for op, _ in steps))


def times_self(act: Lut, mul: Elementwise, act_first: bool) -> Lut:
    """x * act(x) (SiLU as x * sigmoid(x), HardSwish as x * hardsigmoid(x)) as one table: the mul's own arithmetic
    (its reference, QLinearMul's or the integer form) on every code and its image under act, then the mul's layout.

    act_first: act(x) is the mul's first operand.  Exact because the product is a function of the int8 x alone.
    """
    if mul.mode != "mul" or mul.b_shape is not None or mul.b_const is not None or tuple(mul.shape) != tuple(act.shape):
        raise CompileError(f"times_self: {mul.kind} of shape {tuple(mul.shape)} is no same-shape mul of the "
                           f"lut's {tuple(act.shape)}")
    return replace(composed([(act, (0,)), (mul, (1, 0) if act_first else (0, 1))], act.shape),
                   x_layout=act.x_layout)
