"""NU kernel (nu.conv, nu.conv.acc, nu.dwconv, nu.conv.rq, nu.conv.acc.rq) against the independent numpy model, and its error reports."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnpsim import errors
from nnpsim.units import nu_conv, nu_conv_rq, nu_dw_macs, nu_dwconv, nu_macs
from tests import isa_reference as ref

CODES = {kind: getattr(errors, name) for kind, name in ref.FAULT_ERRORS.items()}
NAMES = ["in_h", "in_w", "in_cb", "out_h", "out_w", "out_cb", "k_h", "k_w",
         "stride_h", "stride_w", "dil_h", "dil_w", "x_zp"]


def _memories(seed: int, unit: int, sizes=(1024, 2048, 1024)) -> dict:
    rng = np.random.default_rng(seed)
    return {8 + unit: rng.integers(0, 256, sizes[0], dtype=np.uint8),
            16 + unit: rng.integers(0, 256, sizes[1], dtype=np.uint8),
            24 + unit: rng.integers(0, 256, sizes[2], dtype=np.uint8)}


def run(mems: dict, unit: int, racc: int, rin: int, rw: int, named: dict, accumulate: bool,
        rows: int, cols: int) -> tuple:
    """Run kernel and model on the same command; assert identical outcomes; return (rc, err)."""
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = nu_conv(flat, base, size, unit, racc, rin, rw, ref.snapshot(named, "nu"), accumulate,
                 rows, cols, err)
    ref_mems, fault = ref.run_reference(ref.nu_conv, mems, unit, racc, rin, rw, named,
                                        accumulate, rows, cols)
    ref.assert_same(rc, err, flat, before, base, ref_mems, fault, CODES)
    return rc, err


def _draw_input_size(draw, q: dict) -> None:
    """Input height and width that the window just covers (sometimes one short: a bad command), and x_zp."""
    for d in "hw":
        need = (q[f"out_{d}"] - 1) * q[f"stride_{d}"] + (q[f"k_{d}"] - 1) * q[f"dil_{d}"] + 1
        q[f"in_{d}"] = need + draw(st.integers(-1 if draw(st.integers(0, 19)) == 0 else 0, 2))
    q["x_zp"] = draw(st.one_of(st.integers(-128, 127), st.sampled_from([-128, 127, 0])))


def _draw_places(draw, spans: tuple[int, int, int], aligns: tuple[int, int, int]):
    """IBUF, WBUF, ABUF sizes with room for the operands' spans, and the operands' aligned addresses
    (sometimes one misplaced)."""
    sizes = tuple(64 * (n // 64 + draw(st.integers(1, 3))) for n in spans)
    places = [a * draw(st.integers(0, (size - n) // a)) for size, n, a in zip(sizes, spans, aligns)]
    if draw(st.integers(0, 9)) == 0:
        which = draw(st.integers(0, 2))
        places[which] += draw(st.sampled_from([1, 2, 4, 64, -4, -64, 4096]))
    return sizes, places


@st.composite
def nu_commands(draw):
    rows = draw(st.sampled_from([1, 2, 3, 4, 8, 32]))
    cols = draw(st.sampled_from([1, 2, 5, 8, 32]))
    q = {n: draw(st.integers(1, 3)) for n in ["in_cb", "out_cb", "k_h", "k_w",
                                               "stride_h", "stride_w"]}
    q.update({n: draw(st.integers(1, 2)) for n in ["dil_h", "dil_w"]})
    q.update({n: draw(st.integers(1, 4)) for n in ["out_h", "out_w"]})
    _draw_input_size(draw, q)
    in_bytes = q["in_cb"] * q["in_h"] * q["in_w"] * rows
    w_bytes = q["out_cb"] * q["in_cb"] * q["k_h"] * q["k_w"] * rows * cols
    acc_bytes = q["out_cb"] * q["out_h"] * q["out_w"] * cols * 4
    sizes, (rin, rw, racc) = _draw_places(draw, (in_bytes, w_bytes, acc_bytes), (rows, rows, 4))
    named = {f"nu.{n}": v for n, v in q.items()}
    return (draw(st.integers(0, 3)), racc, rin, rw, named, draw(st.booleans()), rows, cols,
            sizes, draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=250, deadline=None)
@given(nu_commands())
def test_nu_matches_reference(cmd):
    unit, racc, rin, rw, named, accumulate, rows, cols, sizes, seed = cmd
    run(_memories(seed, unit, sizes), unit, racc, rin, rw, named, accumulate, rows, cols)


def _full_array_case(x_byte: int, w_byte: int, acc_byte: int, x_zp: int, accumulate: bool):
    """A 32x32-array tile with constant contents (extremes) and 3x3 window, stride 2, dilation 1."""
    named = {"nu.in_h": 7, "nu.in_w": 9, "nu.in_cb": 2, "nu.out_h": 3, "nu.out_w": 4,
             "nu.out_cb": 2, "nu.k_h": 3, "nu.k_w": 3, "nu.stride_h": 2, "nu.stride_w": 2,
             "nu.x_zp": x_zp}
    mems = {8: np.full(2 * 7 * 9 * 32, x_byte, np.uint8),
            16: np.full(2 * 2 * 9 * 32 * 32, w_byte, np.uint8),
            24: np.full(2 * 12 * 32 * 4, acc_byte, np.uint8)}
    return run(mems, 0, 0, 0, 0, named, accumulate, 32, 32)


@pytest.mark.parametrize("x_byte, w_byte, acc_byte, x_zp, accumulate", [
    (0x80, 0x80, 0x00, 127, False),   # (-128 - 127) * -128 summed: the largest magnitude
    (0x7F, 0x80, 0x00, -128, False),
    (0x7F, 0x7F, 0x7F, -128, True),   # accumulate onto 0x7F7F7F7F: wraps past 2**31
    (0x80, 0x7F, 0x80, 127, True),    # onto 0x80808080 (negative), wraps below -2**31
])
def test_nu_extremes_full_array(x_byte, w_byte, acc_byte, x_zp, accumulate):
    rc, _ = _full_array_case(x_byte, w_byte, acc_byte, x_zp, accumulate)
    assert rc == errors.OK


def test_nu_single_product_wraps_past_int32():
    """One pixel whose 67,584-term sum of (-255) * (-128) exceeds 2**31: the kernel wraps like the model."""
    named = {"nu.in_h": 33, "nu.in_w": 32, "nu.in_cb": 2, "nu.out_h": 1, "nu.out_w": 1,
             "nu.out_cb": 1, "nu.k_h": 33, "nu.k_w": 32, "nu.x_zp": 127}
    mems = {8: np.full(2 * 33 * 32 * 32, 0x80, np.uint8),
            16: np.full(2 * 33 * 32 * 32 * 32, 0x80, np.uint8),
            24: np.zeros(32 * 4, np.uint8)}
    assert run(mems, 0, 0, 0, 0, named, False, 32, 32)[0] == errors.OK
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    assert nu_conv(flat, base, size, 0, 0, 0, 0, ref.snapshot(named, "nu"), False, 32, 32, err) == errors.OK
    total = 2 * 33 * 32 * 32 * 255 * 128
    assert total > 2**31
    wrapped = (total + 2**31) % 2**32 - 2**31
    assert (flat[base[24]:base[24] + 128].view("<i4") == wrapped).all()


def test_nu_known_value():
    """One pixel, one channel: (5 - 2) * -3 + 7 (accumulated) = -2, hand computed."""
    mems = {8: np.zeros(64, np.uint8), 16: np.zeros(64, np.uint8), 24: np.zeros(64, np.uint8)}
    mems[8][0] = 5
    mems[16][0] = np.uint8(256 - 3)
    mems[24][:4] = np.array([7, 0, 0, 0], np.uint8)
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    p = ref.snapshot({"nu.x_zp": 2}, "nu")
    assert nu_conv(flat, base, size, 0, 0, 0, 0, p, True, 1, 1, err) == errors.OK
    assert flat[base[24]:base[24] + 4].view("<i4")[0] == -2


def _expect(named: dict, code: int, fields: dict, unit: int = 0, racc: int = 0, rin: int = 0,
            rw: int = 0, rows: int = 4, cols: int = 4, mems: dict | None = None) -> None:
    mems = mems if mems is not None else _memories(5, 0)
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = nu_conv(flat, base, size, unit, racc, rin, rw, ref.snapshot(named, "nu"), False,
                 rows, cols, err)
    assert rc == code and err[0] == code, (rc, err)
    for i, v in fields.items():
        assert err[i] == v, (i, err)
    assert np.array_equal(flat, before)


@pytest.mark.parametrize("name", NAMES[:-1])
@pytest.mark.parametrize("value", [0, -1])
def test_nu_counts_must_be_positive(name, value):
    _expect({f"nu.{name}": value}, errors.BAD_PARAM, {4: 32 + NAMES.index(name), 5: value})


@pytest.mark.parametrize("named, fields", [
    ({"nu.x_zp": 128}, {4: 44, 5: 128}),
    ({"nu.x_zp": -129}, {4: 44, 5: -129}),
    ({"nu.in_h": 3, "nu.out_h": 2, "nu.k_h": 2, "nu.stride_h": 2}, {4: 32, 5: 3, 6: 4}),
    ({"nu.in_w": 6, "nu.in_h": 6, "nu.k_w": 3, "nu.k_h": 3, "nu.dil_w": 3}, {4: 33, 5: 6, 6: 7}),
    ({"nu.in_h": 2**31 - 1, "nu.out_h": 2**31 - 1, "nu.stride_h": 2**31 - 1}, {4: 32}),
    ({"nu.in_cb": 2**33}, {4: 34, 5: 2**33}),
])
def test_nu_bad_params(named, fields):
    _expect(named, errors.BAD_PARAM, fields)


@pytest.mark.parametrize("rows, cols", [(0, 4), (4, 0), (-1, 4)])
def test_nu_array_size_must_be_positive(rows, cols):
    _expect({}, errors.BAD_PARAM, {4: -1, 5: min(rows, cols)}, rows=rows, cols=cols)


def test_nu_unit_and_memories():
    _expect({}, errors.ILLEGAL_INSTRUCTION, {5: 8}, unit=8)
    _expect({}, errors.ILLEGAL_INSTRUCTION, {5: -1}, unit=-1)
    _expect({}, errors.NO_SUCH_MEMORY, {1: 25}, unit=1)
    mems = _memories(5, 0)
    del mems[16]
    _expect({}, errors.NO_SUCH_MEMORY, {1: 16}, mems=mems)


@pytest.mark.parametrize("racc, rin, rw, fields", [
    (2, 0, 0, {1: 24, 2: 2, 3: 5}),
    (0, 6, 0, {1: 8, 2: 6, 3: 9, 6: 4}),
    (0, 0, 3, {1: 16, 2: 3, 3: 6, 6: 4}),
])
def test_nu_misaligned(racc, rin, rw, fields):
    _expect({}, errors.MISALIGNED, fields, racc=racc, rin=rin, rw=rw)


@pytest.mark.parametrize("named, racc, rin, rw, fields", [
    ({"nu.out_cb": 8, "nu.out_w": 9, "nu.in_w": 9}, 0, 0, 0, {1: 24, 2: 0, 3: 8 * 9 * 16 - 1}),
    ({}, 1024, 0, 0, {1: 24, 2: 1024, 3: 1039}),
    ({}, -4, 0, 0, {1: 24, 2: -4, 3: 11}),
    ({"nu.in_h": 300}, 0, 0, 0, {1: 8, 2: 0, 3: 1199}),
    ({}, 0, 1024, 0, {1: 8, 2: 1024, 3: 1027}),
    ({"nu.k_w": 9, "nu.in_w": 9, "nu.in_cb": 4, "nu.out_cb": 4}, 0, 0, 0, {1: 16, 2: 0, 3: 2303}),
    ({}, 0, 0, 2**40, {1: 16, 2: 2**40}),
    ({"nu.in_cb": 2**31 - 1, "nu.in_h": 2**31 - 1, "nu.in_w": 2**31 - 1}, 0, 0, 0, {1: 8, 2: 0}),
])
def test_nu_out_of_bounds(named, racc, rin, rw, fields):
    _expect(named, errors.OUT_OF_BOUNDS, fields, racc=racc, rin=rin, rw=rw)


@pytest.mark.parametrize("named, rows, cols, expected", [
    ({}, 32, 32, 1024),
    ({"nu.out_cb": 2, "nu.in_cb": 3, "nu.k_h": 3, "nu.k_w": 3, "nu.out_h": 5, "nu.out_w": 7},
     32, 32, 2 * 3 * 9 * 35 * 1024),
    ({"nu.out_h": 4}, 8, 2, 64),
])
def test_nu_macs(named, rows, cols, expected):
    assert nu_macs(ref.snapshot(named, "nu"), rows, cols) == expected


# --------------------------------------------------------------------------- nu.dwconv

def run_dw(mems: dict, unit: int, racc: int, rin: int, rw: int, named: dict, accumulate: bool,
           rows: int, cols: int) -> tuple:
    """nu.dwconv(.acc): kernel and model on the same command, identical outcomes; (rc, err)."""
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = nu_dwconv(flat, base, size, unit, racc, rin, rw, ref.snapshot(named, "nu"), accumulate,
                   rows, cols, err)
    ref_mems, fault = ref.run_reference(ref.nu_dwconv, mems, unit, racc, rin, rw, named,
                                        accumulate, rows, cols)
    ref.assert_same(rc, err, flat, before, base, ref_mems, fault, CODES)
    return rc, err


@st.composite
def dw_commands(draw):
    rows = draw(st.sampled_from([1, 3, 4, 8, 32]))
    cols = draw(st.sampled_from([1, 2, 3, 4, 8, 32]))      # more columns than rows: refused
    q = {n: draw(st.integers(1, 3)) for n in ["in_cb", "k_h", "k_w", "stride_h", "stride_w"]}
    q.update({n: draw(st.integers(1, 2)) for n in ["dil_h", "dil_w"]})
    q.update({n: draw(st.integers(1, 5)) for n in ["out_h", "out_w"]})
    q["out_cb"] = draw(st.integers(1, 3))                  # not read by nu.dwconv
    _draw_input_size(draw, q)
    in_bytes = q["in_cb"] * q["in_h"] * q["in_w"] * rows
    w_bytes = q["in_cb"] * (4 + q["k_h"] * q["k_w"]) * cols
    acc_bytes = q["in_cb"] * q["out_h"] * q["out_w"] * cols * 4
    sizes, (rin, rw, racc) = _draw_places(draw, (in_bytes, w_bytes, acc_bytes), (rows, cols, 4))
    named = {f"nu.{n}": v for n, v in q.items()}
    return (draw(st.integers(0, 3)), racc, rin, rw, named, draw(st.booleans()), rows, cols,
            sizes, draw(st.integers(0, 2**32 - 1)))


@settings(max_examples=250, deadline=None)
@given(dw_commands())
def test_dwconv_matches_reference(cmd):
    unit, racc, rin, rw, named, accumulate, rows, cols, sizes, seed = cmd
    run_dw(_memories(seed, unit, sizes), unit, racc, rin, rw, named, accumulate, rows, cols)


@pytest.mark.parametrize("x_byte, w_byte, acc_byte, x_zp, accumulate", [
    (0x80, 0x80, 0x00, 127, False),   # (-128 - 127) * -128 over the window: the largest magnitude
    (0x7F, 0x80, 0x00, -128, False),  # 255 * -128: the most negative term
    (0x7F, 0x7F, 0x7F, -128, True),   # accumulate onto 0x7F7F7F7F: wraps past 2**31
    (0x80, 0x7F, 0x80, 127, True),    # onto 0x80808080 (negative), wraps below -2**31
])
def test_dwconv_extremes_full_array(x_byte, w_byte, acc_byte, x_zp, accumulate):
    """A 32x32 array, 3x3 window, stride 2, two blocks, constant extreme contents."""
    named = {"nu.in_h": 7, "nu.in_w": 9, "nu.in_cb": 2, "nu.out_h": 3, "nu.out_w": 4,
             "nu.k_h": 3, "nu.k_w": 3, "nu.stride_h": 2, "nu.stride_w": 2, "nu.x_zp": x_zp}
    mems = {8: np.full(2 * 7 * 9 * 32, x_byte, np.uint8), 16: np.full(2 * 13 * 32, w_byte, np.uint8),
            24: np.full(2 * 12 * 32 * 4, acc_byte, np.uint8)}
    assert run_dw(mems, 0, 0, 0, 0, named, accumulate, 32, 32)[0] == errors.OK


def test_dwconv_wraps_past_int32():
    """A 264x264 window of (-128 - 127) * -128 sums past 2**31: the kernel wraps like the model."""
    named = {"nu.in_h": 264, "nu.in_w": 264, "nu.out_h": 1, "nu.out_w": 1, "nu.k_h": 264, "nu.k_w": 264,
             "nu.x_zp": 127}
    mems = {8: np.full(264 * 264 * 2, 0x80, np.uint8), 16: np.full((264 * 264 + 4) * 2, 0x80, np.uint8),
            24: np.zeros(64, np.uint8)}
    mems[16][:8] = 0                                                   # biases 0
    assert run_dw(mems, 0, 0, 0, 0, named, False, 2, 2)[0] == errors.OK
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    assert nu_dwconv(flat, base, size, 0, 0, 0, 0, ref.snapshot(named, "nu"), False, 2, 2, err) == errors.OK
    total = 264 * 264 * 255 * 128
    assert total > 2**31
    assert (flat[base[24]:base[24] + 8].view("<i4") == (total + 2**31) % 2**32 - 2**31).all()


def test_dwconv_known_values():
    """Two channels, 2x1 window: lane c reads only IBUF lane c, its bias and weight lane c, hand computed."""
    mems = {8: np.zeros(64, np.uint8), 16: np.zeros(64, np.uint8), 24: np.zeros(64, np.uint8)}
    mems[8][:8] = np.array([5, 1, 9, 9, 7, 2, 9, 9], np.uint8)      # pixels of 4 lanes; lanes 2, 3 unused
    mems[16][:8] = [100, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF]              # int32 biases 100 and -1
    mems[16][8:12] = np.array([256 - 3, 2, 4, 256 - 1], np.uint8)  # [tap][lane]
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    p = ref.snapshot({"nu.in_h": 2, "nu.k_h": 2, "nu.x_zp": 1}, "nu")
    assert nu_dwconv(flat, base, size, 0, 0, 0, 0, p, False, 4, 2, err) == errors.OK
    # lane 0: 100 + (5 - 1) * -3 + (7 - 1) * 4 = 112; lane 1: -1 + (1 - 1) * 2 + (2 - 1) * -1 = -2
    assert list(flat[base[24]:base[24] + 8].view("<i4")) == [112, -2]


def test_dwconv_refuses_more_columns_than_rows():
    mems = _memories(3, 0)
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    assert nu_dwconv(flat, base, size, 0, 0, 0, 0, ref.snapshot({}, "nu"), False, 4, 8, err) == errors.BAD_PARAM
    assert (err[4], err[5], err[6]) == (-1, 8, 4)
    assert np.array_equal(flat, before)


@pytest.mark.parametrize("taps, rows, pixels, expect", [
    ((3, 3), 32, 12544, 64 + 12544 // 3 + 1),   # 3 pixels of 9 taps per cycle
    ((3, 3), 32, 10, 64 + 32),                  # at least the weight load
    ((5, 5), 32, 100, 64 + 100),                # 25 taps: one pixel per cycle
    ((7, 7), 32, 100, 64 + 2 * 100),            # 49 taps: two passes
])
def test_dwconv_cycles(taps, rows, pixels, expect):
    from nnpsim.timing import nu_dwconv_cycles
    assert nu_dwconv_cycles(1, *taps, 1, pixels, rows, 64) == expect
    assert nu_dwconv_cycles(3, *taps, 1, pixels, rows, 64) == 64 + 3 * (expect - 64)


def test_dw_macs():
    p = ref.snapshot({"nu.in_cb": 2, "nu.k_h": 3, "nu.k_w": 3, "nu.out_h": 4, "nu.out_w": 5, "nu.out_cb": 7}, "nu")
    assert nu_dw_macs(p, 32) == 2 * 9 * 20 * 32


# --------------------------------------------------------------------------- nu.conv.rq

def _rq_table(rng: np.random.Generator, n: int, bad: int, fl: bool = False) -> np.ndarray:
    """n (bias, M, S) int32 triples: random biases (extremes too), M in [1, 2**31), S in [0, 62];
    bad = 1 / 2 puts an M <= 0 / an S out of range into one entry.  fl: (bias, float32 scale bits,
    junk), scales from 2**-40 to 2**10 (bad = 1: a zero, negative, infinite or NaN one)."""
    bias = rng.integers(-2**31, 2**31, n)
    bias[rng.integers(0, n)] = rng.choice([-2**31, 2**31 - 1])
    if fl:
        bits = (2.0 ** rng.uniform(-40, 10, n)).astype(np.float32).view(np.int32).astype(np.int64)
        if bad == 1:
            bits[rng.integers(0, n)] = np.array([rng.choice([0.0, -0.5, np.inf, np.nan])], np.float32).view(np.int32)[0]
        junk = rng.integers(-2**31, 2**31, n)
        return np.stack([bias, bits, junk], axis=1).astype("<i4").view(np.uint8).ravel()
    m = rng.integers(1, 2**31, n)
    m[rng.integers(0, n)] = rng.choice([1, 2**31 - 1])
    s = rng.integers(0, 63, n)
    s[rng.integers(0, n)] = rng.choice([0, 62])
    if bad == 1:
        m[rng.integers(0, n)] = rng.choice([0, -5])
    elif bad == 2:
        s[rng.integers(0, n)] = rng.choice([-1, 63])
    return np.stack([bias, m, s], axis=1).astype("<i4").view(np.uint8).ravel()


@st.composite
def nu_rq_commands(draw):
    unit, racc, rin, rw, named, _, rows, cols, sizes, seed = draw(nu_commands())
    n_ch = named["nu.out_cb"] * cols
    w_end = rw + named["nu.out_cb"] * named["nu.in_cb"] * named["nu.k_h"] * named["nu.k_w"] * rows * cols
    table = 4 * draw(st.integers(max(0, w_end) // 4, max(0, w_end) // 4 + 8))
    if draw(st.integers(0, 14)) == 0:
        table += draw(st.sampled_from([1, 2, 4096, -8]))
    sizes = (sizes[0], max(sizes[1], 64 * ((max(table, 0) + 12 * n_ch) // 64 + 1)), sizes[2])
    lo = draw(st.integers(-128, 127))
    hi = draw(st.integers(-128, 127))
    if draw(st.integers(0, 9)):
        lo, hi = min(lo, hi), max(lo, hi)
    named.update({"nu.rq_table": table, "nu.rq_zp_out": draw(st.integers(-130, 129)), "nu.rq_lo": lo,
                  "nu.rq_hi": hi, "nu.rq_float": draw(st.sampled_from([0, 1, 0, 1, 2, -1]))})
    bad = draw(st.sampled_from([0] * 12 + [1, 2]))
    return unit, racc, rin, rw, named, rows, cols, sizes, seed, bad


def run_rq(mems: dict, unit, racc, rin, rw, named, rows, cols, psum: bool = False) -> tuple:
    """Run nu.conv.rq's (psum: nu.conv.acc.rq's) kernel and the model on the same command; assert
    identical outcomes."""
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = nu_conv_rq(flat, base, size, unit, racc, rin, rw, ref.snapshot(named, "nu"), rows, cols, err, psum)
    ref_mems, fault = ref.run_reference(ref.nu_conv_rq, mems, unit, racc, rin, rw, named, rows, cols, psum)
    ref.assert_same(rc, err, flat, before, base, ref_mems, fault, CODES)
    return rc, err


@settings(max_examples=250, deadline=None)
@given(nu_rq_commands())
def test_nu_conv_rq_matches_reference(cmd):
    """Random shapes (array sizes that do not divide the tile), tables with extreme entries, bad
    parameters and misplaced operands: the kernel and the model agree on every byte or on the fault."""
    unit, racc, rin, rw, named, rows, cols, sizes, seed, bad = cmd
    mems = _memories(seed, unit, sizes)
    mems[32 + unit] = mems.pop(24 + unit)          # the result goes to the VU's VBUF, not ABUF
    t, n_ch = named["nu.rq_table"], named["nu.out_cb"] * cols
    if 0 <= t and t % 4 == 0 and t + 12 * n_ch <= sizes[1]:
        mems[16 + unit][t:t + 12 * n_ch] = _rq_table(np.random.default_rng(seed), n_ch, bad, named["nu.rq_float"] == 1)
    run_rq(mems, unit, racc, rin, rw, named, rows, cols)


@settings(max_examples=250, deadline=None)
@given(nu_rq_commands(), st.data())
def test_nu_conv_acc_rq_matches_reference(cmd, data):
    """nu.conv.acc.rq: as nu.conv.rq, plus random int32 partial sums (extremes too, so the sum wraps)
    from ABUF at rq_psum, sometimes misaligned, out of ABUF or with no ABUF at all."""
    unit, racc, rin, rw, named, rows, cols, sizes, seed, bad = cmd
    mems = _memories(seed, unit, sizes)
    mems[32 + unit] = mems.pop(24 + unit)
    t, n_ch = named["nu.rq_table"], named["nu.out_cb"] * cols
    if 0 <= t and t % 4 == 0 and t + 12 * n_ch <= sizes[1]:
        mems[16 + unit][t:t + 12 * n_ch] = _rq_table(np.random.default_rng(seed), n_ch, bad, named["nu.rq_float"] == 1)
    n_acc = n_ch * named["nu.out_h"] * named["nu.out_w"]
    psum = 4 * data.draw(st.integers(0, 16))
    abuf = 64 * ((psum + 4 * n_acc) // 64 + data.draw(st.integers(1, 2)))
    rng = np.random.default_rng(seed + 1)
    part = rng.integers(-2**31, 2**31, abuf // 4)
    part[rng.integers(0, abuf // 4, 3)] = [-2**31, 2**31 - 1, 2**31 - 1]
    mems[24 + unit] = part.astype("<i4").view(np.uint8)
    fault = data.draw(st.integers(0, 14))
    if fault == 0:
        psum += data.draw(st.sampled_from([1, 2, -4, abuf, 1 << 33]))
    elif fault == 1:
        del mems[24 + unit]
    named["nu.rq_psum"] = psum
    run_rq(mems, unit, racc, rin, rw, named, rows, cols, psum=True)


def test_nu_conv_acc_rq_known_value():
    """One pixel, one channel: partial sum 40 + (5 - 2) * -3 = 31; + bias 1000 = 1031; * M 3 = 3093;
    >> 4 rounded = 193 (3093 / 16 = 193.3); + zp_out -60 = 133, clipped to 127.  Without the
    partial sum (nu.conv.rq) it is 126: the ABUF int32 was added once, and ABUF is unchanged."""
    mems = {8: np.zeros(64, np.uint8), 16: np.zeros(64, np.uint8), 24: np.zeros(64, np.uint8),
            32: np.zeros(64, np.uint8)}
    mems[8][0] = 5
    mems[16][0] = np.uint8(256 - 3)
    mems[16][4:16] = np.array([1000, 3, 4], "<i4").view(np.uint8)
    mems[24][8:12] = np.array([40], "<i4").view(np.uint8)
    for psum, want in ((True, 127), (False, 126)):
        flat, base, size = ref.pack(mems)
        err = np.zeros(8, dtype=np.int64)
        p = ref.snapshot({"nu.x_zp": 2, "nu.rq_table": 4, "nu.rq_zp_out": -60, "nu.rq_psum": 8}, "nu")
        assert nu_conv_rq(flat, base, size, 0, 0, 0, 0, p, 1, 1, err, psum) == errors.OK, err
        assert flat[base[32]:base[32] + 1].view(np.int8)[0] == want
        assert flat[base[24] + 8:base[24] + 12].view("<i4")[0] == 40


def test_nu_conv_rq_known_value():
    """One pixel, one channel, hand computed: (5 - 2) * -3 = -9; + bias 1000 = 991; * M 3 = 2973;
    >> 4 rounded = 186 (2973 / 16 = 185.8); + zp_out -60 = 126; clipped to hi 100."""
    mems = {8: np.zeros(64, np.uint8), 16: np.zeros(64, np.uint8), 32: np.zeros(64, np.uint8)}
    mems[8][0] = 5
    mems[16][0] = np.uint8(256 - 3)
    mems[16][4:16] = np.array([1000, 3, 4], "<i4").view(np.uint8)
    for hi, want in ((100, 100), (127, 126)):
        flat, base, size = ref.pack(mems)
        err = np.zeros(8, dtype=np.int64)
        p = ref.snapshot({"nu.x_zp": 2, "nu.rq_table": 4, "nu.rq_zp_out": -60, "nu.rq_hi": hi}, "nu")
        assert nu_conv_rq(flat, base, size, 0, 0, 0, 0, p, 1, 1, err) == errors.OK, err
        assert flat[base[32]:base[32] + 1].view(np.int8)[0] == want
        assert (flat[base[32] + 1:base[32] + 64] == 0).all()       # one int8 written, not an int32


def test_nu_conv_rq_bias_wraps_like_the_accumulator():
    """conv + bias past 2**31 wraps to int32 before the multiply, as nu.conv.acc onto a filled bias does."""
    mems = {8: np.zeros(64, np.uint8), 16: np.zeros(64, np.uint8), 32: np.zeros(64, np.uint8)}
    mems[8][0] = 127
    mems[16][0] = 127
    mems[16][4:16] = np.array([2**31 - 1, 1, 0], "<i4").view(np.uint8)
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, dtype=np.int64)
    p = ref.snapshot({"nu.rq_table": 4, "nu.rq_zp_out": 0}, "nu")
    assert nu_conv_rq(flat, base, size, 0, 0, 0, 0, p, 1, 1, err) == errors.OK
    assert flat[base[32]:base[32] + 1].view(np.int8)[0] == -128     # wrapped negative, saturated


@pytest.mark.parametrize("named, code, fields", [
    ({"nu.rq_zp_out": 128}, errors.BAD_PARAM, {4: 46, 5: 128}),
    ({"nu.rq_lo": -129}, errors.BAD_PARAM, {4: 47}),
    ({"nu.rq_hi": 200}, errors.BAD_PARAM, {4: 48}),
    ({"nu.rq_lo": 5, "nu.rq_hi": 4}, errors.BAD_PARAM, {4: 47, 5: 5, 6: 4}),
    ({"nu.rq_table": 2}, errors.MISALIGNED, {1: 16, 2: 2, 3: 5}),
    ({"nu.rq_table": 2040}, errors.OUT_OF_BOUNDS, {1: 16, 2: 2040}),
    ({"nu.out_h": 9, "nu.out_w": 8, "nu.in_h": 9, "nu.in_w": 8, "nu.out_cb": 4}, errors.OUT_OF_BOUNDS, {1: 32, 2: 0, 3: 1151}),
])
def test_nu_conv_rq_errors(named, code, fields):
    """Each bad output-stage parameter, a misplaced table, and a result too large for VBUF (4 blocks of 9 x 8 pixels
    x 4 x 4 int8 = 1152 bytes, past VBUF's 1024: the int8 size, not ABUF's int32 one)."""
    mems = _memories(5, 0)
    mems[32] = mems.pop(24)
    mems[16][:48] = np.array([[7, 1, 3]] * 4, "<i4").view(np.uint8).ravel()
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = nu_conv_rq(flat, base, size, 0, 0, 0, 0, ref.snapshot({"nu.rq_table": 0, **named}, "nu"), 4, 4, err)
    assert rc == code and err[0] == code, (rc, err)
    for i, v in fields.items():
        assert err[i] == v, (i, err)
    assert np.array_equal(flat, before)
