"""ResNet-18's and ResNet-50's stem (7x7/2 conv + relu, then 3x3/2 max pool) fused in one kernel against
the two kernels apart, and fused with its kernels one after another against interleaved tile by tile.

    python benchmarks/stem_pool.py [--models resnet18,resnet50] [--size 224] [--config HW.toml]

For each model: the stem's two kernels as compiler.network.partition cuts the imported QOperator
graph (compiler.models), each compiled alone, then the chain compiled as one kernel twice: with
compiler.interleave free to interleave (its priced choice) and with interleaving off (LAGS empty:
one kernel after the other, the earlier behaviour of a conv -> pool chain).  Every build runs on the
simulator on the same random int8 input (race checking on); the fused outputs must equal the two
kernels' bit for bit (exit status 1 otherwise).  Prints simulated and predicted cycles side by side
and the fused kernel's pipelining note.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler import interleave as tile_interleave  # noqa: E402
from compiler import models  # noqa: E402
from compiler.network.partition import partition  # noqa: E402
from compiler.ops import Conv2d, Pool2d  # noqa: E402
from nnpsim.config import Config, load_config  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

SEED = 1


def stem(name: str, size: int) -> tuple[tuple, tuple]:
    """The ops of the model's first conv kernel and of the pool kernel it feeds."""
    groups = partition(compiler.from_onnx(models.build(name, "qoperator", size=size)))
    conv = next(g for g in groups if isinstance(g.ops[0], Conv2d))
    pool = next(g for g in groups if isinstance(g.ops[0], Pool2d) and g.inputs[0] == conv.output)
    return conv.ops, pool.ops


def run(ops, cfg: Config, x: np.ndarray, interleave: bool = True):
    """(output, simulated cycles, predicted cycles, pipelining note) of the chain built as one kernel."""
    saved = tile_interleave.LAGS
    tile_interleave.LAGS = saved if interleave else ()
    try:
        k = compiler.build(*ops, config=cfg)
    finally:
        tile_interleave.LAGS = saved
    y = k(x, check_races=True)
    note = next((n for n in k.ir.notes if n.startswith("pipelining:")), "")
    return y, k.stats.cycles, k.predicted_cycles, note


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet18,resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--config", default=None)
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args()
    cfg = load_config(args.config) if args.config else Config()
    bad, rows = 0, []
    for name in args.models.split(","):
        conv, pool = stem(name, args.size)
        x = np.random.default_rng(SEED).integers(-128, 128, conv[0].x_shape).astype(np.int8)
        y0, c0, p0, _ = run(conv, cfg, x)
        y1, c1, p1, _ = run(pool, cfg, y0)
        seq, cs, ps, ns = run(conv + pool, cfg, x, interleave=False)
        fused, cf, pf, nf = run(conv + pool, cfg, x)
        same = np.array_equal(seq, y1) and np.array_equal(fused, y1)
        bad += not same
        print(f"{name} stem {' + '.join(o.kind for o in conv + pool)} {conv[0].x_shape}:")
        print(f"  apart:                 {c0:,} + {c1:,} = {c0 + c1:,} cycles (predicted {p0 + p1:,})")
        print(f"  fused, one after other: {cs:,} cycles (predicted {ps:,}) = {cs / (c0 + c1):.3f} of apart")
        print(f"  fused, priced choice:   {cf:,} cycles (predicted {pf:,}) = {cf / (c0 + c1):.3f} of apart, "
              f"{cf / cs:.3f} of one after other")
        print(f"  {nf}")
        print(f"  outputs bit-exact with the kernels apart: {'yes' if same else 'NO'}")
        rows.append([name, f"{c0:,} + {c1:,} = {c0 + c1:,}", f"{cs:,} ({cs / (c0 + c1):.3f})",
                     f"{cf:,} ({cf / (c0 + c1):.3f})", "yes" if same else "NO"])
    if args.write_docs:
        write_table("stem-pool", ["stem", "apart (conv + pool)", "fused, one after the other", "fused, priced",
                                  "bit-exact"], rows, "the fused stem faster than its two kernels apart, bit-exact "
                    "with them.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
