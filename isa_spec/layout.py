"""Buffer layouts: how a logical tensor is stored in memory.

A layout spec is a whitespace-separated list of steps applied in order to the
logical array (row-major, NCHW for activations):

    spec    := step*
    step    := name "(" int ("," int)* ")"
    split(axis, factor)   pad the axis with zeros to a multiple of factor and
                          reshape it into (n / factor, factor)
    pad(axis, size)       pad the axis with zeros up to size
    reorder(p0, p1, ...)  transpose: stored axis k is axis p_k of the input

Example: "split(1,32) reorder(0,1,3,4,2)" turns NCHW into N, C/32, H, W, 32.
The empty spec is the logical row-major array.  The stored bytes are the
final array in row-major order.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np


class LayoutError(ValueError):
    """A layout spec is malformed or does not fit the shape it is applied to."""


@dataclass(frozen=True)
class Step:
    """One layout step; `pos` is its character offset in the spec (for messages)."""

    op: str
    args: tuple[int, ...]
    pos: int = 0

    @property
    def text(self) -> str:
        return f"{self.op}({','.join(str(a) for a in self.args)})"


_ARITY = {"split": 2, "pad": 2}
_STEP = re.compile(r"\s*([a-z]+)\s*\(([^()]*)\)")
_INT = re.compile(r"\s*([0-9]+)\s*")


def parse_layout(spec: str) -> list[Step]:
    """Parse a layout spec into steps, checking syntax and argument counts."""
    if not isinstance(spec, str):
        raise LayoutError(f"layout spec must be a string, not {type(spec).__name__}")
    steps, pos = [], 0
    while spec[pos:].strip():
        m = _STEP.match(spec, pos)
        if m is None:
            raise LayoutError(f"layout {spec!r}: expected name(args) at position {_skip_ws(spec, pos)}")
        op, start = m.group(1), m.start(1)
        if op not in ("split", "pad", "reorder"):
            raise LayoutError(f"layout {spec!r}: unknown step {op!r} at position {start} "
                              "(split, pad, reorder)")
        args = tuple(_parse_int(spec, a, start) for a in m.group(2).split(","))
        if op in _ARITY and len(args) != _ARITY[op]:
            raise LayoutError(f"layout {spec!r}: {op} at position {start} takes {_ARITY[op]} "
                              f"arguments, got {len(args)}")
        if op == "split" and args[1] < 1:
            raise LayoutError(f"layout {spec!r}: split at position {start}: factor must be >= 1")
        if op == "reorder" and sorted(args) != list(range(len(args))):
            raise LayoutError(f"layout {spec!r}: reorder at position {start}: {args} is not a "
                              f"permutation of 0..{len(args) - 1}")
        steps.append(Step(op, args, start))
        pos = m.end()
    return steps


def _skip_ws(spec: str, pos: int) -> int:
    return len(spec) - len(spec[pos:].lstrip())


def _parse_int(spec: str, text: str, pos: int) -> int:
    m = _INT.fullmatch(text)
    if m is None:
        raise LayoutError(f"layout {spec!r}: step at position {pos}: {text.strip()!r} is not "
                          "a non-negative integer")
    return int(m.group(1))


def compose(steps: list[Step]) -> str:
    """The canonical spec string for a list of steps."""
    return " ".join(s.text for s in steps)


def _apply_shape(step: Step, shape: tuple[int, ...], spec: str) -> tuple[int, ...]:
    """Shape after one step; LayoutError if the step does not fit `shape`."""
    where = f"layout {spec!r}: {step.text} at position {step.pos}"
    if step.op == "reorder":
        if len(step.args) != len(shape):
            raise LayoutError(f"{where}: needs {len(shape)} axes for a rank-{len(shape)} array")
        return tuple(shape[p] for p in step.args)
    axis, n = step.args
    if axis >= len(shape):
        raise LayoutError(f"{where}: axis {axis} out of range for a rank-{len(shape)} array")
    dim = shape[axis]
    if step.op == "split":
        return shape[:axis] + (-(-dim // n), n) + shape[axis + 1:]
    if n < dim:
        raise LayoutError(f"{where}: axis {axis} has size {dim} > {n}")
    return shape[:axis] + (n,) + shape[axis + 1:]


def _shape_chain(spec: str, shape: tuple[int, ...]) -> tuple[list[Step], list[tuple[int, ...]]]:
    """The steps and the shape before each step plus the final shape."""
    shape = tuple(int(d) for d in shape)
    if any(d < 0 for d in shape):
        raise LayoutError(f"shape {shape} has a negative dimension")
    steps = parse_layout(spec)
    chain = [shape]
    for step in steps:
        chain.append(_apply_shape(step, chain[-1], spec))
    return steps, chain


def stored_shape(spec: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape of the stored array for a logical `shape`."""
    return _shape_chain(spec, shape)[1][-1]


def _pad_axis(a: np.ndarray, axis: int, size: int) -> np.ndarray:
    widths = [(0, 0)] * a.ndim
    widths[axis] = (0, size - a.shape[axis])
    return np.pad(a, widths)


def to_stored(spec: str, array: np.ndarray) -> np.ndarray:
    """The stored (row-major, contiguous) array for a logical array."""
    a = np.asarray(array)
    steps, chain = _shape_chain(spec, a.shape)
    for step, after in zip(steps, chain[1:]):
        if step.op == "reorder":
            a = a.transpose(step.args)
        elif step.op == "split":
            axis = step.args[0]
            a = _pad_axis(a, axis, after[axis] * after[axis + 1]).reshape(after)
        else:
            a = _pad_axis(a, step.args[0], step.args[1])
    return np.ascontiguousarray(a)


def from_stored(spec: str, stored: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The logical array of `shape` from its stored form (inverse of to_stored, padding dropped)."""
    a = np.asarray(stored)
    steps, chain = _shape_chain(spec, shape)
    if a.shape != chain[-1]:
        raise LayoutError(f"layout {spec!r}: stored array has shape {a.shape}, "
                          f"expected {chain[-1]} for logical shape {chain[0]}")
    for step, before in zip(reversed(steps), reversed(chain[:-1])):
        if step.op == "reorder":
            a = a.transpose(np.argsort(step.args))
        else:
            axis = step.args[0]
            if step.op == "split":
                a = a.reshape(a.shape[:axis] + (a.shape[axis] * a.shape[axis + 1],) + a.shape[axis + 2:])
            a = a[(slice(None),) * axis + (slice(0, before[axis]),)]
    return np.ascontiguousarray(a)
