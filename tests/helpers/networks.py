"""Small networks and fused chains: quantised conv and depthwise layers with random weights, graphs
shaped like ResNet and MobileNetV2 blocks, random topologies, and the chains of the pipelining tests
built row by row (one kernel after another, interleaved, or with recomputed halos)."""
from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from compiler import interleave, kernel, ops
from compiler import pipeline as compile_pipeline
from compiler.graph import Graph, QuantParams
from compiler.ops import Reshape
from compiler.lowering import driver, ring
from compiler.quant import quantize_multipliers
from compiler.runtime import GraphModule
from compiler.schedule import Schedule
from compiler.search import row_by_row
from nnpsim.config import Config


# ------------------------------------------------------------------ layers and graphs

def conv_op(rng, shape, out, k=3, stride=1, relu=False, zp_out=-3, bias=True):
    c = shape[1]
    w = rng.integers(-20, 21, (out, c, k, k)).astype(np.int8)
    b = rng.integers(-800, 800, out).astype(np.int32) if bias else None
    m, s = quantize_multipliers(rng.uniform(0.5, 2.0, out) / (c * k * k * 8))
    return ops.conv2d(shape, w, b, stride=stride, padding=k // 2, x_zp=int(rng.integers(-4, 5)),
                      multiplier=m, shift=s, zp_out=zp_out, lo=zp_out if relu else -128)


def residual_net(rng, hw=10, c=8) -> Graph:
    """conv-relu, conv, add(shortcut first, conv second), relu, max pool, flatten, dense."""
    g = Graph("residual")
    x = g.input("input.1", (1, c, hw, hw), quant=QuantParams(np.float32(0.05), np.int64(2)))
    c1 = conv_op(rng, (1, c, hw, hw), 16, relu=True)
    a = g.add(c1, x, name="conv1")
    c2 = conv_op(rng, c1.output.shape, 16)
    b = g.add(c2, a, name="conv2")
    add = ops.add(c2.output.shape, za=-3, zb=-3, ma=3 << 13, mb=5 << 12, shift=14, zp_out=1)
    s = g.add(add, a, b, name="add")
    r = g.add(ops.relu(add.output.shape, 1), s, name="relu")
    p = g.add(ops.max_pool2d(add.output.shape, 2), r, name="pool")
    shape = ops.max_pool2d(add.output.shape, 2).output.shape
    flat = (1, int(np.prod(shape)))
    f = g.add(Reshape(shape, flat), p, name="flatten")
    w = rng.integers(-20, 21, (flat[1], 10)).astype(np.int8)
    m, sh = quantize_multipliers(np.full(10, 1.0 / 3000))
    d = g.add(ops.dense(flat, w, rng.integers(-500, 500, 10).astype(np.int32), x_zp=1, multiplier=m, shift=sh,
                        zp_out=4), f, name="fc", quant=QuantParams(np.float32(0.1), np.int64(4)))
    g.output(d)
    return g.validate()


def int8_data(rng, shape) -> np.ndarray:
    return rng.integers(-128, 128, shape).astype(np.int8)


def run_graph(lib, *inputs, races=True):
    m = GraphModule(lib)
    for k, a in enumerate(inputs):
        m.set_input(k, a)
    m.run(check_races=races)
    return m


@st.composite
def topologies(draw):
    """A random small network: convs (some strided, some 1x1), residual adds, pools."""
    seed = draw(st.integers(0, 2 ** 31))
    rng = np.random.default_rng(seed)
    hw = draw(st.integers(5, 12))
    c = draw(st.sampled_from([3, 8, 20, 33]))
    g = Graph("random")
    t = g.input("x", (1, c, hw, hw))
    shape = (1, c, hw, hw)
    for k in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["conv", "conv", "residual", "pool"]))
        if kind == "pool" and min(shape[2:]) >= 2:
            op = ops.max_pool2d(shape, 2)
            t = g.add(op, t, name=f"pool{k}")
        elif kind == "residual":
            op = conv_op(rng, shape, shape[1], k=draw(st.sampled_from([1, 3])))
            y = g.add(op, t, name=f"res{k}")
            add = ops.add(shape, za=-3, zb=int(rng.integers(-3, 3)), ma=1 << 13, mb=3 << 12, shift=14)
            t = g.add(add, *((t, y) if draw(st.booleans()) else (y, t)), name=f"add{k}")
            op = add
        else:
            op = conv_op(rng, shape, draw(st.sampled_from([8, 16, 40])), k=draw(st.sampled_from([1, 3])),
                       stride=draw(st.sampled_from([1, 2])), relu=draw(st.booleans()))
            t = g.add(op, t, name=f"conv{k}")
        shape = op.output.shape
    g.output(t)
    return g.validate(), seed


def dw_op(rng, shape, k=3, stride=1, lo=-128, hi=127, zp_out=-2):
    """A depthwise k x k conv with a clamp (MobileNet's relu6 as a clip)."""
    c = shape[1]
    w = rng.integers(-30, 31, (c, 1, k, k)).astype(np.int8)
    m, s = quantize_multipliers(rng.uniform(0.5, 2.0, c) / (k * k * 8))
    return ops.conv2d(shape, w, rng.integers(-300, 300, c).astype(np.int32), stride=stride, padding=k // 2,
                      groups=c, x_zp=int(rng.integers(-4, 5)), multiplier=m, shift=s, zp_out=zp_out,
                      lo=max(lo, -128), hi=hi)


def add_op(shape, zp_out=1):
    return ops.add(shape, za=-3, zb=2, ma=3 << 13, mb=5 << 12, shift=14, zp_out=zp_out)


def bottleneck(rng, c=32, hw=14) -> Graph:
    """A ResNet bottleneck: 1x1 reduce, 3x3, 1x1 expand, the identity shortcut added, relu; twice."""
    g = Graph("bottleneck")
    t = g.input("x", (1, c, hw, hw), quant=QuantParams(np.float32(0.05), np.int64(2)))
    shape = (1, c, hw, hw)
    for b in range(2):
        c1 = conv_op(rng, shape, c // 4, k=1, relu=True)
        a = g.add(c1, t, name=f"b{b}_conv1")
        c2 = conv_op(rng, c1.output.shape, c // 4, relu=True)
        a = g.add(c2, a, name=f"b{b}_conv2")
        c3 = conv_op(rng, c2.output.shape, c, k=1)
        a = g.add(c3, a, name=f"b{b}_conv3")
        s = g.add(add_op(shape), a, t, name=f"b{b}add_op")
        t = g.add(ops.relu(shape, 1), s, name=f"b{b}_relu")
    g.output(t)
    return g.validate()


def inverted_residual(rng, c=16, hw=12) -> Graph:
    """MobileNetV2 blocks: 1x1 expand + relu6, 3x3 depthwise + relu6, 1x1 project, shortcut add; then stride 2."""
    g = Graph("inverted")
    t = g.input("x", (1, c, hw, hw))
    shape = (1, c, hw, hw)
    for b, stride in enumerate((1, 2)):
        e = conv_op(rng, shape, 4 * c, k=1, relu=True)
        a = g.add(e, t, name=f"b{b}_expand")
        d = dw_op(rng, e.output.shape, stride=stride, lo=-2, hi=100)
        a = g.add(d, a, name=f"b{b}dw_op")
        p = conv_op(rng, d.output.shape, c, k=1)
        a = g.add(p, a, name=f"b{b}_project")
        if stride == 1:
            a = g.add(add_op(shape), a, t, name=f"b{b}add_op")
        t, shape = a, p.output.shape
    g.output(t)
    return g.validate()


def stem(rng, hw=32) -> Graph:
    """conv 3x3 stride 2 + relu, then max pool 3x3 / 2, then conv -> conv."""
    g = Graph("stem")
    t = g.input("x", (1, 3, hw, hw))
    c = conv_op(rng, (1, 3, hw, hw), 32, stride=2, relu=True)
    t = g.add(c, t, name="conv1")
    p = ops.max_pool2d(c.output.shape, 3, 2, 1)
    t = g.add(p, t, name="pool")
    c2 = conv_op(rng, p.output.shape, 48, relu=True)
    t = g.add(c2, t, name="conv2")
    c3 = conv_op(rng, c2.output.shape, 48, k=1, stride=2)
    t = g.add(c3, t, name="conv3")
    g.output(t)
    return g.validate()


# ------------------------------------------------------------------ chains of the pipelining tests

SMALL_NU = dict(ibuf_bytes=16384, abuf_bytes=16384, wbuf_bytes=32768)


def conv_conv(rng, c, hw, out=None):
    """3x3 conv + relu, then a 3x3 conv (hw need not divide any tile)."""
    a = conv_op(rng, (1, c, hw, hw + 3), out or 2 * c, relu=True)
    return a, conv_op(rng, a.output.shape, c, relu=True)


def inverted(rng, c, hw, stride=1):
    """MobileNetV2's expand 1x1 + relu6, 3x3 depthwise + relu6, project 1x1."""
    e = conv_op(rng, (1, c, hw, hw), 4 * c, k=1, relu=True)
    d = dw_op(rng, e.output.shape, stride=stride, lo=-2, hi=100)
    return e, d, conv_op(rng, d.output.shape, c, k=1)


def variant(chain, cfg: Config, lag: int | None):
    """The chain built with its convs row by row, one kernel after another (lag None) or interleaved."""
    s = row_by_row(Schedule(*chain, config=cfg), cfg)
    assert s is not None, "no row-by-row schedule for the chain"
    kir, steps = driver.lower(s, cfg)
    kir.body = interleave.body(steps, lag)
    predicted, usage, report = compile_pipeline.schedule(kir, cfg)
    return kernel.finish(tuple(chain), kir, cfg, predicted, usage, report), steps


def ring_variant(chain, cfg: Config, depth: int, ahead: int):
    """The chain built row by row with every intermediate a ring of `depth` bands, each producer
    `ahead` bands ahead: (Kernel, RingKernel)."""
    s = row_by_row(Schedule(*chain, config=cfg), cfg)
    assert s is not None, "no row-by-row schedule for the chain"
    rk = ring.lower_ring(s, cfg, depth)
    assert rk is not None, "the chain cannot recompute its halos"
    rk.kir.body = interleave.ring_body(rk, ahead)
    predicted, usage, report = compile_pipeline.schedule(rk.kir, cfg)
    return kernel.finish(tuple(chain), rk.kir, cfg, predicted, usage, report), rk


# A conv into a VU consumer (pool, elementwise): the consumer walks the intermediate's rows outermost.
SMALL_VU = dict(SMALL_NU, vbuf_bytes=32768)


def conv_pool(rng, c, h, w, mode="max", k=3, stride=2, pad=1):
    """3x3 conv + relu into a pool (h, w need not divide any tile)."""
    a = conv_op(rng, (1, c, h, w), c + 4, relu=True)
    if mode == "max":
        return a, ops.max_pool2d(a.output.shape, k, stride, pad)
    if mode == "sum":
        return a, ops.sum_pool2d(a.output.shape, k, stride, pad)
    return a, ops.avg_pool2d(a.output.shape, k, stride, pad, count_include_pad=mode == "avg_pads",
                             x_zp=int(rng.integers(-4, 5)))
