"""The demo's whole-network part: a small int8 ONNX model compiled into one program and checked against onnxruntime."""
from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SEED = 2026
TRACE = "network.trace.json"


@dataclass
class Agreement:
    """How one dequantised output compares with onnxruntime's."""

    equal: bool     # bit for bit
    steps: int      # largest difference, in steps of the output's scale
    top1: bool      # the same arg max in every batch row


def agreement(ours: np.ndarray, theirs: np.ndarray, scale) -> Agreement:
    """Compare our output with onnxruntime's: bit for bit, largest difference in output steps, top-1."""
    ours, theirs = np.asarray(ours), np.asarray(theirs)
    if ours.shape != theirs.shape:
        raise AssertionError(f"output shapes differ: {ours.shape} against onnxruntime's {theirs.shape}")
    step = float(np.max(np.asarray(scale, np.float64))) if ours.dtype.kind == "f" else 1.0
    diff = np.abs(ours.astype(np.float64) - theirs.astype(np.float64))
    rows = ours.shape[0] if ours.ndim else 1
    top1 = np.array_equal(ours.reshape(rows, -1).argmax(1), theirs.reshape(rows, -1).argmax(1))
    # Both sides dequantise as (q - zp) * scale in float32, so equal floats mean equal int8.
    return Agreement(bool(np.array_equal(ours, theirs)), int(np.rint(diff.max() / step)) if diff.size else 0,
                     bool(top1))


def onnxruntime_session(model, threads: int = 1):
    """An onnxruntime CPU session; one thread by default (same results, steadier timing on a shared machine)."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    raw = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(raw, opts, providers=["CPUExecutionProvider"])


def have_onnx() -> bool:
    """Whether the optional onnx extra (onnx and onnxruntime) is installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime"))


def run_network(out: Path, seed: int = SEED) -> dict:
    """Build, import, compile and run the tiny model race-checked with a trace; compare it with onnxruntime."""
    import compiler
    from compiler import models

    model = models.tiny("qoperator")
    lib = compiler.build(compiler.from_onnx(model))
    m = compiler.GraphModule(lib)
    shape = tuple(lib.meta["inputs"][0]["shape"])
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    m.set_input(0, x)
    trace = out / TRACE
    m.run(check_races=True, trace=str(trace))
    sess = onnxruntime_session(model)
    (theirs,) = sess.run(None, {sess.get_inputs()[0].name: x})
    agree = agreement(m.get_output(0), theirs, lib.meta["outputs"][0]["scale"])
    return {"lib": lib, "module": m, "agreement": agree, "trace": trace, "input_shape": shape}


def layer_rows(lib, m) -> list[dict]:
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
