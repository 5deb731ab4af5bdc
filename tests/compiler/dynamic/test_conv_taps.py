"""The dynamic conv's full-tap fold (compiler/dynamic/conv.py: `taps`): the window's taps in the
array's rows, `rows // c` taps a block, the NU running a 1x1 conv over the blocks.

Alone, a tile's rows are copied DDR -> DM with their padding and gathered into IBUF one run of taps a
DMA; in a fused chain each tap is loaded from the DM plane with its own padding.  Hypothesis draws
convs and chains with few channels and shapes inside their ranges: every result equals numpy on every
element, race-checked; removing any semaphore wait of either form is caught.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import Dim, ops
from compiler.dynamic.kernel import DynamicKernel
from compiler.assembler import assemble
from compiler.dynamic.conv import _Geometry, choose_rows
from compiler.dynamic.conv import program as lower_conv
from nnpsim.config import Config
from tests.helpers.dynamic import conv, kill_every_wait, rand8

pytestmark = pytest.mark.usefixtures("warm_engine")


def taps_kernel(op, rows: int | None = None, rq: bool = True, taps: bool = True) -> DynamicKernel:
    """op alone in three buffer sets, with the full-tap fold where it has one (taps=False: never)."""
    asm, files, r = lower_conv(op, Config(), rows_per_tile=rows, sets=3, rq=rq, taps=taps)
    return DynamicKernel(op, asm, assemble(asm, files, "dynamic.s"), Config(), r, files)


def test_the_fold_is_taken_only_where_it_saves_nu_passes():
    rng = np.random.default_rng(0)
    cfg = Config()
    for c, k, blocks in ((3, 3, 1), (16, 3, 5), (8, 5, 7), (1, 5, 1)):
        g = _Geometry(conv(rng, c=c, o=8, k=k, padding=k // 2), cfg, taps=True)
        assert g.taps and g.in_cb == blocks and (g.kh_nu, g.kw_nu) == (1, 1)
    for c, k in ((10, 3), (20, 3), (40, 3), (3, 1)):      # as many passes or more: the column fold stays
        assert not _Geometry(conv(rng, c=c, o=8, k=k, padding=k // 2), cfg, taps=True).taps
    stem = conv(rng, c=3, o=16, h=(16, 64), w=(16, 64))
    assert choose_rows(stem, cfg).taps and "full-tap" in compiler.build(stem).asm
    assert "full-tap" not in taps_kernel(stem, taps=False).asm


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 16), o=st.integers(1, 40), k=st.sampled_from([2, 3, 5]),
       stride=st.sampled_from([1, 2, 3]), padding=st.integers(0, 4), dilation=st.sampled_from([1, 2]),
       rows=st.sampled_from([None, 1, 3]), rq=st.booleans(),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_full_tap_fold_bit_exact_across_the_range(seed, c, o, k, stride, padding, dilation, rows, rq, draws):
    """Any padding (tiles wholly in it too), stride and dilation; nu.conv.rq or the VU's requantisation."""
    rng = np.random.default_rng(seed)
    lo = max(1, (k - 1) * dilation + 1 - 2 * padding)
    op = conv(rng, c, o, k, stride, padding, dilation, n=(1, 2), h=(lo, lo + 20), w=(lo, lo + 20))
    kern = taps_kernel(op, rows, rq)
    assert ("full-tap" in kern.asm) == _Geometry(op, Config(), taps=True).taps
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(20 * fh), lo + round(20 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


def _pair(rng, shape, c: int, k: int, dilation: int, o: int):
    """conv k x k (relu) -> conv 3x3, same padding: a fused chain whose first conv takes the fold."""
    q = lambda m: dict(multiplier=rng.integers(2**29, 2**31, m), shift=rng.integers(20, 24, m))   # noqa: E731
    return (ops.conv2d(shape, rng.integers(-20, 21, (o, c, k, k)), rng.integers(-99, 99, o),
                       padding=(k // 2) * dilation, dilation=dilation, x_zp=int(rng.integers(-10, 10)), lo=0, **q(o)),
            ops.conv2d((shape[0], o) + shape[2:], rng.integers(-20, 21, (o, o, 3, 3)), None, padding=1,
                       x_zp=int(rng.integers(-10, 10)), zp_out=3, **q(o)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 16), o=st.integers(1, 16), k=st.sampled_from([3, 5]),
       dilation=st.sampled_from([1, 2]),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_fused_chain_with_the_fold_bit_exact_across_the_range(seed, c, o, k, dilation, draws):
    rng = np.random.default_rng(seed)
    lo = (k - 1) * dilation + 1
    shape = (Dim("n", 1, 2), c, Dim("h", lo, lo + 30), Dim("w", lo, lo + 30))
    kern = compiler.build(*_pair(rng, shape, c, k, dilation, o))
    assert "dynamic fused chain" in kern.asm
    first = _Geometry(kern.op.ops[0], Config(), taps=True).taps
    assert ("full-tap" in kern.asm) == (first or _Geometry(kern.op.ops[1], Config(), taps=True).taps)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(30 * fh), lo + round(30 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))


@pytest.mark.parametrize("rq", [True, False])
def test_removing_any_wait_of_a_full_tap_fold_is_caught(rq):
    rng = np.random.default_rng(7 + rq)
    op = conv(rng, c=3, o=40, k=3, padding=1, h=(4, 40), w=(4, 24))
    kern = taps_kernel(op, rows=3, rq=rq)
    assert "full-tap" in kern.asm
    x = rand8(rng, (2, 3, 37, 19))            # several tiles an image, a remainder, two images
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=4 if rq else 6)


def test_removing_any_wait_of_a_fused_chain_with_the_fold_is_caught():
    rng = np.random.default_rng(9)
    shape = (Dim("n", 1, 2), 16, Dim("h", 4, 40), Dim("w", 4, 24))
    kern = compiler.build(*_pair(rng, shape, 16, 3, 1, 16))
    assert "dynamic fused chain" in kern.asm and "full-tap" in kern.asm
    # 6 rows a step at width 19; h + 1 = 36 a multiple of it: in the last step the first conv has no rows,
    # so the last conv's wait for its own store of two steps before is the only order (the mutant races)
    assert kern.rows_per_tile[19] == 6
    x = rand8(rng, (2, 16, 35, 19))
    np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=7)
