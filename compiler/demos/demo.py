"""The end-to-end demo (`make demo`): the hand-written examples, a small CNN layer by layer, then a whole network."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from nnpasm import AsmError, assemble
from nnpsim import SimError, Simulator
from nnpsim.stats import format_summary

from . import network_demo
from .cnn_demo import INPUT_SHAPE, format_table, run_network
from ..errors import CompileError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
OUT = ROOT / "out"


def run_example(path: Path, out: Path) -> None:
    """Assemble one example, run it with race checking and a trace, print its summary."""
    program = assemble(path.read_text(), str(path.relative_to(ROOT)), include_dirs=[str(EXAMPLES)])
    sim = Simulator()
    sim.load(program)
    trace = out / f"{path.stem}.trace.json"
    stats = sim.run(check_races=True, trace=str(trace))
    buffers = ", ".join(f"{b.name} {b.dtype}{list(b.shape)}" for b in program.buffers.values())
    print(f"==== {path.name}: {len(program.code)} instructions; buffers {buffers}")
    print(f"     no data race; trace: {os.path.relpath(trace)} (open in ui.perfetto.dev)")
    print(format_summary(stats))


def run_cnn(out: Path) -> None:
    """Compile, simulate and check the built-in CNN; print its per-layer table."""
    print(f"==== a quantised CNN on a {'x'.join(map(str, INPUT_SHAPE))} int8 input, random weights: "
          "each layer compiled, simulated with race checking, and equal to the numpy model")
    print(format_table(run_network(out)))
    print(f"     trace of the whole run: {os.path.relpath(out / 'cnn.trace.json')} (open in ui.perfetto.dev)")


def main(argv: list[str] | None = None) -> int:
    """Run every example, the CNN, then the whole network; exit 1 on any error."""
    OUT.mkdir(exist_ok=True)
    try:
        for path in sorted(EXAMPLES.glob("*.s")):
            run_example(path, OUT)
        run_cnn(OUT)
        network_demo.run(OUT)
    except (AsmError, SimError, CompileError, AssertionError) as exc:
        print(f"demo failed: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
