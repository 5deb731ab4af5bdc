"""The dynamic wing's program builder (compiler/dynamic/asm.py)."""
from compiler.dynamic.asm import Program


def test_a_repeated_buffer_declaration_keeps_only_its_align_line_with_repeat_align():
    prog = Program()
    prog.buffer("x", "int8", (4,), 4)
    prog.buffer("x", "int8", (4,), 4)
    assert [line.text.strip() for line in prog.data] == [".align 64", ".buffer x, int8, (4,)", ".space 4"]
    prog.repeat_align = True
    prog.buffer("x", "int8", (4,), 4)
    prog.buffer("x", "int8", (4,), 4, align=False)
    assert [line.text.strip() for line in prog.data][3:] == [".align 64"]
