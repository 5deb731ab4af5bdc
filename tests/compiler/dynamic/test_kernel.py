"""compiler/dynamic/kernel.py: a dynamic chain's clips folded into the op before them, by the static rule."""
import numpy as np
import pytest

import compiler
from compiler import Dim, ops


def conv(rng, shape, lo: int = -128, hi: int = 127):
    w = rng.integers(-20, 21, size=(8, shape[1], 3, 3))
    return ops.conv2d(shape, w, rng.integers(-500, 500, size=8), padding=1, x_zp=-2,
                      multiplier=rng.integers(2**29, 2**31, size=8), shift=np.full(8, 22), zp_out=3, lo=lo, hi=hi)


@pytest.mark.parametrize("lo, hi", [(-5, 40), (50, 60), (-128, -100)])
def test_a_clip_after_a_conv_folds_into_its_range_even_when_the_ranges_do_not_meet(lo, hi):
    """The conv's range is [-10, 30]: a clip to [50, 60] or [-128, -100] makes every output one value
    (the static lowering's compose_clamp), [-5, 40] narrows it; no op is left for the clip."""
    rng = np.random.default_rng(lo + 1000)
    shape = (Dim("n", 1, 1), 4, Dim("h", 8, 20), Dim("w", 8, 20))
    c = conv(rng, shape, lo=-10, hi=30)
    k = compiler.build(c, ops.clip(shape[:1] + (8,) + shape[2:], lo, hi))
    assert "vu.clip" not in k.asm          # no clip of its own: the conv's output stage clamps
    for s in (8, 13, 20):
        x = rng.integers(-128, 128, size=(1, 4, s, s)).astype(np.int8)
        want = np.clip(np.clip(c.make((1, 4, s, s)).reference(x), -10, 30), lo, hi)
        assert np.array_equal(k(x, check_races=True), want)
