"""The end-to-end demo (`make demo`): the hand-written examples, assembled and simulated."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from nnpasm import AsmError, assemble
from nnpsim import SimError, Simulator
from nnpsim.stats import format_summary

ROOT = Path(__file__).resolve().parent.parent
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


def main(argv: list[str] | None = None) -> int:
    """Run every example; exit 1 on any assembler or simulator error."""
    OUT.mkdir(exist_ok=True)
    for path in sorted(EXAMPLES.glob("*.s")):
        try:
            run_example(path, OUT)
        except (AsmError, SimError) as exc:
            print(f"{path.name}: {exc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
