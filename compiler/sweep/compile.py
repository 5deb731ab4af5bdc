"""One workload compiled for one configuration, through the compile cache.

Two levels of cache, both keyed by a hash that includes the whole configuration and the
toolchain version (compiler.sweep.points.toolchain_version):

* program: the workload's ELF binary and what running it needs (JSON), keyed by
  (workload, configuration).  A hit skips compiling altogether: a point run again with a
  new results file, or a point whose simulation was interrupted.
* choice: per fused chain of ops (a network's layer, or a single layer), the tiling the
  compiler chose, keyed by (compiler.structure.tiling_key of the chain, configuration).  The
  tiling search is almost all of the compile time (docs/performance.md), and it depends on
  the chain's kinds, shapes and structure, not on its weights, so a network's repeated
  layers share one entry: ResNet-50's 56 chains are 27 distinct per configuration (its 53
  conv chains 24), and a chain seen in another workload (ResNet-18 and ResNet-50 share a stem) or an
  earlier run costs only building the chosen tiling.

build() takes no tiling hints, so while a sweep compiles, calls to compiler.search.search
(the schedule search of a layer, and of every chain a network prices or builds) go through
`_search_with_cache` (installed once; it passes straight through unless this thread is
compiling for a sweep).  Given a chain's choice, search builds only that candidate; the result is the one a cold compile
gives (tests/compiler/sweep/test_runner.py compares the assembly).
"""
from __future__ import annotations

import contextlib
import contextvars
import threading
from dataclasses import dataclass

from isa_spec.program import BinaryError, Program
from nnpsim.config import Config

from .. import search as search_mod
from ..build import build
from ..library import Library, read_meta
from ..structure import tiling_key
from .cache import CompileCache
from .points import digest, toolchain_version

ON_CHIP = ("dm", "ibuf", "wbuf", "abuf", "vbuf")


@dataclass
class Compiled:
    """A compiled workload, fresh or from the cache: the program and what a row reports of it."""

    program: object
    info: dict              # JSON-able: predicted, bound, macs, high-water marks, buffer names, ...
    program_hit: bool = False
    choice_hits: int = 0
    choice_lookups: int = 0


@dataclass
class _Recorder:
    """Per compile: the cache to consult and what the chains' schedules used."""

    cache: CompileCache
    cfg: Config
    hits: int = 0
    lookups: int = 0


_ACTIVE: contextvars.ContextVar[_Recorder | None] = contextvars.ContextVar("sweep_compile", default=None)
_INSTALL = threading.Lock()


def _search_with_cache(original, ops, cfg, choice=None, *args, **kwargs):
    """compiler.search.search, with the chain's tiling looked up in (and stored to) the sweep's cache."""
    rec = _ACTIVE.get()
    if rec is None or cfg != rec.cfg:
        return original(ops, cfg, choice, *args, **kwargs)
    key = digest({"chain": repr(tiling_key(tuple(ops))), "config": repr(cfg), "toolchain": toolchain_version()})
    entry = rec.cache.get("choice", key)
    cached = entry[0]["choice"] if entry is not None else None
    result = original(ops, cfg, choice if choice is not None else cached, *args, **kwargs)
    rec.lookups += 1
    rec.hits += cached is not None
    if cached != result[3]:
        rec.cache.put("choice", key, {"choice": int(result[3])})
    return result


def _install() -> None:
    with _INSTALL:
        if getattr(search_mod.search, "sweep_cache", False):
            return
        original = search_mod.search

        def search(ops, cfg, choice=None, *args, **kwargs):
            return _search_with_cache(original, ops, cfg, choice, *args, **kwargs)

        search.__doc__ = original.__doc__
        search.sweep_cache = True
        search_mod.search = search


def _high_water(usage: dict[str, int]) -> dict[str, int]:
    """Per kind of memory (ibuf0 and ibuf1 are ibuf) the most bytes any one of them held."""
    out = {u: 0 for u in ON_CHIP}
    for memory, used in usage.items():
        unit = memory.rstrip("0123456789")
        out[unit] = max(out.get(unit, 0), int(used))
    return out


@contextlib.contextmanager
def _recording(cache: CompileCache, cfg: Config):
    _install()
    rec = _Recorder(cache, cfg)
    token = _ACTIVE.set(rec)
    try:
        yield rec
    finally:
        _ACTIVE.reset(token)


def compile_workload(workload, cfg: Config, cache: CompileCache, build_source) -> Compiled:
    """The workload's program for cfg: from the cache, or compiled (build_source() gives its graph or ops)."""
    key = digest({"workload": workload.key, "config": repr(cfg), "toolchain": toolchain_version()})
    entry = cache.get("program", key)
    if entry is not None:
        try:
            return Compiled(Program.from_bytes(entry[1][".elf"]), entry[0], program_hit=True)
        except BinaryError:
            cache.stats.corrupt += 1        # sound checksum, unreadable binary (another ISA): recompile
    with _recording(cache, cfg) as rec:
        source = build_source()
        if workload.kind == "layer":
            compiled = _compile_chain(source, cfg)
        else:
            compiled = _compile_graph(source, cfg)
    compiled.choice_hits, compiled.choice_lookups = rec.hits, rec.lookups
    cache.put("program", key, compiled.info, {".elf": compiled.program.to_bytes()})
    return compiled


def _compile_chain(chain, cfg: Config) -> Compiled:
    k = build(*chain, config=cfg)
    info = {"predicted_cycles": int(k.predicted_cycles), "bound_cycles": int(k.roofline_cycles),
            "macs": sum(int(getattr(op, "macs", 0)) for op in chain),
            "inputs": k.input_names, "output": k.ir.output.name, "layers": 1, "high_water": _high_water(k.usage)}
    return Compiled(k.program, info)


def _compile_graph(graph, cfg: Config) -> Compiled:
    lib = build(graph, config=cfg)
    info = {"predicted_cycles": int(lib.predicted_cycles),
            "bound_cycles": sum(int(layer["bound_cycles"]) for layer in lib.layers),
            "macs": sum(int(layer["macs"]) for layer in lib.layers), "layers": len(lib.layers),
            "high_water": _high_water(lib.meta["onchip_peak"])}
    return Compiled(lib.program, info)


def library(compiled: Compiled, cfg: Config) -> Library:
    """The network a compiled graph workload is, for compiler.GraphModule (its meta read from the binary)."""
    return Library(compiled.program, read_meta(compiled.program, cfg), cfg,
                   predicted_cycles=compiled.info["predicted_cycles"])
