"""The compiler's side of the NU's float mode (issue 25): a conv2d in float mode (ops.float_mode) computes
onnxruntime's float Conv of a QDQ group (reference.conv2d_mlas, checked against tests/helpers/mlas.py, the model
test_conv.py checks onnxruntime with), and the compiler's layout of it (lowering.layout.block_diagonal,
float_table, float_params) run on the NU's float kernels gives that reference on every element, however the
conv's outputs and input channels are tiled."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import ops
from compiler import schedule as sm
from compiler import search
from compiler.build import build
from compiler.errors import CompileError
from compiler.lowering.layout import block_diagonal, conv_view, float_params, float_table, fold_taps
from compiler.search import candidates
from compiler.reference import mlas_step
from nnpsim import errors
from nnpsim.config import Config
from nnpsim.units.nu_float import nu_fconv
from tests import isa_reference as ref
from tests.helpers import mlas

F32 = np.float32
IBUF, WBUF, ABUF, VBUF = 8, 16, 24, 32


def _conv(rng, c: int, o: int, group: int, k: int, stride: int, pad: int, relu: bool):
    """A QDQ conv as an ops.conv2d in float mode, and its parameters as tests.helpers.mlas.qdq_conv takes them."""
    ws = rng.uniform(0.002, 0.01, o).astype(F32)
    q = {"xs": F32(rng.uniform(0.02, 0.08)), "xz": int(rng.integers(-20, 20)),
         "w": rng.integers(-127, 128, (o, c // group, k, k)).astype(np.int8), "ws": ws,
         "bias": rng.integers(-3000, 3000, o).astype(np.int32), "bias_scale": F32(0.05) * ws,
         "ys": F32(0.04 * np.sqrt(c // group * k * k)), "yz": int(rng.integers(-10, 10))}
    return q, lambda shape: ops.float_mode(
        ops.conv2d(shape, q["w"], q["bias"], stride=stride, padding=pad, groups=group, x_zp=q["xz"], scale=ws,
                   zp_out=q["yz"], lo=q["yz"] if relu else -128),
        q["xs"], ws, q["ys"], (q["bias"].astype(F32) * q["bias_scale"]).astype(F32))


def _mlas(x, q, stride, pad, group, relu):
    return mlas.qdq_conv(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"], q["bias_scale"], q["ys"], q["yz"],
                         stride=(stride, stride), pads=(pad,) * 4, group=group, lo=0.0 if relu else -np.inf)


@settings(max_examples=12, deadline=None)
@given(st.sampled_from([(13, 9, 1), (40, 6, 1), (12, 12, 12), (24, 15, 3), (8, 4, 2), (6, 6, 3)]),
       st.integers(1, 3), st.integers(1, 2), st.integers(0, 1), st.booleans(), st.integers(0, 999))
def test_the_float_mode_reference_is_mlas(shape, k, stride, pad, relu, seed):
    """op.reference of a conv2d in float mode equals MLAS's float Conv then QuantizeLinear on every element:
    slices of its StrideK, M = 1 groups of 4 for one filter a group (depthwise), grouped, strided, padded."""
    c, o, group = shape
    rng = np.random.default_rng(seed)
    q, make = _conv(rng, c, o, group, k, stride, pad, relu)
    x = rng.integers(-128, 128, (1, c, 9, 8)).astype(np.int8)
    op = make(x.shape)
    np.testing.assert_array_equal(op.reference(x), _mlas(x, q, stride, pad, group, relu))
    assert op.live() is op                 # every tap reads a pixel: none is dropped


def test_mlas_step_is_mlas_stride_k():
    """The compiler's slice decision (nu.f_step) is MLAS's StrideK, and 0 (its M = 1 kernel) for one filter."""
    for n in (1, 2, 15, 16, 17, 50, 100, 200, 3000):
        for k in (1, 9, 117, 128, 129, 300, 360, 4608):
            assert mlas_step(n, k, 2) == mlas.stride_k(n, k)
            assert mlas_step(n, k, 1) == 0


def _run_tiles(op, x, rows: int, cols: int, tile_h: int, chunk: int, seed: int) -> np.ndarray:
    """op's outputs computed tile by tile (tile_h output rows, every output block) on nu_fconv, its input blocks
    in chunks of `chunk`, with the compiler's layout and parameters; int8 [O, OH, OW]."""
    rng = np.random.default_rng(seed)
    f, (_, c, h, w), (oh, ow) = op.fmode, op.x_shape, op.out_hw
    (kh, kw), (sh, sw), (pt, pl, pb, pr) = op.kernel, op.stride, op.padding
    wts = block_diagonal(f.weight, op.groups, c, rows, cols, F32)
    n_cb, n_ob = wts.in_cb, wts.out_cb
    xp = np.full((n_cb * rows, h + pt + pb, w + pl + pr), op.x_zp, np.int64)
    xp[:c, pt:pt + h, pl:pl + w] = x[0]
    xp[c:] = rng.integers(-128, 128, xp[c:].shape)           # padding lanes: never in a sum
    table = float_table(f.bias, f.y_scale, n_ob, cols).reshape(-1).view(np.uint8)
    out = np.zeros((n_ob * cols, oh, ow), np.int8)
    for oh0 in range(0, oh, tile_h):
        th = min(tile_h, oh - oh0)
        ih = (th - 1) * sh + kh
        for ob in range(n_ob):
            starts = list(range(0, wts.span, chunk))
            ibufs, wb = [], []
            for a in starts:
                cb0 = wts.cb_start[ob] + a
                n = min(chunk, wts.span - a)
                tile = xp[cb0 * rows:(cb0 + n) * rows, oh0 * sh:oh0 * sh + ih]
                ibufs.append(tile.reshape(n, rows, ih, -1).transpose(0, 2, 3, 1).astype(np.int8).view(np.uint8))
                wb.append(np.ascontiguousarray(wts.blocks[ob, a:a + n]).reshape(-1).view(np.uint8))
            ib_at = np.cumsum([0] + [b.size for b in ibufs])
            w_at = np.cumsum([0] + [b.size for b in wb])
            mems = {IBUF: np.concatenate(ibufs).reshape(-1), WBUF: np.concatenate([*wb, table]),
                    ABUF: np.zeros(th * ow * cols * 8, np.uint8), VBUF: np.zeros(th * ow * cols, np.uint8)}
            flat, base, size = ref.pack(mems)
            for j, a in enumerate(starts):
                n = min(chunk, wts.span - a)
                named = {"nu.in_h": ih, "nu.in_w": xp.shape[2], "nu.in_cb": n, "nu.out_h": th, "nu.out_w": ow,
                         "nu.k_h": kh, "nu.k_w": kw, "nu.stride_h": sh, "nu.stride_w": sw, "nu.x_zp": op.x_zp,
                         "nu.rq_zp_out": op.zp_out, "nu.rq_lo": op.lo, "nu.rq_hi": op.hi, "nu.f_mode": int(j > 0),
                         "nu.rq_table": int(w_at[-1] + ob * cols * 12),
                         **{f"nu.{k}": v for k, v in float_params(f, op.groups, oh * ow, wts.cb_start[ob] + a, ob,
                                                                   rows, cols).items()}}
                err = np.zeros(8, np.int64)
                rc = nu_fconv(flat, base, size, 0, 0, int(ib_at[j]), int(w_at[j]), ref.snapshot(named, "nu"),
                              j == len(starts) - 1, rows, cols, err)
                assert rc == errors.OK, err
            y = flat[base[VBUF]:base[VBUF] + size[VBUF]].view(np.int8).reshape(th, ow, cols)
            out[ob * cols:(ob + 1) * cols, oh0:oh0 + th] = y.transpose(2, 0, 1)
    return out[:op.out_channels]


@pytest.mark.parametrize("c, o, group, k, stride, pad, rows, cols, tile_h, chunk", [
    (40, 6, 1, 3, 1, 1, 8, 4, 3, 2),       # K = 360 > N: slices of 128 end inside chunks; three row tiles
    (300, 5, 1, 1, 1, 0, 16, 8, 4, 7),     # K = 300: slices of 128 across chunks of 7 blocks
    (24, 15, 3, 3, 2, 1, 8, 8, 2, 1),      # three groups of five filters on block-diagonal weights
    (12, 12, 12, 3, 1, 1, 4, 4, 5, 1),     # depthwise on nu.fconv: one lane a column, M = 1 groups of 4
])
def test_the_compilers_layout_on_the_nu_is_the_reference(c, o, group, k, stride, pad, rows, cols, tile_h, chunk):
    """Tiles of output rows, chunks of input blocks, the parameters of float_params: every output equals
    op.reference (the parameters depend on the whole conv, so the tiling keeps each output's order)."""
    rng = np.random.default_rng(c + k)
    q, make = _conv(rng, c, o, group, k, stride, pad, False)
    x = rng.integers(-128, 128, (1, c, 10, 9)).astype(np.int8)
    op = make(x.shape)
    want = op.reference(x)[0]
    np.testing.assert_array_equal(_run_tiles(op, x, rows, cols, tile_h, chunk, c), want)
    assert len(np.unique(want)) > 20


@pytest.mark.parametrize("c, o, group, k, stride, pad, hw, cfg, command", [
    (13, 9, 1, 3, 1, 1, (11, 10), {}, "nu.fconv.rq"),                  # K = 117: one FMA chain
    (40, 6, 1, 3, 1, 1, (5, 10), {"nu_rows": 8, "nu_cols": 8, "wbuf_bytes": 6144}, "nu.fconv.rq"),   # chunked
    (24, 15, 3, 3, 2, 1, (13, 13), {}, "nu.fconv.rq"),                 # three groups of five filters
    (12, 12, 12, 3, 1, 1, (9, 8), {"nu_rows": 8, "nu_cols": 8}, "nu.fdwconv"),   # depthwise: its own command
    (12, 12, 12, 3, 1, 1, (9, 8), {"nu_rows": 8, "nu_cols": 4}, "nu.fconv.rq"),  # blocks that do not line up:
    #                                                                    M = 1 groups on block-diagonal weights
    (13, 9, 1, 3, 1, 1, (11, 10), {"nu_count": 2, "vu_count": 2}, "nu.fconv.rq"),   # split over two NUs
    (13, 9, 1, 3, 1, 1, (11, 10), {"nu_count": 2, "vu_count": 1}, "nu.fconv.rq"),   # one NU: NU 1 has no VU 1
])
def test_a_float_mode_conv_compiles_to_nu_fconv_bit_exact(c, o, group, k, stride, pad, hw, cfg, command):
    _compiled(c, o, group, k, stride, pad, hw, cfg, command)


def test_a_float_mode_conv_whose_input_blocks_do_not_fit_runs_in_chunks():
    """WBUF too small for a tile's input blocks: the tile runs nu.fconv over its first chunks (the state carried in
    ABUF, f_mode = 1 after the first) and ends with nu.fconv.rq; still every element MLAS's."""
    kernel = _compiled(40, 6, 1, 3, 1, 1, (5, 10), {"nu_rows": 8, "nu_cols": 8, "wbuf_bytes": 6144})
    assert "nu.fconv " in kernel.asm and "nu.f_mode, 1" in kernel.asm


def _compiled(c, o, group, k, stride, pad, hw, cfg, command="nu.fconv.rq"):
    """build() lowers a conv2d in float mode onto `command` (nu.fconv.rq, after nu.fconv for chunks, or nu.fdwconv;
    no integer conv, no VU requantisation), and the machine's outputs equal op.reference, MLAS's, on every element
    (the race checker on)."""
    rng = np.random.default_rng(c * k)
    q, make = _conv(rng, c, o, group, k, stride, pad, False)
    x = rng.integers(-128, 128, (1, c, *hw)).astype(np.int8)
    op = make(x.shape)
    kernel = build(op, config=Config(**cfg)) if cfg else build(op)
    used = {line.split()[0] for line in kernel.asm.splitlines() if line.strip().startswith(("nu.", "vu."))}
    assert command in used and used <= {"nu.fconv", "nu.fconv.rq", "nu.fdwconv", "vu.add", "vu.fadd"}, used
    assert ("nu.fdwconv" in used) == (command == "nu.fdwconv")
    np.testing.assert_array_equal(kernel(x, check_races=True), _mlas(x, q, stride, pad, group, False))
    assert kernel.predicted_cycles == kernel.stats.cycles          # the cost model prices nu.fconv exactly
    return kernel


@st.composite
def _float_tap_case(draw):
    """A float-mode conv whose whole window fits one block of rows: C * KH * KW <= 32."""
    k = (draw(st.integers(2, 5)), draw(st.integers(2, 5)))
    c = draw(st.integers(1, 32 // (k[0] * k[1])))
    stride, dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2))), (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(2, dil[0] * (k[0] - 1) + 2 - pad[0] - pad[2]), 19))
    w = draw(st.integers(max(2, dil[1] * (k[1] - 1) + 2 - pad[1] - pad[3]), 19))
    return (draw(st.integers(1, 2)), c, h, w), draw(st.integers(1, 40)), k, stride, dil, pad


@settings(max_examples=12, deadline=None)
@given(_float_tap_case(), st.integers(0, 999), st.booleans(),
       st.sampled_from([{}, {"ibuf_bytes": 8192, "wbuf_bytes": 16384, "abuf_bytes": 16384},
                        {"nu_count": 2, "vu_count": 2}]),
       st.sampled_from(["nchw", "nhwc"]), st.data())
def test_a_float_mode_conv_with_its_taps_folded_in_mlas_order_is_mlas(case, seed, relu, cfg, x_layout, data):
    """im2col in the float mode (layout.fold_taps, k_order): the window in one block, row c * KH * KW + k, a 1x1
    nu.fconv.rq over it (K and MLAS's order the unfolded conv's); any of the search's tilings of it gives
    op.reference on every element (MLAS's where tests.helpers.mlas applies: no dilation, more than one output
    pixel), race-checked, priced exactly."""
    shape, o, k, stride, dil, pad = case
    rng = np.random.default_rng(seed)
    ws = rng.uniform(0.002, 0.01, o).astype(F32)
    q = {"xs": F32(0.05), "xz": int(rng.integers(-20, 20)),
         "w": rng.integers(-127, 128, (o, shape[1]) + k).astype(np.int8),
         "ws": ws, "bias": rng.integers(-3000, 3000, o).astype(np.int32), "bias_scale": F32(0.05) * ws,
         "ys": F32(0.04 * np.sqrt(shape[1] * k[0] * k[1])), "yz": int(rng.integers(-10, 10))}
    op = replace(ops.float_mode(
        ops.conv2d(shape, q["w"], q["bias"], stride=stride, padding=pad, dilation=dil, x_zp=q["xz"], scale=ws,
                   zp_out=q["yz"], lo=q["yz"] if relu else -128),
        q["xs"], ws, q["ys"], (q["bias"].astype(F32) * q["bias_scale"]).astype(F32)), x_layout=x_layout)
    config = Config(**cfg)
    if op.live() is not op:         # taps that read only padding: their K indices are not a 1x1 conv's
        with pytest.raises(CompileError, match="no tap that reads only padding"):
            sm.Schedule(op, config=config).im2col("x")
        return
    s = sm.Schedule(op, config=config).im2col("x")
    schedules = [search._auto_nu(s, t, by, u) for t, by, u in search.nu_tilings(s.blocks[0], config)]
    kernel = build(op, config=config, schedule=data.draw(st.sampled_from(schedules)))
    assert "every" in kernel.asm and "nu.fconv.rq" in kernel.asm          # the taps' loads, MLAS's rows
    x = rng.integers(-128, 128, shape).astype(np.int8)
    got = kernel(x, check_races=True)
    np.testing.assert_array_equal(got, op.reference(x))
    if dil == (1, 1) and got.shape[2] * got.shape[3] > 1:
        np.testing.assert_array_equal(got, mlas.qdq_conv(x, q["xs"], q["xz"], q["w"], q["ws"], q["bias"],
                                                         q["bias_scale"], q["ys"], q["yz"], stride=stride, pads=pad,
                                                         group=1, lo=0.0 if relu else -np.inf))
    assert kernel.predicted_cycles == kernel.stats.cycles


def test_fold_taps_in_the_float_mode_is_mlas_im2col():
    """Float mode: weight row c * KH * KW + i * KW + j is w[:, c, i, j] (int8 and float32 alike), exactly C * KH * KW
    rows (none zero: each would count in K), so float_params' K and order are the unfolded conv's; a window that
    does not fit one block of rows is not folded."""
    rng = np.random.default_rng(2)
    q, make = _conv(rng, 3, 16, 1, 3, 2, 1, False)
    view = fold_taps(conv_view(make((1, 3, 20, 20))), 32)
    assert view.taps.k_order and view.taps.blocks == 1
    assert view.weight.shape == view.fmode.weight.shape == (16, 27, 1, 1)
    original = make((1, 3, 20, 20))
    for c in range(3):
        for i in range(3):
            for j in range(3):
                assert view.taps.place(i * 3 + j) == (0, i * 3 + j) and view.taps.lane_step == 9
                np.testing.assert_array_equal(view.fmode.weight[:, c * 9 + i * 3 + j, 0, 0],
                                              original.fmode.weight[:, c, i, j])
                np.testing.assert_array_equal(view.weight[:, c * 9 + i * 3 + j, 0, 0], original.weight[:, c, i, j])
    unfolded = conv_view(make((1, 3, 20, 20)))
    assert view.fmode.depth == unfolded.fmode.depth == 27
    assert float_params(view.fmode, 1, 100, 0, 0, 32, 32)["f_step"] == mlas_step(100, 27, 16)
    _, make4 = _conv(rng, 4, 16, 1, 3, 1, 1, False)          # 36 rows > 32: stays unfolded
    assert fold_taps(conv_view(make4((1, 4, 9, 9))), 32) is None


def test_the_search_folds_a_float_stem_into_one_pass():
    """MobileNetV3's and EfficientNet's float stem (3 channels, 3 x 3, stride 2): folded, one 27-row pass a pixel
    instead of nine, at least 5 times fewer cycles than the unfolded conv's best tiling."""
    rng = np.random.default_rng(7)
    _, make = _conv(rng, 3, 16, 1, 3, 2, 1, False)
    op = make((1, 3, 64, 64))
    kernel = build(op)
    assert "s.im2col('x')" in str(kernel.schedule)
    unfolded = min(build(op, schedule=s).predicted_cycles for s in candidates((op,), Config())
                   if "im2col" not in str(s))
    assert kernel.predicted_cycles * 5 < unfolded
    x = rng.integers(-128, 128, op.x_shape).astype(np.int8)
    np.testing.assert_array_equal(kernel(x, check_races=True), op.reference(x))
