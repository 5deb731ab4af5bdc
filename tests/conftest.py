"""Shared test fixtures: compile the jitted engine once per session; the program builders are in tests/helpers/machine.py."""
from __future__ import annotations

import pytest

from tests.helpers.machine import ins, program, small_config


@pytest.fixture(scope="session")
def warm_engine():
    """Compile (or load from cache) the event engine once, before the first test that asks for it."""
    from nnpsim.simulator import Simulator
    sim = Simulator(small_config())
    sim.load(program([ins("nop"), ins("halt")]))
    sim.run()
    return sim
