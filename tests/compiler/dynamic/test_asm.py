"""The dynamic wing's program builder (compiler/dynamic/asm.py) and the pieces its programs share
(compiler/dynamic/common.py)."""
import pytest

from compiler import Dim, ops
from compiler.dynamic.asm import Instr, Program, Scope, semaphores
from compiler.dynamic.common import Part, args_buffer, checked, header, times_sizes
from compiler.dynamic.conv import conv_semaphores
from compiler.dynamic.elementwise import lower_elementwise
from compiler.dynamic.global_pool import lower_global_pool
from compiler.errors import CompileError
from compiler.assembler import assemble
from nnpsim.config import Config


def _code(prog: Program) -> list[str]:
    return prog.emit().split(".text\n", 1)[1].splitlines()


def test_times_sizes_reads_a_dims_word_and_multiplies_a_fixed_size_but_not_a_one():
    prog = Program()
    b = Scope(prog)
    args, reg, tmp = b.regs.take("args", "reg", "tmp")
    times_sizes(b, reg, (Dim("n", 1, 4), 1, 7, Dim("w", 2, 9)), {"n": 0, "w": 1}, args, tmp)
    assert [line.split() for line in _code(prog)] == [
        ["ld", "r3,", "r1,", "0"], ["mul", "r2,", "r2,", "r3"], ["muli", "r2,", "r2,", "7"],
        ["ld", "r3,", "r1,", "4"], ["mul", "r2,", "r2,", "r3"]]


def test_args_buffer_is_declared_once_unaligned_under_its_bound_name():
    prog = Program()
    b = Scope(prog, bind={"args": "net_args"})
    dims = (Dim("n", 1, 4), Dim("w", 2, 9))
    assert args_buffer(b, dims).name == "net_args"
    args_buffer(b.sub(prefix="F1_"), dims)
    assert [item.text.split() for item in prog.data] == [[".buffer", "net_args,", "int32,", "(2,)"],
                                                         [".space", "8"]]


def test_an_elementwise_op_and_a_global_pool_link_into_one_program_through_their_scopes():
    """Each op writes through its own Scope: labels prefixed, buffers bound, registers its own from r1."""
    cfg = Config()
    n, h, w = Dim("n", 1, 2), Dim("h", 2, 20), Dim("w", 2, 20)
    prog = Program()
    lower_elementwise(Scope(prog, prefix="L0_", bind={"x": "t0", "y": "t1"}), ops.relu((n, 8, h, w)), cfg)
    first = len(prog.text)
    lower_global_pool(Scope(prog, prefix="L1_", bind={"x": "t1", "y": "t2"}), ops.global_avg_pool2d((n, 8, h, w)), cfg)
    Scope(prog).i("halt")
    header(prog, ["two ops"], cfg)
    asm = prog.emit()
    assert [line.split()[1] for line in asm.splitlines() if ".buffer" in line] == ["args,", "t0,", "t1,", "t2,"]
    labels = [item.text.split(":")[0] for item in prog.text if not isinstance(item, Instr) and item.text[:1].isalpha()]
    assert "L0_chunk" in labels and "L1_tile" in labels and all(lb[:3] in ("L0_", "L1_") for lb in labels)
    assert str(prog.text[first].operands[0]) == "r1"          # la r1, args: the pool's own registers again
    assemble(asm, prog.files, "linked.s")

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


def test_checked_writes_a_lowering_once_into_a_scratch_program_so_that_its_refusal_raises_at_once():
    calls = []

    def lower(b: Scope) -> Part:
        calls.append(b.prog)
        b.i("halt")
        return Part(["t"], [])
    prog = Program()
    assert checked(lower) is lower and len(calls) == 1 and calls[0] is not prog
    lower(Scope(prog))
    assert len(calls) == 2 and len(prog.text) == 1

    def refuse(b: Scope) -> Part:
        raise CompileError("no")
    with pytest.raises(CompileError, match="no"):
        checked(refuse)


def test_a_fused_chains_ops_take_consecutive_semaphores_a_conv_of_two_sets_seven():
    pool = semaphores()
    one, two = conv_semaphores(pool, marker=False), conv_semaphores(pool)
    assert one.afree is None and (one.bias.n, one.w.n) == (0, 6)
    assert (two.bias.n, two.afree.n) == (7, 14)
