"""Halo kept or recomputed (compiler.pipelining, compiler.lowering.ring) on chains of real networks.

    python benchmarks/halo.py [--chains mnv2-b1,mnv2-b2,r18-l1,r50-l1] [--config HW.toml]

For each chain (random int8 weights, the layer shapes of the network named, 224x224
input): compile it (the schedule search, then interleave.choose prices one kernel
after another, interleaved with lag 1 and 3, and the halo-recomputing rings, here
on every chain: interleave.RINGS_ALWAYS) and
print every variant's predicted cycles and the one chosen.  Then build the best
kept variant and the best recomputing one from the same schedule and simulate
both (random input, one run): their cycles, their DM high-water mark and where
the intermediate lives.  Both outputs must equal numpy's reference (exit 1 if not).
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import compiler
from compiler import interleave, kernel, ops, pipeline
from compiler.lowering import driver, ring
from compiler.quant import quantize_multipliers
from nnpsim.config import Config, load_config
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)


def conv(rng, shape, out, k=1, stride=1, groups=1, relu=True):
    """A conv with random int8 weights and a relu (or none)."""
    c = shape[1]
    w = rng.integers(-20, 21, (out, c // groups, k, k)).astype(np.int8)
    m, s = quantize_multipliers(rng.uniform(0.5, 2.0, out) / (c // groups * k * k * 8))
    return ops.conv2d(shape, w, rng.integers(-800, 800, out).astype(np.int32), stride=stride, padding=k // 2,
                      groups=groups, x_zp=int(rng.integers(-4, 5)), multiplier=m, shift=s, zp_out=-3,
                      lo=-3 if relu else -128)


def inverted(rng, c, hw, t, out, stride):
    """MobileNetV2's expand 1x1, depthwise 3x3, project 1x1."""
    e = conv(rng, (1, c, hw, hw), c * t)
    d = conv(rng, e.output.shape, c * t, k=3, stride=stride, groups=c * t)
    return e, d, conv(rng, d.output.shape, out, relu=False)


def pair(rng, c, hw, k1, k2):
    """conv k1 x k1 then conv k2 x k2, c channels at hw x hw."""
    a = conv(rng, (1, c, hw, hw), c, k=k1)
    return a, conv(rng, a.output.shape, c, k=k2)


CHAINS = {
    "mnv2-b1": ("MobileNetV2 block 1: expand 16->96 at 112x112, depthwise 3x3/2, project 24",
                lambda r: inverted(r, 16, 112, 6, 24, 2)),
    "mnv2-b2": ("MobileNetV2 block 2: expand 24->144 at 56x56, depthwise 3x3, project 24",
                lambda r: inverted(r, 24, 56, 6, 24, 1)),
    "r18-l1": ("ResNet-18 layer 1: conv 3x3 -> conv 3x3, 64 channels at 56x56", lambda r: pair(r, 64, 56, 3, 3)),
    "r50-l1": ("ResNet-50 layer 1: conv 1x1 -> conv 3x3, 64 channels at 56x56", lambda r: pair(r, 64, 56, 1, 3)),
}


def reference(chain, x):
    for op in chain:
        x = op.reference(x)
    return x


def variant(chain, sched, cfg: Config, choice: interleave.Choice, ring_family: bool):
    """The best priced variant of one family (kept or recomputed) built from the schedule (None: none fits)."""
    names = {k: v for k, v in choice.priced.items() if v is not None
             and k.startswith("recompute") == ring_family}
    if not names:
        return None, None
    name = min(names, key=names.get)
    if ring_family:
        depth, ahead = next(r for r in interleave.RINGS if interleave.ring_name(*r) == name)
        rk = ring.lower_ring(sched, cfg, depth)
        kir = rk.kir
        kir.body = interleave.ring_body(rk, ahead)
    else:
        lag = next(lag for lag in (None,) + interleave.LAGS if interleave.variant_name(lag) == name)
        kir, steps = driver.lower(sched, cfg)
        kir.body = interleave.body(steps, lag)
    predicted, usage, report = pipeline.schedule(kir, cfg)
    return name, kernel.finish(tuple(chain), kir, cfg, predicted, usage, report)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--chains", default=",".join(CHAINS))
    ap.add_argument("--config", default=None, help="hardware TOML (default configuration)")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    cfg = load_config(args.config)
    interleave.RINGS_ALWAYS = True      # the rings priced even where the kept intermediate fits DM
    interleave.RING_BOUND = False       # and replayed, not skipped on their lower bound
    bad, rows = 0, []
    for key in args.chains.split(","):
        title, make = CHAINS[key]
        rng = np.random.default_rng(1)
        chain = make(rng)
        k = compiler.build(*chain, config=cfg)
        choice = k.ir.pipelining
        print(f"{key}: {title}")
        print(f"  chosen: {choice.name}{choice.why}; predicted: {interleave.prices_text(choice.priced)}")
        x = rng.integers(-128, 128, chain[0].x_shape).astype(np.int8)
        want = reference(chain, x)
        rows.append({"title": title})
        for family in (False, True):
            name, built = variant(chain, k.schedule, cfg, choice, family)
            if built is None:
                print(f"  {'recompute' if family else 'kept'}: no variant")
                continue
            got = built(x)
            ok = np.array_equal(got, want)
            bad += not ok
            where = "DDR" if any("DDR scratch" in n for n in built.ir.notes) else "DM"
            rows[-1][family] = (f"{name}, intermediates in {where}: {built.predicted_cycles:,} / "
                                f"{built.stats.cycles:,}", built.stats.cycles, built.usage.get("dm", 0))
            print(f"  {name}: predicted {built.predicted_cycles:,}, simulated {built.stats.cycles:,} cycles, "
                  f"DM high-water {built.usage.get('dm', 0):,} bytes, intermediates in {where}, "
                  f"{'bit-exact' if ok else 'WRONG'}")
    if args.write_docs:
        write_table("halo", ["chain", "kept (best): predicted / simulated", "recomputed (best): predicted / simulated",
                             "recomputed / kept, simulated", "DM high-water kept / recomputed"],
                    [[r["title"], *(r[f][0] if f in r else "no variant" for f in (False, True)),
                      f"{r[True][1] / r[False][1]:.3f}" if len(r) == 3 else "-",
                      " / ".join(f"{r[f][2]:,}" if f in r else "-" for f in (False, True))] for r in rows],
                    "every variant bit-exact; recomputing pays only where the kept intermediate goes through DDR.")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
