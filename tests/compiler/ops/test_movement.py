"""The data-movement ops: their numpy references against plain Python indexing, their compiled
kernels against the references on random shapes (with the race checker), exact pricing, and the
argument checks."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compiler import CompileError, build, ops
from compiler.lowering.movement import dense_range, merged_transpose
from tests.helpers.semantics_doc import DOC

SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _data(rng, shape, dtype="int8"):
    lo, hi = (-128, 128) if dtype == "int8" else (-2 ** 31, 2 ** 31)
    return rng.integers(lo, hi, shape, dtype=dtype)


def _run(op, *xs):
    k = build(op)
    y = k(*xs, check_races=True)
    np.testing.assert_array_equal(y, op.reference(*xs))
    assert k.predicted_cycles == k.stats.cycles          # the cost model prices the DMA boxes exactly
    return k


def _loops(shape):
    return itertools.product(*[range(d) for d in shape])


def test_references_against_python_loops():
    rng = np.random.default_rng(0)
    x = _data(rng, (2, 3, 4, 5))
    t = ops.Transpose(x.shape, (2, 0, 3, 1))
    y = t.reference(x)
    assert all(y[i] == x[i[1], i[3], i[0], i[2]] for i in _loops(y.shape))
    s = ops.slice_op(x.shape, [-1, 4], [-10, 0], [1, 3], [-2, -3])       # channels 2, 0; columns 4, 1
    y = s.reference(x)
    assert y.shape == (2, 2, 4, 2)
    assert all(y[i] == x[i[0], 2 - 2 * i[1], i[2], 4 - 3 * i[3]] for i in _loops(y.shape))
    p = ops.Pad(x.shape, (0, 1, 2, -1, 1, 0, -1, 2), value=-7)
    y = p.reference(x)
    assert y.shape == (3, 4, 5, 6)
    for i in _loops(y.shape):
        src = (i[0], i[1] - 1, i[2] - 2, i[3] + 1)
        inside = all(0 <= v < d for v, d in zip(src, x.shape))
        assert y[i] == (x[src] if inside else -7)
    r = ops.resize_nearest(x.shape, (2, 3, 8, 15), (1, 1, 2, 3), "asymmetric", "floor")
    y = r.reference(x)
    assert all(y[i] == x[i[0], i[1], i[2] // 2, i[3] // 3] for i in _loops(y.shape))


def test_nearest_maps_follow_onnxruntime_rounding():
    # half_pixel x2: (o + 0.5) / 2 - 0.5 = -0.25, 0.25, 0.75 ...: round_prefer_floor keeps o // 2
    assert ops.nearest_map(3, 6, 2.0, "half_pixel", "round_prefer_floor") == (0, 0, 1, 1, 2, 2)
    # asymmetric ceil: o / 2 rounded up, clamped to the last index
    assert ops.nearest_map(3, 6, 2.0, "asymmetric", "ceil") == (0, 1, 1, 2, 2, 2)
    # align_corners: o * 2 / 5 = 0, .4, .8, 1.2, 1.6, 2 rounded
    assert ops.nearest_map(3, 6, 2.0, "align_corners", "round_prefer_floor") == (0, 0, 1, 1, 2, 2)
    # ties: 1.5 prefers floor or ceil (std::round is half away from zero)
    assert ops.nearest_map(4, 2, 0.5, "tf_half_pixel_for_nn", "round_prefer_floor") == (1, 3)
    assert ops.nearest_map(4, 2, 0.5, "tf_half_pixel_for_nn", "round_prefer_ceil") == (1, 3)
    assert ops.nearest_map(2, 4, 2.0, "half_pixel", "round_prefer_ceil") == (0, 0, 1, 1)
    assert ops.nearest_map(5, 5, 1.0, "half_pixel", "ceil") == tuple(range(5))


def test_merged_transpose():
    # ShuffleNet's shuffle [1, g, C/g, H, W] (0, 2, 1, 3, 4): the batch drops, H and W merge
    assert merged_transpose((1, 4, 29, 7, 9), (0, 2, 1, 3, 4)) == ((4, 29, 63), (1, 0, 2))
    assert merged_transpose((2, 3, 4), (0, 1, 2)) == ((24,), (0,))
    assert merged_transpose((1, 1), (1, 0)) == ((1,), (0,))


@st.composite
def transposes(draw):
    rank = draw(st.integers(1, 6))
    shape = tuple(draw(st.lists(st.integers(1, 11), min_size=rank, max_size=rank)))
    return shape, tuple(draw(st.permutations(range(rank)))), draw(st.sampled_from(["int8", "int8", "int32"]))


@SETTINGS
@given(transposes(), st.integers(0, 2 ** 31))
def test_random_transposes(case, seed):
    shape, perm, dtype = case
    _run(ops.Transpose(shape, perm, dtype), _data(np.random.default_rng(seed), shape, dtype))


@st.composite
def slices(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 40), min_size=rank, max_size=rank)))
    starts, steps, counts = [], [], []
    for d in shape:
        step = draw(st.sampled_from([1, 2, 3, 5, 70, -1, -2]))
        s = draw(st.integers(0, d - 1))
        room = (d - 1 - s) // step + 1 if step > 0 else s // -step + 1
        starts.append(s), steps.append(step), counts.append(draw(st.integers(1, room)))
    return shape, tuple(starts), tuple(steps), tuple(counts)


@SETTINGS
@given(slices(), st.integers(0, 2 ** 31))
def test_random_slices(case, seed):
    shape, starts, steps, counts = case
    _run(ops.Slice(shape, starts, steps, counts), _data(np.random.default_rng(seed), shape))


def _chain_ops(draw, first):
    """(a Slice or Transpose reading first's output, whether through a reshape to a shape hypothesis draws)."""
    n = first.output.size
    shape, reshaped = tuple(first.output.shape), draw(st.booleans())
    if reshaped:
        d = draw(st.sampled_from([d for d in range(1, n + 1) if n % d == 0]))
        shape = (d, n // d)
    if draw(st.booleans()):
        return ops.Transpose(shape, tuple(draw(st.permutations(range(len(shape)))))), reshaped
    return ops.Slice(shape, *draw(slices_of(shape))), reshaped


@st.composite
def slices_of(draw, shape):
    starts, steps, counts = [], [], []
    for d in shape:
        step = draw(st.sampled_from([1, 2, 3, -1]))
        s = draw(st.integers(0, d - 1))
        room = (d - 1 - s) // step + 1 if step > 0 else s // -step + 1
        starts.append(s), steps.append(step), counts.append(draw(st.integers(1, room)))
    return tuple(starts), tuple(steps), tuple(counts)


@SETTINGS
@given(slices(), st.data(), st.integers(0, 2 ** 31))
def test_composed_moves_are_the_two_in_turn(case, data, seed):
    """compose(first, second) is second on first's result read under second's input shape, and exists whenever
    second reads it under its own shape; its kernel is exact, race-checked and priced exactly."""
    shape, starts, steps, counts = case
    first = ops.Slice(shape, starts, steps, counts)
    if data.draw(st.booleans()):
        first = ops.Transpose(shape, tuple(data.draw(st.permutations(range(len(shape))))))
    second, reshaped = _chain_ops(data.draw, first)
    both = ops.compose(first, second)
    x = _data(np.random.default_rng(seed), shape)
    want = second.reference(first.reference(x).reshape(second.in_shape))
    assert both is not None or reshaped
    if both is None:
        return
    np.testing.assert_array_equal(both.reference(x), want)
    _run(both, x)


def test_two_transposes_that_swap_a_unit_axis_compose():
    """The identity, then (0, 1, 3, 2) of a (7, 31, 1, 38) tensor: one copy (numpy 2.4's unravel_index of the
    (7, 31, 38, 1) offsets, unflattened, gives wrong indices from element 7068 on)."""
    first = ops.Transpose((7, 31, 1, 38), (0, 1, 2, 3))
    second = ops.Transpose((7, 31, 1, 38), (0, 1, 3, 2))
    both = ops.compose(first, second)
    assert both is not None
    x = _data(np.random.default_rng(1), (7, 31, 1, 38))
    np.testing.assert_array_equal(both.reference(x), second.reference(first.reference(x)))


def test_a_reshape_across_a_slices_rows_does_not_compose():
    """Every third element of a 4 x 5 crop of 4 x 6, read flat: its offsets 0, 3, 7, ... are no affine map."""
    crop = ops.Slice((4, 6), (0, 0), (1, 1), (4, 5))
    assert ops.compose(crop, ops.Slice((20,), (0,), (3,), (7,))) is None
    both = ops.compose(crop, ops.Transpose((4, 5), (1, 0)))
    assert (both.base, both.strides) == (0, (1, 6))


def test_a_strided_copy_outside_its_input_is_refused():
    with pytest.raises(CompileError, match=r"reads elements 0\.\.13, outside the 12 "):
        ops.Strided((3, 4), (2, 2), 0, (12, 1))


@SETTINGS
@given(slices(), st.integers(0, 2 ** 31))
def test_semantics_page_agrees(case, seed):
    """docs/semantics.md's numpy functions (run by tests/compiler/test_reference_doc.py) agree with the ops."""
    shape, starts, steps, counts = case
    rng = np.random.default_rng(seed)
    x = _data(rng, shape)
    np.testing.assert_array_equal(DOC["slice_"](x, starts, steps, counts), ops.Slice(shape, starts, steps, counts).reference(x))
    perm = tuple(rng.permutation(len(shape)))
    np.testing.assert_array_equal(DOC["transpose"](x, perm), ops.Transpose(shape, perm).reference(x))
    pads = tuple(int(v) for v in rng.integers(-1, 3, 2 * len(shape)))
    if all(d + pads[k] + pads[k + len(shape)] >= 1 for k, d in enumerate(shape)):
        np.testing.assert_array_equal(DOC["pad"](x, pads, 5), ops.Pad(shape, pads, 5).reference(x))
    for mode, nearest in itertools.product(ops.movement.COORDINATE_MODES, ops.movement.NEAREST_MODES):
        n_in, n_out = shape[0], counts[0] + 1
        scale = np.float32(n_out) / np.float32(n_in)
        assert ops.nearest_map(n_in, n_out, scale, mode, nearest) == tuple(
            DOC["nearest_index"](o, scale, n_in, n_out, mode, nearest) for o in range(n_out))


@SETTINGS
@given(st.lists(st.integers(1, 9), min_size=1, max_size=5), st.data(), st.integers(0, 2 ** 31))
def test_random_pads(shape, data, seed):
    n = len(shape)
    pads = [data.draw(st.integers(-shape[k % n] + 1 if k < n else 0, 4)) for k in range(2 * n)]
    pads[n:] = [max(p, -(shape[k] + pads[k] - 1)) for k, p in enumerate(data.draw(
        st.lists(st.integers(-3, 4), min_size=n, max_size=n)))]
    _run(ops.Pad(tuple(shape), tuple(pads), value=data.draw(st.integers(-128, 127))),
         _data(np.random.default_rng(seed), tuple(shape)))


@SETTINGS
@given(st.lists(st.integers(1, 13), min_size=4, max_size=4), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 2 ** 31))
def test_random_upsamplings(shape, sh, sw, seed):
    n, c, h, w = shape
    op = ops.resize_nearest(shape, (n, c, h * sh, w * sw), (1, 1, sh, sw), "asymmetric", "floor")
    _run(op, _data(np.random.default_rng(seed), tuple(shape)))


@SETTINGS
@given(st.integers(1, 4), st.lists(st.integers(1, 9), min_size=3, max_size=3), st.integers(0, 2),
       st.integers(0, 2 ** 31))
def test_random_concats(parts, shape, axis, seed):
    rng = np.random.default_rng(seed)
    shapes = []
    for _ in range(parts):
        s = list(shape)
        s[axis] = int(rng.integers(1, 9))
        shapes.append(tuple(s))
    _run(ops.Concat(tuple(shapes), axis), *[_data(rng, s) for s in shapes])


@SETTINGS
@given(st.integers(2, 4), st.lists(st.integers(1, 37), min_size=3, max_size=3), st.integers(0, 2),
       st.integers(0, 2 ** 31), st.data())
def test_concats_with_constant_pieces(parts, shape, axis, seed, data):
    """Constant pieces (`consts`) are the op's own: its inputs are the other pieces, every piece lands in place
    (against numpy's concatenate of all of them), priced exactly."""
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(rng.integers(1, 9)) if d == axis else v for d, v in enumerate(shape)) for _ in range(parts)]
    const = sorted(data.draw(st.sets(st.integers(0, parts - 1), min_size=1, max_size=parts - 1)))
    arrays = [_data(rng, s) for s in shapes]
    op = ops.Concat(tuple(shapes), axis, consts=tuple((k, arrays[k]) for k in const))
    xs = [a for k, a in enumerate(arrays) if k not in const]
    assert [t.shape for t in op.inputs] == [s for k, s in enumerate(shapes) if k not in const]
    _run(op, *xs)
    np.testing.assert_array_equal(op.reference(*xs), np.concatenate(arrays, axis))


def test_constant_pieces_are_checked():
    with pytest.raises(CompileError, match=r"concat: constant piece 2 is not one of the 2 pieces"):
        ops.Concat(((1, 2), (1, 3)), 1, consts=((2, np.zeros((1, 2), np.int8)),))
    with pytest.raises(CompileError, match=r"constant piece 0 must be int8 of shape \(1, 2\), got int8 \(2,\)"):
        ops.Concat(((1, 2), (1, 3)), 1, consts=((0, np.zeros(2, np.int8)),))
    with pytest.raises(CompileError, match="every piece is a constant"):
        ops.Concat(((1, 2),), 1, consts=((0, np.zeros((1, 2), np.int8)),))


def test_shuffle_streams_near_its_bound():
    """The channel shuffle of a ShuffleNetV2 stage moves each byte once each way, in whole rows."""
    op = ops.Transpose((1, 2, 58, 28, 28), (0, 2, 1, 3, 4))
    k = _run(op, _data(np.random.default_rng(1), op.in_shape))
    assert k.stats.cycles <= 1.5 * k.roofline_cycles


def test_short_runs_are_read_as_a_dense_range():
    """A slice stepping by 2 along rows of 64 reads each row's range and picks on chip; one stepping by
    70 (a burst or more apart) and a plain copy read their elements directly."""
    assert dense_range((64, 2), (4, 32), 1, 64, 1 << 16) == (1,)
    assert dense_range((640, 70), (4, 9), 1, 64, 1 << 16) is None
    assert dense_range((64, 1), (4, 64), 1, 64, 1 << 16) is None
    assert dense_range((38, 1), (32, 32), 1, 64, 1 << 16) == (1, 0)       # a crop of short rows
    assert dense_range((64, -1), (4, 64), 1, 64, 1 << 16) == (1,)         # backwards


def test_bad_arguments_are_refused_clearly():
    with pytest.raises(CompileError, match=r"perm \[0, 0\] is not a permutation"):
        ops.Transpose((2, 3), (0, 0))
    with pytest.raises(CompileError, match="axis 1 selects no element"):
        ops.slice_op((4, 5), [3], [3], [1])
    with pytest.raises(CompileError, match="step 0 on axis 0"):
        ops.slice_op((4, 5), [0], [3], [0], [0])
    with pytest.raises(CompileError, match=r"pad axis 1: pads -3, -2 leave 0 elements of 5"):
        ops.Pad((4, 5), (0, -3, 0, -2))
    with pytest.raises(CompileError, match=r"value = 300 is out of range \[-128, 127\]"):
        ops.Pad((4, 5), (0, 1, 0, 1), value=300)
    with pytest.raises(CompileError, match="nearest_mode 'nearest'"):
        ops.nearest_map(4, 8, 2.0, "half_pixel", "nearest")
    with pytest.raises(CompileError, match="resize axis 1: the index map must"):
        ops.Resize((2, 3), ((0, 1), (0, 3)))


MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


@st.composite
def linear_cases(draw):
    """A linear resize: input and output sizes (up and down, integer and not, some axes kept), a coordinate
    mode, sizes or scales, and the form onnxruntime computes it in."""
    c, h, w = (draw(st.integers(1, n)) for n in (4, 19, 19))
    oh, ow = (draw(st.one_of(st.just(d), st.integers(1, 40))) for d in (h, w))
    by_scales = draw(st.booleans())
    if by_scales:                # scales like a model's (an integer factor or a float32 one), sizes follow
        sh, sw = (np.float32(draw(st.sampled_from([1.0, 2.0, 0.5, 1.7, 2.25, 0.8, 3.0]))) for _ in range(2))
        oh, ow = int(sh * np.float32(h)), int(sw * np.float32(w))
        assume(oh > 0 and ow > 0)        # onnxruntime's empty output: no tensor to compare
        scales = (np.float32(1), np.float32(1), sh, sw)
    else:
        scales = None
    return (1, c, h, w), (1, c, oh, ow), draw(st.sampled_from(MODES)), scales, draw(st.sampled_from(
        ["int8", "qdq", "conv"]))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(linear_cases(), st.integers(0, 2 ** 32 - 1))
def test_linear_resize_is_onnxruntimes(case, seed):
    """The numpy model of every form against onnxruntime at both levels: an int8 Resize (NCHW float, truncated),
    a QDQ one (float, quantised), one after a QLinearConv (ORT_ENABLE_ALL: NHWC, fixed point; ORT_DISABLE_ALL:
    NCHW float)."""
    from tests.onnx_helpers import linear_resize_model, ort_levels

    x_shape, out_shape, mode, scales, form = case
    x = np.random.default_rng(seed).integers(-128, 128, x_shape, dtype=np.int8)
    model = linear_resize_model(x_shape, out_shape, mode, form, scales=scales)
    enable, disable = ort_levels(model, {"x": x})
    f32 = np.float32
    s = scales if scales is not None else (1, 1, f32(out_shape[2]) / f32(x_shape[2]), f32(out_shape[3]) / f32(x_shape[3]))
    q = dict(za=-3, zp_out=5, scale_in=0.05, scale_out=0.07) if form == "qdq" else {}
    nchw = ops.resize_linear(x_shape, out_shape, s, mode, quantized=form == "qdq", **q)
    np.testing.assert_array_equal(nchw.reference(x), disable[0])
    layout = "nhwc" if form == "conv" else "nchw"
    np.testing.assert_array_equal(ops.resize_linear(x_shape, out_shape, s, mode, layout=layout,
                                                    quantized=form == "qdq", **q).reference(x), enable[0])


def test_linear_resize_forms_differ():
    """The forms are not one computation rounded alike: on one case each pair disagrees somewhere (so the
    tests above tell them apart)."""
    x = np.random.default_rng(3).integers(-128, 128, (1, 3, 7, 9), dtype=np.int8)
    s = (1, 1, np.float32(13) / np.float32(7), np.float32(20) / np.float32(9))
    ys = [ops.resize_linear(x.shape, (1, 3, 13, 20), s, layout=lay).reference(x) for lay in ("nchw", "nhwc")]
    assert (ys[0] != ys[1]).any()
    flat = ops.resize_linear((1, 3, 7, 9), (1, 3, 7, 20), (1, 1, 1, s[3]), layout="nhwc")
    assert flat.axes == (3, 1) and flat.form == "float"     # the height kept: W and C in float


def test_linear_resize_refuses_bad_arguments():
    with pytest.raises(CompileError, match="'tf_half_pixel_for_nn' for a linear resize"):
        ops.resize_linear((1, 1, 4, 4), (1, 1, 8, 8), (1, 1, 2, 2), "tf_half_pixel_for_nn")
    with pytest.raises(CompileError, match=r"a linear resize takes \[1, 1, scale_h, scale_w\]"):
        ops.resize_linear((1, 2, 4, 4), (1, 4, 8, 8), (1, 2, 2, 2))
    with pytest.raises(CompileError, match="resize axis 1: 2 -> 4"):
        ops.ResizeLinear((1, 2, 4, 4), (1, 4, 8, 8), (2, 3), (2, 2))
    with pytest.raises(CompileError, match="layout 'nwhc'"):
        ops.resize_linear((1, 1, 4, 4), (1, 1, 8, 8), (1, 1, 2, 2), layout="nwhc")
