"""The disassembler: listings that read back to the same program, and bad binaries refused."""
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa_spec import encode, load_isa
from isa_spec.program import BinaryError, Buffer, Program, Symbol
from nnpasm import assemble
from nnpasm.disasm import disassemble, format_instruction
from tests.helpers.machine import field_values

ISA = load_isa()
MNEMONICS = [i.mnemonic for i in ISA.instructions]


def near_branch(pc: int, n: int):
    """Branch offsets from byte address pc that land inside the program of n words (as a binary requires)."""
    return st.integers(-pc // 8, n - 1 - pc // 8).map(lambda d: 8 * d)


@st.composite
def instruction_lists(draw, min_size=1, max_size=30, mnemonics=None):
    n = draw(st.integers(min_size, max_size))
    out = []
    for pc in range(n):
        instr = ISA.by_mnemonic[mnemonics[pc % len(mnemonics)] if mnemonics else draw(st.sampled_from(MNEMONICS))]
        values = {}
        for name, f in instr.fields.items():
            values[name] = draw(near_branch(8 * pc, n) if f.kind.cls == "pcrel" else field_values(f))
        out.append((instr, values))
    return out


# --- an independent reader of the listing, for structural checks ---------------------------

def _operand_value(kind, text, labels):
    if kind.cls in ("reg", "sem", "sem_opt"):
        assert re.fullmatch(rf"{kind.prefix}\d+", text), text
        return int(text[len(kind.prefix):])
    if kind.cls == "enum":
        return kind.values[text]
    if text in labels:
        return labels[text]
    return int(text, 0)


def read_listing(text):
    """Instructions (mnemonic, [operand texts]), labels, data bytes, buffers, line table, targets, equs.

    `.loc "f", L` on line D gives an instruction on line X the location (f, L + X - D - 1).
    """
    text_labels, data_labels, buffers, lines, targets, equs, glob = {}, {}, {}, [], {}, {}, []
    instrs, data, section, org, loc = [], bytearray(), None, 0, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split(";")[0].strip()
        if not line:
            continue
        m = re.fullmatch(r"([A-Za-z_.][A-Za-z0-9_.$]*):", line)
        if m:
            if section == "text":
                text_labels[m.group(1)] = 8 * len(instrs)
            else:
                data_labels[m.group(1)] = org + len(data)
            continue
        word, _, rest = line.partition(" ")
        args = [a.strip() for a in re.split(r",(?![^(]*\))", rest)] if rest else []
        if word in (".text", ".data"):
            section = word[1:]
        elif word == ".org":
            org = int(args[0], 0)
        elif word == ".target":
            targets[args[0]] = args[1][1:-1] if args[1].startswith('"') else int(args[1], 0)
        elif word == ".global":
            glob.append(args[0])
        elif word == ".equ":
            equs[args[0]] = int(args[1], 0)
        elif word == ".loc":
            loc = (args[0][1:-1], int(args[1]), number)
        elif word == ".nolines":
            lines = None
        elif word == ".byte":
            data += bytes(int(a) for a in args)
        elif word == ".space":
            data += bytes(int(args[0]))
        elif word == ".buffer":
            shape = tuple(int(d) for d in args[2].strip("()").split(",") if d.strip())
            layout = args[3][1:-1] if len(args) > 3 else ""
            buffers[args[0]] = Buffer(args[0], org + len(data), args[1], shape, layout)
            data_labels[args[0]] = org + len(data)
        else:
            assert section == "text", line
            instrs.append((word, args))
            if lines is not None:
                lines.append(loc and (loc[0], loc[1] + number - loc[2] - 1))
    return dict(instrs=instrs, text_labels=text_labels, data_labels=data_labels, data=bytes(data), org=org,
                buffers=buffers, lines=lines, targets=targets, equs=equs, glob=glob)


def reencode(listing):
    """Encode the listing's instructions the way an assembler would (labels resolved)."""
    words = []
    labels = {**listing["data_labels"], **listing["text_labels"]}
    for pc, (mnemonic, args) in enumerate(listing["instrs"]):
        instr = ISA.by_mnemonic[mnemonic]
        positional = [a for a in args if "=" not in a]
        assert len(positional) == len(instr.operands), (mnemonic, args)
        values = {}
        for op, text in zip(instr.operands, positional):
            if op.is_mem:
                space, reg = re.fullmatch(r"(\w+)\[(\w+)\]", text).groups()
                values[op.fields[0]] = _operand_value(instr.fields[op.fields[0]].kind, space, labels)
                values[op.fields[1]] = _operand_value(instr.fields[op.fields[1]].kind, reg, labels)
            else:
                fld = instr.fields[op.fields[0]]
                v = _operand_value(fld.kind, text, labels)
                values[fld.name] = v - 8 * pc if fld.kind.cls == "pcrel" else v
        for kw in (a for a in args if "=" in a):
            name, text = kw.split("=")
            assert name in instr.optional
            values[name] = _operand_value(instr.fields[name].kind, text, labels)
        words.append(encode(instr, values))
    return np.array(words, dtype=np.uint64)


def program_of(instrs, **kw):
    return Program(np.array([encode(i, v) for i, v in instrs], dtype=np.uint64), **kw)


@pytest.mark.parametrize("mnemonic", MNEMONICS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_mnemonic_reads_back(mnemonic, data):
    instrs = data.draw(instruction_lists(2, 6, [mnemonic]))
    prog = program_of(instrs)
    listing = read_listing(disassemble(prog))
    assert [m for m, _ in listing["instrs"]] == [mnemonic] * len(instrs)
    np.testing.assert_array_equal(reencode(listing), prog.code)


def test_format_instruction_examples():
    dma = ISA.by_mnemonic["dma"]
    vals = {"ch": 1, "rd": 3, "rs": 4, "dspace": 8, "sspace": 0, "wait": 1, "signal": 2}
    assert format_instruction(dma, vals, 0, {}) == "dma ch1, ibuf[r3], ddr[r4], wait=s1, signal=s2"
    beq = ISA.by_mnemonic["beq"]
    assert format_instruction(beq, {"rs1": 1, "rs2": 0, "off": -16}, 24, {8: "top"}) == "beq r1, r0, top"
    assert format_instruction(beq, {"rs1": 1, "rs2": 0, "off": -16}, 24, {}) == "beq r1, r0, 8"
    setp = ISA.by_mnemonic["setp"]
    assert format_instruction(setp, {"param": 90, "rs1": 0, "imm": -128}, 0, {}) == "setp vu.lo, r0, -128"
    mov = ISA.by_mnemonic["vu.mov"]
    assert (format_instruction(mov, {"unit": 2, "rd": 1, "ra": 2, "ddt": 2, "sdt": 0, "wait": None, "signal": 9}, 0, {})
            == "vu.mov vu2, i32, r1, i8, r2, signal=s9")
    assert (format_instruction(dma, {**vals, "wait": None, "signal2": 0}, 0, {})
            == "dma ch1, ibuf[r3], ddr[r4], signal=s2, signal2=s0")


def test_listing_layout():
    code = [(ISA.by_mnemonic["li"], {"rd": 2, "imm": 3}),
            (ISA.by_mnemonic["la"], {"rd": 1, "imm": 0x2010}),
            (ISA.by_mnemonic["loop"], {"rd": 2, "off": -8}),
            (ISA.by_mnemonic["jal"], {"rd": 0, "off": 16}),
            (ISA.by_mnemonic["nop"], {}),
            (ISA.by_mnemonic["halt"], {})]
    data = bytes(16) + bytes(range(1, 20)) + bytes(100)
    prog = program_of(code, data=data, data_base=0x2000, data_size=400,
                      symbols={"entry": Symbol("entry", 0, "text"), "W": Symbol("W", 0x2010, "data"),
                               "END": Symbol("END", 0x2000 + 400, "data"), "K": Symbol("K", -7, "abs"),
                               "done": Symbol("done", 48, "text")},
                      buffers={"W": Buffer("W", 0x2010, "int8", (1, 19), "pad(1,24)")},
                      lines=[("a.s", 1), ("a.s", 2), ("a.s", 2), ("b.s", 9), ("b.s", 9), ("a.s", 5)],
                      config={"nu_rows": 32, "name": "demo"})
    text = disassemble(prog)
    listing = read_listing(text)
    assert listing["targets"] == {"nu_rows": 32, "name": "demo"}
    assert listing["equs"] == {"K": -7}
    assert sorted(listing["glob"]) == sorted(prog.symbols)
    assert listing["text_labels"]["entry"] == 0 and listing["text_labels"]["done"] == 48
    assert "la r1, W" in text and "loop r2, .L8" in text and "jal r0, .L28" in text
    assert listing["text_labels"][".L8"] == 8 and listing["text_labels"][".L28"] == 40
    assert listing["org"] == 0x2000 and listing["data"] == data.ljust(400, b"\0")
    assert listing["data_labels"]["END"] == 0x2000 + 400
    assert listing["buffers"] == prog.buffers
    assert listing["lines"] == prog.lines
    assert text.count(".loc") == 6
    np.testing.assert_array_equal(reencode(listing), prog.code)
    assert ".space 100" not in text and "    .space 365" in text      # trailing zeros in one run


@settings(max_examples=60, deadline=None)
@given(instruction_lists(1, 40), st.binary(max_size=300), st.integers(0, 3000))
def test_random_programs_read_back(instrs, data, extra):
    prog = program_of(instrs, data=data, data_base=64, data_size=len(data) + extra)
    listing = read_listing(disassemble(prog.to_bytes()))
    np.testing.assert_array_equal(reencode(listing), prog.code)
    assert listing["org"] == 64
    assert listing["data"] == data.ljust(len(data) + extra, b"\0")


def _small_binary() -> bytes:
    code = [(ISA.by_mnemonic["addi"], {"rd": 1, "rs1": 0, "imm": 4}),
            (ISA.by_mnemonic["bne"], {"rs1": 1, "rs2": 0, "off": -8}),
            (ISA.by_mnemonic["halt"], {})]
    return program_of(code, data=b"\1\2\3", data_size=8, symbols={"top": Symbol("top", 8, "text")},
                      lines=[("x.s", 1), ("x.s", 2), ("x.s", 3)]).to_bytes()


def test_truncated_binaries_raise_binary_error():
    blob = _small_binary()
    assert disassemble(blob)
    for n in range(len(blob)):
        with pytest.raises(BinaryError):
            disassemble(blob[:n])


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_bit_flips_raise_only_binary_error(data):
    blob = bytearray(_small_binary())
    for _ in range(data.draw(st.integers(1, 4))):
        bit = data.draw(st.integers(0, 8 * len(blob) - 1))
        blob[bit // 8] ^= 1 << bit % 8
    try:
        text = disassemble(bytes(blob))
    except BinaryError:
        return
    assert text.startswith("; NNP-1 disassembly")


def test_program_with_illegal_word_is_refused():
    prog = Program(np.array([0xFF], dtype=np.uint64))
    with pytest.raises(BinaryError, match="illegal opcode"):
        disassemble(prog)


def test_program_with_branch_outside_text_is_refused():
    jal, halt = ISA.by_mnemonic["jal"], ISA.by_mnemonic["halt"]
    prog = program_of([(jal, {"rd": 31, "off": 16}), (halt, {})])
    with pytest.raises(BinaryError, match=r"instruction 0 \(byte 0x0\): jal branches to 0x10, outside .text \[0, 0x10\)"):
        prog.to_bytes()
    good = program_of([(jal, {"rd": 31, "off": 8}), (halt, {})]).to_bytes()
    off = good.index(encode(jal, {"rd": 31, "off": 8}).to_bytes(8, "little"))
    bad = good[:off] + encode(jal, {"rd": 31, "off": -8}).to_bytes(8, "little") + good[off + 8:]
    with pytest.raises(BinaryError, match="branches to -0x8, outside .text"):
        Program.from_bytes(bad)


def test_stripped_binary_round_trips():
    prog = program_of([(ISA.by_mnemonic["nop"], {}), (ISA.by_mnemonic["halt"], {})])
    text = disassemble(prog)
    assert ".nolines" in text and ".loc" not in text
    again = assemble(text, "s.s")
    assert again.lines is None and again.to_bytes() == prog.to_bytes()
    assert assemble(".nolines\nnop\nhalt\n", "k.s").lines is None
    assert assemble("nop\nhalt\n", "k.s").lines == [("k.s", 1), ("k.s", 2)]


def test_invented_labels_respect_local_scopes():
    beq = ISA.by_mnemonic["beq"]
    nop = ISA.by_mnemonic["nop"]
    code = [(beq, {"rs1": 0, "rs2": 0, "off": 8}), (nop, {}), (nop, {}), (beq, {"rs1": 1, "rs2": 0, "off": -16})]
    prog = program_of(code, symbols={"a": Symbol("a", 0, "text"), "b": Symbol("b", 16, "text")})
    text = disassemble(prog)
    # .L8 is local to `a`; from inside `b` the same target is written as its address.
    assert "beq r0, r0, .L8" in text and "beq r1, r0, 8" in text


# --- round trip through the real assembler -----------------------------------------------

FILES = ["k.s", "lib/inc.s", 'odd "name"\\x.s', "tab\tname.s"]
LAYOUTS = {1: ["", "pad(0,8)", "split(0,4)"], 2: ["", "reorder(1,0)", "split(1,4) reorder(1,0,2)"],
           3: ["", "split(0,2) pad(3,6)", "reorder(2,0,1)"]}


@st.composite
def programs(draw, every_mnemonic=False):
    """Random valid programs of the kind the assembler produces (data from DDR address 0)."""
    if every_mnemonic:
        order = draw(st.permutations(MNEMONICS))
    else:
        order = draw(st.lists(st.sampled_from(MNEMONICS), min_size=1, max_size=24))
    n = len(order)
    instrs = []
    for pc in range(n):
        instr = ISA.by_mnemonic[order[pc]]
        values = {name: draw(st.integers(0, n - 1).map(lambda t, pc=pc: 8 * (t - pc)) if f.kind.cls == "pcrel"
                             else field_values(f)) for name, f in instr.fields.items()}
        instrs.append((instr, values))
    symbols, buffers, cursor = {}, {}, 0
    for k in range(draw(st.integers(0, 3))):
        addr = -(-(cursor + draw(st.integers(0, 100))) // 64) * 64
        shape = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)))
        buf = Buffer(f"buf_{k}", addr, draw(st.sampled_from(["int8", "int32"])), shape,
                     draw(st.sampled_from(LAYOUTS[len(shape)])))
        buffers[buf.name] = buf
        symbols[buf.name] = Symbol(buf.name, addr, "data")
        cursor = addr + buf.nbytes
    data = bytearray(draw(st.binary(min_size=0, max_size=max(cursor, 1) + 200)))
    for _ in range(draw(st.integers(0, 2))):          # long zero runs inside the data
        at = draw(st.integers(0, len(data)))
        data[at:at] = bytes(draw(st.integers(1, 5000)))
    size = max(cursor, len(data)) + draw(st.integers(0, 3000))
    for k in range(draw(st.integers(0, 4))):
        symbols[f"t_{k}"] = Symbol(f"t_{k}", 8 * draw(st.integers(0, n)), "text")
    for k in range(draw(st.integers(0, 4))):
        symbols[f"d_{k}"] = Symbol(f"d_{k}", draw(st.integers(0, size)), "data")
    for k in range(draw(st.integers(0, 3))):
        symbols[f"c_{k}"] = Symbol(f"c_{k}", draw(st.integers(-2**40, 2**40)), "abs")
    lines, line = [], draw(st.integers(0, 50))
    file = draw(st.sampled_from(FILES))
    for _ in range(n):
        step = draw(st.sampled_from(["next", "same", "jump", "file"]))
        if step == "file":
            file = draw(st.sampled_from(FILES))
        line = {"next": line + 1, "same": line}.get(step, draw(st.integers(0, 10_000)))
        lines.append((file, line))
    if draw(st.integers(0, 4)) == 0:
        lines = None                                   # a stripped binary
    config = draw(st.dictionaries(st.sampled_from(["nu_rows", "vu_count", "name", "dma_channels"]),
                                  st.integers(-2**40, 2**40) | st.text("ab \"\\;#\n", max_size=8),
                                  max_size=3))
    return Program(np.array([encode(i, v) for i, v in instrs], dtype=np.uint64), bytes(data), 0, size,
                   symbols, buffers, lines, config)


@settings(max_examples=150, deadline=None)
@given(programs())
def test_disassembly_reassembles_to_identical_bytes(prog):
    blob = prog.to_bytes()
    text = disassemble(blob)
    again = assemble(text, "disassembly.s").to_bytes()
    assert again == blob, text


@settings(max_examples=20, deadline=None)
@given(programs(every_mnemonic=True))
def test_every_mnemonic_reassembles(prog):
    blob = prog.to_bytes()
    assert assemble(disassemble(blob), "disassembly.s").to_bytes() == blob
