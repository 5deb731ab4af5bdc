"""The binary format: Program <-> ELF bytes, readelf's view, and rejection of bad files."""
import json
import shutil
import struct
import subprocess

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa_spec import encode, load_isa
from isa_spec.elf import DDR_BASE, SHDR, ZERO_GAP, data_chunks, write_elf
from isa_spec.program import BinaryError, Buffer, Program, Symbol

ISA = load_isa()
READELF = shutil.which("readelf") or "/usr/bin/readelf"


def small_program() -> Program:
    code = np.array([encode("li", {"rd": 1, "imm": 7}),
                     encode("loop", {"rd": 1, "off": 0}),
                     encode("dma", {"ch": 2, "rd": 3, "rs": 4, "dspace": 8, "sspace": 0, "wait": 0, "signal": 5}),
                     encode("halt", {})], dtype=np.uint64)
    data = bytes(range(1, 41))
    return Program(code, data, 0x40, 64,
                   {"main": Symbol("main", 0, "text"), "end": Symbol("end", 32, "text"),
                    "X": Symbol("X", 0x40, "data"), "N": Symbol("N", -3, "abs"),
                    "BIG": Symbol("BIG", 1 << 40, "abs")},
                   {"X": Buffer("X", 0x40, "int8", (1, 3, 4, 3), "")},
                   [("k.s", 3), ("k.s", 4), ("inc.s", 1), ("k.s", 9)], {"nu_rows": 32, "target": "nnp1"})


def many_symbols_program() -> Program:
    code = np.array([encode("addi", {"rd": i % 32, "rs1": 0, "imm": i}) for i in range(300)], dtype=np.uint64)
    syms = {f"t{i}": Symbol(f"t{i}", 8 * i, "text") for i in range(300)}
    syms.update({f"d{i}": Symbol(f"d{i}", 4 * i, "data") for i in range(500)})
    syms.update({f"c{i}": Symbol(f"c{i}", i - 250, "abs") for i in range(500)})
    return Program(code, bytes(range(256)) * 8, 0, 2000 * 4, syms, {}, None, {})


def big_space_program() -> Program:
    # `.byte 9` then `.space 100000000`, then a byte past a long gap, then a zero tail.
    data = b"\x09" + bytes(3 * ZERO_GAP) + b"\x05\x06"
    return Program(np.array([encode("halt", {})], np.uint64), data, 0, 100_000_000,
                   {"tail": Symbol("tail", 100_000_000, "data")}, {}, [("a.s", 1)], {})


PROGRAMS = {
    "empty": lambda: Program(np.zeros(0, np.uint64)),
    "small": small_program,
    "many_symbols": many_symbols_program,
    "big_space": big_space_program,
    "only_zero_data": lambda: Program(np.zeros(0, np.uint64), bytes(50), 0x1000, 0,
                                      {"z": Symbol("z", 0x1000 + 50, "data")}),
}


def same_program(a: Program, b: Program) -> None:
    np.testing.assert_array_equal(a.code, b.code)
    size = max(len(a.data), len(b.data), a.data_size)
    assert a.data.ljust(size, b"\0") == b.data.ljust(size, b"\0")
    assert (a.data_base, max(a.data_size, len(a.data))) == (b.data_base, b.data_size)
    assert a.symbols == b.symbols and a.buffers == b.buffers
    assert a.lines == b.lines and a.config == b.config


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_round_trip(name, tmp_path):
    prog = PROGRAMS[name]()
    blob = prog.to_bytes()
    back = Program.from_bytes(blob)
    same_program(prog, back)
    assert back.to_bytes() == blob
    path = tmp_path / "p.bin"
    prog.save(path)
    same_program(prog, Program.load(path))


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_readelf_reads_without_complaint(name, tmp_path):
    path = tmp_path / "p.bin"
    PROGRAMS[name]().save(path)
    res = subprocess.run([READELF, "-a", "-W", str(path)], capture_output=True, text=True, timeout=60)
    text = res.stdout + res.stderr
    assert res.returncode == 0, text
    assert res.stderr == ""
    for bad in ("Warning", "warning", "Error", "error"):
        assert bad not in text, text
    assert "Machine:                           <unknown>: 0x4e50" in text
    assert ".text" in text and ".nnp.meta" in text and ".symtab" in text


def test_readelf_sees_the_address_convention(tmp_path):
    path = tmp_path / "p.bin"
    small_program().save(path)
    out = subprocess.run([READELF, "-s", "-l", "-W", str(path)], capture_output=True, text=True).stdout
    assert f"{DDR_BASE + 0x40:08x}" in out          # X and the data segment
    assert "fffffffd" in out                          # N = -3, absolute, low 32 bits
    assert "LOAD" in out


def test_zero_data_stays_out_of_the_file():
    prog = big_space_program()
    blob = prog.to_bytes()
    assert len(blob) < 4096
    back = Program.from_bytes(blob)
    assert back.data_size == 100_000_000 and back.data == prog.data


def test_data_chunks():
    assert data_chunks(b"") == [(0, 0)]
    assert data_chunks(bytes(10)) == [(0, 0)]
    gap = bytes(ZERO_GAP + 1)
    assert data_chunks(b"\1" + gap + b"\2\0") == [(0, 1), (ZERO_GAP + 2, ZERO_GAP + 3)]
    assert data_chunks(gap + b"\3") == [(0, 0), (ZERO_GAP + 1, ZERO_GAP + 2)]
    assert data_chunks(b"\1" + bytes(ZERO_GAP - 1) + b"\2") == [(0, ZERO_GAP + 1)]
    assert data_chunks(b"\1" + bytes(ZERO_GAP) + b"\2") == [(0, 1), (ZERO_GAP + 1, ZERO_GAP + 2)]


def test_buffer_nbytes_uses_layout():
    assert Buffer("a", 0, "int8", (1, 3, 4, 4), "split(1,32) reorder(0,1,3,4,2)").nbytes == 1 * 1 * 4 * 4 * 32
    assert Buffer("b", 0, "int32", (5, 7)).nbytes == 140


@pytest.mark.parametrize("mutate, message", [
    (lambda p: p.symbols.update(bad=Symbol("bad", 40, "text")), "outside its section"),
    (lambda p: p.symbols.update(bad=Symbol("bad", 0x40 + 65, "data")), "outside its section"),
    (lambda p: p.symbols.update(bad=Symbol("bad", 0, "bss")), "bad name or section"),
    (lambda p: p.symbols.update({"2x": Symbol("2x", 0, "text")}), "bad name"),
    (lambda p: p.buffers.update(B=Buffer("B", 0x40, "int8", (65,))), "outside the data section"),
    (lambda p: p.buffers.update(B=Buffer("B", 0x40, "int16", (2,))), "bad addr"),
    (lambda p: p.buffers.update(B=Buffer("B", 0x40, "int8", (2,), "split(3,2)")), "axis 3 out of range"),
    (lambda p: setattr(p, "lines", [("a", 1)]), "line table has 1 entries"),
    (lambda p: p.config.update(x=1.5), "config"),
    (lambda p: setattr(p, "data_size", DDR_BASE), "does not fit"),
])
def test_unrepresentable_programs_are_refused(mutate, message):
    prog = small_program()
    mutate(prog)
    with pytest.raises(BinaryError, match=message):
        prog.to_bytes()


def test_load_missing_file(tmp_path):
    with pytest.raises(BinaryError, match="nope.bin: cannot read"):
        Program.load(tmp_path / "nope.bin")
    (tmp_path / "junk.bin").write_bytes(b"hello")
    with pytest.raises(BinaryError, match="junk.bin: ELF header"):
        Program.load(tmp_path / "junk.bin")


def _patch(blob: bytes, off: int, fmt: str, value) -> bytes:
    b = bytearray(blob)
    struct.pack_into(fmt, b, off, value)
    return bytes(b)


def _section(blob: bytes, name: str) -> tuple[int, tuple]:
    shoff, shnum, shstrndx = struct.unpack_from("<I", blob, 32)[0], *struct.unpack_from("<HH", blob, 48)
    rows = [SHDR.unpack_from(blob, shoff + i * SHDR.size) for i in range(shnum)]
    strs = blob[rows[shstrndx][4]:]
    for i, r in enumerate(rows):
        if strs[r[0]:].split(b"\0")[0].decode() == name:
            return shoff + i * SHDR.size, r
    raise KeyError(name)


def _with_meta(blob: bytes, edit) -> bytes:
    """Rewrite the metadata JSON through a fresh, otherwise canonical file."""
    prog = Program.from_bytes(blob)
    _, row = _section(blob, ".nnp.meta")
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    edit(meta)
    new = json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()
    syms = [(s.name, s.value, s.section) for s in prog.symbols.values()]
    return write_elf(prog.code.astype("<u8").tobytes(), prog.data, prog.data_base, prog.data_size, syms,
                     new, ISA.elf_machine, ISA.version)


@pytest.mark.parametrize("corrupt, message", [
    (lambda b: b"\x7fELG" + b[4:], "bad magic"),
    (lambda b: b[:4] + b"\x02" + b[5:], "not ELF32"),
    (lambda b: b[:5] + b"\x02" + b[6:], "not little-endian"),
    (lambda b: _patch(b, 16, "<H", 3), "not ET_EXEC"),
    (lambda b: _patch(b, 18, "<H", 0x28), "e_machine 0x28"),
    (lambda b: _patch(b, 36, "<I", 7), "e_flags 7"),
    (lambda b: _patch(b, 32, "<I", 1 << 30), "section header table"),
    (lambda b: _patch(b, 50, "<H", 200), "e_shstrndx 200"),
    (lambda b: _patch(b, _section(b, ".text")[0] + 16, "<I", 1 << 28), "section 1"),
    (lambda b: _patch(b, _section(b, ".symtab")[0] + 24, "<I", 9), "links section 9"),
    (lambda b: _patch(b, _section(b, ".data")[0] + 12, "<I", DDR_BASE + 0x80), ".bss must be NOBITS"),
    (lambda b: b[:-1], "section header table"),
    (lambda b: b + b"\0", "canonical form"),
    (lambda b: _patch(b, _section(b, ".nnp.meta")[1][4], "<B", ord("[")), "not valid UTF-8 JSON"),
    (lambda b: _with_meta(b, lambda m: m.update(format_version=2)), "version 2"),
    (lambda b: _with_meta(b, lambda m: m["isa"].update(version=9)), "built for ISA"),
    (lambda b: _with_meta(b, lambda m: m.pop("config")), "keys"),
    (lambda b: _with_meta(b, lambda m: m["buffers"][0].update(dtype="f32")), "bad addr"),
    (lambda b: _with_meta(b, lambda m: m["buffers"][0].update(shape=[1, -2])), "non-negative"),
    (lambda b: _with_meta(b, lambda m: m["buffers"][0].update(layout="frob(1)")), "unknown step"),
    (lambda b: _with_meta(b, lambda m: m["lines"]["table"].pop()), "one entry per instruction"),
    (lambda b: _with_meta(b, lambda m: m["lines"]["table"][0].__setitem__(0, 5)), r"lines.table\[0\]"),
    (lambda b: _with_meta(b, lambda m: m["abs"].update(N=4)), "does not match"),
    (lambda b: _with_meta(b, lambda m: m["abs"].update(Q=4)), "not absolute symbols"),
    (lambda b: _with_meta(b, lambda m: m["config"].update(x=[1])), "config"),
])
def test_corrupt_binaries_are_named(corrupt, message):
    with pytest.raises(BinaryError, match=message):
        Program.from_bytes(corrupt(small_program().to_bytes()))


def test_segments_must_match_sections():
    blob = Program(np.zeros(0, np.uint64), bytes(range(1, 200))).to_bytes()
    with pytest.raises(BinaryError, match="program header 1 does not match data section 0"):
        Program.from_bytes(_patch(blob, _section(blob, ".data")[0] + 12, "<I", DDR_BASE + 0x80))


def test_illegal_code_word():
    prog = small_program()
    prog.code = np.append(prog.code, np.uint64(0xFF)).astype(np.uint64)
    prog.lines = None
    with pytest.raises(BinaryError, match=r"\.text: instruction 4 \(byte 0x20\): illegal opcode 0xff"):
        Program.from_bytes(prog.to_bytes())


def test_every_truncation_is_a_binary_error():
    blob = small_program().to_bytes()
    for n in range(len(blob)):
        with pytest.raises(BinaryError):
            Program.from_bytes(blob[:n])


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_bit_flips_give_only_binary_errors(data):
    blob = bytearray(small_program().to_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        bit = data.draw(st.integers(0, 8 * len(blob) - 1))
        blob[bit // 8] ^= 1 << bit % 8
    try:
        prog = Program.from_bytes(bytes(blob))
    except BinaryError:
        return
    # A flip the reader accepts must still describe a valid, canonical program.
    assert prog.to_bytes() == bytes(blob)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_garbage_gives_binary_error(blob):
    with pytest.raises(BinaryError):
        Program.from_bytes(b"\x7fELF\x01\x01\x01" + blob)
