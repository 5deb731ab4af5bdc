"""Machine configuration: every size, bandwidth, latency and count, from TOML."""
from __future__ import annotations

import tomllib
from dataclasses import dataclass, fields, replace
from pathlib import Path


MAX_BURST_BYTES = 4096
"""Largest memory.ddr.burst_bytes (a page; the burst count keeps a table of this many entries)."""


class ConfigError(ValueError):
    """A configuration file is malformed or names an unknown key."""


@dataclass(frozen=True)
class Config:
    """NNP-1 configuration; the defaults are the reference machine of docs/architecture.md."""

    clock_ghz: float = 1.0
    # CU
    cu_registers: int = 32
    branch_penalty: int = 2
    # NU
    nu_count: int = 1
    nu_rows: int = 32
    nu_cols: int = 32
    nu_latency: int = 64
    ibuf_bytes: int = 256 * 1024
    wbuf_bytes: int = 256 * 1024
    abuf_bytes: int = 128 * 1024
    # VU
    vu_count: int = 1
    vu_bytes_per_cycle: int = 64
    vu_latency: int = 8
    vbuf_bytes: int = 256 * 1024
    # DMA and queues
    dma_channels: int = 4
    queue_depth: int = 16
    semaphores: int = 32
    # memories: DMA port bandwidth (bytes per cycle) and access latency (cycles)
    ddr_bytes: int = 256 * 1024 * 1024
    ddr_bytes_per_cycle: int = 32
    ddr_latency: int = 100
    ddr_burst_bytes: int = 64     # DDR access granularity: a transfer pays the aligned bursts its contiguous runs touch (docs/timing.md)
    dm_bytes: int = 2 * 1024 * 1024
    dm_bytes_per_cycle: int = 128
    dm_latency: int = 8
    local_bytes_per_cycle: int = 64
    local_latency: int = 2


    @property
    def peak_macs_per_cycle(self) -> int:
        return self.nu_count * self.nu_rows * self.nu_cols

    def validate(self) -> "Config":
        """Check every value against its range (LIMITS); raise ConfigError naming the key and the range."""
        for f in fields(self):
            v = getattr(self, f.name)
            lo, hi = LIMITS[f.name]
            if f.name == "clock_ghz":
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo < v <= hi:
                    raise ConfigError(f"clock.ghz must be a positive number, got {v!r} (range (0, {hi}])")
                continue
            if not isinstance(v, int) or isinstance(v, bool):
                raise ConfigError(f"{_key_of(f.name)} must be an integer, got {v!r}")
            if f.name == "ddr_burst_bytes" and not (0 < v <= MAX_BURST_BYTES and v & (v - 1) == 0):
                raise ConfigError(f"{_key_of(f.name)} = {v} must be a power of two from 1 to {MAX_BURST_BYTES}")
            if not lo <= v <= hi:
                raise ConfigError(f"{_key_of(f.name)} = {v} is out of range [{lo}, {hi}]")
        return self


MAX_LATENCY = 1 << 20
"""Largest latency or penalty in cycles (a million: far above any memory or unit, far below int64 time)."""
MAX_RATE = 1 << 16
"""Largest bandwidth in bytes per cycle."""
MAX_ONCHIP = 1 << 28
"""Largest on-chip memory in bytes (256 MiB: the simulator allocates every memory of every unit)."""
MAX_DDR = 1 << 32
"""Largest DDR in bytes: addresses are 32 bits."""

LIMITS: dict[str, tuple] = {
    "clock_ghz": (0, 1000.0),
    "cu_registers": (32, 32), "branch_penalty": (0, MAX_LATENCY),
    "nu_count": (1, 4), "nu_rows": (1, 1024), "nu_cols": (1, 1024), "nu_latency": (0, MAX_LATENCY),
    "ibuf_bytes": (1, MAX_ONCHIP), "wbuf_bytes": (1, MAX_ONCHIP), "abuf_bytes": (1, MAX_ONCHIP),
    "vu_count": (1, 4), "vu_bytes_per_cycle": (1, MAX_RATE), "vu_latency": (0, MAX_LATENCY),
    "vbuf_bytes": (1, MAX_ONCHIP),
    "dma_channels": (1, 8), "queue_depth": (1, 4096), "semaphores": (1, 63),
    "ddr_bytes": (1, MAX_DDR), "ddr_bytes_per_cycle": (1, MAX_RATE), "ddr_latency": (0, MAX_LATENCY),
    "ddr_burst_bytes": (1, MAX_BURST_BYTES),
    "dm_bytes": (1, MAX_ONCHIP), "dm_bytes_per_cycle": (1, MAX_RATE), "dm_latency": (0, MAX_LATENCY),
    "local_bytes_per_cycle": (1, MAX_RATE), "local_latency": (0, MAX_LATENCY),
}
"""Every configuration value's range [lo, hi] (clock: (lo, hi]), checked by Config.validate."""


_TOML_KEYS = {
    "clock": {"ghz": "clock_ghz"},
    "cu": {"registers": "cu_registers", "branch_penalty": "branch_penalty"},
    "nu": {"count": "nu_count", "rows": "nu_rows", "cols": "nu_cols", "latency": "nu_latency",
           "ibuf_bytes": "ibuf_bytes", "wbuf_bytes": "wbuf_bytes", "abuf_bytes": "abuf_bytes"},
    "vu": {"count": "vu_count", "bytes_per_cycle": "vu_bytes_per_cycle", "latency": "vu_latency",
           "vbuf_bytes": "vbuf_bytes"},
    "dma": {"channels": "dma_channels"},
    "queues": {"depth": "queue_depth"},
    "sync": {"semaphores": "semaphores"},
    "memory.ddr": {"size": "ddr_bytes", "bytes_per_cycle": "ddr_bytes_per_cycle", "latency": "ddr_latency",
                   "burst_bytes": "ddr_burst_bytes"},
    "memory.dm": {"size": "dm_bytes", "bytes_per_cycle": "dm_bytes_per_cycle", "latency": "dm_latency"},
    "memory.local": {"bytes_per_cycle": "local_bytes_per_cycle", "latency": "local_latency"},
}


# The keys that decide what a program may name or address (units, channels, semaphores, array and
# buffer sizes).  The compiler records them with `.target`; timing keys are left out so that one
# binary can be simulated under any latencies and bandwidths.
SHAPE_KEYS = ("nu.count", "nu.rows", "nu.cols", "nu.ibuf_bytes", "nu.wbuf_bytes", "nu.abuf_bytes",
              "vu.count", "vu.vbuf_bytes", "dma.channels", "sync.semaphores", "memory.dm.size")


def _attr_of(key: str) -> str | None:
    """The Config field a `.target` key names: a TOML key (`nu.count`) or a field name (`nu_count`)."""
    known = {f"{s}.{k}": a for s, keys in _TOML_KEYS.items() for k, a in keys.items()}
    return known.get(key) or (key if key in known.values() else None)


def shape_target(cfg: Config) -> dict[str, int]:
    """The `.target` entries a program built for `cfg` records (SHAPE_KEYS and their values)."""
    return {key: getattr(cfg, _attr_of(key)) for key in SHAPE_KEYS}


def target_mismatches(cfg: Config, target: dict[str, int | str]) -> list[str]:
    """Each `.target` entry naming a configuration key whose value differs from `cfg`'s, described.

    Other keys (notes such as a kernel name) are not configuration and are ignored.
    """
    out = []
    for key, value in target.items():
        attr = _attr_of(key)
        if attr is not None and value != getattr(cfg, attr):
            out.append(f"{key} = {value!r} (this machine: {_key_of(attr)} = {getattr(cfg, attr)})")
    return out


def _key_of(attr: str) -> str:
    for section, keys in _TOML_KEYS.items():
        for key, a in keys.items():
            if a == attr:
                return f"{section}.{key}"
    return attr


def _flatten(data: dict, prefix: str = "") -> dict[str, object]:
    out = {}
    for k, v in data.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, name + "."))
        else:
            out[name] = v
    return out


def config_from_dict(data: dict) -> Config:
    """Build a Config from parsed TOML; unknown keys are an error."""
    known = {f"{s}.{k}": a for s, keys in _TOML_KEYS.items() for k, a in keys.items()}
    values = {}
    for key, v in _flatten(data).items():
        if key not in known:
            raise ConfigError(f"unknown configuration key '{key}' (known: {', '.join(sorted(known))})")
        values[known[key]] = v
    return replace(Config(), **values).validate()


def load_config(path: str | Path | None = None) -> Config:
    """Load a TOML configuration file (the defaults when path is None)."""
    if path is None:
        return Config()
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:     # TOML is UTF-8; a binary given by mistake fails here
        raise ConfigError(f"{path}: not valid TOML: not UTF-8 text (byte {exc.start}: "
                          f"{exc.object[exc.start:exc.start + 1]!r})") from None
    try:
        return config_from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None


def config_toml(cfg: Config | None = None) -> str:
    """The configuration as an editable TOML file."""
    cfg = cfg or Config()
    lines = ["# NNP-1 configuration (defaults: the reference machine of docs/architecture.md).", ""]
    for section, keys in _TOML_KEYS.items():
        lines.append(f"[{section}]")
        for key, attr in keys.items():
            lines.append(f"{key} = {getattr(cfg, attr)}")
        lines.append("")
    return "\n".join(lines)
