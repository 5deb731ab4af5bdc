"""Inputs for the float BatchNormalization -> Relu -> GlobalAveragePool tail whose result depends on the order
of its float32 sum: each plane holds as many codes k as -k, so under a large per-channel scale the partial
sums are far larger than the total and every order rounds them differently (a plain left-to-right sum
differs from MLAS's four-lane one on most channels)."""
from __future__ import annotations

import numpy as np


def cancelling_planes(rng: np.random.Generator, n: int, c: int, h: int, w: int, code: int = 100) -> np.ndarray:
    """int8 [n, c, h, w]: each plane a random permutation of code and -code in equal numbers (one 0 if odd)."""
    size = h * w
    plane = np.array([code] * (size // 2) + [-code] * (size // 2) + [0] * (size % 2), np.int8)
    return np.stack([rng.permutation(plane) for _ in range(n * c)]).reshape(n, c, h, w)


def large_pairs(rng: np.random.Generator, c: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel (new_scale, new_bias) of either sign with |new_scale| in [1e6, 2e6): the partial sums of a
    cancelling plane reach 1e8 while its mean is below 1."""
    scale = (rng.choice([-1.0, 1.0], c) * rng.uniform(1e6, 2e6, c)).astype(np.float32)
    return scale, rng.uniform(-1, 1, c).astype(np.float32)
