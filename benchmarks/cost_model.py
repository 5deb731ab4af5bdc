"""The cost model against the simulator, layer by layer, on whole networks.

    python benchmarks/cost_model.py [--models resnet50,resnet18,mobilenetv2] [--nu 1,2] [--size 224]
                                    [--layers] [--limit N]

Each network (compiler.models, quantised by onnxruntime) is partitioned and fused
as build(graph) does (compiler.network.plan_kernels); every kernel is then
compiled alone (the search's best schedule, loops rolled, as build() makes a
kernel), run on the simulator on seeded random inputs, and its predicted cycles
(compiler.cost.schedule_cycles, the number in the kernel's header) compared with
the simulated ones.  Prints, per network and NU count, the worst error and the
layer it is on (with --layers, every layer).

Target (exit status 1 if missed): every layer within 5% (TARGET).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler import models  # noqa: E402
from compiler.kernel import finish  # noqa: E402
from compiler.search import best_schedule  # noqa: E402
from compiler.network.build import plan_kernels  # noqa: E402
from compiler.structure import tiling_key  # noqa: E402
from nnpsim.config import Config  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

TARGET = 0.05
SEED = 3


def random_input(shape, dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Seeded random values over the dtype's range (small ints for int32, N(0, 1) for floats)."""
    if dtype == "int8":
        return rng.integers(-128, 128, shape, dtype=np.int8)
    if dtype == "int32":
        return rng.integers(-1000, 1000, shape, dtype=np.int32)
    return rng.standard_normal(shape).astype(dtype)


def kernels_alone(graph, cfg: Config, fuse: bool, limit: int | None = None) -> list[tuple[object, int, int]]:
    """(group, predicted, simulated) of every kernel of the network (fused, or one per node), each
    compiled alone as build(graph) compiles it and run on seeded random inputs."""
    groups, _ = plan_kernels(graph, cfg, fuse)
    rng = np.random.default_rng(SEED)
    chosen: dict[tuple, int] = {}
    out = []
    for g in groups[:limit]:
        key = tiling_key(g.ops)
        kir, (predicted, usage, report), chosen[key] = best_schedule(g.ops, cfg, chosen.get(key))
        k = finish(g.ops, kir, cfg, predicted, usage, report)
        k(*[random_input(b.shape, b.dtype, rng) for b in k.ir.inputs])
        out.append((g, int(predicted), int(k.stats.cycles)))
    return out


def layer_errors(graph, cfg: Config, fuse: bool, limit: int | None = None) -> list[tuple[str, str, int, int]]:
    """(kernel, ops, predicted, simulated) of every kernel of the network (fused, or one per node)."""
    return [(g.name, " + ".join(o.kind for o in g.ops), p, c) for g, p, c in kernels_alone(graph, cfg, fuse, limit)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,resnet18,mobilenetv2")
    ap.add_argument("--nu", default="1,2", help="NU counts (each with as many VUs)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--layers", action="store_true", help="print every layer")
    ap.add_argument("--fuse", choices=("both", "on", "off"), default="both",
                    help="the fused network's kernels, one kernel per node, or both")
    ap.add_argument("--limit", type=int, help="only the first N kernels of each network")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    missed, table = [], []
    fuses = {"both": [True, False], "on": [True], "off": [False]}[args.fuse]
    print(f"{'model':<12} {'NUs':>3} {'fused':>5} {'kernels':>7} {'worst error':>11} {'over 5%':>7}  worst layer")
    for name in [m for m in args.models.split(",") if m]:
        graph = compiler.from_onnx(models.build(name, size=args.size))
        for nu, fuse in [(int(n), f) for n in args.nu.split(",") if n for f in fuses]:
            what = f"{name:<12} {nu:>3} {'yes' if fuse else 'no':>5}"
            try:
                rows = layer_errors(graph, Config(nu_count=nu, vu_count=nu), fuse, args.limit)
            except compiler.CompileError as exc:
                print(f"{what} does not compile: {exc}")
                missed.append(f"{name} on {nu} NU(s), fuse={fuse}: does not compile")
                continue
            errs = [(p - s) / s for _, _, p, s in rows]
            worst = max(range(len(rows)), key=lambda i: abs(errs[i]))
            over = sum(abs(e) > TARGET for e in errs)
            w = rows[worst]
            print(f"{what} {len(rows):>7} {errs[worst]:>+10.2%} {over:>7}  "
                  f"{w[0]} ({w[1]}): predicted {w[2]:,}, simulated {w[3]:,}", flush=True)
            table.append([name, nu, "yes" if fuse else "no", len(rows), f"{errs[worst]:+.2%}", over])
            if args.layers:
                for (layer, ops, p, s), e in zip(rows, errs):
                    print(f"    {layer[:36]:<36} {ops[:40]:<40} {p:>10,} {s:>10,} {e:>+7.2%}")
            if over:
                missed.append(f"{name} on {nu} NU(s), fuse={fuse}: {over} kernels off by more than {TARGET:.0%}")
    for line in missed:
        print("target missed:", line)
    if args.write_docs:
        write_table("cost-model", ["network", "NUs", "fused", "kernels", "worst error", "kernels over 5%"], table,
                    f"every kernel predicted within {TARGET:.0%} of the simulated cycles.")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
