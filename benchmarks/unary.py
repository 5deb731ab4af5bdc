"""Table lookups (vu.lut) against their DDR bound: a lut alone, and a conv with and without one fused.

    python benchmarks/unary.py [--config HW.toml] [--write-docs]

For each lut: a random int8 input and table, the compiled kernel on the simulator, its output compared
with the op's numpy reference, then cycles, the roofline bound (compiler.roofline: its input and output
over DDR bytes per cycle, a lut has no MACs), their ratio and the cost model's prediction.  For each
conv, the same conv with a lut after it, one kernel (the lut in its epilogue): its cycles against the
conv's alone, the epilogue's cost.  Targets: every lut alone of 16,384 elements or more within 1.5x its
bound (smaller ones are bound by DDR's latency: reported, not targeted), every fused conv + lut within
1.1x the conv's cycles (the exit status is 1 if one is missed or not bit-exact).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import ops  # noqa: E402
from compiler.build import build  # noqa: E402
from compiler.quant import quantize_multipliers  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

TARGET = 1.5
FUSED_TARGET = 1.1
WIDTH = 44
SHAPES = [(1, 16, 112, 112), (1, 96, 56, 56), (1, 144, 28, 28), (1, 240, 14, 14), (1, 576, 7, 7),
          (1, 1000), (1, 3, 17, 19)]
"""MobileNetV3-like activation sizes (stem, early, middle, late, the head's), a classifier's and a tiny one."""
LATENCY_BOUND = 16384
"""Elements below which a kernel is bound by DDR's latency (about 100 cycles a transfer, before its first
byte), not its bandwidth: its ratio is reported, the target applies above it."""
CONVS = [((1, 16, 56, 56), 16, 3), ((1, 40, 28, 28), 120, 1), ((1, 96, 14, 14), 96, 3), ((1, 576, 7, 7), 96, 1)]
"""(input shape, output channels, kernel) of convs a hard-swish or sigmoid follows."""


def conv(rng, x_shape, o: int, k: int) -> ops.Conv2d:
    """A k x k conv2d (padding keeping the plane), random int8 weights, per-channel (M, S)."""
    w = rng.integers(-128, 128, (o, x_shape[1], k, k)).astype(np.int8)
    m, s = quantize_multipliers(rng.uniform(0.3, 1.0, o) / (100 * x_shape[1] * k * k))
    return ops.conv2d(x_shape, w, rng.integers(-999, 999, o).astype(np.int32), padding=k // 2, x_zp=-3,
                      multiplier=m, shift=s, zp_out=5)


def luts(cfg, rng) -> tuple[list[list[str]], list[str]]:
    """The rows of the luts alone, and the targets they miss."""
    rows, missed = [], []
    for shape in SHAPES:
        op = ops.lut(shape, rng.integers(-128, 128, 256))
        kernel = build(op, config=cfg)
        x = rng.integers(-128, 128, shape, dtype=np.int8)
        exact = np.array_equal(kernel(x), op.reference(x))
        cycles, bound = kernel.stats.cycles, kernel.roofline_cycles
        name = f"lut {'x'.join(map(str, shape[1:]))}"
        small = op.output.size < LATENCY_BOUND
        rows.append([name, f"{cycles:,}", f"{bound:,}", f"{cycles / bound:.2f}", f"{kernel.predicted_cycles:,}",
                     "yes" if exact else "NO", "latency" if small else f"<= {TARGET}"])
        if not exact:
            missed.append(f"{name}: not bit-exact")
        elif cycles > TARGET * bound and not small:
            missed.append(f"{name}: {cycles / bound:.2f}x its bound (target <= {TARGET})")
    return rows, missed


def fused(cfg, rng) -> tuple[list[list[str]], list[str]]:
    """The rows of the convs with and without a lut fused, and the targets they miss."""
    rows, missed = [], []
    for x_shape, o, k in CONVS:
        c = conv(rng, x_shape, o, k)
        act = ops.lut(c.output.shape, rng.integers(-128, 128, 256))
        x = rng.integers(-128, 128, x_shape, dtype=np.int8)
        alone, with_lut = build(c, config=cfg), build(c, act, config=cfg)
        alone(x)
        exact = np.array_equal(with_lut(x), act.reference(c.reference(x)))
        ratio = with_lut.stats.cycles / alone.stats.cycles
        name = f"conv {k}x{k} {x_shape[1]}->{o} {x_shape[2]}x{x_shape[3]} + lut"
        rows.append([name, f"{with_lut.stats.cycles:,}", f"{alone.stats.cycles:,}", f"{ratio:.3f}",
                     f"{with_lut.predicted_cycles:,}", "yes" if exact else "NO"])
        if not exact:
            missed.append(f"{name}: not bit-exact")
        elif ratio > FUSED_TARGET:
            missed.append(f"{name}: {ratio:.3f}x the conv alone (target <= {FUSED_TARGET})")
    return rows, missed


def main() -> int:
    ap = parser(__doc__)
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(1)
    alone, missed = luts(cfg, rng)
    conv_rows, conv_missed = fused(cfg, rng)
    print(f"{'lut':<{WIDTH}} {'cycles':>9} {'bound':>9} {'ratio':>6} {'predicted':>10}  exact  target")
    for r in alone:
        print(f"{r[0]:<{WIDTH}} {r[1]:>9} {r[2]:>9} {r[3]:>6} {r[4]:>10}  {r[5]:<5}  {r[6]}")
    print(f"\n{'conv + lut':<{WIDTH}} {'cycles':>9} {'alone':>9} {'ratio':>6} {'predicted':>10}  exact")
    for r in conv_rows:
        print(f"{r[0]:<{WIDTH}} {r[1]:>9} {r[2]:>9} {r[3]:>6} {r[4]:>10}  {r[5]}")
    for line in missed + conv_missed:
        print(f"target missed: {line}", file=sys.stderr)
    if args.write_docs:
        write_table("unary", ["lut", "cycles", "bound", "ratio", "predicted", "exact", "target"], alone,
                    f"every lut bit-exact, and within {TARGET}x its DDR bound from {LATENCY_BOUND:,} elements "
                    "(smaller ones wait on DDR's latency, not its bandwidth).")
        write_table("unary-fused", ["conv + lut", "cycles", "conv alone", "ratio", "predicted", "exact"], conv_rows,
                    f"every conv + lut one kernel, bit-exact, within {FUSED_TARGET}x the conv's cycles alone.")
    return 1 if missed or conv_missed else 0


if __name__ == "__main__":
    sys.exit(main())
