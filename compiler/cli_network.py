"""`nnpc compile` and `nnpc run`: whole networks from ONNX on the command line.

    nnpc compile model.onnx -o model.nnp [--config hw.toml] [--arithmetic onnxruntime|fixed]
                 [--report] [--table layers.csv|layers.json] [--no-fuse] [--npu-only]
    nnpc run model.onnx|model.nnp --input x.npy [--output y.npy] [--trace t.json]
             [--table layers.csv|layers.json] [--plot roofline.png] [--check-races] [--compare-onnxruntime]

Exit status: 0 success; 1 a model, input, configuration or output path that
cannot be used, or a write that failed (one line naming the file and why);
2 a bad command line; 3 the simulated program failed.  Output paths (-o,
--output, --trace) are written exactly as given, or refused before any work.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

import numpy as np

from isa_spec.cli_args import CliFileError, OneLineParser, check_input, check_output, read_npy, save_npy, write_with
from nnpsim.config import Config, ConfigError, load_config
from nnpsim.errors import SimError
from nnpsim.simulator import check_machine

from . import compile_cache
from .build import build
from .errors import CompileError
from .host import nodes_text
from .library import HostedLibrary, Library, load
from .onnx import from_onnx
from .report import TABLE_SUFFIXES, check_output_path, layer_rows, plot_roofline, write_table
from .runtime import GraphModule, dequantize

EXIT_OK, EXIT_INPUT, EXIT_SIM = 0, 1, 3
HELP = {"compile": "compile an int8 ONNX model into one NNP-1 program",
        "run": "run a model (.onnx: compiled first; .nnp: as built) on the simulator"}


def parser() -> argparse.ArgumentParser:
    """The parser of `nnpc compile` and `nnpc run`."""
    ap = OneLineParser(prog="nnpc", description="compile and run whole ONNX networks on NNP-1",
                       epilog="exit status: 0 success, 1 a file, model or output path that cannot be used, "
                              "2 a bad command line, 3 the simulation failed; output paths are written "
                              "exactly as given, or refused before any work (docs/networks.md)")
    sub = ap.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
    c = sub.add_parser("compile", help=HELP["compile"], description=HELP["compile"])
    c.add_argument("model", help="ONNX model quantised by onnxruntime (QOperator or QDQ)")
    c.add_argument("-o", "--output", required=True, help="program binary to write (.nnp)")
    c.add_argument("--report", action="store_true",
                   help="print every fusion decision with its predicted gain, each fused kernel's pipelining "
                        "variant with every variant's predicted cycles, and the on-chip high-water marks")
    c.add_argument("--table", metavar="FILE", help="also write the per-layer table, predicted, as CSV or JSON "
                   "(by the file's suffix: .csv, .json)")
    _common(c)
    r = sub.add_parser("run", help=HELP["run"], description=HELP["run"])
    r.add_argument("model", help="an ONNX model or a program written by nnpc compile")
    r.add_argument("--input", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="an input array (float32: quantised as the model says; int8: as it is); repeatable")
    r.add_argument("--output", action="append", default=[], metavar="[NAME=]FILE.npy",
                   help="save an output (dequantised float32) here; repeatable")
    r.add_argument("--trace", metavar="FILE", help="write a Perfetto trace with a track of layers")
    r.add_argument("--table", metavar="FILE", help="also write the per-layer table, measured, as CSV or JSON "
                   "(by the file's suffix: .csv, .json)")
    r.add_argument("--plot", metavar="FILE.png", help="draw the layers on the machine's roofline as a PNG")
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
    p.add_argument("--npu-only", action="store_true",
                   help="refuse a model with nodes the NPU cannot run, listing them by op type, instead of running "
                        "them on the host through onnxruntime (host fallback)")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the compile cache (as NNP_CACHE=0; docs/compiler.md)")


def config_of(path: str | None) -> Config:
    """The --config machine (checked as an input file first), or the built-in one."""
    if path is not None:
        check_input(path, "--config")
    return load_config(path)


def _library(path: str, args, config: Config) -> Library | HostedLibrary:
    """A Library (a HostedLibrary with host parts): an ONNX model imported and compiled, or a program read back
    (checked against the machine)."""
    check_input(path, "model")
    if Path(path).suffix.lower() == ".onnx":
        with compile_cache.off() if args.no_cache else contextlib.nullcontext():
            lib = build(from_onnx(path, arithmetic=args.arithmetic, host_fallback=not args.npu_only),
                        config=config, fuse=not args.no_fuse)
    else:
        lib = load(path, config)
    for stage in lib.npu_stages if isinstance(lib, HostedLibrary) else [lib]:
        try:
            check_machine(stage.program, config)
        except SimError as exc:
            raise CompileError(f"model {path}: cannot run on this machine: {exc}") from None
    return lib


def _pairs(items: list[str]) -> list[tuple[str | None, str]]:
    """[NAME=]FILE items as (NAME or None, FILE)."""
    out = []
    for item in items:
        name, sep, path = item.rpartition("=")
        out.append((name if sep else None, path))
    return out


def compile_command(args) -> int:
    """nnpc compile: print the layer table and write the program."""
    config = config_of(args.config)
    check_output(args.output, "-o")
    if args.table:
        check_output_path(args.table, TABLE_SUFFIXES, "--table")
        check_output(args.table, "--table")
    lib = _library(args.model, args, config)
    write_with(args.output, "-o", lib.save)
    print(lib.layer_table())
    if args.table:
        print(f"nnpc: wrote {write_table(layer_rows(lib), args.table)}")
    if args.report:
        print(lib.fusion_report())
    print(f"nnpc: wrote {args.output} ({len(lib.layers)} layers, {lib.predicted_cycles:,} cycles predicted)")
    return EXIT_OK


def run_command(args) -> int:
    """nnpc run: set the inputs, run, print the layer statistics, save outputs, compare with onnxruntime."""
    config = config_of(args.config)
    outputs = _pairs(args.output)
    for _, path in outputs:
        check_output(path, "--output")
    for option, path, suffixes in (("--trace", args.trace, None), ("--table", args.table, TABLE_SUFFIXES),
                                   ("--plot", args.plot, (".png",))):
        if path:
            if suffixes:
                check_output_path(path, suffixes, option)
            check_output(path, option)
    inputs = _pairs(args.input)
    for _, path in inputs:
        check_input(path, "--input")
    if args.compare_onnxruntime and Path(args.model).suffix.lower() != ".onnx":
        raise CompileError("--compare-onnxruntime needs the .onnx model, not a compiled program")
    lib = _library(args.model, args, config)
    m = GraphModule(lib)
    names = [t["name"] for t in lib.meta["outputs"]]
    for name, path in outputs:
        if name is not None and name not in names:
            raise CompileError(f"--output {name}={path}: the model has no output {name!r} "
                               f"(its outputs: {', '.join(names)})")
    if len(inputs) != m.num_inputs:
        raise CompileError(f"the model takes {m.num_inputs} input(s) "
                           f"({', '.join(t['name'] for t in lib.meta['inputs'])}); got {len(inputs)} --input")
    arrays = {}
    for k, (name, path) in enumerate(inputs):
        arrays[name if name is not None else k] = a = read_npy(path, "--input")
        m.set_input(name if name is not None else k, a)
    try:
        with _stage("simulating" + (" and checking races" if args.check_races else "")):
            stats = m.run(check_races=args.check_races, trace=args.trace)
    except SimError as exc:
        print(f"nnpc: simulation error: {exc}", file=sys.stderr)
        return EXIT_SIM
    except OSError as exc:          # the trace, written by the run
        raise CliFileError(f"--trace {args.trace}: cannot write: {exc.strerror or exc}") from None
    _print_layers(m)
    print(f"cycles {stats.cycles:,} ({stats.time_us:,.1f} us); predicted {lib.predicted_cycles:,}")
    if isinstance(lib, HostedLibrary):
        print(f"host: {'; '.join(f'{p}: {nodes_text(len(ns))}' for p, ns in stats.host_nodes.items())} (onnxruntime); "
              f"NPU: {100 * stats.npu_mac_share:.2f}% of the MACs")
    if args.table or args.plot:
        rows = layer_rows(lib, m.layer_stats())
        if args.table:
            print(f"nnpc: wrote {write_table(rows, args.table)}")
        if args.plot:
            print(f"nnpc: wrote {plot_roofline(rows, args.plot, lib.config, Path(args.model).stem)}")
    for name, path in outputs:
        save_npy(path, "--output", m.get_output(name if name is not None else 0))
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
    host = {p.name for p in getattr(m.lib, "host_parts", [])}
    for s in m.layer_stats():
        if s.name in host:
            print(f"{s.name[:28]:<28} {s.ops[:30]:<30} {'on the host (onnxruntime)':>46}")
            continue
        ratio = f"{s.cycles / s.bound_cycles:.2f}" if s.bound_cycles else "-"
        print(f"{s.name[:28]:<28} {s.ops[:30]:<30} {s.cycles:>10,} {s.bound_cycles:>9,} {ratio:>6} "
              f"{s.mac_utilization_pct:>6.1f} {s.ddr_bytes:>11,}")


def _compare(model: str, m, arrays: dict) -> None:
    """Run onnxruntime on the same input and print the largest difference in output steps and top-1."""
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
        feeds[inp.name] = _ort_feed(a, inp.type, m.meta["inputs"][k])
    try:
        results = sess.run(None, feeds)
    except Exception as exc:        # onnxruntime's own exception types (an optional extra)
        raise CompileError(f"onnxruntime cannot run the inputs: {' '.join(str(exc).split())}") from None
    for k, got in enumerate(results):
        ours = m.get_output(k)
        t = m.meta["outputs"][k]
        scale = np.float32(np.asarray(t.get("scale", [1.0]), np.float32).max())
        steps = int(np.rint(np.abs(ours.astype(np.float64) - np.asarray(got, np.float64)) / scale).max())
        top1 = np.array_equal(np.argmax(ours.reshape(ours.shape[0], -1), 1), np.argmax(got.reshape(got.shape[0], -1), 1))
        print(f"onnxruntime: output {t['name']}: largest difference {steps} step(s); "
              f"top-1 {'agrees' if top1 else 'DIFFERS'}")


def _ort_feed(a: np.ndarray, ort_type: str, t: dict) -> np.ndarray:
    """The array onnxruntime takes for an input we took: an int8 array for a float input dequantised as the
    model says (onnxruntime's QuantizeLinear gives it back exactly), a float array as float32."""
    if ort_type != "tensor(float)":
        return a
    if a.dtype == np.int8:
        if "scale" not in t:
            raise CompileError(f"--compare-onnxruntime: input {t['name']} is int8, and the model gives no "
                               "quantisation to turn it into onnxruntime's float32")
        return dequantize(a, t["scale"], t["zero_point"], t.get("axis"))
    return a.astype(np.float32, copy=False)


def main(argv: list[str]) -> int:
    """Entry point for `nnpc compile ...` and `nnpc run ...`."""
    args = parser().parse_args(argv)
    try:
        return compile_command(args) if args.command == "compile" else run_command(args)
    except (CompileError, ConfigError, CliFileError, OSError) as exc:
        print(f"nnpc: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except SimError as exc:          # loading the program (running it is handled in run_command)
        print(f"nnpc: error: {args.model}: {exc}", file=sys.stderr)
        return EXIT_INPUT
