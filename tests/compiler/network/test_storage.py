"""network.storage: where tensors live.  A slice that is one contiguous run of its input (a channel range, a
band of rows) is a view of it, no kernel, where the tensors sharing bytes stay consistent; every network here
is bit-exact with its graph's model and race-free on the simulator."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import compiler
from compiler.graph import Graph
from compiler.network.storage import alias, nbytes
from compiler.ops import Concat
from compiler.ops.movement import Slice, slice_op
from tests.helpers.networks import conv_op, int8_data, run_graph

pytestmark = pytest.mark.usefixtures("warm_engine")


@st.composite
def slices(draw):
    """A Slice of a random shape of up to four axes, each axis kept whole, cut to a range, or strided."""
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=4)))
    starts, steps, counts = [], [], []
    for d in shape:
        start = draw(st.integers(0, d - 1))
        step = draw(st.sampled_from([1, 1, 1, 2, -1]))
        room = start + 1 if step < 0 else (d - 1 - start) // step + 1
        starts.append(start)
        steps.append(step)
        counts.append(draw(st.integers(1, room)))
    return Slice(shape, tuple(starts), tuple(steps), tuple(counts))


@settings(max_examples=300, deadline=None)
@given(op=slices())
def test_a_view_offset_is_given_exactly_for_the_slices_that_are_one_run_of_their_input(op):
    flat = np.arange(int(np.prod(op.in_shape))).reshape(op.in_shape)
    picked = op._compute(flat).ravel()
    run = bool(np.array_equal(picked, np.arange(picked[0], picked[0] + picked.size)))
    assert (op.view_offset() is not None) == run
    if run:
        assert op.view_offset() == picked[0]


def _split_net(rng, both_in_concat: bool) -> Graph:
    """conv -> s; a = s[:, :8], b = s[:, 8:]; m = conv(b); then concat(a, m) (ShuffleNet's unit: a is also a
    piece of the concat, so it must move) or concat(a, b, m) (YOLOv8's C2f: s lies at the concat's start)."""
    g = Graph("split")
    x = g.input("x", (1, 8, 6, 7))
    s = g.add(conv_op(rng, (1, 8, 6, 7), 16, k=1), x, name="conv")
    a = g.add(slice_op((1, 16, 6, 7), [0], [8], [1]), s, name="a")
    b = g.add(slice_op((1, 16, 6, 7), [8], [16], [1]), s, name="b")
    m = g.add(conv_op(rng, (1, 8, 6, 7), 8), b, name="m")
    pieces = (a, b, m) if both_in_concat else (a, m)
    cat = g.add(Concat(tuple((1, 8, 6, 7) for _ in pieces)), *pieces, name="cat")
    y = g.add(conv_op(rng, (1, 8 * len(pieces), 6, 7), 5), cat, name="head")
    g.output(y)
    return g.validate()


def _kinds(lib) -> list[str]:
    return [layer["ops"] for layer in lib.layers]


@pytest.mark.parametrize("both_in_concat", [False, True])
def test_a_channel_slice_is_a_view_unless_two_written_tensors_would_share_bytes(both_in_concat):
    rng = np.random.default_rng(4)
    g = _split_net(rng, both_in_concat)
    al, copies = alias(g)
    assert "b" not in copies and al.find("b") == (al.find("conv")[0], al.find("conv")[1] + 8 * 42)
    if both_in_concat:      # s at the concat's start: both halves are views, the concat's root spans them
        assert "a" not in copies and al.find("conv") == ("cat", 0) and al.find("m") == ("cat", 16 * 42)
    else:                   # a view a would put s's second half where m is written
        assert "a" in copies and al.find("a")[0] == "cat" and al.find("conv")[0] != "cat"
    lib = compiler.build(g)
    assert _kinds(lib).count("slice") == (0 if both_in_concat else 1)
    x = int8_data(rng, (1, 8, 6, 7))
    np.testing.assert_array_equal(run_graph(lib, x).get_output(0, quantized=True), g.reference(x)[0])


def test_a_slice_of_a_graph_input_is_a_view_of_its_buffer_and_one_that_is_an_output_moves():
    rng = np.random.default_rng(6)
    g = Graph("input_slice")
    x = g.input("x", (1, 12, 5, 9))
    rows = g.add(slice_op((1, 12, 5, 9), [4, 1], [12, 4], [1, 2]), x, name="rows")   # channels 4.., rows 1..3
    y = g.add(conv_op(rng, (1, 8, 3, 9), 6), rows, name="conv")
    tail = g.add(slice_op((1, 6, 3, 9), [2], [6], [1]), y, name="tail")
    g.output(tail)
    g.validate()
    assert "rows" in alias(g)[1]    # channels 4.. of rows 1..3 only: not one run
    g2 = Graph("input_view")
    x = g2.input("x", (1, 12, 5, 9))
    v = g2.add(slice_op((1, 12, 5, 9), [4], [12], [1]), x, name="view")
    y = g2.add(conv_op(rng, (1, 8, 5, 9), 6), v, name="conv")
    out = g2.add(slice_op((1, 6, 5, 9), [2], [6], [1]), y, name="tail")
    g2.output(out)
    g2.validate()
    al, copies = alias(g2)
    assert "view" not in copies and al.find("view") == ("x", 4 * 45)
    assert "tail" in copies     # a graph output has a buffer of its own
    for graph in (g, g2):
        lib = compiler.build(graph)
        xs = int8_data(rng, (1, 12, 5, 9))
        np.testing.assert_array_equal(run_graph(lib, xs).get_output(0, quantized=True), graph.reference(xs)[0])
    assert _kinds(compiler.build(g2)).count("slice") == 1


def test_the_root_of_shared_bytes_spans_every_tensor_in_them():
    g = _split_net(np.random.default_rng(2), True)
    al, _ = alias(g)
    for v in g.values:
        root, off = al.find(v)
        assert 0 <= off and off + nbytes(g.values[v]) <= nbytes(g.values[root])


@pytest.mark.parametrize("piece", [0, 1])
def test_a_concat_whose_piece_is_a_graph_output_moves_its_pieces(piece):
    """A graph output has a buffer of its own, so it cannot be a slice of the concat's bytes: the concat is a DMA
    kernel (it was refused: "graph input/output ... is a slice of ...: not supported")."""
    rng = np.random.default_rng(9 + piece)
    g = Graph("named_piece")
    x = g.input("x", (1, 3, 6, 7))
    a = g.add(conv_op(rng, (1, 3, 6, 7), 8), x, name="a")
    b = g.add(conv_op(rng, (1, 3, 6, 7), 8), x, name="b")
    cat = g.add(Concat(((1, 8, 6, 7), (1, 8, 6, 7))), a, b, name="cat")
    y = g.add(conv_op(rng, (1, 16, 6, 7), 4), cat, name="after")
    g.output(y, (a, b)[piece])
    g.validate()
    assert "cat" in alias(g)[1]
    xs = int8_data(rng, (1, 3, 6, 7))
    mod = run_graph(compiler.build(g), xs)
    for k, want in enumerate(g.reference(xs)):
        np.testing.assert_array_equal(mod.get_output(k, quantized=True), want)
