"""Dynamic kernels: one program for a range of shapes (compiler.Dim), built and run.

The lowerings in compiler/dynamic/ write the assembly; this module assembles it and wraps it in a
DynamicKernel that writes the argument block from its inputs' shapes (docs/dynamic.md).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from isa_spec.program import Program
from nnpsim.config import Config
from nnpsim.simulator import Simulator
from nnpsim.stats import Stats

from ..assembler import assemble, save_asm
from ..dims import DynamicChain, DynamicOp
from ..errors import CompileError
from ..lowering.driver import compose_clamp
from ..ops import Conv2d, Dense, Elementwise, Op, Pool2d
from .asm import Scope
from .chain import compose
from .common import Part, check_ddr_half, one_program
from .conv import prepare as conv_prepare
from .dense import prepare as dense_prepare
from .elementwise import lower_elementwise
from .fused import fusable
from .fused import program as fused_program
from .global_pool import is_global, lower_global_pool
from .pool import lower_pool


@dataclass
class DynamicKernel:
    """A compiled dynamic kernel: call it with an input of any in-range shape."""

    op: DynamicOp | DynamicChain
    asm: str
    program: Program
    config: Config
    rows_per_tile: dict[int, int] | None   # conv2d: input width -> output rows per tile
    files: dict[str, bytes]
    check_races: bool = False
    stats: Stats | None = None

    def __call__(self, *inputs: np.ndarray, check_races: bool | None = None) -> np.ndarray:
        """Run on the simulator: the argument block is written from the inputs' shapes."""
        arrays = [np.asarray(a) for a in inputs]
        self.op.values_of(*(a.shape for a in arrays))      # CompileError naming a dimension out of range
        sim = Simulator(self.config)
        sim.load(self.program)
        first = self.op.ops[0] if isinstance(self.op, DynamicChain) else self.op
        for name, a, t in zip(self.op.names, arrays, first.largest.inputs):
            if a.dtype != np.dtype(t.dtype):
                raise CompileError(f"{self.op.kind}: input {name} has dtype {a.dtype}, expected {t.dtype}")
            sim.write(name, a)
        races = self.check_races if check_races is None else check_races
        self.stats = sim.run(check_races=races)
        return sim.read("y")

    def run(self, *inputs: np.ndarray, check_races: bool | None = None) -> np.ndarray:
        """The same as calling it (compiler.build.Built.run)."""
        return self(*inputs, check_races=check_races)

    def save_asm(self, path: str | Path) -> None:
        """Write the assembly and, beside it, the constant files it includes with .incbin."""
        save_asm(path, self.asm, self.files)

    def save(self, path: str | Path) -> None:
        """Write the binary that `nnpsim run` accepts (`--input x=x.npy` of any in-range shape)."""
        self.program.save(path)


def build_dynamic(op: DynamicOp, *more_ops: DynamicOp, config: Config, schedule: None = None,
                  rows_per_tile: int | None = None, fuse: bool = True) -> DynamicKernel:
    """Compile a DynamicOp (or a chain of them) into one program for its whole range."""
    if schedule is not None:
        raise CompileError("a dynamic op takes no schedule= so far")
    if more_ops:
        return build_chain((op,) + more_ops, config, fuse)
    asm, files, rows = lower_one(op, config, rows_per_tile)
    return DynamicKernel(op, asm, assemble(asm, files, "dynamic.s"), config, rows, files)


def build_chain(ops: tuple, config: Config, fuse: bool = True) -> DynamicKernel:
    """Compile dynamic ops that keep their Dims (each output feeds the next) into one program: fused on
    chip (intermediates in DM) where every op has a tile body, else op after op through DDR."""
    for k, o in enumerate(ops):
        if not isinstance(o, DynamicOp) or o.names != ("x",):
            raise CompileError(f"a dynamic chain takes one-input dynamic ops (a Dim in each shape); op {k} is "
                               f"{o!r}")
    merged: list[DynamicOp] = []
    for o in ops:         # a relu / clip goes into the output range of the conv, add or mul before it
        both = folded(merged[-1], o) if merged and o.kind in ("relu", "clip") else None
        if both is None and o.kind in ("relu", "clip") and len(merged) > 1 and merged[-1].kind == "max_pool2d":
            # or before a max pool (a monotone clamp commutes with max; the pool's padding never wins)
            both = folded(merged[-2], o)
            if both is not None:
                merged[-2] = both
                continue
        if both is not None:
            merged[-1] = both
        else:
            merged.append(o)
    chain = DynamicChain(tuple(ops))
    why = "fuse=False" if not fuse else "" if fusable(merged) else "an op changes a Dim or has no fused form"
    if not why:
        for o in merged:
            check_ddr(o, config)
        try:
            asm, files, rows = fused_program(merged, config)
            return DynamicKernel(chain, asm, assemble(asm, files, "dynamic.s"), config, rows, files)
        except CompileError as exc:      # does not fit on chip: op after op through DDR instead
            why = str(exc)
    asm, files = compose(config, [(lowering(o, config), o.kind) for o in merged])
    if len(merged) > 1:
        asm = f"; not fused on chip: {why}\n" + asm
    return DynamicKernel(chain, asm, assemble(asm, files, "dynamic.s"), config, None, files)


def check_ddr(op: DynamicOp, config: Config) -> None:
    """CompileError unless the buffers for the largest shape fit DDR."""
    big = op.largest
    check_ddr_half(f"{op.kind}: its buffers", sum(t.nbytes for t in big.inputs) + big.output.nbytes, op.dims, config)


def lowering(op: DynamicOp, config: Config, rows_per_tile: int | None = None) -> Callable[[Scope], Part]:
    """One dynamic op planned, as the function that writes it into a scope (compiler/dynamic/chain.py)."""
    check_ddr(op, config)
    if isinstance(op.largest, Conv2d):
        return conv_prepare(op, config, rows_per_tile)
    if isinstance(op.largest, Dense):
        return dense_prepare(op, config)
    if isinstance(op.largest, Pool2d):
        return lambda b: (lower_global_pool if is_global(op) else lower_pool)(b, op, config)
    if isinstance(op.largest, Elementwise):
        return lambda b: lower_elementwise(b, op, config)
    raise CompileError(f"dynamic shapes are lowered for conv2d, dense, max, sum, average and global "
                       f"average pooling, add, mul, relu, clip and requantize so far, not {op.kind}")


def lower_one(op: DynamicOp, config: Config,
              rows_per_tile: int | None = None) -> tuple[str, dict[str, bytes], dict[int, int] | None]:
    """One dynamic op's (assembly, .incbin files, rows per tile or None)."""
    asm, files, part = one_program(config, lowering(op, config, rows_per_tile))
    return asm, files, part.rows


def absorb_clip(op: Op, clip: Op) -> Op | None:
    """op with the clip after it folded into its output range (the static lowering's compose_clamp), or None
    when op has no output range to fold into."""
    if not (isinstance(clip, Elementwise) and clip.mode == "clip"):
        return None
    if not (isinstance(op, Conv2d) or (isinstance(op, Elementwise) and op.mode in ("add", "mul", "clip"))):
        return None
    lo, hi = compose_clamp(op.lo, op.hi, clip.lo, clip.hi)
    return dataclasses.replace(op, lo=lo, hi=hi)


def folded(op: DynamicOp, clip: DynamicOp, reads_its_output: bool = False) -> DynamicOp | None:
    """The DynamicOp op with the dynamic clip after it folded in, or None.  Unless the caller knows the
    clip reads op's output (a graph edge), the clip's shape must be op's input's, Dim for Dim, and its
    output's at both ends of the range (a chain's op keeps the Dims)."""
    if absorb_clip(op.largest, clip.largest) is None:
        return None
    if not reads_its_output:
        x, c = op.x_shape, clip.x_shape
        if (c[0], c[2:]) != (x[0], x[2:]) or any(a.output.shape != b.inputs[0].shape for a, b in
                                                  ((op.largest, clip.largest), (op.smallest, clip.smallest))):
            return None
    make = lambda s: absorb_clip(op.make(s), clip.largest)      # noqa: E731  (only lo, hi are read)
    return DynamicOp(op.kind, op.x_shape, op.dims, make, make(op.largest.inputs[0].shape),
                     make(op.smallest.inputs[0].shape), op.names, op.in_shapes)
