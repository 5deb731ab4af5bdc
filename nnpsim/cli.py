"""`nnpsim`: run an NNP-1 binary, or print the default configuration.

Races are checked unless --no-check-races (the check costs little next to a
process start; docs/simulator.md has the measurements).

Exit status: 0 success; 1 bad input (binary, .npy file, buffer name, shape or
dtype, configuration, unwritable output path); 2 bad command line; 3 the
simulated program failed (the SimError's message is printed; --stats and
--trace are still written up to the failing cycle).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

from isa_spec.program import BinaryError, Program

from .config import ConfigError, config_toml, load_config
from . import argblock
from .errors import SimError
from .simulator import DTYPES, Simulator
from .stats import format_summary, summarize
from .trace import write_trace

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_SIM = 0, 1, 2, 3
NPY_MAGIC = b"\x93NUMPY"


class UserError(Exception):
    """Bad input from the user; the message is one line and the exit status is EXIT_INPUT."""


class UsageError(Exception):
    """A malformed command line (exit status EXIT_USAGE)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise UsageError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nnpsim", description="Cycle-level simulator of the NNP-1 edge NPU.",
                epilog="exit status: 0 success, 1 bad input file or configuration, 2 bad command line, "
                       "3 the simulated program failed (see docs/simulator.md)")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)
    run = sub.add_parser("run", help="run a program binary and print a summary")
    run.add_argument("binary", help="program binary (ELF) written by nnpasm")
    run.add_argument("--config", metavar="FILE", help="machine configuration TOML (default: built-in)")
    run.add_argument("--input", metavar="NAME=FILE", action="append", default=[],
                     help="load a .npy array into DDR buffer NAME before the run (repeatable)")
    run.add_argument("--output", metavar="NAME=FILE", action="append", default=[],
                     help="save DDR buffer NAME to a .npy file after the run (repeatable)")
    run.add_argument("--trace", metavar="FILE", help="write a Perfetto/Chrome trace (JSON)")
    run.add_argument("--stats", metavar="FILE", help="write the statistics as JSON")
    run.add_argument("--max-cycles", metavar="N", type=_cycles, help="stop with an error after N cycles")
    run.add_argument("--no-warnings", action="store_true",
                     help="leave out the warnings for parameters read at their reset value")
    run.add_argument("--check-races", action=argparse.BooleanOptionalAction, default=True,
                     help="check that synchronisation orders every pair of conflicting accesses "
                          "(on by default; --no-check-races skips the check)")
    cfg = sub.add_parser("config", help="print the configuration as TOML (the defaults unless --config)")
    cfg.add_argument("--config", metavar="FILE", help="configuration TOML to merge over the defaults")
    return p


def _cycles(text: str) -> int:
    try:
        n = int(text, 0)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{n} is negative")
    return n


def _pairs(items: list[str], option: str) -> list[tuple[str, str]]:
    out = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise UsageError(f"{option} expects NAME=FILE, got '{item}'")
        out.append((name, path))
    return out


def _buffer(program: Program, name: str, option: str):
    buf = program.buffers.get(name)
    if buf is None:
        known = ", ".join(sorted(program.buffers)) or "none"
        raise UserError(f"{option} {name}: the program has no buffer '{name}' (buffers: {known})")
    return buf


def _read_npy(path: str) -> np.ndarray:
    try:
        with open(path, "rb") as fh:
            if fh.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise UserError(f"{path}: not a .npy file (no NUMPY header; write it with numpy.save)")
            fh.seek(0)
            arr = np.load(fh, allow_pickle=False)
    except FileNotFoundError:
        raise UserError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory, not a .npy file") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (ValueError, EOFError) as exc:
        raise UserError(f"{path}: not a valid .npy file ({exc})") from None
    return arr


def _load_input(sim: Simulator, program: Program, name: str, path: str) -> None:
    buf = _buffer(program, name, "--input")
    arr = _read_npy(path)
    want = DTYPES[buf.dtype]
    shape = tuple(buf.shape)
    dynamic = argblock.signature(program)
    if dynamic is not None and name in dynamic.buffers:     # any in-range shape: the sizes come from it
        if arr.dtype.newbyteorder("=") != want.newbyteorder("="):
            raise UserError(f"--input {name}: {path} holds {arr.dtype}; buffer {name} expects {buf.dtype}")
        try:
            sim.write(name, arr.astype(want, copy=False))
        except ValueError as exc:
            raise UserError(f"--input {name}: {path}: {exc}") from None
        return
    if arr.shape != shape or arr.dtype.newbyteorder("=") != want.newbyteorder("="):
        raise UserError(f"--input {name}: {path} holds {arr.dtype} of shape {arr.shape}; buffer {name} "
                        f"expects {buf.dtype} of shape {shape}")
    sim.write(name, arr.astype(want, copy=False))


def _check_writable(path: str, option: str) -> None:
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise UserError(f"{option} {path}: is a directory")
    if parent.exists() and not parent.is_dir():
        raise UserError(f"{option} {path}: {parent} is not a directory")
    if not parent.is_dir():
        raise UserError(f"{option} {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (p.exists() and not os.access(p, os.W_OK)):
        raise UserError(f"{option} {path}: not writable")


def _write(path: str, what: str, writer) -> None:
    try:
        writer(path)
    except OSError as exc:
        raise UserError(f"cannot write {what} {path}: {exc.strerror or exc}") from None


def _save_npy(path: str, arr: np.ndarray) -> None:
    with open(path, "wb") as fh:   # np.save(path) would append .npy to other names
        np.save(fh, arr)


def _reports(args, log, program, config, note: str = "") -> None:
    """Write --stats and --trace for `log` (a partial run when note says so)."""
    if args.stats:
        stats = summarize(log, program, config, warnings=not args.no_warnings)
        _write(args.stats, "stats", lambda p: Path(p).write_text(stats.to_json()))
        if note:
            print(f"nnpsim: stats {note} written to {args.stats}", file=sys.stderr)
    if args.trace:
        _write(args.trace, "trace", lambda p: write_trace(p, log, program, config))
        if note:
            print(f"nnpsim: trace {note} written to {args.trace}", file=sys.stderr)


def _run(args) -> int:
    inputs = _pairs(args.input, "--input")
    outputs = _pairs(args.output, "--output")
    try:
        config = load_config(args.config)
        program = Program.load(args.binary)
    except (ConfigError, BinaryError) as exc:
        raise UserError(str(exc)) from None
    for name, path in outputs:
        _buffer(program, name, "--output")
        _check_writable(path, "--output")
    for option in ("stats", "trace"):
        if getattr(args, option):
            _check_writable(getattr(args, option), f"--{option}")
    sim = Simulator(config)
    try:
        sim.load(program)
    except SimError as exc:
        raise UserError(f"{args.binary}: {exc}") from None
    for name, path in inputs:
        _load_input(sim, program, name, path)
    if sim.inputs_disagree:
        raise UserError(f"--input: the inputs' shapes disagree: {sim.inputs_disagree}")
    try:
        stats = sim.run(max_cycles=args.max_cycles, check_races=args.check_races)
    except SimError as exc:
        print(f"nnpsim: simulation error: {exc}", file=sys.stderr)
        log = getattr(exc, "log", None) or sim.last_log
        if log is not None:
            try:
                _reports(args, log, program, config, f"up to cycle {log.cycles}")
            except UserError as report_error:     # the simulation error decides the status
                print(f"nnpsim: error: {report_error}", file=sys.stderr)
        return EXIT_SIM
    if args.no_warnings:
        stats.warnings = []
    print(format_summary(stats), end="")
    if args.check_races:
        print(f"race check: no data race among {len(sim.last_log.cmd_op):,} commands")
    else:
        print("race check: skipped (--no-check-races)")
    _reports(args, sim.last_log, program, config)
    for name, path in outputs:
        _write(path, "output", lambda p, n=name: _save_npy(p, sim.read(n)))
    return EXIT_OK


def _config(args) -> int:
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        raise UserError(str(exc)) from None
    print(config_toml(cfg), end="")
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `nnpsim` command; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
        return _run(args) if args.command == "run" else _config(args)
    except UsageError as exc:
        print(f"nnpsim: error: {exc} (see nnpsim --help)", file=sys.stderr)
        return EXIT_USAGE
    except UserError as exc:
        print(f"nnpsim: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:   # --help
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
