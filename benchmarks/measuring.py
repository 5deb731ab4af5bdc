"""What several benchmarks measure the same way: CPU seconds, timed calls, the first and second compile of a
network, and a network run unchecked, race-checked and by onnxruntime side by side.

benchmarks/compile_time.py, simulator.py (`--only networks`), models.py and zoo.py take their figures from
here, so that one figure means one measurement wherever a table reports it.
"""
from __future__ import annotations

import os
import resource
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

import numpy as np

import compiler
from nnpsim.config import Config


def cpu_seconds(children: bool = False) -> float:
    """User + system CPU seconds of this process (and, with children, of its finished workers too)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    c = resource.getrusage(resource.RUSAGE_CHILDREN) if children else None
    return r.ru_utime + r.ru_stime + ((c.ru_utime + c.ru_stime) if c else 0.0)


def timed(fn: Callable, *args, **kwargs) -> tuple[object, float, float]:
    """(fn's result, wall seconds, process CPU seconds) of one call."""
    w, c = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - w, time.process_time() - c


@contextmanager
def environment(**values: str):
    """The body runs with these environment variables set (restored after)."""
    old = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class Compiles:
    """A network's first compile (an empty compile cache, one process) and its second (the cache holding it)."""

    lib: object
    first_wall: float
    first_cpu: float
    second_cpu: float
    same: bool                  # the two programs are the same bytes


def program_bytes(lib) -> bytes:
    """A compiled network's binaries as one byte string (each NPU stage's, for a network with host parts)."""
    stages = getattr(lib, "npu_stages", None)
    return b"".join(s.program.to_bytes() for s in stages) if stages is not None else lib.program.to_bytes()


def compile_twice(graph, cfg: Config | None = None, build: Callable | None = None) -> Compiles:
    """compiler.build(graph) with $NNP_CACHE_DIR a fresh temporary directory on one process (NNP_JOBS=1), then
    again from the cache it filled: the user's cache is neither read nor written.  `build` (default
    compiler.build(graph, config=cfg)) may wrap the call, e.g. in a profiler."""
    build = build or (lambda: compiler.build(graph, config=cfg))
    with tempfile.TemporaryDirectory() as cache, environment(NNP_CACHE="1", NNP_CACHE_DIR=cache, NNP_JOBS="1"):
        w, c = time.perf_counter(), cpu_seconds()
        lib = build()
        wall, first = time.perf_counter() - w, cpu_seconds() - c
        c = cpu_seconds()
        again = build()
        second = cpu_seconds() - c
    return Compiles(lib, wall, first, second, program_bytes(lib) == program_bytes(again))


@dataclass
class Runs:
    """The best CPU (and wall) seconds of a network run three ways, interleaved."""

    unchecked: tuple[float, float]      # (CPU s, wall s)
    checked: tuple[float, float]
    onnxruntime: tuple[float, float]
    outputs: list[np.ndarray]           # the simulator's outputs (quantised), the same in every run

    @property
    def checked_ratio(self) -> float:
        """Race-checked over unchecked simulation, CPU seconds."""
        return self.checked[0] / self.unchecked[0]

    @property
    def ort_ratio(self) -> float:
        """Unchecked simulation over onnxruntime's one-thread inference, CPU seconds."""
        return self.unchecked[0] / self.onnxruntime[0]


def _outputs(m) -> list[np.ndarray]:
    return [np.array(m.get_output(k, quantized=True)) for k in range(m.num_outputs)]


def run_side_by_side(m, sess, feeds: dict, repeats: int, name: str = "network") -> Runs:
    """m (a GraphModule with its inputs set) run unchecked and race-checked, and sess (an onnxruntime session)
    on feeds, the three interleaved `repeats` times after a first untimed run of each; the best of each.
    SystemExit if the simulator gives two different outputs for the same input."""
    sess.run(None, feeds)
    m.run(check_races=True)          # first runs: tables decoded, the checker's code loaded
    first = _outputs(m)
    runs = {"unchecked": lambda: m.run(), "checked": lambda: m.run(check_races=True),
            "onnxruntime": lambda: sess.run(None, feeds)}
    best = dict.fromkeys(runs, (float("inf"), float("inf")))
    for _ in range(repeats):
        for what, fn in runs.items():
            _, wall, cpu = timed(fn)
            best[what] = min(best[what], (cpu, wall))
            if what != "onnxruntime" and not all(np.array_equal(a, b) for a, b in zip(_outputs(m), first)):
                raise SystemExit(f"{name}: the simulator gave two different outputs for the same input")
    return Runs(best["unchecked"], best["checked"], best["onnxruntime"], first)
