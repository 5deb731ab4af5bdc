"""The synchronisation patterns of docs/architecture.md run race-free, compute y = max(x, 0), and need every wait.

The ```asm blocks of that page are the prelude (first) and one program body
per pattern.  Each body runs after the prelude with race checking on; then,
one at a time, each `wait=sN` is deleted and each `sem.wait` or `barrier`
becomes `nop`, and the race checker must report a data race.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from nnpasm import assemble
from nnpsim import SimError, Simulator, errors

pytestmark = pytest.mark.usefixtures("warm_engine")

PAGE = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"
PRELUDE, *PATTERNS = re.findall(r"^```asm\n(.*?)^```", PAGE.read_text(), re.S | re.M)


def run(body: str) -> Simulator:
    sim = Simulator()
    sim.load(assemble(PRELUDE + body, "architecture.md"))
    sim.run(check_races=True)
    return sim


def mutants(body: str) -> list[tuple[str, str]]:
    """(what was removed, the mutated body) for every wait of the body."""
    lines = body.splitlines()
    out = []
    for i, line in enumerate(lines):
        changed = [(m.group(0), line.replace(m.group(0), "")) for m in re.finditer(r", wait=s\d+", line)]
        if re.match(r"\s*(sem\.wait|barrier)\b", line):
            changed.append((line.split(";")[0].strip(), "        nop"))
        for what, new in changed:
            out.append((f"line {i + 1}: {what}", "\n".join(lines[:i] + [new] + lines[i + 1:]) + "\n"))
    return out


def test_the_page_has_the_patterns():
    assert len(PATTERNS) == 5
    assert ".buffer x" in PRELUDE and ".buffer y" in PRELUDE and "barrier" in PATTERNS[-1]


@pytest.mark.parametrize("body", PATTERNS, ids=[f"pattern{i}" for i in range(len(PATTERNS))])
def test_pattern_is_race_free_and_correct(body):
    sim = run(body)
    x = sim.read("x")
    assert (x < 0).sum() > 100 and (x > 0).sum() > 100
    np.testing.assert_array_equal(sim.read("y"), np.maximum(x, 0))


@pytest.mark.parametrize("body", PATTERNS, ids=[f"pattern{i}" for i in range(len(PATTERNS))])
def test_every_wait_is_needed(body):
    cases = mutants(body)
    assert cases
    for what, mutant in cases:
        with pytest.raises(SimError) as info:
            run(mutant)
        assert info.value.code == errors.DATA_RACE, (what, str(info.value))
