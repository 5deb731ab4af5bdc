"""Fuzz `nnpc compile` and `nnpc run` with bad file arguments, output paths and flags.

Each case is a random command line: the model, every --input and --config
drawn from good files and bad kinds of path (missing, a directory, empty,
unreadable, /dev/null, /dev/zero, truncated, garbage, wrong shape or dtype,
a machine the program was not built for, a DDR too small), the outputs (-o,
--output [NAME=]FILE, --trace) from fresh names and bad kinds (a directory, a
trailing slash, no parent directory, a file as parent, /dev/full, /dev/null),
and random flags.  The cases run in one child process (compiler.cli.main, in
process), so a crash or hang shows as a dead or late batch.

Property: status 0 and nothing on stderr, every fresh output path written
exactly as named; or status 1/2 and exactly one `nnpc: error:` line; or
status 3 and one `nnpc: simulation error:` line.  Whatever the status, no
file appears anywhere but at a path the command named (never FILE.npy).
Counts scale with FUZZ=long (strategies.budget); FUZZ_SEED picks the cases.
"""
from __future__ import annotations

import collections
import json
import os
import random
from pathlib import Path

import numpy as np
import onnx
import pytest

import compiler
from compiler import models
from tests.helpers.cli_files import INPUT_KINDS, OUTPUT_KINDS, bad_input, bad_output, files_under

from .strategies import budget, run_python

SEED = int(os.environ.get("FUZZ_SEED", "26"))

BATCH = r"""
import contextlib, io, json, os, sys
from compiler.cli import main
cases = json.load(open(sys.argv[1]))
for case in cases:
    out, err = io.StringIO(), io.StringIO()
    os.chdir(case["cwd"])
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(case["argv"])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else "SystemExit %r" % (exc.code,)
    except BaseException as exc:
        code = "exception %s: %s" % (type(exc).__name__, exc)
    print(json.dumps([code, out.getvalue()[-2000:], err.getvalue()[-4000:]]), flush=True)
"""


@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """The good files every case draws from: tiny.onnx, tiny.nnp, inputs, machines."""
    d = tmp_path_factory.mktemp("good")
    onnx.save(models.tiny("qoperator"), str(d / "tiny.onnx"))
    compiler.build(compiler.from_onnx(d / "tiny.onnx")).save(d / "tiny.nnp")
    rng = np.random.default_rng(SEED)
    np.save(d / "x.npy", rng.standard_normal((1, 3, 16, 16)).astype(np.float32))
    np.save(d / "x8.npy", rng.integers(-128, 128, (1, 3, 16, 16)).astype(np.int8))
    np.save(d / "x64.npy", rng.standard_normal((1, 3, 16, 16)))
    np.save(d / "shape.npy", np.zeros((2, 2), np.float32))
    np.save(d / "int32.npy", np.zeros((1, 3, 16, 16), np.int32))
    (d / "garbage.onnx").write_bytes(bytes(rng.integers(0, 256, 700, dtype=np.uint8)))
    (d / "garbage.nnp").write_bytes(b"\x7fELF" + bytes(rng.integers(0, 256, 300, dtype=np.uint8)))
    (d / "hw.toml").write_text("[nu]\ncount = 1\n")
    (d / "small.toml").write_text("[memory.ddr]\nsize = 4096\n")
    (d / "two.toml").write_text("[nu]\ncount = 2\n")
    (d / "bad.toml").write_text("[nu]\ncuont = 2\n")
    return d


def _input(rng: random.Random, tmp: Path, good: Path, goods: list[str], truncate_from: str) -> str:
    """A good file (most often) or a bad kind of path."""
    if rng.random() < 0.6:
        return str(good / rng.choice(goods))
    kind = rng.choice(INPUT_KINDS)
    return bad_input(tmp, kind, good / truncate_from, cut=rng.randrange(1, 4000) if kind == "truncated" else None)


def _output(rng: random.Random, tmp: Path, name: str) -> tuple[str, bool]:
    """(path, fresh): a fresh name (with or without a suffix), /dev/null, or a bad kind."""
    r = rng.random()
    if r < 0.5:
        return str(tmp / rng.choice([name, name + ".npy", name + ".json", "noext", "a.b.c"])), True
    if r < 0.55:
        return "/dev/null", False
    return bad_output(tmp, rng.choice(OUTPUT_KINDS), name), False


def make_case(rng: random.Random, tmp: Path, good: Path) -> dict:
    """One random command line; `named` lists the fresh paths it may write."""
    tmp.mkdir(parents=True)
    named, fresh = [], []
    verb = rng.choice(["compile", "run", "run"])
    goods = ["tiny.nnp"] * 6 + ["tiny.onnx", "garbage.onnx", "garbage.nnp"]
    argv = [verb, _input(rng, tmp, good, goods, rng.choice(["tiny.onnx", "tiny.nnp"]))]
    if verb == "compile":
        path, ok = _output(rng, tmp, "p.nnp")
        argv += ["-o", path]
        named.append(path)
        fresh += [path] if ok else []
        argv += rng.sample(["--report", "--no-fuse"], rng.randrange(3))
    else:
        for k in range(rng.choice([0, 1, 1, 1, 2])):
            path = _input(rng, tmp, good, ["x.npy"] * 4 + ["x8.npy", "x64.npy", "shape.npy", "int32.npy"], "x.npy")
            argv += ["--input", rng.choice(["", "", "input=", "nope="]) + path]
        for k in range(rng.choice([0, 0, 1, 2])):
            path, ok = _output(rng, tmp, f"y{k}")
            argv += ["--output", rng.choice(["", "", "gemm1=", "nope="]) + path]
            named.append(path)
            fresh += [path] if ok else []
        if rng.random() < 0.3:
            path, ok = _output(rng, tmp, "t.json")
            argv += ["--trace", path]
            named.append(path)
            fresh += [path] if ok else []
        argv += rng.sample(["--check-races", "--compare-onnxruntime", "--no-fuse"], rng.randrange(3))
    if rng.random() < 0.3:
        argv += ["--config", _input(rng, tmp, good, ["hw.toml", "small.toml", "two.toml", "bad.toml"], "hw.toml")]
    if rng.random() < 0.1:
        argv += [rng.choice(["--bogus", "--arithmetic", "--arithmetic=float", "-o", "--input"])]
    return {"argv": argv, "cwd": str(tmp), "named": named, "fresh": fresh}


def check(case: dict, code, out: str, err: str, before: set[str]) -> str | None:
    """Why the outcome breaks the property (None: it holds)."""
    tmp = Path(case["cwd"])
    made = files_under(tmp) - before
    allowed = {str(Path(p).relative_to(tmp)) for p in case["named"] if Path(p).is_relative_to(tmp)}
    if made - allowed:
        return f"wrote {sorted(made - allowed)}, not named"
    lines = err.strip().splitlines()
    if code == 0:
        missing = [p for p in case["fresh"] if not Path(p).is_file()]
        return (f"status 0 with stderr {err!r}" if err.strip() else
                f"status 0 but {missing} not written" if missing else None)
    if code in (1, 2):
        ok = len(lines) == 1 and lines[0].startswith("nnpc: error: ") and "Traceback" not in err
        return None if ok else f"status {code} and stderr {err!r}"
    if code == 3:
        ok = len(lines) == 1 and lines[0].startswith("nnpc: simulation error: ")
        return None if ok else f"status 3 and stderr {err!r}"
    return f"status {code!r}, stderr {err[-1500:]!r}"


def test_random_command_lines_refuse_cleanly_and_write_only_what_they_name(good, tmp_path):
    rng = random.Random(SEED)
    n = budget(10).max_examples
    cases = [make_case(rng, tmp_path / f"case{i}", good) for i in range(n)]
    before = [files_under(Path(c["cwd"])) for c in cases]
    good_files, dev = files_under(good), set(os.listdir("/dev"))
    spec = tmp_path / "cases.json"
    spec.write_text(json.dumps(cases))
    proc = run_python(BATCH, str(spec), timeout=120 + 30 * n, memory_bytes=6 << 30)
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("[")]
    assert proc.returncode == 0 and len(results) == n, (
        f"batch ended with status {proc.returncode} after {len(results)} of {n} cases; next: "
        f"{cases[len(results)]['argv'] if len(results) < n else None}\n{proc.stderr[-3000:]}")
    findings = [f"wrote {sorted(set(os.listdir('/dev')) - dev)} in /dev"] if set(os.listdir("/dev")) - dev else []
    findings += [f"wrote {sorted(files_under(good) - good_files)} among the inputs"] if files_under(good) != good_files \
        else []
    for case, (code, out, err), old in zip(cases, results, before):
        why = check(case, code, out, err, old)
        if why:
            findings.append(f"nnpc {' '.join(case['argv'])}: {why}")
    statuses = collections.Counter(code for code, _, _ in results)
    print(f"nnpc compile/run fuzz: {n} cases (FUZZ_SEED={SEED}), statuses {dict(sorted(statuses.items()))}, "
          f"{len(findings)} findings")
    assert not findings, f"{len(findings)} of {n} cases (FUZZ_SEED={SEED}):\n" + "\n".join(findings[:20])
