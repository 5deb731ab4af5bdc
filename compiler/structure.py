"""What a kernel's tiling and timing depend on: kinds, shapes and structure, not values."""
from __future__ import annotations

import dataclasses

import numpy as np

from .ops import Op

VALUE_ONLY = {"x_zp", "zp_out", "lo", "hi", "za", "zb", "ma", "mb", "shift", "multiplier", "name", "of"}
"""Op fields that change what a kernel computes but not how it is tiled."""


def tiling_key(ops: tuple[Op, ...]) -> tuple:
    """What a chain's tiling depends on: kinds, shapes and structure, not values (weights, zero points)."""
    return tuple((type(op).__name__, tuple((name, _structure(v)) for name, v in sorted(vars(op).items())
                                           if name not in VALUE_ONLY)) for op in ops)


def _structure(v):
    """A field's value as far as tiling sees it: arrays by shape, floats (scales) as present."""
    if isinstance(v, np.ndarray):
        return ("array", v.shape, v.dtype.str)
    if isinstance(v, (float, np.floating)):
        return "float"
    if isinstance(v, tuple):
        return tuple(_structure(x) for x in v)
    if dataclasses.is_dataclass(v):         # a conv's float mode (ops.FloatConv): its fields likewise
        return (type(v).__name__, tuple(_structure(getattr(v, f.name)) for f in dataclasses.fields(v)))
    return v
