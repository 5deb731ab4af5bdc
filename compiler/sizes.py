"""Sizes: the on-chip capacities the lowering (what fits) and the passes (allocation) need, and the size
limits every tensor, buffer and layer is checked against before any search (one place for all of them).

    check_tensor(what, shape, itemsize)      an axis and a tensor the 32-bit machine can address at all
    check_ddr(what, nbytes, config)          bytes that fit the configured DDR
    check_layer(what, tensors, config)       a layer (its tensors as (shape, itemsize)) both ways: called by
                                             build(), the op constructors (without config) and the sweep
"""
from __future__ import annotations

import math
import operator

from nnpsim.config import Config

from .errors import CompileError

MAX_DIM = (1 << 31) - 1
"""Largest axis (and Dim value): sizes travel in 32-bit signed registers and argument-block words."""
MAX_TENSOR_BYTES = 1 << 32
"""Largest tensor: DDR addresses are 32 bits."""
MAX_COUNT = 1 << 62
"""Largest count (cycles, MACs, bytes) a compiled file's description may hold: below int64's range."""
MAX_TILES = 1 << 22
"""Most output tiles of the smallest tiling a search may price: far above any layer that fits a DDR of
4 GiB at sensible tile sizes, far below the hours pricing a billion tiles would take."""


def capacities(config: Config) -> dict[str, int]:
    """Bytes of each on-chip memory (every unit's local buffers have the same size)."""
    return {"dm": config.dm_bytes, "ibuf": config.ibuf_bytes, "wbuf": config.wbuf_bytes,
            "abuf": config.abuf_bytes, "vbuf": config.vbuf_bytes}


def check_tensor(what: str, shape, itemsize: int = 1) -> int:
    """The tensor's bytes; CompileError (naming it and the limit) if an axis or the whole cannot be addressed."""
    n = 1
    for k, d in enumerate(shape):
        try:
            d = operator.index(d)
        except TypeError:
            raise CompileError(f"{what}: axis {k} is {d!r}, not an integer") from None
        if not 0 <= d <= MAX_DIM:
            raise CompileError(f"{what}: axis {k} is {d}, outside [0, {MAX_DIM}]")
        n *= d
    nbytes = n * itemsize
    if nbytes > MAX_TENSOR_BYTES:
        raise CompileError(f"{what}: shape {tuple(shape)} is {nbytes:,} bytes, more than the "
                           f"{MAX_TENSOR_BYTES:,} a 32-bit DDR address can reach")
    return nbytes


def check_ddr(what: str, nbytes: int, config: Config) -> None:
    """CompileError unless `nbytes` fit the configured DDR (memory.ddr.size)."""
    if nbytes > config.ddr_bytes:
        raise CompileError(f"{what}: {nbytes:,} bytes do not fit the configured DDR of {config.ddr_bytes:,} bytes "
                           f"(memory.ddr.size)")


def check_layer(what: str, tensors, config: Config | None = None) -> int:
    """A layer's tensors, (shape, itemsize) pairs: each addressable and, given a config, all together in its
    DDR; their bytes.  The sweep calls it for every layer before compiling it."""
    total = sum(check_tensor(f"{what}: tensor {k}", shape, itemsize) for k, (shape, itemsize) in enumerate(tensors))
    if config is not None:
        check_ddr(what, total, config)
    return total


def tiles(shape, tile: tuple[int, int]) -> int:
    """Output tiles of an NCHW (or NC) shape at a (rows, cols) tile: what a search prices per candidate."""
    h, w = (tuple(shape[2:4]) + (1, 1))[:2]
    return max(1, shape[0]) * math.ceil(h / tile[0]) * math.ceil(w / tile[1])
