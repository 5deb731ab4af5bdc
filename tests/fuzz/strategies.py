"""Shared pieces of the fuzzing suite: budgets, time guards, valid seeds and hypothesis strategies."""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import resource
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st

from isa_spec import Instruction, encode, load_isa
from isa_spec.program import Buffer, Program, Symbol
from nnpsim import SimError, Simulator
from nnpsim import errors
from nnpsim.config import Config

from . import conftest  # noqa: F401  (registers the "nnp-fuzz" profile outside pytest too)

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
ISA = load_isa()
# Small memories keep every fuzzed simulation cheap (allocation, bounds).
SMALL = dict(ddr_bytes=64 * 1024, dm_bytes=16 * 1024, ibuf_bytes=16 * 1024, wbuf_bytes=16 * 1024,
             abuf_bytes=16 * 1024, vbuf_bytes=8 * 1024)


def budget(examples: int) -> settings:
    """Settings for one fuzz test: `examples` in the default profile, scaled up under FUZZ=long."""
    base = settings.get_profile("nnp-fuzz")
    return settings(base, max_examples=max(1, examples * base.max_examples // 100))


class Timeout(Exception):
    """An input took longer than its time guard allowed."""


@contextlib.contextmanager
def time_limit(seconds: int, what: str = "input"):
    """Raise Timeout if the body takes more than `seconds` of CPU, or ten times that of wall time.

    CPU time (SIGPROF), so that a loaded machine does not make a slow input look hung; the wall-clock backstop
    (SIGALRM) catches a body that blocks.  The expiry is remembered as well: raised where Python only reports it
    (a gc callback) or caught by the code under test, it still fails the input when the body ends."""
    expired: list[str] = []

    def _expired(signum, frame):
        expired.append(f"{what} took more than {seconds} s of CPU" if signum == signal.SIGPROF
                       else f"{what} took more than {10 * seconds} s")
        raise Timeout(expired[-1])
    old = {sig: signal.signal(sig, _expired) for sig in (signal.SIGPROF, signal.SIGALRM)}
    signal.setitimer(signal.ITIMER_PROF, seconds)
    signal.alarm(10 * seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.alarm(0)
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if expired:
        raise Timeout(expired[0])


def run_python(code: str, *args: str, timeout: float = 300, cwd: Path | None = None,
               memory_bytes: int | None = None, stdin: str | None = None) -> subprocess.CompletedProcess:
    """Run `python -c code args` (from the project root unless `cwd`), optionally with an
    address-space limit; `cwd` other than the root still imports the project."""
    def _limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd or ROOT, capture_output=True, text=True,
                          input=stdin, timeout=timeout, env=env, preexec_fn=_limit if memory_bytes else None)


def assert_clean_exit(proc: subprocess.CompletedProcess, what: str) -> None:
    """A CLI rejected its input: non-zero status, no signal, no traceback, a message on stderr."""
    assert proc.returncode > 0, f"{what}: exit status {proc.returncode} (negative: killed by a signal)\n{proc.stderr}"
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout, f"{what}:\n{proc.stderr}"
    assert proc.stderr.strip(), f"{what}: failed without saying why"


# ---------------------------------------------------------------------------
# Valid seeds: example sources, their binaries, and a hand-built program that
# uses every part of the binary format.
# ---------------------------------------------------------------------------

def example_sources() -> dict[str, str]:
    """Every examples/*.s file, by path."""
    return {str(p): p.read_text() for p in sorted(EXAMPLES.glob("*.s"))}


@functools.lru_cache(maxsize=None)
def example_programs() -> dict[str, Program]:
    """Every example assembled."""
    from nnpasm import assemble
    return {Path(p).name: assemble(src, p, include_dirs=[str(EXAMPLES)]) for p, src in example_sources().items()}


def _word(mnemonic: str, **operands) -> int:
    return encode(mnemonic, operands, ISA)


def rich_program() -> Program:
    """A program that exercises every part of the binary: all symbol sections, two data chunks
    and a zero tail (.data, .data.1, .bss), buffers with layouts, a line table and config.
    Like the assembler's output, every buffer has a data symbol of its name."""
    code = [_word("li", rd=1, imm=64), _word("setpi", param=ISA.params["dma.size0"], imm=16),
            _word("dma", ch=1, dspace=1, rd=0, sspace=0, rs=1, wait=None, signal=2),
            _word("sem.wait", sem=2), _word("beq", rs1=0, rs2=0, off=8), _word("halt")]
    data = bytes(range(1, 200)) + bytes(9000) + b"\x07" * 100
    size = len(data) + 5000
    symbols = {"main": Symbol("main", 0, "text"), "done": Symbol("done", 40, "text"),
               "x": Symbol("x", 64, "data"), "tail": Symbol("tail", 9199, "data"), "w": Symbol("w", 9216, "data"),
               "N": Symbol("N", -5, "abs"), "BIG": Symbol("BIG", (1 << 40) + 3, "abs")}
    buffers = {"x": Buffer("x", 64, "int8", (2, 3, 4, 5), "split(1,4) reorder(0,1,3,4,2)"),
               "w": Buffer("w", 9216, "int32", (10,), "")}
    lines = [("k.s", n + 3) for n in range(5)] + [("inc/other.s", 7)]
    return Program(np.array(code, dtype=np.uint64), data, 0, size, symbols, buffers, lines,
                   {"nu_count": 2, "note": "fuzz seed"})


@functools.lru_cache(maxsize=None)
def valid_binaries() -> dict[str, bytes]:
    """Binaries to corrupt: every example plus the hand-built program."""
    out = {name: p.to_bytes() for name, p in example_programs().items()}
    out["rich"] = rich_program().to_bytes()
    return out


# ---------------------------------------------------------------------------
# Instructions and programs drawn from isa_spec.
# ---------------------------------------------------------------------------

_SMALL_VALUES = (0, 1, 2, 3, 4, 7, 8, 16, 31, 32, 63, 64, 128, 256, 1024, 4096, -1, -64)


# Enum values every configuration has (unit 0, the first channels), drawn more often than the rest.
_PREFERRED = {"nu_unit": [0], "vu_unit": [0], "dma_chan": [0, 1, 2, 3], "space": [0, 1, 8, 16, 24, 32]}


def _operand_value(draw, instr: Instruction, name: str, pc: int, n_instr: int, in_text: bool):
    fld = instr.fields[name]
    k = fld.kind
    lo, hi = fld.value_range()
    if k.cls == "sem_opt":
        return draw(st.none() | st.integers(0, 7) | st.integers(lo, hi))
    if k.cls == "enum":
        every = st.sampled_from(sorted(set(k.values.values())))
        return draw(st.sampled_from(_PREFERRED[k.name]) | every if k.name in _PREFERRED else every)
    if k.cls == "reg":
        return draw(st.integers(lo, hi))
    if k.cls == "sem":
        return draw(st.integers(0, 7) | st.integers(lo, hi))
    if k.cls == "pcrel":
        if in_text:                      # what a binary may hold: a target inside .text
            return draw(st.integers(0, n_instr - 1).map(lambda i: 8 * i - pc))
        # Mostly targets inside (or just past) the program; sometimes anywhere the field reaches.
        inside = st.integers(0, n_instr).map(lambda i: 8 * i - pc)
        return draw(inside | st.integers(lo // 8, hi // 8).map(lambda v: 8 * v))
    return draw(st.sampled_from([v for v in _SMALL_VALUES if lo <= v <= hi]) | st.integers(lo, hi))


@st.composite
def instruction_word(draw, pc: int = 0, n_instr: int = 1, in_text: bool = False) -> int:
    """One encodable word: any mnemonic, every operand inside its field's range (branch targets
    inside the first n_instr words if in_text)."""
    instr = draw(st.sampled_from(ISA.instructions))
    return encode(instr, {n: _operand_value(draw, instr, n, pc, n_instr, in_text) for n in instr.fields}, ISA)


_PARAM_VALUES = st.sampled_from([0, 1, 2, 3, 4, 8, 16, 32, 64, 128, 255, 1024, -1, -4, -128, 127,
                                 1 << 30, (1 << 31) - 1, -(1 << 31)])


@st.composite
def random_program(draw, max_len: int = 40, writable: bool = False) -> Program:
    """A random instruction stream: registers and parameters seeded with plausible values,
    then any instructions, then (usually) a barrier and halt; random DDR data.  Branches may leave
    .text (the simulator must stop them) unless `writable`: a binary holds only branches inside."""
    words = []
    for r in draw(st.lists(st.integers(1, 31), max_size=8, unique=True)):
        value = draw(st.integers(0, 64).map(lambda v: 64 * v) | st.integers(-(1 << 31), (1 << 32) - 1))
        words.append(_word("li", rd=r, imm=value))
    for p in draw(st.lists(st.sampled_from(sorted(ISA.params.values())), max_size=12, unique=True)):
        words.append(_word("setpi", param=p, imm=draw(_PARAM_VALUES)))
    n_body = draw(st.integers(0, max_len))
    n_total = len(words) + n_body + (0 if writable else 2)
    for _ in range(n_body):
        words.append(draw(instruction_word(8 * len(words), n_total, writable)))
    if draw(st.booleans()) or not words:
        words += [_word("barrier", mask=ISA.constants["Q_ALL"]), _word("halt")]
    data = draw(st.binary(max_size=512))
    return Program(np.array(words, dtype=np.uint64), data, 0, len(data) + draw(st.integers(0, 4096)))


def seeded_program(rng, n_body: int) -> Program:
    """A random program from a `random.Random` (for subprocess batches that cannot share hypothesis)."""
    words = [_word("li", rd=r, imm=64 * rng.randrange(64)) for r in range(1, 9)]
    n_total = len(words) + n_body + 2
    for _ in range(n_body):
        instr = rng.choice(ISA.instructions)
        ops = {}
        for name, fld in instr.fields.items():
            lo, hi = fld.value_range()
            if fld.kind.cls == "enum":
                ops[name] = rng.choice(sorted(set(fld.kind.values.values())))
            elif fld.kind.cls == "sem_opt":
                ops[name] = rng.choice([None, rng.randrange(4)])
            elif fld.kind.cls == "pcrel":
                ops[name] = 8 * rng.randrange(n_total) - 8 * len(words)
            else:
                ops[name] = rng.choice([max(lo, min(hi, rng.randrange(9))), rng.randint(lo, hi)])
        words.append(encode(instr, ops, ISA))
    words += [_word("barrier", mask=ISA.constants["Q_ALL"]), _word("halt")]
    data = bytes(rng.randrange(256) for _ in range(256))
    return Program(np.array(words, dtype=np.uint64), data, 0, 4096)


# ---------------------------------------------------------------------------
# Assembler inputs: the grammar's tokens, and mutations of valid sources.
# ---------------------------------------------------------------------------

DIRECTIVES = (".text", ".data", ".byte", ".half", ".word", ".dword", ".space", ".align", ".org",
              ".incbin", ".buffer", ".global", ".target", ".loc", ".equ", ".set", ".macro", ".endm",
              ".rept", ".endr", ".include")
_NAMES = (sorted(ISA.by_mnemonic) + list(DIRECTIVES) + [f"r{i}" for i in (0, 1, 5, 31, 32, 99)]
          + ["s0", "s31", "s62", "s63", "s1000"] + sorted({n for k in ISA.kinds.values() for n in k.values})
          + sorted(ISA.constants) + ["main", "loop", ".L1", ".loop", "x", "N", "m", "wait", "signal",
                                     "int8", "int32", "float"])
_NUMBERS = ("0", "1", "7", "8", "-1", "63", "64", "255", "256", "32767", "65536", "2147483647",
            "2147483648", "4294967295", "4294967296", "18446744073709551616", "0x7fffffff",
            "0xFFFFFFFFFFFFFFFF", "0b1011", "0x", "0b2", "1e9", "00", "99999999999999999999999")
_PUNCT = (",", "[", "]", "(", ")", "=", "?", ":", "~", "!", "-", "||", "&&", "==", "!=", "<=",
          ">=", "<<", ">>", "|", "^", "&", "<", ">", "+", "*", "/", "%", "\\@", "\\x", "\\()", "\\",
          "'a'", "'\\n'", "'", '"', '"str"', '"a\\"b"', '"unterminated', "; comment", "# c", "\t",
          "\n", "\n", "\n", " ", "\r", "\x00", "\u00e9", "\ufeff", "$", "@", "`", "{", "}")
TOKENS = _NAMES + list(_NUMBERS) + list(_PUNCT)


def token_source() -> st.SearchStrategy[str]:
    """Source text made of the grammar's tokens (and a few near-misses) in random order."""
    return st.lists(st.sampled_from(TOKENS), max_size=80).map(
        lambda toks: "".join(t if t in "\n\t \r" else t + " " for t in toks))


ABSURD_LINES = (
    ".space 1 << 40", ".space 1 << 62, 7", ".space -1", ".rept 1000000000", ".rept -3", ".rept 1 << 64",
    ".align 1 << 40", ".align 3", ".align 0", ".org 1 << 60", ".org -8", ".byte 1 << 70", ".half -40000",
    ".word 1 << 33", ".dword 1 << 64", ".equ X, 1 << 1000", ".equ Y, 1 / 0", ".equ Z, 5 % 0",
    ".set Q, Q * Q", ".buffer b, int8, (1 << 40,)", ".buffer c, int32, (0,)", ".buffer d, int16, (4,)",
    '.buffer e, int8, (4, 4), "split(9,2)"', '.buffer f, int8, (4,), "reorder(0,0)"', ".target k, 1 << 80",
    '.target k, "v"', '.loc "x.s", -5', '.loc "x.s", 1 << 40', '.incbin "/nonexistent"',
    '.include "/nonexistent.s"', ".macro m\nm\n.endm\nm", ".macro m a\n\\a \\a\n.endm\nm m",
    ".macro r\n.rept 1000\nr\n.endr\n.endm\nr", ".endm", ".endr", ".macro", ".rept", "li r1, 1 << 40",
    "addi r1, r2, 1 << 20", "beq r0, r0, 12345", "beq r0, r0, 4", "jal r1, 1 << 40", "slli r1, r2, 99",
    "dma ch9, ddr[r1], dm[r2]", "dma ch1, nowhere[r1], dm[r2]", "sem.wait s99", "setpi nu.bogus, 1",
    "halt extra", "li r1, undefined_symbol", "x: x: nop", "li r1, " + "(" * 300 + "1" + ")" * 300,
    "li r1, 1 >> 64", "li r1, 1 << -1",
)


def _garble(name: str, draw) -> str:
    """An identifier with one character changed, added or removed."""
    if not name:
        return "x"
    i = draw(st.integers(0, len(name) - 1))
    op = draw(st.sampled_from(["replace", "insert", "delete"]))
    c = draw(st.sampled_from("abxyzr0129_.$\\"))
    if op == "replace":
        return name[:i] + c + name[i + 1:]
    if op == "insert":
        return name[:i] + c + name[i:]
    return name[:i] + name[i + 1:]


@st.composite
def mutated_source(draw, seeds: tuple[str, ...]) -> str:
    """A valid source with a few line-level and token-level mutations applied."""
    lines = draw(st.sampled_from(seeds)).split("\n")
    for _ in range(draw(st.integers(1, 6))):
        if not lines:
            lines = [""]
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "number", "garble", "absurd",
                                   "truncate", "token"]))
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "number":
            lines[i] = _push_number(lines[i], draw)
        elif op == "garble":
            words = lines[i].split(" ")
            k = draw(st.integers(0, len(words) - 1))
            words[k] = _garble(words[k], draw)
            lines[i] = " ".join(words)
        elif op == "absurd":
            lines.insert(i, draw(st.sampled_from(ABSURD_LINES)))
        elif op == "truncate":
            lines[i] = lines[i][:draw(st.integers(0, len(lines[i])))]
        else:
            lines.insert(i, draw(token_source()).replace("\n", " "))
    return "\n".join(lines)


def _push_number(line: str, draw) -> str:
    """Replace one number of the line with a value at or past some field's edge."""
    numbers = list(re.finditer(r"(?<![A-Za-z_.$0-9])\d+", line))
    new = draw(st.sampled_from(["-1", "0", "31", "32", "63", "64", "255", "256", "2147483648", "4294967296",
                                "-2147483649", "1 << 63", "(1 << 64) + 1", "0x7fffffffffffffff"]))
    if not numbers:
        return line + " " + new
    m = numbers[draw(st.integers(0, len(numbers) - 1))]
    return line[:m.start()] + new + line[m.end():]


def check_diagnostics(exc, files: dict[str, str]) -> None:
    """Every diagnostic of an AsmError points at a real line and column of one of `files`."""
    assert exc.diagnostics, "AsmError without diagnostics"
    for d in exc.diagnostics:
        assert d.file in files, f"diagnostic in unknown file {d.file!r}: {d.format()}"
        lines = files[d.file].split("\n")
        assert 1 <= d.line <= len(lines), f"line {d.line} outside {d.file} ({len(lines)} lines): {d.message}"
        assert 1 <= d.column <= len(lines[d.line - 1]) + 2, (
            f"column {d.column} outside line {d.line} of {d.file} ({lines[d.line - 1]!r}): {d.message}")
        assert d.message.strip() and "Traceback" not in d.message, d


def program_fingerprint(sim, stats) -> dict:
    """What a run produced: cycles, every memory byte, registers, the statistics (JSON-able)."""
    return {"cycles": int(stats.cycles), "instructions": int(stats.instructions),
            "memory": hashlib.sha256(np.ascontiguousarray(sim.memory.mem).tobytes()).hexdigest(),
            "regs": [int(r) for r in sim.last_log.registers], "stats": stats.to_json()}


def dumps(obj) -> str:
    """Canonical JSON (for comparing results across processes)."""
    return json.dumps(obj, sort_keys=True)


# ---------------------------------------------------------------- the simulator's contract on one program

MAX_CYCLES = 20_000


@st.composite
def configs(draw) -> Config:
    """Small machines of every shape the configuration allows."""
    return Config(**SMALL, nu_count=draw(st.integers(1, 4)), vu_count=draw(st.integers(1, 4)),
                  dma_channels=draw(st.integers(1, 8)), semaphores=draw(st.sampled_from([8, 32, 63])),
                  queue_depth=draw(st.sampled_from([1, 2, 16])), nu_rows=draw(st.sampled_from([4, 32])),
                  nu_cols=draw(st.sampled_from([4, 32]))).validate()


def run_one(prog: Program, config: Config, check_races: bool = False, trace=None) -> dict:
    """Run the simulator's contract on one program; a JSON-able summary of what happened."""
    sim = Simulator(config)
    with time_limit(300, "simulating"):   # generous: a first call may compile the engine
        try:
            sim.load(prog)
            stats = sim.run(max_cycles=MAX_CYCLES, check_races=check_races, trace=trace)
        except SimError as exc:
            assert exc.code in errors.NAMES, f"unknown error code {exc.code}: {exc}"
            assert str(exc).strip(), "SimError without a message"
            if exc.code == errors.CYCLE_LIMIT:
                assert exc.cycle is not None and exc.cycle >= MAX_CYCLES, (exc.cycle, str(exc))
            return {"error": exc.code, "message": str(exc), "cycle": exc.cycle}
    assert stats.cycles <= MAX_CYCLES
    return program_fingerprint(sim, stats)
