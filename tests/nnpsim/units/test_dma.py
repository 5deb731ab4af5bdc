"""DMA kernel against the independent numpy model, byte for byte, and its error reports."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnpsim import errors
from nnpsim.units import dma_bytes, dma_copy
from tests import isa_reference as ref

CODES = {kind: getattr(errors, name) for kind, name in ref.FAULT_ERRORS.items()}
DDR, DM, IBUF0, ABUF0 = 0, 1, 8, 24


def _memories(rng: np.random.Generator, sizes: dict[int, int]) -> dict:
    return {s: rng.integers(0, 256, n, dtype=np.uint8) for s, n in sizes.items()}


def _extent(counts, strides, elem) -> tuple[int, int]:
    """Lowest and highest byte offset a box touches relative to its base address."""
    lo = sum(min(0, (n - 1) * s) for n, s in zip(counts, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(counts, strides))
    return lo, hi + elem - 1


def run(mems: dict, dspace: int, daddr: int, sspace: int, saddr: int, named: dict) -> tuple:
    """Run kernel and model on the same command; assert identical outcomes; return (rc, err)."""
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = dma_copy(flat, base, size, dspace, daddr, sspace, saddr, ref.snapshot(named, "dma"), err)
    ref_mems, fault = ref.run_reference(ref.dma, mems, dspace, daddr, sspace, saddr, named)
    ref.assert_same(rc, err, flat, before, base, ref_mems, fault, CODES)
    return rc, err


@st.composite
def dma_commands(draw):
    elem = draw(st.sampled_from([1, 2, 4]))
    sizes = [draw(st.integers(1, 5)) for _ in range(4)]
    pad_lo = [draw(st.integers(0, n)) for n in sizes]
    pad_hi = [draw(st.integers(0, n - lo)) for n, lo in zip(sizes, pad_lo)]
    # strides: dense layouts, broadcasts (0), reversals (negative) and arbitrary steps
    dense_src = np.cumprod([elem] + [n - lo - hi for n, lo, hi in zip(sizes, pad_lo, pad_hi)][:3])
    dense_dst = np.cumprod([elem] + sizes[:3])
    stride = st.one_of(st.integers(-24, 24), st.sampled_from([0, elem, -elem, 4 * elem]))
    src_strides = [int(dense_src[k]) if draw(st.booleans()) else draw(stride) for k in range(4)]
    dst_strides = [int(dense_dst[k]) if draw(st.booleans()) else draw(stride) for k in range(4)]
    spaces = st.sampled_from([DDR, DM, IBUF0, ABUF0])
    dspace = draw(spaces)
    sspace = draw(st.one_of(spaces, st.just(dspace)))   # same space: overlapping copies
    named = {f"dma.size{k}": sizes[k] for k in range(4)}
    named.update({f"dma.src_stride{k}": src_strides[k] for k in range(4)})
    named.update({f"dma.dst_stride{k}": dst_strides[k] for k in range(4)})
    named.update({f"dma.pad_lo{k}": pad_lo[k] for k in range(4)})
    named.update({f"dma.pad_hi{k}": pad_hi[k] for k in range(4)})
    named["dma.pad_value"] = draw(st.one_of(st.integers(-2**31, 2**31 - 1),
                                            st.sampled_from([-1, -128, 127, 0x1234ABCD])))
    named["dma.elem"] = elem
    mem_sizes = {s: 64 * draw(st.integers(2, 8)) for s in {dspace, sspace}}
    inner = [n - lo - hi for n, lo, hi in zip(sizes, pad_lo, pad_hi)]
    addrs = []
    for space, counts, strides in ((dspace, sizes, dst_strides), (sspace, inner, src_strides)):
        lo, hi = _extent(counts, strides, elem)
        room = mem_sizes[space] - (hi - lo + 1)
        align = 4 if space == ABUF0 else 1
        if room >= 0 and draw(st.integers(0, 9)) > 0:    # mostly in bounds
            addrs.append(-lo + align * draw(st.integers(0, room // align)))
        else:
            addrs.append(draw(st.integers(-64, mem_sizes[space] + 64)))
    return dspace, addrs[0], sspace, addrs[1], named, mem_sizes, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=400, deadline=None)
@given(dma_commands())
def test_dma_matches_reference(cmd):
    dspace, daddr, sspace, saddr, named, mem_sizes, seed = cmd
    run(_memories(np.random.default_rng(seed), mem_sizes), dspace, daddr, sspace, saddr, named)


def test_dma_overlapping_shift_is_memmove():
    """Copy 100 bytes 1 up within DM: reads the whole source before writing."""
    rng = np.random.default_rng(1)
    mems = _memories(rng, {DM: 256})
    original = mems[DM].copy()
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    p = ref.snapshot({"dma.size0": 100, "dma.src_stride0": 1, "dma.dst_stride0": 1}, "dma")
    assert dma_copy(flat, base, size, DM, 11, DM, 10, p, err) == errors.OK
    got = flat[base[DM]:base[DM] + 256]
    assert np.array_equal(got[11:111], original[10:110])
    assert np.array_equal(got[:11], original[:11]) and np.array_equal(got[111:], original[111:])


def test_dma_halo_load_with_padding():
    """A 2-D halo load: 1-pixel frame of pad_value around a 3x4 tile, elem 2."""
    rng = np.random.default_rng(2)
    mems = _memories(rng, {DDR: 256, DM: 128})
    src = mems[DDR][:64].view("<i2").reshape(4, 8)
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    named = {"dma.elem": 2, "dma.size0": 6, "dma.size1": 5, "dma.src_stride0": 2,
             "dma.src_stride1": 16, "dma.dst_stride0": 2, "dma.dst_stride1": 12,
             "dma.pad_lo0": 1, "dma.pad_hi0": 1, "dma.pad_lo1": 1, "dma.pad_hi1": 1,
             "dma.pad_value": -3}
    assert dma_copy(flat, base, size, DM, 0, DDR, 2, ref.snapshot(named, "dma"), err) == 0
    got = flat[base[DM]:base[DM] + 60].view("<i2").reshape(5, 6)
    expected = np.full((5, 6), -3, dtype=np.int16)
    expected[1:4, 1:5] = src[:3, 1:5]
    assert np.array_equal(got, expected)


def _expect(named: dict, code: int, fields: dict, dspace: int = DM, daddr: int = 0,
            sspace: int = DDR, saddr: int = 0, mem_sizes: dict | None = None) -> None:
    mems = _memories(np.random.default_rng(3), mem_sizes or {DDR: 512, DM: 256, ABUF0: 256})
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = dma_copy(flat, base, size, dspace, daddr, sspace, saddr, ref.snapshot(named, "dma"), err)
    assert rc == code and err[0] == code, (rc, err)
    for i, v in fields.items():
        assert err[i] == v, (i, err)
    assert np.array_equal(flat, before)


@pytest.mark.parametrize("named, fields", [
    ({"dma.elem": 3}, {4: 21, 5: 3}),
    ({"dma.elem": 0}, {4: 21, 5: 0}),
    ({"dma.size2": 0}, {4: 2, 5: 0}),
    ({"dma.size0": -5}, {4: 0, 5: -5}),
    ({"dma.pad_lo1": -1}, {4: 13, 5: -1}),
    ({"dma.pad_hi3": -2}, {4: 19, 5: -2}),
    ({"dma.size0": 4, "dma.pad_lo0": 3, "dma.pad_hi0": 2}, {4: 12, 5: 3, 6: 2}),
    ({"dma.src_stride2": 2**32 + 1}, {4: 6, 5: 2**32 + 1}),
    ({"dma.pad_value": -2**40}, {4: 20}),
    # 2**31 elements in each of 4 dims: the product would overflow int64
    ({f"dma.size{k}": 2**31 - 1 for k in range(4)}, {4: 0, 5: 2**31 - 1, 6: 2**24}),
    # more than 2**24 elements in one command (the copy's temporary must stay allocatable)
    ({"dma.size0": 2**12, "dma.size1": 2**12, "dma.size2": 2}, {4: 2, 5: 2, 6: 2**24}),
])
def test_dma_bad_params(named, fields):
    _expect(named, errors.BAD_PARAM, fields)


@pytest.mark.parametrize("dspace, sspace, bad", [(5, DDR, 5), (DM, 70, 70), (-1, DDR, -1),
                                                  (DM, IBUF0, IBUF0), (63, DDR, 63)])
def test_dma_no_such_memory(dspace, sspace, bad):
    _expect({}, errors.NO_SUCH_MEMORY, {1: bad}, dspace=dspace, sspace=sspace)


@pytest.mark.parametrize("named, dspace, daddr, sspace, saddr, fields", [
    ({"dma.elem": 1}, ABUF0, 0, DDR, 0, {1: ABUF0, 2: 0, 3: 3, 4: 21, 5: 1, 6: 4}),
    ({"dma.elem": 4}, ABUF0, 6, DDR, 0, {1: ABUF0, 2: 6, 4: -1, 5: 6}),
    ({"dma.elem": 4, "dma.size1": 2, "dma.dst_stride1": 6}, ABUF0, 8, DDR, 0,
     {1: ABUF0, 4: 9, 5: 6}),
    ({"dma.elem": 4, "dma.size0": 3, "dma.src_stride0": 2}, DM, 0, ABUF0, 0,
     {1: ABUF0, 4: 4, 5: 2}),
])
def test_dma_misaligned_abuf(named, dspace, daddr, sspace, saddr, fields):
    _expect(named, errors.MISALIGNED, fields, dspace, daddr, sspace, saddr)


def test_dma_abuf_stride_of_unit_dim_is_ignored():
    named = {"dma.elem": 4, "dma.size0": 2, "dma.dst_stride0": 4, "dma.src_stride0": 4,
             "dma.dst_stride3": 7}
    mems = _memories(np.random.default_rng(4), {DDR: 64, ABUF0: 64})
    assert run(mems, ABUF0, 8, DDR, 0, named)[0] == errors.OK


@pytest.mark.parametrize("named, daddr, saddr, fields", [
    ({"dma.size0": 10, "dma.dst_stride0": 1}, 250, 0, {1: DM, 2: 250, 3: 259}),
    ({"dma.size0": 10, "dma.dst_stride0": -1}, 5, 0, {1: DM, 2: -4, 3: 5}),
    ({"dma.size0": 10, "dma.src_stride0": 1}, 0, -3, {1: DDR, 2: -3, 3: 6}),
    ({"dma.size0": 2, "dma.dst_stride0": 2**31 - 1}, 0, 0, {1: DM, 2: 0, 3: 2**31 - 1}),
    ({"dma.size1": 2, "dma.src_stride1": -2**31}, 0, 100, {1: DDR, 2: 100 - 2**31, 3: 100}),
    ({}, 2**62, 0, {1: DM}),
    ({}, 0, -2**63, {1: DDR}),
    ({"dma.size0": 2**13, "dma.size1": 2**11, "dma.dst_stride0": 2**31 - 1,
      "dma.dst_stride1": 2**31 - 1}, 0, 0, {1: DM, 2: 0}),
])
def test_dma_out_of_bounds(named, daddr, saddr, fields):
    _expect(named, errors.OUT_OF_BOUNDS, fields, DM, daddr, DDR, saddr)


def test_dma_all_padding_reads_nothing():
    """A box that is all padding never reads its source, so any source address is fine."""
    named = {"dma.size0": 4, "dma.pad_lo0": 4, "dma.pad_value": 9, "dma.dst_stride0": 1}
    rc, _ = run({DDR: np.zeros(64, np.uint8), DM: np.zeros(64, np.uint8)}, DM, 8, DDR, -1000, named)
    assert rc == errors.OK


@pytest.mark.parametrize("named, expected", [
    ({}, 1),
    ({"dma.size0": 3, "dma.size1": 5, "dma.size2": 2, "dma.size3": 7, "dma.elem": 4}, 840),
    ({"dma.size0": 6, "dma.pad_lo0": 2, "dma.elem": 2}, 12),
    ({"dma.size1": 0}, 0),
    ({"dma.elem": 3}, 0),
])
def test_dma_bytes(named, expected):
    assert dma_bytes(ref.snapshot(named, "dma")) == expected
