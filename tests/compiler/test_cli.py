"""nnpc: the command line compiles an op to a .s file that assembles and runs."""
from __future__ import annotations

import numpy as np
import pytest

import nnpasm
from compiler.cli import main
from tests.helpers.cli_files import INPUT_KINDS, OUTPUT_KINDS, bad_input, bad_output, files_under, one_error_line
from nnpsim.simulator import Simulator
from tests import reference as ref


def assemble_and_run(path, **inputs):
    prog = nnpasm.assemble(path.read_text(), str(path), include_dirs=[str(path.parent)])
    sim = Simulator()
    sim.load(prog)
    for name, a in inputs.items():
        sim.write(name, a)
    sim.run(check_races=True)
    return sim.read("y")


def test_conv2d_from_the_command_line(tmp_path, capsys):
    rng = np.random.default_rng(1)
    w = rng.integers(-128, 128, size=(40, 8, 3, 3)).astype(np.int8)
    b = rng.integers(-500, 500, size=40).astype(np.int32)
    np.save(tmp_path / "w.npy", w)
    np.save(tmp_path / "b.npy", b)
    out = tmp_path / "conv.s"
    assert main(["conv2d", "--x-shape", "1,8,9,9", "--weight", str(tmp_path / "w.npy"), "--bias",
                 str(tmp_path / "b.npy"), "--stride", "2", "--padding", "1,0,1,1", "--x-zp", "-3",
                 "--multiplier", str(2**30), "--shift", "20", "--zp-out", "4", "--relu", "-o", str(out),
                 "--binary", str(tmp_path / "conv.bin")]) == 0
    assert "wrote" in capsys.readouterr().out
    x = rng.integers(-128, 128, size=(1, 8, 9, 9)).astype(np.int8)
    want = ref.relu(ref.conv2d(x, w, b, stride=2, padding=(1, 0, 1, 1), x_zp=-3, multiplier=2**30,
                               shift=20, zp_out=4), 4)
    np.testing.assert_array_equal(assemble_and_run(out, x=x), want)
    assert (tmp_path / "conv.bin").stat().st_size > 0


def test_pool_and_scale_and_errors(tmp_path, capsys):
    out = tmp_path / "p.s"
    assert main(["max_pool2d", "--x-shape", "1,2,5,5", "--kernel", "3", "--stride", "2", "--padding", "1",
                 "-o", str(out)]) == 0
    x = np.random.default_rng(2).integers(-128, 128, size=(1, 2, 5, 5)).astype(np.int8)
    np.testing.assert_array_equal(assemble_and_run(out, x=x), ref.max_pool2d(x, 3, 2, 1))
    assert main(["requantize", "--x-shape", "4,4", "--scale", "0.001", "-o", str(tmp_path / "r.s")]) == 0
    assert main(["conv2d", "--x-shape", "1,2,4,4", "--scale", "0.5", "-o", str(out)]) == 1
    assert "needs --weight" in capsys.readouterr().err
    assert main(["relu", "--x-shape", "4", "--zp-out", "300", "-o", str(out)]) == 1
    assert "zp" in capsys.readouterr().err


def test_kernel_records_its_machine_and_nnpsim_checks_it(tmp_path, capsys):
    from nnpsim.cli import main as nnpsim_main
    from nnpsim.config import config_toml
    from tests.helpers.machine import small_config

    machine = tmp_path / "m.toml"
    machine.write_text(config_toml(small_config(nu_count=2, vu_count=2, ddr_bytes=1 << 20)))
    out, binary = tmp_path / "pool.s", tmp_path / "pool.bin"
    assert main(["max_pool2d", "--x-shape", "1,40,7,6", "--kernel", "2", "--config", str(machine),
                 "-o", str(out), "--binary", str(binary)]) == 0
    text = out.read_text()
    assert "        .target nu.count, 2\n" in text and "        .target vu.vbuf_bytes, 8192\n" in text
    x = np.random.default_rng(3).integers(-128, 128, size=(1, 40, 7, 6)).astype(np.int8)
    np.save(tmp_path / "x.npy", x)
    capsys.readouterr()
    assert nnpsim_main(["run", str(binary), "--config", str(machine), "--input", f"x={tmp_path / 'x.npy'}",
                        "--output", f"y={tmp_path / 'y.npy'}", "--check-races"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), ref.max_pool2d(x, 2, 2, 0))
    capsys.readouterr()
    assert nnpsim_main(["run", str(binary)]) == 1          # the default machine: one NU, one VU
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "built (.target) for another machine" in err[0], err
    assert "nu.count = 2 (this machine: nu.count = 1)" in err[0] and "vu.count = 2" in err[0]
    assert main(["relu", "--x-shape", "4", "--config", str(tmp_path / "none.toml"), "-o", str(out)]) == 1
    assert "--config " + str(tmp_path / "none.toml") + ": cannot read: no such file" in capsys.readouterr().err


POOL = ["max_pool2d", "--x-shape", "1,2,5,5", "--kernel", "2"]


@pytest.mark.parametrize("kind", INPUT_KINDS)
@pytest.mark.parametrize("option", ["--weight", "--bias", "--scale", "--config"])
def test_every_bad_file_argument_of_the_single_op_form_is_one_line(tmp_path, capsys, option, kind):
    w = tmp_path / "w.npy"
    np.save(w, np.ones((4, 2, 1, 1), np.int8))
    (tmp_path / "hw.toml").write_text("[nu]\ncount = 1\n")
    path = bad_input(tmp_path, kind, tmp_path / "hw.toml" if option == "--config" else w, cut=9)
    argv = ["conv2d", "--x-shape", "1,2,4,4", "--weight", str(w), "--scale", "0.01", "-o", str(tmp_path / "c.s")]
    argv = argv + [option, path] if option in ("--bias", "--config") else [
        path if a == (str(w) if option == "--weight" else "0.01") else a for a in argv]
    before = files_under(tmp_path)
    code = main(argv)
    one_error_line("nnpc", code, capsys.readouterr().err, path)
    assert code == 1 and files_under(tmp_path) == before


@pytest.mark.parametrize("kind", OUTPUT_KINDS)
@pytest.mark.parametrize("option", ["-o", "--binary"])
def test_single_op_outputs_are_refused_first_or_reported(tmp_path, capsys, option, kind):
    path = bad_output(tmp_path, kind)
    argv = POOL + (["-o", path] if option == "-o" else ["-o", str(tmp_path / "p.s"), "--binary", path])
    before = files_under(tmp_path)
    code = main(argv)
    out, err = capsys.readouterr()
    one_error_line("nnpc", code, err, option, path)
    assert code == 1 and out == ""
    assert files_under(tmp_path) - before <= ({"p.s"} if kind == "full" else set())
