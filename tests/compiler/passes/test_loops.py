"""passes.loops: repeated tiles rolled into counted CU loops, bit-exact and race-free.

Every kernel here is compiled twice from the same candidate: flat (schedule(reroll=False)) and
looped.  Both must equal tests/reference.py and run clean under the race checker; the looped
program must be no longer than the flat one, and flattening its loops must give back the flat
body statement for statement.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import cost, ops
from compiler.graph import Graph, QuantParams
from compiler.ir import Buffer, Command, CuWait, Dma, KernelIR, Loop, LoopRef, Note, Ref, ref_fields
from compiler.kernel import finish
from compiler.pipeline import lowered, schedule
from compiler.search import candidates
from compiler.passes import alloc, emit, loops, sync
from compiler.assembler import assemble
from nnpsim.config import Config
from nnpsim.simulator import Simulator
from tests import reference as ref
from tests.helpers.kernels import requant_params

pytestmark = pytest.mark.usefixtures("warm_engine")

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])
SMALL_NU = dict(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768)     # many tiles
SMALL_VU = dict(vbuf_bytes=2048)


def rand8(rng, shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def signature(stmt):
    """What a statement does, addresses included (not comments, not which object it is)."""
    if isinstance(stmt, Note):
        return "note"
    if isinstance(stmt, CuWait):
        return ("cu.wait", stmt.sem)
    refs = tuple(None if (r := getattr(stmt, f)) is None else (r.buf.name, r.buf.memory, r.buf.addr, r.offset)
                 for f in ref_fields(stmt))
    return loops._key(stmt), refs


def both(chain, cfg, which=0):
    """(flat kernel, looped kernel, the flat synchronised body) of one candidate of the chain:
    the looped kernel is the flat one's body rerolled, priced and emitted."""
    chain = tuple(chain)
    kir = lowered(candidates(chain, cfg)[which], cfg)
    predicted, usage, report = schedule(kir, cfg, reroll=False)
    flat = finish(chain, kir, cfg, predicted, usage, report)
    rolled = copy.copy(kir)
    rolled.body = loops.reroll(kir.body)
    looped = finish(chain, rolled, cfg, cost.schedule_cycles(rolled.body, cfg), usage, report)
    return flat, looped, kir.body


def check(chain, cfg, inputs, want, which=0):
    """Both programs equal `want` without races; the looped one is shorter or as long; flatten
    undoes the reroll.  Returns (flat, looped)."""
    flat, looped, flat_body = both(chain, cfg, which)
    for kernel in (flat, looped):
        np.testing.assert_array_equal(kernel(*inputs, check_races=True), want)
    assert len(looped.program.code) <= len(flat.program.code)
    assert looped.stats.cycles <= flat.stats.cycles * 1.02 + 50
    assert [signature(s) for s in loops.flatten(looped.ir.body)] == [signature(s) for s in flat_body]
    return flat, looped


def has_loop(kernel) -> bool:
    return any(isinstance(s, Loop) for s in kernel.ir.body) and "\n        loop    r" in kernel.asm


# ----------------------------------------------------------------------------- random kernels

@st.composite
def conv_shapes(draw):
    """Convolutions whose channels, planes and tiles do not divide the hardware sizes."""
    groups = draw(st.sampled_from([1, 1, 1, 2]))
    cg, og = draw(st.integers(1, 45)), draw(st.integers(1, 45))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h, w = draw(st.integers(k[0], 30)), draw(st.integers(k[1], 30))
    return groups, cg, og, k, stride, pad, (draw(st.integers(1, 2)), groups * cg, h, w)


@settings(max_examples=20, **SETTINGS)
@given(conv_shapes(), st.integers(0, 2**32 - 1), st.sampled_from([{}, SMALL_NU]), st.integers(0, 3))
def test_looped_conv_is_bit_exact_and_race_free(case, seed, overrides, which):
    groups, cg, og, k, stride, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    w, bias = rand8(rng, (o, cg) + k), rng.integers(-3000, 3000, size=o).astype(np.int32)
    m, s = requant_params(rng, o, cg * k[0] * k[1])
    kw = dict(stride=stride, padding=pad, groups=groups, x_zp=int(rng.integers(-128, 128)), multiplier=m,
              shift=s, zp_out=int(rng.integers(-20, 20)))
    cfg = Config(**overrides).validate()
    conv = ops.conv2d(xshape, w, bias, **kw)
    x = rand8(rng, xshape)
    check([conv], cfg, [x], ref.conv2d(x, w, bias, **kw), which=min(which, len(candidates((conv,), cfg)) - 1))


@settings(max_examples=15, **SETTINGS)
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 2), st.integers(0, 1),
       st.tuples(st.integers(1, 2), st.integers(1, 9), st.integers(3, 40), st.integers(3, 40)),
       st.integers(0, 2**32 - 1), st.sampled_from(["max", "avg_nopad", "sum"]))
def test_looped_pooling_is_bit_exact_and_race_free(kh, kw, stride, pad, shape, seed, mode):
    pad = (min(pad, kh - 1), min(pad, kw - 1)) * 2
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    if shape[2] + pad[0] + pad[2] < kh or shape[3] + pad[1] + pad[3] < kw:
        return
    if mode == "max":
        op, want = ops.max_pool2d(shape, (kh, kw), stride, pad), ref.max_pool2d(x, (kh, kw), stride, pad)
    elif mode == "sum":
        op, want = ops.sum_pool2d(shape, (kh, kw), stride, pad), ref.sum_pool2d(x, (kh, kw), stride, pad)
    else:
        op = ops.avg_pool2d(shape, (kh, kw), stride, pad, False)
        want = ref.avg_pool2d(x, (kh, kw), stride, pad, count_include_pad=False)
    # 8 KiB of VBUF: small enough for many tiles, and room for the largest per-position count table
    # drawn here (40 x 40 int32: average pooling keeps the whole table in VBUF)
    check([op], Config(vbuf_bytes=8192).validate(), [x], want)


@settings(max_examples=15, **SETTINGS)
@given(st.lists(st.integers(1, 40), min_size=1, max_size=4), st.integers(0, 2**32 - 1),
       st.sampled_from(["add", "relu", "rq32"]), st.sampled_from([SMALL_VU, dict(SMALL_VU, dma_channels=1)]))
def test_looped_elementwise_is_bit_exact_and_race_free(shape, seed, mode, overrides):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    cfg = Config(**overrides).validate()
    if mode == "add":
        kw = dict(za=3, zb=-2, ma=2**30, mb=3 * 2**28, shift=31, zp_out=1)
        check([ops.add(shape, **kw)], cfg, [a, b], ref.add(a, b, **kw))
    elif mode == "relu":
        check([ops.relu(shape, 2)], cfg, [a], ref.relu(a, 2))
    else:
        x = rng.integers(-(2**20), 2**20, size=shape).astype(np.int32)
        kw = dict(multiplier=2**30, shift=44, zp_out=-1)
        check([ops.requantize(shape, in_dtype="int32", **kw)], cfg, [x], ref.requantize(x, **kw))


# ----------------------------------------------------------------------------- fixed kernels

def _conv3x3(rng, rows: int = 24):
    xshape, w = (1, 16, rows, 20), rand8(rng, (24, 16, 3, 3))
    bias = rng.integers(-3000, 3000, size=24).astype(np.int32)
    m, s = requant_params(rng, 24, 16 * 9)
    kw = dict(padding=1, x_zp=2, multiplier=m, shift=s, zp_out=3)
    x = rand8(rng, xshape)
    return [ops.conv2d(xshape, w, bias, **kw)], [x], ref.conv2d(x, w, bias, **kw), SMALL_NU


def _fused(rng):
    xshape, w = (1, 12, 20, 18), rand8(rng, (20, 12, 3, 3))
    bias = rng.integers(-2000, 2000, size=20).astype(np.int32)
    m, s = requant_params(rng, 20, 12 * 9)
    conv = ops.conv2d(xshape, w, bias, padding=1, x_zp=5, multiplier=m, shift=s, zp_out=-3)
    out = conv.output.shape
    add = dict(za=-3, zb=4, ma=2**30, mb=3 * 2**28, shift=31, zp_out=2)
    x, b = rand8(rng, xshape), rand8(rng, out)
    want = ref.add(ref.relu(ref.conv2d(x, w, bias, padding=1, x_zp=5, multiplier=m, shift=s, zp_out=-3), -3),
                   b, **add)
    return [conv, ops.relu(out, -3), ops.add(out, **add)], [x, b], want, SMALL_NU


def _max_pool(rng):
    x = rand8(rng, (1, 8, 40, 38))
    return [ops.max_pool2d(x.shape, 3, 2, 1)], [x], ref.max_pool2d(x, 3, 2, 1), SMALL_VU


def _add(rng):
    a, b = rand8(rng, (1, 8, 30, 31)), rand8(rng, (1, 8, 30, 31))
    kw = dict(za=3, ma=2**30, mb=2**30, shift=31)
    return [ops.add(a.shape, **kw)], [a, b], ref.add(a, b, **kw), SMALL_VU


def _two_nus(rng):
    # twice the rows: split over two NUs, and with nu.conv.rq's short tiles (no drain, no VU pass),
    # 24 rows left each NU only six tiles, too few for the loop to pay for its setup
    chain, inputs, want, _ = _conv3x3(rng, rows=48)
    return chain, inputs, want, dict(SMALL_NU, nu_count=2, vu_count=2)


@pytest.mark.parametrize("make", [_conv3x3, _fused, _max_pool, _add, _two_nus])
def test_many_tiles_roll_into_loops(make):
    chain, inputs, want, overrides = make(np.random.default_rng(5))
    cfg = Config(**overrides).validate()
    # the best candidate whose taps stay unfolded: the kernel these bounds were set for (a tap-folded
    # tile gathers its input in several DMAs, each stepping its own addresses: tests/compiler/lowering/test_layout_tap_fold.py)
    unfolded = next(k for k, s in enumerate(candidates(tuple(chain), cfg)) if "im2col" not in str(s))
    flat, looped = check(chain, cfg, inputs, want, unfolded)
    assert has_loop(looped) and not has_loop(flat)
    assert len(looped.program.code) < 0.7 * len(flat.program.code), (len(looped.program.code),
                                                                       len(flat.program.code))
    # the cost model prices the loops exactly: the predicted cycles are the simulator's
    assert looped.predicted_cycles == looped.stats.cycles, (looped.predicted_cycles, looped.stats.cycles)
    # the same commands issue: the loop changes only the CU's instructions (a few more run:
    # each iteration steps its addresses and counts, where the flat code reused registers)
    assert looped.stats.commands == flat.stats.commands
    assert looped.stats.instructions < flat.stats.instructions * 1.3


def test_build_chooses_looped_programs():
    chain, inputs, want, overrides = _conv3x3(np.random.default_rng(6))
    kernel = compiler.build(*chain, config=Config(**overrides))
    assert has_loop(kernel)
    np.testing.assert_array_equal(kernel(*inputs, check_races=True), want)


# ----------------------------------------------------------------------------- the pass on its own

def _allocated(bufs, body):
    kir = KernelIR("t", bufs, body, [], bufs[-1])
    alloc.allocate(kir, Config())
    return kir


def test_reroll_is_the_identity_without_repeats():
    ddr = Buffer("x", "ddr", 4096)
    bufs = [Buffer(f"b{k}", "dm", 64 * (k + 1)) for k in range(12)] + [ddr]
    body = [Note("no two statements alike")]
    body += [Dma(k % 4, Ref(b), Ref(ddr, 64 * k), (b.nbytes,), (1,), (1,)) for k, b in enumerate(bufs[:-1])]
    kir = _allocated(bufs, body)
    body, _ = sync.synchronise(kir.body)
    out = loops.reroll(body)
    assert len(out) == len(body) and all(a is b for a, b in zip(out, body))


def test_reroll_of_a_single_tile_kernel_is_the_identity():
    cfg = Config()
    conv = ops.conv2d((1, 8, 6, 6), rand8(np.random.default_rng(1), (8, 8, 3, 3)), padding=1,
                      multiplier=2**30, shift=36)
    kir = lowered(candidates((conv,), cfg)[0], cfg)
    schedule(kir, cfg, reroll=False)
    out = loops.reroll(kir.body)
    assert all(a is b for a, b in zip(out, kir.body)) and len(out) == len(kir.body)


def test_repeated_copies_become_one_loop_with_peeled_edges():
    """Twelve copies of a 16-byte slice, rotating through two DM slots: a loop of ten
    (the first, whose slot is still fresh, and the last one stay outside)."""
    src, dst = Buffer("src", "ddr", 16 * 12, shape=(16 * 12,)), Buffer("dst", "ddr", 16 * 12, shape=(16 * 12,))
    slots = [Buffer("s0", "dm", 16), Buffer("s1", "dm", 16)]
    body = []
    for k in range(12):
        body.append(Note(f"tile {k}"))
        body.append(Dma(0, Ref(slots[k % 2]), Ref(src, 16 * k), (16,), (1,), (1,)))
        body.append(Dma(1, Ref(dst, 16 * k), Ref(slots[k % 2]), (16,), (1,), (1,)))
    kir = _allocated(slots + [src, dst], body)
    flat, _ = sync.synchronise(kir.body)
    rolled = loops.reroll(flat)
    (loop,) = [s for s in rolled if isinstance(s, Loop)]
    assert loop.extent >= 8
    assert [signature(s) for s in loops.flatten(rolled)] == [signature(s) for s in flat]
    moving = [getattr(c, f) for c in loop.body if isinstance(c, Command) for f in ref_fields(c)
              if isinstance(getattr(c, f), LoopRef)]
    assert {r.stride for r in moving if not r.cycle} == {16}
    assert {len(r.cycle) for r in moving if r.cycle} == {2}
    # emitted, assembled and run: dst is src, and the race checker agrees with the semaphores
    kir.body = rolled
    text = emit.emit(kir)
    assert "loop    r" in text and "xori" in text and "addi" in text
    program = assemble(text, {}, "t.s")
    sim = Simulator(Config())
    sim.load(program)
    data = np.arange(16 * 12, dtype=np.int8)
    sim.write("src", data)
    sim.run(check_races=True)
    np.testing.assert_array_equal(sim.read("dst"), data)
    assert len(program.code) < 0.7 * len(assemble(emit.emit(KernelIR("t", kir.buffers, flat, [], dst)), {},
                                                    "t.s").code)


def test_loop_ref_and_iterations():
    a, b = Buffer("a", "dm", 64, addr=0), Buffer("b", "dm", 64, addr=64)
    x = Buffer("x", "ddr", 1024)
    step = LoopRef(x, 8, "i0", 32)
    turn = LoopRef(a, 4, "i0", 0, (Ref(a, 4), Ref(b, 4)))
    assert (step.at(3).buf, step.at(3).offset) == (x, 8 + 96)
    assert [turn.at(v).buf for v in range(4)] == [a, b, a, b]
    assert step.describe() == "x + 8 + i0 * 32" and turn.describe() == "[a + 4, b + 4][i0 % 2]"
    loop = Loop("i0", 3, [Note("n"), Dma(0, turn, step, (16,), (1,), (1,), signal=1), CuWait(1)])
    flat = loop.flat()
    assert len(flat) == 9
    dmas = [s for s in flat if isinstance(s, Dma)]
    assert [(d.dst.buf.name, d.src.offset, d.signal) for d in dmas] == [("a", 8, 1), ("b", 40, 1), ("a", 72, 1)]
    assert all(type(d.dst) is Ref for d in dmas)


def test_emitted_loop_resets_the_parameters_it_changes():
    """A body that sets dma.size0 twice must set it again at the top of every iteration."""
    src, dst = Buffer("src", "ddr", 48 * 8, shape=(48 * 8,)), Buffer("dst", "ddr", 48 * 8, shape=(48 * 8,))
    body = []
    for k in range(8):
        body.append(Dma(0, Ref(dst, 48 * k), Ref(src, 48 * k), (16,), (1,), (1,)))
        body.append(Dma(0, Ref(dst, 48 * k + 16), Ref(src, 48 * k + 16), (32,), (1,), (1,)))
    kir = KernelIR("t", [src, dst], loops.reroll(body), [], dst)
    assert any(isinstance(s, Loop) for s in kir.body)
    text = emit.emit(kir)
    loop_text = text[text.index(".loop0:"):text.index("loop    r")]
    assert loop_text.count("setpi   dma.size0") == 2
    sim = Simulator(Config())
    sim.load(assemble(text, {}, "t.s"))
    data = np.arange(48 * 8, dtype=np.int64).astype(np.int8)
    sim.write("src", data)
    sim.run(check_races=True)
    np.testing.assert_array_equal(sim.read("dst"), data)


# ----------------------------------------------------------------------------- networks

def test_network_programs_roll_their_layers_into_loops():
    rng = np.random.default_rng(12)
    xshape = (1, 16, 24, 20)
    w1, w2 = rand8(rng, (24, 16, 3, 3)), rand8(rng, (16, 24, 1, 1))
    m1, s1 = requant_params(rng, 24, 16 * 9)
    m2, s2 = requant_params(rng, 16, 24)
    c1 = ops.conv2d(xshape, w1, rng.integers(-900, 900, 24).astype(np.int32), padding=1, x_zp=1,
                    multiplier=m1, shift=s1, zp_out=-2, lo=-2)
    c2 = ops.conv2d(c1.output.shape, w2, None, x_zp=-2, multiplier=m2, shift=s2, zp_out=4)
    g = Graph("two convs")
    x = g.input("x", xshape, quant=QuantParams(np.float32(0.05), np.int64(1)))
    h = g.add(c1, x, name="c1")
    g.output(g.add(c2, h, name="c2", quant=QuantParams(np.float32(0.1), np.int64(4))))
    g.validate()
    lib = compiler.build(g, config=Config(**SMALL_NU))
    assert "\n        loop    r" in lib.asm
    from compiler.runtime import GraphModule
    mod = GraphModule(lib)
    xv = rand8(rng, xshape)
    mod.set_input(0, xv)
    mod.run(check_races=True)
    np.testing.assert_array_equal(mod.get_output(0, quantized=True), g.reference(xv)[0])
