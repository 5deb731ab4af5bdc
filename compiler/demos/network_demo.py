"""The demo's whole-network part: a small int8 ONNX model compiled into one program and checked against onnxruntime."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from .. import models
from ..agreement import agreement, have_onnx, onnxruntime_session
from ..build import build
from ..library import Library
from ..onnx import from_onnx
from ..runtime import GraphModule

SEED = 2026
TRACE = "network.trace.json"


def run_network(out: Path, seed: int = SEED) -> dict:
    """Build, import, compile and run the tiny model race-checked with a trace; compare it with onnxruntime."""
    model = models.tiny("qoperator")
    lib = build(from_onnx(model))
    m = GraphModule(lib)
    shape = tuple(lib.meta["inputs"][0]["shape"])
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    m.set_input(0, x)
    trace = out / TRACE
    m.run(check_races=True, trace=str(trace))
    sess = onnxruntime_session(model)
    (theirs,) = sess.run(None, {sess.get_inputs()[0].name: x})
    agree = agreement(m.get_output(0), theirs, lib.meta["outputs"][0]["scale"])
    return {"lib": lib, "module": m, "agreement": agree, "trace": trace, "input_shape": shape}


def layer_rows(lib: Library, m: GraphModule) -> list[dict]:
    """One row per layer: what the compiler predicted next to what the run took."""
    predicted = {layer["name"]: layer["predicted_cycles"] for layer in lib.layers}
    return [{"layer": s.name, "ops": s.ops, "cycles": s.cycles, "predicted": predicted[s.name],
             "bound": s.bound_cycles, "ratio": s.cycles / s.bound_cycles if s.bound_cycles else float("nan")}
            for s in m.layer_stats()]


def format_layers(rows: list[dict], total: int, predicted: int) -> str:
    """The compact per-layer table; layers overlap, so the total is the run's, not the column's sum."""
    head = ["layer", "ops", "cycles", "predicted", "bound", "ratio"]
    body = [[r["layer"], r["ops"], f"{r['cycles']:,}", f"{r['predicted']:,}", f"{r['bound']:,}",
             f"{r['ratio']:.1f}"] for r in rows]
    bound = sum(r["bound"] for r in rows)
    body.append(["whole network", "", f"{total:,}", f"{predicted:,}", f"{bound:,}", f"{total / bound:.1f}"])
    widths = [max(len(row[i]) for row in [head] + body) for i in range(len(head))]
    return "\n".join("  ".join(x.ljust(w) if i < 2 else x.rjust(w) for i, (x, w) in enumerate(zip(row, widths)))
                     for row in [head] + body)


def run(out: Path) -> None:
    """The demo's network part: print what it did; AssertionError if the output differs from onnxruntime's."""
    if not have_onnx():
        print("==== whole network: skipped (needs the onnx extra: pip install 'nnp-toolchain[onnx]')")
        return
    r = run_network(out)
    lib, m, agree = r["lib"], r["module"], r["agreement"]
    a = lib.meta["arena"]
    print(f"==== a whole network: compiler.models.tiny('qoperator'), an int8 ONNX model quantised by "
          f"onnxruntime, on a {'x'.join(map(str, r['input_shape']))} float input: imported, compiled into "
          f"one program of {len(lib.layers)} layers, simulated with race checking")
    print(format_layers(layer_rows(lib, m), m.stats.cycles, lib.predicted_cycles))
    print(f"     DDR arena {a['bytes']:,} bytes (one buffer per tensor: {a['naive_bytes']:,}); no data race")
    if not agree.equal:
        raise AssertionError(f"the network's output differs from onnxruntime's: largest difference "
                             f"{agree.steps} step(s), top-1 {'agrees' if agree.top1 else 'differs'}")
    print(f"     output equal to onnxruntime's bit for bit (largest difference {agree.steps} steps; "
          f"top-1 agrees)")
    print(f"     trace with a track of layers: {os.path.relpath(r['trace'])} (open in ui.perfetto.dev)")
