"""The hand-written examples that compute on the NU and VU give numpy's answer, race-free."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from nnpasm import assemble
from nnpsim import Simulator

pytestmark = pytest.mark.usefixtures("warm_engine")

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def run_example(name: str) -> Simulator:
    """Assemble examples/<name>, run it with race checking on, return the simulator."""
    path = EXAMPLES / name
    sim = Simulator()
    sim.load(assemble(path.read_text(), str(path), include_dirs=[str(EXAMPLES)]))
    sim.run(check_races=True)
    return sim


def rshift_round(v: np.ndarray, s: int) -> np.ndarray:
    return (v + (1 << (s - 1))) >> s if s else v


def test_matmul_db_is_requantised_bias_plus_product():
    sim = run_example("matmul_db.s")
    a, b = sim.read("A").astype(np.int64), sim.read("B").astype(np.int64)
    bias = sim.read("bias").astype(np.int64)
    assert np.abs(a).sum() and np.abs(b).sum()
    acc = bias + (a - 3) @ b
    want = np.clip(rshift_round(acc * 1518500250, 40) - 5, -128, 127)
    assert np.array_equal(sim.read("out"), want.astype(np.int8))


def test_requant_pool_max_and_average():
    sim = run_example("requant_pool.s")
    x = sim.read("x").astype(np.int64)
    q = np.clip(rshift_round(x * 1518500250, 38) + 2, -128, 127)
    assert np.array_equal(sim.read("q"), q.astype(np.int8))
    windows = q.reshape(1, 4, 4, 2, 4, 2)
    assert np.array_equal(sim.read("mp"), windows.max(axis=(3, 5)).astype(np.int8))
    s = windows.sum(axis=(3, 5))
    assert np.array_equal(sim.read("ap"), (np.sign(s) * ((np.abs(s) + 2) // 4)).astype(np.int8))
