"""DDR burst count (nnpsim.timing.burst_bytes) against a brute-force model that walks every byte."""
from __future__ import annotations

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnpsim.isa_layout import offset
from nnpsim.timing import burst_bytes, dma_stream_bytes
from nnpsim.units import dma_burst_bytes

DDR, DM = 0, 1


def brute_burst_bytes(addr: int, sizes, strides, elem: int, burst: int) -> int:
    """Enumerate the bytes in access order (dim 0 fastest), cut them into runs of consecutive
    addresses, and add up the aligned bursts each run touches."""
    if min(sizes) < 1:
        return 0
    idx = np.indices(tuple(sizes)[::-1]).reshape(len(sizes), -1)[::-1]   # row k: i_k, dim 0 fastest
    elements = addr + sum(idx[k] * strides[k] for k in range(len(sizes)))
    b = (elements[:, None] + np.arange(elem)[None, :]).ravel()
    cut = np.nonzero(np.diff(b) != 1)[0]
    first = np.concatenate([[0], cut + 1])
    last = np.concatenate([cut, [b.size - 1]])
    return int((b[last] // burst - b[first] // burst + 1).sum()) * burst


@st.composite
def boxes(draw, max_size=6):
    """A 4-D box: sizes (some 1), strides contiguous, reversed, zero, gapped, or anything."""
    elem = draw(st.sampled_from([1, 2, 4]))
    sizes, strides, dense = [], [], elem
    for _ in range(4):
        n = draw(st.integers(1, max_size))
        kind = draw(st.sampled_from(["dense", "dense", "reverse", "zero", "gap", "any"]))
        if kind == "dense":
            s = dense
        elif kind == "reverse":
            s = -dense
        elif kind == "zero":
            s = 0
        elif kind == "gap":
            s = dense + draw(st.integers(1, 100))
        else:
            s = draw(st.integers(-300, 300))
        sizes.append(n)
        strides.append(s)
        dense *= n
    addr = draw(st.integers(0, 10_000))
    burst = draw(st.sampled_from([1, 2, 4, 8, 16, 32, 64, 128, 256]))
    return addr, sizes, strides, elem, burst


@settings(max_examples=1500, deadline=None)
@given(boxes())
def test_burst_bytes_matches_brute_force(box):
    addr, sizes, strides, elem, burst = box
    assert burst_bytes(addr, *sizes, *strides, elem, burst) == brute_burst_bytes(addr, sizes, strides, elem, burst)


@settings(max_examples=300, deadline=None)
@given(boxes(max_size=40))
def test_burst_bytes_matches_brute_force_long_dims(box):
    # dims longer than a burst period: whole cycles of residues are counted, not walked
    addr, sizes, strides, elem, burst = box
    sizes = [sizes[0], sizes[1], 1 + sizes[2] % 4, 1 + sizes[3] % 3]
    assert burst_bytes(addr, *sizes, *strides, elem, burst) == brute_burst_bytes(addr, sizes, strides, elem, burst)


@pytest.mark.parametrize("addr, sizes, strides, elem, burst, expected", [
    (0, (640, 1, 1, 1), (1, 0, 0, 0), 1, 64, 640),            # aligned and whole bursts: its bytes
    (0, (600, 1, 1, 1), (1, 0, 0, 0), 1, 64, 640),            # the last burst partly used
    (32, (64, 1, 1, 1), (1, 0, 0, 0), 1, 64, 128),            # 64 bytes straddling two bursts
    (0, (16, 4, 1, 1), (1, 16, 0, 0), 1, 64, 64),             # rows end to end: one run
    (0, (16, 4, 1, 1), (1, 32, 0, 0), 1, 64, 4 * 64),         # a gap after each row: 4 runs
    (0, (4, 2, 2, 1), (1, 8, 12, 0), 1, 8, 24),               # runs 0-3, 8-15 (joined across dims), 20-23
    (0, (32, 1, 1, 1), (3136, 0, 0, 0), 1, 64, 32 * 64),      # a channel gather: a burst per byte
    (61, (8, 1, 1, 1), (-4, 0, 0, 0), 4, 64, 9 * 64),         # descending int32s: a run each, 61-64 in two
    (0, (10, 1, 1, 1), (0, 0, 0, 0), 1, 64, 10 * 64),         # the same byte again and again
])
def test_burst_bytes_examples(addr, sizes, strides, elem, burst, expected):
    assert burst_bytes(addr, *sizes, *strides, elem, burst) == expected
    assert brute_burst_bytes(addr, sizes, strides, elem, burst) == expected


def test_burst_bytes_cost_is_bounded():
    # 2**24 single-byte runs, and 256**3 runs of 3 bytes over three dims: counted, not walked
    n = 1 << 24
    assert burst_bytes(0, n, 1, 1, 1, 1000, 0, 0, 0, 1, 64) == n * 64
    assert burst_bytes(0, n, 1, 1, 1, 1, 0, 0, 0, 1, 64) == n
    t0 = time.perf_counter()
    for _ in range(10):
        got = burst_bytes(7, 3, 256, 256, 256, 1, 5, 4096, 1 << 20, 1, 64)
    assert time.perf_counter() - t0 < 1.0
    # runs of 3 bytes at 7 + 5a + 4096b + 2**20c: residues 7 + 5a mod 64; the run crosses a burst
    # boundary when the residue is 62 or 63
    cross = sum((7 + 5 * a) % 64 >= 62 for a in range(256))
    assert got == 64 * 256 * 256 * (256 + cross)


def dma_params(size, src_stride, dst_stride, pad_lo, pad_hi, elem):
    """The dma.* group snapshot of a descriptor."""
    p = np.zeros(32, np.int64)
    for name, v in (("size", size), ("src_stride", src_stride), ("dst_stride", dst_stride),
                    ("pad_lo", pad_lo), ("pad_hi", pad_hi)):
        for k in range(4):
            p[offset(f"dma.{name}{k}")] = v[k]
    p[offset("dma.elem")] = elem
    return p


@settings(max_examples=300, deadline=None)
@given(boxes(), boxes(), st.lists(st.integers(0, 3), min_size=8, max_size=8), st.sampled_from(
    [(DDR, DM), (DM, DDR), (DDR, DDR), (DM, DM)]))
def test_dma_sides(dst_box, src_box, pads, spaces):
    # the source side is the inner (unpadded) box, the destination side the whole box
    daddr, size, dst_stride, elem, burst = dst_box
    saddr, _, src_stride, _, _ = src_box
    pad_lo = [min(pads[k], size[k]) for k in range(4)]
    pad_hi = [min(pads[4 + k], size[k] - pad_lo[k]) for k in range(4)]
    inner = [n - a - b for n, a, b in zip(size, pad_lo, pad_hi)]
    p = dma_params(size, src_stride, dst_stride, pad_lo, pad_hi, elem)
    dspace, sspace = spaces
    src, dst = dma_burst_bytes(p, dspace, daddr, sspace, saddr, burst)
    assert src == (brute_burst_bytes(saddr, inner, src_stride, elem, burst) if sspace == DDR else 0)
    assert dst == (brute_burst_bytes(daddr, size, dst_stride, elem, burst) if dspace == DDR else 0)
    nbytes = int(np.prod(size)) * elem
    assert dma_stream_bytes(nbytes, src, dst) == max(nbytes, src, dst)
