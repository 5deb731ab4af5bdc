"""Parse one line of NNP-1 assembly into a Statement (lark LALR, tree-less, cached)."""
from __future__ import annotations

import functools
import re
from pathlib import Path

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedInput, UnexpectedToken

from .expr import climb, fold, literal

GRAMMAR_PATH = Path(__file__).with_name("grammar.lark")
CACHE_LIMIT = 200_000
BLANKS = " \t\f\r"  # the grammar's WS
ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", "0": "\0", '"': '"'}
_HEAD = re.compile(r"(?:([A-Za-z_.][A-Za-z0-9_.$]*)[ \t\f\r]*:[ \t\f\r]*)?([A-Za-z_.][A-Za-z0-9_.$]*)?")
TERMINAL_WORDS = {"NAME": "a name", "NUMBER": "a number", "CHAR": "a character literal",
                  "STRING": "a string", "BINOP": "an operator", "$END": "end of line"}


class Name(str):
    """A name as written, with its 1-based column and [start_pos, end_pos) offsets.

    A plain str subclass (unlike lark's Token it keeps str's fast __eq__, which
    matters for the dictionary lookups that resolve every operand).
    """

    def __new__(cls, text: str, start_pos: int):
        self = super().__new__(cls, text)
        self.start_pos, self.end_pos, self.column = start_pos, start_pos + len(text), start_pos + 1
        return self


def _n(x):
    return Name(x.value, x.start_pos) if type(x) is Token and x.type == "NAME" else x


class Mem:
    """A memory operand `space[reg]`."""

    __slots__ = ("space", "reg")

    def __init__(self, space: Name, reg):
        self.space, self.reg = space, reg


class Keyword:
    """A named operand `name=value` (wait=sN, signal=sN)."""

    __slots__ = ("name", "value")

    def __init__(self, name: Name, value):
        self.name, self.value = name, value


class Str:
    """A string literal operand, escapes already applied."""

    __slots__ = ("value",)

    def __init__(self, value: str):
        self.value = value


class Shape:
    """A parenthesised list of expressions `(d0, d1, ...)`."""

    __slots__ = ("items",)

    def __init__(self, items: tuple):
        self.items = items


def describe_operand(node: object) -> str:
    """How a diagnostic names a parsed operand: its value, its name, or what it is."""
    if type(node) is int:
        return str(node)
    if isinstance(node, str):
        return f"'{node}'"
    return {Mem: "a memory operand", Keyword: f"'{getattr(node, 'name', '')}=...'", Str: "a string",
            Shape: "a parenthesised list"}.get(type(node), "an expression")


class Statement:
    """One parsed line: optional label, then a mnemonic/directive/macro name and operands.

    Columns are 1-based within the parsed text.  `cols[i]` is where operand i
    starts; a token inside operand i sits at column `token.column + bases[i]`
    (operands parsed on their own count columns from their own start).
    `spans` holds each operand's [start, end) offsets (for macro arguments).
    Statements are cached and shared between lines and runs: nothing may change one.
    """

    __slots__ = ("label", "name", "operands", "cols", "bases", "spans", "spaced", "options")

    def __init__(self, label, name, operands, cols, bases, spans, spaced: bool = False):
        self.label, self.name, self.operands, self.cols, self.bases, self.spans = \
            label, name, operands, cols, bases, spans
        self.spaced = spaced  # written `NAME a, b` with no comma after the first operand
        self.options = sum(type(o) is Keyword for o in operands)  # how many `name=value`


class ParseFailure(Exception):
    """A syntax error at a 1-based column of the parsed text."""

    def __init__(self, message: str, column: int):
        super().__init__(message)
        self.message, self.column = message, column


def unescape(body: str) -> str:
    """Apply the backslash escapes of a string or character literal body."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(ESCAPES.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _Build(Transformer):
    """Rule callbacks run by the LALR parser itself (no tree is built)."""

    def start(self, c):
        label = c[0] if c and type(c[0]) is Name else None
        stmt = c[-1] if c and type(c[-1]) is tuple else None
        return label, stmt

    def label(self, c):
        return _n(c[0])

    def operand_only(self, c):
        return _n(c[0])

    def statement(self, c):
        return _n(c[0]), [_n(x) for x in c[1:] if x is not None], False

    def spaced_head(self, c):
        return _n(c[0]), [_n(x) for x in c[1:]], True

    def mem(self, c):
        return Mem(_n(c[0]), _n(c[1]))

    def keyword(self, c):
        return Keyword(_n(c[0]), _n(c[1]))

    def string(self, c):
        return Str(unescape(c[0][1:-1]))

    def shape(self, c):
        return Shape(tuple(_n(x) for x in c if x is not None and not (type(x) is Token and x.type == "COMMA")))

    def cond(self, c):
        return fold(("?", _n(c[0]), _n(c[1]), _n(c[2])))

    def binary(self, c):
        return climb([x.value if type(x) is Token and x.type in ("BINOP", "MINUS") else _n(x) for x in c])

    def neg(self, c):
        return fold(("-", _n(c[1])))

    def inv(self, c):
        return fold(("~", _n(c[0])))

    def lnot(self, c):
        return fold(("!", _n(c[0])))

    def number(self, c):
        return literal(c[0])

    def char(self, c):
        return ord(unescape(c[0][1:-1]))


@functools.lru_cache(maxsize=1)
def lark_parser() -> Lark:
    """The line parser, built once per process (strict: colliding terminals fail here)."""
    return Lark(GRAMMAR_PATH.read_text(), parser="lalr", lexer="contextual", strict=True,
                transformer=_Build(), maybe_placeholders=True, start=["start", "operand_only"])


_cache: dict[str, Statement | ParseFailure | None] = {}
_operand_cache: dict[str, object] = {}
_FAILED = object()


def clear_caches() -> None:
    """Forget every cached line and operand (the built parser is kept)."""
    _cache.clear()
    _operand_cache.clear()


def split_code(line: str) -> tuple[str, int]:
    """The line without its comment and surrounding blanks, and the column offset of what is left."""
    if '"' not in line and "'" not in line:
        cut, hash_ = line.find(";"), line.find("#")
        if hash_ >= 0 and (cut < 0 or hash_ < cut):
            cut = hash_
        if cut >= 0:
            line = line[:cut]
    code = line.strip(BLANKS)
    return code, (len(line) - len(line.lstrip(BLANKS))) if code else 0


def parse_line(code: str) -> Statement | None:
    """Parse one comment-free line; None for a blank line; raises ParseFailure on a syntax error."""
    hit = _cache.get(code, _cache)
    if hit is _cache:
        hit = _parse_split(code)
        if hit is None:
            hit = _parse(code)
        if len(_cache) >= CACHE_LIMIT:
            _cache.clear()
        _cache[code] = hit
    if type(hit) is ParseFailure:
        raise ParseFailure(hit.message, hit.column)  # a fresh one: a re-raise would grow its traceback
    return hit


def _parse_split(code: str) -> Statement | None:
    """Parse a line as its head plus separately parsed (and cached) operands.

    Only for lines without strings, character literals or parentheses (where
    commas separate operands and nothing else); None when it does not apply
    or any part fails, so that the whole-line parse gives the diagnostic.
    """
    if "(" in code or '"' in code or "'" in code:
        return None
    m = _HEAD.match(code)
    label_text, name_text = m.group(1), m.group(2)
    if label_text is None and name_text is None:
        return None
    label = name = None
    if label_text is not None:
        label = Name(label_text, 0)
    if name_text is None:
        return Statement(label, None, [], [], [], []) if m.end() == len(code) else None
    start = m.start(2)
    name = Name(name_text, start)
    rest = code[m.end():]
    if not rest.strip(BLANKS):
        return Statement(label, name, [], [], [], [])
    if rest[0] not in BLANKS:
        return None
    operands, cols, bases, spans = [], [], [], []
    pos = m.end()
    for piece in rest.split(","):
        text = piece.strip(BLANKS)
        node = _operand_cache.get(text, _FAILED) if text else _FAILED
        if node is _FAILED and text:
            node = _parse_operand(text)
        if node is _FAILED:
            return None
        begin = pos + len(piece) - len(piece.lstrip(BLANKS))
        operands.append(node)
        cols.append(begin + 1)
        bases.append(begin)
        spans.append((begin, begin + len(text)))
        pos += len(piece) + 1
    return Statement(label, name, operands, cols, bases, spans)


def _parse_operand(text: str):
    try:
        node = lark_parser().parse(text, start="operand_only")
    except (UnexpectedInput, RecursionError):
        node = _FAILED
    if len(_operand_cache) >= CACHE_LIMIT:
        _operand_cache.clear()
    _operand_cache[text] = node
    return node


def _parse(code: str) -> Statement | ParseFailure | None:
    try:
        label, stmt = lark_parser().parse(code, start="start")
    except UnexpectedInput as exc:
        return _failure(exc, code)
    except RecursionError:
        return ParseFailure("expression nested too deeply", 1)
    if stmt is None:
        return Statement(label, None, [], [], [], []) if label is not None else None
    name, items, spaced = stmt
    operands, cols, spans = [], [], []
    start = name.end_pos
    for item in items:
        if type(item) is Token and item.type == "COMMA":
            spans[-1] = (spans[-1][0], item.start_pos)
            start = item.end_pos
            continue
        if type(item) is Name:
            start = item.start_pos
        while code[start] in BLANKS:
            start += 1
        operands.append(item)
        cols.append(start + 1)
        spans.append((start, item.end_pos if type(item) is Name else len(code)))
    spans = [(a, a + len(code[a:b].rstrip(BLANKS))) for a, b in spans]
    return Statement(label, name, operands, cols, [0] * len(cols), spans, spaced)


def _failure(exc: UnexpectedInput, code: str) -> ParseFailure:
    if isinstance(exc, UnexpectedCharacters):
        return ParseFailure(f"syntax error: unexpected character {code[exc.pos_in_stream]!r}",
                            exc.column)
    assert isinstance(exc, UnexpectedToken)
    tok = exc.token
    expected = ", ".join(sorted({_describe(t) for t in exc.expected}))
    if tok.type == "$END":
        return ParseFailure(f"syntax error: unexpected end of line; expected {expected}", len(code) + 1)
    return ParseFailure(f"syntax error: unexpected {_describe(tok.type)} '{tok}'; expected {expected}",
                        tok.column)


def _describe(terminal: str) -> str:
    if terminal in TERMINAL_WORDS:
        return TERMINAL_WORDS[terminal]
    try:
        return f"'{lark_parser().get_terminal(terminal).pattern.value}'"
    except KeyError:
        return terminal
