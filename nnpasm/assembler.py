"""The two-pass NNP-1 assembler: source text to a Program.

Pass 1 reads lines (through includes, macros and .rept), defines symbols,
lays out .text and .data and encodes every instruction whose operands are
known.  Pass 2 resolves what named a symbol defined later (and every branch,
whose target must lie in the finished .text) and patches it in.  Operand
kinds, ranges and fields come from isa_spec; nothing here knows individual
instructions.
"""
from __future__ import annotations

import difflib
import gc
from pathlib import Path

import numpy as np

from isa_spec import EncodeError, Instruction, encode, load_isa
from isa_spec.layout import LayoutError, stored_shape
from isa_spec.program import DTYPES, MAX_LINE, Buffer, Program, Symbol

from .diagnostics import AsmError, Diagnostics, TooManyErrors
from .expr import EvalError, Undefined, evaluate
from .macros import LineSource, Macro, SourceError, read_source, real_path, resolve_file
from .parser import Keyword, Mem, ParseFailure, Shape, Statement, Str, parse_line, split_code

DDR_BYTES = 256 << 20
MAX_INSTRUCTIONS = 1_000_000
BUFFER_ALIGN = 64
DATA_WIDTH = {".byte": 1, ".half": 2, ".word": 4, ".dword": 8}
BLOCK_ENDS = {".macro": ".endm", ".rept": ".endr"}


class _OperandError(Exception):
    """A bad operand at a 1-based column of the parsed code."""

    def __init__(self, column: int, message: str):
        super().__init__(message)
        self.column, self.message = column, message


def _describe(node) -> str:
    if type(node) is int:
        return str(node)
    if isinstance(node, str):
        return f"'{node}'"
    return {Mem: "a memory operand", Keyword: f"'{getattr(node, 'name', '')}=...'", Str: "a string",
            Shape: "a parenthesised list"}.get(type(node), "an expression")


def _node_column(node, default: int, base: int) -> int:
    column = getattr(node, "column", None)
    return column + base if column else default


class Assembler:
    """Assembles one program; use `run` once per instance."""

    def __init__(self, include_dirs=(), defines: dict[str, int] | None = None, listing: bool = False):
        self.isa = load_isa()
        self.include_dirs = tuple(str(d) for d in include_dirs)
        self.diags = Diagnostics()
        self.source = LineSource()
        self.values: dict[str, int] = dict(self.isa.constants)
        self.kinds: dict[str, tuple[str, str, str, int]] = {
            n: ("abs", "constant", "the ISA", 0) for n in self.isa.constants}
        self.macros: dict[str, Macro] = {}
        self.section, self.scope = "text", ""
        self.words: list[int] = []
        self.lines: list[tuple[str, int]] = []
        self.data, self.cursor = bytearray(), 0
        self.deferred: list[tuple] = []
        self.fixups: list[tuple] = []
        self.buffers: dict[str, Buffer] = {}
        self.open_buffer: tuple | None = None
        self.globals: list[tuple] = []
        self.config: dict[str, int | str] = {}
        self.loc: tuple | None = None
        self.keep_lines = True
        self.rows: list[tuple] | None = [] if listing else None
        self.ctx: tuple = ("", "<string>", 0, 0, (), 0, None)  # text, file, line, lead, notes, order, origin
        self.impure = False
        self.registers = {k.name: {f"{k.prefix}{i}": i for i in range(k.count)}
                          for k in self.isa.kinds.values() if k.prefix}
        self.directives = {".text": self._section, ".data": self._section, ".equ": self._equ,
                           ".set": self._equ, ".global": self._global, ".target": self._target,
                           ".loc": self._loc, ".nolines": self._nolines, ".include": self._include, ".incbin": self._incbin,
                           ".macro": self._macro, ".rept": self._rept, ".endm": self._stray_end,
                           ".endr": self._stray_end, ".align": self._align, ".org": self._org,
                           ".space": self._space, ".buffer": self._buffer,
                           **{d: self._data_values for d in DATA_WIDTH}}
        self.ranges = {id(f): f.value_range() for i in self.isa.instructions for f in i.fields.values()}
        self.has_pcrel = {i.mnemonic for i in self.isa.instructions
                          if any(f.kind.cls == "pcrel" for f in i.fields.values())}
        self.nop = encode("nop", {}, self.isa) if "nop" in self.isa.by_mnemonic else 0
        for name, value in (defines or {}).items():
            if name in self.kinds:
                self.diags.error("<command line>", 1, 1, f"-D {name}: redefines the ISA constant '{name}'")
            self.values[name] = int(value)
            self.kinds[name] = ("abs", "define", "-D", 0)

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
            self._close_buffer()
            self._pass2()
            self._check_globals()
        except TooManyErrors:
            pass
        if self.diags:
            raise AsmError(self.diags.items)
        return self._program()

    def _pass1(self) -> None:
        src = self.source
        while True:
            try:
                item = src.next()
            except SourceError as exc:
                self._error(exc.column, exc.message)
                return
            if item is None:
                return
            text, file, line, notes, origin = item
            code, lead = split_code(text)
            if not code:
                if self.rows is not None:
                    self._row(0, text, file, line)
                continue
            self.ctx = (text, file, line, lead, notes, src.expanded, origin)
            try:
                stmt = parse_line(code)
            except ParseFailure as exc:
                self._error(exc.column, exc.message)
                continue
            if stmt is None:  # a comment that holds quotes
                if self.rows is not None:
                    self._row(0, text, file, line)
                continue
            if stmt.spaced and stmt.name != ".macro":
                self._error(stmt.cols[1], "syntax error: expected ',' between operands")
                continue
            self._statement(stmt, text, file, line)

    def _statement(self, stmt: Statement, text: str, file: str, line: int) -> None:
        start_words, start_cursor = len(self.words), self.cursor
        if stmt.label is not None:
            self._define_label(stmt.label)
        name = stmt.name
        if name is not None:
            instr = self.isa.by_mnemonic.get(name)
            if instr is not None:
                self._instruction(stmt, instr)
            elif name in self.directives:
                try:
                    self.directives[name](stmt)
                except _OperandError as exc:
                    self._error(exc.column, exc.message)
                except EvalError as exc:
                    self._error(exc.column or (stmt.cols[0] if stmt.cols else stmt.name.column), exc.message)
            elif name in self.macros:
                self._expand(stmt)
            else:
                self._unknown(name)
        if self.rows is not None:
            if self.section == "text":
                self._row(8 * (len(self.words) - start_words), text, file, line, 8 * start_words)
            else:
                self._row(self.cursor - start_cursor, text, file, line, start_cursor)

    # ------------------------------------------------------------- diagnostics
    def _error(self, column: int, message: str, ctx: tuple | None = None) -> None:
        text, file, line, lead, notes, order, origin = ctx or self.ctx
        column += lead
        if origin is not None:   # a macro argument was substituted: point into the body as written
            body, colmap = origin
            notes = (f"after substitution: {text.strip()}", *notes)
            text, column = body, colmap[min(column - 1, len(colmap) - 1)] + 1
        self.diags.error(file, line, column, message, text, notes, order)

    def _unknown(self, name: str) -> None:
        known = [*self.isa.by_mnemonic, *self.directives, *self.macros]
        close = difflib.get_close_matches(name, known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        what = "directive" if name.startswith(".") else "mnemonic"
        self._error(name.column, f"unknown {what} '{name}'{hint}")

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

    def _eval(self, node, column: int, base: int) -> int:
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

    def _define(self, name, value: int, section: str, kind: str, column: int) -> None:
        key = self._key(name)
        old = self.kinds.get(key)
        if old is not None and not (kind == "set" and old[1] == "set"):
            where = "the ISA" if old[1] == "constant" else (
                "-D" if old[1] == "define" else f"{old[2]}:{old[3]}")
            self._error(column, f"duplicate symbol '{name}' (first defined at {where})")
            return
        self.values[key] = value
        self.kinds[key] = (section, kind, self.ctx[1], self.ctx[2])

    def _define_label(self, tok) -> None:
        if tok[0] != ".":
            self.scope = str(tok)
        if self.section == "text":
            self._define(tok, 8 * len(self.words), "text", "label", tok.column)
        else:
            self._define(tok, self.cursor, "data", "label", tok.column)

    # ----------------------------------------------------------- instructions
    def _instruction(self, stmt: Statement, instr: Instruction) -> None:
        if self.section != "text":
            self._error(stmt.name.column, f"instruction '{instr.mnemonic}' outside .text "
                                          "(.data holds data directives only)")
            return
        if len(self.words) >= MAX_INSTRUCTIONS:
            if len(self.words) == MAX_INSTRUCTIONS:
                self._error(stmt.name.column, f"more than {MAX_INSTRUCTIONS} instructions in .text")
                self.words.append(0)
            return
        self._record_line(stmt.name.column)
        if stmt.word is not None:
            self.words.append(stmt.word)
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
        except (_OperandError, EvalError) as exc:
            self._error(getattr(exc, "column", None) or stmt.name.column, exc.message)
            word = 0
        else:
            if not self.impure:
                stmt.word = word
        self.words.append(word)

    def _defer(self, stmt: Statement, instr: Instruction) -> None:
        self.deferred.append((len(self.words), stmt, instr, self.ctx, self.scope))
        self.words.append(0)

    def _record_line(self, col: int) -> None:
        """The line-table entry of the instruction being emitted."""
        file, line = self._srcloc()
        if line > MAX_LINE:
            self._error(col, f"line number {line} (counted from .loc) is past the line table's limit {MAX_LINE}")
            line = MAX_LINE
        self.lines.append((file, line))

    def _srcloc(self) -> tuple[str, int]:
        file, line = self.ctx[1], self.ctx[2]
        loc = self.loc
        if loc is not None and loc[0] == file:
            return loc[2], loc[3] + line - loc[1]
        return file, line

    def _encode(self, stmt: Statement, instr: Instruction, pc: int) -> int:
        ops, cols, bases = stmt.operands, stmt.cols, stmt.bases
        if stmt.options:
            positional = [i for i, o in enumerate(ops) if type(o) is not Keyword]
            keywords = [i for i, o in enumerate(ops) if type(o) is Keyword]
        else:
            positional, keywords = range(len(ops)), ()
        want = instr.operands
        if keywords and positional and positional[-1] > keywords[0]:
            raise _OperandError(cols[keywords[0]], f"{instr.mnemonic}: options such as "
                                                   f"'{ops[keywords[0]].name}=' come after the operands")
        if len(positional) != len(want):
            names = ", ".join(o.text for o in want) or "none"
            col = cols[positional[len(want)]] if len(positional) > len(want) else (
                cols[-1] if cols else stmt.name.column)
            raise _OperandError(col, f"{instr.mnemonic} takes {len(want)} operand"
                                     f"{'s' if len(want) != 1 else ''} ({names}), got {len(positional)}")
        values: dict[str, int | None] = {}
        for n, (i, operand) in enumerate(zip(positional, want), 1):
            node, col, base = ops[i], cols[i], bases[i]
            if operand.is_mem:
                if type(node) is not Mem:
                    raise _OperandError(col, f"{instr.mnemonic}: operand {n} must be a memory operand "
                                             f"{operand.text}, not {_describe(node)}")
                space, reg = (instr.fields[f] for f in operand.fields)
                values[space.name] = self._enum(node.space, col, space, instr)
                values[reg.name] = self._register(node.reg, _node_column(node.reg, col, base), reg, instr)
            else:
                fld = instr.fields[operand.fields[0]]
                values[fld.name] = self._value(node, col, base, fld, instr, pc)
        for i in keywords:
            node, col, base = ops[i], cols[i], bases[i]
            fld = instr.fields.get(str(node.name))
            if fld is None or fld.kind.cls != "sem_opt":
                allowed = ", ".join(f"{o}=" for o in instr.optional) or "none"
                raise _OperandError(col, f"{instr.mnemonic} has no option '{node.name}=' (allowed: {allowed})")
            if fld.name in values:
                raise _OperandError(col, f"{instr.mnemonic}: '{fld.name}=' given twice")
            values[fld.name] = self._register(node.value, _node_column(node.value, col, base), fld, instr)
        try:
            return encode(instr, values, self.isa)
        except EncodeError as exc:
            col = next((cols[i] for i, o in zip(positional, want) if exc.field in o.fields), stmt.name.column)
            raise _OperandError(col, f"{instr.mnemonic}: {exc}") from None

    def _register(self, node, col: int, fld, instr: Instruction) -> int:
        table = self.registers[fld.kind.name]
        value = table.get(node) if isinstance(node, str) else None
        if value is None:
            k = fld.kind
            what = "register" if k.cls == "reg" else "semaphore"
            raise _OperandError(col, f"{instr.mnemonic}: {fld.name} must be a {what} "
                                     f"{k.prefix}0..{k.prefix}{k.count - 1}, not {_describe(node)}")
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
            raise _OperandError(col, f"{instr.mnemonic}: {_describe(node)} is not a {fld.kind.name} "
                                     f"({choices}){hint}")
        return value

    def _value(self, node, col: int, base: int, fld, instr: Instruction, pc: int) -> int:
        cls = fld.kind.cls
        if cls in ("reg", "sem"):
            return self._register(node, col, fld, instr)
        if cls == "enum":
            return self._enum(node, col, fld, instr)
        if type(node) in (Mem, Keyword, Str, Shape):
            raise _OperandError(col, f"{instr.mnemonic}: {fld.name} must be an expression, not {_describe(node)}")
        if isinstance(node, str) and node in self.registers.get("reg", {}) and node not in self.values:
            raise _OperandError(col, f"{instr.mnemonic}: {fld.name} must be an immediate, not register '{node}'")
        value = self._eval(node, col, base)
        if cls == "pcrel":
            return self._branch(node, value, col, fld, instr, pc)
        lo, hi = self.ranges[id(fld)]
        if not lo <= value <= hi:
            what = "address" if cls == "addr" else "immediate"
            raise _OperandError(col, f"{instr.mnemonic}: {what} {value} out of range [{lo}, {hi}] for {fld.name}")
        return value

    def _branch(self, node, target: int, col: int, fld, instr: Instruction, pc: int) -> int:
        if isinstance(node, str):
            kind = self.kinds.get(self._key(node))
            if kind is not None and kind[0] != "text":
                raise _OperandError(col, f"{instr.mnemonic}: branch target '{node}' is a "
                                         f"{'.data' if kind[0] == 'data' else 'constant'} symbol, not a .text label")
        if target % fld.kind.scale:
            raise _OperandError(col, f"{instr.mnemonic}: branch target {target:#x} is not a multiple of "
                                     f"{fld.kind.scale}")
        end = 8 * len(self.words)
        if not 0 <= target < end:
            raise _OperandError(col, f"{instr.mnemonic}: branch target {target:#x} is outside .text "
                                     f"[0, {end:#x})")
        offset = target - pc
        lo, hi = fld.value_range()
        if not lo <= offset <= hi:
            raise _OperandError(col, f"{instr.mnemonic}: branch offset {offset} out of range [{lo}, {hi}]")
        return offset

    # ------------------------------------------------------------------ pass 2
    def _pass2(self) -> None:
        for index, stmt, instr, ctx, scope in self.deferred:
            self.ctx, self.scope = ctx, scope
            try:
                self.words[index] = self._encode(stmt, instr, 8 * index)
            except (_OperandError, EvalError) as exc:
                self._error(getattr(exc, "column", None) or stmt.name.column, exc.message)
        for offset, width, node, col, base, ctx, scope in self.fixups:
            self.ctx, self.scope = ctx, scope
            try:
                self.data[offset:offset + width] = self._checked(node, col, base, width).to_bytes(width, "little")
            except (_OperandError, EvalError) as exc:
                self._error(exc.column or col, exc.message)

    def _check_globals(self) -> None:
        for name, col, ctx in self.globals:
            if name not in self.kinds or self.kinds[name][1] == "constant":
                self._error(col, f".global names undefined symbol '{name}'", ctx)

    def _program(self) -> Program:
        symbols = {}
        for key, (section, kind, _, _) in self.kinds.items():
            if kind != "constant" and "/" not in key:
                symbols[key] = Symbol(key, self.values[key], section)
        return Program(np.array(self.words, dtype=np.uint64), bytes(self.data), 0, self.cursor,
                       symbols, self.buffers, self.lines if self.keep_lines else None, self.config)

    # -------------------------------------------------------------- directives
    def _args(self, stmt: Statement, lo: int, hi: int, usage: str) -> list:
        n = len(stmt.operands)
        if not lo <= n <= hi:
            col = stmt.cols[hi] if n > hi else (stmt.cols[-1] if stmt.cols else stmt.name.column)
            raise _OperandError(col, f"{stmt.name} expects {usage}, got {n} operand{'s' if n != 1 else ''}")
        return stmt.operands

    def _name_arg(self, stmt: Statement, i: int, what: str = "a name") -> str:
        node = stmt.operands[i]
        if type(node) is int or not isinstance(node, str):
            raise _OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be {what}, not {_describe(node)}")
        return node

    def _string_arg(self, stmt: Statement, i: int) -> str:
        node = stmt.operands[i]
        if type(node) is not Str:
            raise _OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be a string, "
                                              f"not {_describe(node)}")
        return node.value

    def _int_arg(self, stmt: Statement, i: int) -> int:
        node = stmt.operands[i]
        if type(node) in (Mem, Keyword, Str, Shape):
            raise _OperandError(stmt.cols[i], f"{stmt.name}: operand {i + 1} must be an expression, "
                                              f"not {_describe(node)}")
        return self._eval(node, stmt.cols[i], stmt.bases[i])

    def _need(self, stmt: Statement, section: str) -> None:
        if self.section != section:
            raise _OperandError(stmt.name.column, f"{stmt.name} is only allowed in .{section}")

    def _section(self, stmt: Statement) -> None:
        self._args(stmt, 0, 0, "no operands")
        if self.section == "data" and stmt.name != ".data":
            self._close_buffer()
        self.section = stmt.name[1:]

    def _equ(self, stmt: Statement) -> None:
        self._args(stmt, 2, 2, "NAME, value")
        name = self._name_arg(stmt, 0)
        try:
            value = self._int_arg(stmt, 1)
        except Undefined as exc:
            raise EvalError(exc.message + f" ({stmt.name} needs its value now)", exc.column) from None
        self._define(name, value, "abs", stmt.name[1:], stmt.cols[0])

    def _global(self, stmt: Statement) -> None:
        self._args(stmt, 1, 1 << 20, "one or more names")
        for i in range(len(stmt.operands)):
            self.globals.append((self._name_arg(stmt, i), stmt.cols[i], self.ctx))

    def _target(self, stmt: Statement) -> None:
        self._args(stmt, 2, 2, "KEY, value")
        key = self._name_arg(stmt, 0, "a key name")
        value = stmt.operands[1]
        self.config[str(key)] = value.value if type(value) is Str else self._int_arg(stmt, 1)

    def _nolines(self, stmt: Statement) -> None:
        self._args(stmt, 0, 0, "no operands")
        self.keep_lines = False

    def _loc(self, stmt: Statement) -> None:
        self._args(stmt, 2, 2, '"file", line')
        file, line = self._string_arg(stmt, 0), self._int_arg(stmt, 1)
        if not 0 <= line <= MAX_LINE:
            raise _OperandError(stmt.cols[1], f".loc line {line} is outside [0, {MAX_LINE}]")
        self.loc = (self.ctx[1], self.ctx[2] + 1, file, line)

    def _file_arg(self, stmt: Statement) -> Path:
        self._args(stmt, 1, 1, '"file"')
        name = self._string_arg(stmt, 0)
        path = resolve_file(name, self.source.current_file(), self.include_dirs)
        if path is None:
            dirs = ", ".join(self.include_dirs) or "no -I directories"
            raise _OperandError(stmt.cols[0], f"{stmt.name}: file '{name}' not found "
                                              f"(searched next to {self.source.current_file()}, {dirs})")
        return path

    def _include(self, stmt: Statement) -> None:
        path = self._file_arg(stmt)
        try:
            text = read_source(path)
        except (OSError, UnicodeDecodeError) as exc:
            raise _OperandError(stmt.cols[0], f".include: cannot read '{path}': {exc}") from None
        try:
            self.source.push_file(text, str(path), real_path(path))
        except SourceError as exc:
            raise _OperandError(stmt.cols[0], exc.message) from None

    def _incbin(self, stmt: Statement) -> None:
        self._need(stmt, "data")
        path = self._file_arg(stmt)
        try:
            blob = path.read_bytes()
        except OSError as exc:
            raise _OperandError(stmt.cols[0], f".incbin: cannot read '{path}': {exc.strerror}") from None
        self._emit(blob, stmt.cols[0])

    def _macro(self, stmt: Statement) -> None:
        body = self.source.collect(".macro", ".endm")
        self._args(stmt, 1, 1 << 10, "a name and parameters")
        name = self._name_arg(stmt, 0)
        params = tuple(str(self._name_arg(stmt, i, "a parameter name")) for i in range(1, len(stmt.operands)))
        if body is None:
            raise _OperandError(stmt.name.column, f"missing .endm for macro '{name}'")
        if name in self.isa.by_mnemonic or name in self.directives or name in self.macros:
            raise _OperandError(stmt.cols[0], f"macro name '{name}' is already an instruction, "
                                              "directive or macro")
        self.macros[name] = Macro(name, params, body, self.ctx[1], self.ctx[2])

    def _rept(self, stmt: Statement) -> None:
        body = self.source.collect(".rept", ".endr")
        self._args(stmt, 1, 1, "a count")
        if body is None:
            raise _OperandError(stmt.name.column, "missing .endr for .rept")
        count = self._int_arg(stmt, 0)
        try:
            self.source.push_rept(body, count)
        except SourceError as exc:
            raise _OperandError(stmt.cols[0], exc.message) from None

    def _stray_end(self, stmt: Statement) -> None:
        opener = ".macro" if stmt.name == ".endm" else ".rept"
        raise _OperandError(stmt.name.column, f"{stmt.name} without {opener}")

    def _expand(self, stmt: Statement) -> None:
        macro = self.macros[stmt.name]
        text, file, line, lead, notes, order, _ = self.ctx
        code = text[lead:]
        args = [code[a:b] for a, b in stmt.spans]
        if len(args) != len(macro.params):
            self._error(stmt.name.column, f"macro '{macro.name}' takes {len(macro.params)} argument"
                                          f"{'s' if len(macro.params) != 1 else ''}, got {len(args)}")
            return
        note = f"in expansion of macro '{macro.name}' at {file}:{line}"
        try:
            bad = self.source.push_macro(macro, args, (note, *notes))
        except SourceError as exc:
            self._error(stmt.name.column, exc.message)
            return
        for ln, exc in bad:
            self._error(exc.column, exc.message, (ln.text, ln.file, ln.line, 0, ln.notes, order, None))

    def _align(self, stmt: Statement) -> None:
        self._args(stmt, 1, 1, "a power of two")
        n = self._int_arg(stmt, 0)
        if n < 1 or n & (n - 1) or n > DDR_BYTES:
            raise _OperandError(stmt.cols[0], f".align {n}: not a power of two in [1, {DDR_BYTES}]")
        if self.section == "text":
            while (8 * len(self.words)) % n:
                self.words.append(self.nop)
                self._record_line(stmt.cols[0])
        else:
            self._skip((-self.cursor) % n, stmt.cols[0])

    def _org(self, stmt: Statement) -> None:
        self._need(stmt, "data")
        self._args(stmt, 1, 1, "an address")
        addr = self._int_arg(stmt, 0)
        if addr < self.cursor:
            raise _OperandError(stmt.cols[0], f".org {addr:#x} would move backwards from {self.cursor:#x}")
        self._skip(addr - self.cursor, stmt.cols[0])

    def _space(self, stmt: Statement) -> None:
        self._need(stmt, "data")
        self._args(stmt, 1, 2, "a size and an optional fill byte")
        n = self._int_arg(stmt, 0)
        fill = self._int_arg(stmt, 1) if len(stmt.operands) > 1 else 0
        if n < 0:
            raise _OperandError(stmt.cols[0], f".space size {n} is negative")
        if not -128 <= fill <= 255:
            raise _OperandError(stmt.cols[1], f".space fill {fill} out of range [-128, 255]")
        if fill:
            self._check_size(n, stmt.cols[0])
            self._emit(bytes([fill & 0xFF]) * n, stmt.cols[0])
        else:
            self._skip(n, stmt.cols[0])

    def _data_values(self, stmt: Statement) -> None:
        self._need(stmt, "data")
        self._args(stmt, 1, 1 << 20, "one or more values")
        width = DATA_WIDTH[stmt.name]
        if self.cursor % width:
            raise _OperandError(stmt.name.column, f"{stmt.name} at {self.cursor:#x} is not aligned to "
                                                  f"{width} bytes (use .align {width})")
        out = bytearray()
        for i in range(len(stmt.operands)):
            col, base = stmt.cols[i], stmt.bases[i]
            try:
                out += self._checked(stmt.operands[i], col, base, width).to_bytes(width, "little")
            except Undefined:
                self.fixups.append((self.cursor + len(out), width, stmt.operands[i], col, base,
                                    self.ctx, self.scope))
                out += bytes(width)
            except (_OperandError, EvalError) as exc:
                self._error(exc.column or col, exc.message)
                out += bytes(width)
        self._emit(bytes(out), stmt.cols[0])

    def _checked(self, node, col: int, base: int, width: int) -> int:
        """A data value as unsigned bits after its range check."""
        if type(node) in (Mem, Keyword, Str, Shape):
            raise _OperandError(col, f"expected a value, not {_describe(node)}")
        value = self._eval(node, col, base)
        lo, hi = -(1 << (8 * width - 1)), (1 << (8 * width)) - 1
        if not lo <= value <= hi:
            name = {1: ".byte", 2: ".half", 4: ".word", 8: ".dword"}[width]
            raise _OperandError(col, f"{name} value {value} out of range [{lo}, {hi}]")
        return value & ((1 << (8 * width)) - 1)

    def _buffer(self, stmt: Statement) -> None:
        self._need(stmt, "data")
        self._args(stmt, 3, 4, 'NAME, DTYPE, (d0, d1, ...)[, "LAYOUT"]')
        self._close_buffer()
        name = self._name_arg(stmt, 0)
        dtype = str(self._name_arg(stmt, 1, "a dtype"))
        if dtype not in DTYPES:
            raise _OperandError(stmt.cols[1], f".buffer dtype '{dtype}' is not one of {', '.join(DTYPES)}")
        node = stmt.operands[2]
        items = node.items if type(node) is Shape else (node,)
        shape = tuple(self._eval(d, stmt.cols[2], stmt.bases[2]) for d in items)
        if any(d < 0 for d in shape):
            raise _OperandError(stmt.cols[2], f".buffer shape {shape} has a negative dimension")
        layout = self._string_arg(stmt, 3) if len(stmt.operands) > 3 else ""
        try:
            stored_shape(layout, shape)
        except LayoutError as exc:
            raise _OperandError(stmt.cols[3] if len(stmt.operands) > 3 else stmt.cols[2],
                                f".buffer layout: {exc}") from None
        if self.cursor % BUFFER_ALIGN:
            raise _OperandError(stmt.name.column, f".buffer {name} at {self.cursor:#x} is not "
                                                  f"{BUFFER_ALIGN}-byte aligned (use .align {BUFFER_ALIGN})")
        if name in self.buffers:
            raise _OperandError(stmt.cols[0], f"duplicate buffer '{name}'")
        buf = Buffer(str(name), self.cursor, dtype, shape, layout)
        self._define(name, self.cursor, "data", "label", stmt.cols[0])
        self.buffers[buf.name] = buf
        self.open_buffer = (buf, self.ctx, stmt.cols[0])

    def _close_buffer(self) -> None:
        if self.open_buffer is None:
            return
        buf, ctx, col = self.open_buffer
        self.open_buffer = None
        got = self.cursor - buf.addr
        if got < buf.nbytes:
            self._error(col, f"buffer '{buf.name}' needs {buf.nbytes} bytes ({buf.dtype} {buf.shape}"
                             f"{' ' + repr(buf.layout) if buf.layout else ''}) but only {got} were "
                             "emitted before the next .buffer or the end of .data", ctx)

    # ------------------------------------------------------------- data bytes
    def _check_size(self, n: int, col: int) -> None:
        if self.cursor + n > DDR_BYTES:
            raise _OperandError(col, f".data would grow to {self.cursor + n} bytes, beyond the "
                                     f"DDR size {DDR_BYTES}")

    def _skip(self, n: int, col: int) -> None:
        self._check_size(n, col)
        self.cursor += n

    def _emit(self, blob: bytes, col: int) -> None:
        self._check_size(len(blob), col)
        if self.cursor > len(self.data):
            self.data.extend(bytes(self.cursor - len(self.data)))
        self.data += blob
        self.cursor += len(blob)


def assemble_text(source: str, filename: str = "<string>", include_dirs=(), defines=None,
                  listing: bool = False) -> tuple[Program, list[tuple] | None]:
    """Assemble and also return the listing rows (section, addr, size, text, file, line) if asked."""
    asm = Assembler(include_dirs, defines, listing)
    return asm.run(source, filename), asm.rows

