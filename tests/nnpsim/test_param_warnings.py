"""Run-time warnings: commands that read a parameter never set, where its reset value spoils the result."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nnpasm
from isa_spec.param_rules import RULES
from nnpsim import Simulator
from nnpsim.stats import format_summary

ROOT = Path(__file__).resolve().parents[2]

# y = a + b element by element on vu0; the parameter lines are filled in per test.
ADD = """
        .text
        la      r10, a
        la      r11, b
        la      r12, y
        li      r21, 64
        setpi   dma.size0, 64
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
        dma     ch0, vbuf0[r0], ddr[r10], signal=s1
        dma     ch1, vbuf0[r21], ddr[r11], signal=s2
{params}
        li      r22, 128
        sem.wait s1
        vu.add  vu0, r22, r0, r21, wait=s2, signal=s3
        dma     ch2, ddr[r12], vbuf0[r22], wait=s3
        halt
        .data
        .buffer a, int8, (64,)
        .space  64
        .buffer b, int8, (64,)
        .space  64
        .buffer y, int8, (64,)
        .space  64
"""
STRIDES = """        setpi   vu.n0, 64
        setpi   vu.d_stride0, 1
        setpi   vu.a_stride0, 1
        setpi   vu.b_stride0, 1"""
SCALES = """        setpi   vu.ma, 1
        setpi   vu.mb, 1"""


def _run(source: str, name: str = "k.s"):
    prog = nnpasm.assemble(source, name)
    sim = Simulator()
    sim.load(prog)
    rng = np.random.default_rng(7)
    a, b = (rng.integers(-60, 60, 64).astype(np.int8) for _ in range(2))
    sim.write("a", a)
    sim.write("b", b)
    stats = sim.run(check_races=True)
    return stats, sim.read("y"), a, b


def _line_of(source: str, text: str) -> int:
    return next(n for n, line in enumerate(source.splitlines(), 1) if text in line)


def test_vu_add_without_its_scales_warns_naming_instruction_and_line():
    source = ADD.format(params=STRIDES)
    stats, y, a, b = _run(source)
    assert not y.any()                  # the silent wrong answer the warning is about
    line = _line_of(source, "vu.add  vu0")
    assert len(stats.warnings) == 2
    ma, mb = stats.warnings
    assert f"(k.s:{line})" in ma and "vu.add reads vu.ma, never set" in ma and "[1 command]" in ma
    assert f"(k.s:{line})" in mb and "vu.add reads vu.mb, never set" in mb
    assert "warning: " + ma in format_summary(stats)


def test_a_set_kernel_gets_no_warning_and_the_right_answer():
    source = ADD.format(params=STRIDES + "\n" + SCALES)
    stats, y, a, b = _run(source)
    assert stats.warnings == []
    np.testing.assert_array_equal(y, np.clip(a.astype(int) + b, -128, 127))


def test_a_scale_written_as_zero_on_purpose_is_not_flagged():
    source = ADD.format(params=STRIDES + "\n        setpi   vu.ma, 0\n        setpi   vu.mb, 1")
    stats, y, a, b = _run(source)
    assert stats.warnings == []
    np.testing.assert_array_equal(y, b)


def test_a_destination_stride_left_at_zero_on_a_long_dimension_warns():
    params = STRIDES.replace("        setpi   vu.d_stride0, 1\n", "") + "\n" + SCALES
    stats, y, a, b = _run(ADD.format(params=params))
    assert len(stats.warnings) == 1
    assert "vu.add reads vu.d_stride0, never set" in stats.warnings[0]
    assert "every step along vu.n0 writes the same bytes" in stats.warnings[0]


def test_a_zero_stride_on_a_dimension_of_one_is_fine():
    # n0 = 1: one element, so vu.d_stride0 never matters; strides of n1 (= 1) are never set either.
    params = "        setpi   vu.ma, 1\n        setpi   vu.mb, 1"
    stats, y, a, b = _run(ADD.format(params=params))
    assert stats.warnings == []
    assert y[0] == np.clip(int(a[0]) + int(b[0]), -128, 127)


def test_one_warning_counts_every_command_at_that_instruction():
    source = ADD.format(params=STRIDES).replace(
        "        vu.add  vu0, r22, r0, r21, wait=s2, signal=s3",
        "        vu.add  vu0, r22, r0, r21, wait=s2, signal=s3\n        li      r5, 3\n        li      r23, 192\n"
        "again:\n        vu.add  vu0, r23, r0, r21\n        loop    r5, again")
    stats, *_ = _run(source)
    assert sum("[3 commands]" in w for w in stats.warnings) == 2
    assert sum("[1 command]" in w for w in stats.warnings) == 2


def test_every_command_has_its_rules():
    from isa_spec import load_isa
    commands = {i.mnemonic for i in load_isa().instructions if i.unit in ("VU", "DMA")}
    float_nu = {i.mnemonic for i in load_isa().instructions if i.unit == "NU" and "nu.fx_scale" in
                {r.param for r in RULES.get(i.mnemonic, ()) if hasattr(r, "param")}}
    assert float_nu == {"nu.fconv", "nu.fconv.rq", "nu.fdwconv"}      # the NU's float mode: its input scale
    assert set(RULES) == commands | float_nu    # a new VU op needs at least its destination-stride rules


@pytest.fixture(scope="module")
def unset_binary(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("warn")
    (d / "k.s").write_text(ADD.format(params=STRIDES))
    out = subprocess.run([sys.executable, "-m", "nnpasm.cli", "k.s", "-o", "k.bin", "--no-warnings"],
                         cwd=d, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return d / "k.bin"


def _nnpsim(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nnpsim.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600)


def test_cli_prints_the_warnings_and_exits_zero(unset_binary):
    run = _nnpsim("run", unset_binary.name, "--stats", "s.json", cwd=unset_binary.parent)
    assert run.returncode == 0, run.stderr
    assert run.stdout.count("warning: pc ") == 2
    assert "vu.add reads vu.ma, never set" in run.stdout
    assert "(k.s:" in run.stdout
    stats = json.loads((unset_binary.parent / "s.json").read_text())
    assert len(stats["warnings"]) == 2 and "vu.mb" in stats["warnings"][1]


def test_cli_no_warnings_silences_them(unset_binary):
    run = _nnpsim("run", unset_binary.name, "--stats", "s.json", "--no-warnings", cwd=unset_binary.parent)
    assert run.returncode == 0, run.stderr
    assert "warning" not in run.stdout + run.stderr
    assert json.loads((unset_binary.parent / "s.json").read_text())["warnings"] == []
