"""Micro-benchmark of the NU kernel against numpy im2col + float64 matmul (not run by tests).

    NUMBA_CACHE_DIR=... python benchmarks/nu_kernel.py

Times (1) one tile: in_cb=2, 16x58 input, 3x3 window, out_cb=2 on a 32x32 array, and
(2) a 1x64x56x56 by 64x64x3x3 convolution (pad 1) as 8 NU commands of 7 output rows each
(the default 128 KiB ABUF holds 2 x 7 x 56 x 32 int32), against numpy doing
the same convolution as one im2col and float64 matmul.
"""
from __future__ import annotations

import time

import numpy as np

from nnpsim.units import nu_conv

ROWS = COLS = 32
IBUF, WBUF, ABUF = 8, 16, 24


def _machine(rng: np.random.Generator, sizes: dict[int, int]):
    base = np.zeros(64, dtype=np.int64)
    size = np.zeros(64, dtype=np.int64)
    at = 0
    for space, n in sizes.items():
        base[space], size[space] = at, n
        at += n
    return rng.integers(0, 256, at, dtype=np.uint8), base, size


def _params(in_h: int, in_w: int, out_h: int, out_w: int) -> np.ndarray:
    """nu.* snapshot: in_cb = out_cb = 2 (64 channels), 3x3 window, stride 1, x_zp 5."""
    p = np.zeros(32, dtype=np.int64)
    p[:13] = [in_h, in_w, 2, out_h, out_w, 2, 3, 3, 1, 1, 1, 1, 5]
    return p


def _best(fns: dict, rounds: int) -> dict[str, float]:
    """Best wall time of each function over interleaved rounds (robust to a loaded machine)."""
    best = {name: float("inf") for name in fns}
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    rng = np.random.default_rng(0)
    # ABUF larger than the default 128 KiB so that the 14-row tile fits
    mem, base, size = _machine(rng, {IBUF: 256 * 1024, WBUF: 256 * 1024, ABUF: 256 * 1024})
    err = np.zeros(8, dtype=np.int64)
    tile = _params(16, 58, 14, 56)

    def one_tile():
        assert nu_conv(mem, base, size, 0, 0, 0, 0, tile, False, ROWS, COLS, err) == 0

    cmd = _params(9, 58, 7, 56)

    def conv_as_commands():
        for _ in range(8):   # 8 row tiles; the IBUF contents do not change the work done
            assert nu_conv(mem, base, size, 0, 0, 0, 0, cmd, True, ROWS, COLS, err) == 0

    x = rng.integers(-128, 128, (64, 58, 58)).astype(np.float64)
    w = rng.integers(-128, 128, (64, 64 * 9)).astype(np.float64)

    def numpy_conv():
        cols = np.lib.stride_tricks.sliding_window_view(x, (3, 3), axis=(1, 2))
        return cols.transpose(1, 2, 0, 3, 4).reshape(56 * 56, 64 * 9) @ w.T

    t = _best({"tile": one_tile, "nu": conv_as_commands, "numpy": numpy_conv}, 7)
    print(f"tile in_cb=2 16x58 3x3 out_cb=2: {t['tile'] * 1e3:.2f} ms")
    print(f"1x64x56x56 * 64x64x3x3: NU kernel {t['nu'] * 1e3:.1f} ms, numpy im2col+matmul "
          f"{t['numpy'] * 1e3:.1f} ms, ratio {t['nu'] / t['numpy']:.2f}")


if __name__ == "__main__":
    main()
