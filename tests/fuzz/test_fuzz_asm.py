"""Fuzz the assembler: random bytes, token soup, mutated programs, absurd directives.

Property: every input either assembles (to a Program that writes a valid
binary) or raises AsmError whose every diagnostic points at a real line and
column of the input (or of a file it includes), within 30 s; no other
exception.  Absurd directives are also run in a subprocess with a 2 GiB
address-space limit, so that unbounded memory shows up as a failure rather
than as a swapping machine.
"""
from __future__ import annotations

import atexit
import json
import resource
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from isa_spec.program import Program
from nnpasm import AsmError, assemble, disassemble

from .conftest import LONG
from .strategies import (ABSURD_LINES, assert_clean_exit, budget, check_diagnostics, example_sources,
                         mutated_source, random_program, run_python, time_limit, token_source)

PEAK_RSS = 3 << 30
WORKDIR = Path(tempfile.mkdtemp(prefix="nnp-fuzz-asm-"))   # relative .include/.incbin resolve here
atexit.register(shutil.rmtree, WORKDIR, True)
FILENAME = str(WORKDIR / "fuzz.s")
SEEDS = tuple(example_sources().values())


def assemble_or_diagnose(source: str, filename: str = FILENAME, files: dict[str, str] | None = None,
                         include_dirs=()) -> Program | None:
    """The assembler's contract for one input: a Program or located diagnostics, in bounded time
    and memory (the process's peak resident size stays under PEAK_RSS)."""
    with time_limit(30, "assembling"):   # the 2,000,000-line limit takes ~6 s of data lines on a quiet 2-core machine
        try:
            prog = assemble(source, filename, include_dirs=include_dirs)
        except AsmError as exc:
            check_diagnostics(exc, files or {filename: source})
            str(exc)   # formatting never fails
            prog = None
        else:
            Program.from_bytes(prog.to_bytes())
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 < PEAK_RSS
    return prog


@given(blob=st.binary(max_size=400))
@budget(100)
def test_random_bytes(blob):
    assemble_or_diagnose(blob.decode("latin-1"))


@given(text=st.text(max_size=200))
@budget(100)
def test_random_text(text):
    assemble_or_diagnose(text)


@given(source=token_source())
@budget(300)
def test_token_sequences(source):
    assemble_or_diagnose(source)


@given(source=mutated_source(SEEDS))
@budget(150)
def test_mutated_examples(source):
    assemble_or_diagnose(source, include_dirs=[str(Path(p).parent) for p in example_sources()][:1])


@st.composite
def generated_source(draw) -> str:
    """Valid source written by the disassembler from a random program, then mutated."""
    text = disassemble(draw(random_program(max_len=20, writable=True)))
    return draw(mutated_source((text,)))


@given(source=generated_source())
@budget(100)
def test_mutated_generated_programs(source):
    assemble_or_diagnose(source)


@given(lines=st.lists(st.sampled_from(ABSURD_LINES), min_size=1, max_size=4),
       section=st.sampled_from([".text", ".data"]))
@budget(100)
def test_absurd_directives_in_process(lines, section):
    assemble_or_diagnose("\n".join([section] + lines) + "\n")


# Each case: source, and words an error message must contain (None: it may assemble or fail).
ABSURD_CASES = {
    "space of a terabyte": (".data\n.space 1 << 40\n", "DDR size"),
    "org past DDR": (".data\n.org 1 << 60\n", "DDR size"),
    "rept of a billion": (".rept 1000000000\nnop\n.endr\n", ".rept count"),
    "nested rept of data past DDR": (".data\n.rept 1000\n.rept 1000\n.space 1 << 10\n.endr\n.endr\n",
                                     "DDR size"),
    "macro expanding itself": (".macro m\nm\n.endm\nm\n", "depth"),
    "macro expanding itself twice": (".macro m\nm\nm\n.endm\nm\n", "depth"),
    "macro defining a macro calling itself": (".macro a\n.macro b\na\n.endm\nb\n.endm\na\n", None),
    "unterminated macro": (".macro m\nnop\n", ".endm"),
    "unterminated rept": (".rept 3\nnop\n", ".endr"),
    "align of a terabyte": (".data\n.align 1 << 40\n", ".align"),
    "buffer of exabytes": (".data\n.buffer b, int32, (1 << 40, 1 << 40)\n", "buffer"),
    "shift by a million": (".equ X, 1 << 1000000\n", "shift"),
    "huge decimal literal": ("li r1, " + "9" * 5000 + "\n", None),
    "huge hex literal": ("li r1, 0x" + "f" * 5000 + "\n", None),
    "squaring in a loop": (".set X, 2\n.rept 64\n.set X, X * X\n.endr\nli r1, X\n", None),
    "deep parentheses": ("li r1, " + "(" * 3000 + "1" + ")" * 3000 + "\n", None),
    "long unary chain": ("li r1, " + "-~" * 20000 + "1\n", None),
    "many errors": ("bad\n" * 20000, "unknown mnemonic"),
    "a million-character line": ("nop " + "+1" * 500000 + "\n", "syntax"),
}
if LONG:   # limits that take seconds to reach (the assembler's own speed)
    ABSURD_CASES.update({
        "nested rept past the instruction limit": (".rept 1000\n.rept 1000\n.rept 2\nnop\n.endr\n.endr\n"
                                                   ".endr\n", "instructions"),
        "nested rept past the expanded-line limit": (".rept 1000\n.rept 10000\n; c\n.endr\n.endr\n", "lines"),
    })

ABSURD_DRIVER = r"""
import json, signal, sys, time
from nnpasm import AsmError, assemble
cases = json.loads(sys.stdin.read())
out = {}
def expired(signum, frame):
    raise TimeoutError("more than 10 s")
signal.signal(signal.SIGALRM, expired)
for name, source in cases.items():
    t = time.time()
    signal.alarm(10)
    try:
        prog = assemble(source, "absurd.s")
        res = ["ok", len(prog.code), prog.data_size]
    except AsmError as exc:
        res = ["error", [[d.file, d.line, d.column, d.message[:300]] for d in exc.diagnostics[:3]]]
    except BaseException as exc:
        res = ["exception", type(exc).__name__, str(exc)[:300]]
    finally:
        signal.alarm(0)
    out[name] = res + [round(time.time() - t, 2)]
print(json.dumps(out))
"""


def run_absurd(cases: dict[str, str]) -> dict:
    """Assemble each case in a child process limited to 2 GiB; {name: [outcome, ..., seconds]}."""
    proc = run_python(ABSURD_DRIVER, cwd=WORKDIR, memory_bytes=2 << 30, stdin=json.dumps(cases), timeout=600)
    assert proc.returncode == 0, f"driver died with status {proc.returncode}:\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout)


def test_absurd_directives_are_bounded_errors():
    """Each absurd input ends within 10 s and 2 GiB: assembled, or one error at its line."""
    results = run_absurd({k: v[0] for k, v in ABSURD_CASES.items()})
    failures = []
    for name, (source, words) in ABSURD_CASES.items():
        res = results[name]
        if res[0] == "exception":
            failures.append(f"{name}: {res[1]}: {res[2]} after {res[3]} s")
        elif res[0] == "error":
            lines = source.split("\n")
            for file, line, col, msg in res[1]:
                if file != "absurd.s" or not 1 <= line <= len(lines) or not 1 <= col <= len(lines[line - 1]) + 2:
                    failures.append(f"{name}: diagnostic outside the input: {file}:{line}:{col}: {msg}")
            if words is not None and not any(words in d[3] for d in res[1]):
                failures.append(f"{name}: expected an error about {words!r}, got {res[1]}")
        elif words is not None:
            failures.append(f"{name}: assembled, expected an error about {words!r}")
    assert not failures, "\n".join(failures)


def test_error_in_a_macro_argument_points_into_the_body_line():
    """Regression (found by test_mutated_examples, fixed in nnpasm): an error inside a substituted
    macro argument was reported at the body line with the column of the *expanded* text, past the
    end of that line."""
    source = ".macro m v\n li r1, \\v\n.endm\n m 1 + undefined_symbol_with_a_long_name\n"
    with pytest.raises(AsmError) as info:
        assemble(source, "m.s")
    check_diagnostics(info.value, {"m.s": source})


def test_include_cycles_and_self_inclusion(tmp_path):
    a, b, c = tmp_path / "a.s", tmp_path / "b.s", tmp_path / "c.s"
    a.write_text('nop\n.include "b.s"\n')
    b.write_text('.include "a.s"\n')
    c.write_text('.include "c.s"\n.incbin "c.s"\n')
    files = {str(p): p.read_text() for p in (a, b, c)}
    for main in (a, c):
        with pytest.raises(AsmError) as info:
            assemble(main.read_text(), str(main))
        check_diagnostics(info.value, files)
        assert "cycle" in str(info.value)


def test_include_depth_limit(tmp_path):
    for i in range(40):
        (tmp_path / f"i{i}.s").write_text(f'.include "i{i + 1}.s"\n')
    (tmp_path / "i40.s").write_text("nop\n")
    files = {str(p): p.read_text() for p in tmp_path.iterdir()}
    with pytest.raises(AsmError) as info:
        assemble(files[str(tmp_path / "i0.s")], str(tmp_path / "i0.s"))
    check_diagnostics(info.value, files)
    assert "depth" in str(info.value)


@given(source=mutated_source(SEEDS), data=st.data())
@budget(20)
def test_includes_of_mutated_files(source, data):
    """A mutated example included from another file: diagnostics point into the right file."""
    inner = WORKDIR / "inner.s"
    inner.write_text(source)
    outer = data.draw(st.sampled_from(['.include "inner.s"\n', 'nop\n.include "inner.s"\nhalt\n',
                                       '.macro m\n.include "inner.s"\n.endm\nm\n']))
    assemble_or_diagnose(outer, files={FILENAME: outer, str(inner): source})


# ---------------------------------------------------------------------------
# The CLI: a few subprocess runs (each start costs about a second).
# ---------------------------------------------------------------------------

CLI_SOURCES = ["\x00\x01\x02", "li r1, 1 << 40\n", ".macro m\nm\n.endm\nm\n", '.include "cli_bad.s"\n',
               ".data\n.space 1 << 40\n", "x: x:\n", ".rept 3\n"]

CLI_DRIVER = r"""
import contextlib, io, json, sys
from nnpasm.cli import main
out = []
for path in sys.argv[1:]:
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            code = main([path, "-o", path + ".bin"])
    except BaseException as exc:
        code = "exception %s: %s" % (type(exc).__name__, exc)
    out.append([path, code, err.getvalue()])
print(json.dumps(out))
"""


def test_cli_reports_errors_without_traceback(tmp_path):
    import random
    rng = random.Random(7)
    paths = []
    for i, text in enumerate(CLI_SOURCES):
        (tmp_path / f"cli_bad{'' if i == 3 else i}.s").write_text(text)
    for i in range(budget(10).max_examples):
        seed = rng.choice(SEEDS).split("\n")
        rng.shuffle(seed)
        (tmp_path / f"mut{i}.s").write_text("\n".join(seed[: len(seed) // 2]))
    paths = sorted(str(p) for p in tmp_path.glob("*.s"))
    proc = run_python(CLI_DRIVER, *paths, memory_bytes=2 << 30)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for path, code, err in json.loads(proc.stdout):
        assert code in (0, 1), f"{path}: status {code}\n{err}"
        if code == 1:
            first = err.splitlines()[0]
            assert first.startswith(path + ":") or first.startswith("nnpasm: error:"), err
            assert "Traceback" not in err
    # and the real entry point, once
    proc = run_python("import sys, runpy; runpy.run_module('nnpasm.cli', run_name='__main__')",
                      str(tmp_path / "cli_bad1.s"))
    assert_clean_exit(proc, "nnpasm")
    assert "cli_bad1.s:1:" in proc.stderr and "out of range" in proc.stderr, proc.stderr
