"""The two-pass NNP-1 assembler: source text to a Program.

Pass 1 reads lines (through includes, macros and .rept), defines symbols,
lays out .text and .data and encodes every instruction whose operands are
known.  Pass 2 resolves what named a symbol defined later (and every branch,
whose target must lie in the finished .text) and patches it in.  Operand
kinds, ranges and fields come from isa_spec; nothing here knows individual
instructions.  The directives live in directives.py.
"""
from __future__ import annotations

import difflib
import gc
import os
from pathlib import Path
from typing import Iterable, Mapping, NamedTuple

import numpy as np

from isa_spec import EncodeError, Instruction, encode, load_isa
from isa_spec.program import MAX_LINE, Buffer, Program, Symbol

from . import directives
from .diagnostics import AsmError, Diagnostic, Diagnostics, OperandError, TooManyErrors
from .directives import DIRECTIVES, NOT_VALUES, Fixup, GlobalRef, LocMapping, OpenBuffer
from .expr import EvalError, Undefined, evaluate
from .macros import Line, LineSource, Macro, SourceError, real_path
from .param_warnings import WATCHED, Site, check
from .parser import Keyword, Mem, ParseFailure, Statement, describe_operand, parse_line, split_code

MAX_INSTRUCTIONS = 1_000_000


class Definition(NamedTuple):
    """How and where a symbol was defined."""

    section: str   # "text", "data" or "abs"
    kind: str      # "label", "equ", "set", "define" (-D) or "constant" (the ISA's)
    file: str
    line: int


class LineContext(NamedTuple):
    """The source line being assembled, as its diagnostics need it."""

    text: str                    # after macro substitution
    file: str
    line: int
    lead: int                    # columns before the code (the parser counts from the code's start)
    notes: tuple[str, ...]
    order: int                   # the line's read order, by which diagnostics are sorted
    origin: tuple[str, tuple[int, ...]] | None   # see macros.Line


class Deferred(NamedTuple):
    """An instruction encoded in pass 2: a branch, or one naming a symbol defined later."""

    index: int
    stmt: Statement
    instr: Instruction
    ctx: LineContext
    scope: str


def _node_column(node, default: int, base: int) -> int:
    column = getattr(node, "column", None)
    return column + base if column else default


class Assembler:
    """Assembles one program; use `run` once per instance."""

    def __init__(self, include_dirs: Iterable[str | os.PathLike] = (), defines: Mapping[str, int] | None = None,
                 listing: bool = False):
        self.isa = load_isa()
        self.include_dirs = tuple(str(d) for d in include_dirs)
        self.diags = Diagnostics()
        self.source = LineSource()
        self.values: dict[str, int] = dict(self.isa.constants)
        self.definitions: dict[str, Definition] = {
            n: Definition("abs", "constant", "the ISA", 0) for n in self.isa.constants}
        self.macros: dict[str, Macro] = {}
        self.section, self.scope = "text", ""
        self.words: list[int] = []
        self.lines: list[tuple[str, int]] = []
        self.data, self.cursor = bytearray(), 0
        self.deferred: list[Deferred] = []
        self.fixups: list[Fixup] = []
        self.buffers: dict[str, Buffer] = {}
        self.open_buffer: OpenBuffer | None = None
        self.globals: list[GlobalRef] = []
        self.config: dict[str, int | str] = {}
        self.loc: LocMapping | None = None
        self.keep_lines = True
        self.rows: list[tuple] | None = [] if listing else None
        self.ctx = LineContext("", "<string>", 0, 0, (), 0, None)
        # Encodings of lines whose operands name no symbol, by code text: kernels repeat lines.
        self.encoded: dict[str, int] = {}
        self.sites: list[Site] = []   # the instructions param_warnings looks at
        self.warnings: list[Diagnostic] = []
        self.impure = False   # whether the operand being evaluated looked a symbol up
        self.registers = {k.name: {f"{k.prefix}{i}": i for i in range(k.count)}
                          for k in self.isa.kinds.values() if k.prefix}
        self.ranges = {id(f): f.value_range() for i in self.isa.instructions for f in i.fields.values()}
        self.has_pcrel = {i.mnemonic for i in self.isa.instructions
                          if any(f.kind.cls == "pcrel" for f in i.fields.values())}
        self.nop = encode("nop", {}, self.isa) if "nop" in self.isa.by_mnemonic else 0
        self._predefine(defines or {})

    def _predefine(self, defines: Mapping[str, int]) -> None:
        for name, value in defines.items():
            if name in self.definitions:
                self.diags.error("<command line>", 1, 1, f"-D {name}: redefines the ISA constant '{name}'")
            self.values[name] = int(value)
            self.definitions[name] = Definition("abs", "define", "-D", 0)

    # ------------------------------------------------------------------ driver
    def run(self, source: str, filename: str = "<string>") -> Program:
        """Assemble `source`; raises AsmError with every diagnostic found."""
        # The parse caches hold many small objects: cyclic GC passes over them
        # would cost more than the whole assembly.  Whatever cycles a run leaves
        # are collected once the collector is back on.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            return self._run(source, filename)
        finally:
            if gc_was_enabled:
                gc.enable()

    def _run(self, source: str, filename: str) -> Program:
        try:
            real = "" if filename.startswith("<") else real_path(Path(filename))
            self.source.push_file(source, filename, real)
            self._pass1()
            directives.close_buffer(self)
            self._pass2()
            self._check_globals()
        except TooManyErrors:
            pass
        if self.diags:
            raise AsmError(self.diags.items)
        self._warn()
        return self._program()

    def _pass1(self) -> None:
        while True:
            try:
                item = self.source.next()
            except SourceError as exc:
                self.error(exc.column, exc.message)
                return
            if item is None:
                return
            self._line(item)

    def _line(self, item: Line) -> None:
        text, file, line, notes, origin = item
        code, lead = split_code(text)
        if not code:
            if self.rows is not None:
                self._row(0, text, file, line)
            return
        self.ctx = LineContext(text, file, line, lead, notes, self.source.expanded, origin)
        try:
            stmt = parse_line(code)
        except ParseFailure as exc:
            self.error(exc.column, exc.message)
            return
        if stmt is None:  # a comment that holds quotes
            if self.rows is not None:
                self._row(0, text, file, line)
            return
        if stmt.spaced and stmt.name != ".macro":
            self.error(stmt.cols[1], "syntax error: expected ',' between operands")
            return
        start_words, start_cursor = len(self.words), self.cursor
        self._statement(stmt, code)
        if self.rows is not None:
            if self.section == "text":
                self._row(8 * (len(self.words) - start_words), text, file, line, 8 * start_words)
            else:
                self._row(self.cursor - start_cursor, text, file, line, start_cursor)

    def _statement(self, stmt: Statement, code: str) -> None:
        if stmt.label is not None:
            self._define_label(stmt.label)
        name = stmt.name
        if name is None:
            return
        instr = self.isa.by_mnemonic.get(name)
        if instr is not None:
            self._instruction(stmt, instr, code)
        elif name in DIRECTIVES:
            self._directive(stmt)
        elif name in self.macros:
            self._expand(stmt)
        else:
            self._unknown(name)

    def _directive(self, stmt: Statement) -> None:
        try:
            DIRECTIVES[stmt.name](self, stmt)
        except OperandError as exc:
            self.error(exc.column, exc.message)
        except EvalError as exc:
            self.error(exc.column or (stmt.cols[0] if stmt.cols else stmt.name.column), exc.message)

    # ------------------------------------------------------------- diagnostics
    def error(self, column: int, message: str, ctx: LineContext | None = None) -> None:
        """Report an error at a column of the current line's code (or of `ctx`'s)."""
        ctx = ctx or self.ctx
        column, text, notes = self._locate(column, ctx)
        self.diags.error(ctx.file, ctx.line, column, message, text, notes, ctx.order)

    def _warn(self) -> None:
        for site, message in check(self.sites, self.words, self.isa):
            column, text, notes = self._locate(site.column, site.ctx)
            self.warnings.append(Diagnostic(site.ctx.file, site.ctx.line, max(column, 1), message, text, notes,
                                            "warning"))

    @staticmethod
    def _locate(column: int, ctx: LineContext) -> tuple[int, str, tuple[str, ...]]:
        """The column, source text and notes a diagnostic at a column of `ctx`'s code shows."""
        text, notes, column = ctx.text, ctx.notes, column + ctx.lead
        if ctx.origin is not None:   # a macro argument was substituted: point into the body as written
            body, colmap = ctx.origin
            notes = (f"after substitution: {text.strip()}", *notes)
            text, column = body, colmap[min(column - 1, len(colmap) - 1)] + 1
        return column, text, notes

    def _unknown(self, name: str) -> None:
        known = [*self.isa.by_mnemonic, *DIRECTIVES, *self.macros]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        what = "directive" if name.startswith(".") else "mnemonic"
        self.error(name.column, f"unknown {what} '{name}'{hint}")

    def _row(self, size: int, text: str, file: str, line: int, addr: int | None = None) -> None:
        if addr is None:
            addr = 8 * len(self.words) if self.section == "text" else self.cursor
        self.rows.append((self.section, addr, size, text, file, line))

    # ---------------------------------------------------------------- symbols
    def _key(self, name: str) -> str:
        return f"{self.scope}/{name}" if name[0] == "." else str(name)

    def _lookup(self, name) -> int:
        self.impure = True
        v = self.values.get(f"{self.scope}/{name}" if name[0] == "." else name)
        if v is None:
            raise Undefined(name, getattr(name, "column", None))
        return v

    def evaluate(self, node: object, column: int, base: int) -> int:
        """Evaluate an operand at `column` whose tokens count columns from `base`."""
        try:
            return evaluate(node, self._lookup)
        except EvalError as exc:
            at = exc.column + base if exc.column else column
            if isinstance(exc, Undefined):
                raise Undefined(exc.name, at) from None
            raise EvalError(exc.message, at) from None
        except RecursionError:
            raise EvalError("expression nested too deeply", column) from None

    def define(self, name: str, value: int, section: str, kind: str, column: int) -> None:
        """Define a symbol (a `.name` local to the last global label); `.set` may redefine a `.set`."""
        key = self._key(name)
        old = self.definitions.get(key)
        if old is not None and not (kind == "set" and old.kind == "set"):
            where = "the ISA" if old.kind == "constant" else (
                "-D" if old.kind == "define" else f"{old.file}:{old.line}")
            self.error(column, f"duplicate symbol '{name}' (first defined at {where})")
            return
        self.values[key] = value
        self.definitions[key] = Definition(section, kind, self.ctx.file, self.ctx.line)

    def _define_label(self, tok) -> None:
        if tok[0] != ".":
            self.scope = str(tok)
        if self.section == "text":
            self.define(tok, 8 * len(self.words), "text", "label", tok.column)
        else:
            self.define(tok, self.cursor, "data", "label", tok.column)

    # ----------------------------------------------------------- instructions
    def _instruction(self, stmt: Statement, instr: Instruction, code: str) -> None:
        if self.section != "text":
            self.error(stmt.name.column, f"instruction '{instr.mnemonic}' outside .text "
                                         "(.data holds data directives only)")
            return
        if len(self.words) >= MAX_INSTRUCTIONS:
            if len(self.words) == MAX_INSTRUCTIONS:
                self.error(stmt.name.column, f"more than {MAX_INSTRUCTIONS} instructions in .text")
                self.words.append(0)
            return
        self.record_line(stmt.name.column)
        if instr.mnemonic in WATCHED:
            self.sites.append(Site(len(self.words), instr.mnemonic, stmt.name.column, self.ctx))
        word = self.encoded.get(code)
        if word is not None:
            self.words.append(word)
            return
        if instr.mnemonic in self.has_pcrel:
            self._defer(stmt, instr)
            return
        self.impure = False
        try:
            word = self._encode(stmt, instr, 8 * len(self.words))
        except Undefined:
            self._defer(stmt, instr)
            return
        except (OperandError, EvalError) as exc:
            self.error(getattr(exc, "column", None) or stmt.name.column, exc.message)
            word = 0
        else:
            if not self.impure:
                self.encoded[code] = word
        self.words.append(word)

    def _defer(self, stmt: Statement, instr: Instruction) -> None:
        self.deferred.append(Deferred(len(self.words), stmt, instr, self.ctx, self.scope))
        self.words.append(0)

    def record_line(self, col: int) -> None:
        """Add the line-table entry of the instruction being emitted."""
        file, line = self._srcloc()
        if line > MAX_LINE:
            self.error(col, f"line number {line} (counted from .loc) is past the line table's limit {MAX_LINE}")
            line = MAX_LINE
        self.lines.append((file, line))

    def _srcloc(self) -> tuple[str, int]:
        file, line = self.ctx.file, self.ctx.line
        loc = self.loc
        if loc is not None and loc.file == file:
            return loc.to_file, loc.to_line + line - loc.first_line
        return file, line

    def _encode(self, stmt: Statement, instr: Instruction, pc: int) -> int:
        positional, keywords = self._split_operands(stmt, instr)
        values: dict[str, int | None] = {}
        self._operand_values(stmt, instr, positional, pc, values)
        self._option_values(stmt, instr, keywords, values)
        try:
            return encode(instr, values, self.isa)
        except EncodeError as exc:
            col = next((stmt.cols[i] for i, o in zip(positional, instr.operands) if exc.field in o.fields),
                       stmt.name.column)
            raise OperandError(col, f"{instr.mnemonic}: {exc}") from None

    def _split_operands(self, stmt: Statement, instr: Instruction):
        """The indices of the positional operands (as many as the instruction takes) and of the options."""
        ops, cols = stmt.operands, stmt.cols
        if stmt.options:
            positional = [i for i, o in enumerate(ops) if type(o) is not Keyword]
            keywords = [i for i, o in enumerate(ops) if type(o) is Keyword]
        else:
            positional, keywords = range(len(ops)), ()
        want = instr.operands
        if keywords and positional and positional[-1] > keywords[0]:
            raise OperandError(cols[keywords[0]], f"{instr.mnemonic}: options such as "
                                                  f"'{ops[keywords[0]].name}=' come after the operands")
        if len(positional) != len(want):
            names = ", ".join(o.text for o in want) or "none"
            col = cols[positional[len(want)]] if len(positional) > len(want) else (
                cols[-1] if cols else stmt.name.column)
            raise OperandError(col, f"{instr.mnemonic} takes {len(want)} operand"
                                    f"{'s' if len(want) != 1 else ''} ({names}), got {len(positional)}")
        return positional, keywords

    def _operand_values(self, stmt: Statement, instr: Instruction, positional, pc: int,
                        values: dict[str, int | None]) -> None:
        for n, (i, operand) in enumerate(zip(positional, instr.operands), 1):
            node, col, base = stmt.operands[i], stmt.cols[i], stmt.bases[i]
            if not operand.is_mem:
                fld = instr.fields[operand.fields[0]]
                values[fld.name] = self._value(node, col, base, fld, instr, pc)
                continue
            if type(node) is not Mem:
                raise OperandError(col, f"{instr.mnemonic}: operand {n} must be a memory operand "
                                        f"{operand.text}, not {describe_operand(node)}")
            space, reg = (instr.fields[f] for f in operand.fields)
            values[space.name] = self._enum(node.space, col, space, instr)
            values[reg.name] = self._register(node.reg, _node_column(node.reg, col, base), reg, instr)

    def _option_values(self, stmt: Statement, instr: Instruction, keywords,
                       values: dict[str, int | None]) -> None:
        for i in keywords:
            node, col, base = stmt.operands[i], stmt.cols[i], stmt.bases[i]
            fld = instr.fields.get(str(node.name))
            if fld is None or fld.kind.cls != "sem_opt":
                allowed = ", ".join(f"{o}=" for o in instr.optional) or "none"
                raise OperandError(col, f"{instr.mnemonic} has no option '{node.name}=' (allowed: {allowed})")
            if fld.name in values:
                raise OperandError(col, f"{instr.mnemonic}: '{fld.name}=' given twice")
            values[fld.name] = self._register(node.value, _node_column(node.value, col, base), fld, instr)

    def _register(self, node, col: int, fld, instr: Instruction) -> int:
        table = self.registers[fld.kind.name]
        value = table.get(node) if isinstance(node, str) else None
        if value is None:
            k = fld.kind
            what = "register" if k.cls == "reg" else "semaphore"
            raise OperandError(col, f"{instr.mnemonic}: {fld.name} must be a {what} "
                                    f"{k.prefix}0..{k.prefix}{k.count - 1}, not {describe_operand(node)}")
        return value

    def _enum(self, node, col: int, fld, instr: Instruction) -> int:
        values = fld.kind.values
        value = values.get(node) if isinstance(node, str) else None
        if value is None:
            hint = ""
            if isinstance(node, str):
                close = difflib.get_close_matches(node, values, n=1)
                hint = f"; did you mean '{close[0]}'?" if close else ""
            choices = ", ".join(values) if len(values) <= 24 else ", ".join(list(values)[:8]) + ", ..."
            raise OperandError(col, f"{instr.mnemonic}: {describe_operand(node)} is not a {fld.kind.name} "
                                    f"({choices}){hint}")
        return value

    def _value(self, node, col: int, base: int, fld, instr: Instruction, pc: int) -> int:
        cls = fld.kind.cls
        if cls in ("reg", "sem"):
            return self._register(node, col, fld, instr)
        if cls == "enum":
            return self._enum(node, col, fld, instr)
        if type(node) in NOT_VALUES:
            raise OperandError(col, f"{instr.mnemonic}: {fld.name} must be an expression, "
                                    f"not {describe_operand(node)}")
        if isinstance(node, str) and node in self.registers.get("reg", {}) and node not in self.values:
            raise OperandError(col, f"{instr.mnemonic}: {fld.name} must be an immediate, not register '{node}'")
        value = self.evaluate(node, col, base)
        if cls == "pcrel":
            return self._branch(node, value, col, fld, instr, pc)
        lo, hi = self.ranges[id(fld)]
        if not lo <= value <= hi:
            what = "address" if cls == "addr" else "immediate"
            raise OperandError(col, f"{instr.mnemonic}: {what} {value} out of range [{lo}, {hi}] for {fld.name}")
        return value

    def _branch(self, node, target: int, col: int, fld, instr: Instruction, pc: int) -> int:
        if isinstance(node, str):
            symbol = self.definitions.get(self._key(node))
            if symbol is not None and symbol.section != "text":
                raise OperandError(col, f"{instr.mnemonic}: branch target '{node}' is a "
                                        f"{'.data' if symbol.section == 'data' else 'constant'} symbol, "
                                        "not a .text label")
        if target % fld.kind.scale:
            raise OperandError(col, f"{instr.mnemonic}: branch target {target:#x} is not a multiple of "
                                    f"{fld.kind.scale}")
        end = 8 * len(self.words)
        if not 0 <= target < end:
            raise OperandError(col, f"{instr.mnemonic}: branch target {target:#x} is outside .text "
                                    f"[0, {end:#x})")
        offset = target - pc
        lo, hi = fld.value_range()
        if not lo <= offset <= hi:
            raise OperandError(col, f"{instr.mnemonic}: branch offset {offset} out of range [{lo}, {hi}]")
        return offset

    def _expand(self, stmt: Statement) -> None:
        macro = self.macros[stmt.name]
        ctx = self.ctx
        code = ctx.text[ctx.lead:]
        args = [code[a:b] for a, b in stmt.spans]
        if len(args) != len(macro.params):
            self.error(stmt.name.column, f"macro '{macro.name}' takes {len(macro.params)} argument"
                                         f"{'s' if len(macro.params) != 1 else ''}, got {len(args)}")
            return
        note = f"in expansion of macro '{macro.name}' at {ctx.file}:{ctx.line}"
        try:
            bad = self.source.push_macro(macro, args, (note, *ctx.notes))
        except SourceError as exc:
            self.error(stmt.name.column, exc.message)
            return
        for ln, exc in bad:
            self.error(exc.column, exc.message, LineContext(ln.text, ln.file, ln.line, 0, ln.notes, ctx.order, None))

    # ------------------------------------------------------------------ pass 2
    def _pass2(self) -> None:
        for item in self.deferred:
            self.ctx, self.scope = item.ctx, item.scope
            try:
                self.words[item.index] = self._encode(item.stmt, item.instr, 8 * item.index)
            except (OperandError, EvalError) as exc:
                self.error(getattr(exc, "column", None) or item.stmt.name.column, exc.message)
        directives.resolve_fixups(self)

    def _check_globals(self) -> None:
        for ref in self.globals:
            symbol = self.definitions.get(ref.name)
            if symbol is None or symbol.kind == "constant":
                self.error(ref.column, f".global names undefined symbol '{ref.name}'", ref.ctx)

    def _program(self) -> Program:
        symbols = {}
        for key, symbol in self.definitions.items():
            if symbol.kind != "constant" and "/" not in key:
                symbols[key] = Symbol(key, self.values[key], symbol.section)
        return Program(np.array(self.words, dtype=np.uint64), bytes(self.data), 0, self.cursor,
                       symbols, self.buffers, self.lines if self.keep_lines else None, self.config)


def assemble_text(source: str, filename: str = "<string>", include_dirs: Iterable[str | os.PathLike] = (),
                  defines: Mapping[str, int] | None = None, listing: bool = False, *,
                  warnings: list[Diagnostic] | None = None) -> tuple[Program, list[tuple] | None]:
    """Assemble; also return the listing rows (section, addr, size, text, file, line) if asked."""
    asm = Assembler(include_dirs, defines, listing)
    program = asm.run(source, filename)
    if warnings is not None:
        warnings.extend(asm.warnings)
    return program, asm.rows
