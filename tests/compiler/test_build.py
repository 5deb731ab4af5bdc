"""What build() returns, a Kernel, a DynamicKernel or a Library, shares one interface (compiler.Built):
run it, save its binary, read its assembly and the statistics of its last run."""
from __future__ import annotations

import numpy as np
import pytest

from compiler import Built, Dim, Graph, build, ops
from compiler.dynamic.kernel import DynamicKernel
from compiler.kernel import Kernel
from compiler.library import Library, load

pytestmark = pytest.mark.usefixtures("warm_engine")

RNG = np.random.default_rng(0)


def _relu(shape):
    return ops.relu(shape)


def _kernel():
    op = _relu((1, 8, 6, 6))
    x = RNG.integers(-128, 128, op.inputs[0].shape).astype(np.int8)
    return build(op), (x,), op.reference(x)


def _dynamic():
    op = _relu((1, 8, Dim("h", 4, 8), 6))
    x = RNG.integers(-128, 128, (1, 8, 5, 6)).astype(np.int8)
    return build(op), (x,), np.maximum(x, 0)


def _library():
    g = Graph()
    x = g.input("x", (1, 8, 6, 6))
    g.output(g.add(_relu((1, 8, 6, 6)), x, name="relu"))
    a = RNG.integers(-128, 128, (1, 8, 6, 6)).astype(np.int8)
    return build(g), (a,), g.reference(a)[0]


@pytest.mark.parametrize("make, kind", [(_kernel, Kernel), (_dynamic, DynamicKernel), (_library, Library)])
def test_run_save_stats_asm(make, kind, tmp_path):
    built, inputs, want = make()
    assert isinstance(built, kind) and isinstance(built, Built)
    assert built.stats is None                    # no run yet
    got = built.run(*inputs)
    assert np.array_equal(got, want)
    assert built.stats is not None and built.stats.cycles > 0
    assert isinstance(built.asm, str) and "halt" in built.asm
    path = tmp_path / "prog.bin"
    built.save(path)
    assert path.stat().st_size > 0


def test_a_saved_library_loads_and_runs_alike(tmp_path):
    lib, inputs, want = _library()
    lib.save(tmp_path / "net.bin")
    again = load(tmp_path / "net.bin")
    assert isinstance(again, Built) and np.array_equal(again.run(*inputs), want)
