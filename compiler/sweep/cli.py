"""`nnpc sweep`: run a sweep file's points and write one row per point.

Exit status: 0 the sweep ran (points that could not be compiled or run are rows with an
error; the summary counts them); 1 a sweep file, option or results file that cannot be
used (the message names the key or option); 2 a bad command line; 130 interrupted (the
rows written so far stay, and the same command resumes).
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import sys
from pathlib import Path

from isa_spec.cli_args import OneLineParser

from .plot import PLOT_EXTRA, PLOT_FORMATS, front_table, plot_front
from .runner import run_sweep
from .spec import SweepError

EXIT_OK, EXIT_INPUT, EXIT_INTERRUPTED = 0, 1, 130

EPILOG = """\
examples:
  nnpc sweep sweep.toml -o results.csv                  # local process pool, one worker per core
  nnpc sweep sweep.toml -o results.csv --workers 2 --plot pareto.png
  nnpc sweep sweep.toml -o results.csv --dask local:4   # a Dask LocalCluster of 4 workers
  nnpc sweep sweep.toml -o results.csv --dask tcp://scheduler:8786

Running the same command again computes only the points without a row.  The file
format, the columns, the cache and the area proxy are in docs/sweep.md.
"""


def parser() -> argparse.ArgumentParser:
    """The parser of `nnpc sweep`."""
    ap = OneLineParser(prog="nnpc sweep", description="compile and simulate every point of a "
                       "design-space sweep", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweep", help="the sweep file (TOML; docs/sweep.md)")
    ap.add_argument("-o", "--output", required=True, help="results file: .csv, or .parquet (needs pyarrow)")
    where = ap.add_mutually_exclusive_group()
    where.add_argument("--workers", type=int, help="size of the local process pool (default: one per core)")
    where.add_argument("--dask", metavar="ADDRESS",
                       help="run on Dask: tcp://HOST:8786 (a running scheduler) or local:N (a LocalCluster "
                            "of N workers); needs the scale extra")
    cache = ap.add_mutually_exclusive_group()
    cache.add_argument("--cache", metavar="DIR", help="compile cache directory (default ~/.cache/nnpc/sweep)")
    cache.add_argument("--no-cache", action="store_true", help="compile every point from scratch")
    ap.add_argument("--limit", type=int, metavar="N", help="run at most N of the pending points, then stop")
    ap.add_argument("--plot", metavar="FILE.png", help="plot cycles against the area proxy, Pareto front "
                                                       "marked (needs the plot extra)")
    ap.add_argument("--quiet", action="store_true", help="no progress bar and no front table")
    return ap


def main(argv: list[str]) -> int:
    """Entry point of `nnpc sweep ...` (argv without the word sweep)."""
    args = parser().parse_args(argv)
    try:
        check_output(args.output, "-o")
        if args.plot:
            _check_plot(args.plot)
        cache = None if args.no_cache else (args.cache or "default")
        sweep, outcome, rows = run_sweep(args.sweep, args.output, workers=args.workers, dask=args.dask,
                                         cache=cache, limit=args.limit, progress=not args.quiet)
    except SweepError as exc:
        print(f"nnpc sweep: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except KeyboardInterrupt:
        print(f"nnpc sweep: interrupted; the rows written so far are in {args.output}: run the same command "
              "to resume", file=sys.stderr)
        return EXIT_INTERRUPTED
    except RuntimeError as exc:
        print(f"nnpc sweep: error: {exc}; the rows so far are in {args.output}", file=sys.stderr)
        return EXIT_INPUT
    except OSError as exc:
        print(f"nnpc sweep: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    left = outcome.points - outcome.skipped - outcome.computed
    print(f"nnpc sweep: {outcome.points} points: {outcome.computed} computed in {outcome.seconds:.1f} s"
          f" ({outcome.failed} with an error), {outcome.skipped} already in {args.output}"
          + (f", {left} left for the next run" if left else "")
          + (f"; {outcome.dropped} damaged or repeated row(s) dropped from the file" if outcome.dropped else "")
          + (f"; {outcome.retried} row(s) with an error of the environment run again" if outcome.retried else ""))
    if outcome.cache_errors:
        print(f"nnpc sweep: warning: {outcome.cache_errors} point(s) could not be stored in the cache "
              f"(first: {outcome.cache_error}); their rows are sound", file=sys.stderr)
    errors = sum(bool(r["error"]) for r in rows)
    if errors:
        print(f"nnpc sweep: {errors} of the sweep's {len(rows)} rows have an error (the error column says why)")
    if not args.quiet and rows:
        print(front_table(rows, sweep.axis_keys))
    if args.plot:
        try:
            plot_front(rows, args.plot, sweep.area)
        except OSError as exc:
            print(f"nnpc sweep: error: cannot write the plot {args.plot}: {exc.strerror or exc}; the rows are "
                  f"in {args.output}", file=sys.stderr)
            return EXIT_INPUT
        print(f"nnpc sweep: wrote {args.plot}")
    return EXIT_OK


def check_output(path: str, option: str) -> None:
    """Fail before running anything when a file cannot be written at `path` exactly as given."""
    p = Path(path)
    if p.is_dir() or path.endswith(os.sep):
        raise SweepError(f"{option} {path}: is a directory; give a file name")
    if p.exists() and not p.is_file():
        raise SweepError(f"{option} {path}: is not a regular file")
    parent = p.parent
    if not parent.is_dir() and option != "-o":      # the results file's directory is made for it
        raise SweepError(f"{option} {path}: the directory {parent} does not exist")
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise SweepError(f"{option} {path}: cannot write in {parent}")


def _check_plot(path: str) -> None:
    """Fail before running anything when --plot cannot be drawn at `path`."""
    if importlib.util.find_spec("matplotlib") is None:
        raise SweepError(f"--plot needs matplotlib: {PLOT_EXTRA}")
    check_output(path, "--plot")
    suffix = Path(path).suffix.lower().lstrip(".")
    if suffix not in PLOT_FORMATS:
        raise SweepError(f"--plot {path}: give a file ending in one of .{', .'.join(PLOT_FORMATS)}")
