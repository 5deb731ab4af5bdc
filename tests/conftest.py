"""Fixtures and hooks for the whole suite: one numba warm-up per test run.

Plain helpers (program builders, kernels, networks, mutants) live in tests/helpers/.

No `slow` marker: every test here is one CI should run, so every test runs under plain `make test`
(which stays under 10 minutes on two cores).  The long runs are long because of what they cover (the
mutation tests, whole networks), not duplicates of faster tests; the long fuzzing campaign has its own
switch, FUZZ=long (tests/fuzz/conftest.py), which scales budgets rather than skipping tests.  The marker
declared for NNP_SLOW=1 was never used and is removed from pyproject.toml.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import time

import pytest

from tests.helpers.machine import ins, program, small_config

WARM_UP: dict[str, float] = {}      # what the warm-up took, for the summary line

# The compile cache (compiler/compile_cache.py) is off for the suite, and pointed at a directory of the
# run's own, so that the suite neither reads nor fills the user's cache.  Off rather than on: tests
# monkeypatch the compiler's internals (interleave.RING_BOUND, say), which the cache's source digest
# cannot see, and a test must exercise the compiler, not an entry an earlier test left.  The cache's
# own tests (tests/compiler/test_compile_cache.py) turn it on in directories of their own.  NNP_JOBS=1:
# no test's network build spawns a process pool unless it asks for one.
CACHE_DIR = tempfile.mkdtemp(prefix="nnp-test-cache-")
os.environ.update(NNP_CACHE="0", NNP_CACHE_DIR=CACHE_DIR, NNP_JOBS="1")


def pytest_unconfigure(config):
    shutil.rmtree(CACHE_DIR, ignore_errors=True)


def warm_up_numba():
    """Compile (or load from numba's on-disk cache, $NUMBA_CACHE_DIR) every jitted function of nnpsim.

    The event engine is one jitted function (nnpsim.engine.run_engine) that inlines or calls every
    unit's kernel (NU, VU, DMA: nnpsim/units/*.py) and the timing model (nnpsim/timing.py), so one run
    compiles them all; the race checker's jitted passes (nnpsim/races.py, the footprint walkers of
    nnpsim/footprint.py) compile on the first run with race checking that has commands to check.  So:
    an empty program and the 3x3 conv kernel (DMA and NU commands, semaphores), each with and without
    race checking.  The compiler calls the timing functions from Python with the same types, which
    finds them compiled.  Cold, this takes about a minute on two cores; from the cache, about a second.
    """
    from nnpsim.simulator import Simulator
    from tests.helpers.races import run_conv

    for races in (False, True):
        sim = Simulator(small_config())
        sim.load(program([ins("nop"), ins("halt")]))
        sim.run(check_races=races)
        run_conv(check_races=races)
    return sim


def pytest_configure(config):
    """Under pytest-xdist (`make test` runs two workers), warm numba's on-disk cache once in the controller
    before the workers start, so that each worker loads the compiled engine instead of compiling it again."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        t0 = time.perf_counter()
        warm_up_numba()
        WARM_UP["controller"] = time.perf_counter() - t0


@pytest.fixture(scope="session", autouse=True)
def numba_warm_up():
    """Pay numba's compile once, before the first test, so that no test's own time includes it
    (`--durations` shows it as the setup of the run's first test)."""
    t0 = time.perf_counter()
    sim = warm_up_numba()
    WARM_UP["seconds"] = time.perf_counter() - t0
    return sim


@pytest.fixture(scope="session")
def warm_engine(numba_warm_up):
    """A simulator that has run (the modules that ask for it predate the autouse warm-up)."""
    return numba_warm_up


def pytest_terminal_summary(terminalreporter):
    for key, where in (("controller", "before the workers"), ("seconds", "")):
        if key in WARM_UP:
            terminalreporter.write_line(f"numba warm-up{' ' + where if where else ''}: {WARM_UP[key]:.1f} s "
                                        "(tests/conftest.py)")
