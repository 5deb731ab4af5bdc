"""nnpasm: the NNP-1 assembler (and, re-exported, its disassembler)."""
from __future__ import annotations

import os
from typing import Iterable, Mapping

from isa_spec.program import Program

from .assembler import Assembler
from .diagnostics import AsmError, Diagnostic

__all__ = ["AsmError", "Diagnostic", "Program", "assemble", "disassemble"]


def assemble(source: str, filename: str = "<string>", include_dirs: Iterable[str | os.PathLike] = (),
             defines: Mapping[str, int] | None = None, *, warnings: list[Diagnostic] | None = None) -> Program:
    """Assemble NNP-1 source text; raises AsmError listing every error found.

    Warnings (see nnpasm/param_warnings.py) are appended to `warnings` when a list is given.
    """
    asm = Assembler(include_dirs, defines)
    program = asm.run(source, filename)
    if warnings is not None:
        warnings.extend(asm.warnings)
    return program


def __getattr__(name: str):
    # The disassembler lives in its own module; import it only when asked for.
    if name == "disassemble":
        from .disasm import disassemble
        return disassemble
    raise AttributeError(f"module 'nnpasm' has no attribute {name!r}")
