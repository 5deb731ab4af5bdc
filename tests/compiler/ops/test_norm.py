"""ops.batch_norm (compiler/ops/norm.py): BatchNormalization between DequantizeLinear and QuantizeLinear, compiled.

The numpy model (compiler.reference.channel_affine_f32 after batch_norm_params) is held to an exact-rational
float32 model written here with tests/isa_reference.py's rounding; compiled kernels on random shapes whose
channels divide nothing (ranks 2 to 4, NCHW, NHWC and blocked DDR layouts, one VU or two) equal the model on
every element, race-checked, at the cost model's predicted cycle; removing any wait is caught.  Likewise
ops.batch_norm_global_avg (the BatchNormalization, a Relu and the float GlobalAveragePool as one
vu.pool.faffavg pool), whose exact model writes MLAS's summation order out.
onnxruntime itself is the judge of the model in tests/compiler/onnx/test_norm.py.
"""
from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import CompileError, Dim, ops
from compiler.reference import batch_norm_global_avg_f32, batch_norm_params, channel_affine_f32, global_sum_f32
from nnpsim.config import Config
from tests import isa_reference as ref
from tests.helpers.bn_tail import cancelling_planes, large_pairs
from tests.helpers.mutation import kill_all
from tests.helpers.semantics_doc import DOC

pytestmark = pytest.mark.usefixtures("warm_engine")
F32 = np.float32


def _params(rng, c: int) -> dict:
    return dict(scale=rng.normal(1, 0.5, c), bias=rng.normal(0, 1, c), mean=rng.normal(0, 2, c),
                var=rng.uniform(0.01, 4, c))


def _exact(x: int, za: int, sx, ns, nb, sy, zp: int, lo: int, hi: int) -> int:
    """One element in exact rationals, each float32 operation rounded once (ref.round_f32)."""
    fa = ref.round_f32((x - za) * Fraction(float(sx)))
    u = ref.round_f32(ref.round_f32(fa * Fraction(float(ns))) + Fraction(float(nb)))
    v = u if isinstance(u, float) else ref.round_f32(u / Fraction(float(sy)))
    v = min(max(v, -128 - zp), 127 - zp)
    return max(lo, min(hi, round(Fraction(v)) + zp))


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), exps=st.tuples(st.floats(-9, 0), st.floats(-9, 1)))
def test_the_numpy_model_is_the_exact_float32_one(seed, exps):
    rng = np.random.default_rng(seed)
    c = 6
    p = _params(rng, c)
    ns, nb = batch_norm_params(p["scale"], p["bias"], p["mean"], p["var"], F32(1e-5))
    x = rng.integers(-128, 128, (1, c, 16))
    za, zp = (int(v) for v in rng.integers(-128, 128, 2))
    sx, sy = F32(2.0 ** exps[0]), F32(2.0 ** exps[1])
    got = channel_affine_f32(x, za, sx, ns, nb, sy, zp, -128, 127)
    want = [[[_exact(int(v), za, sx, ns[k], nb[k], sy, zp, -128, 127) for v in x[0, k]] for k in range(c)]]
    np.testing.assert_array_equal(got, np.array(want, np.int8))


def test_docs_semantics_batch_norm_is_the_ops_reference():
    rng = np.random.default_rng(12)
    for shape in ((2, 9), (1, 5, 11), (2, 7, 3, 4)):
        p = _params(rng, shape[1])
        x = rng.integers(-128, 128, shape).astype(np.int8)
        q = dict(epsilon=1e-4, za=7, scale_x=F32(0.04), scale_out=F32(0.03), zp_out=-20, lo=-20, hi=100)
        np.testing.assert_array_equal(DOC["batch_norm_f32"](x, **p, **q), ops.batch_norm(shape, **p, **q).reference(x))


def test_the_fold_is_onnxruntimes_float32_one():
    """new_scale = f32(f32(1 / f32(sqrt(f32(var + eps)))) * scale), new_bias = f32(B - f32(mean * new_scale)):
    float64 sqrt and division of float32 values, rounded once, are the correctly rounded float32 ones."""
    rng = np.random.default_rng(4)
    p = _params(rng, 500)
    ns, nb = batch_norm_params(p["scale"], p["bias"], p["mean"], p["var"], F32(1e-3))
    v = [F32(float(F32(a)) + float(F32(1e-3))) for a in p["var"]]
    inv = [F32(1.0 / float(F32(math.sqrt(float(a))))) for a in v]
    want_s = np.array([F32(float(i) * float(F32(s))) for i, s in zip(inv, p["scale"])], F32)
    want_b = np.array([F32(float(F32(b)) - float(F32(float(F32(m)) * float(s))))
                       for b, m, s in zip(p["bias"], p["mean"], want_s)], F32)
    np.testing.assert_array_equal(ns, want_s)
    np.testing.assert_array_equal(nb, want_b)


SHAPES = st.one_of(st.tuples(st.integers(1, 3), st.integers(1, 90)),
                   st.tuples(st.integers(1, 2), st.integers(1, 70), st.integers(1, 60)),
                   st.tuples(st.integers(1, 2), st.integers(1, 70), st.integers(1, 17), st.integers(1, 23)))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=SHAPES, seed=st.integers(0, 2**32 - 1), relu=st.booleans(), layout=st.sampled_from(["nchw", "nhwc"]),
       vus=st.sampled_from([1, 2]))
def test_compiled_batch_norm_equals_the_model_at_the_predicted_cycle(shape, seed, relu, layout, vus):
    rng = np.random.default_rng(seed)
    za, zp = (int(v) for v in rng.integers(-128, 128, 2))
    op = ops.batch_norm(shape, **_params(rng, shape[1]), epsilon=1e-5, za=za, scale_x=F32(rng.uniform(0.01, 0.1)),
                        scale_out=F32(rng.uniform(0.01, 0.1)), zp_out=zp, lo=zp if relu else -128)
    if layout == "nhwc" and len(shape) == 4:
        op = replace(op, x_layout="nhwc", y_layout="nhwc")
    x = rng.integers(-128, 128, shape).astype(np.int8)
    kern = compiler.build(op, config=Config(vu_count=vus))
    y = kern(x, check_races=True)
    want = op.reference(x)
    np.testing.assert_array_equal(y, want)
    assert kern.predicted_cycles == kern.stats.cycles
    assert "vu.faffine" in kern.asm


def test_a_relu_after_it_is_its_clamp_and_layouts_change_on_the_way():
    """batch_norm then relu: one vu.faffine clamped at the zero point, no vu.clip; NHWC in, 32-channel blocks out."""
    rng = np.random.default_rng(8)
    x = rng.integers(-128, 128, (1, 40, 9, 7)).astype(np.int8)
    bn = ops.batch_norm(x.shape, **_params(rng, 40), za=-3, scale_x=0.05, scale_out=0.04, zp_out=-100)
    kern = compiler.build(bn, ops.relu(x.shape, zp=-100))
    np.testing.assert_array_equal(kern(x, check_races=True), np.maximum(bn.reference(x), -100))
    assert "vu.faffine" in kern.asm and "vu.clip" not in kern.asm
    moved = replace(bn, x_layout="nhwc", y_layout="nc32hw32")
    kern = compiler.build(moved)
    np.testing.assert_array_equal(kern(x, check_races=True), bn.reference(x))
    assert kern.predicted_cycles == kern.stats.cycles


@pytest.mark.parametrize("seed, shape, make, name", [
    (3, (1, 37, 9, 13), lambda rng, shape: ops.batch_norm(shape, **_params(rng, 37), za=5, scale_x=0.03,
                                                          scale_out=0.05, zp_out=-128, lo=-128), "batch_norm"),
    (6, (1, 300, 7, 7), lambda rng, shape: _pooled_op(rng, shape, True), "bnavg_pool2d")])
def test_removing_any_wait_of_a_batch_norm_kernel_is_caught(seed, shape, make, name):
    """The plain and the pooled BatchNormalization kernels: each wait the sync pass placed is needed."""
    rng = np.random.default_rng(seed)
    op = make(rng, shape)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    kern = compiler.build(op)
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_all(kern, [x], name)


def test_bad_arguments_are_refused_naming_them():
    p = _params(np.random.default_rng(1), 3)
    q = dict(scale_x=0.1, scale_out=0.1)
    with pytest.raises(CompileError, match=r"channel 1 folds to new_scale inf.*var -1e-05.*finite float32 pairs"):
        ops.batch_norm((1, 3, 4, 4), **dict(p, var=[1.0, -1e-5, 2.0]), **q)
    with pytest.raises(CompileError, match=r"mean must have one value per channel, shape \(3,\), got \(4,\)"):
        ops.batch_norm((1, 3, 4, 4), **dict(p, mean=np.zeros(4)), **q)
    with pytest.raises(CompileError, match="has no channel axis"):
        ops.batch_norm((5,), **p, **q)
    with pytest.raises(CompileError, match="holds a Dim; batch_norm has a static lowering only"):
        ops.batch_norm((1, 3, Dim("h", 1, 8), 4), **p, **q)
    with pytest.raises(CompileError, match="scale_out"):
        ops.batch_norm((1, 3, 4, 4), **p, scale_x=0.1, scale_out=-1.0)
    with pytest.raises(CompileError, match="scale must be numbers, got dtype <U1"):
        ops.batch_norm((1, 3, 4, 4), **dict(p, scale=["a", "b", "c"]), **q)


# ------------------------------------------------------------ batch_norm_global_avg (vu.pool.faffavg)

def _exact_pooled(x: np.ndarray, za: int, sx, ns, nb, relu: bool, sy, zp: int) -> np.ndarray:
    """batch_norm_global_avg in exact rationals, each float32 operation rounded once (ref.round_f32), the sum in
    MLAS's global order written out: four lanes from 0, folded (l0 + l2) + (l1 + l3), then the tail."""
    n_img, c, h, w = x.shape
    out = np.zeros((n_img, c), np.int64)
    for i in range(n_img):
        for k in range(c):
            vals = []
            for v in x[i, k].ravel():
                fa = ref.round_f32((int(v) - za) * Fraction(float(sx)))
                u = ref.round_f32(ref.round_f32(fa * Fraction(float(ns[k]))) + Fraction(float(nb[k])))
                vals.append(max(u, Fraction(0)) if relu else u)
            body = len(vals) // 4 * 4
            lanes = [Fraction(0)] * 4
            for j, v in enumerate(vals[:body]):
                lanes[j % 4] = ref.round_f32(lanes[j % 4] + v)
            total = ref.round_f32(ref.round_f32(lanes[0] + lanes[2]) + ref.round_f32(lanes[1] + lanes[3]))
            for v in vals[body:]:
                total = ref.round_f32(total + v)
            t = ref.round_f32(ref.round_f32(total / (h * w)) / Fraction(float(sy)))
            out[i, k] = round(min(max(t, -128 - zp), 127 - zp)) + zp
    return out.reshape(n_img, c, 1, 1).astype(np.int8)


def _pooled_op(rng, shape: tuple, relu: bool, **kw) -> ops.BatchNormPool:
    za, zp = (int(v) for v in rng.integers(-128, 128, 2))
    return ops.batch_norm_global_avg(shape, **_params(rng, shape[1]), epsilon=1e-5, za=za,
                                     scale_x=F32(rng.uniform(0.01, 0.1)), scale_out=F32(rng.uniform(0.01, 0.1)),
                                     zp_out=zp, relu=relu, **kw)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), relu=st.booleans(), hw=st.tuples(st.integers(1, 9), st.integers(1, 9)))
def test_the_pooled_numpy_model_is_the_exact_float32_one(seed, relu, hw):
    rng = np.random.default_rng(seed)
    shape = (2, 5) + hw
    op = _pooled_op(rng, shape, relu)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    want = _exact_pooled(x, op.x_zp, op.scale_x, op.new_scale, op.new_bias, relu, op.scale_out, op.zp_out)
    np.testing.assert_array_equal(op.reference(x), want)


def test_the_pooled_model_sums_in_mlas_order_not_another():
    """On cancelling planes (tests.helpers.bn_tail) the exact model agrees with the numpy one, and a left-to-right
    float32 sum would not: the test above can tell the order."""
    rng = np.random.default_rng(5)
    ns, nb = large_pairs(rng, 12)
    x = cancelling_planes(rng, 1, 12, 7, 7, code=60)
    got = batch_norm_global_avg_f32(x, 0, F32(0.05), ns, nb, False, F32(0.01), 0)
    np.testing.assert_array_equal(got, _exact_pooled(x, 0, F32(0.05), ns, nb, False, F32(0.01), 0))
    u = (x.reshape(12, 49).astype(F32) * F32(0.05)) * ns[:, None] + nb[:, None]
    plain = np.add.accumulate(u, axis=1, dtype=F32)[:, -1]
    assert (plain != global_sum_f32(u)).sum() >= 6


def test_docs_semantics_pooled_batch_norm_is_the_ops_reference():
    rng = np.random.default_rng(13)
    for shape, relu in (((2, 9, 7, 7), True), ((1, 5, 3, 2), False), ((1, 33, 1, 5), True)):
        p = _params(rng, shape[1])
        x = rng.integers(-128, 128, shape).astype(np.int8)
        q = dict(epsilon=1e-4, za=7, scale_x=F32(0.04), scale_out=F32(0.03), zp_out=-20, relu=relu)
        np.testing.assert_array_equal(DOC["batch_norm_global_avg_f32"](x, **p, **q),
                                      ops.batch_norm_global_avg(shape, **p, **q).reference(x))


POOL_SHAPES = st.tuples(st.integers(1, 2), st.integers(1, 80).filter(lambda c: c % 32), st.integers(1, 9),
                        st.integers(1, 11))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=POOL_SHAPES, seed=st.integers(0, 2**32 - 1), relu=st.booleans(), vus=st.sampled_from([1, 2]))
def test_compiled_pooled_batch_norm_equals_the_model_at_the_predicted_cycle(shape, seed, relu, vus):
    rng = np.random.default_rng(seed)
    op = _pooled_op(rng, shape, relu)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    kern = compiler.build(op, config=Config(vu_count=vus))
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    assert kern.predicted_cycles == kern.stats.cycles
    assert "vu.pool.faffavg" in kern.asm


def test_pooled_bad_arguments_are_refused_naming_them():
    p = _params(np.random.default_rng(1), 3)
    q = dict(scale_x=0.1, scale_out=0.1)
    with pytest.raises(CompileError, match=r"batch_norm_global_avg: channel 1 folds to new_scale inf"):
        ops.batch_norm_global_avg((1, 3, 4, 4), **dict(p, var=[1.0, -1e-5, 2.0]), **q)
    with pytest.raises(CompileError, match=r"shape must have 4 dimensions"):
        ops.batch_norm_global_avg((1, 3, 4), **p, **q)
    with pytest.raises(CompileError, match=r"relu must be a bool"):
        ops.batch_norm_global_avg((1, 3, 4, 4), **p, **q, relu=1)
    with pytest.raises(CompileError, match=r"holds a Dim"):
        ops.batch_norm_global_avg((Dim("n", 1, 4), 3, 4, 4), **p, **q)
