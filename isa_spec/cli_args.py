"""The command lines' file arguments, checked once for nnpasm, nnpsim and nnpc.

An input file must be a readable, non-empty regular file: a directory, a device
(/dev/zero would be read for ever), a pipe or an unreadable file is refused with
one line naming it.  An output path is written exactly as given (no suffix is
added): it is refused before any work starts when it is a directory, its
directory does not exist or it cannot be written; a write that fails later
(ENOSPC on /dev/full, say) is reported, never swallowed.  Every refusal is a
CliFileError, one line; the parser's own refusals are one line too (OneLineParser).
"""
from __future__ import annotations

import argparse
import io
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np

NPY_MAGIC = b"\x93NUMPY"
EXIT_USAGE = 2


class CliFileError(Exception):
    """A file argument that cannot be used; the message is one line naming the file and the problem."""


class OneLineParser(argparse.ArgumentParser):
    """An ArgumentParser whose refusals are one line `prog: error: ...` and exit status 2 (no usage block)."""

    def error(self, message: str):
        root = self.prog.split()[0]
        print(f"{root}: error: {message} (see {self.prog} --help)", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a pipe"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "a special file"


def check_input(path: str | os.PathLike, what: str) -> None:
    """CliFileError unless `path` is a regular file with at least one readable byte."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise CliFileError(f"{what} {path}: cannot read: no such file") from None
    except OSError as exc:
        raise CliFileError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        raise CliFileError(f"{what} {path}: cannot read: it is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise CliFileError(f"{what} {path}: cannot read: it is {_kind(st.st_mode)}, not a regular file")
    try:
        with open(path, "rb") as fh:
            first = fh.read(1)           # /proc/self/mem opens, then fails here (EIO)
    except OSError as exc:
        raise CliFileError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None
    if not first:
        raise CliFileError(f"{what} {path}: is empty")


def read_bytes(path: str | os.PathLike, what: str) -> bytes:
    """The whole content of an input file checked by check_input."""
    check_input(path, what)
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise CliFileError(f"{what} {path}: cannot read: {exc.strerror or exc}") from None


def read_npy(path: str | os.PathLike, what: str) -> np.ndarray:
    """The array of a .npy input file (no pickles); CliFileError naming the file if it is not one."""
    blob = read_bytes(path, what)
    if not blob.startswith(NPY_MAGIC):
        raise CliFileError(f"{what} {path}: not a .npy file (no NUMPY header; write it with numpy.save)")
    try:
        return np.load(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, EOFError, SyntaxError, TypeError, OverflowError, MemoryError) as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise CliFileError(f"{what} {path}: not a valid .npy file ({reason})") from None


def check_output(path: str | os.PathLike, what: str) -> None:
    """CliFileError unless `path` can be written as given: not a directory, in a writable directory."""
    p = Path(path)
    parent = p.parent
    if str(path).endswith(os.sep) or p.is_dir():
        raise CliFileError(f"{what} {path}: is a directory; give a file name")
    if parent.exists() and not parent.is_dir():
        raise CliFileError(f"{what} {path}: {parent} is not a directory")
    if not parent.is_dir():
        raise CliFileError(f"{what} {path}: directory {parent} does not exist")
    if p.exists():
        if not os.access(p, os.W_OK):
            raise CliFileError(f"{what} {path}: not writable")
    elif not os.access(parent, os.W_OK | os.X_OK):
        raise CliFileError(f"{what} {path}: directory {parent} is not writable")


def write_output(path: str | os.PathLike, what: str, writer: Callable[[io.BufferedWriter], object]) -> None:
    """Open `path` exactly as given and let `writer` fill it; CliFileError if writing fails."""
    try:
        with open(path, "wb") as fh:
            writer(fh)
    except OSError as exc:
        raise CliFileError(f"{what} {path}: cannot write: {exc.strerror or exc}") from None


def write_with(path: str | os.PathLike, what: str, save: Callable[[str | os.PathLike], object]) -> None:
    """Call save(path) (a writer that opens `path` itself); CliFileError naming the file if it fails."""
    try:
        save(path)
    except OSError as exc:
        raise CliFileError(f"{what} {exc.filename or path}: cannot write: {exc.strerror or exc}") from None


def write_bytes(path: str | os.PathLike, what: str, data: bytes) -> None:
    """Write `data` to `path` exactly as given; CliFileError if writing fails."""
    write_output(path, what, lambda fh: fh.write(data))


def save_npy(path: str | os.PathLike, what: str, array: np.ndarray) -> None:
    """np.save to `path` exactly as given (np.save(name) would add .npy to other names)."""
    write_output(path, what, lambda fh: np.save(fh, array, allow_pickle=False))
