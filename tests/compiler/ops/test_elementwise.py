"""ops.qdq_binary (qdq_add, sub, div, max, min) and constant b operands (b_const) of every binary op, compiled.

The numpy model (compiler.reference.qdq_binary_f32) is held to tests/isa_reference.py's exact-rational
float32 model; compiled kernels on random shapes that divide nothing (b same shape, per channel, per plane,
scalar; an input or a constant; reversed, for add b in QLinearAdd's A role) equal the model on every element,
race-checked, at the cost model's predicted cycle; removing any wait of such a kernel is caught.
"""
from __future__ import annotations


import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import CompileError, ops
from compiler.lowering.vu import FBIN_MNEMONIC
from compiler.reference import add_f32, qdq_binary_f32
from tests import isa_reference as ref
from tests.helpers.mutation import kill_all

pytestmark = pytest.mark.usefixtures("warm_engine")
F32 = np.float32
B_FORMS = {"same": lambda n, c, h, w: (n, c, h, w), "channel": lambda n, c, h, w: (1, c, 1, 1),
           "plane": lambda n, c, h, w: (1, 1, h, w), "scalar": lambda n, c, h, w: (1, 1, 1, 1),
           "image-channel": lambda n, c, h, w: (n, c, 1, 1)}


def _bits(v) -> int:
    return int(np.asarray(v, F32).view(np.uint32))


@settings(max_examples=30, deadline=None)
@given(mode=st.sampled_from(ops.FLOAT_BINARY), seed=st.integers(0, 2**32 - 1),
       exps=st.tuples(*[st.floats(-12, 3)] * 3))
def test_the_numpy_model_is_the_exact_float32_one(mode, seed, exps):
    rng = np.random.default_rng(seed)
    a, b = rng.integers(-128, 128, 64), rng.integers(-128, 128, 64)
    za, zb, zp = (int(v) for v in rng.integers(-128, 128, 3))
    sa, sb, sy = (F32(2.0 ** e) for e in exps)
    got = qdq_binary_f32(mode, a, b, za, zb, sa, sb, sy, zp, -128, 127)
    sign = -1 if mode == "qdq_add" else 1        # the float add is vu.fsub with b's scale negated
    q = {"fscale": _bits(sa), "fscale_b": _bits(sign * sb), "fbias": _bits(sy), "zp_out": zp, "lo": -128, "hi": 127}
    want = [ref._fbin_element(FBIN_MNEMONIC[mode], int(x) - za, int(y) - zb, q) for x, y in zip(a, b)]
    np.testing.assert_array_equal(got, want)


def _op(mode, shape, b_shape, const, reverse, rng):
    b = rng.integers(-128, 128, b_shape).astype(np.int8)
    kw = dict(za=int(rng.integers(-20, 20)), zb=-3, scale_a=F32(0.05), scale_b=F32(0.03),
              scale_out=F32(0.6 if mode == "div" else 0.07), zp_out=int(rng.integers(-20, 20)), lo=-120,
              b_shape=None if b_shape == shape else b_shape)
    if const:
        kw["b_const"] = b
    if mode == "add":
        return ops.add(shape, reverse=reverse, **kw), b
    if mode == "mul":
        return ops.mul(shape, **kw), b
    return ops.qdq_binary(mode, shape, reverse=reverse, **kw), b


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mode=st.sampled_from(ops.FLOAT_BINARY + ("add", "mul")), form=st.sampled_from(sorted(B_FORMS)),
       const=st.booleans(), reverse=st.booleans(), seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2),
       c=st.integers(1, 70), h=st.integers(1, 20), w=st.integers(1, 45))
def test_compiled_binary_ops_equal_the_model_at_the_predicted_cycle(mode, form, const, reverse, seed, n, c, h, w):
    rng = np.random.default_rng(seed)
    shape = (n, c, h, w)
    op, b = _op(mode, shape, B_FORMS[form](*shape), const, reverse and mode in ("sub", "div", "add"), rng)
    a = rng.integers(-128, 128, shape).astype(np.int8)
    ins = (a,) if const else (a, b)
    kern = compiler.build(op)
    y = kern(*ins, check_races=True)
    want = op.reference(*ins)
    np.testing.assert_array_equal(y, want)
    assert kern.predicted_cycles == kern.stats.cycles
    if op.reverse and mode == "add":        # b in QLinearAdd's A role: add_f32 with the operands exchanged
        ab = np.broadcast_to(op.b_const if const else b, shape)
        np.testing.assert_array_equal(want, add_f32(ab, a, op.zb, op.za, op.fscales[1], op.fscales[0],
                                                    op.fscales[2], op.zp_out, op.lo, op.hi))
    elif op.reverse:
        assert not np.array_equal(want, ops.qdq_binary(mode, shape, za=op.za, zb=op.zb, scale_a=op.fscales[0],
                                                       scale_b=op.fscales[1], scale_out=op.fscales[2],
                                                       zp_out=op.zp_out, lo=op.lo, b_shape=op.b_shape,
                                                       b_const=op.b_const).reference(*ins)) or a.size < 8


@pytest.mark.parametrize("mode, const", [("sub", True), ("div", False), ("max", False), ("qdq_add", False)])
def test_removing_any_wait_of_a_qdq_binary_kernel_is_caught(mode, const):
    rng = np.random.default_rng(3)
    shape = (1, 37, 9, 13)
    op, b = _op(mode, shape, (1, 37, 1, 1) if const else shape, const, mode == "sub", rng)
    a = rng.integers(-128, 128, shape).astype(np.int8)
    ins = [a] if const else [a, b]
    kern = compiler.build(op)
    np.testing.assert_array_equal(kern(*ins, check_races=True), op.reference(*ins))
    kill_all(kern, ins, f"qdq {mode}{' const' if const else ''}")


def test_bad_arguments_are_refused_naming_them():
    with pytest.raises(CompileError, match="mode must be one of qdq_add, sub, div, max, min, got 'pow'"):
        ops.qdq_binary("pow", (1, 2, 3, 4), scale_a=0.1, scale_b=0.1, scale_out=0.1)
    with pytest.raises(CompileError, match=r"b_const must be an int8 array of shape \(1, 2, 1, 1\), got int8 \(2,\)"):
        ops.qdq_binary("sub", (1, 2, 3, 4), scale_a=0.1, scale_b=0.1, scale_out=0.1, b_shape=(1, 2, 1, 1),
                       b_const=np.zeros(2, np.int8))
    with pytest.raises(CompileError, match="scale_out"):
        ops.qdq_binary("max", (1, 2, 3, 4), scale_a=0.1, scale_b=0.1, scale_out=0.0)
    with pytest.raises(CompileError, match="add: reverse=True needs the float form"):
        ops.add((1, 2, 3, 4), ma=1, mb=1, shift=0, reverse=True)
    with pytest.raises(CompileError, match="add: reverse must be True or False, got 1"):
        ops.add((1, 2, 3, 4), scale_a=0.1, scale_b=0.1, scale_out=0.1, reverse=1)
    with pytest.raises(CompileError, match=r"scale_b / scale_out"):
        ops.add((1, 2, 3, 4), scale_a=0.1, scale_b=1e-30, scale_out=1e30, reverse=True)
    with pytest.raises(CompileError, match=r"b_const must be an int8 array of shape \(1, 2, 3, 4\), got int32"):
        ops.add((1, 2, 3, 4), ma=1, mb=1, shift=0, b_const=np.zeros((1, 2, 3, 4), np.int32))


def test_a_constant_operand_is_not_a_kernel_input():
    op = ops.mul((1, 3, 4, 5), multiplier=1, shift=0, b_shape=(1, 3, 1, 1), b_const=np.ones((1, 3, 1, 1), np.int8))
    assert [t.name for t in op.inputs] == ["a"]
    kern = compiler.build(op)
    a = np.arange(60, dtype=np.int8).reshape(1, 3, 4, 5)
    np.testing.assert_array_equal(kern(a, check_races=True), a)
