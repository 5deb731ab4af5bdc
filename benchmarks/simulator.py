"""Time the simulator's engine (not part of the test suite).

    python benchmarks/simulator.py [--iterations N] [--commands C] [--cold]

(a) engine: CU instructions per second on a scalar loop after warm-up;
    commands per second on a stream of small DMA copies over 4 channels;
(b) the hand-scheduled tiled conv of benchmarks/conv_kernel.py, 1x64x56x56 by
    64x64x3x3 (pad 1), simulated, against numpy computing the same conv by
    im2col and a float64 matmul, interleaved in one run (ratio of medians);
(c) the wall time of `nnpsim run small.bin` in a fresh process: the second
    run (numba cache warm) and, with --cold, the first run on an empty cache
    (the one-time compile).
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
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from conv_kernel import conv3x3_source  # noqa: E402
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

SMALL = "li r1, 10\n.l: addi r2, r2, 1\nloop r1, .l\nhalt\n"


def _timed_run(source: str) -> tuple[float, object]:
    sim = Simulator(Config(ddr_bytes=1 << 20))
    sim.load(assemble(source))
    t0 = time.perf_counter()
    sim.run(max_cycles=1 << 40)
    return time.perf_counter() - t0, sim.last_log


def _nnpsim_run(binary: str, cache_dir: str) -> float:
    """Wall time of `nnpsim run binary` in a fresh process using `cache_dir` as numba's cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nnpsim.cli", "run", binary], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def startup(cold: bool) -> None:
    """(c): first (empty cache, with --cold) and second run of `nnpsim run` on a small program."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "small.bin")
        assemble(SMALL, "small.s").save(binary)
        cache = os.path.join(tmp, "cache") if cold else os.environ.get("NUMBA_CACHE_DIR", "")
        if cold:
            print(f"nnpsim run, first run (empty cache, compiles): {_nnpsim_run(binary, cache):.2f} s")
        if cache:
            print(f"nnpsim run, second run (cache warm): {_nnpsim_run(binary, cache):.2f} s")


def numpy_conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The same conv in numpy: im2col of the padded input, then one float64 matmul."""
    _, c, h, wd = x.shape
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1))).astype(np.float64)
    cols = np.empty((c, 3, 3, h, wd))
    for kh in range(3):
        for kw in range(3):
            cols[:, kh, kw] = xp[:, kh:kh + h, kw:kw + wd]
    y = w.reshape(w.shape[0], -1).astype(np.float64) @ cols.reshape(c * 9, h * wd)
    return y.astype(np.int32).reshape(1, w.shape[0], h, wd)


def conv_vs_numpy(repeats: int) -> None:
    """(b): simulated tiled conv against numpy's im2col matmul, side by side."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 64, 56, 56), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    sim = Simulator()
    sim.load(assemble(conv3x3_source(64, 64, 56, 56, rows=4), "conv3x3.s"))
    sim.write("x", x)
    sim.write("w", w)
    sim.run()  # warm-up
    t_sim, t_np = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        stats = sim.run()
        t_sim.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = numpy_conv3x3(x, w)
        t_np.append(time.perf_counter() - t0)
    if not np.array_equal(sim.read("y"), ref):
        raise SystemExit("conv: simulator and numpy disagree")
    ms, mn = np.median(t_sim), np.median(t_np)
    print(f"conv 1x64x56x56 * 64x64x3x3: {stats.cycles:,} cycles; simulated in {ms * 1e3:.1f} ms, "
          f"numpy im2col+matmul {mn * 1e3:.1f} ms; ratio {ms / mn:.2f} (target <= 3)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=5_000_000)
    ap.add_argument("--commands", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7, help="interleaved repeats of (b)")
    ap.add_argument("--cold", action="store_true", help="also time a first compile (empty cache)")
    args = ap.parse_args()

    _timed_run(SCALAR.format(n=10))  # warm-up (compile or load from cache)
    dt, log = _timed_run(SCALAR.format(n=args.iterations))
    print(f"scalar loop: {log.instructions:,} instructions, {log.cycles:,} cycles in {dt:.3f} s "
          f"= {log.instructions / dt / 1e6:.1f} M instructions/s")
    dt, log = _timed_run(DMAS.format(n=args.commands // 4))
    print(f"dma stream: {log.n_commands:,} commands, {log.cycles:,} cycles in {dt:.3f} s "
          f"= {log.n_commands / dt / 1e3:.0f} k commands/s")
    conv_vs_numpy(args.repeats)
    startup(args.cold)


if __name__ == "__main__":
    main()
