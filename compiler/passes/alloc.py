"""Static on-chip allocation: every buffer gets a fixed address, reusing space by lifetime.

A buffer's lifetime is the span of statement indices (issue order) from its
first to its last access.  Buffers of one memory whose lifetimes are disjoint
may share bytes; the sync pass, which runs after this one, orders any reuse.
Placement is first fit in order of first use, at the buffer's alignment.
DDR buffers are placed by the assembler (`.data`), not here.
"""
from __future__ import annotations

import math

from nnpsim.config import Config

from ..errors import CompileError
from ..ir import ON_CHIP, Buffer, Command, KernelIR
from ..sizes import capacities


def lifetimes(kir: KernelIR) -> dict[Buffer, tuple[int, int]]:
    """(first, last) statement index of every accessed buffer."""
    span: dict[Buffer, tuple[int, int]] = {}
    for i, stmt in enumerate(kir.body):
        if isinstance(stmt, Command):
            for acc in stmt.accesses():
                first, _ = span.get(acc.buf, (i, i))
                span[acc.buf] = (first, i)
    return span


def _align(v: int, a: int) -> int:
    return -(-v // a) * a


def space_align(space: str, config: Config) -> int:
    """The alignment every buffer of `space` needs: NU operands in IBUF and WBUF start on a multiple
    of the array's rows (nu.conv) or columns (nu.dwconv), which need not be powers of two."""
    return math.lcm(config.nu_rows, config.nu_cols) if space in ("ibuf", "wbuf") else 1


def place(buffers: list[Buffer], spans: dict[Buffer, tuple[int, int]], capacity: int,
          space: str, align: int = 1) -> int:
    """First-fit addresses for buffers of one space, each at lcm(its alignment, align); returns the peak bytes used."""
    placed: list[tuple[int, int, int, int]] = []     # (addr, end, first, last)
    peak = 0
    for buf in sorted(buffers, key=lambda b: (spans[b][0], -b.nbytes)):
        first, last = spans[buf]
        live = sorted((a, e) for a, e, f, l in placed if f <= last and first <= l)
        addr = 0
        for a, e in live:
            if addr + buf.nbytes <= a:
                break
            addr = max(addr, _align(e, math.lcm(buf.align, align)))
        if addr + buf.nbytes > capacity:
            raise CompileError(f"{space}: buffer {buf.name} ({buf.nbytes} bytes) does not fit: "
                               f"{capacity} bytes, {sum(e - a for a, e in live)} live")
        buf.addr = addr
        placed.append((addr, addr + buf.nbytes, first, last))
        peak = max(peak, addr + buf.nbytes)
    return peak


def allocate(kir: KernelIR, config: Config) -> dict[str, int]:
    """Fix the address of every on-chip buffer of kir; returns peak bytes per memory (dm, ibuf0, ...)."""
    spans = lifetimes(kir)
    caps = capacities(config)
    usage = {}
    for space in ON_CHIP:
        mine = [b for b in kir.buffers if b.space == space and b in spans]
        for memory in sorted({b.memory for b in mine}) or [space if space == "dm" else f"{space}0"]:
            usage[memory] = place([b for b in mine if b.memory == memory], spans, caps[space], memory,
                                  space_align(space, config))
    return usage
