"""Error codes raised inside jitted code, and the SimError that reports them.

Jitted code cannot build messages, so a unit kernel or the engine returns one
of these codes and fills an int64 `err` array:
    err[0] = code, err[1] = memory space id (or -1), err[2] = first byte,
    err[3] = last byte (inclusive), err[4] = parameter number or semaphore,
    err[5] = offending value, err[6], err[7] = code-specific extras.
The engine adds the unit, the instruction address and the cycle; Python turns
all of it into a SimError with a message that says what and where.
"""
from __future__ import annotations

OK = 0
OUT_OF_BOUNDS = 1        # a footprint leaves its memory
MISALIGNED = 2           # an address or stride breaks the unit's alignment
BAD_PARAM = 3            # a parameter out of its legal range (err[4] = param, err[5] = value)
NO_SUCH_MEMORY = 4       # a space id names a unit the configuration does not have
ILLEGAL_INSTRUCTION = 5  # undecodable word, or a unit index beyond the configuration
PC_OUT_OF_RANGE = 6      # the CU ran off its program
DEADLOCK = 7             # everything waits and nothing is in flight
CYCLE_LIMIT = 8          # the run passed max_cycles
ARITH_OVERFLOW = 9       # a VU intermediate would leave int64 (err[5] = element index)
DIV_BY_ZERO = 10         # vu.divr divisor <= 0 (err[2] = byte address of the divisor)
DATA_RACE = 11           # reported by the race checker, not by jitted units
BAD_SEMAPHORE = 12       # a semaphore number beyond the configuration
TARGET_MISMATCH = 13     # the program's .target names another machine (raised at load)

NAMES = {
    OUT_OF_BOUNDS: "out-of-bounds access",
    MISALIGNED: "misaligned access",
    BAD_PARAM: "bad command parameter",
    NO_SUCH_MEMORY: "no such memory",
    ILLEGAL_INSTRUCTION: "illegal instruction",
    PC_OUT_OF_RANGE: "pc out of program",
    DEADLOCK: "deadlock",
    CYCLE_LIMIT: "cycle limit exceeded",
    ARITH_OVERFLOW: "arithmetic overflow",
    DIV_BY_ZERO: "division by zero",
    DATA_RACE: "data race",
    BAD_SEMAPHORE: "no such semaphore",
    TARGET_MISMATCH: "built for another machine",
}


class SimError(Exception):
    """A simulated program did something the machine forbids; the message says what and where."""

    def __init__(self, message: str, code: int = 0, cycle: int | None = None, stats=None):
        super().__init__(message)
        self.code = code
        self.cycle = cycle
        self.stats = stats
