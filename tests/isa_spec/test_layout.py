"""Layout specs: parsing, shapes, forward and inverse transforms."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.lowering.layout import blocked_layout, from_layout, to_layout
from isa_spec.layout import LayoutError, Step, compose, from_stored, parse_layout, stored_shape, to_stored


def _blocked_reference(x: np.ndarray, block: int) -> np.ndarray:
    """NCHW -> N, ceil(C/block), H, W, block with zero padding, written out with loops."""
    n, c, h, w = x.shape
    cb = -(-c // block)
    out = np.zeros((n, cb, h, w, block), x.dtype)
    for i in range(n):
        for ch in range(c):
            out[i, ch // block, :, :, ch % block] = x[i, ch]
    return out


def test_blocked_channels_matches_reference():
    rng = np.random.default_rng(1)
    x = rng.integers(-128, 128, (2, 37, 3, 5), dtype=np.int8)
    spec = "split(1,32) reorder(0,1,3,4,2)"
    assert stored_shape(spec, x.shape) == (2, 2, 3, 5, 32)
    stored = to_stored(spec, x)
    np.testing.assert_array_equal(stored, _blocked_reference(x, 32))
    assert stored.flags.c_contiguous
    np.testing.assert_array_equal(from_stored(spec, stored, x.shape), x)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70), st.integers(1, 4), st.integers(1, 4), st.sampled_from([1, 3, 8, 32]))
def test_blocked_activation_layout_is_the_padded_spec_without_its_padding(n, c, h, w, block):
    # the activation layout nc<b>hw<b> stores the same blocks as the weight-side spec split(1,b)
    # reorder(0,1,3,4,2) (zero-padded to whole blocks), minus the padding lanes of the last block:
    # per image, the full blocks as they are, then the last block's real channels innermost
    rng = np.random.default_rng(c * 1000 + h * 10 + w)
    x = rng.integers(-128, 128, (n, c, h, w), dtype=np.int8)
    padded = _blocked_reference(x, block)
    full, tail = c // block, c % block
    want = [np.concatenate([padded[i, :full].ravel(), padded[i, full, :, :, :tail].ravel() if tail else []])
            for i in range(n)]
    stored = to_layout(x, blocked_layout(block))
    np.testing.assert_array_equal(stored.ravel(), np.concatenate(want).astype(np.int8))
    np.testing.assert_array_equal(from_layout(stored, x.shape, blocked_layout(block)), x)


def test_pad_and_empty_spec():
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    np.testing.assert_array_equal(to_stored("pad(1,5)", x), [[0, 1, 2, 0, 0], [3, 4, 5, 0, 0]])
    np.testing.assert_array_equal(to_stored("", x), x)
    assert stored_shape("  ", (2, 3)) == (2, 3)


def test_parse_and_compose():
    steps = parse_layout("  split( 1 , 32 )reorder(0,1,3,4,2)   pad(0,4)")
    assert [(s.op, s.args) for s in steps] == [("split", (1, 32)), ("reorder", (0, 1, 3, 4, 2)), ("pad", (0, 4))]
    assert steps[1].pos == 17
    assert compose(steps) == "split(1,32) reorder(0,1,3,4,2) pad(0,4)"
    assert parse_layout(compose(steps)) == [Step(s.op, s.args, p) for s, p in zip(steps, (0, 12, 31))]


@pytest.mark.parametrize("spec, where", [
    ("split(1)", "position 0"),
    ("split(1,0)", "factor"),
    ("pad(0,4) frob(1)", "position 9"),
    ("reorder(0,0)", "permutation"),
    ("split(1,-2)", "non-negative"),
    ("split(1,32) )", "position 12"),
    ("split(a,2)", "'a'"),
])
def test_bad_specs(spec, where):
    with pytest.raises(LayoutError) as info:
        parse_layout(spec)
    assert where in str(info.value)


@pytest.mark.parametrize("spec, shape, where", [
    ("split(4,2)", (1, 2, 3), "axis 4 out of range"),
    ("pad(1,2)", (1, 3), "has size 3 > 2"),
    ("reorder(1,0)", (1, 2, 3), "needs 3 axes"),
])
def test_specs_that_do_not_fit(spec, shape, where):
    with pytest.raises(LayoutError) as info:
        stored_shape(spec, shape)
    assert where in str(info.value)


def test_from_stored_checks_shape():
    with pytest.raises(LayoutError, match="expected"):
        from_stored("split(0,4)", np.zeros((2, 4), np.int8), (9,))


@st.composite
def shape_and_steps(draw):
    shape = tuple(draw(st.lists(st.integers(0, 6), min_size=1, max_size=4)))
    cur, steps = list(shape), []
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["split", "pad", "reorder"]))
        if op == "reorder":
            perm = draw(st.permutations(range(len(cur))))
            steps.append(Step("reorder", tuple(perm)))
            cur = [cur[p] for p in perm]
        elif op == "split" and len(cur) < 6:
            axis, factor = draw(st.integers(0, len(cur) - 1)), draw(st.integers(1, 5))
            steps.append(Step("split", (axis, factor)))
            cur[axis:axis + 1] = [-(-cur[axis] // factor), factor]
        elif op == "pad":
            axis = draw(st.integers(0, len(cur) - 1))
            size = cur[axis] + draw(st.integers(0, 3))
            steps.append(Step("pad", (axis, size)))
            cur[axis] = size
    return shape, steps, tuple(cur)


@settings(max_examples=300, deadline=None)
@given(shape_and_steps(), st.sampled_from([np.int8, np.int32]), st.integers(0, 2**32 - 1))
def test_round_trip(case, dtype, seed):
    shape, steps, expect_shape = case
    spec = compose(steps)
    info = np.iinfo(dtype)
    x = np.random.default_rng(seed).integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    stored = to_stored(spec, x)
    assert stored.shape == expect_shape == stored_shape(spec, shape)
    assert stored.dtype == dtype
    # Padding is zero: the stored array holds exactly the logical elements plus zeros.
    assert np.count_nonzero(stored) == np.count_nonzero(x)
    back = from_stored(spec, stored, shape)
    assert back.dtype == dtype and back.shape == shape
    np.testing.assert_array_equal(back, x)
