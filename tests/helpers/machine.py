"""The machine at the level of instruction words: small configurations, encoded programs, operand
strategies, and the comparison of the event engine with the cycle-stepped reference."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from isa_spec import encode
from isa_spec.program import Program
from nnpsim.config import Config
from nnpsim.state import Memory


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


def random_memory(cfg, seed):
    mem = Memory.for_config(cfg)
    mem.mem[:] = np.random.default_rng(seed).integers(0, 256, mem.mem.size, dtype=np.uint8)
    return mem


def assert_same(log_e, mem_e, log_s, mem_s):
    assert log_e.cycles == log_s.cycles
    assert log_e.instructions == log_s.instructions
    for name in ("cmd_agent", "cmd_issue", "cmd_start", "cmd_end", "cmd_regs", "cmd_params", "cmd_wait",
                 "cmd_signal", "cmd_signal2",
                 "cmd_bytes", "cmd_ddr_burst_bytes", "cmd_macs", "sync_kind", "sync_cycle", "sync_agent", "sync_sem",
                 "sync_cmd", "ctr_cycle", "ctr_id", "ctr_value", "stall_agent", "stall_reason",
                 "stall_start", "stall_end", "registers", "params"):
        assert np.array_equal(getattr(log_e, name), getattr(log_s, name)), name
    assert np.array_equal(mem_e.mem, mem_s.mem)


def field_values(fld):
    """A strategy for every legal operand value of a field."""
    k = fld.kind
    if k.cls == "enum":
        return st.sampled_from(sorted(set(k.values.values())))
    if k.cls == "sem_opt":
        return st.none() | st.integers(0, k.count - 1)
    lo, hi = fld.value_range()
    if k.cls == "pcrel":
        return st.integers(lo // k.scale, hi // k.scale).map(lambda v: v * k.scale)
    return st.integers(lo, hi)
