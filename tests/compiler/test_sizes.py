"""Sizes checked up front (compiler/sizes.py): an impossible tensor, a layer that cannot fit the configured DDR
and a layer past the search's bound each get one CompileError line at once, before any search."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler import CompileError, ops, sizes
from compiler.graph import Graph
from compiler.search import search
from nnpsim.config import Config

from tests.fuzz.strategies import time_limit
from tests.helpers.networks import conv_op


def conv(shape, out=8):
    w = np.ones((out, shape[1], 3, 3), np.int8)
    return ops.conv2d(shape, w, padding=1, multiplier=1 << 30, shift=40)


def one_line(exc) -> str:
    line = str(exc.value)
    assert line.strip() and "\n" not in line, line
    return line


def test_an_unaddressable_input_is_refused_by_the_constructor():
    with time_limit(1, "refusing a 1x4x100000x100000 conv"), pytest.raises(CompileError) as exc:
        conv((1, 4, 100000, 100000))
    assert "x_shape: shape (1, 4, 100000, 100000) is 40,000,000,000 bytes" in one_line(exc)


def test_an_output_grown_by_padding_is_refused():
    with pytest.raises(CompileError, match="max_pool2d y: shape .* bytes, more than"):
        ops.max_pool2d((1, 2, 46340, 46340), 9, stride=1, padding=8)     # input just below 4 GiB, output past it
    with pytest.raises(CompileError, match="conv2d y: shape"):
        conv((1, 4, 30000, 30000), out=64)


def test_a_layer_past_the_ddr_is_refused_before_any_search():
    c = conv((1, 4, 30000, 30000), out=1)             # 3.6 GB: addressable, but not in 256 MiB
    with time_limit(1, "refusing a layer past DDR"), pytest.raises(CompileError) as exc:
        compiler.build(c)
    assert "do not fit the configured DDR of 268,435,456 bytes (memory.ddr.size)" in one_line(exc)
    g = Graph()
    g.output(g.add(c, g.input("x", c.x_shape), name="big"))
    with time_limit(1, "refusing a graph node past DDR"), pytest.raises(CompileError, match="node big .conv2d."):
        compiler.build(g)


def test_the_search_gives_up_on_a_huge_layer_and_says_so():
    c = conv((1, 8, 2048, 2048))                      # fits DDR; 32M outputs: 32,768 array tiles
    with time_limit(1, "the search's bound"), pytest.raises(CompileError) as exc:
        compiler.build(c)
    assert "the tiling search gives up" in one_line(exc) and f"more than the {sizes.MAX_TILES:,}" in str(exc.value)
    with time_limit(1, "the search's bound"), pytest.raises(CompileError, match="the tiling search gives up"):
        search((c,), Config())


def test_check_layer_is_what_a_sweep_calls():
    assert sizes.check_layer("layer", [((1, 4, 8, 8), 1), ((1, 8, 8, 8), 1)], Config()) == 768
    with pytest.raises(CompileError, match=r"layer: tensor 1: axis 2 is -1, outside \[0, 2147483647\]"):
        sizes.check_layer("layer", [((1, 4, 8, 8), 1), ((1, 8, -1, 8), 1)])
    with pytest.raises(CompileError, match="layer: 4,096 bytes do not fit the configured DDR of 1,024"):
        sizes.check_layer("layer", [((1, 4, 32, 32), 1)], Config(ddr_bytes=1024))


def test_a_network_whose_data_cannot_fit_ddr_is_refused_by_build():
    rng = np.random.default_rng(0)
    g = Graph()
    c = conv_op(rng, (1, 4, 6, 6), 8)
    g.output(g.add(c, g.input("x", (1, 4, 6, 6)), name="conv"))
    with pytest.raises(CompileError) as exc:
        compiler.build(g, config=Config(ddr_bytes=1024))      # every node fits; weights, tensors, description do not
    assert "the network: its data [0x0, " in one_line(exc) and "does not fit the configured DDR of 0x400" in str(exc.value)
