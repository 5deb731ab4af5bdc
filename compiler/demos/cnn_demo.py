"""A small quantised CNN, compiled layer by layer, simulated and checked against numpy."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from nnpsim import Simulator

from .. import ops
from ..build import build
from ..kernel import Kernel
from ..quant import quantize_multiplier, quantize_multipliers
from ..roofline import bound_cycles

SEED = 2026
INPUT_SHAPE = (1, 3, 96, 96)


@dataclass
class Layer:
    """One layer of the network: a name, its op chain, and what feeds each input."""

    name: str
    ops: tuple
    sources: tuple[str, ...]   # names of earlier layers (or "input") feeding the kernel's inputs


def _requant_for(k: int, channels: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (M, S) that map an accumulator of k int8 products onto a useful int8 range."""
    spread = 74.0 * 74.0 * math.sqrt(k)   # std of a sum of k products of uniform int8
    return quantize_multipliers(rng.uniform(30.0, 50.0, channels) / spread)


def _conv(name: str, x_shape, o: int, k: int, rng, *, stride=1, padding=0, groups=1, relu=True):
    c = x_shape[1]
    w = rng.integers(-128, 128, (o, c // groups, k, k), dtype=np.int8)
    bias = rng.integers(-4000, 4000, o, dtype=np.int32)
    m, s = _requant_for(c // groups * k * k, o, rng)
    zp = -8
    return ops.conv2d(x_shape, w, bias, stride=stride, padding=padding, groups=groups, x_zp=-3,
                      multiplier=m, shift=s, zp_out=zp, lo=zp if relu else -128)


def network(rng: np.random.Generator | None = None) -> list[Layer]:
    """The built-in network: stem, max pool, depthwise, pointwise, residual add, GAP, dense."""
    rng = rng or np.random.default_rng(SEED)
    stem = _conv("stem", INPUT_SHAPE, 32, 3, rng, stride=2, padding=1)
    pool = ops.max_pool2d(stem.output.shape, 3, stride=2, padding=1)
    dw = _conv("dw", pool.output.shape, 32, 3, rng, padding=1, groups=32)
    pw = _conv("pw", dw.output.shape, 32, 1, rng, relu=False)
    ma, shift = quantize_multiplier(0.5)
    add = ops.add(pw.output.shape, za=-8, zb=-8, ma=ma, mb=ma, shift=shift, zp_out=-8)
    gap = ops.global_avg_pool2d(add.output.shape)
    n, c = gap.output.shape[:2]
    wd = rng.integers(-128, 128, (c, 10), dtype=np.int8)
    md, sd = _requant_for(c, 10, rng)
    dense = ops.dense((n, c), wd, rng.integers(-500, 500, 10, dtype=np.int32), x_zp=-8,
                      multiplier=md, shift=sd)
    return [Layer("stem conv3x3/2 +bias +relu", (stem,), ("input",)),
            Layer("max_pool 3x3/2", (pool,), ("stem conv3x3/2 +bias +relu",)),
            Layer("depthwise conv3x3 +relu", (dw,), ("max_pool 3x3/2",)),
            Layer("pointwise conv1x1", (pw,), ("depthwise conv3x3 +relu",)),
            Layer("residual add", (add,), ("pointwise conv1x1", "max_pool 3x3/2")),
            Layer("global avg pool", (gap,), ("residual add",)),
            Layer("dense 32->10", (dense,), ("global avg pool",))]


def _run(kernel: Kernel, inputs: list[np.ndarray], trace: Path):
    """Run a kernel on a fresh simulator with race checking and a trace; (output, stats)."""
    sim = Simulator(kernel.config)
    sim.load(kernel.program)
    for name, a in zip(kernel.input_names, inputs):
        sim.write(name, a)
    stats = sim.run(check_races=True, trace=str(trace))
    return sim.read(kernel.ir.output.name), stats


def _merge_traces(parts: list[tuple[str, Path]], out: Path) -> None:
    """One Perfetto file: each layer a process, placed one after another on the time axis."""
    events, offset = [], 0
    for pid, (name, path) in enumerate(parts, start=1):
        data = json.loads(path.read_text())
        end = offset
        for e in data["traceEvents"]:
            e = dict(e, pid=pid)
            if "ts" in e:
                e["ts"] = e["ts"] + offset
                end = max(end, e["ts"] + e.get("dur", 0))
            if e.get("name") == "process_name":
                e["args"] = {"name": f"{pid}. {name}"}
            events.append(e)
        offset = end
        path.unlink()
    out.write_text(json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}))


def run_network(out: Path, seed: int = SEED) -> list[dict]:
    """Compile, simulate and check every layer; one result row per layer. Raises on a mismatch."""
    rng = np.random.default_rng(seed)
    layers = network(rng)
    values = {"input": rng.integers(-128, 128, INPUT_SHAPE, dtype=np.int8)}
    rows, parts = [], []
    for n, layer in enumerate(layers):
        kernel = build(*layer.ops)
        inputs = [values[s] for s in layer.sources]
        if layer.ops[0].kind == "dense":
            inputs = [inputs[0].reshape(layer.ops[0].inputs[0].shape)]
        part = out / f"layer{n}.trace.json"
        y, stats = _run(kernel, inputs, part)
        want = inputs[0]
        for op in layer.ops:
            want = op.reference(want, *inputs[1:]) if op is layer.ops[0] else op.reference(want)
        if not np.array_equal(y, want):
            raise AssertionError(f"{layer.name}: simulator output differs from the numpy model "
                                 f"at {int((y != want).sum())} of {y.size} elements")
        values[layer.name] = y
        parts.append((layer.name, part))
        bound = bound_cycles(layer.ops, kernel.config)
        rows.append({"layer": layer.name, "shape": "x".join(map(str, y.shape)),
                     "cycles": stats.cycles, "predicted": kernel.predicted_cycles,
                     "nu_pct": stats.mac_utilization_pct,
                     "vu_pct": stats.units["vu0"].busy_pct if "vu0" in stats.units else 0.0,
                     "bound": bound, "ratio": stats.cycles / bound})
    _merge_traces(parts, out / "cnn.trace.json")
    return rows


def format_table(rows: list[dict]) -> str:
    """The per-layer table the demo prints."""
    head = ["layer", "output", "cycles", "predicted", "NU util", "VU util", "roofline", "cycles/roofline"]
    body = [[r["layer"], r["shape"], f"{r['cycles']:,}", f"{r['predicted']:,}", f"{r['nu_pct']:.1f}%",
             f"{r['vu_pct']:.1f}%", f"{r['bound']:,}", f"{r['ratio']:.2f}"] for r in rows]
    total = sum(r["cycles"] for r in rows)
    body.append(["total", "", f"{total:,}", f"{sum(r['predicted'] for r in rows):,}", "", "",
                 f"{sum(r['bound'] for r in rows):,}", f"{total / sum(r['bound'] for r in rows):.2f}"])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *body)]
    lines = ["  ".join(str(x).ljust(w) if i == 0 else str(x).rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
             for row in [head] + body]
    return "\n".join(lines)
