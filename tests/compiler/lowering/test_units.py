"""Kernels spread over several NUs and VUs (compiler.lowering.units), race-checked, against numpy."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.ir import Buffer, Dma, KernelIR, Ref
from compiler.build import build
from compiler.search import candidates
from compiler.passes import alloc
from compiler.lowering.double_buffer import Step
from compiler.lowering import driver
from compiler.lowering.units import SplitLowering, aligned, parts, share_loads, shared_capacity
from nnpsim.config import Config
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, candidate_case, conv_case, rand8, requant_params, seeds

SMALL = dict(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768, vbuf_bytes=65536, dm_bytes=65536)
MACHINES = [dict(nu_count=2, vu_count=1), dict(nu_count=2, vu_count=2), dict(nu_count=3, vu_count=2),
            dict(nu_count=4, vu_count=4, dma_channels=8)]


def busy_units(kernel, kind: str) -> int:
    """How many units of a kind ('nu', 'vu') ran at least one command."""
    return sum(1 for name, u in kernel.stats.units.items() if name.startswith(kind) and u.commands > 0)


def test_parts_deal_units_and_channels():
    cfg = Config(nu_count=3, vu_count=2)
    # four channels, NU parts: a drain queue each (2, 3, then 2 again), inputs, weights and stores shared
    assert [(p.index, p.nu, p.vu, p.channels) for p in parts("spatial", 3, cfg)] == [
        (0, 0, 0, (0, 1, 2, 1)), (1, 1, 1, (0, 1, 3, 1)), (2, 2, 0, (0, 1, 2, 1))]
    # VU parts, or channels enough for four a part: part k's roles from channel 4k, modulo the channels
    assert [p.channels for p in parts("tile", 2, Config(vu_count=2))] == [(0, 1, 2, 3)] * 2
    assert [p.channels for p in parts("channel", 2, Config(nu_count=2, dma_channels=8))] == [(0, 1, 2, 3),
                                                                                           (4, 5, 6, 7)]
    assert [p.channels for p in parts("channel", 2, Config(nu_count=2, dma_channels=3))] == [(0, 1, 2, 0),
                                                                                           (1, 2, 0, 1)]
    assert [p.channels for p in parts("channel", 2, Config(nu_count=2, dma_channels=2))] == [(0, 1, 0, 1)] * 2
    shared = shared_capacity(cfg, 3, "nu")
    assert shared.vbuf_bytes == cfg.vbuf_bytes // 2 and shared.dm_bytes == cfg.dm_bytes // 3
    assert shared_capacity(cfg, 2, "vu").vbuf_bytes == cfg.vbuf_bytes


class _Toy:
    """A lowering of n one-DMA tiles into VBUF of one unit, with a shared DDR constant."""

    def __init__(self, n: int, unit: int, ddr: Buffer):
        self.n, self.ddr = n, ddr
        self.buf = Buffer(f"v{unit}", "vbuf", 64, unit=unit)

    def n_tiles(self) -> int:
        return self.n

    def steps(self, limit=None):
        out = [Step(loads=[Dma(0, Ref(self.buf), Ref(self.ddr), (64,), (1,), (1,))]) for _ in range(self.n)]
        return out[:limit] if limit is not None else out

    def buffers(self):
        return [self.ddr, self.buf]


def test_split_lowering_merges_steps_and_shares_constants():
    ddr = Buffer("c", "ddr", 64)
    split = SplitLowering([_Toy(3, 0, ddr), _Toy(2, 1, ddr), _Toy(0, 2, ddr)])
    assert len(split.parts) == 2 and split.n_tiles() == 3            # the empty part is dropped
    steps = split.steps()
    assert [len(s.loads) for s in steps] == [2, 2, 1]
    assert [c.dst.buf.memory for c in steps[0].loads] == ["vbuf0", "vbuf1"]
    # the same DDR box in both parts' step: read from DDR once, the second part copies the first's buffer
    for s in steps[:2]:
        assert [c.src.buf.memory for c in s.loads] == ["ddr", "vbuf0"]
        assert s.loads[1].size == s.loads[0].size and s.loads[1].src_stride == s.loads[0].dst_stride
    assert len(split.steps(limit=1)) == 1
    assert split.buffers().count(ddr) == 1 and len(split.buffers()) == 3


def _load(buf: Buffer, ddr: Buffer, at: int) -> Dma:
    return Dma(0, Ref(buf), Ref(ddr, at), (8, 2), (1, 16), (1, 8), (0, 1), (0, 0), pad_value=-3)


def test_parts_meet_at_their_shared_loads():
    """A part whose next load another part makes later waits for it; the others go on."""
    ddr, a, b = Buffer("w", "ddr", 4096), Buffer("a", "wbuf", 64, unit=0), Buffer("b", "wbuf", 64, unit=1)
    x = Buffer("x", "ddr", 4096)
    # part a: weights at 0, two tiles of its own input, weights at 64; part b: weights at 0, one tile, 64
    pa = [Step(loads=[_load(a, ddr, 0)]), Step(loads=[_load(a, x, 0)]), Step(loads=[_load(a, x, 100)]),
          Step(loads=[_load(a, ddr, 64)])]
    pb = [Step(loads=[_load(b, ddr, 0)]), Step(loads=[_load(b, x, 200)]), Step(loads=[_load(b, ddr, 64)])]
    rows = aligned([pa, pb])
    assert rows == [[pa[0], pb[0]], [pa[1], pb[1]], [pa[2], None], [pa[3], pb[2]]]
    loads = share_loads(pa[3].loads + pb[2].loads)
    assert [(c.src.buf.name, c.dst.buf.name) for c in loads] == [("w", "a"), ("a", "b")]
    copy = loads[1]     # the whole destination box, padding included, without padding of its own
    assert (copy.size, copy.src_stride, copy.pad_lo, copy.pad_hi) == ((8, 2, 1, 1), (1, 8, 0, 0), (0,) * 4, (0,) * 4)
    # loads that differ in anything the destination sees are not shared
    other = Dma(0, Ref(b), Ref(ddr, 64), (8, 2), (1, 16), (1, 8), (0, 1), (0, 0), pad_value=5)
    assert [c.src.buf.name for c in share_loads(pa[3].loads + [other])] == ["w", "w"]
    # shared loads met in different orders: no part waits forever, each then loads for itself
    crossed = aligned([[Step(loads=[_load(a, ddr, 0)]), Step(loads=[_load(a, ddr, 64)])],
                       [Step(loads=[_load(b, ddr, 64)]), Step(loads=[_load(b, ddr, 0)])]])
    assert len(crossed) == 2 and all(None not in row for row in crossed)


def _ddr_bytes(steps: list[Step], name: str) -> int:
    """Bytes the steps' DMAs read from the DDR buffer `name`."""
    return sum(int(np.prod(c.inner)) * c.elem for s in steps for c in s.statements()
               if isinstance(c, Dma) and c.src.buf.name == name)


@pytest.mark.parametrize("case", ["conv-bias-residual", "grouped"])
def test_split_parts_read_shared_tensors_from_ddr_once(case):
    """Spread over two NUs, the weights (split by spatial tiles) or the input (by output channels)
    cross DDR as often as for the busiest part alone: the other part copies what it loaded."""
    cfg = Config(**SMALL, nu_count=2, vu_count=2)
    chain, _, _ = candidate_case(np.random.default_rng(17), case, 100, (3, 3), 9)
    checked = set()
    for s in candidates(tuple(chain), cfg):
        (choice,) = s.choices()
        if choice.split is None:
            continue
        found, _, _, _ = driver.sites(s.ops, cfg)
        split, _ = driver.lowering(found[0], choice, cfg)
        tensor = split.parts[0].w_ddr.name if choice.split == "spatial" else found[0].ins[0].name
        alone = _ddr_bytes(split.parts[0].steps(), tensor)
        both = split.steps()
        assert _ddr_bytes(both, tensor) == alone, str(s)
        copies = [c for st in both for c in st.loads if isinstance(c, Dma) and c.src.buf.space != "ddr"
                  and c.dst.buf.unit == 1]
        assert copies and all(c.src.buf.unit == 0 for c in copies), str(s)
        checked.add(choice.split)
    assert checked == {"spatial", "channel"}


def test_alloc_places_each_units_buffers_in_its_own_memory():
    a, b = Buffer("a", "ibuf", 1000, unit=0), Buffer("b", "ibuf", 1000, unit=1)
    y = Buffer("y", "ddr", 1000)
    body = [Dma(0, Ref(a), Ref(y), (1000,), (1,), (1,)), Dma(1, Ref(b), Ref(y), (1000,), (1,), (1,))]
    usage = alloc.allocate(KernelIR("t", [a, b, y], body, [y], y), Config(ibuf_bytes=1024))
    assert a.addr == b.addr == 0 and usage["ibuf0"] == usage["ibuf1"] == 1000


@pytest.mark.parametrize("machine", MACHINES[:3], ids=lambda m: f"nu{m['nu_count']}vu{m['vu_count']}")
@pytest.mark.parametrize("case", ["conv-bias-residual", "grouped", "dense-bias"])
def test_every_split_candidate_is_exact(machine, case):
    """Every split the compiler offers (by spatial tiles, by output channels; each tiling) is exact."""
    cfg = Config(**SMALL, **machine)
    chain, inputs, want = candidate_case(np.random.default_rng(17), case, 100, (3, 3), 9)
    kinds = set()
    for s in candidates(tuple(chain), cfg):
        (choice,) = s.choices()
        if choice.split is None:
            continue
        kinds.add(choice.split)
        kernel = build(*chain, config=cfg, schedule=s)
        np.testing.assert_array_equal(kernel(*inputs, check_races=True), want, err_msg=str(s))
        assert busy_units(kernel, "nu") > 1, str(s)
    assert kinds == ({"channel"} if case == "dense-bias" else {"spatial", "channel"})   # dense: one pixel row


@settings(max_examples=25, **SETTINGS)
@given(conv_case(), seeds, st.sampled_from(MACHINES))
def test_conv2d_on_several_units_matches_reference(case, seed, machine):
    groups, cg, og, k, stride, dil, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**16), 2**16, size=o).astype(np.int32)
    m, s = requant_params(rng, o, cg * k[0] * k[1])
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=int(rng.integers(-128, 128)),
              multiplier=m, shift=s, zp_out=int(rng.integers(-20, 20)))
    op = ops.conv2d(xshape, w, bias, **kw)
    kernel = build(op, config=Config(**SMALL, **machine))
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(kernel(x, check_races=True), ref.conv2d(x, w, bias, **kw))


@settings(max_examples=25, **SETTINGS)
@given(st.integers(1, 2), st.integers(1, 40), st.integers(3, 30), st.integers(3, 30), seeds,
       st.sampled_from(["max", "avg_nopad", "add", "requantize_pc"]), st.integers(2, 4))
def test_vu_ops_deal_tiles_over_every_vu(n, c, h, w, seed, mode, vus):
    rng = np.random.default_rng(seed)
    x = rand8(rng, (n, c, h, w))
    cfg = Config(vu_count=vus, vbuf_bytes=8192)
    if mode == "max":
        op, want, inputs = ops.max_pool2d(x.shape, 3, 2, 1), ref.max_pool2d(x, 3, 2, 1), [x]
    elif mode == "avg_nopad":
        op = ops.avg_pool2d(x.shape, (2, 3), (1, 2), (1, 1, 0, 2), count_include_pad=False)
        want, inputs = ref.avg_pool2d(x, (2, 3), (1, 2), (1, 1, 0, 2), count_include_pad=False), [x]
    elif mode == "add":
        b = rand8(rng, x.shape)
        q = dict(za=3, zb=-2, ma=2**30, mb=2**29, shift=31, zp_out=1)
        op, want, inputs = ops.add(x.shape, **q), ref.add(x, b, **q), [x, b]
    else:
        a = rng.integers(-2**20, 2**20, size=x.shape).astype(np.int32)
        m, s = rng.integers(2**30, 2**31, size=c), rng.integers(40, 46, size=c)
        op = ops.requantize(x.shape, in_dtype="int32", zx=5, multiplier=m, shift=s, zp_out=-3)
        want, inputs = ref.requantize(a, zx=5, multiplier=m, shift=s, zp_out=-3, axis=1), [a]
    kernel = build(op, config=cfg)
    np.testing.assert_array_equal(kernel(*inputs, check_races=True), want)
    # The search picks the tiling by price (a tile of more channels and fewer rows may win with a VU idle);
    # whatever it picks, its parallel loop's iterations are dealt over as many VUs as there are of them.
    block = kernel.schedule.block("L0")
    commands = sum(1 for c in kernel.ir.commands() if c.queue.startswith("vu") and c.mnemonic != "vu.divr")
    assert block.parallel or commands == 1, "several tiles on one VU"
    tiles = block.loop_extent(block.parallel[0]) if block.parallel else 1
    assert (block.parallel[1] if block.parallel else 1) == min(vus, tiles)
    assert busy_units(kernel, "vu") == min(vus, tiles)


def test_chain_on_two_nus_and_two_vus():
    rng = np.random.default_rng(23)
    cfg = Config(**SMALL, nu_count=2, vu_count=2)
    w, b = rand8(rng, (48, 20, 3, 3)), rng.integers(-500, 500, size=48).astype(np.int32)
    m, s = requant_params(rng, 48, 180)
    kw = dict(padding=1, x_zp=1, multiplier=m, shift=s)
    conv = ops.conv2d((1, 20, 17, 15), w, b, **kw)
    pool = ops.max_pool2d(conv.output.shape, 2, 2, 0)
    kernel = build(conv, ops.relu(conv.output.shape), pool, config=cfg)
    x = rand8(rng, conv.x_shape)
    want = ref.max_pool2d(ref.relu(ref.conv2d(x, w, b, **kw)), 2, 2, 0)
    np.testing.assert_array_equal(kernel(x, check_races=True), want)
    assert ".target nu.count, 2" in kernel.asm and busy_units(kernel, "nu") == 2 and busy_units(kernel, "vu") == 2


def test_a_second_nu_shortens_a_compute_bound_layer():
    """Simulated cycles (behaviour, not wall time): 64x64 3x3 at 56x56 on 1, 2 and 4 NUs.

    With byte-sized DDR bursts: under 64-byte bursts the NCHW input gather (a byte per
    channel, a burst each) makes every conv DDR bound (docs/performance.md, DDR bursts).
    """
    rng = np.random.default_rng(4)
    w = rand8(rng, (64, 64, 3, 3))
    op = ops.conv2d((1, 64, 56, 56), w, None, padding=1, multiplier=2**30, shift=24)
    x = rand8(rng, op.x_shape)
    cycles = {}
    for nus in (1, 2, 4):
        kernel = build(op, config=Config(nu_count=nus, vu_count=nus, dma_channels=8, ddr_burst_bytes=1))
        np.testing.assert_array_equal(kernel(x), op.reference(x))
        cycles[nus] = kernel.stats.cycles
        assert kernel.predicted_cycles == kernel.stats.cycles, (nus, kernel.predicted_cycles, kernel.stats.cycles)
    assert cycles[2] < 0.7 * cycles[1] and cycles[4] < 0.8 * cycles[2], cycles


@settings(max_examples=60, **SETTINGS)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=12), st.integers(2, 3), st.data())
def test_aligned_parts_meet_at_every_shared_load(master, n_parts, data):
    """Parts whose shared loads come in one order (each part a subsequence of the same loop nest,
    with loads of its own between): every step once, in order, and each shared load in one row."""
    ddr, own = Buffer("w", "ddr", 4096), Buffer("x", "ddr", 4096)
    lists = []
    for p in range(n_parts):
        buf = Buffer(f"b{p}", "wbuf", 64, unit=p)
        keep = data.draw(st.lists(st.booleans(), min_size=len(master), max_size=len(master)))
        steps = []
        for j, (k, on) in enumerate(zip(master, keep)):
            if on:
                steps.append(Step(loads=[_load(buf, ddr, 64 * j + k)]))
            for _ in range(data.draw(st.integers(0, 2))):
                steps.append(Step(loads=[_load(buf, own, 1000 * p + len(steps))]))
        lists.append(steps)
    rows = aligned(lists)
    for p, steps in enumerate(lists):
        assert [r[p] for r in rows if r[p] is not None] == steps
    holders: dict[int, set[int]] = {}
    for p, steps in enumerate(lists):
        for s in steps:
            if s.loads[0].src.buf is ddr:
                holders.setdefault(s.loads[0].src.offset, set()).add(p)
    for at, who in holders.items():
        hits = [r for r in rows if any(s is not None and s.loads[0].src.buf is ddr and s.loads[0].src.offset == at
                                       for s in r)]
        assert len(hits) == 1, (at, who)
        merged = share_loads([s.loads[0] for s in hits[0]
                              if s is not None and s.loads[0].src.buf is ddr and s.loads[0].src.offset == at])
        assert [c.src.buf.space for c in merged] == ["ddr"] + ["wbuf"] * (len(who) - 1)


@pytest.mark.parametrize("machine", MACHINES[:3], ids=lambda m: f"nu{m['nu_count']}vu{m['vu_count']}")
@pytest.mark.parametrize("case", ["conv-bias-residual", "grouped", "dense-bias"])
def test_n_tiles_counts_the_tiles(machine, case):
    """NuLowering.n_tiles, counted from the tiling, is the number of tiles its tiles() walks, for every
    candidate and every part of a split (steps() asks it which tile is the kernel's last)."""
    from compiler.lowering.nu import NuLowering
    from compiler.search import _block_lowering

    cfg = Config(**SMALL, **machine)
    chain, _, _ = candidate_case(np.random.default_rng(5), case, 100, (3, 3), 9)
    found = driver.sites(tuple(chain), cfg)[0]
    checked = 0
    for s in candidates(tuple(chain), cfg):
        low = _block_lowering(s, cfg, 0, found)
        for part in getattr(low, "parts", [low]):
            if isinstance(part, NuLowering):
                assert part.n_tiles() == sum(1 for _ in part.tiles()), (str(s), part.name)
                checked += 1
    assert checked
