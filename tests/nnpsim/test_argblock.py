"""A dynamic program's notes (.target dynamic.*) are checked against its buffers when it is loaded
(nnpsim/argblock.py), and Simulator.write / read never move more bytes than the named buffer holds.

Before these checks, raising a Dim's upper bound in the notes, or a channel count in a shape note, let
Simulator.write put 4,752 bytes into a 768-byte buffer and overwrite its neighbours in DDR, silently."""
from __future__ import annotations

import numpy as np
import pytest

from isa_spec.program import Program
from nnpsim import argblock, errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator
from nnpsim.state import SPACE_DDR

from tests.helpers.compiled import seeds

pytestmark = pytest.mark.usefixtures("warm_engine")


def dynamic(**notes) -> Program:
    """The clip seed (x and relu: 1 8 h 5, h in [3, 9]) with some notes replaced."""
    prog = Program.from_bytes(seeds()["dynamic"])
    prog.config.update(notes)
    return prog


@pytest.mark.parametrize("notes, words", [
    ({"dynamic.dims": "h:3:90"}, "(1 8 h 5) needs 3600 bytes at the largest dims {'h': 90}, but the "
                                 "program's buffer"),
    ({"dynamic.buffer.x": "1 80 h 5"}, "needs 3600 bytes"),
    ({"dynamic.buffer.x": "1 8 q 5"}, "axis 'q' names no dim of the block"),
    ({"dynamic.buffer.x": "1 -8 h 5"}, "axis '-8' names no dim"),
    ({"dynamic.buffer.nowhere": "1 8 h 5"}, "dynamic.buffer.nowhere names no data buffer"),
    ({"dynamic.buffer.args": "1"}, "dynamic.buffer.args names no data buffer"),
    ({"dynamic.dims": "h:0:9"}, "dim h range [0, 9] is not inside [1, 2147483647]"),
    ({"dynamic.dims": "h:9:3"}, "dim h range [9, 3]"),
    ({"dynamic.dims": "h:3:9 g:1:2"}, "argument block 'args' is not an int32 buffer of 2 words"),
    ({"dynamic.args": "x"}, "argument block 'x' is not an int32 buffer"),
    ({"dynamic.buffer.x": "1 8 h:-9:0 5"}, "is -5 at the low end of the dims"),
    ({"dynamic.buffer.x": "1 8 h:1:40 5"}, "expected name:add:shift[:divisor]"),
])
def test_notes_that_disagree_with_the_buffers_are_refused_at_load(notes, words):
    with pytest.raises(SimError) as exc:
        Simulator().load(dynamic(**notes))
    assert exc.value.code == errors.BAD_PARAM and "\n" not in str(exc.value)
    assert words in str(exc.value), str(exc.value)


def test_a_write_never_leaves_its_buffer_whatever_the_notes_say(monkeypatch):
    """With the load-time check bypassed, a raised Dim bound still cannot make a write overrun: the
    write is refused (one SimError line) and DDR is unchanged."""
    monkeypatch.setattr(argblock, "check_notes", lambda sig, buffers: None)
    sim = Simulator()
    sim.load(dynamic(**{"dynamic.dims": "h:3:90"}))
    before = sim.memory.view(SPACE_DDR, 0, 1 << 16).copy()
    with pytest.raises(SimError, match=r"cannot write buffer x: 3600 bytes do not fit its 360$"):
        sim.write("x", np.ones((1, 8, 90, 5), np.int8))
    assert np.array_equal(before, sim.memory.view(SPACE_DDR, 0, 1 << 16))
    sim.write("x", np.ones((1, 8, 9, 5), np.int8))             # an in-range shape still works
    np.testing.assert_array_equal(sim.read("x"), np.ones((1, 8, 9, 5), np.int8))


def test_a_read_never_leaves_its_buffer(monkeypatch):
    monkeypatch.setattr(argblock, "check_notes", lambda sig, buffers: None)
    sim = Simulator()
    sim.load(dynamic(**{"dynamic.buffer.relu": "1 80 h 5"}))
    sim.write("x", np.ones((1, 8, 9, 5), np.int8))
    with pytest.raises(SimError, match="cannot read buffer relu: 3600 bytes do not fit its 360"):
        sim.read("relu")
