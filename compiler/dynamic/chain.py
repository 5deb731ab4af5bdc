"""Dynamic ops one after another in one program: a chain composed through DDR, a network's ops linked.

Each op is written by its lowering (a function of a `Scope`: conv.prepare,
dense.prepare, ...) into one `Program`, in a scope of its own: its labels
and constant files prefixed `L<k>_`, its own registers and semaphores (the
ops run one after another; each drains its stores), its buffers bound to
the program's (op k's input is the previous op's output `t<k-1>`).  A buffer
is declared once, by the first op that names it.  Nothing is renamed after
it is written.

compose: a chain of one-input ops through DDR, `barrier Q_ALL` between two
(op k+1's loads after op k's stores).  So far every op must keep the Dims
(op k's output shape, axis by axis, is op k+1's input shape: stride 1 and
same padding), so that one argument block describes every buffer.

link: a network's ops, each bound to the graph's tensors, no barrier (each
ends on its drain, which every command it issued feeds).
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from nnpsim.config import Config

from ..errors import CompileError
from .asm import Line, Program, Scope
from .common import Part, add_notes, header

Lowering = Callable[[Scope], Part]


def _start() -> Program:
    prog = Program(repeat_align=True)    # the line layout of the programs once linked as text
    prog.text.append(Line("main:"))
    return prog


def _lower(prog: Program, k: int, lower: Lowering, bind: dict[str, str]) -> Part:
    """Op k written into prog in a scope of its own, its .data ended by a blank line."""
    if k:
        prog.align()
    part = lower(Scope(prog, prefix=f"L{k}_", bind=bind))
    prog.gap()
    return part


def compose(cfg: Config, steps: list[tuple[Lowering, str]]) -> tuple[str, dict[str, bytes]]:
    """One program running the ops (lowering, kind) in order, each on the previous one's output;
    (assembly, .incbin files)."""
    prog, last, parts = _start(), len(steps) - 1, []
    for k, (lower, kind) in enumerate(steps):
        b = Scope(prog)
        if k:
            b.i("barrier", "Q_ALL", comment="the previous op's stores are done")
        b.comment(f"---- op {k}: {kind}")
        parts.append(_lower(prog, k, lower, {"x": f"t{k - 1}" if k else "x", "y": "y" if k == last else f"t{k}"}))
        if k:
            was, now = dict(parts[k - 1].notes)["dynamic.buffer.y"], dict(parts[k].notes)["dynamic.buffer.x"]
            if now != was:
                raise CompileError(f"a dynamic chain's ops must keep the Dims so far: {steps[k - 1][1]}'s output "
                                   f"is ({was}) but {kind}'s input is ({now})")
    Scope(prog).i("halt")
    header(prog, parts[0].title, cfg)
    add_notes(prog, [(key, v) for key, v in parts[0].notes
                     if key != "dynamic.buffer.y" and not key.startswith("dynamic.buffer.t")])
    prog.head("")
    add_notes(prog, [(key, v) for key, v in parts[last].notes if key == "dynamic.buffer.y"])
    return prog.emit(), prog.files


def link(cfg: Config, steps: list[tuple[Lowering, dict[str, str]]], notes: dict[str, str], derived: str,
         graph_blob: np.ndarray) -> tuple[str, dict[str, bytes]]:
    """A network's dynamic ops as one program, in order; (assembly, .incbin files).

    No barrier between two: each op ends waiting for its last stores (its drain), and every command
    it issued feeds them, so the next op's loads and on-chip writes come after all of it.

    Each op comes with its binding (its buffer names x / a / b / y -> the network's buffers).  `notes`
    are the `.target dynamic.buffer.*` axes of the network's inputs and outputs, `derived` its `.target
    dynamic.derived` note, and `graph_blob` (int8) the graph description, stored as buffer nnp_graph.
    """
    prog, parts = _start(), []
    for k, (lower, bind) in enumerate(steps):
        b = Scope(prog, prefix=f"L{k}_")
        b.at(b.label("layer"), comment=f"---- op {k}")
        parts.append(_lower(prog, k, lower, bind))
    Scope(prog).i("halt")
    header(prog, parts[0].title, cfg)
    add_notes(prog, [(key, v) for key, v in parts[0].notes if not key.startswith("dynamic.buffer.")])
    prog.head("")
    add_notes(prog, [(f"dynamic.buffer.{name}", axes) for name, axes in notes.items()])
    if derived:
        add_notes(prog, [("dynamic.derived", derived)])
    prog.const_buffer("nnp_graph", "int8", (graph_blob.size,), graph_blob.view("uint8").tobytes())
    return prog.emit(), prog.files
