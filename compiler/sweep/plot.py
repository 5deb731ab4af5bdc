"""The Pareto front of cycles against the area proxy, as a table for the terminal and a plot.

The area proxy (area_of, a row's `area` column) is `area.mac` units per MAC of the arrays
plus `area.byte` units per byte of on-chip memory; the defaults, 256 and 1, price one int8
MAC with its accumulator like 256 bytes of SRAM (docs/sweep.md says why and how to change them).
A point is on the front of its workload when no other point of that workload is at most as
large in both cycles and area and smaller in one.
"""
from __future__ import annotations

from .spec import SweepError

PLOT_EXTRA = "pip install 'nnp-toolchain[plot]'"
PLOT_FORMATS = ("png", "pdf", "svg")       # what matplotlib's savefig writes with its default backend


def area_of(cfg, weights: dict) -> float:
    """The area proxy of a Config: weights["mac"] per MAC of the arrays plus weights["byte"] per on-chip byte."""
    return weights["mac"] * cfg.peak_macs_per_cycle + weights["byte"] * onchip_bytes(cfg)


def onchip_bytes(cfg) -> int:
    """Every on-chip buffer: IBUF, WBUF and ABUF per NU, VBUF per VU, and the data memory."""
    return (cfg.nu_count * (cfg.ibuf_bytes + cfg.wbuf_bytes + cfg.abuf_bytes) + cfg.vu_count * cfg.vbuf_bytes
            + cfg.dm_bytes)


def pareto_front(rows: list[dict]) -> list[dict]:
    """Rows of one workload not dominated in (cycles, area), by area then cycles."""
    ok = sorted((r for r in rows if not r["error"] and r["cycles"] is not None),
                key=lambda r: (r["area"], r["cycles"]))
    front, best = [], None
    for r in ok:
        if best is None or r["cycles"] < best:
            front.append(r)
            best = r["cycles"]
    return front


def by_workload(rows: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in rows:
        out.setdefault(r["workload"], []).append(r)
    return out


def front_table(rows: list[dict], keys: list[str]) -> str:
    """Per workload, the front's points: the swept keys, area, cycles, bound ratio, bit-exact."""
    lines = []
    for name, mine in by_workload(rows).items():
        front = pareto_front(mine)
        lines.append(f"Pareto front of {name}: {len(front)} of {len(mine)} points (cycles against area)")
        head = ["#"] + keys + ["area", "cycles", "x bound", "exact"]
        body = [[str(k)] + [str(r[key]) for key in keys] + [f"{r['area']:,.0f}", f"{r['cycles']:,}",
                                                           f"{r['cycles_per_bound']:.2f}",
                                                           "yes" if r["exact"] else "NO"]
                for k, r in enumerate(front, 1)]
        widths = [max(len(x) for x in col) for col in zip(head, *body)]
        for cells in [head] + body:
            lines.append("  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths)))
    return "\n".join(lines)


def plot_front(rows: list[dict], path: str, area: dict) -> None:
    """Cycles against area for every point (log axes over a wide range), each workload's front marked
    and numbered as front_table numbers it."""
    try:
        import matplotlib
    except ImportError:
        raise SweepError(f"--plot needs matplotlib: {PLOT_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for k, (name, mine) in enumerate(by_workload(rows).items()):
        ok = [r for r in mine if not r["error"] and r["cycles"] is not None]
        color = f"C{k % 10}"
        ax.scatter([r["area"] for r in ok], [r["cycles"] for r in ok], s=18, color=color, alpha=0.45,
                   label=f"{name} ({len(ok)} points)")
        front = pareto_front(mine)
        ax.step([r["area"] for r in front], [r["cycles"] for r in front], where="post", color=color, lw=1.2)
        ax.scatter([r["area"] for r in front], [r["cycles"] for r in front], s=46, facecolors="none",
                   edgecolors=color, linewidths=1.4)
        for k, r in enumerate(front, 1):       # numbered as in the front table nnpc sweep prints
            ax.annotate(str(k), (r["area"], r["cycles"]), fontsize=7, color=color, xytext=(4, 4),
                        textcoords="offset points")
    ok = [r for r in rows if not r["error"] and r["cycles"] is not None]
    for axis, col in ((ax.set_xscale, "area"), (ax.set_yscale, "cycles")):
        values = [r[col] for r in ok]
        if values and min(values) > 0 and max(values) > 10 * min(values):
            axis("log")          # a wide range: equal ratios at equal distances
    ax.set_xlabel(f"area proxy ({area['mac']:g} x MACs + {area['byte']:g} x on-chip bytes)")
    ax.set_ylabel("cycles")
    ax.set_title("cycles against area; circled and numbered: the Pareto front")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.25)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
