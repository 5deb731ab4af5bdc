"""The persistent compile cache: results of the expensive steps, on disk, keyed by everything they depend on.

Two kinds of entry (compiler.search and compiler.network.build write them):

  search    a chain's chosen schedule: the position of the search's winner among its candidates
            and its predicted cycles (search.search rebuilds the program from that choice; a
            network's fusion and layout plans take the price without building anything)
  network   a whole network's program: binary, graph description, assembly and weight files (those the
            binary's data holds, by name only: network.build.stored_files)

A key is the SHA-256 of the entry's kind, its inputs (every op parameter, the weight and bias
bytes, shapes, the schedule hint or build options, the whole machine configuration: canonical_bytes)
and a fingerprint of the toolchain's own sources (compiler/, nnpsim/, nnpasm/, isa_spec/: source_digest),
so an edit to the compiler never reuses an entry made before it.

Where: $NNP_CACHE_DIR, else $XDG_CACHE_HOME/nnp, else ~/.cache/nnp.  NNP_CACHE=0 turns it off
(`nnpc compile --no-cache` too).  An entry is a file written to a temporary name and moved into place
(os.replace), so a reader sees a whole entry or none; a reader checks its magic, length and SHA-256
before unpickling it, and anything else (torn, truncated, garbage, a directory in its place) is a miss
that is recompiled and overwritten.  The directory is the user's own (made mode 0700): an entry is a
pickle, trusted once its digest matches.  After each network entry the oldest entries (by modification
time) go until the cache holds at most $NNP_CACHE_MAX_BYTES (default MAX_BYTES).
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import pickle
import struct
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import numpy as np

MAGIC = b"NNPCACHE1\n"
MAX_BYTES = 2 << 30          # 2 GiB: a 224x224 ResNet-50 network entry takes about 55 MB
KINDS = ("search", "network")
_HEAD = struct.Struct("<Q32s")   # payload length, its SHA-256
_OFF: list[bool] = []            # off(): a stack of switches, innermost last


class Uncacheable(TypeError):
    """An input canonical_bytes cannot encode exactly: the step runs uncached."""


def enabled() -> bool:
    """Is the cache on (NNP_CACHE is not 0 and no off() is active)?"""
    return not _OFF and os.environ.get("NNP_CACHE", "1").strip().lower() not in ("0", "off", "no", "false")


def wanted(kind: str) -> bool:
    """Is a key of this kind worth making: the cache is on, or values of the kind are remembered?  With
    neither, get finds nothing and put stores nothing, and the key's hash of every weight is wasted."""
    return enabled() or any(k == kind for k, _ in _MEMORY)


@contextmanager
def off() -> Iterator[None]:
    """The body runs with the cache off (neither read nor written)."""
    _OFF.append(True)
    try:
        yield
    finally:
        _OFF.pop()


def directory() -> Path:
    """$NNP_CACHE_DIR, else $XDG_CACHE_HOME/nnp, else ~/.cache/nnp."""
    if os.environ.get("NNP_CACHE_DIR"):
        return Path(os.environ["NNP_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base, "nnp")


def max_bytes() -> int:
    """The bound on the cache's size: $NNP_CACHE_MAX_BYTES, else MAX_BYTES."""
    try:
        return max(0, int(os.environ.get("NNP_CACHE_MAX_BYTES", MAX_BYTES)))
    except ValueError:
        return MAX_BYTES


# ---------------------------------------------------------------------- keys

def source_files() -> list[Path]:
    """Every file the compiled programs depend on: the sources of compiler/, nnpsim/, nnpasm/ and isa_spec/
    (Python, the ISA's TOML, the assembler's grammar)."""
    repo = Path(__file__).resolve().parent.parent
    return sorted(p for pkg in ("compiler", "nnpsim", "nnpasm", "isa_spec") for ext in ("py", "toml", "lark")
                  for p in (repo / pkg).rglob(f"*.{ext}"))


@lru_cache(maxsize=1)
def source_digest() -> str:
    """SHA-256 of every file of source_files() (paths and contents), once per process."""
    h = hashlib.sha256()
    repo = Path(__file__).resolve().parent.parent
    for path in source_files():
        h.update(path.relative_to(repo).as_posix().encode() + b"\0")
        data = path.read_bytes()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def canonical_bytes(obj: object, h) -> None:
    """Feed an exact, type-tagged encoding of obj into the hash h: None, bools, ints, floats (bit
    exact), strings, bytes, tuples, lists, dicts, sets, numpy arrays (order, dtype, shape and bytes) and
    scalars, dataclasses (their class and fields) and plain objects (their class and attributes).
    Anything else (a function, a generator) is Uncacheable."""
    if obj is None or isinstance(obj, (bool, int, str, bytes)):
        h.update(b"%s:%d:" % (type(obj).__name__.encode(), len(repr(obj))) + repr(obj).encode())
    elif isinstance(obj, float):
        h.update(b"f:" + float(obj).hex().encode() + b";")
    elif isinstance(obj, np.ndarray):
        if obj.dtype.hasobject:
            raise Uncacheable("a numpy array of objects")
        # the bytes in C order, or a Fortran-ordered array's in its own order (tagged): hashed where they
        # lie, for a network's weights (a transposed int64 matrix of a dense layer) copied are most of a
        # second compile's key
        fortran = not obj.flags.c_contiguous and obj.flags.f_contiguous
        h.update(b"a:%s:%s:%s:" % (b"F" if fortran else b"C", obj.dtype.str.encode(), repr(obj.shape).encode()))
        h.update(obj.T if fortran else np.ascontiguousarray(obj))
    elif isinstance(obj, np.generic):
        canonical_bytes(obj.item(), h)
        h.update(obj.dtype.str.encode())
    elif isinstance(obj, (tuple, list, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        h.update(b"%s[%d:" % (type(obj).__name__.encode(), len(items)))
        for item in items:
            canonical_bytes(item, h)
        h.update(b"]")
    elif isinstance(obj, dict):
        h.update(b"d{%d:" % len(obj))
        for k, v in obj.items():
            canonical_bytes(k, h)
            canonical_bytes(v, h)
        h.update(b"}")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        _object(obj, {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}, h)
    elif hasattr(obj, "__dict__") and not callable(obj) and type(obj).__module__.startswith("compiler"):
        _object(obj, vars(obj), h)
    else:
        raise Uncacheable(f"cannot key on a {type(obj).__module__}.{type(obj).__qualname__}")


def _object(obj: object, attrs: dict, h) -> None:
    h.update(b"o:" + f"{type(obj).__module__}.{type(obj).__qualname__}".encode())
    canonical_bytes(attrs, h)


def key(kind: str, *inputs: object) -> str | None:
    """The entry's key for these inputs (None: an input cannot be keyed exactly).  Keys are made with the
    cache off too: values computed ahead by worker processes are found by them (remembered)."""
    h = hashlib.sha256()
    h.update(f"{kind}\0{source_digest()}\0".encode())
    try:
        canonical_bytes(inputs, h)
    except Uncacheable:
        return None
    return h.hexdigest()


# ---------------------------------------------------------------------- entries

def path_of(kind: str, k: str) -> Path:
    """Where the entry of kind `kind` and key k lives."""
    return directory() / kind / k[:2] / k


_MEMORY: dict[tuple[str, str], object] = {}
"""Values this process was handed (remembered), read before the disk and whatever enabled() says."""


@contextmanager
def remembered(kind: str, values: dict[str, object]) -> Iterator[None]:
    """The body finds values (key -> value, of this kind) as if they were entries; forgotten after it."""
    mine = {(kind, k): v for k, v in values.items() if (kind, k) not in _MEMORY}
    _MEMORY.update(mine)
    try:
        yield
    finally:
        for k in mine:
            _MEMORY.pop(k, None)


def get(kind: str, k: str | None, valid: Callable[[object], bool] = lambda v: True) -> object | None:
    """The value stored under key k, or None: no key, no entry, or an entry that is not whole and
    valid (wrong magic, length or digest, unpicklable, rejected by `valid`); never raises."""
    if k is not None and (kind, k) in _MEMORY and valid(_MEMORY[kind, k]):
        return _MEMORY[kind, k]
    if k is None or not enabled():
        return None
    try:
        data = path_of(kind, k).read_bytes()
    except (OSError, ValueError):
        return None
    head = len(MAGIC) + _HEAD.size
    if len(data) < head or not data.startswith(MAGIC):
        return None
    size, digest = _HEAD.unpack_from(data, len(MAGIC))
    payload = data[head:]
    if len(payload) != size or hashlib.sha256(payload).digest() != digest:
        return None
    try:
        value = pickle.loads(payload)
        return value if valid(value) else None
    except Exception:        # a payload that matches its digest but not this code's classes: a miss
        return None


def put(kind: str, k: str | None, value: object) -> None:
    """Store value under key k (nothing when k is None): written to a temporary file beside the entry,
    then moved into place; a cache that cannot be written (read-only, full, a directory in the entry's
    place) is skipped silently, the compile's result being unaffected."""
    if k is None or not enabled():
        return
    path = path_of(kind, k)
    try:
        payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return
    data = MAGIC + _HEAD.pack(len(payload), hashlib.sha256(payload).digest()) + payload
    tmp = None
    try:
        directory().mkdir(mode=0o700, parents=True, exist_ok=True)      # the root private, not only the leaf
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=f".{os.getpid()}")
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
        tmp = None
    except OSError:
        pass
    finally:
        if tmp is not None:
            with _quiet():
                os.unlink(tmp)


@contextmanager
def _quiet() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass


def entries() -> list[tuple[Path, int, float]]:
    """(path, bytes, modification time) of every entry, temporary files of other writers included."""
    out = []
    for kind in KINDS:
        for p in (directory() / kind).glob("*/*"):
            with _quiet():
                st = p.stat()
                if p.is_file():
                    out.append((p, st.st_size, st.st_mtime))
    return out


def prune(limit: int | None = None) -> int:
    """Remove the oldest entries until the cache holds at most `limit` bytes (max_bytes()); bytes removed."""
    limit = max_bytes() if limit is None else limit
    found = sorted(entries(), key=lambda e: e[2])
    total, removed = sum(e[1] for e in found), 0
    for p, size, _ in found:
        if total - removed <= limit:
            break
        with _quiet():
            p.unlink()
            removed += size
    return removed
