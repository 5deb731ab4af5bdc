"""The layout of tests/: the tests mirror the code, and no test module imports from another test module.

A package's tests sit at its path under tests/: compiler/dynamic/conv.py's in
tests/compiler/dynamic/test_conv.py, a second file on one module named for what it covers
(test_conv_taps.py), a file on a package as a whole named for it (tests/compiler/passes/test_passes.py).
Tests of the whole toolchain (README, demo, examples, docs, layers, this layout) stay at tests/'s top,
the fuzzers in tests/fuzz/.  Every test folder is a package (an __init__.py), so that two folders may
hold the same file name (tests/compiler/test_build.py, tests/compiler/network/test_build.py).

Helpers shared by several test modules live in helper modules (tests/helpers/, tests/reference.py,
tests/isa_reference.py, tests/onnx_helpers.py, tests/fuzz/strategies.py) and fixtures in conftest.py,
so that a test module can be read, run, moved or deleted on its own.  Child-process scripts held in
strings inside a test module count too.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TEST_MODULES = sorted(TESTS.rglob("test_*.py"))
MIRRORED = ("compiler", "nnpsim", "nnpasm", "isa_spec")      # the packages whose tests mirror them
# an import statement of a script held in a string: `from tests.fuzz.test_x import ...`, `import test_x`
SCRIPT_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import\s+([\w, ]+)|import\s+([\w.]+))", re.MULTILINE)


def _is_test_module(dotted: str) -> bool:
    return dotted.split(".")[-1].startswith("test_")


def imports_of_test_modules(path: Path) -> list[str]:
    """The imports in one module (its code, and scripts in its strings) that name a test module,
    as 'line: statement'."""
    bad = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            names = [a.name for a in node.names]
            if _is_test_module(node.module or "") or any(map(_is_test_module, names)):   # from tests import test_x
                bad.append(f"{node.lineno}: from {'.' * node.level}{node.module or ''} import {', '.join(names)}")
        elif isinstance(node, ast.Import):
            bad += [f"{node.lineno}: import {a.name}" for a in node.names if _is_test_module(a.name)]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in SCRIPT_IMPORT.finditer(node.value):
                module, names, plain = m.groups()
                if _is_test_module(module or plain) or any(_is_test_module(n.strip()) for n in (names or "").split(",")):
                    at = m.start() + len(m.group(0)) - len(m.group(0).lstrip())
                    line = node.lineno + node.value.count("\n", 0, at)
                    bad.append(f"{line}: {m.group(0).strip()} (in a script held in a string)")
    return sorted(bad, key=lambda b: int(b.split(":")[0]))


def test_the_layout_test_sees_every_test_module():
    names = {p.name for p in TEST_MODULES}
    assert {"test_test_layout.py", "test_races.py", "test_fuzz_programs.py"} <= names
    assert len(TEST_MODULES) > 60


def test_the_check_finds_imports_between_test_modules(tmp_path):
    bad = tmp_path / "test_bad.py"
    bad.write_text("from tests.@races import schedule\nfrom .@dynamic import conv\n"
                   "from tests import @pipelining as p\nimport tests.fuzz.@fuzz_programs\n"
                   "from tests.helpers.races import schedule\nfrom tests import reference as ref\n"
                   'SCRIPT = """\nfrom tests.fuzz.@fuzz_programs import run_one\n"""\n'
                   .replace("@", "test_"))      # not spelt out here, where the check reads this module's strings
    assert [b.split(":")[0] for b in imports_of_test_modules(bad)] == ["1", "2", "3", "4", "8"]


def test_no_test_module_imports_from_another_test_module():
    found = {str(p.relative_to(TESTS)): imports_of_test_modules(p) for p in TEST_MODULES}
    found = {k: v for k, v in found.items() if v}
    assert not found, ("test modules import from other test modules (move the helper into tests/helpers/ "
                       "or a fixture into conftest.py):\n" + "\n".join(f"  {k}:{line}" for k, v in found.items()
                                                                        for line in v))


def what_it_tests(test: Path) -> Path | None:
    """The module or package of the code a mirrored test module names (None if none does):
    tests/A/B/test_NAME.py -> A/B/NAME.py, or the package A/B/ itself (NAME == B); NAME may carry
    _ASPECT after the module's name (test_conv_taps.py -> conv.py)."""
    folder = ROOT / test.parent.relative_to(TESTS)
    words = test.stem.removeprefix("test_").split("_")
    for n in range(len(words), 0, -1):
        name = "_".join(words[:n])
        if (folder / f"{name}.py").is_file():
            return folder / f"{name}.py"
        if name == folder.name and (folder / "__init__.py").is_file():
            return folder / "__init__.py"
    return None


def test_the_tests_mirror_the_code():
    mirrored = [p for p in TEST_MODULES if p.relative_to(TESTS).parts[0] in MIRRORED]
    assert len(mirrored) > 50
    strays = [str(p.relative_to(TESTS)) for p in mirrored if what_it_tests(p) is None]
    assert not strays, ("test modules that name no module at their path (tests/compiler/dynamic/test_conv.py "
                        "tests compiler/dynamic/conv.py):\n  " + "\n  ".join(strays))
    # a module of a mirrored package tested at tests/'s top would be hidden from a reader looking by path
    # (test_reference.py tests tests/reference.py, the helper beside it)
    top = [p.name for p in TESTS.glob("test_*.py") if not (TESTS / f"{p.stem.removeprefix('test_')}.py").is_file()
           and any((ROOT / pkg / f"{p.stem.removeprefix('test_')}.py").is_file() for pkg in MIRRORED)]
    assert not top, f"tests at tests/'s top named after a module of {MIRRORED}: {top}"


def test_every_test_folder_is_a_package():
    folders = {p.parent for p in TESTS.rglob("*.py")} - {TESTS}
    assert not [str(f.relative_to(TESTS)) for f in folders if not (f / "__init__.py").is_file()]
