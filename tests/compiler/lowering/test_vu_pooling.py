"""Average, global average and sum pooling on the VU's pooling accumulators (vu.pool.avg, vu.pool.acc) and
its sliding-window engine (vu.slide.*), compiled and run with race checking, against tests/reference.py, the
ops' numpy models and onnxruntime, bit for bit; and the synchronisation of a kernel on the engine, mutated."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from compiler import ops
from compiler.build import build
from compiler.lowering.vu import SLIDE_OF
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, rand8, run, seeds
from tests.helpers.mutation import kill_all
from tests.onnx_helpers import qlinear_pool


@st.composite
def pools(draw):
    k = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 23))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 23))
    return k, stride, pad, (draw(st.integers(1, 2)), draw(st.integers(1, 70)), h, w)


def pool_and_model(mode: str, case, rng, x):
    """(op, its expected output on x) of a pooling mode: sum, avg / avg_nopad (padding counted or not),
    float / float_nopad (QLinearAveragePool), global, global_f32 (QLinearGlobalAveragePool)."""
    k, stride, pad, shape = case
    if mode == "sum":
        return ops.sum_pool2d(shape, k, stride, pad), ref.sum_pool2d(x, k, stride, pad)
    if mode == "global":
        return ops.global_avg_pool2d(shape), ref.global_avg_pool2d(x)
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    if mode in ("avg", "avg_nopad"):
        cip = mode == "avg"
        return (ops.avg_pool2d(shape, k, stride, pad, cip, zx),
                ref.avg_pool2d(x, k, stride, pad, count_include_pad=cip, x_zp=zx))
    sx, sy = (2.0 ** rng.uniform(-6, 0, size=2)).astype(np.float32)
    if mode == "global_f32":
        op = ops.global_avg_pool2d(shape, x_zp=zx, scale_x=sx, scale_out=sy, zp_out=zy)
    else:
        op = ops.avg_pool2d(shape, k, stride, pad, mode == "float", zx, scale_x=sx, scale_out=sy, zp_out=zy)
    return op, op.reference(x)


ACCUMULATOR = {"sum": "vu.pool.acc", "global": "vu.pool.avg", "global_f32": "vu.pool.acc", "avg": "vu.pool.avg",
               "avg_nopad": "vu.pool.avg"}


@settings(max_examples=30, **SETTINGS)
@given(pools(), seeds, st.sampled_from(sorted(ACCUMULATOR)))
def test_pools_on_the_accumulators(case, seed, mode):
    rng = np.random.default_rng(seed)
    x = rand8(rng, case[3])
    op, want = pool_and_model(mode, case, rng, x)
    used = ACCUMULATOR[mode]
    kernel = build(op)
    assert (used in kernel.asm or SLIDE_OF[used] in kernel.asm) and "vu.pool.sum" not in kernel.asm
    assert "vu.divr" not in kernel.asm
    got = run(kernel, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("value", [-128, 127])
def test_extreme_inputs(value):
    """Constant extreme planes: sums at the far ends of their range, averages equal to the value."""
    shape = (1, 37, 30, 30)
    x = np.full(shape, value, np.int8)
    np.testing.assert_array_equal(run(build(ops.global_avg_pool2d(shape)), x), np.full((1, 37, 1, 1), value))
    got = run(build(ops.sum_pool2d(shape, 30, 1)), x)
    assert (got == value * 900).all() and got.dtype == np.int32
    avg = ops.avg_pool2d(shape, 3, 2, 1, count_include_pad=True, x_zp=-1 - value)   # padding: the other extreme
    np.testing.assert_array_equal(run(build(avg), x), avg.reference(x))


@pytest.mark.parametrize("float_form", [False, True])
def test_count_table_larger_than_a_quarter_of_vbuf_comes_by_tile(float_form):
    """30 x 31 per-position counts (3,720 bytes) on a 4 KiB VBUF: each tile loads its rows of the table."""
    from nnpsim.config import Config
    rng = np.random.default_rng(11)
    shape = (1, 3, 30, 31)
    f = dict(scale_x=np.float32(0.03), scale_out=np.float32(0.05), zp_out=4) if float_form else {}
    op = ops.avg_pool2d(shape, (2, 3), 1, (1, 1, 0, 1), False, 0 if not float_form else -3, **f)
    kernel = build(op, config=Config(vbuf_bytes=4096).validate())
    assert "counts of rows" in kernel.asm
    x = rand8(rng, shape)
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))


# ---------------------------------------------------------------- the sliding-window engine

@st.composite
def overlapping_pools(draw):
    """Windows of 2..4 a side that overlap along at least one axis (stride below the window), padded or not."""
    k = (draw(st.integers(2, 4)), draw(st.integers(2, 4)))
    stride = (draw(st.integers(1, k[0])), draw(st.integers(1, k[1])))
    if stride == k:
        stride = (k[0] - 1, stride[1])
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 30))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 30))
    return k, stride, pad, (draw(st.integers(1, 2)), draw(st.integers(1, 40)), h, w)


def _large(op) -> bool:
    """Enough outputs that the engine's saving shows in every tile's cycles (the lowering picks it by cost),
    and windows that share inputs along an axis with more than one output (else both cost the same)."""
    n, c, _, _ = op.x_shape
    (oh, ow), (kh, kw), (sh, sw) = op.out_hw, op.kernel, op.stride
    shares = (oh > 1 and sh < kh) or (ow > 1 and sw < kw)
    return shares and n * c * oh * ow >= 512


@settings(max_examples=30, **SETTINGS)
@given(overlapping_pools(), seeds, st.sampled_from(["sum", "avg", "avg_nopad", "float", "float_nopad"]))
def test_overlapping_pools_on_the_sliding_window_engine(case, seed, mode):
    rng = np.random.default_rng(seed)
    x = rand8(rng, case[3])
    op, want = pool_and_model(mode, case, rng, x)
    kernel = build(op)
    if _large(op) and not op.is_global:
        assert "vu.slide." in kernel.asm
    got = run(kernel, x)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@settings(max_examples=20, **SETTINGS)
@given(overlapping_pools(), seeds, st.booleans())
def test_float_average_on_the_engine_equals_onnxruntime(case, seed, count_include_pad):
    """QLinearAveragePool through vu.slide.favg: onnxruntime's float32 window sums, bit for bit."""
    k, stride, pad, shape = case
    rng = np.random.default_rng(seed)
    x = rand8(rng, shape)
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sx, sy = (np.float32(s) for s in 2.0 ** rng.uniform(-6, 0, size=2))
    op = ops.avg_pool2d(shape, k, stride, pad, count_include_pad, zx, scale_x=sx, scale_out=sy, zp_out=zy)
    kernel = build(op)
    if _large(op) and not op.is_global:
        assert "vu.slide.favg" in kernel.asm
    want = qlinear_pool("QLinearAveragePool", x, sx, zx, sy, zy, kernel_shape=list(k), strides=list(stride),
                        pads=list(pad), count_include_pad=int(count_include_pad))
    np.testing.assert_array_equal(run(kernel, x), want)


F32_SCALES = dict(scale_x=np.float32(0.05), scale_out=np.float32(0.03), zp_out=-4)


@pytest.mark.parametrize("make", [
    lambda s: ops.avg_pool2d(s, 3, 1, 1, count_include_pad=False, x_zp=3),
    lambda s: ops.sum_pool2d(s, 3, 1),
    lambda s: ops.avg_pool2d(s, 3, 1, 1, x_zp=2, **F32_SCALES),
    lambda s: ops.avg_pool2d(s, 3, 1, 1, count_include_pad=False, x_zp=2, **F32_SCALES),
], ids=["avg, padding not counted", "sum", "float avg", "float avg, padding not counted"])
def test_every_removed_wait_is_caught_on_the_engine(make):
    """Each semaphore wait of a kernel on the sliding-window engine, removed (with and without its signal):
    every mutant stops with a data race or a deadlock.  The averages that do not count padding run their
    windows without padding and the border bands as separate commands."""
    x = rand8(np.random.default_rng(5), (1, 24, 14, 15))
    op = make(x.shape)
    kernel = build(op)
    assert "vu.slide." in kernel.asm
    assert (ONE_COUNT in kernel.asm) == (op.mode == "avg" and not op.count_include_pad)
    kill_all(kernel, [x], f"{op.kind} on the sliding-window engine")


# ---------------------------------------------------------------- averages that do not count padding

ONE_COUNT = "windows without padding, one count"
"""The comment of a tile's command over its windows without padding (PoolLowering._windows)."""


def _lowering(op, **kw):
    from compiler.ir import Buffer
    from compiler.lowering.vu import PoolLowering
    from nnpsim.config import Config
    x = Buffer("x", "ddr", 1)
    return PoolLowering(op, x, x, Config().validate(), "L", **kw)


@settings(max_examples=200, **SETTINGS)
@given(pools(), st.integers(1, 8))
def test_full_windows_are_the_windows_without_padding(case, th):
    """PoolLowering.full_windows: in every tile, exactly the outputs whose real count is the whole window."""
    from compiler.reference import real_counts
    k, stride, pad, shape = case
    op = ops.avg_pool2d(shape, k, stride, pad, False)
    full = real_counts(shape[2], shape[3], k, stride, pad) == k[0] * k[1]
    low = _lowering(op)
    oh, ow = op.out_hw
    for oh0 in range(0, oh, th):
        rows = min(th, oh - oh0)
        (r0, r1), (j0, j1) = low.full_windows(oh0, rows)
        got = np.zeros((rows, ow), bool)
        got[r0:max(r0, r1), j0:max(j0, j1)] = True
        np.testing.assert_array_equal(got, full[oh0:oh0 + rows], err_msg=f"tile at row {oh0}")


def _outputs(cmd) -> list[int]:
    """Byte offsets in d of every output a VU command writes."""
    n, st_ = cmd.n, cmd.d_stride
    return [cmd.d.offset + i0 * st_[0] + i1 * st_[1] + i2 * st_[2] + i3 * st_[3]
            for i3 in range(n[3]) for i2 in range(n[2]) for i1 in range(n[1]) for i0 in range(n[0])]


@pytest.mark.parametrize("float_form", [False, True])
@pytest.mark.parametrize("shape, k, stride, pad", [
    ((1, 37, 23, 19), 3, 1, 1),
    ((2, 20, 17, 30), (3, 2), (2, 1), (1, 0, 2, 1)),
    ((1, 64, 28, 28), 3, 1, 1),
    ((1, 9, 35, 35), 3, 2, 1),
])
def test_windows_without_padding_take_one_count(shape, k, stride, pad, float_form):
    """An average that does not count padding, on the engine: each tile's commands cover its outputs once,
    the ones over windows without padding read one count (b strides 0) that is the whole window, and the
    kernel equals the model (and, the float form, onnxruntime) bit for bit, with race checking."""
    rng = np.random.default_rng(sum(shape))
    x = rand8(rng, shape)
    f = dict(scale_x=np.float32(0.07), scale_out=np.float32(0.02), zp_out=-9) if float_form else {}
    op = ops.avg_pool2d(shape, k, stride, pad, False, -5, **f)
    low = _lowering(op)
    ow, tiles = op.out_hw[1], low.tiles()
    steps = low.steps()[-len(tiles):]
    split = 0
    for (_, c0, oh0), step in zip(tiles, steps):
        cc, th = min(low.cc, shape[1] - c0), min(low.th, op.out_hw[0] - oh0)
        cmds = [c for c in step.compute if getattr(c, "mnemonic", "").startswith("vu.slide.")]
        assert sorted(o for c in cmds for o in _outputs(c)) == list(range(cc * th * ow))
        whole = [c for c in cmds if ONE_COUNT in c.comment]
        first_row = oh0 * ow if low.tile_counts else 0
        for c in whole:
            assert c.b_stride == (0, 0, 0, 0)
            assert low.div.data.reshape(-1)[first_row + c.b.offset // 4] == op.kernel[0] * op.kernel[1]
        split += bool(whole)
    assert split, "no tile ran its windows without padding on one count"
    kernel = build(op)
    assert ONE_COUNT in kernel.asm
    want = op.reference(x)
    np.testing.assert_array_equal(run(kernel, x), want)
    if float_form:
        kk = [k, k] if isinstance(k, int) else list(k)
        ss = [stride, stride] if isinstance(stride, int) else list(stride)
        pp = [pad] * 4 if isinstance(pad, int) else list(pad)
        ort = qlinear_pool("QLinearAveragePool", x, f["scale_x"], -5, f["scale_out"], f["zp_out"],
                           kernel_shape=kk, strides=ss, pads=pp, count_include_pad=0)
        np.testing.assert_array_equal(want, ort)


@pytest.mark.parametrize("engine", ["vu.pool.avg", "vu.slide.avg"])
def test_a_schedule_picks_the_window_instruction(engine):
    """tensorize('pool', ...) chooses the accumulators or the sliding-window engine; either is bit-exact, and
    the engine (the default here, priced lower) is faster."""
    from compiler.errors import CompileError
    from compiler.schedule import Schedule
    op = ops.avg_pool2d((1, 16, 20, 21), 3, 1, 1, count_include_pad=False, x_zp=-2)
    x = rand8(np.random.default_rng(12), op.x_shape)
    s = Schedule(op)
    s.split("oh", 5).cache_read("x", "vbuf", "rows").double_buffer("rows")
    s.cache_write("y", "vbuf", "win").double_buffer("win")
    s.tensorize("pool", engine)
    kernel = build(op, schedule=s)
    other = ({"vu.pool.avg", "vu.slide.avg"} - {engine}).pop()
    assert engine in kernel.asm and other not in kernel.asm
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))
    default = build(op)
    assert "vu.slide.avg" in default.asm
    np.testing.assert_array_equal(run(default, x), op.reference(x))
    if engine == "vu.pool.avg":
        assert kernel.stats.cycles > default.stats.cycles
    with pytest.raises(CompileError, match="goes onto vu.pool.avg or vu.slide.avg"):
        Schedule(op).tensorize("pool", "vu.slide.acc")


def test_the_engine_refuses_rows_wider_than_its_line_buffer():
    """A 3x3 window over rows of 1,500 columns spans more than the engine's 1,024 column sums: by default
    the accumulators run it; asked for the engine, the compiler says why not."""
    from compiler.errors import CompileError
    from compiler.schedule import Schedule
    op = ops.sum_pool2d((1, 1, 4, 1500), 3, 1)
    assert "vu.pool.acc" in build(op).asm
    s = Schedule(op).cache_read("x", "vbuf", "rows").double_buffer("rows")
    s.cache_write("y", "vbuf", "win").double_buffer("win").tensorize("pool", "vu.slide.acc")
    with pytest.raises(CompileError, match="vu.slide.acc needs windows on its grid within 1024 columns"):
        build(op, schedule=s)


# ---------------------------------------------------------------- ReduceMean on vu.pool.fmean

MEAN_MACHINES = {"default": {}, "two VUs": dict(vu_count=2), "small VBUF": dict(vbuf_bytes=4096)}


@settings(max_examples=16, **SETTINGS)
@given(seeds, st.integers(1, 2), st.integers(1, 300), st.integers(1, 30), st.integers(1, 30),
       st.sampled_from(sorted(MEAN_MACHINES)))
def test_reduce_mean_on_fmean_is_its_model_and_priced_exactly(seed, n, c, h, w, machine):
    """Every tile's vu.mode follows its first plane (tiles of any channel count, dealt over two VUs, or many
    on a small VBUF): the output is the op's numpy model (onnxruntime's order, tests/compiler/ops/test_pool.py)
    on every element, and the cost model predicts the simulated cycles exactly."""
    from nnpsim.config import Config
    rng = np.random.default_rng(seed)
    sx = np.float32(2.0 ** rng.uniform(-7, -2))
    sy = np.float32(sx * np.float32(2.0 / (h * w))) if rng.integers(2) else np.float32(2.0 ** rng.uniform(-7, -2))
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    op = ops.reduce_mean((n, c, h, w), x_zp=zx, scale_x=sx, scale_out=sy, zp_out=zy)
    kernel = build(op, config=Config(**MEAN_MACHINES[machine]).validate())
    assert "vu.pool.fmean" in kernel.asm
    x = rand8(rng, (n, c, h, w))
    np.testing.assert_array_equal(run(kernel, x), op.reference(x))
    assert kernel.stats.cycles == kernel.predicted_cycles
