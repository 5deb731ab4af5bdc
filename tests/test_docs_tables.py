"""The docs stay a reference: the results page's tables are written by benchmarks that exist, no page is
too long to read, and every page the README links to is there.

docs/performance.md holds one table per benchmark between `<!-- table: NAME (benchmarks/SCRIPT.py ARGS) -->`
and `<!-- end table -->` (benchmarks/tables.py); `SCRIPT.py ARGS --write-docs` rewrites it.  Generated text
(docs/isa.md, the primitive catalogue between its markers in docs/schedules.md) is not held to the length.
"""
from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "performance.md"
MAX_LINES = 800
GENERATED_PAGES = {"isa.md", "operators.md"}     # written whole by `python -m isa_spec.docgen`, `compiler.onnx.opdoc`
GENERATED_BLOCKS = [("<!-- primitives: generated", "<!-- end of the generated primitives -->")]

sys.path.insert(0, str(ROOT / "benchmarks"))
import tables  # noqa: E402

MARKERS = tables.markers(RESULTS.read_text())


def accepts_write_docs(script: Path) -> bool:
    """Whether the script's argparse declares --write-docs: an add_argument call with that literal, or its
    parser made by tables.parser (which declares it: test_the_shared_parser_takes_the_flag)."""
    tree = ast.parse(script.read_text())
    shared = any(isinstance(n, ast.ImportFrom) and n.module == "tables" and "parser" in [a.name for a in n.names]
                 for n in ast.walk(tree))
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
                and any(isinstance(a, ast.Constant) and a.value == tables.FLAG for a in node.args)):
            return True
        if shared and isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "parser":
            return True
    return False


def test_the_shared_parser_takes_the_flag():
    args = tables.parser("A benchmark.\n\nMore.").parse_args([tables.FLAG, "--config", "hw.toml"])
    assert args.write_docs and args.config == "hw.toml"
    assert not tables.parser("A benchmark.").parse_args([]).write_docs


def own_lines(page: Path) -> int:
    """The page's lines, less those of its generated blocks (their markers included)."""
    lines, count, skipping = page.read_text().splitlines(), 0, None
    for line in lines:
        if skipping is None:
            begin = next((end for start, end in GENERATED_BLOCKS if line.startswith(start)), None)
            if begin is not None:
                skipping = begin
                continue
            count += 1
        elif line.startswith(skipping):
            skipping = None
    return count


def test_the_results_page_has_tables():
    assert len(MARKERS) >= 10
    names = [m["name"] for m in MARKERS]
    assert len(names) == len(set(names)), "two tables share a name"
    text = RESULTS.read_text()
    assert text.count("<!-- table: ") == len(MARKERS), "a table marker that does not parse, or has no end"


@pytest.mark.parametrize("marker", MARKERS, ids=[m["name"] for m in MARKERS])
def test_every_table_names_a_script_that_writes_it(marker):
    script = ROOT / "benchmarks" / marker["script"]
    assert script.is_file(), f"table {marker['name']}: {script} does not exist"
    assert accepts_write_docs(script), f"table {marker['name']}: {script.name} takes no {tables.FLAG}"
    assert f'"{marker["name"]}"' in script.read_text(), f"{script.name} never writes the table {marker['name']}"
    assert "Goal: " in marker["body"] and "Measured by `python " in marker["body"], marker["name"]


def test_write_table_replaces_one_table_and_refuses_another_command(tmp_path):
    page = tmp_path / "results.md"
    page.write_text("# R\n\n<!-- table: t (benchmarks/x.py --a 1) -->\nold\n<!-- end table -->\n\nafter\n")
    tables.write_table("t", ["k", "v"], [["a", 1]], "be quick.", argv=["--write-docs", "--a", "1"], doc=page)
    text = page.read_text()
    assert "old" not in text and "| a | 1 |" in text and "Goal: be quick." in text and text.endswith("after\n")
    assert "`python benchmarks/x.py --a 1`" in text
    with pytest.raises(SystemExit, match="not written"):
        tables.write_table("t", ["k"], [["b"]], "-", argv=["--a", "2", "--write-docs"], doc=page)
    assert tables.markers(page.read_text())[0]["name"] == "t"


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_no_page_is_over_the_length(page):
    if page.name in GENERATED_PAGES:
        return
    assert own_lines(page) <= MAX_LINES, f"docs/{page.name}: {own_lines(page)} lines of its own (at most {MAX_LINES})"


def test_every_docs_page_the_readme_links_to_exists():
    readme = (ROOT / "README.md").read_text()
    linked = set(re.findall(r"docs/[\w/.-]+\.(?:md|png)", readme))
    assert linked
    missing = sorted(p for p in linked if not (ROOT / p).exists())
    assert not missing, f"README.md links to {missing}"


def test_every_link_between_docs_pages_resolves():
    missing = []
    for page in DOCS.rglob("*.md"):
        for target in re.findall(r"\]\(([^)#:\s]+\.md)(?:#[^)]*)?\)", page.read_text()):
            if not (page.parent / target).exists():
                missing.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not missing, missing
