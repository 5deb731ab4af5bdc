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
import sys

from isa_spec.cli_args import CliFileError, OneLineParser, check_input, check_output, read_npy, save_npy, write_bytes
from isa_spec.program import BinaryError, Program

from .config import ConfigError, config_toml, load_config
from . import argblock
from .errors import SimError
from .simulator import DTYPES, Simulator
from .stats import format_summary, summarize
from .trace import trace_json

EXIT_OK, EXIT_INPUT, EXIT_USAGE, EXIT_SIM = 0, 1, 2, 3


class UserError(Exception):
    """Bad input from the user; the message is one line and the exit status is EXIT_INPUT."""


class UsageError(Exception):
    """A malformed command line (exit status EXIT_USAGE)."""


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="nnpsim", description="Cycle-level simulator of the NNP-1 edge NPU.",
                epilog="exit status: 0 success, 1 bad input file or configuration, 2 bad command line, "
                       "3 the simulated program failed (see docs/simulator.md); output paths are written "
                       "exactly as given, or refused before the run")
    sub = p.add_subparsers(dest="command", required=True, parser_class=OneLineParser)
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


def _load_input(sim: Simulator, program: Program, name: str, path: str) -> None:
    buf = _buffer(program, name, "--input")
    arr = read_npy(path, f"--input {name}:")
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


def _reports(args, log, program, config, note: str = "") -> None:
    """Write --stats and --trace for `log` (a partial run when note says so)."""
    if args.stats:
        stats = summarize(log, program, config, warnings=not args.no_warnings)
        write_bytes(args.stats, "--stats", stats.to_json().encode())
        if note:
            print(f"nnpsim: stats {note} written to {args.stats}", file=sys.stderr)
    if args.trace:
        write_bytes(args.trace, "--trace", trace_json(log, program, config).encode())
        if note:
            print(f"nnpsim: trace {note} written to {args.trace}", file=sys.stderr)


def _run(args) -> int:
    inputs = _pairs(args.input, "--input")
    outputs = _pairs(args.output, "--output")
    check_input(args.binary, "binary")
    try:
        config = _load_config(args.config)
        program = Program.load(args.binary)
    except (ConfigError, BinaryError) as exc:
        raise UserError(str(exc)) from None
    for name, path in outputs:
        _buffer(program, name, "--output")
        check_output(path, "--output")
    for option in ("stats", "trace"):
        if getattr(args, option):
            check_output(getattr(args, option), f"--{option}")
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
            except CliFileError as report_error:     # the simulation error decides the status
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
        save_npy(path, f"--output {name}:", sim.read(name))
    return EXIT_OK


def _load_config(path: str | None):
    """The configuration of --config (checked as an input file first) or the built-in one."""
    if path is not None:
        check_input(path, "--config")
    return load_config(path)


def _config(args) -> int:
    try:
        cfg = _load_config(args.config)
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
    except (UserError, CliFileError) as exc:
        print(f"nnpsim: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except SystemExit as exc:   # --help, or a command line OneLineParser refused
        return int(exc.code or 0)


if __name__ == "__main__":
    sys.exit(main())
