"""VU kernel (every VU instruction) against the independent numpy model, and its error reports."""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa_spec import load_isa
from nnpsim import errors
from nnpsim.units import VU_OPS, vu_exec, vu_work
from tests import isa_reference as ref

CODES = {kind: getattr(errors, name) for kind, name in ref.FAULT_ERRORS.items()}
VBUF0 = 32
I8, I32 = 0, 2


def run(mems: dict, unit: int, mnemonic: str, rd: int, ra: int, rb: int, named: dict,
        sdt: int = I8, ddt: int = I8) -> tuple:
    """Run kernel and model on the same command; assert identical outcomes; return (rc, err)."""
    flat, base, size = ref.pack(mems)
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    rc = vu_exec(flat, base, size, unit, VU_OPS[mnemonic], rd, ra, rb, sdt, ddt,
                 ref.snapshot(named, "vu"), err)
    ref_mems, fault = ref.run_reference(ref.vu, mems, unit, mnemonic, rd, ra, rb, named, sdt, ddt)
    ref.assert_same(rc, err, flat, before, base, ref_mems, fault, CODES)
    return rc, err


def _layout(mnemonic: str, sdt: int, ddt: int) -> tuple[int, int, int]:
    """Element bytes of d, a, b (b 0: unused) as the architecture's VU table gives them."""
    table = {"vu.requant": (1, 1 << sdt, 0), "vu.requant.pc": (1, 1 << sdt, 8),
             "vu.add": (1, 1, 1), "vu.mul": (1, 1, 1), "vu.clip": (1, 1, 0),
             "vu.pool.max": (1, 1, 0), "vu.pool.sum": (4, 1, 0), "vu.divr": (1, 4, 4),
             "vu.mov": (1 << ddt, 1 << sdt, 0)}
    return table[mnemonic]


def _extent(counts, strides, nbytes) -> tuple[int, int]:
    lo = sum(min(0, (n - 1) * s) for n, s in zip(counts, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(counts, strides))
    return lo, hi + nbytes - 1


def _multiplier(draw) -> tuple[int, int]:
    """(M, S) with M anywhere in [0, 2**31) (edges included), S mostly close to log2(M).

    S near log2(M) keeps results inside int8 (not all saturated); small M with small S
    makes rounding ties (low S bits exactly 100..0) frequent.
    """
    k = draw(st.integers(0, 30))
    m = draw(st.one_of(st.integers(1 << k, (2 << k) - 1), st.sampled_from([0, 1, 2**31 - 1, 2**30])))
    s = draw(st.one_of(st.integers(max(0, k - 2), min(62, k + 3)), st.sampled_from([0, 1, 62])))
    return m, s


@st.composite
def vu_commands(draw):
    mnemonic = draw(st.sampled_from(ref.VU_MNEMONICS))
    sdt = draw(st.sampled_from([I8, I32])) if mnemonic in ("vu.requant", "vu.requant.pc", "vu.mov") else I8
    ddt = draw(st.sampled_from([I8, I32])) if mnemonic == "vu.mov" else I8
    nbytes = _layout(mnemonic, sdt, ddt)
    counts = [draw(st.integers(1, 4)) for _ in range(4)]
    named = {f"vu.n{k}": counts[k] for k in range(4)}
    pool = mnemonic in ("vu.pool.max", "vu.pool.sum")
    window = ([draw(st.integers(1, 3)), draw(st.integers(1, 3))] if pool else [1, 1])
    win_strides = [draw(st.integers(-8, 16)), draw(st.integers(-8, 16))] if pool else [0, 0]
    named.update({"vu.win_h": window[0], "vu.win_w": window[1],
                  "vu.win_stride_h": win_strides[0], "vu.win_stride_w": win_strides[1]})
    vbuf = 64 * draw(st.integers(8, 24))
    addrs = []
    for x, nb in zip("dab", nbytes):
        step = 4 if nb >= 4 else 1
        dense = np.cumprod([nb] + counts[:3])
        strides = [int(dense[k]) if draw(st.booleans()) else step * draw(st.integers(-6, 6))
                   for k in range(4)]
        named.update({f"vu.{x}_stride{k}": strides[k] for k in range(4)})
        if nb == 0:
            addrs.append(draw(st.integers(-100, 100)))   # unused: any value must be fine
            continue
        c, s = counts, strides
        if x == "a" and pool:
            c, s = counts + window, strides + win_strides
        lo, hi = _extent(c, s, nb)
        room = vbuf - (hi - lo + 1)
        if room >= 0 and draw(st.integers(0, 19)) > 0:
            addrs.append(-lo + step * draw(st.integers(0, room // step)))
        else:
            addrs.append(step * draw(st.integers(-16, vbuf // step + 16)))
    ma, shift = _multiplier(draw)
    mb, _ = _multiplier(draw)
    rare = draw(st.integers(0, 9)) == 0     # out-of-range zero points: overflow paths
    big = st.sampled_from([2**31, -2**31, 2**32, -2**32, 2**20])
    small = st.integers(-128, 127)
    named.update({
        "vu.za": draw(big if rare else small if sdt == I8 else st.sampled_from([0, 0, 7, -2**31])),
        "vu.zb": draw(big if rare else small),
        "vu.ma": ma, "vu.mb": mb, "vu.shift": shift,
        "vu.zp_out": draw(st.integers(-2**31, 2**31 - 1) if rare else small),
    })
    lo, hi = -128, 127
    if draw(st.booleans()):
        lo = draw(st.integers(-128, 127))
        hi = draw(st.integers(lo, 127))
    named.update({"vu.lo": lo, "vu.hi": hi})
    bad_entry = draw(st.integers(0, 29)) == 0
    return (mnemonic, sdt, ddt, addrs, named, vbuf, bad_entry, draw(st.integers(0, 3)),
            draw(st.integers(0, 2**32 - 1)))


def _fill_b(mem: np.ndarray, rng: np.random.Generator, mnemonic: str, rb: int, named: dict,
            bad_entry: bool) -> None:
    """Put legal (M, S) pairs or divisors at every b element (one illegal one if bad_entry)."""
    if mnemonic not in ("vu.requant.pc", "vu.divr"):
        return
    counts = [named[f"vu.n{k}"] for k in range(4)]
    addrs = [rb + sum(i[3 - k] * named[f"vu.b_stride{k}"] for k in range(4))
             for i in itertools.product(*(range(n) for n in counts[::-1]))]
    addrs = [a for a in addrs if 0 <= a and a + 8 <= mem.size]
    for a in addrs:
        if mnemonic == "vu.divr":
            n = int(rng.choice([rng.integers(1, 20), rng.integers(1, 2**31), 2**31 - 1, 1]))
            mem[a:a + 4] = np.array([n], "<i4").view(np.uint8)
        else:
            k = int(rng.integers(0, 31))
            m = int(rng.choice([rng.integers(1 << k, 2 << k), 2**31 - 1, 1]))
            s = int(rng.choice([rng.integers(max(0, k - 3), min(62, k + 12) + 1), 0, 62]))
            mem[a:a + 8] = np.array([m, s], "<i4").view(np.uint8)
    if bad_entry and addrs:
        a = addrs[int(rng.integers(0, len(addrs)))]
        off = 0 if mnemonic == "vu.divr" else int(rng.choice([0, 4]))
        value = int(rng.choice([0, -1, -2**31, 63] if off else [0, -1, -2**31]))
        mem[a + off:a + off + 4] = np.array([value], "<i4").view(np.uint8)


@settings(max_examples=700, deadline=None)
@given(vu_commands())
def test_vu_matches_reference(cmd):
    mnemonic, sdt, ddt, (rd, ra, rb), named, vbuf, bad_entry, unit, seed = cmd
    rng = np.random.default_rng(seed)
    mem = rng.integers(0, 256, vbuf, dtype=np.uint8)
    if seed % 3 == 0:   # int32 data of small magnitude, so that requant does not always saturate
        mem = (rng.integers(-300, 300, vbuf // 4).astype("<i4")).view(np.uint8).copy()
    _fill_b(mem, rng, mnemonic, rb, named, bad_entry)
    run({VBUF0 + unit: mem}, unit, mnemonic, rd, ra, rb, named, sdt, ddt)


def test_every_vu_mnemonic_is_mapped():
    isa_vu = {i.mnemonic for i in load_isa().instructions if i.unit == "VU"}
    assert set(VU_OPS) == isa_vu
    assert len(set(VU_OPS.values())) == len(VU_OPS)
    assert set(ref.VU_MNEMONICS) == isa_vu
    assert set(ELEM_BYTES) == isa_vu


NOT_VU = load_isa().by_mnemonic["add"].opcode    # an opcode, but not of a VU instruction

# Widest element in bytes per VU op, written out independently of nnpsim.semantics;
# None: decided by the dtype operands.
ELEM_BYTES = {"vu.requant": None, "vu.requant.pc": 4, "vu.add": 1, "vu.mul": 1, "vu.clip": 1,
              "vu.pool.max": 1, "vu.pool.sum": 4, "vu.divr": 4, "vu.mov": None}


@pytest.mark.parametrize("mnemonic", sorted(ELEM_BYTES))
@pytest.mark.parametrize("sdt, ddt", [(I8, I8), (I32, I8), (I8, I32), (I32, I32)])
def test_vu_work_matches_timing_table(mnemonic, sdt, ddt):
    named = {"vu.n0": 3, "vu.n1": 2, "vu.n2": 5, "vu.n3": 1, "vu.win_h": 3, "vu.win_w": 2}
    n_out, window, elem = vu_work(VU_OPS[mnemonic], ref.snapshot(named, "vu"), sdt, ddt)
    assert n_out == 30
    assert window == (6 if mnemonic in ("vu.pool.max", "vu.pool.sum") else 1)
    want = ELEM_BYTES[mnemonic]
    if want is None:   # decided by the dtype operands
        want = max(1 << sdt, 1 << ddt) if mnemonic == "vu.mov" else 1 << sdt
    assert elem == want


@pytest.mark.parametrize("op, named, sdt", [
    (VU_OPS["vu.clip"], {"vu.n1": 0}, I8),
    (VU_OPS["vu.pool.max"], {"vu.win_w": -1}, I8),
    (NOT_VU, {}, I8),
    (256, {}, I8),
    (-1, {}, I8),
    (VU_OPS["vu.requant"], {}, 3),
])
def test_vu_work_of_rejected_commands_is_zero(op, named, sdt):
    assert vu_work(op, ref.snapshot(named, "vu"), sdt, I8) == (0, 0, 0)


def _snapshot_case(mnemonic, named, mem, rd=0, ra=0, rb=0, sdt=I8, ddt=I8, unit=0):
    flat, base, size = ref.pack({VBUF0: mem})
    before = flat.copy()
    err = np.zeros(8, dtype=np.int64)
    op = VU_OPS.get(mnemonic, mnemonic)
    rc = vu_exec(flat, base, size, unit, op, rd, ra, rb, sdt, ddt, ref.snapshot(named, "vu"), err)
    return rc, err, flat[base[VBUF0]:base[VBUF0] + mem.size], np.array_equal(flat, before)


def test_vu_add_known_value():
    """Hand-computed: (100-3)*3 + (-50+2)*5 = 291 - 240 = 51; (51+1)>>1 = 26; 26 + 4 = 30."""
    mem = np.zeros(64, np.uint8)
    mem[0], mem[1] = 100, 256 - 50
    named = {"vu.za": 3, "vu.zb": -2, "vu.ma": 3, "vu.mb": 5, "vu.shift": 1, "vu.zp_out": 4}
    rc, _, out, _ = _snapshot_case("vu.add", named, mem, rd=2, ra=0, rb=1)
    assert rc == errors.OK and out[2] == 30


def test_vu_rshift_round_half_up_negative():
    """requant of -3 by M=1, S=1: (-3 + 1) >> 1 = -1 (half towards +inf), not -2."""
    mem = np.zeros(64, np.uint8)
    mem[0] = np.uint8(256 - 3)
    rc, _, out, _ = _snapshot_case("vu.requant", {"vu.ma": 1, "vu.shift": 1}, mem, rd=8)
    assert rc == errors.OK and out[8] == 255


def test_vu_in_place_reads_before_writes():
    """mov int8 -> int32 in place, d overlapping a: every source byte is read first."""
    rng = np.random.default_rng(7)
    mem = rng.integers(0, 256, 256, dtype=np.uint8)
    named = {"vu.n0": 16, "vu.a_stride0": 1, "vu.d_stride0": 4}
    rc, _ = run({VBUF0: mem}, 0, "vu.mov", 0, 0, 0, named, I8, I32)
    assert rc == errors.OK


def _expect(mnemonic, named, code, fields, mem=None, **kw):
    mem = mem if mem is not None else np.random.default_rng(9).integers(0, 256, 512, dtype=np.uint8)
    rc, err, _, unchanged = _snapshot_case(mnemonic, named, mem, **kw)
    assert rc == code and err[0] == code, (rc, err)
    for i, v in fields.items():
        assert err[i] == v, (i, err)
    assert unchanged


@pytest.mark.parametrize("mnemonic, named, fields", [
    ("vu.clip", {"vu.n2": 0}, {4: 66, 5: 0}),
    ("vu.clip", {"vu.n0": 2**12, "vu.n1": 2**12, "vu.n2": 2}, {4: 66, 5: 2, 6: 2**24}),
    ("vu.pool.max", {"vu.win_w": 0}, {4: 81, 5: 0}),
    ("vu.pool.sum", {"vu.n0": 2**12, "vu.win_h": 2**11, "vu.win_w": 4}, {4: 81, 5: 4}),
    ("vu.requant", {"vu.shift": 63}, {4: 88, 5: 63}),
    ("vu.add", {"vu.shift": -1}, {4: 88, 5: -1}),
    ("vu.clip", {"vu.lo": -129}, {4: 90, 5: -129}),
    ("vu.clip", {"vu.hi": 128}, {4: 91, 5: 128}),
    ("vu.mul", {"vu.lo": 5, "vu.hi": 4}, {4: 90, 5: 5, 6: 4}),
    ("vu.requant", {"vu.ma": 2**31}, {4: 86, 5: 2**31}),
    ("vu.mul", {"vu.ma": -1}, {4: 86, 5: -1}),
    ("vu.add", {"vu.mb": 2**31}, {4: 87, 5: 2**31}),
    ("vu.clip", {"vu.zp_out": 2**33}, {4: 89, 5: 2**33}),
    ("vu.clip", {"vu.b_stride3": -2**40}, {4: 79}),
])
def test_vu_bad_params(mnemonic, named, fields):
    _expect(mnemonic, named, errors.BAD_PARAM, fields)


def test_vu_params_an_op_does_not_read_are_not_checked():
    mem = np.zeros(64, np.uint8)
    named = {"vu.shift": 99, "vu.ma": -5, "vu.win_h": 0, "vu.lo": 100, "vu.hi": -100}
    assert _snapshot_case("vu.mov", named, mem)[0] == errors.OK
    assert _snapshot_case("vu.pool.max", {"vu.shift": 99, "vu.lo": 9, "vu.hi": 0}, mem)[0] == 0


@pytest.mark.parametrize("mnemonic, kw, fields", [
    (NOT_VU, {}, {5: NOT_VU, 6: 0}),
    (1 << 20, {}, {5: 1 << 20, 6: 0}),
    (-1, {}, {5: -1, 6: 0}),
    ("vu.clip", {"unit": 8}, {5: 8, 6: 1}),
    ("vu.requant", {"sdt": 1}, {5: 1, 6: 2}),
    ("vu.mov", {"sdt": 0, "ddt": 3}, {5: 3, 6: 3}),
])
def test_vu_illegal(mnemonic, kw, fields):
    _expect(mnemonic, {}, errors.ILLEGAL_INSTRUCTION, fields, **kw)


def test_vu_no_such_memory():
    _expect("vu.clip", {}, errors.NO_SUCH_MEMORY, {1: 33}, unit=1)


@pytest.mark.parametrize("mnemonic, named, kw, fields", [
    ("vu.pool.sum", {}, {"rd": 2}, {1: 32, 2: 2, 4: -1}),
    ("vu.pool.sum", {"vu.n1": 2, "vu.d_stride1": 6}, {}, {4: 69, 5: 6}),
    ("vu.divr", {}, {"ra": 1}, {2: 1, 4: -1}),
    ("vu.divr", {"vu.n0": 2, "vu.b_stride0": 2}, {}, {4: 76, 5: 2}),
    ("vu.requant", {"vu.n3": 3, "vu.a_stride3": 1}, {"sdt": I32}, {4: 75, 5: 1}),
    ("vu.requant.pc", {}, {"rb": 4 * 3 + 2}, {2: 14}),
    ("vu.mov", {}, {"rd": 3, "ddt": I32}, {2: 3}),
])
def test_vu_misaligned(mnemonic, named, kw, fields):
    _expect(mnemonic, named, errors.MISALIGNED, fields, **kw)


@pytest.mark.parametrize("mnemonic, named, kw, fields", [
    ("vu.clip", {"vu.n0": 10, "vu.d_stride0": 1}, {"rd": 505}, {1: 32, 2: 505, 3: 514}),
    ("vu.clip", {"vu.n0": 10, "vu.a_stride0": -1}, {"ra": 5}, {2: -4, 3: 5}),
    ("vu.pool.max", {"vu.win_h": 3, "vu.win_stride_h": 300}, {"ra": 0}, {2: 0, 3: 600}),
    ("vu.pool.max", {"vu.win_w": 3, "vu.win_stride_w": -3}, {"ra": 5}, {2: -1, 3: 5}),
    ("vu.requant.pc", {}, {"rb": 508}, {2: 508, 3: 515}),
    ("vu.divr", {"vu.n1": 2, "vu.a_stride1": 2**31 - 4}, {}, {2: 0, 3: 2**31 - 1}),
    ("vu.add", {}, {"rb": -2**62}, {1: 32}),
    ("vu.add", {"vu.n0": 2**23, "vu.n1": 2, "vu.d_stride0": 2**31 - 1,
                "vu.d_stride1": 2**31 - 1}, {}, {2: 0}),
])
def test_vu_out_of_bounds(mnemonic, named, kw, fields):
    _expect(mnemonic, named, errors.OUT_OF_BOUNDS, fields, **kw)


def _i32(values) -> np.ndarray:
    mem = np.zeros(512, np.uint8)
    mem[:4 * len(values)] = np.array(values, "<i4").view(np.uint8)
    return mem


def test_vu_data_errors():
    # divisor 0 in the second element: err[2] = its byte address, err[6] = element index
    mem = _i32([7, 9, 0, 3, 5, 0])   # a = [7, 9] at 0 and 4; b = [3, 0] at 12 and 20
    _expect("vu.divr", {"vu.n0": 2, "vu.a_stride0": 4, "vu.b_stride0": 8}, errors.DIV_BY_ZERO,
            {1: 32, 2: 20, 3: 23, 5: 0, 6: 1}, mem=mem, ra=0, rb=12)
    # per-channel table: M = 0 and S = 63 are refused
    mem = _i32([5, 0, 7])
    _expect("vu.requant.pc", {}, errors.BAD_PARAM, {1: 32, 2: 4, 3: 7, 5: 0, 6: 0, 7: 0},
            mem=mem, ra=0, rb=4, sdt=I32)
    mem = _i32([5, 2**30, 63])
    _expect("vu.requant.pc", {}, errors.BAD_PARAM, {2: 8, 3: 11, 5: 63, 7: 1},
            mem=mem, ra=0, rb=4, sdt=I32)
    # (x - za) * M beyond 62 bits: int32 input, za far away, M near 2**31
    mem = _i32([2**31 - 1, -2**31])
    _expect("vu.requant", {"vu.n0": 2, "vu.a_stride0": 4, "vu.za": -2**31, "vu.ma": 2**31 - 1},
            errors.ARITH_OVERFLOW, {1: 32, 2: 0, 3: 3, 5: 0}, mem=mem, sdt=I32)
    mem = np.zeros(64, np.uint8)
    _expect("vu.mul", {"vu.za": 2**32, "vu.zb": -2**32, "vu.ma": 1}, errors.ARITH_OVERFLOW,
            {5: 0}, mem=mem, rd=8, ra=0, rb=1)
    _expect("vu.add", {"vu.za": 2**32, "vu.zb": 2**32, "vu.ma": 2**30 - 1, "vu.mb": 2**30 - 1},
            errors.ARITH_OVERFLOW, {5: 0}, mem=mem, rd=8, ra=0, rb=1)



def test_vu_largest_pool_sum_fits_int32():
    """At most 2**24 window elements per command: -128 * 2**24 = -2**31 is the extreme sum, and fits."""
    mem = np.zeros(64, np.uint8)
    mem[0] = 0x80   # window strides 0 repeat this one byte
    rc, err, out, _ = _snapshot_case("vu.pool.sum", {"vu.win_h": 2**12, "vu.win_w": 2**12}, mem, rd=8)
    assert rc == errors.OK, err
    assert out[8:12].view("<i4")[0] == -2**31
