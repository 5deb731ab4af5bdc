"""A residual's join fused into a dynamic network's chain (compiler/dynamic/network.py: fused_runs,
compiler/dynamic/fused.py: lower_fused(add=...)).

An add or mul that reads a fused chain's last conv (and nothing else reads that conv) and a tensor
already in DDR runs in the chain's program: per step the other input's rows are loaded into VBUF as
the conv's rows lie and the VU adds them before the store.  Hypothesis draws the chains (one or two
convs, integer or float form), which side of the add the chain is, add or mul, relu or not and shapes
in range: each output equals the graph's numpy model on every element, race-checked; removing any
semaphore wait of the fused program is caught.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import Dim, ops
from compiler.graph import Graph
from compiler.assembler import assemble
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator
from tests.helpers.dynamic import without_wait

pytestmark = pytest.mark.usefixtures("warm_engine")


def residual_graph(rng, c: int, o: int, k: int, convs: int, side: int, mode: str, relu: bool,
                   float_form: bool = False, h=(5, 30), w=(5, 30), mid: int | None = None) -> Graph:
    """x -> conv c -> o (relu) = s; s -> conv o -> o, or o -> mid (relu) -> o, = t; y = add(s, t) or add(t,
    s) (side 1 / 0: t's input), relu or not."""
    mid = o if mid is None else mid
    n = Dim("n", 1, 2)
    shape = lambda ch: (n, ch, Dim("h", *h), Dim("w", *w))        # noqa: E731

    def conv(ci, o, act):
        q = (dict(scale=rng.uniform(1e-4, 2e-3, o).astype(np.float32)) if float_form
             else dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(20, 25, o)))
        return ops.conv2d(shape(ci), rng.integers(-20, 21, (o, ci, k, k)), rng.integers(-999, 999, o),
                          padding=k // 2, x_zp=int(rng.integers(-10, 10)), zp_out=int(rng.integers(-10, 10)),
                          lo=0 if act else -128, **q)
    g = Graph()
    x = g.input("x", shape(c))
    s = g.add(conv(c, o, True), x, name="stem")
    t, ci = s, o
    for j in range(convs):       # o -> mid -> o: the last conv may change the channel count
        co = mid if j < convs - 1 else o
        t = g.add(conv(ci, co, j < convs - 1), t, name=f"conv{j}", output=f"t{j}")
        ci = co
    z = dict(za=int(rng.integers(-5, 5)), zb=int(rng.integers(-5, 5)), zp_out=int(rng.integers(-5, 5)))
    if mode.startswith("float"):        # QLinearAdd's / QLinearMul's arithmetic: vu.fadd, vu.fmul
        z.update(scale_a=np.float32(rng.uniform(0.01, 0.1)), scale_b=np.float32(rng.uniform(0.01, 0.1)),
                 scale_out=np.float32(rng.uniform(0.05, 0.5)))
    elif mode == "add":
        z.update(ma=int(rng.integers(1, 8)) << 18, mb=int(rng.integers(1, 8)) << 18, shift=21)
    else:
        z.update(multiplier=int(rng.integers(1, 8)) << 20, shift=30)
    join = (ops.add if mode.endswith("add") else ops.mul)(shape(o), **z)
    y = g.add(join, *((s, t) if side == 1 else (t, s)), name="join")
    if relu:
        y = g.add(ops.relu(shape(o), 0), y, name="relu")
    g.output(y)
    return g


def check_outputs(lib, g, x: np.ndarray) -> None:
    """Run the dynamic network on x, race-checked: every output equals the graph's numpy model."""
    m = compiler.GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    for k, ref in enumerate(g.reference({"x": x})):
        np.testing.assert_array_equal(m.get_output(k, quantized=True), ref)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 24), o=st.integers(1, 40), k=st.sampled_from([1, 3, 5]),
       convs=st.sampled_from([1, 2]), side=st.sampled_from([0, 1]),
       mode=st.sampled_from(["add", "mul", "float add", "float mul"]),
       mid=st.integers(1, 40), relu=st.booleans(), float_form=st.booleans(),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_a_join_fused_after_a_chain_bit_exact_across_the_range(seed, c, o, k, convs, side, mode, mid, relu,
                                                               float_form, draws):
    rng = np.random.default_rng(seed)
    g = residual_graph(rng, c, o, k, convs, side, mode, relu, float_form, mid=mid)
    lib = compiler.build(g)
    joined = [layer for layer in lib.meta["layers"] if "join" in layer["nodes"]]
    assert len(joined) == 1 and joined[0]["nodes"][:-1] == [f"conv{j}" for j in range(convs)]
    assert joined[0]["ops"].endswith(f"-> {mode.split()[-1]}" + (" + clip" if relu else ""))
    for fn, fh, fw in draws:
        x = rng.integers(-128, 128, (1 + round(fn), c, 5 + round(25 * fh), 5 + round(25 * fw))).astype(np.int8)
        check_outputs(lib, g, x)


def test_a_join_is_not_fused_where_the_chains_output_has_another_reader():
    """The conv's output is also a graph output: it must reach DDR, so the add runs alone."""
    rng = np.random.default_rng(3)
    g = residual_graph(rng, 4, 8, 3, 2, 1, "add", False)
    g.output("t1")
    lib = compiler.build(g)
    assert [layer["ops"] for layer in lib.meta["layers"]] == ["conv2d", "conv2d -> conv2d", "add"]
    x = rng.integers(-128, 128, (2, 4, 17, 9)).astype(np.int8)
    check_outputs(lib, g, x)


@pytest.mark.parametrize("side", [0, 1])
def test_removing_any_wait_of_a_fused_join_is_caught(side):
    """Every wait of the fused program (the chain's, the residual's load taken by a vu.mov, each block's add
    after its NU command, each store after its add, the set's reuse) removed in turn: a race or a deadlock."""
    rng = np.random.default_rng(40 + side)
    g = residual_graph(rng, 16, 40, 3, 2, side, "add", True, h=(4, 40), w=(4, 24), mid=24)
    lib = compiler.build(g)
    lines = lib.asm.splitlines()
    k = next(j for j, layer in enumerate(lib.meta["layers"]) if "join" in layer["nodes"])
    start = lines.index(next(line for line in lines if line.startswith(f"L{k}_layer:")))
    end = lines.index(next(line for line in lines if line.startswith(f"L{k}_drain:")))
    sites = [j for j in range(start, end) if "wait=" in lines[j] or "sem.wait" in lines[j]]
    assert len(sites) >= 9 and any("vu.mov" in lines[j] for j in sites)
    x = rng.integers(-128, 128, (2, 16, 35, 19)).astype(np.int8)
    check_outputs(lib, g, x)
    buffer = lib.meta["inputs"][0]["buffer"]
    for j in sites:
        sim = Simulator(lib.config)
        sim.load(assemble(without_wait(lib.asm, j), lib.files, "mutant.s"))
        sim.write(buffer, x)
        with pytest.raises(SimError) as exc:
            sim.run(check_races=True, max_cycles=5_000_000)
        assert exc.value.code in (errors.DATA_RACE, errors.DEADLOCK), (lines[j], exc.value)


def test_a_join_after_a_strided_conv_runs_alone():
    """A stride-2 conv does not keep the Dims (no fused form): the add after it reads it from DDR."""
    rng = np.random.default_rng(5)
    n, h, w = Dim("n", 1, 2), Dim("h", 6, 30), Dim("w", 6, 30)
    q = lambda o: dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(20, 25, o))   # noqa: E731
    g = Graph()
    x = g.input("x", (n, 4, h, w))
    a = g.add(ops.conv2d((n, 4, h, w), rng.integers(-20, 21, (8, 4, 3, 3)), None, stride=2, padding=1, **q(8)), x)
    b = g.add(ops.conv2d((n, 4, h, w), rng.integers(-20, 21, (8, 4, 1, 1)), None, stride=2, **q(8)), x)
    shape = g.values[a].shape
    g.output(g.add(ops.add(shape, ma=3 << 18, mb=5 << 18, shift=21), a, b))
    lib = compiler.build(g)
    assert [layer["ops"] for layer in lib.meta["layers"]] == ["conv2d", "conv2d", "add"]
    x = rng.integers(-128, 128, (2, 4, 23, 14)).astype(np.int8)
    check_outputs(lib, g, x)
