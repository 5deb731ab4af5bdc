"""The Simulator API: load, write, read, run, stats, trace, races and errors."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from nnpasm import assemble
from nnpsim import Config, SimError, Simulator, Stats, errors

from tests.helpers.machine import small_config

pytestmark = pytest.mark.usefixtures("warm_engine")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

COPY = """
        .text
        la      r1, src
        la      r2, dst
        li      r3, 64
        setpi   dma.size0, 24
        setpi   dma.size1, 5
        setpi   dma.src_stride0, 1
        setpi   dma.src_stride1, 24
        setpi   dma.dst_stride0, 1
        setpi   dma.dst_stride1, 24
        dma     ch0, dm[r3], ddr[r1], signal=s0
        dma     ch1, ddr[r2], dm[r3], wait=s0
        barrier Q_ALL
        halt
        .data
        .buffer src, int8, (5, 24), "split(1,8) reorder(1,0,2)"
        .space  120
        .align  64
        .buffer dst, int8, (5, 24), "split(1,8) reorder(1,0,2)"
        .space  120
        .align  64
        .buffer acc, int32, (3, 2)
        .space  24
"""


def test_write_run_read_round_trip():
    sim = Simulator(small_config())
    sim.load(assemble(COPY, "copy.s"))
    x = np.random.default_rng(7).integers(-128, 128, (5, 24), dtype=np.int8)
    sim.write("src", x)
    stats = sim.run()
    assert isinstance(stats, Stats) and stats.cycles == sim.last_log.cycles > 0
    assert np.array_equal(sim.read("dst"), x)
    a = np.random.default_rng(8).integers(-2**31, 2**31, (3, 2), dtype=np.int32)
    sim.write("acc", a)
    assert np.array_equal(sim.read("acc"), a)
    # the stored layout really is the blocked one: block 1 of row 0 sits at byte 40
    raw = sim.memory.view(0, sim.program.buffers["src"].addr, 120).view(np.int8)
    assert np.array_equal(raw[40:48], x[0, 8:16])


def test_write_rejects_bad_shape_dtype_and_name():
    sim = Simulator(small_config())
    sim.load(assemble(COPY, "copy.s"))
    with pytest.raises(ValueError, match=r"int8 of shape \(5, 24\).*got int16"):
        sim.write("src", np.zeros((5, 24), np.int16))
    with pytest.raises(ValueError, match=r"int8 of shape \(5, 24\).*shape \(24, 5\)"):
        sim.write("src", np.zeros((24, 5), np.int8))
    with pytest.raises(ValueError, match="known buffers: acc, dst, src"):
        sim.read("nope")


def test_run_before_load_is_an_error():
    with pytest.raises(SimError, match="no program loaded"):
        Simulator(small_config()).run()


def test_error_carries_log_stats_and_trace(tmp_path):
    src = COPY.replace("li      r3, 64", "li      r3, 16380")  # DM is 16 KiB: the copy leaves it
    sim = Simulator(small_config())
    sim.load(assemble(src, "bad.s"))
    trace = tmp_path / "t.json"
    with pytest.raises(SimError) as info:
        sim.run(trace=trace)
    e = info.value
    assert e.code == errors.OUT_OF_BOUNDS and "bad.s:" in str(e) and "dm" in str(e)
    assert e.log is sim.last_log and e.log.error is e and e.stats.cycles == e.cycle
    assert json.loads(trace.read_text())


def test_trace_and_race_check_on_clean_run(tmp_path):
    sim = Simulator(small_config())
    sim.load(assemble(COPY, "copy.s"))
    sim.run(trace=tmp_path / "t.json", check_races=True)
    assert (tmp_path / "t.json").stat().st_size > 0


def test_race_is_reported():
    racy = COPY.replace(", wait=s0", "")
    sim = Simulator(small_config())
    sim.load(assemble(racy, "racy.s"))
    sim.run()  # no check: it runs
    with pytest.raises(SimError) as info:
        sim.run(check_races=True)
    assert info.value.code == errors.DATA_RACE and info.value.log is sim.last_log


def test_example_scalar_loop():
    sim = Simulator(small_config())
    sim.load(assemble((EXAMPLES / "scalar_loop.s").read_text(), "scalar_loop.s"))
    sim.run()
    assert list(sim.read("result")) == [210, 2870, 6, 6765]


def test_example_dma_pad_layout():
    sim = Simulator(small_config())
    sim.load(assemble((EXAMPLES / "dma_pad_layout.s").read_text(), "dma_pad_layout.s"))
    sim.run()
    x = sim.read("x")
    assert np.array_equal(sim.read("y"), x)
    xp = np.pad(x, ((0, 0), (0, 24), (1, 1), (1, 1)), constant_values=-3)
    assert np.array_equal(sim.read("xb"), xp.reshape(2, 32, 7, 8).transpose(0, 2, 3, 1))


def test_default_config_and_data_that_does_not_fit():
    sim = Simulator()
    assert sim.config == Config()
    prog = assemble(COPY, "copy.s")
    prog.data_base = Config().ddr_bytes - 16
    with pytest.raises(SimError, match="does not fit DDR"):
        sim.load(prog)


def test_load_refuses_a_program_built_for_another_machine():
    prog = assemble(".target nu.count, 2\n.target kernel, \"conv1\"\n.target memory.dm.size, 16384\nnop\nhalt\n",
                    "t.s")
    with pytest.raises(SimError) as e:
        Simulator(small_config()).load(prog)
    assert e.value.code == errors.TARGET_MISMATCH
    assert str(e.value) == ("cannot load program: it was built (.target) for another machine: "
                            "nu.count = 2 (this machine: nu.count = 1); run it on the machine it was "
                            "built for, or rebuild it for this one")
    sim = Simulator(small_config(nu_count=2))
    sim.load(prog)
    assert sim.run().cycles > 0


def test_a_program_loaded_again_reuses_its_decode_not_its_table():
    """decode_for_engine caches per program words: the same table each time, a copy the caller may change."""
    from isa_spec import load_isa
    from nnpsim import cu

    first = assemble("li r1, 5\n.l: addi r2, r2, 3\nloop r1, .l\nhalt\n")
    other = assemble("li r1, 7\n.l: addi r2, r2, 1\nloop r1, .l\nhalt\n")
    fresh = cu._decode(np.asarray(first.code, dtype=np.uint64), load_isa())
    a = cu.decode_for_engine(first.code)
    a[:] = -9                                        # the caller's copy, not the cache
    assert np.array_equal(cu.decode_for_engine(first.code), fresh)
    b = cu.decode_for_engine(other.code)             # other words: decoded afresh
    assert not np.array_equal(b, fresh)
    assert np.array_equal(b, cu._decode(np.asarray(other.code, dtype=np.uint64), load_isa()))
    sim = Simulator()
    for program, loops in ((first, 5), (other, 7), (first, 5)):
        sim.load(program)
        sim.run()
        assert sim.last_log.registers[1] == 0 and sim.last_log.instructions == 2 + 2 * loops
