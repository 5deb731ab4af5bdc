"""A kernel linked into the network's program: its buffers renamed, its inputs and output pointed at
the network's DDR buffers, its statements under a label of its own."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..ir import Buffer, Command, CuWait, KernelIR, Label, Note, Ref
from ..passes import loops
from .partition import Group
from .storage import Storage


@dataclass
class Layer:
    """One kernel of the network as the layer table reports it."""

    name: str
    label: str
    ops: str
    in_shapes: list[list[int]]
    out_shape: list[int]
    macs: int
    predicted_cycles: int
    bound_cycles: int
    nodes: list[str] = field(default_factory=list)      # the graph nodes the kernel runs
    onchip: dict[str, int] = field(default_factory=dict)  # peak bytes of each on-chip memory
    pipelining: dict | None = None   # a fused kernel's pipelining.Choice (as_meta): chosen variant, every price


def label(name: str, k: int) -> str:
    """The assembly label of layer k."""
    return f"layer{k}_" + re.sub(r"\W", "_", name)[:40]


def retarget(cmd: Command, mapping: dict[Buffer, Ref]) -> None:
    """Point every address of cmd whose buffer is in mapping at its new place."""
    for attr in ("dst", "src", "racc", "rin", "rw", "d", "a", "b"):
        ref = getattr(cmd, attr, None)
        if isinstance(ref, Ref) and ref.buf in mapping:
            new = mapping[ref.buf]
            setattr(cmd, attr, Ref(new.buf, new.offset + ref.offset))


def link(k: int, group: Group, kir: KernelIR, storage: Storage,
         ddr: dict[str, Buffer]) -> tuple[list, list[Buffer]]:
    """The kernel's statements and own buffers, renamed, with its I/O pointed at the network's buffers."""
    name = label(group.name, k)
    mapping = {}
    for buf, value in zip(kir.inputs + [kir.output], group.inputs + [group.output]):
        slot = storage.slots[value]
        mapping[buf] = Ref(ddr[slot.buffer], slot.offset)
    own = [buf for buf in kir.buffers if buf not in mapping]
    for buf in own:
        buf.name = f"{name}_{buf.name}"
    body = loops.flatten(kir.body)          # (best_schedule was asked for a flat body: a no-op)
    for stmt in body:
        if isinstance(stmt, Command):
            retarget(stmt, mapping)
    title = f"layer {k}: {group.name}: " + " + ".join(o.kind for o in group.ops) + "".join(
        f"; {n}" for n in kir.notes if n.startswith("pipelining:"))      # compiler.interleave's choice
    return [Label(name), Note(title)] + [s for s in body if not isinstance(s, CuWait)], own
