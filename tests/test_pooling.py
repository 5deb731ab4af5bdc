"""Average, global average and sum pooling on the VU's pooling accumulators (vu.pool.avg, vu.pool.acc),
compiled and run with race checking, against tests/reference.py and the ops' numpy models, bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.kernel import build
from tests import reference as ref
from tests.test_compiler_kernels import SETTINGS, rand8, run, seeds


@st.composite
def pools(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 23))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 23))
    return k, stride, pad, (draw(st.integers(1, 2)), draw(st.integers(1, 70)), h, w)


@settings(max_examples=30, **SETTINGS)
@given(pools(), seeds, st.sampled_from(["sum", "avg", "avg_nopad", "global", "global_f32"]))
def test_pools_on_the_accumulators(case, seed, mode):
    k, stride, pad, shape = case
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    if mode == "sum":
        op, want, used = ops.sum_pool2d(shape, k, stride, pad), ref.sum_pool2d(x, k, stride, pad), "vu.pool.acc"
    elif mode == "global":
        op, want, used = ops.global_avg_pool2d(shape), ref.global_avg_pool2d(x), "vu.pool.avg"
    elif mode == "global_f32":
        sx, sy = (2.0 ** rng.uniform(-6, 0, size=2)).astype(np.float32)
        op = ops.global_avg_pool2d(shape, x_zp=int(rng.integers(-128, 128)), scale_x=sx, scale_out=sy,
                                   zp_out=int(rng.integers(-128, 128)))
        want, used = op.reference(x), "vu.pool.acc"
    else:
        cip, zp = mode == "avg", int(rng.integers(-128, 128))
        op = ops.avg_pool2d(shape, k, stride, pad, cip, zp)
        want, used = ref.avg_pool2d(x, k, stride, pad, count_include_pad=cip, x_zp=zp), "vu.pool.avg"
    kernel = build(op)
    assert used in kernel.asm and "vu.pool.sum" not in kernel.asm and "vu.divr" not in kernel.asm
    got = run(kernel, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value", [-128, 127])
def test_extreme_inputs(value):
    """Constant extreme planes: sums at the far ends of their range, averages equal to the value."""
    shape = (1, 37, 30, 30)
    x = np.full(shape, value, np.int8)
    np.testing.assert_array_equal(run(build(ops.global_avg_pool2d(shape)), x), np.full((1, 37, 1, 1), value))
    got = run(build(ops.sum_pool2d(shape, 30, 1)), x)
    assert (got == value * 900).all() and got.dtype == np.int32
    avg = ops.avg_pool2d(shape, 3, 2, 1, count_include_pad=True, x_zp=-1 - value)   # padding: the other extreme
    np.testing.assert_array_equal(run(build(avg), x), avg.reference(x))


@pytest.mark.parametrize("float_form", [False, True])
def test_count_table_larger_than_a_quarter_of_vbuf_comes_by_tile(float_form):
    """30 x 31 per-position counts (3,720 bytes) on a 4 KiB VBUF: each tile loads its rows of the table."""
    from nnpsim.config import Config
    rng = np.random.default_rng(11)
    shape = (1, 3, 30, 31)
    f = dict(scale_x=np.float32(0.03), scale_out=np.float32(0.05), zp_out=4) if float_form else {}
    op = ops.avg_pool2d(shape, (2, 3), 1, (1, 1, 0, 1), False, 0 if not float_form else -3, **f)
    kernel = build(op, config=Config(vbuf_bytes=4096).validate())
    assert "counts of rows" in kernel.asm
    x = rand8(rng, shape)
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))
