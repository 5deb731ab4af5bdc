"""What a network binary describes about itself: the graph description it carries, the Library, load().

The binary carries what a runtime needs in its DDR buffer `nnp_graph` (UTF-8
JSON, GRAPH_FORMAT): the inputs and outputs (buffer, shape, dtype,
quantisation), the layer table, the DDR arena, and the fusion and layout
decisions.  compiler.network and compiler.dynamic.network write it;
compiler.runtime.GraphModule and `nnpsim run` read it.
"""
from __future__ import annotations

import io
import json
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from isa_spec.program import ZIP_MAGIC, BinaryError, Program
from nnpsim.config import Config
from nnpsim.stats import Stats

from .errors import CompileError
from .graphcheck import (ARENA, GRAPH_BUFFER, GRAPH_FORMAT, HOSTED_FORMAT, HOSTED_INDEX, check_graph,
                         check_host_part, check_hosted, check_machine, check_npu_stage)
from .host import HostPart, nodes_text
from .interleave import prices_text
from .ir import Buffer
from .runtime import GraphModule


@dataclass
class Decision:
    """One priced merge: the kernel so far and the next one, apart and fused."""

    members: list[str]           # the kernels' names, the proposed fused kernel in order
    ops: str
    apart_cycles: int            # predicted: the kernel so far plus the next one, each alone
    fused_cycles: int | None     # predicted for the fused kernel (None: it cannot be built)
    fused: bool
    why: str = ""

    @property
    def gain(self) -> float:
        """Predicted fraction of the cycles the merge saves (negative: it would cost)."""
        if self.fused_cycles is None or not self.apart_cycles:
            return 0.0
        return 1.0 - self.fused_cycles / self.apart_cycles

    def line(self) -> str:
        """One line of the report."""
        head = f"{'fuse' if self.fused else 'keep apart'}: {' + '.join(self.members)} ({self.ops})"
        if self.fused_cycles is None:
            return f"{head}: {self.why}"
        return (f"{head}: apart {self.apart_cycles:,}, fused {self.fused_cycles:,} predicted cycles, "
                f"gain {100 * self.gain:+.1f}%" + (f" ({self.why})" if self.why else ""))


def buffer_name(value_name: str, used: set[str]) -> str:
    """An assembler-safe, unique DDR buffer name for a graph input or output."""
    base = re.sub(r"\W", "_", value_name).strip("_") or "t"
    base = base if base[0].isalpha() else f"t_{base}"
    name, k = base, 1
    while name in used or name in (ARENA, GRAPH_BUFFER):
        k += 1
        name = f"{base}_{k}"
    used.add(name)
    return name


def tensor_meta(value, buffer: str) -> dict:
    """A graph input's or output's entry in the graph description: buffer, shape, dtype, quantisation."""
    q = getattr(value, "quant", None)
    out = {"name": value.name, "buffer": buffer, "shape": list(value.shape), "dtype": value.dtype}
    if getattr(value, "host_dtype", ""):     # uint8 outside, int8 inside: compiler.runtime flips the top bit
        out["host_dtype"] = value.host_dtype
    if q is not None:
        out["scale"] = np.asarray(q.scale, np.float32).ravel().tolist()
        out["zero_point"] = np.asarray(q.zero_point).astype(int).ravel().tolist()
        out["axis"] = q.axis
    return out


def graph_buffer(meta: dict) -> Buffer:
    """The DDR buffer GRAPH_BUFFER that carries the graph description, as UTF-8 JSON."""
    blob = np.frombuffer(json.dumps(meta, sort_keys=True).encode(), np.uint8).view(np.int8)
    return Buffer(GRAPH_BUFFER, "ddr", blob.size, dtype="int8", shape=(blob.size,), data=blob)


@dataclass
class Library:
    """A compiled network: one program, its graph description and layer table."""

    program: Program
    meta: dict
    config: Config
    asm: str = ""
    files: dict[str, bytes] = field(default_factory=dict)
    predicted_cycles: int = 0
    stats: Stats | None = None          # of the last run()

    @property
    def layers(self) -> list[dict]:
        return self.meta["layers"]

    @property
    def arena_bytes(self) -> int:
        return self.meta["arena"]["bytes"]

    def save(self, path: str | Path) -> None:
        """Write the binary; compiler.load(path) and `nnpsim run` read it."""
        self.program.save(path)

    def run(self, *inputs: np.ndarray, check_races: bool = False) -> np.ndarray | list[np.ndarray]:
        """Run on the simulator (compiler.runtime.GraphModule): the inputs in the order of the graph's (float:
        quantised as the model says; int8: as it is); the output (a list of them if several), dequantised
        like the model's."""
        return run_network(self, inputs, check_races)

    def layer_table(self) -> str:
        """One line per layer: ops, shapes, predicted cycles and roofline bound."""
        rows = [f"{'layer':<28} {'ops':<34} {'output':<18} {'predicted':>11} {'bound':>10}"]
        for layer in self.layers:
            rows.append(f"{layer['name'][:28]:<28} {layer['ops'][:34]:<34} {str(layer['out_shape']):<18} "
                        f"{layer['predicted_cycles']:>11,} {layer['bound_cycles']:>10,}")
        a = self.meta["arena"]
        rows.append(f"arena {a['bytes']:,} bytes (one buffer per tensor: {a['naive_bytes']:,})")
        return "\n".join(rows)

    def fusion_report(self) -> str:
        """Every fusion decision with its predicted gain, then the on-chip high-water marks."""
        if not self.meta.get("fused", True):
            rows = ["fusion: off (one kernel per node)"]
        else:
            made = [Decision(**d) for d in self.meta.get("fusion", [])]
            rows = [f"fusion: {sum(d.fused for d in made)} of {len(made)} merges priced faster fused"]
            rows += [f"  {d.line()}" for d in made]
            rows += pipelining_lines(self.meta.get("layers", []))
        plan = self.meta.get("layout")
        rows += plan["lines"] if plan else ["layouts: not planned (every activation NCHW in DDR)"]
        peak = self.meta.get("onchip_peak", {})
        rows.append("on-chip high-water (bytes): " + ", ".join(f"{m} {n:,}" for m, n in sorted(peak.items())))
        return "\n".join(rows)


def run_network(lib, inputs: tuple[np.ndarray, ...], check_races: bool) -> np.ndarray | list[np.ndarray]:
    """Run a compiled network (GraphModule) on inputs in the graph's order, keep its stats on lib; its output (a
    list of them if several), as the model gives it."""
    m = GraphModule(lib)
    for k, a in enumerate(inputs):
        m.set_input(k, a)
    lib.stats = m.run(check_races=check_races)
    outs = [m.get_output(k) for k in range(m.num_outputs)]
    return outs[0] if len(outs) == 1 else outs


def pipelining_lines(layers: list[dict]) -> list[str]:
    """The report's lines on each fused kernel's pipelining: the variant chosen and every variant's price."""
    rows = []
    for layer in layers:
        p = layer.get("pipelining")
        if p:
            rows.append(f"  {layer['name']} ({layer['ops']}): {p['chosen']} "
                        f"(predicted cycles: {prices_text(p['priced'])}){p.get('why', '')}")
    return ([f"pipelining: {len(rows)} fused kernels"] + rows) if rows else []


def read_meta(program, config: Config | None = None) -> dict:
    """The graph description a network binary carries, checked against the program and the machine
    (compiler.graphcheck; CompileError naming the field and the value if anything disagrees)."""
    buf = program.buffers.get(GRAPH_BUFFER)
    if buf is None:
        raise CompileError(f"the binary has no {GRAPH_BUFFER} buffer: it was not built from a graph")
    start = buf.addr - program.data_base
    raw = bytes(program.data[start:start + buf.nbytes])
    try:
        meta = json.loads(raw.decode())
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise CompileError(f"the binary's {GRAPH_BUFFER} buffer is not valid JSON: {exc}") from None
    if not isinstance(meta, dict) or meta.get("format") != GRAPH_FORMAT:
        raise CompileError(f"the binary's {GRAPH_BUFFER} buffer is not a {GRAPH_FORMAT} description")
    check_graph(meta, program, config or Config())
    return meta


def load(path: str | Path, config: Config | None = None) -> Library:
    """Read a network binary written by Library.save, checked as a whole before any of it is used: the
    program for this machine (config; the defaults if None) and its DDR, the graph description against
    its schema, the program's buffers and notes (compiler.graphcheck)."""
    if not isinstance(path, (str, Path)):
        raise CompileError(f"load takes the path of a network binary (str or Path), got {type(path).__name__} "
                           f"{path!r:.60}")
    cfg = (config or Config()).validate()
    try:
        with open(path, "rb") as f:
            hosted = f.read(4) == ZIP_MAGIC
    except OSError as exc:
        raise CompileError(f"cannot load {path}: {exc.strerror or exc}") from None
    if hosted:
        return load_hosted(path, cfg)
    try:
        program = Program.load(path)
    except (OSError, BinaryError) as exc:
        raise CompileError(f"cannot load {path}: {exc}") from None
    return _npu_library(program, cfg, str(path))


def _npu_library(program: Program, cfg: Config, where: str) -> Library:
    """The Library of a program read back, checked against the machine and its graph description."""
    check_machine(program, cfg, where)
    try:
        meta = read_meta(program, cfg)
    except CompileError as exc:
        raise CompileError(f"{where}: {exc}") from None
    return Library(program, meta, cfg, predicted_cycles=meta.get("predicted_cycles", 0))


# ----------------------------------------------------------------------------- host parts

@dataclass
class HostedLibrary:
    """A compiled network with host parts: its stages in run order, NPU programs (Library) and host parts
    (compiler.host.HostPart), and the tensors the network takes and gives."""

    name: str
    stages: list[Library | HostPart]
    inputs: list[dict]
    outputs: list[dict]
    config: Config
    tensors: list[tuple[list[dict], list[dict]]] = field(default_factory=list)   # each stage's, described
    stats: object = None                # of the last run()

    @property
    def meta(self) -> dict:
        """The index the file carries (HOSTED_INDEX; compiler.graphcheck.HOSTED_SCHEMA)."""
        stages = []
        for k, st in enumerate(self.stages):
            if isinstance(st, HostPart):
                stages.append({"kind": "host", "file": f"{st.name}.onnx", "inputs": st.inputs,
                               "outputs": st.outputs, "name": st.name, "sha256": st.sha256, "nodes": st.nodes,
                               "macs": st.macs})
            else:
                stages.append({"kind": "npu", "file": f"stage{k}.nnp", "inputs": self.tensors[k][0],
                               "outputs": self.tensors[k][1]})
        return {"format": HOSTED_FORMAT, "name": self.name, "inputs": self.inputs, "outputs": self.outputs,
                "stages": stages}

    @property
    def host_parts(self) -> list[HostPart]:
        return [s for s in self.stages if isinstance(s, HostPart)]

    @property
    def npu_stages(self) -> list[Library]:
        return [s for s in self.stages if not isinstance(s, HostPart)]

    @property
    def layers(self) -> list[dict]:
        """Every layer in run order: each NPU stage's (ran_on "npu"), and a row per host part (ran_on "host")."""
        out = []
        for st in self.stages:
            if isinstance(st, HostPart):
                out.append({"name": st.name, "label": "", "ops": st.ops, "ran_on": "host", "in_shapes": [],
                            "out_shape": (st.outputs[0]["shape"] or []) if len(st.outputs) == 1 else [],
                            "macs": st.macs, "predicted_cycles": 0, "bound_cycles": 0,
                            "nodes": [n[0] for n in st.nodes], "onchip": {}})
            else:
                out += [{**layer, "ran_on": "npu"} for layer in st.layers]
        return out

    @property
    def predicted_cycles(self) -> int:
        return sum(s.predicted_cycles for s in self.npu_stages)

    @property
    def asm(self) -> str:
        return "\n".join(f"; ---- NPU stage {k}\n{s.asm}" for k, s in enumerate(self.npu_stages))

    @property
    def npu_macs(self) -> int:
        return sum(int(layer.get("macs", 0)) for s in self.npu_stages for layer in s.layers)

    @property
    def host_macs(self) -> int:
        return sum(p.macs for p in self.host_parts)

    @property
    def npu_mac_share(self) -> float:
        """The fraction of the network's MACs that run on the NPU (1.0 for a network without any)."""
        total = self.npu_macs + self.host_macs
        return self.npu_macs / total if total else 1.0

    def save(self, path: str | Path) -> None:
        """Write the network as one file (a zip archive of the index, the programs and the host models)."""
        meta = self.meta
        buf = io.BytesIO()
        with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
            z.writestr(HOSTED_INDEX, json.dumps(meta, indent=1, sort_keys=True))
            for st, entry in zip(self.stages, meta["stages"]):
                z.writestr(entry["file"], st.model if isinstance(st, HostPart) else st.program.to_bytes())
        Path(path).write_bytes(buf.getvalue())

    def run(self, *inputs: np.ndarray, check_races: bool = False) -> np.ndarray | list[np.ndarray]:
        """Run every stage in order (compiler.runtime.GraphModule); the output (a list of them if several)."""
        return run_network(self, inputs, check_races)

    def layer_table(self) -> str:
        """Each NPU stage's layer table, a line per host part between them, and where the MACs ran."""
        rows = []
        for k, st in enumerate(self.stages):
            if isinstance(st, HostPart):
                rows.append(f"{st.name} (host, onnxruntime): {nodes_text(len(st.nodes))}: {st.ops}; {st.macs:,} MACs")
            else:
                rows += [f"NPU stage {k}:", st.layer_table()]
        rows.append(self.placement_line())
        return "\n".join(rows)

    def placement_line(self) -> str:
        """Where the MACs ran: the NPU's share, and how many nodes ran on the host."""
        nodes = sum(len(p.nodes) for p in self.host_parts)
        return (f"NPU: {100 * self.npu_mac_share:.2f}% of {self.npu_macs + self.host_macs:,} MACs; host: {nodes} "
                f"nodes in {len(self.host_parts)} parts ({self.host_macs:,} MACs)")

    def fusion_report(self) -> str:
        """Each NPU stage's fusion report, and every host node with why it runs on the host."""
        rows = []
        for k, st in enumerate(self.stages):
            if isinstance(st, HostPart):
                rows.append(f"{st.name}: on the host (onnxruntime), {nodes_text(len(st.nodes))}:")
                rows += [f"  {name} ({op}): {why}" for name, op, why in st.nodes]
            else:
                rows += [f"NPU stage {k}:", st.fusion_report()]
        rows.append(self.placement_line())
        return "\n".join(rows)


def load_hosted(path: str | Path, cfg: Config) -> HostedLibrary:
    """Read a network file with host parts, every part checked before any is used (compiler.graphcheck)."""
    try:
        with zipfile.ZipFile(path) as z:
            files = {name: z.read(name) for name in z.namelist()}
        index = json.loads(files.pop(HOSTED_INDEX).decode())
    except KeyError:
        raise CompileError(f"{path}: bad compiled file: it has no {HOSTED_INDEX}") from None
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, UnicodeDecodeError, json.JSONDecodeError,
            RecursionError, ValueError, EOFError) as exc:
        raise CompileError(f"{path}: bad compiled file: {exc}") from None
    try:
        check_hosted(index, files)
        stages = []
        for k, st in enumerate(index["stages"]):
            if st["kind"] == "host":
                part = HostPart(st["name"], files[st["file"]], st["inputs"], st["outputs"], st["nodes"], st["macs"])
                check_host_part(part)
                stages.append(part)
            else:
                try:
                    program = Program.from_bytes(files[st["file"]])
                except BinaryError as exc:
                    raise CompileError(f"bad compiled file: NPU stage {k} ({st['file']}): {exc}") from None
                stages.append(_npu_library(program, cfg, f"NPU stage {k} ({st['file']})"))
                check_npu_stage(st, stages[-1].meta, k)
    except CompileError as exc:
        raise CompileError(f"{path}: {exc}") from None
    return HostedLibrary(index["name"], stages, index["inputs"], index["outputs"], cfg,
                         [(st["inputs"], st["outputs"]) for st in index["stages"]])
