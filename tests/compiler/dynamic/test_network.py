"""Dynamic networks: an ONNX model with symbolic height and width built into one binary
(compiler/dynamic/network.py).

The model (conv, conv, conv, residual add with relu, 2x2 max pool stride 2, conv stride 2) is
quantised by onnxruntime, its input's and output's height and width made symbolic, imported with
dims={"height": (lo, hi), "width": (lo, hi)} and built once; hypothesis draws shapes in range and
every output is compared on every element with the graph's numpy model and (QOperator) with
onnxruntime, race-checked.  Shapes out of range or
inconsistent are refused naming the dimension; a bad derived dim in the argument block is a
simulation error; removing a barrier between two layers is a race.
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import CompileError, Dim, models, ops
from compiler.dynamic.graph import DynamicGraph
from compiler.graph import Graph
from compiler.assembler import assemble
from compiler.models import Net
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator

from tests.onnx_helpers import session

pytestmark = pytest.mark.usefixtures("warm_engine")
RANGE = (8, 40)


def symbolic(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its inputs' and outputs' height and width symbolic, and no fixed inner shapes."""
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        dims[2].dim_param, dims[3].dim_param = "height", "width"
    del model.graph.value_info[:]
    return model


@functools.lru_cache(maxsize=None)
def residual_model(fmt: str = "qoperator", avg: bool = False) -> onnx.ModelProto:
    n = Net("dynres", (1, 3, 16, 16), 1)
    x = n.conv(n.input, 8, 3, 1)
    y = n.conv(n.conv(x, 8, 3, 1), 8, 3, 1, act=None)
    s = n.add(y, x, act="relu")
    m = n.avg_pool(s, 2, 2, 0) if avg else n.max_pool(s, 2, 2, 0)
    n.output(n.conv(m, 8, 3, 2))
    return symbolic(models.quantize(n.model(), fmt, seed=1, per_channel=True, samples=3))


@functools.lru_cache(maxsize=None)
def built(fmt: str = "qoperator"):
    model = residual_model(fmt)
    dg = compiler.from_onnx(model, dims={"height": RANGE, "width": RANGE})
    return model, dg, compiler.build(dg)


def onnxruntime_output(model, dg, x: np.ndarray) -> np.ndarray:
    ref = session(model).run(None, {model.graph.input[0].name: x})[0]
    g = dg.at({"height": x.shape[2], "width": x.shape[3]})
    return ref if ref.dtype == np.int8 else g.values[g.outputs[0]].quant.quantize(ref)


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), h=st.integers(*RANGE), w=st.integers(*RANGE))
def test_onnx_network_bit_exact_with_onnxruntime_across_the_range(fmt, seed, h, w):
    model, dg, lib = built(fmt)
    x = np.random.default_rng(seed).standard_normal((1, 3, h, w)).astype(np.float32) * 2
    m = compiler.GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    y = m.get_output(0, quantized=True)
    g = dg.at({"height": h, "width": w})
    want = g.reference({g.inputs[0]: g.values[g.inputs[0]].quant.quantize(x)})[0]
    assert y.shape == want.shape == (1, 8, ((h // 2) - 1) // 2 + 1, ((w // 2) - 1) // 2 + 1)
    np.testing.assert_array_equal(y, want)
    assert len(np.unique(y)) > 3
    if fmt == "qoperator":      # QDQ: onnxruntime's own float path differs by a step here and there,
        np.testing.assert_array_equal(y, onnxruntime_output(model, dg, x))   # static builds alike


def test_the_binary_saved_and_loaded_runs_under_nnpsim_run(tmp_path, capsys):
    from nnpsim.cli import main

    model, dg, lib = built()
    lib.save(tmp_path / "net.bin")
    loaded = compiler.load(tmp_path / "net.bin")
    inp, out = loaded.meta["inputs"][0], loaded.meta["outputs"][0]
    assert inp["shape"] == [1, 3, "height", "width"]
    rng = np.random.default_rng(3)
    x = rng.integers(-128, 128, (1, 3, 21, 38)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(tmp_path / "net.bin"), "--input", f"{inp['buffer']}={tmp_path / 'x.npy'}",
                 "--output", f"{out['buffer']}={tmp_path / 'y.npy'}", "--check-races"]) == 0
    want = onnxruntime_output(model, dg, dg.at({"height": 21, "width": 38}).values[inp["name"]].quant.dequantize(x))
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), want)
    capsys.readouterr()
    np.save(tmp_path / "bad.npy", x[:, :, :7])
    assert main(["run", str(tmp_path / "net.bin"), "--input", f"{inp['buffer']}={tmp_path / 'bad.npy'}"]) == 1
    assert "dimension height = 7 is outside its range [8, 40]" in capsys.readouterr().err


def test_out_of_range_shapes_are_refused_naming_the_dimension():
    _, _, lib = built()
    m = compiler.GraphModule(lib)
    for shape, message in (((1, 3, 7, 8), "dimension height = 7 is outside its range \\[8, 40\\]"),
                           ((1, 3, 8, 41), "dimension width = 41 is outside its range \\[8, 40\\]"),
                           ((1, 4, 8, 8), "axis 1 is 4, expected 3 \\(it is not dynamic\\)"),
                           ((1, 3, 8), "has 3 dimensions")):
        with pytest.raises(CompileError, match=message):
            m.set_input(0, np.zeros(shape, np.float32))
    with pytest.raises(CompileError, match=r"dimension width = 1 is outside its range \[2, 40\]"):
        compiler.from_onnx(residual_model(), dims={"height": RANGE, "width": (2, 40)}).at({"height": 8, "width": 1})


def two_input_graph(seed: int = 0) -> DynamicGraph:
    """x + y -> relu -> 3x3 conv stride 2, both inputs (1, 8, h, w): a compiler.Graph made per shape."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-20, 21, (8, 8, 3, 3))
    b, mult, shift = rng.integers(-500, 500, 8), rng.integers(2**29, 2**31, 8), rng.integers(20, 24, 8)

    def make(values):
        shape = (1, 8, values["h"], values["w"])
        g = Graph()
        x, y = g.input("x", shape), g.input("y", shape)
        s = g.add(ops.add(shape, za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1), x, y, name="sum")
        r = g.add(ops.relu(shape, 1), s, name="relu")
        g.output(g.add(ops.conv2d(shape, w, b, stride=2, padding=1, multiplier=mult, shift=shift), r, name="conv"))
        return g

    return DynamicGraph(make, (Dim("h", 5, 30), Dim("w", 5, 30)))


def test_a_graph_made_per_shape_with_two_inputs():
    dg = two_input_graph()
    lib = compiler.build(dg)
    rng = np.random.default_rng(1)
    for h, w in ((5, 5), (30, 30), (17, 6)):
        ins = {k: rng.integers(-128, 128, (1, 8, h, w)).astype(np.int8) for k in ("x", "y")}
        m = compiler.GraphModule(lib)
        for k, a in ins.items():
            m.set_input(k, a)
        m.run(check_races=True)
        np.testing.assert_array_equal(m.get_output(0), dg.reference(ins)[0])
    m = compiler.GraphModule(lib)
    m.set_input("x", np.zeros((1, 8, 9, 12), np.int8))
    m.set_input("y", np.zeros((1, 8, 10, 12), np.int8))
    with pytest.raises(CompileError, match="dimension h is 10 in input y axis 2 but 9 in input x axis 2"):
        m.run()
    sim = Simulator(lib.config)
    sim.load(lib.program)
    sim.write("x", np.zeros((1, 8, 9, 12), np.int8))
    sim.write("y", np.zeros((1, 8, 10, 12), np.int8))
    with pytest.raises(SimError, match="the inputs' shapes disagree: dimension h is 9 from an earlier input but 10"):
        sim.run()


def test_nnpsim_run_refuses_inputs_that_disagree(tmp_path, capsys):
    from nnpsim.cli import main

    lib = compiler.build(two_input_graph())
    lib.save(tmp_path / "two.bin")
    np.save(tmp_path / "x.npy", np.ones((1, 8, 9, 12), np.int8))
    np.save(tmp_path / "y.npy", np.ones((1, 8, 10, 12), np.int8))
    run = ["run", str(tmp_path / "two.bin"), "--input", f"x={tmp_path / 'x.npy'}", "--input", f"y={tmp_path / 'y.npy'}"]
    assert main(run) == 1
    assert "the inputs' shapes disagree: dimension h is 9 from an earlier input but 10" in capsys.readouterr().err
    np.save(tmp_path / "y.npy", np.ones((1, 8, 9, 12), np.int8))
    assert main(run + ["--output", f"conv={tmp_path / 'y_out.npy'}"]) == 0
    assert np.load(tmp_path / "y_out.npy").shape == (1, 8, 5, 6)


def test_a_bad_derived_dim_in_the_argument_block_is_a_simulation_error():
    dg = two_input_graph()
    lib = compiler.build(dg)
    assert 'dynamic.derived, "h_1=h:-1:1 w_1=w:-1:1"' in lib.asm
    sim = Simulator(lib.config)
    sim.load(lib.program)
    for k in ("x", "y"):
        sim.write(k, np.ones((1, 8, 12, 12), np.int8))
    args = sim.program.buffers["args"]
    sim.memory.view(0, args.addr + 8, 4)[:] = np.array([5], "<i4").view(np.uint8)     # h_1: 6 is right
    with pytest.raises(SimError, match=r"dimension h_1 = 5 but it follows from h = 12 as 6") as exc:
        sim.run()
    assert exc.value.code == errors.BAD_PARAM


def test_removing_a_layers_drain_wait_is_a_race():
    """The layers are ordered by each one's drain (its CU waits for its last stores): without it, the next
    layer's loads race with the stores."""
    dg = two_input_graph()
    lib = compiler.build(dg)
    lines = lib.asm.splitlines()
    drains = [k for k, line in enumerate(lines) if line.endswith("_drain:")]
    assert len(drains) == 2 and not any(line.strip().startswith("barrier") for line in lines)   # relu folded into add
    assert [layer["ops"] for layer in lib.meta["layers"]] == ["add + clip", "conv2d"]
    rng = np.random.default_rng(2)
    ins = {k: rng.integers(-128, 128, (1, 8, 30, 30)).astype(np.int8) for k in ("x", "y")}
    for d in drains[:-1]:
        k = next(j for j in range(d, len(lines)) if "sem.wait" in lines[j])
        mutant = lines[:k] + ["        nop"] + lines[k + 1:]
        sim = Simulator(lib.config)
        sim.load(assemble("\n".join(mutant) + "\n", lib.files, "mutant.s"))
        for name, a in ins.items():
            sim.write(name, a)
        with pytest.raises(SimError) as exc:
            sim.run(check_races=True, max_cycles=5_000_000)
        assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK), exc.value


def test_a_flatten_after_a_global_pool_as_the_output_and_a_merging_reshape_refused():
    """A flatten of the global pool's (1, 8, 1, 1) that is the graph's output is copied out, equal to the
    graph's model at every height; a reshape merging the dynamic height with the width is refused by
    name, and so is a bad dims argument."""
    from compiler.ops import Reshape

    def make(values):
        shape = (1, 8, values["h"], 5)
        g = Graph()
        y = g.add(ops.global_avg_pool2d(shape), g.input("x", shape), name="pool")
        g.output(g.add(Reshape((1, 8, 1, 1), (1, 8)), y, name="flatten"))
        return g

    dg = DynamicGraph(make, (Dim("h", 3, 9),))
    m = compiler.GraphModule(compiler.build(dg))
    rng = np.random.default_rng(8)
    for h in (3, 7, 9):
        x = rng.integers(-128, 128, (1, 8, h, 5)).astype(np.int8)
        m.set_input("x", x)
        m.run(check_races=True)
        np.testing.assert_array_equal(m.get_output(0), make({"h": h}).reference({"x": x})[0])

    def merging(values):
        shape = (1, 8, values["h"], 5)
        g = Graph()
        g.output(g.add(Reshape(shape, (1, 8, values["h"] * 5)), g.input("x", shape), name="merge"))
        return g

    with pytest.raises(CompileError, match=r"node merge \(reshape\): output axis 2 .* a dynamic reshape may "
                                           r"only move whole dimensions"):
        compiler.build(DynamicGraph(merging, (Dim("h", 3, 9),)))
    with pytest.raises(CompileError, match="a symbolic dimension takes one size or a range"):
        compiler.from_onnx(residual_model(), dims={"height": (8, 16, 32), "width": 8})


def test_one_module_runs_one_shape_after_another():
    dg = two_input_graph(3)
    m = compiler.GraphModule(compiler.build(dg))
    rng = np.random.default_rng(5)
    for h, w in ((30, 7), (6, 29), (11, 11)):
        ins = {k: rng.integers(-128, 128, (1, 8, h, w)).astype(np.int8) for k in ("x", "y")}
        for k, a in ins.items():
            m.set_input(k, a)
        m.run()
        np.testing.assert_array_equal(m.get_output(0), dg.reference(ins)[0])


def test_a_range_too_large_for_ddr_is_refused():
    rng = np.random.default_rng(0)
    w = rng.integers(-3, 4, (8, 8, 3, 3))

    def make(values):
        shape = (1, 8, values["h"], 4096)
        g = Graph()
        x = g.input("x", shape)
        g.output(g.add(ops.conv2d(shape, w, None, padding=1, multiplier=np.full(8, 2**30), shift=np.full(8, 31)),
                       x, name="conv"))
        return g

    with pytest.raises(CompileError, match=r"tensors at the largest shape \(h <= 4096\) need .* narrow the ranges"):
        compiler.build(DynamicGraph(make, (Dim("h", 1, 4096),)))


def mobilenet_v2_features(stop: str = "GlobalAveragePool") -> onnx.ModelProto:
    """MobileNetV2 (32x32, QOperator) up to its global average pool (or up to the first node whose type
    holds `stop`): every depthwise, expand and project conv, the residual adds and the last 1x1 conv
    (320 -> 1280, weights larger than WBUF: split in two parts); its height and width symbolic."""
    from compiler import models

    m = models.build("mobilenetv2", size=32, classes=10)
    g = m.graph
    cut = next(k for k, n in enumerate(g.node) if stop in n.op_type)
    feat = g.node[cut].input[0]
    del g.node[cut:]
    del g.output[:]
    g.output.append(onnx.helper.make_tensor_value_info(feat, onnx.TensorProto.INT8, None))
    for axis, name in ((2, "height"), (3, "width")):
        g.input[0].type.tensor_type.shape.dim[axis].dim_param = name
    del g.value_info[:]
    return m


def test_mobilenet_v2_features_one_binary_across_the_range():
    dg = compiler.from_onnx(mobilenet_v2_features(), dims={"height": (32, 64), "width": (32, 64)})
    lib = compiler.build(dg)
    assert lib.asm.count("nu.dwconv") >= 17                    # the depthwise convs on the NU's own mode
    assert "; ---- part 1" in lib.asm                           # the last conv in two parts
    rng = np.random.default_rng(26)
    for h, w, races in ((32, 32, True), (64, 40, False), (48, 64, False)):
        x = rng.integers(-128, 128, (1, 3, h, w)).astype(np.int8)
        m = compiler.GraphModule(lib)
        m.set_input(0, x)
        m.run(check_races=races)
        g = dg.at({"height": h, "width": w})
        np.testing.assert_array_equal(m.get_output(0, quantized=True), g.reference({g.inputs[0]: x})[0])


def test_a_networks_conv_after_conv_is_fused_on_chip():
    """The residual model's second and third convs: the intermediate has one reader, so the two run as
    one fused program (tile rows in DM, no DDR buffer between), and the residual's add after them runs in
    it too (on the third conv's rows, its other input from DDR); still equal to the reference."""
    _, dg, lib = built("qoperator")
    fused = [layer for layer in lib.meta["layers"] if len(layer["nodes"]) > 1]
    assert len(fused) == 1 and fused[0]["ops"] == "conv2d -> conv2d -> add" and "L1_fused_rows:" in lib.asm
    x = np.random.default_rng(27).integers(-128, 128, (1, 3, 23, 17)).astype(np.int8)
    m = compiler.GraphModule(lib)
    m.set_input(0, x)                        # int8: taken as is
    m.run(check_races=True)
    g = dg.at({"height": 23, "width": 17})
    np.testing.assert_array_equal(m.get_output(0, quantized=True), g.reference({g.inputs[0]: x})[0])


def test_mobilenet_v2_to_its_end_one_binary_across_the_range():
    """The whole classifier: the QLinearGlobalAveragePool's window is the actual plane (1x1 at 32 px,
    2x2 at 64), its float factor read by the CU from a table by plane size; the flatten is the pool's
    buffer, the QGemm a 1x1 conv over it."""
    from compiler import models

    model = models.build("mobilenetv2", size=32, classes=10)
    for axis, name in ((2, "height"), (3, "width")):
        model.graph.input[0].type.tensor_type.shape.dim[axis].dim_param = name
    del model.graph.value_info[:]
    dg = compiler.from_onnx(model, dims={"height": (32, 64), "width": (32, 64)})
    lib = compiler.build(dg)
    assert "pool_scales:" in lib.asm and "setp    vu.win_h" in lib.asm
    rng = np.random.default_rng(44)
    for h, w, races in ((32, 32, True), (64, 40, False)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32)
        m = compiler.GraphModule(lib)
        m.set_input(0, x)
        m.run(check_races=races)
        g = dg.at({"height": h, "width": w})
        want = g.reference({g.inputs[0]: g.values[g.inputs[0]].quant.quantize(x)})[0]
        assert want.shape == (1, 10)
        np.testing.assert_array_equal(m.get_output(0, quantized=True), want)


def odd_strides_graph(seed: int = 0) -> DynamicGraph:
    """conv 3x3 stride 3 -> average pool 3x3/2 over the real elements -> max pool 3x3/3 -> global average
    (float form): every size after the first conv divided by 3 on the CU."""
    rng = np.random.default_rng(seed)
    w = rng.integers(-20, 21, (16, 8, 3, 3))
    b, mult, shift = rng.integers(-500, 500, 16), rng.integers(2**29, 2**31, 16), rng.integers(20, 24, 16)

    def make(values):
        shape = (1, 8, values["h"], values["w"])
        g = Graph()
        x = g.input("x", shape)
        c = ops.conv2d(shape, w, b, stride=3, padding=1, multiplier=mult, shift=shift, zp_out=-3)
        y = g.add(c, x, name="conv")
        a = ops.avg_pool2d(c.output.shape, 3, 2, 1, count_include_pad=False, x_zp=-3)
        y = g.add(a, y, name="avg")
        mp = ops.max_pool2d(a.output.shape, 3, 3, 1)
        y = g.add(mp, y, name="max")
        gp = ops.global_avg_pool2d(mp.output.shape, x_zp=-3, scale_x=np.float32(0.05), scale_out=np.float32(0.02),
                                   zp_out=4)
        g.output(g.add(gp, y, name="global"))
        return g

    return DynamicGraph(make, (Dim("h", 9, 80), Dim("w", 9, 80)))


def test_a_network_of_odd_strides_and_averages_without_padding():
    dg = odd_strides_graph()
    lib = compiler.build(dg)
    assert "mulhu" in lib.asm and ":0:3" in lib.asm          # a derived dim divided by 3
    rng = np.random.default_rng(45)
    for h, w in ((9, 9), (80, 80), (41, 17), (23, 70)):
        x = rng.integers(-128, 128, (1, 8, h, w)).astype(np.int8)
        m = compiler.GraphModule(lib)
        m.set_input(0, x)
        m.run(check_races=True)
        np.testing.assert_array_equal(m.get_output(0), dg.reference({"x": x})[0])


def test_a_float_average_pool_network_equals_onnxruntime():
    """The residual model with QLinearAveragePool 2x2/2 (float form, once refused): one binary, equal to
    onnxruntime at shapes across the range."""
    model = residual_model(avg=True)
    dg = compiler.from_onnx(model, dims={"height": RANGE, "width": RANGE})
    lib = compiler.build(dg)
    assert "vu.pool.favg" in lib.asm or "vu.slide.favg" in lib.asm
    rng = np.random.default_rng(47)
    for h, w in ((RANGE[0], RANGE[1]), (RANGE[1], 13), (21, RANGE[0] + 1)):
        x = rng.standard_normal((1, 3, h, w)).astype(np.float32) * 2
        m = compiler.GraphModule(lib)
        m.set_input(0, x)
        m.run(check_races=True)
        y = m.get_output(0, quantized=True)
        g = dg.at({"height": h, "width": w})
        np.testing.assert_array_equal(y, g.reference({g.inputs[0]: g.values[g.inputs[0]].quant.quantize(x)})[0])
        np.testing.assert_array_equal(y, onnxruntime_output(model, dg, x))
