"""nnpasm diagnostics: every error class with its message, line and column."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnpasm import AsmError, assemble
from nnpasm import assembler as asm_module
from nnpasm import macros as macros_module
from nnpasm.cli import main


def errors(src: str, filename: str = "t.s", **kw):
    with pytest.raises(AsmError) as info:
        assemble(src, filename, **kw)
    return info.value.diagnostics


def one(src: str, **kw):
    diags = errors(src, **kw)
    assert len(diags) == 1, [d.format() for d in diags]
    d = diags[0]
    return d.message, d.line, d.column


@pytest.mark.parametrize("src, message, line, col", [
    # syntax: what was expected
    ("nop\nli r1, 1 +", "expected", 2, 11),
    ("li r1, @", "unexpected character '@'", 1, 8),
    ("li r1 5", "unexpected a number '5'", 1, 7),
    ("add r1 r2, r3", "expected ','", 1, 8),
    # names
    ("  addx r1, r2, r3", "unknown mnemonic 'addx'; did you mean 'add'?", 1, 3),
    (".dtaa", "unknown directive '.dtaa'; did you mean '.data'?", 1, 1),
    # operand kinds and counts
    ("addi r1, r2", "addi takes 3 operands (rd, rs1, imm), got 2", 1, 10),
    ("add r1, r2, r3, r4", "add takes 3 operands", 1, 17),
    ("add r1, r2, 5", "rs2 must be a register r0..r31, not 5", 1, 13),
    ("add r1, r2, r32", "rs2 must be a register r0..r31, not 'r32'", 1, 13),
    ("addi r1, r2, r3", "imm must be an immediate, not register 'r3'", 1, 14),
    ("setpi dma.sise0, 4", "'dma.sise0' is not a param", 1, 7),
    ("setpi dma.sise0, 4", "did you mean 'dma.size0'?", 1, 7),
    ("dma ch9, ddr[r1], dm[r2]", "'ch9' is not a dma_chan", 1, 5),
    ("dma ch1, r1, dm[r2]", "operand 2 must be a memory operand dspace[rd]", 1, 10),
    ("dma ch1, ddr[r1], dm[x1]", "rs must be a register", 1, 22),
    ("dma ch1, ddr[r1], dm[r2], wiat=s1", "no option 'wiat='", 1, 27),
    ("dma ch1, ddr[r1], dm[r2], wait=s1, wait=s2", "'wait=' given twice", 1, 36),
    ("dma ch1, ddr[r1], dm[r2], wait=s63", "wait must be a semaphore s0..s62", 1, 32),
    ("sem.wait s1, signal=s2", "no option 'signal='", 1, 14),
    ("sem.signal s1, signal2=s2", "no option 'signal2=' (allowed: none)", 1, 16),
    ("dma ch1, ddr[r1], dm[r2], signal2=s1, signal2=s2", "'signal2=' given twice", 1, 39),
    ("nu.conv nu0, r1, r2, r3, signal2=r4", "signal2 must be a semaphore s0..s62", 1, 34),
    ("dma ch1, ddr[r1], dm[r2], signal3=s1", "allowed: wait=, signal=, signal2=", 1, 27),
    ("dma ch1, wait=s1, ddr[r1], dm[r2]", "come after the operands", 1, 10),
    # ranges
    ("slli r1, r2, 32", "immediate 32 out of range [0, 31]", 1, 14),
    ("addi r1, r2, 1 << 31", "out of range [-2147483648, 2147483647]", 1, 14),
    ("li r1, -2147483649", "out of range [-2147483648, 4294967295]", 1, 8),
    ("la r1, -4", "address -4 out of range [0, 4294967295]", 1, 8),
    ("barrier 0x10000", "out of range [0, 65535]", 1, 9),
    (".data\n.byte 256", ".byte value 256 out of range [-128, 255]", 2, 7),
    (".data\n.half -32769", "out of range [-32768, 65535]", 2, 7),
    (".data\n.space 4, 300", ".space fill 300 out of range [-128, 255]", 2, 11),
    # symbols
    ("li r1, nothing", "undefined symbol 'nothing'", 1, 8),
    ("li r1, 2 * (x + nothing)", "undefined symbol 'x'", 1, 13),
    ("a: nop\na: nop", "duplicate symbol 'a' (first defined at t.s:1)", 2, 1),
    (".equ A, 1\n.equ A, 2", "duplicate symbol 'A'", 2, 6),
    (".equ A, 1\n.set A, 2", "duplicate symbol 'A'", 2, 6),
    (".equ Q_ALL, 1", "duplicate symbol 'Q_ALL' (first defined at the ISA)", 1, 6),
    (".equ A, later\nlater: nop", "undefined symbol 'later' (.equ needs its value now)", 1, 9),
    (".global ghost", ".global names undefined symbol 'ghost'", 1, 9),
    ("li r1, 1 / (2 - 2)", "division by zero", 1, 8),
    ("li r1, 1 << 64", "shift count 64 out of range [0, 63]", 1, 8),
    # alignment and placement
    (".data\n.byte 1\n.half 2", ".half at 0x1 is not aligned to 2 bytes", 3, 1),
    (".data\n.space 2\n.word 2", ".word at 0x2 is not aligned to 4 bytes", 3, 1),
    (".data\n.space 4\n.dword 2", ".dword at 0x4 is not aligned to 8 bytes", 3, 1),
    ("beq r0, r0, 12\nnop", "branch target 0xc is not a multiple of 8", 1, 13),
    ("beq r0, r0, 16\nnop", "branch target 0x10 is outside .text [0, 0x10)", 1, 13),
    ("jal r1, buf\n.data\nbuf: .byte 1", "branch target 'buf' is a .data symbol", 1, 9),
    (".data\n.byte 1\n.buffer b, int8, (4,)", ".buffer b at 0x1 is not 64-byte aligned", 3, 1),
    (".data\n.buffer b, int32, (4,)\n.space 8", "buffer 'b' needs 16 bytes", 2, 9),
    (".data\n.buffer b, int8, (4,), \"split(5,2)\"\n.space 4", ".buffer layout:", 2, 24),
    (".data\n.buffer b, float, (4,)", "dtype 'float' is not one of int8, int32", 2, 12),
    (".data\n.org 8\n.org 4", ".org 0x4 would move backwards from 0x8", 3, 6),
    (".data\nnop", "instruction 'nop' outside .text", 2, 1),
    (".byte 1", ".byte is only allowed in .data", 1, 1),
    (".align 3", "not a power of two", 1, 8),
    (".data\n.space 1 << 28\n.byte 1", "beyond the DDR size", 3, 7),
    # blocks and macros
    (".rept 2\nnop", "missing .endr for .rept", 1, 1),
    (".macro m\nnop", "missing .endm for macro 'm'", 1, 1),
    (".endm", ".endm without .macro", 1, 1),
    (".macro add a\n.endm", "macro name 'add' is already an instruction", 1, 8),
    (".macro m a, b\n.endm\nm 1", "macro 'm' takes 2 arguments, got 1", 3, 1),
    (".macro m a\n  li r1, \\b\n.endm\nm 1", "unknown macro parameter '\\b'", 2, 10),
    (".macro m\n  m\n.endm\nm", "macro expansion depth exceeds 64", 2, 3),
    (".rept 1000001\n.endr", ".rept count 1000001 out of range [0, 1000000]", 1, 7),
])
def test_error_message_line_and_column(src, message, line, col):
    got_message, got_line, got_col = one(src)
    assert message in got_message
    assert (got_line, got_col) == (line, col), got_message


def test_define_cannot_replace_an_isa_constant():
    (d,) = errors("barrier Q_ALL", defines={"Q_ALL": 1})
    assert (d.file, d.message) == ("<command line>", "-D Q_ALL: redefines the ISA constant 'Q_ALL'")


def test_format_is_file_line_col_source_and_caret():
    diags = errors("nop\n\tli r1, zz\n", "k.s")
    assert str(AsmError(diags)) == "k.s:2:9: error: undefined symbol 'zz'\n\tli r1, zz\n\t       ^"


def test_every_error_of_a_run_is_reported_in_source_order():
    diags = errors("bogus\nli r1, 1 +\nbeq r0, r0, nowhere\nslli r1, r1, 99\n.data\n.byte 999\n")
    assert [d.line for d in diags] == [1, 2, 3, 4, 6]


def test_error_inside_macro_points_at_the_body_line_with_a_note():
    src = ".macro m x\n    nop\n    addi r1, r1, \\x\n.endm\n\nm 1\nm 1 << 40\n"
    (d,) = errors(src, "k.s")
    assert (d.file, d.line, d.column) == ("k.s", 3, 18)
    assert d.source == "    addi r1, r1, \\x"
    assert d.notes == ("after substitution: addi r1, r1, 1 << 40", "in expansion of macro 'm' at k.s:7")


def test_error_after_a_long_argument_points_inside_the_body_line():
    """Found by the fuzzer: a column in the substituted text past the end of the body line."""
    src = ".macro m x, y\n    li r1, \\x + \\y + zz\n.endm\nm 123456789, 987654321\n"
    (d,) = errors(src, "k.s")
    assert (d.line, d.message) == (2, "undefined symbol 'zz'")
    assert d.source == "    li r1, \\x + \\y + zz" and d.column == d.source.index("zz") + 1


def test_error_inside_an_include_points_at_the_included_file(tmp_path):
    (tmp_path / "inc.s").write_text("nop\nli r1, missing\n")
    main_s = tmp_path / "main.s"
    main_s.write_text("nop\n.include \"inc.s\"\n")
    (d,) = errors(main_s.read_text(), str(main_s))
    assert (d.file, d.line, d.column) == (str(tmp_path / "inc.s"), 2, 8)


def test_include_cycle_and_missing_files(tmp_path):
    (tmp_path / "a.s").write_text("nop\n.include \"b.s\"\n")
    (tmp_path / "b.s").write_text(".include \"a.s\"\n")
    (d,) = errors((tmp_path / "a.s").read_text(), str(tmp_path / "a.s"))
    assert d.message.startswith("include cycle: ") and d.message.endswith("a.s")
    assert (d.file, d.line, d.column) == (str(tmp_path / "b.s"), 1, 10)
    msg, line, col = one("nop\n.include \"nope.s\"")
    assert "file 'nope.s' not found" in msg and (line, col) == (2, 10)
    msg, line, col = one(".data\n.incbin \"nope.bin\"")
    assert ".incbin: file 'nope.bin' not found" in msg and (line, col) == (2, 9)


def test_include_depth_limit(tmp_path):
    for i in range(40):
        (tmp_path / f"f{i}.s").write_text(f".include \"f{i + 1}.s\"\n")
    (tmp_path / "f40.s").write_text("nop\n")
    (d,) = errors((tmp_path / "f0.s").read_text(), str(tmp_path / "f0.s"))
    assert d.message == "include depth exceeds 32"
    assert (d.file, d.line) == (str(tmp_path / "f32.s"), 1)


def test_expanded_line_limit(monkeypatch):
    monkeypatch.setattr(macros_module, "MAX_EXPANDED_LINES", 1000)
    msg, line, col = one(".rept 100\n.rept 100\nnop\n.endr\n.endr\n")
    assert msg == "more than 1000 lines after expansion" and line == 3


def test_instruction_limit(monkeypatch):
    monkeypatch.setattr(asm_module, "MAX_INSTRUCTIONS", 10)
    msg, line, col = one(".rept 20\nnop\n.endr\n")
    assert msg == "more than 10 instructions in .text" and (line, col) == (2, 1)


def test_cli_reports_errors_on_stderr_with_status_1(tmp_path, capsys):
    src = tmp_path / "bad.s"
    src.write_text("li r1, 1 +\nhalt\n")
    assert main([str(src)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{src}:1:11: error: syntax error") and "Traceback" not in err
    assert not (tmp_path / "bad.bin").exists()


@pytest.mark.parametrize("argv_tail, expect", [
    (["missing.s"], "source missing.s: cannot read: no such file"),
    (["--disassemble", "garbage.bin"], "garbage.bin"),
    (["-D", "X=1+", "ok.s"], "-D X=1+"),
    (["--bogus"], "unrecognized arguments"),
])
def test_cli_user_errors_exit_1_without_traceback(tmp_path, capsys, monkeypatch, argv_tail, expect):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "garbage.bin").write_bytes(b"\x7fELF not really")
    (tmp_path / "ok.s").write_text("halt\n")
    assert main(argv_tail if argv_tail[0] != "--bogus" else ["ok.s", "--bogus"]) == 1
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


WORDS = ["li", "addi", "dma", "nu.conv", "vu.mov", "beq", "loop", "setpi", "dma.size0", "ch1", "ibuf0",
         "r1", "r40", "s3", "wait", "signal", "=", "[", "]", "(", ")", ",", ":", "?", "+", "-", "*",
         "/", "%", "<<", ">>", "&&", "||", "!", "~", "0x1f", "7", "-5", "'a'", '"s"', ".data",
         ".text", ".byte", ".word", ".space", ".align", ".org", ".equ", ".set", ".rept", ".endr",
         ".macro", ".endm", ".buffer", "int8", ".include", ".loc", ".target", ".global", "x",
         ".l", "\\x", "\\@", ";", "#", " ", "\t", "\u00e9", "\u00a0"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(WORDS), max_size=8).map("".join), max_size=8).map("\n".join))
def test_random_input_gives_a_program_or_diagnostics_never_a_crash(src):
    try:
        assemble(src)
    except AsmError as exc:
        assert exc.diagnostics and all(d.line >= 1 and d.column >= 1 for d in exc.diagnostics)


@pytest.mark.parametrize("expr, words", [
    ("9" * 5000, "exceeds 64 bits"),
    ("0x" + "f" * 17, "exceeds 64 bits"),
    ("(1 << 63) * 4", "value out of the 64-bit range"),
    ("-(1 << 63) * 4", "value out of the 64-bit range"),
])
def test_values_beyond_64_bits_are_errors(expr, words):
    (d,) = errors(f"li r1, {expr}\n")
    assert words in d.message and (d.line, d.column) == (1, 8)


def test_squaring_in_a_loop_stops_at_64_bits():
    diags = errors(".set X, 3\n.rept 6\n.set X, X * X\n.endr\n")
    assert diags and all("64-bit range" in d.message and d.line == 3 for d in diags)


def test_carriage_returns_count_lines_the_same_in_files_and_strings(tmp_path):
    """Found by the fuzzer: read_text turned lone \\r into line breaks in included files only."""
    (tmp_path / "inner.s").write_bytes(b"\radd \r\nnop\nli r1, zz\n")
    (tmp_path / "main.s").write_text('.include "inner.s"\n')
    d_file = errors('.include "inner.s"\n', str(tmp_path / "main.s"))
    d_text = errors("\radd \r\nnop\nli r1, zz\n", str(tmp_path / "inner.s"))
    assert [(d.line, d.column, d.message) for d in d_file] == [(d.line, d.column, d.message) for d in d_text]
    assert [d.line for d in d_text] == [1, 3]
