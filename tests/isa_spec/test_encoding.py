"""The ISA data: loader validation, encode/decode round trips, illegal words."""
import copy
import tomllib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from isa_spec import docgen
from isa_spec import NONE, DecodeError, EncodeError, IsaError, decode, decode_program, encode, load_isa
from isa_spec.model import SPEC_PATH, parse_isa
from tests.helpers.machine import field_values

ISA = load_isa()
MNEMONICS = [i.mnemonic for i in ISA.instructions]


@st.composite
def instructions(draw, mnemonic=None):
    instr = ISA.by_mnemonic[mnemonic or draw(st.sampled_from(MNEMONICS))]
    return instr, {name: draw(field_values(f)) for name, f in instr.fields.items()}


def canonical(fld, value):
    """The value decode returns for an encoded value (imm32 comes back unsigned)."""
    if fld.kind.cls == "imm32" and value is not None:
        return value & 0xFFFFFFFF
    return value


@pytest.mark.parametrize("mnemonic", MNEMONICS)
@settings(max_examples=25, deadline=None)
@given(data=st.data())
def test_encode_decode_every_mnemonic(mnemonic, data):
    instr, values = data.draw(instructions(mnemonic))
    word = encode(instr, values)
    assert 0 <= word < 2**64
    assert word & ISA.opcode_mask == instr.opcode << ISA.opcode_lsb
    got_instr, got = decode(word)
    assert got_instr is instr
    assert got == {n: canonical(instr.fields[n], v) for n, v in values.items()}
    assert encode(instr, got) == word


@settings(max_examples=60, deadline=None)
@given(st.lists(instructions(), min_size=1, max_size=40))
def test_decode_program_agrees_with_decode(program):
    words = np.array([encode(i, v) for i, v in program], dtype=np.uint64)
    table = decode_program(words)
    assert table.shape == (len(words), 1 + len(ISA.slots))
    for row, w in zip(table, words):
        instr, values = decode(int(w))
        assert ISA.instructions[row[0]] is instr
        for j, slot in enumerate(ISA.slots):
            expect = values.get(slot, 0)
            assert row[1 + j] == (NONE if expect is None else expect)


def test_reserved_bits_are_illegal():
    checked = 0
    for instr in ISA.instructions:
        used = ISA.opcode_mask
        for f in instr.fields.values():
            used |= f.mask
        word = encode(instr, {n: f.value_range()[0] if f.kind.cls != "enum" else min(f.kind.names)
                              for n, f in instr.fields.items()})
        for bit in range(64):
            if not used >> bit & 1:
                with pytest.raises(DecodeError, match="reserved bits"):
                    decode(word | 1 << bit)
                with pytest.raises(DecodeError, match="instruction 1"):
                    decode_program(np.array([word, word | 1 << bit], dtype=np.uint64))
                checked += 1
    assert checked > 1000


def test_every_command_has_a_second_signal_in_bits_59_to_54_that_old_words_leave_empty():
    # signal2 sits in bits a command word never used, stored as N + 1: a word without it (every
    # program assembled before the field existed) decodes with no second signal, as it ran then
    commands = [i for i in ISA.instructions if i.is_command]
    assert commands and all(i.fields["signal2"].mask == 0x3F << 54 and "signal2" in i.sync for i in commands)
    assert not any("signal2" in i.fields for i in ISA.instructions if not i.is_command)
    for instr in commands:
        base = {n: f.value_range()[0] if f.kind.cls != "enum" else min(f.kind.names) for n, f in instr.fields.items()}
        old = encode(instr, {**base, "signal": 5, "signal2": None})
        assert old >> 54 == 0 and decode(old)[1]["signal2"] is None
        word = encode(instr, {**base, "signal": 5, "signal2": 62})
        assert word == old | 63 << 54 and decode(word)[1]["signal2"] == 62
        with pytest.raises(DecodeError, match="reserved bits"):
            decode(word | 1 << 60)          # bits 63:60 stay reserved
    with pytest.raises(EncodeError, match="semaphore 63 out of range"):
        encode("dma", {"ch": 0, "rd": 1, "rs": 2, "dspace": 0, "sspace": 0, "signal2": 63})


def test_unknown_opcodes_and_bad_fields_are_illegal():
    for op in set(range(256)) - set(ISA.by_opcode):
        with pytest.raises(DecodeError, match="illegal opcode"):
            decode(op)
    with pytest.raises(DecodeError, match="illegal opcode"):
        decode_program(np.array([1, 0xFF], dtype=np.uint64))
    dma = ISA.by_mnemonic["dma"]
    with pytest.raises(DecodeError, match="not a space"):
        decode(encode(dma, {"ch": 0, "rd": 1, "rs": 2, "dspace": 0, "sspace": 0}) | 2 << dma.fields["dspace"].lsb)
    sem = ISA.by_mnemonic["sem.wait"]
    with pytest.raises(DecodeError, match="out of range"):
        decode(sem.opcode | 63 << sem.fields["sem"].lsb)
    with pytest.raises(DecodeError):
        decode(1 << 64)


def test_encode_rejects_out_of_range():
    with pytest.raises(EncodeError, match="out of range"):
        encode("addi", {"rd": 32, "rs1": 0, "imm": 0})
    with pytest.raises(EncodeError, match="multiple of 8"):
        encode("beq", {"rs1": 0, "rs2": 0, "off": 4})
    with pytest.raises(EncodeError, match="no field"):
        encode("halt", {"rd": 1})


def raw():
    with open(SPEC_PATH, "rb") as fh:
        return tomllib.load(fh)


def edited(edit):
    data = copy.deepcopy(raw())
    edit(data)
    return data


def _instr(data, mnemonic):
    return next(i for i in data["instr"] if i["mnemonic"] == mnemonic)


BAD = {
    "overlapping fields": (lambda d: d["formats"]["R"]["fields"]["rs2"].update(lsb=16), "overlaps"),
    "field over the opcode": (lambda d: d["formats"]["R"]["fields"]["rd"].update(lsb=4), "overlaps"),
    "field past bit 63": (lambda d: d["formats"]["I"]["fields"]["imm"].update(lsb=33), "do not fit the word"),
    "duplicate opcode": (lambda d: _instr(d, "sub").update(opcode=0x02), "already used by add"),
    "duplicate mnemonic": (lambda d: _instr(d, "sub").update(mnemonic="add"), "duplicate mnemonic"),
    "unknown kind in a field": (lambda d: d["formats"]["R"]["fields"]["rd"].update(kind="wibble"), "unknown kind"),
    "unknown kind class": (lambda d: d["kinds"]["reg"].update({"class": "float"}), "unknown class"),
    "unknown format": (lambda d: _instr(d, "add").update(format="Q"), "unknown format"),
    "unknown unit": (lambda d: _instr(d, "add").update(unit="GPU"), "unknown unit"),
    "operand not a field": (lambda d: _instr(d, "add").update(operands=["rd", "rs1", "rs9"]), "not a field"),
    "field not an operand": (lambda d: _instr(d, "add").update(operands=["rd", "rs1"]), "neither an operand"),
    "opcode too wide": (lambda d: _instr(d, "add").update(opcode=0x100), "does not fit"),
    "enum too wide": (lambda d: d["kinds"]["space"]["values"].update(huge=64), "does not fit"),
    "registers do not fit": (lambda d: d["kinds"]["reg"].update(count=33), "do not fit"),
    "shared param number": (lambda d: d["kinds"]["param"]["values"].update({"vu.extra": 0}), "share a number"),
    "default of no param": (lambda d: d["param_defaults"].update({"nu.nope": 1}), "not a parameter"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_loader_rejects_bad_isa(name):
    edit, message = BAD[name]
    with pytest.raises(IsaError, match=message):
        parse_isa(edited(edit))


def test_loader_accepts_the_real_isa():
    isa = parse_isa(raw())
    assert [i.mnemonic for i in isa.instructions] == MNEMONICS
    assert isa.elf_machine == ISA.elf_machine


# --- docs/isa.md ---------------------------------------------------------------------------


def test_committed_isa_doc_is_current():
    assert docgen.DOC_PATH.read_text() == docgen.render(), "run `python -m isa_spec.docgen`"


def test_isa_doc_lists_everything():
    text = docgen.render()
    for i in ISA.instructions:
        assert f"| `{i.mnemonic}` | {i.opcode:#04x} | {i.unit} | `{docgen.operand_syntax(i)}` |" in text
    assert "`dma ch, dspace[rd], sspace[rs] [, wait=sN] [, signal=sN] [, signal2=sN]`" in text
    assert "| [59:54] | `signal2` | `sem_opt` | s0 .. s62 |" in text
    for name, number in ISA.params.items():
        assert f"| `{name}` | {number} | {ISA.param_defaults.get(name, 0)} |" in text
    for name, value in ISA.constants.items():
        assert f"| `{name}` | {value:#06x} |" in text
    for fmt in ISA.formats:
        assert f"### {fmt}\n" in text
    assert "| [63:32] | `imm` | `simm` | -2147483648 .. 2147483647 |" in text
    assert "rd = rs1 \\| rs2" in text          # a '|' in a summary must not split the table cell


def test_docgen_check_reports_stale_file(tmp_path, capsys):
    out = tmp_path / "isa.md"
    assert docgen.main(["--check", "--output", str(out)]) == 1
    assert "is stale" in capsys.readouterr().err
    assert docgen.main(["--output", str(out)]) == 0
    assert docgen.main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text() + "edited\n")
    assert docgen.main(["--check", "--output", str(out)]) == 1
