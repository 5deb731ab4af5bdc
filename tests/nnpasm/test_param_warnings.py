"""Static warnings: commands that read a parameter no earlier line sets, where its reset value is wrong."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from isa_spec import load_isa
from nnpasm import AsmError, Program, assemble
from nnpasm.cli import main
from isa_spec.param_rules import RULES, Scalar
from isa_spec.param_rules import rules_for as _rules

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.s"))

ADD = """\
        .text
main:
        li      r1, 0
        li      r2, 64
        li      r3, 128
{ma}        setpi   vu.mb, 3
        vu.add  vu0, r3, r1, r2
        halt
"""


def warnings_of(src: str, **kw) -> list:
    found: list = []
    assemble(src, "k.s", warnings=found, **kw)
    return found


def test_vu_add_without_ma_gives_one_warning_at_the_mnemonic():
    (w,) = warnings_of(ADD.format(ma=""))
    assert (w.file, w.line, w.column, w.severity) == ("k.s", 7, 9, "warning")
    assert w.message == ("vu.add reads vu.ma, never set (it resets to 0, so every element of a is multiplied "
                         "by 0); set it with setpi vu.ma, ...")
    assert w.format().splitlines() == [
        "k.s:7:9: warning: " + w.message, "        vu.add  vu0, r3, r1, r2", "        ^"]


def test_setting_the_parameter_silences_it():
    assert warnings_of(ADD.format(ma="        setpi   vu.ma, 3\n")) == []
    assert warnings_of(ADD.format(ma="        setp    vu.ma, r2, 0\n")) == []
    assert warnings_of(ADD.format(ma="        setpi   vu.ma, 0\n")) == []   # 0 on purpose


def test_warnings_leave_the_program_alone():
    src = ADD.format(ma="")
    prog = assemble(src, "k.s")
    assert isinstance(prog, Program)
    assert np.array_equal(assemble(src, "k.s", warnings=[]).code, prog.code)


def test_nothing_is_appended_when_assembly_fails():
    found: list = []
    with pytest.raises(AsmError):
        assemble(ADD.format(ma="") + "        bogus\n", "k.s", warnings=found)
    assert found == []


def test_cli_prints_warnings_on_stderr_and_exits_0(tmp_path, capsys):
    src = tmp_path / "k.s"
    src.write_text(ADD.format(ma=""))
    assert main([str(src), "-o", str(tmp_path / "k.bin")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and f"{src}:7:9: warning: vu.add reads vu.ma" in err
    assert err.rstrip("\n").endswith("        ^")
    assert (tmp_path / "k.bin").exists()


def test_cli_no_warnings_silences_them(tmp_path, capsys):
    src = tmp_path / "k.s"
    src.write_text(ADD.format(ma=""))
    assert main([str(src), "--no-warnings", "-o", str(tmp_path / "k.bin")]) == 0
    assert capsys.readouterr().err == ""


def test_a_set_anywhere_earlier_counts_even_on_a_path_not_taken():
    src = """\
        li      r4, 1
        beq     r4, r4, skip
        setpi   vu.ma, 3
        setpi   vu.mb, 3
skip:
        vu.add  vu0, r3, r1, r2
"""
    assert warnings_of(src) == []


def test_each_parameter_is_reported_once_at_its_first_reader():
    src = "vu.mul vu0, r1, r2, r3\nvu.requant vu0, r1, r2, i8\nvu.add vu0, r1, r2, r3\n"
    found = warnings_of(src)
    assert [(w.line, w.message.split(",")[0]) for w in found] == [
        (1, "vu.mul reads vu.ma"), (3, "vu.add reads vu.mb")]


@pytest.mark.parametrize("line", ["vu.clip vu0, r1, r2", "vu.divr vu0, r1, r2, r3", "vu.mov vu0, i8, r1, i32, r2",
                                  "vu.requant.pc vu0, r1, r2, r3, i32", "vu.pool.max vu0, r1, r2",
                                  "nu.conv nu0, r1, r2, r3", "dma ch0, vbuf0[r1], ddr[r2]"])
def test_commands_whose_reset_values_are_usable_give_none(line):
    assert warnings_of(line) == []


def test_an_unset_destination_stride_of_a_longer_dimension():
    base = "setpi vu.ma, 1\nsetpi vu.n0, 16\nsetpi vu.d_stride0, 1\n{n1}vu.requant vu0, r1, r2, i8\n"
    (w,) = warnings_of(base.format(n1="setpi vu.n1, 4\n"))
    assert w.line == 5 and w.message == (
        "vu.requant reads vu.d_stride1, never set (it resets to 0, so every step along vu.n1 writes the same "
        "bytes); set it with setpi vu.d_stride1, ...")
    assert len(warnings_of(base.format(n1="setp vu.n1, r5, 0\n"))) == 1   # any value
    assert warnings_of(base.format(n1="")) == []                       # n1 resets to 1
    assert warnings_of(base.format(n1="setpi vu.n1, 1\n")) == []
    assert warnings_of(base.format(n1="setpi vu.n1, 4\nsetpi vu.n1, 1\n")) == []   # the last set is 1


def test_zero_source_strides_are_broadcasts_not_warnings():
    src = "setpi vu.n0, 16\nsetpi vu.d_stride0, 1\nvu.divr vu0, r1, r2, r3\n"   # a and b strides stay 0
    assert warnings_of(src) == []


def test_dma_destination_and_pool_window_strides():
    dma = "setpi dma.size1, 8\nsetpi dma.src_stride1, 64\ndma ch0, vbuf0[r1], ddr[r2]\n"
    assert [w.message.split(",")[0] for w in warnings_of(dma)] == ["dma reads dma.dst_stride1"]
    pool = "setpi vu.win_w, 2\nsetpi vu.win_h, 2\nsetpi vu.win_stride_h, 8\nvu.pool.sum vu0, r1, r2\n"
    assert [w.message.split(",")[0] for w in warnings_of(pool)] == ["vu.pool.sum reads vu.win_stride_w"]


def test_a_warning_in_a_macro_points_at_the_body_line():
    src = ".macro add3 d, a, b\n        vu.add vu0, \\d, \\a, \\b\n.endm\nsetpi vu.mb, 1\nadd3 r1, r2, r3\n"
    (w,) = warnings_of(src)
    assert (w.line, w.column) == (2, 9)
    assert w.notes == ("after substitution: vu.add vu0, r1, r2, r3", "in expansion of macro 'add3' at k.s:5")


def test_rules_name_real_mnemonics_and_parameters_and_all_hold_for_this_isa():
    isa = load_isa()
    for mnemonic, rules in RULES.items():
        assert mnemonic in isa.by_mnemonic
        for rule in rules:
            for param in ((rule.param,) if type(rule) is Scalar else (rule.size, rule.stride)):
                assert param in isa.params, param
    assert _rules(isa) == RULES    # every rule's premise (the reset values) is this ISA's


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_assemble_without_warnings(path):
    found: list = []
    assemble(path.read_text(), str(path), include_dirs=[str(path.parent)], warnings=found)
    assert found == [], "\n".join(w.format() for w in found)


def test_compiler_kernels_assemble_without_warnings(tmp_path):
    from compiler import ops
    from compiler.demos.cnn_demo import network
    from compiler.quant import quantize_multiplier

    rng = np.random.default_rng(3)
    ma, shift = quantize_multiplier(0.5)
    chains = [layer.ops for layer in network()] + [
        (ops.avg_pool2d((1, 8, 10, 10), 3, stride=2, padding=1, count_include_pad=False),),
        (ops.mul((1, 8, 6, 6), za=1, zb=-2, multiplier=ma, shift=shift),),
        (ops.clip((1, 8, 6, 6), -10, 20),),
        (ops.requantize((1, 8, 6, 6), in_dtype="int32", multiplier=ma, shift=shift + 4),),
        (ops.dense((2, 40), rng.integers(-8, 8, (40, 12), dtype=np.int8), None, multiplier=1 << 20, shift=26),)]
    _assert_no_warnings(chains, tmp_path)


def test_a_float_scale_left_at_reset_is_caught_when_assembling():
    src = "setpi vu.fscale, 0x3D800000\nvu.fadd vu0, r1, r2, r3\nvu.requant.f vu0, r1, r2, i32\n"
    (w,) = warnings_of(src)
    assert w.line == 2 and w.message.startswith("vu.fadd reads vu.fscale_b, never set (it resets to 0, so its "
                                                "float32 value is 0.0, which the VU refuses with BAD_PARAM)")
    assert warnings_of("setpi vu.fbias, 0\nsetpi vu.fscale, 1\nvu.fmul vu0, r1, r2, r3\n") == []


def test_float_form_kernels_assemble_without_warnings(tmp_path):
    from compiler import ops

    w = np.random.default_rng(4).integers(-20, 20, (6, 3, 3, 3), dtype=np.int8)
    chains = [(ops.conv2d((1, 3, 7, 7), w, padding=1, scale=np.linspace(0.001, 0.004, 6, dtype=np.float32)),
               ops.add((1, 6, 7, 7), scale_a=0.1, scale_b=0.2, scale_out=0.15)),
              (ops.mul((2, 5, 3), za=1, scale_a=0.1, scale_b=0.2, scale_out=0.5),),
              (ops.requantize((2, 5, 3), in_dtype="int32", scale=[0.1, 0.2, 0.3, 0.4, 0.5]),),
              (ops.avg_pool2d((1, 4, 9, 9), 3, 2, 1, False, scale_x=0.1, scale_out=0.2, zp_out=3),),
              (ops.global_avg_pool2d((1, 4, 5, 5), x_zp=2, scale_x=0.1, scale_out=0.2),)]
    _assert_no_warnings(chains, tmp_path)


def _assert_no_warnings(chains, tmp_path) -> None:
    """Every chain's compiled kernel assembles without a warning."""
    from compiler.build import build

    for n, chain in enumerate(chains):
        kernel = build(*chain)
        inc = tmp_path / str(n)
        inc.mkdir()
        for name, blob in kernel.files.items():
            (inc / name).write_bytes(blob)
        found: list = []
        assemble(kernel.asm, "kernel.s", include_dirs=[str(inc)], warnings=found)
        assert found == [], "\n".join(w.format() for w in found)
