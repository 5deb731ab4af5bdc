"""Dynamic requantize, dense, reshape / flatten and concat, in kernels, hand-built graphs with Dims and ONNX
models with symbolic dimensions (compiler/dynamic/elementwise.py, compiler/dynamic/dense.py,
dynamic/concat.py, compiler/dynamic/network.py, compiler/graph.py).

Hypothesis draws shapes in range; every output is compared on every element with the static op's (or the
static graph's) numpy model and, for ONNX models in QOperator form, with onnxruntime, race-checked.  Each
wait of the new programs is removed in turn and the run must stop on a race or a deadlock.  Shapes out of
range, inconsistent Dims and reshapes that mix dimensions are refused naming them.
"""
from __future__ import annotations

import functools
import re

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import CompileError, Dim, models, ops
from compiler.assembler import assemble
from compiler.graph import Graph
from compiler.ops import Concat, Reshape
from compiler.models import Net
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator

from tests.onnx_helpers import session
from tests.helpers.dynamic import kill_every_wait

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rand(rng, shape, dtype="int8"):
    lo, hi = (-128, 128) if dtype == "int8" else (-(2**22), 2**22)      # int32: around what a requantize maps
    return rng.integers(lo, hi, shape).astype(dtype)


# ----------------------------------------------------------------------------- requantize

N, H, W = Dim("n", 1, 2), Dim("h", 1, 40), Dim("w", 3, 37)


@functools.lru_cache(maxsize=None)
def requantize_kernel(form: str):
    """A dynamic requantize and its kernel: int8 or int32 input, integer (M, S) or float32 scale."""
    shape = (N, 5, H, W)
    if form == "int8":
        op = ops.requantize(shape, in_dtype="int8", zx=-7, multiplier=1_518_500_250, shift=32, zp_out=3, lo=-100)
    elif form == "int32":
        op = ops.requantize(shape, in_dtype="int32", zx=1234, multiplier=1 << 30, shift=47, zp_out=-5)
    else:
        op = ops.requantize(shape, in_dtype="int32", zx=-3, scale=np.float32(3.1e-5), zp_out=2, hi=90)
    return op, compiler.build(op)


@pytest.mark.parametrize("form", ["int8", "int32", "float"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2), h=st.integers(1, 40), w=st.integers(3, 37))
def test_dynamic_requantize_is_bit_exact_across_the_range(form, seed, n, h, w):
    op, kern = requantize_kernel(form)
    x = rand(np.random.default_rng(seed), (n, 5, h, w), "int8" if form == "int8" else "int32")
    y = kern(x, check_races=True)
    want = op.static({"n": n, "h": h, "w": w}).reference(x)
    assert y.shape == (n, 5, h, w)
    np.testing.assert_array_equal(y, want)
    assert y.size < 64 or len(np.unique(y)) > 3


def test_removing_any_wait_of_a_dynamic_requantize_is_caught():
    op = ops.requantize((Dim("n", 1, 2), 16, Dim("h", 1, 128), Dim("w", 1, 128)), in_dtype="int32", zx=5,
                        multiplier=1 << 30, shift=47)
    kern = compiler.build(op)
    x = rand(np.random.default_rng(1), (2, 16, 100, 121), "int32")    # three or more chunks (VBUF-capped)
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


@functools.lru_cache(maxsize=None)
def per_channel_requantize_kernel(form: str, c: int):
    """A dynamic requantize with one (M, S) or float32 scale per channel, and its kernel."""
    rng = np.random.default_rng(c)
    shape = (N, c, H, W)
    if form == "int8":
        op = ops.requantize(shape, in_dtype="int8", zx=-7, multiplier=rng.integers(2**29, 2**31, c),
                            shift=rng.integers(30, 34, c), zp_out=3, lo=-100)
    elif form == "int32":
        op = ops.requantize(shape, in_dtype="int32", zx=1234, multiplier=rng.integers(2**29, 2**31, c),
                            shift=rng.integers(44, 48, c), zp_out=-5)
    else:
        op = ops.requantize(shape, in_dtype="int32", zx=-3, scale=rng.uniform(1e-5, 6e-5, c).astype(np.float32),
                            zp_out=2, hi=90)
    return op, compiler.build(op)


@pytest.mark.parametrize("form", ["int8", "int32", "float"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), c=st.sampled_from([1, 5, 70]), n=st.integers(1, 2), h=st.integers(1, 40),
       w=st.integers(3, 37))
def test_dynamic_per_channel_requantize_is_bit_exact_across_the_range(form, seed, c, n, h, w):
    op, kern = per_channel_requantize_kernel(form, c)
    x = rand(np.random.default_rng(seed), (n, c, h, w), "int8" if form == "int8" else "int32")
    y = kern(x, check_races=True)
    static = op.static({"n": n, "h": h, "w": w})
    assert np.ndim(static.scale if static.scale is not None else static.ma) == 1      # per channel indeed
    np.testing.assert_array_equal(y, static.reference(x))
    assert y.size < 64 or len(np.unique(y)) > 3


def test_removing_any_wait_of_a_per_channel_requantize_is_caught():
    op = ops.requantize((Dim("n", 1, 2), 3, Dim("h", 1, 200), Dim("w", 1, 200)), in_dtype="int32", zx=5,
                        multiplier=[1 << 30, 3 << 29, 5 << 28], shift=[47, 46, 48])
    kern = compiler.build(op)
    x = rand(np.random.default_rng(1), (2, 3, 180, 190), "int32")     # planes of several chunks (VBUF-capped)
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


def test_a_dynamic_requantize_refuses_a_wrong_dtype_and_a_size_out_of_range():
    _, kern = requantize_kernel("int32")
    with pytest.raises(CompileError, match="input x has dtype int8, expected int32"):
        kern(np.zeros((1, 5, 4, 4), np.int8))
    with pytest.raises(CompileError, match=r"dimension w = 38 is outside its range \[3, 37\]"):
        kern(np.zeros((1, 5, 4, 38), np.int32))


# ----------------------------------------------------------------------------- dense

@functools.lru_cache(maxsize=None)
def dense_kernel(form: str):
    rng = np.random.default_rng(7)
    k, o = 150, 37                       # not multiples of the array's sizes
    w, b = rng.integers(-60, 61, (k, o)), rng.integers(-4000, 4000, o)
    if form == "integer":
        req = dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(38, 41, o), zp_out=-3)
    else:
        req = dict(scale=rng.uniform(1e-4, 3e-3, o).astype(np.float32), zp_out=5)
    op = ops.dense((Dim("batch", 1, 9), k), w, b, x_zp=-2, **req)
    return op, compiler.build(op), (w, b, req)


@pytest.mark.parametrize("form", ["integer", "float"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 9))
def test_dynamic_dense_is_bit_exact_with_the_static_dense(form, seed, n):
    op, kern, (w, b, req) = dense_kernel(form)
    x = rand(np.random.default_rng(seed), (n, 150))
    y = kern(x, check_races=True)
    want = ops.dense((n, 150), w, b, x_zp=-2, **req).reference(x)
    assert y.shape == (n, 37)
    np.testing.assert_array_equal(y, want)
    assert len(np.unique(y)) > 3


def test_a_dynamic_dense_refuses_a_dynamic_feature_axis_and_a_batch_out_of_range():
    with pytest.raises(CompileError, match=r"axis 1 \(features\) cannot be a Dim"):
        ops.dense((2, Dim("k", 4, 8)), np.ones((8, 3)), multiplier=[1 << 30] * 3, shift=[31] * 3)
    _, kern, _ = dense_kernel("integer")
    with pytest.raises(CompileError, match=r"dimension batch = 10 is outside its range \[1, 9\]"):
        kern(np.zeros((10, 150), np.int8))


def test_removing_any_wait_of_a_dynamic_dense_is_caught():
    _, kern, _ = dense_kernel("integer")
    kill_every_wait(kern, {"x": rand(np.random.default_rng(2), (5, 150))}, at_least=4)


# ----------------------------------------------------------------------------- graphs with Dims

def conv_args(rng, o: int, c: int, k: int) -> dict:
    return dict(weight=rng.integers(-20, 21, (o, c, k, k)), bias=rng.integers(-300, 300, o),
                multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(35, 38, o))


@functools.lru_cache(maxsize=None)
def skip_concat_graph() -> Graph:
    """conv 3x3 -> conv 3x3, the two concatenated (a skip concat), requantised, conv 3x3 stride 2 + relu;
    batch, height and width Dims."""
    rng = np.random.default_rng(11)
    n, h, w = Dim("n", 1, 2), Dim("h", 5, 26), Dim("w", 4, 23)
    g = Graph("skipcat")
    x = g.input("x", (n, 3, h, w))
    a = g.add(ops.conv2d((n, 3, h, w), padding=1, **conv_args(rng, 8, 3, 3)), x, name="c1")
    b = g.add(ops.conv2d((n, 8, h, w), padding=1, **conv_args(rng, 6, 8, 3)), a, name="c2")
    r = g.add(ops.requantize((n, 6, h, w), in_dtype="int8", zx=-128, multiplier=1_300_000_000, shift=31,
                             zp_out=-128), b, name="rq")
    c = g.add(Concat(((n, 8, h, w), (n, 6, h, w)), 1), a, r, name="cat")
    d = g.add(ops.conv2d((n, 14, h, w), stride=2, padding=1, **conv_args(rng, 5, 14, 3)), c, name="c3")
    g.output(g.add(ops.relu(g.values[d].shape, 4), d, name="relu"))
    return g


@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2), h=st.integers(5, 26), w=st.integers(4, 23))
def test_a_graph_with_dims_and_a_skip_concat_is_bit_exact_across_the_range(seed, n, h, w):
    g = skip_concat_graph()
    lib = built_graph(g)
    x = rand(np.random.default_rng(seed), (n, 3, h, w))
    m = compiler.GraphModule(lib)
    m.set_input("x", x)
    m.run(check_races=True)
    y = m.get_output(0)
    want = g.at({"n": n, "h": h, "w": w}).reference(x)[0]
    assert y.shape == want.shape == (n, 5, (h + 1) // 2, (w + 1) // 2)
    np.testing.assert_array_equal(y, want)
    np.testing.assert_array_equal(g.reference({"x": x})[0], want)
    assert len(np.unique(y)) > 3


@functools.lru_cache(maxsize=None)
def built_graph(g: Graph):
    return compiler.build(g)


def test_the_graph_agrees_with_the_static_compiler_at_one_shape():
    g = skip_concat_graph()
    x = rand(np.random.default_rng(3), (1, 3, 11, 9))     # batch 1: the static network concats one image
    static = compiler.GraphModule(compiler.build(g.at({"n": 1, "h": 11, "w": 9})))
    dynamic = compiler.GraphModule(built_graph(g))
    for m in (static, dynamic):
        m.set_input("x", x)
        m.run()
    np.testing.assert_array_equal(dynamic.get_output(0), static.get_output(0))


def test_removing_any_wait_of_the_concat_and_requantize_layers_is_caught():
    g = skip_concat_graph()
    lib = built_graph(g)
    assert [layer["ops"] for layer in lib.meta["layers"]] == ["conv2d", "conv2d", "requantize", "concat",
                                                              "conv2d + clip"]
    lines = lib.asm.splitlines()
    starts = [k for k, line in enumerate(lines) if line.startswith("L2_layer:") or line.startswith("L3_layer:")]
    end = next(k for k, line in enumerate(lines) if line.startswith("L4_layer:"))
    sites = [k for k in range(starts[0], end) if "wait=" in lines[k] or "sem.wait" in lines[k]]
    # The concat's join (one `sem.wait` per copy, the copies on two channels) is removed whole: without
    # one of its waits, the next layer's load on the same channel as that copy is still ordered after it
    # by the channel's queue, which the race checker counts, so that mutant is rightly harmless.
    groups: list[list[int]] = []
    for k in sites:
        if groups and "sem.wait" in lines[k] and groups[-1][-1] == k - 1 and lines[k] == lines[k - 1]:
            groups[-1].append(k)
        else:
            groups.append([k])
    x = rand(np.random.default_rng(4), (2, 3, 26, 23))
    killed = 0
    for group in groups:
        k = group[0]
        if lines[k - 1].strip().startswith(("beq", "blt")):
            continue        # the drain's waits only take the last tokens (tests/helpers/dynamic.py, wait_lines); a set's
        #                     reuse wait runs from the third chunk on (the requantize kernel's test removes it)
        mutant = list(lines)
        for j in group:
            mutant[j] = "        nop" if "sem.wait" in lines[j] else re.sub(r", wait=s\d+", "", lines[j])
        sim = Simulator(lib.config)
        sim.load(assemble("\n".join(mutant) + "\n", lib.files, "mutant.s"))
        sim.write("x", x)
        with pytest.raises(SimError) as exc:
            sim.run(check_races=True, max_cycles=5_000_000)
        assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK), (lines[k], exc.value)
        killed += 1
    assert killed >= 3 and any(len(group) > 1 for group in groups), groups   # the join counts once


def test_graph_dims_that_disagree_are_refused_naming_them():
    g = skip_concat_graph()
    with pytest.raises(CompileError, match=r"Dim h is declared twice with different ranges: h in \[5, 26\] and "
                                           r"h in \[5, 30\]"):
        g.input("y", (1, 3, Dim("h", 5, 30), 4))
    with pytest.raises(CompileError, match=r"input x = 'c1' is \[n in \[1, 2\], 8, h in \[5, 26\], w in \[4, 23\]\] "
                                           r"int8, the op expects \[n in \[1, 2\], 8, h2 in \[5, 26\]"):
        g.add(ops.relu((Dim("n", 1, 2), 8, Dim("h2", 5, 26), Dim("w", 4, 23))), "c1", name="bad")
    m = compiler.GraphModule(built_graph(g))
    with pytest.raises(CompileError, match=r"dimension h = 27 is outside its range \[5, 26\]"):
        m.set_input("x", np.zeros((1, 3, 27, 8), np.int8))
    with pytest.raises(CompileError, match=r"dimension w = 3 is outside its range \[4, 23\]"):
        g.reference({"x": np.zeros((1, 3, 8, 3), np.int8)})
    with pytest.raises(CompileError, match="a concat with Dims joins along a fixed axis"):
        Concat(((1, 3, H, 4), (1, 3, H, 4)), 2)


def two_input_graph() -> Graph:
    """x and y of the same Dims added, then one reshape that is a graph output (a copy)."""
    h = Dim("h", 2, 12)
    g = Graph("two")
    x, y = g.input("x", (1, 4, h, 6)), g.input("y", (1, 4, h, 6))
    s = g.add(ops.add((1, 4, h, 6), za=1, zb=-1, ma=3 << 20, mb=5 << 20, shift=22, zp_out=-2), x, y, name="sum")
    g.output(g.add(Reshape((1, 4, h, 6), (1, 4, h, 3, 2)), s, name="view"))
    return g


def test_the_same_dim_in_two_inputs_is_one_size():
    g = two_input_graph()
    lib = compiler.build(g)
    rng = np.random.default_rng(5)
    for h in (2, 12, 7):
        ins = {k: rand(rng, (1, 4, h, 6)) for k in ("x", "y")}
        m = compiler.GraphModule(lib)
        for k, a in ins.items():
            m.set_input(k, a)
        m.run(check_races=True)
        want = g.at({"h": h}).reference(ins)[0]
        assert m.get_output(0).shape == (1, 4, h, 3, 2)
        np.testing.assert_array_equal(m.get_output(0), want)
    m = compiler.GraphModule(lib)
    m.set_input("x", np.zeros((1, 4, 5, 6), np.int8))
    m.set_input("y", np.zeros((1, 4, 6, 6), np.int8))
    with pytest.raises(CompileError, match="dimension h is 6 in input y axis 2 but 5 in input x axis 2"):
        m.run()


def test_a_reshape_that_mixes_dimensions_is_refused():
    h = Dim("h", 2, 12)
    g = Graph()
    x = g.input("x", (1, 4, h, 6))
    with pytest.raises(CompileError, match=r"reshape \(1, 4, 2, 6\) \(48 elements\) to \(1, 4, 2, 7\)"):
        g.add(Reshape((1, 4, h, 6), (1, 4, h, 7)), x)

    def make(values):
        s = (1, 4, values["h"], 6)
        gg = Graph()
        gg.output(gg.add(Reshape(s, (1, 24 * values["h"])), gg.input("x", s), name="flat"))
        return gg

    from compiler.dynamic.graph import DynamicGraph
    with pytest.raises(CompileError, match=r"node flat \(reshape\): output axis 1 is .* no one dimension \(h\), "
                                           r"reshaping \(1, 4, h, 6\): .* merging a dynamic axis with another needs "
                                           r"a product of dims"):
        compiler.build(DynamicGraph(make, (h,)))


@functools.lru_cache(maxsize=None)
def concat_dynamic_axis(axis: int):
    """relu(x) joined along a dynamic axis (H or W of x) with a fixed input y twice, then a conv: the
    output's axis is the derived dim h + 8."""
    from compiler.dynamic.graph import DynamicGraph
    rng = np.random.default_rng(axis)
    cv = conv_args(rng, 4, 3, 3)

    def make(values):
        s = (1, 3, values["h"], 5) if axis == 2 else (1, 3, 5, values["h"])
        f = (1, 3, 4, 5) if axis == 2 else (1, 3, 5, 4)
        j = s[:axis] + (values["h"] + 8,) + s[axis + 1:]
        g = Graph()
        x, y = g.input("x", s), g.input("y", f)
        r = g.add(ops.relu(s, -5), x, name="r")
        c = g.add(Concat((s, f, f), axis), r, y, y, name="cat")
        g.output(g.add(ops.conv2d(j, padding=1, **cv), c, name="conv"))
        return g

    dg = DynamicGraph(make, (Dim("h", 2, 30),))
    return dg, compiler.build(dg)


@pytest.mark.parametrize("axis", [2, 3], ids=["height", "width"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(2, 30))
def test_a_concat_along_a_dynamic_axis_is_bit_exact_across_the_range(axis, seed, h):
    dg, lib = concat_dynamic_axis(axis)
    g = dg.at({"h": h})
    rng = np.random.default_rng(seed)
    ins = {k: rand(rng, g.values[k].shape) for k in g.inputs}
    m = compiler.GraphModule(lib)
    for k, v in ins.items():
        m.set_input(k, v)
    m.run(check_races=True)
    y = m.get_output(0)
    assert y.shape[axis] == h + 8
    np.testing.assert_array_equal(y, g.reference(ins)[0])


def test_removing_the_join_of_a_concat_along_a_dynamic_axis_is_caught():
    dg, lib = concat_dynamic_axis(2)
    assert "h_1=h:7:0" in lib.asm                      # the derived dim h + 8
    lines = lib.asm.splitlines()
    start = next(k for k, line in enumerate(lines) if line.startswith("L1_layer:"))
    end = next(k for k, line in enumerate(lines) if line.startswith("L2_layer:"))
    join = [k for k in range(start, end) if "sem.wait" in lines[k]]
    assert len(join) == 3
    rng = np.random.default_rng(5)
    mutant = ["        nop" if k in join else line for k, line in enumerate(lines)]
    sim = Simulator(lib.config)
    sim.load(assemble("\n".join(mutant) + "\n", lib.files, "mutant.s"))
    sim.write("x", rand(rng, (1, 3, 29, 5)))
    sim.write("y", rand(rng, (1, 3, 4, 5)))
    with pytest.raises(SimError) as exc:
        sim.run(check_races=True, max_cycles=5_000_000)
    assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK)


def test_what_a_dynamic_network_does_not_lower_is_refused_naming_the_node_the_shapes_and_why():
    """A concat along a dynamic axis, a broadcast the dynamic lowering does not have: each a CompileError
    that names the node, the shapes and the reason."""
    from compiler.dynamic.graph import DynamicGraph
    h = Dim("h", 2, 12)

    def concat_h(values):
        s = (1, 3, values["h"], 5)
        g = Graph()
        x = g.input("x", s)
        g.output(g.add(Concat((s, s), 2), x, x, name="stack"))
        return g

    with pytest.raises(CompileError, match=r"node stack \(concat\): its axis 2 is dynamic in input\(s\) \[0, 1\] "
                                           r"\(\(1, 3, h, 5\), \(1, 3, h, 5\)\); a dynamic concat joins along a "
                                           r"fixed axis, or along one that is dynamic in its first input only .* a sum "
                                           r"of two dims cannot be described yet"):
        compiler.build(DynamicGraph(concat_h, (h,)))

    def plane_add(values):
        s = (1, 3, values["h"], 5)
        g = Graph()
        x, p = g.input("x", s), g.input("p", (1, 1, 1, 5))
        g.output(g.add(ops.add(s, za=0, zb=0, ma=1 << 20, mb=1 << 20, shift=21, b_shape=(1, 1, 1, 5)), x, p,
                       name="bias_w"))
        return g

    with pytest.raises(CompileError, match=r"node bias_w \(add\): .*\(1, 1, 1, 5\).* a dynamic add or mul "
                                           r"broadcasts a per-channel b \[1, C, 1, 1\] or a scalar one so far"):
        compiler.build(DynamicGraph(plane_add, (h,)))


# ----------------------------------------------------------------------------- ONNX

def symbolic(model: onnx.ModelProto, axes: dict[int, str]) -> onnx.ModelProto:
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        for k, name in axes.items():
            if k < len(dims):
                dims[k].dim_param = name
    del model.graph.value_info[:]
    return model


@functools.lru_cache(maxsize=None)
def onnx_concat(fmt: str):
    n = Net("dyncat", (1, 3, 12, 12), 1)
    a = n.conv(n.input, 8, 3, 1)
    b = n.conv(a, 6, 3, 1)
    n.output(n.conv(n.concat([a, b]), 4, 3, 1))
    model = symbolic(models.quantize(n.model(), fmt, seed=1, per_channel=True, samples=3), {2: "height", 3: "width"})
    dg = compiler.from_onnx(model, dims={"height": (6, 30), "width": (6, 30)})
    return model, dg, compiler.build(dg)


@functools.lru_cache(maxsize=None)
def onnx_classifier(fmt: str):
    n = Net("dyncls", (2, 3, 8, 8), 1)
    x = n.max_pool(n.conv(n.input, 8, 3, 1), 2, 2, 0)
    n.output(n.gemm(n.flatten(n.conv(x, 8, 3, 2)), 10))
    model = symbolic(models.quantize(n.model(), fmt, seed=2, per_channel=True, samples=3), {0: "batch"})
    dg = compiler.from_onnx(model, dims={"batch": (1, 6)})
    return model, dg, compiler.build(dg)


def check_onnx(model, dg, lib, x: np.ndarray, values: dict, fmt: str) -> None:
    m = compiler.GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    y = m.get_output(0, quantized=True)
    g = dg.at(values)
    want = g.reference({g.inputs[0]: g.values[g.inputs[0]].quant.quantize(x)})[0]
    np.testing.assert_array_equal(y, want)
    assert len(np.unique(y)) > 3
    if fmt == "qoperator":     # QDQ: onnxruntime's own float path differs by a step here and there
        ref = session(model).run(None, {model.graph.input[0].name: x})[0]
        ref = ref if ref.dtype == np.int8 else g.values[g.outputs[0]].quant.quantize(ref)
        np.testing.assert_array_equal(y, ref)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(6, 30), w=st.integers(6, 30))
def test_an_onnx_skip_concat_network_is_bit_exact_across_the_range(fmt, seed, h, w):
    model, dg, lib = onnx_concat(fmt)
    assert "concat" in [layer["ops"] for layer in lib.meta["layers"]]
    x = np.random.default_rng(seed).standard_normal((1, 3, h, w)).astype(np.float32) * 2
    check_onnx(model, dg, lib, x, {"height": h, "width": w}, fmt)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 6))
def test_an_onnx_classifier_with_a_dynamic_batch_is_bit_exact(fmt, seed, n):
    model, dg, lib = onnx_classifier(fmt)
    assert [layer["ops"] for layer in lib.meta["layers"]][-1] == "dense"
    x = np.random.default_rng(seed).standard_normal((n, 3, 8, 8)).astype(np.float32) * 2
    check_onnx(model, dg, lib, x, {"batch": n}, fmt)


def test_layer_stats_after_a_flatten_name_the_layers_that_ran():
    # each layer's label is its program's (link numbers the programs; a run that needs no program
    # must not shift the labels after it): the per-layer figures split the run at those labels
    _, _, lib = onnx_classifier("qoperator")
    m = compiler.GraphModule(lib)
    m.set_input(0, np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32))
    m.run()
    stats = m.layer_stats()
    assert [s.name for s in stats] == [layer["name"] for layer in lib.meta["layers"]]
    assert stats[-1].ops == "dense" and stats[-1].macs > 0
    starts = [lib.program.symbols[layer["label"]].value for layer in lib.meta["layers"]]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)


# ----------------------------------------------------------------------------- broadcasting add / mul

def broadcast_op(kind: str, b_shape: tuple, shape=(Dim("n", 1, 2), 7, Dim("h", 1, 40), Dim("w", 2, 50))):
    if kind == "add":
        return ops.add(shape, za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1, b_shape=b_shape)
    if kind == "mul":
        return ops.mul(shape, za=3, zb=-2, multiplier=3 << 20, shift=26, zp_out=1, lo=-90, b_shape=b_shape)
    return ops.add(shape, za=3, zb=-2, scale_a=0.02, scale_b=0.03, scale_out=0.04, zp_out=1, b_shape=b_shape)


@functools.lru_cache(maxsize=None)
def broadcast_kernel(kind: str, b_shape: tuple):
    op = broadcast_op(kind, b_shape)
    return op, compiler.build(op)


@pytest.mark.parametrize("kind", ["add", "mul", "float add"])
@pytest.mark.parametrize("b_shape", [(1, 7, 1, 1), (1, 1, 1, 1)], ids=["per-channel", "scalar"])
@SETTINGS
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(1, 2), h=st.integers(1, 40), w=st.integers(2, 50))
def test_a_dynamic_broadcasting_add_or_mul_is_bit_exact(kind, b_shape, seed, n, h, w):
    op, kern = broadcast_kernel(kind, b_shape)
    rng = np.random.default_rng(seed)
    a, b = rand(rng, (n, 7, h, w)), rand(rng, b_shape)
    y = kern(a, b, check_races=True)
    static = op.static({"n": n, "h": h, "w": w})
    np.testing.assert_array_equal(y, static.reference(a, b))
    # and the same op without broadcasting, on b repeated to a's shape
    full = broadcast_op(kind, None, (n, 7, h, w))
    np.testing.assert_array_equal(y, full.reference(a, np.broadcast_to(b, a.shape).copy()))


def test_a_dynamic_broadcasting_add_whose_plane_exceeds_a_buffer_set():
    """A plane of 380 x 380 bytes is more than a set holds: it is cut into pieces of a plane."""
    op = broadcast_op("add", (1, 2, 1, 1), (1, 2, Dim("h", 300, 380), 380))
    kern = compiler.build(op)
    rng = np.random.default_rng(12)
    a, b = rand(rng, (1, 2, 377, 380)), rand(rng, (1, 2, 1, 1))
    np.testing.assert_array_equal(kern(a, b, check_races=True), op.static({"h": 377}).reference(a, b))


def test_removing_any_wait_of_a_broadcasting_kernel_is_caught():
    _, kern = broadcast_kernel("add", (1, 7, 1, 1))
    rng = np.random.default_rng(8)
    kill_every_wait(kern, {"a": rand(rng, (2, 7, 40, 50)), "b": rand(rng, (1, 7, 1, 1))}, at_least=3)


def test_broadcasts_that_are_not_lowered_are_refused():
    with pytest.raises(CompileError, match=r"b_shape \(1, 3, 1, 1\) does not broadcast to \(1, 7, 4, 4\)"):
        ops.add((1, 7, 4, 4), za=0, zb=0, ma=1, mb=1, shift=0, b_shape=(1, 3, 1, 1))
    with pytest.raises(CompileError, match=r"broadcasts a per-channel b \[1, C, 1, 1\] or a scalar one so far"):
        compiler.build(broadcast_op("add", (1, 1, 1, 50), (1, 7, Dim("h", 1, 4), 50)))
    with pytest.raises(CompileError, match="holds a Dim; a broadcast operand of a dynamic add has a fixed shape"):
        broadcast_op("add", (1, 7, 1, Dim("w", 2, 50)))
    _, kern = broadcast_kernel("add", (1, 1, 1, 1))
    with pytest.raises(CompileError, match=r"input b axis 1 is 7, expected 1 \(it is not dynamic\)"):
        kern(np.zeros((1, 7, 3, 3), np.int8), np.zeros((1, 7, 1, 1), np.int8))


def test_a_graph_with_a_per_channel_operand():
    """x (n, 6, h, w) times a per-channel input s (1, 6, 1, 1), then a conv: one binary."""
    rng = np.random.default_rng(9)
    n, h, w = Dim("n", 1, 2), Dim("h", 3, 20), Dim("w", 3, 20)
    g = Graph("scaled")
    x, s = g.input("x", (n, 6, h, w)), g.input("s", (1, 6, 1, 1))
    m = g.add(ops.mul((n, 6, h, w), za=-1, zb=4, multiplier=5 << 24, shift=31, zp_out=2, b_shape=(1, 6, 1, 1)),
              x, s, name="scale")
    g.output(g.add(ops.conv2d((n, 6, h, w), padding=1, **conv_args(rng, 4, 6, 3)), m, name="conv"))
    lib = compiler.build(g)
    for shape in ((1, 6, 3, 3), (2, 6, 20, 20), (1, 6, 7, 12)):
        ins = {"x": rand(rng, shape), "s": rand(rng, (1, 6, 1, 1))}
        mod = compiler.GraphModule(lib)
        for k, v in ins.items():
            mod.set_input(k, v)
        mod.run(check_races=True)
        np.testing.assert_array_equal(mod.get_output(0), g.reference(ins)[0])
    # the graph at one shape builds statically too (tests/compiler/lowering/test_vu_broadcast.py), into the same results
    static = g.at({"n": 1, "h": 7, "w": 12})
    mod = compiler.GraphModule(compiler.build(static))
    ins = {"x": rand(rng, (1, 6, 7, 12)), "s": rand(rng, (1, 6, 1, 1))}
    for k, v in ins.items():
        mod.set_input(k, v)
    mod.run(check_races=True)
    np.testing.assert_array_equal(mod.get_output(0), g.reference(ins)[0])


def test_a_concat_of_one_tensor_twice_and_of_two_images():
    n, h = Dim("n", 1, 3), Dim("h", 1, 9)
    g = Graph("twice")
    x = g.input("x", (n, 3, h, 5))
    r = g.add(ops.relu((n, 3, h, 5), -5), x, name="r")
    g.output(g.add(Concat(((n, 3, h, 5), (n, 3, h, 5), (n, 3, h, 5)), 1), r, x, r, name="cat"))
    lib = compiler.build(g)
    rng = np.random.default_rng(10)
    for shape in ((1, 3, 1, 5), (3, 3, 9, 5), (2, 3, 4, 5)):
        x = rand(rng, shape)
        m = compiler.GraphModule(lib)
        m.set_input("x", x)
        m.run(check_races=True)
        r = np.maximum(x, -5)
        np.testing.assert_array_equal(m.get_output(0), np.concatenate([r, x, r], axis=1))
