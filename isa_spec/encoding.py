"""Encode and decode NNP-1 instruction words, one at a time or a whole program."""
from __future__ import annotations

import numpy as np

from .model import Field, Instruction, Isa, load_isa

NONE = -1  # decoded value of an absent optional semaphore in bulk arrays


class EncodeError(ValueError):
    """An operand value does not fit its field; `field` names the field."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


class DecodeError(ValueError):
    """A word is not a valid NNP-1 instruction."""


def check_value(fld: Field, value: int | None) -> None:
    """Raise EncodeError unless `value` is a legal operand value for `fld`."""
    k = fld.kind
    if value is None:
        if k.cls == "sem_opt":
            return
        raise EncodeError(fld.name, f"{fld.name} needs a value")
    lo, hi = fld.value_range()
    if k.cls == "enum":
        if value not in k.names:
            names = ", ".join(sorted(k.values))
            raise EncodeError(fld.name, f"{fld.name}: {value} is not a {k.name} ({names})")
        return
    if not lo <= value <= hi:
        what = {"reg": "register", "sem": "semaphore", "sem_opt": "semaphore"}.get(k.cls, "value")
        raise EncodeError(fld.name, f"{fld.name}: {what} {value} out of range [{lo}, {hi}]")
    if k.cls == "pcrel" and value % k.scale:
        raise EncodeError(fld.name, f"{fld.name}: branch offset {value} is not a multiple of {k.scale}")


def field_bits(fld: Field, value: int | None) -> int:
    """The raw bits (not yet shifted) that store `value` in `fld`."""
    check_value(fld, value)
    k, mask = fld.kind, (1 << fld.width) - 1
    if k.cls == "sem_opt":
        return 0 if value is None else value + 1
    if k.cls == "pcrel":
        return (value // k.scale) & mask
    return value & mask


def field_value(fld: Field, bits: int) -> int | None:
    """The operand value stored as `bits` in `fld` (inverse of field_bits)."""
    k, w = fld.kind, fld.width
    if k.cls == "sem_opt":
        return None if bits == 0 else bits - 1
    if k.cls in ("simm", "pcrel"):
        v = bits - (1 << w) if bits >> (w - 1) else bits
        return v * k.scale if k.cls == "pcrel" else v
    return bits


def encode(instr: Instruction | str, operands: dict[str, int | None], isa: Isa | None = None) -> int:
    """Encode one instruction; `operands` maps field names to values."""
    isa = isa or load_isa()
    if isinstance(instr, str):
        instr = isa.by_mnemonic[instr]
    unknown = set(operands) - set(instr.fields)
    if unknown:
        raise EncodeError(sorted(unknown)[0], f"{instr.mnemonic} has no field {sorted(unknown)[0]}")
    word = instr.opcode << isa.opcode_lsb
    for name, fld in instr.fields.items():
        word |= field_bits(fld, operands.get(name)) << fld.lsb
    return word


def decode(word: int, isa: Isa | None = None) -> tuple[Instruction, dict[str, int | None]]:
    """Decode one word into its instruction and operand values."""
    isa = isa or load_isa()
    if not 0 <= word < (1 << isa.word_bits):
        raise DecodeError(f"{word:#x} is not a {isa.word_bits}-bit word")
    opcode = (word & isa.opcode_mask) >> isa.opcode_lsb
    instr = isa.by_opcode.get(opcode)
    if instr is None:
        raise DecodeError(f"illegal opcode {opcode:#04x} in word {word:#018x}")
    used = isa.opcode_mask
    values: dict[str, int | None] = {}
    for name, fld in instr.fields.items():
        used |= fld.mask
        bits = (word & fld.mask) >> fld.lsb
        if fld.kind.cls == "enum" and bits not in fld.kind.names:
            raise DecodeError(f"{instr.mnemonic}: {bits} is not a {fld.kind.name} in word {word:#018x}")
        if fld.kind.cls == "sem_opt" and bits > fld.kind.count:
            raise DecodeError(f"{instr.mnemonic}: semaphore field {bits - 1} out of range in word {word:#018x}")
        if fld.kind.cls in ("reg", "sem") and bits >= fld.kind.count:
            raise DecodeError(f"{instr.mnemonic}: {name} = {bits} out of range in word {word:#018x}")
        values[name] = field_value(fld, bits)
    if word & ~used & ((1 << isa.word_bits) - 1):
        raise DecodeError(f"{instr.mnemonic}: reserved bits set in word {word:#018x}")
    return instr, values


def decode_program(words: np.ndarray, isa: Isa | None = None) -> np.ndarray:
    """Decode a program into an int64 array [n, 1 + len(isa.slots)].

    Column 0 is the instruction's index in `isa.instructions`; column 1 + j
    holds the value of field `isa.slots[j]` (0 where the instruction has no
    such field, NONE for an absent optional semaphore).  Raises DecodeError
    naming the first bad word's index.
    """
    isa = isa or load_isa()
    words = np.asarray(words, dtype=np.uint64)
    out = np.zeros((len(words), 1 + len(isa.slots)), dtype=np.int64)
    col = {name: 1 + j for j, name in enumerate(isa.slots)}
    opcodes = (words >> np.uint64(isa.opcode_lsb)) & np.uint64((1 << isa.opcode_width) - 1)
    seen = np.zeros(len(words), dtype=bool)
    for n, instr in enumerate(isa.instructions):
        rows = np.nonzero(opcodes == instr.opcode)[0]
        if not len(rows):
            continue
        seen[rows] = True
        out[rows, 0] = n
        for name, fld in instr.fields.items():
            bits = ((words[rows] >> np.uint64(fld.lsb)) & np.uint64((1 << fld.width) - 1)).astype(np.int64)
            out[rows, col[name]] = _bulk_value(fld, bits)
    if not seen.all():
        bad = int(np.nonzero(~seen)[0][0])
        raise DecodeError(f"instruction {bad} (byte {bad * 8:#x}): illegal opcode {int(opcodes[bad]):#04x}")
    _validate_rows(words, out, isa)
    return out


def _bulk_value(fld: Field, bits: np.ndarray) -> np.ndarray:
    k, w = fld.kind, fld.width
    if k.cls == "sem_opt":
        return np.where(bits == 0, NONE, bits - 1)
    if k.cls in ("simm", "pcrel"):
        v = np.where(bits >> (w - 1), bits - (1 << w), bits)
        return v * k.scale if k.cls == "pcrel" else v
    return bits


def _validate_rows(words: np.ndarray, decoded: np.ndarray, isa: Isa) -> None:
    """Run the strict single-word decoder on every distinct word (cheap: few distinct)."""
    for w in np.unique(words):
        try:
            decode(int(w), isa)
        except DecodeError as exc:
            bad = int(np.nonzero(words == w)[0][0])
            raise DecodeError(f"instruction {bad} (byte {bad * 8:#x}): {exc}") from None
