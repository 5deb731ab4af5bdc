"""A dynamic-shape program's argument block: which sizes it reads, and the checks on them.

A program compiled for a range of shapes (docs/dynamic.md)
describes itself in `.target` notes:

    .target dynamic.dims, "n:1:4 h:8:64 w:8:64"     dims in argument-block order, name:lo:hi
    .target dynamic.args, "args"                     the int32 DDR buffer holding their values
    .target dynamic.buffer.x, "n 32 h w"             a buffer's actual shape, axis by axis
    .target dynamic.buffer.y, "n 32 h:-1:0 w:-1:0"   name:add:shift is ((name + add) >> shift) + 1,
                                                     name:add:shift:d (((name + add) >> shift) // d) + 1
    .target dynamic.derived, "h_1=h:-3:1"            a dim of its own in the block, fixed by another's
                                                     value (a network's layer after a strided conv)

Its buffers are sized for the largest shape; a tensor of the actual shape is
stored packed at the buffer's start.  Writing an input infers the dims from
its shape and writes the block; before a run the block is checked against
every range, so a bad block is an error naming the dimension, never an
out-of-bounds access.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import errors
from .errors import SimError


@dataclass(frozen=True)
class Signature:
    """The dims (name -> (lo, hi)) in block order, the block's buffer, each dynamic buffer's axes, and the
    derived dims (name -> "parent:add:shift")."""

    dims: dict[str, tuple[int, int]]
    args: str
    buffers: dict[str, tuple[str, ...]]
    derived: dict[str, str] = None

    def complete(self, values: dict[str, int]) -> dict[str, int]:
        """values with every derived dim whose parent is known filled in (in note order)."""
        out = dict(values)
        for name, spec in (self.derived or {}).items():
            if spec.split(":")[0] in out:
                out[name] = axis_size(spec, out)
        return out

    def shape(self, buffer: str, values: dict[str, int]) -> tuple[int, ...]:
        """The actual shape of a dynamic buffer for these dim values."""
        return tuple(axis_size(a, values) for a in self.buffers[buffer])


def axis_size(spec: str, values: dict[str, int]) -> int:
    """An axis spec ("32", "h", "h:add:shift" or "h:add:shift:divisor") evaluated for the dim values."""
    if spec.lstrip("-").isdigit():
        return int(spec)
    if ":" not in spec:
        return values[spec]
    name, add, shift, *div = spec.split(":")
    return ((values[name] + int(add)) >> int(shift)) // int(div[0] if div else 1) + 1


def rule_text(spec: str) -> str:
    """A derived axis spec as a formula: ((h + -1) >> 1) + 1, or ((h + -3) >> 0) // 3 + 1."""
    name, add, shift, *div = spec.split(":")
    return f"(({name} + {add}) >> {shift}){f' // {div[0]}' if div else ''} + 1"


def signature(program) -> Signature | None:
    """The program's dynamic-shape description, or None for a program of fixed shapes."""
    cfg = getattr(program, "config", None) or {}
    if "dynamic.dims" not in cfg:
        return None
    try:
        dims = {}
        for item in str(cfg["dynamic.dims"]).split():
            name, lo, hi = item.split(":")
            dims[name] = (int(lo), int(hi))
        buffers = {k[len("dynamic.buffer."):]: tuple(str(v).split()) for k, v in cfg.items()
                   if k.startswith("dynamic.buffer.")}
        derived = {}
        for item in str(cfg.get("dynamic.derived", "")).split():
            name, spec = item.split("=")
            parent, add, shift, *div = spec.split(":")
            int(add)
            if len(div) > 1 or int(shift) < 0 or int(div[0] if div else 1) < 1:
                raise ValueError(f"derived dim {item!r}: expected parent:add:shift[:divisor]")
            if name not in dims or parent not in dims:
                raise KeyError(f"derived dim {item!r} names a dim the block lacks")
            derived[name] = spec
        sig = Signature(dims, str(cfg["dynamic.args"]), buffers, derived)
        check_notes(sig, program.buffers)
        return sig
    except (KeyError, ValueError) as exc:
        raise SimError(f"cannot load program: its dynamic-shape notes (.target dynamic.*) are malformed: {exc}",
                       errors.BAD_PARAM) from None


MAX_DIM = (1 << 31) - 1
"""Largest dim value: the argument block holds int32 words."""


def check_notes(sig: Signature, buffers: dict) -> None:
    """ValueError unless the notes agree with the program's buffers: every dim's range inside [0, MAX_DIM], the
    block's buffer int32 with a word per dim, and every dynamic buffer a buffer of the program that holds its
    tensor at the largest dim values (so no write or read for an in-range shape leaves it)."""
    for name, (lo, hi) in sig.dims.items():
        if not 1 <= lo <= hi <= MAX_DIM:
            raise ValueError(f"dim {name} range [{lo}, {hi}] is not inside [1, {MAX_DIM}]")
    args = buffers.get(sig.args)
    if args is None or args.dtype != "int32" or args.nbytes < 4 * len(sig.dims):
        raise ValueError(f"argument block {sig.args!r} is not an int32 buffer of {len(sig.dims)} words")
    low = {name: lo for name, (lo, _) in sig.dims.items()}
    high = {name: hi for name, (_, hi) in sig.dims.items()}
    for name, axes in sig.buffers.items():
        buf = buffers.get(name)
        if buf is None or name == sig.args:
            raise ValueError(f"dynamic.buffer.{name} names no data buffer of the program")
        for spec in axes:
            _check_axis(name, spec, sig, low, high)
        need = int(np.prod([axis_size(a, high) for a in axes], dtype=object)) * np.dtype(buf.dtype).itemsize
        if need > buf.nbytes:
            raise ValueError(f"buffer {name} ({' '.join(axes)}) needs {need} bytes at the largest dims "
                             f"{high}, but the program's buffer {name} holds {buf.nbytes}")


def _check_axis(buffer: str, spec: str, sig: Signature, low: dict, high: dict) -> None:
    """ValueError unless an axis spec is a size, a dim, or a rule of a dim, of at least 1 at the low end."""
    if spec.isdigit():
        if int(spec) > MAX_DIM:
            raise ValueError(f"buffer {buffer} axis {spec} is larger than {MAX_DIM}")
        return
    name, *rule = spec.split(":")
    if name not in sig.dims:
        raise ValueError(f"buffer {buffer} axis {spec!r} names no dim of the block")
    if rule:
        add, shift, *div = rule
        if len(div) > 1 or not 0 <= int(shift) <= 31 or int(div[0] if div else 1) < 1 or abs(int(add)) > MAX_DIM:
            raise ValueError(f"buffer {buffer} axis {spec!r}: expected name:add:shift[:divisor]")
    if not 1 <= axis_size(spec, low) <= axis_size(spec, high) <= MAX_DIM:
        raise ValueError(f"buffer {buffer} axis {spec!r} is {axis_size(spec, low)} at the low end of the dims, "
                         f"not in [1, {MAX_DIM}]")


def infer(sig: Signature, buffer: str, shape: tuple[int, ...], known: dict[str, int]) -> dict[str, int]:
    """The dim values an array of `shape` written to `buffer` gives, checked against the ranges and the
    values earlier inputs gave (ValueError naming the dimension and its range)."""
    axes = sig.buffers[buffer]
    if len(shape) != len(axes):
        raise ValueError(f"buffer {buffer} takes {len(axes)} dimensions ({' '.join(axes)}); got shape {shape}")
    values = dict(known)
    for k, (spec, n) in enumerate(zip(axes, shape)):
        if spec.lstrip("-").isdigit():
            if n != int(spec):
                raise ValueError(f"buffer {buffer} axis {k} is {n}, expected {spec} (it is not dynamic)")
            continue
        if ":" in spec:
            continue          # a derived axis (an output's): checked below once the dims are known
        lo, hi = sig.dims[spec]
        if not lo <= n <= hi:
            raise ValueError(f"buffer {buffer} axis {k}: dimension {spec} = {n} is outside its range [{lo}, {hi}]")
        if spec in values and values[spec] != n:
            raise ValueError(f"dimension {spec} is {values[spec]} from an earlier input but {n} in buffer "
                             f"{buffer} axis {k}: inputs disagree")
        values[spec] = n
    values = sig.complete(values)
    try:
        want = sig.shape(buffer, values)
    except KeyError as exc:
        raise ValueError(f"buffer {buffer}: dimension {exc.args[0]} is not known yet (write an input "
                         f"that has it first)") from None
    if tuple(shape) != want:
        raise ValueError(f"buffer {buffer} has shape {want} for {values}; got {tuple(shape)}")
    return values


def block(sig: Signature, values: dict[str, int]) -> np.ndarray:
    """The argument block (int32, dims in order) for these values."""
    return np.array([values.get(name, 0) for name in sig.dims], dtype=np.int32)


def check(sig: Signature, words: np.ndarray) -> dict[str, int]:
    """The dim values of an argument block, or SimError naming the first dimension out of its range."""
    values = {}
    for (name, (lo, hi)), v in zip(sig.dims.items(), np.asarray(words).reshape(-1).tolist()):
        if not lo <= v <= hi:
            raise SimError(f"bad argument block {sig.args}: dimension {name} = {v} is outside its range "
                           f"[{lo}, {hi}] (the program's buffers are sized for {name} <= {hi}); write an "
                           f"input of an in-range shape first", errors.OUT_OF_BOUNDS)
        values[name] = v
    for name, spec in (sig.derived or {}).items():
        want = axis_size(spec, values)
        if values[name] != want:
            raise SimError(f"bad argument block {sig.args}: dimension {name} = {values[name]} but it follows "
                           f"from {spec.split(':')[0]} = {values[spec.split(':')[0]]} as {want} ({name} = "
                           f"{rule_text(spec)})",
                           errors.BAD_PARAM)
    return values
