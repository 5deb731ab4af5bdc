"""The cost of dynamism: one dynamic binary against a static kernel compiled for each shape.

Conv2d layers, a depthwise conv, max, average and sum pooling, add, relu, fused chains (conv -> relu ->
max pool -> conv, two convs, an inverted residual block) and a small ONNX network (against the static
network, fused and pipelined, per shape).

For five shapes across the range, the dynamic kernel's simulated cycles and the static kernel's
(compiler.build for that exact shape, the tiling search's best), measured side by side in this
run, and the binary sizes.  Targets (issue 16): at most 5% more cycles as a geometric mean, at
most 15% in the worst case.  Run:

    python benchmarks/dynamic.py [--quick] [--conv-only] [--chains-only] [--pools-only] [--network-only]
    python benchmarks/dynamic.py --network-layers     # the network's cycles layer by layer
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import numpy as np

import compiler
from compiler import Dim, ops
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

GEOMEAN_TARGET, WORST_TARGET = 1.05, 1.15


def layer(rng, c: int, o: int, lo: int, hi: int, n=(1, 1)):
    """A 3x3 pad-1 conv c -> o channels over h, w in [lo, hi] and its static form for one shape."""
    w = rng.integers(-20, 21, size=(o, c, 3, 3))
    q = dict(bias=rng.integers(-5000, 5000, size=o), padding=1, x_zp=-3,
             multiplier=rng.integers(2**29, 2**31, size=o), shift=rng.integers(20, 24, size=o), zp_out=4)
    dyn = ops.conv2d((Dim("n", *n), c, Dim("h", lo, hi), Dim("w", lo, hi)), w, **q)
    return dyn, lambda shape: ops.conv2d(shape, w, **q)


def binary_bytes(kernel) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "k.bin")
        kernel.save(path)
        return path.stat().st_size


def measure(c: int, o: int, sizes: list[int], lo: int, hi: int, seed: int = 0) -> list[tuple]:
    rng = np.random.default_rng(seed)
    dyn_op, static_op = layer(rng, c, o, lo, hi)
    dyn = compiler.build(dyn_op)
    dyn_bytes = binary_bytes(dyn)
    rows = []
    for s in sizes:
        x = rng.integers(-128, 128, size=(1, c, s, s)).astype(np.int8)
        y = dyn(x)
        dyn_cycles = dyn.stats.cycles
        st_op = static_op(x.shape)
        static = compiler.build(st_op)
        ys = static(x)
        assert np.array_equal(y, ys) and np.array_equal(y, st_op.reference(x)), "results differ"
        rows.append((s, dyn_cycles, static.stats.cycles, dyn_bytes, binary_bytes(static), dyn.rows_per_tile[s]))
    return rows


def measure_ops(dyn_ops: tuple, static_ops, sizes: list[int], c: int, inputs: int = 1, seed: int = 0) -> list[tuple]:
    """Cycles of one dynamic binary (an op or a chain) and of build(*static_ops(shape)) per size."""
    rng = np.random.default_rng(seed)
    dyn = compiler.build(*dyn_ops)
    dyn_bytes = binary_bytes(dyn)
    rows = []
    for s in sizes:
        xs = [rng.integers(-128, 128, size=(1, c, s, s)).astype(np.int8) for _ in range(inputs)]
        y = dyn(*xs)
        static = compiler.build(*static_ops(xs[0].shape))
        ys = static(*xs)
        assert np.array_equal(y, ys) and np.array_equal(y, dyn.op.reference(*xs)), "results differ"
        rows.append((s, dyn.stats.cycles, static.stats.cycles, dyn_bytes, binary_bytes(static), "-"))
    return rows


def network_graph(lo: int, hi: int):
    """The benchmark's small ONNX CNN (QOperator) imported with height and width in [lo, hi]: a DynamicGraph."""
    from compiler import models
    from compiler.models import Net

    net = Net("bench", (1, 3, 16, 16), 1)
    a = net.conv(net.input, 16, 3, 1)
    b = net.conv(net.conv(a, 16, 3, 1), 16, 3, 1, act=None)
    net.output(net.conv(net.max_pool(net.add(a, b, act="relu"), 2, 2, 0), 32, 3, 2))
    model = models.quantize(net.model(), "qoperator", seed=1, samples=3)
    for vi in (model.graph.input[0], model.graph.output[0]):
        vi.type.tensor_type.shape.dim[2].dim_param = "height"
        vi.type.tensor_type.shape.dim[3].dim_param = "width"
    del model.graph.value_info[:]
    return compiler.from_onnx(model, dims={"height": (lo, hi), "width": (lo, hi)})


def measure_network(sizes: list[int], lo: int, hi: int, seed: int = 0) -> list[tuple]:
    """A small ONNX CNN with symbolic height and width: one dynamic binary against the static network
    (build(graph), fused and pipelined) per size."""
    dg = network_graph(lo, hi)
    lib = compiler.build(dg)
    dyn_bytes = binary_bytes(lib)
    rng = np.random.default_rng(seed)
    rows = []
    for s in sizes:
        x = rng.integers(-128, 128, size=(1, 3, s, s)).astype(np.int8)
        m = compiler.GraphModule(lib)
        m.set_input(0, x)
        m.run()
        static = compiler.build(dg.at({"height": s, "width": s}))
        ms = compiler.GraphModule(static)
        ms.set_input(0, x)
        ms.run()
        y = m.get_output(0, quantized=True)
        assert np.array_equal(y, ms.get_output(0, quantized=True)), "results differ"
        rows.append((s, m.stats.cycles, ms.stats.cycles, dyn_bytes, binary_bytes(static), "-"))
    return rows


def layer_cycles(lib, log) -> list[int]:
    """Cycles of each layer of a network's run: from the previous layer's last command's end to its own
    (its commands are those issued from its code, between its label and the next layer's)."""
    symbols = lib.program.symbols
    labels = sorted(symbols[layer["label"]].value for layer in lib.layers)
    pcs, ends = np.asarray(log.cmd_pc), np.asarray(log.cmd_end)
    out, prev = [], 0
    for k, start in enumerate(labels):
        mine = (pcs >= start) & (pcs < (labels[k + 1] if k + 1 < len(labels) else np.inf))
        end = int(ends[mine].max()) if mine.any() else prev
        out.append(end - prev)
        prev = end
    return out


def network_layers(sizes: list[int], lo: int, hi: int, seed: int = 0) -> None:
    """Print each layer's cycles of the dynamic network and of the static one per size."""
    dg = network_graph(lo, hi)
    lib = compiler.build(dg)
    rng = np.random.default_rng(seed)
    for s in sizes:
        x = rng.integers(-128, 128, size=(1, 3, s, s)).astype(np.int8)
        print(f"\nH = W = {s}")
        for name, built in (("dynamic", lib), ("static", compiler.build(dg.at({"height": s, "width": s})))):
            m = compiler.GraphModule(built)
            m.set_input(0, x)
            m.run()
            parts = ", ".join(f"{layer['ops']} {c:,}" for layer, c in zip(built.layers,
                                                                        layer_cycles(built, m.sim.last_log)))
            print(f"  {name} {m.stats.cycles:,}: {parts}")


def other_cases(rng) -> list[tuple]:
    """(title, dynamic ops, static ops for a shape, channels, inputs, sizes) of the pool, elementwise and
    chain measurements."""
    n, h, w = Dim("n", 1, 1), Dim("h", 16, 64), Dim("w", 16, 64)
    sizes = [16, 28, 40, 52, 64]
    add_q = dict(za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1)
    favg_q = dict(x_zp=-3, scale_x=np.float32(0.05), scale_out=np.float32(0.04), zp_out=2)
    gavg_q = dict(x_zp=-3, scale_x=np.float32(0.05), scale_out=np.float32(0.02), zp_out=2)
    wt = rng.integers(-20, 21, size=(16, 16, 3, 3))
    conv_q = dict(padding=1, multiplier=rng.integers(2**29, 2**31, size=16), shift=np.full(16, 21))
    chain = lambda shape: (ops.conv2d(shape, wt, **conv_q), ops.relu(shape, 0),         # noqa: E731
                           ops.max_pool2d(shape, 3, 1, 1), ops.conv2d(shape, wt, **conv_q))
    wt2 = [rng.integers(-20, 21, size=(32, 32, 3, 3)) for _ in range(2)]
    q2 = dict(padding=1, multiplier=rng.integers(2**29, 2**31, size=32), shift=np.full(32, 22))
    chain2 = lambda shape: (ops.conv2d(shape, wt2[0], **q2), ops.relu(shape, 0),        # noqa: E731
                            ops.conv2d(shape, wt2[1], **q2), ops.relu(shape, 0))
    wd = rng.integers(-20, 21, size=(64, 1, 3, 3))
    qd = dict(padding=1, groups=64, multiplier=rng.integers(2**29, 2**31, size=64), shift=np.full(64, 22))
    depthwise = lambda shape: (ops.conv2d(shape, wd, **qd),)       # noqa: E731
    we, wp = rng.integers(-20, 21, size=(64, 16, 1, 1)), rng.integers(-20, 21, size=(16, 64, 1, 1))
    qe = dict(multiplier=rng.integers(2**29, 2**31, size=64), shift=np.full(64, 21), lo=0)
    qp = dict(multiplier=rng.integers(2**29, 2**31, size=16), shift=np.full(16, 23))
    inverted = lambda s: (ops.conv2d(s, we, **qe), ops.conv2d((s[0], 64) + s[2:], wd, **qd, lo=0),  # noqa: E731
                          ops.conv2d((s[0], 64) + s[2:], wp, **qp))
    return [
        ("depthwise conv 3x3, 64 channels, H = W in [16, 64]", depthwise((n, 64, h, w)), depthwise, 64, 1, sizes),
        ("avg pool 3x3 stride 1 (count_include_pad), 32 channels, H = W in [16, 64]",
         (ops.avg_pool2d((n, 32, h, w), 3, 1, 1),), lambda s: (ops.avg_pool2d(s, 3, 1, 1),), 32, 1, sizes),
        ("sum pool 2x2 stride 2, 32 channels, H = W in [16, 64]", (ops.sum_pool2d((n, 32, h, w), 2),),
         lambda s: (ops.sum_pool2d(s, 2),), 32, 1, sizes),
        ("max pool 3x3 stride 1, 32 channels, H = W in [16, 64]", (ops.max_pool2d((n, 32, h, w), 3, 1, 1),),
         lambda s: (ops.max_pool2d(s, 3, 1, 1),), 32, 1, sizes),
        ("max pool 2x2 stride 2, 32 channels, H = W in [16, 64]", (ops.max_pool2d((n, 32, h, w), 2, 2, 0),),
         lambda s: (ops.max_pool2d(s, 2, 2, 0),), 32, 1, sizes),
        ("max pool 3x3 stride 3, 32 channels, H = W in [16, 64]", (ops.max_pool2d((n, 32, h, w), 3, 3, 0),),
         lambda s: (ops.max_pool2d(s, 3, 3, 0),), 32, 1, sizes),
        ("avg pool 3x3 stride 1 (count_include_pad=False), 32 channels, H = W in [16, 64]",
         (ops.avg_pool2d((n, 32, h, w), 3, 1, 1, False),), lambda s: (ops.avg_pool2d(s, 3, 1, 1, False),), 32, 1,
         sizes),
        ("avg pool 3x3 stride 2, float form (QLinearAveragePool), 32 channels, H = W in [16, 64]",
         (ops.avg_pool2d((n, 32, h, w), 3, 2, 1, **favg_q),), lambda s: (ops.avg_pool2d(s, 3, 2, 1, **favg_q),), 32,
         1, sizes),
        ("global avg pool, float form (QLinearGlobalAveragePool), 256 channels, H = W in [16, 64]",
         (ops.global_avg_pool2d((n, 256, h, w), **gavg_q),), lambda s: (ops.global_avg_pool2d(s, **gavg_q),), 256, 1,
         sizes),
        ("add, 32 channels, H = W in [16, 64]", (ops.add((n, 32, h, w), **add_q),),
         lambda s: (ops.add(s, **add_q),), 32, 2, sizes),
        ("relu, 32 channels, H = W in [16, 64]", (ops.relu((n, 32, h, w), 0),), lambda s: (ops.relu(s, 0),),
         32, 1, sizes),
        ("chain conv 3x3 -> relu -> max pool 3x3 -> conv 3x3, 16 channels, H = W in [16, 64] (fused on chip)",
         chain((n, 16, h, w)), chain, 16, 1, sizes),
        ("chain conv 3x3 -> relu -> conv 3x3 -> relu, 32 channels, H = W in [16, 64] (fused on chip)",
         chain2((n, 32, h, w)), chain2, 32, 1, sizes),
        ("chain inverted residual: 1x1 16 -> 64 (relu) -> depthwise 3x3 (relu) -> 1x1 64 -> 16, H = W in [16, 64] "
         "(fused on chip)", inverted((n, 16, h, w)), inverted, 16, 1, sizes),
    ]


REPORTED: list[tuple[str, list[float]]] = []   # (title, dynamic / static per shape) of every report, for --write-docs


def report(title: str, rows: list[tuple]) -> tuple[float, float]:
    print(f"\n{title}")
    print("| H = W | dynamic cycles | static cycles | ratio | dynamic binary | static binary | dynamic rows/tile |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    ratios = []
    REPORTED.append((title, ratios))
    for s, d, st, db, sb, th in rows:
        ratios.append(d / st)
        print(f"| {s} | {d:,} | {st:,} | {d / st:.3f} | {db:,} B | {sb:,} B | {th} |")
    geo = float(np.exp(np.mean(np.log(ratios))))
    print(f"geometric mean {geo:.3f} (target <= {GEOMEAN_TARGET}), worst {max(ratios):.3f} "
          f"(target <= {WORST_TARGET})")
    return geo, max(ratios)


NETWORK_TITLE = ("network (ONNX, QOperator): conv 3x3 -> conv -> conv -> residual add + relu -> max pool 2x2/2 -> "
                 "conv 3x3/2, 16-32 channels, H = W in [16, 64]; static = build(graph) per shape")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one conv layer, then the other ops")
    ap.add_argument("--conv-only", action="store_true", help="the conv layers only")
    ap.add_argument("--chains-only", action="store_true", help="the fused chains only")
    ap.add_argument("--pools-only", action="store_true", help="the pools only")
    ap.add_argument("--network-only", action="store_true", help="the ONNX network only")
    ap.add_argument("--network-layers", action="store_true", help="the ONNX network's cycles layer by layer")
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    if args.network_layers:
        network_layers([16, 28, 40, 52, 64], 16, 64)
        return 0
    if args.network_only:
        geo, worst = report(NETWORK_TITLE, measure_network([16, 28, 40, 52, 64], 16, 64))
        ok = geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
        print("\ntargets met" if ok else "\ntargets NOT met")
        return 0 if ok else 1
    if args.chains_only or args.pools_only:
        ok = True
        for title, dyn_ops, static_ops, c, inputs, sizes in other_cases(np.random.default_rng(1)):
            if title.startswith("chain" if args.chains_only else ("avg", "sum", "max", "global")):
                geo, worst = report(title, measure_ops(dyn_ops, static_ops, sizes, c, inputs))
                ok &= geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
        print("\ntargets met" if ok else "\ntargets NOT met")
        return 0 if ok else 1
    cases = [("conv 3x3 32 -> 32, H = W in [16, 64]", 32, 32, [16, 28, 40, 52, 64], 16, 64)]
    if not args.quick:
        cases.append(("conv 3x3 64 -> 64, H = W in [8, 56]", 64, 64, [8, 20, 32, 44, 56], 8, 56))
        cases.append(("conv 3x3 8 -> 16, H = W in [8, 64]", 8, 16, [8, 22, 36, 50, 64], 8, 64))
    ok = True
    for title, c, o, sizes, lo, hi in cases:
        geo, worst = report(title, measure(c, o, sizes, lo, hi))
        ok &= geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
    if args.conv_only:
        print("\ntargets met" if ok else "\ntargets NOT met")
        return 0 if ok else 1
    for title, dyn_ops, static_ops, c, inputs, sizes in other_cases(np.random.default_rng(1)):
        geo, worst = report(title, measure_ops(dyn_ops, static_ops, sizes, c, inputs))
        ok &= geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
    geo, worst = report(NETWORK_TITLE, measure_network([16, 28, 40, 52, 64], 16, 64))
    ok &= geo <= GEOMEAN_TARGET and worst <= WORST_TARGET
    print("\ntargets met" if ok else "\ntargets NOT met")
    if args.write_docs:
        write_table("dynamic", ["kernel", "geometric mean", "worst"],
                    [[t, f"{np.exp(np.mean(np.log(r))):.3f}", f"{max(r):.3f}"] for t, r in REPORTED],
                    f"every row at most {GEOMEAN_TARGET} as a geometric mean and at most {WORST_TARGET} at worst.")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
