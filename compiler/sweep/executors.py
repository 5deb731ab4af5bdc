"""Where points run: a local process pool (the default) or Dask, both as a concurrent.futures Executor.

The runner submits tasks and waits on futures the same way whichever executor it is given:
ProcessPoolExecutor for `--workers N`, and for `--dask` the Executor face of a
dask.distributed Client (Client.get_executor), connected to a running scheduler
(`tcp://HOST:8786`) or to a LocalCluster it starts (`local:N`, N single-threaded worker
processes on 127.0.0.1).  No scheduler of our own: Dask's decides which worker runs what.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections.abc import Iterator
from concurrent.futures import Executor, ProcessPoolExecutor
from dataclasses import dataclass

from .spec import SweepError

SCALE_EXTRA = "pip install 'nnp-toolchain[scale]'"


@dataclass
class Pool:
    """An executor, how many points it runs at once and what to call it."""

    executor: Executor
    workers: int
    name: str


def default_workers() -> int:
    """The local pool's size when --workers is not given: one per core."""
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


@contextlib.contextmanager
def open_pool(workers: int | None = None, dask: str | None = None) -> Iterator[Pool]:
    """A Pool for the run; shut down (and a LocalCluster closed) when the block ends."""
    if dask is None:
        n = workers or default_workers()
        if n < 1:
            raise SweepError(f"--workers must be at least 1, got {n}")
        # spawn, not fork: a forked child would inherit numba's and onnxruntime's threads mid-state
        ex = ProcessPoolExecutor(max_workers=n, mp_context=multiprocessing.get_context("spawn"))
        try:
            yield Pool(ex, n, f"process pool of {n} worker{'s' * (n != 1)}")
        finally:
            ex.shutdown(wait=True, cancel_futures=True)
        return
    with _dask_client(dask) as (client, n, name):
        ex = client.get_executor(pure=False)
        try:
            yield Pool(ex, n, name)
        finally:
            ex.shutdown(wait=False)


@contextlib.contextmanager
def _dask_client(address: str):
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise SweepError(f"--dask needs dask.distributed: {SCALE_EXTRA}") from None
    if address.startswith("local:"):
        n = _local_workers(address)
        with LocalCluster(n_workers=n, threads_per_worker=1, processes=True, host="127.0.0.1",
                          dashboard_address=None, silence_logs=40) as cluster, Client(cluster) as client:
            yield client, n, f"Dask LocalCluster of {n} worker{'s' * (n != 1)}"
        return
    if "://" not in address:
        raise SweepError(f"--dask {address!r}: give a scheduler address (tcp://HOST:8786) or local:N")
    try:
        client = Client(address, timeout=10)
    except (OSError, TimeoutError) as exc:
        raise SweepError(f"--dask {address}: cannot connect to the Dask scheduler: {exc}") from None
    with client:
        n = max(1, sum(w.get("nthreads", 1) for w in client.scheduler_info().get("workers", {}).values()))
        yield client, n, f"Dask scheduler {address} ({n} worker thread{'s' * (n != 1)})"


def _local_workers(address: str) -> int:
    text = address.split(":", 1)[1]
    if not text.isdigit() or int(text) < 1:
        raise SweepError(f"--dask {address!r}: local:N needs a number of workers N >= 1")
    return int(text)
