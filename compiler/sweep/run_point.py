"""One point: compile (through the cache), simulate, check against the reference; a row, never an exception.

run_point takes and returns plain data (a dict of JSON types), so any executor can carry it:
a process pool pickles it, Dask sends it to another machine.  Whatever goes wrong at a
point, a configuration the machine refuses, a tile that does not fit, a simulator error,
becomes the row's `error` column.
"""
from __future__ import annotations

import functools
import time
import traceback

import numpy as np

from nnpsim.config import Config, ConfigError
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator

from .. import models
from ..agreement import agreement, onnxruntime_session
from ..errors import CompileError
from ..onnx import from_onnx
from ..runtime import GraphModule
from .cache import CompileCache, arrays_to_npz, npz_to_arrays, sha256
from .compile import ON_CHIP, compile_workload, library
from .layers import layer_inputs, layer_ops, layer_reference
from .plot import area_of
from .points import Point, config_values, digest, toolchain_version
from .results import ENVIRONMENT
from .spec import Workload

CONFIG_COLUMNS = {key: type(v) for key, v in config_values(Config()).items()}   # float or int
RESULT_COLUMNS = {
    # name: type; the order is the file's
    "cycles": int, "predicted_cycles": int, "bound_cycles": int, "cycles_per_bound": float,
    "time_us": float, "macs": int, "mac_util_pct": float,
    "nu_busy_pct": float, "vu_busy_pct": float, "dma_busy_pct": float, "unit_busy_pct": str,
    "ddr_bytes": int, "ddr_util_pct": float,
    **{f"high_water.{m}": int for m in ON_CHIP},
    "layers": int, "area": float,
    "exact": bool, "diff_steps": int, "reference": str,
    "compile_s": float, "sim_s": float, "program_cached": bool, "choice_hits": int, "choice_lookups": int,
    "toolchain": str, "error": str,
}
HEAD_COLUMNS = {"point": int, "hash": str, "workload": str, "kind": str}
COLUMNS = {**HEAD_COLUMNS, **CONFIG_COLUMNS, **RESULT_COLUMNS}
CACHE_ERROR = "cache_error"     # a key of run_point's row that is no column: why the cache could not store
TIMING_COLUMNS = ("compile_s", "sim_s", "program_cached", "choice_hits", "choice_lookups")
"""Columns that depend on the machine, its load and what the cache already held: they differ
between two runs of the same sweep; every other column is the same whichever executor runs it."""


def task(point: Point, cache_dir: str | None, area: dict) -> dict:
    """What a worker needs for one point, as plain data."""
    return {"index": point.index, "hash": point.hash, "workload": point.workload.to_dict(),
            "values": point.values, "data_seed": point.data_seed, "cache": cache_dir, "area": area}


def run_point(t: dict) -> dict:
    """Compile, simulate and check one point (a task() dict): its row; errors go in the row's `error`."""
    workload = Workload.from_dict(t["workload"])
    row = {c: None for c in COLUMNS}
    row.update(point=t["index"], hash=t["hash"], workload=workload.name, kind=workload.kind,
               toolchain=toolchain_version(), error="")
    row.update({k: v for k, v in t["values"].items()})
    cache = CompileCache(t["cache"])
    try:
        cfg = Point(t["index"], workload, t["values"], t["data_seed"]).config()
        row.update(config_values(cfg))
        row["area"] = area_of(cfg, t["area"])
        _measure(row, workload, cfg, cache, t["data_seed"])
    except (CompileError, ConfigError, SimError) as exc:
        row["error"] = str(exc)
    except OSError as exc:       # a file of the environment, not the point: the next run retries it
        row["error"] = f"{ENVIRONMENT}{type(exc).__name__}: {exc}"
    except Exception as exc:     # noqa: BLE001 - a point must become a row whatever went wrong
        where = traceback.extract_tb(exc.__traceback__)[-1]
        row["error"] = f"{type(exc).__name__}: {exc} (at {where.filename}:{where.lineno})"
    row = {k: v.item() if isinstance(v, np.generic) else v for k, v in row.items()}
    row[CACHE_ERROR] = cache.stats.write_error      # not a column: the runner reports it
    return row


def _measure(row: dict, workload: Workload, cfg: Config, cache: CompileCache, data_seed: int) -> None:
    start = time.perf_counter()
    compiled = compile_workload(workload, cfg, cache, functools.partial(_source, workload))
    row["compile_s"] = round(time.perf_counter() - start, 3)
    info = compiled.info
    row.update(predicted_cycles=info["predicted_cycles"], bound_cycles=info["bound_cycles"], macs=info["macs"],
               layers=info["layers"], program_cached=compiled.program_hit, choice_hits=compiled.choice_hits,
               choice_lookups=compiled.choice_lookups)
    row.update({f"high_water.{m}": info["high_water"][m] for m in ON_CHIP})
    start = time.perf_counter()
    if workload.kind == "layer":
        stats = _run_layer(row, workload, compiled, cfg, data_seed)
    else:
        stats = _run_network(row, workload, compiled, cfg, data_seed, cache)
    row["sim_s"] = round(time.perf_counter() - start, 3)
    if stats.error:
        raise CompileError(f"simulation stopped: {stats.error}")
    _stats_columns(row, stats)


def _stats_columns(row: dict, stats) -> None:
    row.update(cycles=stats.cycles, time_us=stats.time_us, mac_util_pct=stats.mac_utilization_pct,
               ddr_bytes=stats.ddr_bytes, ddr_util_pct=stats.ddr_utilization_pct)
    row["cycles_per_bound"] = round(stats.cycles / row["bound_cycles"], 4) if row["bound_cycles"] else 0.0
    for kind in ("nu", "vu", "dma"):
        busy = [u.busy_pct for name, u in stats.units.items() if name.rstrip("0123456789") == kind]
        row[f"{kind}_busy_pct"] = round(sum(busy) / len(busy), 2) if busy else 0.0
    row["unit_busy_pct"] = " ".join(f"{name}={float(u.busy_pct):g}" for name, u in stats.units.items())


# ----------------------------------------------------------------------------- sources

@functools.lru_cache(maxsize=8)
def _model_bytes(network: str, size: int, classes: int, fmt: str, seed: int) -> bytes:
    """A built-in network as int8 ONNX bytes (built once per process)."""
    return models.build(network, fmt, size=size, classes=classes, seed=seed).SerializeToString()


def _onnx_bytes(workload: Workload) -> bytes:
    p = workload.params
    if workload.kind == "model":
        return _model_bytes(p["network"], p["size"], p["classes"], p["format"], p["seed"])
    with open(p["path"], "rb") as fh:
        blob = fh.read()
    if sha256(blob) != p["sha256"]:
        raise CompileError(f"{p['path']} changed since the sweep started")
    return blob


def _source(workload: Workload):
    """What to compile: the chain of ops of a layer, or the imported graph of a network."""
    if workload.kind == "layer":
        return layer_ops(workload.params)
    import onnx

    return from_onnx(onnx.load_from_string(_onnx_bytes(workload)))


# ----------------------------------------------------------------------------- running and checking

def _run_layer(row: dict, workload: Workload, compiled, cfg: Config, data_seed: int):
    chain = layer_ops(workload.params)
    inputs = layer_inputs(chain, data_seed)
    sim = Simulator(cfg)
    sim.load(compiled.program)
    for name, a in zip(compiled.info["inputs"], inputs):
        sim.write(name, a)
    stats = sim.run(check_races=False)
    y = sim.read(compiled.info["output"])
    want = layer_reference(chain, inputs)
    row.update(reference="numpy", exact=bool(np.array_equal(y, want)),
               diff_steps=int(np.abs(y.astype(np.int64) - want.astype(np.int64)).max()))
    return stats


def _run_network(row: dict, workload: Workload, compiled, cfg: Config, data_seed: int, cache: CompileCache):
    lib = library(compiled, cfg)
    m = GraphModule(lib)
    shape = tuple(lib.meta["inputs"][0]["shape"])
    x = np.random.default_rng(data_seed).standard_normal(shape).astype(np.float32)
    m.set_input(0, x)
    stats = m.run(check_races=False)
    theirs = _onnxruntime_output(workload, x, data_seed, cache)
    agree = agreement(m.get_output(0), theirs, lib.meta["outputs"][0]["scale"])
    row.update(reference="onnxruntime", exact=agree.equal, diff_steps=agree.steps)
    return stats


def _onnxruntime_output(workload: Workload, x: np.ndarray, data_seed: int, cache: CompileCache) -> np.ndarray:
    """onnxruntime's output on x: it does not depend on the machine, so cached per workload and seed."""
    import onnxruntime

    key = digest({"workload": workload.key, "data_seed": data_seed, "onnxruntime": onnxruntime.__version__})
    entry = cache.get("reference", key)
    if entry is not None:
        return npz_to_arrays(entry[1][".npz"])["y"]
    sess = onnxruntime_session(_onnx_bytes(workload))
    (y,) = sess.run(None, {sess.get_inputs()[0].name: x})
    cache.put("reference", key, {"shape": list(y.shape)}, {".npz": arrays_to_npz({"y": y})})
    return y
