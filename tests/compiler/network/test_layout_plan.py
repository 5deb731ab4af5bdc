"""DDR activation layouts: strides, DMA dim order, kernels in any layout, and the network's layout plan."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import compiler
from compiler import ops
from compiler.network import layout_plan
from compiler.errors import CompileError
from compiler.graph import Graph
from compiler.ir import Buffer, Dma, Ref
from compiler.build import build
from compiler.lowering.layout import (LAYOUTS, act_strides, blocked_layout, chan_runs, ddr_order, from_layout,
                                      layouts_for, same_bytes, to_layout)
from compiler.network.build import build_network
from compiler.network.partition import partition
from compiler.network.storage import alias
from compiler.quant import quantize_multipliers
from nnpsim.config import Config
from tests.onnx_helpers import nnpc_compile_tiny
from tests.helpers.networks import conv_op, int8_data, run_graph, topologies

layouts = st.sampled_from(LAYOUTS)
any_layouts = st.one_of(layouts, st.integers(1, 6).map(blocked_layout))


# ----------------------------------------------------------------------------- strides and DMA order

@given(st.lists(st.integers(1, 5), min_size=1, max_size=5), any_layouts)
def test_strides_address_the_stored_bytes(shape, layout):
    # every channel's run (chan_runs: blocked layouts cut at blocks, the narrower last block apart)
    # addresses the bytes to_layout stored, which take exactly the tensor's size
    x = np.arange(int(np.prod(shape))).reshape(shape)
    stored = to_layout(x, layout).ravel()
    assert stored.size == x.size and sorted(stored) == list(range(x.size))
    if len(shape) >= 3:
        strides = act_strides(shape, layout)
        seen = 0
        for ca, k, nblk, off, bs, inner in chan_runs(shape, layout, 0, shape[1]):
            for b in range(nblk):
                for j in range(k):
                    for idx in np.ndindex(shape[0], *shape[2:]):
                        at = off + b * bs + j * inner[1] + sum(i * s for i, s in zip(idx, (inner[0],) + inner[2:]))
                        assert stored[at] == x[(idx[0], ca + b * k + j) + idx[1:]]
                        seen += 1
        assert seen == x.size
    else:
        strides = act_strides(shape, layout)
    if layout in LAYOUTS or len(shape) < 3 or shape[1] <= int(layout[2:].split("hw")[0]):
        for idx in np.ndindex(*shape):      # one block (or none): one set of strides for every channel
            assert stored[sum(i * s for i, s in zip(idx, strides))] == x[idx]
    np.testing.assert_array_equal(from_layout(stored, shape, layout), x)


@given(st.lists(st.integers(1, 5), min_size=3, max_size=5), any_layouts, any_layouts)
def test_same_bytes_means_the_same_bytes(shape, a, b):
    x = np.arange(int(np.prod(shape))).reshape(shape)
    assert same_bytes(shape, a, b) == np.array_equal(to_layout(x, a).ravel(), to_layout(x, b).ravel())


@pytest.mark.parametrize("bad", ["nchw32", "nc32hw16", "nc0hw0", "NCHW"])
def test_unknown_layout_is_refused_naming_it(bad):
    with pytest.raises(CompileError, match=repr(bad)):
        act_strides((1, 2, 3, 4), bad)


def _pairs(cmd: Dma) -> set[tuple[int, int]]:
    """Every (destination byte, source byte or None for padding) the DMA writes, by brute force."""
    out = set()
    for idx in np.ndindex(*cmd.size):
        pad = any(i < lo or i >= n - hi for i, n, lo, hi in zip(idx, cmd.size, cmd.pad_lo, cmd.pad_hi))
        d = cmd.dst.offset + sum(i * s for i, s in zip(idx, cmd.dst_stride))
        s = None if pad else cmd.src.offset + sum((i - lo) * st for i, lo, st in zip(idx, cmd.pad_lo, cmd.src_stride))
        out.add((d, s))
    return out


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 4), min_size=4, max_size=4), st.permutations(range(4)), st.booleans(),
       st.lists(st.integers(0, 1), min_size=4, max_size=4))
def test_ddr_order_is_the_same_copy_with_the_ddr_side_innermost(size, perm, load, pads):
    # a dense box in DDR addressed in a shuffled dim order, on chip contiguous in the given order
    ddr_stride = [0] * 4
    step = 1
    for k in perm:
        ddr_stride[k], step = step, step * size[k]
    chip_stride = [int(np.prod(size[:k])) for k in range(4)]
    lo = [min(p, n - 1) if load else 0 for p, n in zip(pads, size)]
    ddr, chip = Buffer("x", "ddr", 4096), Buffer("t", "vbuf", 4096)
    if load:
        cmd = Dma(0, Ref(chip, 8), Ref(ddr, 3), size, ddr_stride, chip_stride, lo, (0, 0, 0, 0), pad_value=5)
    else:
        cmd = Dma(0, Ref(ddr, 3), Ref(chip, 8), size, chip_stride, ddr_stride)
    got = ddr_order(cmd)
    assert _pairs(got) == _pairs(cmd)
    side = got.src_stride if load else got.dst_stride
    real = [s for s, n in zip(side, got.size) if n > 1]
    assert real == sorted(real)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 9), st.integers(1, 40), st.integers(1, 6), st.integers(1, 6), st.permutations(range(4)),
       st.booleans(), st.data())
def test_ddr_order_keeps_blocked_copies_and_runs_them_contiguously(block, c, h, w, perm, load, data):
    # the DMA of a box of channels x rows x columns of a blocked tensor, one per run of chan_runs,
    # its dims in a shuffled order: ddr_order must copy the same (destination, source) pairs, the
    # source bytes must be the box's elements as to_layout stores them, and the DDR side's strides
    # must end up innermost first
    shape, lay = (1, c, h, w), blocked_layout(block)
    c0 = data.draw(st.integers(0, c - 1))
    c1 = data.draw(st.integers(c0 + 1, c))
    r0 = data.draw(st.integers(0, h - 1))
    nr = data.draw(st.integers(1, h - r0))
    x = np.arange(int(np.prod(shape))).reshape(shape)
    stored = to_layout(x, lay).ravel()
    ddr, chip = Buffer("x", "ddr", x.size), Buffer("t", "vbuf", 1 << 16)
    want, got_src = set(), set()
    for ca, k, nblk, off, bs, (_, sc, sh, sw) in chan_runs(shape, lay, c0, c1):
        size = [k, w, nr, nblk]
        far = [sc, sw, sh, bs]
        near = [1, k, k * w, k * w * nr]
        pick = (lambda v: tuple(v[i] for i in perm))
        at = off + r0 * sh
        base = (ca - c0) * w * nr
        cmd = (Dma(0, Ref(chip, base), Ref(ddr, at), pick(size), pick(far), pick(near)) if load else
               Dma(0, Ref(ddr, at), Ref(chip, base), pick(size), pick(near), pick(far)))
        got = ddr_order(cmd)
        assert _pairs(got) == _pairs(cmd)
        side = got.src_stride if load else got.dst_stride
        real = [st_ for st_, n in zip(side, got.size) if n > 1]
        assert real == sorted(real)
        for d, s_ in _pairs(got):
            got_src.add(s_ if load else d)
        for b in range(nblk):
            for j in range(k):
                for r in range(r0, r0 + nr):
                    want |= {int(np.flatnonzero(stored == x[0, ca + b * k + j, r, q])[0]) for q in range(w)}
    assert got_src == want


# ----------------------------------------------------------------------------- kernels in any layout

def _requant(rng, o, c, k):
    return quantize_multipliers(rng.uniform(0.5, 2.0, o) / (c * k * k * 8))


ARRAYS = {32: Config(), 8: Config(nu_rows=8, nu_cols=8), 12: Config(nu_rows=12, nu_cols=12)}


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.integers(0, 2 ** 31), st.sampled_from(sorted(ARRAYS)), st.integers(0, 2), st.integers(0, 2),
       st.sampled_from(["conv", "dw", "fold", "pool", "avg", "add", "requant", "move"]))
def test_single_op_kernels_are_bit_exact_in_any_layout(seed, block, kx, ky, kind):
    # every layout the array offers, blocked included (block = the array's width); channel counts
    # that leave a narrower last block and counts that fill several
    cfg = ARRAYS[block]
    lx, ly = layouts_for(block)[kx], layouts_for(block)[ky]
    rng = np.random.default_rng(seed)
    c, h, w = int(rng.integers(2, 3 * block + 8)), int(rng.integers(3, 12)), int(rng.integers(3, 12))
    shape = (1, c, h, w)
    if kind in ("conv", "dw", "fold"):
        k = int(rng.choice([1, 3]))
        groups = c if kind == "dw" else 1
        o = c if kind == "dw" else int(rng.integers(1, 50))
        if kind == "fold":
            c, k = int(rng.integers(1, max(2, block // 3))), 3
            shape = (1, c, h, w)
        wt = rng.integers(-20, 21, (o, c // groups, k, k)).astype(np.int8)
        m, s = _requant(rng, o, c // groups, k)
        op = ops.conv2d(shape, wt, rng.integers(-500, 500, o).astype(np.int32), stride=int(rng.integers(1, 3)),
                        padding=k // 2, groups=groups, x_zp=int(rng.integers(-4, 5)), multiplier=m, shift=s, zp_out=2)
    elif kind == "pool":
        op = ops.max_pool2d(shape, 2, 1, 1) if min(h, w) > 2 else ops.max_pool2d(shape, 1)
    elif kind == "avg":
        op = ops.avg_pool2d(shape, 3, 2, 1, count_include_pad=False)
    elif kind == "add":
        op = ops.add(shape, za=-3, zb=2, ma=1 << 13, mb=3 << 12, shift=14)
    elif kind == "requant":
        m, s = quantize_multipliers(rng.uniform(0.2, 0.9, c))
        op = ops.requantize(shape, in_dtype="int8", zx=1, multiplier=m, shift=s, zp_out=-2)
    else:
        op = ops.clip(shape, -128, 127)
    op2 = replace(op, x_layout=lx, y_layout=ly)
    xs = [int8_data(rng, t.shape) for t in op.inputs]
    got = build(op2, config=cfg)(*xs, check_races=True)
    np.testing.assert_array_equal(got, op.reference(*xs))


def test_a_blocked_conv_needs_blocks_as_wide_as_the_arrays():
    # a 16-row array blocks a conv's 40 input channels by 16: a layout of 32-channel blocks is refused,
    # saying so; 12 channels (one block) are NHWC's bytes and build
    rng = np.random.default_rng(5)
    cfg = Config(nu_rows=16, nu_cols=32)
    op = replace(conv_op(rng, (1, 40, 6, 6), 8), x_layout="nc32hw32", y_layout="nc32hw32")
    with pytest.raises(CompileError, match="nc32hw32: the NU's blocks here are 16 channels wide, not 32"):
        build(op, config=cfg)
    small = replace(conv_op(rng, (1, 12, 6, 6), 8), x_layout="nc32hw32", y_layout="nc32hw32")
    x = int8_data(rng, small.x_shape)
    np.testing.assert_array_equal(build(small, config=cfg)(x), small.reference(x))


def test_single_op_kernels_keep_the_users_nchw():
    op = conv_op(np.random.default_rng(3), (1, 8, 6, 6), 8)
    assert (op.x_layout, op.y_layout) == ("nchw", "nchw")
    k = build(op)
    x = int8_data(np.random.default_rng(4), op.x_shape)
    np.testing.assert_array_equal(k(x), op.reference(x))


# ----------------------------------------------------------------------------- the plan

def _chain() -> Graph:
    rng = np.random.default_rng(7)
    g = Graph("chain")
    t = g.input("x", (1, 8, 6, 6))
    for name in ("a", "b", "c"):
        t = g.add(conv_op(rng, (1, 8, 6, 6), 8), t, name=name)
    g.output(t)
    return g.validate()


def _prices(table: dict[str, dict[str, int]], move: int):
    def price(group):
        if group.name == "price":       # a transform, priced by plan_layouts
            return move
        lay = group.ops[0].x_layout
        if lay not in table[group.name]:
            raise CompileError(f"{group.name} cannot be built in {lay}")
        return table[group.name][lay]
    return price


def _plan(g, table, move, block=32):
    groups = partition(g)
    return layout_plan.plan_layouts(g, groups, alias(g)[0], _prices(table, move), block)


def _wide_chain(c: int = 40) -> Graph:
    rng = np.random.default_rng(8)
    g = Graph("wide")
    t = g.input("x", (1, c, 6, 6))
    for name in ("a", "b", "c"):
        t = g.add(conv_op(rng, (1, c, 6, 6), c), t, name=name)
    g.output(t)
    return g.validate()


def test_blocked_is_a_third_layout_with_transforms_at_its_borders():
    # 40 channels: two blocks of 32 (the last of 8), so blocked is bytes of its own
    g = _wide_chain()
    blk = blocked_layout(32)
    plan = _plan(g, {"a": {"nchw": 9000, "nhwc": 9000, blk: 100}, "b": {"nchw": 9000, "nhwc": 100, blk: 9000},
                     "c": {"nchw": 9000, "nhwc": 9000, blk: 100}}, 10)
    assert plan.kernels == {"a": blk, "b": "nhwc", "c": blk}
    a, b, c = (n.output for n in g.nodes)
    moves = {(t.value, t.src, t.dst, tuple(t.readers)) for t in plan.transforms}
    assert moves == {("x", "nchw", blk, ("a",)), (a, blk, "nhwc", ("b",)), (b, "nhwc", blk, ("c",)),
                     (c, blk, "nchw", ("graph input/output",))}
    assert plan.prices["a"] == {"nchw": 9000, "nhwc": 9000, blk: 100}
    assert any(line.startswith("layouts: 0 nchw, 1 nhwc, 2 nc32hw32 kernels") for line in plan.lines())


def test_a_layout_a_kernel_cannot_take_is_dropped():
    g = _wide_chain()
    plan = _plan(g, {"a": {"nchw": 900, "nhwc": 800}, "b": {"nchw": 900, "nhwc": 800},
                     "c": {"nchw": 900, "nhwc": 800}}, 10)
    assert all(set(p) == {"nchw", "nhwc"} for p in plan.prices.values())
    assert set(plan.kernels.values()) == {"nhwc"}


def test_one_block_tensors_are_nhwc_bytes_priced_once_and_never_moved():
    # 8 channels fit one block of 32: blocked stores NHWC's bytes, so it is not built (NHWC's price)
    # and a value written in one is read in the other without a transform
    g = _chain()
    calls = []

    def price(group):
        calls.append(group.ops[0].x_layout)
        if group.name == "price":
            return 10
        return {"nchw": 1000, "nhwc": 100}[group.ops[0].x_layout]

    groups = partition(g)
    plan = layout_plan.plan_layouts(g, groups, alias(g)[0], price, 32)
    assert blocked_layout(32) not in calls
    assert all(p[blocked_layout(32)] == p["nhwc"] for p in plan.prices.values())
    forced = dict(plan.kernels, b=blocked_layout(32))
    need = layout_plan._needed(g, groups, forced, layout_plan.pinned_values(g, alias(g)[0]))
    assert not [k for k in need if k[0] in (g.nodes[0].output, g.nodes[1].output)]


def test_transforms_only_where_writer_and_reader_disagree():
    g = _chain()
    plan = _plan(g, {"a": {"nchw": 9000, "nhwc": 100}, "b": {"nchw": 100, "nhwc": 9000},
                     "c": {"nchw": 9000, "nhwc": 100}}, 10)
    assert plan.kernels == {"a": "nhwc", "b": "nchw", "c": "nhwc"}
    moves = {(t.value, t.src, t.dst, tuple(t.readers)) for t in plan.transforms}
    a, b, c = (n.output for n in g.nodes)
    assert moves == {("x", "nchw", "nhwc", ("a",)), (a, "nhwc", "nchw", ("b",)), (b, "nchw", "nhwc", ("c",)),
                     (c, "nhwc", "nchw", ("graph input/output",))}
    assert plan.stored["x"] == "nchw" and plan.stored[c] == "nchw"
    assert plan.total == 300 + 4 * 10


def test_a_small_preference_does_not_pay_for_transforms():
    g = _chain()
    plan = _plan(g, {"a": {"nchw": 1000, "nhwc": 900}, "b": {"nchw": 900, "nhwc": 1000},
                     "c": {"nchw": 1000, "nhwc": 900}}, 1000)
    assert plan.kernels == {"a": "nchw", "b": "nchw", "c": "nchw"} and plan.transforms == []


def test_a_run_of_kernels_moves_together():
    # each kernel alone is cheaper in nchw by 50 once its neighbours are nchw, but all three in nhwc win
    g = _chain()
    plan = _plan(g, {n: {"nchw": 1000, "nhwc": 700} for n in "abc"}, 100)
    assert plan.kernels == {"a": "nhwc", "b": "nhwc", "c": "nhwc"}
    assert [(t.src, t.dst) for t in plan.transforms] == [("nchw", "nhwc"), ("nhwc", "nchw")]


def _check_plan(g, groups, plan):
    """Every disagreement has exactly one transform, every transform is a disagreement."""
    pinned = layout_plan.pinned_values(g, alias(g)[0])
    want = {}
    for grp in groups:
        lay = plan.kernels[grp.name]
        for v in dict.fromkeys(grp.inputs):
            if v in plan.stored and not same_bytes(g.values[v].shape, plan.stored[v], lay):
                want.setdefault((v, plan.stored[v], lay), set()).add(grp.name)
        if grp.output in pinned and not same_bytes(g.values[grp.output].shape, lay, "nchw"):
            want[(grp.output, lay, "nchw")] = {pinned[grp.output]}
    got = {(t.value, t.src, t.dst): set(t.readers) for t in plan.transforms}
    assert got == want
    assert all(not same_bytes(g.values[t.value].shape, t.src, t.dst) for t in plan.transforms)
    for v in list(g.inputs) + list(g.outputs):
        assert plan.stored.get(v, "nchw") == "nchw"


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(topologies(), st.integers(0, 2 ** 31), st.booleans(), st.sampled_from([32, 8]))
def test_random_networks_with_mixed_layouts_are_bit_exact_and_race_free(monkeypatch_plan, drawn, pick, fuse, block):
    # random preferences over all three layouts; on an 8-wide array the networks' 20, 33 and 40
    # channels fill several blocks and leave a narrower last one
    g, seed = drawn
    seen = monkeypatch_plan(pick)
    lib = compiler.build(g, fuse=fuse, config=ARRAYS[block])
    groups, plan, disliked = seen[-1]
    by_name = {grp.name: grp for grp in groups}
    for name, lay in plan.kernels.items():       # the plan follows each kernel's (random) preference
        assert name in plan.fixed or name not in disliked or _alike(g, by_name[name], lay, disliked[name], block)
    _check_plan(g, groups, plan)
    moved = [layer for layer in lib.layers if layer["name"].startswith("layout.")]
    assert len(moved) == len(plan.transforms)
    x = int8_data(np.random.default_rng(seed + 1), g.values[g.inputs[0]].shape)
    np.testing.assert_array_equal(run_graph(lib, x).get_output(0), g.reference(x)[0])


def _alike(g, grp, lay: str, disliked: str, block: int) -> bool:
    """Is `lay` not the disliked layout, or the same bytes as a liked one for all of the kernel's tensors
    (a one-block tensor is NHWC blocked: the planner prices it as NHWC without building it)?"""
    shapes = [g.values[v].shape for v in list(grp.inputs) + [grp.output]]
    return lay != disliked or any(other != disliked and all(same_bytes(sh, lay, other) for sh in shapes)
                                  for other in layouts_for(block))


@pytest.fixture
def monkeypatch_plan():
    """Make plan_layouts price each kernel's layouts at random (seeded), so plans mix layouts."""
    original = layout_plan.plan_layouts
    seen = []

    def install(pick: int):
        rng = np.random.default_rng(pick)
        bias: dict[str, str] = {}

        def plan_layouts(graph, groups, al, price, block=32):
            def noisy(group):
                p = int(price(group))
                if group.name == "price":
                    return p
                # each kernel dislikes one layout (at random) more than any transform costs
                if not hasattr(group.ops[0], "x_layout"):
                    return p
                bias.setdefault(group.name, layouts_for(block)[int(rng.integers(0, 3))])
                return p + (10_000_000 if group.ops[0].x_layout == bias[group.name] else 0)
            plan = original(graph, groups, al, noisy, block)
            seen.append((groups, plan, bias))
            return plan
        layout_plan.plan_layouts = plan_layouts
        return seen
    yield install
    layout_plan.plan_layouts = original


@pytest.mark.parametrize("block", [8, 32])
def test_a_network_all_blocked_is_bit_exact_and_race_free(monkeypatch, block):
    # every kernel made to prefer blocked: convs, depthwise, pool, a residual add and the transforms
    # at the graph's input and output, over channel counts that leave a narrower last block
    rng = np.random.default_rng(12)
    c1, c2 = (20, 33) if block == 8 else (40, 72)
    g = Graph("blocked")
    t = g.input("x", (1, 3, 12, 12))
    t = g.add(conv_op(rng, (1, 3, 12, 12), c1, relu=True), t, name="stem")
    t = g.add(ops.max_pool2d((1, c1, 12, 12), 2), t, name="pool")
    m, sh = _requant(rng, c1, 1, 3)
    dw = ops.conv2d((1, c1, 6, 6), rng.integers(-20, 21, (c1, 1, 3, 3)).astype(np.int8),
                    rng.integers(-500, 500, c1).astype(np.int32), padding=1, groups=c1, x_zp=2,
                    multiplier=m, shift=sh, zp_out=-1)
    t = g.add(dw, t, name="dw")
    y = g.add(conv_op(rng, (1, c1, 6, 6), c1, k=1), t, name="pw")
    t = g.add(ops.add((1, c1, 6, 6), za=-3, zb=1, ma=1 << 13, mb=3 << 12, shift=14), t, y, name="add")
    t = g.add(conv_op(rng, (1, c1, 6, 6), c2, stride=2), t, name="down")
    g.output(t)
    g.validate()
    original, blk = layout_plan.plan_layouts, blocked_layout(block)

    def plan_layouts(graph, groups, al, price, b=32):
        def prefer(group):
            p = int(price(group))
            lay = getattr(group.ops[0], "x_layout", blk)
            return p if group.name == "price" or lay == blk else p + 10_000_000
        return original(graph, groups, al, prefer, b)
    monkeypatch.setattr(layout_plan, "plan_layouts", plan_layouts)
    lib = compiler.build(g, config=ARRAYS[block])
    meta = lib.meta["layout"]
    assert set(meta["kernels"].values()) == {blk}
    assert [(t["value"], t["src"], t["dst"]) for t in meta["transforms"]] == [
        ("x", "nchw", blk), (g.outputs[0], blk, "nchw")]
    x = int8_data(rng, (1, 3, 12, 12))
    np.testing.assert_array_equal(run_graph(lib, x).get_output(0), g.reference(x)[0])


def test_default_plan_of_a_network_is_checked_and_bit_exact():
    rng = np.random.default_rng(11)
    g = Graph("mixed")
    t = g.input("x", (1, 3, 16, 16))
    t = g.add(conv_op(rng, (1, 3, 16, 16), 32, relu=True), t, name="stem")
    t = g.add(ops.max_pool2d((1, 32, 16, 16), 2), t, name="pool")
    t = g.add(conv_op(rng, (1, 32, 8, 8), 40, k=1), t, name="pw")
    g.output(t)
    g.validate()
    lib = build_network(g, Config())
    meta = lib.meta["layout"]
    assert set(meta["kernels"].values()) <= set(layouts_for(32))
    assert meta["stored"]["x"] == "nchw"
    for t in meta["transforms"]:
        assert not same_bytes(g.values[t["value"]].shape, t["src"], t["dst"])
        for r in t["readers"]:
            assert r == "graph input/output" or meta["kernels"][r] == t["dst"]
    x = int8_data(rng, (1, 3, 16, 16))
    np.testing.assert_array_equal(run_graph(lib, x).get_output(0), g.reference(x)[0])
    off = build_network(g, Config(), layouts=False)
    assert off.meta["layout"] is None
    np.testing.assert_array_equal(run_graph(off, x).get_output(0), g.reference(x)[0])


def test_nnpc_compile_report_prints_the_layout_plan(tmp_path):
    out, nnp = nnpc_compile_tiny(tmp_path, "--report")
    assert out.returncode == 0, out.stderr
    lib = compiler.load(nnp)
    for line in lib.meta["layout"]["lines"]:
        assert line in out.stdout
    assert any(line.startswith("layouts:") for line in out.stdout.splitlines())
