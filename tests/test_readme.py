"""Every ```python block of the README (and the opening example of docs/compiler.md) runs as it stands.

Each block runs in its own interpreter (this one, i.e. the venv's) with the
working directory a new temporary directory, so a block that relies on files
of the repository being in the current directory fails here.  PYTHONPATH
points at this tree, which is what the editable install of `make demo` does.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python\n(.*?)^```", re.S | re.M)
BLOCKS = FENCE.findall((ROOT / "README.md").read_text())
COMPILER_DOC = FENCE.findall((ROOT / "docs" / "compiler.md").read_text())

pytestmark = pytest.mark.usefixtures("warm_engine")


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


def run_block(block: str, cwd: Path) -> subprocess.CompletedProcess:
    script = cwd / "block.py"
    script.write_text(block)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=600)


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs_in_a_fresh_directory(index, tmp_path):
    proc = run_block(BLOCKS[index], tmp_path)
    assert proc.returncode == 0, f"README block {index} failed:\n{BLOCKS[index]}\n{proc.stderr}"
    assert "cycles" in proc.stdout


def test_compiler_doc_example_runs(tmp_path):
    proc = run_block(COMPILER_DOC[0], tmp_path)
    assert proc.returncode == 0, f"docs/compiler.md example failed:\n{proc.stderr}"
    assert (tmp_path / "conv.bin").stat().st_size > 0


def test_a_block_that_needs_the_repository_as_cwd_would_fail(tmp_path):
    """The fresh directory is really fresh: the old README's relative path does not resolve there."""
    proc = subprocess.run([sys.executable, "-c", "open('examples/matmul_db.s')"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "FileNotFoundError" in proc.stderr
