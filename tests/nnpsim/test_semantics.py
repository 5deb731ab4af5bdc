"""The semantics table is bound to nnp1.toml: checked at import, and numba's cache is keyed on the TOML.

The import-time guard and the cache key are tested on a temporary copy of
isa_spec and nnpsim, never on the project's own nnp1.toml.
"""
from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from isa_spec import IsaError, load_isa
from isa_spec.model import SPEC_PATH, parse_isa
from nnpsim import cu, timing
from nnpsim.semantics import SEMANTICS, check_isa, element_bytes, implemented_ops, problems

ROOT = Path(__file__).resolve().parents[2]
RAW = tomllib.loads(SPEC_PATH.read_text())


def _isa_without(mnemonic: str):
    data = copy.deepcopy(RAW)
    data["instr"] = [i for i in data["instr"] if i["mnemonic"] != mnemonic]
    return parse_isa(data)


def _isa_with_extra(mnemonic: str, opcode: int, like: str = "vu.clip", **changes):
    data = copy.deepcopy(RAW)
    extra = dict(next(i for i in data["instr"] if i["mnemonic"] == like), mnemonic=mnemonic, opcode=opcode)
    extra.update(changes)
    data["instr"].append(extra)
    return parse_isa(data)


def _problems(isa) -> list[str]:
    return problems(isa, implemented_ops(), timing)


def test_the_table_matches_the_isa():
    assert _problems(load_isa()) == []
    check_isa()
    assert set(SEMANTICS) == set(load_isa().by_mnemonic)


def test_every_row_names_an_op_its_executor_implements():
    done = implemented_ops()
    for row in SEMANTICS.values():
        assert row.op in done[row.unit], row.mnemonic
    assert set(done["CU"]) == set(cu.CU_OPERATIONS)


def test_a_row_whose_op_the_kernel_lacks_is_named():
    done = dict(implemented_ops(), VU=tuple(op for op in implemented_ops()["VU"] if op != "divr"))
    assert problems(load_isa(), done, timing) == ["vu.divr: the VU implements no op 'divr'"]


def test_an_instruction_removed_from_the_toml_is_named():
    found = _problems(_isa_without("vu.clip"))
    assert found == ["semantics rows with no instruction: vu.clip"]


def test_an_instruction_without_semantics_is_named():
    found = _problems(_isa_with_extra("vu.clamp2", 0x6F))
    assert found == ["instructions with no semantics row: vu.clamp2"]


def test_every_disagreement_is_named_at_once():
    data = copy.deepcopy(RAW)
    data["instr"] = [i for i in data["instr"] if i["mnemonic"] not in ("vu.clip", "sub")]
    for i in data["instr"]:
        if i["mnemonic"] == "vu.add":
            i["timing"] = "cu_cycles"
    found = "\n".join(_problems(parse_isa(data)))
    assert "semantics rows with no instruction: sub, vu.clip" in found
    assert "vu.add: the table says timing vu_cycles, the TOML cu_cycles" in found


def test_a_row_on_the_wrong_unit_or_format_is_named():
    data = copy.deepcopy(RAW)
    for i in data["instr"]:
        if i["mnemonic"] == "vu.add":       # VU3 has rb; VU2 has not, but the row reads b
            i["format"], i["operands"] = "VU2", ["unit", "rd", "ra"]
        if i["mnemonic"] == "nu.conv":
            i["unit"] = "VU"
    found = "\n".join(_problems(parse_isa(data)))
    assert "vu.add: its row has an operand in rb, but its format has no rb field" in found
    assert "nu.conv: the table says unit NU, the TOML VU" in found


def test_the_loader_refuses_a_timing_that_is_not_a_formula():
    data = copy.deepcopy(RAW)
    data["instr"][0]["timing"] = "cu_warp"
    with pytest.raises(IsaError, match=r"instruction nop: timing 'cu_warp' is not a formula of \[timing\]"):
        parse_isa(data)


def test_a_formula_that_nnpsim_timing_lacks_is_named():
    data = copy.deepcopy(RAW)
    data["timing"]["cu_warp"] = "faster than light"
    assert _problems(parse_isa(data)) == ["[timing] cu_warp is not a function of nnpsim.timing"]


def test_every_timing_formula_is_a_function():
    for name in load_isa().timing:
        assert callable(getattr(timing, name))


@pytest.mark.parametrize("mnemonic, sdt, ddt, want", [
    ("vu.requant", 4, 1, (1, 4, 0)), ("vu.requant.pc", 1, 1, (1, 1, 8)), ("vu.mov", 4, 1, (1, 4, 0)),
    ("vu.mov", 1, 4, (4, 1, 0)), ("vu.pool.sum", 1, 1, (4, 1, 0)), ("vu.divr", 1, 1, (1, 4, 4)),
])
def test_element_bytes(mnemonic, sdt, ddt, want):
    assert element_bytes(mnemonic, sdt, ddt) == want


# --------------------------------------------------------------------------- on a copy of the tree

def _copy_tree(dst: Path) -> Path:
    for package in ("isa_spec", "nnpsim"):
        shutil.copytree(ROOT / package, dst / package, ignore=shutil.ignore_patterns("__pycache__"))
    return dst / "isa_spec" / "nnp1.toml"


def _python(tree: Path, code: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(tree), NUMBA_CACHE_DIR=str(tree / "cache"))
    return subprocess.run([sys.executable, "-c", code], cwd=tree, env=env, capture_output=True, text=True,
                          timeout=300)


def _drop_instruction(toml: Path, mnemonic: str) -> None:
    blocks = toml.read_text().split("[[instr]]")
    kept = [b for b in blocks if f'mnemonic = "{mnemonic}"\n' not in b]
    assert len(kept) == len(blocks) - 1
    toml.write_text("[[instr]]".join(kept))


def test_import_refuses_a_toml_without_vu_clip(tmp_path):
    toml = _copy_tree(tmp_path)
    assert _python(tmp_path, "import nnpsim").returncode == 0
    _drop_instruction(toml, "vu.clip")
    run = _python(tmp_path, "import nnpsim")
    assert run.returncode != 0
    assert "semantics rows with no instruction: vu.clip" in run.stderr
    assert "IsaMismatch" in run.stderr


def test_import_refuses_a_toml_with_an_instruction_it_cannot_run(tmp_path):
    toml = _copy_tree(tmp_path)
    toml.write_text(toml.read_text() + '\n[[instr]]\nmnemonic = "vu.tanh"\nopcode = 0x6F\nunit = "VU"\n'
                    'format = "VU2"\noperands = ["unit", "rd", "ra"]\nsync = ["wait", "signal"]\n'
                    'timing = "vu_cycles"\nsummary = "d = tanh(a)"\n')
    run = _python(tmp_path, "import nnpsim")
    assert run.returncode != 0
    assert "instructions with no semantics row: vu.tanh" in run.stderr


def test_a_toml_edit_gives_a_fresh_numba_cache(tmp_path):
    """Cached machine code bakes in numbers from the TOML: an edited TOML must compile afresh."""
    toml = _copy_tree(tmp_path)
    code = ("import nnpsim, numba.core.config as c; from nnpsim.timing import vu_elem_bytes; "
            "assert vu_elem_bytes(1, 4, 8) == 4; print(c.CACHE_DIR)")
    first = _python(tmp_path, code)
    assert first.returncode == 0, first.stderr
    before = Path(first.stdout.strip())
    assert any(before.rglob("*.nbi")), "the first run wrote no cache"
    assert _python(tmp_path, code).stdout == first.stdout      # unchanged tree: same cache
    text = toml.read_text()
    toml.write_text(re.sub(r'summary = "Do nothing for one cycle."', 'summary = "Idle for one cycle."', text))
    second = _python(tmp_path, code)
    assert second.returncode == 0, second.stderr
    after = Path(second.stdout.strip())
    assert after != before
    assert any(after.rglob("*.nbi")), "the edited tree reused the old cache"
