"""BatchNormalization left in the graph (ops.batch_norm, one vu.faffine a tile) against its DDR bound, at the
shapes of DenseNet-121's BN after each dense block's Concat and of a few channel counts that divide nothing;
and DenseNet's float tail, the last BN with its Relu and GlobalAveragePool (ops.batch_norm_global_avg, one
vu.pool.faffavg a tile).

    python benchmarks/batch_norm.py [--config HW.toml] [--write-docs]

For each case: random int8 input and BN statistics, the compiled kernel on the simulator, its output compared
with the op's numpy model (compiler.reference.channel_affine_f32, batch_norm_global_avg_f32), then cycles, the roofline bound (least DDR
bytes, the pair table included, over DDR bytes per cycle), their ratio and the cost model's prediction, as
benchmarks/binary.py measures them.  Target: every case bit-exact, priced exactly, within 1.5x its bound
(the exit status is 1 otherwise).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from binary import run  # noqa: E402  benchmarks/binary.py (benchmarks/ is on sys.path)
from tables import parser  # noqa: E402  benchmarks/tables.py
from compiler import ops  # noqa: E402

SHAPES = {"DenseNet-121 block 1, layer 4: 160x56x56": (1, 160, 56, 56),
          "block 2, layer 7: 320x28x28": (1, 320, 28, 28),
          "block 3, layer 20: 864x14x14": (1, 864, 14, 14),
          "block 4, layer 16: 992x7x7": (1, 992, 7, 7),
          "norm5 after the last Concat: 1024x7x7": (1, 1024, 7, 7),
          "37x19x23, then a Relu": (1, 37, 19, 23)}
POOLED = {"norm5, Relu, GlobalAveragePool (DenseNet-121's tail): 1024x7x7": (1, 1024, 7, 7),
          "37x19x23, Relu, GlobalAveragePool": (1, 37, 19, 23)}


def cases() -> list[tuple[str, object]]:
    """(name, op) of every measured batch_norm."""
    rng = np.random.default_rng(5)
    out = []
    for name, shape in SHAPES.items():
        c, zp = shape[1], -40 if "Relu" in name else -128
        out.append((name, ops.batch_norm(shape, scale=rng.normal(1, 0.3, c), bias=rng.normal(0, 0.5, c),
                                         mean=rng.normal(0, 1, c), var=rng.uniform(0.1, 3, c), za=-6,
                                         scale_x=np.float32(0.05), scale_out=np.float32(0.03), zp_out=zp, lo=zp)))
    for name, shape in POOLED.items():
        c = shape[1]
        out.append((name, ops.batch_norm_global_avg(shape, scale=rng.normal(1, 0.3, c), bias=rng.normal(0, 0.5, c),
                                                    mean=rng.normal(0, 1, c), var=rng.uniform(0.1, 3, c), za=-6,
                                                    scale_x=np.float32(0.05), scale_out=np.float32(0.02),
                                                    zp_out=-128, relu=True)))
    return out


def main() -> int:
    ap = parser(__doc__)
    return run("batch-norm", ap.parse_args(), cases)


if __name__ == "__main__":
    sys.exit(main())
