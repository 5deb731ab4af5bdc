"""network.partition's islands: per-tensor elementwise ops of one value as one lut.  A conv's SiLU (x * sigmoid(x))
or HardSwish (x * hardsigmoid(x)), imported as a lut and a mul that both read the conv's output, and QOperator's
GELU chain become one lut in the conv's epilogue (ops.unary.composed), bit-exact with onnxruntime at both
optimisation levels on shapes hypothesis draws (sizes that do not divide the 32x32 array), with the cost model's
prediction equal to the simulated cycles."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import compiler
from compiler import models, ops
from compiler.graph import Graph
from compiler.models import Net
from compiler.network.partition import channel_shuffles, partition
from compiler.network.storage import alias
from tests.helpers.activations import ACTS, assert_as_ort, ort_levels, run_both, self_product_model
from tests.helpers.networks import run_graph

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _int8(g, want: np.ndarray) -> np.ndarray:
    return _int8_of(g, 0, want)


def _int8_of(g, k: int, want: np.ndarray) -> np.ndarray:
    return g.values[g.outputs[k]].quant.quantize(want)


@pytest.mark.parametrize("act", ACTS)
@SETTINGS
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 37), st.integers(1, 12), st.integers(1, 35)),
       out_ch=st.integers(1, 45), act_first=st.booleans(), seed=st.integers(0, 2**16))
def test_a_conv_times_its_activation_is_one_kernel_bit_exact_with_onnxruntime(act, shape, out_ch, act_first, seed):
    rng = np.random.default_rng(seed)
    m = self_product_model(shape, out_ch, act, rng, act_first)
    g = compiler.from_onnx(m)
    assert [n.op.kind for n in g.nodes] == ["conv2d", "lut", "mul"]
    [group] = partition(g)
    assert [o.kind for o in group.ops] == ["conv2d", "lut"] and len(group.nodes) == 3
    lib = compiler.build(g)
    # one kernel (the layout plan may add a transform of the graph input where the conv pays less in NHWC)
    assert [lay["ops"] for lay in lib.layers if not lay["name"].startswith("layout.")] == ["conv2d + lut"]
    assert "vu.lut" in lib.asm and "vu.fmul" not in lib.asm
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for level, w in zip(("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"), want):
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), _int8(g, w), err_msg=level)
    assert lib.predicted_cycles == mod.stats.cycles


def test_the_rule_needs_the_conv_output_read_by_the_lut_and_the_mul_alone():
    """The conv's output also a graph output: it goes to DDR anyway, and the lut and the mul are one lut
    kernel of their own that reads it (still exact)."""
    rng = np.random.default_rng(3)
    m = self_product_model((1, 5, 6, 7), 9, "silu", rng)
    m.graph.output.append(helper.make_tensor_value_info("cq", TensorProto.INT8, [1, 9, 6, 7]))
    g = compiler.from_onnx(m)
    kinds = [[o.kind for o in grp.ops] for grp in partition(g)]
    assert kinds == [["conv2d"], ["lut"]]
    lib = compiler.build(g)
    x = (rng.standard_normal((1, 5, 6, 7)) * 3).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for w in want:
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), _int8(g, w))



def _gelu_block(shape) -> onnx.ModelProto:
    """conv -> GELU as torch exports it (x * 0.5 * (1 + erf(x / sqrt 2))) -> 1x1 conv, in float."""
    n = Net("gelu", shape, 5)
    x = n.conv(n.input, 12, 3, act=None)
    s = n.shapes[x]
    e = n._node("Erf", [n._node("Div", [x, n._init("sqrt2", np.array(1.4142135, np.float32))], s)], s)
    g = n.mul(n.mul(x, n._node("Add", [e, n._init("one", np.array(1.0, np.float32))], s)),
              n._init("half", np.array(0.5, np.float32)))
    n.output(n.conv(g, 7, 1, act=None))
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
def test_gelus_chain_of_quantised_ops_is_one_lut_in_the_convs_epilogue(fmt):
    """QOperator's GELU is a lut (Div, Erf), a QLinearAdd of 1, a QLinearMul by the conv's output and one by 0.5:
    an island of the conv's output, one table after the conv; bit-exact with onnxruntime at both levels."""
    shape = (1, 5, 9, 11)
    m = models.quantize(_gelu_block(shape), fmt, seed=2, samples=3)
    g = compiler.from_onnx(m)
    groups = partition(g)
    if fmt == "qoperator":
        assert [o.kind for o in groups[0].ops] == ["conv2d", "lut"] and len(groups[0].nodes) >= 4
        assert {n.op.kind for n in g.nodes} >= {"lut", "add", "mul"}
    lib = compiler.build(g)
    x = (np.random.default_rng(4).standard_normal(shape) * 2).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for level, w in zip(("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"), want):
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), _int8(g, w), err_msg=level)
    assert lib.predicted_cycles == mod.stats.cycles


def test_an_island_read_from_outside_before_its_end_keeps_that_result():
    """x -> a = x * 0.5 (scalar) -> b = a + 1 (scalar); a also a graph output: the island is a alone, one op,
    so each stays its op (a kernel of its own), and both outputs are exact."""
    g = Graph("open")
    x = g.input("x", (1, 3, 4, 5))
    half = ops.mul((1, 3, 4, 5), multiplier=1 << 30, shift=31, b_shape=(1, 1, 1, 1),
                   b_const=np.full((1, 1, 1, 1), 64, np.int8))
    one = ops.add((1, 3, 4, 5), ma=1 << 14, mb=1 << 14, shift=14, b_shape=(1, 1, 1, 1),
                  b_const=np.full((1, 1, 1, 1), 3, np.int8))
    a = g.add(half, x, name="half")
    b = g.add(one, a, name="one")
    g.output(a, b)
    g.validate()
    assert [[o.kind for o in grp.ops] for grp in partition(g)] == [["mul"], ["add"]]
    g2 = Graph("closed")
    x = g2.input("x", (1, 3, 4, 5))
    b = g2.add(one, g2.add(half, x, name="half"), name="one")
    g2.output(b)
    g2.validate()
    assert [[o.kind for o in grp.ops] for grp in partition(g2)] == [["lut"]]
    rng = np.random.default_rng(1)
    for graph in (g, g2):
        xs = rng.integers(-128, 128, (1, 3, 4, 5)).astype(np.int8)
        mod = compiler.GraphModule(compiler.build(graph))
        mod.set_input(0, xs)
        mod.run(check_races=True)
        for k, want in enumerate(graph.reference(xs)):
            np.testing.assert_array_equal(mod.get_output(k, quantized=True), want)


def _mlp_block(h: int, w: int, c: int, hidden: int, conv_after: bool) -> onnx.ModelProto:
    """ConvNeXt's MLP as quant_pre_process leaves it: [H*W, C], MatMul, reshaped to [1, H, W, D], GELU, reshaped
    back, MatMul; with conv_after, the GELU's [1, H, W, D] read by a conv instead (H its channels)."""
    n = Net("mlp", (h * w, c), 6)
    y = n.reshape(n.matmul(n.input, hidden), (1, h, w, hidden))
    s = n.shapes[y]
    e = n._node("Erf", [n._node("Div", [y, n._init("sqrt2", np.array(1.4142135, np.float32))], s)], s)
    g = n.mul(n.mul(y, n._node("Add", [e, n._init("one", np.array(1.0, np.float32))], s)),
              n._init("half", np.array(0.5, np.float32)))
    n.output(n.conv(g, 4, 3, act=None) if conv_after else n.matmul(n.reshape(g, (h * w, hidden)), 5))
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("conv_after", [False, True])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(h=st.integers(1, 6), w=st.integers(2, 9), c=st.integers(1, 40), hidden=st.integers(2, 70),
       seed=st.integers(0, 2**16))
def test_a_dense_takes_the_island_of_its_output_read_through_a_reshape(fmt, conv_after, h, w, c, hidden, seed):
    """dense -> reshape -> GELU: the island's lut is the dense's epilogue, shaped as the dense's output, and the
    kernel writes the GELU's value in NCHW bytes (the layout plan keeps it so, a conv reading it in another
    layout gets a transform); as onnxruntime (assert_as_ort), the prediction equal to the run."""
    m = models.quantize(_mlp_block(h, w, c, hidden, conv_after), fmt, seed=seed % 7, samples=2)
    g = compiler.from_onnx(m)
    if fmt == "qoperator":
        first = partition(g)[0]
        assert [o.kind for o in first.ops] == ["dense", "lut"], [o.kind for o in first.ops]
        assert "reshape" in [n.op.kind for n in first.nodes]
        assert tuple(first.ops[-1].output.shape) == (h * w, hidden)
        assert g.values[first.output].shape == (1, h, w, hidden)
    lib = compiler.build(g)
    if fmt == "qoperator":
        assert lib.meta["layout"]["kernels"][first.name] == "nchw"
        assert "under the shape" in lib.meta["layout"]["fixed"][first.name]     # whatever its readers would pay
    x = np.random.default_rng(seed).standard_normal((h * w, c)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


def _transposes_block(c: int, h: int, w: int, out_ch: int, also: str) -> onnx.ModelProto:
    """conv -> Transpose(0, 2, 3, 1) -> Transpose(0, 3, 1, 2) -> conv, as ConvNeXt goes to NHWC and back around
    its LayerNorm; also="nhwc": the NHWC tensor is a graph output too; "conv": so is the first conv's output."""
    n = Net("transposes", (1, c, h, w), 7)
    x = n.conv(n.input, out_ch, 3, act=None)
    t = n._node("Transpose", [x], (1, h, w, out_ch), perm=[0, 2, 3, 1])
    y = n._node("Transpose", [t], (1, out_ch, h, w), perm=[0, 3, 1, 2])
    n.output(n.conv(y, 5, 3, act=None))
    if also:
        n.output(t if also == "nhwc" else x)
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("also", ["", "nhwc", "conv"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 9), h=st.integers(1, 9), w=st.integers(1, 13), out_ch=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_transposes_that_are_a_layout_fold_into_the_kernels_around_them(fmt, also, c, h, w, out_ch, seed):
    """The NCHW -> NHWC transpose of a conv's result read by it alone is that conv writing NHWC; the NHWC -> NCHW
    one read by a conv alone is that conv reading NHWC: no transpose kernel (with the first conv's result also a
    graph output, the first stays one), as onnxruntime (assert_as_ort), the prediction the run's."""
    m = models.quantize(_transposes_block(c, h, w, out_ch, also), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    groups = partition(g)
    ends = [(grp.in_layout, grp.out_layout) for grp in groups if grp.ops[0].kind == "conv2d"]
    if also == "conv":
        assert ["transpose"] in [[o.kind for o in grp.ops] for grp in groups] and ends == [("", ""), ("nhwc", "")]
    else:
        assert all(o.kind != "transpose" for grp in groups for o in grp.ops) and ends == [("", "nhwc"), ("nhwc", "")]
    lib = compiler.build(g)
    x = np.random.default_rng(seed).standard_normal((1, c, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 20), h=st.integers(1, 9), w=st.integers(1, 13), o1=st.integers(1, 40), o2=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_a_convs_lone_requantize_is_a_table_in_its_epilogue(fmt, c, h, w, o1, o2, seed):
    """SqueezeNet's fire: two convs concatenated.  QLinearConcat requantizes each input to its own scale: after a
    conv that requantize is one table in the conv's epilogue (Lut.of names it), written straight into the concat;
    as onnxruntime (assert_as_ort), the prediction the run's."""
    n = Net("fire", (1, c, h, w), seed % 11)
    n.output(n.concat([n.conv(n.input, o1, 1), n.conv(n.input, o2, 3)]))
    m = models.quantize(n.model(), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    requants = [nd for nd in g.nodes if nd.op.kind == "requantize"]
    tables = [grp.ops[-1] for grp in partition(g) if [o.kind for o in grp.ops] == ["conv2d", "lut"]]
    assert len(tables) == len(requants) and all(t.of == ("requantize",) for t in tables)
    if fmt == "qoperator":
        assert requants         # the two convs' output scales differ from the concat's
    lib = compiler.build(g)
    x = np.random.default_rng(seed).standard_normal((1, c, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


def _shuffle_block(c: int, h: int, w: int, half: int, piece_out: bool) -> onnx.ModelProto:
    """ShuffleNetV2's unit end: two convs concatenated, Reshape [1, 2, half, H, W], Transpose (0, 2, 1, 3, 4),
    Reshape [1, 2 * half, H, W], then a conv; piece_out: the first conv's result is a graph output too."""
    n = Net("shuffle", (1, c, h, w), 8)
    a, b = n.conv(n.input, half, 1), n.conv(n.input, half, 3)
    r = n.reshape(n.concat([a, b]), (1, 2, half, h, w))
    t = n._node("Transpose", [r], (1, half, 2, h, w), perm=[0, 2, 1, 3, 4])
    n.output(n.conv(n.reshape(t, (1, 2 * half, h, w)), 5, 1))
    if piece_out:
        n.output(a)
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("piece_out", [False, True])
@pytest.mark.parametrize("fuse", [True, False])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 12), h=st.integers(1, 9), w=st.integers(1, 11), half=st.integers(1, 40),
       seed=st.integers(0, 2**16))
def test_a_channel_shuffles_pieces_are_written_into_its_planes(fmt, piece_out, fuse, c, h, w, half, seed):
    """The pieces of the shuffle are written pitched, channel i of piece g at plane 2i + g of the shuffled tensor
    (partition.channel_shuffles): no transpose kernel, one kernel per node too (fuse=False); with a piece also a
    graph output the transpose stays a kernel and the concat copies its pieces.  As onnxruntime (assert_as_ort),
    race-checked, the prediction the run's."""
    m = models.quantize(_shuffle_block(c, h, w, half, piece_out), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    shuffles = channel_shuffles(g)
    assert len(shuffles) == 1 or piece_out
    # a piece that is a graph output keeps the transpose (QOperator requantizes the conv's result into the piece)
    assert not shuffles or not set(next(iter(shuffles.values())).pieces) & set(g.outputs)
    lib = compiler.build(g, fuse=fuse)
    kinds = [kind for layer in lib.layers for kind in layer["ops"].split(" + ")]
    assert ("transpose" in kinds) == (not shuffles)
    x = np.random.default_rng(seed).standard_normal((1, c, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


def _heads_block(k: int, h: int, w: int, s: int, reshape: bool, conv_after: bool,
                 scale: bool = False) -> onnx.ModelProto:
    """ViT's attention in miniature: a conv makes 3k channels, Reshape [1, k, 3, HW], Slice one of the three
    (s), then (reshape: Reshape [1, k, HW] and) a Transpose putting HW first, (scale:) times a constant, as ViT
    scales q and k; a conv reads it, or it is the output."""
    n = Net("heads", (1, 4, h, w), 5)
    x = n.reshape(n.conv(n.input, 3 * k, 1, act=None), (1, k, 3, h * w))
    sl = n._node("Slice", [x, n._init("s.starts", np.array([s], np.int64)), n._init("s.ends", np.array([s + 1], np.int64)),
                           n._init("s.axes", np.array([2], np.int64))], (1, k, 1, h * w))
    if reshape:
        t = n._node("Transpose", [n.reshape(sl, (1, k, h * w))], (1, h * w, k), perm=[0, 2, 1])
        t = n.reshape(t, (1, h * w, k, 1)) if conv_after else t
    else:
        t = n._node("Transpose", [sl], (1, h * w, 1, k), perm=[0, 3, 2, 1])
    if scale:
        t = n._node("Mul", [t, n._init("scale", np.array(0.35, np.float32))], n.shapes[t])
    n.output(n.conv(t, 3, 1, act=None) if conv_after else t)
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("reshape", [False, True])
@pytest.mark.parametrize("conv_after", [False, True])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(2, 40), h=st.integers(1, 7), w=st.integers(1, 9), s=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_a_slice_then_a_transpose_is_one_strided_copy(fmt, reshape, conv_after, k, h, w, s, seed):
    """A slice that moves data read by a transpose alone (through a reshape or not) is one kernel, their index maps
    composed (ops.Strided); as onnxruntime (assert_as_ort), the prediction the run's.  (k >= 2: one of k rows of
    three is no view.)"""
    m = models.quantize(_heads_block(k, h, w, s, reshape, conv_after), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    kinds = [[o.kind for o in grp.ops] for grp in partition(g, alias(g)[1])]
    # (a requantize the conv's input needs may follow as a lut in the same kernel)
    assert any(ks[0] == "strided" for ks in kinds) and not any(o in ks for ks in kinds for o in ("slice", "transpose"))
    lib = compiler.build(g)
    x = np.random.default_rng(seed).standard_normal((1, 4, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("reshape", [False, True])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(2, 40), h=st.integers(1, 7), w=st.integers(1, 9), s=st.integers(0, 2), seed=st.integers(0, 2**16))
def test_a_copy_then_a_per_tensor_op_is_one_kernel_with_a_lut(fmt, reshape, k, h, w, s, seed):
    """ViT's q: the strided copy's result times a constant (read through a reshape or not) is a lut on the copy's
    tiles, one kernel; as onnxruntime (assert_as_ort), the prediction the run's."""
    m = models.quantize(_heads_block(k, h, w, s, reshape, False, scale=True), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    kinds = [[o.kind for o in grp.ops] for grp in partition(g, alias(g)[1])]
    assert ["strided", "lut"] in kinds and not any("mul" in ks for ks in kinds), kinds
    lib = compiler.build(g)
    assert "vu.lut" in lib.asm and "vu.fmul" not in lib.asm
    x = np.random.default_rng(seed).standard_normal((1, 4, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


def _swap_then_sigmoid(c: int, h: int, w: int, nhwc_after: bool) -> onnx.ModelProto:
    """A conv, Transpose (0, 1, 3, 2) (no layout: H and W swap), Sigmoid, then (nhwc_after) the NCHW -> NHWC
    Transpose that folds into a kernel which can write NHWC."""
    n = Net("swap", (1, c, h, w), 3)
    t = n._node("Transpose", [n.conv(n.input, c, 1, act=None)], (1, c, w, h), perm=[0, 1, 3, 2])
    y = n._node("Sigmoid", [t], (1, c, w, h))
    n.output(n._node("Transpose", [y], (1, w, h, c), perm=[0, 2, 3, 1]) if nhwc_after else y)
    return n.model()


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("nhwc_after", [False, True])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=st.integers(1, 20), h=st.integers(1, 7), w=st.integers(2, 9), seed=st.integers(0, 2**16))
def test_a_copys_lut_ends_its_kernel_in_its_own_layout(fmt, nhwc_after, c, h, w, seed):
    """A copy that took a lut writes the lut's result as the copy writes, in NCHW: an NCHW -> NHWC transpose after
    it stays a kernel of its own (a copy's kernel cannot write NHWC); as onnxruntime, the prediction the run's."""
    m = models.quantize(_swap_then_sigmoid(c, h, w, nhwc_after), fmt, seed=seed % 5, samples=2)
    g = compiler.from_onnx(m)
    groups = partition(g, alias(g)[1])
    copy = [grp for grp in groups if grp.ops[0].kind == "transpose" and grp.ops[0].perm == (0, 1, 3, 2)]
    assert len(copy) == 1 and [o.kind for o in copy[0].ops] == ["transpose", "lut"] and not copy[0].out_layout
    assert all(getattr(o, "y_layout", "nchw") == "nchw" for o in copy[0].ops)
    lib = compiler.build(g)
    x = np.random.default_rng(seed).standard_normal((1, c, h, w)).astype(np.float32)
    mod = run_graph(lib, x)          # race-checked; assert_as_ort runs onnxruntime
    assert_as_ort(mod, g, m, x, fmt)
    assert lib.predicted_cycles == mod.stats.cycles


def _conv_plus_shortcut(c: int, h: int, w: int, conv_first: bool, rng: np.random.Generator) -> onnx.ModelProto:
    """QDQ: x -> 3x3 conv (pad 1, c channels) -> + x, the conv's output Add's first operand (conv_first) or its
    second; x's codes also dequantised to a second graph output, so onnxruntime runs the Add in float32 at
    every level (its Q has two DequantizeLinear readers besides the conv's)."""
    f = {"sx": 0.05, "sw": 0.01, "sc": float(rng.uniform(0.03, 0.09)), "sy": float(rng.uniform(0.05, 0.12)),
         "sbias": 0.05 * 0.01}
    z = {"zx": int(rng.integers(-10, 10)), "zc": int(rng.integers(-20, 20)), "zy": int(rng.integers(-20, 20))}
    inits = [helper.make_tensor(k, TensorProto.FLOAT, [], [v]) for k, v in f.items()]
    inits += [helper.make_tensor(k, TensorProto.INT8, [], [v]) for k, v in z.items()]
    inits += [helper.make_tensor("zw", TensorProto.INT8, [], [0]),
              helper.make_tensor("zbias", TensorProto.INT32, [], [0]),
              onnx.numpy_helper.from_array(rng.integers(-90, 90, (c, c, 3, 3)).astype(np.int8), "wq"),
              onnx.numpy_helper.from_array(rng.integers(-800, 800, c).astype(np.int32), "bq")]
    add_in = ["cf", "xf2"] if conv_first else ["xf2", "cf"]
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["xf2"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "zx"], ["x_again"]),
             helper.make_node("DequantizeLinear", ["wq", "sw", "zw"], ["wf"]),
             helper.make_node("DequantizeLinear", ["bq", "sbias", "zbias"], ["bf"]),
             helper.make_node("Conv", ["xf", "wf", "bf"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("QuantizeLinear", ["c", "sc", "zc"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sc", "zc"], ["cf"]),
             helper.make_node("Add", add_in, ["r"], name="add"),
             helper.make_node("QuantizeLinear", ["r", "sy", "zy"], ["yq"]),
             helper.make_node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])]
    shape = [1, c, h, w]
    g = helper.make_graph(nodes, "conv_shortcut", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("y", "x_again")],
                          inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    onnx.checker.check_model(m)
    return m


@pytest.mark.parametrize("conv_first", [True, False])
@SETTINGS
@given(c=st.integers(1, 45), h=st.integers(1, 12), w=st.integers(1, 30), seed=st.integers(0, 2**16))
def test_onnxruntimes_float_add_of_a_residual_is_the_convs_epilogue(conv_first, c, h, w, seed):
    """An Add onnxruntime runs in float32 (qdq_add, vu.fsub with b's scale negated) after a conv, the conv's output
    either operand: the conv's residual add, one kernel, bit-exact with onnxruntime at both levels; the prediction
    equal to the run."""
    rng = np.random.default_rng(seed)
    m = _conv_plus_shortcut(c, h, w, conv_first, rng)
    g = compiler.from_onnx(m)
    assert "qdq_add" in [n.op.kind for n in g.nodes]
    [conv] = [grp for grp in partition(g) if grp.ops[0].kind == "conv2d"]
    assert [o.kind for o in conv.ops] == ["conv2d", "qdq_add"]
    lib = compiler.build(g)
    assert "vu.fsub" in lib.asm and "vu.lut" not in lib.asm
    x = (rng.standard_normal((1, c, h, w)) * 2).astype(np.float32)
    mod = run_graph(lib, x)
    for level, outs in zip(("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"), ort_levels(m, x)):
        for k, want in enumerate(outs):
            np.testing.assert_array_equal(mod.get_output(k, quantized=True), _int8_of(g, k, want), err_msg=level)
    assert lib.predicted_cycles == mod.stats.cycles
