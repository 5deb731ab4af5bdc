"""Linear Resize on vu.lerp (compiler/lowering/resize.py): compiled kernels against the op's numpy model on
random shapes and sizes in every form and axis assignment, with the race checker on, priced exactly."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from nnpsim.config import Config

from compiler import build, ops
from compiler.ir import Buffer
from compiler.lowering.resize import LerpLowering

MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric")


@st.composite
def resizes(draw):
    """A linear resize onnxruntime could run: sizes up and down, integer and not, the height kept now and
    then (the NHWC float form on W and C); its layout, QDQ or not."""
    c, h, w = draw(st.integers(1, 5)), draw(st.integers(1, 20)), draw(st.integers(1, 20))
    oh = draw(st.one_of(st.just(h), st.integers(1, 45)))
    ow = draw(st.one_of(st.just(w), st.integers(1, 45)))
    f = np.float32
    scales = (1, 1, f(oh) / f(h), f(ow) / f(w))
    quantized = draw(st.booleans())
    kw = dict(za=draw(st.integers(-20, 20)), zp_out=draw(st.integers(-20, 20)), scale_in=0.04,
              scale_out=draw(st.sampled_from([0.04, 0.05, 0.031]))) if quantized else {}
    return ops.resize_linear((1, c, h, w), (1, c, oh, ow), scales, draw(st.sampled_from(MODES)),
                             layout=draw(st.sampled_from(["nchw", "nhwc"])), quantized=quantized, **kw)


def _check(op, seed: int, cfg: Config | None = None) -> None:
    x = np.random.default_rng(seed).integers(-128, 128, op.in_shape, dtype=np.int8)
    k = build(op, config=cfg) if cfg is not None else build(op)
    np.testing.assert_array_equal(k(x, check_races=True), op.reference(x))
    assert k.predicted_cycles == k.stats.cycles


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(resizes(), st.integers(0, 2 ** 32 - 1))
def test_random_linear_resizes(op, seed):
    _check(op, seed)


def test_many_tiles_on_a_small_vbuf():
    """A resize cut into bands and channel chunks (a small VBUF): the bands' tables and relative rows."""
    f = np.float32
    op = ops.resize_linear((1, 6, 17, 23), (1, 6, 60, 31), (1, 1, f(60) / f(17), f(31) / f(23)), "align_corners")
    cfg = Config(vbuf_bytes=8 * 1024)
    low = LerpLowering(op, [Buffer("x", "ddr", 1)], Buffer("y", "ddr", 1), cfg, "L")
    assert len(low.bands) > 1 and low.chunk[1] < 6 and low.n_tiles() > len(low.bands)
    _check(op, 1, cfg)


def test_downsampling_and_uint8_view():
    """A downsampling in the form an importer gives a uint8 tensor (held as q - 128: za = zp_out = -128)."""
    f = np.float32
    op = ops.resize_linear((2, 3, 30, 28), (2, 3, 11, 9), (1, 1, f(11) / f(30), f(9) / f(28)), "asymmetric",
                           za=-128, zp_out=-128)
    _check(op, 2)


def test_resident_tables_cross_ddr_once():
    """Where every band's table fits in the table slots' VBUF, each is loaded once, not once per chunk: the
    kernel reads its tiles' input boxes (neighbouring bands share a row) and each table once from DDR."""
    f = np.float32
    op = ops.resize_linear((1, 21, 32, 32), (1, 21, 256, 256), (1, 1, f(8), f(8)), "half_pixel")
    low = LerpLowering(op, [Buffer("x", "ddr", 1)], Buffer("y", "ddr", 1), Config(), "L")
    assert low.tab_res is not None and low.n_tiles() > len(low.bands)
    k = build(op)
    x = np.random.default_rng(3).integers(-128, 128, op.in_shape, dtype=np.int8)
    np.testing.assert_array_equal(k(x, check_races=True), op.reference(x))
    boxes = sum(math.prod(low._in_size(band, low._chunk_box(at))) for band, at in low.tiles())
    assert k.stats.memory["ddr"].read_bytes == boxes + low.table.nbytes
    assert k.predicted_cycles == k.stats.cycles
