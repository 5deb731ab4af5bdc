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


def test_a_constant_buffer_is_declared_with_its_contents_from_a_file():
    prog = Program()
    assert str(prog.const_buffer("g", "int8", (3,), b"abc")) == "g"
    assert [line.text.strip() for line in prog.data] == [".align 64", ".buffer g, int8, (3,)", '.incbin "g.bin"']
    assert prog.files == {"g.bin": b"abc"} and "g" in prog.declared
