"""The hand-scheduled tiled conv of benchmarks/ runs bit-exact and race-free on the simulator."""
import importlib.util
from pathlib import Path

import numpy as np
import pytest

import nnpasm
from nnpsim import Simulator

pytestmark = pytest.mark.usefixtures("warm_engine")

_spec = importlib.util.spec_from_file_location(
    "conv_kernel", Path(__file__).parents[1] / "benchmarks" / "conv_kernel.py")
conv_kernel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(conv_kernel)


def conv3x3_pad1(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Direct numpy 3x3 convolution, pad 1, stride 1, int64."""
    _, _, h, wd = x.shape
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((1, w.shape[0], h, wd), np.int64)
    for kh in range(3):
        for kw in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, kh:kh + h, kw:kw + wd], w[:, :, kh, kw].astype(np.int64))
    return y


@pytest.mark.parametrize("c, o, h, w, rows", [
    (32, 32, 4, 4, 4),      # one tile: top and bottom halo in the same load
    (32, 64, 10, 7, 4),     # rows do not divide H, two output blocks
    (64, 32, 9, 13, 2),     # five tiles through both halves, two input blocks
])
def test_tiled_conv_matches_numpy(c, o, h, w, rows):
    rng = np.random.default_rng(c * 1000 + h * 10 + w)
    x = rng.integers(-128, 128, (1, c, h, w), dtype=np.int8)
    wt = rng.integers(-128, 128, (o, c, 3, 3), dtype=np.int8)
    sim = Simulator()
    sim.load(nnpasm.assemble(conv_kernel.conv3x3_source(c, o, h, w, rows), "conv3x3.s"))
    sim.write("x", x)
    sim.write("w", wt)
    stats = sim.run(check_races=True)
    assert np.array_equal(sim.read("y"), conv3x3_pad1(x, wt))
    macs = o * c * 9 * h * w
    assert stats.cycles >= macs // 1024


def test_channels_must_fill_the_array():
    with pytest.raises(ValueError, match="multiples of 32"):
        conv_kernel.conv3x3_source(c=48)
