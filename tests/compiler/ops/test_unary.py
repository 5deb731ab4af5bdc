"""ops.lut (compiler/ops/unary.py): its numpy reference on every int8 input, composition, and its refusals."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import CompileError, Dim, ops


def test_lut_reference_is_the_table_at_x_plus_128():
    rng = np.random.default_rng(1)
    table = rng.integers(-128, 128, 256)
    x = np.arange(-128, 128, dtype=np.int8).reshape(2, 4, 32)
    y = ops.lut(x.shape, table).reference(x)
    assert y.dtype == np.int8
    assert all(int(y.flat[k]) == int(table[int(x.flat[k]) + 128]) for k in range(256))


def test_lut_clamp_and_composition():
    """A relu folded into a lut's clamp, and a lut after a lut, are the ops one after the other."""
    rng = np.random.default_rng(2)
    t1, t2 = rng.integers(-128, 128, 256), rng.integers(-128, 128, 256)
    x = np.arange(-128, 128, dtype=np.int8)
    a, b = ops.lut(x.shape, t1), ops.lut(x.shape, t2)
    clamped = a.__class__("lut", x.shape, lo=-5, hi=90, table=a.table)
    assert (clamped.reference(x) == np.clip(a.reference(x), -5, 90)).all()
    assert (a.then(b).reference(x) == b.reference(a.reference(x))).all()


def test_lut_table_is_read_only_int8():
    op = ops.lut((3,), np.arange(-128, 128, dtype=np.int64))
    assert op.table.dtype == np.int8 and not op.table.flags.writeable


@pytest.mark.parametrize("table, match", [
    (np.zeros(255, np.int8), "256 entries"),
    (np.zeros((16, 16), np.int8), "256 entries"),
    (np.full(256, 0.5), "must be integers"),
    (np.r_[np.zeros(9, np.int64), 128, np.zeros(246, np.int64)], r"table\[9\] = 128 is out of the int8 range"),
])
def test_lut_refuses_a_bad_table(table, match):
    with pytest.raises(CompileError, match=match):
        ops.lut((1, 2), table)


def test_lut_refuses_a_bad_shape_and_dynamic_shapes():
    with pytest.raises(CompileError, match="shape"):
        ops.lut((0, 3), np.zeros(256, np.int8))
    with pytest.raises(CompileError, match="no dynamic lowering"):
        ops.lut((Dim("n", 1, 8), 3), np.zeros(256, np.int8))


@pytest.mark.parametrize("act_first", [False, True])
@pytest.mark.parametrize("form", ["integer", "float"])
def test_times_self_is_the_mul_of_x_by_its_lut_image(form, act_first):
    """ops.times_self: one table equal to the mul (its own arithmetic) of every x by lut(x), in either order."""
    rng = np.random.default_rng(7)
    shape = (2, 3, 5, 7)
    act = ops.lut(shape, rng.integers(-128, 128, 256))
    kw = (dict(multiplier=1518500250, shift=38) if form == "integer" else
          dict(scale_a=0.031, scale_b=0.0042, scale_out=0.017))
    mul = ops.mul(shape, za=-3, zb=-128, zp_out=-20, lo=-100, hi=120, **kw)
    fused = ops.times_self(act, mul, act_first)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    a = act.reference(x)
    want = mul.reference(a, x) if act_first else mul.reference(x, a)
    np.testing.assert_array_equal(fused.reference(x), want)


def test_times_self_refuses_a_broadcast_mul():
    act = ops.lut((1, 4, 3, 3), np.arange(-128, 128))
    mul = ops.mul((1, 4, 3, 3), multiplier=1 << 30, shift=31, b_shape=(1, 4, 1, 1))
    with pytest.raises(CompileError, match="no same-shape mul"):
        ops.times_self(act, mul, False)
