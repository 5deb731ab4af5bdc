"""Time the simulator's engine (not part of the test suite).

    python benchmarks/simulator.py [--iterations N] [--commands C] [--cold]
                                   [--repeats R] [--race-repeats Q] [--only PART,...]

(a) engine: CU instructions per second on a scalar loop after warm-up;
    commands per second on a stream of small DMA copies over 4 channels;
(b) the hand-scheduled tiled conv of benchmarks/conv_kernel.py, 1x64x56x56 by
    64x64x3x3 (pad 1), simulated, against numpy computing the same conv by
    im2col and a float64 matmul, interleaved in one run (ratio of medians);
(c) the wall time of `nnpsim run small.bin` in a fresh process: the second
    run (numba cache warm) and, with --cold, the first run on an empty cache
    (the one-time compile);
(d) the 53 conv layers of ResNet-50 (benchmarks/resnet50.py), compiled first
    (not timed), then simulated at cycle level as a user calls them
    (`kernel(x)`: Simulator, load, write, run with its Stats, read) against
    numpy's im2col + float64 matmul of the same convs, the two passes
    interleaved R times; the best pass of each gives the ratio (target <= 3).
    Every simulated output is compared with the compiler's numpy model, and
    numpy's accumulators, requantised, with the same.  Race checking is off
    in the ratio (Kernel's default); Q more passes measure it on.

(e) whole networks (`--only networks`): ResNet-18, ResNet-50 and MobileNetV2 from compiler.models and
    the zoo networks of ZOO_NETWORKS found in $NNP_ZOO_CACHE (benchmarks/zoo.py's cache), each imported
    and compiled (not timed), then run by GraphModule unchecked, race-checked and by onnxruntime on one
    thread, the three interleaved R times on one input; the best CPU seconds of each give the ratios
    checked / unchecked (target <= 2) and unchecked / onnxruntime (target <= 1.5 for ResNet-50 and
    MobileNetV2, <= 2 for the zoo networks).  Every run's output equals the first one's, and the
    simulator's is compared with onnxruntime's.

numpy's BLAS gets one thread (set below, before numpy is imported): the
simulator runs on one core, and a multi-threaded BLAS on a shared machine
makes the baseline swing with the other jobs' load.  Both sides are also
reported in CPU seconds.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BLAS_THREADS = "1"
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = BLAS_THREADS   # before numpy loads its BLAS

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

from conv_kernel import conv3x3_source  # noqa: E402
from nnpasm import assemble  # noqa: E402
from nnpsim import Config, Simulator  # noqa: E402
from measuring import run_side_by_side, timed  # noqa: E402  benchmarks/measuring.py
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

PARTS = ("engine", "conv", "startup", "resnet50", "networks")
BUILT_IN = ("resnet18", "resnet50", "mobilenetv2")
ZOO_NETWORKS = ("squeezenet1_1-224-qoperator-int8-pc", "mobilenet_v3_large-224-qoperator-int8-pc",
                "efficientnet_b0-224-qoperator-int8-pc")
ORT_TARGETS = {"resnet50": 1.5, "mobilenetv2": 1.5}     # unchecked / onnxruntime; the others 2

SCALAR = """
        li      r1, {n}
.body:  addi    r2, r2, 3
        xor     r3, r3, r2
        add     r4, r4, r3
        loop    r1, .body
        halt
"""

DMAS = """
        setpi   dma.size0, 64
        li      r1, {n}
.body:  dma     ch0, dm[r0], ddr[r0]
        dma     ch1, dm[r0], ddr[r0]
        dma     ch2, dm[r0], ddr[r0]
        dma     ch3, dm[r0], ddr[r0]
        loop    r1, .body
        halt
"""

SMALL = "li r1, 10\n.l: addi r2, r2, 1\nloop r1, .l\nhalt\n"


def _timed_run(source: str) -> tuple[float, object]:
    sim = Simulator(Config(ddr_bytes=1 << 20))
    sim.load(assemble(source))
    t0 = time.perf_counter()
    sim.run(max_cycles=1 << 40)
    return time.perf_counter() - t0, sim.last_log


def _nnpsim_run(binary: str, cache_dir: str) -> float:
    """Wall time of `nnpsim run binary` in a fresh process using `cache_dir` as numba's cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "nnpsim.cli", "run", binary], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def startup(cold: bool) -> tuple[float | None, float | None]:
    """(c): first (empty cache, with --cold) and second run of `nnpsim run` on a small program."""
    with tempfile.TemporaryDirectory() as tmp:
        binary = os.path.join(tmp, "small.bin")
        assemble(SMALL, "small.s").save(binary)
        cache = os.path.join(tmp, "cache") if cold else os.environ.get("NUMBA_CACHE_DIR", "")
        first = second = None
        if cold:
            first = _nnpsim_run(binary, cache)
            print(f"nnpsim run, first run (empty cache, compiles): {first:.2f} s")
        if cache:
            second = _nnpsim_run(binary, cache)
            print(f"nnpsim run, second run (cache warm): {second:.2f} s")
        return first, second


def numpy_conv3x3(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The same conv in numpy: im2col of the padded input, then one float64 matmul."""
    _, c, h, wd = x.shape
    xp = np.pad(x[0], ((0, 0), (1, 1), (1, 1))).astype(np.float64)
    cols = np.empty((c, 3, 3, h, wd))
    for kh in range(3):
        for kw in range(3):
            cols[:, kh, kw] = xp[:, kh:kh + h, kw:kw + wd]
    y = w.reshape(w.shape[0], -1).astype(np.float64) @ cols.reshape(c * 9, h * wd)
    return y.astype(np.int32).reshape(1, w.shape[0], h, wd)


def conv_vs_numpy(repeats: int) -> tuple[float, float]:
    """(b): simulated tiled conv against numpy's im2col matmul, side by side."""
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (1, 64, 56, 56), dtype=np.int8)
    w = rng.integers(-128, 128, (64, 64, 3, 3), dtype=np.int8)
    sim = Simulator()
    sim.load(assemble(conv3x3_source(64, 64, 56, 56, rows=4), "conv3x3.s"))
    sim.write("x", x)
    sim.write("w", w)
    sim.run()  # warm-up
    t_sim, t_np = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        stats = sim.run()
        t_sim.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ref = numpy_conv3x3(x, w)
        t_np.append(time.perf_counter() - t0)
    if not np.array_equal(sim.read("y"), ref):
        raise SystemExit("conv: simulator and numpy disagree")
    ms, mn = np.median(t_sim), np.median(t_np)
    print(f"conv 1x64x56x56 * 64x64x3x3: {stats.cycles:,} cycles; simulated in {ms * 1e3:.1f} ms, "
          f"numpy im2col+matmul {mn * 1e3:.1f} ms; ratio {ms / mn:.2f} (target <= 3)")
    return ms, mn


def numpy_conv(op, x: np.ndarray) -> np.ndarray:
    """op's accumulators without bias, [O, OH * OW] float64: im2col of the padded x - x_zp, one matmul."""
    _, c, _, _ = x.shape
    o, _, kh, kw = op.weight.shape
    (sh, sw), (dh, dw), (t, l, b, r) = op.stride, op.dilation, op.padding
    oh, ow = op.out_hw
    xp = np.pad(x[0].astype(np.float64) - op.x_zp, ((0, 0), (t, b), (l, r)))
    cols = np.empty((c, kh, kw, oh, ow))
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
    return op.weight.reshape(o, -1).astype(np.float64) @ cols.reshape(c * kh * kw, oh * ow)


def _requantised(op, acc: np.ndarray) -> np.ndarray:
    """numpy's accumulators through the op's bias and requantisation (the model's own formula)."""
    from compiler import reference as sem

    v = acc.astype(np.int64).reshape((1, acc.shape[0]) + op.out_hw) + op.bias[None, :, None, None]
    ch = (1, -1, 1, 1)
    return sem.requant(v, op.multiplier.reshape(ch), op.shift.reshape(ch), op.zp_out, op.lo, op.hi)


def resnet50_vs_numpy(repeats: int, race_repeats: int) -> tuple[float, float]:
    """(d): the 53 ResNet-50 convs simulated at cycle level against numpy's im2col + float64 matmul."""
    from compiler.build import build
    from resnet50 import make_op, resnet50_convs

    rng = np.random.default_rng(50)
    layers = []
    t0 = time.perf_counter()
    for _, c, o, hw, k, stride, pad in resnet50_convs():
        op = make_op(c, o, hw, k, stride, pad, rng)
        layers.append((op, build(op), rng.integers(-128, 128, (1, c, hw, hw), dtype=np.int8)))
    compile_s = time.perf_counter() - t0
    refs = [op.reference(x) for op, _, x in layers]

    def simulate(check_races: bool = False) -> list[np.ndarray]:
        return [kernel(x, check_races=check_races) for _, kernel, x in layers]

    def numpy_pass() -> list[np.ndarray]:
        return [numpy_conv(op, x) for op, _, x in layers]

    def check(outputs: list[np.ndarray], what: str) -> None:
        for (op, _, _), y, ref in zip(layers, outputs, refs):
            if not np.array_equal(y, ref):
                raise SystemExit(f"resnet50: {what} differs from the compiler's numpy model on {op}")

    first, first_wall, _ = timed(simulate)
    check(first, "the simulator")
    check([_requantised(op, acc) for (op, _, _), acc in zip(layers, numpy_pass())], "numpy's im2col matmul")
    sims, nps = [], []
    for _ in range(repeats):
        out, wall, cpu = timed(simulate)
        check(out, "the simulator")
        sims.append((wall, cpu))
        nps.append(timed(numpy_pass)[1:])
    cycles = sum(kernel.stats.cycles for _, kernel, _ in layers)
    (sw, sc), (nw, nc) = min(sims), min(nps)
    med = sorted(a[0] / b[0] for a, b in zip(sims, nps))[len(sims) // 2]
    print(f"resnet50: {len(layers)} convs, {cycles:,} cycles, compiled in {compile_s:.1f} s (not timed); "
          f"every output equals the compiler's numpy model")
    print(f"  first pass (programs decoded, numba cache loaded): simulated in {first_wall:.2f} s")
    print(f"  best of {repeats} interleaved passes, race checking off: simulated {sw:.3f} s (CPU {sc:.3f} s), "
          f"numpy im2col + float64 matmul {nw:.3f} s (CPU {nc:.3f} s, {BLAS_THREADS} BLAS thread)")
    print(f"  ratio {sw / nw:.2f} (target <= 3); CPU {sc / nc:.2f}; median of the per-pass ratios {med:.2f}; "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    if race_repeats > 0:
        smallest = min(layers, key=lambda layer: layer[2].size)
        smallest[1](smallest[2], check_races=True)   # the checker's numba code: compiled or loaded once
        races = min(timed(simulate, True)[1:] for _ in range(race_repeats))
        print(f"  race checking on (check_races=True), best of {race_repeats}: {races[0]:.2f} s "
              f"(CPU {races[1]:.2f} s), ratio {races[0] / nw:.1f}")
    return sw, nw


def _network(name: str):
    """(model, GraphModule with its input set, the input) of a built-in or zoo network; None if not cached."""
    import onnx

    import compiler
    from compiler import models

    if name in BUILT_IN:
        model = models.build(name, "qoperator")
    else:
        path = Path(os.environ.get("NNP_ZOO_CACHE") or Path.home() / ".cache" / "nnp" / "zoo") / f"{name}.onnx"
        if not path.exists():
            print(f"{name}: not in the zoo cache ({path}); skipped")
            return None
        model = onnx.load(path)
    lib = compiler.build(compiler.from_onnx(model))
    m = compiler.GraphModule(lib)
    x = np.random.default_rng(1).standard_normal(tuple(lib.meta["inputs"][0]["shape"])).astype(np.float32)
    m.set_input(0, x)
    return model, m, x


def network_row(name: str, repeats: int) -> list[str] | None:
    """(e): one network's best CPU seconds unchecked, checked and on onnxruntime, interleaved; a table row."""
    from compiler.agreement import agreement, onnxruntime_session

    built = _network(name)
    if built is None:
        return None
    model, m, x = built
    sess = onnxruntime_session(model, threads=1)
    feeds = {sess.get_inputs()[0].name: x}
    (theirs,) = sess.run(None, feeds)
    runs = run_side_by_side(m, sess, feeds, repeats, name)
    exact = agreement(m.get_output(0), theirs, m.meta["outputs"][0]["scale"]).equal
    (uc, uw), (cc, cw), (oc, ow) = runs.unchecked, runs.checked, runs.onnxruntime
    goal = ORT_TARGETS.get(name, 2)
    print(f"{name}: {m.stats.commands:,} commands, {m.stats.cycles:,} cycles; best of {repeats} CPU (wall): "
          f"unchecked {uc * 1e3:.0f} ms ({uw * 1e3:.0f}), checked {cc * 1e3:.0f} ms ({cw * 1e3:.0f}), "
          f"onnxruntime {oc * 1e3:.0f} ms ({ow * 1e3:.0f}); checked / unchecked {cc / uc:.2f}, "
          f"unchecked / onnxruntime {uc / oc:.2f}; bit-exact with onnxruntime: {exact}", flush=True)
    return [name, f"{m.stats.commands:,}", f"{uc * 1e3:.0f}", f"{cc * 1e3:.0f}", f"{oc * 1e3:.0f}",
            f"{cc / uc:.2f} (goal 2)", f"{uc / oc:.2f} (goal {goal:g})", "yes" if exact else "no"]


def networks(repeats: int) -> list[list[str]]:
    """(e): the rows of every network that could be built."""
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    return [r for r in (network_row(name, repeats) for name in BUILT_IN + ZOO_NETWORKS) if r is not None]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iterations", type=int, default=5_000_000)
    ap.add_argument("--commands", type=int, default=100_000)
    ap.add_argument("--repeats", type=int, default=7, help="interleaved repeats of (b) and (d)")
    ap.add_argument("--race-repeats", type=int, default=1, help="passes of (d) with race checking on")
    ap.add_argument("--cold", action="store_true", help="also time a first compile (empty cache)")
    ap.add_argument("--only", default=",".join(PARTS), help=f"comma-separated parts of {PARTS}")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args()
    parts = set(args.only.split(","))
    if parts - set(PARTS):
        ap.error(f"--only: unknown part(s) {sorted(parts - set(PARTS))}; choose from {PARTS}")

    rows = []
    if "engine" in parts:
        _timed_run(SCALAR.format(n=10))  # warm-up (compile or load from cache)
        dt, log = _timed_run(SCALAR.format(n=args.iterations))
        print(f"scalar loop: {log.instructions:,} instructions, {log.cycles:,} cycles in {dt:.3f} s "
              f"= {log.instructions / dt / 1e6:.1f} M instructions/s")
        rows.append(["(a) CU instructions per second, scalar loop", f"{log.instructions / dt / 1e6:.1f} M/s", ">= 5 M/s"])
        dt, log = _timed_run(DMAS.format(n=args.commands // 4))
        print(f"dma stream: {log.n_commands:,} commands, {log.cycles:,} cycles in {dt:.3f} s "
              f"= {log.n_commands / dt / 1e3:.0f} k commands/s")
    if "conv" in parts:
        ms, mn = conv_vs_numpy(args.repeats)
        rows.append(["(b) tiled conv simulated / numpy im2col + float64 matmul",
                     f"{ms / mn:.2f} ({ms * 1e3:.1f} ms against {mn * 1e3:.1f} ms)", "<= 3"])
    if "startup" in parts:
        first, second = startup(args.cold)
        rows += [["(c) `nnpsim run`, second run", f"{second:.2f} s", "< 2 s"]] if second is not None else []
        rows += [["(c) first run on an empty numba cache", f"{first:.1f} s", "-"]] if first is not None else []
    if "resnet50" in parts:
        sw, nw = resnet50_vs_numpy(args.repeats, args.race_repeats)
        rows.append(["53 convs simulated / numpy im2col + float64 matmul, best passes, wall",
                     f"{sw / nw:.2f} ({sw:.3f} s against {nw:.3f} s)", "<= 3"])
    if "networks" in parts:
        net_rows = networks(args.repeats)
        if args.write_docs and parts == {"networks"}:
            write_table("simulator-networks", ["network", "commands", "unchecked, CPU ms", "checked, CPU ms",
                                               "onnxruntime 1 thread, CPU ms", "checked / unchecked",
                                               "unchecked / onnxruntime", "bit-exact with onnxruntime"], net_rows,
                        "race-checked runs at most 2x unchecked ones on every network; unchecked runs at most "
                        "1.5x onnxruntime's one-thread CPU time on ResNet-50 and MobileNetV2, 2x on the zoo "
                        "networks.")
            return
    if args.write_docs:
        if parts == {"resnet50"}:
            write_table("simulator-resnet50", ["figure", "measured", "goal"], rows,
                        "simulate ResNet-50's convs in at most 3x numpy's time.")
        else:
            write_table("simulator", ["figure", "measured", "goal"], rows,
                        "(a) at least 5 M instructions/s, (b) at most 3x numpy, (c) under 2 s once numba's cache is "
                        "warm.")


if __name__ == "__main__":
    main()
