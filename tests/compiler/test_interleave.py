"""Tile-level pipelining inside a fused kernel (compiler.interleave): interleaved chains, bit-exact and race-free."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import compiler
from compiler import interleave, kernel, ops, search
from compiler import pipeline as compile_pipeline
from compiler.ir import Note, Ref
from compiler.passes.loops import flatten
from compiler.errors import CompileError
from compiler.lowering import double_buffer, driver, ring
from compiler.lowering.double_buffer import Step, pipeline
from compiler.search import row_by_row
from compiler.schedule import Schedule
from nnpsim.config import Config
from tests.helpers.networks import SMALL_NU, SMALL_VU, conv_conv, conv_op, conv_pool, inverted, ring_variant, variant


def reference(chain, x):
    for op in chain:
        x = op.reference(x)
    return x


def _int8(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def _consumer_starts_early(steps, lag) -> bool:
    """Is some Step of the second kernel placed before the last Step of the first?"""
    merged = interleave.interleave(steps, lag)
    pos = {id(s): i for i, s in enumerate(merged)}
    return min(pos[id(s)] for s in steps[1][1:]) < pos[id(steps[0][-1])]


CASES = {
    "conv -> conv 3x3, 13x16": (lambda r: conv_conv(r, 16, 13), SMALL_NU),
    "conv -> conv 3x3, 9x12, 40 channels": (lambda r: conv_conv(r, 40, 9, out=24), dict(SMALL_NU, wbuf_bytes=65536)),
    "expand -> depthwise -> project, 20x20": (lambda r: inverted(r, 8, 20), SMALL_NU),
    "expand -> depthwise stride 2 -> project, 23x23": (lambda r: inverted(r, 8, 23, stride=2), SMALL_NU),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("lag", [1, 3])
def test_interleaved_chain_is_bit_exact_race_free_and_really_interleaved(case, lag):
    make, over = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    chain = make(rng)
    cfg = Config(**over)
    k, steps = variant(chain, cfg, lag)
    assert _consumer_starts_early(steps, lag), f"{case}: the consumer never starts before the producer ends"
    for seed in range(2):
        x = _int8(np.random.default_rng(seed), chain[0].x_shape)
        np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


@settings(max_examples=8, deadline=None)
@given(c=st.integers(3, 40), hw=st.integers(4, 15), lag=st.sampled_from([1, 2, 3, 6, 10]), seed=st.integers(0, 99),
       dw=st.booleans())
def test_random_interleaved_chains_match_numpy(c, hw, lag, seed, dw):
    rng = np.random.default_rng(seed)
    check_random_chain(inverted(rng, c, hw) if dw else conv_conv(rng, c, hw), Config(**SMALL_NU), lag, rng)


def check_random_chain(chain, cfg: Config, lag: int, rng) -> None:
    """The chain interleaved with its convs row by row equals numpy's reference on random inputs (when
    it has such a schedule and its blocks' buffers fit side by side)."""
    if row_by_row(Schedule(*chain, config=cfg), cfg) is None:      # no conv tiling fits its share
        return
    try:
        k, _ = variant(chain, cfg, lag)
    except CompileError as exc:          # the blocks' buffers must fit side by side
        assert "does not fit" in str(exc), exc
        return
    got, want = run_chain(k, chain, rng)
    np.testing.assert_array_equal(got, want)


def test_build_prices_every_variant_and_keeps_the_cheapest():
    rng = np.random.default_rng(11)
    chain = inverted(rng, 8, 10)
    k = compiler.build(*chain, config=Config(**SMALL_NU))
    note = next(n for n in k.ir.notes if n.startswith("pipelining:"))
    priced = {name: int(v.replace(",", "")) for name, v in
              (part.rsplit(" ", 1) for part in note.split("predicted cycles: ")[1].rstrip(")").split(", "))
              if v != "fit"}
    assert "one after another" in priced and len(priced) >= 2, note
    assert ("interleaved" in note.split("(")[0]) == (min(priced, key=priced.get) != "one after another"), note
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


def test_the_consumer_waits_for_the_rows_it_reads():
    """needs(): a consumer tile's gate is the last producer tile that stored rows it loads."""
    rng = np.random.default_rng(3)
    chain = conv_conv(rng, 16, 13)
    cfg = Config(**SMALL_NU)
    s = row_by_row(Schedule(*chain, config=cfg), cfg)
    _, steps = driver.lower(s, cfg)
    need = interleave.needs(steps[0], steps[1])
    assert need == sorted(need) and need[0] == -1          # the constants read nothing of the intermediate
    assert -1 < need[1] < len(steps[0]) - 1                 # the first row tile needs the first rows only
    assert need[-1] == len(steps[0]) - 1                    # the last needs the last


def test_merge_keeps_each_kernels_order_and_the_gap():
    prod = [Step() for _ in range(6)]
    cons = [Step() for _ in range(4)]
    out = interleave.merge(prod, list(range(6)), cons, [-1, 1, 3, 5], lag=1)
    pos = {id(s): i for i, s in enumerate(out)}
    assert [pos[id(s)] for s in prod] == sorted(pos[id(s)] for s in prod)
    assert [pos[id(s)] for s in cons] == sorted(pos[id(s)] for s in cons)
    for j, k in enumerate([-1, 1, 3, 5]):
        if k >= 0:
            assert pos[id(cons[j])] - pos[id(prod[k])] >= interleave.GAP
            assert pos[id(cons[j])] > pos[id(prod[min(k + 1, 5)])]


def test_a_producer_that_stores_late_keeps_its_consumer_one_place_further_back():
    """gap(): a producer whose tiles store in their late stage (issued one tile after the epilogue)
    needs GAP + 1 places before the consumer tile that loads what it stored."""
    plain = [Step(epilogue=[Note("store")]) for _ in range(6)]
    late = [Step(late=[Note("store")]) for _ in range(6)]
    assert interleave.gap(plain) == interleave.GAP and interleave.gap(late) == interleave.GAP + 1
    need = [-1, 1, 3, 5]
    for prod in (plain, late):
        cons = [Step() for _ in range(4)]
        out = interleave.merge(prod, list(range(6)), cons, need, 1, interleave.gap(prod))
        pos = {id(s): i for i, s in enumerate(out)}
        assert min(pos[id(cons[j])] - pos[id(prod[k])] for j, k in enumerate(need) if k >= 0) == interleave.gap(prod)


# ------------------------------------------------------------------ halo recomputed (lowering.ring)


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("depth, ahead", interleave.RINGS)
def test_recomputed_halo_is_bit_exact_race_free_and_really_recomputes(case, depth, ahead):
    make, over = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)) + depth)
    chain = make(rng)
    cfg = Config(**over)
    k, rk = ring_variant(chain, cfg, depth, ahead)
    for r, op, consumer in zip(rk.rings, chain, chain[1:]):
        h = op.output.shape[2]
        # a 3x3 consumer's bands overlap: those rows are computed twice; a 1x1's are the rows it reads
        assert (sum(hi - lo for lo, hi in r.bands) > h) == (consumer.weight.shape[2] > 1), (case, r.bands)
        _, c, _, w = op.output.shape
        assert r.rows == max(hi - lo for lo, hi in r.bands)
        assert [s.nbytes for s in r.slots] == [r.rows * c * w] * depth      # depth bands, not the map
        assert r.bands[0][0] == 0 and r.bands[-1][1] == h
    for seed in range(2):
        x = _int8(np.random.default_rng(seed), chain[0].x_shape)
        np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


@settings(max_examples=8, deadline=None)
@given(c=st.integers(3, 40), hw=st.integers(5, 17), ring_at=st.sampled_from(interleave.RINGS),
       seed=st.integers(0, 99), dw=st.booleans(), stride=st.sampled_from([1, 2]))
def test_random_recomputed_chains_match_numpy(c, hw, ring_at, seed, dw, stride):
    rng = np.random.default_rng(seed)
    chain = inverted(rng, c, hw, stride) if dw else conv_conv(rng, c, hw)
    cfg = Config(**SMALL_NU)
    s = row_by_row(Schedule(*chain, config=cfg), cfg)
    if s is None or ring.lower_ring(s, cfg, ring_at[0]) is None:    # no row-by-row tiling, or one band
        return
    try:
        k, _ = ring_variant(chain, cfg, *ring_at)
    except CompileError as exc:          # the blocks' buffers must fit side by side
        assert "does not fit" in str(exc), exc
        return
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


def test_a_ring_overwritten_before_it_is_read_is_refused(monkeypatch):
    """A producer more bands ahead than the ring has slots overwrites a band unread: the pipeline's tile
    order check refuses it, and check_ring does on its own."""
    rng = np.random.default_rng(5)
    chain = conv_conv(rng, 16, 13)
    cfg = Config(**SMALL_NU)
    rk = ring.lower_ring(row_by_row(Schedule(*chain, config=cfg), cfg), cfg, 2)
    interleave.ring_body(rk, 1)
    with pytest.raises(CompileError, match="before tile .* in issue order"):
        interleave.ring_body(rk, 3)
    monkeypatch.setattr(double_buffer, "check_tile_order", lambda order: None)
    with pytest.raises(CompileError, match="ring t0 band"):
        interleave.ring_body(rk, 3)


def test_bands_cover_each_consumer_tiles_window():
    """A stride-2 3x3 consumer with padding 1: band i holds input rows 2 * oh0 - 1 .. of its tile, clipped."""
    rng = np.random.default_rng(2)
    e, d, _ = inverted(rng, 8, 23, stride=2)
    p = driver.nu_lowering(driver.sites((e, d), Config())[0][1], _choice(d), Config()).p
    assert ring.bands(p, [0, 4, 8], 4) == [(0, 8), (7, 16), (15, 23)]


def _choice(op):
    from compiler.lowering.conv_plan import ConvTiling
    from compiler.lowering.nu import plan
    from compiler.lowering.layout import conv_view
    cfg = Config()
    return driver.NuChoice(plan(conv_view(op), cfg), ConvTiling(4, 4, 1, 1, resident=True))


def test_build_keeps_the_cheapest_variant_recompute_included(monkeypatch):
    """Every variant replayed (RING_BOUND off): the cheapest wins and the note says so.  By default a
    ring whose lower bound reaches the best kept price is not replayed, its bound listed instead; with
    RINGS_ALWAYS off an intermediate that fits DM is kept without pricing rings."""
    rng = np.random.default_rng(11)
    chain = conv_conv(rng, 16, 13)
    cfg = Config(**SMALL_NU)
    monkeypatch.setattr(interleave, "RING_BOUND", False)
    k = compiler.build(*chain, config=cfg)
    choice = k.ir.pipelining
    rings = {interleave.ring_name(*r) for r in interleave.RINGS}
    assert rings <= set(choice.priced), choice.priced
    fits = {n: v for n, v in choice.priced.items() if v is not None}
    assert choice.name == min(fits, key=fits.get) and choice.cycles == fits[choice.name], choice.priced
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))

    monkeypatch.setattr(interleave, "RING_BOUND", True)
    bounded = compiler.build(*chain, config=cfg).ir.pipelining
    kept = {n: v for n, v in choice.priced.items() if n not in rings}
    assert {n: v for n, v in bounded.priced.items() if not n.startswith("recompute")} == kept
    best_kept = min(v for v in kept.values() if v is not None)
    for depth, ahead in interleave.RINGS:
        floor = bounded.priced.get(interleave.bound_name(depth, ahead))
        if floor is None:       # replayed: the same price as above
            assert bounded.priced[interleave.ring_name(depth, ahead)] == choice.priced[interleave.ring_name(depth, ahead)]
        else:                   # skipped: its bound reaches the kept price and lies under its real price
            real = choice.priced[interleave.ring_name(depth, ahead)]      # None: its buffers do not fit
            assert best_kept <= floor and (real is None or floor <= real), (bounded.priced, real)
    assert any(n.startswith("recompute") for n in bounded.priced), bounded.priced

    monkeypatch.setattr(interleave, "RINGS_ALWAYS", False)
    plain = compiler.build(*chain, config=cfg).ir.pipelining
    assert plain.priced == kept


@pytest.mark.parametrize("case", list(CASES))
def test_ring_floor_is_a_lower_bound(case):
    """ring_floor, on which choose skips replaying a ring, never exceeds a recomputing body's price nor
    its simulated cycles."""
    make, over = CASES[case]
    rng = np.random.default_rng(sum(map(ord, case)))
    chain = make(rng)
    cfg = Config(**over)
    for depth, ahead in interleave.RINGS:
        k, rk = ring_variant(chain, cfg, depth, ahead)
        floor = interleave.ring_floor(rk.kir.body, cfg)
        x = _int8(rng, chain[0].x_shape)
        np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))
        assert 0 < floor <= k.predicted_cycles and floor <= k.stats.cycles, (case, depth, floor,
                                                                             k.predicted_cycles, k.stats.cycles)


def test_an_intermediate_too_big_for_dm_lives_in_a_ring_not_in_ddr():
    """Kept, the intermediate (32 x 40 x 43 = 55,040 bytes) would go to a DDR scratch buffer (it does
    not fit half of a 64 KiB DM); a ring of bands fits, so it is chosen even if dearer."""
    rng = np.random.default_rng(4)
    chain = conv_conv(rng, 16, 40)
    cfg = Config(**SMALL_NU, dm_bytes=65536)
    k = compiler.build(*chain, config=cfg)
    assert k.ir.pipelining.ring is not None, k.ir.notes
    # a network links a kernel's I/O by these objects: they must be the ones its commands use
    used = {id(r.buf) for stmt in flatten(k.ir.body) for r in vars(stmt).values() if isinstance(r, Ref)}
    assert all(id(b) in used for b in k.ir.inputs + [k.ir.output])
    assert not [b for b in k.ir.buffers if b.name.startswith("t0") and b.space == "ddr"]
    assert any("recomputed halo: a ring of" in n for n in k.ir.notes), k.ir.notes
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


@pytest.mark.parametrize("make", [lambda r: conv_conv(r, 64, 25, out=64), lambda r: inverted(r, 16, 47, stride=2)],
                         ids=["conv -> conv, 64 channels", "inverted residual, stride 2"])
def test_recompute_from_the_searchs_own_schedules_is_bit_exact(make):
    """lower_ring on every candidate schedule, not only row-by-row ones: tilings that stream weights one
    output block at a time are made row after row (ring.row_after_row), nu.conv.rq keeping one chunk."""
    rng = np.random.default_rng(6)
    chain = make(rng)
    cfg = Config()
    built = 0
    for s in search.candidates(chain, cfg):
        rk = ring.lower_ring(s, cfg, 2)
        if rk is None:
            continue
        rk.kir.body = interleave.ring_body(rk, 1)
        predicted, usage, report = compile_pipeline.schedule(rk.kir, cfg)
        k = kernel.finish(tuple(chain), rk.kir, cfg, predicted, usage, report)
        x = _int8(rng, chain[0].x_shape)
        np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))
        built += 1
    assert built, "no candidate schedule could recompute its halos"


def conv_mul(rng, c, h, w):
    """3x3 conv + relu into a mul whose other operand comes from DDR, then a relu (an add right after a
    conv is the conv's own residual add: lowering.driver folds it into the NU kernel)."""
    a = conv_op(rng, (1, c, h, w), c + 2, relu=True)
    e = ops.mul(a.output.shape, za=int(rng.integers(-3, 4)), zb=int(rng.integers(-3, 4)), multiplier=1 << 20,
                shift=27, zp_out=2)
    return a, e, ops.relu(e.output.shape, -1)


def run_chain(k, chain, rng):
    """The kernel's output and the reference's on random int8 inputs (every kernel input)."""
    xs = [_int8(rng, b.shape) for b in k.ir.inputs]
    want, extra = xs[0], list(xs[1:])
    for op in chain:
        want = op.reference(want, extra.pop(0)) if getattr(op, "binary", False) else op.reference(want)
    return k(*xs, check_races=True), want


VU_CASES = {
    "conv -> max pool 3x3/2 pad 1, 19x17": lambda r: conv_pool(r, 8, 19, 17),
    "conv -> avg pool 3x3/2 pad 1 (pads not counted), 13x22": lambda r: conv_pool(r, 6, 13, 22, "avg"),
    "conv -> avg pool 2x2/1 pad 1 (pads counted), 11x9": lambda r: conv_pool(r, 5, 11, 9, "avg_pads", 2, 1),
    "conv -> sum pool 3x3/1, 14x10": lambda r: conv_pool(r, 7, 14, 10, "sum", 3, 1, 0),
    "conv -> mul (DDR operand) -> relu, 17x13": lambda r: conv_mul(r, 9, 17, 13),
}


@pytest.mark.parametrize("case", list(VU_CASES))
@pytest.mark.parametrize("lag", [1, 3])
def test_conv_into_a_vu_consumer_interleaves_bit_exact_and_race_free(case, lag):
    rng = np.random.default_rng(sum(map(ord, case)))
    chain = VU_CASES[case](rng)
    k, steps = variant(chain, Config(**SMALL_VU), lag)
    assert "row by row" in k.ir.notes[0] and any("rows outermost" in n for n in k.ir.notes), k.ir.notes
    assert _consumer_starts_early(steps, lag), f"{case}: the consumer never starts before the producer ends"
    for _ in range(2):
        got, want = run_chain(k, chain, rng)
        np.testing.assert_array_equal(got, want)


@settings(max_examples=10, deadline=None)
@given(c=st.integers(1, 24), h=st.integers(3, 21), w=st.integers(3, 21), lag=st.sampled_from([1, 2, 3]),
       kind=st.sampled_from(["max", "avg", "avg_pads", "sum", "mul"]), k=st.integers(1, 3),
       stride=st.integers(1, 2), seed=st.integers(0, 99))
def test_random_conv_into_vu_chains_match_numpy(c, h, w, lag, kind, k, stride, seed):
    rng = np.random.default_rng(seed)
    if kind == "mul":
        chain = conv_mul(rng, c, h, w)
    else:
        chain = conv_pool(rng, c, h, w, kind, k, stride, int(rng.integers(0, k // 2 + 1)))
    check_random_chain(chain, Config(**SMALL_VU), lag, rng)


def test_a_pool_row_tile_waits_for_the_rows_of_its_window():
    """needs() of a rows-outermost pool: each row tile's last producer tile is the one that stores the last
    input row its windows read (halo included), and check_order rejects the pool placed before the conv."""
    rng = np.random.default_rng(5)
    chain = conv_pool(rng, 8, 19, 17)
    cfg = Config(**SMALL_VU)
    _, steps = driver.lower(row_by_row(Schedule(*chain, config=cfg), cfg), cfg)
    conv_rows = [[int(n.text.split(" oh ")[1].split("..")[1].split()[0]) for n in step.loads
                  if hasattr(n, "text") and " oh " in n.text] for step in steps[0]]
    pool = chain[1]
    need = interleave.needs(steps[0], steps[1])
    assert need == sorted(need) and -1 < need[0] < len(steps[0]) - 1 and need[-1] == len(steps[0]) - 1
    for step, k in zip(steps[1], need):
        oh1 = int(next(n.text for n in step.loads if hasattr(n, "text")).split(" oh ")[1].split("..")[1].split(":")[0])
        last_row = min(pool.x_shape[2] - 1, oh1 * pool.stride[0] - pool.padding[0] + pool.kernel[0] - 1)
        stored = max(r for rows in conv_rows[:k + 1] for r in rows)
        assert stored >= last_row, (k, stored, last_row)                  # every row it reads is stored
        assert k == 0 or max(conv_rows[k - 1] or [-1]) < last_row           # and it waits for no more
    with pytest.raises(CompileError, match="before it is written"):
        interleave.check_order(steps, pipeline(steps[1] + steps[0]))


@pytest.mark.parametrize("x_layout,y_layout", [("nhwc", "nhwc"), ("nhwc", "nchw"), ("nchw", "nhwc")])
def test_a_rows_outermost_consumer_reads_and_writes_ddr_in_any_layout(x_layout, y_layout):
    """The intermediate stays row by row in DM whatever the DDR layouts; the mul's DDR operand and the
    outputs take their own strides."""
    rng = np.random.default_rng(len(x_layout + y_layout))
    cfg = Config(**SMALL_VU)
    a, e, r = conv_mul(rng, 6, 11, 9)
    mul = (replace(a, y_layout=x_layout), replace(e, x_layout=x_layout, y_layout=y_layout),
           replace(r, x_layout=y_layout, y_layout=y_layout))
    a, p = conv_pool(rng, 6, 11, 9)
    pool = (replace(a, y_layout=x_layout), replace(p, x_layout=x_layout, y_layout=y_layout))
    for chain in (mul, pool):
        k, steps = variant(chain, cfg, 1)
        assert _consumer_starts_early(steps, 1)
        got, want = run_chain(k, chain, rng)
        np.testing.assert_array_equal(got, want)


def test_a_consumer_that_gathers_its_windows_takes_no_ring():
    """A conv after the first whose window is gathered into IBUF rows (im2col) plans a 1 x 1 kernel, so
    bands cut from that plan would miss its halo rows (a network's fused pair came out wrong, race-free,
    at 28x28): ring_able refuses it, and the chain built with it stays bit-exact."""
    rng = np.random.default_rng(7)
    chain = conv_conv(rng, 8, 14)           # 8 -> 16 -> 8: the second conv's 16 channels gather their taps
    cfg = Config(**SMALL_NU)
    s = next(c for c in search.candidates(tuple(chain), cfg) if c.choices()[1].plan.view.taps is not None)
    assert ring.ring_able(s.ops, s.choices()) == "a conv after the first gathers its windows (im2col)"
    assert ring.lower_ring(s, cfg, 2) is None
    kir, steps = driver.lower(s, cfg)
    kir.body = interleave.body(steps, None)
    predicted, usage, report = compile_pipeline.schedule(kir, cfg)
    k = kernel.finish(tuple(chain), kir, cfg, predicted, usage, report)
    x = _int8(rng, chain[0].x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), reference(chain, x))


@pytest.mark.parametrize("seed", [0, 1])
def test_one_drained_kernel_takes_its_late_stage_or_not_whichever_is_cheaper(seed):
    """single(): a kernel with late stages gets the body with them or with each folded into its epilogue,
    whichever the cost model prices lower; it equals numpy's reference either way, race-free."""
    rng = np.random.default_rng(seed)
    _, dw, _ = inverted(rng, 8 + 8 * seed, 15 + seed)
    cfg = Config()
    kir, steps = driver.lower(search.candidates((dw,), cfg)[0], cfg)
    assert any(st.late for st in steps[0])
    folded = [[replace(st, epilogue=st.epilogue + st.late, late=[]) for st in steps[0]]]
    prices = []
    for variant_steps in (steps, folded):
        kir.body = interleave.body(variant_steps, None)
        prices.append(compile_pipeline.price(kir, cfg))
    kir.body = interleave.single(kir, steps, cfg, compile_pipeline.price)
    predicted, usage, report = compile_pipeline.schedule(kir, cfg, reroll=False)
    assert predicted == min(prices)
    k = kernel.finish((dw,), kir, cfg, predicted, usage, report)
    x = _int8(rng, dw.x_shape)
    np.testing.assert_array_equal(k(x, check_races=True), dw.reference(x))
    assert k.stats.cycles == predicted


def gate_mul_conv(rng, c, h, w, out, fmt):
    """A squeeze-excite multiply (x by a per-channel gate from DDR, integer or QLinearMul's float form) into a
    1x1 or 3x3 conv: the mul walks rows outermost and keeps x * gate row by row in DM (lowering.driver)."""
    kw = (dict(multiplier=1 << 22, shift=29) if fmt == "integer" else
          dict(scale_a=0.05, scale_b=1 / 256, scale_out=0.03))
    e = ops.mul((1, c, h, w), za=int(rng.integers(-3, 4)), zb=-128, zp_out=2, b_shape=(1, c, 1, 1), **kw)
    return e, conv_op(rng, (1, c, h, w), out, k=int(rng.choice([1, 3])))


@settings(max_examples=4, deadline=None)
@given(c=st.integers(2, 24), h=st.integers(3, 19), w=st.integers(3, 21), out=st.integers(1, 26),
       lag=st.sampled_from([1, 2, 3]), fmt=st.sampled_from(["integer", "float"]), seed=st.integers(0, 99))
def test_a_gate_mul_into_a_conv_interleaves_row_by_row_and_matches_numpy(c, h, w, out, lag, fmt, seed):
    """Bit-exact and race-free, the cost model's price the simulated cycles."""
    rng = np.random.default_rng(seed)
    chain = gate_mul_conv(rng, c, h, w, out, fmt)
    k, steps = variant(chain, Config(**SMALL_VU), lag)
    assert "row by row" in k.ir.notes[0] and any("rows outermost" in n for n in k.ir.notes), k.ir.notes
    got, want = run_chain(k, chain, rng)
    np.testing.assert_array_equal(got, want)
    assert k.predicted_cycles == k.stats.cycles


def test_a_gate_mul_s_consumer_starts_on_its_first_rows():
    """The conv's first tiles are placed before the mul's last: they read the rows of x * gate it has stored."""
    rng = np.random.default_rng(11)
    chain = gate_mul_conv(rng, 24, 17, 13, 20, "float")
    k, steps = variant(chain, Config(**SMALL_VU), 1)
    assert _consumer_starts_early(steps, 1)
    got, want = run_chain(k, chain, rng)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("c, h, w, out", [(11, 2, 1, 33), (5, 1, 7, 3)])
def test_a_gate_mul_into_a_conv_on_one_column_or_one_row_builds_bit_exact(c, h, w, out):
    """Shapes with no row-by-row candidate (one column) or no rows to walk (one row): the search's own
    schedule, still bit-exact and priced exactly."""
    rng = np.random.default_rng(c + h + w)
    chain = gate_mul_conv(rng, c, h, w, out, "integer")
    k = compiler.build(*chain)
    got, want = run_chain(k, chain, rng)
    np.testing.assert_array_equal(got, want)
    assert k.predicted_cycles == k.stats.cycles
