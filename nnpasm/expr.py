"""Assembly-time integer expressions: C operators, C precedence, C truncating division.

An expression node is an int (a literal or a folded constant), a NAME token
(a symbol reference; lark Tokens are str subclasses carrying their column) or
a tuple: (op, a, b) for a binary operator, (op, a) for a unary one and
("?", cond, a, b) for the conditional, and ("#", token) for a literal too
long to hold.  Values are Python ints kept within [-2**64, 2**64]: every
64-bit pattern, signed or unsigned, fits, and a runaway `.set x, x * x` in a
`.rept` is an error instead of a billion-digit number.
"""
from __future__ import annotations

from typing import Callable

# C precedence, higher binds tighter; every binary operator is left-associative.
PRECEDENCE = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6,
              "<": 7, "<=": 7, ">": 7, ">=": 7, "<<": 8, ">>": 8,
              "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
MAX_SHIFT = 63
LIMIT = 1 << 64
MAX_LITERAL_CHARS = 66   # "0b" and 64 binary digits: any longer literal exceeds LIMIT


class EvalError(Exception):
    """An expression cannot be evaluated; `column` is 1-based in the parsed text, or None."""

    def __init__(self, message: str, column: int | None = None):
        super().__init__(message)
        self.message = message
        self.column = column


class Undefined(EvalError):
    """An expression names a symbol that is not (yet) defined."""

    def __init__(self, name: str, column: int | None):
        super().__init__(f"undefined symbol '{name}'", column)
        self.name = name


def c_div(a: int, b: int) -> int:
    """C integer division: the quotient truncated towards zero."""
    if b == 0:
        raise EvalError("division by zero")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """C remainder: a - b * c_div(a, b), with the sign of a."""
    return a - b * c_div(a, b)


def _shift_count(b: int) -> int:
    if not 0 <= b <= MAX_SHIFT:
        raise EvalError(f"shift count {b} out of range [0, {MAX_SHIFT}]")
    return b


BINARY: dict[str, Callable[[int, int], int]] = {
    "|": lambda a, b: a | b, "^": lambda a, b: a ^ b, "&": lambda a, b: a & b,
    "==": lambda a, b: int(a == b), "!=": lambda a, b: int(a != b),
    "<": lambda a, b: int(a < b), "<=": lambda a, b: int(a <= b),
    ">": lambda a, b: int(a > b), ">=": lambda a, b: int(a >= b),
    "<<": lambda a, b: a << _shift_count(b), ">>": lambda a, b: a >> _shift_count(b),
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "/": c_div, "%": c_mod,
}
UNARY: dict[str, Callable[[int], int]] = {"-": lambda a: -a, "~": lambda a: ~a, "!": lambda a: int(not a)}


def literal(text: str) -> object:
    """A number literal's value, or a ("#", text) node that fails when evaluated."""
    if len(text) > MAX_LITERAL_CHARS:
        return ("#", text)
    value = int(text, 0) if text[:2].lower() in ("0x", "0b") else int(text)
    return value if value <= LIMIT else ("#", text)


def _bounded(v: int) -> int:
    if not -LIMIT <= v <= LIMIT:
        raise EvalError("value out of the 64-bit range [-2**64, 2**64]")
    return v


def evaluate(node: object, lookup: Callable[[str], int]) -> int:
    """Value of an expression node; `lookup` maps a NAME token to its value or raises Undefined."""
    if type(node) is int:
        return node
    if type(node) is not tuple:
        return lookup(node)
    op = node[0]
    if op == "#":
        raise EvalError(f"number {node[1][:24]}{'...' if len(node[1]) > 24 else ''} exceeds 64 bits")
    if len(node) == 2:
        return _bounded(UNARY[op](evaluate(node[1], lookup)))
    if op == "?":
        return evaluate(node[2] if evaluate(node[1], lookup) else node[3], lookup)
    a = evaluate(node[1], lookup)
    if op == "&&":
        return int(bool(a) and bool(evaluate(node[2], lookup)))
    if op == "||":
        return int(bool(a) or bool(evaluate(node[2], lookup)))
    return _bounded(BINARY[op](a, evaluate(node[2], lookup)))


def climb(items: list) -> object:
    """Apply C precedence to a flat [operand, op, operand, op, ...] list (precedence climbing)."""
    pos = 1

    def parse(lhs, min_prec: int):
        nonlocal pos
        while pos < len(items) and PRECEDENCE[items[pos]] >= min_prec:
            op = items[pos]
            prec = PRECEDENCE[op]
            rhs = items[pos + 1]
            pos += 2
            while pos < len(items) and PRECEDENCE[items[pos]] > prec:
                rhs = parse(rhs, prec + 1)
            lhs = fold((op, lhs, rhs))
        return lhs

    return parse(items[0], 0)


def _no_symbols(name: str) -> int:
    raise Undefined(name, None)


def fold(node: tuple) -> object:
    """The node's value if its operands are numbers and it evaluates cleanly, else the node itself."""
    if any(type(child) is not int for child in node[1:]):
        return node
    try:
        return evaluate(node, _no_symbols)
    except EvalError:
        return node

