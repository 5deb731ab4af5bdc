"""`make demo`, dynamic part: one small CNN binary run at three resolutions.

conv 3x3 (3 -> 16, relu) -> max_pool 3x3 stride 1 -> conv 3x3 (16 -> 8), height and width each a
compiler.Dim in [8, 64], compiled once into out/dynamic_cnn.bin; that same file is loaded and run
at 16x16, 40x24 and 64x64, each result compared with numpy on every element, race-checked.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from isa_spec.program import Program
from nnpsim.simulator import Simulator

from .. import ops
from ..build import build
from ..dims import Dim, DynamicChain, DynamicOp

OUT = Path("out")
BINARY = "dynamic_cnn.bin"
RESOLUTIONS = ((16, 16), (40, 24), (64, 64))


def cnn(seed: int = 0) -> tuple[DynamicOp, DynamicOp, DynamicOp]:
    """The three dynamic ops of the demo's CNN."""
    rng = np.random.default_rng(seed)
    n, h, w = Dim("n", 1, 1), Dim("h", 8, 64), Dim("w", 8, 64)
    conv1 = ops.conv2d((n, 3, h, w), rng.integers(-40, 41, (16, 3, 3, 3)), rng.integers(-800, 800, 16),
                       padding=1, multiplier=rng.integers(2**30, 2**31, 16), shift=np.full(16, 37), lo=0)
    pool = ops.max_pool2d((n, 16, h, w), 3, 1, 1)
    conv2 = ops.conv2d((n, 16, h, w), rng.integers(-20, 21, (8, 16, 3, 3)), None, padding=1,
                       multiplier=rng.integers(2**30, 2**31, 8), shift=np.full(8, 38))
    return conv1, pool, conv2


def main(argv: list[str] | None = None) -> int:
    """Build the binary once, run it at every resolution; 0 if every result is exact."""
    ops_ = cnn()
    kernel = build(*ops_)
    OUT.mkdir(exist_ok=True)
    path = OUT / BINARY
    kernel.save(path)
    program = Program.load(path)
    chain = DynamicChain(ops_)
    rng = np.random.default_rng(1)
    print(f"dynamic CNN: {chain!r}")
    print(f"one binary: {path} ({path.stat().st_size:,} bytes)")
    ok = True
    for h, w in RESOLUTIONS:
        x = rng.integers(-128, 128, (1, 3, h, w)).astype(np.int8)
        sim = Simulator(kernel.config)
        sim.load(program)
        sim.write("x", x)
        stats = sim.run(check_races=True)
        y = sim.read("y")
        exact = np.array_equal(y, chain.reference(x))
        ok &= exact
        print(f"  {h}x{w}: output {y.shape}, {stats.cycles:,} cycles, {len(np.unique(y))} distinct values, "
              f"{'bit-exact' if exact else 'MISMATCH'} against numpy, no data race")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
