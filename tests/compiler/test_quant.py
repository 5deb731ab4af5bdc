"""compiler.quant: float scales to (multiplier, shift)."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler.errors import CompileError
from compiler.quant import REL_ERROR_BOUND, quantize_multiplier, quantize_multipliers
from tests import reference as ref

scales = st.floats(min_value=2.0 ** -32, max_value=2.0 ** 31 - 1,
                   allow_nan=False, allow_infinity=False)


@settings(max_examples=400, deadline=None)
@given(scales)
def test_ranges_and_error_bound(scale):
    m, s = quantize_multiplier(scale)
    assert 2**30 <= m < 2**31 and 0 <= s <= 62
    assert abs(m * 2.0 ** -s - scale) <= REL_ERROR_BOUND * scale


@settings(max_examples=200, deadline=None)
@given(st.integers(2**30, 2**31 - 1), st.integers(0, 62))
def test_exact_scales_round_trip(m, s):
    assert quantize_multiplier(math.ldexp(m, -s)) == (m, s)


@settings(max_examples=200, deadline=None)
@given(scales.filter(lambda v: v < 2.0 ** 10), st.integers(-(2**20), 2**20))
def test_requantised_value_is_the_rounded_product(scale, acc):
    m, s = quantize_multiplier(scale)
    got = int(ref.rshift_round(acc * m, s))
    assert abs(got - acc * scale) <= 0.5 + abs(acc) * scale * REL_ERROR_BOUND + 1e-9


def test_round_up_to_two_pow_31_is_renormalised():
    m, s = quantize_multiplier(1.0 - 2.0 ** -40)
    assert (m, s) == (2**30, 30)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan"), float("inf"), 2.0 ** -33, 2.0 ** 31 - 0.5, "x", None])
def test_unrepresentable_scales_are_clear_errors(bad):
    with pytest.raises(CompileError, match="scale"):
        quantize_multiplier(bad)


def test_per_channel():
    m, s = quantize_multipliers([0.5, 0.25, 3.0])
    assert m.tolist() == [2**30, 2**30, 3 * 2**29] and s.tolist() == [31, 32, 29]
    with pytest.raises(CompileError, match=r"scales\[1\]"):
        quantize_multipliers([0.5, -1.0])
    with pytest.raises(CompileError):
        quantize_multipliers([])
    assert m.dtype == np.int64
