"""Binary elementwise kernels against their DDR bound: QDQ Sub, Div, Max, Min (vu.fsub ... vu.fmin) and the
float add / mul of QLinearAdd / QLinearMul, with b an activation or a constant, broadcast or not.

    python benchmarks/binary.py [--config HW.toml] [--write-docs]

For each case: random int8 operands, the compiled kernel on the simulator, its output compared with the
op's numpy model (compiler.reference), then cycles, the roofline bound (compiler.roofline: least DDR bytes
over DDR bytes per cycle; no MACs), their ratio and the cost model's prediction.  Target: every case
bit-exact, priced exactly, and within 1.5x its bound (the exit status is 1 otherwise).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler import ops  # noqa: E402
from compiler.build import build  # noqa: E402
from nnpsim.config import load_config  # noqa: E402
from tables import parser, write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)

TARGET = 1.5
S = dict(za=3, zb=-5, scale_a=np.float32(0.05), scale_b=np.float32(0.03), zp_out=-2)


def _const(shape) -> np.ndarray:
    return np.random.default_rng(7).integers(1, 100, shape).astype(np.int8)


def cases() -> list[tuple[str, object]]:
    """(name, op) of every measured binary op."""
    q = dict(S, scale_out=np.float32(0.07))
    return [
        ("sub 64x56x56, two activations", ops.qdq_binary("sub", (1, 64, 56, 56), **q)),
        ("sub 96x28x28, constant scalar first (reversed)",
         ops.qdq_binary("sub", (1, 96, 28, 28), **q, b_shape=(1, 1, 1, 1), b_const=_const((1, 1, 1, 1)),
                        reverse=True)),
        ("div 96x28x28 by a per-channel constant",
         ops.qdq_binary("div", (1, 96, 28, 28), **dict(q, scale_out=np.float32(0.6)), b_shape=(1, 96, 1, 1),
                        b_const=_const((1, 96, 1, 1)))),
        ("max 32x112x112, two activations", ops.qdq_binary("max", (1, 32, 112, 112), **q)),
        ("min 40x52x52 with one plane", ops.qdq_binary("min", (1, 40, 52, 52), **q, b_shape=(1, 1, 52, 52))),
        ("mul 576x14x14 by a per-channel gate (squeeze-excite)",
         ops.mul((1, 576, 14, 14), **q, b_shape=(1, 576, 1, 1))),
        ("mul 96x56x56, two activations (SiLU's x * sigmoid(x))", ops.mul((1, 96, 56, 56), **q)),
        ("add 120x28x28, per-channel constant", ops.add((1, 120, 28, 28), **q, b_shape=(1, 120, 1, 1),
                                                         b_const=_const((1, 120, 1, 1)))),
    ]


def measure(name: str, op, cfg, rng) -> list[str]:
    """One case's table row: cycles, bound, ratio, prediction, exact."""
    kernel = build(op, config=cfg)
    ins = [rng.integers(-128, 128, t.shape, dtype=np.int8) for t in op.inputs]
    exact = np.array_equal(kernel(*ins), op.reference(*ins))
    cycles, bound = kernel.stats.cycles, kernel.roofline_cycles
    return [name, f"{cycles:,}", f"{bound:,}", f"{cycles / bound:.2f}", f"{kernel.predicted_cycles:,}",
            "yes" if exact and kernel.predicted_cycles == cycles else "NO"]


def run(table: str, args: argparse.Namespace, make_cases) -> int:
    """Measure make_cases()'s (name, op) kernels on args.config's machine, print them, write the table `table`
    with args.write_docs; 1 if one misses the target."""
    cfg, rng = load_config(args.config), np.random.default_rng(1)
    header = ["op", "cycles", "bound", "ratio", "predicted", "exact, priced exactly"]
    rows = [measure(name, op, cfg, rng) for name, op in make_cases()]
    print("\n".join(" | ".join(r) for r in [header] + rows))
    missed = [f"{r[0]}: not bit-exact or mispriced" for r in rows if r[5] != "yes"]
    missed += [f"{r[0]}: {r[3]}x its bound (target <= {TARGET})" for r in rows if float(r[3]) > TARGET]
    for line in missed:
        print(f"target missed: {line}", file=sys.stderr)
    if args.write_docs:
        write_table(table, header, rows, f"every case bit-exact, priced exactly and within {TARGET}x its DDR bound.")
    return 1 if missed else 0


def main() -> int:
    ap = parser(__doc__)
    return run("binary", ap.parse_args(), cases)


if __name__ == "__main__":
    sys.exit(main())
