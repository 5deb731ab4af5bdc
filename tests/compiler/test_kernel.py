"""Compiled kernels on the simulator (race checking on) against tests/reference.py, bit for bit."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.errors import CompileError
from compiler.ir import Dma
from compiler.lowering.nu import RESIDENT_DMA_BYTES
from compiler.build import build
from compiler.search import candidates
from nnpsim.config import Config
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, candidate_case, conv_case, pool_case, rand8, requant_params, run, seeds


@settings(max_examples=60, **SETTINGS)
@given(conv_case(), seeds, st.booleans())
def test_conv2d_matches_reference(case, seed, with_bias):
    groups, cg, og, k, stride, dil, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**16), 2**16, size=o).astype(np.int32) if with_bias else None
    m, s = requant_params(rng, o, cg * k[0] * k[1])
    x_zp, zp = int(rng.integers(-128, 128)), int(rng.integers(-20, 20))
    lo = int(rng.integers(-128, 0))
    hi = int(rng.integers(0, 128))
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=x_zp, multiplier=m, shift=s,
              zp_out=zp, lo=lo, hi=hi)
    kernel = build(ops.conv2d(xshape, w, bias, **kw))
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(run(kernel, x), ref.conv2d(x, w, bias, **kw))


def test_conv2d_larger_than_the_array_and_buffers():
    rng = np.random.default_rng(7)
    xshape, w = (1, 70, 30, 30), rand8(rng, (40, 70, 3, 3))
    bias = rng.integers(-5000, 5000, size=40).astype(np.int32)
    m, s = requant_params(rng, 40, 70 * 9)
    kw = dict(stride=1, padding=1, x_zp=-3, multiplier=m, shift=s, zp_out=1)
    kernel = build(ops.conv2d(xshape, w, bias, **kw))
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(run(kernel, x), ref.conv2d(x, w, bias, **kw))
    assert kernel.stats.cycles > 0 and kernel.predicted_cycles > 0


@settings(max_examples=30, **SETTINGS)
@given(st.integers(1, 40), st.integers(1, 80), st.integers(1, 70), seeds)
def test_dense_matches_reference(n, k, o, seed):
    rng = np.random.default_rng(seed)
    w, bias = rand8(rng, (k, o)), rng.integers(-3000, 3000, size=o).astype(np.int32)
    m, s = requant_params(rng, o, k)
    kw = dict(x_zp=int(rng.integers(-128, 128)), multiplier=m, shift=s, zp_out=-2, lo=-100, hi=110)
    kernel = build(ops.dense((n, k), w, bias, **kw))
    x = rand8(rng, (n, k))
    np.testing.assert_array_equal(run(kernel, x), ref.dense(x, w, bias, **kw))


@settings(max_examples=40, **SETTINGS)
@given(pool_case(), seeds, st.sampled_from(["max", "sum", "avg", "avg_nopad"]))
def test_pooling_matches_reference(case, seed, mode):
    k, stride, pad, shape = case
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    if mode == "max":
        op, want = ops.max_pool2d(shape, k, stride, pad), ref.max_pool2d(x, k, stride, pad)
    elif mode == "sum":
        op, want = ops.sum_pool2d(shape, k, stride, pad), ref.sum_pool2d(x, k, stride, pad)
    else:
        cip, zp = mode == "avg", int(rng.integers(-128, 128))
        op = ops.avg_pool2d(shape, k, stride, pad, cip, zp)
        want = ref.avg_pool2d(x, k, stride, pad, count_include_pad=cip, x_zp=zp)
    got = run(build(op), x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_global_avg_pool():
    rng = np.random.default_rng(3)
    x = rand8(rng, (2, 5, 7, 9))
    np.testing.assert_array_equal(run(build(ops.global_avg_pool2d(x.shape)), x), ref.global_avg_pool2d(x))


@settings(max_examples=40, **SETTINGS)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), seeds, st.sampled_from(["add", "mul", "relu", "clip",
                                                                                   "rq8", "rq32", "rqpc"]))
def test_elementwise_matches_reference(shape, seed, mode):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    za, zb, zp = (int(v) for v in rng.integers(-128, 128, size=3))
    ma, mb = (int(v) for v in rng.integers(2**29, 2**31, size=2))
    lo = int(rng.integers(-128, 0))
    q = dict(zp_out=zp, lo=lo, hi=127)
    if mode == "add":
        kw = dict(za=za, zb=zb, ma=ma, mb=mb, shift=31, **q)
        got, want = run(build(ops.add(shape, **kw)), a, b), ref.add(a, b, **kw)
    elif mode == "mul":
        kw = dict(za=za, zb=zb, multiplier=ma, shift=38, **q)
        got, want = run(build(ops.mul(shape, **kw)), a, b), ref.mul(a, b, **kw)
    elif mode == "relu":
        got, want = run(build(ops.relu(shape, za)), a), ref.relu(a, za)
    elif mode == "clip":
        got, want = run(build(ops.clip(shape, lo, 100)), a), ref.clip(a, lo, 100)
    elif mode == "rq8":
        kw = dict(zx=za, multiplier=ma, shift=30, **q)
        got, want = run(build(ops.requantize(shape, in_dtype="int8", **kw)), a), ref.requantize(a, **kw)
    else:
        x = rng.integers(-(2**20), 2**20, size=shape).astype(np.int32)
        if mode == "rqpc" and len(shape) >= 2:
            m, s = rng.integers(2**30, 2**31, size=shape[1]), rng.integers(40, 46, size=shape[1])
            op = ops.requantize(shape, in_dtype="int32", multiplier=m, shift=s, **q)
            want = ref.requantize(x, multiplier=m, shift=s, axis=1, **q)
        else:
            op = ops.requantize(shape, in_dtype="int32", multiplier=ma, shift=44, **q)
            want = ref.requantize(x, multiplier=ma, shift=44, **q)
        got = run(build(op), x)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=20, **SETTINGS)
@given(seeds, st.booleans())
def test_fused_conv_relu_residual_add(seed, clip_after):
    rng = np.random.default_rng(seed)
    c, o = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    xshape = (1, c, int(rng.integers(3, 10)), int(rng.integers(3, 10)))
    w, bias = rand8(rng, (o, c, 3, 3)), rng.integers(-2000, 2000, size=o).astype(np.int32)
    m, s = requant_params(rng, o, c * 9)
    conv = ops.conv2d(xshape, w, bias, padding=1, x_zp=5, multiplier=m, shift=s, zp_out=-3)
    relu = ops.relu(conv.output.shape, zp=-3)
    add = ops.add(conv.output.shape, za=-3, zb=4, ma=2**30, mb=3 * 2**28, shift=31, zp_out=2)
    chain = [conv, relu, add] + ([ops.clip(conv.output.shape, -50, 60)] if clip_after else [])
    kernel = build(*chain)
    (block,) = kernel.schedule.blocks                  # one kernel: the add fused after the conv
    assert block.intrinsics["add"] == "vu.add"
    x, b = rand8(rng, xshape), rand8(rng, conv.output.shape)
    want = ref.relu(ref.conv2d(x, w, bias, padding=1, x_zp=5, multiplier=m, shift=s, zp_out=-3), -3)
    want = ref.add(want, b, za=-3, zb=4, ma=2**30, mb=3 * 2**28, shift=31, zp_out=2)
    if clip_after:
        want = ref.clip(want, -50, 60)
    np.testing.assert_array_equal(run(kernel, x, b), want)


def test_kernel_interface(tmp_path):
    w = np.ones((4, 3, 1, 1), np.int8)
    kernel = build(ops.conv2d((1, 3, 4, 4), w, multiplier=2**30, shift=31))
    assert kernel.input_names == ["x"]
    assert "nu.conv" in kernel.asm and "halt" in kernel.asm and ".buffer y, int8" in kernel.asm
    kernel.save(tmp_path / "k.bin")
    assert (tmp_path / "k.bin").read_bytes()[:4] == b"\x7fELF"
    with pytest.raises(CompileError, match="shape"):
        kernel(np.zeros((1, 3, 4, 5), np.int8))
    with pytest.raises(CompileError, match="takes int8"):
        build(ops.relu((4,)), ops.relu((5,)))
    with pytest.raises(CompileError, match="not an op"):
        build("conv")


@settings(max_examples=20, **SETTINGS)
@given(st.integers(1, 4), st.integers(2, 7), st.integers(1, 3), st.integers(1, 2),
       st.tuples(*[st.integers(0, 3)] * 4), seeds)
def test_conv2d_with_kernel_columns_folded_into_rows(c, kw, sw, dw, pad, seed):
    rng = np.random.default_rng(seed)
    span = dw * (kw - 1) + 1
    w_in = int(rng.integers(max(1, span - pad[1] - pad[3]), span + 12))
    xshape = (1, c, int(rng.integers(3, 9)), w_in)
    w = rand8(rng, (35, c, 3, kw))
    m, s = requant_params(rng, 35, c * 3 * kw)
    kw_ = dict(stride=(2, sw), padding=(min(pad[0], 2), pad[1], min(pad[2], 2), pad[3]), dilation=(1, dw),
               x_zp=int(rng.integers(-128, 128)), multiplier=m, shift=s)
    op = ops.conv2d(xshape, w, None, **kw_)
    # the best schedule that folds the columns (not every tap: tests/compiler/lowering/test_layout_tap_fold.py)
    kernel = build(op, schedule=next(s for s in candidates((op,), Config()) if "im2col" not in str(s)))
    # a window wider than the padded input keeps one live column (Conv2d.live): nothing left to fold
    assert ("kernel column" in kernel.asm) == (op.live().kernel[1] > 1), op.live().kernel
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(run(kernel, x), ref.conv2d(x, w, None, **kw_))


@settings(max_examples=20, **SETTINGS)
@given(seeds, st.sampled_from(["conv-pool", "conv-conv", "conv-add-conv", "pool-relu", "conv-big"]))
def test_chains_keep_intermediates_on_chip(seed, kind):
    rng = np.random.default_rng(seed)
    c, o = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    hw = (int(rng.integers(4, 12)), int(rng.integers(4, 12)))
    if kind == "conv-big":
        c, hw = 64, (96, 96)          # 64 x 96 x 96 = 576 KiB intermediate: half of DM is 1 MiB
    x = rand8(rng, (1, c) + hw)
    w1 = rand8(rng, (o, c, 3, 3))
    m1, s1 = requant_params(rng, o, c * 9)
    conv1 = ops.conv2d(x.shape, w1, None, padding=1, x_zp=3, multiplier=m1, shift=s1, zp_out=-5)
    want = ref.conv2d(x, w1, None, padding=1, x_zp=3, multiplier=m1, shift=s1, zp_out=-5)
    chain, inputs = [conv1], [x]
    if kind in ("conv-pool", "conv-big"):
        chain.append(ops.max_pool2d(conv1.output.shape, 3, 2, 1))
        want = ref.max_pool2d(want, 3, 2, 1)
    elif kind == "pool-relu":
        chain = [ops.avg_pool2d(x.shape, 2), ops.relu((1, c, hw[0] // 2, hw[1] // 2), 4)]
        want = ref.relu(ref.avg_pool2d(x, 2), 4)
    else:
        if kind == "conv-add-conv":
            b = rand8(rng, conv1.output.shape)
            chain.append(ops.add(conv1.output.shape, za=-5, zb=1, ma=2**30, mb=2**30, shift=31))
            want = ref.add(want, b, za=-5, zb=1, ma=2**30, mb=2**30, shift=31)
            inputs.append(b)
        w2 = rand8(rng, (7, o, 1, 3))
        m2, s2 = requant_params(rng, 7, o * 3)
        chain.append(ops.conv2d(conv1.output.shape, w2, np.arange(7, dtype=np.int32), stride=(1, 2),
                                padding=(0, 1), x_zp=-5, multiplier=m2, shift=s2))
        want = ref.conv2d(want, w2, np.arange(7), stride=(1, 2), padding=(0, 1), x_zp=-5, multiplier=m2, shift=s2)
    kernel = build(*chain)
    assert [b.space for b in kernel.ir.buffers if b.name == "t1"] == ["dm"]
    np.testing.assert_array_equal(run(kernel, *inputs), want)


def every_candidate_exact(chain, cfg, inputs, want) -> set:
    """Build and run the chain in every schedule the search considers; the tilings they use."""
    from compiler.search import candidates
    kinds = set()
    for s in candidates(tuple(chain), cfg):
        kinds.add(s.block("L0").tiling())
        kernel = build(*chain, config=cfg, schedule=s)
        np.testing.assert_array_equal(run(kernel, *inputs), want, err_msg=str(s))
    return kinds


@pytest.mark.parametrize("case", ["conv-bias-residual", "dense-bias", "grouped"])
def test_every_tiling_candidate_is_exact(case):
    """Not only the tiling build() picks: resident / streamed weights, chunks, bias modes."""
    from nnpsim.config import Config
    cfg = Config(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768)
    chain, inputs, want = candidate_case(np.random.default_rng(11), case, 40 if case == "dense-bias" else 36,
                                         (1, 3), 6)
    kinds = every_candidate_exact(chain, cfg, inputs, want)
    assert len(kinds) >= 3
    assert any(t.resident for t in kinds)
    if case != "grouped":
        assert {"requant", "nu"} <= {t.bias for t in kinds}


@pytest.mark.parametrize("c,o,hw,k,s,bias", [(64, 64, 28, 3, 1, False), (256, 64, 28, 1, 1, True),
                                             (128, 128, 28, 3, 2, True), (3, 32, 64, 7, 2, False)])
def test_predicted_cycles_equal_the_simulators_on_large_convs(c, o, hw, k, s, bias):
    """The cost model is exact on these ResNet-sized convs: predicted cycles are simulated cycles."""
    rng = np.random.default_rng(c + o)
    w = rand8(rng, (o, c, k, k))
    b = rng.integers(-1000, 1000, size=o).astype(np.int32) if bias else None
    op = ops.conv2d((1, c, hw, hw), w, b, stride=s, padding=k // 2, multiplier=2**30, shift=24)
    kernel = build(op)
    x = rand8(rng, op.x_shape)
    np.testing.assert_array_equal(kernel(x), op.reference(x))
    assert kernel.predicted_cycles == kernel.stats.cycles, (kernel.predicted_cycles, kernel.stats.cycles)


@pytest.mark.parametrize("burst", [1, 64, 128])
def test_cost_model_counts_the_simulators_ddr_bursts(burst):
    # every DMA of a padded, strided conv kernel (NCHW gathers, halo padding, int32 bias table):
    # the cost model's DDR burst bytes are the simulator's, command by command
    from compiler import cost
    from compiler.ir import Command, Dma
    from nnpsim.config import Config
    from nnpsim.simulator import Simulator
    rng = np.random.default_rng(7)
    op = ops.conv2d((1, 40, 13, 11), rand8(rng, (24, 40, 3, 3)), rng.integers(-9, 9, 24).astype(np.int32),
                    stride=2, padding=1, multiplier=2**30, shift=24)
    cfg = Config(ddr_burst_bytes=burst)
    kernel = build(op, config=cfg)
    sim = Simulator(cfg)
    sim.load(kernel.program)
    sim.write(kernel.ir.inputs[0].name, rand8(rng, op.x_shape))
    sim.run()
    log = sim.last_log
    cmds = [c for c in kernel.ir.body if isinstance(c, Command)]
    assert len(cmds) == log.n_commands
    dmas = [(k, c) for k, c in enumerate(cmds) if isinstance(c, Dma)]
    assert any(c.inner != c.size for _, c in dmas)
    got = [sum(cost.ddr_burst_bytes(c, cfg)) for _, c in dmas]
    assert got == [int(log.cmd_ddr_burst_bytes[k]) for k, _ in dmas]
    # the DDR sides' own bytes (a load's source box without its padding): bursts cover them, and more
    # when they are not whole bursts (rows of 11 bytes)
    ddr = [(math.prod(c.inner) if c.src.buf.space == "ddr" else 0) * c.elem
           + (math.prod(c.size) if c.dst.buf.space == "ddr" else 0) * c.elem for _, c in dmas]
    assert sum(got) == sum(ddr) if burst == 1 else sum(got) > sum(ddr)


@pytest.mark.parametrize("cfg", [dict(dma_channels=1), dict(nu_rows=16, nu_cols=8), dict(dma_channels=2, nu_rows=8),
                                 dict(vbuf_bytes=8192, ibuf_bytes=8192, abuf_bytes=4096),
                                 # arrays whose sides are not powers of two: IBUF/WBUF operands still land on
                                 # multiples of rows and columns
                                 dict(nu_rows=12, nu_cols=12), dict(nu_rows=24, nu_cols=20), dict(nu_rows=48, nu_cols=48)])
def test_other_configurations(cfg):
    from nnpsim.config import Config
    config = Config(**cfg)
    rng = np.random.default_rng(5)
    w, b = rand8(rng, (20, 12, 3, 3)), rng.integers(-500, 500, size=20).astype(np.int32)
    m, s = requant_params(rng, 20, 108)
    conv = ops.conv2d((1, 12, 9, 10), w, b, stride=(1, 2), padding=1, x_zp=1, multiplier=m, shift=s)
    pool = ops.max_pool2d(conv.output.shape, 2, 1, (1, 0, 0, 1))
    x = rand8(rng, conv.x_shape)
    kernel = build(conv, pool, config=config)
    want = ref.max_pool2d(ref.conv2d(x, w, b, stride=(1, 2), padding=1, x_zp=1, multiplier=m, shift=s),
                          2, 1, (1, 0, 0, 1))
    np.testing.assert_array_equal(run(kernel, x), want)


def test_elementwise_head_with_folded_relu_then_conv_and_residual():
    rng = np.random.default_rng(9)
    sh = (1, 5, 6, 7)
    a, b, c = rand8(rng, sh), rand8(rng, sh), rand8(rng, (1, 3, 6, 7))
    w = rand8(rng, (3, 5, 3, 3))
    chain = [ops.add(sh, za=2, ma=2**30, mb=2**30, shift=31, zp_out=-1), ops.relu(sh, -1), ops.clip(sh, -128, 90),
             ops.conv2d(sh, w, padding=1, x_zp=-1, multiplier=2**30, shift=20),
             ops.add((1, 3, 6, 7), ma=2**30, mb=2**29, shift=31)]
    kernel = build(*chain)
    assert kernel.input_names == ["a", "b", "b2"]
    assert kernel.asm.count("vu.clip") == 0          # relu and clip folded into the add's clamp
    h = ref.clip(ref.relu(ref.add(a, b, za=2, ma=2**30, mb=2**30, shift=31, zp_out=-1), -1), -128, 90)
    want = ref.add(ref.conv2d(h, w, padding=1, x_zp=-1, multiplier=2**30, shift=20), c, ma=2**30, mb=2**29,
                   shift=31)
    np.testing.assert_array_equal(run(kernel, a, b, c), want)


def test_chain_through_ddr_when_the_intermediate_does_not_fit_dm():
    from nnpsim.config import Config
    rng = np.random.default_rng(4)
    w = rand8(rng, (16, 8, 3, 3))
    conv = ops.conv2d((1, 8, 20, 20), w, padding=1, multiplier=2**30, shift=20)
    pool = ops.avg_pool2d(conv.output.shape, 2, count_include_pad=False, padding=1)
    kernel = build(conv, pool, config=Config(dm_bytes=8192))
    assert [b.space for b in kernel.ir.buffers if b.name == "t1"] == ["ddr"] and ".buffer t1, int8" in kernel.asm
    x = rand8(rng, conv.x_shape)
    want = ref.avg_pool2d(ref.conv2d(x, w, padding=1, multiplier=2**30, shift=20), 2, padding=1,
                          count_include_pad=False)
    np.testing.assert_array_equal(run(kernel, x), want)


def test_roofline():
    from nnpsim.config import Config
    w = np.ones((64, 32, 3, 3), np.int8)
    conv = ops.conv2d((1, 32, 16, 16), w, np.zeros(64, np.int32), padding=1, multiplier=1, shift=0)
    kernel = build(conv, ops.relu(conv.output.shape))
    macs = 64 * 32 * 9 * 16 * 16
    ddr = 32 * 16 * 16 + 64 * 32 * 9 + 4 * 64 + 64 * 16 * 16
    assert kernel.roofline_cycles == max(-(-macs // 1024), -(-ddr // 32))
    run(kernel, rand8(np.random.default_rng(0), conv.x_shape))
    assert kernel.stats.cycles >= kernel.roofline_cycles
    add = ops.add((4, 8), ma=1, mb=1, shift=0)
    assert build(add).roofline_cycles == 3 * 32 / Config().ddr_bytes_per_cycle


def test_configuration_errors_say_why():
    from nnpsim.config import Config
    w = np.ones((32, 32, 3, 3), np.int8)
    conv = ops.conv2d((1, 32, 8, 8), w, multiplier=1, shift=0)
    with pytest.raises(CompileError, match="semaphores"):
        build(conv, config=Config(semaphores=2))     # nu.conv.rq's kernel needs 3 (load, NU, store)
    with pytest.raises(CompileError, match="abuf"):
        build(conv, config=Config(abuf_bytes=64))
    with pytest.raises(CompileError, match="VBUF"):
        build(ops.max_pool2d((1, 1, 4, 200000), 3, 1, 1))


@settings(max_examples=12, **SETTINGS)
@given(seeds, st.sampled_from(["ms", "f32"]), st.booleans())
def test_conv2d_on_the_nu_output_stage_in_chunks_matches_reference(seed, form, with_bias):
    """Tiles whose input blocks run in several chunks, the last one nu.conv.acc.rq (partial sums from
    ABUF, bias, requantised into VBUF): every chunked candidate that uses it, against the reference,
    on channels and maps that divide neither the array nor the chunks."""
    rng = np.random.default_rng(seed)
    cfg = Config(nu_rows=8, nu_cols=8, ibuf_bytes=4096, abuf_bytes=8192, wbuf_bytes=8192).validate()
    c, o = int(rng.integers(17, 41)), int(rng.integers(3, 21))
    k = [(1, 1), (3, 3), (1, 3)][int(rng.integers(0, 3))]
    xshape = (1, c, int(rng.integers(3, 10)), int(rng.integers(3, 10)))
    w = rand8(rng, (o, c) + k)
    bias = rng.integers(-(2**16), 2**16, size=o).astype(np.int32) if with_bias else None
    pad = (k[0] // 2, k[1] // 2)
    if form == "f32":
        q = dict(scale=f32_scales(rng, o, 64 * 128 * np.sqrt(c * k[0] * k[1])))
    else:
        m, sh = requant_params(rng, o, c * k[0] * k[1])
        q = dict(multiplier=m, shift=sh)
    conv = ops.conv2d(xshape, w, bias, padding=pad, x_zp=int(rng.integers(-128, 128)), zp_out=-3, lo=-120,
                      hi=int(rng.integers(0, 128)), **q)
    x = rand8(rng, xshape)
    want = conv.reference(x)
    found = [s for s in candidates((conv,), cfg) if s.blocks[0].intrinsics.get("requant") == "nu.conv.acc.rq"]
    assert found, "no candidate runs the output stage over several chunks"
    for s in found[:3]:
        kernel = build(conv, config=cfg, schedule=s)
        assert "nu.conv.acc.rq" in kernel.asm and "vu.requant" not in kernel.asm
        np.testing.assert_array_equal(run(kernel, x), want, err_msg=str(s))


# ---------------------------------------------------------------- float forms (onnxruntime arithmetic)
# Compiled kernels of the float forms against the ops' own reference (compiler.reference, which
# tests/compiler/test_reference_ort.py checks against onnxruntime), bit for bit, shapes that do not divide
# the array, VU or VBUF sizes included.

F32 = np.float32


def f32_scales(rng, n, magnitude):
    """n float32 scales that map accumulators of about `magnitude` over int8 (a few powers of two: ties)."""
    s = (2.0 ** rng.uniform(-2.5, 1.5, size=n) * 40.0 / max(magnitude, 1.0)).astype(F32)
    pow2 = rng.random(n) < 0.25
    s[pow2] = (2.0 ** np.round(np.log2(s[pow2].astype(np.float64)))).astype(F32)
    return s


def spread(y):
    """Outputs cover many int8 values (the comparison is not all on saturated ones)."""
    assert len(np.unique(y)) >= min(8, y.size // 2), np.unique(y)


@settings(max_examples=40, **SETTINGS)
@given(conv_case(), seeds, st.booleans(), st.booleans())
def test_conv2d_f32_matches_reference(case, seed, with_bias, per_channel):
    groups, cg, og, k, stride, dil, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**16), 2**16, size=o).astype(np.int32) if with_bias else None
    scale = f32_scales(rng, o if per_channel else 1, 64 * 128 * np.sqrt(cg * k[0] * k[1]))
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=int(rng.integers(-128, 128)),
              scale=scale if per_channel else scale[0], zp_out=int(rng.integers(-20, 20)),
              lo=int(rng.integers(-128, 0)), hi=int(rng.integers(0, 128)))
    op = ops.conv2d(xshape, w, bias, **kw)
    kernel = build(op)
    # the float requantisation: on the VU, or in the NU's output stage (nu.conv.rq or nu.conv.acc.rq with
    # rq_float = 1)
    assert "vu.requant.f" in kernel.asm or (("nu.conv.rq" in kernel.asm or "nu.conv.acc.rq" in kernel.asm)
                                            and "nu.rq_float, 1" in kernel.asm)
    x = rand8(rng, xshape)
    want = op.reference(x)
    np.testing.assert_array_equal(run(kernel, x), want)


@settings(max_examples=20, **SETTINGS)
@given(st.integers(1, 40), st.integers(1, 80), st.integers(1, 70), seeds)
def test_dense_f32_matches_reference(n, k, o, seed):
    rng = np.random.default_rng(seed)
    w, bias = rand8(rng, (k, o)), rng.integers(-3000, 3000, size=o).astype(np.int32)
    op = ops.dense((n, k), w, bias, x_zp=int(rng.integers(-128, 128)), scale=f32_scales(rng, o, 64 * 128 * np.sqrt(k)),
                   zp_out=-2, lo=-100, hi=110)
    x = rand8(rng, (n, k))
    np.testing.assert_array_equal(run(build(op), x), op.reference(x))


@settings(max_examples=40, **SETTINGS)
@given(pool_case(), seeds, st.sampled_from(["avg", "avg_nopad", "whole_plane", "global"]))
def test_pooling_f32_matches_reference(case, seed, mode):
    k, stride, pad, shape = case
    rng = np.random.default_rng(seed)
    x_zp, zp = (int(v) for v in rng.integers(-128, 128, size=2))
    sx, sy = (2.0 ** rng.uniform(-6, 0, size=2)).astype(F32)
    f = dict(scale_x=sx, scale_out=sy, zp_out=zp)
    if mode == "global":
        op = ops.global_avg_pool2d(shape, x_zp=x_zp, **f)
    elif mode == "whole_plane":          # onnxruntime runs it as the global pool, and so must the kernel
        op = ops.avg_pool2d(shape, shape[2:], stride, 0, True, x_zp, **f)
    else:
        op = ops.avg_pool2d(shape, k, stride, pad, mode == "avg", x_zp, **f)
    x = rand8(rng, shape)
    kernel = build(op)
    assert ("vu.pool.favg" in kernel.asm or "vu.slide.favg" in kernel.asm) != op.is_global
    assert op.is_global or mode not in ("global", "whole_plane")
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))


@settings(max_examples=40, **SETTINGS)
@given(st.lists(st.integers(1, 9), min_size=1, max_size=4), seeds, st.sampled_from(["add", "mul", "rq8", "rq32",
                                                                                   "rqpc"]))
def test_elementwise_f32_matches_reference(shape, seed, mode):
    rng = np.random.default_rng(seed)
    a, b = rand8(rng, shape), rand8(rng, shape)
    za, zb, zp = (int(v) for v in rng.integers(-128, 128, size=3))
    sa, sb, sy = (2.0 ** rng.uniform(-6, 0, size=3)).astype(F32)
    q = dict(zp_out=zp, lo=int(rng.integers(-128, 0)), hi=127)
    if mode in ("add", "mul"):
        sy = F32(sy * (64 if mode == "mul" else 1))
        op = getattr(ops, mode)(shape, za=za, zb=zb, scale_a=sa, scale_b=sb, scale_out=sy, **q)
        inputs = (a, b)
    elif mode == "rq8":
        op, inputs = ops.requantize(shape, in_dtype="int8", zx=za, scale=sa * 4, **q), (a,)
    else:
        x = rng.integers(-(2**20), 2**20, size=shape).astype(np.int32)
        per_channel = mode == "rqpc" and len(shape) >= 2
        scale = f32_scales(rng, shape[1], 2**20) if per_channel else f32_scales(rng, 1, 2**20)[0]
        op, inputs = ops.requantize(shape, in_dtype="int32", zx=int(rng.integers(-999, 999)), scale=scale, **q), (x,)
    np.testing.assert_array_equal(run(build(op), *inputs), op.reference(*inputs))


@settings(max_examples=15, **SETTINGS)
@given(seeds, st.booleans())
def test_fused_conv_f32_relu_residual_fadd(seed, clip_after):
    rng = np.random.default_rng(seed)
    c, o = int(rng.integers(1, 40)), int(rng.integers(1, 40))
    xshape = (1, c, int(rng.integers(3, 10)), int(rng.integers(3, 10)))
    w, bias = rand8(rng, (o, c, 3, 3)), rng.integers(-2000, 2000, size=o).astype(np.int32)
    conv = ops.conv2d(xshape, w, bias, padding=1, x_zp=5, scale=f32_scales(rng, o, 64 * 128 * 3 * np.sqrt(c)),
                      zp_out=-3)
    relu = ops.relu(conv.output.shape, zp=-3)
    add = ops.add(conv.output.shape, za=-3, zb=4, scale_a=0.05, scale_b=0.031, scale_out=0.07, zp_out=2)
    chain = [conv, relu, add] + ([ops.clip(conv.output.shape, -50, 60)] if clip_after else [])
    kernel = build(*chain)
    (block,) = kernel.schedule.blocks                  # one kernel: the add fused after the conv
    assert block.intrinsics["add"] == "vu.fadd"
    x, b = rand8(rng, xshape), rand8(rng, conv.output.shape)
    want = add.reference(relu.reference(conv.reference(x)), b)
    if clip_after:
        want = chain[-1].reference(want)
    np.testing.assert_array_equal(run(kernel, x, b), want)


@pytest.mark.parametrize("case", ["conv-residual", "dense", "grouped"])
def test_every_tiling_candidate_of_the_f32_form_is_exact(case):
    """Every tiling and bias mode (filled, by the requantiser, by an NU pass) with float32 scales."""
    from nnpsim.config import Config
    cfg = Config(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768)
    rng = np.random.default_rng(12)
    if case == "dense":
        w, b = rand8(rng, (70, 40)), rng.integers(-9000, 9000, size=40).astype(np.int32)
        chain = [ops.dense((9, 70), w, b, x_zp=2, scale=f32_scales(rng, 40, 64 * 128 * 8), zp_out=4)]
    else:
        groups, c, o = (2, 80, 36) if case == "grouped" else (1, 80, 36)
        w, b = rand8(rng, (o, c // groups, 1, 3)), rng.integers(-9000, 9000, size=o).astype(np.int32)
        chain = [ops.conv2d((2, c, 6, 11), w, b, stride=(1, 2), padding=(1, 1, 0, 2), groups=groups, x_zp=-4,
                            scale=f32_scales(rng, o, 64 * 128 * np.sqrt(3 * c // groups)), zp_out=3)]
        if case == "conv-residual":
            chain.append(ops.add(chain[0].output.shape, za=3, zb=-1, scale_a=0.05, scale_b=0.031, scale_out=0.07,
                                 zp_out=1))
    x = rand8(rng, chain[0].inputs[0].shape)
    inputs, want = [x], chain[0].reference(x)
    if len(chain) > 1:
        inputs.append(rand8(rng, want.shape))
        want = chain[1].reference(want, inputs[1])
    spread(want)
    kinds = every_candidate_exact(chain, cfg, inputs, want)
    assert len(kinds) >= 3
    if case != "grouped":
        assert {"requant", "nu"} <= {t.bias for t in kinds}


def kernels_with_input_in_dm(op, cfg, limit: int = 2):
    """Kernels of op, among its candidate schedules, that keep the whole input in DM (conv_plan.input_in_dm)."""
    from compiler.lowering.conv_plan import input_in_dm
    picked = [s for s in candidates((op,), cfg) if input_in_dm(s.blocks[0].ctx["plan"], s.blocks[0].tiling())]
    kernels = [build(op, config=cfg, schedule=s) for s in picked[:limit]]
    assert all("_x_dm" in k.asm for k in kernels)
    return kernels


@settings(max_examples=12, **SETTINGS)
@given(st.integers(20, 70), st.integers(40, 130), st.sampled_from([1, 3]), st.integers(3, 8), st.integers(3, 8),
       st.integers(1, 2), seeds)
def test_conv2d_with_its_input_kept_in_dm(c, o, k, h2, w2, n, seed):
    """Weights streamed by groups of output blocks, each group reading the whole input in short runs (a
    stride-2 window that skips the plane's last column): the rows cross DDR once into DM, every group
    gathers its tiles from there."""
    rng = np.random.default_rng(seed)
    wt = rand8(rng, (o, c, k, k))
    m, s = requant_params(rng, o, c * k * k)
    kw = dict(stride=2, x_zp=int(rng.integers(-128, 128)), multiplier=m, shift=s)
    bias = rng.integers(-(2**15), 2**15, size=o).astype(np.int32)
    h, w = 2 * h2 + int(rng.integers(0, 2)), 2 * w2
    op = ops.conv2d((n, c, h, w), wt, bias, **kw)
    cfg = Config(wbuf_bytes=32768, ibuf_bytes=32768).validate()
    kernels = kernels_with_input_in_dm(op, cfg)
    assert kernels, "no candidate keeps the input in DM"
    x = rand8(rng, (n, c, h, w))
    for kernel in kernels:
        np.testing.assert_array_equal(run(kernel, x), ref.conv2d(x, wt, bias, **kw))


def _resident_dmas(kernel) -> list[int]:
    """The bytes of each DMA that loads a kernel's resident weights (nu.NuLowering._resident_loads)."""
    return [c.size[0] for c in kernel.ir.commands() if isinstance(c, Dma) and c.comment.endswith(", resident")]


@settings(max_examples=12, **SETTINGS)
@given(st.integers(1, 70), st.integers(33, 130), st.sampled_from([(1, 1), (3, 3), (1, 3)]), st.integers(1, 9),
       st.integers(1, 11), st.sampled_from([{}, dict(nu_count=2, vu_count=2)]), seeds)
def test_resident_weights_loaded_group_by_group_are_exact(c, o, k, h, w, units, seed):
    """Resident weights in several DMAs, one or more output-block groups each, the first with the
    constants: every such candidate exact and race-free, on shapes that do not divide the array."""
    rng = np.random.default_rng(seed)
    x = rand8(rng, (1, c, h, w))
    wt = rand8(rng, (o, c) + k)
    bias = rng.integers(-(2**16), 2**16, size=o).astype(np.int32)
    m, s = requant_params(rng, o, c * k[0] * k[1])
    kw = dict(padding=(k[0] // 2, k[1] // 2), x_zp=int(rng.integers(-128, 128)), multiplier=m, shift=s,
              zp_out=int(rng.integers(-20, 20)))
    op = ops.conv2d(x.shape, wt, bias, **kw)
    cfg = Config(**units)
    want = ref.conv2d(x, wt, bias, **kw)
    n_ob, built, splits = -(-o // cfg.nu_cols), 0, False
    for sched in candidates((op,), cfg):
        t = sched.block("L0").tiling()
        if not t.resident or t.obt >= n_ob:
            continue
        kernel = build(op, config=cfg, schedule=sched)
        dmas = _resident_dmas(kernel)
        # a run of output-block groups closes once it holds RESIDENT_DMA_BYTES: when one group of obt
        # blocks holds that much, the next group starts a DMA of its own
        group = t.obt * sum(dmas) // n_ob
        splits |= group >= RESIDENT_DMA_BYTES
        assert len(dmas) >= 2 or group < RESIDENT_DMA_BYTES, (sched, dmas)
        if len(dmas) < 2:
            continue
        np.testing.assert_array_equal(run(kernel, x), want, err_msg=str(sched))
        built += 1
        if built == 3:
            break
    # a 3x3 group of unfolded taps is at least one 9 KiB block, over RESIDENT_DMA_BYTES; with few input
    # channels the column or tap fold puts the window in fewer blocks, and 1x1 and 1x3 groups of few
    # input blocks merge into one DMA: what is checked is that every group that holds the threshold splits
    assert built or not splits
