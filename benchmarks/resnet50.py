"""Every conv2d layer of ResNet-50 (batch 1, 224x224), compiled and simulated on the default config.

    python benchmarks/resnet50.py [--layers N] [--no-check] [--config HW.toml]

For each layer: random int8 input and weights, int32 bias, per-channel
requantisation; the compiled kernel runs on the simulator and its output is
compared with the compiler's numpy model.  Reports cycles, the roofline bound
(max of MACs / peak MACs per cycle and least DDR bytes / DDR bytes per
cycle), their ratio, the program size in instructions, and the compile time
of the whole set.
Targets: geometric mean of cycles / bound <= 1.25, no layer above 2.0, the
whole set compiled in under 60 s, and the compiler's predicted cycles within
10% of the simulated ones.  With --config (say two NUs and two VUs), the same
on that machine; the bound then counts its peak MACs, and the total cycles
compare machines.
"""
from __future__ import annotations

import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import ops  # noqa: E402
from compiler.build import build  # noqa: E402
from compiler.quant import quantize_multipliers  # noqa: E402
from compiler.roofline import bound_cycles  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)


def resnet50_convs() -> list[tuple[str, int, int, int, int, int, int]]:
    """(name, in channels, out channels, input size, kernel, stride, padding) of every conv2d."""
    layers = [("conv1", 3, 64, 224, 7, 2, 3)]
    size, cin = 56, 64
    for stage, (width, blocks) in enumerate([(64, 3), (128, 4), (256, 6), (512, 3)], start=1):
        for b in range(blocks):
            stride = 2 if b == 0 and stage > 1 else 1
            name = f"layer{stage}.{b}"
            layers.append((f"{name}.conv1", cin, width, size, 1, 1, 0))
            layers.append((f"{name}.conv2", width, width, size, 3, stride, 1))
            out = size // stride
            layers.append((f"{name}.conv3", width, 4 * width, out, 1, 1, 0))
            if b == 0:
                layers.append((f"{name}.downsample", cin, 4 * width, size, 1, stride, 0))
            cin, size = 4 * width, out
    return layers


def make_op(c: int, o: int, hw: int, k: int, stride: int, pad: int, rng: np.random.Generator):
    """A quantised conv2d+bias+requant with random weights and sensible scales."""
    w = rng.integers(-128, 128, (o, c, k, k), dtype=np.int8)
    bias = rng.integers(-20000, 20000, o, dtype=np.int32)
    m, s = quantize_multipliers(rng.uniform(20, 40, o) / (74.0 * 74.0 * math.sqrt(c * k * k)))
    return ops.conv2d((1, c, hw, hw), w, bias, stride=stride, padding=pad, x_zp=-1,
                      multiplier=m, shift=s, zp_out=3)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--layers", type=int, default=None, help="only the first N layers")
    ap.add_argument("--no-check", action="store_true", help="skip the numpy comparison")
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(50)
    layers = resnet50_convs()[:args.layers]
    compile_s = 0.0
    print(f"{'layer':24} {'shape':>22} {'cycles':>11} {'predicted':>11} {'bound':>11} {'ratio':>6} "
          f"{'instrs':>7}")
    ratios, misses, total, instrs = [], [], 0, 0
    for name, c, o, hw, k, stride, pad in layers:
        op = make_op(c, o, hw, k, stride, pad, rng)
        t0 = time.perf_counter()
        kernel = build(op, config=cfg)
        compile_s += time.perf_counter() - t0
        x = rng.integers(-128, 128, (1, c, hw, hw), dtype=np.int8)
        y = kernel(x)
        if not args.no_check and not np.array_equal(y, op.reference(x)):
            print(f"{name}: output differs from the numpy model", file=sys.stderr)
            return 1
        bound = bound_cycles([op], kernel.config)
        ratio = kernel.stats.cycles / bound
        ratios.append(ratio)
        total += kernel.stats.cycles
        n_instr = len(kernel.program.code)
        instrs += n_instr
        misses.append(abs(kernel.predicted_cycles - kernel.stats.cycles) / kernel.stats.cycles)
        shape = f"{c}x{hw}x{hw}->{o} k{k}s{stride}"
        print(f"{name:24} {shape:>22} {kernel.stats.cycles:>11,} {kernel.predicted_cycles:>11,} "
              f"{bound:>11,} {ratio:>6.2f} {n_instr:>7,}")
    geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
    print(f"{len(ratios)} layers: geometric mean cycles/bound {geo:.3f} "
          f"(target <= 1.25), worst {max(ratios):.2f} (target <= 2.0), "
          f"compile {compile_s:.1f} s (target < 60 s); predicted cycles off by at most "
          f"{100 * max(misses):.1f}% (target 10%); {total:,} cycles in all on {cfg.nu_count} NU(s), "
          f"{cfg.vu_count} VU(s); "
          f"{instrs:,} instructions in all")
    if args.write_docs:
        worst = max(zip(ratios, (layer[0] for layer in layers)))
        one = cfg.nu_count == 1
        write_table("resnet50-1nu" if one else "resnet50-2nu", ["figure", "measured", "goal"], [
            [f"geometric mean of cycles / {'' if one else 'two-NU '}roofline bound", f"{geo:.3f}",
             "<= 1.12" if one else "<= 1.25"],
            ["worst layer", f"{worst[0]:.2f} ({worst[1]})", "<= 1.4" if one else "-"],
            [f"cycles, all {len(ratios)} layers", f"{total:,}", "-"],
            ["predicted vs simulated, worst layer", f"{100 * max(misses):.1f}%", "within 10%"],
            [f"instructions, all {len(ratios)} layers", f"{instrs:,}", "-"],
            [f"compile, all {len(ratios)} layers (wall)", f"{compile_s:.1f} s", "-"]],
            "one NU and one VU; a geometric mean at most 1.12 of the roofline bound, no layer over 1.4, "
            "predictions within 10%." if one else "two NUs and two VUs; a geometric mean at most 1.25 of the "
            "two-NU bound (the compute term halved).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
