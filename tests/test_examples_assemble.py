"""Every example in examples/ assembles, declares its buffers and survives a binary round trip."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa_spec.program import Program
from nnpasm import assemble, disassemble

EXAMPLES = sorted((Path(__file__).resolve().parent.parent / "examples").glob("*.s"))
BUFFERS = {
    "add_relu.s": {"a", "b", "y"},
    "scalar_loop.s": {"result"},
    "dma_pad_layout.s": {"x", "xb", "y"},
    "matmul_db.s": {"A", "B", "bias", "out"},
    "requant_pool.s": {"x", "divisor", "q", "mp", "ap"},
}


def test_every_example_is_listed():
    assert {p.name for p in EXAMPLES} == set(BUFFERS)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_example_assembles(path):
    prog = assemble(path.read_text(), str(path))
    assert set(prog.buffers) == BUFFERS[path.name]
    for buf in prog.buffers.values():
        assert buf.addr % 64 == 0 and buf.addr + buf.nbytes <= prog.data_size
    assert len(prog.lines) == len(prog.code) and all(f == str(path) for f, _ in prog.lines)
    back = Program.from_bytes(prog.to_bytes())
    assert np.array_equal(back.code, prog.code) and back.buffers == prog.buffers
    again = assemble(disassemble(prog), "disassembled.s")
    assert np.array_equal(again.code, prog.code)
    assert bytes(again.data).ljust(again.data_size, b"\0") == bytes(prog.data).ljust(prog.data_size, b"\0")


def test_generated_inputs_are_not_constant():
    path = next(p for p in EXAMPLES if p.name == "matmul_db.s")
    prog = assemble(path.read_text(), str(path))
    a = prog.buffers["A"]
    values = np.frombuffer(prog.data, np.int8, a.nbytes, a.addr)
    assert len(np.unique(values)) > 200
