"""The layout ops: Reshape and Concat, which move no data on the NPU or copy it by DMA."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..dims import at, collect, has_dims
from ..errors import CompileError
from .base import DTYPES, Op, Tensor
from .checks import int_arg, shape_arg


@dataclass(frozen=True, eq=False, repr=False)
class Reshape(Op):
    """Same elements, new shape (Flatten is a Reshape); row-major order as numpy and ONNX."""

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="reshape")

    def __post_init__(self):
        if _symbolic(self, ("in_shape", "out_shape")):
            object.__setattr__(self, "in_shape", tuple(self.in_shape))
            object.__setattr__(self, "out_shape", tuple(self.out_shape))
            return
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        object.__setattr__(self, "out_shape", shape_arg("out_shape", self.out_shape))
        check_dtype(self.dtype)
        n_in, n_out = math.prod(self.in_shape), math.prod(self.out_shape)   # exact, never overflows
        if n_in != n_out:
            raise CompileError(f"reshape {self.in_shape} ({n_in} elements) to {self.out_shape} "
                               f"({n_out} elements)")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.out_shape, self.dtype)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return x.reshape(self.out_shape).copy()


@dataclass(frozen=True, eq=False, repr=False)
class Concat(Op):
    """Inputs joined along `axis`; every other dimension must agree.

    `consts` holds the pieces that are constants, as (position among `shapes`, array) pairs: they are the op's
    own (its inputs are the other pieces), moved into place by DMA from the program's data.
    """

    shapes: tuple[tuple[int, ...], ...]
    axis: int = 1
    dtype: str = "int8"
    consts: tuple = ()
    kind: str = field(init=False, default="concat")

    def __post_init__(self):
        try:
            shapes = tuple(self.shapes)
        except TypeError:
            raise CompileError(f"shapes must be a sequence of shapes, got {self.shapes!r}") from None
        if not shapes:
            raise CompileError("concat needs at least one input")
        object.__setattr__(self, "shapes", shapes)
        if self.consts and any(has_dims(sh) for sh in shapes):
            raise CompileError("concat: constant pieces with Dims in the shapes: a concat with constants has "
                               "static shapes")
        if _symbolic(self, ("shapes",)):
            object.__setattr__(self, "shapes", tuple(tuple(s) for s in shapes))
            axis = at_values(self, _ends(self, ("shapes",))[1]).axis
            object.__setattr__(self, "axis", axis)
            for i, sh in enumerate(self.shapes):
                if not isinstance(sh[axis], int):
                    raise CompileError(f"concat along axis {axis}: input {i}'s axis is the dimension {sh[axis]}; "
                                       f"a concat with Dims joins along a fixed axis")
            return
        shapes = tuple(shape_arg(f"shapes[{i}]", s) for i, s in enumerate(shapes))
        check_dtype(self.dtype)
        ndim = len(shapes[0])
        axis = int_arg("axis", self.axis, -ndim, ndim - 1) % ndim
        for i, s in enumerate(shapes):
            if len(s) != ndim or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
                raise CompileError(f"concat along axis {axis}: input {i} has shape {s}, input 0 has "
                                   f"{shapes[0]}: all dimensions but the axis must agree")
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "axis", axis)
        object.__setattr__(self, "consts", self._const_pieces())

    def _const_pieces(self) -> tuple:
        """consts checked: distinct positions, each array of its piece's shape and the op's dtype, read-only,
        and at least one piece an input."""
        out = {}
        for k, arr in self.consts:
            k, a = int(k), np.array(arr)
            if not 0 <= k < len(self.shapes) or k in out:
                raise CompileError(f"concat: constant piece {k} is not one of the {len(self.shapes)} pieces, or is "
                                   "given twice")
            if a.dtype != np.dtype(self.dtype) or a.shape != self.shapes[k]:
                raise CompileError(f"concat: constant piece {k} must be {self.dtype} of shape {self.shapes[k]}, got "
                                   f"{a.dtype} {a.shape}")
            a.flags.writeable = False
            out[k] = a
        if len(out) == len(self.shapes):
            raise CompileError("concat: every piece is a constant: nothing to run")
        return tuple(sorted(out.items(), key=lambda kv: kv[0]))

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        own = dict(self.consts)
        return tuple(Tensor(f"x{i}", s, self.dtype) for i, s in enumerate(self.shapes) if i not in own)

    @property
    def output(self) -> Tensor:
        s = list(self.shapes[0])
        s[self.axis] = sum(sh[self.axis] for sh in self.shapes)
        return Tensor("y", tuple(s), self.dtype)

    def _compute(self, *xs: np.ndarray) -> np.ndarray:
        own, given = dict(self.consts), iter(xs)
        return np.concatenate([own[i] if i in own else next(given) for i in range(len(self.shapes))], axis=self.axis)


def _axes_of(op, fields: tuple[str, ...]) -> dict[str, tuple]:
    """The shapes held by a layout op's fields, named."""
    out = {}
    for f in fields:
        v = getattr(op, f)
        for i, sh in enumerate(v if f == "shapes" else (v,)):
            try:
                out[f"{f}[{i}]" if f == "shapes" else f] = tuple(sh)
            except TypeError:
                raise CompileError(f"{f} must be a tuple of dimensions, got {sh!r}") from None
    return out


def _ends(op, fields: tuple[str, ...]) -> tuple[dict, dict]:
    """The values of every Dim in a layout op's shapes at the low and the high end of its range."""
    dims = collect(_axes_of(op, fields))
    return {d.name: d.lo for d in dims}, {d.name: d.hi for d in dims}


def _symbolic(op, fields: tuple[str, ...]) -> bool:
    """True (after checking the op at both ends of the range) if a layout op's shapes hold compiler.Dims: it
    stands for the op at every size in range (`at_values`), as in a Graph with a Dim in an input."""
    if not any(has_dims(sh) for sh in _axes_of(op, fields).values()):
        return False
    for values in _ends(op, fields):
        at_values(op, values)            # CompileError if the op does not hold at that end
    return True


def at_values(op: Op, values: dict[str, int]) -> Op:
    """A Reshape or Concat with its Dims replaced by these values (the op itself if it has none)."""
    if isinstance(op, Reshape):
        return Reshape(at(op.in_shape, values), at(op.out_shape, values), op.dtype)
    if isinstance(op, Concat):
        return Concat(tuple(at(sh, values) for sh in op.shapes), op.axis, op.dtype)
    return op


def check_dtype(d) -> str:
    """d, if it is one of DTYPES (a graph value's or a layout op's dtype); CompileError if not."""
    if d not in DTYPES:
        raise CompileError(f"dtype must be one of {DTYPES}, got {d!r}")
    return d
