"""Fuzz the binary reader: truncated, bit-flipped and structurally corrupted ELF files.

Property: `Program.from_bytes` and `nnpasm.disassemble` either accept a file
(then it is canonical: it re-encodes to the same bytes) or raise BinaryError,
never anything else, within bounded time and memory; the command lines
(`nnpasm --disassemble`, `nnpsim run`) reject it with one clear line and a
non-zero exit, never a traceback or a signal.
"""
from __future__ import annotations

import json
import resource
import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from isa_spec import elf, encode, load_isa
from isa_spec.elf import EHDR, PHDR, SHDR, SYM, write_elf
from isa_spec.program import BinaryError, Program, Symbol, _symbol_order
from nnpasm import AsmError, assemble, disassemble

from .strategies import assert_clean_exit, budget, rich_program, run_python, time_limit, valid_binaries

NAMES = sorted(valid_binaries())
INTERESTING = [0, 1, 2, 3, 4, 7, 8, 40, 52, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x7FFFFFFF, 0x80000000,
               0x80000001, 0xFFFFFFF0, 0xFFFFFFFF]


def check(blob: bytes) -> Program | None:
    """The reader's contract for one file: a canonical Program or BinaryError, fast."""
    with time_limit(10, "reading a binary"):
        try:
            prog = Program.from_bytes(blob)
        except BinaryError as exc:
            assert str(exc).strip()
            with pytest.raises(BinaryError):
                disassemble(blob)
            return None
        assert prog.to_bytes() == blob
        text = disassemble(blob)
        # The disassembler's promise: the same binary back (data at DDR 0, as the assembler writes it;
        # a binary with data_base != 0 comes back with the same DDR contents, see docs/assembler.md).
        if prog.data_base == 0:
            assert assemble(text, "<disassembly>").to_bytes() == blob, text
        return prog


def sections(blob: bytes) -> dict[str, tuple[int, tuple]]:
    """Section name -> (header offset, header fields) of a valid binary."""
    h = EHDR.unpack_from(blob, 0)
    rows = [SHDR.unpack_from(blob, h[6] + i * SHDR.size) for i in range(h[12])]
    strtab = rows[h[13]]
    names = blob[strtab[4]:strtab[4] + strtab[5]]
    return {names[r[0]:names.index(b"\0", r[0])].decode(): (h[6] + i * SHDR.size, r)
            for i, r in enumerate(rows)}


def patch(blob: bytes, offset: int, fmt: str, value: int) -> bytes:
    out = bytearray(blob)
    struct.pack_into(fmt, out, offset, value & ((1 << (8 * struct.calcsize(fmt))) - 1))
    return bytes(out)


def test_valid_binaries_are_accepted():
    for name in NAMES:
        assert check(valid_binaries()[name]) is not None, name


@pytest.mark.parametrize("name", NAMES)
def test_every_truncation_is_rejected(name):
    blob = valid_binaries()[name]
    for n in range(len(blob)):
        with pytest.raises(BinaryError):
            Program.from_bytes(blob[:n])
    with pytest.raises(BinaryError):
        disassemble(blob[:len(blob) // 2])


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(150)
def test_bit_flips(name, data):
    blob = bytearray(valid_binaries()[name])
    for bit in data.draw(st.lists(st.integers(0, 8 * len(blob) - 1), min_size=1, max_size=8)):
        blob[bit // 8] ^= 1 << (bit % 8)
    check(bytes(blob))


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(100)
def test_byte_overwrites(name, data):
    blob = bytearray(valid_binaries()[name])
    at = data.draw(st.integers(0, len(blob) - 1))
    junk = data.draw(st.binary(min_size=1, max_size=16))
    blob[at:at + len(junk)] = junk
    check(bytes(blob))


EHDR_FIELDS = {  # offset, format: every field of the ELF header
    "magic": (0, "<I"), "class": (4, "<B"), "data": (5, "<B"), "ident_version": (6, "<B"),
    "type": (16, "<H"), "machine": (18, "<H"), "version": (20, "<I"), "entry": (24, "<I"),
    "phoff": (28, "<I"), "shoff": (32, "<I"), "flags": (36, "<I"), "ehsize": (40, "<H"),
    "phentsize": (42, "<H"), "phnum": (44, "<H"), "shentsize": (46, "<H"), "shnum": (48, "<H"),
    "shstrndx": (50, "<H")}


@given(name=st.sampled_from(NAMES), field=st.sampled_from(sorted(EHDR_FIELDS)),
       value=st.sampled_from(INTERESTING) | st.integers(0, 0xFFFFFFFF))
@budget(150)
def test_elf_header_fields(name, field, value):
    offset, fmt = EHDR_FIELDS[field]
    blob = valid_binaries()[name]
    mutant = patch(blob, offset, fmt, value)
    if mutant != blob:
        assert check(mutant) is None, f"{field} = {value:#x} accepted"


def test_wrong_magic_class_version_machine_are_named():
    blob = valid_binaries()["rich"]
    for field, value, words in [("magic", 0x464C457E, "magic"), ("class", 2, "ELF32"),
                                ("data", 2, "little-endian"), ("ident_version", 9, "version"),
                                ("version", 2, "version"), ("machine", 0x3E, "e_machine"),
                                ("flags", 7, "ISA version")]:
        offset, fmt = EHDR_FIELDS[field]
        with pytest.raises(BinaryError, match=words):
            Program.from_bytes(patch(blob, offset, fmt, value))


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(200)
def test_section_header_fields(name, data):
    """Section offsets and sizes pointing outside the file, wrong types, links and addresses."""
    blob = valid_binaries()[name]
    secs = sections(blob)
    sec = data.draw(st.sampled_from(sorted(secs)))
    field = data.draw(st.integers(0, 9))
    value = data.draw(st.sampled_from(INTERESTING + [len(blob), len(blob) - 1, len(blob) + 1,
                                                     secs[sec][1][field] + 1, secs[sec][1][field] - 1])
                      | st.integers(0, 0xFFFFFFFF))
    mutant = patch(blob, secs[sec][0] + 4 * field, "<I", value)
    if mutant != blob:
        assert check(mutant) is None


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(100)
def test_program_header_fields(name, data):
    blob = valid_binaries()[name]
    h = EHDR.unpack_from(blob, 0)
    k = data.draw(st.integers(0, h[10] - 1))
    field = data.draw(st.integers(0, 7))
    mutant = patch(blob, h[5] + k * PHDR.size + 4 * field, "<I",
                   data.draw(st.sampled_from(INTERESTING) | st.integers(0, 0xFFFFFFFF)))
    if mutant != blob:
        assert check(mutant) is None


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(150)
def test_symbol_fields(name, data):
    """Symbol name offsets outside .strtab, section indices out of range, odd values."""
    blob = valid_binaries()[name]
    off, row = sections(blob)[".symtab"][1][4], sections(blob)[".symtab"][1]
    count = row[5] // SYM.size
    if count < 2:
        return
    n = data.draw(st.integers(0, count - 1))
    field, fmt = data.draw(st.sampled_from([(0, "<I"), (4, "<I"), (8, "<I"), (12, "<B"), (13, "<B"), (14, "<H")]))
    value = data.draw(st.sampled_from(INTERESTING + [0xFFF1, 0xFFF2, 0xFF00, row[5], 1 << 20])
                      | st.integers(0, 0xFFFFFFFF))
    mutant = patch(blob, off + n * SYM.size + field, fmt, value)
    if mutant != blob:
        check(mutant)   # a value change may stay valid (a text symbol moved inside .text)


def rebuild(prog: Program, meta: bytes) -> bytes:
    """The binary of `prog` with its metadata section replaced (the ELF container stays valid)."""
    isa = load_isa()
    syms = [(s.name, int(s.value), s.section) for s in _symbol_order(prog.symbols)]
    return write_elf(prog.code.astype("<u8").tobytes(), bytes(prog.data).rstrip(b"\0"),
                     prog.data_base, max(prog.data_size, len(prog.data)), syms, meta, isa.elf_machine,
                     isa.version)


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(1 << 70), 1 << 70) | st.sampled_from([0, -1, 1, 2 ** 31, 2 ** 64])
    | st.text(max_size=12) | st.sampled_from(["int8", "int32", "split(0,4)", "reorder(1,0)", "pad(0,999)",
                                               "nnp-elf", "NNP-1", "", "main"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


@given(name=st.sampled_from(NAMES), data=st.data())
@budget(200)
def test_corrupted_metadata(name, data):
    """Valid ELF around JSON metadata with one value replaced, deleted or added anywhere."""
    prog = Program.from_bytes(valid_binaries()[name])
    blob = prog.to_bytes()
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    paths = list(_paths(meta))[1:]
    path = data.draw(st.sampled_from(paths))
    parent = meta
    for key in path[:-1]:
        parent = parent[key]
    action = data.draw(st.sampled_from(["replace", "delete", "add"]))
    if action == "replace":
        parent[path[-1]] = data.draw(JSON_VALUES)
    elif action == "delete":
        del parent[path[-1]]
    elif isinstance(parent, dict):
        parent[data.draw(st.text(max_size=6))] = data.draw(JSON_VALUES)
    else:
        parent.append(data.draw(JSON_VALUES))
    canonical = data.draw(st.booleans())
    text = (json.dumps(meta, sort_keys=True, separators=(",", ":")) if canonical else json.dumps(meta))
    check(rebuild(prog, text.encode()))


@given(meta=st.binary(max_size=64) | st.text(max_size=64).map(str.encode))
@budget(60)
def test_garbage_metadata(meta):
    check(rebuild(rich_program(), meta))


@given(blob=st.binary(max_size=600))
@budget(100)
def test_random_bytes(blob):
    check(blob)


@given(blob=st.binary(max_size=200))
@budget(60)
def test_random_bytes_after_elf_header(blob):
    head = valid_binaries()["rich"][:EHDR.size]
    check(head + blob)


def test_sparse_data_claim_is_rejected_without_building_it():
    """Regression: a 1.5 KB file whose .data.1 was moved to 0xF0000000 made the reader build a
    1.75 GB image (3.6 GB peak, 19 s) before rejecting it."""
    blob = bytearray(valid_binaries()["rich"])
    secs = sections(bytes(blob))
    h = EHDR.unpack_from(blob, 0)
    far = 0xF0000000
    struct.pack_into("<I", blob, secs[".data.1"][0] + 12, far)
    struct.pack_into("<I", blob, secs[".bss"][0] + 12, far + secs[".data.1"][1][5])
    struct.pack_into("<II", blob, h[5] + 2 * PHDR.size + 8, far, far)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with time_limit(5, "reading a sparse binary"), pytest.raises(BinaryError, match="limit"):
        Program.from_bytes(bytes(blob))
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200 * 1024   # KiB


def test_writer_refuses_images_past_the_limit():
    prog = rich_program()
    prog.data = b"\x01" * (elf.MAX_IMAGE + 1)
    prog.data_size = len(prog.data)
    with pytest.raises(BinaryError, match="limit"):
        prog.to_bytes()


# ---------------------------------------------------------------------------
# The command lines, in a subprocess: one clear line, non-zero exit, no signal.
# ---------------------------------------------------------------------------

BATCH = r"""
import contextlib, io, json, sys
from nnpasm.cli import main as nnpasm_main
from nnpsim.cli import main as nnpsim_main
out = []
for path in sys.argv[1:]:
    for tool, argv in (("nnpasm", ["--disassemble", path]), ("nnpsim", ["run", path])):
        err, so = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(so):
                code = (nnpasm_main if tool == "nnpasm" else nnpsim_main)(argv)
        except BaseException as exc:
            code = "exception %s: %s" % (type(exc).__name__, exc)
        out.append([path, tool, code, err.getvalue()])
print(json.dumps(out))
"""


def corrupt_files(tmp_path, count: int) -> list[str]:
    """Corrupt binaries (each rejected by the reader): truncations, flips, header and section damage."""
    rng = np.random.default_rng(2024)
    blobs = []
    for name in NAMES:
        blob = valid_binaries()[name]
        blobs += [blob[:int(rng.integers(0, len(blob)))], b"", b"\x7fELF", blob[:EHDR.size]]
        for field in ("magic", "class", "machine", "shoff", "shnum", "phnum"):
            offset, fmt = EHDR_FIELDS[field]
            blobs.append(patch(blob, offset, fmt, 0xFFFF if field != "class" else 2))
        sec = sections(blob)
        for s in (".text", ".symtab", ".nnp.meta", ".data"):
            blobs.append(patch(blob, sec[s][0] + 16, "<I", len(blob) + 100))   # offset past the end
            blobs.append(patch(blob, sec[s][0] + 20, "<I", 0xFFFFFF00))        # size past the end
        flipped = bytearray(blob)
        flipped[int(rng.integers(0, len(blob)))] ^= 0x10
        blobs.append(bytes(flipped))
    blobs = [b for b in blobs if _rejected(b)]
    picks = rng.choice(len(blobs), size=min(count, len(blobs)), replace=False)
    paths = []
    for i in sorted(picks):
        p = tmp_path / f"bad{i}.bin"
        p.write_bytes(blobs[i])
        paths.append(str(p))
    return paths


def _rejected(blob: bytes) -> bool:
    try:
        Program.from_bytes(blob)
    except BinaryError:
        return True
    return False


def test_clis_reject_corrupt_binaries(tmp_path):
    paths = corrupt_files(tmp_path, budget(40).max_examples)
    proc = run_python(BATCH, *paths, memory_bytes=4 << 30)
    assert proc.returncode == 0, f"batch died (status {proc.returncode}):\n{proc.stderr[-3000:]}"
    for path, tool, code, err in json.loads(proc.stdout):
        assert code == 1, f"{tool} on {path}: status {code}\n{err}"
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: "), f"{tool} on {path}:\n{err}"
        assert path in lines[0] or "ELF" in lines[0] or "section" in lines[0], lines[0]


def test_cli_entry_points_reject_a_corrupt_binary(tmp_path):
    bad = tmp_path / "bad.bin"
    bad.write_bytes(valid_binaries()["rich"][:300])
    for tool, argv in (("nnpasm.cli", ["--disassemble", str(bad)]), ("nnpsim.cli", ["run", str(bad)])):
        proc = run_python(f"import sys, runpy; sys.argv[0] = {tool!r}; runpy.run_module({tool!r}, run_name='__main__')",
                          *argv)
        assert_clean_exit(proc, tool)
        assert "truncated" in proc.stderr and str(bad) in proc.stderr, proc.stderr


def test_symbols_out_of_canonical_order_are_rejected():
    """Regression: a symbol value patched so that the file's symbol order is no longer the canonical
    one (text, data, abs by value, then name) was accepted, and the Program wrote different bytes."""
    blob = valid_binaries()["rich"]
    row = sections(blob)[".symtab"][1]
    mutant = patch(blob, row[4] + 2 * SYM.size + 4, "<I", 0)     # 'done' (40) moved to 0, before 'main'
    with pytest.raises(BinaryError, match="canonical order"):
        Program.from_bytes(mutant)


@pytest.mark.parametrize("dtype", [[], {}, ["int8"], {"a": 1}])
def test_unhashable_buffer_dtype_is_a_binary_error(dtype):
    """Regression: a buffer whose metadata dtype was a JSON list or object raised TypeError
    (unhashable type) instead of BinaryError."""
    prog = rich_program()
    blob = prog.to_bytes()
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    meta["buffers"][0]["dtype"] = dtype
    with pytest.raises(BinaryError, match="dtype"):
        Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))


@pytest.mark.parametrize("mutate", [
    lambda p: p.symbols.update(N=Symbol("N", 1 << 20000, "abs")),
    lambda p: p.config.update(big=1 << 20000),
    lambda p: p.config.update(big=1 << 70),
    lambda p: setattr(p.buffers["w"], "shape", (1 << 20000,)),
], ids=["abs-huge", "config-huge", "config-70-bit", "shape-huge"])
def test_integers_too_large_for_the_binary_are_binary_errors(mutate):
    """Regression: `.set X, X * X` repeated gave an absolute symbol of a billion bits, and writing
    it raised ValueError (int to str conversion) while formatting the BinaryError; a config value
    or buffer dimension too long for decimal text did the same inside json.dumps."""
    prog = rich_program()
    mutate(prog)
    with time_limit(10, "writing"), pytest.raises(BinaryError):
        prog.to_bytes()


def test_config_and_abs_values_past_64_bits_are_rejected_when_read():
    """Regression: the reader accepted config and abs integers the writer refuses (so a binary read
    back could not be written again)."""
    prog = rich_program()
    blob = prog.to_bytes()
    row = sections(blob)[".nnp.meta"][1]
    for key, name in (("config", "nu_count"), ("abs", "BIG")):
        meta = json.loads(blob[row[4]:row[4] + row[5]])
        meta[key][name] = (1 << 70) + (1 << 40) + 3 if key == "abs" else 1 << 70   # same low 32 bits for abs
        with pytest.raises(BinaryError, match="64 bits"):
            Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))


def test_text_symbols_between_instructions_are_rejected():
    """Regression: a text symbol moved to byte 1 (not an instruction address) was accepted; its
    disassembly declared `.global main` with no label to define it, and did not assemble."""
    blob = valid_binaries()["rich"]
    row = sections(blob)[".symtab"][1]
    with pytest.raises(BinaryError, match="instruction address"):
        Program.from_bytes(patch(blob, row[4] + SYM.size + 4, "<I", 1))
    prog = rich_program()
    prog.symbols["main"] = Symbol("main", 4, "text")
    with pytest.raises(BinaryError, match="instruction address"):
        prog.to_bytes()


def test_line_table_files_must_be_canonical():
    """Regression: a line table whose file list held an unused (or repeated) name was accepted, and
    the Program wrote different bytes (the writer lists each file once, in order of first use)."""
    prog = rich_program()
    blob = prog.to_bytes()
    row = sections(blob)[".nnp.meta"][1]
    for files in (["k.s", "inc/other.s", ""], ["inc/other.s", "k.s"], ["k.s", "inc/other.s", "k.s"]):
        meta = json.loads(blob[row[4]:row[4] + row[5]])
        index = {"k.s": files.index("k.s"), "inc/other.s": files.index("inc/other.s")}
        meta["lines"] = {"files": files, "table": [[index[f], n] for f, n in prog.lines]}
        with pytest.raises(BinaryError, match="order of first use"):
            Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))


def test_branch_outside_text_is_rejected():
    """Regression, bug E (found by test_bit_flips): a binary could hold a branch whose target leaves
    .text (a flipped offset bit, or jal to the end of the program), which the assembler refuses to
    write, so its disassembly did not assemble.  The format now forbids it: writer and reader say
    which instruction branches where."""
    isa = load_isa()
    words = [encode("jal", {"rd": 31, "off": 16}, isa), encode("halt", {}, isa)]
    with pytest.raises(BinaryError, match=r"instruction 0 \(byte 0x0\): jal branches to 0x10, outside .text"):
        Program(np.array(words, dtype=np.uint64)).to_bytes()
    blob = valid_binaries()["rich"]
    at = sections(blob)[".text"][1][4] + 4 * 8 + 4               # beq's offset field (bits 32..63)
    mutant = blob[:at] + struct.pack("<i", 2) + blob[at + 4:]     # beq to 0x30 = the end of .text
    with pytest.raises(BinaryError, match="instruction 4 .*beq branches to 0x30, outside .text"):
        Program.from_bytes(mutant)


def test_buffer_without_its_label_is_rejected():
    """Regression, bug F (found by test_bit_flips and test_symbol_fields): a buffer without the
    data symbol `.buffer` defines (a flipped name byte in .strtab, a moved symbol value, or a
    Program built in Python) could not be written in assembly, so its disassembly came back with a
    symbol more.  The format now requires the label; writer and reader name the buffer."""
    blob = valid_binaries()["scalar_loop.s"]
    row = sections(blob)[".strtab"][1]
    strtab = blob[row[4]:row[4] + row[5]]
    at = row[4] + strtab.index(b"result\0")
    mutant = blob[:at] + b"s" + blob[at + 1:]          # symbol 'result' renamed 'sesult'
    with pytest.raises(BinaryError, match="buffer result at 0x[0-9a-f]+ has no data symbol 'result'"):
        Program.from_bytes(mutant)
    prog = rich_program()
    prog.symbols["w"] = Symbol("w", 9216 + 4, "data")
    with pytest.raises(BinaryError, match="buffer w at 0x2400 has no data symbol 'w'"):
        prog.to_bytes()
    del prog.symbols["w"]
    with pytest.raises(BinaryError, match="buffer w"):
        prog.to_bytes()


def test_binary_without_line_table_reassembles():
    """Regression, bug F (found by test_corrupted_metadata, lines replaced by null): a binary without
    a line table disassembled to source whose assembly had one; `.nolines` now says so."""
    isa = load_isa()
    blob = Program(np.array([encode("nop", {}, isa), encode("halt", {}, isa)], dtype=np.uint64)).to_bytes()
    assert "    .nolines" in disassemble(blob).splitlines()
    assert assemble(disassemble(blob), "<disassembly>").to_bytes() == blob


def test_overlapping_buffers_are_rejected():
    """Regression, bug I (found by test_bit_flips in the long run: a flipped bit grew buffer A of
    examples/matmul_db.s to (16, 328) over B): the reader accepted overlapping buffers, which
    `.buffer` cannot write (a buffer's bytes end before the next one), so the disassembly did not
    assemble.  The format now forbids the overlap, naming both buffers."""
    blob = valid_binaries()["matmul_db.s"]
    prog = Program.from_bytes(blob)
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    a = next(b for b in meta["buffers"] if b["name"] == "A")
    a["shape"] = [16, 328]
    with pytest.raises(BinaryError, match=r"buffers A \[0x0, 0x1480\) and B \[0x800, .*overlap"):
        Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))
    prog.buffers["A"].shape = (16, 328)
    with pytest.raises(BinaryError, match="overlap"):
        prog.to_bytes()


def test_empty_buffer_beside_a_sized_one_round_trips():
    """Two buffers at one address, the empty one first (as `.buffer` must write them), whatever
    their names: the disassembler writes them in that order."""
    src = ".data\n.buffer zz, int8, (0, 4)\n.buffer aa, int8, (4,)\n.byte 1, 2, 3, 4\n"
    blob = assemble(src, "b.s").to_bytes()
    assert check(blob) is not None
    assert assemble(disassemble(blob), "<disassembly>").to_bytes() == blob


def test_line_numbers_past_32_bits_are_rejected():
    """Regression, bug J (found by test_corrupted_metadata in the long run: a line-table entry set
    to 2**64 + 1): the reader accepted line numbers the assembler's `.loc` cannot write, so the
    disassembly did not assemble.  Line numbers are now 32-bit in the format and in `.loc`, and a
    line counted past the limit from a `.loc` is a located error."""
    blob = valid_binaries()["rich"]
    prog = Program.from_bytes(blob)
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    for line in (2**32, 2**64 + 1):
        meta["lines"]["table"][3][1] = line
        with pytest.raises(BinaryError, match=r"lines.table\[3\] is not \[file index, line in \[0, 4294967295\]\]"):
            Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))
    prog.lines[2] = ("k.s", 2**32)
    with pytest.raises(BinaryError, match="line in"):
        prog.to_bytes()
    top = assemble('.loc "k.s", 4294967295\nnop\n', "t.s")
    assert top.lines == [("k.s", 2**32 - 1)] and Program.from_bytes(top.to_bytes()).lines == top.lines
    with pytest.raises(AsmError) as e:
        assemble('.loc "k.s", 4294967294\nnop\nnop\nhalt\n', "t.s")
    assert str(e.value).splitlines()[0] == ("t.s:4:1: error: line number 4294967296 (counted from .loc) is past "
                                            "the line table's limit 4294967295")
    with pytest.raises(AsmError, match=r"t.s:1:13: error: .loc line 18446744073709551615 is outside"):
        assemble('.loc "k.s", 0xFFFFFFFFFFFFFFFF\nnop\n', "t.s")


@pytest.mark.parametrize("path", [("isa", "version"), ("format_version",)])
def test_booleans_for_version_numbers_are_rejected(path):
    """Regression, bug K (found by test_corrupted_metadata in the long run: isa.version replaced
    by true): Python compares true == 1, so the reader accepted the file, and the Program wrote
    1 back: two files read as one program.  Versions are compared as JSON text now."""
    blob = valid_binaries()["scalar_loop.s"]
    prog = Program.from_bytes(blob)
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    where = meta
    for key in path[:-1]:
        where = where[key]
    where[path[-1]] = True
    with pytest.raises(BinaryError, match="version"):
        Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))


def test_buffers_out_of_canonical_order_are_rejected():
    """Regression, bug L (found reviewing bug K's class: values the writer normalises): the reader
    took the metadata's buffer list in any order, and the Program wrote it sorted (by address,
    then name): two files read as one program."""
    blob = valid_binaries()["matmul_db.s"]
    prog = Program.from_bytes(blob)
    row = sections(blob)[".nnp.meta"][1]
    meta = json.loads(blob[row[4]:row[4] + row[5]])
    meta["buffers"] = meta["buffers"][::-1]
    with pytest.raises(BinaryError, match="buffers are not in canonical order"):
        Program.from_bytes(rebuild(prog, json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()))
