"""Time the simulator's engine (not part of the test suite).

    python benchmarks/simulator.py [--iterations N] [--commands C] [--cold]

(a) engine: CU instructions per second on a scalar loop after warm-up;
    commands per second on a stream of small DMA copies over 4 channels;
    the start-up time of a fresh process running a small program with the
    numba cache warm and, with --cold, with an empty cache (first compile).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from nnpasm import assemble  # noqa: E402
from nnpsim import Config, Simulator  # noqa: E402

SCALAR = """
        li      r1, {n}
.body:  addi    r2, r2, 3
        xor     r3, r3, r2
        add     r4, r4, r3
        loop    r1, .body
        halt
"""

DMAS = """
        setpi   dma.size0, 64
        li      r1, {n}
.body:  dma     ch0, dm[r0], ddr[r0]
        dma     ch1, dm[r0], ddr[r0]
        dma     ch2, dm[r0], ddr[r0]
        dma     ch3, dm[r0], ddr[r0]
        loop    r1, .body
        halt
"""

SMALL = ("from nnpasm import assemble; from nnpsim import Simulator, Config; "
         "s = Simulator(Config(ddr_bytes=1 << 20)); "
         "s.load(assemble('li r1, 10\\n.l: addi r2, r2, 1\\nloop r1, .l\\nhalt')); s.run()")


def _timed_run(source: str) -> tuple[float, object]:
    sim = Simulator(Config(ddr_bytes=1 << 20))
    sim.load(assemble(source))
    t0 = time.perf_counter()
    sim.run(max_cycles=1 << 40)
    return time.perf_counter() - t0, sim.last_log


def _process_start(cache_dir: str) -> float:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", SMALL], env=env, check=True)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=5_000_000)
    ap.add_argument("--commands", type=int, default=100_000)
    ap.add_argument("--cold", action="store_true", help="also time a first compile (empty cache)")
    args = ap.parse_args()

    _timed_run(SCALAR.format(n=10))  # warm-up (compile or load from cache)
    dt, log = _timed_run(SCALAR.format(n=args.iterations))
    print(f"scalar loop: {log.instructions:,} instructions, {log.cycles:,} cycles in {dt:.3f} s "
          f"= {log.instructions / dt / 1e6:.1f} M instructions/s")
    dt, log = _timed_run(DMAS.format(n=args.commands // 4))
    print(f"dma stream: {log.n_commands:,} commands, {log.cycles:,} cycles in {dt:.3f} s "
          f"= {log.n_commands / dt / 1e3:.0f} k commands/s")
    cache = os.environ.get("NUMBA_CACHE_DIR")
    if cache:
        print(f"process start, warm cache: {_process_start(cache):.2f} s")
    if args.cold:
        with tempfile.TemporaryDirectory() as empty:
            print(f"process start, empty cache (first compile): {_process_start(empty):.2f} s")


if __name__ == "__main__":
    main()
