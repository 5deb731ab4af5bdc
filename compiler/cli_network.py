"""`nnpc compile` and `nnpc run`: whole networks from ONNX on the command line.

    nnpc compile model.onnx -o model.nnp [--config hw.toml] [--arithmetic onnxruntime|fixed]
                 [--report] [--no-fuse]
    nnpc run model.onnx|model.nnp --input x.npy [--output y.npy] [--trace t.json]
             [--check-races] [--compare-onnxruntime]

Exit status: 0 success; 1 a model, input or configuration that cannot be used
(the message says which and why); 2 a bad command line; 3 the simulated
program failed.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np

from nnpsim.config import ConfigError, load_config
from nnpsim.errors import SimError

from . import compile_cache
from .build import build
from .errors import CompileError
from .library import Library, load
from .onnx import from_onnx
from .runtime import GraphModule

EXIT_OK, EXIT_INPUT, EXIT_SIM = 0, 1, 3


def parser() -> argparse.ArgumentParser:
    """The parser of `nnpc compile` and `nnpc run`."""
    ap = argparse.ArgumentParser(prog="nnpc", description="compile and run whole ONNX networks on NNP-1")
    sub = ap.add_subparsers(dest="command", required=True)
    c = sub.add_parser("compile", help="compile an int8 ONNX model into one NNP-1 program")
    c.add_argument("model", help="ONNX model quantised by onnxruntime (QOperator or QDQ)")
    c.add_argument("-o", "--output", required=True, help="program binary to write (.nnp)")
    c.add_argument("--report", action="store_true",
                   help="print every fusion decision with its predicted gain, each fused kernel's pipelining "
                        "variant with every variant's predicted cycles, and the on-chip high-water marks")
    _common(c)
    r = sub.add_parser("run", help="run a model (.onnx: compiled first; .nnp: as built) on the simulator")
    r.add_argument("model", help="an ONNX model or a program written by nnpc compile")
    r.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="an input array (float32: quantised as the model says; int8: as it is); repeatable")
    r.add_argument("--output", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="save an output (dequantised float32) here; repeatable")
    r.add_argument("--trace", metavar="FILE", help="write a Perfetto trace with a track of layers")
    r.add_argument("--check-races", action="store_true", help="check the run for data races")
    r.add_argument("--compare-onnxruntime", action="store_true",
                   help="also run onnxruntime on the same input; print the largest difference in output "
                        "steps and whether the top-1 agrees (needs the .onnx model)")
    _common(r)
    return ap


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="machine configuration (TOML, as `nnpsim config` prints)")
    p.add_argument("--arithmetic", default="onnxruntime", choices=["onnxruntime", "fixed"],
                   help="requantisation: float32 exactly as onnxruntime, or integer (M, S) (default: onnxruntime)")
    p.add_argument("--no-fuse", action="store_true",
                   help="one kernel per graph node (no fusion): the baseline fusion is measured against")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the compile cache (as NNP_CACHE=0; docs/compiler.md)")


def _library(path: str, args, config) -> Library:
    """A Library: an ONNX model imported and compiled, or a program read back."""
    if Path(path).suffix.lower() == ".onnx":
        with compile_cache.off() if args.no_cache else contextlib.nullcontext():
            return build(from_onnx(path, arithmetic=args.arithmetic), config=config, fuse=not args.no_fuse)
    return load(path, config)


def _pairs(items: list[str], what: str) -> list[tuple[str | None, str]]:
    out = []
    for item in items:
        name, sep, path = item.rpartition("=")
        out.append((name if sep else None, path))
    return out


def _load_npy(path: str) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise CompileError(f"cannot read {path}: {exc}") from None


def compile_command(args) -> int:
    """nnpc compile: print the layer table and write the program."""
    lib = _library(args.model, args, load_config(args.config))
    lib.save(args.output)
    print(lib.layer_table())
    if args.report:
        print(lib.fusion_report())
    print(f"nnpc: wrote {args.output} ({len(lib.layers)} layers, {lib.predicted_cycles:,} cycles predicted)")
    return EXIT_OK


def run_command(args) -> int:
    """nnpc run: set the inputs, run, print the layer statistics, save outputs, compare with onnxruntime."""
    lib = _library(args.model, args, load_config(args.config))
    m = GraphModule(lib)
    inputs = _pairs(args.input, "--input")
    if len(inputs) != m.num_inputs:
        raise CompileError(f"the model takes {m.num_inputs} input(s) "
                           f"({', '.join(t['name'] for t in lib.meta['inputs'])}); got {len(inputs)} --input")
    arrays = {}
    for k, (name, path) in enumerate(inputs):
        arrays[name if name is not None else k] = a = _load_npy(path)
        m.set_input(name if name is not None else k, a)
    try:
        with _stage("simulating" + (" and checking races" if args.check_races else "")):
            stats = m.run(check_races=args.check_races, trace=args.trace)
    except SimError as exc:
        print(f"nnpc: simulation error: {exc}", file=sys.stderr)
        return EXIT_SIM
    _print_layers(m)
    print(f"cycles {stats.cycles:,} ({stats.time_us:,.1f} us); predicted {lib.predicted_cycles:,}")
    for name, path in _pairs(args.output, "--output"):
        np.save(path, m.get_output(name if name is not None else 0))
    if args.compare_onnxruntime:
        _compare(args.model, m, arrays)
    return EXIT_OK


@contextlib.contextmanager
def _stage(what: str):
    """A one-step tqdm bar while `what` runs, on a terminal (the simulator runs as one jitted call)."""
    try:
        from tqdm import tqdm
    except ImportError:
        yield
        return
    bar = tqdm(total=1, desc=what, disable=None, leave=False, bar_format="{desc}: {elapsed}")
    try:
        yield
        bar.update(1)
    finally:
        bar.close()


def _print_layers(m) -> None:
    print(f"{'layer':<28} {'ops':<30} {'cycles':>10} {'bound':>9} {'ratio':>6} {'MAC %':>6} {'DDR bytes':>11}")
    for s in m.layer_stats():
        ratio = f"{s.cycles / s.bound_cycles:.2f}" if s.bound_cycles else "-"
        print(f"{s.name[:28]:<28} {s.ops[:30]:<30} {s.cycles:>10,} {s.bound_cycles:>9,} {ratio:>6} "
              f"{s.mac_utilization_pct:>6.1f} {s.ddr_bytes:>11,}")


def _compare(model: str, m, arrays: dict) -> None:
    """Run onnxruntime on the same input and print the largest difference in output steps and top-1."""
    if Path(model).suffix.lower() != ".onnx":
        raise CompileError("--compare-onnxruntime needs the .onnx model, not a compiled program")
    try:
        import onnxruntime as ort
    except ImportError:
        raise CompileError("--compare-onnxruntime needs onnxruntime: pip install 'nnp-toolchain[onnx]'") from None
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = {}
    for k, inp in enumerate(sess.get_inputs()):
        a = arrays.get(inp.name, arrays.get(k))
        if a is None:
            raise CompileError(f"no --input for onnxruntime's input {inp.name}")
        feeds[inp.name] = a
    for k, got in enumerate(sess.run(None, feeds)):
        ours = m.get_output(k)
        t = m.meta["outputs"][k]
        scale = np.float32(np.asarray(t.get("scale", [1.0]), np.float32).max())
        steps = int(np.rint(np.abs(ours.astype(np.float64) - np.asarray(got, np.float64)) / scale).max())
        top1 = np.array_equal(np.argmax(ours.reshape(ours.shape[0], -1), 1), np.argmax(got.reshape(got.shape[0], -1), 1))
        print(f"onnxruntime: output {t['name']}: largest difference {steps} step(s); "
              f"top-1 {'agrees' if top1 else 'DIFFERS'}")


def main(argv: list[str]) -> int:
    """Entry point for `nnpc compile ...` and `nnpc run ...`."""
    args = parser().parse_args(argv)
    try:
        return compile_command(args) if args.command == "compile" else run_command(args)
    except (CompileError, ConfigError, OSError) as exc:
        print(f"nnpc: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
