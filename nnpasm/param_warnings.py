"""Static warnings: a command reads a parameter that still holds a reset value which spoils its result.

A kernel that forgets `setpi vu.ma, ...` before `vu.add` assembles and runs, and
quietly computes the wrong thing.  The check walks .text in address order.  A
parameter counts as set once any setp/setpi to it appears earlier in the text,
whatever path reaches the command, so loops and branches cannot make it warn
wrongly: a command is flagged only for a parameter that no earlier line sets.
Each parameter is reported once, at the first command that reads it unset:
one setpi before that command fixes every later one too.
"""
from __future__ import annotations

from typing import NamedTuple

from isa_spec import decode
from isa_spec.model import Isa
from isa_spec.param_rules import RULES, Rule, Scalar, checked_param, message, rules_for


class Site(NamedTuple):
    """An instruction the check looks at: a setp/setpi or a command with rules."""

    index: int       # instruction index in .text
    mnemonic: str
    column: int      # the mnemonic's column in the line's code
    ctx: object      # the line (the assembler's LineContext)


SETTERS = ("setp", "setpi")
WATCHED = frozenset(RULES) | frozenset(SETTERS)


class _State:
    """What the text before the current instruction does to the parameters."""

    def __init__(self):
        self.written: set[str] = set()
        self.long: dict[str, bool] = {}   # size parameter: may its last earlier write exceed 1?


def _unset(rule: Rule, state: _State) -> bool:
    """The rule's parameter is read at its reset value (a stride only where its size may exceed 1)."""
    if type(rule) is Scalar:
        return rule.param not in state.written
    return rule.stride not in state.written and state.long.get(rule.size, False)


def check(sites: list[Site], words: list[int], isa: Isa) -> list[tuple[Site, str]]:
    """The warnings for the watched instructions of a finished .text, in address order."""
    rules = rules_for(isa)
    names = {v: k for k, v in isa.params.items()}
    state, reported, found = _State(), set(), []
    setters: dict[int, tuple[str, bool]] = {}   # kernels repeat the same setpi words
    for site in sites:
        if site.mnemonic in SETTERS:
            word = int(words[site.index])
            if word not in setters:
                _, values = decode(word, isa)
                # A size known to be 0 or 1 makes its stride irrelevant; a register value may be anything.
                setters[word] = names[values["param"]], site.mnemonic == "setp" or values["imm"] not in (0, 1)
            name, long = setters[word]
            state.written.add(name)
            state.long[name] = long
            continue
        for rule in rules.get(site.mnemonic, ()):
            param = checked_param(rule)
            if param in reported or not _unset(rule, state):
                continue
            reported.add(param)
            found.append((site, message(site.mnemonic, rule)))
    return found
