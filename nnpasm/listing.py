"""Assembly listings: address, encoding and source line side by side."""
from __future__ import annotations

from isa_spec.program import Program

BYTES_PER_ROW = 8
MAX_DATA_ROWS = 4


def format_listing(program: Program, rows: list[tuple]) -> str:
    """One line per source line: `SECTION ADDRESS  ENCODING  FILE:LINE  SOURCE`.

    An instruction shows its 64-bit word in hex (most significant digit
    first); data shows its bytes in memory order, 8 per row, at most
    MAX_DATA_ROWS rows per source line, then `...`.
    """
    out = []
    for section, addr, size, text, file, line in rows:
        chunks = _chunks(program, section, addr, size)
        tag = "T" if section == "text" else "D"
        where = f"{file}:{line}"
        first = chunks[0] if chunks else ""
        out.append(f"{tag} {addr:08x}  {first:<23}  {where:<20}  {text.rstrip()}")
        for n, chunk in enumerate(chunks[1:], 1):
            step = 8 if section == "text" else BYTES_PER_ROW
            out.append(f"{tag} {addr + n * step:08x}  {chunk}")
    return "\n".join(out) + "\n"


def _chunks(program: Program, section: str, addr: int, size: int) -> list[str]:
    if size == 0:
        return []
    if section == "text":
        return [f"{int(program.code[i]):016x}" for i in range(addr // 8, (addr + size) // 8)]
    rows = []
    for start in range(addr, addr + size, BYTES_PER_ROW):
        if len(rows) == MAX_DATA_ROWS:
            rows.append("...")
            break
        end = min(start + BYTES_PER_ROW, addr + size)
        blob = program.data[start:end].ljust(end - start, b"\0")
        rows.append(" ".join(f"{b:02x}" for b in blob))
    return rows
