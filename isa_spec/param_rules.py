"""Parameters whose reset value silently spoils a command's result: the rules both warnings share.

`setpi vu.ma, ...` forgotten before `vu.add` gives a kernel that assembles,
runs race-free and writes all zeros.  The assembler (nnpasm.param_warnings,
statically) and the simulator (nnpsim.param_warnings, on the parameters each
command actually read) both warn from this one table, so the two cannot
disagree on what is suspicious.
"""
from __future__ import annotations

from typing import NamedTuple

from .model import Isa

DIMS = range(4)


class Scalar(NamedTuple):
    """A scalar parameter whose reset value 0 makes the command's result wrong."""

    param: str
    effect: str      # what 0 does


class Stride(NamedTuple):
    """A byte stride (reset 0) that is wrong on a dimension whose size is above 1."""

    size: str
    stride: str
    effect: str      # what 0 does


Rule = Scalar | Stride

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

# The float ops' scales reset to the bit pattern of 0.0, which the VU refuses (BAD_PARAM): not
# silent, but a run that stops on it is better caught when the kernel is assembled.
_ZERO_SCALE = "its float32 value is 0.0, which the VU refuses with BAD_PARAM"

# What each command reads that can silently be wrong at its reset value (docs/isa.md).
# vu.clip reads only lo/hi, vu.requant.pc its (M, S) from b, vu.requant.fpc its scales from b,
# vu.divr and vu.mov no scalar at all: their scalars are fine at reset (vu.fbias resets to
# 0.0, a legal offset).  NU parameters reset to usable values, but for the float mode's input scale.
RULES: dict[str, tuple[Rule, ...]] = {
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
    "vu.lut": _VU_DEST,
    "vu.lerp": _VU_DEST + _VU_WINDOW,
    "vu.requant.f": (Scalar("vu.fscale", _ZERO_SCALE), *_VU_DEST),
    "vu.requant.fpc": _VU_DEST,
    "vu.fadd": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), *_VU_DEST),
    "vu.fmul": (Scalar("vu.fscale", _ZERO_SCALE), *_VU_DEST),
    **{m: (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), Scalar("vu.fbias", _ZERO_SCALE),
           *_VU_DEST) for m in ("vu.fsub", "vu.fdiv", "vu.fmax", "vu.fmin")},
    "vu.pool.favg": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), *_VU_DEST, *_VU_WINDOW),
    "vu.pool.acc": _VU_DEST + _VU_WINDOW,
    "vu.pool.avg": _VU_DEST + _VU_WINDOW,
    "vu.slide.acc": _VU_DEST + _VU_WINDOW,
    "vu.slide.avg": _VU_DEST + _VU_WINDOW,
    "vu.slide.favg": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), *_VU_DEST, *_VU_WINDOW),
    "vu.softmax": (Scalar("vu.fscale", _ZERO_SCALE), *_VU_DEST),
    "vu.pool.fmean": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), *_VU_DEST, *_VU_WINDOW),
    "vu.faffine": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fbias", _ZERO_SCALE), *_VU_DEST),
    "vu.pool.faffavg": (Scalar("vu.fscale", _ZERO_SCALE), Scalar("vu.fscale_b", _ZERO_SCALE), *_VU_DEST,
                        *_VU_WINDOW),
    **{m: (Scalar("nu.fx_scale", "its float32 value is 0.0, which the NU refuses with BAD_PARAM"),)
       for m in ("nu.fconv", "nu.fconv.rq", "nu.fdwconv")},
    "dma": _DMA_DEST,
}


def checked_param(rule: Rule) -> str:
    """The parameter a rule flags when it was never written."""
    return rule.param if type(rule) is Scalar else rule.stride


def rules_for(isa: Isa) -> dict[str, tuple[Rule, ...]]:
    """RULES less any rule whose premise (the reset values) this ISA does not share."""
    reset = isa.param_defaults

    def holds(rule: Rule) -> bool:
        if type(rule) is Scalar:
            return reset.get(rule.param, 0) == 0
        return reset.get(rule.stride, 0) == 0 and reset.get(rule.size, 0) <= 1
    return {m: tuple(r for r in rules if holds(r)) for m, rules in RULES.items() if m in isa.by_mnemonic}


def message(mnemonic: str, rule: Rule) -> str:
    """The warning's text after the location: what was read and what it does."""
    param = checked_param(rule)
    return f"{mnemonic} reads {param}, never set (it resets to 0, so {rule.effect}); set it with setpi {param}, ..."
