"""A 64-point design-space sweep of ResNet-18 on the process pool (1 and 2 workers) and on Dask.

    python benchmarks/sweep.py [--size 224] [--points 64] [--runs pool1,pool2,dask2] [--keep DIR]

The sweep: ResNet-18 (compiler.models, QOperator, --size x --size input) over array size
(nu.rows = nu.cols = 16, 32, 64, 128) x DDR bandwidth (8, 16, 32, 64 bytes per cycle) x
buffer size (IBUF, WBUF, ABUF and VBUF at 1/2, 1, 2 and 4 times the reference machine's):
4 x 4 x 4 = 64 points (--points N < 64 runs a seeded random sample of N of them).

Each run starts from an empty results file and, but for warm2, an empty compile cache, so
it compiles every point; the runs are timed one after the other in one process:
  pool1   nnpc sweep --workers 1
  pool2   nnpc sweep --workers 2
  dask2   nnpc sweep --dask local:2 (a two-worker LocalCluster on 127.0.0.1)
  warm2   nnpc sweep --workers 2 with pool2's compile cache (ask for it: --runs ...,warm2)
Reports each run's wall time, the speed-up over pool1, the CPU seconds of every process
(this one and its reaped children: the workers), the mean load average while it ran (the
machine may be shared: with a load above its cores, the workers get less than a core
each and wall times stop measuring the sweep alone), the compile cache's hit rate
(chains whose tiling was found in the cache, over all chains compiled), the points that
errored, and whether every run's rows agree with the first's in every column but the
timing ones (the exit status is 1 if not).
"""
from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.sweep.run_point import TIMING_COLUMNS  # noqa: E402
from compiler.sweep.runner import run_sweep  # noqa: E402
from nnpsim.config import Config  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

ARRAYS = (16, 32, 64, 128)
DDR = (8, 16, 32, 64)
BUFFERS = (0.5, 1.0, 2.0, 4.0)
RUNS = {"pool1": {"workers": 1}, "pool2": {"workers": 2}, "dask2": {"dask": "local:2"}, "warm2": {"workers": 2}}
WARM = {"warm2": "pool2"}     # runs that reuse another run's (by then full) compile cache


def sweep_file(size: int, points: int) -> str:
    """The benchmark's sweep file: 64 grid points, or a seeded sample of `points` of them."""
    ref = Config()
    bufs = ", ".join(
        f'{{ "nu.ibuf_bytes" = {int(ref.ibuf_bytes * f)}, "nu.wbuf_bytes" = {int(ref.wbuf_bytes * f)}, '
        f'"nu.abuf_bytes" = {int(ref.abuf_bytes * f)}, "vu.vbuf_bytes" = {int(ref.vbuf_bytes * f)} }}'
        for f in BUFFERS)
    arrays = ", ".join(f'{{ "nu.rows" = {a}, "nu.cols" = {a} }}' for a in ARRAYS)
    sample = 'sample = "grid"' if points >= 64 else f'sample = "random"\nn = {points}\nseed = 1'
    return f"""[sweep]
workloads = ["resnet18"]
{sample}

[sweep.model]
size = {size}

[axes]
array = [{arrays}]
"memory.ddr.bytes_per_cycle" = {list(DDR)}
buffers = [{bufs}]
"""


def warm_up(root: Path) -> None:
    """One small point in this process first, so numba compiling the simulator (once per source tree,
    then loaded from its disk cache by every worker) lands on no run's time."""
    spec = root / "warm.toml"
    spec.write_text('[sweep]\n[[sweep.layer]]\nop = "conv2d"\nx_shape = [1, 8, 8, 8]\nout_channels = 8\n'
                    'kernel = 3\n')
    from compiler.sweep.points import points
    from compiler.sweep.run_point import run_point, task
    from compiler.sweep.spec import load_sweep
    row = run_point(task(points(load_sweep(spec))[0], None, {"mac": 1.0, "byte": 1.0}))
    if row["error"]:
        raise SystemExit(f"warm-up point failed: {row['error']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=224, help="ResNet-18 input height and width")
    ap.add_argument("--points", type=int, default=64, help="points of the 64-point grid to run (seeded sample)")
    ap.add_argument("--runs", default="pool1,pool2,dask2", help=f"comma-separated, of {', '.join(RUNS)}")
    ap.add_argument("--keep", help="keep the sweep file, results and caches in this directory")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    bad = [r for r in runs if r not in RUNS]
    if bad:
        raise SystemExit(f"--runs: unknown {', '.join(bad)} (known: {', '.join(RUNS)})")
    with tempfile.TemporaryDirectory(prefix="nnp-sweep-bench-") as tmp:
        root = Path(args.keep or tmp)
        root.mkdir(parents=True, exist_ok=True)
        spec = root / "sweep.toml"
        spec.write_text(sweep_file(args.size, args.points))
        warm_up(root)
        table, first = [], None
        for name in runs:
            out, cache = root / f"{name}.csv", root / f"cache-{WARM.get(name, name)}"
            out.unlink(missing_ok=True)
            if name in WARM:
                if not cache.is_dir():
                    raise SystemExit(f"{name} reuses the cache of {WARM[name]}: run that first (--runs)")
            else:
                shutil.rmtree(cache, ignore_errors=True)
            print(f"{name}: {args.points} points of ResNet-18 at {args.size}x{args.size} ...", file=sys.stderr,
                  flush=True)
            with LoadSampler() as load:
                cpu0, start = cpu_seconds(), time.perf_counter()
                _, outcome, rows = run_sweep(spec, out, cache=str(cache), progress=False, **RUNS[name])
                wall, cpu = time.perf_counter() - start, cpu_seconds() - cpu0
            hits = sum(r["choice_hits"] or 0 for r in rows)
            lookups = sum(r["choice_lookups"] or 0 for r in rows)
            same = "-" if first is None else ("yes" if _same(first, rows) else "NO")
            first = first or rows
            programs = sum(bool(r["program_cached"]) for r in rows)
            table.append((name, len(rows), outcome.failed, wall, cpu, load.mean, hits, lookups, programs,
                          sum(r["compile_s"] or 0 for r in rows), sum(r["sim_s"] or 0 for r in rows), same))
    base = table[0][3]
    print(f"ResNet-18 at {args.size}x{args.size}, {args.points} points; {os.cpu_count()} cores")
    print(f"{'run':<7} {'points':>6} {'errors':>6} {'wall s':>8} {'speed-up':>8} {'CPU s':>7} {'load':>5} "
          f"{'tiling cache hits':>17} {'programs cached':>15} {'compile s':>9} {'sim s':>7} {'rows equal':>10}")
    for name, n, failed, wall, cpu, load, hits, lookups, programs, comp, sim, same in table:
        print(f"{name:<7} {n:>6} {failed:>6} {wall:>8.1f} {base / wall:>7.2f}x {cpu:>7.1f} {load:>5.1f} "
              f"{hits:>6}/{lookups:<5} {100 * hits / max(lookups, 1):>4.0f}% {programs:>15} {comp:>9.1f} "
              f"{sim:>7.1f} {same:>10}")
    print("(compile s, sim s: summed over the points, in the workers; tiling cache hits: chains whose tiling "
          "came from the cache, of the chains compiled; programs cached: points that compiled nothing)")
    if args.write_docs:
        write_table("sweep", ["run", "points", "errors", "wall s", "speed-up", "CPU s", "programs cached",
                              "rows equal"],
                    [[t[0], t[1], t[2], f"{t[3]:.1f}", f"{base / t[3]:.2f}x", f"{t[4]:.1f}", t[8], t[11]]
                     for t in table], "every run's rows equal to the first run's; speed-ups are only meaningful "
                    f"on an idle machine (load average {os.getloadavg()[0]:.1f} at the end of this run).")
    return 0 if all(t[-1] in ("-", "yes") for t in table) else 1


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and of its children that have ended (the workers)."""
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class LoadSampler:
    """The 1-minute load average, sampled every 5 s while the block runs; .mean when it ends."""

    def __enter__(self):
        self.samples, self._stop = [os.getloadavg()[0]], threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(5.0):
            self.samples.append(os.getloadavg()[0])

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.mean = sum(self.samples) / len(self.samples)


def _same(a: list[dict], b: list[dict]) -> bool:
    """Every column but the timing ones equal, row for row (rows in point order)."""
    cols = [c for c in a[0] if c not in TIMING_COLUMNS] if a else []
    return len(a) == len(b) and all(x[c] == y[c] for x, y in zip(a, b) for c in cols)


if __name__ == "__main__":
    sys.exit(main())
