"""Dynamic shapes: one conv2d binary for a range of sizes (compiler/dims.py, compiler/dynamic/conv.py).

Hypothesis draws a conv (channels, kernel, stride, padding, dilation, ranges) and shapes inside its
ranges; every run is compared with numpy on every element and race-checked.  Out-of-range and
inconsistent shapes are refused naming the dimension; a bad argument block is a simulation error
naming the dimension; removing any semaphore wait of a dynamic kernel makes the race checker fire.
"""
from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import compiler
from compiler import Dim, ops
from compiler.errors import CompileError
from compiler.assembler import assemble
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator
from tests.helpers.dynamic import conv, kill_every_wait, rand8

pytestmark = pytest.mark.usefixtures("warm_engine")


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), o=st.integers(1, 40), k=st.sampled_from([1, 3, 5]),
       stride=st.sampled_from([1, 2]), padding=st.integers(0, 2), dilation=st.sampled_from([1, 2]),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_conv_bit_exact_across_the_range(seed, c, o, k, stride, padding, dilation, draws):
    rng = np.random.default_rng(seed)
    lo = max(1, (k - 1) * dilation + 1 - 2 * padding)
    op = conv(rng, c, o, k, stride, padding, dilation, n=(1, 2), h=(lo, lo + 20), w=(lo, lo + 20))
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        shape = (1 + round(fn), c, lo + round(20 * fh), lo + round(20 * fw))
        x = rand8(rng, shape)
        y = kern(x, check_races=True)
        np.testing.assert_array_equal(y, op.reference(x))


def test_one_binary_serves_every_shape_and_the_extremes():
    rng = np.random.default_rng(1)
    op = conv(rng, c=33, o=40, h=(3, 30), w=(3, 30))
    kern = compiler.build(op)
    program = kern.program
    for shape in [(1, 33, 3, 3), (2, 33, 30, 30), (1, 33, 7, 29), (2, 33, 30, 4)]:
        x = rand8(rng, shape)
        assert kern.program is program
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


def test_out_of_range_and_inconsistent_shapes_are_refused():
    rng = np.random.default_rng(2)
    op = conv(rng, h=(8, 16), w=(8, 16))
    kern = compiler.build(op)
    with pytest.raises(CompileError, match=r"dimension h = 17 is outside its range \[8, 16\]"):
        kern(rand8(rng, (1, 8, 17, 8)))
    with pytest.raises(CompileError, match=r"dimension w = 7 is outside its range \[8, 16\]"):
        kern(rand8(rng, (1, 8, 8, 7)))
    with pytest.raises(CompileError, match=r"axis 1 is 9, expected 8"):
        kern(rand8(rng, (1, 9, 8, 8)))
    same = ops.conv2d((1, 8, Dim("s", 8, 16), Dim("s", 8, 16)), rng.integers(-3, 3, (4, 8, 3, 3)), None,
                      multiplier=np.full(4, 2**30), shift=np.full(4, 24))
    with pytest.raises(CompileError, match=r"dimension s is 8 in input x axis 2 but 9 in input x axis 3"):
        compiler.build(same)(rand8(rng, (1, 8, 8, 9)))


def test_bad_dims_are_refused_at_construction():
    w = np.ones((4, 8, 3, 3), dtype=np.int64)
    q = dict(multiplier=np.full(4, 2**30), shift=np.full(4, 24))
    with pytest.raises(CompileError, match="lo = 9 is larger than hi = 8"):
        Dim("h", 9, 8)
    with pytest.raises(CompileError, match="must be an identifier"):
        Dim("2h", 1, 8)
    with pytest.raises(CompileError, match="channels.*cannot be a Dim"):
        ops.conv2d((1, Dim("c", 1, 8), 8, 8), w, None, **q)
    with pytest.raises(CompileError, match="declared twice with different ranges"):
        ops.conv2d((1, 8, Dim("h", 8, 16), Dim("h", 8, 20)), w, None, **q)
    with pytest.raises(CompileError, match="smallest shape of its range"):
        ops.conv2d((1, 8, Dim("h", 1, 16), 8), w, None, **q)


def test_bad_argument_block_is_an_error_naming_the_dimension():
    rng = np.random.default_rng(3)
    op = conv(rng, h=(8, 16), w=(8, 16))
    kern = compiler.build(op)
    sim = Simulator(kern.config)
    sim.load(kern.program)
    sim.write("x", rand8(rng, (1, 8, 9, 9)))
    sim.write("args", np.array([1, 9000, 9], dtype=np.int32))     # h far beyond the buffers
    with pytest.raises(SimError, match=r"dimension h = 9000 is outside its range \[8, 16\]") as exc:
        sim.run()
    assert exc.value.code == errors.OUT_OF_BOUNDS


def test_ld_is_bounds_and_alignment_checked():
    prog = assemble(".text\nmain:\n li r1, 0x7ffffffc\n ld r2, r1, 8\n halt\n", {}, "ld.s")
    sim = Simulator()
    sim.load(prog)
    with pytest.raises(SimError, match=r"out-of-bounds access on cu.*instruction ld"):
        sim.run()
    prog = assemble(".text\nmain:\n ld r2, r0, 2\n halt\n", {}, "ld.s")
    sim.load(prog)
    with pytest.raises(SimError, match=r"misaligned access on cu.*instruction ld"):
        sim.run()


def test_removing_any_wait_of_a_dynamic_kernel_is_caught():
    rng = np.random.default_rng(4)
    op = conv(rng, c=8, o=40, h=(8, 40), w=(8, 24))
    kern = compiler.build(op)
    x = rand8(rng, (2, 8, 37, 19))            # several tiles per image, remainder tile, two images
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    # nu.conv.rq requantises: the waits are the set's reuse, the NU's for its load, each store's for its NU
    assert "nu.conv.rq" in kern.asm
    kill_every_wait(kern, {"x": x}, at_least=4)


def elementwise(rng, kind: str, shape):
    if kind == "relu":
        return ops.relu(shape, zp=int(rng.integers(-20, 20)))
    if kind == "clip":
        lo = int(rng.integers(-128, 100))
        return ops.clip(shape, lo, int(rng.integers(lo, 128)))
    if kind == "add":
        return ops.add(shape, za=int(rng.integers(-9, 9)), zb=int(rng.integers(-9, 9)), ma=int(rng.integers(1, 2**22)),
                       mb=int(rng.integers(1, 2**22)), shift=int(rng.integers(18, 24)), zp_out=int(rng.integers(-9, 9)))
    if kind == "mul":
        return ops.mul(shape, za=int(rng.integers(-9, 9)), zb=int(rng.integers(-9, 9)),
                       multiplier=int(rng.integers(2**20, 2**24)), shift=int(rng.integers(26, 32)))
    return ops.add(shape, scale_a=float(rng.uniform(0.01, 0.1)), scale_b=float(rng.uniform(0.01, 0.1)),
                   scale_out=float(rng.uniform(0.05, 0.2)), za=int(rng.integers(-9, 9)), zb=int(rng.integers(-9, 9)),
                   zp_out=int(rng.integers(-9, 9)))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), kind=st.sampled_from(["relu", "clip", "add", "mul", "fadd"]),
       c=st.integers(1, 70), hi=st.integers(1, 48),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_elementwise_bit_exact_across_the_range(seed, kind, c, hi, draws):
    rng = np.random.default_rng(seed)
    op = elementwise(rng, kind, (Dim("n", 1, 3), c, Dim("h", 1, hi), Dim("w", 1, 40)))
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        shape = (1 + round(2 * fn), c, 1 + round((hi - 1) * fh), 1 + round(39 * fw))
        ins = [rand8(rng, shape) for _ in op.names]
        np.testing.assert_array_equal(kern(*ins, check_races=True), op.reference(*ins))


def test_binary_inputs_must_agree():
    rng = np.random.default_rng(5)
    kern = compiler.build(elementwise(rng, "add", (1, 4, Dim("h", 2, 9), 5)))
    with pytest.raises(CompileError, match=r"dimension h is 3 in input a axis 2 but 4 in input b axis 2"):
        kern(rand8(rng, (1, 4, 3, 5)), rand8(rng, (1, 4, 4, 5)))
    with pytest.raises(CompileError, match=r"takes 2 input\(s\) \(a, b\), got 1"):
        kern(rand8(rng, (1, 4, 3, 5)))


@pytest.mark.parametrize("kind", ["relu", "add"])
def test_removing_any_wait_of_a_dynamic_elementwise_kernel_is_caught(kind):
    rng = np.random.default_rng(6)
    op = elementwise(rng, kind, (Dim("n", 1, 2), 16, Dim("h", 1, 128), Dim("w", 1, 128)))
    kern = compiler.build(op)
    ins = [rand8(rng, (2, 16, 100, 121)) for _ in op.names]    # three or more chunks (VBUF-capped), a remainder
    np.testing.assert_array_equal(kern(*ins, check_races=True), op.reference(*ins))
    kill_every_wait(kern, dict(zip(op.names, ins)), at_least=3)


@pytest.mark.parametrize("channels", [1, 2, 4])
def test_dynamic_binary_loads_a_and_b_on_two_channels(channels):
    """A dynamic add / mul loads a and b on different channels when there are two (each its own token, joined
    in the VU queue): exact and race-free on any number of channels, and on four every wait is needed."""
    from nnpsim.config import Config

    rng = np.random.default_rng(13)
    for kind in ("add", "mul"):
        op = elementwise(rng, kind, (Dim("n", 1, 2), 16, Dim("h", 1, 128), Dim("w", 1, 128)))
        kern = compiler.build(op, config=Config(dma_channels=channels))
        loads = re.findall(r"(?m)^\s+dma\s+(ch\d), vbuf0\[r1[12]\], ddr", kern.asm)
        assert len(loads) == 2 and (loads[0] != loads[1]) == (channels > 1), loads
        for shape in [(1, 16, 1, 3), (1, 16, 9, 64), (2, 16, 100, 121)]:     # one chunk, two, three or more
            ins = [rand8(rng, shape) for _ in op.names]
            np.testing.assert_array_equal(kern(*ins, check_races=True), op.reference(*ins))
        if channels == 4:
            kill_every_wait(kern, dict(zip(op.names, ins)), at_least=4)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 70), k=st.integers(1, 4), stride=st.sampled_from([1, 2, 4]),
       pad=st.integers(0, 3), draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)),
                                             min_size=2, max_size=3))
def test_max_pool_bit_exact_across_the_range(seed, c, k, stride, pad, draws):
    rng = np.random.default_rng(seed)
    pad = min(pad, k - 1)
    lo = max(1, k - 2 * pad)
    op = ops.max_pool2d((Dim("n", 1, 2), c, Dim("h", lo, lo + 30), Dim("w", lo, lo + 30)), k, stride, pad)
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(30 * fh), lo + round(30 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


def test_removing_any_wait_of_a_dynamic_pool_is_caught():
    rng = np.random.default_rng(7)
    op = ops.max_pool2d((Dim("n", 1, 2), 48, Dim("h", 8, 96), Dim("w", 8, 96)), 3, 2, 1)
    kern = compiler.build(op)
    x = rand8(rng, (2, 48, 95, 90))                         # several tiles, a remainder, two images
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


def test_unsupported_dynamic_ops_are_refused_by_name():
    rng = np.random.default_rng(8)
    w = rng.integers(-3, 3, (4, 8, 3, 3))
    q = dict(multiplier=np.full(4, 2**30), shift=np.full(4, 24))
    with pytest.raises(CompileError, match="stride width = 2048 is out of range for a dynamic size"):
        compiler.build(ops.conv2d((1, 8, 8, Dim("w", 2048, 2100)), w, None, stride=(1, 2048), **q))
    with pytest.raises(CompileError, match="at 3x3 the 3x3 window is the whole plane"):
        compiler.build(ops.avg_pool2d((1, 8, Dim("h", 3, 16), Dim("w", 3, 9)), 3, 1, 0, scale_x=np.float32(0.1),
                                      scale_out=np.float32(0.2), zp_out=0))
    with pytest.raises(CompileError, match="a dynamic chain takes one-input dynamic ops.*op 1 is"):
        compiler.build(ops.relu((1, 8, Dim("h", 8, 16), 8)), ops.relu((1, 8, 8, 8)))


def test_nnpsim_run_infers_the_sizes_from_the_input(tmp_path, capsys):
    from nnpsim.cli import main

    rng = np.random.default_rng(9)
    op = conv(rng, c=8, o=16, n=(1, 1), h=(8, 32), w=(8, 32))
    kern = compiler.build(op)
    kern.save(tmp_path / "k.bin")
    x = rand8(rng, (1, 8, 13, 29))
    np.save(tmp_path / "x.npy", x)
    assert main(["run", str(tmp_path / "k.bin"), "--input", f"x={tmp_path / 'x.npy'}", "--output",
                 f"y={tmp_path / 'y.npy'}", "--check-races"]) == 0
    np.testing.assert_array_equal(np.load(tmp_path / "y.npy"), op.reference(x))
    capsys.readouterr()
    for shape, message in (((1, 8, 13, 40), "dimension w = 40 is outside its range [8, 32]"),
                           ((1, 9, 13, 20), "axis 1 is 9, expected 8"),
                           ((2, 8, 13, 20), "dimension n = 2 is outside its range [1, 1]")):
        np.save(tmp_path / "bad.npy", rand8(rng, shape))
        assert main(["run", str(tmp_path / "k.bin"), "--input", f"x={tmp_path / 'bad.npy'}"]) == 1
        assert message in capsys.readouterr().err


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), o=st.integers(1, 40), o2=st.integers(1, 40),
       k=st.sampled_from([1, 3, 5]), draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_fused_chain_bit_exact_across_the_range(seed, c, o, o2, k, draws):
    """conv (same padding) -> relu -> max pool (stride 1, same padding) -> conv: one program, fused on chip."""
    rng = np.random.default_rng(seed)
    n, h, w = Dim("n", 1, 2), Dim("h", 4, 30), Dim("w", 4, 30)
    first = conv(rng, c, o, k, 1, k // 2, 1, n=(1, 2), h=(4, 30), w=(4, 30))
    chain = [first, ops.relu((n, o, h, w), zp=int(rng.integers(-5, 5))), ops.max_pool2d((n, o, h, w), 3, 1, 1),
             ops.conv2d((n, o, h, w), rng.integers(-20, 21, (o2, o, 3, 3)), None, padding=1,
                        multiplier=rng.integers(2**29, 2**31, o2), shift=rng.integers(20, 26, o2))]
    kern = compiler.build(*chain)
    assert "dynamic fused chain" in kern.asm and "L1_" not in kern.asm       # on chip: no DDR intermediates
    assert ".buffer t0" not in kern.asm
    for fh, fw in draws:
        x = rand8(rng, (1 + int(fh > 0.5), c, 4 + round(26 * fh), 4 + round(26 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))


_LINK = st.tuples(st.sampled_from(["conv", "pool", "fconv"]), st.sampled_from([1, 3, 5]), st.integers(1, 40),
                  st.sampled_from([1, 2]), st.booleans())


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), links=st.lists(_LINK, min_size=2, max_size=4),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_fused_chains_of_any_composition_are_bit_exact(seed, c, links, draws):
    """2 to 4 convs (integer or float form, kernel 1/3/5, dilation 1/2) and max pools of stride 1 and same
    padding, some convs with a relu after (folded): fused on chip, bit-exact and race-free at shapes across
    the range."""
    rng = np.random.default_rng(seed)
    n, h, w = Dim("n", 1, 2), Dim("h", 9, 28), Dim("w", 9, 28)
    chain, ch = [], c
    for kind, k, o, dil, relu in links:
        shape = (n, ch, h, w)
        if kind == "pool":
            chain.append(ops.max_pool2d(shape, k, 1, k // 2))
            o = ch
        else:
            q = (dict(scale=rng.uniform(1e-4, 1e-2, o).astype(np.float32)) if kind == "fconv" else
                 dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(20, 26, o)))
            chain.append(ops.conv2d(shape, rng.integers(-20, 21, (o, ch, k, k)), rng.integers(-999, 999, o),
                                    padding=dil * (k // 2), dilation=dil, x_zp=int(rng.integers(-9, 9)), **q))
        if relu and kind != "pool":
            chain.append(ops.relu((n, o, h, w), zp=int(rng.integers(-5, 5))))
        ch = o
    kern = compiler.build(*chain)
    assert "dynamic fused chain" in kern.asm
    for fh, fw in draws:
        x = rand8(rng, (1 + int(fh > 0.5), c, 9 + round(19 * fh), 9 + round(19 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))


def test_a_chain_too_big_for_dm_goes_through_ddr_and_says_why():
    from nnpsim.config import Config

    rng = np.random.default_rng(23)
    chain = _fused_chain(rng)
    small = compiler.build(*chain, config=Config(dm_bytes=64 * 1024))
    assert "; not fused on chip: the intermediates of one image need" in small.asm
    x = rand8(rng, (2, 8, 40, 24))
    np.testing.assert_array_equal(small(x, check_races=True), small.op.reference(x))


def _fused_chain(rng, c=8, o=40):
    n, h, w = Dim("n", 1, 2), Dim("h", 4, 40), Dim("w", 4, 24)
    return [conv(rng, c, o, 3, 1, 1, 1, n=(1, 2), h=(4, 40), w=(4, 24)), ops.max_pool2d((n, o, h, w), 3, 1, 1),
            ops.conv2d((n, o, h, w), rng.integers(-20, 21, (12, o, 5, 5)), rng.integers(-99, 99, 12), padding=2,
                       multiplier=rng.integers(2**29, 2**31, 12), shift=rng.integers(20, 26, 12), lo=0)]


def test_fused_chain_keeps_intermediates_in_dm_and_reads_each_row_once():
    """Steps of a few rows, a remainder, two images: the DDR traffic is the input (each row read once) and
    the output only, and the result equals the chain through DDR."""
    rng = np.random.default_rng(21)
    chain = _fused_chain(rng)
    kern, ddr = compiler.build(*chain), compiler.build(*chain, fuse=False)
    x = rand8(rng, (2, 8, 37, 19))
    y = kern(x, check_races=True)
    np.testing.assert_array_equal(y, kern.op.reference(x))
    np.testing.assert_array_equal(ddr(x), y)
    assert kern.rows_per_tile[19] < 37                       # several tiles, the last a remainder
    traffic = kern.stats.memory["ddr"]
    assert traffic.written_bytes == y.nbytes
    consts = sum(len(blob) for blob in kern.files.values())     # weights, bias and (M, S) tables
    assert traffic.read_bytes - consts == x.nbytes
    assert ddr.stats.memory["ddr"].written_bytes > 2 * y.nbytes


def test_removing_any_wait_of_a_fused_dynamic_chain_is_caught():
    rng = np.random.default_rng(22)
    chain = _fused_chain(rng)
    kern = compiler.build(*chain)
    x = rand8(rng, (2, 8, 37, 19))
    np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))
    assert "nu.conv.rq" in kern.asm and "vu.requant" not in kern.asm     # no drain or VU waits
    kill_every_wait(kern, {"x": x}, at_least=10)


def test_a_chain_that_changes_a_dim_is_refused():
    rng = np.random.default_rng(10)
    h = Dim("h", 8, 16)
    down = conv(rng, 8, 8, 3, 2, 1, 1, n=(1, 1), h=(8, 16), w=(8, 16))
    with pytest.raises(CompileError, match=r"must keep the Dims so far: conv2d's output is \(n 8 h:-1:1 w:-1:1\)"):
        compiler.build(down, ops.relu((Dim("n", 1, 1), 8, h, Dim("w", 8, 16))))


def test_make_demo_runs_one_cnn_binary_at_three_resolutions(tmp_path, monkeypatch, capsys):
    from compiler.demos import dynamic_demo

    monkeypatch.setattr(dynamic_demo, "OUT", tmp_path)
    assert dynamic_demo.main([]) == 0
    out = capsys.readouterr().out
    assert out.count("bit-exact against numpy, no data race") == 3
    assert "one binary" in out and (tmp_path / dynamic_demo.BINARY).exists()


@pytest.mark.parametrize("seed", range(4))
def test_ld_runs_the_same_in_the_engine_and_the_stepper(seed):
    """A program whose DMA size, address and loop count come from ld: same cycles, registers, memory."""
    from nnpsim.cu import decode_for_engine
    from nnpsim.simulator import run_program
    from nnpsim.state import SPACE_DDR
    from nnpsim.stepper import step_program
    from tests.helpers.machine import assert_same, random_memory, small_config

    rng = np.random.default_rng(seed)
    cfg = small_config()
    words = [int(rng.integers(1, 200)), int(rng.integers(0, 64)) * 4, int(rng.integers(1, 5))]
    src = ".data\n.buffer args, int32, (3,)\n" + "".join(f".word {v}\n" for v in words) + \
        ".text\nmain:\n la r1, args\n ld r2, r1, 0\n ld r3, r1, 4\n ld r4, r1, 8\n" \
        " setp dma.size0, r2, 0\n setpi dma.src_stride0, 1\n setpi dma.dst_stride0, 1\n" \
        "again:\n dma ch0, dm[r3], ddr[r1]\n addi r3, r3, 256\n loop r4, again\n barrier Q_ALL\n halt\n"
    prog = assemble(src, {}, "ld.s")
    table = decode_for_engine(prog.code)
    mems = []
    for _ in range(2):
        mem = random_memory(cfg, seed)
        raw = np.array(words, dtype="<i4").view(np.uint8)
        mem.view(SPACE_DDR, prog.buffers["args"].addr, raw.size)[:] = raw
        mems.append(mem)
    (log_e, failure), (log_s, code) = run_program(table, mems[0], cfg, 10**6), step_program(table, mems[1], cfg, 10**6)
    mem_e, mem_s = mems
    assert failure is None and code == 0
    assert_same(log_e, mem_e, log_s, mem_s)
    assert list(log_e.registers[2:5]) == [words[0], words[1] + 256 * words[2], 0]


def test_ranges_too_large_for_the_machine_are_refused():
    rng = np.random.default_rng(11)
    w = rng.integers(-3, 3, (4, 8, 3, 3))
    q = dict(multiplier=np.full(4, 2**30), shift=np.full(4, 24))
    with pytest.raises(CompileError, match=r"spans more than 4096 widths"):
        compiler.build(ops.conv2d((1, 8, 8, Dim("w", 8, 9000)), w, None, **q))
    # within 32-bit DDR addresses (compiler.sizes), beyond the configured DDR: the ranges are what is too large
    with pytest.raises(CompileError, match=r"largest shape \(h <= 16384, w <= 16384\) need .* narrow the ranges"):
        compiler.build(ops.relu((1, 8, Dim("h", 1, 16384), Dim("w", 1, 16384))))


@pytest.mark.parametrize("channels", [1, 2])
def test_dynamic_kernels_on_fewer_dma_channels(channels):
    """Every dynamic kernel folds its four logical channels onto the machine's: still exact, race-free."""
    from nnpsim.config import Config

    rng = np.random.default_rng(12)
    cfg = Config(dma_channels=channels)
    n, h, w = Dim("n", 1, 2), Dim("h", 4, 40), Dim("w", 4, 40)
    chain = [conv(rng, 40, 40, 3, 1, 1, 1, n=(1, 2), h=(4, 40), w=(4, 40)), ops.relu((n, 40, h, w)),
             ops.max_pool2d((n, 40, h, w), 3, 1, 1)]
    kern = compiler.build(*chain, config=cfg)
    used = set(re.findall(r"(?m)^\s+dma\s+(ch\d)", kern.asm))
    assert used == {f"ch{k}" for k in range(channels)}
    for shape in [(2, 40, 37, 5), (1, 40, 4, 40)]:
        x = rand8(rng, shape)
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))


def test_a_chains_relu_goes_into_the_conv_before_it_even_when_their_ranges_miss():
    rng = np.random.default_rng(12)
    shape = (Dim("n", 1, 1), 8, Dim("h", 4, 20), Dim("w", 4, 20))
    c = conv(rng, 8, 8, n=(1, 1), h=(4, 20), w=(4, 20))
    kern = compiler.build(c, ops.relu(shape, 5))
    assert kern.asm.count("_drain:") == 1 and "L1_" not in kern.asm              # one program: folded
    x = rand8(rng, (1, 8, 13, 7))
    np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))
    low = ops.conv2d(shape, c.largest.weight, c.largest.bias, padding=1, multiplier=c.largest.multiplier,
                     shift=c.largest.shift, lo=-128, hi=-100)
    kern = compiler.build(low, ops.clip(shape, 20, 30))                            # [-128, -100] and [20, 30]
    assert kern.asm.count("drain:") == 1 and "L1_" not in kern.asm    # one program: the range is [20, 20]
    y = kern(x, check_races=True)
    np.testing.assert_array_equal(y, kern.op.reference(x))
    assert (y == 20).all()


def on_the_vu(op):
    """op's dynamic kernel requantising on the VU (drain, vu.requant.pc / .fpc), not by nu.conv.rq."""
    from compiler.dynamic.kernel import DynamicKernel
    from compiler.dynamic.conv import program as lower_conv
    from nnpsim.config import Config

    asm, files, rows = lower_conv(op, Config(), rq=False)
    return DynamicKernel(op, asm, assemble(asm, files, "dynamic.s"), Config(), rows, files)


def float_conv(rng, c, o, k=3, stride=1, h=(4, 24), w=(4, 24)):
    """A conv in the float form (scale=, QLinearConv's arithmetic): nu.conv.rq with rq_float = 1, or
    vu.requant.fpc, with float32 scales."""
    return ops.conv2d((Dim("n", 1, 2), c, Dim("h", *h), Dim("w", *w)), rng.integers(-20, 21, size=(o, c, k, k)),
                      rng.integers(-3000, 3000, size=o), stride=stride, padding=k // 2,
                      x_zp=int(rng.integers(-10, 10)), scale=rng.uniform(1e-4, 4e-3, size=o).astype(np.float32),
                      zp_out=int(rng.integers(-20, 20)))


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), o=st.integers(1, 70), k=st.sampled_from([1, 3]),
       stride=st.sampled_from([1, 2]), draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2,
                                                      max_size=3))
def test_float_form_conv_bit_exact_across_the_range(seed, c, o, k, stride, draws):
    rng = np.random.default_rng(seed)
    op = float_conv(rng, c, o, k, stride)
    kern, vu = compiler.build(op), on_the_vu(op)
    assert "setpi   nu.rq_float, 1" in kern.asm and "vu.requant.fpc" in vu.asm
    for fh, fw in draws:
        x = rand8(rng, (2, c, 4 + round(20 * fh), 4 + round(20 * fw)))
        for k in (kern, vu):
            np.testing.assert_array_equal(k(x, check_races=True), op.reference(x))


def test_removing_any_wait_of_a_float_form_conv_is_caught():
    rng = np.random.default_rng(14)
    op = float_conv(rng, 8, 40, h=(8, 40), w=(8, 24))
    x = rand8(rng, (2, 8, 37, 19))
    for kern, waits in ((compiler.build(op), 4), (on_the_vu(op), 6)):
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
        kill_every_wait(kern, {"x": x}, at_least=waits)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), groups=st.integers(1, 8), cg=st.integers(1, 6), og=st.integers(1, 6),
       dw=st.booleans(), k=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_grouped_and_depthwise_conv_bit_exact_across_the_range(seed, groups, cg, og, dw, k, stride, draws):
    """Depthwise (one channel per group, on nu.dwconv) and any other grouping (dense, block-diagonal)."""
    rng = np.random.default_rng(seed)
    if dw:
        groups, cg, og = groups * int(rng.integers(1, 9)), 1, 1
    c, o = groups * cg, groups * og
    op = ops.conv2d((Dim("n", 1, 2), c, Dim("h", 5, 25), Dim("w", 5, 25)), rng.integers(-20, 21, (o, cg, k, k)),
                    rng.integers(-5000, 5000, o), stride=stride, padding=k // 2, groups=groups,
                    x_zp=int(rng.integers(-10, 10)), multiplier=rng.integers(2**29, 2**31, o),
                    shift=rng.integers(20, 26, o), zp_out=int(rng.integers(-20, 20)))
    kern = compiler.build(op)
    assert ("nu.dwconv" in kern.asm) == (groups > 1 and cg == 1 and og == 1)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, 5 + round(20 * fh), 5 + round(20 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


def _inverted_residual(rng, s, c=8, e=40):
    """MobileNetV2's block without the add: 1x1 expand (relu) -> depthwise 3x3 (relu) -> 1x1 project."""
    n = s[0]
    q = lambda o: dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(20, 26, o))   # noqa: E731
    return [ops.conv2d(s, rng.integers(-20, 21, (e, c, 1, 1)), rng.integers(-99, 99, e), lo=0, **q(e)),
            ops.conv2d((n, e, s[2], s[3]), rng.integers(-20, 21, (e, 1, 3, 3)), rng.integers(-99, 99, e), padding=1,
                       groups=e, lo=0, x_zp=-128, **q(e)),
            ops.conv2d((n, e, s[2], s[3]), rng.integers(-20, 21, (c, e, 1, 1)), None, **q(c))]


def test_removing_any_wait_of_a_depthwise_conv_and_a_fused_inverted_residual_is_caught():
    rng = np.random.default_rng(24)
    dw = ops.conv2d((Dim("n", 1, 2), 40, Dim("h", 4, 40), Dim("w", 4, 24)), rng.integers(-20, 21, (40, 1, 3, 3)),
                    rng.integers(-99, 99, 40), padding=1, groups=40, multiplier=rng.integers(2**29, 2**31, 40),
                    shift=rng.integers(20, 26, 40))
    block = _inverted_residual(rng, (Dim("n", 1, 2), 8, Dim("h", 4, 40), Dim("w", 4, 24)))
    for kern, c in ((compiler.build(dw), 40), (compiler.build(*block), 8)):
        x = rand8(rng, (2, c, 37, 19))
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))
        kill_every_wait(kern, {"x": x}, at_least=6)


@pytest.mark.parametrize("sets", [2, 3, 4, 5])
@pytest.mark.parametrize("form", ["dense", "dense on the VU", "folded", "folded on the VU", "depthwise"])
def test_every_number_of_buffer_sets_is_bit_exact_and_needs_each_wait(form, sets):
    """A conv in 2 to 5 buffer sets, requantised by nu.conv.rq or drained to the VU (more than 2 sets:
    two accumulator sets, freed by a marker behind the drains; depthwise: tiles of one channel block),
    small tiles so that several are in flight: exact, race-free, and every wait needed."""
    from compiler.dynamic.kernel import DynamicKernel
    from compiler.dynamic.conv import program as lower_conv
    from nnpsim.config import Config

    rng = np.random.default_rng(60 + sets)
    c = {"dense": 12, "folded": 8, "depthwise": 40}[form.split()[0]]
    if form == "depthwise":
        op = ops.conv2d((Dim("n", 1, 2), c, Dim("h", 4, 40), Dim("w", 4, 24)), rng.integers(-20, 21, (c, 1, 3, 3)),
                        rng.integers(-99, 99, c), padding=1, groups=c, x_zp=-7,
                        multiplier=rng.integers(2**29, 2**31, c), shift=rng.integers(20, 26, c), zp_out=3)
    else:
        op = conv(rng, c=c, o=40, h=(4, 40), w=(4, 24))
    asm, files, rows = lower_conv(op, Config(), rows_per_tile=3, sets=sets, rq="VU" not in form)
    kern = DynamicKernel(op, asm, assemble(asm, files, "dynamic.s"), Config(), rows, files)
    assert ("nu.conv.rq" in asm) == (form in ("dense", "folded"))
    assert ("sem.wait s7" in asm) == (sets > 2 and form not in ("dense", "folded"))
    assert ("\nblock:" in asm) == (form == "depthwise" and sets > 2)
    for shape in ((2, c, 37, 19), (1, c, 4, 4), (1, c, 40, 24)):
        x = rand8(rng, shape)
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    if sets in (2, 4):
        kill_every_wait(kern, {"x": rand8(rng, (2, c, 37, 19))}, at_least=4 if "nu.conv.rq" in asm else 6)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 24), e=st.integers(1, 70),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_fused_inverted_residual_bit_exact_across_the_range(seed, c, e, draws):
    rng = np.random.default_rng(seed)
    block = _inverted_residual(rng, (Dim("n", 1, 2), c, Dim("h", 3, 30), Dim("w", 3, 30)), c, e)
    kern = compiler.build(*block)
    assert "dynamic fused chain" in kern.asm
    for fh, fw in draws:
        x = rand8(rng, (1 + int(fh > 0.5), c, 3 + round(27 * fh), 3 + round(27 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), kern.op.reference(x))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(["avg", "sum"]), c=st.integers(1, 70), k=st.integers(1, 4),
       stride=st.sampled_from([1, 2, 4]), pad=st.integers(0, 3),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_avg_and_sum_pool_bit_exact_across_the_range(seed, mode, c, k, stride, pad, draws):
    rng = np.random.default_rng(seed)
    pad = min(pad, k - 1)
    lo = max(1, k - 2 * pad)
    shape = (Dim("n", 1, 2), c, Dim("h", lo, lo + 24), Dim("w", lo, lo + 24))
    op = (ops.avg_pool2d(shape, k, stride, pad, x_zp=int(rng.integers(-128, 128))) if mode == "avg"
          else ops.sum_pool2d(shape, k, stride, pad))
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(24 * fh), lo + round(24 * fw)))
        y = kern(x, check_races=True)
        assert y.dtype == (np.int32 if mode == "sum" else np.int8)
        np.testing.assert_array_equal(y, op.reference(x))


@pytest.mark.parametrize("mode", ["avg", "sum"])
def test_removing_any_wait_of_a_dynamic_avg_or_sum_pool_is_caught(mode):
    rng = np.random.default_rng(25)
    shape = (Dim("n", 1, 2), 40, Dim("h", 4, 40), Dim("w", 4, 24))
    op = ops.avg_pool2d(shape, 3, 1, 1, x_zp=9) if mode == "avg" else ops.sum_pool2d(shape, 3, 1, 1)
    kern = compiler.build(op)
    x = rand8(rng, (2, 40, 37, 19))
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


@pytest.mark.parametrize("form", ["integer", "float"])
def test_a_conv_whose_weights_exceed_wbuf_runs_in_parts(form):
    """Output channels in parts whose weights fit WBUF, one after another, each writing its channels."""
    from nnpsim.config import Config

    rng = np.random.default_rng(28)
    o = 200
    q = (dict(scale=rng.uniform(1e-4, 1e-2, o).astype(np.float32)) if form == "float" else
         dict(multiplier=rng.integers(2**29, 2**31, o), shift=rng.integers(20, 26, o)))
    op = ops.conv2d((Dim("n", 1, 2), 64, Dim("h", 1, 12), Dim("w", 1, 12)), rng.integers(-20, 21, (o, 64, 3, 3)),
                    rng.integers(-999, 999, o), padding=1, **q)
    kern = compiler.build(op, config=Config(wbuf_bytes=64 * 1024))      # 3 of the 7 blocks a part
    assert kern.asm.count("; ---- part") == 3
    for shape in [(1, 64, 1, 1), (2, 64, 12, 7), (1, 64, 5, 12)]:
        x = rand8(rng, shape)
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


# ---- strides that are not powers of two; average pools with per-position counts and in float ----

def test_mulhu_divides_every_size_in_range_by_every_stride_exactly():
    """dims.reciprocal's claim: floor(n / d) is the high word of n * ceil(2**32 / d) for n < 2**21, d < 2**11
    (every n for a few d, random n and the ends for every d).  tests/nnpsim/test_engine.py checks the simulator's
    mulhu against Python on random words."""
    from compiler.dims import MAX_STRIDE, reciprocal

    rng = np.random.default_rng(40)
    every = np.arange(1 << 21, dtype=np.uint64)
    for d in range(2, MAX_STRIDE):
        n = every if d in (3, 7, 1000, MAX_STRIDE - 1) else np.concatenate(
            [rng.integers(0, 1 << 21, 2000).astype(np.uint64), every[:d * 3], every[-d * 3:]])
        np.testing.assert_array_equal((n * np.uint64(reciprocal(d))) >> np.uint64(32), n // np.uint64(d))
    with pytest.raises(CompileError, match="not by 2048"):
        reciprocal(MAX_STRIDE)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), o=st.integers(1, 40), k=st.sampled_from([1, 3, 5]),
       stride=st.sampled_from([3, 5, 6, (3, 2), (2, 3)]), padding=st.integers(0, 2),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_conv_of_any_stride_bit_exact_across_the_range(seed, c, o, k, stride, padding, draws):
    rng = np.random.default_rng(seed)
    padding = min(padding, k - 1)
    lo = max(1, k - 2 * padding)
    op = conv(rng, c, o, k, stride, padding, 1, n=(1, 2), h=(lo, lo + 25), w=(lo, lo + 25))
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(25 * fh), lo + round(25 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), mode=st.sampled_from(["max", "sum", "avg", "avg_exclude", "favg",
                                                               "favg_exclude"]),
       c=st.integers(1, 70), k=st.integers(1, 5), stride=st.sampled_from([1, 2, 3, 5, 6]), pad=st.integers(0, 2),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_pools_of_any_stride_and_averages_of_either_count_bit_exact(seed, mode, c, k, stride, pad, draws):
    """Max, sum and average pools (integer and float form, count_include_pad either way) with strides
    that need the divide (3, 5, 6): bit-exact with numpy at random in-range shapes, race-checked."""
    rng = np.random.default_rng(seed)
    pad = min(pad, k - 1)
    lo = max(1, k - 2 * pad) + (1 if mode.startswith("favg") and not pad else 0)   # never the global window
    shape = (Dim("n", 1, 2), c, Dim("h", lo, lo + 30), Dim("w", lo, lo + 30))
    zp = int(rng.integers(-128, 128))
    floats = dict(scale_x=np.float32(rng.uniform(0.01, 0.2)), scale_out=np.float32(rng.uniform(0.01, 0.2)),
                  zp_out=int(rng.integers(-20, 20))) if mode.startswith("favg") else {}
    if mode in ("max", "sum"):
        op = (ops.max_pool2d if mode == "max" else ops.sum_pool2d)(shape, k, stride, pad)
    else:
        op = ops.avg_pool2d(shape, k, stride, pad, count_include_pad=not mode.endswith("exclude"), x_zp=zp,
                            **floats)
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(30 * fh), lo + round(30 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


@pytest.mark.parametrize("what", ["conv stride 3", "max pool 3x3/3", "avg pool exclude", "float avg pool exclude"])
def test_removing_any_wait_of_the_new_dynamic_paths_is_caught(what):
    rng = np.random.default_rng(42)
    shape = (Dim("n", 1, 2), 40, Dim("h", 4, 120), Dim("w", 4, 30))
    op = {"conv stride 3": lambda: conv(rng, c=8, o=40, stride=3, h=(8, 120), w=(8, 30)),
          "max pool 3x3/3": lambda: ops.max_pool2d(shape, 3, 3, 1),
          "avg pool exclude": lambda: ops.avg_pool2d(shape, 3, 2, 1, count_include_pad=False, x_zp=5),
          "float avg pool exclude": lambda: ops.avg_pool2d(shape, 3, 1, 1, count_include_pad=False, x_zp=-3,
                                                            scale_x=np.float32(0.05), scale_out=np.float32(0.04),
                                                            zp_out=2)}[what]()
    kern = compiler.build(op)
    x = rand8(rng, (2, op.x_shape[1], 113, 23))           # several tiles, a remainder, two images
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


# ---- summing pools in tiles of whole planes; averages without padding counts split as the static lowering ----

def _avg_exclude(rng, shape, k, stride, pad, float_form):
    floats = dict(scale_x=np.float32(rng.uniform(0.01, 0.2)), scale_out=np.float32(rng.uniform(0.01, 0.2)),
                  zp_out=int(rng.integers(-20, 20))) if float_form else {}
    return ops.avg_pool2d(shape, k, stride, pad, count_include_pad=False, x_zp=int(rng.integers(-128, 128)),
                          **floats)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 40), k=st.integers(2, 4), stride=st.sampled_from([1, 2, 3]),
       pad=st.integers(1, 2), float_form=st.booleans(),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_averages_without_padding_counts_split_bit_exact_across_the_range(seed, c, k, stride, pad, float_form,
                                                                          draws):
    """An average that does not count the padding (integer or float form) on the sliding-window engine: its
    windows without padding on one count, its border bands on the counts, the CU working out where they end
    per tile; tiles of whole planes (4 channels or more, the counts made once) or of rows (the counts per
    tile); shapes drawn in range down to ones where no window is free of padding: bit-exact, race-checked."""
    rng = np.random.default_rng(seed)
    pad = min(pad, k - 1)
    lo = k - pad                             # the smallest shape has one row and column of windows without padding
    shape = (Dim("n", 1, 2), c, Dim("h", lo, lo + 30), Dim("w", lo, lo + 30))
    op = _avg_exclude(rng, shape, k, stride, pad, float_form)
    kern = compiler.build(op)
    assert ("whole planes of" in kern.asm) == (c >= 4)
    if "vu.slide" in kern.asm:
        assert "pool_whole" in kern.asm      # split_windows: on the engine, the smallest shape's windows fit
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, lo + round(30 * fh), lo + round(30 * fw)))
        np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))


@pytest.mark.parametrize("what", ["exclude, whole planes", "float exclude, rows", "exclude, rows", "sum, whole planes",
                                  "float avg, whole planes", "avg, rows"])
def test_removing_any_wait_of_the_split_and_whole_plane_pools_is_caught(what):
    """The sync mutation test on the split average (per-tile counts, or made once) and on tiles of whole planes
    (37 channels: groups of 10 and a last of 7; loads on ch0 and ch1 in turn), two images each."""
    rng = np.random.default_rng(44)
    c = 3 if what.endswith("rows") else 37
    shape = (Dim("n", 1, 2), c, Dim("h", 2, 60), Dim("w", 2, 30))
    floats = dict(scale_x=np.float32(0.05), scale_out=np.float32(0.04), zp_out=2)
    op = {"exclude, whole planes": lambda: _avg_exclude(rng, shape, 3, 1, 1, False),
          "float exclude, rows": lambda: _avg_exclude(rng, shape, 3, 2, 1, True),
          "exclude, rows": lambda: _avg_exclude(rng, shape, 3, 1, 1, False),
          "sum, whole planes": lambda: ops.sum_pool2d(shape, 2, 2, 0),
          "float avg, whole planes": lambda: ops.avg_pool2d(shape, 3, 2, 1, x_zp=-3, **floats),
          "avg, rows": lambda: ops.avg_pool2d(shape, 3, 1, 1, x_zp=7)}[what]()
    kern = compiler.build(op)
    assert ("whole planes of 10 channels" in kern.asm) == what.endswith("whole planes")
    assert ("pool_whole" in kern.asm) == ("exclude" in what)
    x = rand8(rng, (2, c, 57, 23))
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)


def test_a_relu_after_a_max_pool_goes_into_the_conv_before_the_pool():
    """conv -> max pool -> relu: the relu is folded into the conv's output range (a clamp commutes with max),
    so the chain stays fused on chip; the same with fuse=False; both equal to numpy."""
    rng = np.random.default_rng(43)
    c = conv(rng, c=8, o=16, h=(6, 30), w=(6, 30))
    shape = (Dim("n", 1, 2), 16, Dim("h", 6, 30), Dim("w", 6, 30))
    chain = (c, ops.max_pool2d(shape, 3, 1, 1), ops.relu(shape, c.largest.zp_out))
    kern = compiler.build(*chain)
    assert "not fused on chip" not in kern.asm
    unfused = compiler.build(*chain, fuse=False)
    for s in [(1, 8, 6, 6), (2, 8, 30, 17), (1, 8, 13, 29)]:
        x = rand8(rng, s)
        ref = chain[2].static({"n": s[0], "h": s[2], "w": s[3]}).reference(
            chain[1].static({"n": s[0], "h": s[2], "w": s[3]}).reference(c.reference(x)))
        np.testing.assert_array_equal(kern(x, check_races=True), ref)
        np.testing.assert_array_equal(unfused(x, check_races=True), ref)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), c=st.integers(1, 300), float_form=st.booleans(),
       draws=st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1), st.floats(0, 1)), min_size=2, max_size=3))
def test_global_average_pool_bit_exact_across_the_range(seed, c, float_form, draws):
    """The window is the actual plane: integer form divided by h * w (counted by the VU), float form by
    QLinearGlobalAveragePool's factor for that plane size."""
    rng = np.random.default_rng(seed)
    floats = dict(scale_x=np.float32(rng.uniform(0.01, 0.2)), scale_out=np.float32(rng.uniform(0.01, 0.2)),
                  zp_out=int(rng.integers(-20, 20))) if float_form else {}
    op = ops.global_avg_pool2d((Dim("n", 1, 2), c, Dim("h", 1, 20), Dim("w", 1, 20)),
                               x_zp=int(rng.integers(-128, 128)), **floats)
    kern = compiler.build(op)
    for fn, fh, fw in draws:
        x = rand8(rng, (1 + round(fn), c, 1 + round(19 * fh), 1 + round(19 * fw)))
        y = kern(x, check_races=True)
        assert y.shape == x.shape[:2] + (1, 1)
        np.testing.assert_array_equal(y, op.reference(x))


@pytest.mark.parametrize("float_form", [False, True])
def test_removing_any_wait_of_a_dynamic_global_average_pool_is_caught(float_form):
    rng = np.random.default_rng(46)
    floats = dict(scale_x=np.float32(0.03), scale_out=np.float32(0.05), zp_out=1) if float_form else {}
    op = ops.global_avg_pool2d((Dim("n", 1, 3), 700, Dim("h", 2, 40), Dim("w", 2, 40)), x_zp=6, **floats)
    kern = compiler.build(op)
    x = rand8(rng, (3, 700, 37, 29))                       # several channel tiles, a remainder, three images
    np.testing.assert_array_equal(kern(x, check_races=True), op.reference(x))
    kill_every_wait(kern, {"x": x}, at_least=3)
