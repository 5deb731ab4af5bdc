"""The NNP-1 instruction set loaded from nnp1.toml and validated: the only loader."""
from __future__ import annotations

import functools
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

SPEC_PATH = Path(__file__).with_name("nnp1.toml")

KIND_CLASSES = {"reg", "simm", "uimm", "imm32", "addr", "pcrel", "sem", "sem_opt", "enum"}
UNITS = {"CU", "NU", "VU", "DMA"}


class IsaError(Exception):
    """The ISA data is inconsistent (raised while loading)."""


@dataclass(frozen=True)
class Kind:
    """How an operand is written in assembly and stored in its field."""

    name: str
    cls: str
    prefix: str = ""
    count: int = 0
    scale: int = 1
    values: dict[str, int] = field(default_factory=dict)

    @functools.cached_property
    def names(self) -> dict[int, str]:
        """Canonical name for each enum value (the first one listed)."""
        out: dict[int, str] = {}
        for name, value in self.values.items():
            out.setdefault(value, name)
        return out


@dataclass(frozen=True)
class Field:
    """A bit field of an instruction word."""

    name: str
    lsb: int
    width: int
    kind: Kind

    @property
    def mask(self) -> int:
        return ((1 << self.width) - 1) << self.lsb

    def value_range(self) -> tuple[int, int]:
        """Inclusive range of the operand value written in assembly."""
        k, w = self.kind, self.width
        if k.cls in ("reg", "sem"):
            return 0, k.count - 1
        if k.cls == "sem_opt":
            return 0, k.count - 1
        if k.cls == "simm":
            return -(1 << (w - 1)), (1 << (w - 1)) - 1
        if k.cls == "uimm":
            return 0, (1 << w) - 1
        if k.cls == "imm32":
            return -(1 << 31), (1 << 32) - 1
        if k.cls == "addr":
            return 0, (1 << 32) - 1
        if k.cls == "pcrel":
            return -(1 << (w - 1)) * k.scale, ((1 << (w - 1)) - 1) * k.scale
        if k.cls == "enum":
            return min(k.values.values()), max(k.values.values())
        raise IsaError(f"unknown kind class {k.cls}")


@dataclass(frozen=True)
class Operand:
    """One operand as written: a single field, or `space[reg]` (two fields)."""

    fields: tuple[str, ...]

    @property
    def is_mem(self) -> bool:
        return len(self.fields) == 2

    @property
    def text(self) -> str:
        return f"{self.fields[0]}[{self.fields[1]}]" if self.is_mem else self.fields[0]


@dataclass(frozen=True)
class Instruction:
    """One instruction: mnemonic, opcode, unit, fields and documentation."""

    mnemonic: str
    opcode: int
    unit: str
    format: str
    fields: dict[str, Field]
    operands: tuple[Operand, ...]
    sync: tuple[str, ...]
    timing: str
    summary: str

    @property
    def optional(self) -> tuple[str, ...]:
        """Fields written as name=value after the positional operands."""
        return tuple(n for n, f in self.fields.items() if f.kind.cls == "sem_opt")

    @property
    def is_command(self) -> bool:
        return self.unit != "CU"


@dataclass(frozen=True)
class Isa:
    """The whole instruction set."""

    name: str
    version: int
    word_bits: int
    opcode_lsb: int
    opcode_width: int
    elf_machine: int
    kinds: dict[str, Kind]
    formats: dict[str, dict[str, Field]]
    instructions: tuple[Instruction, ...]
    constants: dict[str, int]
    param_defaults: dict[str, int]
    timing: dict[str, str]
    """Timing formula names (functions of nnpsim/timing.py) and what each computes."""

    @functools.cached_property
    def by_mnemonic(self) -> dict[str, Instruction]:
        return {i.mnemonic: i for i in self.instructions}

    @functools.cached_property
    def by_opcode(self) -> dict[int, Instruction]:
        return {i.opcode: i for i in self.instructions}

    @functools.cached_property
    def index(self) -> dict[str, int]:
        """Position of each mnemonic in `instructions` (the decoded op id)."""
        return {i.mnemonic: n for n, i in enumerate(self.instructions)}

    @functools.cached_property
    def params(self) -> dict[str, int]:
        """Command parameter register numbers by name."""
        return dict(self.kinds["param"].values)

    def param_file(self) -> list[int]:
        """Initial contents of the 256 command parameter registers."""
        regs = [0] * 256
        for name, value in self.param_defaults.items():
            regs[self.params[name]] = value
        return regs

    @functools.cached_property
    def slots(self) -> tuple[str, ...]:
        """Every distinct field name, in a fixed order: columns of a decoded array."""
        seen: dict[str, None] = {}
        for fmt in self.formats.values():
            for name in fmt:
                seen.setdefault(name, None)
        return tuple(seen)

    @property
    def opcode_mask(self) -> int:
        return ((1 << self.opcode_width) - 1) << self.opcode_lsb


def _parse_kinds(raw: dict) -> dict[str, Kind]:
    kinds = {}
    for name, spec in raw.items():
        cls = spec.get("class")
        if cls not in KIND_CLASSES:
            raise IsaError(f"kind {name}: unknown class {cls!r}")
        values = {str(k): int(v) for k, v in spec.get("values", {}).items()}
        if cls == "enum" and not values:
            raise IsaError(f"kind {name}: an enum needs values")
        kinds[name] = Kind(name, cls, spec.get("prefix", ""), int(spec.get("count", 0)),
                           int(spec.get("scale", 1)), values)
    return kinds


def _parse_formats(raw: dict, kinds: dict[str, Kind], word_bits: int,
                   opcode_mask: int) -> dict[str, dict[str, Field]]:
    formats = {}
    for fname, spec in raw.items():
        fields: dict[str, Field] = {}
        used = opcode_mask
        for name, f in spec.get("fields", {}).items():
            kind = kinds.get(f["kind"])
            if kind is None:
                raise IsaError(f"format {fname}.{name}: unknown kind {f['kind']!r}")
            fld = Field(name, int(f["lsb"]), int(f["width"]), kind)
            if fld.lsb < 0 or fld.width <= 0 or fld.lsb + fld.width > word_bits:
                raise IsaError(f"format {fname}.{name}: bits {fld.lsb}+{fld.width} do not fit the word")
            if used & fld.mask:
                raise IsaError(f"format {fname}.{name}: overlaps another field or the opcode")
            used |= fld.mask
            _check_kind_fits(fname, fld)
            fields[name] = fld
        formats[fname] = fields
    return formats


def _check_kind_fits(fname: str, fld: Field) -> None:
    k, cap = fld.kind, (1 << fld.width) - 1
    if k.cls in ("reg", "sem") and k.count - 1 > cap:
        raise IsaError(f"format {fname}.{fld.name}: {k.count} {k.name} values do not fit {fld.width} bits")
    if k.cls == "sem_opt" and k.count > cap:
        raise IsaError(f"format {fname}.{fld.name}: {k.count} semaphores plus none do not fit")
    if k.cls == "enum" and (min(k.values.values()) < 0 or max(k.values.values()) > cap):
        raise IsaError(f"format {fname}.{fld.name}: enum {k.name} does not fit {fld.width} bits")
    if k.cls in ("imm32", "addr") and fld.width != 32:
        raise IsaError(f"format {fname}.{fld.name}: {k.cls} needs a 32-bit field")


def _parse_operand(text: str, fields: dict[str, Field], where: str) -> Operand:
    if "[" in text:
        space, reg = text.rstrip("]").split("[")
        op = Operand((space, reg))
        if fields.get(space) is None or fields[space].kind.name != "space":
            raise IsaError(f"{where}: {text}: {space} is not a space field")
        if fields.get(reg) is None or fields[reg].kind.cls != "reg":
            raise IsaError(f"{where}: {text}: {reg} is not a register field")
        return op
    if text not in fields:
        raise IsaError(f"{where}: operand {text} is not a field of its format")
    return Operand((text,))


def _parse_instructions(raw: list, formats: dict, opcode_width: int,
                        timing: dict[str, str]) -> tuple[Instruction, ...]:
    out, opcodes, mnemonics = [], {}, set()
    for spec in raw:
        m = spec["mnemonic"]
        where = f"instruction {m}"
        if m in mnemonics:
            raise IsaError(f"{where}: duplicate mnemonic")
        mnemonics.add(m)
        op = int(spec["opcode"])
        if not 0 <= op < (1 << opcode_width):
            raise IsaError(f"{where}: opcode {op:#x} does not fit {opcode_width} bits")
        if op in opcodes:
            raise IsaError(f"{where}: opcode {op:#x} already used by {opcodes[op]}")
        opcodes[op] = m
        if spec.get("unit") not in UNITS:
            raise IsaError(f"{where}: unknown unit {spec.get('unit')!r}")
        fields = formats.get(spec["format"])
        if fields is None:
            raise IsaError(f"{where}: unknown format {spec['format']!r}")
        operands = tuple(_parse_operand(t, fields, where) for t in spec["operands"])
        sync = tuple(spec.get("sync", []))
        covered = {f for o in operands for f in o.fields}
        for name, fld in fields.items():
            if name not in covered and fld.kind.cls != "sem_opt":
                raise IsaError(f"{where}: field {name} is neither an operand nor optional")
        for s in sync:
            if s not in fields:
                raise IsaError(f"{where}: sync field {s} is not a field")
        for key in ("timing", "summary"):
            if not spec.get(key):
                raise IsaError(f"{where}: missing {key}")
        if spec["timing"] not in timing:
            raise IsaError(f"{where}: timing {spec['timing']!r} is not a formula of [timing] "
                           f"({', '.join(timing)})")
        out.append(Instruction(m, op, spec["unit"], spec["format"], fields, operands, sync,
                               spec["timing"], spec["summary"]))
    return tuple(out)


def parse_isa(data: dict) -> Isa:
    """Build and validate an Isa from parsed TOML data."""
    meta = data["isa"]
    word_bits = int(meta["word_bits"])
    olsb, owidth = int(meta["opcode_lsb"]), int(meta["opcode_width"])
    if word_bits != 64 or olsb + owidth > word_bits:
        raise IsaError("the word must be 64 bits and hold the opcode")
    kinds = _parse_kinds(data["kinds"])
    for required in ("param", "space"):
        if required not in kinds:
            raise IsaError(f"missing kind {required}")
    params = kinds["param"].values
    if len(set(params.values())) != len(params):
        raise IsaError("two parameters share a number")
    opcode_mask = ((1 << owidth) - 1) << olsb
    formats = _parse_formats(data["formats"], kinds, word_bits, opcode_mask)
    timing = {str(k): str(v) for k, v in data["timing"].items()}
    instrs = _parse_instructions(data["instr"], formats, owidth, timing)
    constants = {str(k): int(v) for k, v in data.get("constants", {}).items()}
    defaults = {str(k): int(v) for k, v in data.get("param_defaults", {}).items()}
    for name in defaults:
        if name not in params:
            raise IsaError(f"param_defaults: {name} is not a parameter")
    return Isa(meta["name"], int(meta["version"]), word_bits, olsb, owidth,
               int(meta["elf_machine"]), kinds, formats, instrs, constants, defaults, timing)


@functools.lru_cache(maxsize=None)
def load_isa(path: str | None = None) -> Isa:
    """Load and validate the ISA (the project's nnp1.toml unless a path is given)."""
    p = Path(path) if path else SPEC_PATH
    with open(p, "rb") as fh:
        data = tomllib.load(fh)
    try:
        return parse_isa(data)
    except (KeyError, TypeError, ValueError) as exc:
        raise IsaError(f"{p}: malformed ISA data: {exc!r}") from exc
