"""build(): ops to a Kernel that runs on the simulator; the pipeline in one place, step by step."""
from __future__ import annotations

import gc
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

import nnpasm
from nnpsim.config import Config, shape_target

from . import cost, pipelining
from .errors import CompileError
from .ir import Dma, KernelIR
from .ops import Op, check_inputs
from . import schedule as sched_mod
from .lowering import driver, ring
from .lowering.layout import from_layout, io_layouts, to_layout
from .passes import alloc, emit, loops, sync
from .schedule import Schedule


FINALISTS = 6   # tilings the quick per-tile model ranks best, then priced by replaying their schedule
ONE_TILE_PIXELS, ONE_TILE_CYCLES, ONE_TILE_FINALISTS = 64, 8000, 32
"""A chain whose output maps have at most ONE_TILE_PIXELS pixels runs in one spatial tile: the quick
model, which prices a pipeline's start and end crudely, ranks its tilings worst (MobileNetV2's
576 -> 160 1x1 conv at 7x7: the best by replay 27th of 40).  When its roofline bound is also at most
ONE_TILE_CYCLES, replaying one is cheap: up to ONE_TILE_FINALISTS are priced."""
SMALL_CYCLES, SMALL_FINALISTS = 16000, 12
"""A chain with a roofline bound of at most SMALL_CYCLES is replayed in a few milliseconds a finalist,
and the quick model ranks its tilings poorly too (a pipeline of a few tiles or chunks: MobileNetV2's
576 -> 96 1x1 conv at 14x14, the best by replay 10th of 81): up to SMALL_FINALISTS are priced."""
NEAR = 0.02     # finalists predicted within 2% of the fastest count as fast: the shortest program wins


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
    schedule: Schedule | None = None     # the decisions it was built with (str(): a replayable trace)

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
        in_layouts, out_layout = io_layouts(self.ops)     # what the ops keep in DDR (NCHW unless set)
        for buf, a, lay in zip(self.ir.inputs, arrays, in_layouts):
            sim.write(buf.name, to_layout(a, lay).reshape(a.shape))
        races = self.check_races if check_races is None else check_races
        self.stats = sim.run(check_races=races)
        return from_layout(sim.read(self.ir.output.name), self.ir.output.shape, out_layout)

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
        refuse_broadcast(o, f"argument {k}")
    return tuple(ops)


def refuse_broadcast(op, where: str) -> None:
    """CompileError for a broadcasting add / mul the static lowering does not have (lowering.vu)."""
    from .lowering.vu import broadcast_problem
    why = broadcast_problem(op)
    if why:
        raise CompileError(f"{where} ({op.kind}): {why}")


def fold_channels(kir: KernelIR, cfg: Config) -> None:
    """Put the lowerings' logical DMA channels (four per unit part) onto the configured ones."""
    for cmd in kir.commands():
        if isinstance(cmd, Dma):
            cmd.chan %= cfg.dma_channels


def synchronise(kir: KernelIR, cfg: Config, reroll: bool = True):
    """Semaphores for every conflict, then (unless reroll is False) repeated tiles rolled into loops:
    (body, sync report)."""
    body, report = sync.synchronise(kir.body, cfg.semaphores)
    return (loops.reroll(body) if reroll else body), report


def lowered(sched: Schedule, cfg: Config) -> KernelIR:
    """A schedule lowered and pipelined: the KernelIR before the passes."""
    kir, steps = driver.lower(sched, cfg)
    kir.body = pipelining.pipelined(kir, steps, cfg, _price, partial(ring.lower_ring, sched, cfg))
    return kir


def _price(kir: KernelIR, cfg: Config) -> int:
    """Predicted cycles of kir's body as it stands, allocated and synchronised (not rolled)."""
    return schedule(kir, cfg, reroll=False)[0]


def schedule(kir: KernelIR, cfg: Config, reroll: bool = True):
    """Fold channels, allocate, synchronise and (unless reroll is False) roll kir's repeated tiles
    into loops, in place; (predicted cycles, usage, sync report)."""
    fold_channels(kir, cfg)
    usage = alloc.allocate(kir, cfg)
    kir.body, report = synchronise(kir, cfg, reroll)
    return cost.schedule_cycles(kir.body, cfg), usage, report


def candidates(ops: tuple[Op, ...], cfg: Config) -> list[Schedule]:
    """Every schedule the search considers for the chain, best first by the quick estimate."""
    found = sched_mod.candidates(_check_ops(ops), cfg)
    return [found[k] for k in _ranked(found, cfg)]


def _ranked(found: list[Schedule], cfg: Config, top: int | None = None) -> list[int]:
    """Positions of the candidates (the `top` first), best first by the quick estimate of their first
    conv block (none: in the order given)."""
    nu = [k for k, b in enumerate(found[0].blocks) if b.kind == "nu"]
    if len(found) == 1 or not nu:
        return list(range(len(found)))[:top]
    # by the first conv block: a chain's candidates (its own schedule, compiler.pipeline_schedule's
    # row by row one) differ only in their conv blocks, and a VU block has no quick estimate
    return sched_mod.ranked(found, cfg, len(found) if top is None else top, nu[0])


def search(ops: tuple[Op, ...], cfg: Config, choice: int | None = None, segments: list | None = None):
    """The chain's best schedule: (schedule, its scheduled flat KernelIR, (predicted, usage, report), k).

    The FINALISTS best by the quick estimate are lowered, allocated, synchronised and priced
    flat; among those within NEAR of the fastest the shortest program wins.  k is the
    winner's position among the chain's candidates; given back as `choice` for a chain of the
    same shapes, only that candidate is built (a network's repeated layers).
    """
    ops = _check_ops(ops)
    chosen = sched_mod.candidate(ops, cfg, choice, segments) if choice is not None else None
    if chosen is not None:           # only that candidate is built: the others would go unused
        found, order = {choice: chosen}, [choice]
    else:
        found = sched_mod.candidates(ops, cfg, segments)
        order = _ranked(found, cfg, _finalists(ops, cfg))
    why, priced_all = "", []
    for k in order:
        try:
            kir = lowered(found[k], cfg)
            priced_all.append((found[k], kir, schedule(kir, cfg, reroll=False), k))
        except CompileError as exc:
            why = str(exc)
    if not priced_all:
        if choice is not None:
            return search(ops, cfg, segments=segments)
        raise CompileError(f"{ops[0].kind} cannot be compiled for this configuration: {why}")
    # intermediates stay on chip where some finalist manages it (a ring may be dearer than a DDR scratch buffer)
    priced_all = [p for p in priced_all if not pipelining.scratch(p[1])] or priced_all
    fastest = min(p[2][0] for p in priced_all)
    near = [p for p in priced_all if p[2][0] <= fastest * (1 + NEAR)]
    return min(near, key=lambda p: (cost.instructions(p[1].body), p[2][0])) if len(near) > 1 else near[0]


def _finalists(ops: tuple[Op, ...], cfg: Config) -> int:
    """How many candidates the search replays: more for a small kernel (ONE_TILE_*, SMALL_*)."""
    from .roofline import bound_cycles

    shape, bound = ops[-1].output.shape, bound_cycles(ops, cfg)
    if len(shape) == 4 and shape[2] * shape[3] <= ONE_TILE_PIXELS and bound <= ONE_TILE_CYCLES:
        return ONE_TILE_FINALISTS
    return SMALL_FINALISTS if bound <= SMALL_CYCLES else FINALISTS


def best_schedule(ops: tuple[Op, ...], cfg: Config, choice: int | None = None, reroll: bool = True):
    """The chain's cheapest scheduled KernelIR among the finalists: (kir, (predicted, usage, report), k).

    Unless reroll is False (a network rerolls its whole program instead) the winner's tiles
    are rolled into loops and it is priced again.
    """
    _, kir, (predicted, usage, report), k = search(ops, cfg, choice)
    if reroll:
        kir.body = loops.reroll(kir.body)
        predicted = cost.schedule_cycles(kir.body, cfg)
    return kir, (predicted, usage, report), k


def choose(given: Schedule | None, ops: tuple[Op, ...], cfg: Config, segments: list) -> Schedule:
    """The schedule to build with: the search's best, or the given one replayed on these ops and
    this configuration (which checks it: CompileError if it does not fit them)."""
    if given is None:
        return search(ops, cfg, segments=segments)[0]
    if not isinstance(given, Schedule):
        raise CompileError(f"schedule= takes a compiler.Schedule (Schedule.from_trace reads its text), "
                           f"not {type(given).__name__}")
    s = given.replay(*ops, config=cfg, segments=segments)
    s.check()
    return s


def build(op, *more_ops: Op, config: Config | None = None, schedule: Schedule | None = None,
          fuse: bool = True):
    """Compile one op, or a chain (each output feeds the next op's first input), into a Kernel.

    With `schedule`, use it (it is replayed on these ops: CompileError if it does not fit them)
    instead of searching.  Given an op with a compiler.Dim in its shape, one program for its whole range
    (compiler.dynamic_kernel.DynamicKernel).  Given a compiler.Graph instead, compile the whole network into
    one program (a compiler.network.Library); fuse=False keeps one kernel per graph node.
    """
    cfg = (config or Config()).validate()
    from .dims import DynamicOp
    from .dynamic_network import DynamicGraph
    if isinstance(op, DynamicGraph):
        from .dynamic_network import build_dynamic_network
        return build_dynamic_network(op, cfg)
    if isinstance(op, DynamicOp):
        from .dynamic_kernel import build_dynamic
        return build_dynamic(op, *more_ops, config=cfg, schedule=schedule, fuse=fuse)
    if not isinstance(op, Op) and hasattr(op, "nodes") and hasattr(op, "values"):
        if more_ops or schedule is not None:
            raise CompileError("build(graph) takes the graph alone")
        if getattr(op, "dims", ()):
            from .dynamic_network import build_dynamic_network
            return build_dynamic_network(op.dynamic(), cfg)
        from .network import build_network
        with fewer_collections():
            return build_network(op, cfg, fuse=fuse)
    ops = _check_ops((op,) + more_ops)
    segs = driver.segments(ops)                          # 1. segments: an NU op with its epilogue, or a VU op
    sched = choose(schedule, ops, cfg, segs)             # 2. schedule search: the best, or the given one checked
    kir, steps = driver.lower(sched, cfg)                # 3. lowering: each kernel's tiles as Steps
    kir.body = pipelining.pipelined(kir, steps, cfg, _price, partial(ring.lower_ring, sched, cfg))   # 4. pipelining: tile k+1's loads first; a chain interleaved if cheaper
    fold_channels(kir, cfg)                              # 5. channel folding: logical DMA channels onto real ones
    usage = alloc.allocate(kir, cfg)                     # 6. allocation: on-chip addresses by lifetime
    kir.body, report = synchronise(kir, cfg)             # 7. synchronisation: semaphores, then loops
    predicted = cost.schedule_cycles(kir.body, cfg)      # 8. pricing: the cost model replays the body
    asm, files = emit_kernel(ops, kir, usage, report, predicted, cfg)  # 9. emission: text and weight files
    program = assemble(asm, files, f"{kir.name}.s")      # 10. assembly: nnpasm makes the Program
    return Kernel(ops, kir, asm, program, cfg, predicted, usage, files, schedule=sched)


@contextmanager
def fewer_collections(young: int = 100_000):
    """Run the body with the cyclic garbage collector's youngest generation collected only every
    `young` allocations: a network's compile allocates millions of short-lived IR objects, few of
    them in cycles, and the default (every 700) spends a fifth of the compile scanning them."""
    old = gc.get_threshold()
    gc.set_threshold(max(young, old[0]), *old[1:])
    try:
        yield
    finally:
        gc.set_threshold(*old)


def emit_kernel(ops: tuple[Op, ...], kir: KernelIR, usage, report, predicted: int, cfg: Config):
    """(assembly text, .incbin files) of a scheduled KernelIR, with its header of notes."""
    header = [f"kernel {kir.name}: " + " -> ".join(repr(o) for o in ops)] + kir.notes + [
        "on-chip bytes used: " + ", ".join(f"{k} {v}" for k, v in usage.items()),
        f"sync: {report.waits} command waits, {report.cu_waits} CU waits, "
        f"{len(report.semaphores)} semaphores", f"predicted cycles: {predicted}"]
    return emit.emit(kir, header, target=shape_target(cfg)), emit.constant_files(kir)


def finish(ops: tuple[Op, ...], kir: KernelIR, cfg: Config, predicted: int, usage, report) -> Kernel:
    """Emit and assemble a scheduled KernelIR into a Kernel."""
    asm, files = emit_kernel(ops, kir, usage, report, predicted, cfg)
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
