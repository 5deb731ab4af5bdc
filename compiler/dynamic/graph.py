"""A network over a range of shapes: a DynamicGraph is a function from dim values to a static
compiler.Graph (an ONNX model imported with `dims={"height": (32, 512)}` is one) and its Dims;
and the check of a dynamic network's input shapes against the Dims its binary describes."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..dims import Dim, infer_values
from ..errors import CompileError


@dataclass(eq=False)
class DynamicGraph:
    """A network over a range of shapes: `make(values)` is the static Graph for dim values."""

    make: Callable[[dict[str, int]], object]
    dims: tuple[Dim, ...]
    _cache: dict = field(default_factory=dict, repr=False)

    def at(self, values: dict[str, int]) -> object:
        """The static Graph for these dim values (CompileError naming a dim out of its range)."""
        for d in self.dims:
            v = values.get(d.name)
            if v is None or not d.lo <= v <= d.hi:
                raise CompileError(f"dimension {d.name} = {v} is outside its range [{d.lo}, {d.hi}]")
        key = tuple(values[d.name] for d in self.dims)
        if key not in self._cache:
            self._cache[key] = self.make({d.name: values[d.name] for d in self.dims})
        return self._cache[key]

    @property
    def inputs(self) -> list[str]:
        return self.at(self.low).inputs

    @property
    def low(self) -> dict[str, int]:
        return {d.name: d.lo for d in self.dims}

    @property
    def high(self) -> dict[str, int]:
        return {d.name: d.hi for d in self.dims}

    def reference(self, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
        """The numpy outputs of the graph at the inputs' shapes."""
        shapes = input_shapes(self)
        values = infer_values(self.dims, shapes, {k: np.shape(inputs[k]) for k in shapes})
        return self.at(values).reference(inputs)

    def __repr__(self) -> str:
        return f"DynamicGraph({', '.join(map(str, self.dims))})"


def input_shapes(dg: DynamicGraph) -> dict[str, tuple]:
    """Each graph input's shape, a Dim on every axis that follows one (found by moving one dim at a time)."""
    low, high = dg.at(dg.low), dg.at(dg.high)
    out = {}
    for name in low.inputs:
        lo_shape, hi_shape = low.values[name].shape, high.values[name].shape
        axes = list(lo_shape)
        for k, (a, b) in enumerate(zip(lo_shape, hi_shape)):
            if a == b:
                continue
            movers = [d for d in dg.dims if dg.at({**dg.low, d.name: d.hi}).values[name].shape[k] != a]
            if len(movers) != 1 or (a, b) != (movers[0].lo, movers[0].hi):
                raise CompileError(f"input {name} axis {k} is {a} at the smallest shape and {b} at the largest: "
                                   f"it must be one dimension itself ({', '.join(map(str, dg.dims))})")
            axes[k] = movers[0]
        out[name] = tuple(axes)
    return out


def check_input(meta: dict, name: str, shape: tuple, given: dict[str, tuple]) -> None:
    """CompileError naming the dimension and its range unless input `name` of a dynamic network may have
    `shape` (in range, and agreeing with the inputs `given` so far)."""
    dims = {n: Dim(n, lo, hi) for n, lo, hi in meta["dims"]}
    declared = {t["name"]: tuple(dims[a] if isinstance(a, str) else a for a in t["shape"])
                for t in meta["inputs"]}
    shapes = {**given, name: tuple(shape)}
    infer_values(tuple(dims.values()), {k: declared[k] for k in shapes}, shapes)
