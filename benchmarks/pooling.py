"""Pooling kernels against their DDR bound: average, global average and sum pooling, compiled and simulated.

    python benchmarks/pooling.py [--config HW.toml]

For each case: a random int8 input, the compiled kernel on the simulator, its
output compared with the op's numpy reference (compiler.semantics), then
cycles, the roofline bound (compiler.roofline: least DDR bytes over DDR bytes
per cycle, pooling has no MACs) and their ratio, the cost model's prediction
and the instruction the compiler chose.  The integer forms run vu.pool.avg /
vu.pool.acc or, where the cost model prices it lower, the sliding-window
engine's vu.slide.avg / vu.slide.acc (each input byte of a plane read once);
the float forms are onnxruntime's QLinearGlobalAveragePool (vu.pool.acc then
vu.requant.f) and QLinearAveragePool (vu.slide.favg, or vu.pool.favg), and
ReduceMean over the plane between DequantizeLinear and QuantizeLinear
(vu.pool.fmean: onnxruntime's float32 sum in its order).  An
average that does not count padding reads a count an output; on the engine
its windows without padding take one count a plane and only the border bands
the table.  Target: every average, global average, sum pool and mean at <= 1.5x its
bound (the exit status is 1 if one is missed or not bit-exact).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import ops  # noqa: E402
from compiler.build import build  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

TARGET = 1.5
WIDTH = 58
F = dict(scale_x=np.float32(0.05), scale_out=np.float32(0.04), zp_out=-3)


def cases() -> list[tuple[str, object]]:
    """(name, op) of every measured pool."""
    nopad = dict(count_include_pad=False)
    return [
        ("global avg 1280x7x7 (MobileNetV2)", ops.global_avg_pool2d((1, 1280, 7, 7))),
        ("global avg 2048x7x7 (ResNet-50)", ops.global_avg_pool2d((1, 2048, 7, 7))),
        ("global avg 1280x7x7, float form", ops.global_avg_pool2d((1, 1280, 7, 7), x_zp=5, **F)),
        ("global avg 512x14x14, float form", ops.global_avg_pool2d((1, 512, 14, 14), x_zp=-2, **F)),
        ("avg 2x2/2 64x56x56", ops.avg_pool2d((1, 64, 56, 56), 2, 2)),
        ("avg 2x2/2 256x28x28", ops.avg_pool2d((1, 256, 28, 28), 2, 2)),
        ("avg 3x3/2 pad 1 96x35x35, no pad count", ops.avg_pool2d((1, 96, 35, 35), 3, 2, 1, **nopad)),
        ("sum 2x2/2 64x56x56", ops.sum_pool2d((1, 64, 56, 56), 2, 2)),
        ("sum 3x3/1 32x28x28", ops.sum_pool2d((1, 32, 28, 28), 3, 1)),
        ("avg 3x3/1 pad 1 64x28x28", ops.avg_pool2d((1, 64, 28, 28), 3, 1, 1)),
        ("avg 3x3/1 pad 1 64x28x28, no pad count", ops.avg_pool2d((1, 64, 28, 28), 3, 1, 1, **nopad)),
        ("avg 2x2/2 64x56x56, float form", ops.avg_pool2d((1, 64, 56, 56), 2, 2, x_zp=1, **F)),
        ("avg 3x3/1 pad 1 64x28x28, float form", ops.avg_pool2d((1, 64, 28, 28), 3, 1, 1, x_zp=1, **F)),
        ("avg 3x3/2 pad 1 96x35x35, float, no pad count",
         ops.avg_pool2d((1, 96, 35, 35), 3, 2, 1, x_zp=1, **nopad, **F)),
        ("avg 3x3/1 pad 1 64x28x28, float, no pad count",
         ops.avg_pool2d((1, 64, 28, 28), 3, 1, 1, x_zp=1, **nopad, **F)),
        ("avg 3x3/1 pad 1 256x35x35 (Inception), float, no pad count",
         ops.avg_pool2d((1, 256, 35, 35), 3, 1, 1, x_zp=-4, **nopad, **F)),
        ("reduce mean 1280x7x7 (MnasNet)", ops.reduce_mean((1, 1280, 7, 7), x_zp=5, **F)),
        ("reduce mean 1024x7x7 (ShuffleNetV2)", ops.reduce_mean((1, 1024, 7, 7), x_zp=-1, **F)),
        ("reduce mean 512x14x14", ops.reduce_mean((1, 512, 14, 14), x_zp=-2, **F)),
    ]


def pool_instruction(asm: str) -> str:
    """The window instruction a pooling kernel runs (vu.pool.* or vu.slide.*)."""
    for line in asm.splitlines():
        words = line.split()
        if words and words[0].startswith(("vu.pool.", "vu.slide.")):
            return words[0]
    return "-"


def main() -> int:
    ap = parser(__doc__)
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(1)
    missed, rows = [], []
    print(f"{'pool':<{WIDTH}} {'cycles':>9} {'bound':>9} {'ratio':>6} {'predicted':>10}  exact  instruction")
    for name, op in cases():
        kernel = build(op, config=cfg)
        x = rng.integers(-128, 128, op.inputs[0].shape, dtype=np.int8)
        exact = np.array_equal(kernel(x), op.reference(x))
        cycles, bound = kernel.stats.cycles, kernel.roofline_cycles
        print(f"{name:<{WIDTH}} {cycles:>9,} {bound:>9,} {cycles / bound:>6.2f} {kernel.predicted_cycles:>10,}  "
              f"{'yes' if exact else 'NO ':<5}  {pool_instruction(kernel.asm)}")
        rows.append([name, f"{cycles:,}", f"{bound:,}", f"{cycles / bound:.2f}", f"{kernel.predicted_cycles:,}",
                     "yes" if exact else "NO", pool_instruction(kernel.asm).strip()])
        if not exact:
            missed.append(f"{name}: not bit-exact")
        elif cycles > TARGET * bound:
            missed.append(f"{name}: {cycles / bound:.2f}x its bound (target <= {TARGET})")
    for line in missed:
        print(f"target missed: {line}", file=sys.stderr)
    if args.write_docs:
        write_table("pooling", ["pool", "cycles", "bound", "ratio", "predicted", "exact", "instruction"], rows,
                    f"every case bit-exact and within {TARGET}x its DDR bound.")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
