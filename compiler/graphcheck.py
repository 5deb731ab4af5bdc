"""A compiled network file checked as a whole when it is read: the graph description against GRAPH_SCHEMA, then
every buffer, shape, dtype, label, arena and note against the program and the machine.

The schema is data: a schema is a type name ("str", "name", "bool", "scale", "int", "count", "any"), a tuple
("int", lo, hi), ("enum", v, ...), ("list", item, min, max), ("pair", a, b, c) (a list of exactly those
items), ("map", value) (an object of identifier keys), ("null", s) (s or null), ("or", a, b), or a dict of
keys to schemas (a key ending in "?" is optional; no other key is allowed).  check_schema names the first
field that breaks it, by its path (inputs[0].shape[2]), with the value.
"""
from __future__ import annotations

import hashlib
import math
import re

from isa_spec.program import Program
from nnpsim import argblock
from nnpsim.config import Config, target_mismatches
from nnpsim.errors import SimError

from .dims import MAX_STRIDE, axis_rule
from .errors import CompileError
from .host import DTYPES, ONNX_DTYPES, HostPart
from .sizes import MAX_COUNT, MAX_DIM, capacities

GRAPH_FORMAT = "nnp-graph/1"
GRAPH_BUFFER = "nnp_graph"
ARENA = "arena"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_ONCHIP = re.compile(r"(dm|ibuf|wbuf|abuf|vbuf)(\d{0,3})\Z")
MAX_NDIM = 8
MAX_LIST = 1 << 16

SHAPE = ("list", ("int", 0, MAX_DIM), 0, MAX_NDIM)
AXES = ("list", ("or", ("int", 0, MAX_DIM), "name"), 0, MAX_NDIM)
TENSOR = {"name": "str", "buffer": "name", "shape": AXES, "dtype": ("enum", "int8", "int32"),
          "scale?": ("list", "scale", 1, MAX_DIM), "zero_point?": ("list", ("int", -128, 127), 1, MAX_DIM),
          "axis?": ("null", ("int", 0, MAX_NDIM - 1)), "host_dtype?": ("enum", "uint8")}
# a priced variant is null when it failed to lower (interleave.choose)
PIPELINING = {"chosen": "str", "cycles": "count", "priced": ("map", ("null", "count")), "why": "str"}
LAYER = {"name": "str", "label": "name", "ops": "str", "in_shapes": ("list", SHAPE, 0, MAX_LIST),
         "out_shape": SHAPE, "macs": "count", "predicted_cycles": "count", "bound_cycles": "count",
         "nodes": ("list", "str", 0, MAX_LIST), "onchip": ("map", "count"), "pipelining?": ("null", PIPELINING)}
DECISION = {"members": ("list", "str", 0, MAX_LIST), "ops": "str", "apart_cycles": "count",
            "fused_cycles": ("null", "count"), "fused": "bool", "why": "str"}
TRANSFORM = {"value": "str", "src": "str", "dst": "str", "out": "str", "readers": ("list", "str", 0, MAX_LIST),
             "cycles": "count"}
LAYOUT = {"kernels": ("map", "str"), "prices": ("map", ("map", "count")), "fixed": ("map", "str"),
          "stored": ("map", "str"), "lines": ("list", "str", 0, MAX_LIST),
          "transforms": ("list", TRANSFORM, 0, MAX_LIST)}
GRAPH_SCHEMA = {
    "format": ("enum", GRAPH_FORMAT),
    "inputs": ("list", TENSOR, 1, MAX_LIST), "outputs": ("list", TENSOR, 1, MAX_LIST),
    "layers": ("list", LAYER, 0, MAX_LIST),
    "arena": {"bytes": "count", "naive_bytes": "count"},
    "fused": "bool", "fusion": ("list", DECISION, 0, MAX_LIST), "predicted_cycles?": "count",
    "onchip_peak?": ("map", "count"), "layout?": ("null", LAYOUT),
    "dims?": ("list", ("pair", "name", ("int", 1, MAX_DIM), ("int", 1, MAX_DIM)), 1, MAX_LIST),
    "derived?": ("map", ("pair", "name", "int", ("int", 1, MAX_STRIDE))),        # parent, add, stride
}
"""The nnp_graph JSON (GRAPH_FORMAT) of a network binary; docs/runtime.md describes each field."""

HOSTED_FORMAT = "nnp-hosted/1"
HOSTED_INDEX = "nnp_hosted.json"
HOST_TENSOR = {"name": "str", "dtype": ("enum", *DTYPES),
               "shape": ("null", ("list", ("null", ("or", ("int", 0, MAX_DIM), "str")), 0, MAX_NDIM))}
STAGE = {"kind": ("enum", "npu", "host"), "file": "str", "inputs": ("list", HOST_TENSOR, 0, MAX_LIST),
         "outputs": ("list", HOST_TENSOR, 1, MAX_LIST), "name?": "name", "sha256?": "str",
         "nodes?": ("list", ("pair", "str", "str", "str"), 1, MAX_LIST), "macs?": "count"}
HOSTED_SCHEMA = {"format": ("enum", HOSTED_FORMAT), "name": "str", "inputs": ("list", HOST_TENSOR, 1, MAX_LIST),
                 "outputs": ("list", HOST_TENSOR, 1, MAX_LIST), "stages": ("list", STAGE, 1, MAX_LIST)}
"""The index (HOSTED_INDEX, JSON) of a network file with host parts: its stages in run order, each an NPU
program or a host part's ONNX model, and the tensors between them (docs/runtime.md, "Host fallback")."""
_HOST_ONLY = ("name", "sha256", "nodes", "macs")

_BASIC = {"str": lambda v: isinstance(v, str) and len(v) <= MAX_LIST,
          "name": lambda v: isinstance(v, str) and _IDENT.match(v) is not None,
          "bool": lambda v: isinstance(v, bool),
          "scale": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf,
          "int": lambda v: _int(v, -MAX_COUNT, MAX_COUNT),
          "count": lambda v: _int(v, 0, MAX_COUNT),
          "any": lambda v: True}
_WHAT = {"str": "a string", "name": "an identifier", "bool": "true or false", "scale": "a positive finite number",
         "int": f"an integer of magnitude at most {MAX_COUNT}", "count": f"an integer in [0, {MAX_COUNT}]"}


def _int(v, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def _bad(path: str, value, what: str, where: str = GRAPH_BUFFER) -> CompileError:
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    path = path if len(path) <= 120 else path[:117] + "..."
    return CompileError(f"bad compiled file: {where} field {path or '(top)'} = {shown}: expected {what}")


def check_schema(value, schema, path: str = "") -> None:
    """CompileError naming the first field of `value` that breaks `schema` (the module docstring's language)."""
    if isinstance(schema, str):
        if not _BASIC[schema](value):
            raise _bad(path, value, _WHAT[schema])
    elif isinstance(schema, dict):
        _check_object(value, schema, path)
    elif schema[0] == "int":
        if not _int(value, schema[1], schema[2]):
            raise _bad(path, value, f"an integer in [{schema[1]}, {schema[2]}]")
    elif schema[0] == "enum":
        if not any(type(value) is type(v) and value == v for v in schema[1:]):
            raise _bad(path, value, "one of " + ", ".join(repr(v) for v in schema[1:]))
    elif schema[0] == "null":
        if value is not None:
            check_schema(value, schema[1], path)
    elif schema[0] == "or":
        try:
            check_schema(value, schema[1], path)
        except CompileError:
            check_schema(value, schema[2], path)
    elif schema[0] == "map":
        if not isinstance(value, dict) or len(value) > MAX_LIST:
            raise _bad(path, value, "an object")
        for k, v in value.items():
            check_schema(v, schema[1], f"{path}.{k}")
    else:
        _check_list(value, schema, path)


def _check_object(value, schema: dict, path: str) -> None:
    if not isinstance(value, dict):
        raise _bad(path, value, "an object with keys " + ", ".join(k.rstrip("?") for k in schema))
    keys = {k.rstrip("?"): s for k, s in schema.items()}
    for k in value:
        if k not in keys:
            raise _bad(f"{path}.{k}".lstrip("."), value[k], "no such key (known: " + ", ".join(keys) + ")")
    for k, s in schema.items():
        if not k.endswith("?") and k not in value:
            raise _bad(f"{path}.{k}".lstrip("."), None, "a value (the key is missing)")
        if k.rstrip("?") in value:
            check_schema(value[k.rstrip("?")], s, f"{path}.{k.rstrip('?')}".lstrip("."))


def _check_list(value, schema: tuple, path: str) -> None:
    if schema[0] == "pair":
        if not isinstance(value, list) or len(value) != len(schema) - 1:
            raise _bad(path, value, f"a list of {len(schema) - 1} items")
        for k, (v, s) in enumerate(zip(value, schema[1:])):
            check_schema(v, s, f"{path}[{k}]")
        return
    _, item, lo, hi = schema
    if not isinstance(value, list) or not lo <= len(value) <= hi:
        raise _bad(path, value, f"a list of {lo} to {hi} items")
    for k, v in enumerate(value):
        check_schema(v, item, f"{path}[{k}]")


# ----------------------------------------------------------------------------- against the program

def check_machine(program: Program, config: Config, path: str) -> None:
    """CompileError (one line) unless the program was built for this machine and its data fits its DDR."""
    wrong = target_mismatches(config, program.config)
    if wrong:
        raise CompileError(f"{path}: built for another machine: {'; '.join(wrong)}; rebuild it for this one "
                           f"or give the configuration it was built for")
    end = program.data_base + max(int(program.data_size), len(program.data))
    if program.data_base < 0 or end > config.ddr_bytes:
        raise CompileError(f"{path}: its data [{program.data_base:#x}, {end:#x}) does not fit the configured DDR "
                           f"of {config.ddr_bytes:#x} bytes (memory.ddr.size)")


def check_graph(meta: dict, program: Program, config: Config) -> None:
    """CompileError naming the field and the value unless the description agrees with the program (its
    buffers, labels, dynamic-shape notes) and the machine (its on-chip sizes)."""
    check_schema(meta, GRAPH_SCHEMA)
    try:
        sig = argblock.signature(program)
    except SimError as exc:
        raise CompileError(f"bad compiled file: {exc}") from None
    if ("dims" in meta) != (sig is not None) or ("derived" in meta) != (sig is not None):
        raise _bad("dims", meta.get("dims"), "dims and derived exactly when the program has dynamic-shape notes")
    if sig is not None:
        _check_dims(meta, sig)
    for which in ("inputs", "outputs"):
        names = [t["name"] for t in meta[which]]
        if len(set(names)) != len(names):
            raise _bad(which, names, "distinct names")
        for k, t in enumerate(meta[which]):
            _check_tensor(t, f"{which}[{k}]", program, sig)
    _check_layers(meta["layers"], program, config)
    _check_onchip(meta.get("onchip_peak", {}), "onchip_peak", config)
    _check_arena(meta["arena"], program, sig)


def _check_dims(meta: dict, sig) -> None:
    notes = [[name, lo, hi] for name, (lo, hi) in sig.dims.items()]
    if meta["dims"] != notes:
        raise _bad("dims", meta["dims"], f"the program's dynamic.dims {notes}")
    rules = {k: axis_rule(*v) for k, v in meta["derived"].items()}
    if rules != dict(sig.derived or {}):
        raise _bad("derived", meta["derived"], f"the program's dynamic.derived {dict(sig.derived or {})}")


def _check_tensor(t: dict, path: str, program: Program, sig) -> None:
    buf = program.buffers.get(t["buffer"])
    if buf is None or t["buffer"] in (GRAPH_BUFFER, ARENA) or (sig is not None and t["buffer"] == sig.args):
        raise _bad(f"{path}.buffer", t["buffer"], "a tensor buffer of the program")
    if t["dtype"] != buf.dtype:
        raise _bad(f"{path}.dtype", t["dtype"], f"{buf.dtype}, buffer {buf.name}'s dtype")
    if sig is None:
        if t["shape"] != list(buf.shape):
            raise _bad(f"{path}.shape", t["shape"], f"{list(buf.shape)}, buffer {buf.name}'s shape")
    elif [str(a) for a in t["shape"]] != list(sig.buffers.get(buf.name, [str(n) for n in buf.shape])):
        raise _bad(f"{path}.shape", t["shape"], f"the axes of buffer {buf.name} in the program's notes")
    quant = [k in t for k in ("scale", "zero_point", "axis")]
    if any(quant) and not all(quant):
        raise _bad(path, sorted(t), "scale, zero_point and axis together or none of them")
    if all(quant):
        n, axis = len(t["scale"]), t["axis"]
        if len(t["zero_point"]) != n:
            raise _bad(f"{path}.zero_point", t["zero_point"], f"{n} values, one per scale")
        if n > 1 and (axis is None or axis >= len(t["shape"]) or t["shape"][axis] != n):
            raise _bad(f"{path}.axis", axis, f"the axis of the shape {t['shape']} that has {n} entries")


def _check_layers(layers: list, program: Program, config: Config) -> None:
    last = -1
    for k, layer in enumerate(layers):
        sym = program.symbols.get(layer["label"])
        if sym is None or sym.section != "text" or not last <= sym.value < 8 * len(program.code):
            raise _bad(f"layers[{k}].label", layer["label"], "a code label of the program, after the layer before's")
        last = sym.value
        _check_onchip(layer["onchip"], f"layers[{k}].onchip", config)


def _check_onchip(usage: dict, path: str, config: Config) -> None:
    cap = capacities(config)
    counts = {"dm": 1, "ibuf": config.nu_count, "wbuf": config.nu_count, "abuf": config.nu_count,
              "vbuf": config.vu_count}
    for key, n in usage.items():
        m = _ONCHIP.match(key)
        if m is None or int(m.group(2) or 0) >= counts[m.group(1)] or n > cap[m.group(1)]:
            raise _bad(f"{path}.{key}", n, "bytes of an on-chip memory of this machine, at most its size")


def _check_arena(arena: dict, program: Program, sig) -> None:
    buf = program.buffers.get(ARENA)
    if sig is not None:           # a dynamic network keeps one buffer per tensor: the arena is their sum
        if buf is not None or arena["bytes"] != arena["naive_bytes"]:
            raise _bad("arena", arena, "bytes equal to naive_bytes and no arena buffer (a dynamic network)")
    elif arena["bytes"] != (buf.nbytes if buf is not None else 0) or arena["naive_bytes"] < arena["bytes"]:
        raise _bad("arena.bytes", arena["bytes"], f"the size of the program's {ARENA} buffer "
                   f"({buf.nbytes if buf is not None else 0}), at most naive_bytes")


# ----------------------------------------------------------------------------- a network with host parts

def check_hosted(index: dict, files: dict[str, bytes]) -> None:
    """CompileError (one line, naming the field or the file) unless the index of a file with host parts is
    well formed and its stages agree: every file there, each stage's inputs given before it in the same dtype,
    every output made once, every host part's bytes those its SHA-256 names."""
    try:
        check_schema(index, HOSTED_SCHEMA)
    except CompileError as exc:
        raise CompileError(str(exc).replace(GRAPH_BUFFER, HOSTED_INDEX, 1)) from None
    for part in ("inputs", "outputs"):      # a graph names each of its inputs and outputs once (ONNX's rule)
        _check_unique([t["name"] for t in index[part]], part)
    have = {t["name"]: t["dtype"] for t in index["inputs"]}
    for k, st in enumerate(index["stages"]):
        path = f"stages[{k}]"
        extra = [key for key in _HOST_ONLY if (key in st) != (st["kind"] == "host")]
        if extra:
            raise _bad(f"{path}.{extra[0]}", st.get(extra[0]), f"{', '.join(_HOST_ONLY)} exactly on a host stage",
                       HOSTED_INDEX)
        if st["file"] not in files:
            raise _bad(f"{path}.file", st["file"], "a file of the compiled network", HOSTED_INDEX)
        if st["kind"] == "host" and hashlib.sha256(files[st["file"]]).hexdigest() != st["sha256"]:
            raise CompileError(f"bad compiled file: host part {st['name']} ({st['file']}) is not the model its "
                               f"SHA-256 {st['sha256'][:16]}... names: it was changed or corrupted")
        for j, t in enumerate(st["inputs"]):
            if have.get(t["name"]) != t["dtype"]:
                raise _bad(f"{path}.inputs[{j}]", t["name"], "a tensor of that dtype given by the inputs or a "
                           "stage before", HOSTED_INDEX)
        for j, t in enumerate(st["outputs"]):
            if t["name"] in have:
                raise _bad(f"{path}.outputs[{j}]", t["name"], "a tensor no input or stage before gives", HOSTED_INDEX)
            have[t["name"]] = t["dtype"]
    for j, t in enumerate(index["outputs"]):
        if have.get(t["name"]) != t["dtype"]:
            raise _bad(f"outputs[{j}]", t["name"], "a tensor of that dtype a stage gives", HOSTED_INDEX)


def _check_unique(names: list[str], path: str) -> None:
    """CompileError naming the second place a name is listed again in the index's `path` list."""
    for j, name in enumerate(names):
        if name in names[:j]:
            raise _bad(f"{path}[{j}]", name, f"a name not listed before in {path}", HOSTED_INDEX)


def check_npu_stage(stage: dict, meta: dict, k: int) -> None:
    """CompileError unless an NPU stage's program takes and gives the tensors the index says, in dtypes it can
    take and give them in (float32 only where it quantises them on the host)."""
    for which in ("inputs", "outputs"):
        got, want = meta[which], stage[which]
        if [t["name"] for t in got] != [t["name"] for t in want] or not all(map(_takes, got, want)):
            raise _bad(f"stages[{k}].{which}", [f"{t['name']} {t['dtype']}" for t in want],
                       f"the tensors of its program's {which} "
                       f"({', '.join(t['name'] + ' ' + (t.get('host_dtype') or t['dtype']) for t in got)})",
                       HOSTED_INDEX)


def _takes(program: dict, t: dict) -> bool:
    """Whether a program's input or output can stand for tensor t: uint8 as its uint8, int8 as its int8, float32
    where it has a quantisation."""
    if t["dtype"] == "float32":
        return "scale" in program
    return (program.get("host_dtype") or program["dtype"]) == t["dtype"]


def check_host_part(part: HostPart) -> None:
    """CompileError unless a host part's bytes are an ONNX model whose inputs and outputs are those the index
    names, in the same element types (onnx, an optional extra, reads it)."""
    try:
        import onnx
    except ImportError:
        raise CompileError("this network has host parts, which run on onnxruntime: "
                           "pip install 'nnp-toolchain[onnx]'") from None
    try:
        model = onnx.ModelProto()
        model.ParseFromString(part.model)
        graph = model.graph
    except Exception as exc:        # protobuf's DecodeError
        raise CompileError(f"bad compiled file: host part {part.name} is not an ONNX model: {exc}") from None
    init = {t.name for t in graph.initializer}
    for which, vis in (("inputs", [vi for vi in graph.input if vi.name not in init]), ("outputs", graph.output)):
        got = [(vi.name, ONNX_DTYPES.get(vi.type.tensor_type.elem_type, "?")) for vi in vis]
        want = [(t["name"], t["dtype"]) for t in getattr(part, which)]
        if got != want:
            raise CompileError(f"bad compiled file: host part {part.name}'s model has the {which} {got}, the index "
                               f"says {want}")
