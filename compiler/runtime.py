"""GraphModule: run a compiled network on the simulator, in the shape of TVM's graph executor.

    lib = compiler.build(graph)            # or compiler.load("model.nnp")
    m = compiler.GraphModule(lib)
    m.set_input("x", x)                    # float: quantised as the model says; int8 (uint8): as it is
    m.run(check_races=False, trace="t.json")
    y = m.get_output(0)                    # dequantised like the model's output (quantized=True: int8 / uint8)
    m.stats.cycles, m.layer_stats()

Everything the executor needs comes from the graph description the binary
carries (compiler.library.read_meta), so a loaded binary runs exactly like
the freshly built one.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from isa_spec.program import Program
from nnpsim.config import Config
from nnpsim.errors import SimError
from nnpsim.footprint import RULE_DMA, footprint_rules
from nnpsim.simulator import Simulator
from nnpsim.stats import Stats
from nnpsim.trace import trace_json

from . import reference as sem
from .dynamic.graph import check_input
from .errors import CompileError
from .host import HostPart, check_array, run_part

LAYER_TRACK = 10_000      # tid of the layer track in the trace, above every unit track


def quantize(x: np.ndarray, scale, zero_point, axis: int | None) -> np.ndarray:
    """float32 -> int8 as onnxruntime's QuantizeLinear (compiler.reference.quantize_f32), per tensor or axis."""
    x = np.asarray(x)
    return sem.quantize_f32(x, _broadcast(scale, np.float32, x.ndim, axis),
                            _broadcast(zero_point, np.int64, x.ndim, axis))


def dequantize(q: np.ndarray, scale, zero_point, axis: int | None) -> np.ndarray:
    """int8 -> float32 as onnxruntime's DequantizeLinear (compiler.reference.dequantize_f32)."""
    q = np.asarray(q)
    return sem.dequantize_f32(q, _broadcast(scale, np.float32, q.ndim, axis),
                              _broadcast(zero_point, np.int64, q.ndim, axis))


def from_host(a: np.ndarray) -> np.ndarray:
    """A graph input's quantised values as the program holds them: int8 as they are, uint8 q as the int8 q - 128
    (the top bit flipped; compiler.onnx.state.as_int8 says why that is exact)."""
    return (np.ascontiguousarray(a) ^ np.uint8(0x80)).view(np.int8) if a.dtype == np.uint8 else a


def to_host(q: np.ndarray, host_dtype: str) -> np.ndarray:
    """A graph output's quantised values in the model's dtype: int8 as they are, uint8 as q + 128."""
    return (np.ascontiguousarray(q).view(np.uint8) ^ np.uint8(0x80)) if host_dtype == "uint8" else q


def _broadcast(v, dtype, ndim: int, axis: int | None) -> np.ndarray:
    a = np.asarray(v, dtype).ravel()
    if a.size == 1:
        return a.reshape(())
    shape = [1] * ndim
    shape[axis if axis is not None else 1] = a.size
    return a.reshape(shape)


@dataclass
class LayerStats:
    """One layer of a run: when it ran and what it did."""

    name: str
    ops: str
    start: int
    end: int
    cycles: int
    commands: int
    macs: int
    mac_utilization_pct: float
    ddr_bytes: int
    bound_cycles: int


class Binary(Protocol):
    """What GraphModule runs: a network's program with the graph description it carries
    (a compiler.library.Library)."""

    program: Program
    meta: dict
    config: Config


class GraphModule:
    """A compiled network on a simulator: set inputs, run, read outputs and per-layer statistics (a network
    with host parts, a compiler.library.HostedLibrary, runs as a HostedModule)."""

    def __new__(cls, lib=None, config: Config | None = None):
        return super().__new__(HostedModule if cls is GraphModule and hasattr(lib, "stages") else cls)

    def __init__(self, lib: Binary, config: Config | None = None):
        if not all(hasattr(lib, a) for a in ("program", "meta", "config")):
            raise CompileError(f"GraphModule takes a compiled network (compiler.build(graph) or "
                               f"compiler.load(path)), got {type(lib).__name__} {lib!r:.60}")
        self.lib = lib
        self.meta = lib.meta
        self.sim = Simulator(config or lib.config)
        self.sim.load(lib.program)
        self.stats = None
        self._given: set[str] = set()
        self._shapes: dict[str, tuple] = {}     # a dynamic network's inputs' shapes so far

    # ---------------------------------------------------------------- inputs and outputs
    def _tensor(self, key, which: str) -> dict:
        table = self.meta[which]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not 0 <= key < len(table):
                raise CompileError(f"{which[:-1]} index {key} is out of range: the model has {len(table)}")
            return table[int(key)]
        for t in table:
            if key in (t["name"], t.get("buffer")):
                return t
        known = ", ".join(t["name"] for t in table)
        raise CompileError(f"no {which[:-1]} named {key!r} (the model's {which}: {known})")

    def set_input(self, key, array) -> None:
        """Set input `key` (index or name): float arrays are quantised as the model says, int8 taken as is."""
        t = self._tensor(key, "inputs")
        a = np.asarray(array)
        if "dims" in self.meta:      # a dynamic network: any in-range shape, the argument block from it
            check_input(self.meta, t["name"], a.shape, {})      # in range; agreement is checked by run()
            self._shapes[t["name"]] = tuple(a.shape)
        elif tuple(a.shape) != tuple(t["shape"]):
            raise CompileError(f"input {t['name']} has shape {tuple(t['shape'])}, got {a.shape}")
        raw = t.get("host_dtype") or "int8"
        if a.dtype.kind == "f":
            if "scale" not in t:
                raise CompileError(f"input {t['name']} takes {raw} (the model gives it no quantisation)")
            a = quantize(a, t["scale"], t["zero_point"], t.get("axis"))
        elif a.dtype != np.dtype(raw):
            raise CompileError(f"input {t['name']} takes float32 (quantised as the model says) or {raw}, "
                               f"got {a.dtype}")
        else:
            a = from_host(a)
        self.sim.write(t["buffer"], a)
        self._given.add(t["buffer"])

    def get_output(self, key=0, *, quantized: bool = False) -> np.ndarray:
        """Output `key` (index or name), dequantised like the model's output (quantized=True: int8, or uint8 for
        a uint8 output)."""
        if self.stats is None:
            raise CompileError("no output yet: call run() first")
        t = self._tensor(key, "outputs")
        q = self.sim.read(t["buffer"])
        if quantized or "scale" not in t:
            return to_host(q, t.get("host_dtype") or "int8")
        return dequantize(q, t["scale"], t["zero_point"], t.get("axis"))

    @property
    def num_inputs(self) -> int:
        return len(self.meta["inputs"])

    @property
    def num_outputs(self) -> int:
        return len(self.meta["outputs"])

    # ---------------------------------------------------------------- running
    def run(self, check_races: bool = False, trace=None) -> Stats:
        """Run the network on the simulator; its Stats (SimError if the program fails)."""
        missing = [t["name"] for t in self.meta["inputs"] if t["buffer"] not in self._given]
        if missing:
            raise CompileError(f"set every input before run(): missing {', '.join(missing)}")
        if "dims" in self.meta:
            for name, shape in self._shapes.items():
                check_input(self.meta, name, shape, {k: v for k, v in self._shapes.items() if k != name})
        try:
            self.stats = self.sim.run(check_races=check_races)
        except SimError:
            if trace is not None and self.sim.last_log is not None:     # the trace up to the failure
                Path(trace).write_text(trace_json(self.sim.last_log, self.lib.program, self.sim.config))
            raise
        if trace is not None:       # written once, never read back (the path may be /dev/null or a pipe)
            doc = json.loads(trace_json(self.sim.last_log, self.lib.program, self.sim.config))
            Path(trace).write_text(json.dumps(with_layer_track(doc, self.layer_stats())))
        return self.stats

    def layer_stats(self) -> list[LayerStats]:
        """Per layer of the last run: its span of cycles, commands, MACs, utilisation, DDR bytes, bound."""
        log = self.sim.last_log
        if log is None:
            raise CompileError("no run yet: call run() first")
        starts = _layer_starts(self.lib.program, self.meta["layers"])
        pcs = np.asarray(log.cmd_pc, np.int64)
        layer_of = np.searchsorted(starts, pcs, side="right") - 1
        ddr = _ddr_bytes(log)
        peak = self.sim.config.peak_macs_per_cycle
        out = []
        for k, layer in enumerate(self.meta["layers"]):
            mine = (layer_of == k) & (np.asarray(log.cmd_start) >= 0)
            start = int(np.asarray(log.cmd_start)[mine].min()) if mine.any() else 0
            end = int(np.where(np.asarray(log.cmd_end) < 0, log.cycles, log.cmd_end)[mine].max()) if mine.any() else 0
            macs = int(np.asarray(log.cmd_macs)[mine].sum())
            cycles = max(end - start, 0)
            util = round(100.0 * macs / (cycles * peak), 2) if cycles else 0.0
            out.append(LayerStats(layer["name"], layer["ops"], start, end, cycles, int(mine.sum()), macs,
                                  util, int(ddr[mine].sum()), layer["bound_cycles"]))
        return out


def _layer_starts(program, layers: list[dict]) -> np.ndarray:
    """The byte address of each layer's first instruction (its label)."""
    out = []
    for layer in layers:
        sym = program.symbols.get(layer["label"])
        if sym is None:
            raise CompileError(f"the binary lacks the label of layer {layer['name']} ({layer['label']})")
        out.append(int(sym.value))
    return np.asarray(out, np.int64)


def _ddr_bytes(log) -> np.ndarray:
    """Bytes each command moved to or from DDR (0 for NU and VU commands)."""
    rules = footprint_rules()
    ops = np.asarray(log.cmd_op, np.int64)
    fields = np.asarray(log.cmd_fields, np.int64)
    is_dma = rules[np.clip(ops, 0, rules.size - 1)] == RULE_DMA
    touches = (fields[:, 0] == 0) | (fields[:, 1] == 0)
    return np.where(is_dma & touches, np.asarray(log.cmd_bytes, np.int64), 0)


def with_layer_track(doc: dict, layers: list[LayerStats]) -> dict:
    """The trace document `doc` (nnpsim's) with a track of named layer slices above the unit tracks."""
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    pid = next((e["pid"] for e in events if "pid" in e), 1)
    events.append({"ph": "M", "pid": pid, "tid": LAYER_TRACK, "name": "thread_name", "args": {"name": "layers"}})
    events.append({"ph": "M", "pid": pid, "tid": LAYER_TRACK, "name": "thread_sort_index",
                   "args": {"sort_index": -1}})
    for layer in layers:
        if layer.commands:
            events.append({"ph": "X", "pid": pid, "tid": LAYER_TRACK, "ts": layer.start, "dur": layer.cycles,
                           "name": layer.name, "cat": "layer",
                           "args": {"ops": layer.ops, "macs": layer.macs, "ddr_bytes": layer.ddr_bytes,
                                    "bound_cycles": layer.bound_cycles}})
    return doc


@dataclass
class HostedStats:
    """A run of a network with host parts: the NPU stages' cycles one after another, and where the MACs ran."""

    cycles: int
    time_us: float
    stages: list[Stats]                 # each NPU stage's run, in order
    npu_macs: int
    host_macs: int
    host_nodes: dict[str, list[str]]    # host part: the nodes it ran

    @property
    def npu_mac_share(self) -> float:
        """The fraction of the network's MACs that ran on the NPU."""
        total = self.npu_macs + self.host_macs
        return self.npu_macs / total if total else 1.0


class HostedModule(GraphModule):
    """A network with host parts: each NPU stage on a simulator of its own, each host part in one onnxruntime
    session made here, run in stage order; tensors pass between them as the ONNX model has them."""

    def __init__(self, lib, config: Config | None = None):
        self.lib = lib
        self.meta = lib.meta
        self.parts = [st.session() if isinstance(st, HostPart) else GraphModule(st, config) for st in lib.stages]
        self.stats = None
        self._env: dict[str, np.ndarray] = {}
        self._made_by = {t["name"]: k for k, (_, outs) in enumerate(lib.tensors) for t in outs}

    def set_input(self, key, array) -> None:
        """Set input `key` (index or name), in the model's dtype and shape (float32 for a float input)."""
        t = self._tensor(key, "inputs")
        self._env[t["name"]] = check_array(t, array, "input")

    def run(self, check_races: bool = False, trace=None) -> HostedStats:
        """Run every stage in order: NPU stages on the simulator, host parts in their sessions."""
        missing = [t["name"] for t in self.meta["inputs"] if t["name"] not in self._env]
        if missing:
            raise CompileError(f"set every input before run(): missing {', '.join(missing)}")
        if trace is not None:
            raise CompileError("a trace covers one program; this network has a program per NPU stage")
        runs = []
        for st, part, (ins, outs) in zip(self.lib.stages, self.parts, self.lib.tensors):
            if isinstance(st, HostPart):
                self._env.update(run_part(st, part, self._env))
                continue
            for t in ins:
                part.set_input(t["name"], self._env[t["name"]])
            runs.append(part.run(check_races=check_races))
            for t in outs:
                self._env[t["name"]] = part.get_output(t["name"], quantized=t["dtype"] != "float32")
        self.stats = HostedStats(sum(r.cycles for r in runs), sum(r.time_us for r in runs), runs,
                                 self.lib.npu_macs, self.lib.host_macs,
                                 {p.name: [n[0] for n in p.nodes] for p in self.lib.host_parts})
        return self.stats

    def get_output(self, key=0, *, quantized: bool = False) -> np.ndarray:
        """Output `key` (index or name) as the model gives it (quantized=True: an NPU stage's int8 or uint8)."""
        if self.stats is None:
            raise CompileError("no output yet: call run() first")
        t = self._tensor(key, "outputs")
        part = self.parts[self._made_by[t["name"]]]
        if quantized and isinstance(part, GraphModule):
            return part.get_output(t["name"], quantized=True)
        return self._env[t["name"]]

    def layer_stats(self) -> list[LayerStats]:
        """Per layer of the last run, NPU stages' layers on one time line and a row (no cycles) per host part."""
        if self.stats is None:
            raise CompileError("no run yet: call run() first")
        out, start = [], 0
        for st, part in zip(self.lib.stages, self.parts):
            if isinstance(st, HostPart):
                out.append(LayerStats(st.name, st.ops, start, start, 0, 0, st.macs, 0.0, 0, 0))
                continue
            for s in part.layer_stats():
                out.append(LayerStats(s.name, s.ops, s.start + start, s.end + start, s.cycles, s.commands, s.macs,
                                      s.mac_utilization_pct, s.ddr_bytes, s.bound_cycles))
            start += part.stats.cycles
        return out
