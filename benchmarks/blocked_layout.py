"""The blocked DDR layout (NC/bHWb) in the layout planner: what it picks and what it changes.

    python benchmarks/blocked_layout.py [--models mobilenetv2,resnet50] [--size 224]
                                        [--burst 64,16] [--no-sim]

For each model and DDR burst size (memory.ddr.burst_bytes), compiles the network
twice, side by side in one process: the layout planner choosing among NCHW, NHWC
and the blocked layout (compiler.network.build_network's default), and among NCHW
and NHWC only (blocked=False).  Reports each compile's CPU seconds, the plan's
kernel counts per layout and its transforms, the predicted cycles, and (unless
--no-sim) the simulated cycles and DDR bytes of one run on the same seeded input,
whose outputs must agree bit for bit (exit status 1 if not).  Then lists the
kernels the planner put in the blocked layout with their prices in each layout.
"""
from __future__ import annotations

import argparse
import resource
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler import models  # noqa: E402
from compiler.network.build import build_network  # noqa: E402
from nnpsim.config import Config  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

SEED = 1


def cpu_seconds() -> float:
    """User + system CPU seconds this process has used."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def one(graph, cfg: Config, blocked: bool, sim: bool) -> dict:
    """Compile (and run) one network with or without the blocked layout."""
    w, c = time.perf_counter(), cpu_seconds()
    lib = build_network(graph, cfg, blocked=blocked)
    out = {"cpu": cpu_seconds() - c, "wall": time.perf_counter() - w, "lib": lib,
           "predicted": lib.predicted_cycles, "plan": lib.meta["layout"]}
    if sim:
        m = compiler.GraphModule(lib)
        shape = tuple(lib.meta["inputs"][0]["shape"])
        m.set_input(0, np.random.default_rng(SEED).standard_normal(shape).astype(np.float32))
        stats = m.run(check_races=False)
        out.update(cycles=stats.cycles, ddr=stats.ddr_bytes, y=m.get_output(0, quantized=True))
    return out


def counts(plan: dict) -> str:
    """'n layout, ...' of the plan's kernels, then its transforms."""
    seen: dict[str, int] = {}
    for lay in plan["kernels"].values():
        seen[lay] = seen.get(lay, 0) + 1
    return ", ".join(f"{n} {lay}" for lay, n in sorted(seen.items())) + f"; {len(plan['transforms'])} transforms"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="mobilenetv2,resnet50")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--burst", default="64", help="comma-separated DDR burst sizes (bytes)")
    ap.add_argument("--no-sim", action="store_true", help="compile only (no simulated cycles)")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    ok, table = True, []
    warm = compiler.from_onnx(models.tiny("qoperator"))
    build_network(warm, Config())
    for name in args.models.split(","):
        graph = compiler.from_onnx(models.build(name, "qoperator", size=args.size))
        for burst in (int(b) for b in args.burst.split(",")):
            cfg = replace(Config(), ddr_burst_bytes=burst).validate()
            off = one(graph, cfg, False, not args.no_sim)
            on = one(graph, cfg, True, not args.no_sim)
            print(f"\n{name} {args.size}x{args.size}, DDR burst {burst} B")
            print(f"  {'':22}{'nchw/nhwc':>16}{'+ blocked':>16}{'ratio':>8}")
            rows = [("compile CPU (s)", off["cpu"], on["cpu"]), ("predicted cycles", off["predicted"], on["predicted"])]
            if not args.no_sim:
                rows += [("simulated cycles", off["cycles"], on["cycles"]), ("DDR bytes", off["ddr"], on["ddr"])]
            for label, a, b in rows:
                fmt = "{:>16.1f}" if isinstance(a, float) else "{:>16,}"
                print(f"  {label:22}" + fmt.format(a) + fmt.format(b) + f"{b / a:>8.3f}")
            print(f"  plan without blocked: {counts(off['plan'])}")
            print(f"  plan with blocked:    {counts(on['plan'])}")
            for g, lay in on["plan"]["kernels"].items():
                if lay not in ("nchw", "nhwc"):
                    prices = ", ".join(f"{k} {v:,}" for k, v in on["plan"]["prices"][g].items())
                    print(f"    {g}: {lay} [{prices}]")
            if not args.no_sim:
                table.append([f"{name}, {burst} B", counts(off["plan"]), counts(on["plan"]),
                              f"{off['cycles']:,} / {on['cycles']:,}", f"{off['ddr']:,} / {on['ddr']:,}",
                              f"{off['cpu']:.1f} / {on['cpu']:.1f}"])
            if not args.no_sim and not np.array_equal(off["y"], on["y"]):
                print("  MISSED: the outputs with and without the blocked layout differ")
                ok = False
    if args.write_docs:
        write_table("blocked-layout", ["network, burst", "plan without blocked", "plan with blocked",
                                       "simulated cycles without / with", "DDR bytes without / with",
                                       "compile CPU s without / with"], table,
                    "outputs with and without the blocked layout equal; blocked chosen where it prices lower.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
