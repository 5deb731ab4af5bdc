"""compiler.graph: the builder, validation (names, shapes, producers, cycles), printing and reference."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import CompileError, Graph, QuantParams, ops, quantize_multiplier
from compiler.graph import Node, Value
from compiler.ops import Concat, Reshape

X = (1, 3, 8, 8)


def conv(x_shape=X, o=4, **kw):
    rng = np.random.default_rng(0)
    w = rng.integers(-20, 20, (o, x_shape[1], 3, 3), dtype=np.int8)
    return ops.conv2d(x_shape, w, padding=1, multiplier=1 << 30, shift=38, **kw)


def small_graph() -> Graph:
    """x -> conv -> relu -+-> add -> flatten -> concat(flat, flat)
                          +-> (conv2) -+"""
    g = Graph("small")
    x = g.input("x", X, quant=QuantParams(0.05, -3))
    c1 = g.add(conv(), x, name="conv1", quant=QuantParams(np.linspace(0.1, 0.2, 4), np.zeros(4, int), axis=1))
    r = g.add(ops.relu((1, 4, 8, 8), zp=-5), c1, name="relu")
    c2 = g.add(conv((1, 4, 8, 8)), r, name="conv2")
    m, s = quantize_multiplier(0.5)
    a = g.add(ops.add((1, 4, 8, 8), ma=m, mb=m, shift=s), r, c2, name="add", quant=QuantParams(0.1, 0))
    f = g.add(Reshape((1, 4, 8, 8), (1, 256)), a, name="flatten")
    y = g.add(Concat([(1, 256), (1, 256)], axis=1), f, f, name="concat", output="y")
    g.output(y)
    return g


# ---------------------------------------------------------------- builder and reference

def test_builder_names_shapes_and_order():
    g = small_graph().validate()
    assert g.inputs == ["x"] and g.outputs == ["y"]
    assert [n.name for n in g.nodes] == ["conv1", "relu", "conv2", "add", "flatten", "concat"]
    assert g.values["y"].shape == (1, 512) and g.values["y"].dtype == "int8"
    assert g.producer("conv1").op.kind == "conv2d" and g.producer("x") is None
    assert [n.name for n in g.consumers("relu")] == ["conv2", "add"]


def test_reference_matches_the_ops_by_hand():
    g = small_graph()
    x = np.random.default_rng(1).integers(-128, 128, X, dtype=np.int8)
    (y,) = g.reference(x)
    n = {node.name: node for node in g.nodes}
    c1 = n["conv1"].op.reference(x)
    r = n["relu"].op.reference(c1)
    a = n["add"].op.reference(r, n["conv2"].op.reference(r))
    assert np.array_equal(y, np.concatenate([a.reshape(1, 256)] * 2, axis=1))
    assert np.array_equal(g.reference({"x": x})[0], y)


def test_evaluate_returns_every_value_and_forced_values_feed_later_nodes():
    g = small_graph()
    x = np.zeros(X, dtype=np.int8)
    values = g.evaluate(x)
    assert set(values) == set(g.values)
    forced = np.full((1, 4, 8, 8), 7, dtype=np.int8)
    again = g.evaluate(x, forced={"relu": forced})
    assert np.array_equal(again["relu"], values["relu"])          # its own computation is reported
    conv2 = g.producer("conv2").op
    assert np.array_equal(again["conv2"], conv2.reference(forced))  # but conv2 read the forced value


def test_reference_rejects_wrong_inputs():
    g = small_graph()
    with pytest.raises(CompileError, match=r"input 'x' is \[1, 3, 8, 8\] int32"):
        g.reference(np.zeros(X, dtype=np.int32))
    with pytest.raises(CompileError, match="takes 1 input"):
        g.reference()
    with pytest.raises(CompileError, match=r"missing \['x'\], unknown \['z'\]"):
        g.reference({"z": np.zeros(X, np.int8)})


def test_layout_ops():
    r = Reshape((2, 3, 4), (6, 4))
    a = np.arange(24, dtype=np.int8).reshape(2, 3, 4)
    assert r.kind == "reshape" and r.output.shape == (6, 4)
    assert np.array_equal(r.reference(a), a.reshape(6, 4))
    c = Concat([(1, 2, 3), (1, 5, 3)], axis=-2)
    assert c.axis == 1 and c.output.shape == (1, 7, 3) and [t.name for t in c.inputs] == ["x0", "x1"]
    with pytest.raises(CompileError, match=r"\(2, 3, 4\) \(24 elements\) to \(5, 5\)"):
        Reshape((2, 3, 4), (5, 5))
    with pytest.raises(CompileError, match="input 1 has shape"):
        Concat([(1, 2, 3), (1, 2, 4)], axis=1)
    with pytest.raises(CompileError, match="axis = 3 is out of range"):
        Concat([(1, 2, 3)], axis=3)
    with pytest.raises(CompileError, match="dtype must be one of"):
        Reshape((4,), (2, 2), "float32")


def test_quant_params():
    q = QuantParams(0.5, -3)
    assert not q.per_channel and str(q) == "s=0.5 zp=-3"
    x = np.array([-1.25, 0.0, 0.25, 0.75, 100.0], dtype=np.float32)
    assert q.quantize(x).tolist() == [-5, -3, -3, -1, 127]     # round half to even, saturate
    assert q.dequantize(np.array([-3, -1], np.int8)).tolist() == [0.0, 1.0]
    pc = QuantParams([0.1, 0.2], [0, 1], axis=1)
    assert pc.per_channel and "s[2, axis 1]=0.1..0.2 zp=0..1" == str(pc)
    assert pc.dequantize(np.full((1, 2, 1), 3, np.int8))[0, :, 0].tolist() == pytest.approx([0.3, 0.4])
    assert q.same_as(QuantParams(np.float32(0.5), np.int8(-3))) and not q.same_as(pc)
    for bad, match in [((0.0, 0), "positive"), ((np.nan, 0), "positive"), (([0.1, 0.2], 0), "needs an axis"),
                       (([0.1], [0, 0], 0), "zero_point has shape"), ((0.1, 0.5), "integers")]:
        with pytest.raises(CompileError, match=match):
            QuantParams(*bad)


# ---------------------------------------------------------------- builder errors

def test_builder_errors_name_what_and_where():
    g = Graph()
    x = g.input("x", X)
    with pytest.raises(CompileError, match=r"node 'c' \(conv2d\): input x = 'nope' is not a value"):
        g.add(conv(), "nope", name="c")
    with pytest.raises(CompileError, match=r"input x = 'x' is \[1, 3, 8, 8\] int8, the op expects \[1, 4, 8, 8\]"):
        g.add(conv((1, 4, 8, 8)), x, name="c")
    with pytest.raises(CompileError, match=r"takes 2 input\(s\) \(a, b\), got 1"):
        g.add(ops.add(X, ma=1, mb=1, shift=0), x)
    g.add(conv(), x, name="c")
    with pytest.raises(CompileError, match="node name 'c' is already used"):
        g.add(conv(), x, name="c")
    with pytest.raises(CompileError, match="value name 'x' is already used"):
        g.add(conv(), x, name="d", output="x")
    with pytest.raises(CompileError, match="must be a compiler.ops op"):
        g.add("conv", x)
    with pytest.raises(CompileError, match="4 per-channel scales for 3 channels"):
        g.input("y", X, quant=QuantParams([1, 2, 3, 4], 0, axis=1))
    with pytest.raises(CompileError, match="output 'zz' is not a value"):
        g.output("zz")


# ---------------------------------------------------------------- validation

def _raw(nodes, values, inputs, outputs) -> Graph:
    """A graph assembled by hand (the builder refuses most of these mistakes up front)."""
    g = Graph("raw")
    g.values = {v.name: v for v in values}
    g.nodes, g.inputs, g.outputs = nodes, inputs, outputs
    return g


R = (1, 4)


def relu(name, src, dst):
    return Node(name, ops.relu(R), (src,), dst)


def test_cycle_is_named():
    vals = [Value(n, R, "int8") for n in ("x", "a", "b", "c", "y")]
    g = _raw([relu("n1", "x", "a"), relu("n2", "c", "b"), relu("n3", "b", "c"), relu("n4", "b", "y")],
             vals, ["x"], ["y"])
    with pytest.raises(CompileError, match="cycle: n2 -> n3 -> n2|cycle: n3 -> n2 -> n3"):
        g.validate()


def test_self_loop_is_a_cycle():
    g = _raw([relu("loop", "z", "z")], [Value("x", R, "int8"), Value("z", R, "int8")], ["x"], ["z"])
    with pytest.raises(CompileError, match="cycle: loop -> loop"):
        g.validate()


def test_validate_sorts_nodes_topologically():
    vals = [Value(n, R, "int8") for n in ("x", "a", "b", "y")]
    g = _raw([relu("third", "b", "y"), relu("first", "x", "a"), relu("second", "a", "b")], vals, ["x"], ["y"])
    assert [n.name for n in g.validate().nodes] == ["first", "second", "third"]


def test_validate_lists_every_problem():
    vals = [Value("x", R, "int8"), Value("a", R, "int8"), Value("w", (1, 5), "int8"), Value("q", R, "int32"),
            Value("y", R, "int8")]
    nodes = [relu("n1", "x", "a"), relu("n1", "x", "a"),            # duplicate node name and writer
             relu("n2", "w", "y"),                                  # shape mismatch
             relu("n3", "q", "y"),                                  # dtype mismatch, y written twice
             relu("n4", "ghost", "x"),                              # unknown value, writes a graph input
             Node("n5", ops.relu(R), ("a", "a"), "zz")]             # wrong arity, output not a value
    g = _raw(nodes, vals, ["x"], ["y", "missing"])
    with pytest.raises(CompileError) as e:
        g.validate()
    msg = str(e.value)
    for needle in ["node name 'n1' is used twice",
                   "value 'a' is written by node 'n1' and by 'n1'",
                   "node 'n2' (clip): input x = 'w' is [1, 5] int8, the op expects [1, 4] int8",
                   "node 'n3' (clip): input x = 'q' is [1, 4] int32",
                   "value 'y' is written by node 'n2' and by 'n3'",
                   "input x = 'ghost' is not a value",
                   "graph input 'x' is also written by node 'n4'",
                   "node 'n5' (clip) takes 1 input(s) (x), got 2",
                   "output value 'zz' does not exist",
                   "graph output 'missing' is not a value"]:
        assert needle in msg, (needle, msg)


def test_validate_unproduced_input_and_no_outputs():
    g = _raw([relu("n", "a", "y")], [Value("a", R, "int8"), Value("y", R, "int8")], [], [])
    with pytest.raises(CompileError) as e:
        g.validate()
    assert "node 'n' reads 'a', which no node writes and is not a graph input" in str(e.value)
    assert "the graph has no outputs" in str(e.value)


def test_validate_checks_output_value_against_the_op():
    g = _raw([relu("n", "x", "y")], [Value("x", R, "int8"), Value("y", (1, 5), "int8")], ["x"], ["y"])
    with pytest.raises(CompileError, match=r"output 'y' is \[1, 5\] int8, the op writes \[1, 4\] int8"):
        g.validate()


def test_rename():
    g = small_graph()
    g.rename("relu", "r")
    assert "r" in g.values and "relu" not in g.values and g.values["r"].name == "r"
    assert g.producer("r").name == "relu" and g.producer("conv2").inputs == ("r",)
    g.validate()
    with pytest.raises(CompileError, match="already used"):
        g.rename("r", "x")


# ---------------------------------------------------------------- printing

def test_str_one_line_per_node_with_shapes_and_quantisation():
    g = small_graph()
    text = str(g)
    lines = text.splitlines()
    assert lines[0] == "graph small: 1 input(s), 1 output(s), 6 node(s)"
    assert lines[1] == "  input   x[1, 3, 8, 8] int8  s=0.05 zp=-3"
    conv1 = next(line for line in lines if line.lstrip().startswith("conv1"))
    assert "conv2d" in conv1 and "x[1, 3, 8, 8] -> conv1[1, 4, 8, 8] int8" in conv1
    assert "s[4, axis 1]=0.1..0.2 zp=0" in conv1              # per-channel, abbreviated
    add = next(line for line in lines if line.lstrip().startswith("add"))
    assert "relu[1, 4, 8, 8], conv2[1, 4, 8, 8] -> add[1, 4, 8, 8] int8  s=0.1 zp=0" in add
    assert lines[-1] == "  output  y[1, 512] int8"
    assert len(lines) == 1 + 1 + 6 + 1
    assert repr(g).startswith("<Graph 'small': 6 nodes")
