"""Dynamic dimensions: `Dim(name, lo, hi)` in an op's shape, and the op it makes.

A Dim stands for batch, height or width; the same name in two places is the
same size.  An op built with Dims is a DynamicOp: the static op at the
largest shape (DDR buffers are sized for it) and at the smallest (every
window must fit it), plus the dims in argument-block order.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field

import numpy as np

from .errors import CompileError

DIM_AXES = {0: "batch", 2: "height", 3: "width"}   # NCHW axes a Dim may stand for
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True)
class Dim:
    """A size known only at run time, somewhere in [lo, hi]."""

    name: str
    lo: int
    hi: int

    def __post_init__(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise CompileError(f"Dim name must be an identifier, got {self.name!r}")
        for what in ("lo", "hi"):
            v = getattr(self, what)
            try:
                i = operator.index(v)
            except TypeError:
                raise CompileError(f"Dim {self.name}: {what} must be an integer, got {v!r}") from None
            if isinstance(v, bool) or i < 1 or i > 1 << 20:
                raise CompileError(f"Dim {self.name}: {what} = {v!r} is out of range [1, {1 << 20}]")
        if self.lo > self.hi:
            raise CompileError(f"Dim {self.name}: lo = {self.lo} is larger than hi = {self.hi}")

    def __str__(self) -> str:
        return f"{self.name} in [{self.lo}, {self.hi}]"


MAX_STRIDE = 1 << 11       # strides and windows a dynamic size may be divided by (mulhu is exact below it)


def window_out(n: int, add: int, stride: int) -> int:
    """A window op's output size (n + add) // stride + 1 (add = the paddings minus the window)."""
    return (n + add) // stride + 1


def check_divisor(where: str, what: str, v: int) -> int:
    """v, a stride or window a dynamic size is divided by; CompileError quoting it unless 1 <= v < MAX_STRIDE."""
    if not 1 <= v < MAX_STRIDE:
        raise CompileError(f"{where}: {what} = {v} is out of range for a dynamic size (1 to {MAX_STRIDE - 1}: the CU "
                           f"divides by a constant with mulhu)")
    return v


def reciprocal(stride: int) -> int:
    """The magic constant m = ceil(2**32 / stride): for 0 <= n < 2**21, floor(n / stride) is the high word
    of n * m (`mulhu`), exactly, as n * (m * stride - 2**32) < 2**32 (docs/architecture.md)."""
    if not 2 <= stride < MAX_STRIDE:
        raise CompileError(f"a dynamic size can be divided by 2 to {MAX_STRIDE - 1}, not by {stride}")
    return -(-(1 << 32) // stride)


def axis_rule(name: str, add: int, stride: int) -> str:
    """An output axis in a `.target dynamic.*` note: `name:add:shift` (((name + add) >> shift) + 1) for a
    power-of-two stride, else `name:add:0:stride` (((name + add) // stride) + 1)."""
    if stride & (stride - 1):
        return f"{name}:{add}:0:{stride}"
    return f"{name}:{add}:{stride.bit_length() - 1}"


def has_dims(shape) -> bool:
    """True if some entry of shape is a Dim."""
    try:
        return any(isinstance(d, Dim) for d in shape)
    except TypeError:
        return False


def collect(shapes: dict[str, tuple]) -> list[Dim]:
    """The distinct Dims of the named shapes in first-use order; CompileError if a Dim sits on an axis
    that cannot vary or two Dims of one name disagree on their range."""
    seen: dict[str, Dim] = {}
    for tensor, shape in shapes.items():
        for axis, d in enumerate(shape):
            if not isinstance(d, Dim):
                continue
            if axis not in DIM_AXES:
                raise CompileError(f"{tensor}: axis {axis} (channels) cannot be a Dim ({d}); only batch, "
                                   f"height and width can")
            old = seen.setdefault(d.name, d)
            if (old.lo, old.hi) != (d.lo, d.hi):
                raise CompileError(f"Dim {d.name} is declared twice with different ranges: {old} and {d}")
    return list(seen.values())


def at(shape, values: dict[str, int]) -> tuple[int, ...]:
    """shape with each Dim replaced by its value."""
    return tuple(values[d.name] if isinstance(d, Dim) else d for d in shape)


@dataclass(frozen=True, eq=False)
class DynamicOp:
    """An op whose input shape holds Dims: `make(shape)` gives the static op for one shape."""

    kind: str
    x_shape: tuple                        # every input's shape (a binary elementwise op's two are the same)
    dims: tuple[Dim, ...]
    make: object = field(repr=False)      # callable: concrete x shape -> static Op
    largest: object = field(repr=False)   # the static op at every Dim's hi
    smallest: object = field(repr=False)  # the static op at every Dim's lo
    names: tuple[str, ...] = ("x",)       # the inputs, in call order
    in_shapes: tuple | None = None        # each input's shape where they differ (a broadcast b); else x_shape

    def static(self, values: dict[str, int]) -> object:
        """The static op for these dim values."""
        return self.make(at(self.x_shape, values))

    def values_of(self, *shapes) -> dict[str, int]:
        """The dim values the inputs' shapes give; CompileError naming a dimension out of its range, a
        fixed axis that differs or two inputs that disagree."""
        if len(shapes) != len(self.names):
            raise CompileError(f"{self.kind} takes {len(self.names)} input(s) ({', '.join(self.names)}), "
                               f"got {len(shapes)}")
        declared = self.in_shapes or (self.x_shape,) * len(self.names)
        return infer_values(self.dims, dict(zip(self.names, declared)),
                            {t: tuple(s) for t, s in zip(self.names, shapes)})

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """The numpy result of the static op for the inputs' shape."""
        return self.static(self.values_of(*(np.shape(a) for a in inputs))).reference(*inputs)

    def __repr__(self) -> str:
        shape = ", ".join(d.name if isinstance(d, Dim) else str(d) for d in self.x_shape)
        return f"{self.kind}(x[{shape}]) with " + ", ".join(map(str, self.dims))


def infer_values(dims, declared: dict[str, tuple], given: dict[str, tuple]) -> dict[str, int]:
    """Dim values from arrays' shapes, checked: same rank, fixed axes equal, each Dim in range and
    the same wherever it appears."""
    values: dict[str, int] = {}
    where: dict[str, str] = {}
    ranges = {d.name: d for d in dims}
    for tensor, decl in declared.items():
        shape = given[tensor]
        if len(shape) != len(decl):
            raise CompileError(f"input {tensor} has {len(shape)} dimensions {tuple(shape)}, expected "
                               f"{len(decl)}")
        for axis, (d, n) in enumerate(zip(decl, shape)):
            if not isinstance(d, Dim):
                if n != d:
                    raise CompileError(f"input {tensor} axis {axis} is {n}, expected {d} (it is not dynamic)")
                continue
            d = ranges[d.name]
            if not d.lo <= n <= d.hi:
                raise CompileError(f"input {tensor} axis {axis}: dimension {d.name} = {n} is outside its "
                                   f"range [{d.lo}, {d.hi}]")
            if d.name in values and values[d.name] != n:
                raise CompileError(f"dimension {d.name} is {values[d.name]} in {where[d.name]} but {n} in "
                                   f"input {tensor} axis {axis}: the same Dim must be the same size")
            values[d.name] = n
            where[d.name] = f"input {tensor} axis {axis}"
    return values


def dynamic_op(kind: str, make, x_shape, names: tuple[str, ...] = ("x",), ndim: int = 4,
               in_shapes: tuple | None = None) -> DynamicOp:
    """The DynamicOp of a constructor `make(concrete shape)`; checks it at both ends of every range.
    ndim = 2 is a dense layer's [N, K], whose batch alone may be a Dim."""
    x_shape = tuple(x_shape)
    if len(x_shape) != ndim:
        raise CompileError(f"x_shape must have {ndim} dimensions, got {len(x_shape)}: {x_shape}")
    if ndim == 2 and isinstance(x_shape[1], Dim):
        raise CompileError(f"{kind}: axis 1 (features) cannot be a Dim ({x_shape[1]}); only the batch can")
    dims = collect({"x": x_shape})
    largest = make(at(x_shape, {d.name: d.hi for d in dims}))
    try:
        smallest = make(at(x_shape, {d.name: d.lo for d in dims}))
    except CompileError as exc:
        lows = ", ".join(f"{d.name} = {d.lo}" for d in dims)
        raise CompileError(f"{kind} does not fit the smallest shape of its range ({lows}): {exc}") from None
    return DynamicOp(kind, x_shape, tuple(dims), make, largest, smallest, tuple(names), in_shapes)


@dataclass(frozen=True, eq=False)
class DynamicChain:
    """Dynamic ops run one after another (each output feeds the next op's input), one program."""

    ops: tuple[DynamicOp, ...]
    kind: str = "chain"

    @property
    def x_shape(self) -> tuple:
        return self.ops[0].x_shape

    @property
    def dims(self) -> tuple[Dim, ...]:
        return self.ops[0].dims

    @property
    def names(self) -> tuple[str, ...]:
        return self.ops[0].names

    def values_of(self, *shapes) -> dict[str, int]:
        """The first op's check of the inputs' shapes."""
        return self.ops[0].values_of(*shapes)

    def reference(self, *inputs: np.ndarray) -> np.ndarray:
        """Each op's numpy result fed to the next."""
        values = self.values_of(*(np.shape(a) for a in inputs))
        out = inputs
        for op in self.ops:
            out = (op.static(values).reference(*out),)
        return out[0]

    def __repr__(self) -> str:
        return " -> ".join(map(repr, self.ops))
