"""Fuzz the ONNX importer: quantised models with fields, attributes, initializers, shapes and tensor
names mutated, nodes dropped or duplicated, and their bytes truncated or flipped.

Property: `compiler.from_onnx` either returns a graph that validates (and runs its numpy reference
when small) or raises CompileError, never another exception (nor its "internal error" safety net),
within a time guard.  A model with nodes the NPU cannot run gives a HostedGraph instead: its NPU stages
validate, and the same model is refused with host_fallback=False.  Budgets follow tests/fuzz/conftest.py (FUZZ=long for long runs).
"""
from __future__ import annotations

import functools

import numpy as np
import onnx
from hypothesis import given
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper, numpy_helper

from compiler import CompileError, Graph, from_onnx, models
from compiler.host import HostedGraph
from compiler.models import Net

from .strategies import budget, time_limit

MAX_REFERENCE_ELEMENTS = 1 << 18     # run the reference of accepted graphs up to this many input elements


def _branchy(net: Net) -> None:
    x = net.conv(net.input, 6, 3, 2, act="relu6")
    y = net.conv(x, 6, 3, 1, groups=6, act=None)
    cat = net.concat([net.mul(x, y), net.avg_pool(x, 3, 1, 1, count_include_pad=1)], axis=1)
    g = net.flatten(net.global_avg_pool(net.max_pool(cat, 2, 2)))
    net.output(net.matmul(g, 4), net.reshape(net.gemm(g, 6, act="relu"), (2, 3)))


@functools.lru_cache(maxsize=None)
def seeds() -> dict[str, bytes]:
    """Valid quantised models to mutate: the tiny net and a branchy one, in both formats."""
    out = {}
    for fmt in models.FORMATS:
        out[f"tiny-{fmt}"] = models.tiny(fmt, size=8, samples=2).SerializeToString()
        net = Net("branchy", (1, 2, 10, 10), 1)
        _branchy(net)
        out[f"branchy-{fmt}"] = models.quantize(net.model(), fmt, samples=2).SerializeToString()
    return out


NAMES = sorted(seeds())


def check(model) -> Graph | None:
    """The importer's contract for one input: a valid graph or CompileError, fast."""
    with time_limit(20, "importing a model"):
        try:
            g = from_onnx(model, arithmetic="fixed")
        except CompileError as exc:
            msg = str(exc)
            assert msg.strip() and "internal error" not in msg and "Traceback" not in msg, msg
            return None
        if isinstance(g, HostedGraph):
            return _hosted(model, g)
        assert isinstance(g, Graph) and g.validate() is g
        if sum(int(np.prod(g.values[i].shape)) for i in g.inputs) <= MAX_REFERENCE_ELEMENTS:
            rng = np.random.default_rng(0)
            inputs = [rng.integers(-128, 128, g.values[i].shape).astype(g.values[i].dtype) for i in g.inputs]
            for y, name in zip(g.reference(*inputs), g.outputs):
                assert y.shape == g.values[name].shape
        return g


def _hosted(model, g: HostedGraph) -> HostedGraph:
    """A model with host parts: NPU stages that validate, host parts that hold nodes, and a refusal without them."""
    assert g.host_parts and all(p.nodes and p.model for p in g.host_parts)
    for stage in g.stages:
        assert not isinstance(stage, Graph) or stage.validate() is stage
    try:
        from_onnx(model, arithmetic="fixed", host_fallback=False)
    except CompileError as exc:
        assert "internal error" not in str(exc) and "Traceback" not in str(exc), str(exc)
    else:
        raise AssertionError("a model with host parts imported for the NPU alone")
    return g


def model_of(name: str) -> onnx.ModelProto:
    m = onnx.ModelProto()
    m.ParseFromString(seeds()[name])
    return m


def test_seeds_import():
    for name in NAMES:
        assert check(seeds()[name]) is not None, name


INTS = [0, 1, 2, 3, -1, -2, 7, 64, 255, 1 << 16, 1 << 31, -(1 << 31), (1 << 63) - 1]
FLOATS = [0.0, -0.0, 1.0, -1.0, 1e-30, 1e30, 6.0, float("nan"), float("inf"), -float("inf")]


def attribute_value(data, kind: int):
    """A value for an attribute of type `kind` (or of another type, sometimes)."""
    if data.draw(st.integers(0, 9)) == 0:
        kind = data.draw(st.sampled_from([AttributeProto.INT, AttributeProto.INTS, AttributeProto.FLOAT,
                                          AttributeProto.STRING]))
    if kind == AttributeProto.INT:
        return data.draw(st.sampled_from(INTS) | st.integers(-4, 9))
    if kind == AttributeProto.INTS:
        return data.draw(st.lists(st.sampled_from(INTS) | st.integers(-2, 5), max_size=5))
    if kind == AttributeProto.FLOAT:
        return data.draw(st.sampled_from(FLOATS) | st.floats(-10, 10))
    if kind == AttributeProto.FLOATS:
        return data.draw(st.lists(st.sampled_from(FLOATS), max_size=3))
    return data.draw(st.sampled_from(["NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER", "", "x" * 40]))


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(150)
def test_attributes(name, data):
    """Replace, delete or add attributes (wrong values, wrong types, unknown names)."""
    m = model_of(name)
    node = data.draw(st.sampled_from(list(m.graph.node)))
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    attrs = list(node.attribute)
    if action == "replace" and attrs:
        a = data.draw(st.sampled_from(attrs))
        value = attribute_value(data, a.type)
        if value == []:
            value = [0]
        new = helper.make_attribute(a.name, value)
        a.CopyFrom(new)
    elif action == "delete" and attrs:
        node.attribute.remove(data.draw(st.sampled_from(attrs)))
    else:
        key = data.draw(st.sampled_from(["strides", "pads", "kernel_shape", "dilations", "group", "axis",
                                         "auto_pad", "ceil_mode", "count_include_pad", "transB", "alpha",
                                         "channels_last", "min", "allowzero", "bogus"]))
        value = attribute_value(data, data.draw(st.sampled_from([AttributeProto.INT, AttributeProto.INTS,
                                                                 AttributeProto.FLOAT, AttributeProto.STRING])))
        node.attribute.append(helper.make_attribute(key, value if value != [] else [1]))
    check(m)


def _array_variants(data, a: np.ndarray) -> np.ndarray:
    kind = data.draw(st.sampled_from(["values", "shape", "dtype", "empty", "scalar"]))
    if kind == "values" and a.size:
        flat = a.astype(np.float64).ravel().copy()
        i = data.draw(st.integers(0, flat.size - 1))
        flat[i] = data.draw(st.sampled_from(FLOATS + [127.0, -128.0, 300.0, 2.0 ** 31, -(2.0 ** 40)]))
        if a.dtype.kind in "iu":
            info = np.iinfo(a.dtype)
            hi = float(info.max) if float(info.max) <= info.max else np.nextafter(float(info.max), 0)  # int64: 2**63
            flat = np.nan_to_num(flat, nan=0, posinf=hi, neginf=info.min).clip(info.min, hi)
        return flat.astype(a.dtype).reshape(a.shape)
    if kind == "shape" and a.size:
        return a.ravel()[:max(1, a.size // 2)]
    if kind == "dtype":
        return a.astype(data.draw(st.sampled_from([np.uint8, np.int8, np.int32, np.int64, np.float32,
                                                   np.float64, np.float16])))
    if kind == "empty":
        return a.ravel()[:0]
    return a.ravel()[:1].reshape(())


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(150)
def test_initializers(name, data):
    """Scales, zero points, weights, biases and shapes with bad values, shapes and dtypes;
    initializers deleted, duplicated, or their bytes cut."""
    m = model_of(name)
    inits = list(m.graph.initializer)
    t = data.draw(st.sampled_from(inits))
    action = data.draw(st.sampled_from(["array", "array", "delete", "duplicate", "dims", "raw", "type"]))
    if action == "array":
        t.CopyFrom(numpy_helper.from_array(_array_variants(data, numpy_helper.to_array(t)), t.name))
    elif action == "delete":
        m.graph.initializer.remove(t)
    elif action == "duplicate":
        m.graph.initializer.append(t)
    elif action == "dims":
        del t.dims[:]
        t.dims.extend(data.draw(st.lists(st.sampled_from([0, 1, 2, 3, 8, -1, 1 << 20, 1 << 40]), max_size=5)))
    elif action == "raw":
        t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t), t.name))
        t.raw_data = t.raw_data[:data.draw(st.integers(0, max(0, len(t.raw_data) - 1)))]
    else:
        t.data_type = data.draw(st.sampled_from([0, 2, 3, 6, 7, 9, 10, 16, 17, 99]))
    check(m)


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(200)
def test_tensor_names(name, data):
    """Inputs and outputs renamed to dangling or existing tensors (duplicates, cycles, ''), swapped;
    nodes deleted, duplicated or moved."""
    m = model_of(name)
    nodes = list(m.graph.node)
    names = sorted({n for node in nodes for n in list(node.input) + list(node.output) if n}
                   | {t.name for t in m.graph.initializer})
    action = data.draw(st.sampled_from(["input", "output", "swap", "delete", "duplicate", "move"]))
    node = data.draw(st.sampled_from(nodes))
    if action in ("input", "output"):
        slots = node.input if action == "input" else node.output
        if len(slots):
            i = data.draw(st.integers(0, len(slots) - 1))
            slots[i] = data.draw(st.sampled_from(names) | st.sampled_from(["", "nowhere", "input", node.name]))
    elif action == "swap" and len(node.input) > 1:
        i, j = data.draw(st.permutations(range(len(node.input))))[:2]
        node.input[i], node.input[j] = node.input[j], node.input[i]
    elif action == "delete":
        m.graph.node.remove(node)
    elif action == "duplicate":
        m.graph.node.append(node)
    else:
        m.graph.node.remove(node)
        m.graph.node.insert(data.draw(st.integers(0, len(m.graph.node))), node)
    check(m)


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(100)
def test_op_types_and_domains(name, data):
    """A node given another op type (supported or not) or domain."""
    m = model_of(name)
    node = data.draw(st.sampled_from(list(m.graph.node)))
    if data.draw(st.booleans()):
        node.op_type = data.draw(st.sampled_from(sorted({n.op_type for n in m.graph.node})
                                                 + ["Sigmoid", "Softmax", "Pad", "Transpose", "", "QLinearConv"]))
    else:
        node.domain = data.draw(st.sampled_from(["", "ai.onnx", "com.microsoft", "ai.onnx.ml", "x"]))
    check(m)


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(100)
def test_graph_inputs_and_outputs(name, data):
    """Input shapes and element types changed (zero, negative, symbolic, huge dimensions), inputs
    and outputs removed, renamed or added."""
    m = model_of(name)
    vi = m.graph.input[0]
    action = data.draw(st.sampled_from(["dim", "rank", "type", "remove_input", "output", "add_output",
                                        "remove_output"]))
    dims = vi.type.tensor_type.shape.dim
    if action == "dim":
        d = dims[data.draw(st.integers(0, len(dims) - 1))]
        choice = data.draw(st.sampled_from([0, 1, 2, 5, 64, 1 << 20, 1 << 31, "N", ""]))
        if isinstance(choice, str):
            d.dim_param = choice
        else:
            d.dim_value = choice
    elif action == "rank":
        if data.draw(st.booleans()):
            del dims[-1]
        else:
            dims.add().dim_value = 2
    elif action == "type":
        vi.type.tensor_type.elem_type = data.draw(st.sampled_from([TensorProto.INT8, TensorProto.UINT8,
                                                                   TensorProto.FLOAT16, TensorProto.DOUBLE, 0]))
    elif action == "remove_input":
        m.graph.input.remove(vi)
    elif action == "output":
        names = sorted({o for n in m.graph.node for o in n.output} | {"input", "nowhere"})
        m.graph.output[0].name = data.draw(st.sampled_from(names))
    elif action == "add_output":
        out = data.draw(st.sampled_from(sorted({o for n in m.graph.node for o in n.output})))
        m.graph.output.append(helper.make_tensor_value_info(out, TensorProto.FLOAT, None))
    else:
        m.graph.output.remove(m.graph.output[0])
    check(m)


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(150)
def test_bytes(name, data):
    """The serialized model truncated, bit-flipped or overwritten."""
    blob = bytearray(seeds()[name])
    action = data.draw(st.sampled_from(["truncate", "flip", "overwrite"]))
    if action == "truncate":
        blob = blob[:data.draw(st.integers(0, len(blob) - 1))]
    elif action == "flip":
        for bit in data.draw(st.lists(st.integers(0, 8 * len(blob) - 1), min_size=1, max_size=8)):
            blob[bit // 8] ^= 1 << (bit % 8)
    else:
        at = data.draw(st.integers(0, len(blob) - 1))
        junk = data.draw(st.binary(min_size=1, max_size=16))
        blob[at:at + len(junk)] = junk
    check(bytes(blob))


@given(blob=st.binary(max_size=300))
@budget(60)
def test_random_bytes(blob):
    check(blob)


def test_every_truncation_of_a_small_model():
    """Every prefix of the tiny model: a graph (a prefix that is itself a valid model) or CompileError."""
    blob = seeds()["tiny-qoperator"]
    for n in range(0, len(blob), max(1, len(blob) // budget(400).max_examples)):
        check(blob[:n])
