"""Where the simulator's time goes on the 53 ResNet-50 convs (not part of the test suite).

    python benchmarks/simulator_profile.py [--dir DIR] [--repeats N] [--no-units]

Compiles the 53 layers of benchmarks/resnet50.py (or reuses the programs an
earlier run saved in DIR), then reports CPU seconds summed over the 53
layers, best of N passes:

* the per-run Python work of a call: Simulator(), load (decode and DDR
  image), write, the engine (run_program), summarize (Stats and warnings),
  read, and the race check (`check_races=True`);
* inside the engine, the NU, VU and DMA kernels: each pass is repeated in a
  fresh process whose engine is rebuilt (scratch numba cache) with kernels
  replaced by no-ops.  Durations come from the parameters, not the kernels,
  so the schedule is unchanged.  NU = all - (NU off); VU = all - (VU off);
  DMA = (NU, VU off) - (all off), because a VU left on without DMA stops on
  its empty tables; what remains with all off is the event loop and its
  tables.  Each process compiles the engine once (about a minute).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

STUB_SETS = ("", "nu", "vu", "nu,vu", "nu,vu,dma")


def save_layers(out: Path) -> None:
    """Compile the 53 convs; save each program, input and output buffer name under out."""
    from compiler.build import build
    from resnet50 import make_op, resnet50_convs

    rng = np.random.default_rng(50)
    names = []
    for i, (_, c, o, hw, k, stride, pad) in enumerate(resnet50_convs()):
        kernel = build(make_op(c, o, hw, k, stride, pad, rng))
        kernel.program.save(out / f"{i}.bin")
        np.save(out / f"{i}.npy", rng.integers(-128, 128, (1, c, hw, hw), dtype=np.int8))
        names.append(kernel.ir.output.name)
    (out / "outputs.json").write_text(json.dumps(names))


def load_layers(where: Path) -> list:
    from isa_spec.program import Program

    names = json.loads((where / "outputs.json").read_text())
    return [(Program.load(where / f"{i}.bin"), np.load(where / f"{i}.npy"), name) for i, name in enumerate(names)]


def python_pieces(layers: list, repeats: int) -> dict[str, float]:
    """CPU seconds of each step of a call, summed over the layers, best of `repeats` passes."""
    from nnpsim import Simulator
    from nnpsim.simulator import _check_races, run_program
    from nnpsim.stats import summarize

    steps = ("Simulator()", "load", "write", "engine (run_program)", "summarize", "read", "race check")
    best = dict.fromkeys(steps, float("inf"))
    for rep in range(repeats + 1):       # pass 0 loads numba's cache and decodes: not counted
        spent = dict.fromkeys(steps, 0.0)
        for program, x, out in layers:
            clock = [time.process_time()]
            sim = Simulator()
            clock.append(time.process_time())
            sim.load(program)
            clock.append(time.process_time())
            sim.write("x", x)
            clock.append(time.process_time())
            log, _ = run_program(sim._table, sim.memory, sim.config, 10 ** 9, program)
            clock.append(time.process_time())
            summarize(log, program, sim.config)
            clock.append(time.process_time())
            sim.read(out)
            clock.append(time.process_time())
            _check_races(log, program, sim.config)
            clock.append(time.process_time())
            for step, t0, t1 in zip(steps, clock, clock[1:]):
                spent[step] += t1 - t0
        if rep:
            best = {k: min(best[k], spent[k]) for k in steps}
    return best


def engine_seconds(layers: list, repeats: int, stubs: str) -> float:
    """CPU seconds of run_program over the layers, best of `repeats`, with the named kernels no-ops."""
    import nnpsim.engine as engine
    from numba import njit

    from nnpsim import Simulator
    from nnpsim.simulator import run_program

    if "nu" in stubs:
        engine.nu_conv = njit(lambda mem, base, size, unit, r0, r1, r2, p, acc, rows, cols, err: 0)
    if "vu" in stubs:
        engine.vu_exec = njit(lambda mem, base, size, unit, op, r0, r1, r2, f1, f2, p, err: 0)
    if "dma" in stubs:
        engine.dma_copy = njit(lambda mem, base, size, dspace, daddr, sspace, saddr, p, err: 0)
    best = float("inf")
    for rep in range(repeats + 1):
        spent = 0.0
        for program, x, _ in layers:
            sim = Simulator()
            sim.load(program)
            sim.write("x", x)
            t0 = time.process_time()
            run_program(sim._table, sim.memory, sim.config, 10 ** 9, program)
            spent += time.process_time() - t0
        if rep:
            best = min(best, spent)
    return best


def unit_breakdown(where: Path, repeats: int) -> dict[str, float]:
    """NU, VU, DMA and the rest of the engine, from engines with kernels stubbed (one process each)."""
    seconds = {}
    for stubs in STUB_SETS:
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            out = subprocess.run([sys.executable, __file__, "--dir", str(where), "--repeats", str(repeats),
                                  "--worker", stubs or "none"], env=env, check=True, capture_output=True, text=True)
        seconds[stubs] = float(out.stdout.split()[-1])
    return {"NU kernel": seconds[""] - seconds["nu"], "VU kernel": seconds[""] - seconds["vu"],
            "DMA kernel": seconds["nu,vu"] - seconds["nu,vu,dma"],
            "event loop and tables": seconds["nu,vu,dma"], "engine, all": seconds[""]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="directory for the compiled layers (reused when it holds them)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-units", action="store_true", help="skip the per-unit breakdown (4 engine compiles)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        where = Path(args.dir or tmp)
        if args.worker:
            print(engine_seconds(load_layers(where), args.repeats, "" if args.worker == "none" else args.worker))
            return 0
        if not (where / "outputs.json").exists():
            where.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            save_layers(where)
            print(f"compiled the 53 layers in {time.perf_counter() - t0:.1f} s into {where}")
        layers = load_layers(where)
        print(f"CPU seconds over the 53 layers, best of {args.repeats} passes "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
        for step, sec in python_pieces(layers, args.repeats).items():
            print(f"  {step:24} {sec:7.3f}")
        if not args.no_units:
            print("inside the engine:")
            for part, sec in unit_breakdown(where, args.repeats).items():
                print(f"  {part:24} {sec:7.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
