"""Numbers the simulator takes from isa_spec/nnp1.toml: parameter offsets and memory space ids.

A command snapshots the 32 parameter registers of its group when the CU issues
it; the unit kernels index that snapshot.  Every offset they use is computed
here from the TOML, never typed in, and the kernels' assumptions about the
layout (n0..n3 consecutive, the d, a and b strides one after another, ...) are
checked when this module is imported, so a TOML edit that breaks one fails
here with the parameter's name instead of silently misreading a snapshot.
"""
from __future__ import annotations

from isa_spec import IsaError, load_isa

GROUP_SIZE = 32
"""Parameters in one command group's snapshot."""

N_SPACES = 64
"""Memory space ids are 0 .. N_SPACES - 1 (the width of the dspace/sspace fields)."""

_ISA = load_isa()
PARAMS: dict[str, int] = dict(_ISA.params)


def group_base(prefix: str) -> int:
    """First parameter register of a command group (`dma`, `nu` or `vu`)."""
    return min(v for k, v in PARAMS.items() if k.startswith(prefix + "."))


GROUP_BASE = {"DMA": group_base("dma"), "NU": group_base("nu"), "VU": group_base("vu")}
"""Parameter number of entry 0 of each unit's snapshot, by unit name as in the TOML."""

_PREFIX = {"DMA": "dma", "NU": "nu", "VU": "vu"}


def offset(name: str) -> int:
    """Position of parameter `name` (say "vu.ma") inside its group's snapshot."""
    unit = {v: k for k, v in _PREFIX.items()}[name.split(".")[0]]
    return PARAMS[name] - GROUP_BASE[unit]


def offsets(*names: str) -> tuple[int, ...]:
    """offset() of each name, checked to be consecutive (the kernels slice them as one run)."""
    out = tuple(offset(n) for n in names)
    for a, b, n in zip(out, out[1:], names[1:]):
        if b != a + 1:
            raise IsaError(f"nnp1.toml: parameter {n} must directly follow {names[names.index(n) - 1]} "
                           f"(the simulator reads them as one run)")
    return out


def _check_groups() -> None:
    for unit, prefix in _PREFIX.items():
        for name, number in PARAMS.items():
            if name.startswith(prefix + ".") and not 0 <= number - GROUP_BASE[unit] < GROUP_SIZE:
                raise IsaError(f"nnp1.toml: parameter {name} = {number} lies outside its group's "
                               f"{GROUP_SIZE} registers from {GROUP_BASE[unit]}")


_check_groups()

_SPACE = _ISA.kinds["space"].values
DDR, DM = _SPACE["ddr"], _SPACE["dm"]
IBUF, WBUF, ABUF, VBUF = _SPACE["ibuf"], _SPACE["wbuf"], _SPACE["abuf"], _SPACE["vbuf"]
LOCAL_SPACES = {"ibuf": IBUF, "wbuf": WBUF, "abuf": ABUF, "vbuf": VBUF}
"""Space id of unit 0's buffer of each kind; unit k's is that id + k."""
MAX_UNITS = 8
"""Unit-local buffers of one kind take MAX_UNITS consecutive ids (the unit/channel fields are 3 bits)."""

for _name, _base in LOCAL_SPACES.items():
    if not 0 <= _base <= N_SPACES - MAX_UNITS:
        raise IsaError(f"nnp1.toml: space {_name} = {_base} leaves no room for {MAX_UNITS} units")


def space_name(space: int) -> str:
    """Assembly name of memory space `space` (ibuf0, not ibuf)."""
    if space == DDR:
        return "ddr"
    if space == DM:
        return "dm"
    for name, base in LOCAL_SPACES.items():
        if base <= space < base + MAX_UNITS:
            return f"{name}{space - base}"
    return f"space{space}"
