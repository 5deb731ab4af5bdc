"""Data-movement kernels against their DDR bound: Transpose, Slice, Split, Pad, Concat, nearest and linear
Resize, compiled alone and simulated.

    python benchmarks/movement.py [--config HW.toml]

For each case, at a shape of the networks that use it (ShuffleNetV2's channel shuffle and its
split, YOLO / FPN necks' upsampling and concats, a crop, a layout change, the segmenters' bilinear
upsampling in onnxruntime's three arithmetics): a random int8 input,
the compiled kernel on the simulator, its output compared with the op's numpy reference, then
cycles, the roofline bound (compiler.roofline: the least DDR bytes it reads and writes over DDR
bytes per cycle), their ratio and the cost model's prediction.  Target: every case bit-exact,
predicted exactly and within 1.5x its bound (the exit status is 1 if one is missed).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import ops  # noqa: E402
from compiler.build import build  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

TARGET = 1.5
WIDTH = 54


def cases() -> list[tuple[str, object]]:
    """(name, op) of every measured movement kernel."""
    up = dict(coordinate_mode="asymmetric", nearest_mode="floor")
    return [
        ("shuffle 116x28x28 (ShuffleNetV2 stage 2)", ops.Transpose((1, 2, 58, 28, 28), (0, 2, 1, 3, 4))),
        ("shuffle 232x14x14 (ShuffleNetV2 stage 3)", ops.Transpose((1, 2, 116, 14, 14), (0, 2, 1, 3, 4))),
        ("shuffle 464x7x7 (ShuffleNetV2 stage 4)", ops.Transpose((1, 2, 232, 7, 7), (0, 2, 1, 3, 4))),
        ("transpose NCHW -> NHWC 64x40x40", ops.Transpose((1, 64, 40, 40), (0, 2, 3, 1))),
        ("transpose NHWC -> NCHW 40x40x85", ops.Transpose((1, 40, 40, 85), (0, 3, 1, 2))),
        ("split half of 232x14x14 (ShuffleNetV2)", ops.slice_op((1, 232, 14, 14), [116], [232], [1])),
        ("slice every other row and column 32x80x80", ops.slice_op((1, 32, 80, 80), [0, 0], [80, 80], [2, 3], [2, 2])),
        ("crop 3:-3 64x38x38", ops.slice_op((1, 64, 38, 38), [3, 3], [-3, -3], [2, 3])),
        ("ViT-tiny q: slice of qkv 197x3x3x64 to heads (strided)",
         ops.compose(ops.slice_op((1, 197, 3, 3, 64), [0], [1], [2]), ops.Transpose((1, 197, 1, 3, 64), (2, 0, 3, 1, 4)))),
        ("ViT-tiny k: slice of qkv to heads, transposed (strided)",
         ops.compose(ops.slice_op((1, 197, 3, 3, 64), [1], [2], [2]), ops.Transpose((1, 197, 3, 64), (0, 2, 3, 1)))),
        ("pad 1 (zero point) 64x56x56", ops.Pad((1, 64, 56, 56), (0, 0, 1, 1, 0, 0, 1, 1), value=-5)),
        ("pad 0,1 right/bottom 96x27x27", ops.Pad((1, 96, 27, 27), (0, 0, 0, 0, 0, 0, 1, 1), value=3)),
        ("concat channels 128+128 of 40x40 (YOLO neck)", ops.Concat(((1, 128, 40, 40), (1, 128, 40, 40)), 1)),
        ("concat rows 2x(64x20x20)", ops.Concat(((1, 64, 20, 20), (1, 64, 20, 20)), 2)),
        ("resize x2 nearest 128x20x20 (YOLO / FPN)", ops.resize_nearest((1, 128, 20, 20), (1, 128, 40, 40),
                                                                   (1, 1, 2, 2), **up)),
        ("resize x2 nearest 64x40x40 (YOLO / FPN)", ops.resize_nearest((1, 64, 40, 40), (1, 64, 80, 80),
                                                                  (1, 1, 2, 2), **up)),
        ("resize /2 nearest 32x80x80", ops.resize_nearest((1, 32, 80, 80), (1, 32, 40, 40), (1, 1, .5, .5), **up)),
        ("resize x8 linear 21x32x32 (LRASPP / DeepLabV3 head)", _linear((1, 21, 32, 32), (256, 256))),
        ("resize x2 linear 128x16x16, NHWC fixed point (LRASPP)", _linear((1, 128, 16, 16), (32, 32), "nhwc")),
        ("resize 1x1 -> 32x32 linear 256 (DeepLabV3 ASPP pool)", _linear((1, 256, 1, 1), (32, 32))),
        ("resize 37x23 -> 64x50 linear QDQ, align_corners", _linear((1, 32, 37, 23), (64, 50), quantized=True,
                                                                  coordinate_mode="align_corners")),
    ]


def _linear(shape: tuple[int, ...], out_hw: tuple[int, int], layout: str = "nchw", quantized: bool = False,
            coordinate_mode: str = "half_pixel") -> object:
    """A linear Resize of `shape` to out_hw, as onnxruntime computes it in `layout` (QDQ: its float form)."""
    f = np.float32
    scales = (1, 1, f(out_hw[0]) / f(shape[2]), f(out_hw[1]) / f(shape[3]))
    q = dict(za=-2, zp_out=3, scale_in=0.05, scale_out=0.06) if quantized else {}
    return ops.resize_linear(shape, (*shape[:2], *out_hw), scales, coordinate_mode, layout=layout,
                             quantized=quantized, **q)


def main() -> int:
    ap = parser(__doc__)
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(1)
    missed, rows = [], []
    print(f"{'op':<{WIDTH}} {'cycles':>9} {'bound':>9} {'ratio':>6} {'predicted':>10}  exact")
    for name, op in cases():
        kernel = build(op, config=cfg)
        xs = [rng.integers(-128, 128, t.shape, dtype=np.int8) for t in op.inputs]
        exact = np.array_equal(kernel(*xs), op.reference(*xs))
        cycles, bound = kernel.stats.cycles, kernel.roofline_cycles
        print(f"{name:<{WIDTH}} {cycles:>9,} {bound:>9,} {cycles / bound:>6.2f} {kernel.predicted_cycles:>10,}  "
              f"{'yes' if exact else 'NO'}")
        rows.append([name, f"{cycles:,}", f"{bound:,}", f"{cycles / bound:.2f}", f"{kernel.predicted_cycles:,}",
                     "yes" if exact else "NO"])
        if not exact:
            missed.append(f"{name}: not bit-exact")
        elif kernel.predicted_cycles != cycles:
            missed.append(f"{name}: predicted {kernel.predicted_cycles:,}, simulated {cycles:,}")
        elif cycles > TARGET * bound:
            missed.append(f"{name}: {cycles / bound:.2f}x its bound (target <= {TARGET})")
    for line in missed:
        print(f"target missed: {line}", file=sys.stderr)
    if args.write_docs:
        write_table("movement", ["op", "cycles", "bound", "ratio", "predicted", "exact"], rows,
                    f"every case bit-exact, predicted exactly and within {TARGET}x its DDR bound.")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
