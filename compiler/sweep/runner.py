"""The sweep loop: the points not yet done go to the executor; each row is appended as it arrives."""
from __future__ import annotations

import os
import tempfile
import time
from concurrent.futures import FIRST_COMPLETED, BrokenExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from .executors import Pool, open_pool
from .points import Point, toolchain_version
from .points import points as make_points
from .results import Results
from .results import ENVIRONMENT
from .run_point import CACHE_ERROR, COLUMNS, run_point, task
from .spec import Sweep, SweepError, load_sweep

WINDOW = 2      # tasks submitted per worker: enough to keep every worker busy, few to lose on a kill


@dataclass
class Outcome:
    """What one run did."""

    points: int             # in the sweep
    skipped: int            # already in the results file
    computed: int           # run now
    failed: int             # of those, rows with an error
    seconds: float
    dropped: int = 0        # damaged rows (cut short by a kill) dropped from the results file
    retried: int = 0        # rows with an error of the environment dropped, so their points ran again
    cache_errors: int = 0   # points computed whose result the cache could not store
    cache_error: str = ""   # the first of them: why


def pending(points: list[Point], results: Results) -> list[Point]:
    """The points without a row yet, in point order."""
    done = results.done()
    return [p for p in points if p.hash not in done]


def run(points: list[Point], results: Results, pool: Pool, cache_dir: str | None, area: dict,
        limit: int | None = None, progress: bool = True) -> Outcome:
    """Run every pending point (at most `limit`) on the pool, appending rows as they finish."""
    start = time.perf_counter()
    todo = pending(points, results)
    skipped = len(points) - len(todo)
    if limit is not None:
        todo = todo[:limit]
    bar = _bar(len(todo), progress)
    queue = iter(todo)
    inflight = {}
    computed = failed = 0
    cache_errors, cache_error = 0, ""
    try:
        while True:
            while len(inflight) < WINDOW * pool.workers:
                p = next(queue, None)
                if p is None:
                    break
                inflight[pool.executor.submit(run_point, task(p, cache_dir, area))] = p
            if not inflight:
                break
            finished, _ = wait(inflight, return_when=FIRST_COMPLETED)
            for fut in finished:
                p = inflight.pop(fut)
                row = _row(fut, p)
                results.append(row)
                computed += 1
                failed += bool(row["error"])
                if row.get(CACHE_ERROR):
                    cache_errors += 1
                    cache_error = cache_error or row[CACHE_ERROR]
                bar.update(1)
                bar.set_postfix_str(f"{p.workload.name}: {row['cycles'] or row['error'][:40]}", refresh=False)
    finally:
        for fut in inflight:
            fut.cancel()
        bar.close()
    return Outcome(len(points), skipped, computed, failed, time.perf_counter() - start,
                   cache_errors=cache_errors, cache_error=cache_error)


def _row(fut, p: Point) -> dict:
    """The future's row; a worker that died or could not be reached is a row with that error."""
    try:
        return fut.result()
    except BrokenExecutor as exc:
        raise RuntimeError(f"a worker process died while running point {p.index} ({p.workload.name}): {exc} "
                           "(a script that starts a sweep must do it under `if __name__ == \"__main__\":`: "
                           "each worker process imports it again)") from None
    except Exception as exc:     # noqa: BLE001 - e.g. a Dask worker lost: the point's row says so
        row = {c: None for c in COLUMNS}
        row.update(point=p.index, hash=p.hash, workload=p.workload.name, kind=p.workload.kind,
                   toolchain=toolchain_version(),
                   error=f"{ENVIRONMENT}the executor failed: {type(exc).__name__}: {exc}")
        return row


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, s: str, refresh: bool = True) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(total: int, progress: bool):
    """A tqdm bar with ETA on a terminal (nothing without tqdm, when told not to, or output redirected)."""
    if not progress:
        return _NoBar()
    try:
        from tqdm import tqdm
    except ImportError:
        return _NoBar()
    return tqdm(total=total, unit="point", desc="sweep", disable=None, dynamic_ncols=True)


def default_cache() -> str:
    """$XDG_CACHE_HOME/nnpc/sweep (~/.cache/nnpc/sweep): shared by every sweep of this user."""
    return str(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "nnpc" / "sweep")


def check_cache_dir(path: str) -> None:
    """The cache directory exists or can be made, and a file can be written in it (SweepError if not)."""
    p = Path(path)
    try:
        p.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".probe.", dir=p)
        os.close(fd)
        os.unlink(probe)
    except FileExistsError:
        raise SweepError(f"--cache {path}: is not a directory") from None
    except OSError as exc:
        raise SweepError(f"--cache {path}: cannot write to the cache directory: {exc.strerror or exc}") from None


def run_sweep(sweep_file, output, *, workers: int | None = None, dask: str | None = None,
              cache: str | None = "default", limit: int | None = None,
              progress: bool = True) -> tuple[Sweep, Outcome, list[dict]]:
    """Load a sweep file and run its pending points into `output`: (Sweep, Outcome, this sweep's rows).

    cache: a directory, "default" (default_cache()) or None for none.
    """
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise SweepError(f"--workers must be at least 1, got {workers!r}")
    if limit is not None and limit < 0:
        raise SweepError(f"--limit must be 0 or more, got {limit}")
    sweep = load_sweep(sweep_file)
    pts = make_points(sweep)
    cache_dir = default_cache() if cache == "default" else cache
    if cache_dir is not None and (dask is None or dask.startswith("local:")):
        check_cache_dir(cache_dir)      # a remote Dask cluster's workers have their own file system
    results = Results(output, COLUMNS)
    try:
        waiting = len(pending(pts, results))
        if waiting and limit != 0:
            with open_pool(workers, dask) as pool:
                outcome = run(pts, results, pool, cache_dir, sweep.area, limit, progress)
        else:
            outcome = Outcome(len(pts), len(pts) - waiting, 0, 0, 0.0)
    finally:
        results.close()
    outcome.dropped, outcome.retried = results.dropped, results.retry
    mine = {p.hash for p in pts}
    return sweep, outcome, sorted((r for r in results.rows if r["hash"] in mine), key=lambda r: r["point"])
