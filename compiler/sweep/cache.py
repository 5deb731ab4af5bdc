"""The compile cache on disk: data only (JSON, .npz, ELF binaries), never pickles.

An entry is `<root>/<kind>/<key[:2]>/<key>.json`, with any binary it has beside it
(`<key>.elf`, `<key>.npz`).  The JSON is written last and holds the sha256 of its own
payload and of each binary, so an entry a crash left half-written, a truncated file or
edited bytes are detected, counted as corrupt, and recompiled rather than trusted.  Every
file is written to a temporary name in the same directory and moved into place with
os.replace, so two workers writing one entry each leave a whole file, never a mixture.

Kinds: "program" (a compiled workload: its ELF and what running it needs), "choice" (the
tiling a layer's chain chose: JSON), "reference" (a network's onnxruntime output: .npz).
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

FORMAT = "nnpc-sweep-cache/1"


@dataclass
class CacheStats:
    """What one process looked up: hits and misses per kind, and corrupt entries found."""

    hits: dict[str, int] = field(default_factory=dict)
    misses: dict[str, int] = field(default_factory=dict)
    corrupt: int = 0
    write_error: str = ""       # the first entry that could not be stored, and why

    def count(self, kind: str, hit: bool) -> None:
        d = self.hits if hit else self.misses
        d[kind] = d.get(kind, 0) + 1


def sha256(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True).encode()


def write_atomic(path: Path, blob: bytes) -> None:
    """Write blob to path through a temporary file in the same directory and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class CompileCache:
    """Entries by kind and key; root None means no cache (every lookup misses, nothing is stored)."""

    def __init__(self, root: str | Path | None):
        self.root = None if root is None else Path(root)
        self.stats = CacheStats()

    def _path(self, kind: str, key: str, suffix: str) -> Path:
        return self.root / kind / key[:2] / f"{key}{suffix}"

    def get(self, kind: str, key: str) -> tuple[dict, dict[str, bytes]] | None:
        """(payload, {suffix: bytes}) of a sound entry, or None (missing or corrupt: count it)."""
        if self.root is None:
            return None
        entry = self._read(kind, key)
        self.stats.count(kind, entry is not None)
        return entry

    def _read(self, kind: str, key: str):
        try:
            doc = json.loads(self._path(kind, key, ".json").read_bytes())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self.stats.corrupt += 1
            return None
        try:
            ok = (doc["format"] == FORMAT and doc["key"] == key
                  and doc["payload_sha256"] == sha256(_canonical(doc["payload"])))
            blobs = {}
            for suffix, want in doc["files"].items():
                blob = self._path(kind, key, suffix).read_bytes()
                ok = ok and sha256(blob) == want
                blobs[suffix] = blob
        except (OSError, KeyError, TypeError, AttributeError):
            ok = False
        if not ok:
            self.stats.corrupt += 1
            return None
        return doc["payload"], blobs

    def put(self, kind: str, key: str, payload: dict, blobs: dict[str, bytes] | None = None) -> None:
        """Store an entry: its binaries first, then the JSON that vouches for them.

        An entry that cannot be written (a directory in its place, a full disk, no permission) is
        not stored and stats.write_error says why: the result it caches is sound all the same."""
        if self.root is None:
            return
        blobs = blobs or {}
        doc = {"format": FORMAT, "key": key, "payload": payload, "payload_sha256": sha256(_canonical(payload)),
               "files": {suffix: sha256(blob) for suffix, blob in blobs.items()}}
        try:
            for suffix, blob in blobs.items():
                write_atomic(self._path(kind, key, suffix), blob)
            write_atomic(self._path(kind, key, ".json"), _canonical(doc))
        except OSError as exc:
            self.stats.write_error = self.stats.write_error or f"{exc.filename or self.root}: {exc.strerror or exc}"


def arrays_to_npz(arrays: dict[str, np.ndarray]) -> bytes:
    """Arrays as .npz bytes (numpy's own format; loaded back with allow_pickle=False)."""
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def npz_to_arrays(blob: bytes) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(blob), allow_pickle=False) as z:
        return {k: z[k] for k in z.files}
