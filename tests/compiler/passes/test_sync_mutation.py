"""Mutation tests of the compiler's synchronisation, judged by the simulator's race checker.

For every kernel below (conv2d of several shapes, dense, pooling, elementwise,
fused and chained kernels, each in several tilings or configurations, whole
networks whose kernels hold several anchors fused by compiler.network.fusion, fused
chains interleaved tile by tile by compiler.interleave) and for
random kernels drawn like tests/compiler/test_kernel.py draws them (tests/helpers/), every
semaphore wait the compiler emitted is removed, one at a time: a command's
`wait=sN` is cleared (the word re-encoded without it), a CU `sem.wait sN`
becomes `nop` (addresses stay put).  A second mutant also drops the signal
paired with that wait, so that later waits keep their own tokens and exactly
one ordering edge is lost.  Each mutant runs with race checking on and must
stop with a data race or a deadlock: a survivor is a wait the compiler did not
need or a hole in the checker.  Run with `-s` for the table of kernels and
mutants killed.  The last tests pin down how a race that makes a command fault
(a divisor or multiplier read before it is loaded) is reported: as the race.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler import ops
from compiler.ir import Dma
from compiler.build import build
from compiler.search import candidates
from isa_spec import decode
from nnpasm import assemble
from nnpsim import errors
from nnpsim.config import Config
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator
from tests.helpers import kernels as drawn_kernels
from tests.helpers import networks
from tests.helpers.mutation import NOT_KILLS, SUMMARY, kill_all

pytestmark = pytest.mark.usefixtures("warm_engine")

SMALL_NU = dict(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768)   # more tiles, more tilings
SMALL_VU = dict(vbuf_bytes=2048)
ONE_DMA = dict(dma_channels=1)       # every transfer in one queue: other semaphores


def rand8(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def requant(rng, o: int) -> dict:
    return dict(multiplier=rng.integers(2**30, 2**31, size=o), shift=rng.integers(20, 26, size=o))


def conv_case(rng, xshape, o, k, bias=True, **kw):
    w = rand8(rng, (o, xshape[1] // kw.get("groups", 1)) + k)
    b = rng.integers(-3000, 3000, size=o).astype(np.int32) if bias else None
    return [ops.conv2d(xshape, w, b, **kw, **requant(rng, o))], [rand8(rng, xshape)]


def fused(rng):
    (conv,), (x,) = conv_case(rng, (1, 12, 8, 7), 20, (3, 3), padding=1, x_zp=5)
    out = conv.output.shape
    chain = [conv, ops.relu(out, conv.zp_out), ops.add(out, zb=4, ma=2**30, mb=3 * 2**28, shift=31),
             ops.clip(out, -50, 60)]
    return chain, [x, rand8(rng, out)]


def chain(rng, kind):
    (c1,), (x,) = conv_case(rng, (1, 8, 8, 8), 12, (3, 3), bias=False, padding=1, x_zp=3)
    out = c1.output.shape
    (c2,), _ = conv_case(rng, out, 7, (1, 3), stride=(1, 2), padding=(0, 1))
    if kind == "conv-conv":
        return [c1, c2], [x]
    if kind == "conv-pool":
        return [c1, ops.max_pool2d(out, 3, 2, 1)], [x]
    if kind == "conv-add-conv":
        return [c1, ops.add(out, zb=1, ma=2**30, mb=2**30, shift=31), c2], [x, rand8(rng, out)]
    if kind == "pool-relu":
        return [ops.avg_pool2d(x.shape, 2), ops.relu((1, 8, 4, 4), 4)], [x]
    sh = (1, 5, 6, 7)           # elementwise head, folded relu and clip, conv, residual add
    w = rand8(rng, (3, 5, 3, 3))
    head = [ops.add(sh, za=2, ma=2**30, mb=2**30, shift=31, zp_out=-1), ops.relu(sh, -1), ops.clip(sh, -128, 90),
            ops.conv2d(sh, w, padding=1, x_zp=-1, multiplier=2**30, shift=20),
            ops.add((1, 3, 6, 7), ma=2**30, mb=2**29, shift=31)]
    return head, [rand8(rng, sh), rand8(rng, sh), rand8(rng, (1, 3, 6, 7))]


def vu_case(rng, make):
    x = rand8(rng, (2, 5, 9, 11))
    op = make(x.shape)
    inputs = [x] + ([rand8(rng, x.shape)] if len(op.inputs) == 2 else [])
    if op.inputs[0].dtype == "int32":
        inputs = [rng.integers(-2**20, 2**20, size=x.shape).astype(np.int32)]
    return [op], inputs


# name -> (chain builder(rng), configurations, at most this many tilings per configuration)
CASES = {
    "conv 3x3 40->36 stride (2,1) asym pad, bias": (
        lambda r: conv_case(r, (1, 40, 7, 9), 36, (3, 3), stride=(2, 1), padding=(1, 0, 1, 2), x_zp=3),
        [SMALL_NU], 6),
    "conv 3x3 dilated 2, no bias": (
        lambda r: conv_case(r, (1, 10, 9, 8), 9, (3, 3), bias=False, dilation=2, padding=1, x_zp=-7),
        [{}], 4),
    "conv 1x3 small bias (all bias modes)": (
        lambda r: conv_case(r, (2, 24, 6, 11), 16, (1, 3), stride=(1, 2), padding=(1, 1, 0, 2)), [SMALL_NU], 8),
    "conv depthwise 3x3": (
        lambda r: conv_case(r, (1, 6, 7, 7), 6, (3, 3), groups=6, padding=1), [{}], 4),
    "conv grouped 80->36 groups 2": (
        lambda r: conv_case(r, (2, 80, 6, 11), 36, (1, 3), bias=False, stride=(1, 2), padding=(1, 1, 0, 2),
                            groups=2, x_zp=-4), [SMALL_NU], 6),
    "conv stem 3ch 3x5 stride 2 (columns folded)": (
        lambda r: conv_case(r, (1, 3, 12, 12), 16, (3, 5), stride=2, padding=2), [{}], 4),
    "dense 9x70 -> 40, bias": (
        lambda r: ([ops.dense((9, 70), rand8(r, (70, 40)), r.integers(-99, 99, 40).astype(np.int32),
                              **requant(r, 40))], [rand8(r, (9, 70))]), [SMALL_NU], 6),
    "fused conv+relu+residual add+clip": (fused, [SMALL_NU], 6),
    "max_pool 3x3/2 pad 1": (lambda r: vu_case(r, lambda s: ops.max_pool2d(s, 3, 2, 1)), [{}, ONE_DMA], 1),
    "avg_pool 3x3/2 pad 1 no pad count": (
        lambda r: vu_case(r, lambda s: ops.avg_pool2d(s, 3, 2, 1, False, 4)), [{}, ONE_DMA], 1),
    "avg_pool 2x2": (lambda r: vu_case(r, lambda s: ops.avg_pool2d(s, 2)), [{}], 1),
    "sum_pool 2x3/(1,2)": (lambda r: vu_case(r, lambda s: ops.sum_pool2d(s, (2, 3), (1, 2), (1, 1, 0, 0))),
                           [{}, SMALL_VU], 1),
    "global_avg_pool": (lambda r: vu_case(r, ops.global_avg_pool2d), [{}], 1),
    "add": (lambda r: vu_case(r, lambda s: ops.add(s, za=3, ma=2**30, mb=2**30, shift=31)),
            [{}, ONE_DMA], 1),
    "mul": (lambda r: vu_case(r, lambda s: ops.mul(s, zb=-2, multiplier=2**30, shift=36)), [{}], 1),
    "relu": (lambda r: vu_case(r, lambda s: ops.relu(s, 3)), [{}], 1),
    "clip": (lambda r: vu_case(r, lambda s: ops.clip(s, -5, 50)), [ONE_DMA], 1),
    "requantize int8": (lambda r: vu_case(r, lambda s: ops.requantize(s, in_dtype="int8", zx=3, multiplier=2**30,
                                                                       shift=30)), [{}], 1),
    "requantize int32 per channel": (
        lambda r: vu_case(r, lambda s: ops.requantize(s, in_dtype="int32", multiplier=r.integers(2**30, 2**31, 5),
                                                      shift=r.integers(40, 45, 5))), [{}, SMALL_VU], 1),
    "chain conv->conv": (lambda r: chain(r, "conv-conv"), [{}, ONE_DMA], 1),
    "chain conv->max_pool": (lambda r: chain(r, "conv-pool"), [SMALL_NU, dict(dma_channels=2, nu_rows=8)], 1),
    "chain conv->add->conv": (lambda r: chain(r, "conv-add-conv"), [{}], 1),
    "chain avg_pool->relu": (lambda r: chain(r, "pool-relu"), [{}], 1),
    "chain add+relu+clip->conv->add": (lambda r: chain(r, "head"), [{}, dict(nu_rows=16, nu_cols=8)], 1),
    "chain conv->avg_pool through DDR": (
        lambda r: ([(c := conv_case(r, (1, 8, 12, 12), 16, (3, 3), padding=1)[0][0]),
                    ops.avg_pool2d(c.output.shape, 2, padding=1, count_include_pad=False)],
                   [rand8(r, (1, 8, 12, 12))]), [dict(dm_bytes=8192)], 1),
}


@pytest.fixture(scope="module", autouse=True)
def summary():
    """Print, after the module, every kernel and how many of its mutants were killed and how."""
    yield
    total, killed = sum(n for _, n, _ in SUMMARY), sum(sum(v for k, v in how.items() if k not in NOT_KILLS)
                                                       for *_, how in SUMMARY)
    looped = sum(how["in a loop"] for *_, how in SUMMARY)
    apart = sum(how["signal not separable"] for *_, how in SUMMARY)
    print(f"\nsynchronisation mutants: {killed} of {total} killed over {len(SUMMARY)} kernels "
          f"({looped} of them remove a wait in a loop body, {sum(1 for *_, how in SUMMARY if how['in a loop'])} "
          f"kernels with such waits; {apart} waits whose signals also meet other waits have no "
          f"signal-dropping mutant)")
    for label, n, how in SUMMARY:
        print(f"  {sum(v for k, v in how.items() if k not in NOT_KILLS):4d}/{n:<4d} {dict(how)}  {label}")


@pytest.mark.parametrize("case", list(CASES))
def test_every_removed_wait_is_caught(case):
    build_chain, configs, max_tilings = CASES[case]
    chain_ops, inputs = build_chain(np.random.default_rng(sum(map(ord, case))))
    for overrides in configs:
        cfg = Config(**overrides).validate()
        for s in candidates(tuple(chain_ops), cfg)[:max_tilings]:
            kernel = build(*chain_ops, config=cfg, schedule=s)
            kill_all(kernel, inputs, f"{case}: {overrides or 'default config'} {kernel.ir.notes[-1]}")


# Kernels spread over several units (compiler.lowering.units): only their split candidates.
SPLIT_CASES = {
    "conv 3x3 40->36 asym pad, bias, on 2 NUs + 2 VUs": (
        lambda r: conv_case(r, (1, 40, 9, 9), 36, (3, 3), stride=(2, 1), padding=(1, 0, 1, 2), x_zp=3),
        dict(SMALL_NU, nu_count=2, vu_count=2)),
    "fused conv+relu+residual add+clip on 3 NUs + 1 VU": (fused, dict(SMALL_NU, nu_count=3)),
    "dense 9x70 -> 100 on 2 NUs": (
        lambda r: ([ops.dense((9, 70), rand8(r, (70, 100)), r.integers(-99, 99, 100).astype(np.int32),
                              **requant(r, 100))], [rand8(r, (9, 70))]), dict(SMALL_NU, nu_count=2)),
    "max_pool 3x3/2 pad 1 on 3 VUs": (lambda r: vu_case(r, lambda s: ops.max_pool2d(s, 3, 2, 1)),
                                      dict(vu_count=3)),
    "avg_pool no pad count on 2 VUs, one DMA": (
        lambda r: vu_case(r, lambda s: ops.avg_pool2d(s, 3, 2, 1, False, 4)), dict(ONE_DMA, vu_count=2)),
    "add on 2 VUs": (lambda r: vu_case(r, lambda s: ops.add(s, za=3, ma=2**30, mb=2**30, shift=31)),
                     dict(vu_count=2)),
    "chain conv->max_pool on 2 NUs + 2 VUs": (lambda r: chain(r, "conv-pool"),
                                              dict(SMALL_NU, nu_count=2, vu_count=2)),
}


@pytest.mark.parametrize("case", list(SPLIT_CASES))
def test_every_removed_wait_is_caught_in_split_kernels(case):
    build_chain, overrides = SPLIT_CASES[case]
    chain_ops, inputs = build_chain(np.random.default_rng(sum(map(ord, case))))
    cfg = Config(**overrides).validate()
    split = [s for s in candidates(tuple(chain_ops), cfg) if any(b.parallel for b in s.blocks)][:4]
    assert split, f"{case}: no candidate spreads over several units"
    copies = 0
    for s in split:
        kernel = build(*chain_ops, config=cfg, schedule=s)
        copies += sum(1 for c in kernel.ir.commands() if _shared_copy(c))
        kill_all(kernel, inputs, f"{case}: {overrides} {kernel.ir.notes[-1]}")
    # the NU splits share their loads (compiler.lowering.units): the copies' waits are among those removed
    assert copies or not any(b.kind == "nu" and b.parallel for s in split for b in s.blocks), f"{case}: no shared load"


def _shared_copy(c) -> bool:
    """Is c a part's on-chip copy of another part's load (compiler.lowering.units.share_loads)?"""
    return (isinstance(c, Dma) and c.src.buf.space == c.dst.buf.space != "ddr"
            and c.src.buf.unit != c.dst.buf.unit)


def fused_big(rng):
    (conv,), (x,) = conv_case(rng, (1, 12, 20, 18), 20, (3, 3), padding=1, x_zp=5)
    out = conv.output.shape
    chain = [conv, ops.relu(out, conv.zp_out), ops.add(out, zb=4, ma=2**30, mb=3 * 2**28, shift=31)]
    return chain, [x, rand8(rng, out)]


def planes(rng, make, shape=(1, 8, 40, 38)):
    op = make(shape)
    return [op], [rand8(rng, shape) for _ in op.inputs]


# Kernels with enough tiles that the compiler emits loops: (chain builder, configurations, tilings).
LOOP_CASES = {
    "conv 3x3 16->24 at 24x20": (
        lambda r: conv_case(r, (1, 16, 24, 20), 24, (3, 3), padding=1, x_zp=2), [SMALL_NU], 4),
    "conv 1x3 stride (1,2) at 24x22 (all bias modes)": (
        lambda r: conv_case(r, (1, 24, 24, 22), 16, (1, 3), stride=(1, 2), padding=(1, 1, 0, 2)), [SMALL_NU], 6),
    "fused conv+relu+residual add at 20x18": (fused_big, [SMALL_NU], 6),
    "conv depthwise 3x3 40 channels at 20x20": (
        lambda r: conv_case(r, (1, 40, 20, 20), 40, (3, 3), groups=40, padding=1), [SMALL_NU], 2),
    "dense 200x70 -> 40, bias": (
        lambda r: ([ops.dense((200, 70), rand8(r, (70, 40)), r.integers(-99, 99, 40).astype(np.int32),
                              **requant(r, 40))], [rand8(r, (200, 70))]), [SMALL_NU], 4),
    "max_pool 3x3/2 of 8x40x38": (lambda r: planes(r, lambda s: ops.max_pool2d(s, 3, 2, 1)),
                                  [SMALL_VU, dict(SMALL_VU, dma_channels=1)], 1),
    "avg_pool 3x3/2 no pad count of 8x40x38": (
        lambda r: planes(r, lambda s: ops.avg_pool2d(s, 3, 2, 1, False)), [dict(vbuf_bytes=4096, dma_channels=1)], 1),
    "add of 8x30x31": (lambda r: planes(r, lambda s: ops.add(s, za=3, ma=2**30, mb=2**30, shift=31), (1, 8, 30, 31)),
                       [SMALL_VU, dict(SMALL_VU, dma_channels=1)], 1),
    "conv 3x3 40->36 at 24x20 on 2 NUs + 2 VUs": (
        lambda r: conv_case(r, (1, 40, 24, 20), 36, (3, 3), padding=1), [dict(SMALL_NU, nu_count=2, vu_count=2)], 3),
}


@pytest.mark.parametrize("case", list(LOOP_CASES))
def test_every_removed_wait_is_caught_in_looped_kernels(case):
    """A wait in a loop body is removed from every iteration: still a race each time."""
    build_chain, configs, max_tilings = LOOP_CASES[case]
    chain_ops, inputs = build_chain(np.random.default_rng(sum(map(ord, case))))
    looped = 0
    for overrides in configs:
        cfg = Config(**overrides).validate()
        for s in candidates(tuple(chain_ops), cfg)[:max_tilings]:
            kernel = build(*chain_ops, config=cfg, schedule=s)
            kill_all(kernel, inputs, f"{case}: {overrides} {kernel.ir.notes[-1]}")
            looped += SUMMARY[-1][2]["in a loop"]
    assert looped, f"{case}: no wait inside a loop body"


@st.composite
def random_kernel(draw):
    """A kernel as the compiler tests draw them (random shapes, strides, padding, groups), on a random configuration."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["conv", "pool", "elementwise", "chain"]))
    if kind == "conv":
        groups, cg, og, k, stride, dil, pad, xshape = draw(drawn_kernels.conv_case())
        chain_ops, inputs = conv_case(rng, xshape, groups * og, k, bias=draw(st.booleans()), stride=stride,
                                      dilation=dil, padding=pad, groups=groups, x_zp=int(rng.integers(-128, 128)))
    elif kind == "pool":
        k, stride, pad, shape = draw(drawn_kernels.pool_case())
        mode = draw(st.sampled_from(["max", "sum", "avg", "avg_nopad"]))
        op = {"max": lambda: ops.max_pool2d(shape, k, stride, pad),
              "sum": lambda: ops.sum_pool2d(shape, k, stride, pad),
              "avg": lambda: ops.avg_pool2d(shape, k, stride, pad, True, int(rng.integers(-128, 128))),
              "avg_nopad": lambda: ops.avg_pool2d(shape, k, stride, pad, False)}[mode]()
        chain_ops, inputs = [op], [rand8(rng, shape)]
    elif kind == "elementwise":
        shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=4)))
        op = draw(st.sampled_from([lambda s: ops.add(s, za=3, ma=2**30, mb=2**29, shift=31),
                                   lambda s: ops.mul(s, multiplier=2**30, shift=38), lambda s: ops.relu(s, -2),
                                   lambda s: ops.requantize(s, in_dtype="int32", multiplier=2**30, shift=44)]))(shape)
        chain_ops = [op]
        inputs = [rand8(rng, shape) for _ in op.inputs]
        if op.inputs[0].dtype == "int32":
            inputs = [rng.integers(-2**20, 2**20, size=shape).astype(np.int32)]
    else:
        chain_ops, inputs = chain(rng, draw(st.sampled_from(["conv-conv", "conv-pool", "conv-add-conv", "pool-relu"])))
    config = draw(st.sampled_from([{}, SMALL_NU, ONE_DMA, dict(dma_channels=2, nu_rows=8),
                                   dict(nu_rows=16, nu_cols=8), dict(SMALL_NU, nu_count=2, vu_count=2),
                                   dict(nu_count=3, vu_count=2, dma_channels=2)]))
    return f"random {kind} seed {seed}", chain_ops, inputs, config


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_kernel())
def test_every_removed_wait_is_caught_in_random_kernels(case):
    label, chain_ops, inputs, config = case
    kernel = build(*chain_ops, config=Config(**config))
    kill_all(kernel, inputs, f"{label}: {config or 'default config'} {kernel.ir.notes[-1]}")


def test_a_read_before_its_load_behind_a_padding_fill_is_a_race():
    """Found by the random test: with one DMA queue the (M, S) table's load sits behind a DMA that only
    fills padding (its read side is empty); a requant that no longer waits reads the table first and
    fails on it.  The checker must look past that fill and name the race."""
    w = np.array([35, 2], np.int8).reshape(2, 1, 1, 1)
    op = ops.conv2d((1, 2, 6, 12), w, None, padding=(0, 0, 0, 1), groups=2, x_zp=89,
                    multiplier=np.array([1363423102, 1404271150]), shift=np.array([20, 20]))
    kernel = build(op, config=Config(**ONE_DMA))
    kill_all(kernel, [rand8(np.random.default_rng(0), op.x_shape)], "depthwise 1x1, one DMA queue")


DIVISOR = """
        la      r10, four
        la      r11, zero
        la      r12, big
        li      r20, 0              ; the divisor, int32, in VBUF
        li      r21, 64             ; the dividend (VBUF starts zeroed)
        li      r22, 128            ; the quotient
        li      r23, 1024
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
{body}
        halt
        .data
        .buffer four, int32, (1,)
        .word   4
        .align  64
        .buffer zero, int32, (1,)
        .word   0
        .align  64
        .buffer big, int8, (4096,)
        .space  4096
"""
DIVISOR_PROGRAMS = {
    # the divr reads the divisor while a DMA that began after the first divr zeroes it
    "clobbered": ("""
        setpi   dma.size0, 4
        dma     ch0, vbuf0[r20], ddr[r10], signal=s0
        sem.wait s0
        vu.divr vu0, r22, r21, r20
        dma     ch1, vbuf0[r20], ddr[r11]
        vu.divr vu0, r22, r21, r20""", True),
    # the divr reads the divisor before the DMA queued behind a long copy has loaded it
    "not yet loaded": ("""
        setpi   dma.size0, 4096
        dma     ch0, vbuf0[r23], ddr[r12]
        setpi   dma.size0, 4
        dma     ch0, vbuf0[r20], ddr[r10]
        vu.divr vu0, r22, r21, r20""", True),
    # the load behind the long copy needs a token, and one is already there for it
    "token already there": ("""
        setpi   dma.size0, 4096
        dma     ch0, vbuf0[r23], ddr[r12]
        sem.signal s2
        setpi   dma.size0, 4
        dma     ch0, vbuf0[r20], ddr[r10], wait=s2
        vu.divr vu0, r22, r21, r20""", True),
    # ... but the CU takes that token first: the load never runs (the run would deadlock), no race
    "token taken by the cu": ("""
        setpi   dma.size0, 4096
        dma     ch0, vbuf0[r23], ddr[r12]
        sem.signal s2
        setpi   dma.size0, 4
        dma     ch0, vbuf0[r20], ddr[r10], wait=s2
        vu.divr vu0, r22, r21, r20
        sem.wait s2""", False),
    # the same load, but ordered after the divr: a genuine division by zero, not a race
    "loaded after": ("""
        setpi   dma.size0, 4
        vu.divr vu0, r22, r21, r20, signal=s0
        dma     ch0, vbuf0[r20], ddr[r10], wait=s0""", False),
}


@pytest.mark.parametrize("name", list(DIVISOR_PROGRAMS))
def test_a_fault_caused_by_a_race_is_reported_as_the_race(name):
    """Removed waits can let a VU read a table before or while a DMA writes it: the race is the finding."""
    body, racy = DIVISOR_PROGRAMS[name]
    program = assemble(DIVISOR.format(body=body), filename="divisor.s")
    sim = Simulator(Config())
    sim.load(program)
    with pytest.raises(SimError) as plain:
        sim.run()
    assert plain.value.code == errors.DIV_BY_ZERO, str(plain.value)
    sim.load(program)
    with pytest.raises(SimError) as checked:
        sim.run(check_races=True)
    message = str(checked.value)
    if not racy:
        assert checked.value.code == errors.DIV_BY_ZERO, message
        return
    assert checked.value.code == errors.DATA_RACE, message
    assert "vu0 `vu.divr`" in message and "the run stopped with division by zero" in message


# Whole networks whose kernels hold several anchors (compiler.network.fusion): every wait of the one program.
def _network_case(make, config=None):
    import types

    import compiler
    from compiler.network.fusion import anchors

    g = make()
    lib = compiler.build(g, config=config)
    by_name = {n.name: n for n in g.nodes}
    fused = [layer["name"] for layer in lib.layers if anchors([by_name[n].op for n in layer["nodes"]]) >= 2]
    ins = [types.SimpleNamespace(name=t["buffer"]) for t in lib.meta["inputs"]]
    kernel = types.SimpleNamespace(config=lib.config, program=lib.program, ir=types.SimpleNamespace(inputs=ins))
    rng = np.random.default_rng(3)
    return kernel, [rand8(rng, t["shape"]) for t in lib.meta["inputs"]], fused


NETWORK_CASES = {
    "network: two ResNet bottlenecks, each fused with its shortcut":
        lambda: networks.bottleneck(np.random.default_rng(2), c=16, hw=5),
    "network: inverted residuals (expand, depthwise, project, add)":
        lambda: networks.inverted_residual(np.random.default_rng(4), c=8, hw=6),
    "network: conv -> max_pool -> conv -> conv": lambda: networks.stem(np.random.default_rng(6), hw=12),
}


@pytest.mark.parametrize("case", list(NETWORK_CASES))
def test_every_removed_wait_is_caught_in_fused_networks(case):
    kernel, inputs, fused = _network_case(NETWORK_CASES[case])
    assert fused, f"{case}: the cost model fused no kernel of several anchors"
    kill_all(kernel, inputs, f"{case}: fused kernels {', '.join(fused)}")


def test_every_removed_wait_is_caught_in_a_network_synchronised_through_the_cu():
    """Two NUs, two VUs and 8 semaphores: the network's queue pairs outnumber the semaphores, so sync
    sends producers past its budget through the CU (passes/sync.py); every wait is still needed."""
    few = Config(nu_count=2, vu_count=2, semaphores=8)
    # the residual network needs 12 semaphores when every pair has its own
    kernel, inputs, _ = _network_case(lambda: networks.residual_net(np.random.default_rng(11)), few)
    assert "sem.wait" in {decode(int(w))[0].mnemonic for w in kernel.program.code}
    kill_all(kernel, inputs, "network on two NUs and two VUs with 8 semaphores")


# kernels whose convs run nu.conv.rq (the NU's requantising output stage writes int8 into VBUF)
RQ_CASES = {
    "conv 1x1 40->36 on 9x7 (channels and tiles that do not divide)": (
        lambda r: conv_case(r, (1, 40, 9, 7), 36, (1, 1), x_zp=-3), [SMALL_NU, {}]),
    "conv 3x3 stride 2, no bias": (
        lambda r: conv_case(r, (2, 10, 9, 8), 33, (3, 3), bias=False, stride=2, padding=1), [SMALL_NU]),
    "fused conv+relu+residual add+clip": (fused, [SMALL_NU]),
    "chain conv->conv": (lambda r: chain(r, "conv-conv"), [{}, ONE_DMA]),
}


@pytest.mark.parametrize("case", list(RQ_CASES))
def test_every_removed_wait_is_caught_with_the_nu_output_stage(case):
    """The waits around nu.conv.rq (its table loaded into WBUF, its int8 tile read from VBUF by the store
    or the residual add, the slot it rewrites) are each needed and each caught."""
    _kill_output_stage(case, *RQ_CASES[case], "nu.conv.rq", 3)


def _kill_output_stage(case: str, build_chain, configs: list[dict], mnemonic: str, limit: int) -> list[str]:
    """Every wait removed in turn from the first `limit` candidates whose requantiser is `mnemonic`, on each
    configuration; their assembly."""
    chain_ops, inputs = build_chain(np.random.default_rng(sum(map(ord, case))))
    asms = []
    for overrides in configs:
        cfg = Config(**overrides).validate()
        found = [s for s in candidates(tuple(chain_ops), cfg)
                 if any(b.intrinsics.get("requant") == mnemonic for b in s.blocks)][:limit]
        assert found, f"{case}: no schedule uses {mnemonic}"
        for s in found:
            kernel = build(*chain_ops, config=cfg, schedule=s)
            assert mnemonic in kernel.asm
            kill_all(kernel, inputs, f"{case} ({mnemonic}): {overrides or 'default config'} {kernel.ir.notes[-1]}")
            asms.append(kernel.asm)
    return asms


# kernels whose tiles run their input blocks in chunks, the last one nu.conv.acc.rq (partial sums from ABUF)
ACC_RQ_CASES = {
    "conv 1x1 70->36 on 9x7": (lambda r: conv_case(r, (1, 70, 9, 7), 36, (1, 1), x_zp=-3), [SMALL_NU, ONE_DMA]),
    "conv 3x3 40->20, no bias": (lambda r: conv_case(r, (1, 40, 6, 5), 20, (3, 3), bias=False, padding=1), [{}]),
    "conv 1x1 70->70 on 12x11, the last tile block by block": (
        lambda r: conv_case(r, (1, 70, 12, 11), 70, (1, 1)), [{}]),
}


@pytest.mark.parametrize("case", list(ACC_RQ_CASES))
def test_every_removed_wait_is_caught_with_the_output_stage_in_chunks(case):
    """The waits around nu.conv.acc.rq (the partial sums the earlier chunks leave in ABUF, the ABUF slot
    the next tile's first chunk rewrites, the VBUF tile the store reads) are each needed and each caught."""
    asms = _kill_output_stage(case, *ACC_RQ_CASES[case], "nu.conv.acc.rq", 2)
    by_block = any(re.search(r"conv ob \d+, plus partial sums", asm) for asm in asms)
    assert by_block or "block by block" not in case


# Fused chains pipelined tile by tile (compiler.interleave): consumer tiles interleaved with the producer's.
def _interleaved(make, overrides: dict, lag: int):
    chain = make(np.random.default_rng(8))
    kernel, _ = networks.variant(chain, Config(**overrides), lag)
    return kernel, [rand8(np.random.default_rng(9), chain[0].x_shape)]


PIPELINED_CASES = {
    "interleaved conv -> conv, lag 1": (lambda r: networks.conv_conv(r, 16, 13), SMALL_NU, 1),
    "interleaved expand -> depthwise -> project, lag 3": (lambda r: networks.inverted(r, 8, 20),
                                                          SMALL_NU, 3),
    "interleaved conv -> max pool 3x3/2 (rows outermost), lag 1": (
        lambda r: networks.conv_pool(r, 8, 19, 17), networks.SMALL_VU, 1),
}


@pytest.mark.parametrize("case", list(PIPELINED_CASES))
def test_every_removed_wait_is_caught_in_interleaved_chains(case):
    kernel, inputs = _interleaved(*PIPELINED_CASES[case])
    kill_all(kernel, inputs, f"{case}: {kernel.ir.notes[-1]}")


# Halo recomputed (lowering.ring): each intermediate a ring of row bands in DM, each slot written again
# once its band is read; a wait removed anywhere (the slot's reuse included) must be caught.
def _recomputed(make, overrides: dict, depth: int, ahead: int):
    chain = make(np.random.default_rng(8))
    kernel, _ = networks.ring_variant(chain, Config(**overrides), depth, ahead)
    return kernel, [rand8(np.random.default_rng(9), chain[0].x_shape)]


RING_CASES = {
    "recomputed conv -> conv, ring 2": (lambda r: networks.conv_conv(r, 16, 13), SMALL_NU, 2, 1),
    "recomputed expand -> depthwise stride 2 -> project, ring 3": (
        lambda r: networks.inverted(r, 8, 23, stride=2), SMALL_NU, 3, 2),
}


@pytest.mark.parametrize("case", list(RING_CASES))
def test_every_removed_wait_is_caught_with_recomputed_halos(case):
    kernel, inputs = _recomputed(*RING_CASES[case])
    assert any("recomputed halo" in n for n in kernel.ir.notes), kernel.ir.notes
    kill_all(kernel, inputs, f"{case}: {kernel.ir.notes[0]}")


@pytest.mark.parametrize("overrides", [{}, SMALL_NU])
def test_every_removed_wait_is_caught_with_the_taps_folded(overrides):
    """A stem conv with its whole window gathered into the NU's rows (schedule primitive im2col): the
    window staged in DM, then one gather per tap into IBUF."""
    rng = np.random.default_rng(14)
    chain_ops, inputs = conv_case(rng, (1, 3, 13, 11), 20, (3, 3), stride=2, padding=1, x_zp=-3)
    cfg = Config(**overrides).validate()
    folded = [s for s in candidates(tuple(chain_ops), cfg) if "im2col" in str(s)]
    assert folded
    kernel = build(*chain_ops, config=cfg, schedule=folded[0])
    assert "input, taps (2, 0..2)" in kernel.asm
    kill_all(kernel, inputs, f"conv stem 3ch 3x3 stride 2, taps folded {overrides or 'default'}")


def test_every_removed_wait_is_caught_with_the_input_kept_in_dm():
    """A strided 1x1 conv whose weights stream by output blocks: the input rows cross DDR once into DM
    (conv_plan.input_in_dm) and each group of output blocks gathers its tiles from there."""
    from compiler.lowering.conv_plan import input_in_dm
    rng = np.random.default_rng(15)
    chain_ops, inputs = conv_case(rng, (1, 40, 9, 12), 100, (1, 1), stride=2, x_zp=6)
    cfg = Config(wbuf_bytes=8192, ibuf_bytes=16384).validate()
    kept = [s for s in candidates(tuple(chain_ops), cfg)
            if input_in_dm(s.blocks[0].ctx["plan"], s.blocks[0].tiling())]
    assert kept
    kernel = build(*chain_ops, config=cfg, schedule=kept[0])
    assert "_x_dm" in kernel.asm
    kill_all(kernel, inputs, "conv 1x1 stride 2 40->100, input kept in DM")


@pytest.mark.parametrize("overrides", [{}, dict(nu_count=2, vu_count=2)])
def test_every_removed_wait_is_caught_with_resident_weights_group_by_group(overrides):
    """Resident weights loaded in several DMAs (nu.NuLowering._resident_loads): each output-block
    group's NU command waits for its own group's DMA only; on two NUs, split by output blocks."""
    rng = np.random.default_rng(16)
    chain_ops, inputs = conv_case(rng, (1, 40, 7, 9), 100, (3, 3), padding=1, x_zp=-3)
    cfg = Config(**overrides).validate()
    for s in candidates(tuple(chain_ops), cfg):
        t = s.blocks[0].tiling()
        if t.resident and t.obt == 1:
            kernel = build(*chain_ops, config=cfg, schedule=s)
            if kernel.asm.count(", resident") >= 2:
                break
    else:
        pytest.fail("no candidate loads resident weights in several DMAs")
    kill_all(kernel, inputs, f"conv 3x3 40->100, resident weights group by group {overrides or 'default'}")


@pytest.mark.parametrize("shape", [(1, 160, 7, 7), (2, 5, 9, 11)])
def test_every_removed_wait_is_caught_in_elementwise_loads_over_three_channels(shape):
    """An add in two or more tiles, its loads taking DMA channels 0, 1 and 2 in turn (vu.LOAD_CHANNELS):
    a tile's b behind the previous tile's a in one queue."""
    rng = np.random.default_rng(17)
    op = ops.add(shape, za=3, ma=2**30, mb=2**30, shift=31)
    kernel = build(op)
    chans = {line.split()[1] for line in kernel.asm.splitlines() if line.strip().startswith("dma ")}
    assert {"ch0,", "ch1,", "ch2,"} <= chans, chans
    kill_all(kernel, [rand8(rng, shape), rand8(rng, shape)], f"add {shape}, loads over three channels")
