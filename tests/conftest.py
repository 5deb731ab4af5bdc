"""Shared test fixtures: compile the jitted engine once per session; small program builders."""
from __future__ import annotations

import numpy as np
import pytest

from isa_spec import encode
from isa_spec.program import Program
from nnpsim.config import Config


@pytest.fixture(scope="session")
def warm_engine():
    """Compile (or load from cache) the event engine once, before the first test that asks for it."""
    from nnpsim.simulator import Simulator
    sim = Simulator(small_config())
    sim.load(program([ins("nop"), ins("halt")]))
    sim.run()
    return sim
