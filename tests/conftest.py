"""Shared test fixtures: compile the jitted engine once per session; small program builders."""
from __future__ import annotations

import numpy as np
import pytest

from isa_spec import encode
from isa_spec.program import Program
from nnpsim.config import Config

SMALL = dict(ddr_bytes=64 * 1024, dm_bytes=16 * 1024, ibuf_bytes=16 * 1024, wbuf_bytes=16 * 1024,
             abuf_bytes=16 * 1024, vbuf_bytes=8 * 1024)


def small_config(**overrides) -> Config:
    """A configuration with small memories (cheap to allocate and compare)."""
    return Config(**{**SMALL, **overrides}).validate()


def ins(mnemonic: str, **operands) -> int:
    """One encoded instruction word."""
    return encode(mnemonic, operands)


def program(words: list[int], data: bytes = b"", buffers=None, lines=None) -> Program:
    """A Program from encoded words (data at DDR address 0)."""
    return Program(np.array(words, dtype=np.uint64), data, 0, len(data), {}, buffers or {}, lines, {})


def setp_all(group: dict[str, int]) -> list[int]:
    """setpi instructions for every parameter in `group`."""
    return [ins("setpi", param=_param(name), imm=value) for name, value in group.items()]


def _param(name: str) -> int:
    from isa_spec import load_isa
    return load_isa().params[name]


@pytest.fixture(scope="session")
def warm_engine():
    """Compile (or load from cache) the event engine once, before the first test that asks for it."""
    from nnpsim.simulator import Simulator
    sim = Simulator(small_config())
    sim.load(program([ins("nop"), ins("halt")]))
    sim.run()
    return sim
