"""examples/add_relu.s, the first-kernel walk-through: y = relu(a + b) quantised, equal to numpy on random inputs."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from nnpasm import assemble
from nnpsim import SimError, Simulator
from nnpsim.cli import main as nnpsim_main

pytestmark = pytest.mark.usefixtures("warm_engine")

PATH = Path(__file__).resolve().parent.parent / "examples" / "add_relu.s"
SHAPE = (1, 16, 16, 16)
ZA, ZB, MA, MB, SHIFT, ZP_OUT = -3, 5, 32768, 52429, 16, -10


def expected(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The formula in the example's header, in int64."""
    v = (a.astype(np.int64) - ZA) * MA + (b.astype(np.int64) - ZB) * MB
    return np.clip(((v + (1 << (SHIFT - 1))) >> SHIFT) + ZP_OUT, ZP_OUT, 127).astype(np.int8)


@pytest.fixture(scope="module")
def program():
    return assemble(PATH.read_text(), str(PATH))


def run(program, a=None, b=None) -> Simulator:
    sim = Simulator()
    sim.load(program)
    if a is not None:
        sim.write("a", a)
        sim.write("b", b)
    sim.run(check_races=True)
    return sim


def test_builtin_data_gives_the_formula(program):
    sim = run(program)
    a, b, y = sim.read("a"), sim.read("b"), sim.read("y")
    assert len(np.unique(a)) > 200 and len(np.unique(b)) > 200
    assert np.array_equal(y, expected(a, b))
    assert (y == ZP_OUT).any() and len(np.unique(y)) > 50      # the ReLU bites, and not everywhere


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2 ** 32 - 1), lo=st.integers(-128, 127), hi=st.integers(-128, 127))
def test_random_inputs(program, seed, lo, hi):
    lo, hi = min(lo, hi), max(lo, hi)
    rng = np.random.default_rng(seed)
    a = rng.integers(lo, hi + 1, SHAPE, dtype=np.int8)
    b = rng.integers(-128, 128, SHAPE, dtype=np.int8)
    assert np.array_equal(run(program, a, b).read("y"), expected(a, b))


def test_the_cu_wait_is_what_joins_the_two_loads(program):
    """Without `sem.wait s1` the add may read a before its DMA has written it: the checker says so."""
    racy = PATH.read_text().replace("        sem.wait s1\n", "        nop\n")
    assert racy != PATH.read_text()
    sim = Simulator()
    sim.load(assemble(racy, "racy.s"))
    with pytest.raises(SimError, match=r"data race on vbuf0 .*dma0 .*vu0 `vu.add`"):
        sim.run(check_races=True)


def test_command_line_from_the_header(program, tmp_path, capsys):
    rng = np.random.default_rng(7)
    a, b = (rng.integers(-128, 128, SHAPE, dtype=np.int8) for _ in range(2))
    np.save(tmp_path / "a.npy", a)
    np.save(tmp_path / "b.npy", b)
    program.save(tmp_path / "add_relu.bin")
    code = nnpsim_main(["run", str(tmp_path / "add_relu.bin"), "--input", f"a={tmp_path / 'a.npy'}",
                        "--input", f"b={tmp_path / 'b.npy'}", "--output", f"y={tmp_path / 'y.npy'}"])
    assert code == 0, capsys.readouterr().err
    assert np.array_equal(np.load(tmp_path / "y.npy"), expected(a, b))
