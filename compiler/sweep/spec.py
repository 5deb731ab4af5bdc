"""The sweep file (TOML): workloads, axes of configuration keys, sampling; parsed and validated.

Every problem is one SweepError that names the key (`axes."nu.rows"`, `sweep.layer[1].kernel`)
and, where it can be found, the line of the file.  Configuration keys and values are checked by
nnpsim.config itself, so a value the configuration refuses gives the configuration's own message.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import math
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from nnpsim.config import Config, ConfigError, config_from_dict

from .. import models
from ..errors import CompileError
from .layers import chain_bytes, layer_ops

SAMPLES = ("grid", "random")
FORMATS = ("qoperator", "qdq")
TOP_KEYS = ("sweep", "config", "axes", "area")
SWEEP_KEYS = ("workloads", "sample", "n", "seed", "data_seed", "config", "model", "layer")
MODEL_KEYS = {"size": 224, "classes": 1000, "format": "qoperator", "seed": 0}
AREA_KEYS = {"mac": 256.0, "byte": 1.0}
DDR_KEY = "memory.ddr.size"
LAYER_OPS = {
    "conv2d": ("x_shape", "out_channels", "kernel", "stride", "padding", "dilation", "groups", "relu", "x_zp",
               "zp_out"),
    "dense": ("x_shape", "out_features", "relu", "x_zp", "zp_out"),
    "max_pool2d": ("x_shape", "kernel", "stride", "padding"),
    "avg_pool2d": ("x_shape", "kernel", "stride", "padding"),
    "global_avg_pool2d": ("x_shape",),
    "add": ("x_shape",),
}
LAYER_COMMON = ("name", "op", "seed")
REQUIRED = {"conv2d": ("x_shape", "out_channels", "kernel"), "dense": ("x_shape", "out_features"),
            "max_pool2d": ("x_shape", "kernel"), "avg_pool2d": ("x_shape", "kernel"),
            "global_avg_pool2d": ("x_shape",), "add": ("x_shape",)}


class SweepError(ValueError):
    """A sweep file that cannot be used; the message names the file, the key and the bad value."""


@dataclass(frozen=True)
class Workload:
    """One thing to compile: a built-in network, an ONNX file or a single layer (a chain of ops)."""

    kind: str               # "model", "onnx" or "layer"
    name: str               # what the results call it
    params: dict            # JSON-able: everything the compiled program depends on

    @property
    def key(self) -> str:
        """A canonical description, the workload's part of every hash."""
        return json.dumps({"kind": self.kind, **self.params}, sort_keys=True)

    def to_dict(self) -> dict:
        """Plain data (what is sent to a worker)."""
        return {"kind": self.kind, "name": self.name, "params": self.params}

    @classmethod
    def from_dict(cls, d: dict) -> "Workload":
        return cls(d["kind"], d["name"], d["params"])


@dataclass(frozen=True)
class Axis:
    """One axis of the sweep: its values, each a dict of configuration keys to set."""

    name: str
    values: tuple[dict, ...]


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file."""

    path: Path
    workloads: tuple[Workload, ...]
    axes: tuple[Axis, ...]
    base: dict = field(default_factory=dict)        # configuration keys every point sets
    sample: str = "grid"
    n: int | None = None
    seed: int = 0
    data_seed: int = 0
    area: dict = field(default_factory=lambda: dict(AREA_KEYS))

    @property
    def axis_keys(self) -> list[str]:
        """The configuration keys some axis sets, in file order."""
        return list(dict.fromkeys(k for a in self.axes for v in a.values for k in v))


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (SweepError naming the key on any problem)."""
    path = Path(path)
    text = read_text(path, "the sweep file", lambda msg: SweepError(f"{path}: {msg}"))
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        at = re.search(r"\s*\(at line (\d+), column (\d+)\)$", str(exc))
        place = f"{path}:{at[1]}:{at[2]}" if at else str(path)
        raise SweepError(f"{place}: error: not valid TOML: {str(exc)[:at.start()] if at else exc}") from None
    return parse_sweep(data, path, text)


def read_text(path: Path, what: str, error) -> str:
    """A file's UTF-8 text; error(message) is raised when it cannot be read or is not UTF-8."""
    try:
        return path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise error(f"cannot read {what}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise error(f"cannot read {what}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                    f"{exc.start})") from None


def parse_sweep(data: dict, path: Path, text: str = "") -> Sweep:
    """Validate parsed TOML into a Sweep; paths in it are relative to path's directory."""
    where = _Where(path, text)
    _known(data, TOP_KEYS, "", where)
    sw = _table(data.get("sweep"), "sweep", where, required=True)
    _known(sw, SWEEP_KEYS, "sweep.", where)
    base = _base(sw, data, path.parent, where)
    axes = _axes(_table(data.get("axes", {}), "axes", where), base, where)
    sample = sw.get("sample", "grid")
    if sample not in SAMPLES:
        where.fail("sweep.sample", f"must be one of {', '.join(SAMPLES)}, got {sample!r}")
    n = sw.get("n")
    if sample == "random":
        if n is None:
            where.fail("sweep.n", 'sample = "random" needs n, the number of points')
        _int(n, "sweep.n", where, lo=1)
        total = 1
        for a in axes:
            total *= len(a.values)
        if n > total:
            where.fail("sweep.n", f"n = {n} is more than the {total} points of the grid")
    elif n is not None:
        where.fail("sweep.n", 'n is for sample = "random" only')
    seed = _int(sw.get("seed", 0), "sweep.seed", where, lo=0)
    data_seed = _int(sw.get("data_seed", 0), "sweep.data_seed", where, lo=0)
    model = _model_options(_table(sw.get("model", {}), "sweep.model", where), where)
    workloads = _workloads(sw, model, path.parent, where, largest_ddr(base, axes))
    area = _area(_table(data.get("area", {}), "area", where), where)
    return Sweep(path, tuple(workloads), tuple(axes), base, sample, n, seed, data_seed, area)


# ----------------------------------------------------------------------------- errors with a place

class _Where:
    """Turns a key into `file:line: error: key: message` (the line when the key can be found)."""

    def __init__(self, path: Path, text: str):
        self.path, self.lines = path, text.splitlines()

    def line_of(self, key: str) -> int | None:
        """The first line that sets the key's last name (`axes."nu.rows"[1]` -> the line of nu.rows)."""
        names = [a or b for a, b in re.findall(r'"([^"]+)"|([A-Za-z_]\w*)', key)]
        if not names:
            return None
        pat = re.compile(r"""^\s*(\[+\s*)?['"]?""" + re.escape(names[-1]) + r"""['"]?\s*(=|\])""")
        return next((k for k, line in enumerate(self.lines, 1) if pat.search(line)), None)

    def fail(self, key: str, message: str):
        line = self.line_of(key)
        place = f"{self.path}:{line}" if line else f"{self.path}"
        raise SweepError(f"{place}: error: {key}: {message}")


def _known(table: dict, known, prefix: str, where: _Where) -> None:
    for k in table:
        if k not in known:
            where.fail(f"{prefix}{k}", f"unknown key (known: {', '.join(known)})")


def _table(v, key: str, where: _Where, required: bool = False) -> dict:
    if v is None and required:
        raise SweepError(f"{where.path}: error: no [{key}] table (it names the workloads)")
    if not isinstance(v, dict):
        where.fail(key, f"must be a table, got {v!r}")
    return v


def _int(v, key: str, where: _Where, lo: int | None = None) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or (lo is not None and v < lo):
        where.fail(key, f"must be an integer{f' >= {lo}' if lo is not None else ''}, got {v!r}")
    return v


def _quoted(key: str) -> str:
    return f'"{key}"' if "." in key else key


def flatten(table: dict, prefix: str = "") -> dict:
    """Nested TOML tables to dotted keys: {"nu": {"rows": 16}} and {"nu.rows": 16} alike."""
    out = {}
    for k, v in table.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def check_config(values: dict, key: str, where: _Where) -> None:
    """The configuration these keys give, checked by nnpsim.config (its message, under `key`)."""
    try:
        config_from_dict(values)
    except ConfigError as exc:
        where.fail(key, str(exc))


# ----------------------------------------------------------------------------- configuration and axes

def _base(sw: dict, data: dict, root: Path, where: _Where) -> dict:
    """The configuration keys every point sets: a base file (sweep.config), then [config]."""
    base = {}
    if "config" in sw:
        if not isinstance(sw["config"], str):
            where.fail("sweep.config", f"must be the path of a configuration file, got {sw['config']!r}")
        cfg_path = root / sw["config"]
        try:
            base = flatten(tomllib.loads(read_text(cfg_path, str(cfg_path), SweepError)))
        except SweepError as exc:
            where.fail("sweep.config", str(exc))
        except tomllib.TOMLDecodeError as exc:
            where.fail("sweep.config", f"{cfg_path} is not valid TOML: {exc}")
        check_config(base, "sweep.config", where)
    fixed = flatten(_table(data.get("config", {}), "config", where))
    for k in fixed:
        check_config({**base, k: fixed[k]}, f"config.{_quoted(k)}", where)
    return {**base, **fixed}


def _axes(table: dict, base: dict, where: _Where) -> list[Axis]:
    """Each axis: a configuration key with a list of values, or a name with a list of tables of keys."""
    axes = []
    for name, values in _axis_items(table):
        key = f"axes.{_quoted(name)}"
        if not isinstance(values, list):
            where.fail(key, f"must be a list of values, got {values!r}")
        if not values:
            where.fail(key, "is empty: give at least one value")
        if all(isinstance(v, dict) for v in values):
            sets = [flatten(v) for v in values]
            for i, s in enumerate(sets):
                if not s:
                    where.fail(f"{key}[{i}]", "is an empty table: give configuration keys to set")
                check_config({**base, **s}, f"{key}[{i}]", where)
        elif any(isinstance(v, dict) for v in values):
            where.fail(key, "mixes tables and plain values: give all values, or all tables of keys")
        else:
            check_config({**base, name: values[0]}, key, where)     # an unknown key fails here
            sets = [{name: v} for v in values]
            for i, s in enumerate(sets):
                check_config({**base, **s}, f"{key}[{i}]", where)
        seen = set()
        for i, s in enumerate(sets):
            canon = json.dumps(s, sort_keys=True)
            if canon in seen:
                where.fail(f"{key}[{i}]", f"repeats the value {_show(s)}")
            seen.add(canon)
        axes.append(Axis(name, tuple(sets)))
    claimed: dict[str, str] = {}
    for a in axes:
        for k in {k for v in a.values for k in v}:
            if k in claimed:
                where.fail(f"axes.{_quoted(a.name)}", f"sets {k}, which axis {claimed[k]} sets too")
            claimed[k] = a.name
    return axes


def _axis_items(table: dict):
    """(name, values) of [axes]; an unquoted dotted key (nu.rows = [...]) is a nested table in TOML."""
    for name, values in table.items():
        if isinstance(values, dict):
            for sub, v in flatten(values, f"{name}.").items():
                yield sub, v
        else:
            yield name, values


def _show(s: dict) -> str:
    return ", ".join(f"{k} = {v!r}" for k, v in s.items())


# ----------------------------------------------------------------------------- workloads

def _model_options(table: dict, where: _Where) -> dict:
    _known(table, tuple(MODEL_KEYS), "sweep.model.", where)
    opts = {**MODEL_KEYS, **table}
    _int(opts["size"], "sweep.model.size", where, lo=8)
    _int(opts["classes"], "sweep.model.classes", where, lo=1)
    _int(opts["seed"], "sweep.model.seed", where, lo=0)
    if opts["format"] not in FORMATS:
        where.fail("sweep.model.format", f"must be one of {', '.join(FORMATS)}, got {opts['format']!r}")
    return opts


def largest_ddr(base: dict, axes: list[Axis]) -> int:
    """The most DDR bytes any point of the sweep has (memory.ddr.size of the base and of every axis value)."""
    sizes = [v[DDR_KEY] for a in axes for v in a.values if DDR_KEY in v]
    return max(sizes + [base.get(DDR_KEY, Config().ddr_bytes)])


def _workloads(sw: dict, model: dict, root: Path, where: _Where, ddr: int) -> list[Workload]:
    names = sw.get("workloads", [])
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        where.fail("sweep.workloads", f"must be a list of names or .onnx paths, got {names!r}")
    layers = sw.get("layer", [])
    if not isinstance(layers, list) or not all(isinstance(t, dict) for t in layers):
        where.fail("sweep.layer", "must be [[sweep.layer]] tables")
    if not names and not layers:
        where.fail("sweep.workloads", "no workloads: name networks or .onnx files, or give [[sweep.layer]] tables")
    out = [_named(n, f"sweep.workloads[{i}]", model, root, where) for i, n in enumerate(names)]
    out += [_layer(t, i, where, ddr) for i, t in enumerate(layers)]
    seen: dict[str, str] = {}
    for w in out:
        if w.name in seen:
            where.fail("sweep.workloads", f"two workloads are called {w.name!r}: give layers distinct names")
        seen[w.name] = w.key
    return out


def network_names() -> tuple[str, ...]:
    """The networks of compiler.models a sweep can name (with the tiny test model)."""
    return models.names() + ("tiny",)


def _named(name: str, key: str, model: dict, root: Path, where: _Where) -> Workload:
    if not all(importlib.util.find_spec(m) for m in ("onnx", "onnxruntime")):
        where.fail(key, f"{name}: networks need onnx and onnxruntime: pip install 'nnp-toolchain[onnx]'")
    if name.lower().endswith(".onnx"):
        p = (root / name).resolve()
        try:
            digest = hashlib.sha256(p.read_bytes()).hexdigest()
        except OSError as exc:
            where.fail(key, f"cannot read the ONNX file {p}: {exc.strerror or exc}")
        return Workload("onnx", Path(name).stem, {"path": str(p), "sha256": digest})
    if name not in network_names():
        where.fail(key, f"unknown workload {name!r}: a network of compiler.models "
                        f"({', '.join(network_names())}) or the path of an .onnx file")
    return Workload("model", name, {"network": name, **model})


def _layer(t: dict, index: int, where: _Where, ddr: int) -> Workload:
    key = f"sweep.layer[{index}]"
    op = t.get("op")
    if not isinstance(op, str) or op not in LAYER_OPS:
        where.fail(f"{key}.op", f"must be one of {', '.join(LAYER_OPS)}, got {op!r}")
    _known(t, LAYER_COMMON + LAYER_OPS[op], f"{key}.", where)
    for k in REQUIRED[op]:
        if k not in t:
            where.fail(f"{key}.{k}", f"missing: a {op} layer needs {', '.join(REQUIRED[op])}")
    name = t.get("name", f"layer{index}")
    if not isinstance(name, str) or not name:
        where.fail(f"{key}.name", f"must be a non-empty string, got {name!r}")
    params = {k: v for k, v in t.items() if k != "name"}
    params.setdefault("seed", 0)
    _int(params["seed"], f"{key}.seed", where, lo=0)
    try:
        chain = layer_ops(params)       # built now, so that a layer the op refuses fails here
    except (CompileError, TypeError, ValueError, OverflowError) as exc:
        where.fail(key, f"{op}: {exc}")
    check_layer_size(chain, ddr, key, where)
    return Workload("layer", name, params)


def check_layer_size(chain: tuple, ddr: int, key: str, where: _Where) -> None:
    """A layer whose tensors cannot all be in DDR at once fails here, before any tiling search."""
    need = chain_bytes(chain)
    if need > ddr:
        where.fail(key, f"{chain[0].kind}: its tensors take {need:,} bytes, more than the {ddr:,} bytes of "
                        f"DDR of the sweep's largest machine ({DDR_KEY})")


def _area(table: dict, where: _Where) -> dict:
    _known(table, tuple(AREA_KEYS), "area.", where)
    out = {**AREA_KEYS, **table}
    for k, v in out.items():
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf:
            where.fail(f"area.{k}", f"must be a finite number >= 0, got {v!r}")
    return {k: float(v) for k, v in out.items()}
