"""Design-space sweeps: many (workload, configuration) points compiled and simulated, one row each.

    nnpc sweep SWEEP.toml -o results.csv [--workers N | --dask tcp://HOST:8786 | --dask local:N]
                                         [--plot pareto.png] [--cache DIR | --no-cache] [--limit N]

The modules, in the order a sweep uses them:
  spec       the sweep file: parsed and validated, one clear error naming the key
  points     the grid or a random sample of it; each point's hash (what resume keys on)
  compile    one workload compiled for one configuration through the compile cache
  cache      the compile cache on disk: JSON, .npz and ELF files, checksummed, written atomically
  run_point  compile, simulate and check one point; a row, never an exception
  executors  the process pool or Dask, both as a concurrent.futures Executor
  results    rows appended as points finish; which points are done
  runner     the loop over the executor, with a progress bar
  plot       the area proxy, the Pareto front, its table and plot
  cli        `nnpc sweep`

docs/sweep.md describes the file format, the columns and each part.
"""
from .spec import Sweep, SweepError, load_sweep

__all__ = ["Sweep", "SweepError", "load_sweep"]
