"""SHA-256 of the programs a refactoring must leave unchanged, byte for byte.

ResNet-18, ResNet-50 and MobileNetV2 (compiler.models, QOperator, 224x224, fused and fuse=False)
and every dynamic binary benchmarks/dynamic.py builds.  Each binary is hashed whole, as `save`
writes it (code, data, symbols, buffers, source-line table).  Run:

    python benchmarks/program_hashes.py [--only dynamic|networks] [-o hashes.json] [--dump DIR]
    python benchmarks/program_hashes.py --against hashes.json     # exit 1 if any hash differs
"""
from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

import compiler
from compiler import models

sys.path.insert(0, str(Path(__file__).resolve().parent))
import dynamic as dyn_bench  # noqa: E402  (benchmarks/dynamic.py: the dynamic cases)

NETWORKS = ("resnet18", "resnet50", "mobilenetv2")


DUMP: Path | None = None     # --dump DIR: each program's assembly is written there too


def digest(built, name: str = "") -> str:
    """SHA-256 of a built kernel's or network's saved binary."""
    if DUMP is not None and name:
        (DUMP / (re.sub(r"\W+", "_", name).strip("_")[:80] + ".s")).write_text(built.asm)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "p.bin")
        built.save(path)
        return hashlib.sha256(path.read_bytes()).hexdigest()


def network_hashes() -> dict[str, str]:
    """Hashes of the three networks, fused and fuse=False."""
    out = {}
    for name in NETWORKS:
        graph = compiler.from_onnx(models.build(name, "qoperator", size=224))
        for fuse in (True, False):
            out[f"{name}{'' if fuse else ' fuse=False'}"] = digest(compiler.build(graph, fuse=fuse), f"{name}_{fuse}")
            print(f"{name} fuse={fuse}: {out[list(out)[-1]]}", file=sys.stderr)
    return out


def dynamic_hashes() -> dict[str, str]:
    """Hashes of every dynamic binary benchmarks/dynamic.py measures."""
    out = {}
    for c, o, lo, hi in ((32, 32, 16, 64), (64, 64, 8, 56), (8, 16, 8, 64)):
        dyn_op, _ = dyn_bench.layer(np.random.default_rng(0), c, o, lo, hi)
        key = f"conv 3x3 {c} -> {o}, [{lo}, {hi}]"
        out[key] = digest(compiler.build(dyn_op), key)
    for title, dyn_ops, *_ in dyn_bench.other_cases(np.random.default_rng(1)):
        out[title] = digest(compiler.build(*dyn_ops), title)
    out["network"] = digest(compiler.build(dyn_bench.network_graph(16, 64)), "network")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("dynamic", "networks"))
    ap.add_argument("-o", "--output", help="write the hashes as JSON here")
    ap.add_argument("--against", help="compare with hashes written before; exit 1 on any difference")
    ap.add_argument("--dump", help="also write each program's assembly into this directory")
    args = ap.parse_args(argv)
    global DUMP
    if args.dump:
        DUMP = Path(args.dump)
        DUMP.mkdir(parents=True, exist_ok=True)
    hashes = {}
    if args.only != "networks":
        hashes.update(dynamic_hashes())
    if args.only != "dynamic":
        hashes.update(network_hashes())
    for k, v in hashes.items():
        print(f"{v}  {k}")
    if args.output:
        Path(args.output).write_text(json.dumps(hashes, indent=1) + "\n")
    if args.against:
        old = json.loads(Path(args.against).read_text())
        bad = [k for k in hashes if old.get(k) != hashes[k]]
        print("all unchanged" if not bad else "CHANGED: " + "; ".join(bad))
        return 1 if bad else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
