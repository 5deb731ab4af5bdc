"""The double-buffering pipeline (compiler.lowering.double_buffer): issue order, its check that issue order
keeps tile order on chip, and the late stage of a drained tile (its requantisation and store issued one
tile after its drain)."""
from __future__ import annotations

import numpy as np
import pytest

import compiler
from compiler.errors import CompileError
from compiler.ir import Buffer, Command, Dma, Note, Ref
from compiler.lowering import driver, nu
from compiler.lowering.double_buffer import Slots, Step, pipeline
from compiler.search import candidates
from nnpsim.config import Config
from tests.helpers.networks import dw_op


def _steps(n: int) -> list[Step]:
    """n Steps whose every stage holds one Note naming it."""
    return [Step(loads=[Note(f"L{k}")], early=[Note(f"A{k}")], compute=[Note(f"C{k}")],
                 epilogue=[Note(f"E{k}")], late=[Note(f"Z{k}")]) for k in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_late_is_issued_one_tile_after_the_epilogue(n):
    order = [s.text for s in pipeline(_steps(n))]
    want = ["L0"]
    for k in range(n):
        want += [f"A{k}"] + ([f"L{k + 1}"] if k + 1 < n else []) + [f"C{k}"]
        want += [f"E{k - 1}"] if k > 0 else []
        want += [f"Z{k - 2}"] if k > 1 else []
    want += ([f"Z{n - 2}"] if n > 1 else []) + [f"E{n - 1}", f"Z{n - 1}"]
    assert order == want
    assert sorted(order) == sorted(s.text for st in _steps(n) for s in st.statements())   # each once


def _copy(dst: Buffer, src: Buffer, n: int = 64) -> Dma:
    return Dma(0, Ref(dst), Ref(src), (n, 1, 1, 1), (1, 0, 0, 0), (1, 0, 0, 0), comment=f"{src.name} -> {dst.name}")


def _tiles(n: int, depth: int, load_stage: bool) -> list[Step]:
    """n tiles, each filling a slot of `depth` (in the loads or the compute stage) that its epilogue stores."""
    x, y = Buffer("x", "ddr", 64 * n), Buffer("y", "ddr", 64 * n)
    slots = Slots()
    slots.declare("t", "vbuf", 64, depth=depth)
    out = []
    for _ in range(n):
        slot = slots.next("t")
        fill = [_copy(slot, x)]
        out.append(Step(loads=fill if load_stage else [], compute=[] if load_stage else fill,
                        epilogue=[_copy(y, slot)]))
    return out


@pytest.mark.parametrize("depth, load_stage, ok", [(2, False, True), (3, True, True), (2, True, False)])
def test_a_slot_rotated_too_shallowly_for_its_stage_is_refused(depth, load_stage, ok):
    """A slot filled in the loads stage needs three slots: with two, tile k's load is issued before tile
    k - 2's store of the same slot, which the sync pass would then order after it."""
    steps = _tiles(5, depth, load_stage)
    if ok:
        assert len(pipeline(steps)) == 10
    else:
        with pytest.raises(CompileError, match="tile 2 writes t0 before tile 0 reads it, in issue order"):
            pipeline(steps)


def test_reads_of_one_buffer_by_every_tile_are_not_refused():
    """Weights loaded by the first tile and read by every tile's compute: reads never conflict."""
    steps = _tiles(6, 3, True)
    w, acc = Buffer("w", "wbuf", 64), Buffer("acc", "abuf", 64 * 6)
    steps[0].loads.append(_copy(w, Buffer("wd", "ddr", 64)))
    for k, st in enumerate(steps):
        st.compute.append(Dma(1, Ref(acc, 64 * k), Ref(w), (64, 1, 1, 1), (1, 0, 0, 0), (1, 0, 0, 0)))
    assert len(pipeline(steps)) == 6 * 3 + 1


def _drained_conv(rng):
    """A 3x3 conv whose tiles drain through the VU (per-channel float requantisation: no output stage)."""
    return dw_op(rng, (1, 40, 13, 11))


def test_a_drained_tile_requantises_and_stores_in_its_late_stage():
    rng = np.random.default_rng(4)
    op = _drained_conv(rng)
    s = candidates((op,), Config())[0]
    _, (steps,) = driver.lower(s, Config())
    tiles = [st for st in steps if any(isinstance(c, Command) and "drain" in c.comment for c in st.epilogue)]
    assert tiles, "no tile drains through the VU"
    for st in tiles:
        late = [c for c in st.late if isinstance(c, Command)]
        assert any(c.comment.endswith("-> y") for c in late) and not any("drain" in c.comment for c in late)


@pytest.mark.parametrize("late", [True, False])
def test_drained_kernels_are_bit_exact_race_free_and_priced_exactly(monkeypatch, late):
    """With the late stage and without (LATE_REQUANT), on a depthwise conv and a depthwise conv with a
    residual add, both drained through the VU: the simulator equals numpy's reference, finds no race and
    takes the cycles predicted."""
    monkeypatch.setattr(nu, "LATE_REQUANT", late)
    rng = np.random.default_rng(9)
    dw = _drained_conv(rng)
    add = compiler.ops.add(dw.output.shape, za=-2, zb=2, ma=3 << 13, mb=5 << 12, shift=14, zp_out=1)
    for chain in ((dw,), (dw, add)):
        k = compiler.build(*chain, config=Config())
        assert any("drain" in line for line in k.asm.splitlines())
        inputs = [rng.integers(-128, 128, b.shape).astype(np.int8) for b in k.ir.inputs]
        want = dw.reference(inputs[0])
        if len(chain) > 1:
            want = add.reference(want, inputs[1])
        np.testing.assert_array_equal(k(*inputs, check_races=True), want)
        assert k.stats.cycles == k.predicted_cycles
