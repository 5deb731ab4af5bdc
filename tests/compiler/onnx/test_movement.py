"""Transpose, Slice, Split, Pad, Concat and nearest Resize imported from ONNX, compiled and run on the
simulator, against onnxruntime on random inputs and shapes: int8 graphs (QOperator style, onnxruntime
moves the int8 tensor itself) and QDQ graphs (DQ -> op -> Q), at ORT_ENABLE_ALL and ORT_DISABLE_ALL."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import CompileError, GraphModule, from_onnx

SCALE, ZP = np.float32(0.05), -3
LEVELS = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL, ort.GraphOptimizationLevel.ORT_DISABLE_ALL)


def _model(nodes, x_shape, outs, inits, qdq: bool):
    """A model x -> nodes -> outs; QDQ: x float, quantised and dequantised first, each output quantised."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]
    if qdq:
        inits += [numpy_helper.from_array(np.asarray(SCALE), "s"), numpy_helper.from_array(np.int8(ZP), "z")]
        nodes = ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["xq"]),
                  helper.make_node("DequantizeLinear", ["xq", "s", "z"], ["xd"])] + nodes
                 + [helper.make_node("QuantizeLinear", [o + "f", "s", "z"], [o]) for o in outs])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT if qdq else TensorProto.INT8, list(x_shape))
    ys = [helper.make_tensor_value_info(o, TensorProto.INT8, None) for o in outs]
    m = helper.make_model(helper.make_graph(nodes, "movement", [x], ys, inits),
                          opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 9
    return m


def _src(qdq: bool) -> str:
    return "xd" if qdq else "x"


def _out(o: str, qdq: bool) -> str:
    return o + "f" if qdq else o


def _check(model, x_shape, qdq: bool, seed: int = 0) -> None:
    """Compile the model, run it on random int8 data, compare every output with onnxruntime at both levels."""
    rng = np.random.default_rng(seed)
    q = rng.integers(-128, 128, x_shape, dtype=np.int8)
    feed = ((q.astype(np.float32) - ZP) * SCALE).astype(np.float32) if qdq else q
    lib = compiler.build(from_onnx(model))
    m = GraphModule(lib)
    m.set_input(0, q)
    m.run(check_races=True)
    for level in LEVELS:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = level
        want = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": feed})
        for k, w in enumerate(want):
            np.testing.assert_array_equal(m.get_output(k, quantized=True), w)


@pytest.mark.parametrize("qdq", [False, True])
def test_channel_shuffle(qdq):
    """ShuffleNet's shuffle: Reshape [N, C, H, W] -> [N, g, C/g, H, W], Transpose (0, 2, 1, 3, 4), Reshape back."""
    n, c, h, w, g = 1, 12, 7, 9, 3
    s, y = _src(qdq), _out("y", qdq)
    nodes = [helper.make_node("Reshape", [s, "shape5"], ["r5"]),
             helper.make_node("Transpose", ["r5"], ["t5"], perm=[0, 2, 1, 3, 4]),
             helper.make_node("Reshape", ["t5", "shape4"], [y])]
    inits = {"shape5": np.array([n, g, c // g, h, w], np.int64), "shape4": np.array([n, c, h, w], np.int64)}
    _check(_model(nodes, (n, c, h, w), ["y"], inits, qdq), (n, c, h, w), qdq)


@st.composite
def transposes(draw):
    rank = draw(st.integers(2, 5))
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=rank, max_size=rank)))
    return shape, tuple(draw(st.permutations(range(rank)))), draw(st.booleans())


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(transposes())
def test_random_transposes(case):
    shape, perm, qdq = case
    nodes = [helper.make_node("Transpose", [_src(qdq)], [_out("y", qdq)], perm=list(perm))]
    _check(_model(nodes, shape, ["y"], {}, qdq), shape, qdq)


@st.composite
def slices(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank)))
    axes = draw(st.lists(st.integers(-rank, rank - 1), min_size=1, max_size=rank, unique_by=lambda a: a % rank))
    starts, ends, steps = [], [], []
    for a in axes:
        d = shape[a % rank]
        step = draw(st.sampled_from([1, 1, 2, 3, -1, -2]))
        s = draw(st.integers(-d - 3, d + 3))
        e = draw(st.integers(-d - 3, d + 3))
        lo, hi = (0, d) if step > 0 else (-1, d - 1)
        cs, ce = (min(max(v + d if v < 0 else v, lo), hi) for v in (s, e))
        if (ce - cs) * step <= 0:         # an empty slice: ONNX allows it, a tensor of zero elements
            e = s + step if step > 0 else s - 1
            cs, ce = (min(max(v + d if v < 0 else v, lo), hi) for v in (s, e))
            if (ce - cs) * step <= 0:
                s, e = (0, d) if step > 0 else (d - 1, -d - 1)
        starts.append(s), ends.append(e), steps.append(step)
    return shape, starts, ends, axes, steps, draw(st.booleans())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices())
def test_random_slices(case):
    shape, starts, ends, axes, steps, qdq = case
    inits = {"st": np.array(starts, np.int64), "en": np.array(ends, np.int64), "ax": np.array(axes, np.int64),
             "sp": np.array(steps, np.int64)}
    nodes = [helper.make_node("Slice", [_src(qdq), "st", "en", "ax", "sp"], [_out("y", qdq)])]
    _check(_model(nodes, shape, ["y"], inits, qdq), shape, qdq)


@pytest.mark.parametrize("form", ["sizes", "equal13", "num_outputs18"])
def test_split(form):
    shape, qdq = (1, 10, 5, 6), form != "sizes"
    if form == "sizes":
        node = helper.make_node("Split", [_src(qdq), "sp"], [_out(o, qdq) for o in "abc"], axis=1)
        inits = {"sp": np.array([2, 5, 3], np.int64)}
    elif form == "equal13":
        node = helper.make_node("Split", [_src(qdq), "sp"], [_out(o, qdq) for o in "ab"], axis=-1)
        inits = {"sp": np.array([3, 3], np.int64)}
    else:          # opset 18: num_outputs, the last part smaller (10 = 4 + 4 + 2)
        node = helper.make_node("Split", [_src(qdq)], [_out(o, qdq) for o in "abc"], axis=1, num_outputs=3)
        inits = {}
    outs = ["a", "b", "c"] if form != "equal13" else ["a", "b"]
    _check(_model([node], shape, outs, inits, qdq), shape, qdq)


@pytest.mark.parametrize("qdq", [False, True])
def test_pad(qdq):
    shape = (1, 5, 7, 6)
    pads = np.array([0, 0, 1, 2, 0, 1, 3, -1], np.int64)
    value = np.float32(0.0) if qdq else np.int8(9)
    nodes = [helper.make_node("Pad", [_src(qdq), "p", "v"], [_out("y", qdq)], mode="constant")]
    _check(_model(nodes, shape, ["y"], {"p": pads, "v": np.asarray(value)}, qdq), shape, qdq)


def test_pad_value_must_be_representable():
    nodes = [helper.make_node("Pad", ["xd", "p", "v"], ["yf"], mode="constant")]
    model = _model(nodes, (1, 2, 3, 3), ["y"], {"p": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64),
                                                "v": np.asarray(np.float32(0.01))}, True)
    with pytest.raises(CompileError, match="constant_value 0.01.* is not a value of the int8 tensor"):
        from_onnx(model)


@pytest.mark.parametrize("axis", [0, 1, 2, 3])
def test_concat_any_axis(axis):
    shape = (2, 3, 5, 7)
    other = list(shape)
    other[axis] = 4
    nodes = [helper.make_node("Slice", ["x", "st", "en", "ax"], ["part"]),
             helper.make_node("Concat", ["x", "part"], ["y"], axis=axis)]
    inits = {"st": np.array([0], np.int64), "en": np.array([4], np.int64), "ax": np.array([axis], np.int64)}
    if shape[axis] < 4:
        inits["en"] = np.array([shape[axis]], np.int64)
    _check(_model(nodes, shape, ["y"], inits, False), shape, False)


@pytest.mark.parametrize("mode,nearest,scale", [("asymmetric", "floor", 2), ("half_pixel", "round_prefer_floor", 2),
                                                ("pytorch_half_pixel", "round_prefer_ceil", 3),
                                                ("align_corners", "round_prefer_floor", 1),
                                                ("asymmetric", "floor", 0.5)])
@pytest.mark.parametrize("qdq", [False, True])
def test_nearest_resize(mode, nearest, scale, qdq):
    shape = (1, 3, 6, 5)
    scales = np.array([1, 1, scale, scale], np.float32)
    nodes = [helper.make_node("Resize", [_src(qdq), "", "sc"], [_out("y", qdq)], mode="nearest",
                              coordinate_transformation_mode=mode, nearest_mode=nearest)]
    _check(_model(nodes, shape, ["y"], {"sc": scales}, qdq), shape, qdq)


def test_resize_by_sizes():
    shape = (1, 2, 5, 7)
    nodes = [helper.make_node("Resize", ["x", "", "", "sz"], ["y"], mode="nearest",
                              coordinate_transformation_mode="asymmetric", nearest_mode="floor")]
    _check(_model(nodes, shape, ["y"], {"sz": np.array([1, 2, 10, 21], np.int64)}, False), shape, False)


def test_irregular_resize_is_refused_clearly():
    nodes = [helper.make_node("Resize", ["x", "", "sc"], ["y"], mode="nearest",
                              coordinate_transformation_mode="half_pixel")]
    model = _model(nodes, (1, 2, 4, 4), ["y"], {"sc": np.array([1, 1, 1.5, 1.5], np.float32)}, False)
    with pytest.raises(CompileError, match="resize axis 2: the nearest index map"):
        compiler.build(from_onnx(model))


@st.composite
def linear_resizes(draw):
    """A Resize(linear) graph: sizes (or scales) up and down, integer or not, the height kept now and then;
    every coordinate mode; on int8, between DQ and Q, or after a QLinearConv (onnxruntime: NHWC, fixed point)."""
    c, h, w = draw(st.integers(1, 4)), draw(st.integers(1, 17)), draw(st.integers(2, 17))
    oh = draw(st.one_of(st.just(h), st.integers(1, 37)))
    ow = draw(st.integers(1, 37))
    scales = None
    if draw(st.booleans()):
        f = np.float32
        sh, sw = (f(draw(st.sampled_from([1.0, 2.0, 0.5, 1.5, 2.4, 0.75]))) for _ in range(2))
        oh, ow = int(sh * f(h)), int(sw * f(w))
        if oh < 1 or ow < 1:
            sh = sw = f(2)
            oh, ow = 2 * h, 2 * w
        scales = (f(1), f(1), sh, sw)
    mode = draw(st.sampled_from(["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]))
    return (1, c, h, w), (1, c, oh, ow), mode, scales, draw(st.sampled_from(["int8", "qdq", "conv"]))


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(linear_resizes(), st.integers(0, 2 ** 32 - 1))
def test_random_linear_resizes(case, seed):
    """Compiled and run: every output element onnxruntime's at its default level, and at ORT_DISABLE_ALL where
    the two levels compute alike (an int8 or QDQ Resize; after a QLinearConv the default level runs it in NHWC
    fixed point, ORT_DISABLE_ALL in NCHW float, and the program follows the default)."""
    from tests.onnx_helpers import linear_resize_model, ort_levels

    x_shape, out_shape, mode, scales, form = case
    model = linear_resize_model(x_shape, out_shape, mode, form, scales=scales, sx=SCALE, zx=ZP, sy=0.07, zy=4)
    x = np.random.default_rng(seed).integers(-128, 128, x_shape, dtype=np.int8)
    m = GraphModule(compiler.build(from_onnx(model)))
    m.set_input(0, x)
    m.run(check_races=True)
    enable, disable = ort_levels(model, {"x": x})
    np.testing.assert_array_equal(m.get_output(0, quantized=True), enable[0])
    if form != "conv":
        np.testing.assert_array_equal(m.get_output(0, quantized=True), disable[0])


def test_linear_resize_of_uint8():
    """A uint8 tensor (held as q - 128): onnxruntime's uint8 kernel, its truncation on the uint8 values."""
    from tests.onnx_helpers import linear_resize_model, ort_levels

    for form in ("int8", "conv"):
        model = linear_resize_model((1, 2, 5, 6), (1, 2, 11, 9), "half_pixel", form, dtype=TensorProto.UINT8)
        x = np.random.default_rng(4).integers(0, 256, (1, 2, 5, 6), dtype=np.uint8)
        m = GraphModule(compiler.build(from_onnx(model)))
        m.set_input(0, x)
        m.run(check_races=True)
        np.testing.assert_array_equal(m.get_output(0, quantized=True), ort_levels(model, {"x": x})[0][0])


def test_linear_resize_refusals():
    from tests.onnx_helpers import linear_resize_model

    model = linear_resize_model((1, 2, 4, 4), (1, 2, 8, 8), "tf_half_pixel_for_nn", "int8")
    with pytest.raises(CompileError, match="'tf_half_pixel_for_nn' for a linear resize"):
        from_onnx(model)
    model = linear_resize_model((1, 2, 4, 4), (1, 2, 8, 8), "half_pixel", "int8")
    model.graph.node[-1].attribute.append(helper.make_attribute("antialias", 1))
    with pytest.raises(CompileError, match="antialias and exclude_outside are not supported"):
        from_onnx(model)


@st.composite
def gathers(draw):
    rank = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 11), min_size=rank, max_size=rank)))
    axis = draw(st.integers(-rank, rank - 1))
    d = shape[axis % rank]
    if rank > 1 and draw(st.booleans()):          # (a scalar index of a 1-D tensor gives a 0-D one: refused)
        return shape, axis, np.array(draw(st.integers(-d, d - 1)), np.int64), draw(st.booleans())
    step = draw(st.sampled_from([1, 2, -1, -3]))
    first = draw(st.integers(0, d - 1))
    picks = list(range(first, d if step > 0 else -1, step))[:draw(st.integers(1, d))]
    signed = [p - d if draw(st.booleans()) else p for p in picks]        # negative indices count from the end
    return shape, axis, np.array(signed, draw(st.sampled_from([np.int32, np.int64]))), draw(st.booleans())


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(gathers())
def test_gather_of_constant_indices_is_a_slice(case):
    """A scalar index (SSD's boxes of its one image: then the axis dropped) or evenly spaced indices, either sign."""
    shape, axis, idx, qdq = case
    nodes = [helper.make_node("Gather", [_src(qdq), "idx"], [_out("y", qdq)], axis=axis)]
    model = _model(nodes, shape, ["y"], {"idx": idx}, qdq)
    assert not [n for n in from_onnx(model).nodes if n.op.kind not in ("slice", "reshape")]
    _check(model, shape, qdq)


def test_gather_of_indices_no_slice_picks_is_refused_in_one_message():
    nodes = [helper.make_node("Gather", ["x", "idx"], ["y"], axis=1)]
    for idx, says in (([0, 2, 1], r"indices \[0, 2, 1\]: the NPU gathers a scalar index or evenly spaced"),
                      ([[0, 1]], r"expected int32 / int64 indices in \[-5, 5\) as a scalar or a 1-D list"),
                      ([7], r"expected int32 / int64 indices in \[-5, 5\)")):
        with pytest.raises(CompileError, match=says):
            from_onnx(_model(nodes, (2, 5), ["y"], {"idx": np.array(idx, np.int64)}, False))
