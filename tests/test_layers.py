"""compiler/'s modules keep the layer order compiler.LAYERS states: no import cycle, no import from a lower
layer up to a higher one, and no function-local import of a compiler module (only optional extras:
onnx, onnxruntime, dask, matplotlib, tqdm, are imported inside functions)."""
from __future__ import annotations

import ast
from pathlib import Path

import compiler

ROOT = Path(compiler.__file__).resolve().parent

def module_name(path: Path) -> str:
    """The dotted name of a module file of compiler/."""
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _target(name: str) -> str | None:
    """The compiler module (or package) a dotted name is, or is in (None: not compiler's)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str) -> list[tuple[str, int, bool]]:
    """(imported compiler module, line, inside a function) of every import in a module."""
    path = MODULES[name]
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = []

    def visit(node, local: bool):
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((_target(a.name), child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    up = package.split(".")
                    up = up[:len(up) - child.level + 1]
                    base = ".".join(up + ([child.module] if child.module else []))
                for a in child.names:        # `from . import x` imports the module x when there is one
                    whole = f"{base}.{a.name}"
                    out.append((_target(whole) if whole in MODULES else _target(base), child.lineno, inner))
            visit(child, inner)

    visit(ast.parse(path.read_text()), False)
    return [(t, line, local) for t, line, local in out if t is not None and t != name and t != "compiler"]


GRAPH = {name: imports(name) for name in MODULES}


def layer_of(name: str) -> int:
    """The position in compiler.LAYERS of the entry a module is, or is inside (a package's modules share it;
    a package whose modules sit in several layers, as dynamic/, has its __init__ in the lowest of them)."""
    short = name.removeprefix("compiler.")
    inside = []
    for k, layer in enumerate(compiler.LAYERS):
        for entry in layer:
            if short == entry or short.startswith(entry + "."):
                return k
            if entry.startswith(short + "."):
                inside.append(k)
    assert inside, f"{name} is in no layer of compiler.LAYERS: add it"
    return min(inside)


def _edges() -> set[tuple[str, str]]:
    return {(a, b) for a, found in GRAPH.items() for b, _, _ in found}


def test_every_module_has_a_layer():
    for name in MODULES:
        if name != "compiler":
            layer_of(name)


def test_no_import_goes_up_a_layer():
    up = [f"{a} (layer {layer_of(a) + 1}) imports {b} (layer {layer_of(b) + 1})"
          for a, b in sorted(_edges()) if a != "compiler" and layer_of(b) > layer_of(a)]
    assert not up, "imports against compiler.LAYERS:\n  " + "\n  ".join(up)


def test_no_function_local_import_of_a_compiler_module():
    local = [f"{a}:{line} imports {b} inside a function" for a, found in sorted(GRAPH.items())
             for b, line, inner in found if inner]
    assert not local, "function-local imports of compiler modules:\n  " + "\n  ".join(local)


def test_no_import_cycle():
    edges = {a: sorted({b for b, _, _ in found}) for a, found in GRAPH.items()}
    state: dict[str, int] = {}
    cycles = []

    def walk(node: str, path: list[str]):
        state[node] = 1
        for nxt in edges.get(node, []):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [nxt]))
            elif not state.get(nxt):
                walk(nxt, path + [nxt])
        state[node] = 2

    for name in sorted(edges):
        if not state.get(name):
            walk(name, [name])
    assert not cycles, "import cycles:\n  " + "\n  ".join(cycles)


def _map_rows() -> list[tuple[str, list[str]]]:
    """(layer cell, file paths) of each row of docs/compiler.md's file map ("`a/b.py`, `c.py`": a/b.py, a/c.py)."""
    text = (ROOT.parent / "docs" / "compiler.md").read_text()
    table = text.split("## The files", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[1].startswith("`"):
            continue
        paths, folder = [], ""
        for name in cells[1].replace("`", "").split(", "):
            folder = name.rpartition("/")[0] + "/" if "/" in name else folder
            paths.append(name if "/" in name else folder + name)
        rows.append((cells[0], paths))
    return rows


def test_the_docs_file_map_lists_every_file_in_its_layer():
    """docs/compiler.md's map of compiler/ names every file (or its package) with the layer LAYERS gives it."""
    listed = {}
    for layer, paths in _map_rows():
        for path in paths:
            listed[path] = layer
    missing, wrong = [], []
    for name, path in MODULES.items():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "__init__.py" or (rel.endswith("/__init__.py") and rel[:-len("__init__.py")] not in listed):
            continue
        entry = rel if rel in listed else next((p for p in listed if p.endswith("/") and rel.startswith(p)), None)
        if entry is None:
            missing.append(rel)
        elif listed[entry] != str(layer_of(name) + 1):
            wrong.append(f"{rel}: the map says layer {listed[entry]}, LAYERS {layer_of(name) + 1}")
    assert not missing, f"files of compiler/ missing from docs/compiler.md's map: {missing}"
    assert not wrong, "docs/compiler.md's map against compiler.LAYERS:\n  " + "\n  ".join(wrong)


def test_the_readme_tree_names_every_folder_and_package():
    """README.md's map of the tree names each top-level folder, each package of compiler/ and each benchmark."""
    repo = ROOT.parent
    text = (repo / "README.md").read_text().split("## The tree", 1)[1].split("\n## ", 1)[0]
    folders = [p.name + "/" for p in repo.iterdir()
               if p.is_dir() and ((p / "__init__.py").exists() or p.name in ("examples", "benchmarks", "docs"))]
    packages = [p.parent.name + "/" for p in ROOT.glob("*/__init__.py")]
    scripts = [p.name for p in (repo / "benchmarks").glob("*.py")]
    missing = [n for n in folders + packages + scripts if n not in text]
    assert not missing, f"README.md's tree does not name: {missing}"
