"""The dynamic wing's program builder (compiler/dynamic/asm.py) and the pieces its programs share
(compiler/dynamic/common.py)."""
from compiler import Dim
from compiler.dynamic.asm import Program, Scope
from compiler.dynamic.common import args_buffer, times_sizes


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
