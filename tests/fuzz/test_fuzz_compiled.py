"""Fuzz compiled network files: mutated graph descriptions, dynamic-shape notes, buffers and ELF bytes.

Seeds: a small static network (conv + max pool, quantised input) and two dynamic ones (a clip over a range
of heights; an add, relu and stride-2 conv over heights and widths, which has a derived dim), built once per
session.  Each mutant renames, deletes or adds a key of the nnp_graph JSON, sets a value to an edge or a
wrong type, renames or reshapes a buffer, changes a Dim's bounds or a shape note, or flips bits in or
truncates the ELF file.  A child process loads every mutant (compiler.load) and runs it (GraphModule).

Property, for every mutant: one clean one-line error (CompileError or SimError), or a run whose host writes
stay inside the buffers they name (DDR outside every buffer is unchanged after the inputs are written, and
after the run when the code is the seed's), and whose output equals the seed's when the mutation changed
nothing the run uses.  A network with host parts (conv -> LayerNorm -> conv) is mutated too: its index, its
host model behind or with a new SHA-256, the archive's bytes.  FUZZ=long raises the number of mutants
(tests/fuzz/conftest.py).
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import zipfile

import numpy as np

from isa_spec.program import BinaryError, Buffer, Program, Symbol

from tests.helpers.compiled import graph_of, seeds, with_graph
from tests.helpers.hosted import compiled, inputs

from .strategies import budget, run_python

EDGE_VALUES = [None, True, False, 0, -1, 1, 2, 255, 2 ** 31, 2 ** 63, 2 ** 64, -2 ** 63, 1.5, float("nan"),
               float("inf"), "", "x", "h", "nnp_graph", "args", "arena", [], [0], [1, 2], {}, {"a": 1}]


def _paths(obj, prefix=()):
    """Every (path, value) of a JSON document, containers included."""
    yield prefix, obj
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, list) else ()
    for k, v in items:
        yield from _paths(v, prefix + (k,))


def _set(doc, path, value):
    node = doc
    for k in path[:-1]:
        node = node[k]
    if value is _DELETE:
        del node[path[-1]]
    else:
        node[path[-1]] = value


_DELETE = object()


def mutate_json(meta: dict, rng) -> tuple[dict, str]:
    """One mutation of the description: a value replaced (edge value, wrong type, nearby number), a key
    renamed, deleted or added, a list entry dropped or repeated."""
    doc = copy.deepcopy(meta)
    paths = [p for p, _ in _paths(doc) if p]
    path = paths[int(rng.integers(len(paths)))]
    value = dict(_paths(doc))[path]
    kind = int(rng.integers(6))
    parent = dict(_paths(doc))[path[:-1]]
    if kind == 0:
        new = EDGE_VALUES[int(rng.integers(len(EDGE_VALUES)))]
    elif kind == 1 and isinstance(value, int) and not isinstance(value, bool):
        new = value + int(rng.choice([-1, 1, 2, 7, -value - 1, value, 1 << 20]))
    elif kind == 2 and isinstance(value, str):
        new = value + "_" if rng.integers(2) else value[:-1]
    elif kind == 3 and isinstance(parent, dict):
        if rng.integers(2):
            parent[str(path[-1]) + "x"] = parent.pop(path[-1])
            return doc, f"rename key {'.'.join(map(str, path))}"
        parent["extra"] = 1
        return doc, f"add key at {'.'.join(map(str, path[:-1]))}"
    elif kind == 4 and isinstance(parent, (dict, list)):
        _set(doc, path, _DELETE)
        return doc, f"delete {'.'.join(map(str, path))}"
    elif kind == 5 and isinstance(parent, list):
        parent.insert(int(path[-1]), copy.deepcopy(value))
        return doc, f"repeat {'.'.join(map(str, path))}"
    else:
        new = [value] if rng.integers(2) else str(value)
    _set(doc, path, new)
    return doc, f"set {'.'.join(map(str, path))} = {new!r:.40}"


def mutate_program(prog: Program, rng) -> tuple[Program, str]:
    """One mutation of the program around the description: a buffer renamed or reshaped, a Dim's bounds
    or a shape note changed in the dynamic-shape notes, a .target entry changed."""
    p = copy.deepcopy(prog)
    kind = int(rng.integers(4))
    names = sorted(b for b in p.buffers if b != "nnp_graph")
    name = names[int(rng.integers(len(names)))]
    if kind == 0:
        new = name + "_r"
        buf = p.buffers.pop(name)
        p.buffers[new] = Buffer(new, buf.addr, buf.dtype, buf.shape, buf.layout)
        p.symbols.pop(name)
        p.symbols[new] = Symbol(new, buf.addr, "data")
        return p, f"rename buffer {name}"
    if kind == 1:
        buf = p.buffers[name]
        shape = list(buf.shape)
        k = int(rng.integers(len(shape)))
        shape[k] = max(0, shape[k] + int(rng.choice([-1, 1, -shape[k]])))
        p.buffers[name] = Buffer(name, buf.addr, buf.dtype, tuple(shape), buf.layout)
        return p, f"reshape buffer {name} to {shape}"
    notes = sorted(k for k in p.config if k.startswith("dynamic.")) if kind == 2 else sorted(p.config)
    if not notes:
        return mutate_program(prog, rng)
    key = notes[int(rng.integers(len(notes)))]
    words = str(p.config[key]).split()
    if words and rng.integers(3):
        k = int(rng.integers(len(words)))
        parts = words[k].split(":")
        j = int(rng.integers(len(parts)))
        parts[j] = str(int(parts[j]) + int(rng.choice([1, 8, 100, -1]))) if parts[j].lstrip("-").isdigit() \
            else parts[j] + "x"
        words[k] = ":".join(parts)
        p.config[key] = " ".join(words)
    else:
        p.config[key] = EDGE_VALUES[int(rng.integers(len(EDGE_VALUES)))] if kind == 3 else "9"
        if not isinstance(p.config[key], (int, str)) or isinstance(p.config[key], bool):
            p.config[key] = str(p.config[key])
    return p, f"note {key} = {p.config[key]!r:.40}"


def mutate_bytes(blob: bytes, rng) -> tuple[bytes, str]:
    """Bit flips anywhere in the ELF file, or a truncation."""
    if rng.integers(4) == 0:
        n = int(rng.integers(len(blob)))
        return blob[:n], f"truncate to {n}"
    out = bytearray(blob)
    flips = rng.integers(0, 8 * len(blob), int(rng.integers(1, 4)))
    for bit in flips:
        out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out), f"flip bits {sorted(int(b) for b in flips)}"


def mutants(count: int, seed: int) -> list[tuple[str, str, bytes]]:
    """(seed name, what was done, binary) for `count` mutants, a third of each kind."""
    rng = np.random.default_rng(seed)
    out = []
    names = sorted(seeds())
    while len(out) < count:
        name = names[len(out) % len(names)]
        blob = seeds()[name]
        prog = Program.from_bytes(blob)
        kind = len(out) // len(names) % 3
        try:
            if kind == 0:
                doc, what = mutate_json(graph_of(prog), rng)
                data = with_graph(prog, json.dumps(doc, sort_keys=True)).to_bytes()
            elif kind == 1:
                p, what = mutate_program(prog, rng)
                data = p.to_bytes()
            else:
                data, what = mutate_bytes(blob, rng)
        except (BinaryError, ValueError, TypeError):    # the writer refuses it: not a file anyone can have
            continue
        out.append((name, what, data))
    return out


# ------------------------------------------------------------------ the batch

BATCH = r"""
import json, sys
import numpy as np
import compiler
from compiler import CompileError
from nnpsim.config import Config
from nnpsim.errors import SimError
from nnpsim.state import SPACE_DDR
CFG = Config(ddr_bytes=1 << 20)     # a small DDR keeps the before/after comparison cheap

def outside(sim, seed):
    # DDR outside every buffer the program and its seed declare, as bytes: unchanged by host writes, and by a
    # run of the seed's code (which stores where the seed's buffers are, whatever the mutant's table says)
    ddr = sim.memory.view(SPACE_DDR, 0, sim.config.ddr_bytes)
    keep = np.ones(ddr.size, bool)
    for b in list(sim.program.buffers.values()) + list(seed.buffers.values()):
        keep[b.addr:b.addr + b.nbytes] = False
    return ddr[keep].copy()

def inputs(lib, rng):
    out = []
    for t in lib.meta["inputs"]:
        dims = {n: (lo + hi) // 2 for n, lo, hi in lib.meta.get("dims", [])}
        shape = tuple(dims.get(a, a) if isinstance(a, str) else a for a in t["shape"])
        out.append(rng.integers(-128, 128, shape).astype(np.int8))
    return out

def attempt(path, seed):
    try:
        lib = compiler.load(path, CFG)
        m = compiler.GraphModule(lib)
        before = outside(m.sim, seed)
        for k, a in enumerate(inputs(lib, np.random.default_rng(7))):
            m.set_input(k, a)
        if not np.array_equal(before, outside(m.sim, seed)):
            return ["escaped", "a host write changed DDR outside every buffer"]
        m.run(check_races=True)
        if np.array_equal(m.sim.program.code, seed.code) and not np.array_equal(before, outside(m.sim, seed)):
            return ["escaped", "the run changed DDR outside every buffer"]
        return ["ran", [m.get_output(k, quantized=True).tolist() for k in range(m.num_outputs)],
                json.dumps([lib.meta["inputs"], lib.meta["outputs"]], sort_keys=True)]
    except (CompileError, SimError) as exc:
        return ["refused", str(exc)]
    except BaseException as exc:
        import traceback
        return ["crash", "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc()[-1500:])]

from isa_spec.program import Program
jobs = json.loads(sys.stdin.read())
out = []
for seed_path, path in jobs:
    out.append(attempt(path, Program.load(seed_path)))
print(json.dumps(out))
"""


def run_batch(tmp_path, items: list[tuple[str, str, bytes]]) -> list[list]:
    """Load and run every (seed, what, binary) in one child process; its verdict for each."""
    jobs = []
    for name, blob in seeds().items():
        (tmp_path / f"{name}.nnp").write_bytes(blob)
    for k, (name, _, blob) in enumerate(items):
        p = tmp_path / f"m{k}.nnp"
        p.write_bytes(blob)
        jobs.append([str(tmp_path / f"{name}.nnp"), str(p)])
    proc = run_python(BATCH, stdin=json.dumps(jobs), timeout=3000, memory_bytes=6 << 30)
    assert proc.returncode == 0, f"batch died (status {proc.returncode}):\n{proc.stderr[-3000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def judge(items, verdicts, seed_runs: dict) -> dict[str, int]:
    """Assert the property for every mutant; the tally of verdicts."""
    tally = {"refused": 0, "ran": 0, "same": 0}
    for (name, what, blob), v in zip(items, verdicts):
        assert v[0] in ("refused", "ran"), f"{name}: {what}: {v[0]}: {v[1]}"
        tally[v[0]] += 1
        if v[0] == "refused":
            assert v[1].strip() and "\n" not in v[1].strip(), f"{name}: {what}: not one line: {v[1]!r}"
            continue
        seed = seed_runs[name]
        same_program = blob == seeds()[name] or (_code_and_buffers(blob) == _code_and_buffers(seeds()[name])
                                                 and v[2] == seed[2])
        if same_program:
            tally["same"] += 1
            assert v[1] == seed[1], f"{name}: {what}: a no-op mutation changed the output"
    return tally


def _code_and_buffers(blob: bytes):
    p = Program.from_bytes(blob)
    data = bytearray(p.data)
    g = p.buffers["nnp_graph"]
    del data[g.addr - p.data_base:]            # the description is the data's last buffer
    return (p.code.tobytes(), bytes(data), {k: (b.addr, b.dtype, b.shape, b.layout) for k, b in p.buffers.items()
                                            if k != "nnp_graph"}, {k: v for k, v in p.config.items()})


def test_compiled_file_mutations(tmp_path):
    items = mutants(budget(30).max_examples, seed=2026)
    plain = [(name, "seed", blob) for name, blob in seeds().items()]
    verdicts = run_batch(tmp_path, plain + items)
    seed_runs = {}
    for (name, _, _), v in zip(plain, verdicts):
        assert v[0] == "ran", f"seed {name}: {v}"
        seed_runs[name] = v
    tally = judge(items, verdicts[len(plain):], seed_runs)
    assert tally["refused"] and tally["ran"], tally
    print(f"compiled-file mutants: {len(items)}: {tally}")


# ------------------------------------------------------------------ networks with host parts

HOSTED_BATCH = r"""
import json, sys
import numpy as np
import compiler
from compiler import CompileError
from nnpsim.errors import SimError
jobs = json.loads(sys.stdin.read())
x = np.load(jobs.pop(0))
out = []
for path in jobs:
    try:
        m = compiler.GraphModule(compiler.load(path))
        m.set_input(0, x)
        m.run(check_races=True)
        out.append(["ran", [m.get_output(k).tolist() for k in range(m.num_outputs)]])
    except (CompileError, SimError) as exc:
        out.append(["refused", str(exc)])
    except BaseException as exc:
        import traceback
        out.append(["crash", "%s: %s\n%s" % (type(exc).__name__, exc, traceback.format_exc()[-1500:])])
print(json.dumps(out))
"""


def hosted_mutants(files: dict[str, bytes], count: int, seed: int) -> list[tuple[int, str, bytes]]:
    """(kind, what, zip bytes): the index mutated (0), the host model's bytes flipped or cut with its SHA-256
    recomputed (1) or not (2), the archive's own bytes flipped or cut (3)."""
    rng = np.random.default_rng(seed)
    index = json.loads(files["nnp_hosted.json"])
    host = next(n for n in files if n.endswith(".onnx"))
    k = next(i for i, st in enumerate(index["stages"]) if st["kind"] == "host")
    out = []
    while len(out) < count:
        kind = len(out) % 4
        doc, parts = copy.deepcopy(index), dict(files)
        if kind == 0:
            doc, what = mutate_json(index, rng)
        elif kind in (1, 2):
            parts[host], what = mutate_bytes(files[host], rng)
            if kind == 1:
                doc["stages"][k]["sha256"] = hashlib.sha256(parts[host]).hexdigest()
        parts["nnp_hosted.json"] = json.dumps(doc).encode()
        data = _zip(parts)
        if kind == 3:
            data, what = mutate_bytes(data, rng)
        out.append((kind, what, data))
    return out


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


def test_hosted_file_mutations(tmp_path):
    """Every mutant of a saved network with host parts: one clean line, or a run; a host model changed behind its
    SHA-256 is always refused, and an index that still loads and runs gives the seed's outputs."""
    lib = compiled("layernorm")[2]
    lib.save(tmp_path / "seed.nnp")
    with zipfile.ZipFile(tmp_path / "seed.nnp") as z:
        files = {n: z.read(n) for n in z.namelist()}
    np.save(tmp_path / "x.npy", inputs(3))
    items = [(-1, "seed", (tmp_path / "seed.nnp").read_bytes())] + hosted_mutants(files, budget(12).max_examples, 25)
    for j, (_, _, data) in enumerate(items):
        (tmp_path / f"h{j}.nnp").write_bytes(data)
    proc = run_python(HOSTED_BATCH, stdin=json.dumps([str(tmp_path / "x.npy")] + [str(tmp_path / f"h{j}.nnp")
                                                                                   for j in range(len(items))]),
                      timeout=1200, memory_bytes=6 << 30)
    assert proc.returncode == 0, f"batch died (status {proc.returncode}):\n{proc.stderr[-3000:]}"
    verdicts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert verdicts[0][0] == "ran", verdicts[0]
    tally = {"refused": 0, "ran": 0}
    for (kind, what, _), v in zip(items[1:], verdicts[1:]):
        assert v[0] in ("refused", "ran"), f"{what}: {v[0]}: {v[1]}"
        tally[v[0]] += 1
        if v[0] == "refused":
            assert v[1].strip() and "\n" not in v[1].strip(), f"{what}: not one line: {v[1]!r}"
        assert kind != 2 or v[0] == "refused", f"{what}: a host model changed behind its SHA-256 ran"
        assert kind != 0 or v[0] == "refused" or v[1] == verdicts[0][1], f"{what}: the index changed the output"
    assert tally["refused"], tally
    print(f"hosted-file mutants: {len(items) - 1}: {tally}")
