"""The ops issue 25 brought, in whole networks: their share of each network's kernel cycles.

    python benchmarks/new_ops.py [--models mobilenet_v3_large,yolov8n] [--variants qoperator-int8-pc,qdq-int8-pc]
                                 [--cache DIR] [--write-docs]

Reads the zoo's quantised models from its cache (benchmarks/zoo.py: --cache, else $NNP_ZOO_CACHE, else
~/.cache/nnp/zoo; `zoo.py --no-run` fills it), compiles each (compiler.build), runs it on the simulator on
the zoo's seeded input and judges the output as the zoo does (QOperator bit-exact; QDQ inside onnxruntime's two
levels).  The new ops (is_new) are the unary luts, the binary ops but a residual add (same shapes, no
constant), ReduceMean, BatchNormalization, Softmax and the data movement (Transpose, Slice, Pad, Resize, Concat).
Their cycles are priced by the cost model, kernel by kernel, as graph fusion prices them
(network.layout_plan.best_price of network.build.Kernels.price): a kernel of new ops alone counts whole; a
kernel that holds other ops too counts what it costs above the same kernel without its new ops (a conv's
epilogue lut, a projection conv reading x * gate from DM instead of x from DDR).  The share is their sum over
the sum of every kernel's price.  Goal: at most 10% in every network.  The script runs on any tree (the
figures before a change: run it there).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zoo_results as zr  # noqa: E402  benchmarks/zoo_results.py (benchmarks/ is on sys.path)
from tables import write_table  # noqa: E402  benchmarks/tables.py
from zoo import ZOO, cache_dir, npu_graphs, ort_outputs  # noqa: E402  benchmarks/zoo.py: the zoo's networks

import compiler  # noqa: E402
from compiler.network.build import Kernels, plan_kernels  # noqa: E402
from compiler.network.layout_plan import best_price  # noqa: E402
from compiler.ops import Conv2d, Dense, Elementwise, Lut, Pool2d, Reshape  # noqa: E402
from compiler.ops.norm import BatchNormPool  # noqa: E402
from nnpsim.config import load_config  # noqa: E402

GOAL = 10.0
VARIANTS = ("qoperator-int8-pc", "qdq-int8-pc")
HEADER = ["network", "variant", "kernels", "cycles", "new-op kernels", "new-op share", "largest new-op kernel",
          "target met"]
OLD_ELEMENTWISE = ("clip", "requantize")


def is_new(op) -> bool:
    """Is this an op of issue 25 (not a conv, dense, max / average pool, reshape, clip, requantize, a table of
    requantizes or a residual add)?"""
    if isinstance(op, (Conv2d, Dense, Reshape)):
        return False
    if isinstance(op, Pool2d) and not isinstance(op, BatchNormPool):
        return op.mode == "mean"
    if isinstance(op, Elementwise) and op.mode in OLD_ELEMENTWISE:
        return False
    if isinstance(op, Lut) and op.of and all(m in OLD_ELEMENTWISE for m in op.of):
        return False            # a conv's requantize (QLinearConcat's of its input) as an epilogue table
    if isinstance(op, Elementwise) and op.is_add:
        return op.b_shape is not None or op.b_const is not None
    return True


def new_op_cycles(graph, cfg) -> tuple[int, int, int, str]:
    """(cycles the new ops cost, every kernel's cycles, kernels holding a new op, the costliest such kernel's ops),
    by the cost model, over the NPU's stages."""
    kernels = Kernels(cfg)
    new = total = touched = worst = 0
    worst_kind = "-"
    for stage in npu_graphs(graph):
        groups, _ = plan_kernels(stage, cfg, kernels=kernels)
        for g in groups:
            full = best_price(g, kernels.price)
            total += full
            keep = tuple(op for op in g.ops if not is_new(op))
            if len(keep) == len(g.ops):
                continue
            touched += 1
            extra = full if not keep else max(0, full - best_price(replace(g, ops=keep, parts=[]), kernels.price))
            new += extra
            if extra > worst:
                worst, worst_kind = extra, f"{' + '.join(o.kind for o in g.ops)}: {extra:,}"
    return new, total, touched, worst_kind


def measure(name: str, variant: str, path: Path, cfg) -> dict:
    """One zoo model: its kernels, simulated cycles, new-op cycles and the zoo's judgement of its outputs."""
    graph = compiler.from_onnx(str(path))
    lib = compiler.build(graph, config=cfg)
    mod = compiler.GraphModule(lib)
    entry = ZOO[name]
    x = np.random.default_rng(1).standard_normal((1, 3, entry.size, entry.size)).astype(np.float32)
    mod.set_input(0, x)
    stats = mod.run()
    ours = [mod.get_output(k) for k in range(mod.num_outputs)]
    ok, text = zr.judge(entry.kind, zr.split_variant(variant)[0], ours, ort_outputs(path, x, "ORT_ENABLE_ALL"),
                        ort_outputs(path, x, "ORT_DISABLE_ALL"), entry.classes)
    new, total, touched, worst = new_op_cycles(graph, cfg)
    return {"kernels": len(lib.layers), "cycles": stats.cycles, "touched": touched, "worst": worst,
            "share": 100.0 * new / max(total, 1), "ok": ok, "agreement": text}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(ZOO), help="comma-separated zoo names (default: every one)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated zoo variants")
    ap.add_argument("--cache", help="the folder of quantised models (benchmarks/zoo.py's)")
    ap.add_argument("--config", help="machine configuration (TOML); default: the built-in reference machine")
    ap.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    args = ap.parse_args()
    cfg, folder = load_config(args.config), cache_dir(args.cache)
    rows, missed = [], []
    for name in args.models.split(","):
        if name not in ZOO:
            print(f"--models: {name!r} is not a zoo network (python benchmarks/zoo.py --list)", file=sys.stderr)
            return 2
        for variant in args.variants.split(","):
            found = sorted(folder.glob(f"{name}-*-{variant}.onnx"))
            if not found:
                print(f"{name} {variant}: not in {folder} (python benchmarks/zoo.py --no-run --models {name} "
                      f"--variants {variant})", file=sys.stderr)
                return 2
            r = measure(name, variant, found[0], cfg)
            met = r["ok"] and r["share"] <= GOAL
            rows.append([name, variant, r["kernels"], f"{r['cycles']:,}", r["touched"], f"{r['share']:.1f}%",
                         r["worst"], "yes" if met else "NO"])
            print(" | ".join(map(str, rows[-1])), f"({r['agreement']})", flush=True)
            if not met:
                missed.append(f"{name} {variant}")
    if args.write_docs:
        write_table("new-ops", HEADER, rows,
                    f"the new ops at most {GOAL:.0f}% of every network's kernel cycles, the outputs as the zoo "
                    "judges them (QOperator bit-exact; QDQ inside onnxruntime's two levels)")
    if missed:
        print("missed:", ", ".join(missed), file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
