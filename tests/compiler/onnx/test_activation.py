"""Unary activations from ONNX (compiler/onnx/activation.py): QLinearSigmoid / QLinearLeakyRelu and QDQ
float islands, each one lut, against onnxruntime at ORT_DISABLE_ALL and ORT_ENABLE_ALL.

Models are built with onnx.helper: QuantizeLinear of a float input, the activation (a QLinear op, or
DequantizeLinear, a float island, QuantizeLinear), DequantizeLinear.  Hypothesis draws the shape (sizes
that do not divide the hardware's) and the scales; the compiled network's int8 output must equal
onnxruntime's on every element at both levels, race-checked.  A conv followed by an activation runs as
one kernel (the lut in its epilogue).  Islands that are no function of one activation are refused,
naming the node.
"""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper, numpy_helper

import compiler
from compiler import CompileError

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
F = TensorProto.FLOAT
LEVELS = ("ORT_DISABLE_ALL", "ORT_ENABLE_ALL")


def node(op, ins, outs, **kw):
    return helper.make_node(op, ins, outs, **kw)


# name -> (nodes from "xf" to "yf", scalar float constants, opset)
ISLANDS = {
    "Sigmoid": ([node("Sigmoid", ["xf"], ["yf"])], {}, 13),
    "SiLU x*Sigmoid(x)": ([node("Sigmoid", ["xf"], ["s"]), node("Mul", ["xf", "s"], ["yf"])], {}, 13),
    "HardSwish": ([node("HardSwish", ["xf"], ["yf"])], {}, 14),
    "x*HardSigmoid(x)": ([node("HardSigmoid", ["xf"], ["s"], alpha=1 / 6), node("Mul", ["s", "xf"], ["yf"])], {}, 13),
    "Tanh": ([node("Tanh", ["xf"], ["yf"])], {}, 13),
    "LeakyRelu": ([node("LeakyRelu", ["xf"], ["yf"], alpha=0.1)], {}, 13),
    "Elu": ([node("Elu", ["xf"], ["yf"], alpha=0.7)], {}, 13),
    "Gelu": ([node("Gelu", ["xf"], ["yf"])], {}, 20),
    "Gelu through Erf": ([node("Div", ["xf", "r2"], ["a"]), node("Erf", ["a"], ["b"]), node("Add", ["b", "one"], ["c"]),
                          node("Mul", ["xf", "c"], ["d"]), node("Mul", ["d", "half"], ["yf"])],
                         {"r2": 1.4142135, "one": 1.0, "half": 0.5}, 13),
    "Exp": ([node("Exp", ["xf"], ["yf"])], {}, 13),
    "Softplus": ([node("Softplus", ["xf"], ["yf"])], {}, 13),
    "Relu6 then Sigmoid": ([node("Clip", ["xf", "zero", "six"], ["c"]), node("Sigmoid", ["c"], ["yf"])],
                           {"zero": 0.0, "six": 6.0}, 13),
}
QOPS = ("QLinearSigmoid", "QLinearLeakyRelu")


def model(shape, sx, zx, sy, zy, island=None, qop=None, conv=None, zdtype=np.int8):
    """x -> QuantizeLinear -> [QLinearConv ->] the activation -> DequantizeLinear -> y (zdtype: the
    activations' type, int8 or uint8 with the zero points given in int8's range, moved by 128)."""
    shift = 128 if zdtype == np.uint8 else 0
    inits = [numpy_helper.from_array(np.array(v, dt), k) for k, v, dt in
             [("sx", sx, np.float32), ("zx", zx + shift, zdtype), ("sy", sy, np.float32), ("zy", zy + shift, zdtype)]]
    nodes = [node("QuantizeLinear", ["x", "sx", "zx"], ["xq"])]
    out_shape, opset = list(shape), 13
    if conv is not None:
        w, b, sc, zc = conv
        inits += [numpy_helper.from_array(w, "w"), numpy_helper.from_array(np.array(0.02, np.float32), "sw"),
                  numpy_helper.from_array(np.array(0, np.int8), "zw"), numpy_helper.from_array(b, "b"),
                  numpy_helper.from_array(np.array(sc, np.float32), "sc"),
                  numpy_helper.from_array(np.array(zc, np.int8), "zc")]
        nodes.append(node("QLinearConv", ["xq", "sx", "zx", "w", "sw", "zw", "sc", "zc", "b"], ["xq2"],
                          pads=[1, 1, 1, 1]))
        out_shape[1] = w.shape[0]
        src, (sx, zx) = "xq2", ("sc", "zc")
    else:
        src, sx, zx = "xq", "sx", "zx"
    if qop:
        nodes.append(node(qop, [src, sx, zx, "sy", "zy"], ["yq"], domain="com.microsoft",
                          **({"alpha": 0.13} if qop == "QLinearLeakyRelu" else {})))
    else:
        body, consts, opset = ISLANDS[island]
        nodes.append(node("DequantizeLinear", [src, sx, zx], ["xf"]))
        nodes += body
        inits += [numpy_helper.from_array(np.array(v, np.float32), k) for k, v in consts.items()]
        nodes.append(node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]))
    nodes.append(node("DequantizeLinear", ["yq", "sy", "zy"], ["y"]))
    g = helper.make_graph(nodes, "act", [helper.make_tensor_value_info("x", F, list(shape))],
                          [helper.make_tensor_value_info("y", F, out_shape)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 9
    onnx.checker.check_model(m)
    return m


def ort_int8(m, x, level: str, yq) -> np.ndarray:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    opts.intra_op_num_threads = 1
    return yq.quantize(ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
                       .run(None, {"x": x})[0])


def compare(m, shape, seed: int) -> compiler.Graph:
    """The compiled network's int8 output equals onnxruntime's at both levels on two random inputs."""
    g = compiler.from_onnx(m)
    mod = compiler.GraphModule(compiler.build(g))
    rng = np.random.default_rng(seed)
    xq, yq = g.values[g.inputs[0]].quant, g.values[g.outputs[0]].quant
    for _ in range(2):
        x = (rng.standard_normal(shape) * 4).astype(np.float32)
        mod.set_input(g.inputs[0], xq.quantize(x))
        mod.run(check_races=True)
        y = mod.get_output(0, quantized=True)
        for level in LEVELS:
            np.testing.assert_array_equal(y, ort_int8(m, x, level, yq), err_msg=level)
    return g


shapes = st.tuples(st.integers(1, 2), st.integers(1, 40), st.integers(1, 13), st.integers(1, 17))
scales = st.tuples(st.floats(0.005, 0.1), st.integers(-20, 20), st.floats(0.002, 0.05), st.integers(-100, 100))


@pytest.mark.parametrize("qop", QOPS)
@SETTINGS
@given(shape=shapes, q=scales, seed=st.integers(0, 2**16))
def test_qlinear_lookup_ops_are_bit_exact(qop, shape, q, seed):
    g = compare(model(shape, *q, qop=qop), shape, seed)
    assert [n.op.kind for n in g.nodes] == ["lut"]


@pytest.mark.parametrize("island", list(ISLANDS))
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, q=scales, seed=st.integers(0, 2**16))
def test_qdq_islands_are_one_lut_and_bit_exact(island, shape, q, seed):
    g = compare(model(shape, *q, island=island), shape, seed)
    assert [n.op.kind for n in g.nodes][-1] == "lut" and len(g.nodes) <= 2    # Relu6 is a clip before it


@pytest.mark.parametrize("island", ["HardSwish", "SiLU x*Sigmoid(x)"])
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shape=shapes, q=scales, seed=st.integers(0, 2**16))
def test_uint8_islands_are_bit_exact(island, shape, q, seed):
    """A uint8 island's table is built on the int8 view of its codes (the QuantizeLinear's zero point too)."""
    m = model(shape, *q, island=island, zdtype=np.uint8)
    mod = compiler.GraphModule(compiler.build(compiler.from_onnx(m)))
    x = (np.random.default_rng(seed).standard_normal(shape) * 4).astype(np.float32)
    mod.set_input(0, x)
    mod.run(check_races=True)
    for level in LEVELS:
        opts = ort.SessionOptions()
        opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
        want = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"]).run(None, {"x": x})
        np.testing.assert_array_equal(mod.get_output(0), want[0], err_msg=level)


@pytest.mark.parametrize("act", ["QLinearSigmoid", "SiLU x*Sigmoid(x)", "HardSwish"])
def test_a_conv_then_an_activation_is_one_kernel(act):
    rng = np.random.default_rng(5)
    shape = (1, 6, 9, 11)
    conv = (rng.integers(-100, 100, (10, 6, 3, 3)).astype(np.int8), rng.integers(-500, 500, 10).astype(np.int32),
            0.04, -3)
    m = model(shape, 0.05, 2, 0.01, -60, qop=act if act in QOPS else None, island=None if act in QOPS else act,
              conv=conv)
    g = compare(m, shape, 1)
    assert [n.op.kind for n in g.nodes] == ["conv2d", "lut"]
    lib = compiler.build(g)
    assert len(lib.layers) == 1 and "vu.lut" in lib.asm


def refused(nodes, consts, match):
    inits = [numpy_helper.from_array(np.array(v, np.float32 if isinstance(v, float) or np.ndim(v) else np.int8), k)
             for k, v in {"sx": 0.05, "zx": 0, "sy": 0.01, "zy": 0, **consts}.items()]
    g = helper.make_graph([node("QuantizeLinear", ["x", "sx", "zx"], ["xq"]),
                           node("QuantizeLinear", ["x2", "sx", "zx"], ["x2q"]),
                           node("DequantizeLinear", ["xq", "sx", "zx"], ["xf"]),
                           node("DequantizeLinear", ["x2q", "sx", "zx"], ["x2f"])] + nodes
                          + [node("QuantizeLinear", ["yf", "sy", "zy"], ["yq"]),
                             node("DequantizeLinear", ["yq", "sy", "zy"], ["y"])], "bad",
                          [helper.make_tensor_value_info(n, F, [1, 3, 4, 4]) for n in ("x", "x2")],
                          [helper.make_tensor_value_info("y", F, [1, 3, 4, 4])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    with pytest.raises(CompileError, match=match):
        compiler.from_onnx(m)


def test_an_island_onnxruntime_cannot_run_is_refused_naming_the_node():
    refused([node("Elu", ["xf"], ["yf"], gamma=2.0)], {}, r"\(Elu\): onnxruntime cannot run it on the 256 codes")


def test_islands_that_are_no_function_of_one_activation_are_refused():
    refused([node("Sigmoid", ["xf"], ["s"]), node("Mul", ["s", "x2f"], ["yf"])], {},
            r"node 'Mul_\d+' \(Mul\): .*functions of two tensors")
    refused([node("Sigmoid", ["xf"], ["s"]), node("Mul", ["s", "k"], ["yf"])],
            {"k": np.full((1, 3, 1, 1), 0.5, np.float32)}, r"\(Mul\): input 1 \('k'\) must be a scalar constant")


@pytest.mark.parametrize("act", ["QLinearSigmoid", "Sigmoid"])
def test_a_lut_on_symbolic_sizes_is_refused_naming_the_node(act):
    """The dynamic wing has no lut: building a model over a range of sizes is one clear CompileError."""
    m = model((1, 3, "h", 5), 0.05, 0, 0.01, 0, qop=act if act in QOPS else None,
              island=None if act in QOPS else act)
    dg = compiler.from_onnx(m, dims={"h": (1, 30)})
    with pytest.raises(CompileError, match=r"lut.* has no dynamic lowering yet"):
        compiler.build(dg)
