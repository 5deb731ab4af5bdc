"""The semantics table: what the simulator does for every instruction of isa_spec/nnp1.toml.

One row per mnemonic says which CU operation or unit kernel executes it, which
footprint rule the race checker applies, how wide its operands' elements are
and which timing formula of nnpsim.timing gives its cycles.  cu.py, units/*,
footprint.py and the engine's decoder take every per-instruction fact from
here; no other module names a mnemonic.

In the manner of OpenTitan's OTBN simulator, `check_isa` (run when nnpsim is
imported) compares the table with the loaded ISA and refuses to start when
they disagree, naming every instruction that has no row and every row that
has no instruction, instead of failing later when a program happens to use
the instruction.
"""
from __future__ import annotations

from dataclasses import dataclass

from isa_spec import Isa, load_isa

# Element widths read from the command rather than fixed by the instruction.
SDT = -1    # 1 << the command's sdt field
DDT = -2    # 1 << the command's ddt field
ELEM = -3   # the dma.elem parameter

FOOTPRINTS = ("none", "dma", "nu", "nu_acc", "vu_map", "vu_window", "nu_dw", "nu_dw_acc", "nu_rq", "nu_acc_rq",
              "vu_lut", "vu_lerp", "nu_f", "nu_f_rq", "nu_f_dw")
"""Footprint rules (nnpsim.footprint): none for CU instructions; a DMA box; an NU conv, reading
ABUF too when it accumulates; a VU op element by element, or over a pooling window of a; an NU
depthwise conv (one weight lane per column), reading ABUF too when it accumulates; an NU conv with
its requantising output stage (int8 into VBUF, reading its (bias, M, S) table in WBUF), and reading
partial sums from ABUF too when it accumulates; a VU table lookup (d and a element by element, b one
table of its row's b width: vu.lut's 256 bytes, vu.softmax's 1024); vu.lerp (d element by element, a a window of win_h x win_w per output, b its table of
n0 + n1 entries); the NU's float32 mode: nu.fconv (float32 weights, its (total, part) state in ABUF, read too
when f_mode = 1), nu.fconv.rq (int8 into VBUF, its (bias, scale) table in WBUF, the state read from ABUF when
f_mode = 1), nu.fdwconv (nu.dwconv's lanes, float32 weights and its (bias, scale) rows in WBUF, int8 into
VBUF)."""


@dataclass(frozen=True)
class Semantics:
    """What one instruction does in the simulator."""

    mnemonic: str
    unit: str                        # "CU", "DMA", "NU" or "VU", as in the TOML
    op: str                          # CU operation (cu.CU_OPERATIONS) or the unit kernel's op name
    footprint: str = "none"          # one of FOOTPRINTS
    widths: tuple[int, int, int] = (0, 0, 0)
    """Bytes of one element of the destination, source a and source b (0: no such operand;
    SDT, DDT or ELEM: read from the command).  A vu.requant.pc b element is an (M, S) int32 pair,
    a vu.requant.fpc one a float32 scale, a vu.pool.favg (vu.slide.favg) one an int32 count, a vu.faffine (and vu.pool.faffavg)
    one a float32 (scale, offset) pair, and vu.lut's b its whole 256-entry int8 table and vu.softmax's its whole
    float32[256] table (each read once, not walked by the b strides)."""
    timing: str = "cu_cycles"        # the function of nnpsim.timing that gives its cycles
    imm: bool = False                # CU: the second operand is the immediate, not rs2's value


def _cu(mnemonic: str, op: str | None = None, imm: bool = False, timing: str = "cu_cycles") -> Semantics:
    return Semantics(mnemonic, "CU", op or mnemonic, imm=imm, timing=timing)


def _vu(mnemonic: str, op: str, widths: tuple[int, int, int], window: bool = False,
        timing: str = "vu_cycles") -> Semantics:
    return Semantics(mnemonic, "VU", op, "vu_window" if window else "vu_map", widths, timing)


_ROWS = (
    _cu("nop"), _cu("halt", timing="cu_sync_cycles"),
    *(_cu(m) for m in ("add", "sub", "mul", "and", "or", "xor", "sll", "srl", "sra", "slt", "sltu",
                       "min", "max", "mulhu")),
    *(_cu(m, op, imm=True) for m, op in (("addi", "add"), ("muli", "mul"), ("andi", "and"), ("ori", "or"),
                                          ("xori", "xor"), ("slti", "slt"), ("sltiu", "sltu"),
                                          ("slli", "sll"), ("srli", "srl"), ("srai", "sra"))),
    _cu("li"), _cu("la", "li"),
    *(_cu(m) for m in ("beq", "bne", "blt", "bge", "bltu", "bgeu", "jal", "jalr", "loop", "setp",
                       "setpi")),
    _cu("sem.signal", "sem_signal", timing="cu_sync_cycles"),
    _cu("sem.wait", "sem_wait", timing="cu_sync_cycles"),
    _cu("barrier", timing="cu_sync_cycles"),
    _cu("ld", timing="cu_sync_cycles"),
    Semantics("dma", "DMA", "copy", "dma", (ELEM, ELEM, 0), "dma_cycles"),
    Semantics("nu.conv", "NU", "conv", "nu", (4, 1, 1), "nu_conv_cycles"),
    Semantics("nu.conv.acc", "NU", "conv_acc", "nu_acc", (4, 1, 1), "nu_conv_cycles"),
    Semantics("nu.dwconv", "NU", "dwconv", "nu_dw", (4, 1, 1), "nu_dwconv_cycles"),
    Semantics("nu.dwconv.acc", "NU", "dwconv_acc", "nu_dw_acc", (4, 1, 1), "nu_dwconv_cycles"),
    Semantics("nu.conv.rq", "NU", "conv_rq", "nu_rq", (1, 1, 1), "nu_conv_cycles"),
    Semantics("nu.conv.acc.rq", "NU", "conv_acc_rq", "nu_acc_rq", (1, 1, 1), "nu_conv_cycles"),
    Semantics("nu.fconv", "NU", "fconv", "nu_f", (8, 1, 4), "nu_fconv_cycles"),
    Semantics("nu.fconv.rq", "NU", "fconv_rq", "nu_f_rq", (1, 1, 4), "nu_fconv_cycles"),
    Semantics("nu.fdwconv", "NU", "fdwconv", "nu_f_dw", (1, 1, 4), "nu_fdwconv_cycles"),
    _vu("vu.requant", "requant", (1, SDT, 0)),
    _vu("vu.requant.pc", "requant_pc", (1, SDT, 8)),
    _vu("vu.add", "add", (1, 1, 1)),
    _vu("vu.mul", "mul", (1, 1, 1)),
    _vu("vu.clip", "clip", (1, 1, 0)),
    _vu("vu.pool.max", "pool_max", (1, 1, 0), window=True),
    _vu("vu.pool.sum", "pool_sum", (4, 1, 0), window=True),
    _vu("vu.divr", "divr", (1, 4, 4)),
    _vu("vu.mov", "mov", (DDT, SDT, 0)),
    _vu("vu.requant.f", "requant_f", (1, SDT, 0)),
    _vu("vu.requant.fpc", "requant_fpc", (1, SDT, 4)),
    _vu("vu.fadd", "fadd", (1, 1, 1)),
    _vu("vu.fmul", "fmul", (1, 1, 1)),
    _vu("vu.pool.favg", "pool_favg", (1, 1, 4), window=True),
    _vu("vu.fsub", "fsub", (1, 1, 1)),
    _vu("vu.fdiv", "fdiv", (1, 1, 1)),
    _vu("vu.fmax", "fmax", (1, 1, 1)),
    _vu("vu.fmin", "fmin", (1, 1, 1)),
    _vu("vu.pool.acc", "pool_acc", (4, 1, 0), window=True, timing="vu_pool_cycles"),
    _vu("vu.pool.avg", "pool_avg", (1, 1, 4), window=True, timing="vu_pool_cycles"),
    _vu("vu.slide.acc", "slide_acc", (4, 1, 0), window=True, timing="vu_slide_cycles"),
    _vu("vu.slide.avg", "slide_avg", (1, 1, 4), window=True, timing="vu_slide_cycles"),
    _vu("vu.slide.favg", "slide_favg", (1, 1, 4), window=True, timing="vu_slide_cycles"),
    Semantics("vu.lut", "VU", "lut", "vu_lut", (1, 1, 256), "vu_lut_cycles"),
    Semantics("vu.softmax", "VU", "softmax", "vu_lut", (1, 1, 1024), "vu_softmax_cycles"),
    _vu("vu.pool.fmean", "pool_fmean", (1, 1, 0), window=True, timing="vu_pool_cycles"),
    _vu("vu.faffine", "faffine", (1, 1, 8), timing="vu_affine_cycles"),
    _vu("vu.pool.faffavg", "pool_faffavg", (1, 1, 8), window=True, timing="vu_pool_cycles"),
    Semantics("vu.lerp", "VU", "lerp", "vu_lerp", (1, 1, 16), "vu_lerp_cycles"),
)

SEMANTICS: dict[str, Semantics] = {row.mnemonic: row for row in _ROWS}
"""Every instruction's semantics, by mnemonic."""

class IsaMismatch(ImportError):
    """The semantics table and the ISA disagree: nnpsim refuses to start."""


def problems(isa: Isa, implemented: dict[str, tuple[str, ...]] | None = None,
             timing_module=None) -> list[str]:
    """Every disagreement between SEMANTICS and `isa`, as sentences (empty: they agree).

    With `implemented` (the ops each executor runs: "CU" its operations, "DMA", "NU" and
    "VU" the ops of their kernels) and `timing_module`, also that every row's op and every
    timing formula exists.
    """
    out = []
    ins = isa.by_mnemonic
    missing = [m for m in ins if m not in SEMANTICS]
    extra = [m for m in SEMANTICS if m not in ins]
    if missing:
        out.append("instructions with no semantics row: " + ", ".join(missing))
    if extra:
        out.append("semantics rows with no instruction: " + ", ".join(extra))
    if timing_module is not None:
        out.extend(f"[timing] {name} is not a function of nnpsim.timing" for name in isa.timing
                   if not callable(getattr(timing_module, name, None)))
    for m, row in SEMANTICS.items():
        if m in ins:
            found = _row_problems(row, ins[m])
            if implemented is not None and row.op not in implemented.get(row.unit, ()):
                found.append(f"the {row.unit} implements no op {row.op!r}")
            out.extend(f"{m}: {p}" for p in found)
    return out


def _row_problems(row: Semantics, ins) -> list[str]:
    out = []
    if row.unit != ins.unit:
        out.append(f"the table says unit {row.unit}, the TOML {ins.unit}")
    if row.timing != ins.timing:
        out.append(f"the table says timing {row.timing}, the TOML {ins.timing}")
    if row.footprint not in FOOTPRINTS:
        out.append(f"unknown footprint rule {row.footprint!r}")
    if row.imm and "imm" not in ins.fields:
        out.append("its row reads an immediate, but its format has no imm field")
    fields = {"VU": ("rd", "ra", "rb"), "NU": ("racc", "rin", "rw"), "DMA": ("rd", "rs", None)}.get(row.unit)
    for width, name in zip(row.widths, fields or ()):
        if width and name and name not in ins.fields:
            out.append(f"its row has an operand in {name}, but its format has no {name} field")
        if width == 0 and name and name in ins.fields:
            out.append(f"its format has {name}, but its row gives that operand no width")
    for code, name in ((SDT, "sdt"), (DDT, "ddt")):
        if code in row.widths and name not in ins.fields:
            out.append(f"a width comes from {name}, but its format has no {name} field")
    return out


def implemented_ops() -> dict[str, tuple[str, ...]]:
    """The ops the CU and each unit kernel implement, as they declare them."""
    from . import cu            # here, not above: cu and the units build their tables from this module
    from .units import dma, nu, vu
    return {"CU": tuple(cu.CU_OPERATIONS), "DMA": dma.OPS, "NU": nu.OPS, "VU": vu.OPS}


def check_isa(isa: Isa | None = None) -> None:
    """Raise IsaMismatch, naming every disagreement, unless SEMANTICS matches the ISA and the kernels."""
    isa = isa or load_isa()
    found = problems(isa)       # first the table against the TOML: the kernels read both
    if not found:
        from . import timing
        found = problems(isa, implemented_ops(), timing)
    if found:
        raise IsaMismatch("nnpsim's semantics table (nnpsim/semantics.py) and isa_spec/nnp1.toml "
                          "disagree:\n  " + "\n  ".join(found)
                          + "\nadd or fix the row in nnpsim/semantics.py (docs/extending.md)")


def rows_of(unit: str) -> list[Semantics]:
    """The rows of one unit, in table order."""
    return [r for r in _ROWS if r.unit == unit]


def opcode(mnemonic: str) -> int:
    """The instruction's opcode in the TOML."""
    return load_isa().by_mnemonic[mnemonic].opcode


def unit_op_codes(unit: str) -> dict[str, int]:
    """Code of each op of a unit kernel: the TOML opcode of the instruction that runs it."""
    return {r.op: opcode(r.mnemonic) for r in rows_of(unit)}


def element_bytes(mnemonic: str, sdt_bytes: int = 1, ddt_bytes: int = 1) -> tuple[int, int, int]:
    """Element bytes of (destination, a, b) of a command, given its sdt and ddt widths in bytes."""
    pick = {SDT: sdt_bytes, DDT: ddt_bytes}
    return tuple(pick.get(w, w) for w in SEMANTICS[mnemonic].widths)
