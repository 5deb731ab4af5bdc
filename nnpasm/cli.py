"""The `nnpasm` command: assemble a source file, or disassemble a binary."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from isa_spec.program import BinaryError, Program

from .assembler import assemble_text
from .diagnostics import AsmError, Diagnostic
from .expr import EvalError, evaluate
from .listing import format_listing
from .macros import read_source
from .parser import ParseFailure, parse_line


class _UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise _UsageError(message)


def _arg_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="nnpasm", description="Assemble NNP-1 source into an ELF binary, or disassemble one.")
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


def _assemble(args) -> int:
    try:
        source = read_source(args.input)
    except (OSError, UnicodeDecodeError) as exc:
        raise _UsageError(f"cannot read {args.input}: {getattr(exc, 'strerror', None) or exc}") from None
    defines = dict(parse_define(d) for d in args.defines)
    warnings: list[Diagnostic] = []
    try:
        program, rows = assemble_text(source, args.input, args.include_dirs, defines, bool(args.listing),
                                      warnings=warnings)
    except AsmError as exc:
        print(exc, file=sys.stderr)
        return 1
    if warnings and not args.no_warnings:
        print("\n".join(w.format() for w in warnings), file=sys.stderr)
    out = args.output or str(Path(args.input).with_suffix(".bin"))
    try:
        program.save(out)
        if args.listing:
            Path(args.listing).write_text(format_listing(program, rows))
    except BinaryError as exc:
        raise _UsageError(str(exc)) from None
    except OSError as exc:
        raise _UsageError(f"cannot write {exc.filename}: {exc.strerror}") from None
    return 0


def _disassemble(args) -> int:
    from .disasm import disassemble
    program = Program.load(args.input)
    text = disassemble(program)
    if args.output:
        try:
            Path(args.output).write_text(text)
        except OSError as exc:
            raise _UsageError(f"cannot write {args.output}: {exc.strerror}") from None
    else:
        sys.stdout.write(text)
    return 0


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit status (0 on success, 1 on any user error)."""
    try:
        args = _arg_parser().parse_args(argv)
        return _disassemble(args) if args.disassemble else _assemble(args)
    except (_UsageError, BinaryError) as exc:
        print(f"nnpasm: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
