"""The per-layer report as data: one row per layer of a network, written as CSV or JSON, drawn as a roofline.

The rows are what `nnpc compile --table` and `nnpc run --table` write and what
`nnpc run --plot` draws: the same fields whether the layer was priced (compile)
or simulated (run), so that users can feed them to their own plots.
"""
from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

from nnpsim.config import Config

from .errors import CompileError
from .ir import ON_CHIP
from .library import HostedLibrary, Library
from .runtime import LayerStats

MEMORIES = ON_CHIP
"""The on-chip memories a row carries a high-water mark for (bytes; the largest over the units' copies)."""

FIELDS = ("layer", "ops", "ran_on", "out_shape", "macs", "cycles", "measured", "predicted_cycles",
          "bound_cycles", "ratio", "mac_utilization_pct", "ddr_bytes", "start", "end") + \
    tuple(f"peak_{m}_bytes" for m in MEMORIES)
"""The columns of the table, in order (docs/runtime.md, "The per-layer table as data")."""

TABLE_SUFFIXES = (".csv", ".json")


def layer_rows(lib: Library | HostedLibrary, stats: Sequence[LayerStats] | None = None) -> list[dict]:
    """One row per layer: from the compile's prediction, or from a run's statistics when given (a host part's
    row: ran_on "host", its MACs, and no cycles: it does not run on the simulator)."""
    layers = lib.layers
    if stats is not None and len(stats) != len(layers):
        raise CompileError(f"{len(stats)} layer statistics for {len(layers)} layers")
    peak = lib.config.peak_macs_per_cycle
    rows = []
    for k, layer in enumerate(layers):
        s = stats[k] if stats is not None else None
        if layer.get("ran_on") == "host":
            rows.append(_host_row(layer, s is not None))
            continue
        cycles = s.cycles if s is not None else int(layer["predicted_cycles"])
        bound = int(layer["bound_cycles"])
        macs = int(layer.get("macs", 0))
        peaks = space_peaks(layer.get("onchip") or {})
        rows.append({
            "layer": layer["name"], "ops": layer["ops"], "ran_on": layer.get("ran_on", "npu"),
            "out_shape": "x".join(str(d) for d in layer["out_shape"]), "macs": macs, "cycles": cycles,
            "measured": s is not None, "predicted_cycles": int(layer["predicted_cycles"]),
            "bound_cycles": bound, "ratio": round(cycles / bound, 4) if bound else None,
            "mac_utilization_pct": (s.mac_utilization_pct if s is not None
                                    else round(100.0 * macs / (cycles * peak), 2) if cycles else 0.0),
            "ddr_bytes": s.ddr_bytes if s is not None else None,
            "start": s.start if s is not None else None, "end": s.end if s is not None else None,
            **{f"peak_{m}_bytes": peaks[m] for m in MEMORIES}})
    return rows


def _host_row(layer: dict, measured: bool) -> dict:
    """A host part's row: its name, ops and MACs; empty cycle and memory columns."""
    return {**dict.fromkeys(FIELDS), "layer": layer["name"], "ops": layer["ops"], "ran_on": "host",
            "out_shape": "x".join(str(d) for d in layer["out_shape"]), "macs": int(layer["macs"]),
            "measured": measured}


def space_peaks(onchip: dict[str, int]) -> dict[str, int]:
    """The high-water mark of each memory of MEMORIES from a kernel's per-unit peaks (ibuf0, ibuf1, dm)."""
    out = dict.fromkeys(MEMORIES, 0)
    for memory, n in onchip.items():
        space = memory.rstrip("0123456789")
        if space in out:
            out[space] = max(out[space], int(n))
    return out


def check_output_path(path: str, suffixes: tuple[str, ...], what: str) -> Path:
    """The path, or CompileError before any work when it cannot take the file (wrong suffix, no folder)."""
    p = Path(path)
    if p.suffix.lower() not in suffixes:
        raise CompileError(f"{what} {path!r}: the file must end in {' or '.join(suffixes)}")
    if p.is_dir():
        raise CompileError(f"{what} {path!r} is a directory")
    if not p.parent.is_dir():
        raise CompileError(f"{what} {path!r}: no such directory {str(p.parent)!r}")
    return p


def table_text(rows: list[dict], fmt: str) -> str:
    """The rows as CSV (a header, then a line per layer) or as JSON (a list of objects)."""
    if fmt == ".json":
        return json.dumps({"fields": list(FIELDS), "layers": rows}, indent=1) + "\n"
    out = io.StringIO()
    w = csv.DictWriter(out, fieldnames=FIELDS, lineterminator="\n")
    w.writeheader()
    w.writerows({k: ("" if r[k] is None else r[k]) for k in FIELDS} for r in rows)
    return out.getvalue()


def write_table(rows: list[dict], path: str) -> Path:
    """Write the rows to path (.csv or .json), whole or not at all (a temporary file renamed over it)."""
    p = check_output_path(path, TABLE_SUFFIXES, "--table")
    _write_atomic(p, table_text(rows, p.suffix.lower()).encode())
    return p


def _write_atomic(p: Path, data: bytes) -> None:
    """data into p through a temporary file in p's folder, so a reader never sees it torn."""
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", dir=p.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def roofline_points(rows: list[dict]) -> list[tuple[str, float, float]]:
    """(layer, MACs per DDR byte, MACs per cycle) of every measured layer with MACs and DDR traffic."""
    return [(r["layer"], r["macs"] / r["ddr_bytes"], r["macs"] / r["cycles"]) for r in rows
            if r["ddr_bytes"] and r["macs"] and r["cycles"]]


def plot_roofline(rows: list[dict], path: str, config: Config, title: str = "") -> Path:
    """Draw the layers on the machine's roofline as a PNG: MACs per cycle against MACs per DDR byte."""
    p = check_output_path(path, (".png",), "--plot")
    try:
        import matplotlib
    except ImportError:
        raise CompileError("--plot needs matplotlib: pip install 'nnp-toolchain[plot]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = roofline_points(rows)
    peak, bw = config.peak_macs_per_cycle, config.ddr_bytes_per_cycle
    knee = peak / bw
    xs = [x for _, x, _ in points] or [knee]
    lo, hi = min(min(xs), knee) / 4, max(max(xs), knee) * 4
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    ax.plot([lo, knee, hi], [lo * bw, peak, peak], color="black", lw=1.2, label="roofline")
    ax.scatter(xs if points else [], [y for _, _, y in points], s=14, color="tab:blue", label="layers")
    for name, x, y in sorted(points, key=lambda t: t[2] / min(peak, t[1] * bw))[:5]:
        ax.annotate(name, (x, y), fontsize=6, xytext=(3, -8), textcoords="offset points")
    ax.set(xscale="log", yscale="log", xlabel="MACs per DDR byte", ylabel="MACs per cycle",
           title=title or f"roofline: {peak} MACs/cycle, {bw} DDR bytes/cycle")
    ax.legend(loc="lower right", fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    plt.close(fig)
    _write_atomic(p, buf.getvalue())
    return p
