"""The cost of dynamism: one dynamic conv2d binary against a static kernel compiled for each shape.

For five shapes across the range, the dynamic kernel's simulated cycles and the static kernel's
(compiler.build for that exact shape, the tiling search's best), measured side by side in this
run, and the binary sizes.  Targets (issue 16): at most 5% more cycles as a geometric mean, at
most 15% in the worst case.  Run:

    python benchmarks/dynamic.py [--quick]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import compiler
from compiler import Dim, ops

GEOMEAN_TARGET, WORST_TARGET = 1.05, 1.15


def layer(rng, c: int, o: int, lo: int, hi: int, n=(1, 1)):
    """A 3x3 pad-1 conv c -> o channels over h, w in [lo, hi] and its static form for one shape."""
    w = rng.integers(-20, 21, size=(o, c, 3, 3))
    q = dict(bias=rng.integers(-5000, 5000, size=o), padding=1, x_zp=-3,
             multiplier=rng.integers(2**29, 2**31, size=o), shift=rng.integers(20, 24, size=o), zp_out=4)
    dyn = ops.conv2d((Dim("n", *n), c, Dim("h", lo, hi), Dim("w", lo, hi)), w, **q)
    return dyn, lambda shape: ops.conv2d(shape, w, **q)


def binary_bytes(kernel) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "k.bin")
        kernel.save(path)
        return path.stat().st_size


def measure(c: int, o: int, sizes: list[int], lo: int, hi: int, seed: int = 0) -> list[tuple]:
    rng = np.random.default_rng(seed)
    dyn_op, static_op = layer(rng, c, o, lo, hi)
    dyn = compiler.build(dyn_op)
    dyn_bytes = binary_bytes(dyn)
    rows = []
    for s in sizes:
        x = rng.integers(-128, 128, size=(1, c, s, s)).astype(np.int8)
        y = dyn(x)
        dyn_cycles = dyn.stats.cycles
        st_op = static_op(x.shape)
        static = compiler.build(st_op)
        ys = static(x)
        assert np.array_equal(y, ys) and np.array_equal(y, st_op.reference(x)), "results differ"
        rows.append((s, dyn_cycles, static.stats.cycles, dyn_bytes, binary_bytes(static), dyn.rows_per_tile[s]))
    return rows


def report(title: str, rows: list[tuple]) -> tuple[float, float]:
    print(f"\n{title}")
    print("| H = W | dynamic cycles | static cycles | ratio | dynamic binary | static binary | dynamic rows/tile |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    for s, d, st, db, sb, th in rows:
        ratios.append(d / st)
        print(f"| {s} | {d:,} | {st:,} | {d / st:.3f} | {db:,} B | {sb:,} B | {th} |")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geometric mean {geo:.3f} (target <= {GEOMEAN_TARGET}), worst {max(ratios):.3f} "
          f"(target <= {WORST_TARGET})")
    return geo, max(ratios)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one layer only")
    args = ap.parse_args(argv)
    cases = [("conv 3x3 32 -> 32, H = W in [16, 64]", 32, 32, [16, 28, 40, 52, 64], 16, 64)]
    if not args.quick:
        cases.append(("conv 3x3 64 -> 64, H = W in [8, 56]", 64, 64, [8, 20, 32, 44, 56], 8, 56))
        cases.append(("conv 3x3 8 -> 16, H = W in [8, 64]", 8, 16, [8, 22, 36, 50, 64], 8, 64))
    ok = True
    for title, c, o, sizes, lo, hi in cases:
        geo, worst = report(title, measure(c, o, sizes, lo, hi))
        ok &= geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
    print("\ntargets met" if ok else "\ntargets NOT met")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
