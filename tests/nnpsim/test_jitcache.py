"""numba's cache is keyed on the nnpsim sources, so an edit to any of them cannot run stale code."""
import os
import subprocess
import sys
from pathlib import Path

from numba.core import config

import nnpsim
from nnpsim import jitcache


def test_cache_dir_is_named_by_the_source_digest():
    assert config.CACHE_DIR.endswith(f"nnpsim-{jitcache.source_digest()}")


def test_digest_changes_with_any_source(tmp_path, monkeypatch):
    pkg = tmp_path / "pkg"
    (pkg / "units").mkdir(parents=True)
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "units" / "b.py").write_text("LIMIT = 1 << 24\n")
    monkeypatch.setattr(jitcache, "ROOT", pkg)
    before = jitcache.source_digest()
    (pkg / "units" / "b.py").write_text("LIMIT = 1 << 32\n")
    assert jitcache.source_digest() != before


def test_environment_base_is_honoured(tmp_path):
    code = "import nnpsim; from numba.core import config; print(config.CACHE_DIR)"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd=Path(nnpsim.__file__).parents[1], check=True).stdout.strip()
    assert Path(out).parent == tmp_path and Path(out).name.startswith("nnpsim-")
