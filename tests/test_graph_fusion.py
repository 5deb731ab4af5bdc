"""Graph fusion (compiler.graph_fusion): multi-anchor kernels decided by the cost model, against fuse=False."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import ops
from compiler.graph import Graph, QuantParams
from compiler.library import Decision
from compiler.network.fusion import anchors, chains, fuse
from compiler.network.build import plan_kernels
from compiler.network.partition import partition, per_node
from compiler.network.storage import alias
from compiler.quant import quantize_multipliers
from compiler.runtime import GraphModule
from nnpsim.config import Config
from tests.onnx_helpers import nnpc_compile_tiny
from tests.test_network import _conv, _int8


def _dw(rng, shape, k=3, stride=1, lo=-128, hi=127, zp_out=-2):
    """A depthwise k x k conv with a clamp (MobileNet's relu6 as a clip)."""
    c = shape[1]
    w = rng.integers(-30, 31, (c, 1, k, k)).astype(np.int8)
    m, s = quantize_multipliers(rng.uniform(0.5, 2.0, c) / (k * k * 8))
    return ops.conv2d(shape, w, rng.integers(-300, 300, c).astype(np.int32), stride=stride, padding=k // 2,
                      groups=c, x_zp=int(rng.integers(-4, 5)), multiplier=m, shift=s, zp_out=zp_out,
                      lo=max(lo, -128), hi=hi)


def _add(shape, zp_out=1):
    return ops.add(shape, za=-3, zb=2, ma=3 << 13, mb=5 << 12, shift=14, zp_out=zp_out)


def bottleneck(rng, c=32, hw=14) -> Graph:
    """A ResNet bottleneck: 1x1 reduce, 3x3, 1x1 expand, the identity shortcut added, relu; twice."""
    g = Graph("bottleneck")
    t = g.input("x", (1, c, hw, hw), quant=QuantParams(np.float32(0.05), np.int64(2)))
    shape = (1, c, hw, hw)
    for b in range(2):
        c1 = _conv(rng, shape, c // 4, k=1, relu=True)
        a = g.add(c1, t, name=f"b{b}_conv1")
        c2 = _conv(rng, c1.output.shape, c // 4, relu=True)
        a = g.add(c2, a, name=f"b{b}_conv2")
        c3 = _conv(rng, c2.output.shape, c, k=1)
        a = g.add(c3, a, name=f"b{b}_conv3")
        s = g.add(_add(shape), a, t, name=f"b{b}_add")
        t = g.add(ops.relu(shape, 1), s, name=f"b{b}_relu")
    g.output(t)
    return g.validate()


def inverted_residual(rng, c=16, hw=12) -> Graph:
    """MobileNetV2 blocks: 1x1 expand + relu6, 3x3 depthwise + relu6, 1x1 project, shortcut add; then stride 2."""
    g = Graph("inverted")
    t = g.input("x", (1, c, hw, hw))
    shape = (1, c, hw, hw)
    for b, stride in enumerate((1, 2)):
        e = _conv(rng, shape, 4 * c, k=1, relu=True)
        a = g.add(e, t, name=f"b{b}_expand")
        d = _dw(rng, e.output.shape, stride=stride, lo=-2, hi=100)
        a = g.add(d, a, name=f"b{b}_dw")
        p = _conv(rng, d.output.shape, c, k=1)
        a = g.add(p, a, name=f"b{b}_project")
        if stride == 1:
            a = g.add(_add(shape), a, t, name=f"b{b}_add")
        t, shape = a, p.output.shape
    g.output(t)
    return g.validate()


def stem(rng, hw=32) -> Graph:
    """conv 3x3 stride 2 + relu, then max pool 3x3 / 2, then conv -> conv."""
    g = Graph("stem")
    t = g.input("x", (1, 3, hw, hw))
    c = _conv(rng, (1, 3, hw, hw), 32, stride=2, relu=True)
    t = g.add(c, t, name="conv1")
    p = ops.max_pool2d(c.output.shape, 3, 2, 1)
    t = g.add(p, t, name="pool")
    c2 = _conv(rng, p.output.shape, 48, relu=True)
    t = g.add(c2, t, name="conv2")
    c3 = _conv(rng, c2.output.shape, 48, k=1, stride=2)
    t = g.add(c3, t, name="conv3")
    g.output(t)
    return g.validate()


GRAPHS = {"bottleneck": bottleneck, "inverted residual": inverted_residual, "stem": stem}


@pytest.fixture(scope="module", params=list(GRAPHS))
def built(request):
    g = GRAPHS[request.param](np.random.default_rng(sum(map(ord, request.param))))
    return request.param, g, compiler.build(g), compiler.build(g, fuse=False)


def _run(lib, x, races=True):
    m = GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=races)
    return m


def test_fused_network_is_bit_exact_with_its_unfused_form_and_race_free(built):
    name, g, fused, apart = built
    for seed in range(2):
        x = _int8(np.random.default_rng(seed), g.values[g.inputs[0]].shape)
        want = g.reference(x)[0]
        got_fused = _run(fused, x).get_output(0, quantized=True)
        got_apart = _run(apart, x).get_output(0, quantized=True)
        np.testing.assert_array_equal(got_fused, want)
        np.testing.assert_array_equal(got_apart, want)


def test_the_cost_model_fuses_several_anchors_into_one_kernel(built):
    name, g, fused, apart = built
    multi = [layer for layer in fused.layers if anchors_of(g, layer) >= 2]
    assert multi, f"{name}: no kernel holds two anchors:\n{fused.fusion_report()}"
    assert len(fused.layers) < len(apart.layers)


def anchors_of(g: Graph, layer: dict) -> int:
    by_name = {n.name: n for n in g.nodes}
    return anchors([by_name[n].op for n in layer["nodes"]])


def test_fuse_false_keeps_one_kernel_per_node(built):
    name, g, fused, apart = built
    assert [layer["nodes"] for layer in apart.layers] == [[n.name] for n in g.nodes]
    assert apart.meta["fusion"] == [] and apart.meta["fused"] is False
    assert "fusion: off" in apart.fusion_report()


def test_every_decision_follows_the_prices_and_the_layers_follow_the_decisions(built):
    name, g, fused, apart = built
    made = [Decision(**d) for d in fused.meta["fusion"]]
    assert made
    for d in made:
        assert d.fused == (d.fused_cycles is not None and d.fused_cycles < d.apart_cycles), d.line()
    fused_sets = {tuple(d.members) for d in made if d.fused}
    for layer in fused.layers:
        if len(layer["nodes"]) > 1 and anchors_of(g, layer) >= 2:
            kernels_in = [d for d in fused_sets if d[0] == layer["name"]]
            assert kernels_in, f"{layer['name']} fused without a decision"


def test_every_fused_kernel_says_how_its_anchors_were_pipelined(built):
    """compiler.pipelining's priced choice (one after another or interleaved) is in the layer's title."""
    name, g, fused, apart = built
    titles = [line for line in fused.asm.splitlines() if "pipelining:" in line]
    for k, layer in enumerate(fused.layers):
        if anchors_of(g, layer) >= 2:
            mine = [t for t in titles if f"layer {k}: {layer['name']}: " in t]
            assert len(mine) == 1 and "one after another" in mine[0], f"{name}: {layer['name']}: {mine}"


def test_the_report_gives_each_fused_kernels_pipelining_variant_and_prices(built):
    """Every multi-anchor kernel records compiler.pipelining's choice: the cheapest variant that fits,
    every variant's price, in the report."""
    name, g, fused, apart = built
    report = fused.fusion_report()
    multi = [layer for layer in fused.layers if anchors_of(g, layer) >= 2]
    for layer in multi:
        p = layer["pipelining"]
        fits = {k: v for k, v in p["priced"].items() if v is not None}
        assert "one after another" in p["priced"], p
        assert p["chosen"] in fits and (fits[p["chosen"]] == min(fits.values()) or p["why"]), p
        line = (f"  {layer['name']} ({layer['ops']}): {p['chosen']} (predicted cycles: "
                + ", ".join(f"{k} {'does not fit' if v is None else f'{v:,}'}" for k, v in p["priced"].items()))
        assert line in report, f"{line!r} not in\n{report}"
    assert all(layer["pipelining"] is None for layer in apart.layers)


def test_fused_network_moves_fewer_ddr_bytes(built):
    name, g, fused, apart = built
    x = _int8(np.random.default_rng(5), g.values[g.inputs[0]].shape)
    f, a = _run(fused, x, races=False), _run(apart, x, races=False)
    assert f.stats.ddr_bytes < a.stats.ddr_bytes
    assert fused.meta["onchip_peak"]["dm"] > 0          # the intermediates live in DM


@pytest.mark.parametrize("name", list(GRAPHS))
def test_no_fused_kernel_is_slower_than_its_parts_when_simulated(name):
    g = GRAPHS[name](np.random.default_rng(sum(map(ord, name))))
    cfg = Config()
    groups, _ = plan_kernels(g, cfg)
    merged = [grp for grp in groups if grp.parts]
    assert merged
    rng = np.random.default_rng(7)
    for grp in merged:
        whole = _simulated_cycles(grp.ops, rng)
        parts = sum(_simulated_cycles(p.ops, rng) for p in grp.parts)
        assert whole <= parts, f"{name}: {grp.name} fused {whole} cycles, its parts {parts}"


def _simulated_cycles(chain, rng) -> int:
    k = compiler.build(*chain)
    k(*[_int8(rng, b.shape) for b in k.ir.inputs], check_races=True)
    return k.stats.cycles


def test_chains_link_only_single_consumer_first_inputs():
    g = bottleneck(np.random.default_rng(1))
    groups = partition(g, alias(g)[1])
    runs = [[groups[k].name for k in run] for run in chains(g, groups)]
    # conv1's input is also the shortcut: the block input has two readers and starts no link into conv1
    assert runs == [["b0_conv1", "b0_conv2", "b0_conv3"], ["b1_conv1", "b1_conv2", "b1_conv3"]]
    single = per_node(g)
    assert len(single) == len(g.nodes)


def test_nnpc_compile_report_prints_every_decision(tmp_path):
    out, nnp = nnpc_compile_tiny(tmp_path, "--report")
    assert out.returncode == 0, out.stderr
    assert "fusion:" in out.stdout and "on-chip high-water" in out.stdout
    lib = compiler.load(nnp)
    for d in lib.meta["fusion"]:
        assert Decision(**d).line() in out.stdout
    piped = [layer for layer in lib.layers if layer["pipelining"]]
    assert piped and "pipelining:" in out.stdout
    for layer in piped:
        assert f"  {layer['name']} ({layer['ops']}): {layer['pipelining']['chosen']} (predicted cycles: " \
            in out.stdout
    off, _ = nnpc_compile_tiny(tmp_path, "--report", "--no-fuse", out="u.nnp")
    assert off.returncode == 0 and "fusion: off" in off.stdout


def test_a_kernel_that_does_not_extend_may_hand_its_last_part_over():
    """graph_fusion.fuse with made-up prices: conv1 + conv2 pays, conv1 + conv2 + conv3 does not, but
    conv1 alone then conv2 + conv3 prices lower than conv1 + conv2 then conv3 alone: conv2 is handed over."""
    g = bottleneck(np.random.default_rng(1))
    groups = partition(g, alias(g)[1])
    cost = {("b0_conv1",): 10, ("b0_conv2",): 10, ("b0_conv3",): 10, ("b0_conv1", "b0_conv2"): 15,
            ("b0_conv1", "b0_conv2", "b0_conv3"): 30, ("b0_conv2", "b0_conv3"): 8}

    def price(grp):
        names = tuple(p.name for p in grp.parts or [grp])
        return cost.get(names, 10 * len(names) + 5 * (len(names) > 1))      # block 1: nothing pays

    out, made = fuse(g, groups, price, Config().dm_bytes)
    kernels = [[p.name for p in grp.parts] or [grp.name] for grp in out if grp.name.startswith("b0")]
    assert [k for k in kernels if "b0_conv1" in k or "b0_conv2" in k] == [["b0_conv1"], ["b0_conv2", "b0_conv3"]]
    handed = [d for d in made if "handed over" in d.why]
    assert handed and handed[0].fused and (handed[0].apart_cycles, handed[0].fused_cycles) == (15 + 10, 10 + 8)
