"""A dynamic global average pool whose plane does not fit VBUF at the largest shape
(compiler/dynamic/global_pool.py, _banded): each plane summed in bands of rows, the
partial sums added up by the CU.

Hypothesis draws shapes in range (bands of several rows, a remainder band, one-row planes) on a machine
with a small VBUF, integer and float forms; every output is compared with the static op's numpy model,
race-checked.  Inputs are offset per channel so that the averages cover the int8 range (saturation too),
and a plane built to round exactly half-way checks the integer rounding.  Each wait of the program is
removed in turn: the run must stop on a race or a deadlock (the CU's `ld` of a partial sum is a DDR read
the race checker orders like any command's).
"""
from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import CompileError, Dim, ops
from compiler.assembler import assemble
from compiler.dynamic.asm import Program, Scope
from compiler.dynamic.global_pool import lower_global_pool
from nnpsim import errors
from nnpsim.config import Config
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator

from tests.helpers.dynamic import wait_lines, without_wait

pytestmark = pytest.mark.usefixtures("warm_engine")
SMALL = Config(vbuf_bytes=4096).validate()     # bands of 17 rows at the largest width
N, H, W = Dim("n", 1, 2), Dim("h", 1, 90), Dim("w", 2, 70)


@functools.lru_cache(maxsize=None)
def row_pool(float_form: bool, c: int):
    floats = dict(scale_x=np.float32(0.05), scale_out=np.float32(0.03), zp_out=-4) if float_form else {}
    op = ops.global_avg_pool2d((N, c, H, W), x_zp=6 if float_form else 0, **floats)
    kern = compiler.build(op, config=SMALL)
    assert "in bands of" in kern.asm          # 90 x 70 does not fit two sets of a 4 KB VBUF
    return op, kern


def sum_semaphore(op, cfg: Config) -> str:
    """The semaphore a banded program's partial sums signal (its builder names it "sum")."""
    b = Scope(Program())
    lower_global_pool(b, op, cfg)
    return str(b.sems.names["sum"])


def offset_input(rng, shape) -> np.ndarray:
    """Random int8 around a random offset per channel: channel averages spread over [-128, 127]."""
    centre = rng.integers(-140, 141, (1, shape[1], 1, 1))
    return np.clip(centre + rng.integers(-40, 41, shape), -128, 127).astype(np.int8)


@pytest.mark.parametrize("float_form", [False, True])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.sampled_from([1, 3, 7]), n=st.integers(1, 2), h=st.integers(1, 90),
       w=st.integers(2, 70))
def test_a_banded_global_average_pool_is_bit_exact_across_the_range(float_form, seed, c, n, h, w):
    op, kern = row_pool(float_form, c)
    x = offset_input(np.random.default_rng(seed), (n, c, h, w))
    y = kern(x, check_races=True)
    assert y.shape == (n, c, 1, 1)
    np.testing.assert_array_equal(y, op.static({"n": n, "h": h, "w": w}).reference(x))


def test_the_integer_form_rounds_half_away_from_zero_and_saturates():
    op, kern = row_pool(False, 3)
    h, w = 80, 50                                  # n = 4000: several bands of a 4 KB VBUF
    x = np.zeros((1, 3, h, w), np.int8)
    x[0, 0].flat[:2000] = 1                        # s = 2000 = n / 2: 0.5 rounds to 1
    x[0, 1].flat[:2000] = -3                       # s = -6000: -1.5 rounds to -2
    x[0, 1].flat[2000:] = 0
    x[0, 2] = -128                                 # -128 exactly
    y = kern(x, check_races=True)
    np.testing.assert_array_equal(y.ravel(), [1, -2, -128])
    np.testing.assert_array_equal(y, op.static({"n": 1, "h": h, "w": w}).reference(x))


def test_a_banded_global_average_pool_at_the_default_vbuf():
    """A plane of 400 x 400 bytes (160 KB) does not fit two sets of the default 256 KB VBUF."""
    op = ops.global_avg_pool2d((1, 2, Dim("h", 300, 400), 400))
    kern = compiler.build(op)
    assert "in bands of" in kern.asm
    x = offset_input(np.random.default_rng(3), (1, 2, 377, 400))
    np.testing.assert_array_equal(kern(x, check_races=True), op.static({"h": 377}).reference(x))


@pytest.mark.parametrize("float_form", [False, True])
def test_removing_any_wait_of_a_banded_global_pool_is_caught(float_form):
    """Each wait removed in turn stops the run on a race or a deadlock; the CU's wait for one of the last
    bands' partial sums is caught as a race between the sum's store and the CU's `ld` of it."""
    op, kern = row_pool(float_form, 3)
    x = offset_input(np.random.default_rng(7), (2, 3, 90, 70))      # six bands a channel, two images
    want = op.reference(x)
    np.testing.assert_array_equal(kern(x, check_races=True), want)
    sites = wait_lines(kern.asm)
    assert len(sites) >= 5
    lines = kern.asm.splitlines()
    sum_wait = f"sem.wait {sum_semaphore(op, SMALL)}"
    ld_races = 0
    for k in sites:
        sim = Simulator(kern.config)
        sim.load(assemble(without_wait(kern.asm, k), kern.files, "mutant.s"))
        sim.write("x", x)
        with pytest.raises(SimError) as exc:
            sim.run(check_races=True, max_cycles=5_000_000)
        assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK), (lines[k], exc.value)
        if lines[k].strip() == sum_wait:
            assert exc.value.code == errors.DATA_RACE and "cu `ld`" in str(exc.value), exc.value
            ld_races += 1
    assert ld_races >= 1


def test_a_row_wider_than_vbuf_allows_is_refused_naming_it():
    op = ops.global_avg_pool2d((1, 2, Dim("h", 1, 8), 3000))
    with pytest.raises(CompileError, match=r"one row at the largest width \(3000 bytes\) does not fit 3 buffer "
                                           r"sets in VBUF \(4096 bytes\)"):
        compiler.build(op, config=Config(vbuf_bytes=4096).validate())
