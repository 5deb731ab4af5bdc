"""numba's on-disk cache, keyed on a hash of everything the jitted code is built from.

numba revalidates a cached function only against the timestamp of the file it
is defined in.  A constant or helper it compiled in from another module (a
unit's element limit, a footprint walker inlined into the race checker, a VU
op code or parameter offset read from isa_spec/nnp1.toml) can change without
that file changing, and the cache would then run stale machine code.  So
every cached function of nnpsim lives under a directory named by a hash of
all nnpsim sources and of isa_spec (the TOML and the loader that reads it):
any edit starts a fresh cache, an unchanged tree reuses it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba.core import config

import isa_spec
from isa_spec.model import SPEC_PATH

ROOT = Path(__file__).resolve().parent


def cache_inputs() -> list[Path]:
    """Every file the jitted code depends on: nnpsim's and isa_spec's sources, and the ISA's TOML."""
    isa_root = Path(isa_spec.__file__).resolve().parent
    return sorted(ROOT.rglob("*.py")) + sorted(isa_root.glob("*.py")) + [Path(SPEC_PATH).resolve()]


def source_digest() -> str:
    """Short hash of every file of cache_inputs() (names and contents)."""
    h = hashlib.sha256()
    for path in cache_inputs():
        h.update(f"{path.parent.name}/{path.name}".encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def use_versioned_cache() -> str:
    """Point numba's cache at $NUMBA_CACHE_DIR (or ~/.cache/nnpsim-numba)/<digest>; return it."""
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(Path.home(), ".cache", "nnpsim-numba")
    config.CACHE_DIR = os.path.join(base, f"nnpsim-{source_digest()}")
    return config.CACHE_DIR
