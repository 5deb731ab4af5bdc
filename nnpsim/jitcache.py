"""numba's on-disk cache, keyed on a hash of the simulator's sources.

numba revalidates a cached function only against the timestamp of the file it
is defined in.  A constant or helper it compiled in from another module (a
unit's element limit, a footprint walker inlined into the race checker) can
change without that file changing, and the cache would then run stale machine
code.  So every cached function of nnpsim lives under a directory named by a
hash of all nnpsim sources: any edit starts a fresh cache, an unchanged tree
reuses it.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from numba.core import config

ROOT = Path(__file__).resolve().parent


def source_digest() -> str:
    """Short hash of every nnpsim source file (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(ROOT.rglob("*.py")):
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def use_versioned_cache() -> str:
    """Point numba's cache at $NUMBA_CACHE_DIR (or ~/.cache/nnpsim-numba)/<digest>; return it."""
    base = os.environ.get("NUMBA_CACHE_DIR") or os.path.join(Path.home(), ".cache", "nnpsim-numba")
    config.CACHE_DIR = os.path.join(base, f"nnpsim-{source_digest()}")
    return config.CACHE_DIR
