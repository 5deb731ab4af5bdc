"""Graph fusion (compiler.network.fusion): multi-anchor kernels decided by the cost model, against fuse=False."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.graph import Graph
from compiler.library import Decision
from compiler.network.fusion import anchors, chains, fuse
from compiler.network.build import plan_kernels
from compiler.network.partition import partition, per_node
from compiler.network.storage import alias
from compiler.runtime import GraphModule
from nnpsim.config import Config
from tests.onnx_helpers import nnpc_compile_tiny
from tests.helpers.activations import ACTS, LEVELS, run_both, se_block
from tests.helpers.networks import bottleneck, int8_data, inverted_residual, stem


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
        x = int8_data(np.random.default_rng(seed), g.values[g.inputs[0]].shape)
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
    """compiler.interleave's priced choice (one after another or interleaved) is in the layer's title."""
    name, g, fused, apart = built
    titles = [line for line in fused.asm.splitlines() if "pipelining:" in line]
    for k, layer in enumerate(fused.layers):
        if anchors_of(g, layer) >= 2:
            mine = [t for t in titles if f"layer {k}: {layer['name']}: " in t]
            assert len(mine) == 1 and "one after another" in mine[0], f"{name}: {layer['name']}: {mine}"


def test_the_report_gives_each_fused_kernels_pipelining_variant_and_prices(built):
    """Every multi-anchor kernel records compiler.interleave's choice: the cheapest variant that fits,
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
    x = int8_data(np.random.default_rng(5), g.values[g.inputs[0]].shape)
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
    k(*[int8_data(rng, b.shape) for b in k.ir.inputs], check_races=True)
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
    """fusion.fuse with made-up prices: conv1 + conv2 pays, conv1 + conv2 + conv3 does not, but
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


@pytest.mark.parametrize("fmt", ["qoperator", "qdq"])
@pytest.mark.parametrize("act", ACTS)
def test_a_squeeze_excite_block_runs_its_new_ops_fused_and_bit_exact(fmt, act):
    """Depthwise conv -> x * act(x) -> squeeze-excite -> 1x1 projection (13x11 map, 24 channels): the
    activation is in the depthwise conv's epilogue, the gate's act in its 1x1 conv's, and the SE multiply
    by the per-channel gate in the projection conv's kernel (its input x * gate in DM, never in DDR) when the
    cost model prices that cheaper, as its decision records; every element equals onnxruntime's."""
    m = se_block(fmt, act)
    g = compiler.from_onnx(m)
    lib = compiler.build(g)
    ops = [layer["ops"] for layer in lib.layers]
    assert ops[0] == "conv2d + lut" and any(o.endswith("conv2d + lut") for o in ops[1:]) and "lut" not in ops, ops
    se = [d for d in lib.meta["fusion"] if d["ops"] == "mul -> conv2d"]
    assert len(se) == 1 and se[0]["fused"] == (se[0]["fused_cycles"] < se[0]["apart_cycles"])
    assert ("mul + conv2d" in ops) == se[0]["fused"] == ("mul" not in ops), ops
    x = np.random.default_rng(2).standard_normal(g.values[g.inputs[0]].shape).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for level, w in zip(LEVELS, want):
        want_q = g.values[g.outputs[0]].quant.quantize(w)
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), want_q, err_msg=level)
    assert lib.predicted_cycles == mod.stats.cycles
