"""ELF32 little-endian executables for NNP-1: the container of a program binary.

The CU's instruction memory and DDR are separate address spaces on the
machine; in the ELF view they are kept apart like this:

    .text      CU instruction memory, ELF address = CU byte address (from 0)
    .data*     DDR contents, ELF address = DDR_BASE (0x80000000) + DDR address

so DDR data may use DDR addresses 0 .. 2**31 - 1 and code up to 2**31 bytes; the
initialised part of the data (up to its last non-zero byte) is at most
MAX_IMAGE (256 MiB) bytes, so that reading a small file never builds a huge image.

File layout, in this order (every offset canonical, see `read_elf`):

    ELF header (52 bytes)
    program headers: PT_LOAD .text (R X), then one PT_LOAD per data chunk (R W;
                     the last one's p_memsz runs to the end of the DDR extent)
    .text      PROGBITS AX, align 8: the 64-bit instruction words, little-endian
    .data      PROGBITS WA at DDR_BASE + data_base (possibly empty)
    .data.K    PROGBITS WA, K = 1, 2, ...: further chunks of bytes; runs of
               at least ZERO_GAP zero bytes between chunks are not stored
    .bss       NOBITS WA: the zero tail up to data_base + data_size (if any)
    .symtab    SYMTAB: the null symbol, then every symbol (STB_GLOBAL, STT_NOTYPE) in
               the order the caller gives (isa_spec.program: text, data, abs by value);
               text symbols in .text (at instruction addresses, multiples of 8), data
               symbols in the data section at or before their address, absolute
               symbols SHN_ABS (low 32 bits)
    .strtab    STRTAB: symbol names
    .nnp.meta  PROGBITS, no flags: JSON metadata (see isa_spec.program)
    .shstrtab  STRTAB: section names
    section headers

e_machine is the ISA's elf_machine, e_flags the ISA version, e_entry 0.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass

import numpy as np

DDR_BASE = 0x80000000
ZERO_GAP = 4096          # zero runs at least this long between data chunks are left out of the file
# The stored DDR image (data_base up to the last non-zero byte) is read into one dense buffer, so
# a small file must not be able to claim a huge sparse one: the assembler's .data limit (256 MiB).
MAX_IMAGE = 1 << 28

ET_EXEC, EV_CURRENT = 2, 1
PT_LOAD, PF_X, PF_W, PF_R = 1, 1, 2, 4
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_NOBITS = 1, 2, 3, 8
SHF_WRITE, SHF_ALLOC, SHF_EXECINSTR = 1, 2, 4
SHN_ABS = 0xFFF1
STB_GLOBAL, STT_NOTYPE = 1, 0

EHDR = struct.Struct("<16sHHIIIIIHHHHHH")
PHDR = struct.Struct("<IIIIIIII")
SHDR = struct.Struct("<IIIIIIIIII")
SYM = struct.Struct("<IIIBBH")


class BinaryError(ValueError):
    """A binary is truncated, corrupt or not NNP-1; the message says what and where."""


@dataclass
class ElfImage:
    """The contents of an NNP-1 ELF file, before the metadata is interpreted."""

    text: bytes
    data: bytes            # DDR bytes from data_base, trailing zeros dropped
    data_base: int
    data_size: int
    symbols: list[tuple[str, int, str]]   # (name, value, 'text' | 'data' | 'abs'); data values are DDR addresses
    meta: bytes
    flags: int


@dataclass
class _Section:
    name: str
    type: int
    flags: int = 0
    addr: int = 0
    body: bytes = b""
    size: int = 0          # NOBITS size; for others len(body)
    link: int = 0
    info: int = 0
    align: int = 1
    entsize: int = 0


def data_chunks(data: bytes) -> list[tuple[int, int]]:
    """(start, end) offsets of the stored chunks of `data`: zero runs >= ZERO_GAP split, trailing zeros dropped."""
    nz = np.flatnonzero(np.frombuffer(data, dtype=np.uint8))
    if not len(nz):
        return [(0, 0)]
    cuts = np.flatnonzero(np.diff(nz) > ZERO_GAP)
    starts = [int(nz[0])] + [int(nz[c + 1]) for c in cuts]
    ends = [int(nz[c]) + 1 for c in cuts] + [int(nz[-1]) + 1]
    chunks = list(zip(starts, ends))
    if chunks[0][0] < ZERO_GAP:
        chunks[0] = (0, chunks[0][1])
    else:
        chunks.insert(0, (0, 0))
    return chunks


def _strtab(names: list[str]) -> tuple[bytes, dict[str, int]]:
    out, offsets = bytearray(b"\0"), {}
    for n in names:
        if n not in offsets:
            offsets[n] = len(out)
            out += n.encode() + b"\0"
    return bytes(out), offsets


def _check_writable(text: bytes, data: bytes, data_base: int, data_size: int, symbols) -> None:
    if len(text) % 8 or len(text) > DDR_BASE:
        raise BinaryError(f"code of {len(text)} bytes is not whole words or exceeds {DDR_BASE:#x} bytes")
    if data_base < 0 or data_size < 0 or data_base + data_size > DDR_BASE:
        raise BinaryError(f"data extent [{data_base:#x}, {data_base + data_size:#x}) does not fit "
                          f"DDR addresses 0..{DDR_BASE - 1:#x}")
    if len(data) > MAX_IMAGE:
        raise BinaryError(f"initialised data of {len(data)} bytes exceeds the limit of {MAX_IMAGE} bytes")
    for name, value, section in symbols:
        if not name or "\0" in name:
            raise BinaryError(f"symbol name {name!r} is empty or holds a NUL")
        if section == "abs":
            continue
        lo, hi = (0, len(text)) if section == "text" else (data_base, data_base + data_size)
        if not lo <= value <= hi:
            raise BinaryError(f"{section} symbol {name} = {value:#x} lies outside its section "
                              f"[{lo:#x}, {hi:#x}]")
        if section == "text" and value % 8:
            raise BinaryError(f"text symbol {name} = {value:#x} is not an instruction address (a multiple of 8)")


def write_elf(text: bytes, data: bytes, data_base: int, data_size: int,
              symbols: list[tuple[str, int, str]], meta: bytes, machine: int, flags: int) -> bytes:
    """Serialise an NNP-1 image (see the module docstring for the layout)."""
    _check_writable(text, data, data_base, data_size, symbols)
    chunks = data_chunks(data)
    secs = [_Section("", 0), _Section(".text", SHT_PROGBITS, SHF_ALLOC | SHF_EXECINSTR, 0, text, align=8)]
    for k, (a, b) in enumerate(chunks):
        secs.append(_Section(".data" if k == 0 else f".data.{k}", SHT_PROGBITS, SHF_ALLOC | SHF_WRITE,
                             DDR_BASE + data_base + a, data[a:b]))
    data_end = chunks[-1][1]
    if data_size > data_end:
        secs.append(_Section(".bss", SHT_NOBITS, SHF_ALLOC | SHF_WRITE, DDR_BASE + data_base + data_end,
                             size=data_size - data_end))
    data_secs = list(range(2, 2 + len(chunks)))
    sym_at = len(secs)
    names, sym_rows = [s[0] for s in symbols], []
    strtab, str_off = _strtab(names)
    for name, value, section in symbols:
        if section == "text":
            shndx, v = 1, value
        elif section == "data":
            v = DDR_BASE + value
            shndx = max((i for i in data_secs if secs[i].addr <= v), default=data_secs[0])
        else:
            shndx, v = SHN_ABS, value & 0xFFFFFFFF
        sym_rows.append(SYM.pack(str_off[name], v, 0, (STB_GLOBAL << 4) | STT_NOTYPE, 0, shndx))
    secs.append(_Section(".symtab", SHT_SYMTAB, body=bytes(SYM.size) + b"".join(sym_rows),
                         link=sym_at + 1, info=1, align=4, entsize=SYM.size))
    secs.append(_Section(".strtab", SHT_STRTAB, body=strtab))
    secs.append(_Section(".nnp.meta", SHT_PROGBITS, body=meta))
    shstr, sh_off = _strtab([s.name for s in secs[1:]] + [".shstrtab"])
    secs.append(_Section(".shstrtab", SHT_STRTAB, body=shstr))
    return _layout(secs, sh_off, chunks, data_base, data_size, machine, flags)


def _align(n: int, a: int) -> int:
    return -(-n // a) * a


def _layout(secs: list[_Section], sh_off: dict[str, int], chunks, data_base: int, data_size: int,
            machine: int, flags: int) -> bytes:
    nph = 1 + len(chunks)
    out = bytearray(EHDR.size + nph * PHDR.size)
    offsets = [0]
    for s in secs[1:]:
        off = _align(len(out), s.align)
        out += bytes(off - len(out))
        offsets.append(off)
        if s.type != SHT_NOBITS:
            out += s.body
    shoff = _align(len(out), 4)
    out += bytes(shoff - len(out))
    for s, off in zip(secs, offsets):
        size = s.size if s.type == SHT_NOBITS else len(s.body)
        out += SHDR.pack(sh_off.get(s.name, 0) if s.name else 0, s.type, s.flags, s.addr,
                         off if s.type else 0, size, s.link, s.info, s.align if s.type else 0, s.entsize)
    phdrs = [PHDR.pack(PT_LOAD, offsets[1], 0, 0, len(secs[1].body), len(secs[1].body), PF_R | PF_X, 8)]
    for k, (a, b) in enumerate(chunks):
        memsz = (data_size - a) if k == len(chunks) - 1 else b - a
        addr = DDR_BASE + data_base + a
        phdrs.append(PHDR.pack(PT_LOAD, offsets[2 + k], addr, addr, b - a, memsz, PF_R | PF_W, 1))
    out[EHDR.size:EHDR.size + nph * PHDR.size] = b"".join(phdrs)
    ident = b"\x7fELF" + bytes([1, 1, EV_CURRENT]) + bytes(9)
    out[:EHDR.size] = EHDR.pack(ident, ET_EXEC, machine, EV_CURRENT, 0, EHDR.size, shoff, flags,
                                EHDR.size, PHDR.size, nph, SHDR.size, len(secs), len(secs) - 1)
    return bytes(out)


def _need(blob: bytes, off: int, size: int, what: str) -> None:
    if off < 0 or size < 0 or off + size > len(blob):
        raise BinaryError(f"{what}: bytes [{off:#x}, {off + size:#x}) run past the end of the "
                          f"file ({len(blob):#x} bytes): truncated or corrupt")


def _read_header(blob: bytes, machine: int) -> tuple:
    _need(blob, 0, EHDR.size, "ELF header")
    h = EHDR.unpack_from(blob, 0)
    ident = h[0]
    if ident[:4] != b"\x7fELF":
        raise BinaryError("not an ELF file (bad magic at offset 0)")
    checks = [(ident[4] == 1, "not ELF32 (EI_CLASS at offset 4)"),
              (ident[5] == 1, "not little-endian (EI_DATA at offset 5)"),
              (ident[6] == EV_CURRENT and h[3] == EV_CURRENT, "unknown ELF version (offset 6 / 20)"),
              (h[1] == ET_EXEC, f"e_type {h[1]} is not ET_EXEC (offset 16)"),
              (h[2] == machine, f"e_machine {h[2]:#x} is not NNP-1 ({machine:#x}) (offset 18)"),
              (h[8] == EHDR.size and h[9] == PHDR.size and h[11] == SHDR.size,
               "unexpected ELF header or table entry sizes (offsets 40..47)")]
    for ok, msg in checks:
        if not ok:
            raise BinaryError(msg)
    return h


def _read_sections(blob: bytes, h: tuple) -> dict[str, tuple]:
    shoff, shnum, shstrndx = h[6], h[12], h[13]
    _need(blob, shoff, shnum * SHDR.size, "section header table")
    rows = [SHDR.unpack_from(blob, shoff + i * SHDR.size) for i in range(shnum)]
    if not 0 < shstrndx < shnum:
        raise BinaryError(f"e_shstrndx {shstrndx} is not a section index (0..{shnum - 1})")
    for i, r in enumerate(rows):
        if r[1] != SHT_NOBITS:
            _need(blob, r[4], r[5], f"section {i}")
    shstr = _section_bytes(blob, rows[shstrndx])
    by_name: dict[str, tuple] = {}
    for i, r in enumerate(rows[1:], 1):
        name = _cstring(shstr, r[0], f"name of section {i}")
        if name in by_name:
            raise BinaryError(f"section {name} appears twice")
        by_name[name] = (i,) + r
    for name in (".text", ".data", ".symtab", ".strtab", ".nnp.meta", ".shstrtab"):
        if name not in by_name:
            raise BinaryError(f"section {name} is missing")
    return by_name


def _section_bytes(blob: bytes, row: tuple) -> bytes:
    return blob[row[4]:row[4] + row[5]]


def _cstring(table: bytes, off: int, what: str) -> str:
    end = table.find(b"\0", off)
    if off >= len(table) or end < 0:
        raise BinaryError(f"{what}: string offset {off} is outside its string table ({len(table)} bytes)")
    try:
        return table[off:end].decode()
    except UnicodeDecodeError:
        raise BinaryError(f"{what}: string at offset {off} is not UTF-8") from None


def _check_segments(blob: bytes, h: tuple, spans: list[tuple[int, int, int]], end: int) -> None:
    """The program headers must agree with the data sections (checked before the data is assembled)."""
    phoff, phnum = h[5], h[10]
    if phnum != 1 + len(spans):
        raise BinaryError(f"{phnum} program headers for {len(spans)} data sections (expected {1 + len(spans)})")
    _need(blob, phoff, phnum * PHDR.size, "program header table")
    for k, (_, start, stop) in enumerate(spans):
        p = PHDR.unpack_from(blob, phoff + (1 + k) * PHDR.size)
        memsz = end - start if k == len(spans) - 1 else stop - start
        if p[0] != PT_LOAD or p[2] != start or p[4] != stop - start or p[5] != memsz:
            raise BinaryError(f"program header {1 + k} does not match data section {k} "
                              f"({start:#x}..{stop:#x})")


def _read_data(blob: bytes, secs: dict[str, tuple], h: tuple) -> tuple[bytes, int, int, list[tuple[int, int, int]]]:
    """Data bytes, data_base, data_size and (section index, ELF start, ELF end) per data section."""
    spans, parts, k = [], [], 0
    while True:
        name = ".data" if k == 0 else f".data.{k}"
        if name not in secs:
            break
        s = secs[name]
        if s[2] != SHT_PROGBITS or s[4] < DDR_BASE:
            raise BinaryError(f"section {name} is not PROGBITS at or above {DDR_BASE:#x}")
        if spans and s[4] < spans[-1][2]:
            raise BinaryError(f"section {name} at {s[4]:#x} overlaps or precedes the chunk before it")
        spans.append((s[0], s[4], s[4] + s[6]))
        parts.append((s[4], _section_bytes(blob, s[1:])))
        k += 1
    base = spans[0][1]
    end = spans[-1][2]
    if ".bss" in secs:
        s = secs[".bss"]
        if s[2] != SHT_NOBITS or s[4] != end:
            raise BinaryError(f".bss must be NOBITS starting right after the data ({end:#x})")
        end += s[6]
    if end > 1 << 32:
        raise BinaryError(f"data runs past the 32-bit address space (to {end:#x})")
    if spans[-1][2] - base > MAX_IMAGE:
        raise BinaryError(f"initialised data spans {spans[-1][2] - base} bytes, more than the limit of "
                          f"{MAX_IMAGE} bytes")
    _check_segments(blob, h, spans, end)
    try:
        data = bytearray(spans[-1][2] - base)
    except MemoryError:
        raise BinaryError(f"the data image of {spans[-1][2] - base} bytes does not fit in memory") from None
    for addr, body in parts:
        data[addr - base:addr - base + len(body)] = body
    return bytes(data), base - DDR_BASE, end - base, spans


def _read_symbols(blob: bytes, secs: dict[str, tuple], data_spans, text_index: int) -> list[tuple[str, int, str]]:
    sym, strs = secs[".symtab"], _section_bytes(blob, secs[".strtab"][1:])
    if sym[2] != SHT_SYMTAB or sym[10] != SYM.size or sym[6] % SYM.size:
        raise BinaryError(".symtab has the wrong type or entry size")
    if sym[7] != secs[".strtab"][0]:
        raise BinaryError(f".symtab links section {sym[7]}, not .strtab")
    body = _section_bytes(blob, sym[1:])
    data_idx = {i for i, _, _ in data_spans}
    out = []
    for n in range(1, len(body) // SYM.size):
        name_off, value, size, info, other, shndx = SYM.unpack_from(body, n * SYM.size)
        name = _cstring(strs, name_off, f"symbol {n}")
        if shndx == text_index:
            out.append((name, value, "text"))
        elif shndx in data_idx:
            out.append((name, value - DDR_BASE, "data"))
        elif shndx == SHN_ABS:
            out.append((name, value, "abs"))
        else:
            raise BinaryError(f"symbol {n} ({name}): section index {shndx} is not .text, a data "
                              "section or SHN_ABS")
    return out


def read_elf(blob: bytes, machine: int) -> ElfImage:
    """Parse and validate an NNP-1 ELF file; BinaryError names the first problem found."""
    blob = bytes(blob)
    h = _read_header(blob, machine)
    secs = _read_sections(blob, h)
    text_sec = secs[".text"]
    if text_sec[2] != SHT_PROGBITS or text_sec[4] != 0 or text_sec[6] % 8:
        raise BinaryError(".text must be PROGBITS at address 0 holding whole 64-bit words")
    text = _section_bytes(blob, text_sec[1:])
    data, base, size, spans = _read_data(blob, secs, h)
    symbols = _read_symbols(blob, secs, spans, text_sec[0])
    image = ElfImage(text, data.rstrip(b"\0"), base, size, symbols,
                     _section_bytes(blob, secs[".nnp.meta"][1:]), h[7])
    try:
        again = write_elf(image.text, image.data, base, size, symbols, image.meta, machine, h[7])
    except BinaryError as exc:
        raise BinaryError(f"inconsistent contents: {exc}") from None
    if again != blob:
        raise BinaryError(f"not in canonical form: {_first_difference(blob, again, h, secs)}")
    return image


def _first_difference(blob: bytes, canon: bytes, h: tuple, secs: dict[str, tuple]) -> str:
    """Where `blob` first departs from the canonical encoding of its own contents."""
    n = min(len(blob), len(canon))
    diff = np.flatnonzero(np.frombuffer(blob, np.uint8, n) != np.frombuffer(canon, np.uint8, n))
    off = int(diff[0]) if len(diff) else n
    where = ("one or more bytes differ" if len(blob) == len(canon)
             else f"file is {len(blob)} bytes, the canonical encoding {len(canon)}")
    region = "padding"
    if off < EHDR.size:
        region = "ELF header"
    elif off < EHDR.size + h[10] * PHDR.size:
        region = "program headers"
    elif off >= h[6]:
        region = "section headers"
    for name, s in secs.items():
        if s[2] != SHT_NOBITS and s[5] <= off < s[5] + s[6]:
            region = f"section {name}"
    return f"{where}; first at offset {off:#x} ({region})"
