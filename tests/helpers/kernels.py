"""Random single-op kernels as the compiler tests draw them: int8 data, requantisation spread over
int8, conv and pool shapes, and the chains of the candidate-schedule tests with their expected outputs."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, strategies as st

from compiler import ops
from tests import reference as ref


seeds = st.integers(0, 2**32 - 1)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def rand8(rng, shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def requant_params(rng, o, k_terms):
    """Per-channel (M, S) scaled so outputs spread over int8 rather than saturate."""
    m = rng.integers(2**30, 2**31, size=o)
    bits = int(np.ceil(np.log2(max(2, k_terms * 128 * 64))))
    s = rng.integers(max(0, bits + 31 - 8), bits + 31 - 4, size=o)
    return m, s


def run(kernel, *inputs):
    return kernel(*inputs, check_races=True)


@st.composite
def conv_case(draw):
    groups = draw(st.sampled_from([1, 1, 2, 3]))
    depthwise = draw(st.booleans()) and groups > 1
    cg = 1 if depthwise else draw(st.integers(1, 40))
    og = 1 if depthwise else draw(st.integers(1, 40))
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = (draw(st.integers(1, 2)), draw(st.integers(1, 3)))
    dil = (draw(st.integers(1, 2)), draw(st.integers(1, 2)))
    pad = tuple(draw(st.integers(0, 2)) for _ in range(4))
    h = draw(st.integers(max(1, dil[0] * (k[0] - 1) + 1 - pad[0] - pad[2]), 12))
    w = draw(st.integers(max(1, dil[1] * (k[1] - 1) + 1 - pad[1] - pad[3]), 12))
    return groups, cg, og, k, stride, dil, pad, (draw(st.integers(1, 2)), groups * cg, h, w)


@st.composite
def pool_case(draw):
    k = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    stride = None if draw(st.booleans()) else (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    pad = tuple(draw(st.integers(0, kk - 1)) for kk in k + k)
    h = draw(st.integers(max(1, k[0] - pad[0] - pad[2]), 14))
    w = draw(st.integers(max(1, k[1] - pad[1] - pad[3]), 14))
    return k, stride, pad, (draw(st.integers(1, 2)), draw(st.integers(1, 5)), h, w)


def candidate_case(rng, case: str, o: int, k: tuple[int, int], h: int):
    """(chain, inputs, want) for case "dense-bias" (9x70 -> o), "grouped" (a conv of 80 channels
    in 2 groups, kernel k, input height h) or "conv-bias-residual" (the same ungrouped, then a
    residual add)."""
    if case == "dense-bias":
        w, b = rand8(rng, (70, o)), rng.integers(-9000, 9000, size=o).astype(np.int32)
        m, s = requant_params(rng, o, 70)
        chain = [ops.dense((9, 70), w, b, x_zp=2, multiplier=m, shift=s)]
        inputs = [rand8(rng, (9, 70))]
        return chain, inputs, ref.dense(inputs[0], w, b, x_zp=2, multiplier=m, shift=s)
    groups = 2 if case == "grouped" else 1
    c = 80
    w, b = rand8(rng, (o, c // groups) + k), rng.integers(-9000, 9000, size=o).astype(np.int32)
    m, s = requant_params(rng, o, c // groups * k[0] * k[1])
    kw = dict(stride=(1, 2), padding=(1, 1, 0, 2), groups=groups, x_zp=-4, multiplier=m, shift=s, zp_out=3)
    conv = ops.conv2d((2, c, h, 11), w, b, **kw)
    inputs = [rand8(rng, conv.x_shape)]
    want = ref.conv2d(inputs[0], w, b, **kw)
    chain = [conv]
    if case == "conv-bias-residual":
        chain.append(ops.add(conv.output.shape, za=3, zb=-1, ma=2**30, mb=2**29, shift=31, zp_out=1))
        inputs.append(rand8(rng, conv.output.shape))
        want = ref.add(want, inputs[1], za=3, zb=-1, ma=2**30, mb=2**29, shift=31, zp_out=1)
    return chain, inputs, want
