"""Passes run alone: alloc, layout, tiling, cost, emit."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import nnpasm
from compiler import Graph, GraphModule, build, ops
from compiler.errors import CompileError
from compiler.ir import Buffer, Dma, KernelIR, Ref, Vu
from compiler.lowering.conv_plan import buffer_needs
from compiler.lowering.nu import plan
from compiler.passes import alloc, emit
from compiler.sizes import capacities
from compiler.lowering.driver import compose_clamp
from compiler.lowering.layout import conv_view, nu_weights, weight_spec
from compiler.lowering.tiling import conv_candidates
from isa_spec.layout import from_stored, to_stored
from nnpsim.config import Config
from tests import reference as ref


# ---------------------------------------------------------------- alloc

@st.composite
def buffer_uses(draw):
    n = draw(st.integers(1, 12))
    bufs = [Buffer(f"b{i}", draw(st.sampled_from(["vbuf", "abuf"])), draw(st.integers(1, 3000)),
                   draw(st.sampled_from([1, 4, 32, 64]))) for i in range(n)]
    ddr = Buffer("x", "ddr", 1 << 20)
    body = []
    for _ in range(draw(st.integers(n, 3 * n))):
        b = draw(st.sampled_from(bufs))
        body.append(Dma(0, Ref(b), Ref(ddr), (b.nbytes,), (1,), (1,)))
    return bufs, body


@settings(max_examples=200, deadline=None)
@given(buffer_uses())
def test_live_buffers_never_overlap(uses):
    bufs, body = uses
    kir = KernelIR("t", bufs, body, [], bufs[0])
    cfg = Config(abuf_bytes=8192, vbuf_bytes=8192)
    try:
        usage = alloc.allocate(kir, cfg)
    except CompileError as exc:
        assert "does not fit" in str(exc)
        return
    spans = alloc.lifetimes(kir)
    used = [b for b in bufs if b in spans]
    for b in used:
        assert b.addr % b.align == 0 and b.addr + b.nbytes <= capacities(cfg)[b.space]
        assert b.addr + b.nbytes <= usage[b.memory]
    for i, a in enumerate(used):
        for b in used[i + 1:]:
            live = spans[a][0] <= spans[b][1] and spans[b][0] <= spans[a][1]
            if live and a.space == b.space:
                assert a.addr + a.nbytes <= b.addr or b.addr + b.nbytes <= a.addr, (a, b)


def test_dead_buffers_share_space():
    a, b = Buffer("a", "vbuf", 1000), Buffer("b", "vbuf", 1000)
    ddr = Buffer("x", "ddr", 4096)
    body = [Dma(0, Ref(a), Ref(ddr), (1000,), (1,), (1,)), Dma(0, Ref(b), Ref(ddr), (1000,), (1,), (1,))]
    alloc.allocate(KernelIR("t", [a, b], body, [], a), Config())
    assert a.addr == b.addr == 0


# ---------------------------------------------------------------- layout

def nu_conv_model(blocks, cb_start, x, op):
    """Convolution computed the way the NU reads its blocks: per output block, per input block."""
    xp = ref._pad_nchw(x.astype(np.int64), op.padding, op.x_zp) - op.x_zp
    n, c = x.shape[:2]
    rows, cols = blocks.shape[4:]
    xp = np.pad(xp, ((0, 0), (0, -c % rows), (0, 0), (0, 0)))
    oh, ow = op.output.shape[2:]
    kh, kw = op.kernel
    out = np.zeros((n, blocks.shape[0] * cols, oh, ow), np.int64)
    for ob in range(blocks.shape[0]):
        for l in range(blocks.shape[1]):
            cb = cb_start[ob] + l
            for i in range(kh):
                for j in range(kw):
                    h0, w0 = i * op.dilation[0], j * op.dilation[1]
                    v = xp[:, cb * rows:(cb + 1) * rows, h0:h0 + op.stride[0] * (oh - 1) + 1:op.stride[0],
                           w0:w0 + op.stride[1] * (ow - 1) + 1:op.stride[1]]
                    out[:, ob * cols:(ob + 1) * cols] += np.einsum("nrhw,rc->nchw", v,
                                                                   blocks[ob, l, i, j].astype(np.int64))
    return out[:, :op.out_channels]


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([1, 2, 3, 8]), st.integers(1, 20), st.integers(1, 20), st.integers(0, 2**32 - 1),
       st.sampled_from([(32, 32), (8, 16), (16, 8)]))
def test_nu_weight_blocks_compute_the_grouped_conv(groups, cg, og, seed, array):
    rng = np.random.default_rng(seed)
    rows, cols = array
    w = rng.integers(-128, 128, size=(groups * og, cg, 2, 3)).astype(np.int8)
    op = ops.conv2d((1, groups * cg, 5, 6), w, padding=(1, 0, 0, 2), groups=groups, x_zp=3,
                    multiplier=1, shift=0)
    nw = nu_weights(w, groups, groups * cg, rows, cols)
    assert nw.blocks.shape[4:] == (rows, cols)
    assert all(0 <= s and s + nw.span <= nw.in_cb for s in nw.cb_start)
    x = rng.integers(-128, 128, size=op.x_shape).astype(np.int8)
    want = ref.conv2d_acc(x, w, padding=(1, 0, 0, 2), groups=groups, x_zp=3)
    np.testing.assert_array_equal(nu_conv_model(nw.blocks, nw.cb_start, x, op), want)


def test_depthwise_reads_one_block_per_output_block():
    w = np.ones((96, 1, 3, 3), np.int8)
    nw = nu_weights(w, 96, 96, 32, 32)
    assert nw.span == 1 and nw.cb_start == (0, 1, 2) and nw.layout == ""


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 40), min_size=4, max_size=4), st.integers(0, 2**32 - 1))
def test_weight_spec_round_trips(shape, seed):
    w = np.random.default_rng(seed).integers(-128, 128, size=shape).astype(np.int8)
    spec = weight_spec(32, 32)
    stored = to_stored(spec, w)
    assert stored.shape[4:] == (32, 32)
    np.testing.assert_array_equal(from_stored(spec, stored, w.shape), w)
    np.testing.assert_array_equal(nu_weights(w, 1, shape[1], 32, 32).blocks, stored)


# ---------------------------------------------------------------- tiling and cost

@settings(max_examples=30, deadline=None)
@given(st.integers(1, 600), st.integers(1, 600), st.integers(1, 60), st.sampled_from([1, 3]))
def test_conv_candidates_fit_the_buffers(c, o, hw, k):
    w = np.zeros((o, c, k, k), np.int8)
    op = ops.conv2d((1, c, hw, hw), w, padding=k // 2, multiplier=1, shift=0)
    cfg = Config()
    p = plan(conv_view(op), cfg)
    cands = conv_candidates(p, cfg)
    assert cands
    for t in cands:
        assert all(v <= capacities(cfg)[m] for m, v in buffer_needs(p, t, False).items())


def test_no_tile_fits_is_a_compile_error():
    w = np.zeros((32, 32, 7, 7), np.int8)
    op = ops.conv2d((1, 32, 8, 8), w, padding=3, multiplier=1, shift=0)
    cfg = Config(wbuf_bytes=1024)
    with pytest.raises(CompileError, match="wbuf"):
        conv_candidates(plan(conv_view(op), cfg), cfg)


def test_compose_clamp_is_composition():
    for lo, hi, lo2, hi2 in [(-128, 127, 0, 127), (-10, 10, 20, 30), (5, 9, -3, 6), (0, 0, -1, 1)]:
        lo3, hi3 = compose_clamp(lo, hi, lo2, hi2)
        v = np.arange(-128, 128)
        np.testing.assert_array_equal(np.clip(np.clip(v, lo, hi), lo2, hi2), np.clip(v, lo3, hi3))


# ---------------------------------------------------------------- emit

def test_emitted_text_assembles_and_names_op_tile_and_buffers():
    a = Buffer("acc0", "abuf", 128, addr=0)
    v = Buffer("vacc0", "vbuf", 256, addr=64)
    x = Buffer("x", "ddr", 64, dtype="int8", shape=(64,))
    body = [Dma(2, Ref(v), Ref(a), (32,), (4,), (4,), elem=4, comment="drain acc0 -> vacc0"),
            Vu("vu.clip", Ref(v), Ref(v), None, n=(32,), d_stride=(1,), a_stride=(1,),
               scalars={"lo": 0, "hi": 127}, comment="relu"),
            Dma(3, Ref(x), Ref(v), (32,), (1,), (1,), comment="store")]
    body[1].wait, body[0].signal = 0, 0
    text = emit.emit(KernelIR("t", [a, v, x], body, [], x), ["header line"])
    assert "; header line" in text and "; relu" in text and "wait=s0" in text and "signal=s0" in text
    prog = nnpasm.assemble(text)
    assert "x" in prog.buffers and prog.buffers["x"].shape == (64,)


# ---------------------------------------------------------------- double buffering

def _conflict(a, b) -> bool:
    return any(x.buf is y.buf and x.lo < y.hi and y.lo < x.hi and (x.write or y.write)
               for x in a.accesses() for y in b.accesses())


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from(["conv", "dw", "dense", "pool", "add", "rq"]))
def test_pipeline_keeps_the_order_of_every_conflicting_pair(seed, kind):
    from compiler.ir import Command
    from compiler.lowering.double_buffer import pipeline
    from compiler.search import candidates
    from compiler.lowering.driver import lower
    rng = np.random.default_rng(seed)
    if kind == "conv":
        c, o = int(rng.integers(1, 70)), int(rng.integers(1, 70))
        op = ops.conv2d((2, c, int(rng.integers(1, 20)), 9), rng.integers(-9, 9, (o, c, 1, 3)).astype(np.int8),
                        np.zeros(o, np.int32), padding=(0, 1), multiplier=1, shift=0)
    elif kind == "dw":          # drained through the VU: its requantisation and store in the late stage
        c = int(rng.integers(1, 70))
        op = ops.conv2d((1, c, int(rng.integers(1, 20)), 9), rng.integers(-9, 9, (c, 1, 3, 3)).astype(np.int8),
                        np.zeros(c, np.int32), padding=1, groups=c, multiplier=1, shift=0)
    elif kind == "dense":
        op = ops.dense((int(rng.integers(1, 50)), 40), np.ones((40, 33), np.int8), multiplier=1, shift=0)
    elif kind == "pool":
        op = ops.avg_pool2d((2, 3, int(rng.integers(2, 30)), 7), 2, count_include_pad=False)
    elif kind == "add":
        op = ops.add((int(rng.integers(1, 5)), 3, 5), ma=1, mb=1, shift=0)
    else:
        op = ops.requantize((2, 4, 3), in_dtype="int32", multiplier=[1, 2, 3, 4], shift=0)
    cfg = Config(vbuf_bytes=4096 if kind in ("add", "pool") else 256 * 1024)
    for s in candidates((op,), cfg):
        _, (steps,) = lower(s, cfg)
        natural = [s for st_ in steps for s in st_.loads + st_.compute + st_.epilogue + st_.late
                   if isinstance(s, Command)]
        issued = [s for s in pipeline(steps) if isinstance(s, Command)]
        pos = {id(c): i for i, c in enumerate(issued)}
        for i, a in enumerate(natural):
            for b in natural[i + 1:]:
                if _conflict(a, b):
                    assert pos[id(a)] < pos[id(b)], (a.comment, b.comment)


@settings(max_examples=200, deadline=None)
@given(st.integers(-20, 20), st.integers(1, 4), st.integers(1, 10), st.integers(1, 12))
def test_strided_halo(start, step, n, size):
    from compiler.lowering.nu import _strided_halo
    first, plo, phi = _strided_halo(start, step, n, size)
    real = [start + q * step for q in range(n) if 0 <= start + q * step < size]
    assert plo + len(real) + phi == n
    assert all(start + q * step < 0 for q in range(plo))
    if real:
        assert first == real[0] and real == [first + q * step for q in range(len(real))]


@settings(max_examples=200, deadline=None)
@given(st.integers(-128, 127), st.lists(st.integers(-483_000, 483_000), min_size=1, max_size=70),
       st.sampled_from([(32, 32), (8, 16), (3, 4)]))
def test_bias_blocks_reproduce_the_bias_on_the_nu(x_zp, bias, array):
    from compiler.lowering.layout import bias_blocks
    rows, cols = array
    bias = np.array(bias)
    n_ob = -(-len(bias) // cols)
    got = bias_blocks(bias, x_zp, n_ob, rows, cols)
    if got is None:                              # refused only beyond the guaranteed range
        assert np.abs(bias).max() > (rows - 2) * 127 * 128
        return
    lanes, blocks = got
    acc = np.einsum("r,orc->oc", lanes.astype(np.int64) - x_zp, blocks.astype(np.int64)).ravel()
    np.testing.assert_array_equal(acc[:len(bias)], bias)
    assert (acc[len(bias):] == 0).all()


def test_bias_blocks_refuse_what_they_cannot_hold():
    from compiler.lowering.layout import bias_blocks
    assert bias_blocks(np.array([2**30]), 0, 1, 32, 32) is None
    assert bias_blocks(np.array([5]), 0, 1, 2, 32) is None


def test_vu_u8_is_set_for_a_uint8_float_op_and_back_for_an_int8_one():
    """vu.mode persists like every parameter: a uint8 QLinearAdd (vu.mode = 1) then an int8 one in one program, and
    the emitter sets it back to 0 for the second, whose result would otherwise be the uint8 arithmetic's."""
    rng = np.random.default_rng(3)
    shape = (1, 8, 5, 7)
    g = Graph("u8_then_int8")
    a, b = g.input("a", shape), g.input("b", shape)
    f = dict(scale_a=0.43928102, scale_b=0.57594436, scale_out=0.026692126)
    y1 = g.add(ops.add(shape, za=71, zb=-9, zp_out=47, uint8=True, **f), a, b, name="add_u8")
    y2 = g.add(ops.add(shape, za=47, zb=-9, zp_out=-20, **f), y1, b, name="add_i8")
    g.output(y2)
    g.validate()
    lib = build(g)
    sets = [line.split()[-1] for line in lib.asm.splitlines() if "setpi" in line and "vu.mode" in line]
    assert sets == ["1", "0"], sets
    xa, xb = (rng.integers(-128, 128, shape).astype(np.int8) for _ in range(2))
    m = GraphModule(lib)
    m.set_input(0, xa)
    m.set_input(1, xb)
    m.run(check_races=True)
    np.testing.assert_array_equal(m.get_output(0, quantized=True), g.reference(xa, xb)[0])
