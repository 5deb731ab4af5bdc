"""network.partition's x * act(x) rule: a conv's SiLU (x * sigmoid(x)) or HardSwish (x * hardsigmoid(x)),
imported as a lut and a mul that both read the conv's output, becomes one lut in the conv's epilogue
(ops.times_self), bit-exact with onnxruntime at both optimisation levels on shapes hypothesis draws (sizes
that do not divide the 32x32 array), with the cost model's prediction equal to the simulated cycles."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from onnx import TensorProto, helper

import compiler
from compiler.network.partition import partition
from tests.helpers.activations import ACTS, run_both, self_product_model

pytestmark = pytest.mark.usefixtures("warm_engine")
SETTINGS = settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _int8(g, want: np.ndarray) -> np.ndarray:
    return g.values[g.outputs[0]].quant.quantize(want)


@pytest.mark.parametrize("act", ACTS)
@SETTINGS
@given(shape=st.tuples(st.integers(1, 2), st.integers(1, 37), st.integers(1, 12), st.integers(1, 35)),
       out_ch=st.integers(1, 45), act_first=st.booleans(), seed=st.integers(0, 2**16))
def test_a_conv_times_its_activation_is_one_kernel_bit_exact_with_onnxruntime(act, shape, out_ch, act_first, seed):
    rng = np.random.default_rng(seed)
    m = self_product_model(shape, out_ch, act, rng, act_first)
    g = compiler.from_onnx(m)
    assert [n.op.kind for n in g.nodes] == ["conv2d", "lut", "mul"]
    [group] = partition(g)
    assert [o.kind for o in group.ops] == ["conv2d", "lut"] and len(group.nodes) == 3
    lib = compiler.build(g)
    assert len(lib.layers) == 1 and lib.layers[0]["ops"] == "conv2d + lut"
    assert "vu.lut" in lib.asm and "vu.fmul" not in lib.asm
    x = (rng.standard_normal(shape) * 3).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for level, w in zip(("ORT_DISABLE_ALL", "ORT_ENABLE_ALL"), want):
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), _int8(g, w), err_msg=level)
    assert lib.predicted_cycles == mod.stats.cycles


def test_the_rule_needs_the_conv_output_read_by_the_lut_and_the_mul_alone():
    """The conv's output also a graph output: it goes to DDR anyway, the lut and the mul stay kernels of their
    own (still exact)."""
    rng = np.random.default_rng(3)
    m = self_product_model((1, 5, 6, 7), 9, "silu", rng)
    m.graph.output.append(helper.make_tensor_value_info("cq", TensorProto.INT8, [1, 9, 6, 7]))
    g = compiler.from_onnx(m)
    kinds = [[o.kind for o in grp.ops] for grp in partition(g)]
    assert ["lut"] in kinds and ["mul"] in kinds and ["conv2d"] in kinds
    lib = compiler.build(g)
    x = (rng.standard_normal((1, 5, 6, 7)) * 3).astype(np.float32)
    mod, want = run_both(m, lib, x)
    for w in want:
        np.testing.assert_array_equal(mod.get_output(0, quantized=True), _int8(g, w))

