"""Whole networks: a Graph compiled into one program, run by GraphModule, bit-exact against the graph's model."""
from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import compiler
from compiler import ops
from compiler.graph import Graph
from compiler.ops import Concat
from compiler.library import ARENA
from compiler.network.partition import partition
from compiler.runtime import GraphModule, dequantize, quantize
from isa_spec import decode, load_isa
from tests.helpers.networks import conv_op, int8_data, residual_net, run_graph, topologies


@pytest.fixture(scope="module")
def residual():
    rng = np.random.default_rng(11)
    g = residual_net(rng)
    return g, compiler.build(g)


def test_residual_network_is_bit_exact_and_race_free(residual):
    g, lib = residual
    rng = np.random.default_rng(3)
    x = int8_data(rng, (1, 8, 10, 10))
    m = run_graph(lib, x)
    np.testing.assert_array_equal(m.get_output(0, quantized=True), g.reference(x)[0])
    assert m.stats.cycles > 0


def test_fusion_groups_conv_add_relu_with_the_conv_as_second_operand(residual):
    g, _ = residual
    groups = partition(g)
    kinds = [[o.kind for o in grp.ops] for grp in groups]
    assert kinds == [["conv2d"], ["conv2d", "add", "clip"], ["max_pool2d"], ["dense"]]
    assert groups[1].inputs == ["conv1", "conv1"]          # x of the conv, then the add's other operand


def test_one_program_with_a_label_per_layer_and_no_barrier(residual):
    _, lib = residual
    isa = load_isa()
    names = [decode(int(w), isa)[0].mnemonic for w in lib.program.code]
    assert "barrier" not in names
    assert names.count("halt") == 1
    for layer in lib.layers:
        assert layer["label"] in lib.program.symbols


def test_layers_overlap_and_cover_every_command(residual):
    _, lib = residual
    m = run_graph(lib, int8_data(np.random.default_rng(5), (1, 8, 10, 10)))
    stats = m.layer_stats()
    # the pool stays a kernel of its own: with conv2 requantised by nu.conv.rq, conv2 + add + clip
    # then the pool are predicted at 1,849 + 685 cycles, less than the four ops fused
    assert [s.name for s in stats] == ["conv1", "conv2", "pool", "fc"]
    assert stats[1].ops == "conv2d + add + clip"
    assert sum(s.commands for s in stats) == m.stats.commands
    assert sum(s.macs for s in stats) == m.stats.macs
    assert any(b.start < a.end for a, b in zip(stats, stats[1:])), "no layer overlapped the one before"
    assert all(s.cycles > 0 and s.bound_cycles > 0 for s in stats)


def test_float_inputs_are_quantised_and_outputs_dequantised(residual):
    g, lib = residual
    rng = np.random.default_rng(8)
    xf = rng.normal(0, 2, (1, 8, 10, 10)).astype(np.float32)
    m = run_graph(lib, xf, races=False)
    xq = quantize(xf, 0.05, 2, None)
    want = g.reference(xq)[0]
    np.testing.assert_array_equal(m.get_output(0, quantized=True), want)
    np.testing.assert_array_equal(m.get_output(0), (want.astype(np.float32) - 4) * np.float32(0.1))
    assert quantize(np.float32([0.025, 0.075, -0.025]), 0.05, 0, None).tolist() == [0, 2, 0]   # half to even


def test_save_and_load_run_the_same(residual, tmp_path):
    g, lib = residual
    x = int8_data(np.random.default_rng(9), (1, 8, 10, 10))
    lib.save(tmp_path / "model.nnp")
    back = compiler.load(tmp_path / "model.nnp")
    assert back.meta == lib.meta
    a, b = run_graph(lib, x), run_graph(back, x)
    np.testing.assert_array_equal(a.get_output(0), b.get_output(0))
    assert a.stats.cycles == b.stats.cycles


def test_nnpsim_runs_the_network_binary(residual, tmp_path):
    g, lib = residual
    x = int8_data(np.random.default_rng(10), (1, 8, 10, 10))
    lib.save(tmp_path / "model.nnp")
    np.save(tmp_path / "x.npy", x)
    ins, outs = lib.meta["inputs"][0]["buffer"], lib.meta["outputs"][0]["buffer"]
    run = subprocess.run([sys.executable, "-m", "nnpsim.cli", "run", "model.nnp", "--input", f"{ins}=x.npy",
                          "--output", f"{outs}=y.npy"], cwd=tmp_path, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), g.reference(x)[0])


def test_trace_has_a_layer_track(residual, tmp_path):
    _, lib = residual
    m = GraphModule(lib)
    m.set_input(0, int8_data(np.random.default_rng(12), (1, 8, 10, 10)))
    m.run(trace=tmp_path / "t.json")
    events = json.loads((tmp_path / "t.json").read_text())["traceEvents"]
    layers = [e for e in events if e.get("cat") == "layer"]
    assert [e["name"] for e in layers] == ["conv1", "conv2", "pool", "fc"]


def test_bad_inputs_get_clear_errors(residual, tmp_path):
    _, lib = residual
    m = GraphModule(lib)
    with pytest.raises(compiler.CompileError, match=r"input input.1 has shape \(1, 8, 10, 10\), got \(1, 8, 10\)"):
        m.set_input(0, np.zeros((1, 8, 10), np.int8))
    with pytest.raises(compiler.CompileError, match="takes float32 .* or int8, got int32"):
        m.set_input(0, np.zeros((1, 8, 10, 10), np.int32))
    with pytest.raises(compiler.CompileError, match="no input named 'nope'"):
        m.set_input("nope", np.zeros((1, 8, 10, 10), np.int8))
    with pytest.raises(compiler.CompileError, match="input index 3 is out of range"):
        m.set_input(3, np.zeros((1, 8, 10, 10), np.int8))
    with pytest.raises(compiler.CompileError, match="set every input before run"):
        m.run()
    with pytest.raises(compiler.CompileError, match="no output yet"):
        m.get_output(0)
    k = compiler.build(ops.relu((1, 64)))
    k.save(tmp_path / "plain.bin")
    with pytest.raises(compiler.CompileError, match="not built from a graph"):
        compiler.load(tmp_path / "plain.bin")


def test_concat_of_two_branches_writes_in_place():
    rng = np.random.default_rng(21)
    g = Graph("concat")
    x = g.input("x", (1, 8, 6, 6))
    a = g.add(conv_op(rng, (1, 8, 6, 6), 8), x, name="left")
    b = g.add(conv_op(rng, (1, 8, 6, 6), 24, k=1), x, name="right")
    c = g.add(Concat(((1, 8, 6, 6), (1, 24, 6, 6))), a, b, name="cat")
    d = g.add(conv_op(rng, (1, 32, 6, 6), 16), c, name="after")
    g.output(d)
    lib = compiler.build(g.validate())
    x0 = int8_data(rng, (1, 8, 6, 6))
    np.testing.assert_array_equal(run_graph(lib, x0).get_output(0), g.reference(x0)[0])
    assert len(lib.layers) == 3            # the concat moves no data


def test_arena_reuses_bytes_by_liveness():
    rng = np.random.default_rng(31)
    g = Graph("chain")
    t = g.input("x", (1, 8, 8, 8))
    for k in range(5):
        t = g.add(conv_op(rng, (1, 8, 8, 8), 8, relu=True), t, name=f"c{k}")
    g.output(t)
    lib = compiler.build(g.validate(), fuse=False)      # every intermediate in DDR, none fused into DM
    arena = lib.meta["arena"]
    moved = len(lib.meta["layout"]["transforms"])      # each transform's output is one more intermediate
    assert arena["naive_bytes"] == (4 + moved) * 8 * 8 * 8
    assert arena["bytes"] == 2 * 8 * 8 * 8         # two live at a time, ping-pong
    assert ARENA in lib.program.buffers
    x0 = int8_data(rng, (1, 8, 8, 8))
    np.testing.assert_array_equal(run_graph(lib, x0).get_output(0), g.reference(x0)[0])


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(topologies())
def test_random_networks_are_bit_exact_and_race_free(drawn):
    g, seed = drawn
    lib = compiler.build(g)
    x = int8_data(np.random.default_rng(seed + 1), g.values[g.inputs[0]].shape)
    np.testing.assert_array_equal(run_graph(lib, x).get_output(0), g.reference(x)[0])


def test_dequantize_is_onnxruntime_order():
    q = np.array([-128, 0, 5, 127], np.int8)
    np.testing.assert_array_equal(dequantize(q, np.float32(0.1), 3, None),
                                  (q.astype(np.int32) - 3).astype(np.float32) * np.float32(0.1))


def _fconv(rng, shape, out, relu=False):
    c = shape[1]
    w = rng.integers(-20, 21, (out, c, 3, 3)).astype(np.int8)
    b = rng.integers(-800, 800, out).astype(np.int32)
    scale = compiler.quant.ort_scale(np.float32(0.05), rng.uniform(0.002, 0.01, out).astype(np.float32),
                                     np.float32(0.08))
    return ops.conv2d(shape, w, b, padding=1, x_zp=2, scale=scale, zp_out=-3, lo=-3 if relu else -128)


@pytest.mark.parametrize("conv_first", [True, False])
def test_onnxruntime_arithmetic_network(conv_first):
    """Float forms end to end; a float add with the conv as its second operand is not swapped (it is not
    symmetric), so it runs as a kernel of its own, still exact."""
    rng = np.random.default_rng(41)
    g = Graph("float")
    x = g.input("x", (1, 8, 7, 7))
    a = g.add(_fconv(rng, (1, 8, 7, 7), 8, relu=True), x, name="c1")
    b = g.add(_fconv(rng, (1, 8, 7, 7), 8), a, name="c2")
    add = ops.add((1, 8, 7, 7), za=-3, zb=-3, scale_a=np.float32(0.08), scale_b=np.float32(0.08),
                  scale_out=np.float32(0.11), zp_out=1)
    s = g.add(add, *((b, a) if conv_first else (a, b)), name="add")
    pool = ops.global_avg_pool2d((1, 8, 7, 7), x_zp=1, scale_x=np.float32(0.11), scale_out=np.float32(0.02),
                                 zp_out=-5)
    g.output(g.add(pool, s, name="gap"))
    g.validate()
    kinds = [[o.kind for o in grp.ops] for grp in partition(g)]
    assert kinds[1] == (["conv2d", "add"] if conv_first else ["conv2d"])
    lib = compiler.build(g)
    x0 = int8_data(rng, (1, 8, 7, 7))
    np.testing.assert_array_equal(run_graph(lib, x0).get_output(0), g.reference(x0)[0])


@pytest.mark.parametrize("case", ["convs", "residual", "pools", "dense", "kept_activations"])
def test_onnx_models_on_the_machine_equal_onnxruntime(case):
    """QOperator test networks (stride, dilation, groups, depthwise, residual, pools, gemm), compiled
    whole and run on the simulator: the float output equals onnxruntime's, element for element."""
    from tests.onnx_helpers import quantised, session
    model = quantised(case, "qoperator")
    g = compiler.from_onnx(model)
    m = GraphModule(compiler.build(g))
    sess = session(model)
    rng = np.random.default_rng(17)
    feeds = {}
    for k, name in enumerate(g.inputs):
        feeds[sess.get_inputs()[k].name] = x = rng.normal(0, 1.5, g.values[name].shape).astype(np.float32)
        m.set_input(k, x)
    m.run(check_races=True)
    for k, want in enumerate(sess.run(None, feeds)):
        np.testing.assert_array_equal(m.get_output(k), want)


def test_a_network_on_two_units_fits_few_semaphores_through_the_cu(residual):
    """One sync pass over a whole network on two NUs and two VUs meets more (producer, consumer) queue
    pairs than the configuration has semaphores: the pairs past a budget go through the CU (one
    semaphore per producer queue), still bit-exact and race-free.  Without that this raised."""
    from nnpsim.config import Config
    g, _ = residual
    few = Config(nu_count=2, vu_count=2, semaphores=8)
    assert len(_semaphores(compiler.build(g, config=Config(nu_count=2, vu_count=2)))) > few.semaphores
    lib = compiler.build(g, config=few)
    assert max(_semaphores(lib)) < few.semaphores
    x = int8_data(np.random.default_rng(4), (1, 8, 10, 10))
    m = run_graph(lib, x)
    np.testing.assert_array_equal(m.get_output(0, quantized=True), g.reference(x)[0])


def _semaphores(lib) -> set[int]:
    """Every semaphore a network's program waits on or signals."""
    isa = load_isa()
    return {v for w in lib.program.code for k, v in decode(int(w), isa)[1].items()
            if k in ("wait", "signal", "sem") and v is not None}
