"""Run-time warnings: a command read a parameter still at its reset value, where that spoils its result.

The rules are isa_spec.param_rules, the same the assembler checks statically;
here they are applied to what each command really read.  The engine records,
per command, which registers of its group had never been written since reset
(RunLog.cmd_unset); a rule fires when its parameter is among them and, for a
stride, when its dimension is longer than 1.  Each (instruction, parameter)
is reported once, with the number of commands it spoiled.  Warnings never
change a run's outcome.
"""
from __future__ import annotations

import numpy as np

from isa_spec import load_isa
from isa_spec.param_rules import Scalar, checked_param, message, rules_for

from .isa_layout import offset
from .races import source_of
from .runlog import RunLog


_OP_RULES: dict[int, tuple] = {}
"""_rule_table's result by the ISA's id, with the ISA (load_isa keeps each one for good)."""


def _rule_table(isa) -> list[tuple]:
    """Each distinct rule of rules_for with the bit it checks, its size parameter's offset (-1 for a scalar)
    and which instruction indices have it."""
    hit = _OP_RULES.get(id(isa))
    if hit is None or hit[0] is not isa:
        rules = rules_for(isa)
        per_op = [rules.get(ins.mnemonic, ()) for ins in isa.instructions]
        table = []
        for rule in dict.fromkeys(r for rs in per_op for r in rs):
            has = np.array([rule in rs for rs in per_op], bool)
            size = -1 if type(rule) is Scalar else offset(rule.size)
            table.append((rule, np.int64(1) << np.int64(offset(checked_param(rule))), size, has))
        hit = _OP_RULES[id(isa)] = (isa, table)
    return hit[1]


def run_warnings(log: RunLog, program=None) -> list[str]:
    """One line per (instruction, parameter) whose reset value spoiled commands of this run."""
    if len(log.cmd_unset) != len(log.cmd_op) or len(log.cmd_op) == 0:
        return []
    isa = load_isa()
    ops = np.asarray(log.cmd_op, np.int64)
    unset = np.asarray(log.cmd_unset, np.int64)
    params = np.asarray(log.cmd_params, np.int64)
    pcs = np.asarray(log.cmd_pc, np.int64)
    known = (ops >= 0) & (ops < len(isa.instructions))
    op_at = np.where(known, ops, 0)
    found: list[tuple[int, str]] = []
    for rule, bit, size, has in _rule_table(isa):      # each rule once over every command: a run has few hits
        hit = known & has[op_at] & ((unset & bit) != 0)
        if size >= 0:
            hit &= params[:, size] > 1      # a stride matters only along a dimension longer than 1
        rows = np.flatnonzero(hit)
        for index in np.unique(ops[rows]).tolist():
            mnemonic = isa.instructions[index].mnemonic
            spoiled, counts = np.unique(pcs[rows[ops[rows] == index]], return_counts=True)
            for pc, n in zip(spoiled.tolist(), counts.tolist()):
                where = source_of(program, pc)
                at = f"pc {pc:#x}" + (f" ({where})" if where else "")
                found.append((pc, f"{at}: {message(mnemonic, rule)} [{n:,} command{'s' if n > 1 else ''}]"))
    return [text for _, text in sorted(found)]
