"""Time nnpasm on a generated 100,000-line program (not part of the test suite).

    python benchmarks/assembler.py [--lines N] [--runs R] [--seed S]

Prints the median wall time of R cold runs (the line and operand caches
emptied before each; the LALR parser itself is built once beforehand, as any
process that assembles more than once would) and the lines per second.
"""
from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from isa_spec import load_isa  # noqa: E402
from nnpasm import assemble  # noqa: E402
from nnpasm.parser import clear_caches, lark_parser  # noqa: E402
from tables import write_table  # benchmarks/tables.py (benchmarks/ is on sys.path)


def _reg(rng: random.Random) -> str:
    return f"r{rng.randrange(32)}"


def _instruction(rng: random.Random, isa, locals_: list[str]) -> str:
    """One random instruction of any kind, with the operand mix a kernel has."""
    instr = rng.choice(isa.instructions)
    if instr.mnemonic == "halt":
        return "nop"
    ops = []
    for operand in instr.operands:
        if operand.is_mem:
            space = instr.fields[operand.fields[0]].kind
            ops.append(f"{rng.choice(list(space.values))}[{_reg(rng)}]")
            continue
        fld = instr.fields[operand.fields[0]]
        cls = fld.kind.cls
        if cls == "reg":
            ops.append(_reg(rng))
        elif cls == "sem":
            ops.append(f"s{rng.randrange(32)}")
        elif cls == "enum":
            ops.append(rng.choice(list(fld.kind.values)))
        elif cls == "pcrel":
            ops.append(rng.choice(locals_))
        elif cls == "addr":
            ops.append(rng.choice(["in_buf", "w_buf", "out_buf", "out_buf + 64"]))
        elif fld.name == "mask":
            ops.append(rng.choice(["Q_ALL", "Q_DMA0 | Q_NU0", "Q_VU"]))
        else:
            lo, hi = fld.value_range()
            if hi < 4096:
                ops.append(str(rng.randint(max(lo, 0), hi)))
                continue
            ops.append(rng.choice([str(rng.randint(0, min(hi, 4096))), f"{rng.randint(1, 64)} * TILE",
                                   f"0x{rng.randint(0, min(hi, 0xFFFF)):x}", "TILE - 1"]))
    text = f"{instr.mnemonic} {', '.join(ops)}".rstrip()
    if instr.is_command and rng.random() < 0.5:
        text += f", wait=s{rng.randrange(32)}, signal=s{rng.randrange(32)}"
    return text


def generate(lines: int, seed: int = 1) -> str:
    """A program of about `lines` lines: labelled blocks of mixed instructions, then .data."""
    rng = random.Random(seed)
    isa = load_isa()
    out = ["; generated benchmark program", ".equ TILE, 32", ".text", "main:"]
    block = 0
    n_text = lines * 9 // 10
    while len(out) < n_text:
        block += 1
        out.append(f"block{block}:")
        out.append(".top:")
        locals_ = [".top", ".mid", ".end"]
        for k in range(60):
            r = rng.random()
            if k == 30:
                out.append(".mid:    ; middle of the block")
            elif r < 0.08:
                out.append(f"    ; step {k} of block {block}")
            elif r < 0.12:
                out.append("")
            elif r < 0.30:
                out.append(f"    setpi dma.size{rng.randrange(4)}, {rng.choice([1, 16, 32, 64])}")
            else:
                out.append(f"    {_instruction(rng, isa, locals_)}")
        out.append(".end:")
    out.append("    halt")
    out += [".data", ".buffer in_buf, int8, (4, 64, 64)", ".space 4 * 64 * 64, 1",
            ".buffer w_buf, int8, (64, 64)"]
    while len(out) < lines - 3:
        out.append("    .byte " + ", ".join(str(rng.randint(-128, 127)) for _ in range(16)))
    out += [".align 64", ".buffer out_buf, int32, (4, 64)", ".space 4 * 64 * 4"]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Generate, assemble R times, print the median."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=100_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--write-docs", action="store_true", help="write the measured table into docs/performance.md")
    args = ap.parse_args(argv)
    source = generate(args.lines, args.seed)
    n = source.count("\n")
    lark_parser()
    times = []
    for _ in range(args.runs):
        clear_caches()
        gc.collect()
        t0 = time.perf_counter()
        prog = assemble(source, "bench.s")
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    print(f"{n} lines, {len(prog.code)} instructions, {prog.data_size} data bytes")
    print(f"runs: {', '.join(f'{t:.2f}' for t in times)} s; median {med:.2f} s, {n / med:,.0f} lines/s")
    if args.write_docs:
        write_table("assembler", ["figure", "measured", "goal"],
                    [[f"median of {args.runs} runs, {n:,} lines", f"{med:.2f} s ({n / med:,.0f} lines/s)", "< 3 s"]],
                    "assemble 100,000 lines in under 3 s.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
