"""The persistent compile cache (compiler/compile_cache.py) and the builds that use it (compiler.search,
compiler.network.build): a hit gives a cold compile's bytes, any change of op, shape, option,
configuration or compiler source misses, a damaged entry is recompiled, concurrent writers leave
whole entries.  The suite runs with the cache off (tests/conftest.py); these tests turn it on, each in
a directory of its own."""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import pickle
import shutil
from dataclasses import replace
from functools import lru_cache
from pathlib import Path

import numpy as np
import onnx
import pytest

import compiler
from compiler import compile_cache, models, search
from compiler.cli_network import main
from compiler.graph import Graph
from compiler.network import build as network_build
from compiler.network import parallel
from nnpsim.config import Config
from tests.helpers.networks import bottleneck, conv_op, residual_net


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """The cache on, in a fresh directory."""
    monkeypatch.setenv("NNP_CACHE", "1")
    monkeypatch.setenv("NNP_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def binary(built) -> bytes:
    return built.program.to_bytes()


@lru_cache(maxsize=None)
def cold_residual(seed: int = 0) -> bytes:
    """The cold compile of residual_net(seed)'s binary (the same in every test: computed once)."""
    return binary(cold(residual_net(np.random.default_rng(seed))))


def cold(*args, **kw):
    """build() with the cache off: the compiler's own answer."""
    with compile_cache.off():
        return compiler.build(*args, **kw)


def files(root: Path, kind: str) -> list[Path]:
    return sorted(p for p in (root / kind).glob("*/*") if not p.name.startswith(".tmp-"))


def no_search(monkeypatch) -> None:
    """Any full schedule search from here on fails the test (a hit builds only the chosen candidate)."""
    def refuse(*a, **kw):
        raise AssertionError("a full search ran")
    monkeypatch.setattr(search, "all_candidates", refuse)


def no_network_build(monkeypatch) -> None:
    def refuse(*a, **kw):
        raise AssertionError("the network was compiled")
    monkeypatch.setattr(network_build, "_build_network", refuse)


def with_weight(graph: Graph, node: str, delta: int) -> Graph:
    """A copy of graph whose node's first weight element is moved by delta."""
    out = Graph(graph.name)
    out.values, out.inputs, out.outputs = dict(graph.values), list(graph.inputs), list(graph.outputs)
    out.nodes = []
    for n in graph.nodes:
        if n.name == node:
            w = n.op.weight.copy()
            w.flat[0] += delta
            n = replace(n, op=replace(n.op, weight=w))
        out.nodes.append(n)
    return out


def conv(shape=(1, 16, 12, 12), seed=3):
    return conv_op(np.random.default_rng(seed), shape, 24, relu=True)


# ------------------------------------------------------------------ hits are the cold compile

def test_a_network_hit_gives_the_bytes_of_a_cold_compile(cache, monkeypatch):
    g = residual_net(np.random.default_rng(0))
    with compile_cache.off():
        lib = compiler.build(g)
        want = binary(lib)
    assert not cache.exists()                       # off: nothing written
    assert binary(compiler.build(g)) == want        # cold, filling the cache
    assert files(cache, "network") and files(cache, "search")
    with monkeypatch.context() as m:
        no_network_build(m)
        hit = compiler.build(g)
    assert binary(hit) == want and hit.asm == lib.asm and hit.files == lib.files and lib.files
    # the weights' .incbin files are read back from the program's data, not stored a second time
    entry = compile_cache.get("network", files(cache, "network")[0].name, network_build._whole_entry)
    assert entry[3] == dict.fromkeys(lib.files)
    assert not network_build._whole_entry(entry[:3] + ({"absent.bin": None},) + entry[4:])   # not in the program
    shutil.rmtree(cache / "network")                # the choices alone: every kernel rebuilt from its choice
    no_search(monkeypatch)
    assert binary(compiler.build(g)) == want


def test_a_kernel_hit_gives_the_bytes_of_a_cold_compile(cache, monkeypatch):
    op = conv()
    want = cold(op)
    assert compiler.build(op).asm == want.asm
    no_search(monkeypatch)
    hit = compiler.build(op)
    assert hit.asm == want.asm and hit.program.to_bytes() == want.program.to_bytes()
    assert str(hit.schedule) == str(want.schedule)


def test_a_sweep_point_sharing_layers_searches_only_the_changed_one(cache, monkeypatch):
    g = residual_net(np.random.default_rng(0))
    first = binary(compiler.build(g))
    g2 = with_weight(g, "conv2", 1)
    want = binary(cold(g2))
    full = []
    real = search.all_candidates
    monkeypatch.setattr(search, "all_candidates", lambda *a, **kw: full.append(a[0]) or real(*a, **kw))
    assert binary(compiler.build(g2)) == want != first
    # the ops a search sees are the graph's, or copies in another layout that keep their weight arrays
    searched = {id(o.weight) for ops in full for o in ops if hasattr(o, "weight")}
    weight = {n.name: id(n.op.weight) for n in g2.nodes if hasattr(n.op, "weight")}
    assert weight["conv2"] in searched              # the changed layer is searched again ...
    assert weight["fc"] not in searched             # ... an unchanged one is not


# ------------------------------------------------------------------ what a key depends on

@pytest.mark.parametrize("change", ["weight", "bias", "shape", "zero point", "config", "hint", "source"])
def test_any_change_of_op_shape_option_config_or_source_misses(cache, monkeypatch, change):
    op, cfg = conv(), Config()
    base = compile_cache.key("search", (op,), cfg, None, None)
    args = [(op,), cfg, None, None]
    if change == "weight":
        w = op.weight.copy()
        w[0, 0, 0, 0] += 1
        args[0] = (replace(op, weight=w),)
    elif change == "bias":
        b = op.bias.copy()
        b[-1] -= 1
        args[0] = (replace(op, bias=b),)
    elif change == "shape":
        args[0] = (conv((1, 16, 12, 13)),)
    elif change == "zero point":
        args[0] = (replace(op, zp_out=op.zp_out + 1),)
    elif change == "config":
        args[1] = replace(cfg, vbuf_bytes=cfg.vbuf_bytes // 2)
    elif change == "hint":
        args[2] = 0
    else:
        monkeypatch.setattr(compile_cache, "source_digest", lambda: "an edited compiler")
    assert compile_cache.key("search", *args) != base
    if change != "source":          # and the same inputs, made again, hit
        assert compile_cache.key("search", (conv(),), Config(), None, None) == base


def test_changed_inputs_miss_and_compile_as_cold(cache):
    op = conv()
    compiler.build(op)
    w = op.weight.copy()
    w[1, 2, 0, 1] = -w[1, 2, 0, 1] - 1
    for other, cfg in ((replace(op, weight=w), None), (conv((1, 16, 9, 12)), None),
                       (op, replace(Config(), wbuf_bytes=Config().wbuf_bytes // 4))):
        before = len(files(cache, "search"))
        assert compiler.build(other, config=cfg).asm == cold(other, config=cfg).asm
        assert len(files(cache, "search")) > before


def test_a_network_key_covers_the_graph_and_the_build_options():
    g, cfg = residual_net(np.random.default_rng(0)), Config()
    base = compile_cache.key("network", g, cfg, True, True, True)
    assert base == compile_cache.key("network", residual_net(np.random.default_rng(0)), cfg, True, True, True)
    others = [compile_cache.key("network", g, cfg, *flags) for flags in ((False, True, True), (True, False, True),
                                                                           (True, True, False))]
    others += [compile_cache.key("network", with_weight(g, "fc", -1), cfg, True, True, True),
               compile_cache.key("network", g, replace(cfg, nu_count=2, vu_count=2), True, True, True)]
    g.nodes[0].info["renamed"] = True           # what the program's notes print counts too
    others.append(compile_cache.key("network", g, cfg, True, True, True))
    assert base not in others and len(set(others)) == len(others)


def test_keys_are_exact_and_refuse_what_they_cannot_encode():
    k = lambda *v: compile_cache.key("t", *v)    # noqa: E731
    assert len({k(1), k(1.0), k(True), k("1"), k(np.int64(1)), k(np.float32(1))}) == 6
    assert k(0.0) != k(-0.0) and k(0.1) != k(0.1 + 2 ** -56)
    a = np.arange(6, dtype=np.int8)
    assert k(a) != k(a.astype(np.int16)) and k(a) != k(a.reshape(2, 3)) and k(a) == k(a.copy())
    assert k({"a": 1, "b": 2}) != k({"b": 2, "a": 1}) and k((1, 2)) != k([1, 2])
    # a transposed matrix is hashed in its own order, tagged: its memory holds what a C-ordered matrix of its
    # shape would, but not the same values
    m = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert k(m.T) == k(m.copy().T) and k(m.T) != k(m.reshape(4, 3)) and k(m.T) != k((m + (m == 5)).T)
    assert k(m[:, ::2]) == k(np.ascontiguousarray(m[:, ::2])) and k(m[:, ::2]) != k(m[:, 1::2])
    assert k(lambda: 0) is None and k(np.array([object()])) is None


def test_the_switch_and_the_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("NNP_CACHE_DIR", str(tmp_path / "c"))
    for value in ("0", "off"):
        monkeypatch.setenv("NNP_CACHE", value)
        compile_cache.put("search", "ab" * 32, (1, 2))
        assert not compile_cache.enabled() and not (tmp_path / "c").exists()
    monkeypatch.setenv("NNP_CACHE", "1")
    with compile_cache.off():
        compile_cache.put("search", "ab" * 32, (1, 2))
        assert not (tmp_path / "c").exists()
    compile_cache.put("search", "ab" * 32, (1, 2))
    assert compile_cache.get("search", "ab" * 32) == (1, 2)
    monkeypatch.delenv("NNP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.directory() == tmp_path / "xdg" / "nnp"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert compile_cache.directory() == tmp_path / "home" / ".cache" / "nnp"


# ------------------------------------------------------------------ damaged entries

def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    if how == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif how == "flipped":
        path.write_bytes(data[:-7] + bytes([data[-7] ^ 1]) + data[-6:])
    elif how == "garbage":
        path.write_bytes(os.urandom(len(data)))
    elif how == "empty":
        path.write_bytes(b"")
    elif how == "foreign":           # whole and digested, but not what the build writes
        payload = pickle.dumps({"not": "an entry"})
        path.write_bytes(compile_cache.MAGIC + compile_cache._HEAD.pack(len(payload), hashlib.sha256(payload).digest())
                         + payload)
    else:
        path.unlink()
        path.mkdir()
        (path / "x").write_text("a directory in the entry's place")


HOW = ("truncated", "flipped", "garbage", "empty", "foreign", "directory")


def test_a_damaged_entry_is_recompiled_never_trusted(cache):
    g = residual_net(np.random.default_rng(0))
    want = cold_residual()
    compiler.build(g)
    (net,) = files(cache, "network")
    for how in HOW:
        damage(net, how)
        assert compile_cache.get("network", net.name, network_build._whole_entry) is None
        assert binary(compiler.build(g)) == want
        if how == "directory":
            shutil.rmtree(net)
        else:                       # rewritten whole
            assert compile_cache.get("network", net.name, network_build._whole_entry) is not None
    shutil.rmtree(cache / "network")
    for k, p in enumerate(files(cache, "search")):      # every way at once, one per search entry
        damage(p, HOW[k % len(HOW)])
    assert binary(compiler.build(g)) == want
    assert binary(compiler.build(g)) == want        # from the network entry it wrote


# ------------------------------------------------------------------ concurrent writers

def _writer(root: str, seed: int, rounds: int) -> None:
    os.environ.update(NNP_CACHE="1", NNP_CACHE_DIR=root)
    rng = np.random.default_rng(seed)
    for r in range(rounds):
        n = int(rng.integers(1, 200_000))
        compile_cache.put("search", f"{r % 4:02d}" + "0" * 62, bytes([seed]) * n)
        got = compile_cache.get("search", f"{(r + 1) % 4:02d}" + "0" * 62)
        if got is not None and (len(set(got)) != 1 or got[0] not in (1, 2)):
            os._exit(3)            # a torn or mixed entry read


def _network(root: str) -> None:
    os.environ.update(NNP_CACHE="1", NNP_CACHE_DIR=root)
    compiler.build(residual_net(np.random.default_rng(0)))


def test_two_processes_filling_the_cache_at_once_leave_whole_entries(cache, monkeypatch):
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(str(cache), s, 150)) for s in (1, 2)]
    procs += [ctx.Process(target=_network, args=(str(cache),)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0] * 4
    assert not [p for p in cache.rglob(".tmp-*")]          # no temporary file left behind
    for p in files(cache, "search") + files(cache, "network"):
        assert compile_cache.get(p.parent.parent.name, p.name) is not None, p
    g = residual_net(np.random.default_rng(0))
    want = cold_residual()
    no_network_build(monkeypatch)
    assert binary(compiler.build(g)) == want


def test_prune_keeps_the_newest_within_the_bound(cache):
    for n in range(6):
        compile_cache.put("search", f"{n:02d}" + "1" * 62, b"x" * 10_000)
        p = compile_cache.path_of("search", f"{n:02d}" + "1" * 62)
        os.utime(p, (1_000_000 + n, 1_000_000 + n))
    assert compile_cache.prune(35_000) > 0
    kept = sorted(p.name[:2] for p in files(cache, "search"))
    assert kept == ["03", "04", "05"]
    assert sum(e[1] for e in compile_cache.entries()) <= 35_000


# ------------------------------------------------------------------ searches ahead on a pool

def test_parallel_and_serial_builds_give_the_same_program(monkeypatch):
    """The cache off: the pool's searches reach the build only as remembered entries, and the program
    is the serial build's byte for byte, fused and one kernel per node."""
    monkeypatch.setattr(parallel, "MIN_SEARCHES", 1)
    g = bottleneck(np.random.default_rng(2), c=32, hw=8)
    serial = {fuse: binary(cold(g, fuse=fuse)) for fuse in (True, False)}
    monkeypatch.setenv("NNP_JOBS", "2")
    cfg = Config().validate()
    ahead = parallel.prefetch(g, cfg, True, True)
    assert len(ahead) >= 4 and all(search.valid_choice(v) for v in ahead.values())
    for fuse in (True, False):
        assert binary(cold(g, fuse=fuse)) == serial[fuse]


def test_the_number_of_jobs(monkeypatch):
    monkeypatch.setenv("NNP_JOBS", "3")
    assert parallel.jobs() == 3
    monkeypatch.setenv("NNP_JOBS", "0")
    assert parallel.jobs() == 1
    monkeypatch.setenv("NNP_JOBS", "many")
    with pytest.raises(compiler.CompileError, match="NNP_JOBS"):
        parallel.jobs()
    monkeypatch.setenv("NNP_JOBS", "1")        # one job: no pool, nothing ahead
    assert parallel.prefetch(residual_net(np.random.default_rng(0)), Config().validate()) == {}


def test_nnpc_compile_no_cache_neither_reads_nor_writes_it(cache, tmp_path, capsys):
    model = tmp_path / "tiny.onnx"
    onnx.save(models.tiny(), str(model))
    assert main(["compile", str(model), "-o", str(tmp_path / "a.nnp"), "--no-cache"]) == 0
    assert not cache.exists()
    assert main(["compile", str(model), "-o", str(tmp_path / "b.nnp")]) == 0
    assert files(cache, "network")
    assert (tmp_path / "a.nnp").read_bytes() == (tmp_path / "b.nnp").read_bytes()
