"""Address families of a loop body: the moving addresses one loop register serves.

A Loop's moving addresses (LoopRefs) fall into families: addresses in one
space (a DDR buffer, or on chip) that step by the same stride, or rotate
through the same slots, and differ only by a constant.  One register steps or
rotates for a whole family; each member is that register plus its constant.
The reroll pass (passes.loops) counts the registers a candidate loop would
tie up, the emitter (passes.emit) allocates them: both by these functions.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir import Command, LoopRef, Ref, ref_fields


def address_value(ref: Ref) -> int:
    """An address as a number: absolute on chip, the offset into its buffer in DDR."""
    return ref.offset if ref.buf.space == "ddr" else ref.addr


@dataclass(frozen=True)
class Family:
    """Moving addresses that differ by constants: one loop register steps or rotates for all."""

    space: object           # DDR buffer ("ddr", name), or "chip" for on-chip (plain numbers)
    shape: tuple            # (stride,) or (period, offsets of the rotation from its first value, stride)


def family_of(ref: LoopRef) -> tuple[Family, int]:
    """A moving address's family and its iteration-0 value (the register holds it plus a constant)."""
    space = ("ddr", ref.buf.name) if ref.buf.space == "ddr" else "chip"
    if ref.cycle:
        vals = [address_value(r) for r in ref.cycle]
        return Family(space, (len(vals), tuple(v - vals[0] for v in vals), ref.stride)), vals[0]
    return Family(space, (ref.stride,)), address_value(ref)


def families(body: list) -> dict[Family, list[int]]:
    """Every family of a loop body with the iteration-0 values of its members (first use first)."""
    out: dict[Family, list[int]] = {}
    for stmt in body:
        if isinstance(stmt, Command):
            for f in ref_fields(stmt):
                ref = getattr(stmt, f)
                if isinstance(ref, LoopRef):
                    fam, v0 = family_of(ref)
                    vals = out.setdefault(fam, [])
                    if v0 not in vals:
                        vals.append(v0)
    return out


def rotation_period(fam: Family) -> int:
    """Places a family's register rotates through (1: it steps)."""
    return fam.shape[0] if len(fam.shape) == 3 else 1


def family_registers(fam: Family) -> int:
    """Registers a family ties up: one that steps, or alternates on chip (`xori`), else one per slot."""
    n = rotation_period(fam)
    return 1 if n == 1 or (n == 2 and fam.space == "chip") else n


def registers_needed(fams) -> int:
    """Loop registers: each family's, and one spare for the moves of a rotation longer than two."""
    return sum(family_registers(f) for f in fams) + (1 if any(rotation_period(f) > 2 for f in fams) else 0)
