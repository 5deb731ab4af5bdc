"""Whole networks (ResNet-18, ResNet-50, MobileNetV2) from ONNX to one program, against onnxruntime.

    python benchmarks/models.py [--models resnet18,resnet50,mobilenetv2] [--size 224]
                                [--fmt qoperator] [--qdq resnet18,mobilenetv2] [--config HW.toml]
                                [--fuse both|on|off] [--check-groups] [--layers]

For each model: build and quantise it with onnxruntime (compiler.models),
import it, compile the whole graph into one program, run it on the simulator on
a seeded random float input (race checking off; the first run, which carries
one-time costs, then the median of a few more), and run onnxruntime's CPU
provider on the same input in the same process (one thread, median of several
repeats after a warm-up).  Reports the times of each step, total cycles, the sum
of the layers' roofline bounds and the ratio, the compiler's predicted cycles
and their error, the DDR arena against one buffer per tensor, and how the
output compares with onnxruntime's: bit for bit, the largest difference in
output steps, the top-1.  Every model in --fmt runs; the --qdq models also run
in the QDQ form.  With --fuse both (the default) every model is compiled twice,
fused (compiler.graph_fusion) and with fuse=False (one kernel per node), and the
two columns stand side by side with their DDR bytes and on-chip high-water marks;
the fused output must equal the unfused one bit for bit.  --check-groups also
compiles every fused kernel and each of its parts alone, runs them on the
simulator (random int8 inputs) and reports both: no fused kernel may be slower.
--layers prints every layer's cycles over its roofline bound three ways: as the
network run attributes them (from the layer's first command's start to its last
command's end, which charges a layer for its predecessor's stores still
draining while its own early loads wait), its exclusive share of the run (from
the end of every layer before it, exclusive_cycles: the spans no longer overlap
and sum to at most the run's cycles), and compiled and simulated alone, with
the geometric means of all layers, the depthwise convs and the pooling layers.

Targets (the exit status is 1 if one is missed, with a line saying which):
every QOperator model bit-exact with onnxruntime; ResNet-50 compiled in under
30 s (one NU; benchmarks/compile_time.py times both networks on one and two NUs); fused bit-exact with unfused; against fuse=False, MobileNetV2 with at least
40% fewer DDR bytes and 10% fewer cycles, ResNet-50 with 25% and 5% (FUSION_TARGETS).  QDQ models: the same top-1 as onnxruntime (reported, not enforced:
onnxruntime runs part of a QDQ graph in float).
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import compiler  # noqa: E402
from compiler import models  # noqa: E402
from compiler.agreement import Agreement, agreement, onnxruntime_session  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

COMPILE_TARGET_S = 30.0   # ResNet-50 on one NU (issue 14, part 7)
FUSION_TARGETS = {"mobilenetv2": (0.40, 0.10), "resnet50": (0.25, 0.05)}   # fewer DDR bytes, fewer cycles
SEED = 1


@dataclass
class Result:
    """Everything measured for one model in one format."""

    name: str
    fmt: str
    fuse: bool
    build_s: float
    import_s: float
    compile_s: float
    layers: int
    sim_first_s: float          # wall seconds of the first run
    sim_wall_s: float           # medians over the repeats after it
    sim_cpu_s: float
    ort_wall_s: float           # medians over the repeats
    ort_cpu_s: float
    cycles: int
    time_us: float
    bound: int                  # sum of the layers' roofline bounds
    predicted: int
    arena: int
    naive: int
    agree: Agreement
    ddr_bytes: int
    onchip: dict
    output: np.ndarray
    worst: list[tuple[str, str, int, int]] = field(default_factory=list)   # (layer, ops, cycles, bound)
    per_layer: list[tuple[str, str, int, int, int, int]] = field(default_factory=list)
    """Every layer in run order: name, ops, cycles (its first command's start to its last's end), roofline
    bound, start, end."""
    kinds: dict[str, str] = field(default_factory=dict)   # layer name -> depthwise / pooling / other
    alone: dict[str, tuple[int, int]] = field(default_factory=dict)   # layer -> (cycles compiled alone, bound)


def timed(fn, *args, **kwargs):
    """(fn's result, wall seconds, process CPU seconds)."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w, time.process_time() - c


def time_onnxruntime(model, x: np.ndarray, repeats: int) -> tuple[np.ndarray, float, float]:
    """onnxruntime's output and its median wall and CPU seconds per run, one thread, after one warm-up run."""
    sess = onnxruntime_session(model, threads=1)
    feeds = {sess.get_inputs()[0].name: x}
    (y,) = sess.run(None, feeds)      # the first run allocates and plans: not timed
    walls, cpus = [], []
    for _ in range(repeats):
        (again,), w, c = timed(sess.run, None, feeds)
        if not np.array_equal(again, y):
            raise AssertionError("onnxruntime gave two different outputs for the same input")
        walls.append(w)
        cpus.append(c)
    return y, statistics.median(walls), statistics.median(cpus)


def time_simulator(m, repeats: int):
    """The first run's Stats and wall seconds, then the median wall and CPU seconds of `repeats` more."""
    stats, first, _ = timed(m.run, check_races=False)
    y = m.get_output(0, quantized=True)
    walls, cpus = [], []
    for _ in range(repeats):
        _, w, c = timed(m.run, check_races=False)
        if not np.array_equal(m.get_output(0, quantized=True), y):
            raise AssertionError("the simulator gave two different outputs for the same input")
        walls.append(w)
        cpus.append(c)
    return stats, first, statistics.median(walls or [first]), statistics.median(cpus or [first])


def worst_layers(m, n: int) -> list[tuple[str, str, int, int]]:
    """The n layers furthest from their roofline bound, with at least 1% of the run's cycles."""
    floor = 0.01 * m.stats.cycles    # ignore tiny layers whose fixed costs dwarf a bound of a few cycles
    stats = [s for s in m.layer_stats() if s.bound_cycles and s.cycles >= floor]
    stats.sort(key=lambda s: s.cycles / s.bound_cycles, reverse=True)
    return [(s.name, s.ops, s.cycles, s.bound_cycles) for s in stats[:n]]


def layer_kind(node) -> str:
    """depthwise (a conv2d with one input channel per group), pooling, or other."""
    op = node.op
    if op.kind == "conv2d" and op.groups > 1 and op.groups == op.inputs[0].shape[1]:
        return "depthwise"
    return "pooling" if "pool" in op.kind else "other"


def measure(name: str, fmt: str, size: int, cfg, repeats: int, sim_repeats: int, fuses: list[bool],
            worst: int = 3, alone: bool = False) -> list[Result]:
    """Build, import, compile (once per fuse setting), simulate and compare one model: table columns
    (with `alone`, also every layer compiled and simulated by itself)."""
    model, build_s, _ = timed(models.build, name, fmt, size=size)
    graph, import_s, _ = timed(compiler.from_onnx, model)
    out, theirs = [], None
    for fuse in fuses:
        lib, compile_s, _ = timed(compiler.build, graph, config=cfg, fuse=fuse)
        m = compiler.GraphModule(lib)
        shape = tuple(lib.meta["inputs"][0]["shape"])
        x = np.random.default_rng(SEED).standard_normal(shape).astype(np.float32)
        m.set_input(0, x)
        stats, sim_first, sim_wall, sim_cpu = time_simulator(m, sim_repeats)
        if theirs is None:
            theirs, ort_wall, ort_cpu = time_onnxruntime(model, x, repeats)
        agree = agreement(m.get_output(0), theirs, lib.meta["outputs"][0]["scale"])
        arena, bound = lib.meta["arena"], sum(layer["bound_cycles"] for layer in lib.layers)
        out.append(Result(name, fmt, fuse, build_s, import_s, compile_s, len(lib.layers), sim_first, sim_wall,
                          sim_cpu, ort_wall, ort_cpu, stats.cycles, stats.time_us, bound, lib.predicted_cycles,
                          arena["bytes"], arena["naive_bytes"], agree, stats.ddr_bytes,
                          lib.meta["onchip_peak"], m.get_output(0, quantized=True), worst_layers(m, worst),
                          [(s.name, s.ops, s.cycles, s.bound_cycles, s.start, s.end) for s in m.layer_stats()],
                          {node.name: layer_kind(node) for node in graph.nodes},
                          layers_alone(graph, cfg, fuse) if alone else {}))
    return out


def layers_alone(graph, cfg, fuse: bool) -> dict[str, tuple[int, int]]:
    """Every layer (kernel) of the network compiled and simulated by itself, as build(graph) compiles
    it: layer -> (cycles, roofline bound).  Unlike the network's attribution (from the CU's arrival at
    a layer's code to its last command's end), a layer's time here owes nothing to its neighbours:
    no store of the previous layer still draining, no load of the next one already started."""
    from compiler.roofline import bound_cycles
    from cost_model import kernels_alone

    return {g.name: (simulated, bound_cycles(g.ops, cfg)) for g, _, simulated in kernels_alone(graph, cfg, fuse)}


def warm_up(cfg) -> None:
    """Run the tiny model once so that loading the simulator's jit cache lands on no model's time."""
    lib = compiler.build(compiler.from_onnx(models.tiny("qoperator")), config=cfg)
    m = compiler.GraphModule(lib)
    m.set_input(0, np.zeros(tuple(lib.meta["inputs"][0]["shape"]), np.float32))
    m.run()


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f}"


ROWS = [
    ("build + quantise (s)", lambda r: f"{r.build_s:.1f}"),
    ("import (s)", lambda r: f"{r.import_s:.2f}"),
    ("compile (s)", lambda r: f"{r.compile_s:.1f}"),
    ("layers", lambda r: f"{r.layers}"),
    ("simulate, first run, wall (s)", lambda r: f"{r.sim_first_s:.2f}"),
    ("simulate, wall (s)", lambda r: f"{r.sim_wall_s:.2f}"),
    ("simulate, CPU (s)", lambda r: f"{r.sim_cpu_s:.2f}"),
    ("onnxruntime 1 thread, wall (ms)", lambda r: f"{1e3 * r.ort_wall_s:.1f}"),
    ("onnxruntime 1 thread, CPU (ms)", lambda r: f"{1e3 * r.ort_cpu_s:.1f}"),
    ("simulator / onnxruntime, CPU", lambda r: f"{r.sim_cpu_s / r.ort_cpu_s:.0f}x"),
    ("cycles", lambda r: f"{r.cycles:,}"),
    ("DDR bytes moved", lambda r: f"{r.ddr_bytes:,}"),
    ("DM high-water (KiB)", lambda r: f"{r.onchip.get('dm', 0) / 1024:.0f}"),
    ("local buffers high-water (KiB)", lambda r: "/".join(
        f"{max((v for k, v in r.onchip.items() if k.startswith(s)), default=0) / 1024:.0f}"
        for s in ("ibuf", "wbuf", "abuf", "vbuf"))),
    ("simulated time (ms)", lambda r: f"{r.time_us / 1e3:.2f}"),
    ("sum of layer bounds", lambda r: f"{r.bound:,}"),
    ("cycles / bounds", lambda r: f"{r.cycles / r.bound:.3f}"),
    ("predicted cycles", lambda r: f"{r.predicted:,}"),
    ("prediction error", lambda r: f"{100 * (r.predicted - r.cycles) / r.cycles:+.1f}%"),
    ("DDR arena (MiB)", lambda r: _mib(r.arena)),
    ("one buffer per tensor (MiB)", lambda r: _mib(r.naive)),
    ("arena saving", lambda r: f"{100 * (1 - r.arena / r.naive):.0f}%"),
    ("bit-exact with onnxruntime", lambda r: "yes" if r.agree.equal else "no"),
    ("largest difference (steps)", lambda r: f"{r.agree.steps}"),
    ("top-1 agrees", lambda r: "yes" if r.agree.top1 else "no"),
    ("target", lambda r: "bit-exact" if r.fmt == "qoperator" else "same top-1"),
]


def format_table(results: list[Result]) -> str:
    """One column per model and format, one row per figure."""
    head = [""] + [f"{r.name} {r.fmt}{'' if r.fuse else ' fuse=False'}" for r in results]
    body = [[label] + [cell(r) for r in results] for label, cell in ROWS]
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(x.ljust(w) if i == 0 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     for row in [head] + body)


def format_worst(results: list[Result]) -> str:
    """Per model, the layers furthest from their roofline."""
    lines = ["layers furthest from their roofline (of those with >= 1% of the cycles):"]
    for r in results:
        worst = ", ".join(f"{n} ({ops}) {c:,}/{b:,} = {c / b:.1f}" for n, ops, c, b in r.worst)
        lines.append(f"  {r.name} {r.fmt}: {worst}")
    return "\n".join(lines)


def _geomean(xs: list[float]) -> float:
    return float(np.exp(np.mean(np.log(xs)))) if xs else float("nan")


def exclusive_cycles(per_layer: list[tuple]) -> list[int]:
    """Each layer's cycles from the later of its own start and the end of every layer before it, to its
    end (0 if it ends sooner): the spans no longer overlap, so a layer is charged neither for its
    predecessor's stores still draining nor for its own loads issued early, and they sum to at most
    the run's cycles (the rest: gaps where no command runs)."""
    out, done = [], 0
    for *_, start, end in per_layer:
        out.append(max(0, end - max(start, done)))
        done = max(done, end)
    return out


WAYS = ("network", "exclusive", "alone")


def format_layers(results: list[Result]) -> str:
    """Per model: every layer's cycles / roofline bound, in the network (attributed from its first
    command's start to its last command's end), exclusively (exclusive_cycles) and compiled alone,
    then the geometric means overall, of the depthwise convs and of the pooling layers, and the
    worst layer, of each."""
    lines = []
    for r in results:
        lines.append(f"{r.name} {r.fmt}{'' if r.fuse else ', fuse=False'}, every layer (cycles / roofline bound; "
                     f"in the network, its exclusive share of the network's cycles, and compiled alone):")
        lines.append(f"  {'layer':<32} {'ops':<30} {'kind':<9} {'bound':>9} {'network':>9} {'ratio':>6} "
                     f"{'excl.':>9} {'ratio':>6} {'alone':>9} {'ratio':>6}")
        ratios: dict[str, dict[str, list[float]]] = {w: {"all": [], "depthwise": [], "pooling": []}
                                                    for w in WAYS}
        cycles = {w: {"all": 0, "depthwise": 0, "pooling": 0} for w in WAYS}
        worst: dict[str, tuple[float, str]] = {}
        for (layer, ops, c, b, *_), e in zip(r.per_layer, exclusive_cycles(r.per_layer)):
            kind = r.kinds.get(layer, "other")
            got = {"network": c, "exclusive": e}
            if layer in r.alone:
                got["alone"] = r.alone[layer][0]
            ratio = {w: x / b if b else float("nan") for w, x in got.items()}
            alone = f"{got['alone']:>9,} {ratio['alone']:6.2f}" if "alone" in got else ""
            lines.append(f"  {layer[:32]:<32} {ops[:30]:<30} {kind:<9} {b:>9,} {c:>9,} {ratio['network']:6.2f} "
                         f"{e:>9,} {ratio['exclusive']:6.2f} {alone}")
            if not b:
                continue
            for w, x in got.items():
                if not x:       # a layer wholly overlapped by the ones before it: no ratio to take a log of
                    continue
                worst[w] = max(worst.get(w, (0.0, "")), (ratio[w], layer))
                for key in ("all", kind):
                    if key in ratios[w]:
                        ratios[w][key].append(ratio[w])
                        cycles[w][key] += x
        for w in WAYS:
            for key, xs in ratios[w].items():
                if not xs:
                    continue
                share = 100 * cycles[w][key] / max(1, cycles[w]["all"])
                lines.append(f"  {w}: geometric mean, {key} ({len(xs)} layers, {share:.0f}% of the layers' "
                             f"cycles): {_geomean(xs):.3f}, worst {max(xs):.2f}")
            if w in worst:
                lines.append(f"  {w}: worst layer {worst[w][1]} at {worst[w][0]:.2f}")
    return "\n".join(lines)


def pairs(results: list[Result]) -> list[tuple[Result, Result]]:
    """(fused, fuse=False) results of the same model and format."""
    apart = {(r.name, r.fmt): r for r in results if not r.fuse}
    return [(r, apart[(r.name, r.fmt)]) for r in results if r.fuse and (r.name, r.fmt) in apart]


def check_groups(name: str, fmt: str, size: int, cfg) -> tuple[list[str], list[str]]:
    """Every fused kernel of the model against its parts, each compiled and simulated alone: (lines, misses)."""
    from compiler.network.build import plan_kernels

    graph = compiler.from_onnx(models.build(name, fmt, size=size))
    groups, _ = plan_kernels(graph, cfg)
    rng = np.random.default_rng(SEED)
    lines, failed = [f"{name} {fmt}: fused kernels against their parts, each simulated alone:"], []
    for g in (g for g in groups if g.parts):
        whole = _simulated(g.ops, cfg, rng)
        parts = [_simulated(p.ops, cfg, rng) for p in g.parts]
        lines.append(f"  {g.name} ({' + '.join(p.name for p in g.parts)}): fused {whole:,}, parts "
                     f"{' + '.join(f'{c:,}' for c in parts)} = {sum(parts):,} ({100 * (1 - whole / sum(parts)):+.1f}%)")
        if whole > sum(parts):
            failed.append(f"{name} {fmt}: fused kernel {g.name} takes {whole:,} cycles, its parts {sum(parts):,}")
    return lines, failed


def _simulated(ops, cfg, rng) -> int:
    """Cycles of a chain compiled alone and run on random int8 inputs."""
    k = compiler.build(*ops, config=cfg)
    k(*[rng.integers(-128, 128, b.shape).astype(np.int8) for b in k.ir.inputs])
    return k.stats.cycles


def format_fusion(results: list[Result]) -> str:
    """Fused against fuse=False: fewer cycles, fewer DDR bytes, same output."""
    lines = ["fused against fuse=False (one kernel per node):"]
    for f, u in pairs(results):
        lines.append(f"  {f.name} {f.fmt}: {f.layers} kernels for {u.layers}; cycles {f.cycles:,} vs {u.cycles:,} "
                     f"({100 * (1 - f.cycles / u.cycles):.1f}% fewer); DDR bytes {f.ddr_bytes:,} vs "
                     f"{u.ddr_bytes:,} ({100 * (1 - f.ddr_bytes / u.ddr_bytes):.1f}% fewer); output "
                     f"{'bit-exact' if np.array_equal(f.output, u.output) else 'DIFFERS'}")
    return "\n".join(lines)


def misses(results: list[Result]) -> tuple[list[str], list[str]]:
    """(missed targets, which fail the run; QDQ top-1 differences, which are only reported)."""
    failed, noted = [], []
    for f, u in pairs(results):
        if not np.array_equal(f.output, u.output):
            failed.append(f"{f.name} {f.fmt}: the fused network's output differs from the unfused one")
        if f.name in FUSION_TARGETS:
            ddr, cyc = FUSION_TARGETS[f.name]
            if f.ddr_bytes > (1 - ddr) * u.ddr_bytes or f.cycles > (1 - cyc) * u.cycles:
                failed.append(f"{f.name} {f.fmt} fused: {100 * (1 - f.ddr_bytes / u.ddr_bytes):.1f}% fewer DDR "
                              f"bytes and {100 * (1 - f.cycles / u.cycles):.1f}% fewer cycles than fuse=False "
                              f"(target {100 * ddr:.0f}% and {100 * cyc:.0f}%)")
    for r in results:
        if r.fmt == "qoperator" and not r.agree.equal:
            failed.append(f"{r.name} qoperator is not bit-exact with onnxruntime "
                          f"(largest difference {r.agree.steps} step(s))")
        if r.name == "resnet50" and r.compile_s >= COMPILE_TARGET_S:
            failed.append(f"resnet50 {r.fmt} took {r.compile_s:.1f} s to compile "
                          f"(target < {COMPILE_TARGET_S:.0f} s)")
        if r.fmt == "qdq" and not r.agree.top1:
            noted.append(f"{r.name} qdq: top-1 differs from onnxruntime's")
    return failed, noted


def write_docs(results: list[Result], layers: bool) -> None:
    """The results page's table of this run (docs/performance.md): the networks fused against fuse=False, or
    with --layers MobileNetV2's layers compiled alone."""

    if not layers:
        pct = lambda a, b: f"{100 * (1 - a / b):.1f}%"  # noqa: E731
        write_table("networks", ["network", "kernels fused / one per node", "cycles fused", "cycles fuse=False",
                                 "fewer cycles fused", "DDR bytes fused", "fewer DDR bytes fused", "predicted, fused",
                                 "bit-exact with onnxruntime"],
                    [[f.name, f"{f.layers} / {u.layers}", f"{f.cycles:,}", f"{u.cycles:,}", pct(f.cycles, u.cycles),
                      f"{f.ddr_bytes:,}", pct(f.ddr_bytes, u.ddr_bytes), f"{f.predicted / f.cycles - 1:+.1%}",
                      "yes" if f.agree.equal else "no"] for f, u in pairs(results)],
                    "QOperator outputs bit-exact with onnxruntime; fused against fuse=False, ResNet-50 at least 5% "
                    "fewer cycles and 25% fewer DDR bytes, MobileNetV2 10% and 40%.")
        return
    r = next(r for r in results if not r.fuse)
    alone = {layer: c / b for layer, (c, b) in r.alone.items() if b}
    excl = {layer: e / b for (layer, _, _, b, *_), e in zip(r.per_layer, exclusive_cycles(r.per_layer)) if b and e}
    dw = [x for layer, x in alone.items() if r.kinds.get(layer) == "depthwise"]
    worst = lambda d: "{1:.2f} ({0})".format(*max(d.items(), key=lambda kv: kv[1]))  # noqa: E731
    write_table("mobilenetv2-layers", ["fuse=False, cycles / roofline bound", "each layer alone",
                                       "in the network, exclusive", "goal"],
                [[f"geometric mean, {len(alone)} layers", f"{_geomean(list(alone.values())):.3f}",
                  f"{_geomean(list(excl.values())):.3f}", "<= 1.3"],
                 [f"geometric mean, the {len(dw)} depthwise convs", f"{_geomean(dw):.3f}", "-", "<= 1.5"],
                 ["worst layer", worst(alone), worst(excl), "<= 2"]],
                "MobileNetV2's layers, one kernel per node: a geometric mean at most 1.3, the depthwise convs at "
                "most 1.5, no layer over 2.")


def _names(text: str, known: tuple[str, ...], what: str) -> list[str]:
    out = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in out if t not in known]
    if bad:
        raise SystemExit(f"{what}: unknown {', '.join(bad)} (known: {', '.join(known)})")
    return out


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--models", default=",".join(models.names()), help="comma-separated networks")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--fmt", default="qoperator", help="comma-separated formats every model runs in")
    ap.add_argument("--qdq", default="resnet18,mobilenetv2",
                    help="networks (of --models) also run in the QDQ form; '' for none")
    ap.add_argument("--repeats", type=int, default=10, help="timed onnxruntime runs per model")
    ap.add_argument("--sim-repeats", type=int, default=3, help="timed simulator runs after the first")
    ap.add_argument("--layers", action="store_true",
                    help="also print every layer's cycles / bound, in the network and compiled alone, and the "
                         "geometric means (all, depthwise, pooling)")
    ap.add_argument("--fuse", default="both", choices=["both", "on", "off"],
                    help="compile fused, with fuse=False (one kernel per node), or both side by side")
    ap.add_argument("--check-groups", action="store_true",
                    help="simulate every fused kernel and its parts alone (QOperator models; slow)")
    args = ap.parse_args()
    names = _names(args.models, models.names(), "--models")
    fmts = _names(args.fmt, models.FORMATS, "--fmt")
    qdq = _names(args.qdq, models.names(), "--qdq")
    runs = [(n, f) for f in fmts for n in names]
    runs += [(n, "qdq") for n in names if n in qdq and (n, "qdq") not in runs]
    cfg = load_config(args.config)
    warm_up(cfg)
    results = []
    for name, fmt in runs:
        print(f"{name} {fmt} at {args.size}x{args.size} ...", file=sys.stderr, flush=True)
        results += measure(name, fmt, args.size, cfg, args.repeats, args.sim_repeats,
                           {"both": [True, False], "on": [True], "off": [False]}[args.fuse], alone=args.layers)
    print(format_table(results))
    print(format_worst(results))
    if pairs(results):
        print(format_fusion(results))
    if args.layers:
        print(format_layers(results))
    failed, noted = misses(results)
    if args.check_groups:
        for name in names:
            lines, missed = check_groups(name, "qoperator", args.size, cfg)
            print("\n".join(lines))
            failed += missed
    for line in noted:
        print(f"note: {line}")
    for line in failed:
        print(f"target missed: {line}", file=sys.stderr)
    if args.write_docs:
        write_docs(results, args.layers)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
