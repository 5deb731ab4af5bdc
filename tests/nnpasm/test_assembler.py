"""nnpasm: expressions, every instruction, directives, macros, includes, listing, CLI."""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from isa_spec import decode, load_isa
from isa_spec.program import Program
from nnpasm import AsmError, assemble
from nnpasm.assembler import assemble_text
from nnpasm.cli import main
from nnpasm.listing import format_listing
from nnpasm.parser import Keyword, Mem, ParseFailure, Shape, Str, _parse, _parse_split, lark_parser

ISA = load_isa()


# ---------------------------------------------------------------- expressions
# Reference semantics written independently of nnpasm.expr: C operators on
# unbounded integers, / and % truncating towards zero, shifts 0..63.
def ref_div(a: int, b: int) -> int:
    if b == 0:
        raise ZeroDivisionError
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def ref_mod(a: int, b: int) -> int:
    return a - b * ref_div(a, b)


class OutOfRange(Exception):
    """An intermediate value left the assembler's range [-2**64, 2**64]."""


def ref_bound(v: int) -> int:
    if not -2 ** 64 <= v <= 2 ** 64:
        raise OutOfRange
    return v


def ref_shift(a: int, b: int, left: bool) -> int:
    if not 0 <= b <= 63:
        raise OverflowError
    return a << b if left else a >> b


C_PREC = {"||": 1, "&&": 2, "|": 3, "^": 4, "&": 5, "==": 6, "!=": 6, "<": 7, "<=": 7, ">": 7,
          ">=": 7, "<<": 8, ">>": 8, "+": 9, "-": 9, "*": 10, "/": 10, "%": 10}
PY_BINARY = {"/": "ref_div({}, {})", "%": "ref_mod({}, {})", "<<": "ref_shift({}, {}, True)",
             ">>": "ref_shift({}, {}, False)", "&&": "int(bool({}) and bool({}))",
             "||": "int(bool({}) or bool({}))", "==": "int({} == {})", "!=": "int({} != {})",
             "<": "int({} < {})", "<=": "int({} <= {})", ">": "int({} > {})", ">=": "int({} >= {})"}


def exprs():
    leaf = st.one_of(st.integers(0, 300).map(lambda v: ("num", v)),
                     st.sampled_from([("sym", "SA"), ("sym", "SB")]))

    def extend(children):
        return st.one_of(
            st.tuples(st.sampled_from(sorted(C_PREC)), children, children),
            st.tuples(st.sampled_from(["neg", "~", "!"]), children),
            st.tuples(st.just("?"), children, children, children),
            st.tuples(st.just("paren"), children))
    return st.recursive(leaf, extend, max_leaves=10)


def prec(node) -> int:
    if node[0] in ("num", "sym", "paren"):
        return 12
    if node[0] in ("neg", "~", "!"):
        return 11
    if node[0] == "?":
        return 0
    return C_PREC[node[0]]


def c_text(node) -> str:
    """C source relying on C precedence: parentheses only where needed (or asked for)."""
    kind = node[0]
    if kind == "num":
        return str(node[1])
    if kind == "sym":
        return node[1]
    if kind == "paren":
        return f"({c_text(node[1])})"
    if kind in ("neg", "~", "!"):
        inner = c_text(node[1])
        inner = inner if prec(node[1]) >= 11 else f"({inner})"
        return f"{'-' if kind == 'neg' else kind} {inner}"
    if kind == "?":
        a, b, c = node[1:]
        left = c_text(a) if prec(a) > 0 else f"({c_text(a)})"
        right = c_text(c) if prec(c) > 0 else f"({c_text(c)})"
        return f"{left} ? {c_text(b)} : {right}"
    p = C_PREC[kind]
    left = c_text(node[1]) if prec(node[1]) >= p else f"({c_text(node[1])})"
    right = c_text(node[2]) if prec(node[2]) > p else f"({c_text(node[2])})"
    return f"{left} {kind} {right}"


def py_text(node) -> str:
    """The same expression as fully parenthesised Python with C semantics."""
    kind = node[0]
    if kind == "num":
        return str(node[1])
    if kind == "sym":
        return node[1]
    if kind == "paren":
        return py_text(node[1])
    if kind == "neg":
        return f"ref_bound(-{py_text(node[1])})"
    if kind == "~":
        return f"ref_bound(~{py_text(node[1])})"
    if kind == "!":
        return f"int(not {py_text(node[1])})"
    if kind == "?":
        return f"({py_text(node[2])} if {py_text(node[1])} else {py_text(node[3])})"
    a, b = py_text(node[1]), py_text(node[2])
    return "ref_bound(" + PY_BINARY.get(kind, "({} " + kind + " {})").format(a, b) + ")"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(exprs(), st.integers(-70, 70), st.integers(-70, 70))
def test_expressions_follow_c_precedence_and_semantics(tree, sa, sb):
    text = c_text(tree)
    try:
        want = eval(py_text(tree), {"ref_div": ref_div, "ref_mod": ref_mod, "ref_shift": ref_shift,
                                    "ref_bound": ref_bound, "SA": sa, "SB": sb})
    except ZeroDivisionError:
        with pytest.raises(AsmError, match="division by zero"):
            assemble(f".equ X, {text}", defines={"SA": sa, "SB": sb})
        return
    except OverflowError:
        with pytest.raises(AsmError, match="shift count"):
            assemble(f".equ X, {text}", defines={"SA": sa, "SB": sb})
        return
    except OutOfRange:
        with pytest.raises(AsmError, match="out of the 64-bit range"):
            assemble(f".equ X, {text}", defines={"SA": sa, "SB": sb})
        return
    prog = assemble(f".equ X, {text}", defines={"SA": sa, "SB": sb})
    assert prog.symbols["X"].value == want, text


@pytest.mark.parametrize("text, value", [
    ("-7 / 2", -3), ("-7 % 2", -1), ("7 / -2", -3), ("7 % -2", 1), ("-7 / -2", 3), ("-7 % -2", -1),
    ("1 + 2 * 3", 7), ("1 << 2 + 1", 8), ("6 & 3 == 3", 0), ("1 | 2 ^ 3", 1), ("!0 + ~0", 0),
    ("0 && 1 / 0", 0), ("1 || 1 / 0", 1), ("0 ? 1 / 0 : 5", 5), ("'a'", 97), ("'\\n'", 10),
    ("'\\\\'", 92), ("'\\''", 39), ("0x1F + 0b101", 36), ("-8 >> 1", -4), ("1 ? 2 : 0 ? 3 : 4", 2),
])
def test_expression_examples(text, value):
    assert assemble(f".equ X, {text}").symbols["X"].value == value


# ------------------------------------------------------ every instruction
def _operand_text(draw, fld) -> tuple[str, int]:
    k = fld.kind
    if k.cls in ("reg", "sem", "sem_opt"):
        v = draw(st.integers(0, k.count - 1))
        return f"{k.prefix}{v}", v
    if k.cls == "enum":
        name = draw(st.sampled_from(sorted(k.values)))
        return name, k.values[name]
    lo, hi = fld.value_range()
    v = draw(st.integers(lo, hi))
    text = draw(st.sampled_from([str(v), f"{v:#x}" if v >= 0 else f"-{-v:#x}", f"({v} + 1) - 1"]))
    # imm32 may be written signed or unsigned; it decodes as its 32 stored bits
    return text, v & 0xFFFFFFFF if k.cls == "imm32" else v


@st.composite
def instructions(draw):
    instr = draw(st.sampled_from(ISA.instructions))
    pc = 8 * draw(st.integers(0, 15))
    ops, want = [], {}
    for operand in instr.operands:
        if operand.is_mem:
            space, reg = (instr.fields[f] for f in operand.fields)
            s_text, s_val = _operand_text(draw, space)
            r_text, r_val = _operand_text(draw, reg)
            ops.append(f"{s_text}[{r_text}]")
            want[space.name], want[reg.name] = s_val, r_val
            continue
        fld = instr.fields[operand.fields[0]]
        if fld.kind.cls == "pcrel":
            target = 8 * draw(st.integers(0, 15))
            ops.append(f"L{target // 8}")
            want[fld.name] = target - pc
            continue
        text, value = _operand_text(draw, fld)
        ops.append(text)
        want[fld.name] = value
    for name in instr.optional:
        if draw(st.booleans()):
            text, value = _operand_text(draw, instr.fields[name])
            ops.append(f"{name}={text}")
            want[name] = value
        else:
            want[name] = None
    return instr, pc, f"{instr.mnemonic} {', '.join(ops)}".rstrip(), want


@settings(max_examples=400, deadline=None)
@given(instructions())
def test_every_instruction_round_trips_through_decode(case):
    instr, pc, text, want = case
    lines = [f"L{i}: nop" if 8 * i != pc else f"L{i}: {text}" for i in range(16)]
    prog = assemble("\n".join(lines))
    got_instr, values = decode(int(prog.code[pc // 8]))
    assert got_instr.mnemonic == instr.mnemonic
    assert values == want, text


def test_every_mnemonic_is_covered_by_the_strategy():
    assert {i.mnemonic for i in ISA.instructions} == set(ISA.by_mnemonic)
    assert len(ISA.instructions) > 40


def test_dma_example_encoding():
    prog = assemble("dma ch1, ibuf0[r3], ddr[r4], wait=s1, signal=s2")
    instr, v = decode(int(prog.code[0]))
    assert (instr.mnemonic, v["ch"], v["dspace"], v["rd"], v["sspace"], v["rs"], v["wait"], v["signal"]) == \
        ("dma", 1, 8, 3, 0, 4, 1, 2)
    assert v["signal2"] is None


def test_a_command_with_two_signals_assembles_and_disassembles_back():
    # signal2= is an option like signal=, in any order after the operands; the disassembler writes
    # it after signal=, and the text assembles to the same words
    src = ("dma ch1, ibuf0[r3], ddr[r4], signal2=s7, wait=s1, signal=s2\n"
           "nu.conv nu0, r1, r2, r3, signal2=s40\n"
           "vu.mov vu1, i32, r1, i8, r2, signal=s3, signal2=s3\nhalt\n")
    prog = assemble(src)
    got = [decode(int(w))[1] for w in prog.code[:3]]
    assert [(v["wait"], v["signal"], v["signal2"]) for v in got] == [(1, 2, 7), (None, None, 40), (None, 3, 3)]
    from nnpasm import disassemble
    text = disassemble(prog)
    assert "ddr[r4], wait=s1, signal=s2, signal2=s7" in text and "r3, signal2=s40" in text
    assert np.array_equal(assemble(text).code, prog.code)


# ------------------------------------------------------------- the grammar
def test_parser_is_lalr_contextual_strict_and_treeless():
    p = lark_parser()
    assert p.options.parser == "lalr" and p.options.lexer == "contextual"
    assert p.options.strict and p.options.transformer is not None
    assert lark_parser() is p


def _absolute(node, base: int):
    """A parsed operand as plain data, every name with its absolute column."""
    if isinstance(node, str):
        return (str(node), node.column + base)
    if isinstance(node, tuple):
        return tuple(_absolute(x, base) if not isinstance(x, str) or i else x for i, x in enumerate(node))
    if isinstance(node, (Mem, Keyword)):
        return (type(node).__name__, *(_absolute(getattr(node, f), base) for f in node.__slots__))
    if isinstance(node, Shape):
        return ("shape", *(_absolute(x, base) for x in node.items))
    if isinstance(node, Str):
        return ("str", node.value)
    return node


@settings(max_examples=300, deadline=None)
@given(instructions(), st.sampled_from(["", "lbl: ", "x.y :  "]), st.sampled_from([" ", "   ", "\t"]),
       st.sampled_from(["+ 1", "* (2 - A)", "", ""]))
def test_operand_cache_path_parses_like_the_whole_line_grammar(case, label, gap, tail):
    """The per-operand (cached) parse and the whole-line parse give the same statement."""
    text = label + case[2].replace(" ", gap, 1).replace(", ", "," + gap) + tail
    whole, split = _parse(text), _parse_split(text)
    if isinstance(whole, ParseFailure):
        assert split is None
        return
    if "(" not in text:
        assert split is not None
    else:
        assert split is None
        return
    assert (whole.label, whole.name, whole.cols, whole.spans, whole.spaced) == \
        (split.label, split.name, split.cols, split.spans, split.spaced)
    assert whole.name.column == split.name.column
    assert [_absolute(n, b) for n, b in zip(whole.operands, whole.bases)] == \
        [_absolute(n, b) for n, b in zip(split.operands, split.bases)]


def test_comments_blank_lines_and_case_of_spacing():
    a = assemble("; c1\n# c2\n\n  li r1 , 5 ; trailing\naddi r1,r1,1#x\n")
    b = assemble("li r1, 5\naddi r1, r1, 1")
    assert np.array_equal(a.code, b.code)


# ---------------------------------------------------------- symbols, labels
def test_labels_forward_backward_and_local_scopes():
    src = """
f1: li r1, 3
.loop: addi r1, r1, -1
    bne r1, r0, .loop
    beq r0, r0, f2
f2: li r2, 2
.loop: addi r2, r2, -1
    bne r2, r0, .loop
    halt
"""
    prog = assemble(src)
    offs = [decode(int(w))[1].get("off") for w in prog.code]
    assert offs[2] == -8 and offs[3] == 8 and offs[6] == -8
    assert prog.symbols["f1"].value == 0 and prog.symbols["f2"].value == 32
    assert all("loop" not in name for name in prog.symbols)


def test_equ_set_defines_and_isa_constants():
    prog = assemble(".equ A, 5\n.set B, A * 2\n.set B, B + 1\nli r1, B + C\nbarrier Q_DMA0 | Q_NU0",
                    defines={"C": 100})
    assert decode(int(prog.code[0]))[1]["imm"] == 111
    assert decode(int(prog.code[1]))[1]["mask"] == ISA.constants["Q_DMA0"] | ISA.constants["Q_NU0"]
    assert prog.symbols["A"] == prog.symbols["A"].__class__("A", 5, "abs")
    assert prog.symbols["B"].value == 11 and prog.symbols["C"].value == 100
    assert "Q_ALL" not in prog.symbols


def test_set_value_is_the_one_in_force_at_each_use():
    prog = assemble(".set V, 1\nli r1, V\n.set V, 2\nli r1, V")
    assert [decode(int(w))[1]["imm"] for w in prog.code] == [1, 2]


def test_la_takes_data_and_text_symbols():
    prog = assemble("la r1, buf + 4\nla r2, here\nhere: halt\n.data\n.space 64\nbuf: .byte 1")
    assert [decode(int(w))[1]["imm"] for w in prog.code[:2]] == [68, 16]


# ------------------------------------------------------------ data section
def test_data_directives_little_endian_and_sizes():
    src = """
.data
a: .byte 1, -1, 255
   .align 2
b: .half 0x1234, -2
   .align 8
c: .word 0xdeadbeef, -1
d: .dword 0x0102030405060708, -1
e: .space 3, 0x7f
   .space 5
"""
    prog = assemble(src)
    want = bytes([1, 255, 255, 0]) + bytes([0x34, 0x12, 0xFE, 0xFF]) + \
        bytes([0xEF, 0xBE, 0xAD, 0xDE, 255, 255, 255, 255]) + \
        bytes(range(8, 0, -1)) + bytes([255] * 8) + bytes([0x7F] * 3)
    assert bytes(prog.data[:len(want)]) == want
    assert prog.data_size == len(want) + 5
    assert [prog.symbols[n].value for n in "abcde"] == [0, 4, 8, 16, 32]


def test_org_buffer_incbin_target_global(tmp_path):
    (tmp_path / "blob.bin").write_bytes(bytes(range(10)))
    src = """
.target board, "edge-1"
.target nu_rows, 16 + 16
.global start, w
start: halt
.data
.org 128
.buffer w, int8, (2, 5)
.incbin "blob.bin"
.align 64
.buffer acc, int32, (3,), "pad(0,4)"
.space 16
"""
    path = tmp_path / "k.s"
    path.write_text(src)
    prog = assemble(src, str(path))
    assert prog.config == {"board": "edge-1", "nu_rows": 32}
    assert prog.buffers["w"].addr == 128 and prog.buffers["w"].shape == (2, 5)
    assert bytes(prog.data[128:138]) == bytes(range(10))
    assert prog.buffers["acc"].addr == 192 and prog.buffers["acc"].nbytes == 16
    assert prog.symbols["w"].section == "data" and prog.data_size == 208


def test_program_round_trips_through_binary_and_disassembly(tmp_path):
    src = ".equ N, 4\nmain: li r1, N\n.l: loop r1, .l\n dma ch2, vbuf1[r2], dm[r3], signal=s5\nhalt\n" \
          ".data\n.buffer t, int32, (2, 2)\n.word 1, 2, 3, 4\n"
    prog = assemble(src, "k.s")
    back = Program.from_bytes(prog.to_bytes())
    assert np.array_equal(back.code, prog.code) and back.lines == prog.lines
    from nnpasm import disassemble
    again = assemble(disassemble(prog), "d.s")
    assert np.array_equal(again.code, prog.code) and again.lines == prog.lines
    assert ddr_image(again) == ddr_image(prog) and again.data_size == prog.data_size


def ddr_image(prog: Program) -> bytes:
    return bytes(prog.data).ljust(prog.data_size, b"\0")


def test_loc_sets_recorded_lines():
    prog = assemble("nop\n.loc \"orig.c\", 40\nnop\n\nnop\n", "k.s")
    assert prog.lines == [("k.s", 1), ("orig.c", 40), ("orig.c", 42)]


# ---------------------------------------------------- macros, rept, include
def test_macros_with_arguments_nesting_and_unique_labels():
    src = """
.macro addn rd, n
    addi \\rd, \\rd, \\n
.endm
.macro twice rd, n
    addn \\rd, \\n
    addn \\rd, (\\n) * 2
.endm
.macro spin r
.w\\@: loop \\r, .w\\@
.endm
main:
    twice r3, 1 + 1
    spin r4
    spin r5
    .rept 3
    nop
    .endr
"""
    prog = assemble(src)
    vals = [decode(int(w)) for w in prog.code]
    assert [v[1].get("imm") for v in vals[:2]] == [2, 4]
    assert [v[0].mnemonic for v in vals] == ["addi", "addi", "loop", "loop", "nop", "nop", "nop"]
    assert vals[2][1]["off"] == 0 and vals[3][1]["off"] == 0


def test_nested_rept_and_set_counter():
    prog = assemble(".data\n.set I, 0\n.rept 2\n.rept 3\n.byte I\n.set I, I + 1\n.endr\n.endr\n")
    assert bytes(prog.data) == bytes(range(6))


def test_include_relative_then_include_dirs(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "lib").mkdir()
    (tmp_path / "sub" / "a.inc").write_text(".equ A, 7\n.include \"b.inc\"\n")
    (tmp_path / "lib" / "b.inc").write_text("li r1, A\n")
    main_s = tmp_path / "main.s"
    main_s.write_text(".include \"sub/a.inc\"\nhalt\n")
    prog = assemble(main_s.read_text(), str(main_s), include_dirs=[str(tmp_path / "lib")])
    assert decode(int(prog.code[0]))[1]["imm"] == 7
    assert prog.lines[0] == (str(tmp_path / "lib" / "b.inc"), 1)


# ------------------------------------------------------------------ listing
def test_listing_shows_address_encoding_and_source():
    src = "start: li r1, 5 ; go\n.data\n.byte 1, 2, 3, 4, 5, 6, 7, 8, 9\n"
    prog, rows = assemble_text(src, "k.s", listing=True)
    text = format_listing(prog, rows).splitlines()
    word = int(prog.code[0])
    assert re.fullmatch(rf"T 00000000  {word:016x}\s+k\.s:1\s+start: li r1, 5 ; go", text[0])
    assert re.fullmatch(r"D 00000000\s+k\.s:2\s+\.data", text[1])
    assert re.fullmatch(r"D 00000000  01 02 03 04 05 06 07 08\s+k\.s:3\s+\.byte 1, .*", text[2])
    assert text[3] == "D 00000008  09"


# ----------------------------------------------------------------------- CLI
def test_cli_assembles_lists_and_disassembles(tmp_path, capsys):
    src = tmp_path / "kernel.s"
    src.write_text("li r1, N\nhalt\n")
    assert main([str(src), "-D", "N=0x10", "--listing", str(tmp_path / "k.lst")]) == 0
    prog = Program.load(tmp_path / "kernel.bin")
    assert decode(int(prog.code[0]))[1]["imm"] == 16
    assert "li r1, N" in (tmp_path / "k.lst").read_text()
    assert main(["--disassemble", str(tmp_path / "kernel.bin"), "-o", str(tmp_path / "d.s")]) == 0
    assert "li r1, 16" in (tmp_path / "d.s").read_text()
    assert main(["--disassemble", str(tmp_path / "kernel.bin")]) == 0
    assert "halt" in capsys.readouterr().out
