"""The `nnpasm` command: assemble a source file, or disassemble a binary."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from isa_spec.cli_args import CliFileError, OneLineParser, check_input, check_output, write_bytes
from isa_spec.program import BinaryError, Program

from .assembler import assemble_text
from .diagnostics import AsmError, Diagnostic
from .expr import EvalError, evaluate
from .listing import format_listing
from .macros import read_source
from .parser import ParseFailure, parse_line


class _UsageError(Exception):
    pass


def _arg_parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="nnpasm", description="Assemble NNP-1 source into an ELF binary, or disassemble one.",
                      epilog="exit status: 0 success, 1 an error in the input or a file that cannot be read or "
                             "written or a bad command line; output paths are written exactly as given, or "
                             "refused before any work (docs/assembler.md)")
    p.add_argument("input", help="source file (.s), or a binary with --disassemble")
    p.add_argument("-o", "--output", help="output file (default: INPUT with .bin; stdout when disassembling)")
    p.add_argument("-I", dest="include_dirs", action="append", default=[], metavar="DIR",
                   help="search DIR for .include and .incbin files")
    p.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME=VALUE",
                   help="define symbol NAME (VALUE is an integer expression, default 1)")
    p.add_argument("--listing", metavar="FILE", help="write an address/encoding/source listing")
    p.add_argument("--no-warnings", action="store_true",
                   help="do not print warnings (parameters a command reads but no earlier line sets)")
    p.add_argument("--disassemble", action="store_true", help="disassemble the binary INPUT")
    return p


def parse_define(text: str) -> tuple[str, int]:
    """Split and evaluate one -D NAME=VALUE option."""
    name, _, value = text.partition("=")
    try:
        stmt = parse_line(f"{name} {value or '1'}")
    except ParseFailure as exc:
        raise _UsageError(f"-D {text}: {exc.message}") from None
    if stmt is None or stmt.label is not None or len(stmt.operands) != 1 or not isinstance(stmt.name, str):
        raise _UsageError(f"-D {text}: expected NAME=VALUE")
    try:
        return str(stmt.name), evaluate(stmt.operands[0], _no_symbol)
    except (EvalError, TypeError, KeyError):
        raise _UsageError(f"-D {text}: VALUE must be a constant integer expression") from None


def _no_symbol(name: str) -> int:
    raise EvalError(f"undefined symbol '{name}'")


def _outputs(args, default: str | None) -> str | None:
    """The output path (-o, else `default`), checked with --listing before any work."""
    out = args.output or default
    if out is not None:
        check_output(out, "-o" if args.output else "output")
        if Path(out).resolve() == Path(args.input).resolve():
            raise CliFileError(f"output {out}: is the input file; give -o")
    if args.listing:
        check_output(args.listing, "--listing")
    return out


def _assemble(args) -> int:
    check_input(args.input, "source")
    try:
        source = read_source(args.input)
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"source {args.input}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    defines = dict(parse_define(d) for d in args.defines)
    out = _outputs(args, str(Path(args.input).with_suffix(".bin")))
    warnings: list[Diagnostic] = []
    try:
        program, rows = assemble_text(source, args.input, args.include_dirs, defines, bool(args.listing),
                                      warnings=warnings)
    except AsmError as exc:
        print(exc, file=sys.stderr)
        return 1
    if warnings and not args.no_warnings:
        print("\n".join(w.format() for w in warnings), file=sys.stderr)
    write_bytes(out, "-o" if args.output else "output", program.to_bytes())
    if args.listing:
        write_bytes(args.listing, "--listing", format_listing(program, rows).encode())
    return 0


def _disassemble(args) -> int:
    from .disasm import disassemble
    check_input(args.input, "binary")
    out = _outputs(args, None)
    program = Program.load(args.input)
    text = disassemble(program)
    if out:
        write_bytes(out, "-o", text.encode())
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success, 1 on any user error)."""
    try:
        args = _arg_parser().parse_args(argv)
        return _disassemble(args) if args.disassemble else _assemble(args)
    except (_UsageError, BinaryError, CliFileError) as exc:
        print(f"nnpasm: error: {exc}", file=sys.stderr)
        return 1
    except SystemExit as exc:   # --help (0), or a command line OneLineParser refused (1, as every user error)
        return 1 if exc.code else 0


if __name__ == "__main__":
    sys.exit(main())
