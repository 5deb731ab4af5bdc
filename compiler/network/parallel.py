"""A network's schedule searches computed ahead, in parallel, on the machine's cores.

The network build (network.build) asks for its kernels' searches one after another, each through
search.search, which is a pure function of the chain, the configuration and the hint.  Before the
build starts, the searches it will ask for first (every kernel of the partition and, when fusing,
every run of two or more linked kernels fusion may price, in NCHW and NHWC, once per tiling
structure: ahead) run on a process pool; their answers (the winner's position and its price) are
handed to the build as remembered entries of the compile cache (compile_cache.remembered), and the
build then runs exactly as it does alone.  The programs are therefore the serial build's, byte for
byte, whatever the pool does; a search the pool did not foresee is made by the build itself.

NNP_JOBS sets the processes (1: none, the build alone); unset, one per core this process may run on,
except in a process that is itself some pool's worker (a sweep's point: its pool already has the
cores).  A build with fewer than MIN_SEARCHES searches to make ahead makes them itself: a pool's
start costs more than it saves on a small network.
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor

from nnpsim.config import Config

from .. import compile_cache, search
from ..errors import CompileError
from ..ops import Op
from ..structure import tiling_key
from . import fusion
from .layout_plan import planned
from .partition import partition, per_node
from .storage import alias

MIN_SEARCHES = 12
AHEAD_LAYOUTS = ("nchw", "nhwc")   # a blocked layout's search takes NHWC's choice as its hint: not ahead


def jobs() -> int:
    """The processes a build may search on: $NNP_JOBS, else the cores available (1 in a pool's worker)."""
    value = os.environ.get("NNP_JOBS", "").strip()
    if value:
        try:
            return max(1, int(value))
        except ValueError:
            raise CompileError(f"NNP_JOBS must be a whole number of processes, got {value!r}") from None
    if multiprocessing.parent_process() is not None:
        return 1
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def ahead(graph, cfg: Config, fuse: bool, layouts: bool) -> list[tuple[Op, ...]]:
    """The chains whose unhinted search the build asks for first, one per tiling structure, largest first."""
    copies = alias(graph)[1]
    groups = partition(graph, copies) if fuse else per_node(graph, copies)
    chains = list(groups)
    if fuse:
        for run in fusion.chains(graph, groups):
            for i in range(len(run) - 1):
                for j in range(i + 2, min(len(run), i + fusion.MAX_ANCHORS) + 1):
                    parts = [groups[k] for k in run[i:j]]
                    chain = fusion.merged(parts)
                    if fusion.anchors(chain.ops) <= fusion.MAX_ANCHORS and not fusion.too_big_intermediate(
                            parts, cfg.dm_bytes):
                        chains.append(chain)
    out: dict[tuple, tuple[Op, ...]] = {}
    for g in chains:
        for lay in AHEAD_LAYOUTS if layouts else ("nchw",):
            laid = planned(g, lay).ops
            out.setdefault(tiling_key(laid), laid)
    return sorted(out.values(), key=lambda ops: -sum(int(getattr(o, "macs", 0)) for o in ops))


def prefetch(graph, cfg: Config, fuse: bool = True, layouts: bool = True) -> dict[str, object]:
    """search key -> search entry of the searches ahead() lists, made on a pool of jobs() processes
    ({} with one job, or fewer than MIN_SEARCHES not in the compile cache already)."""
    n = jobs()
    if n < 2:
        return {}
    graph.validate()
    todo = [ops for ops in ahead(graph, cfg, fuse, layouts)
            if compile_cache.get("search", compile_cache.key("search", ops, cfg, None, None)) is None]
    if len(todo) < MIN_SEARCHES:
        return {}
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    with ProcessPoolExecutor(min(n, len(todo)), mp_context=multiprocessing.get_context(method)) as pool:
        found = list(pool.map(_search_ahead, todo, [cfg] * len(todo)))
    return {k: v for k, v in found if k is not None}


def _search_ahead(ops: tuple[Op, ...], cfg: Config) -> tuple[str | None, object]:
    """(search key, entry) of one search, made in a worker (it writes the compile cache too, if on)."""
    key = compile_cache.key("search", ops, cfg, None, None)
    try:
        _, _, (predicted, _, _), k = search.search(ops, cfg)
    except CompileError as exc:
        return key, ("error", str(exc))
    return key, (k, int(predicted))
