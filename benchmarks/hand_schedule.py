"""A hand-written schedule for ResNet-50's layer1.0.conv2 (64 -> 64, 3x3, 56x56) beside the automatic one.

    python benchmarks/hand_schedule.py [--config HW.toml]

Builds the layer as benchmarks/resnet50.py does (same seed, same op), once with the schedule
the search picks and once with the hand-written one below, runs both on the simulator with
the race checker on, checks both against the numpy model, and prints simulated and predicted
cycles and program sizes, then both schedules' traces.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from compiler import Schedule, build  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from resnet50 import make_op, resnet50_convs  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)


def hand_schedule(op, config) -> Schedule:
    """4-row tiles of one 32-channel output block, every weight resident, the bias broadcast by DMA."""
    s = Schedule(op, config=config)
    s.split("oh", 4).split("oc", 32)                       # tiles of 4 x 56 pixels x 32 channels
    s.cache_read("x", "ibuf", "x_tile").double_buffer("x_tile")
    s.cache_read("w", "wbuf", "w_all").compute_at("w_all", "root")   # all 36,864 bytes of weights, loaded once
    s.reorder("n", "oh.o", "oc.o")                          # both output blocks of an input tile in a row
    s.cache_write("y", "abuf", "acc").double_buffer("acc")
    s.cache_write("y", "vbuf", "y_tile").double_buffer("y_tile", 3)
    s.tensorize("conv", "nu.conv").tensorize("bias", "dma").tensorize("requant", "vu.requant.pc")
    s.buffer_split("w", 0, 32).buffer_split("w", 2, 32).buffer_reorder("w", 0, 2, 4, 5, 3, 1)
    return s


def main() -> int:
    ap = parser(__doc__)
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(50)
    for name, c, o, hw, k, stride, pad in resnet50_convs():       # the ops in benchmarks/resnet50.py's order
        op = make_op(c, o, hw, k, stride, pad, rng)
        if name == "layer1.0.conv2":
            break
    x = np.random.default_rng(1).integers(-128, 128, (1, c, hw, hw), dtype=np.int8)
    want = op.reference(x)
    rows = []
    for label, kernel in (("automatic", build(op, config=cfg)),
                          ("hand-written", build(op, config=cfg, schedule=hand_schedule(op, cfg)))):
        if not np.array_equal(kernel(x, check_races=True), want):
            print(f"{label}: output differs from the numpy model", file=sys.stderr)
            return 1
        rows.append((label, kernel))
        print(f"{label:13} {kernel.stats.cycles:>9,} cycles simulated, {kernel.predicted_cycles:>9,} predicted, "
              f"{len(kernel.program.code):>5} instructions")
    (_, auto), (_, hand) = rows
    print(f"hand-written / automatic: {hand.stats.cycles / auto.stats.cycles:.4f}")
    if args.write_docs:
        write_table("hand-schedule", ["schedule", "simulated cycles", "predicted", "instructions"],
                    [[label, f"{k.stats.cycles:,}", f"{k.predicted_cycles:,}", f"{len(k.program.code):,}"]
                     for label, k in rows], "none; both bit-exact with the numpy model, race checking on.")
    for label, kernel in rows:
        print(f"\n{label} schedule:\n{kernel.schedule}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
