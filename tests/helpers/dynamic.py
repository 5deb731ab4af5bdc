"""Dynamic-shape kernels for the tests of compiler/dynamic/: a random conv over Dim ranges,
and semaphore-wait mutants of a dynamic kernel's assembly, each of which the race checker must stop."""
from __future__ import annotations

import re

import numpy as np
import pytest

from compiler import Dim, ops
from compiler.assembler import assemble
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator


def rand8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def conv(rng, c=8, o=16, k=3, stride=1, padding=1, dilation=1, n=(1, 2), h=(4, 24), w=(4, 24)):
    weight = rng.integers(-20, 21, size=(o, c, k, k))
    return ops.conv2d((Dim("n", *n), c, Dim("h", *h), Dim("w", *w)), weight, rng.integers(-5000, 5000, size=o),
                      stride=stride, padding=padding, dilation=dilation, x_zp=int(rng.integers(-10, 10)),
                      multiplier=rng.integers(2**29, 2**31, size=o), shift=rng.integers(20, 26, size=o),
                      zp_out=int(rng.integers(-20, 20)))


# The drain at the end only takes the stores' tokens so that none is left at halt: removing one of
# its waits changes no ordering, so it is not mutated.
def wait_lines(asm: str) -> list[int]:
    lines = asm.splitlines()
    end = next(k for k, line in enumerate(lines) if line.startswith("drain:"))
    return [k for k, line in enumerate(lines[:end]) if "wait=" in line or "sem.wait" in line]


def without_wait(asm: str, k: int) -> str:
    lines = asm.splitlines()
    if "sem.wait" in lines[k]:
        lines[k] = "        nop"
    else:
        lines[k] = re.sub(r", wait=s\d+", "", lines[k])
    return "\n".join(lines) + "\n"


def kill_every_wait(kern, inputs: dict, at_least: int) -> None:
    """Each wait removed (wait_lines, without_wait) in turn: the run must stop on a data race or a deadlock."""
    sites = wait_lines(kern.asm)
    assert len(sites) >= at_least
    for k in sites:
        sim = Simulator(kern.config)
        sim.load(assemble(without_wait(kern.asm, k), kern.files, "mutant.s"))
        for name, a in inputs.items():
            sim.write(name, a)
        with pytest.raises(SimError) as exc:
            sim.run(check_races=True, max_cycles=5_000_000)
        assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK), (kern.asm.splitlines()[k], exc.value)
