"""A compiled network file is checked as a whole when compiler.load reads it (compiler/graphcheck.py): the
graph description against its schema, its buffers, labels, arena, on-chip figures and dims against the
program and the machine.  Each corruption gets one CompileError line naming the field and the value."""
from __future__ import annotations

import copy
import hashlib
import json
import re
import zipfile

import numpy as np
import onnx
import pytest

import compiler
from compiler import CompileError
from compiler.graphcheck import GRAPH_SCHEMA, check_schema
from isa_spec.program import Program
from nnpsim.config import Config

from tests.helpers.compiled import graph_of, seeds, with_graph
from tests.helpers.hosted import compiled

pytestmark = pytest.mark.usefixtures("warm_engine")


def write(tmp_path, prog: Program, name: str = "bad.nnp") -> str:
    path = tmp_path / name
    prog.save(path)
    return str(path)


def refused(path, config=None) -> str:
    with pytest.raises(CompileError) as exc:
        compiler.load(path, config)
    line = str(exc.value)
    assert line.strip() and "\n" not in line, line
    return line


def edited(name: str, edit) -> Program:
    """The seed with its graph description edited in place by `edit(doc)`."""
    prog = Program.from_bytes(seeds()[name])
    doc = graph_of(prog)
    edit(doc)
    return with_graph(prog, json.dumps(doc, sort_keys=True))


def test_seeds_load_and_run(tmp_path):
    for name, blob in seeds().items():
        path = tmp_path / f"{name}.nnp"
        path.write_bytes(blob)
        lib = compiler.load(path)
        m = compiler.GraphModule(lib)
        for k, t in enumerate(lib.meta["inputs"]):
            dims = {n: lo for n, lo, _ in lib.meta.get("dims", [])}
            m.set_input(k, np.zeros([dims.get(a, a) for a in t["shape"]], np.int8))
        m.run()


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["layers"][0].pop("bound_cycles"), "layers[0].bound_cycles"),     # was KeyError: 'bound_cycles'
    (lambda d: d["layers"][0].update(macs="many"), "layers[0].macs"),
    (lambda d: d["inputs"][0].update(buffer="nowhere"), "inputs[0].buffer"),
    (lambda d: d["inputs"][0].update(buffer="layer0_conv_L0_w"), "inputs[0].shape"),
    (lambda d: d["outputs"][0].update(shape=[1, 8, 3, 4]), "outputs[0].shape"),
    (lambda d: d["inputs"][0].update(dtype="float32"), "inputs[0].dtype"),
    (lambda d: d["inputs"][0].update(scale=[0.1, 0.2]), "inputs[0].zero_point"),
    (lambda d: d["inputs"][0].update(axis=9), "inputs[0].axis"),
    (lambda d: d["inputs"][0].pop("axis"), "inputs[0]"),
    (lambda d: d["layers"][0].update(label="main_x"), "layers[0].label"),
    (lambda d: d["arena"].update(bytes=2 ** 64), "arena.bytes"),
    (lambda d: d["arena"].update(bytes=64), "arena.bytes"),
    (lambda d: d["onchip_peak"].update(ibuf0=1 << 30), "onchip_peak.ibuf0"),
    (lambda d: d["onchip_peak"].update(ibuf3=1), "onchip_peak.ibuf3"),
    (lambda d: d["onchip_peak"].update({"ibuf" + "9" * 5000: 1}), "onchip_peak.ibuf999"),   # int() would raise
    (lambda d: d.update(extra=1), "extra"),
    (lambda d: d.update(dims=[["h", 1, 2]]), "dims"),
    (lambda d: d["fusion"][0].update(fused=1), "fusion[0].fused"),
    (lambda d: d["layout"].update(lines="x"), "layout.lines"),
])
def test_a_bad_static_description_is_named(tmp_path, edit, field):
    line = refused(write(tmp_path, edited("static", edit)))
    assert f"field {field}" in line and " = " in line, line


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["dims"][0].__setitem__(2, 90), "dims"),                 # a Dim's upper bound raised
    (lambda d: d["inputs"][0].update(shape=[1, 8, "h", 6]), "inputs[0].shape"),
    (lambda d: d["inputs"][0].update(shape=[1, 8, "q", 5]), "inputs[0].shape"),
    (lambda d: d.pop("derived"), "dims"),
    (lambda d: d["arena"].update(naive_bytes=1), "arena"),
])
def test_a_bad_dynamic_description_is_named(tmp_path, edit, field):
    line = refused(write(tmp_path, edited("dynamic", edit)))
    assert f"field {field}" in line and " = " in line, line


def test_a_bad_derived_rule_is_named(tmp_path):
    line = refused(write(tmp_path, edited("derived", lambda d: d["derived"]["h_1"].__setitem__(2, 4))))
    assert "field derived = " in line and "h:-1:1" in line, line


def test_schema_names_the_path_and_value():
    doc = graph_of(Program.from_bytes(seeds()["static"]))
    check_schema(doc, GRAPH_SCHEMA)
    bad = copy.deepcopy(doc)
    bad["layers"][0]["in_shapes"][0][2] = -1
    with pytest.raises(CompileError, match=r"field layers\[0\]\.in_shapes\[0\]\[2\] = -1: expected an integer"):
        check_schema(bad, GRAPH_SCHEMA)
    bad["layers"][0]["in_shapes"][0][2] = True                # a bool is not an integer
    with pytest.raises(CompileError, match="= True"):
        check_schema(bad, GRAPH_SCHEMA)


def test_a_pipelining_variant_that_failed_to_lower_is_null():
    """interleave.choose records a variant whose lowering failed as None: a saved MobileNetV2 has one, and
    compiler.load refused the file that Library.save had just written."""
    doc = graph_of(Program.from_bytes(seeds()["static"]))
    doc["layers"][0]["pipelining"] = {"chosen": "one after another", "cycles": 12, "why": "cheapest",
                                      "priced": {"one after another": 12, "interleaved lag 1": None}}
    check_schema(doc, GRAPH_SCHEMA)
    doc["layers"][0]["pipelining"]["priced"]["interleaved lag 1"] = "none"
    with pytest.raises(CompileError, match=r"priced\.interleaved lag 1 = 'none'"):
        check_schema(doc, GRAPH_SCHEMA)


def test_not_json_and_truncated_files_are_one_line(tmp_path):
    prog = Program.from_bytes(seeds()["static"])
    refused(write(tmp_path, with_graph(prog, "{" * 100000)))              # deep nesting: no RecursionError
    refused(write(tmp_path, with_graph(prog, json.dumps(graph_of(prog))[:-9])))
    blob = seeds()["static"]
    (tmp_path / "cut.nnp").write_bytes(blob[:len(blob) // 2])
    refused(str(tmp_path / "cut.nnp"))


def test_another_machine_or_a_small_ddr_is_refused_at_load(tmp_path):
    path = tmp_path / "s.nnp"
    path.write_bytes(seeds()["static"])
    assert "built for another machine: nu.count = 1" in refused(path, Config(nu_count=2))
    assert "does not fit the configured DDR of 0x800 bytes" in refused(path, Config(ddr_bytes=2048))


def test_a_non_path_or_non_library_is_one_clear_error():
    with pytest.raises(CompileError, match="load takes the path of a network binary .*got NoneType"):
        compiler.load(None)
    with pytest.raises(CompileError, match="GraphModule takes a compiled network .*got str 'path'"):
        compiler.GraphModule("path")


# ----------------------------------------------------------------------------- a network with host parts

def _hosted_files(tmp_path) -> tuple[dict, dict[str, bytes]]:
    """The index and the files of a saved network with host parts (conv -> LayerNorm -> conv)."""
    path = tmp_path / "ok.nnp"
    compiled("layernorm")[2].save(path)
    with zipfile.ZipFile(path) as z:
        files = {n: z.read(n) for n in z.namelist()}
    return json.loads(files.pop("nnp_hosted.json")), files


def _write_hosted(tmp_path, index: dict, files: dict[str, bytes], name: str = "bad.nnp") -> str:
    path = tmp_path / name
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("nnp_hosted.json", json.dumps(index))
        for n, data in files.items():
            z.writestr(n, data)
    return str(path)


def _host_model_with_renamed_input(data: bytes) -> bytes:
    m = onnx.ModelProto()
    m.ParseFromString(data)
    old = m.graph.input[0].name
    m.graph.input[0].name = old + "_x"
    for n in m.graph.node:
        n.input[:] = [old + "_x" if i == old else i for i in n.input]
    return m.SerializeToString()


def test_a_saved_network_with_host_parts_loads_back(tmp_path):
    index, files = _hosted_files(tmp_path)
    lib = compiler.load(_write_hosted(tmp_path, index, files, "same.nnp"))
    assert [type(s).__name__ for s in lib.stages] == ["Library", "HostPart", "Library"]
    assert lib.meta == index


@pytest.mark.parametrize("corrupt, message", [
    (lambda ix, f: f.update({"host0.onnx": f["host0.onnx"][:-7] + b"garbage"}),
     r"host part host0 \(host0.onnx\) is not the model its SHA-256 [0-9a-f]{16}\.\.\. names"),
    (lambda ix, f: f.pop("host0.onnx"), r"nnp_hosted.json field stages\[1\].file = 'host0.onnx': expected a file"),
    (lambda ix, f: ix["stages"][1].update(kind="gpu"), r"field stages\[1\].kind = 'gpu': expected one of"),
    (lambda ix, f: ix["stages"][1].pop("sha256"), r"field stages\[1\].sha256 = None: expected name, sha256"),
    (lambda ix, f: ix["stages"][2]["inputs"][0].update(dtype="float32"),
     r"field stages\[2\].inputs\[0\] = '.*': expected a tensor of that dtype given by the inputs or a stage"),
    (lambda ix, f: ix["outputs"][0].update(name="nowhere"), r"field outputs\[0\] = 'nowhere': expected a tensor"),
    (lambda ix, f: ix["stages"].reverse(), r"field stages\[0\].inputs\[0\]"),
    (lambda ix, f: ix["outputs"].append(ix["outputs"][0]),        # found by test_hosted_file_mutations
     r"field outputs\[1\] = '.*': expected a name not listed before in outputs"),
    (lambda ix, f: ix["inputs"].append(ix["inputs"][0]), r"field inputs\[1\] = '.*': expected a name not listed"),
    (lambda ix, f: (f.update({"host0.onnx": _host_model_with_renamed_input(f["host0.onnx"])}),
                    ix["stages"][1].update(sha256=hashlib.sha256(f["host0.onnx"]).hexdigest())),
     r"host part host0's model has the inputs \[\('.*_x', 'int8'\)\], the index says"),
    (lambda ix, f: f.update({"stage2.nnp": f["stage2.nnp"][:100]}), r"NPU stage 2 \(stage2.nnp\): "),
    (lambda ix, f: f.update({"stage0.nnp": f["stage2.nnp"]}), r"field stages\[0\].inputs = "),
])
def test_a_corrupted_part_is_refused_in_one_line(tmp_path, corrupt, message):
    index, files = _hosted_files(tmp_path)
    corrupt(index, files)
    line = refused(_write_hosted(tmp_path, index, files))
    assert re.search(message, line), line


def test_a_torn_archive_is_one_line(tmp_path):
    index, files = _hosted_files(tmp_path)
    data = (tmp_path / "ok.nnp").read_bytes()
    (tmp_path / "torn.nnp").write_bytes(data[:len(data) // 2])
    assert "bad compiled file" in refused(str(tmp_path / "torn.nnp"))
