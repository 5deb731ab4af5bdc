"""Every ```python block of the README runs as it stands, in a fresh directory, as a user would run it.

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
README = ROOT / "README.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```", README.read_text(), re.S | re.M)

pytestmark = pytest.mark.usefixtures("warm_engine")


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs_in_a_fresh_directory(index, tmp_path):
    script = tmp_path / f"readme_block_{index}.py"
    script.write_text(BLOCKS[index])
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, script.name], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, f"README block {index} failed:\n{BLOCKS[index]}\n{proc.stderr}"
    assert "cycles" in proc.stdout


def test_a_block_that_needs_the_repository_as_cwd_would_fail(tmp_path):
    """The fresh directory is really fresh: the old README's relative path does not resolve there."""
    proc = subprocess.run([sys.executable, "-c", "open('examples/matmul_db.s')"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "FileNotFoundError" in proc.stderr
