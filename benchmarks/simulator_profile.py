"""Where the simulator's time goes on the 53 ResNet-50 convs (not part of the test suite).

    python benchmarks/simulator_profile.py [--dir DIR] [--repeats N] [--no-units]
    python benchmarks/simulator_profile.py --network NAME [--repeats N]

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

With --network NAME (a network of benchmarks/simulator.py's table: a built-in one
or a zoo file in $NNP_ZOO_CACHE), the network is compiled and run once, then its
commands are replayed in the order they started, each through its unit kernel
called from Python on the same memory (the final memory must equal the run's),
and the best of N passes of each command is summed per mnemonic: commands,
work (VU elements, NU MACs, DMA bytes), milliseconds and nanoseconds per unit
of work.  Each call also pays Python's call overhead (a few microseconds), so
the sum exceeds the engine's time by about that much per command.
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

from nnpsim.state import K_COLS, K_NU, K_ROWS, K_VU  # noqa: E402
from nnpsim.units import nu  # noqa: E402
from nnpsim.units.dma import dma_copy  # noqa: E402
from nnpsim.units.vu import vu_exec  # noqa: E402

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



def _replay_one(log, c: int, memory, cfg: np.ndarray, err: np.ndarray) -> int:
    """Command c's effect through its unit kernel, as the engine's _execute calls it; its work (elements,
    MACs or bytes)."""
    a = int(log.cmd_agent[c])
    (r0, r1, r2), (f0, f1, f2) = (int(v) for v in log.cmd_regs[c]), (int(v) for v in log.cmd_fields[c][:3])
    p = log.cmd_params[c].copy()
    base, size, rows, cols = memory.table[0], memory.table[1], cfg[K_ROWS], cfg[K_COLS]
    if a >= 1 + cfg[K_NU] + cfg[K_VU]:
        rc, work = dma_copy(memory.mem, base, size, f0, r0, f1, r1, p, err), int(log.cmd_bytes[c])
    elif a > cfg[K_NU]:
        rc, work = vu_exec(memory.mem, base, size, a - 1 - cfg[K_NU], f0, r0, r1, r2, f1, f2, p, err), int(
            np.prod(p[:4]))
    elif f0 in (nu.NU_DWCONV, nu.NU_DWCONV_ACC):
        rc, work = nu.nu_dwconv(memory.mem, base, size, a - 1, r0, r1, r2, p, f0 == nu.NU_DWCONV_ACC, rows, cols,
                                err), nu.nu_dw_macs(p, cols)
    elif f0 in (nu.NU_CONV_RQ, nu.NU_CONV_ACC_RQ):
        rc, work = nu.nu_conv_rq(memory.mem, base, size, a - 1, r0, r1, r2, p, rows, cols, err,
                                 f0 == nu.NU_CONV_ACC_RQ), nu.nu_macs(p, rows, cols)
    else:
        rc, work = nu.nu_conv(memory.mem, base, size, a - 1, r0, r1, r2, p, f0 == nu.NU_CONV_ACC, rows, cols,
                              err), nu.nu_macs(p, rows, cols)
    if rc != 0:
        raise SystemExit(f"replay: command #{c} failed (error {rc}) where the run's did not")
    return work


def network_kernels(name: str, repeats: int) -> dict[str, list]:
    """Per mnemonic of one network's commands: [commands, work, best seconds summed] (see --network)."""
    from isa_spec import decode, load_isa
    from simulator import _network    # benchmarks/simulator.py

    from nnpsim.simulator import run_program
    from nnpsim.state import config_vector

    built = _network(name)
    if built is None:
        raise SystemExit(f"{name}: no such network in the cache")
    sim, program = built[1].sim, built[1].lib.program
    start = sim.memory.mem.copy()
    log, failure = run_program(sim._table, sim.memory, sim.config, 10 ** 9, program)
    if failure is not None:
        raise SystemExit(f"{name}: {failure}")
    after = sim.memory.mem.copy()
    isa, cfg, err = load_isa(), config_vector(sim.config, 10 ** 9), np.zeros(8, np.int64)
    names = [decode(int(program.code[pc // 8]), isa)[0].mnemonic for pc in log.cmd_pc]
    order = np.lexsort((log.cmd_agent, log.cmd_start))     # effects apply at the start, in agent order
    best = np.full(log.n_commands, np.inf)
    work = np.zeros(log.n_commands, np.int64)
    for _ in range(repeats + 1):        # the first pass loads the kernels: not counted
        sim.memory.mem[:] = start
        for c in order:
            t0 = time.perf_counter()
            work[c] = _replay_one(log, int(c), sim.memory, cfg, err)
            best[c] = min(best[c], time.perf_counter() - t0)
        if not np.array_equal(sim.memory.mem, after):
            raise SystemExit(f"{name}: the replay left another memory than the run")
    table: dict[str, list] = {}
    for c in range(log.n_commands):
        row = table.setdefault(names[c], [0, 0, 0.0])
        row[0], row[1], row[2] = row[0] + 1, row[1] + int(work[c]), row[2] + best[c]
    return dict(sorted(table.items(), key=lambda kv: -kv[1][2]))

def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", help="directory for the compiled layers (reused when it holds them)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-units", action="store_true", help="skip the per-unit breakdown (4 engine compiles)")
    ap.add_argument("--network", help="replay one network's commands kernel by kernel (see above)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.network:
        print(f"{args.network}: kernels replayed command by command, best of {args.repeats} passes "
              f"(load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores):")
        for mnemonic, (n, work, sec) in network_kernels(args.network, args.repeats).items():
            print(f"  {mnemonic:18} {n:6,} commands {work:13,} work {sec * 1e3:8.1f} ms "
                  f"{sec / max(work, 1) * 1e9:7.2f} ns/work {sec / n * 1e6:7.1f} us/command")
        return 0
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
