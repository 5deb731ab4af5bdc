"""ops.lut on the VU (compiler/lowering/vu.py) and fused into a conv / dense kernel's epilogue
(compiler/lowering/nu.py, lowering.driver.fuse_nu_chain).

Hypothesis draws shapes that do not divide the hardware's sizes and random tables; every output is
compared on every element with the ops' numpy models, race-checked, and the cost model's prediction with
the simulator's cycles.  A fused chain is one kernel (no DDR round trip): its assembly has one store of
y per tile and no scratch buffer.  Each wait of a lut kernel is removed in turn (the table's load among
them) and the run must stop on a race or a deadlock.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from compiler import build, ops
from compiler.lowering.driver import segments
from compiler.quant import quantize_multipliers
from compiler.search import candidates
from nnpsim.config import Config
from tests.helpers.mutation import kill_all

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rand(rng, shape):
    return rng.integers(-128, 128, shape).astype(np.int8)


def conv(rng, x_shape, o, k=3, scale=False, **kw):
    """A 3x3 (or k x k) conv2d, integer or float form, padding keeping the plane."""
    w = rand(rng, (o, x_shape[1], k, k))
    bias = rng.integers(-4000, 4000, o).astype(np.int32)
    scales = rng.uniform(0.3, 1.0, o) / 800
    q = dict(scale=scales.astype(np.float32)) if scale else dict(zip(("multiplier", "shift"),
                                                                   quantize_multipliers(scales)))
    return ops.conv2d(x_shape, w, bias, padding=k // 2, x_zp=int(rng.integers(-5, 5)), zp_out=2, **q, **kw)


def expect(chain, inputs):
    y = inputs[0]
    for op in chain:
        y = op.reference(y, *inputs[1:2]) if len(op.inputs) == 2 else op.reference(y)
    return y


def check(chain, inputs, cfg=None):
    kernel = build(*chain, config=cfg) if cfg else build(*chain)
    y = kernel(*inputs, check_races=True)
    assert (y == expect(chain, inputs)).all()
    assert kernel.predicted_cycles == kernel.stats.cycles
    return kernel


@SETTINGS
@given(st.lists(st.integers(1, 41), min_size=1, max_size=4), st.integers(0, 2**32 - 1))
def test_lut_alone_on_random_shapes(shape, seed):
    rng = np.random.default_rng(seed)
    op = ops.lut(tuple(shape), rng.integers(-128, 128, 256))
    kernel = check([op], [rand(rng, tuple(shape))])
    assert "vu.lut" in kernel.asm


@SETTINGS
@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 13), st.integers(1, 13), st.booleans(),
       st.sampled_from(["lut", "relu lut", "lut clip", "lut lut", "relu lut clip lut"]), st.integers(0, 2**32 - 1))
def test_conv_then_lut_runs_in_the_conv_kernel(c, o, h, w, scale, tail, seed):
    """conv -> (relu) -> lut (-> clip -> lut): one kernel whose tiles apply one vu.lut before their store."""
    rng = np.random.default_rng(seed)
    head = conv(rng, (1, c, h, w), o, scale=scale)
    sh = head.output.shape
    make = {"lut": lambda: ops.lut(sh, rng.integers(-128, 128, 256)), "relu": lambda: ops.relu(sh, 2),
            "clip": lambda: ops.clip(sh, -40, 77)}
    chain = [head] + [make[k]() for k in tail.split()]
    assert len(segments(tuple(chain))) == 1
    kernel = check(chain, [rand(rng, (1, c, h, w))])
    assert "vu.lut" in kernel.asm and "scratch" not in kernel.asm


def test_residual_add_then_lut_and_dense_then_lut():
    """A lut after a fused residual add runs after it in VBUF; a dense layer takes a lut too."""
    rng = np.random.default_rng(3)
    head = conv(rng, (1, 12, 9, 7), 20)
    sh = head.output.shape
    chain = [head, ops.add(sh, zb=4, ma=2**30, mb=3 * 2**28, shift=31), ops.lut(sh, rng.integers(-128, 128, 256))]
    check(chain, [rand(rng, (1, 12, 9, 7)), rand(rng, sh)])
    dense = ops.dense((5, 70), rand(rng, (70, 33)), rng.integers(-99, 99, 33).astype(np.int32),
                      multiplier=rng.integers(2**30, 2**31, 33), shift=rng.integers(20, 24, 33))
    check([dense, ops.lut((5, 33), rng.integers(-128, 128, 256))], [rand(rng, (5, 70))])


def test_lut_over_several_vus_and_tiles():
    rng = np.random.default_rng(4)
    cfg = Config(vu_count=2, vbuf_bytes=4096).validate()
    op = ops.lut((2, 9, 17, 13), rng.integers(-128, 128, 256))
    x = rand(rng, op.shape)
    for s in candidates((op,), cfg)[:3]:
        kernel = build(op, config=cfg, schedule=s)
        assert (kernel(x, check_races=True) == op.reference(x)).all()
        assert kernel.predicted_cycles == kernel.stats.cycles


def conv_relu_lut(rng):
    head = conv(rng, (1, 12, 8, 7), 20)
    sh = head.output.shape
    return [head, ops.relu(sh, 2), ops.lut(sh, rng.integers(-128, 128, 256))], [rand(rng, (1, 12, 8, 7))]


CASES = {
    "lut alone": lambda r: ([ops.lut((2, 5, 9, 11), r.integers(-128, 128, 256))], [rand(r, (2, 5, 9, 11))]),
    "conv+relu+lut": conv_relu_lut,
}


@pytest.mark.parametrize("case", list(CASES))
def test_every_removed_wait_is_caught(case):
    """Each wait of a lut kernel, the one ordering vu.lut after its table's load included, is needed."""
    chain, inputs = CASES[case](np.random.default_rng(7))
    cfg = Config(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768, vbuf_bytes=4096).validate()
    for s in candidates(tuple(chain), cfg)[:2]:
        kernel = build(*chain, config=cfg, schedule=s)
        assert "lookup table -> vbuf" in kernel.asm
        kill_all(kernel, inputs, f"{case}: {kernel.ir.notes[-1]}")
