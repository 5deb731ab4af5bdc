"""Whole-network compile time: ResNet-50 and MobileNetV2 (and ResNet-18) compiled into one program each.

    python benchmarks/compile_time.py [--models resnet50,mobilenetv2] [--nu 1,2] [--size 224]
                                      [--save DIR] [--profile FILE]

For each model and NU count (nu.count = vu.count = N), builds and quantises the
model (compiler.models, not timed), imports it, then times compiler.build(graph)
alone: wall seconds and this process's CPU seconds (user + system, from
resource.getrusage), so a figure taken while the machine is shared can be told
apart from the work itself.  The load average at the start of each compile is
printed beside it.  A first untimed build of a small network warms numba's
timing kernels (their on-disk cache) so that no model pays a one-time compile.
Prints the SHA-256 of each program's assembly and binary: a speed-up that only
makes the compiler faster must leave them unchanged.  --save DIR writes them.

Targets (exit status 1 if one is missed): every model under 30 s of CPU time on
one NU and under 60 s on two (COMPILE_TARGETS).  CPU time is what the target is
judged on, as wall time on a shared machine counts other processes' work too;
both are printed.
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler import models  # noqa: E402
from nnpsim.config import Config  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

COMPILE_TARGETS = {1: 30.0, 2: 60.0}   # seconds per whole network, by NU count


def cpu_seconds() -> float:
    """User + system CPU seconds this process has used."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def compile_once(graph, cfg: Config, profile: str | None = None):
    """(library, wall seconds, CPU seconds) of compiler.build(graph) on cfg."""
    prof = cProfile.Profile() if profile else None
    w, c = time.perf_counter(), cpu_seconds()
    if prof:
        prof.enable()
    lib = compiler.build(graph, config=cfg)
    if prof:
        prof.disable()
        prof.dump_stats(profile)
    return lib, time.perf_counter() - w, cpu_seconds() - c


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,mobilenetv2")
    ap.add_argument("--nu", default="1,2", help="NU counts (each with as many VUs)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--save", help="directory to write each program's assembly and binary to")
    ap.add_argument("--profile", help="cProfile the (last) compile into this file")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    names = [m for m in args.models.split(",") if m]
    counts = [int(n) for n in args.nu.split(",") if n]
    compiler.build(compiler.from_onnx(models.tiny()))          # warm numba's on-disk cache: not timed
    graphs = {n: compiler.from_onnx(models.build(n, size=args.size)) for n in names}
    print(f"{'model':<12} {'NUs':>3} {'layers':>6} {'wall s':>8} {'CPU s':>8} {'target':>7} {'load':>5}  "
          f"{'asm sha256':<16} {'binary sha256':<16}")
    missed, table = [], []
    for name in names:
        for nu in counts:
            cfg = Config(nu_count=nu, vu_count=nu)
            load = os.getloadavg()[0]
            try:
                lib, wall, cpu = compile_once(graphs[name], cfg, args.profile)
            except compiler.CompileError as exc:
                print(f"{name:<12} {nu:>3} does not compile: {exc}", flush=True)
                missed.append(f"{name} on {nu} NU(s): does not compile")
                continue
            binary = lib.program.to_bytes()
            target = COMPILE_TARGETS.get(nu, COMPILE_TARGETS[2])
            ok = cpu < target
            print(f"{name:<12} {nu:>3} {len(lib.layers):>6} {wall:>8.1f} {cpu:>8.1f} {target:>6.0f}s {load:>5.2f}  "
                  f"{sha(lib.asm.encode()):<16} {sha(binary):<16}{'' if ok else '  MISSED'}", flush=True)
            table.append([name, nu, len(lib.layers), f"{cpu:.1f}", f"< {target:.0f} s"])
            if not ok:
                missed.append(f"{name} on {nu} NU(s): {cpu:.1f} s CPU, target {target:.0f} s")
            if args.save:
                out = Path(args.save)
                out.mkdir(parents=True, exist_ok=True)
                (out / f"{name}_nu{nu}.s").write_text(lib.asm)
                (out / f"{name}_nu{nu}.bin").write_bytes(binary)
    for line in missed:
        print("target missed:", line)
    if args.write_docs:
        write_table("compile-time", ["network", "NUs", "kernels", "CPU s", "goal"], table,
                    "every network under 30 s of CPU on one NU and under 60 s on two.")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
