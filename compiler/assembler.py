"""The assembler service: emitted assembly and its .incbin files into an nnpasm Program."""
from __future__ import annotations

import tempfile
from pathlib import Path

import nnpasm
from isa_spec.program import Program

from .errors import CompileError


def assemble(asm: str, files: dict[str, bytes], filename: str) -> Program:
    """The Program of emitted assembly, its .incbin files placed beside it in a scratch directory."""
    with tempfile.TemporaryDirectory(prefix="nnpc") as tmp:
        for name, blob in files.items():
            Path(tmp, name).write_bytes(blob)
        try:
            return nnpasm.assemble(asm, filename=filename, include_dirs=[tmp])
        except nnpasm.AsmError as exc:
            raise CompileError(f"internal: the emitted assembly does not assemble: {exc}") from None


def save_asm(path: str | Path, asm: str, files: dict[str, bytes]) -> None:
    """Write the assembly and, beside it, the files it includes with .incbin."""
    path = Path(path)
    path.write_text(asm)
    for name, blob in files.items():
        path.with_name(name).write_bytes(blob)
