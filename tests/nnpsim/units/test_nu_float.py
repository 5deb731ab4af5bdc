"""The NU's float32 mode (nu.fconv, nu.fconv.rq, nu.fdwconv) against tests/helpers/mlas.py, onnxruntime's float
Conv of a QDQ group modelled bit for bit: random shapes whose K is not a multiple of the slice, N > 1, grouped and
depthwise, strides and pads, the input channels split over several commands (the (total, part) state carried in
ABUF), and the whole machine running the commands (timing, MACs, the race checker's footprints)."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from nnpsim import errors
from nnpsim.simulator import SimError, Simulator
from nnpsim.timing import NU_F32_PASSES, nu_conv_cycles, nu_fconv_cycles, nu_fdwconv_cycles
from nnpsim.units.nu_float import nu_fconv, nu_fdwconv
from tests import isa_reference as ref
from tests.helpers import mlas
from tests.helpers.machine import ins, program, setp_all, small_config

F32 = np.float32
IBUF, WBUF, ABUF, VBUF = 8, 16, 24, 32
CROPS = ("nu.f_top", "nu.f_left", "nu.f_bottom", "nu.f_right")


def _problem(rng, c: int, o: int, group: int, k: tuple[int, int], relu: bool) -> dict:
    """A QDQ conv's int8 operands and quantisation parameters, as tests.helpers.mlas.qdq_conv takes them."""
    ws = rng.uniform(0.002, 0.01, o).astype(F32)
    cpg = c // group
    return {"xs": F32(rng.uniform(0.02, 0.08)), "xz": int(rng.integers(-20, 20)),
            "w": rng.integers(-127, 128, (o, cpg, *k)).astype(np.int8), "ws": ws,
            "bias": rng.integers(-3000, 3000, o).astype(np.int32), "bias_scale": F32(0.05) * ws,
            "ys": F32(0.04 * np.sqrt(cpg * k[0] * k[1])), "yz": int(rng.integers(-10, 10)), "relu": relu}


def _expected(x: np.ndarray, q: dict, stride, pads, group: int, dil=(1, 1)) -> np.ndarray:
    return mlas.qdq_conv(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"], q["ys"], q["yz"],
                         stride=stride, pads=pads, group=group, lo=0.0 if q["relu"] else -np.inf, dil=dil)[0]


def _ibuf(rng, x: np.ndarray, zp: int, pads, rows: int, lanes, cut=(0, 0, 0, 0)) -> np.ndarray:
    """IBUF [blocks][Hp][Wp][rows] int8 of x [C, H, W] padded with zp, less `cut` (top, left, bottom, right) rows and
    columns of that padded plane; lanes(cb, r) -> the channel there or -1 (random bytes: the kernels must not read
    them into a result)."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (pads[0], pads[2]), (pads[1], pads[3])), constant_values=zp)
    xp = xp[:, cut[0]:xp.shape[1] - cut[2], cut[1]:xp.shape[2] - cut[3]]
    blocks = max(cb for cb, _ in lanes) + 1
    buf = rng.integers(-128, 128, (blocks, xp.shape[1], xp.shape[2], rows))
    for cb, r in lanes:
        ch = lanes[(cb, r)]
        if ch >= 0:
            buf[cb, :, :, r] = xp[ch]
    return buf.astype(np.int8).view(np.uint8).reshape(-1)


def _fconv_weights(rng, wf: np.ndarray, group: int, cbs: range, o_blocks: int, rows: int, cols: int) -> np.ndarray:
    """WBUF [out_cb][cb in cbs][kh][kw][rows][cols] float32: wf where the lane's channel lies in the column's group,
    random elsewhere (lanes the kernel skips)."""
    o, cpg, kh, kw = wf.shape
    opg = o // group
    out = rng.normal(0, 1, (o_blocks, len(cbs), kh, kw, rows, cols)).astype(F32)
    for ob in range(o_blocks):
        for c in range(cols):
            oc = ob * cols + c
            for n, cb in enumerate(cbs):
                for r in range(rows):
                    rel = cb * rows + r - (oc // opg) * cpg
                    if oc < o and 0 <= rel < cpg:
                        out[ob, n, :, :, r, c] = wf[oc, rel]
    return out.reshape(-1)


def _table(bf: np.ndarray, ys, o_blocks: int, cols: int) -> np.ndarray:
    """The (bias, scale, unused) float32 entries per column, padding columns (0, ys)."""
    t = np.zeros((o_blocks * cols, 3), F32)
    t[:len(bf), 0] = bf
    t[:, 1] = ys
    return t.reshape(-1)


def _clamp(q: dict) -> dict:
    return {"nu.rq_zp_out": q["yz"], "nu.rq_lo": q["yz"] if q["relu"] else -128, "nu.rq_hi": 127}


def _cut(crop, dil) -> tuple[int, int, int, int]:
    """The padded input's rows and columns a window less `crop` kernel rows and columns never reads."""
    return crop[0] * dil[0], crop[1] * dil[1], crop[2] * dil[0], crop[3] * dil[1]


def _run_fconv(x, q, stride, pads, group, rows, cols, chunks, seed, step=None, final=True, dil=(1, 1),
               crop=(0, 0, 0, 0)):
    """The conv as nu.fconv commands over chunks of input blocks, the last nu.fconv.rq (f_step: MLAS's unless
    given), without the `crop` (top, left, bottom, right) kernel rows and columns (nu.f_top ...); its int8
    outputs (final False: every command nu.fconv, and the float32 sums total + part)."""
    rng = np.random.default_rng(seed)
    c, (o, cpg, kh, kw) = x.shape[0], q["w"].shape
    xf, wf, bf = mlas.dequantised(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"])
    n_cb, o_blocks = -(-c // rows), -(-o // cols)
    cut = _cut(crop, dil)
    ib = _ibuf(rng, x, q["xz"], pads, rows, {(cb, r): cb * rows + r if cb * rows + r < c else -1
                                             for cb in range(n_cb) for r in range(rows)}, cut)
    hp, wp = x.shape[1] + pads[0] + pads[2], x.shape[2] + pads[1] + pads[3]
    oh, ow = (hp - (kh - 1) * dil[0] - 1) // stride[0] + 1, (wp - (kw - 1) * dil[1] - 1) // stride[1] + 1
    ih, iw = hp - cut[0] - cut[2], wp - cut[1] - cut[3]
    edges = [0, *chunks, n_cb]
    wk = wf[:, :, crop[0]:kh - crop[2], crop[1]:kw - crop[3]]
    weights = [_fconv_weights(rng, wk, group, range(a, b), o_blocks, rows, cols) for a, b in zip(edges, edges[1:])]
    table = _table(bf, q["ys"], o_blocks, cols)
    w_at = np.cumsum([0] + [w.size * 4 for w in weights])
    state = o_blocks * oh * ow * cols * 8
    mems = {IBUF: ib, WBUF: np.concatenate([*weights, table]).view(np.uint8),
            ABUF: rng.integers(0, 256, state, dtype=np.uint8), VBUF: np.zeros(o_blocks * oh * ow * cols, np.uint8)}
    flat, base, size = ref.pack(mems)
    opg = o // group
    if step is None:
        step = 0 if opg == 1 else mlas.stride_k(oh * ow, cpg * kh * kw)
    for n, (a, b) in enumerate(zip(edges, edges[1:])):
        named = {"nu.in_h": ih, "nu.in_w": iw, "nu.in_cb": b - a, "nu.out_h": oh, "nu.out_w": ow,
                 "nu.out_cb": o_blocks, "nu.k_h": wk.shape[2], "nu.k_w": wk.shape[3], "nu.stride_h": stride[0],
                 "nu.stride_w": stride[1], "nu.dil_h": dil[0], "nu.dil_w": dil[1], "nu.x_zp": q["xz"],
                 "nu.fx_scale": int(q["xs"].view(np.int32)), "nu.f_step": step, "nu.f_c0": a * rows, "nu.f_cpg": cpg,
                 "nu.f_o0": 0, "nu.f_opg": opg, "nu.f_mode": int(n > 0), "nu.rq_table": int(w_at[-1]), "nu.rq_psum": 0,
                 **dict(zip(CROPS, crop)), **_clamp(q)}
        err = np.zeros(8, np.int64)
        rc = nu_fconv(flat, base, size, 0, 0, a * ih * iw * rows, int(w_at[n]), ref.snapshot(named, "nu"),
                      final and n == len(edges) - 2, rows, cols, err)
        assert rc == errors.OK, err
    if not final:
        pairs = flat[base[ABUF]:base[ABUF] + state].view(F32).reshape(o_blocks, oh, ow, cols, 2)
        sums = (pairs[..., 0] + pairs[..., 1]).astype(F32)
        return sums.transpose(0, 3, 1, 2).reshape(o_blocks * cols, oh, ow)[:o]
    y = flat[base[VBUF]:base[VBUF] + size[VBUF]].view(np.int8).reshape(o_blocks, oh, ow, cols)
    return y.transpose(0, 3, 1, 2).reshape(o_blocks * cols, oh, ow)[:o]


@st.composite
def fconv_cases(draw):
    group = draw(st.sampled_from([1, 1, 2, 3]))
    cpg = draw(st.integers(1, 24))
    opg = draw(st.integers(1, 6)) if group > 1 else draw(st.integers(2, 12))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pads = tuple(draw(st.integers(0, 1)) for _ in range(4))
    h, w = draw(st.integers(k[0] + 1, 7)), draw(st.integers(k[1] + 1, 7))
    rows, cols = draw(st.sampled_from([(4, 4), (8, 4), (8, 8), (16, 8)]))
    n_cb = -(-(cpg * group) // rows)
    chunks = sorted(draw(st.sets(st.integers(1, n_cb - 1), max_size=3))) if n_cb > 1 else []
    return group, cpg, opg, k, stride, pads, (h, w), rows, cols, chunks, draw(st.booleans()), draw(st.integers(0, 999))


@settings(max_examples=25, deadline=None)
@given(fconv_cases())
def test_fconv_matches_mlas(case):
    """Every output equals MLAS's: slices of stride_k (N, K) with their FMA chains (M = 1 groups without FMA for one
    filter a group), whatever chunks of input blocks the commands take and wherever a slice ends in them."""
    group, cpg, opg, k, stride, pads, (h, w), rows, cols, chunks, relu, seed = case
    rng = np.random.default_rng(seed)
    q = _problem(rng, cpg * group, opg * group, group, k, relu)
    x = rng.integers(-128, 128, (cpg * group, h, w)).astype(np.int8)
    got = _run_fconv(x, q, stride, pads, group, rows, cols, chunks, seed)
    np.testing.assert_array_equal(got, _expected(x[None], q, stride, pads, group))


@pytest.mark.parametrize("c, o, k, hw, rows, cols, chunks", [
    (40, 6, 3, (5, 10), 8, 4, [1, 4]),      # K = 360, N = 50 < K: slices of 256, one ending inside a chunk
    (300, 5, 1, (10, 20), 16, 8, [7, 11]),  # K = 300, N = 200: slices of 128
    (13, 9, 3, (11, 10), 4, 8, [2]),        # K = 117 < 128: one chain across two commands
])
def test_fconv_long_sums_match_mlas(c, o, k, hw, rows, cols, chunks):
    """Sums long enough for several slices (test_conv.py's shapes, which onnxruntime is checked on), split over
    commands: bit-exact with MLAS, where a single chain (or the integer conv) is not everywhere."""
    rng = np.random.default_rng(c)
    q = _problem(rng, c, o, 1, (k, k), False)
    x = rng.integers(-128, 128, (c, *hw)).astype(np.int8)
    pads = (k // 2,) * 4
    got = _run_fconv(x, q, (1, 1), pads, 1, rows, cols, chunks, c)
    np.testing.assert_array_equal(got, _expected(x[None], q, (1, 1), pads, 1))
    assert len(np.unique(got)) > 20
    xf, wf, _ = mlas.dequantised(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"])
    want = mlas.conv_f32(xf[None], wf, np.zeros(o, F32), pads=pads)[0].view(np.int32)
    sums = _run_fconv(x, q, (1, 1), pads, 1, rows, cols, chunks, c, final=False)
    np.testing.assert_array_equal(sums.view(np.int32), want)          # every bit of every sum
    if c * k * k > 128:          # the order matters: one chain, or slices of another size, differ somewhere
        for other in (c * k * k, 64):
            assert (_run_fconv(x, q, (1, 1), pads, 1, rows, cols, chunks, c, other, False).view(np.int32)
                    != want).any()


def _run_fdw(x, q, stride, pads, rows, cols, seed, dil=(1, 1), crop=(0, 0, 0, 0)):
    """The depthwise conv as one nu.fdwconv (channel cb * cols + c in lane c of block cb) without the `crop` kernel
    rows and columns; its int8 outputs."""
    rng = np.random.default_rng(seed)
    c, (_, _, kh, kw) = x.shape[0], q["w"].shape
    xf, wf, bf = mlas.dequantised(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"])
    n_cb = -(-c // cols)
    cut = _cut(crop, dil)
    ib = _ibuf(rng, x, q["xz"], pads, rows, {(cb, r): cb * cols + r if r < cols and cb * cols + r < c else -1
                                             for cb in range(n_cb) for r in range(rows)}, cut)
    hp, wp = x.shape[1] + pads[0] + pads[2], x.shape[2] + pads[1] + pads[3]
    oh, ow = (hp - (kh - 1) * dil[0] - 1) // stride[0] + 1, (wp - (kw - 1) * dil[1] - 1) // stride[1] + 1
    wk = wf[:, :, crop[0]:kh - crop[2], crop[1]:kw - crop[3]]
    blocks = rng.normal(0, 1, (n_cb, 2 + wk.shape[2] * wk.shape[3], cols)).astype(F32)
    blocks[:, 1] = q["ys"]
    for ch in range(c):
        blocks[ch // cols, 0, ch % cols] = bf[ch]
        blocks[ch // cols, 2:, ch % cols] = wk[ch, 0].reshape(-1)
    mems = {IBUF: ib, WBUF: blocks.reshape(-1).view(np.uint8), VBUF: np.zeros(n_cb * oh * ow * cols, np.uint8),
            ABUF: np.zeros(64, np.uint8)}
    flat, base, size = ref.pack(mems)
    named = {"nu.in_h": hp - cut[0] - cut[2], "nu.in_w": wp - cut[1] - cut[3], "nu.in_cb": n_cb, "nu.out_h": oh,
             "nu.out_w": ow, "nu.k_h": wk.shape[2], "nu.k_w": wk.shape[3], "nu.stride_h": stride[0],
             "nu.stride_w": stride[1], "nu.dil_h": dil[0], "nu.dil_w": dil[1], "nu.x_zp": q["xz"],
             "nu.fx_scale": int(q["xs"].view(np.int32)), **dict(zip(CROPS, crop)), **_clamp(q)}
    err = np.zeros(8, np.int64)
    assert nu_fdwconv(flat, base, size, 0, 0, 0, 0, ref.snapshot(named, "nu"), rows, cols, err) == errors.OK, err
    y = flat[base[VBUF]:base[VBUF] + size[VBUF]].view(np.int8).reshape(n_cb, oh, ow, cols)
    return y.transpose(0, 3, 1, 2).reshape(n_cb * cols, oh, ow)[:c]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 20), st.sampled_from([(3, 3), (5, 5), (1, 3), (2, 2), (1, 1)]), st.integers(1, 2),
       st.integers(0, 2), st.sampled_from([(4, 4), (8, 4), (8, 8)]), st.booleans(), st.integers(0, 999))
def test_fdwconv_matches_mlas(c, k, stride, pad, array, relu, seed):
    """Depthwise: MLAS's M = 1 kernel, the window's products in groups of 4, then 2, then 1, without FMA."""
    rng = np.random.default_rng(seed)
    q = _problem(rng, c, c, c, k, relu)
    x = rng.integers(-128, 128, (c, 6, 7)).astype(np.int8)
    pads = (pad,) * 4
    got = _run_fdw(x, q, (stride, stride), pads, *array, seed)
    np.testing.assert_array_equal(got, _expected(x[None], q, (stride, stride), pads, c))


def _dead(out: int, k: int, stride: int, dil: int, pad: int, size: int) -> tuple[int, int]:
    """The taps before and after those that read an input pixel for some output along one axis (all read padding);
    (k, 0) when none does."""
    live = [j for j in range(k) if any(0 <= o * stride + j * dil - pad < size for o in range(out))]
    return (live[0], k - 1 - live[-1]) if live else (k, 0)


def _crop(x_hw, k, stride, dil, pads) -> tuple[int, int, int, int]:
    """nu.f_top, f_left, f_bottom, f_right of a conv's window: its kernel rows and columns that read only padding."""
    out = [(x_hw[a] + pads[a] + pads[a + 2] - (k[a] - 1) * dil[a] - 1) // stride[a] + 1 for a in (0, 1)]
    (t, b), (l, r) = (_dead(out[a], k[a], stride[a], dil[a], pads[a], x_hw[a]) for a in (0, 1))
    return t, l, b, r


@st.composite
def cropped_cases(draw):
    """Dilated convs over small inputs, ASPP's: windows whose outer taps read only padding."""
    k = (draw(st.sampled_from([3, 5])), draw(st.sampled_from([1, 3, 5])))
    dil = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    pads = tuple(dil[a % 2] * (k[a % 2] // 2) + draw(st.integers(0, 1)) for a in range(4))
    hw = (draw(st.integers(1, 4)), draw(st.integers(1, 5)))
    stride = draw(st.integers(1, 2))
    out = [(hw[a] + pads[a] + pads[a + 2] - (k[a] - 1) * dil[a] - 1) // stride + 1 for a in (0, 1)]
    assume(out[0] * out[1] > 1)         # N = 1 is MLAS's transposed kernel (tests.helpers.mlas)
    t, l, b, r = _crop(hw, k, (stride, stride), dil, pads)
    assume(t + b < k[0] and l + r < k[1])       # some tap reads a pixel
    return k, dil, pads, hw, stride, draw(st.integers(0, 999))


@settings(max_examples=25, deadline=None)
@given(cropped_cases(), st.sampled_from([(1, 6, 4), (1, 130, 3), (2, 9, 2), (1, 20, 1)]),
       st.sampled_from([(8, 4), (16, 8)]))
def test_fconv_without_the_taps_that_read_padding_matches_mlas(case, shape, array):
    """A command without the kernel rows and columns that read only padding (nu.f_top ... f_right), over chunks of
    input blocks: every output MLAS's, which counts their zero products in K (its slices and M = 1 groups)."""
    k, dil, pads, hw, stride, seed = case
    group, cpg, opg = shape
    rng = np.random.default_rng(seed)
    q = _problem(rng, cpg * group, opg * group, group, k, False)
    x = rng.integers(-128, 128, (cpg * group, *hw)).astype(np.int8)
    crop = _crop(hw, k, (stride, stride), dil, pads)
    n_cb = -(-(cpg * group) // array[0])
    chunks = [n_cb // 2] if n_cb > 1 else []
    got = _run_fconv(x, q, (stride, stride), pads, group, *array, chunks, seed, dil=dil, crop=crop)
    np.testing.assert_array_equal(got, _expected(x[None], q, (stride, stride), pads, group, dil))


@pytest.mark.parametrize("c, o, k, dil, hw", [
    (130, 3, 3, 4, 2),     # ASPP: the centre of 3x3 dilated 4 over 2x2; K = 1170 spans two slices of 1024
    (16, 1, 5, 2, 3),      # one filter (M = 1 groups of 4): the inner 3x3 of 5x5 dilated 2, K 6-8, 11-13 ... of 25
])
def test_the_skipped_taps_keep_the_kept_products_place_in_k(c, o, k, dil, hw):
    """Every bit of every sum equals the whole window's; the kept taps as a conv of their own (a smaller K) give
    other sums."""
    rng = np.random.default_rng(c)
    q = _problem(rng, c, o, 1, (k, k), False)
    x = rng.integers(-128, 128, (c, hw, hw)).astype(np.int8)
    pads, d = (dil * (k // 2),) * 4, (dil, dil)
    crop = _crop((hw, hw), (k, k), (1, 1), d, pads)
    assert crop == (1, 1, 1, 1)
    chunks = [-(-c // 8) // 2]
    whole = _run_fconv(x, q, (1, 1), pads, 1, 8, 8, chunks, 3, final=False, dil=d)
    skipped = _run_fconv(x, q, (1, 1), pads, 1, 8, 8, chunks, 3, final=False, dil=d, crop=crop)
    np.testing.assert_array_equal(skipped.view(np.int32), whole.view(np.int32))
    inner = {**q, "w": np.ascontiguousarray(q["w"][:, :, 1:k - 1, 1:k - 1])}
    alone = _run_fconv(x, inner, (1, 1), (pads[0] - dil,) * 4, 1, 8, 8, chunks, 3, final=False, dil=d)
    assert (alone.view(np.int32) != whole.view(np.int32)).any()


@settings(max_examples=15, deadline=None)
@given(cropped_cases(), st.integers(1, 12), st.sampled_from([(4, 4), (8, 4)]))
def test_fdwconv_without_the_taps_that_read_padding_matches_mlas(case, c, array):
    """Depthwise without the taps that read only padding: MLAS's M = 1 groups of the whole window."""
    k, dil, pads, hw, stride, seed = case
    rng = np.random.default_rng(seed)
    q = _problem(rng, c, c, c, k, False)
    x = rng.integers(-128, 128, (c, *hw)).astype(np.int8)
    crop = _crop(hw, k, (stride, stride), dil, pads)
    got = _run_fdw(x, q, (stride, stride), pads, *array, seed, dil=dil, crop=crop)
    np.testing.assert_array_equal(got, _expected(x[None], q, (stride, stride), pads, c, dil))


def test_the_float_mode_is_a_quarter_of_the_int8_rate():
    """nu.fconv takes NU_F32_PASSES (4) times nu.conv's cycles after the pipeline fill; nu.fdwconv nu.dwconv's."""
    assert NU_F32_PASSES == 4
    assert nu_fconv_cycles(2, 3, 3, 3, 5, 7, 32, 64) == 64 + 4 * (nu_conv_cycles(2, 3, 3, 3, 5, 7, 32, 64) - 64)
    assert nu_fconv_cycles(2, 3, 3, 3, 5, 7, 32, 64) == 64 + 4 * 2 * 3 * 9 * 35
    assert nu_fdwconv_cycles(2, 3, 3, 40, 40, 32, 64) == 64 + 4 * 2 * -(-1600 // (32 // 9)) == 4336


def _bad(named: dict, **changes) -> tuple[int, np.ndarray]:
    mems = {IBUF: np.zeros(256, np.uint8), WBUF: np.zeros(1024, np.uint8), ABUF: np.zeros(256, np.uint8),
            VBUF: np.zeros(256, np.uint8)}
    mems[WBUF][:] = np.tile(np.array([0, 1.0, 0], F32).view(np.uint8), 1024 // 12 + 1)[:1024]
    flat, base, size = ref.pack(mems)
    err = np.zeros(8, np.int64)
    rc = nu_fconv(flat, base, size, 0, 0, 0, 0, ref.snapshot({**named, **changes}, "nu"), True, 4, 4, err)
    return rc, err


@pytest.mark.parametrize("param, value", [("fx_scale", 0), ("fx_scale", 0x7F800000), ("fx_scale", -1),
                                          ("f_step", -1), ("f_cpg", 0), ("f_opg", 0), ("f_c0", -4),
                                          ("f_mode", 2), ("f_top", -1), ("f_right", -2), ("f_cpg", 4),
                                          ("rq_zp_out", 128), ("rq_lo", 5)])
def test_bad_float_parameters_are_refused(param, value):
    """A zero, infinite or negative input scale, a negative slice or channel offset, an empty group, an unknown
    mode, negative skipped taps, a K of 2**40 or more, an out-of-range zero point or lo > hi: BAD_PARAM naming the
    parameter, nothing written."""
    good = {"nu.fx_scale": 0x3F800000, "nu.rq_hi": 0, "nu.f_top": 1 << 20, "nu.f_left": 1 << 19}
    assert _bad(good)[0] == errors.OK
    rc, err = _bad(good, **{f"nu.{param}": value})
    assert rc == errors.BAD_PARAM and err[4] == ref.load_isa().params[f"nu.{param}"]


def test_a_zero_output_scale_is_refused_where_it_lies():
    """nu.fconv.rq's table scale must be a positive finite float32: BAD_PARAM at its WBUF bytes."""
    rc, err = _bad({"nu.fx_scale": 0x3F800000, "nu.rq_table": 12 * 40})
    assert rc == errors.OK
    rc, err = _bad({"nu.fx_scale": 0x3F800000, "nu.rq_table": 2})
    assert rc == errors.MISALIGNED
    rc, err = _bad({"nu.fx_scale": 0x3F800000, "nu.rq_table": 4})   # entry 0's scale reads the next bias, 0.0
    assert rc == errors.BAD_PARAM and (err[1], err[2]) == (WBUF, 8)


def test_the_machine_runs_the_float_mode_race_free():
    """Two nu.fconv commands carrying the state through ABUF, then nu.fconv.rq into VBUF, on the simulator: the
    result equals the kernels' and mlas's, each command takes nu_fconv_cycles and counts nu.conv's MACs, and the
    race checker accepts the in-order chain (its footprints include the state and the table)."""
    cfg = small_config(nu_rows=4, nu_cols=4)
    rng = np.random.default_rng(5)
    q = _problem(rng, 10, 3, 1, (3, 3), False)
    x = rng.integers(-128, 128, (10, 4, 5)).astype(np.int8)
    pads = (1, 1, 1, 1)
    want = _expected(x[None], q, (1, 1), pads, 1)
    xf, wf, bf = mlas.dequantised(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"])
    ib = _ibuf(rng, x, q["xz"], pads, 4, {(cb, r): cb * 4 + r if cb * 4 + r < 10 else -1
                                          for cb in range(3) for r in range(4)})
    weights = [_fconv_weights(rng, wf, 1, range(a, a + 1), 1, 4, 4) for a in range(3)]
    wbytes = np.concatenate([*weights, _table(bf, q["ys"], 1, 4)]).view(np.uint8)
    step = mlas.stride_k(20, 90)
    base = {"nu.in_h": 6, "nu.in_w": 7, "nu.in_cb": 1, "nu.out_h": 4, "nu.out_w": 5, "nu.k_h": 3, "nu.k_w": 3,
            "nu.x_zp": q["xz"], "nu.fx_scale": int(q["xs"].view(np.int32)), "nu.f_step": step, "nu.f_cpg": 10,
            "nu.f_opg": 3, "nu.rq_table": 3 * 9 * 16 * 4, **_clamp(q)}
    words = setp_all(base)
    for n in range(3):
        words += setp_all({"nu.f_c0": 4 * n, "nu.f_mode": int(n > 0)})
        words += [ins("li", rd=1, imm=n * 42 * 4), ins("li", rd=2, imm=n * 9 * 16 * 4), ins("li", rd=3, imm=0),
                  ins("nu.fconv.rq" if n == 2 else "nu.fconv", unit=0, racc=3, rin=1, rw=2)]
    sim = Simulator(cfg)
    sim.load(program(words + [ins("barrier", mask=0xFFFF), ins("halt")]))
    sim.memory.view(IBUF, 0, ib.size)[:] = ib
    sim.memory.view(WBUF, 0, wbytes.size)[:] = wbytes
    sim.run(check_races=True)
    log = sim.last_log
    got = sim.memory.view(VBUF, 0, 80).view(np.int8).reshape(4, 5, 4).transpose(2, 0, 1)[:3]
    np.testing.assert_array_equal(got, want)
    cycles = nu_fconv_cycles(1, 1, 3, 3, 4, 5, 4, cfg.nu_latency)
    assert [int(e - s) for s, e in zip(log.cmd_start, log.cmd_end)] == [cycles] * 3
    assert list(log.cmd_macs) == [9 * 20 * 16] * 3


@pytest.mark.parametrize("mnemonic", ["nu.fconv", "nu.fconv.rq", "nu.fdwconv"])
def test_a_float_command_with_no_window_stops_on_its_parameter(mnemonic):
    """A float command the checks refuse is not priced: a window of no taps (nu.k_h = 0), which the cycle formulas
    would divide by, stops the run naming that parameter (the fuzzer's program)."""
    sim = Simulator(small_config())
    sim.load(program([ins("setpi", param=ref.load_isa().params["nu.k_h"], imm=0),
                      ins(mnemonic, unit=0, racc=0, rin=0, rw=0), ins("halt")]))
    with pytest.raises(SimError, match="nu.k_h = 0"):
        sim.run()
