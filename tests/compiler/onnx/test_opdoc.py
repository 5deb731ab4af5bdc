"""docs/operators.md is the handler table's, and the table stays mergeable."""
from __future__ import annotations

import ast
from pathlib import Path

from compiler.onnx import opdoc, registry
from compiler.onnx.fold import FOLDABLE


def test_operators_page_is_current():
    assert opdoc.main(["--check"]) == 0, "docs/operators.md is stale: run `make docs` (python -m compiler.onnx.opdoc)"


def test_every_op_is_on_the_page_with_its_row():
    page = opdoc.DOC.read_text()
    for name, op in registry.OPS.items():
        row = next(line for line in page.splitlines() if line.startswith(f"| {name} |"))
        runs = (op.runs + (f"; host when input {op.weight} is an activation" if op.weight is not None else "")
                + ("; host when its result stays float (not quantised)" if op.quantised else ""))
        assert f"| {', '.join(registry.forms_of(name, op))} | {runs} |" in row, row
        assert op.runs in registry.RUNS and set(registry.forms_of(name, op)) <= set(registry.FORMS), name
    for name in FOLDABLE - set(registry.OPS):
        assert f"{name}," in page or f"{name}." in page, name


def test_no_op_is_given_twice():
    """A dict literal keeps the last of two equal keys silently: rows appended by two branches must not clash."""
    tree = ast.parse(Path(registry.__file__).read_text())
    table = next(n.value for n in ast.walk(tree) if isinstance(n, ast.AnnAssign) and getattr(n.target, "id", "") == "OPS")
    keys = [k.value for k in table.keys]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_default_forms():
    assert registry.forms_of("QLinearAdd", registry.OPS["QLinearAdd"]) == ("QOperator",)
    assert registry.forms_of("QLinearConv", registry.OPS["QLinearConv"]) == ("QOperator",)
    assert registry.forms_of("Conv", registry.OPS["Conv"]) == ("QDQ",)
