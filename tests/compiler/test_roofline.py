"""The roofline bound (docs/performance.md): max(MACs / 1024, least DDR bytes / 32)."""
import numpy as np

from compiler import ops
from compiler.roofline import bound_cycles, min_ddr_bytes, rate_macs
from nnpsim.timing import NU_F32_PASSES


def test_compute_bound_conv():
    w = np.ones((64, 64, 3, 3), np.int8)
    conv = ops.conv2d((1, 64, 56, 56), w, np.zeros(64, np.int32), padding=1, multiplier=1 << 30, shift=40)
    macs = 64 * 56 * 56 * 64 * 9
    ddr = 64 * 56 * 56 * 2 + w.size + 4 * 64
    assert min_ddr_bytes([conv]) == ddr
    assert bound_cycles([conv]) == max(-(-macs // 1024), -(-ddr // 32)) == -(-macs // 1024)


def test_memory_bound_chain_counts_the_intermediate_once_on_chip():
    relu = ops.relu((1, 8, 10, 10), zp=3)
    add = ops.add((1, 8, 10, 10), ma=1 << 30, mb=1 << 30, shift=31)
    # relu's x, add's second input b, and the output: the relu output stays on chip
    assert min_ddr_bytes([relu, add]) == 3 * 800
    assert bound_cycles([relu, add]) == -(-2400 // 32)


def test_the_float_mode_is_bound_at_its_rate():
    """A conv onnxruntime runs in float32 (the NU's float mode, a quarter of the int8 rate: NU_F32_PASSES) is bound
    by its MACs at that rate, and its weights sit in DDR as float32."""
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (64, 64, 3, 3)).astype(np.int8)
    ws = np.full(64, 0.01, np.float32)
    conv = ops.conv2d((1, 64, 28, 28), w, np.zeros(64, np.int32), padding=1, scale=ws, zp_out=0)
    fconv = ops.float_mode(conv, np.float32(0.05), ws, np.float32(0.1), np.zeros(64, np.float32))
    macs = 64 * 28 * 28 * 64 * 9
    assert rate_macs(conv) == macs and rate_macs(fconv) == NU_F32_PASSES * macs == 4 * macs
    assert min_ddr_bytes([fconv]) == min_ddr_bytes([conv]) + 3 * w.size
    assert bound_cycles([fconv]) == -(-4 * macs // 1024) and bound_cycles([conv]) == -(-macs // 1024)
