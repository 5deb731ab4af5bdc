"""Semaphore-wait mutants of compiled programs, judged by the simulator's race checker.

Every semaphore wait the compiler emitted is removed, one at a time (`wait_mutants`): a command's
`wait=sN` is cleared (the word re-encoded without it), a CU `sem.wait sN` becomes `nop`; a second
mutant also drops the signals paired with that wait.  `kill_all` runs every mutant with race checking
on, fails naming any that halts or stops on another error, and records its tally in SUMMARY (printed
by tests/compiler/passes/test_sync_mutation.py).
"""
from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict

from isa_spec import decode, encode, load_isa
from nnpsim import errors
from nnpsim.errors import SimError
from nnpsim.simulator import Simulator


MAX_CYCLES = 2_000_000


KILLED_BY = {errors.DATA_RACE: "race", errors.DEADLOCK: "deadlock"}


MUTATIONS = {"wait removed": False, "wait and its signal removed": True}


NOT_KILLS = ("in a loop", "signal not separable")      # tallies in the summary that are not kills


SUMMARY: list[tuple[str, int, Counter]] = []     # (kernel, mutants, kills by kind, "in loop" mutants counted too)


def issue_order(program, isa) -> list[int]:
    """Instruction indices in the order the CU executes them (the compiler's loops unrolled).

    A small interpreter of the CU's control flow: the registers the emitted code computes
    (li, la, addi, xori, add, sub), counted `loop`s, branches and jumps; everything else
    only moves to the next instruction.
    """
    decoded = [decode(int(word), isa) for word in program.code]
    regs = [0] * 32
    pc, out = 0, []
    while pc < len(decoded):
        out.append(pc)
        assert len(out) < 20_000_000, "the program does not halt"
        instr, op = decoded[pc]
        m, nxt = instr.mnemonic, pc + 1
        rd = op.get("rd", 0)
        value = None
        if m in ("li", "la"):
            value = op["imm"]
        elif m == "addi":
            value = regs[op["rs1"]] + op["imm"]
        elif m == "xori":
            value = regs[op["rs1"]] ^ op["imm"]
        elif m in ("add", "sub"):
            value = regs[op["rs1"]] + (1 if m == "add" else -1) * regs[op["rs2"]]
        elif m == "loop":
            value = regs[rd] - 1
            if value != 0:
                nxt = pc + op["off"] // 8
        elif m in ("beq", "bne", "blt", "bge"):
            a, b = regs[op["rs1"]], regs[op["rs2"]]
            if {"beq": a == b, "bne": a != b, "blt": a < b, "bge": a >= b}[m]:
                nxt = pc + op["off"] // 8
        elif m == "jal":
            value, nxt = 8 * (pc + 1), pc + op["off"] // 8
        elif m == "halt":
            break
        if value is not None and rd:
            regs[rd] = value
        pc = nxt
    return out


def wait_mutants(program, drop_signal: bool) -> list[tuple[str, object]]:
    """(what was removed, mutant program) for every semaphore wait in the program.

    A wait inside a loop body is removed from every iteration.  The k-th signal of a
    semaphore meets its k-th wait, counted in the order the CU issues them (loops unrolled);
    with drop_signal the signals that met the removed wait go too, so later waits keep their
    tokens and only that wait's edges are lost.  That is possible when those signals are
    whole instructions that only ever met this wait (not, say, a signal in a loop body whose
    first token is taken by a wait before the loop): otherwise there is no such mutant.
    """
    isa = load_isa()
    decoded = [decode(int(word), isa) for word in program.code]
    waits, signals = defaultdict(list), defaultdict(list)      # per semaphore, in issue order
    for i in issue_order(program, isa):
        instr, operands = decoded[i]
        sem = operands["sem"] if instr.mnemonic == "sem.wait" else operands.get("wait")
        if sem is not None:
            waits[sem].append(i)
        for name in ("signal", "signal2"):          # (instruction, the field that names the semaphore)
            if operands.get(name) is not None:
                signals[operands[name]].append((i, name))
    out = []
    for sem, at in waits.items():
        assert len(signals[sem]) == len(at), f"s{sem}: {len(signals[sem])} signals for {len(at)} waits"
        for i in sorted(set(at)):
            code = program.code.copy()
            code[i] = _without(decoded[i], "wait", isa)
            what = f"{decoded[i][0].mnemonic} s{sem} at {i * 8:#x}"
            if at.count(i) > 1:
                what += f" (in a loop: {at.count(i)} times)"
            if drop_signal:
                met = {signals[sem][k] for k, w in enumerate(at) if w == i}
                if any(signals[sem][k] in met and w != i for k, w in enumerate(at)):
                    continue
                for j, name in sorted(met):
                    code[j] = _without(decode(int(code[j]), isa), name, isa)
                what += " and its signal at " + ", ".join(f"{j * 8:#x} ({name})" for j, name in sorted(met))
            out.append((what, dataclasses.replace(program, code=code)))
    return out


def _without(decoded, field: str, isa) -> int:
    """The instruction word with its `field` semaphore cleared (a CU sem.wait becomes nop)."""
    instr, operands = decoded
    if instr.mnemonic == "sem.wait":
        return encode("nop", {}, isa)
    return encode(instr, {**operands, field: None}, isa)


def run(kernel, program, inputs) -> None:
    """Run `program` (the kernel's or a mutant) on the kernel's inputs with race checking on."""
    sim = Simulator(kernel.config)
    sim.load(program)
    for buf, a in zip(kernel.ir.inputs, inputs):
        sim.write(buf.name, a)
    sim.run(max_cycles=MAX_CYCLES, check_races=True)


def kill_all(kernel, inputs, label: str) -> None:
    """Run every mutant of the kernel and record the tally for the summary; fail naming any survivor."""
    run(kernel, kernel.program, inputs)         # the compiler's own program is race-free
    mutants = [(f"{kind}: {what}", m) for kind, drop in MUTATIONS.items()
               for what, m in wait_mutants(kernel.program, drop)]
    assert mutants, f"{label}: the compiler emitted no waits to remove"
    how, survivors = Counter(), []
    plain = sum(1 for what, _ in mutants if what.startswith("wait removed"))
    how["signal not separable"] = 2 * plain - len(mutants)
    for what, mutant in mutants:
        how["in a loop"] += "in a loop" in what
        try:
            run(kernel, mutant, inputs)
            survivors.append(f"{what}: ran to halt")
        except SimError as exc:
            if exc.code in KILLED_BY:
                how[KILLED_BY[exc.code]] += 1
            else:
                survivors.append(f"{what}: {exc}")
    SUMMARY.append((label, len(mutants), how))
    tally = f"{sum(v for k, v in how.items() if k not in NOT_KILLS)}/{len(mutants)} killed {dict(how)}: {label}"
    assert not survivors, f"{len(survivors)} mutants survive:\n" + "\n".join(survivors) + "\n" + tally
