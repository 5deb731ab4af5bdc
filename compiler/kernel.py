"""A chain of ops compiled into one Kernel that runs on the simulator; the static kernel build step by step."""
from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

from isa_spec.program import Program
from nnpsim.config import Config
from nnpsim.simulator import Simulator
from nnpsim.stats import Stats

from . import cost, interleave
from .assembler import assemble, save_asm
from .ir import KernelIR
from .lowering import driver, ring
from .lowering.layout import from_layout, io_layouts, to_layout
from .ops import Op, Tensor, check_inputs
from .passes import alloc
from .pipeline import check_ops, emit_kernel, fold_channels, price, synchronise
from .roofline import bound_cycles
from .schedule import Schedule
from .search import choose


@dataclass
class Kernel:
    """A compiled kernel: call it with numpy inputs to run it on the simulator."""

    ops: tuple[Op, ...]
    ir: KernelIR
    asm: str
    program: Program
    config: Config
    predicted_cycles: int
    usage: dict[str, int]
    files: dict[str, bytes]
    check_races: bool = False
    stats: Stats | None = None
    schedule: Schedule | None = None     # the decisions it was built with (str(): a replayable trace)

    @property
    def roofline_cycles(self) -> int:
        """Cycles no schedule can beat on this configuration (compiler.roofline.bound_cycles)."""
        return bound_cycles(self.ops, self.config)

    @property
    def input_names(self) -> list[str]:
        """Names of the DDR input buffers, in call order."""
        return [b.name for b in self.ir.inputs]

    def __call__(self, *inputs: np.ndarray, check_races: bool | None = None) -> np.ndarray:
        """Run on the simulator; inputs in logical layout, the output likewise."""
        arrays = check_inputs(_Signature(self), inputs)
        sim = Simulator(self.config)
        sim.load(self.program)
        in_layouts, out_layout = io_layouts(self.ops)     # what the ops keep in DDR (NCHW unless set)
        for buf, a, lay in zip(self.ir.inputs, arrays, in_layouts):
            sim.write(buf.name, to_layout(a, lay).reshape(a.shape))
        races = self.check_races if check_races is None else check_races
        self.stats = sim.run(check_races=races)
        return from_layout(sim.read(self.ir.output.name), self.ir.output.shape, out_layout)

    def run(self, *inputs: np.ndarray, check_races: bool | None = None) -> np.ndarray:
        """The same as calling it (compiler.build.Built.run)."""
        return self(*inputs, check_races=check_races)

    def save(self, path: str | Path) -> None:
        """Write the binary that `nnpsim run` accepts."""
        self.program.save(path)

    def save_asm(self, path: str | Path) -> None:
        """Write the assembly and, beside it, the weight files it includes with .incbin."""
        save_asm(path, self.asm, self.files)


class _Signature:
    """The kernel's inputs as an op-like object for check_inputs."""

    def __init__(self, k: Kernel):
        self.kind = "kernel"
        self.inputs = tuple(Tensor(b.name, b.shape, b.dtype) for b in k.ir.inputs)


def compile_kernel(ops: tuple[Op, ...], cfg: Config, schedule: Schedule | None = None) -> Kernel:
    """Compile a chain of ops (each output feeds the next op's first input) into a Kernel, with the given
    schedule (replayed on these ops: CompileError if it does not fit them) or the search's best."""
    ops = check_ops(ops)
    segs = driver.segments(ops)                          # 1. segments: an NU op with its epilogue, or a VU op
    sched = choose(schedule, ops, cfg, segs)             # 2. schedule search: the best, or the given one checked
    kir, steps = driver.lower(sched, cfg)                # 3. lowering: each kernel's tiles as Steps
    kir.body = interleave.pipelined(kir, steps, cfg, price, partial(ring.lower_ring, sched, cfg))   # 4. interleaving: tile k+1's loads first; a chain interleaved if cheaper
    fold_channels(kir, cfg)                              # 5. channel folding: logical DMA channels onto real ones
    usage = alloc.allocate(kir, cfg)                     # 6. allocation: on-chip addresses by lifetime
    kir.body, report = synchronise(kir, cfg)             # 7. synchronisation: semaphores, then loops
    predicted = cost.schedule_cycles(kir.body, cfg)      # 8. pricing: the cost model replays the body
    asm, files = emit_kernel(ops, kir, usage, report, predicted, cfg)  # 9. emission: text and weight files
    program = assemble(asm, files, f"{kir.name}.s")      # 10. assembly: nnpasm makes the Program
    return Kernel(ops, kir, asm, program, cfg, predicted, usage, files, schedule=sched)


def finish(ops: tuple[Op, ...], kir: KernelIR, cfg: Config, predicted: int, usage, report) -> Kernel:
    """Emit and assemble a scheduled KernelIR into a Kernel."""
    asm, files = emit_kernel(ops, kir, usage, report, predicted, cfg)
    return Kernel(ops, kir, asm, assemble(asm, files, f"{kir.name}.s"), cfg, predicted, usage, files)
