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


def _hits(rule, ops_rows: np.ndarray, unset: np.ndarray, params: np.ndarray) -> np.ndarray:
    """Which of the commands ops_rows read the rule's parameter unset (and, for a stride, needed it)."""
    bit = np.int64(1) << offset(checked_param(rule))
    hit = (unset[ops_rows] & bit) != 0
    if type(rule) is not Scalar:
        hit &= params[ops_rows, offset(rule.size)] > 1
    return ops_rows[hit]


def run_warnings(log: RunLog, program=None) -> list[str]:
    """One line per (instruction, parameter) whose reset value spoiled commands of this run."""
    if len(log.cmd_unset) != len(log.cmd_op) or len(log.cmd_op) == 0:
        return []
    isa = load_isa()
    rules = rules_for(isa)
    ops = np.asarray(log.cmd_op, np.int64)
    unset = np.asarray(log.cmd_unset, np.int64)
    params = np.asarray(log.cmd_params, np.int64)
    pcs = np.asarray(log.cmd_pc, np.int64)
    found: list[tuple[int, str]] = []
    for index in np.unique(ops).tolist():
        if not 0 <= index < len(isa.instructions):
            continue
        mnemonic = isa.instructions[index].mnemonic
        rows = np.flatnonzero(ops == index)
        for rule in rules.get(mnemonic, ()):
            spoiled, counts = np.unique(pcs[_hits(rule, rows, unset, params)], return_counts=True)
            for pc, n in zip(spoiled.tolist(), counts.tolist()):
                where = source_of(program, pc)
                at = f"pc {pc:#x}" + (f" ({where})" if where else "")
                found.append((pc, f"{at}: {message(mnemonic, rule)} [{n:,} command{'s' if n > 1 else ''}]"))
    return [text for _, text in sorted(found)]
