"""build(): ops to a Kernel that runs on the simulator; the pass pipeline in one place."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import nnpasm
from nnpsim.config import Config, shape_target

from . import cost
from .errors import CompileError
from .ir import Dma, KernelIR
from .ops import Op, check_inputs
from .lowering import fusion
from .passes import alloc, emit, loops, sync


FINALISTS = 6   # tilings the quick per-tile model ranks best, then priced by replaying their schedule
NEAR = 0.01     # finalists predicted within 1% of the fastest count as fast: the shortest program wins


@dataclass
class Kernel:
    """A compiled kernel: call it with numpy inputs to run it on the simulator."""

    ops: tuple[Op, ...]
    ir: KernelIR
    asm: str
    program: object
    config: Config
    predicted_cycles: int
    usage: dict[str, int]
    files: dict[str, bytes]
    check_races: bool = False
    stats: object = None

    @property
    def roofline_cycles(self) -> int:
        """Cycles no schedule can beat on this configuration (compiler.roofline.bound_cycles)."""
        from .roofline import bound_cycles

        return bound_cycles(self.ops, self.config)

    @property
    def input_names(self) -> list[str]:
        """Names of the DDR input buffers, in call order."""
        return [b.name for b in self.ir.inputs]

    def __call__(self, *inputs: np.ndarray, check_races: bool | None = None) -> np.ndarray:
        """Run on the simulator; inputs in logical layout, the output likewise."""
        from nnpsim.simulator import Simulator   # the simulator is only needed to run

        arrays = check_inputs(_Signature(self), inputs)
        sim = Simulator(self.config)
        sim.load(self.program)
        for buf, a in zip(self.ir.inputs, arrays):
            sim.write(buf.name, a)
        races = self.check_races if check_races is None else check_races
        self.stats = sim.run(check_races=races)
        return sim.read(self.ir.output.name)

    def save(self, path: str | Path) -> None:
        """Write the binary that `nnpsim run` accepts."""
        self.program.save(path)

    def save_asm(self, path: str | Path) -> None:
        """Write the assembly and, beside it, the weight files it includes with .incbin."""
        path = Path(path)
        path.write_text(self.asm)
        for name, blob in self.files.items():
            path.with_name(name).write_bytes(blob)


class _Signature:
    """The kernel's inputs as an op-like object for check_inputs."""

    def __init__(self, k: Kernel):
        from .ops import Tensor
        self.kind = "kernel"
        self.inputs = tuple(Tensor(b.name, b.shape, b.dtype) for b in k.ir.inputs)


def _check_ops(ops) -> tuple[Op, ...]:
    for k, o in enumerate(ops):
        if not isinstance(o, Op):
            raise CompileError(f"argument {k} is not an op from compiler.ops: {o!r}")
    return tuple(ops)


def schedule(kir: KernelIR, cfg: Config, reroll: bool = True):
    """Allocate, synchronise and (unless reroll is False) roll kir's repeated tiles into loops,
    in place; (predicted cycles, usage, sync report)."""
    for cmd in kir.commands():
        if isinstance(cmd, Dma):
            cmd.chan %= cfg.dma_channels       # lowerings use four logical channels
    usage = alloc.allocate(kir, cfg)
    kir.body, report = sync.synchronise(kir.body, cfg.semaphores)
    if reroll:
        kir.body = loops.reroll(kir.body)
    return cost.schedule_cycles(kir.body, cfg), usage, report


def candidates(ops: tuple[Op, ...], cfg: Config) -> list[fusion.Candidate]:
    """Every lowering of the chain, best first by the quick estimate (build one with .make())."""
    return sorted(fusion.lower_chain(_check_ops(ops), cfg), key=lambda c: c.estimate)


def best_schedule(ops: tuple[Op, ...], cfg: Config, choice: int | None = None, reroll: bool = True):
    """The chain's cheapest scheduled KernelIR among the finalists: (kir, (predicted, usage, report), k).

    The finalists are priced flat; among those within NEAR of the fastest the shortest program
    wins, and (unless reroll is False: a network rerolls its whole program instead) its tiles
    are rolled into loops and it is priced again.  k is the winner's position among the
    chain's candidates; given it back as `choice` for a chain of the same shapes, only that
    candidate is built (a network's repeated layers).
    """
    found = list(fusion.lower_chain(_check_ops(ops), cfg))
    if choice is not None and 0 <= choice < len(found):
        order = [choice]
    else:
        order = sorted(range(len(found)), key=lambda k: found[k].estimate)[:FINALISTS]
    why, priced_all = "", []
    for k in order:
        kir, _ = found[k].make()
        try:
            priced_all.append((kir, schedule(kir, cfg, reroll=False), k))
        except CompileError as exc:
            why = str(exc)
    best = None
    if priced_all:
        fastest = min(p[1][0] for p in priced_all)
        near = [p for p in priced_all if p[1][0] <= fastest * (1 + NEAR)]
        best = min(near, key=lambda p: (cost.instructions(p[0].body), p[1][0])) if len(near) > 1 else near[0]
    if best is None:
        if choice is not None:
            return best_schedule(ops, cfg, reroll=reroll)
        raise CompileError(f"{ops[0].kind} cannot be compiled for this configuration: {why}")
    if reroll:
        kir, (_, usage, report), k = best
        kir.body = loops.reroll(kir.body)
        best = (kir, (cost.schedule_cycles(kir.body, cfg), usage, report), k)
    return best


def build(op, *more_ops: Op, config: Config | None = None, fuse: bool = True):
    """Compile one op, or a chain (each output feeds the next op's first input), into a Kernel.

    Given a compiler.Graph instead, compile the whole network into one program (a
    compiler.network.Library); fuse=False keeps one kernel per graph node.
    """
    cfg = (config or Config()).validate()
    if not isinstance(op, Op) and hasattr(op, "nodes") and hasattr(op, "values"):
        if more_ops:
            raise CompileError("build(graph) takes the graph alone")
        from .network import build_network
        return build_network(op, cfg, fuse=fuse)
    ops = _check_ops((op,) + more_ops)
    kir, priced, _ = best_schedule(ops, cfg)
    return finish(ops, kir, cfg, *priced)


def finish(ops: tuple[Op, ...], kir: KernelIR, cfg: Config, predicted: int, usage, report) -> Kernel:
    """Emit and assemble a scheduled KernelIR into a Kernel."""
    header = [f"kernel {kir.name}: " + " -> ".join(repr(o) for o in ops)] + kir.notes + [
        "on-chip bytes used: " + ", ".join(f"{k} {v}" for k, v in usage.items()),
        f"sync: {report.waits} command waits, {report.cu_waits} CU waits, "
        f"{len(report.semaphores)} semaphores", f"predicted cycles: {predicted}"]
    asm = emit.emit(kir, header, target=shape_target(cfg))
    files = emit.constant_files(kir)
    return Kernel(ops, kir, asm, assemble(asm, files, f"{kir.name}.s"), cfg, predicted, usage, files)


def assemble(asm: str, files: dict[str, bytes], filename: str):
    """The Program of emitted assembly, its .incbin files placed beside it in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="nnpc") as tmp:
        for name, blob in files.items():
            Path(tmp, name).write_bytes(blob)
        try:
            return nnpasm.assemble(asm, filename=filename, include_dirs=[tmp])
        except nnpasm.AsmError as exc:
            raise CompileError(f"internal: the emitted assembly does not assemble: {exc}") from None
