"""SiLU, HardSwish and squeeze-excite in whole networks: cycles, DDR bytes and the share of the new ops.

    python benchmarks/activations.py [--models mobilenet_v3_large,efficientnet_b0] [--variants qoperator-int8-pc]
                                     [--cache DIR] [--write-docs]

Reads the zoo's quantised models from its cache (benchmarks/zoo.py: --cache, else $NNP_ZOO_CACHE, else
~/.cache/nnp/zoo; `zoo.py --no-run` fills it), compiles each (compiler.build), runs it on the simulator on
a seeded input and compares the output with onnxruntime's (QOperator: every element).  The new ops are
the luts (sigmoid, hard-sigmoid, SiLU and HardSwish as one table) and the muls (the squeeze-excite
multiply by a per-channel gate).  Their cycles are priced by the cost model, kernel by kernel, as graph
fusion prices them (network.layout_plan.best_price of network.build.Kernels.price): a kernel of new ops
alone counts whole; a kernel that holds other ops too counts what it costs above the same kernel without
its new ops (a conv's epilogue lut, a projection conv reading x * gate from DM instead of x from DDR).
The share is their sum over the sum of every kernel's price.  Goal: at most 10% in every network.
The script runs on any tree (the figures before a change: run it there).
"""
from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tables import write_table  # noqa: E402  benchmarks/tables.py (benchmarks/ is on sys.path)
from zoo import cache_dir  # noqa: E402  benchmarks/zoo.py: where the quantised models are

import compiler  # noqa: E402
from compiler.network.build import Kernels, plan_kernels  # noqa: E402
from compiler.network.layout_plan import best_price  # noqa: E402
from compiler.ops import Elementwise, Lut  # noqa: E402
from nnpsim.config import load_config  # noqa: E402

GOAL = 10.0
MODELS = ("mobilenet_v3_large", "efficientnet_b0")
HEADER = ["network", "variant", "kernels", "cycles", "DDR MB", "new-op kernels", "new-op share", "exact"]


def is_new(op) -> bool:
    """A lut (an activation's table) or a mul (x * act(x) not yet one table, a squeeze-excite multiply)."""
    return isinstance(op, Lut) or (isinstance(op, Elementwise) and op.mode == "mul")


def new_op_cycles(graph, cfg) -> tuple[int, int, int]:
    """(cycles the new ops cost, every kernel's cycles, kernels holding a new op), by the cost model."""
    kernels = Kernels(cfg)
    groups, _ = plan_kernels(graph, cfg, kernels=kernels)
    new = total = touched = 0
    for g in groups:
        full = best_price(g, kernels.price)
        total += full
        keep = tuple(op for op in g.ops if not is_new(op))
        if len(keep) == len(g.ops):
            continue
        touched += 1
        new += full if not keep else max(0, full - best_price(replace(g, ops=keep, parts=[]), kernels.price))
    return new, total, touched


def exact_with_onnxruntime(model, mod, x: np.ndarray) -> bool:
    """The network's output equal to onnxruntime's (default level) on every element."""
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return bool(np.array_equal(mod.get_output(0), sess.run(None, {sess.get_inputs()[0].name: x})[0]))


def measure(path: Path, cfg) -> dict:
    """One model: its kernels, simulated cycles, DDR bytes, new-op cycles and agreement."""
    import onnx
    model = onnx.load(str(path))
    graph = compiler.from_onnx(model)
    lib = compiler.build(graph, config=cfg)
    mod = compiler.GraphModule(lib)
    x = np.random.default_rng(0).standard_normal(tuple(lib.meta["inputs"][0]["shape"])).astype(np.float32)
    mod.set_input(0, x)
    stats = mod.run()
    new, total, touched = new_op_cycles(graph, cfg)
    return {"kernels": len(lib.layers), "cycles": stats.cycles, "predicted": lib.predicted_cycles,
            "ddr": sum(layer.ddr_bytes for layer in mod.layer_stats()), "touched": touched,
            "share": 100.0 * new / max(total, 1), "exact": exact_with_onnxruntime(model, mod, x)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS), help="comma-separated zoo names")
    ap.add_argument("--variants", default="qoperator-int8-pc", help="comma-separated zoo variants")
    ap.add_argument("--cache", help="the folder of quantised models (benchmarks/zoo.py's)")
    ap.add_argument("--config", help="machine configuration (TOML); default: the built-in reference machine")
    ap.add_argument("--write-docs", action="store_true", help="write the table into docs/performance.md")
    args = ap.parse_args()
    cfg, folder = load_config(args.config), cache_dir(args.cache)
    rows, missed = [], []
    for name in args.models.split(","):
        for variant in args.variants.split(","):
            found = sorted(folder.glob(f"{name}-*-{variant}.onnx"))
            if not found:
                print(f"{name} {variant}: not in {folder} (python benchmarks/zoo.py --no-run --models {name} "
                      f"--variants {variant})", file=sys.stderr)
                return 2
            r = measure(found[0], cfg)
            rows.append([name, variant, r["kernels"], f"{r['cycles']:,}", f"{r['ddr'] / 1e6:.2f}", r["touched"],
                         f"{r['share']:.1f}%", "yes" if r["exact"] else "NO"])
            print(" | ".join(map(str, rows[-1])), f"(predicted {r['predicted']:,})", flush=True)
            if r["share"] > GOAL or (variant.startswith("qoperator") and not r["exact"]):
                missed.append(f"{name} {variant}")
    if args.write_docs:
        write_table("activations", HEADER, rows,
                    f"the new ops (luts, squeeze-excite muls) at most {GOAL:.0f}% of a network's kernel cycles; "
                    "QOperator outputs bit-exact with onnxruntime")
    if missed:
        print("missed:", ", ".join(missed), file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
