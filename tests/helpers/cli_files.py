"""Bad file arguments for the command lines (nnpasm, nnpsim, nnpc) and the checks of their answers."""
from __future__ import annotations

from pathlib import Path

UNREADABLE = "/proc/self/mem"   # opens, but reading offset 0 fails (EIO), even for root

# The kinds of bad input path every file argument is tried with.
INPUT_KINDS = ("missing", "directory", "empty", "unreadable", "null", "zero", "truncated")
# The kinds of output path: each is refused before work, or (full) reported when the write fails.
OUTPUT_KINDS = ("directory", "trailing_slash", "no_parent", "parent_is_file", "full")


def bad_input(tmp: Path, kind: str, good: Path | None = None, cut: int | None = None) -> str:
    """A path of `kind` under `tmp`; "truncated" is the first `cut` (default: half) bytes of `good`."""
    if kind == "missing":
        return str(tmp / "missing.file")
    if kind == "directory":
        (tmp / "a_dir").mkdir(exist_ok=True)
        return str(tmp / "a_dir")
    if kind == "empty":
        (tmp / "empty.file").write_bytes(b"")
        return str(tmp / "empty.file")
    if kind == "unreadable":
        return UNREADABLE
    if kind in ("null", "zero"):
        return f"/dev/{kind}"
    assert kind == "truncated" and good is not None, kind
    blob = Path(good).read_bytes()
    out = tmp / f"truncated{Path(good).suffix}"
    out.write_bytes(blob[:len(blob) // 2 if cut is None else cut])
    return str(out)


def bad_output(tmp: Path, kind: str, name: str = "out.file") -> str:
    """An output path of `kind` under `tmp` (or /dev/full, which accepts the open and fails the write)."""
    if kind == "directory":
        (tmp / "o_dir").mkdir(exist_ok=True)
        return str(tmp / "o_dir")
    if kind == "trailing_slash":
        return str(tmp / "nothing_yet") + "/"
    if kind == "no_parent":
        return str(tmp / "no" / "such" / name)
    if kind == "parent_is_file":
        (tmp / "plain").write_text("")
        return str(tmp / "plain" / name)
    assert kind == "full", kind
    return "/dev/full"


def one_error_line(tool: str, code: int, err: str, *words: str) -> str:
    """Exactly one `tool: error:` line on stderr, status 1 or 2, every word in it; the line."""
    lines = err.strip().splitlines()
    assert code in (1, 2), f"status {code}: {err}"
    assert len(lines) == 1 and lines[0].startswith(f"{tool}: error: "), err
    assert "Traceback" not in err
    for w in words:
        assert w in lines[0], f"{w!r} not in {lines[0]!r}"
    return lines[0]


def files_under(tmp: Path) -> set[str]:
    """Every file below `tmp` (relative paths), to check that a refused command wrote nothing."""
    return {str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()}
