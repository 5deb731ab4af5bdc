"""VU kernel (every VU instruction) against the independent numpy model, and its error reports."""
from __future__ import annotations

import itertools
import struct

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.ops.softmax import exp_table, out_multiplier, softmax_rows
from isa_spec import load_isa
from nnpsim import errors
from nnpsim.units import VU_OPS, vu_exec, vu_work
from nnpsim.units.vu import vu_duration
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
             "vu.mov": (1 << ddt, 1 << sdt, 0), "vu.requant.f": (1, 1 << sdt, 0),
             "vu.requant.fpc": (1, 1 << sdt, 4), "vu.fadd": (1, 1, 1), "vu.fmul": (1, 1, 1),
             "vu.pool.favg": (1, 1, 4), "vu.pool.acc": (4, 1, 0), "vu.pool.avg": (1, 1, 4),
             "vu.slide.acc": (4, 1, 0), "vu.slide.avg": (1, 1, 4), "vu.slide.favg": (1, 1, 4),
             "vu.lut": (1, 1, ref.LUT_ENTRIES), "vu.softmax": (1, 1, 4 * ref.SOFTMAX_ENTRIES),
             "vu.fsub": (1, 1, 1), "vu.fdiv": (1, 1, 1), "vu.fmax": (1, 1, 1), "vu.fmin": (1, 1, 1),
             "vu.pool.fmean": (1, 1, 0), "vu.faffine": (1, 1, 8), "vu.lerp": (1, 1, ref.LERP_ENTRY),
             "vu.pool.faffavg": (1, 1, 8)}
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


def bits(value: float) -> int:
    """The IEEE-754 float32 bit pattern of value (rounded to float32), as setpi writes it."""
    return struct.unpack("<I", struct.pack("<f", value))[0]


BAD_FLOATS = [0.0, -0.0, -0.5, float("inf"), float("-inf"), float("nan")]


def _float_param(draw, lo: float, hi: float) -> int:
    """Bits of a float32 parameter: mostly 2**uniform(lo, hi) or a power of two (exact ties), rarely an edge."""
    kind = draw(st.integers(0, 19))
    if kind == 0:
        return bits(draw(st.sampled_from(BAD_FLOATS + [1e-45, 3.4e38])))
    if kind <= 5:
        return bits(2.0 ** draw(st.integers(int(lo), int(hi))))
    return bits(2.0 ** draw(st.floats(lo, hi)))


def _float_params(draw, mnemonic: str, sdt: int) -> dict:
    """fscale, fscale_b, fbias sized so that the float ops' results are mostly inside int8."""
    mnemonic = ref.SLIDE_AS_POOL.get(mnemonic, mnemonic)
    if mnemonic in ("vu.requant.f", "vu.requant.fpc"):
        scale = _float_param(draw, -30, 0) if sdt == I32 else _float_param(draw, -4, 2)
        return {"vu.fscale": scale, "vu.fscale_b": 0, "vu.fbias": 0}
    if mnemonic == "vu.fmul":
        return {"vu.fscale": _float_param(draw, -16, -6), "vu.fscale_b": 0, "vu.fbias": 0}
    if mnemonic == "vu.softmax":      # floor(1 / y_scale): quotients <= 1 times up to 512
        return {"vu.fscale": _float_param(draw, 0, 9), "vu.fscale_b": 0, "vu.fbias": 0}
    if mnemonic == "vu.pool.faffavg":     # the input and output scales; the (s, c) pairs are in b (_fill_b)
        return {"vu.fscale": _float_param(draw, -8, -2), "vu.fscale_b": _float_param(draw, -7, -1), "vu.fbias": 0}
    if mnemonic == "vu.faffine":      # the input and output scales; the (s, c) pairs are in b (_fill_b)
        return {"vu.fscale": _float_param(draw, -8, -2), "vu.fscale_b": 0, "vu.fbias": _float_param(draw, -7, -1)}
    if mnemonic in ref.FBIN_OPS:      # three tensor scales; a quotient's output scale near 1
        out = (-1, 3) if mnemonic == "vu.fdiv" else (-7, -2)
        sb = _float_param(draw, -8, -2)
        if mnemonic == "vu.fsub" and draw(st.booleans()):     # the float add: b's scale negated
            sb |= 0x80000000
        return {"vu.fscale": _float_param(draw, -8, -2), "vu.fscale_b": sb, "vu.fbias": _float_param(draw, *out)}
    c = draw(st.one_of(st.floats(-300, 300, width=32), st.integers(-300, 300).map(lambda v: v + 0.5),
                       st.sampled_from(BAD_FLOATS[3:])))
    return {"vu.fscale": _float_param(draw, -6, 1), "vu.fscale_b": _float_param(draw, -6, 1), "vu.fbias": bits(c)}


@st.composite
def vu_commands(draw):
    mnemonic = draw(st.sampled_from(ref.VU_MNEMONICS))
    sdt = (draw(st.sampled_from([I8, I32]))
           if mnemonic in ("vu.requant", "vu.requant.pc", "vu.mov", "vu.requant.f", "vu.requant.fpc") else I8)
    ddt = draw(st.sampled_from([I8, I32])) if mnemonic == "vu.mov" else I8
    nbytes = _layout(mnemonic, sdt, ddt)
    counts = [draw(st.integers(1, 4)) for _ in range(4)]
    named = {f"vu.n{k}": counts[k] for k in range(4)}
    pool = mnemonic in ref.POOL_OPS or mnemonic == "vu.lerp"     # vu.lerp picks from a window of a
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
        if x == "a" and mnemonic in ref.SLIDE_OPS and draw(st.integers(0, 4)) > 0:
            # mostly on the sliding-window engine's grid: whole steps of positive window strides
            win_strides = [draw(st.integers(1, 16)), draw(st.integers(1, 4))]
            strides[:2] = [win_strides[1] * draw(st.integers(1, 4)), win_strides[0] * draw(st.integers(1, 3))]
            named.update({"vu.win_stride_h": win_strides[0], "vu.win_stride_w": win_strides[1]})
        named.update({f"vu.{x}_stride{k}": strides[k] for k in range(4)})
        if nb == 0:
            addrs.append(draw(st.integers(-100, 100)))   # unused: any value must be fine
            continue
        c, s = counts, strides
        if x == "a" and pool:
            c, s = counts + window, strides + win_strides
        if x == "b" and mnemonic in ("vu.lut", "vu.softmax"):      # one table, not walked by the b strides
            c, s = [1] * 4, [0] * 4
        if x == "b" and mnemonic == "vu.lerp":     # n0 column then n1 row entries, one range
            c, s, nb, step = [1] * 4, [0] * 4, ref.LERP_ENTRY * (counts[0] + counts[1]), 4
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
    named.update(_float_params(draw, mnemonic, sdt))
    if mnemonic == "vu.pool.fmean":     # vu.mode is fmean's lane, the others' uint8 switch
        named["vu.mode"] = draw(st.one_of(st.integers(0, 3), st.sampled_from([-1, 4, 2**31 - 1])))
    else:                               # 2 is refused where it is read, but by .favg (its QuantizeLinear form)
        named["vu.mode"] = draw(st.sampled_from([0, 1, 1, 2] if rare else [0, 1]))
    if mnemonic == "vu.lerp":       # its form in vu.ma (now and then an illegal one), the fixed form's shift
        named.update({"vu.ma": draw(st.sampled_from([0, 1, 2, 0, 1, 2, 3, -1])),
                      "vu.shift": draw(st.sampled_from([20, 20, 10, 0, 63])),
                      "vu.zp_out": draw(st.integers(-256, 255)), "vu.za": draw(st.integers(-256, 255))})
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
    """Put legal (M, S) pairs, float scales or divisors at every b element (one illegal one if bad_entry)."""
    mnemonic = ref.SLIDE_AS_POOL.get(mnemonic, mnemonic)
    if mnemonic == "vu.softmax":
        _fill_softmax_table(mem, rng, rb, bad_entry)
        return
    if mnemonic == "vu.lerp":
        _fill_lerp_table(mem, rng, rb, named, bad_entry)
        return
    if mnemonic not in ("vu.requant.pc", "vu.divr", "vu.requant.fpc", "vu.pool.favg", "vu.pool.avg",
                        "vu.faffine", "vu.pool.faffavg"):
        return
    counts = [named[f"vu.n{k}"] for k in range(4)]
    addrs = [rb + sum(i[3 - k] * named[f"vu.b_stride{k}"] for k in range(4))
             for i in itertools.product(*(range(n) for n in counts[::-1]))]
    addrs = [a for a in addrs if 0 <= a and a + 8 <= mem.size]
    for a in addrs:
        if mnemonic == "vu.requant.fpc":
            s = float(2.0 ** rng.uniform(-30, 2)) if rng.random() < 0.7 else float(2.0 ** rng.integers(-8, 3))
            mem[a:a + 4] = np.array([s], "<f4").view(np.uint8)
        elif mnemonic in ("vu.faffine", "vu.pool.faffavg"):    # a BatchNormalization's pair, sometimes 0 or huge
            pair = [rng.choice([rng.normal(0, 2), 0.0, -0.0, 3e38]), rng.choice([rng.normal(0, 2), 0.0, -3e38])]
            mem[a:a + 8] = np.array(pair, "<f4").view(np.uint8)
        elif mnemonic in ("vu.divr", "vu.pool.favg", "vu.pool.avg"):
            n = int(rng.choice([rng.integers(1, 20), rng.integers(1, 2**31), 2**31 - 1, 1]))
            mem[a:a + 4] = np.array([n], "<i4").view(np.uint8)
        else:
            k = int(rng.integers(0, 31))
            m = int(rng.choice([rng.integers(1 << k, 2 << k), 2**31 - 1, 1]))
            s = int(rng.choice([rng.integers(max(0, k - 3), min(62, k + 12) + 1), 0, 62]))
            mem[a:a + 8] = np.array([m, s], "<i4").view(np.uint8)
    if bad_entry and addrs:
        a = addrs[int(rng.integers(0, len(addrs)))]
        off = int(rng.choice([0, 4])) if mnemonic == "vu.requant.pc" else 0
        if mnemonic == "vu.requant.fpc":
            mem[a:a + 4] = np.array([rng.choice(BAD_FLOATS)], "<f4").view(np.uint8)
            return
        if mnemonic in ("vu.faffine", "vu.pool.faffavg"):     # only a non-finite s or c is illegal
            off = int(rng.choice([0, 4]))
            mem[a + off:a + off + 4] = np.array([rng.choice(BAD_FLOATS[3:])], "<f4").view(np.uint8)
            return
        value = int(rng.choice([0, -1, -2**31, 63] if off else [0, -1, -2**31]))
        mem[a + off:a + off + 4] = np.array([value], "<i4").view(np.uint8)


def _fill_softmax_table(mem: np.ndarray, rng: np.random.Generator, rb: int, bad_entry: bool) -> None:
    """256 positive finite float32s at rb (increasing exponentials, random ones, or some near the float32
    maximum so that a row's sum overflows to inf); one illegal entry if bad_entry."""
    if rb < 0 or rb + 4 * ref.SOFTMAX_ENTRIES > mem.size:
        return
    kind = int(rng.integers(0, 3))
    if kind == 0:
        table = np.exp((np.arange(256) - 255 + rng.uniform(0, 80)) * rng.uniform(0.01, 0.5))
    elif kind == 1:
        table = 2.0 ** rng.uniform(-140, 120, 256)
    else:
        table = np.where(rng.random(256) < 0.3, 3.4e38, 2.0 ** rng.uniform(-20, 127, 256))
    table = np.maximum(table.astype(np.float32), np.float32(1e-45))
    if bad_entry:
        table[int(rng.integers(0, 256))] = rng.choice(BAD_FLOATS)
    mem[rb:rb + 4 * ref.SOFTMAX_ENTRIES] = table.astype("<f4").view(np.uint8)


def _fill_lerp_table(mem: np.ndarray, rng: np.random.Generator, rb: int, named: dict, bad_entry: bool) -> None:
    """vu.lerp's entries: indices inside the window, weights in [0, 1] (float32, some exact halves and ends) or
    integers in [0, 1024] (one illegal field if bad_entry)."""
    n0, n1, form = named["vu.n0"], named["vu.n1"], named["vu.ma"]
    spans = [named["vu.win_w"]] * n0 + [named["vu.win_h"]] * n1
    starts = [rb + ref.LERP_ENTRY * k for k in range(n0 + n1) if 0 <= rb + ref.LERP_ENTRY * k
              and rb + ref.LERP_ENTRY * (k + 1) <= mem.size]
    for at in starts:
        span = spans[(at - rb) // ref.LERP_ENTRY]
        i1 = int(rng.integers(0, span))
        idx = np.array([i1, min(i1 + 1, span - 1)], "<i4")
        if form == 1:
            w1 = int(rng.choice([rng.integers(0, 1025), 512, 0, 1024]))
            w = np.array([w1, 1024 - w1], "<i4")
        else:
            w1 = np.float32(rng.choice([rng.random(), 0.5, 0.0, 1.0]))
            w = np.array([w1, np.float32(1) - w1], "<f4").view("<i4")
        mem[at:at + 16] = np.concatenate([idx, w]).view(np.uint8)
    if bad_entry and starts:
        field = int(rng.integers(0, 4))
        at = starts[int(rng.integers(0, len(starts)))] + 4 * field
        bad = [2**32 - 1, 1 << 20] if field < 2 else ([2**32 - 1, 70000] if form == 1 else
                                                      [0xBF800000, 0x7FC00000, 0x40000000])
        mem[at:at + 4] = np.array([rng.choice(bad)], "<u4").view(np.uint8)


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
              "vu.pool.max": 1, "vu.pool.sum": 4, "vu.divr": 4, "vu.mov": None, "vu.requant.f": None,
              "vu.requant.fpc": 4, "vu.fadd": 1, "vu.fmul": 1, "vu.pool.favg": 4, "vu.pool.acc": 4,
              "vu.pool.avg": 4, "vu.slide.acc": 4, "vu.slide.avg": 4, "vu.slide.favg": 4, "vu.lut": 1,
              "vu.fsub": 1, "vu.fdiv": 1, "vu.fmax": 1, "vu.fmin": 1, "vu.softmax": 4, "vu.pool.fmean": 1,
              "vu.faffine": 1, "vu.lerp": 1, "vu.pool.faffavg": 4}


@pytest.mark.parametrize("mnemonic", sorted(ELEM_BYTES))
@pytest.mark.parametrize("sdt, ddt", [(I8, I8), (I32, I8), (I8, I32), (I32, I32)])
def test_vu_work_matches_timing_table(mnemonic, sdt, ddt):
    named = {"vu.n0": 3, "vu.n1": 2, "vu.n2": 5, "vu.n3": 1, "vu.win_h": 3, "vu.win_w": 2}
    n_out, window, elem = vu_work(VU_OPS[mnemonic], ref.snapshot(named, "vu"), sdt, ddt)
    assert n_out == 30
    assert window == (6 if mnemonic in ref.POOL_OPS else 1)
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




def test_vu_fmul_far_zero_points_are_checked_per_element():
    """Zero points beyond +-2**30 take the general loop, whose product check reports the overflow; just inside,
    the row loop gives the reference's values."""
    mem = np.zeros(64, np.uint8)
    _expect("vu.fmul", {"vu.za": 2**32, "vu.zb": -2**32, "vu.fscale": bits(1.0)}, errors.ARITH_OVERFLOW,
            {5: 0}, mem=mem, rd=8, ra=0, rb=1)
    mem[:2] = [127, 129]            # a = 127, b = -127
    for za in (2**30 - 1, 2**30):
        named = {"vu.za": za, "vu.zb": 1, "vu.fscale": bits(2.0**-32), "vu.zp_out": 3, "vu.lo": -128, "vu.hi": 127}
        t = np.float32(np.float32((127 - za) * -128) * np.float32(2.0**-32)) + np.float32(3)
        assert _run_vu("vu.fmul", named, mem, 8, 0, 1)[8] == np.uint8(np.int8(np.rint(t))), za

def test_vu_largest_pool_sum_fits_int32():
    """At most 2**24 window elements per command: -128 * 2**24 = -2**31 is the extreme sum, and fits."""
    mem = np.zeros(64, np.uint8)
    mem[0] = 0x80   # window strides 0 repeat this one byte
    rc, err, out, _ = _snapshot_case("vu.pool.sum", {"vu.win_h": 2**12, "vu.win_w": 2**12}, mem, rd=8)
    assert rc == errors.OK, err
    assert out[8:12].view("<i4")[0] == -2**31


def test_vu_pool_acc_and_avg_extremes():
    """vu.pool.acc reaches -2**31 like vu.pool.sum; vu.pool.avg of the same window divides it (saturating to
    -128 for n = 1, exactly -128 for n = 2**24) and rounds half away from zero (-5 / 2 = -3, 5 / 2 = 3)."""
    mem = np.zeros(64, np.uint8)
    mem[0] = 0x80
    rc, err, out, _ = _snapshot_case("vu.pool.acc", {"vu.win_h": 2**12, "vu.win_w": 2**12}, mem, rd=8)
    assert rc == errors.OK and out[8:12].view("<i4")[0] == -2**31, err
    for n, want in ((1, -128), (2**24, -128), (2**25, -64), (2**31 - 1, -1)):
        mem = np.zeros(64, np.uint8)
        mem[0] = 0x80
        mem[16:20] = np.array([n], "<i4").view(np.uint8)
        rc, err, out, _ = _snapshot_case("vu.pool.avg", {"vu.win_h": 2**12, "vu.win_w": 2**12}, mem, rd=8, rb=16)
        assert rc == errors.OK and out[8].view(np.int8) == want, (n, err)
    for x, want in ((-5, -3), (5, 3), (-3, -2), (3, 2)):     # window of two: x and 0
        mem = np.zeros(64, np.uint8)
        mem[0] = x & 0xFF
        mem[16:20] = np.array([2], "<i4").view(np.uint8)
        rc, err, out, _ = _snapshot_case("vu.pool.avg", {"vu.win_w": 2, "vu.win_stride_w": 1}, mem, rd=8, rb=16)
        assert rc == errors.OK and out[8].view(np.int8) == want, (x, err)


def test_vu_pool_avg_refuses_zero_count():
    mem = np.zeros(64, np.uint8)
    rc, err, _, unchanged = _snapshot_case("vu.pool.avg", {"vu.win_w": 2}, mem, rd=8, rb=16)
    assert rc == errors.DIV_BY_ZERO and (err[2], err[3], err[5]) == (16, 19, 0) and unchanged


@pytest.mark.parametrize("mnemonic, bytes_per_output", [("vu.pool.acc", 6 + 4), ("vu.pool.avg", 6 + 1 + 4),
                                                         ("vu.pool.sum", 6 * 4), ("vu.pool.favg", 6 * 4)])
def test_vu_pool_durations(mnemonic, bytes_per_output):
    """The int8-pace pooling ops read their window a byte a lane, d and b once an output; the others charge
    their widest element per window element (30 outputs of a 3x2 window, 64 bytes a cycle, latency 8)."""
    from nnpsim.units.vu import vu_duration
    named = {"vu.n0": 3, "vu.n1": 2, "vu.n2": 5, "vu.win_h": 3, "vu.win_w": 2}
    got = vu_duration(VU_OPS[mnemonic], ref.snapshot(named, "vu"), I8, I8, 64, 8)
    assert got == 8 + -(-30 * bytes_per_output // 64)


def test_vu_lut_maps_every_int8_through_its_table():
    """Every int8 input, strided in a 2-D box, lands on table[a + 128]; the result goes to a strided d."""
    rng = np.random.default_rng(5)
    table = rng.integers(-128, 128, 256).astype(np.int8)
    x = np.arange(-128, 128, dtype=np.int8).reshape(16, 16)[:, ::-1]
    mem = np.zeros(2048, np.uint8)
    mem[1024:1280] = table.view(np.uint8)
    mem[0:512:2] = x.ravel().view(np.uint8)          # a: element stride 2, row stride 32
    named = {"vu.n0": 16, "vu.n1": 16, "vu.a_stride0": 2, "vu.a_stride1": 32, "vu.d_stride0": 1,
             "vu.d_stride1": 16, "vu.b_stride0": 7, "vu.b_stride1": -3}   # b strides: not read
    out = _run_vu("vu.lut", named, mem, rd=1536, ra=0, rb=1024)
    got = out[1536:1792].view(np.int8).reshape(16, 16)
    assert (got == table[x.astype(np.int64) + 128]).all()


def test_vu_lut_table_must_fit_vbuf():
    """The whole 256-byte table is inside VBUF, whatever the inputs: rb + 255 past the end is out of bounds."""
    mem = np.zeros(512, np.uint8)
    rc, err, _, unchanged = _snapshot_case("vu.lut", {}, mem, rd=0, ra=1, rb=512 - 255)
    assert rc == errors.OUT_OF_BOUNDS and (err[2], err[3]) == (257, 512) and unchanged


def test_vu_lut_duration():
    """Its table once (256 bytes), then one byte an output, over the datapath (64 a cycle, latency 8)."""
    named = {"vu.n0": 3, "vu.n1": 2, "vu.n2": 5}
    got = vu_duration(VU_OPS["vu.lut"], ref.snapshot(named, "vu"), I8, I8, 64, 8)
    assert got == 8 + -(-(256 + 30) // 64)


def _softmax_case(rng, rows: int, row: int, x_scale: float, y_scale: float, zp: int):
    """Memory holding random int8 rows (row-major, or each row's elements strided by `rows` when
    transposed) and onnxruntime's exponential table, the command's parameters, and the numpy model's rows."""
    x = rng.integers(-128, 128, (rows, row)).astype(np.int8)
    table_at = -(-rows * row // 4) * 4
    mem = np.zeros(table_at + 1024 + rows * row, np.uint8)
    mem[table_at:table_at + 1024] = exp_table(np.float32(x_scale), row).view(np.uint8)
    want = softmax_rows(x, exp_table(np.float32(x_scale), row), out_multiplier(np.float32(y_scale)), zp)
    named = {"vu.fscale": bits(float(out_multiplier(np.float32(y_scale)))), "vu.zp_out": zp}
    return x, mem, table_at, named, want


@pytest.mark.parametrize("rows, row", [(64, 16), (5, 1), (3, 17), (2, 63), (1, 1000), (7, 200)])
def test_vu_softmax_is_the_numpy_model_on_random_rows(rows, row):
    """vu.softmax's rows (n0 their length, n1 the rows) against compiler/ops/softmax.py's model of
    onnxruntime's QLinearSoftmax, on every element: rows of 1, of the DFL's 16, of lengths that are no
    multiple of the lanes, and a 1000-long one; each row once row-major and once strided (a column of a
    transposed block), the result in place."""
    rng = np.random.default_rng(rows * 1000 + row)
    for layout in ("rows", "columns"):
        x_scale, y_scale = float(rng.uniform(0.005, 0.4)), float(rng.choice([1 / 256, rng.uniform(0.002, 0.05)]))
        zp = int(rng.choice([-128, 0, int(rng.integers(-128, 128))]))
        x, mem, table_at, named, want = _softmax_case(rng, rows, row, x_scale, y_scale, zp)
        data = x if layout == "rows" else x.T
        mem[:rows * row] = np.ascontiguousarray(data).ravel().view(np.uint8)
        elem, step = (1, row) if layout == "rows" else (rows, 1)
        named.update({"vu.n0": row, "vu.n1": rows, "vu.a_stride0": elem, "vu.a_stride1": step,
                      "vu.d_stride0": elem, "vu.d_stride1": step})
        out = _run_vu("vu.softmax", named, mem, rd=0, ra=0, rb=table_at)[:rows * row].view(np.int8)
        got = out.reshape(rows, row) if layout == "rows" else out.reshape(row, rows).T
        assert np.array_equal(got, want), (layout, np.argwhere(got != want)[:4].tolist())


def test_vu_softmax_refuses_a_table_entry_that_is_not_positive_finite():
    """Entry 7 of the table is -0.5: BAD_PARAM naming its four bytes, its bit pattern and its index; nothing
    is written."""
    rng = np.random.default_rng(2)
    _, mem, table_at, named, _ = _softmax_case(rng, 4, 8, 0.1, 1 / 256, -128)
    mem[table_at + 28:table_at + 32] = np.array([-0.5], "<f4").view(np.uint8)
    named.update({"vu.n0": 8, "vu.n1": 4, "vu.a_stride0": 1, "vu.a_stride1": 8, "vu.d_stride0": 1,
                  "vu.d_stride1": 8})
    rc, err, _, unchanged = _snapshot_case("vu.softmax", named, mem, rd=0, ra=0, rb=table_at)
    assert rc == errors.BAD_PARAM and (err[2], err[3], err[5], err[6]) == (table_at + 28, table_at + 31,
                                                                          bits(-0.5) - 2**32, 7)
    assert unchanged


def test_vu_softmax_duration():
    """latency, the 1024-byte table over the datapath, then (row groups + 2) stages of n0 cycles: 16 float32
    lanes at 64 bytes a cycle, so 40 rows of 17 are 3 groups."""
    named = {"vu.n0": 17, "vu.n1": 8, "vu.n2": 5}
    assert vu_duration(VU_OPS["vu.softmax"], ref.snapshot(named, "vu"), I8, I8, 64, 8) == 8 + 16 + (3 + 2) * 17
    assert vu_duration(VU_OPS["vu.softmax"], ref.snapshot(named, "vu"), I8, I8, 2, 8) == 8 + 512 + (40 + 2) * 17


@pytest.mark.parametrize("b_stride0, pairs", [(0, 10), (8, 30), (-8, 30)])
def test_vu_faffine_duration(b_stride0, pairs):
    """One byte an output, and 8 bytes a (scale, offset) pair: once a row of n0 when b_stride0 is 0 (the
    channel's pair broadcast), else once an output."""
    named = {"vu.n0": 3, "vu.n1": 2, "vu.n2": 5, "vu.b_stride0": b_stride0, "vu.b_stride1": 8}
    got = vu_duration(VU_OPS["vu.faffine"], ref.snapshot(named, "vu"), I8, I8, 64, 8)
    assert got == 8 + -(-(30 + 8 * pairs) // 64)


# ---------------------------------------------------------------- the float ops against compiler.reference
# The kernel's float32 arithmetic (nnpsim/units/f32.py) bit for bit against the compiler's numpy model of
# onnxruntime (compiler/semantics.py), on exhaustive int8 pairs, ties and large accumulators.

F32 = np.float32


def _run_vu(mnemonic, named, mem, rd, ra, rb=0, sdt=I8):
    flat, base, size = ref.pack({VBUF0: mem})
    err = np.zeros(8, dtype=np.int64)
    rc = vu_exec(flat, base, size, 0, VU_OPS[mnemonic], rd, ra, rb, sdt, I8, ref.snapshot(named, "vu"), err)
    assert rc == errors.OK, err
    return flat[base[VBUF0]:base[VBUF0] + mem.size]


def test_f32_helpers_match_numpy():
    from compiler.reference import fma_f32
    from nnpsim.units import f32
    rng = np.random.default_rng(3)
    a = np.concatenate([rng.integers(-255, 256, 3000), [1 + 2.0**-23] * 4]).astype(F32)
    b = np.concatenate([2.0 ** rng.uniform(-20, 10, 3000), np.array([64, -64, 64, -64]) * (1 - 2.0**-23)]).astype(F32)
    c = np.concatenate([rng.uniform(-1e4, 1e4, 1500), rng.integers(-300, 300, 1500) + 0.5,
                        [2.0**30, 2.0**30 + 128, 2.0**30 + 128, 2.0**30 + 256]]).astype(F32)
    want = fma_f32(a, b, c)
    got = np.array([f32.fma32(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)], F32)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    ints = np.concatenate([rng.integers(-2**62, 2**62, 500), [2**24 + 1, 2**24 + 3, -(2**25 + 2), 2**31 - 1]])
    got = np.array([f32.i2f(int(v)) for v in ints], F32)
    np.testing.assert_array_equal(got, ints.astype(F32))
    for u in rng.integers(0, 2**32, 2000).tolist() + [1, 0x7F7FFFFF, 0x80000001, 0x00400000]:
        x = np.array([u], np.uint32).view(F32)[0]
        if np.isfinite(x):
            assert f32.value(u) == float(x)
        assert f32.finite(u) == bool(np.isfinite(x))
        assert f32.positive_finite(u) == bool(np.isfinite(x) and x > 0)


@pytest.mark.parametrize("sdt", [I8, I32])
@pytest.mark.parametrize("scale", [0.5, 2.0**-10, 0.0123, 3.0, 2.0**-31])
def test_vu_requant_f_matches_semantics(sdt, scale):
    from compiler.reference import requant_f32
    rng = np.random.default_rng(4)
    if sdt == I8:
        x = np.arange(-128, 128)
    else:
        x = np.concatenate([np.arange(-300, 301), [2**24 + 1, 2**24 + 3, 2**25 + 2, 2**31 - 1, -2**31],
                            rng.integers(-2**31, 2**31, 400)])
    nbytes = 1 if sdt == I8 else 4
    for zp, za, lo, hi in [(0, 0, -128, 127), (-37, 5, -128, 127), (100, -3, 10, 120)]:
        mem = np.zeros(-(-x.size * 5 // 64) * 64 + 64, np.uint8)
        mem[:x.size * nbytes] = x.astype("<i1" if sdt == I8 else "<i4").view(np.uint8)
        named = {"vu.n0": x.size, "vu.a_stride0": nbytes, "vu.d_stride0": 1, "vu.fscale": bits(scale),
                 "vu.za": za, "vu.zp_out": zp, "vu.lo": lo, "vu.hi": hi}
        out = _run_vu("vu.requant.f", named, mem, x.size * nbytes, 0, sdt=sdt)
        got = out[x.size * nbytes:x.size * (nbytes + 1)].view(np.int8)
        np.testing.assert_array_equal(got, requant_f32(x.astype(np.int64) - za, F32(scale), zp, lo, hi))


PAIRS = (np.repeat(np.arange(-128, 128), 256).astype(np.int8), np.tile(np.arange(-128, 128), 256).astype(np.int8))
SCALE_SETS = [(0.05, 0.031, 0.07, 3, -9, 11), (0.3, 0.2, 0.11, -100, 42, -7), (0.0123, 0.0456, 0.0391, 17, 5, -60),
              (0.5, 0.25, 0.5, 0, 0, 0)]


def _pairs_mem() -> np.ndarray:
    mem = np.zeros(3 * 65536, np.uint8)
    mem[:65536], mem[65536:131072] = PAIRS[0].view(np.uint8), PAIRS[1].view(np.uint8)
    return mem


@pytest.mark.parametrize("sa, sb, sy, za, zb, zp", SCALE_SETS)
def test_vu_fadd_and_fmul_on_every_int8_pair(sa, sb, sy, za, zb, zp):
    """All 65536 (a, b) pairs: vu.fadd and vu.fmul equal compiler.reference' add_f32 / mul_f32."""
    from compiler.reference import add_f32, add_f32_params, mul_f32, mul_f32_ratio
    a, b = PAIRS
    ra, rb, c = add_f32_params(F32(sa), F32(sb), F32(sy), za, zb, zp)
    named = {"vu.n0": 256, "vu.n1": 256, "vu.a_stride0": 1, "vu.a_stride1": 256, "vu.b_stride0": 1,
             "vu.b_stride1": 256, "vu.d_stride0": 1, "vu.d_stride1": 256, "vu.fscale": bits(ra),
             "vu.fscale_b": bits(rb), "vu.fbias": bits(c)}
    out = _run_vu("vu.fadd", named, _pairs_mem(), 131072, 0, 65536)
    np.testing.assert_array_equal(out[131072:].view(np.int8), add_f32(a, b, za, zb, F32(sa), F32(sb), F32(sy),
                                                                     zp, -128, 127))
    sy = F32(sy * 50)
    named.update({"vu.fscale": bits(mul_f32_ratio(F32(sa), F32(sb), sy)), "vu.za": za, "vu.zb": zb,
                  "vu.zp_out": zp, "vu.lo": -100, "vu.hi": 90})
    out = _run_vu("vu.fmul", named, _pairs_mem(), 131072, 0, 65536)
    np.testing.assert_array_equal(out[131072:].view(np.int8), mul_f32(a, b, za, zb, F32(sa), F32(sb), sy, zp,
                                                                     -100, 90))


@pytest.mark.parametrize("mnemonic", ["vu.fsub", "vu.fdiv", "vu.fmax", "vu.fmin"])
@pytest.mark.parametrize("sa, sb, sy, za, zb, zp", SCALE_SETS[:3])
def test_vu_fbin_on_every_int8_pair(mnemonic, sa, sb, sy, za, zb, zp):
    """All 65536 (a, b) pairs, b = zb (a zero divisor) included: vu.fsub ... vu.fmin equal
    compiler.reference's qdq_binary_f32 (which tests/compiler/test_reference_ort.py holds to onnxruntime)."""
    from compiler.reference import qdq_binary_f32
    a, b = PAIRS
    sy = sy * 20 if mnemonic == "vu.fdiv" else sy        # quotients mostly inside int8
    named = {"vu.n0": 256, "vu.n1": 256, "vu.a_stride0": 1, "vu.a_stride1": 256, "vu.b_stride0": 1,
             "vu.b_stride1": 256, "vu.d_stride0": 1, "vu.d_stride1": 256, "vu.fscale": bits(sa),
             "vu.fscale_b": bits(sb), "vu.fbias": bits(sy), "vu.za": za, "vu.zb": zb, "vu.zp_out": zp,
             "vu.lo": -120, "vu.hi": 125}
    out = _run_vu(mnemonic, named, _pairs_mem(), 131072, 0, 65536)
    want = qdq_binary_f32(mnemonic[4:], a, b, za, zb, F32(sa), F32(sb), F32(sy), zp, -120, 125)
    np.testing.assert_array_equal(out[131072:].view(np.int8), want)
    assert len(np.unique(want)) > 50


@pytest.mark.parametrize("sa, sb, sy, za, zb, zp", SCALE_SETS[:3])
def test_vu_fsub_with_a_negative_b_scale_is_the_float_add(sa, sb, sy, za, zb, zp):
    """All 65536 (a, b) pairs: vu.fsub with fscale_b = -sb equals qdq_binary_f32's float add with sb (fa + fb
    rounded once; tests/compiler/test_reference_ort.py holds it to onnxruntime's unfused Add)."""
    from compiler.reference import qdq_binary_f32
    a, b = PAIRS
    named = {"vu.n0": 256, "vu.n1": 256, "vu.a_stride0": 1, "vu.a_stride1": 256, "vu.b_stride0": 1,
             "vu.b_stride1": 256, "vu.d_stride0": 1, "vu.d_stride1": 256, "vu.fscale": bits(sa),
             "vu.fscale_b": bits(-F32(sb)), "vu.fbias": bits(sy), "vu.za": za, "vu.zb": zb, "vu.zp_out": zp,
             "vu.lo": -120, "vu.hi": 125}
    out = _run_vu("vu.fsub", named, _pairs_mem(), 131072, 0, 65536)
    want = qdq_binary_f32("qdq_add", a, b, za, zb, F32(sa), F32(sb), F32(sy), zp, -120, 125)
    np.testing.assert_array_equal(out[131072:].view(np.int8), want)
    assert len(np.unique(want)) > 50
    assert not np.array_equal(want, qdq_binary_f32("sub", a, b, za, zb, F32(sa), F32(sb), F32(sy), zp, -120, 125))


def test_vu_fdiv_by_zero_and_overflow():
    """0 / 0 is nan: the low end (-128, then lo); x / 0 and an overflowed dequantisation are +-inf: clamped."""
    mem = np.zeros(64, np.uint8)
    mem[0:4] = np.array([0, 5, -5, 7], np.int8).view(np.uint8)
    mem[8:12] = np.array([0, 0, 0, 1], np.int8).view(np.uint8)
    named = {"vu.n0": 4, "vu.a_stride0": 1, "vu.b_stride0": 1, "vu.d_stride0": 1, "vu.fscale": bits(1.0),
             "vu.fscale_b": bits(1.0), "vu.fbias": bits(1.0), "vu.zp_out": 3, "vu.lo": -100, "vu.hi": 127}
    out = _run_vu("vu.fdiv", named, mem, 16, 0, 8)
    assert list(out[16:20].view(np.int8)) == [-100, 127, -100, 10]
    named.update({"vu.fscale": bits(3e38), "vu.n0": 1})
    mem[0] = 100       # 100 * 3e38 is +inf in float32; inf / 1 = inf
    assert list(_run_vu("vu.fsub", named, mem, 16, 0, 8)[16:17].view(np.int8)) == [127]


@pytest.mark.parametrize("sx, sy, za, zp", [(0.05, 0.07, 3, -11), (0.0123, 0.0391, -100, -128), (0.5, 0.25, 0, 0)])
def test_vu_faffine_on_every_int8_code(sx, sy, za, zp):
    """Every int8 code in each of 37 channels, each with its own (scale, offset) pair (zeros and one huge
    scale among them): vu.faffine equals compiler.reference's channel_affine_f32 (which
    tests/compiler/test_reference_ort.py holds to onnxruntime's BatchNormalization)."""
    from compiler.reference import channel_affine_f32
    rng = np.random.default_rng(int(sx * 1000))
    c = 37
    ns = rng.normal(0, 1.5, c).astype(F32)
    nb = rng.normal(0, 4, c).astype(F32)
    ns[:3], nb[:3] = (0.0, -0.0, 3e38), (0.0, 1.0, -2.5)
    x = np.tile(np.arange(-128, 128, dtype=np.int8), c)
    mem = np.zeros(2 * x.size + 8 * c, np.uint8)
    mem[:x.size] = x.view(np.uint8)
    table = x.size
    mem[table:table + 8 * c] = np.stack([ns, nb], axis=1).astype("<f4").ravel().view(np.uint8)
    named = {"vu.n0": 256, "vu.n1": c, "vu.a_stride0": 1, "vu.a_stride1": 256, "vu.b_stride0": 0,
             "vu.b_stride1": 8, "vu.d_stride0": 1, "vu.d_stride1": 256, "vu.fscale": bits(sx),
             "vu.fbias": bits(sy), "vu.za": za, "vu.zp_out": zp, "vu.lo": -120, "vu.hi": 126}
    out = _run_vu("vu.faffine", named, mem, table + 8 * c, 0, table)
    want = channel_affine_f32(x.reshape(1, c, 256), za, F32(sx), ns, nb, F32(sy), zp, -120, 126)
    np.testing.assert_array_equal(out[table + 8 * c:].view(np.int8), want.ravel())
    assert len(np.unique(want)) > 100


def test_vu_faffine_refuses_a_non_finite_pair():
    mem = np.zeros(512, np.uint8)
    mem[64:88] = np.array([0.5, 1.0, 2.0, float("inf"), 0.25, 0.0], "<f4").view(np.uint8)   # pair 1's offset
    _expect("vu.faffine", {"vu.n0": 3, "vu.a_stride0": 1, "vu.b_stride0": 8, "vu.fscale": bits(1.0),
                           "vu.fbias": bits(1.0)}, errors.BAD_PARAM, {1: 32, 2: 76, 3: 79, 5: bits(float("inf")), 6: 1},
            mem=mem, rd=128, ra=0, rb=64)


def test_vu_fadd_out_of_int32_range_gives_minus_128():
    """cvtps2dq's INT_MIN: a sum of 2**31 or more (or nan) saturates to -128, not 127."""
    mem = np.zeros(64, np.uint8)
    mem[0], mem[1], mem[2] = 100, 1, 1
    named = {"vu.n0": 2, "vu.a_stride0": 1, "vu.b_stride0": 1, "vu.d_stride0": 1,
             "vu.fscale": bits(2.0**25), "vu.fscale_b": bits(1.0), "vu.fbias": bits(0.0)}
    out = _run_vu("vu.fadd", named, mem, 8, 0, 1)
    assert list(out[8:10].view(np.int8)) == [-128, 127]      # 100 * 2**25 + 1 > 2**31; 1 * 2**25 + 1 fits


@pytest.mark.parametrize("mnemonic", ["vu.pool.favg", "vu.slide.favg"])
def test_vu_pool_favg_matches_semantics(mnemonic):
    from compiler.reference import avg_pool2d_f32
    rng = np.random.default_rng(6)
    h, w, k, s = 9, 11, (3, 2), (2, 1)
    x = rng.integers(-128, 128, (1, 1, h, w)).astype(np.int8)
    oh, ow = (h - k[0]) // s[0] + 1, (w - k[1]) // s[1] + 1
    mem = np.zeros(512, np.uint8)
    mem[:h * w] = x.ravel().view(np.uint8)
    mem[256:260] = np.array([k[0] * k[1]], "<i4").view(np.uint8)
    for sx, sy, zx, zp in [(0.05, 0.07, 3, -11), (0.25, 0.5, -20, -30), (0.0173, 0.0091, 50, 0)]:
        named = {"vu.n0": ow, "vu.n1": oh, "vu.a_stride0": s[1], "vu.a_stride1": s[0] * w, "vu.d_stride0": 1,
                 "vu.d_stride1": ow, "vu.win_h": k[0], "vu.win_w": k[1], "vu.win_stride_h": w,
                 "vu.win_stride_w": 1, "vu.za": zx, "vu.zp_out": zp, "vu.fscale": bits(sx), "vu.fscale_b": bits(sy)}
        out = _run_vu(mnemonic, named, mem, 128, 0, 256)
        want = avg_pool2d_f32(x, k, s, (0, 0, 0, 0), True, zx, F32(sx), F32(sy), zp)
        np.testing.assert_array_equal(out[128:128 + oh * ow].view(np.int8), want.ravel())
        assert len(np.unique(want)) > 10


@pytest.mark.parametrize("h, w, phase", [(7, 7, 0), (7, 7, 3), (1, 1, 2), (2, 3, 1), (13, 17, 2), (3, 5, 0),
                                          (28, 28, 1)])
def test_vu_pool_fmean_matches_semantics(h, w, phase):
    """vu.pool.fmean over planes of several channels equals reference.mean_sum_f32 (onnxruntime's ReduceMean
    order) with plane k in phase (phase + k * h * w) mod 4, then QuantizeLinear, on every output."""
    from compiler.reference import MEAN_LANES, dequantize_f32, mean_sum_f32, quantize_f32
    rng = np.random.default_rng(h * w + phase)
    cc = 9
    x = rng.integers(-128, 128, (cc, h * w)).astype(np.int8)
    mem = np.zeros(cc * h * w + 64, np.uint8)
    mem[:x.size] = x.ravel().view(np.uint8)
    out_at = x.size + 8
    for sx, sy, zx, zp in [(0.05, 0.07, 3, -11), (0.0173, F32(0.0173 * 2 / (h * w)), 50, 0), (0.25, 0.5, -20, 100)]:
        named = {"vu.n0": cc, "vu.a_stride0": h * w, "vu.d_stride0": 1, "vu.win_h": h, "vu.win_w": w,
                 "vu.win_stride_h": w, "vu.win_stride_w": 1, "vu.za": zx, "vu.zp_out": zp, "vu.fscale": bits(sx),
                 "vu.fscale_b": bits(sy), "vu.mode": phase}
        out = _run_vu("vu.pool.fmean", named, mem, out_at, 0)
        sums = mean_sum_f32(dequantize_f32(x, sx, zx), (phase + np.arange(cc) * h * w) % MEAN_LANES)
        want = quantize_f32(sums / F32(h * w), sy, zp)
        np.testing.assert_array_equal(out[out_at:out_at + cc].view(np.int8), want)


@pytest.mark.parametrize("h, w, relu", [(7, 7, 1), (7, 7, 0), (1, 1, 1), (2, 3, 0), (5, 13, 1), (3, 1, 1)])
def test_vu_pool_faffavg_matches_semantics(h, w, relu):
    """vu.pool.faffavg over planes of several channels, each with its (s, c) pair, equals
    reference.batch_norm_global_avg_f32 (onnxruntime's BatchNormalization, Relu, GlobalAveragePool,
    QuantizeLinear) on every output: random planes, and cancelling ones whose result depends on the sum's order."""
    from compiler.reference import batch_norm_global_avg_f32, global_sum_f32
    from tests.helpers.bn_tail import cancelling_planes, large_pairs
    rng = np.random.default_rng(h * w + relu)
    cc = 11
    cases = [(rng.integers(-128, 128, (1, cc, h, w)).astype(np.int8), rng.normal(0, 2, cc).astype(F32),
              rng.normal(0, 2, cc).astype(F32), 0.05, 0.04, 3, -7),
             (cancelling_planes(rng, 1, cc, h, w), *large_pairs(rng, cc), 0.05, 0.01, 0, 0)]
    for x, ns, nb, sx, sy, zx, zp in cases:
        mem = np.zeros(x.size + 8 * cc + 64, np.uint8)
        mem[:x.size] = x.ravel().view(np.uint8)
        table = -(-x.size // 8) * 8
        mem[table:table + 8 * cc] = np.stack([ns, nb], 1).astype("<f4").view(np.uint8).ravel()
        out_at = table + 8 * cc
        named = {"vu.n0": cc, "vu.a_stride0": h * w, "vu.d_stride0": 1, "vu.b_stride0": 8, "vu.win_h": h,
                 "vu.win_w": w, "vu.win_stride_h": w, "vu.win_stride_w": 1, "vu.za": zx, "vu.zp_out": zp,
                 "vu.fscale": bits(sx), "vu.fscale_b": bits(sy), "vu.mode": relu}
        out = _run_vu("vu.pool.faffavg", named, mem, out_at, 0, table)
        want = batch_norm_global_avg_f32(x, zx, sx, ns, nb, bool(relu), sy, zp)
        np.testing.assert_array_equal(out[out_at:out_at + cc].view(np.int8), want.ravel())
    if h * w >= 25:     # a large cancelling plane tells MLAS's order from a plain left-to-right sum
        u = (x.reshape(cc, h * w).astype(F32) * F32(sx)) * ns[:, None] + nb[:, None]
        plain = np.add.accumulate(u, axis=1, dtype=F32)[:, -1]
        assert (plain != global_sum_f32(u)).sum() > cc // 2


@pytest.mark.parametrize("mnemonic, named, fields", [
    ("vu.pool.faffavg", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.mode": 2}, {4: 95, 5: 2, 6: 1}),
    ("vu.pool.faffavg", {"vu.fscale": bits(1.0), "vu.fscale_b": 0}, {4: 93}),
    ("vu.requant.f", {"vu.fscale": 0}, {4: 92, 5: 0}),
    ("vu.pool.fmean", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.mode": 4}, {4: 95, 5: 4, 6: 3}),
    ("vu.requant.f", {"vu.fscale": bits(-0.5)}, {4: 92}),
    ("vu.fmul", {"vu.fscale": bits(float("inf"))}, {4: 92}),
    ("vu.fadd", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(float("nan"))}, {4: 93}),
    ("vu.fadd", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.fbias": bits(float("-inf"))}, {4: 94}),
    ("vu.pool.favg", {"vu.fscale": bits(1.0)}, {4: 93, 5: 0}),
    ("vu.requant.f", {"vu.fscale": bits(1.0), "vu.zp_out": 128}, {4: 89, 5: 128}),
    ("vu.requant.fpc", {"vu.zp_out": -129}, {4: 89, 5: -129}),
    ("vu.fadd", {"vu.lo": 3, "vu.hi": 2}, {4: 90, 5: 3, 6: 2}),
    ("vu.fadd", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.mode": 2}, {4: 95, 5: 2}),
    ("vu.fmul", {"vu.fscale": bits(1.0), "vu.mode": -1}, {4: 95, 5: -1}),
    ("vu.fsub", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.fbias": 0}, {4: 94}),
    ("vu.fsub", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(-0.0), "vu.fbias": bits(1.0)}, {4: 93}),
    ("vu.fsub", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(float("-inf")), "vu.fbias": bits(1.0)}, {4: 93}),
    ("vu.faffine", {"vu.fscale": bits(1.0), "vu.fbias": bits(-2.0)}, {4: 94}),
    ("vu.faffine", {"vu.fscale": bits(float("nan")), "vu.fbias": bits(1.0)}, {4: 92}),
    ("vu.fdiv", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(-1.0), "vu.fbias": bits(1.0)}, {4: 93}),
    ("vu.fmax", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.fbias": bits(float("inf"))}, {4: 94}),
    ("vu.fmin", {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.fbias": bits(1.0), "vu.zp_out": 200},
     {4: 89, 5: 200}),
])
def test_vu_float_bad_params(mnemonic, named, fields):
    _expect(mnemonic, named, errors.BAD_PARAM, fields)


def test_vu_fadd_does_not_check_zp_out_it_does_not_read():
    mem = np.zeros(64, np.uint8)
    named = {"vu.fscale": bits(1.0), "vu.fscale_b": bits(1.0), "vu.zp_out": 1000, "vu.za": 2**32}
    assert _snapshot_case("vu.fadd", named, mem, rd=8, ra=0, rb=1)[0] == errors.OK


def test_vu_requant_fpc_refuses_a_bad_table_entry():
    mem = np.zeros(512, np.uint8)
    mem[:16] = np.array([5, 6, 7, 8], "<i4").view(np.uint8)
    mem[64:76] = np.array([0.5, 0.0, 0.25], "<f4").view(np.uint8)    # the second scale is 0.0
    _expect("vu.requant.fpc", {"vu.n0": 3, "vu.a_stride0": 4, "vu.b_stride0": 4}, errors.BAD_PARAM,
            {1: 32, 2: 68, 3: 71, 5: 0, 6: 1}, mem=mem, rd=128, ra=0, rb=64, sdt=I32)


# ---------------------------------------------------------------- the sliding-window engine against numpy pooling
# vu.slide.* on random planes, windows, steps, row and column pitches and count tables, through the jitted
# kernel, against a numpy pooling model written here (sums of the windowed view; the float form's float32 sum
# in rows-then-columns order); and its cycles against the engine's formula written out.

def _windows(planes: np.ndarray, k: tuple[int, int], s: tuple[int, int]) -> np.ndarray:
    """[C, oh, ow, kh, kw] windows of [C, H, W] planes at steps s."""
    v = np.lib.stride_tricks.sliding_window_view(planes, k, axis=(1, 2))
    return v[:, ::s[0], ::s[1]]


def _slide_model(mnemonic: str, win: np.ndarray, counts: np.ndarray, q: dict) -> np.ndarray:
    """What each vu.slide.* output is, from its windows [C, oh, ow, kh, kw] and counts [oh, ow]."""
    if mnemonic == "vu.slide.acc":
        return win.astype(np.int64).sum(axis=(3, 4))
    if mnemonic == "vu.slide.avg":
        s = win.astype(np.int64).sum(axis=(3, 4))
        q_ = (np.abs(s) + counts // 2) // counts
        return np.clip(np.where(s >= 0, q_, -q_), -128, 127)
    total = np.zeros(win.shape[:3], F32)
    for wh in range(win.shape[3]):
        for ww in range(win.shape[4]):
            total = total + F32(q["sx"]) * (win[..., wh, ww].astype(np.int64) - q["za"]).astype(F32)
    t = total / counts.astype(F32) / F32(q["sy"]) + F32(q["zp"])
    return np.clip(np.clip(np.rint(t), -128, 127), q["lo"], q["hi"]).astype(np.int64)


@st.composite
def slide_cases(draw):
    mnemonic = draw(st.sampled_from(ref.SLIDE_OPS))
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    c = draw(st.integers(1, 4))
    hp, wp = kh + draw(st.integers(0, 10)), kw + draw(st.integers(0, 12))   # padded plane (the DMA writes the halo)
    col = draw(st.integers(1, 2))                                            # column pitch (win_stride_w)
    row = wp * col + draw(st.integers(0, 5))                                 # row pitch (win_stride_h)
    plane = row * hp + draw(st.integers(0, 7))
    per_position = draw(st.booleans())
    q = {"za": draw(st.integers(-128, 127)), "zp": draw(st.integers(-128, 127)),
         "sx": float(F32(2.0 ** draw(st.floats(-7, 0)))), "sy": float(F32(2.0 ** draw(st.floats(-7, 0)))),
         "lo": draw(st.integers(-128, 0)), "hi": draw(st.integers(0, 127))}
    return mnemonic, (kh, kw), (sh, sw), c, (hp, wp), (col, row, plane), per_position, q, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=300, deadline=None)
@given(slide_cases())
def test_vu_slide_matches_numpy_pooling(case):
    from nnpsim.units.vu import vu_duration
    mnemonic, k, s, c, (hp, wp), (col, row, plane), per_position, q, seed = case
    rng = np.random.default_rng(seed)
    oh, ow = (hp - k[0]) // s[0] + 1, (wp - k[1]) // s[1] + 1
    nonzero = rng.integers(1, 128, (c, hp, wp)) * rng.choice([-1, 1], (c, hp, wp))
    planes = nonzero.astype(np.int8)
    counts = (rng.integers(1, 2 * k[0] * k[1] + 2, (oh, ow)) if per_position
              else np.full((oh, ow), rng.integers(1, k[0] * k[1] + 1)))
    a_size = c * plane
    d_bytes = 4 if mnemonic == "vu.slide.acc" else 1
    rd = -(-a_size // 4) * 4
    rb = rd + -(-c * oh * ow * d_bytes // 4) * 4
    mem = rng.integers(0, 256, rb + 4 * oh * ow + 64, dtype=np.uint8)
    for ci in range(c):
        for hi in range(hp):
            at = ci * plane + hi * row
            mem[at:at + wp * col:col] = planes[ci, hi].view(np.uint8)
    mem[rb:rb + 4 * oh * ow] = counts.astype("<i4").ravel().view(np.uint8)
    named = {"vu.n0": ow, "vu.n1": oh, "vu.n2": c, "vu.a_stride0": s[1] * col, "vu.a_stride1": s[0] * row,
             "vu.a_stride2": plane, "vu.d_stride0": d_bytes, "vu.d_stride1": ow * d_bytes,
             "vu.d_stride2": oh * ow * d_bytes, "vu.b_stride0": 4 if per_position else 0,
             "vu.b_stride1": 4 * ow if per_position else 0, "vu.win_h": k[0], "vu.win_w": k[1],
             "vu.win_stride_h": row, "vu.win_stride_w": col, "vu.za": q["za"], "vu.zp_out": q["zp"],
             "vu.fscale": bits(q["sx"]), "vu.fscale_b": bits(q["sy"]), "vu.lo": q["lo"], "vu.hi": q["hi"]}
    if mnemonic != "vu.slide.favg":
        named.update({"vu.lo": -128, "vu.hi": 127})
    out = _run_vu(mnemonic, named, mem.copy(), rd, 0, rb)
    got = out[rd:rd + c * oh * ow * d_bytes].view("<i4" if d_bytes == 4 else np.int8).reshape(c, oh, ow)
    want = _slide_model(mnemonic, _windows(planes, k, s), counts, q)
    np.testing.assert_array_equal(got, want)
    # cycles: each plane's rows x columns once, each output's d once, b once an output (once a command
    # when it is one count), the float form its adds (every window element but the first) over three
    # float adders a lane when that is more
    rows = min(oh * k[0], (oh - 1) * s[0] + k[0])
    cols = min(ow * k[1], (ow - 1) * s[1] + k[1])
    n_out = c * oh * ow
    stream = c * rows * cols + n_out * d_bytes + (0 if mnemonic == "vu.slide.acc" else
                                                  4 * (n_out if per_position else c))
    work = max(stream, -(-n_out * (k[0] * k[1] - 1) // 3)) if mnemonic == "vu.slide.favg" else stream
    assert vu_duration(VU_OPS[mnemonic], ref.snapshot(named, "vu"), I8, I8, 64, 8) == 8 + -(-work // 64)


@pytest.mark.parametrize("named, fields", [
    ({"vu.win_stride_w": 0, "vu.win_stride_h": 8, "vu.a_stride0": 1, "vu.a_stride1": 8}, {4: 83, 5: 0}),
    ({"vu.win_stride_w": 1, "vu.win_stride_h": -8, "vu.a_stride0": 1, "vu.a_stride1": 8}, {4: 82, 5: -8}),
    ({"vu.win_stride_w": 2, "vu.win_stride_h": 8, "vu.a_stride0": 3, "vu.n0": 2}, {4: 72, 5: 3, 6: 2}),
    ({"vu.win_stride_w": 2, "vu.win_stride_h": 8, "vu.a_stride0": 0, "vu.n0": 2}, {4: 72, 5: 0, 6: 2}),
    ({"vu.win_stride_w": 1, "vu.win_stride_h": 8, "vu.a_stride1": 12, "vu.n1": 2}, {4: 73, 5: 12, 6: 8}),
    ({"vu.win_stride_w": 1, "vu.win_stride_h": 8, "vu.a_stride0": 1, "vu.a_stride1": 8, "vu.n0": 1023,
      "vu.win_w": 3}, {4: 64, 5: 1023, 6: 1025}),
    ({"vu.win_stride_w": 1, "vu.win_stride_h": 8, "vu.a_stride0": 1, "vu.a_stride1": 8, "vu.n0": 500,
      "vu.win_h": 9}, {4: 80, 5: 9, 6: 500}),
])
@pytest.mark.parametrize("mnemonic", ref.SLIDE_OPS)
def test_vu_slide_refuses_commands_off_its_grid(mnemonic, named, fields):
    """Window strides >= 1, a_stride0 / a_stride1 whole steps of them, and the columns inside the column
    sums (1024) and the line buffer (win_h x columns <= 4096): BAD_PARAM naming the parameter and its value."""
    floats = {"vu.fscale": bits(0.5), "vu.fscale_b": bits(0.5)} if mnemonic == "vu.slide.favg" else {}
    _expect(mnemonic, {**named, **floats}, errors.BAD_PARAM, fields)
