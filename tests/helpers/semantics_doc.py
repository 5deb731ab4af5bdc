"""docs/semantics.md's python blocks run as one namespace: the page's own model of every op, which the
tests of compiler.reference and of the ops compare with."""
from __future__ import annotations

import re
from pathlib import Path

PAGE = Path(__file__).resolve().parents[2] / "docs" / "semantics.md"
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def page_namespace(text: str) -> dict:
    """Run every python block of the page, in order, in one fresh namespace."""
    blocks = list(BLOCK.finditer(text))
    assert blocks, "no ```python blocks in docs/semantics.md"
    ns: dict = {"__name__": "semantics_doc"}
    for block in blocks:
        lines_before = text.count("\n", 0, block.start(1))       # tracebacks point at the page's lines
        exec(compile("\n" * lines_before + block.group(1), str(PAGE), "exec"), ns)
    return ns


DOC = page_namespace(PAGE.read_text())
