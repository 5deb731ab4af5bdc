"""Conv2d.live: a conv lowered as the conv of only the taps that can read a real input pixel.

A dilated window larger than its input (DeepLabV3's ASPP: dilation 36 on a 16 x 16 map) has taps whose
every read is padding; the NU runs the conv without them.  Compiled kernels on the simulator (race
checking on) against tests/reference.py's per-tap model, bit for bit, on random shapes whose dilation
exceeds the height or the width; the float form and a small QOperator graph against onnxruntime at both
optimisation levels.
"""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import compiler
from compiler import models, ops
from compiler import reference as sem
from compiler.build import build
from compiler.errors import CompileError
from compiler.models import Net
from compiler.ops.nu import live_taps
from compiler.quant import ort_scale
from compiler.roofline import bound_cycles, macs
from nnpsim.config import Config
from tests import reference as ref
from tests.helpers.kernels import SETTINGS, rand8, requant_params, seeds
from tests.onnx_helpers import F32, ort_levels, qlinear_conv


def brute_live(out: int, k: int, stride: int, dil: int, pad: int, size: int) -> list[int]:
    """The taps some output's window reads a real pixel with, by looking at every read."""
    return [j for j in range(k) if any(0 <= o * stride + j * dil - pad < size for o in range(out))]


@settings(max_examples=300, **SETTINGS)
@given(st.integers(1, 6), st.integers(1, 4), st.integers(1, 40), st.integers(0, 40), st.integers(0, 40),
       st.integers(1, 12))
def test_live_taps_are_the_first_to_the_last_tap_that_reads_a_pixel(k, stride, dil, pt, pb, size):
    span = (k - 1) * dil + 1
    if size + pt + pb < span:
        return
    out = (size + pt + pb - span) // stride + 1
    live = brute_live(out, k, stride, dil, pt, size)
    got = live_taps(out, k, stride, dil, pt, size)
    assert (list(got[:1]), list(got[-1:])) == (live[:1], live[-1:])


@st.composite
def wide_case(draw):
    """A conv whose dilation makes its window larger than the input along one axis or both."""
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = groups > 1 and draw(st.booleans())
    cg, og = (1, 1) if depthwise else (draw(st.integers(1, 40)), draw(st.integers(1, 40)))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    h, w = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    dil = (draw(st.integers(1, 3 * h + 3)), draw(st.integers(1, 3 * w + 3)))
    stride = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = []
    for size, kk, d in ((h, k[0], dil[0]), (w, k[1], dil[1])):
        span = (kk - 1) * d + 1
        lo = draw(st.integers(0, span))
        pad.append((lo, max(draw(st.integers(0, span)), span - size - lo)))
    (t, b), (left, r) = pad
    return groups, cg, og, k, stride, dil, (t, left, b, r), (draw(st.integers(1, 2)), groups * cg, h, w)


@settings(max_examples=30, **SETTINGS)
@given(wide_case(), seeds, st.booleans(), st.sampled_from([{}, dict(ibuf_bytes=8192, abuf_bytes=16384)]))
def test_a_window_larger_than_its_input_compiles_and_matches_the_reference(case, seed, with_bias, overrides):
    groups, cg, og, k, stride, dil, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    w = rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**15), 2**15, size=o).astype(np.int32) if with_bias else None
    m, s = requant_params(rng, o, cg * k[0] * k[1])
    kw = dict(stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=int(rng.integers(-128, 128)),
              multiplier=m, shift=s, zp_out=int(rng.integers(-20, 20)))
    op = ops.conv2d(xshape, w, bias, **kw)
    cfg = Config(**overrides).validate()
    try:
        kernel = build(op, config=cfg)
    except CompileError as exc:
        # a tile loads its whole dilated window (docs/lowering.md): refused, with its reason, only where one
        # output pixel's window outgrows half of the small IBUF
        span = [(kk - 1) * d + 1 for kk, d in zip(k, dil)]
        assert overrides and "no tile fits" in str(exc) and span[0] * span[1] * cfg.nu_rows > cfg.ibuf_bytes // 2, exc
        return
    x = rand8(rng, xshape)
    np.testing.assert_array_equal(kernel(x, check_races=True), ref.conv2d(x, w, bias, **kw))
    assert kernel.stats.cycles >= kernel.roofline_cycles == bound_cycles([op], cfg)
    live = op.live()
    assert live.out_hw == op.out_hw and macs(op) == live.macs <= op.macs


def test_the_aspp_conv_is_the_1x1_conv_of_its_centre_tap_exactly_priced_alike():
    """Dilation 36 on an 8 x 8 map: only the centre tap reads a pixel.  The kernel is the 1x1 conv of that
    tap's weights: the same program cycles and prediction, the same output (no tile of the 73 x 73
    window: "no tile fits" before)."""
    rng = np.random.default_rng(5)
    x, w = rand8(rng, (1, 64, 8, 8)), rand8(rng, (40, 64, 3, 3))
    bias = rng.integers(-5000, 5000, size=40).astype(np.int32)
    m, s = requant_params(rng, 40, 64 * 9)
    q = dict(x_zp=-7, multiplier=m, shift=s, zp_out=3)
    wide = build(ops.conv2d(x.shape, w, bias, padding=36, dilation=36, **q))
    centre = build(ops.conv2d(x.shape, w[:, :, 1:2, 1:2], bias, **q))
    y = wide(x, check_races=True)
    np.testing.assert_array_equal(y, centre(x, check_races=True))
    np.testing.assert_array_equal(y, ref.conv2d(x, w, bias, padding=36, dilation=36, **q))
    assert wide.predicted_cycles == centre.predicted_cycles and wide.stats.cycles == centre.stats.cycles
    assert wide.roofline_cycles == centre.roofline_cycles


def test_a_float_mode_conv_keeps_the_dropped_taps_place_in_mlas_k():
    """The float mode's live conv drops the same taps as the integer one (the 73 x 73 ASPP window becomes its centre
    tap), and its FloatConv records them (crop) so MLAS's K stays the whole window's: 64 * 9."""
    rng = np.random.default_rng(5)
    w = rand8(rng, (40, 64, 3, 3))
    ws = np.full(40, 0.004, np.float32)
    conv = ops.conv2d((1, 64, 8, 8), w, None, padding=36, dilation=36, scale=ws)
    live = ops.float_mode(conv, np.float32(0.05), ws, np.float32(0.1)).live()
    assert live.kernel == (1, 1) and live.padding == (0, 0, 0, 0) and live.fmode.weight.shape == (40, 64, 1, 1)
    assert live.fmode.crop == (1, 1, 1, 1) and live.fmode.depth == 64 * 9
    np.testing.assert_array_equal(live.fmode.weight[:, :, 0, 0], (w[:, :, 1, 1] * np.float32(0.004)).astype(F32))
    assert live.live() is live


@settings(max_examples=12, **SETTINGS)
@given(wide_case(), seeds, st.booleans())
def test_qlinearconv_with_a_dilation_larger_than_its_input_is_onnxruntimes(case, seed, per_channel):
    """The float form (QLinearConv's requantisation): the compiled kernel equals onnxruntime's QLinearConv."""
    groups, cg, og, k, stride, dil, pad, xshape = case
    rng = np.random.default_rng(seed)
    o = groups * og
    x, w = rand8(rng, xshape), rand8(rng, (o, cg) + k)
    bias = rng.integers(-(2**18), 2**18, size=o).astype(np.int32)
    zx, zy = (int(v) for v in rng.integers(-128, 128, size=2))
    sx = F32(2.0 ** rng.uniform(-8, -2))
    sw = (2.0 ** rng.uniform(-9, -5, size=o)).astype(F32) if per_channel else F32(2.0 ** rng.uniform(-9, -5))
    sy = F32(2.0 ** rng.uniform(-4, 0))
    want = qlinear_conv(x, w, bias, sx, zx, sw, sy, zy, stride=stride, pad=pad, dil=dil, groups=groups)
    op = ops.conv2d(xshape, w, bias, stride=stride, padding=pad, dilation=dil, groups=groups, x_zp=zx,
                    scale=ort_scale(sx, sw, sy), zp_out=zy)
    np.testing.assert_array_equal(build(op)(x, check_races=True), want)
    np.testing.assert_array_equal(op.reference(x), want)


def test_an_aspp_graph_is_onnxruntimes_at_both_levels():
    """A QOperator model with ASPP-like branches (dilations 12 and 5 on a 10 x 12 map: centre tap only,
    and windows partly outside) imports, compiles and equals onnxruntime at ORT_ENABLE_ALL and
    ORT_DISABLE_ALL, element for element."""
    net = Net("aspp", (1, 3, 10, 12), seed=2)
    x = net.conv(net.input, 16, 3, 1)
    net.output(net.concat([net.conv(x, 8, 3, dilation=12), net.conv(x, 8, 3, dilation=5), net.conv(x, 8, 1)], 1))
    model = models.quantize(net.model(), "qoperator", seed=1, samples=3)
    lib = compiler.build(compiler.from_onnx(model))
    m = compiler.GraphModule(lib)
    feed = np.random.default_rng(3).standard_normal((1, 3, 10, 12)).astype(np.float32)
    m.set_input(0, feed)
    m.run(check_races=True)
    default, disabled = ort_levels(model, {model.graph.input[0].name: feed})
    np.testing.assert_array_equal(m.get_output(0), default[0])
    np.testing.assert_array_equal(m.get_output(0), disabled[0])
    assert len(np.unique(default[0])) > 8


def test_a_kept_tap_may_start_inside_the_input():
    """3 x 3 taps 4 apart, padding 3, on a 3 x 3 map: one output reading only x[1, 1] with its centre tap,
    so the live conv is a 1x1 conv whose padding is -1 on every side (a crop), lowered exactly."""
    rng = np.random.default_rng(9)
    x, w = rand8(rng, (2, 5, 3, 3)), rand8(rng, (7, 5, 3, 3))
    m, s = requant_params(rng, 7, 5)
    q = dict(padding=3, dilation=4, x_zp=11, multiplier=m, shift=s, zp_out=-4)
    op = ops.conv2d(x.shape, w, None, **q)
    assert op.live().padding == (-1, -1, -1, -1) and op.live().kernel == (1, 1) and op.out_hw == (1, 1)
    np.testing.assert_array_equal(build(op)(x, check_races=True), ref.conv2d(x, w, None, **q))
