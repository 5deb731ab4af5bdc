"""The cost model (compiler.cost.schedule_cycles) against the simulator, on kernels and on bare schedules."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import nnpasm
from compiler import cost, ops
from compiler.ir import Buffer, CuWait, Dma, KernelIR, Loop, LoopRef, Ref
from compiler.build import build
from compiler.search import candidates
from compiler.passes import emit
from nnpsim.config import Config
from nnpsim.simulator import Simulator
from tests.helpers.kernels import SETTINGS, rand8, seeds


def _chain(kind: str, rng: np.random.Generator) -> list:
    """A random op (or conv + depthwise chain) of the given kind, with shapes that divide nothing."""
    c, o = int(rng.integers(1, 70)), int(rng.integers(1, 70))
    h, w = int(rng.integers(3, 24)), int(rng.integers(3, 24))
    k, s = int(rng.choice([1, 3])), int(rng.integers(1, 3))
    if kind == "conv":
        return [ops.conv2d((1, c, h, w), rand8(rng, (o, c, k, k)), rng.integers(-99, 99, o).astype(np.int32),
                           stride=s, padding=k // 2, multiplier=2**30, shift=24)]
    if kind == "depthwise":
        return [ops.conv2d((1, c, h, w), rand8(rng, (c, 1, 3, 3)), None, stride=s, padding=1, groups=c,
                           multiplier=2**30, shift=20)]
    if kind == "pool":
        return [ops.avg_pool2d((1, c, h, w), 2, count_include_pad=False)]
    if kind == "add":
        return [ops.add((1, c, h, w), ma=1, mb=1, shift=0)]
    if kind == "lut":
        return [ops.lut((1, c, h, w), rng.integers(-128, 128, 256))]
    if kind == "conv+lut":      # the lut in the conv's epilogue
        conv = ops.conv2d((1, c, h, w), rand8(rng, (o, c, k, k)), None, padding=k // 2, multiplier=2**30, shift=24)
        return [conv, ops.lut(conv.output.shape, rng.integers(-128, 128, 256))]
    if kind == "softmax":       # rows along a middle axis: vu.softmax's own timing formula
        return [ops.softmax((1, c, h, w), x_scale=0.05, y_scale=1 / 256, zp_out=-128, axis=1)]
    if kind == "dense":
        return [ops.dense((int(rng.integers(1, 20)), 4 * c), rand8(rng, (4 * c, o)), multiplier=1, shift=8)]
    expand = ops.conv2d((1, c, h, w), rand8(rng, (o, c, 1, 1)), None, multiplier=2**30, shift=24)
    return [expand, ops.conv2d((1, o, h, w), rand8(rng, (o, 1, 3, 3)), None, padding=1, groups=o,
                               multiplier=2**30, shift=20)]


@settings(max_examples=30, **SETTINGS)
@given(seeds, st.sampled_from(["conv", "depthwise", "pool", "add", "dense", "chain", "lut", "conv+lut",
                                "softmax"]), st.integers(1, 2),
       st.integers(1, 2), st.sampled_from([1, 2, 4]), st.sampled_from([1, 2, 16]), st.sampled_from([1, 32, 64]))
def test_predicted_cycles_are_the_simulators(seed, kind, nus, vus, channels, depth, burst):
    # the replay runs the engine's phases on the same timing formulas: to the cycle, whatever the
    # units, channels, queue depth and DDR burst (up to the 64 bytes every DDR buffer is aligned to)
    rng = np.random.default_rng(seed)
    cfg = Config(nu_count=nus, vu_count=vus, dma_channels=channels, queue_depth=depth, ddr_burst_bytes=burst)
    kernel = build(*_chain(kind, rng), config=cfg)
    kernel(*[rng.integers(-128, 128, b.shape).astype(b.dtype) for b in kernel.ir.inputs], check_races=False)
    assert kernel.predicted_cycles == kernel.stats.cycles


@settings(max_examples=10, **SETTINGS)
@given(seeds, st.integers(1, 2), st.sampled_from([1, 2, 4]))
def test_predicted_cycles_on_the_output_stage_over_chunks(seed, nus, channels):
    # nu.conv.acc.rq's candidates (input chunks into one ABUF slot, the last chunk requantised into VBUF,
    # the last tile stored block by block): to the cycle, on one NU or two
    rng = np.random.default_rng(seed)
    c, o, h, w = int(rng.integers(40, 140)), int(rng.integers(20, 90)), int(rng.integers(3, 16)), int(rng.integers(3, 16))
    op = ops.conv2d((1, c, h, w), rand8(rng, (o, c, 1, 1)), rng.integers(-99, 99, o).astype(np.int32),
                    multiplier=2**30, shift=24)
    cfg = Config(nu_count=nus, vu_count=nus, dma_channels=channels, wbuf_bytes=16384)
    found = [s for s in candidates((op,), cfg) if s.blocks[0].intrinsics.get("requant") == "nu.conv.acc.rq"]
    assert found
    for s in found[:2]:
        kernel = build(op, config=cfg, schedule=s)
        kernel(rand8(rng, op.x_shape), check_races=False)
        assert kernel.predicted_cycles == kernel.stats.cycles, str(s)


def _simulated(buffers: list[Buffer], body: list, cfg: Config) -> int:
    """Cycles of a bare schedule, emitted, assembled and run on the simulator."""
    text = emit.emit(KernelIR("t", buffers, body, [], buffers[0]))
    sim = Simulator(cfg)
    sim.load(nnpasm.assemble(text))
    return sim.run().cycles


TRANSFERS = st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["ddr>dm", "dm>ddr", "ddr>ddr", "dm>dm"]),
                               st.integers(1, 6000), st.integers(-1, 7)), min_size=1, max_size=8)


@settings(max_examples=40, **SETTINGS)
@given(TRANSFERS, st.sampled_from([1, 2, 16]))
def test_transfers_sharing_ports_take_the_simulators_cycles(transfers, depth):
    # DMA transfers on four channels, some waiting for an earlier one's end: they stream together
    # through DDR's one port or DM's read and write ports, or begin streaming after others have
    # ended, each at its share of its busiest port; the replay must end each where the engine does
    cfg = Config(queue_depth=depth)
    buffers, body = _transfers(transfers)
    assert cost.schedule_cycles(body, cfg) == _simulated(buffers, body, cfg)


def _transfers(transfers: list) -> tuple[list[Buffer], list]:
    """(buffers, body) of DMA transfers (channel, "src>dst", bytes, the earlier one it waits for or -1): the
    first to wait for a transfer takes its signal's token, the second its signal2's."""
    buffers, body = [], []
    for k, (chan, route, n, after) in enumerate(transfers):
        src, dst = route.split(">")
        a = Buffer(f"s{k}", src, n, dtype="int8", shape=(n,), addr=None if src == "ddr" else 16384 * k)
        b = Buffer(f"d{k}", dst, n, dtype="int8", shape=(n,), addr=None if dst == "ddr" else 16384 * k + 8192)
        buffers += [a, b]
        body.append(Dma(chan, Ref(b), Ref(a), (n,), (1,), (1,)))
        if 0 <= after < k and body[after].signal is None:
            body[after].signal = body[k].wait = after
        elif 0 <= after < k and body[after].signal2 is None:
            body[after].signal2 = body[k].wait = 8 + after
    return buffers, body


@pytest.mark.parametrize("step", [24, 56, 64])
def test_a_loops_dma_is_priced_at_each_iterations_ddr_residue(step):
    # a rolled DMA whose DDR address moves by other than a multiple of the burst touches a
    # different number of bursts at each iteration (rows of 40 bytes 100 apart); the replay must
    # count them at every iteration's address, as the engine does, not at iteration 0's
    cfg = Config()
    n = 6
    src = Buffer("src", "ddr", 100 * 8 + step * n, dtype="int8", shape=(100 * 8 + step * n,))
    dst = Buffer("dst", "dm", 40 * 8, dtype="int8", shape=(40 * 8,), addr=0)
    dma = Dma(0, Ref(dst), LoopRef(src, 0, "i0", step), (40, 8), (1, 100), (1, 40))
    body = [Loop("i0", n, [dma])]
    bursts = {cost.ddr_burst_bytes(dma, cfg, v)[0] for v in range(n)}
    assert (len(bursts) > 1) == (step % cfg.ddr_burst_bytes != 0)
    assert cost.schedule_cycles(body, cfg) == _simulated([src, dst], body, cfg)


def test_a_schedule_that_deadlocks_is_an_internal_error():
    src, dst = Buffer("x", "ddr", 64, dtype="int8", shape=(64,)), Buffer("d", "dm", 64, addr=0)
    load = Dma(0, Ref(dst), Ref(src), (64,), (1,), (1,), wait=3)      # nothing ever signals s3
    with pytest.raises(ValueError, match="deadlocks"):
        cost.schedule_cycles([load], Config())
    with pytest.raises(ValueError, match="deadlocks"):
        cost.schedule_cycles([CuWait(2)], Config())


@settings(max_examples=40, **SETTINGS)
@given(TRANSFERS, st.sampled_from([1, 2, 16]), st.sampled_from([1, 2, 8, 32]))
def test_the_floor_never_exceeds_the_replay_on_transfers(transfers, depth, ddr_rate):
    # floor_cycles bounds the replay from below whatever the waits: transfers sharing ports, one
    # waiting for another, a DDR port narrower than the channels (then its bytes bound nothing)
    cfg = Config(queue_depth=depth, ddr_bytes_per_cycle=ddr_rate)
    _, body = _transfers(transfers)
    assert 0 < cost.floor_cycles(body, cfg) <= cost.schedule_cycles(body, cfg)


@settings(max_examples=12, **SETTINGS)
@given(seeds, st.sampled_from(["conv", "depthwise", "pool", "add", "dense", "chain"]), st.integers(1, 2),
       st.sampled_from([1, 4]))
def test_the_floor_never_exceeds_the_predicted_cycles_of_a_kernel(seed, kind, nus, channels):
    # on whole kernels (NU, VU and DMA queues, several units) the bound stays under the replay, and
    # is not vacuous: a kernel's busiest unit or port takes a good part of its cycles
    rng = np.random.default_rng(seed)
    cfg = Config(nu_count=nus, vu_count=nus, dma_channels=channels)
    kernel = build(*_chain(kind, rng), config=cfg)
    floor = cost.floor_cycles(kernel.ir.body, cfg)
    assert kernel.predicted_cycles / 20 < floor <= kernel.predicted_cycles
