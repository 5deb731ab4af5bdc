"""Sizes: the on-chip capacities the lowering (what fits) and the passes (allocation) need, and the size
limits every tensor, buffer and layer is checked against before any search (one place for all of them).

    check_tensor(what, shape, itemsize)      an axis and a tensor the 32-bit machine can address at all
    check_ddr(what, nbytes, config)          bytes that fit the configured DDR
    check_layer(what, tensors, config)       a layer (its tensors as (shape, itemsize)): all three, and its output
                                             within the search's bound (check_tiles); build() and the sweep
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
MAX_TILES = 1 << 13
"""Most array-sized tiles (nu.rows x nu.cols outputs) of a layer's output the tiling search prices: 8M outputs on
the default array, about seven times the largest layer of the model zoo (MobileNetV2's 96x112x112); the search
prices about 50 tiles a second."""


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
    """A layer's tensors, (shape, itemsize) pairs with the output last: each addressable and, given a config,
    all together in its DDR and the output within the search's bound (check_tiles); their bytes.  build()
    calls it for every op and graph node before any search, the sweep for every layer before compiling it."""
    total = sum(check_tensor(f"{what}: tensor {k}", shape, itemsize) for k, (shape, itemsize) in enumerate(tensors))
    if config is not None:
        check_ddr(what, total, config)
        check_tiles(what, tensors[-1][0], config)
    return total


def check_tiles(what: str, out_shape, config: Config) -> None:
    """CompileError unless an output of `out_shape` has at most MAX_TILES tiles of the MAC array: the tiling
    search prices every tile of its candidates, so a larger layer would search for hours; it gives up."""
    n = math.prod(out_shape)
    tiles = -(-n // (config.nu_rows * config.nu_cols))
    if tiles > MAX_TILES:
        raise CompileError(f"{what}: the tiling search gives up on an output of {tuple(out_shape)}: {tiles:,} tiles "
                           f"of the {config.nu_rows}x{config.nu_cols} array, more than the {MAX_TILES:,} it prices "
                           f"(split the layer)")
