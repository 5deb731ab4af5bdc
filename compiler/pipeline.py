"""The compile pipeline from a schedule to a priced, emitted kernel, shared by the schedule search
(compiler.search), the kernel build (compiler.kernel) and the network build (compiler.network):

  lowered        a schedule lowered (lowering.driver) and its tiles interleaved (compiler.interleave)
  schedule       channel folding, allocation, synchronisation (then loops) and pricing, in place
  emit_kernel    the scheduled KernelIR as assembly text and .incbin files
"""
from __future__ import annotations

from functools import partial

from nnpsim.config import Config, shape_target

from . import cost, interleave
from .errors import CompileError
from .ir import Dma, KernelIR, Stmt
from .lowering import driver, ring
from .lowering.vu import broadcast_problem
from .ops import Op
from .passes import alloc, emit, loops, sync
from .passes.sync import SyncReport
from .schedule import Schedule


def check_ops(ops) -> tuple[Op, ...]:
    """The ops as a tuple; CompileError for an argument that is no compiler.ops op, or a broadcast the
    static lowering does not have."""
    for k, o in enumerate(ops):
        if not isinstance(o, Op):
            raise CompileError(f"argument {k} is not an op from compiler.ops: {o!r}")
        refuse_broadcast(o, f"argument {k}")
    return tuple(ops)


def refuse_broadcast(op, where: str) -> None:
    """CompileError for a broadcasting add / mul the static lowering does not have (lowering.vu)."""
    why = broadcast_problem(op)
    if why:
        raise CompileError(f"{where} ({op.kind}): {why}")


def fold_channels(kir: KernelIR, cfg: Config) -> None:
    """Put the lowerings' logical DMA channels (four per unit part) onto the configured ones."""
    for cmd in kir.commands():
        if isinstance(cmd, Dma):
            cmd.chan %= cfg.dma_channels


def synchronise(kir: KernelIR, cfg: Config, reroll: bool = True) -> tuple[list[Stmt], SyncReport]:
    """Semaphores for every conflict, then (unless reroll is False) repeated tiles rolled into loops:
    (body, sync report)."""
    body, report = sync.synchronise(kir.body, cfg.semaphores)
    return (loops.reroll(body) if reroll else body), report


def lowered(sched: Schedule, cfg: Config) -> KernelIR:
    """A schedule lowered and interleaved: the KernelIR before the passes."""
    kir, steps = driver.lower(sched, cfg)
    kir.body = interleave.pipelined(kir, steps, cfg, price, partial(ring.lower_ring, sched, cfg))
    return kir


def price(kir: KernelIR, cfg: Config) -> int:
    """Predicted cycles of kir's body as it stands, allocated and synchronised (not rolled)."""
    return schedule(kir, cfg, reroll=False)[0]


def schedule(kir: KernelIR, cfg: Config, reroll: bool = True,
             cycles: int | None = None) -> tuple[int, dict[str, int], SyncReport]:
    """Fold channels, allocate, synchronise and (unless reroll is False) roll kir's repeated tiles
    into loops, in place; (predicted cycles, usage, sync report).  `cycles`: the body's price when
    the caller replayed this very body before (it is not replayed again)."""
    fold_channels(kir, cfg)
    usage = alloc.allocate(kir, cfg)
    kir.body, report = synchronise(kir, cfg, reroll)
    return (cost.schedule_cycles(kir.body, cfg) if cycles is None else cycles), usage, report


def emit_kernel(ops: tuple[Op, ...], kir: KernelIR, usage: dict[str, int], report: SyncReport, predicted: int,
                cfg: Config) -> tuple[str, dict[str, bytes]]:
    """(assembly text, .incbin files) of a scheduled KernelIR, with its header of notes."""
    header = [f"kernel {kir.name}: " + " -> ".join(repr(o) for o in ops)] + kir.notes + [
        "on-chip bytes used: " + ", ".join(f"{k} {v}" for k, v in usage.items()),
        f"sync: {report.waits} command waits, {report.cu_waits} CU waits, "
        f"{len(report.semaphores)} semaphores", f"predicted cycles: {predicted}"]
    return emit.emit(kir, header, target=shape_target(cfg)), emit.constant_files(kir)
