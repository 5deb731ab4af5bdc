"""The points of a sweep: the grid of its axes (or a seeded sample of it) times its workloads.

A point's hash covers the workload, the whole configuration (every key, not only the
swept ones), the input seed and the toolchain version, so a finished row is reused only for
exactly the same question asked of exactly the same toolchain.
"""
from __future__ import annotations

import functools
import hashlib
import json
import tomllib
from dataclasses import asdict, dataclass
from importlib import metadata
from pathlib import Path

import numpy as np

from nnpsim.config import Config, config_from_dict, config_toml

from .spec import Sweep, Workload, flatten

SOURCES = ("isa_spec", "nnpasm", "nnpsim", "compiler")
SKIP = ("compiler/sweep",)      # the sweep's own code changes no compiled program or simulated cycle


@dataclass(frozen=True)
class Point:
    """One (workload, configuration) pair of a sweep."""

    index: int
    workload: Workload
    values: dict            # configuration keys set (base and axes), dotted as `nnpsim config` prints them
    data_seed: int

    def config(self) -> Config:
        """The point's configuration (ConfigError if the combination is refused)."""
        return config_from_dict(self.values)

    @property
    def hash(self) -> str:
        """What resume keys on: workload, full configuration, input seed, toolchain version."""
        return digest({"workload": self.workload.key, "config": full_config(self.values),
                       "data_seed": self.data_seed, "toolchain": toolchain_version()})


def digest(obj) -> str:
    """sha256 of obj as canonical JSON."""
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def config_values(cfg: Config) -> dict:
    """Every configuration key and its value, dotted and in the order `nnpsim config` prints them."""
    return flatten(tomllib.loads(config_toml(cfg)))


def full_config(values: dict) -> dict:
    """Every Config field for these keys (so two spellings of one machine hash alike)."""
    try:
        return asdict(config_from_dict(values))
    except ValueError:
        return dict(values)      # a refused combination: its row says why; hash what was asked


@functools.lru_cache(maxsize=None)
def toolchain_version() -> str:
    """The package version and a hash of every source file of the toolchain (not of this package)."""
    root = Path(__file__).resolve().parents[2]
    h = hashlib.sha256()
    for pkg in SOURCES:
        for f in sorted((root / pkg).rglob("*")):
            rel = f.relative_to(root).as_posix()
            if f.suffix in (".py", ".toml", ".lark") and not any(rel.startswith(s) for s in SKIP):
                h.update(rel.encode() + b"\0" + f.read_bytes() + b"\0")
    try:
        version = metadata.version("nnp-toolchain")
    except metadata.PackageNotFoundError:
        version = "0"
    return f"{version}+{h.hexdigest()[:12]}"


def configurations(sweep: Sweep) -> list[dict]:
    """The configuration keys of each sampled grid point, base keys first (grid: file order)."""
    sizes = [len(a.values) for a in sweep.axes]
    total = int(np.prod(sizes)) if sizes else 1
    if sweep.sample == "random":
        picks = sorted(np.random.default_rng(sweep.seed).choice(total, sweep.n, replace=False).tolist())
    else:
        picks = range(total)
    out = []
    for flat in picks:
        values = dict(sweep.base)
        for axis, k in zip(sweep.axes, np.unravel_index(flat, sizes) if sizes else ()):
            values.update(axis.values[int(k)])
        out.append(values)
    return out


def points(sweep: Sweep) -> list[Point]:
    """Every point: each configuration with each workload; a repeated (workload, machine) once."""
    out, seen = [], set()
    for values in configurations(sweep):
        for w in sweep.workloads:
            p = Point(len(out), w, values, sweep.data_seed)
            if p.hash not in seen:
                seen.add(p.hash)
                out.append(p)
    return out
