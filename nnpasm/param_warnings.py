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

DIMS = range(4)


class Site(NamedTuple):
    """An instruction the check looks at: a setp/setpi or a command with rules."""

    index: int       # instruction index in .text
    mnemonic: str
    column: int      # the mnemonic's column in the line's code
    ctx: object      # the line (the assembler's LineContext)


class Scalar(NamedTuple):
    """A scalar parameter whose reset value 0 makes the command's result wrong."""

    param: str
    effect: str      # what 0 does

    def problem(self, state: _State) -> str | None:
        """Why the command is wrong here, or None."""
        if self.param in state.written:
            return None
        return f"reads {self.param}, never set (it resets to 0, so {self.effect})"


class Stride(NamedTuple):
    """A byte stride (reset 0) of a dimension whose size parameter may have been set above 1."""

    size: str
    stride: str
    effect: str      # what 0 does

    def problem(self, state: _State) -> str | None:
        """Why the command is wrong here, or None."""
        if self.stride in state.written or not state.long.get(self.size, False):
            return None
        return f"reads {self.stride}, never set (it resets to 0, so {self.effect})"


# Only strides where 0 is never meant: the destination's (every step along the dimension
# writes the same bytes) and a pooling window's.  A zero source stride is how kernels
# broadcast (the compiler's per-channel requant.pc tables, vu.divr divisors, constant
# DMA rows all rely on it), so those are not checked.
_VU_DEST = tuple(Stride(f"vu.n{k}", f"vu.d_stride{k}", f"every step along vu.n{k} writes the same bytes")
                 for k in DIMS)
_VU_WINDOW = tuple(Stride(f"vu.win_{d}", f"vu.win_stride_{d}", f"every step along vu.win_{d} reads the same bytes")
                   for d in "hw")
_DMA_DEST = tuple(Stride(f"dma.size{k}", f"dma.dst_stride{k}", f"every step along dma.size{k} writes the same bytes")
                  for k in DIMS)

# What each command reads that can silently be wrong at its reset value (isa_spec/nnp1.toml,
# docs/isa.md).  vu.clip reads only lo/hi, vu.requant.pc its (M, S) from b, vu.divr and vu.mov
# no scalar at all: their scalars are fine at reset.  NU parameters reset to usable values.
RULES: dict[str, tuple[Scalar | Stride, ...]] = {
    "vu.requant": (Scalar("vu.ma", "every element is multiplied by 0"), *_VU_DEST),
    "vu.requant.pc": _VU_DEST,
    "vu.add": (Scalar("vu.ma", "every element of a is multiplied by 0"),
               Scalar("vu.mb", "every element of b is multiplied by 0"), *_VU_DEST),
    "vu.mul": (Scalar("vu.ma", "every product is multiplied by 0"), *_VU_DEST),
    "vu.clip": _VU_DEST,
    "vu.pool.max": _VU_DEST + _VU_WINDOW,
    "vu.pool.sum": _VU_DEST + _VU_WINDOW,
    "vu.divr": _VU_DEST,
    "vu.mov": _VU_DEST,
    "dma": _DMA_DEST,
}
SETTERS = ("setp", "setpi")
WATCHED = frozenset(RULES) | frozenset(SETTERS)


class _State:
    """What the text before the current instruction does to the parameters."""

    def __init__(self):
        self.written: set[str] = set()
        self.long: dict[str, bool] = {}   # size parameter: may its last earlier write exceed 1?


def _rules(isa: Isa) -> dict[str, tuple[Scalar | Stride, ...]]:
    """RULES less any rule whose premise (the reset values) this ISA does not share."""
    reset = isa.param_defaults

    def holds(rule: Scalar | Stride) -> bool:
        if type(rule) is Scalar:
            return reset.get(rule.param, 0) == 0
        return reset.get(rule.stride, 0) == 0 and reset.get(rule.size, 0) <= 1
    return {m: tuple(r for r in rules if holds(r)) for m, rules in RULES.items() if m in isa.by_mnemonic}


def check(sites: list[Site], words: list[int], isa: Isa) -> list[tuple[Site, str]]:
    """The warnings for the watched instructions of a finished .text, in address order."""
    rules = _rules(isa)
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
            problem = rule.problem(state)
            param = rule.param if type(rule) is Scalar else rule.stride
            if problem is None or param in reported:
                continue
            reported.add(param)
            found.append((site, f"{site.mnemonic} {problem}; set it with setpi {param}, ..."))
    return found
