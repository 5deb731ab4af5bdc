"""A compiled network file is checked as a whole when compiler.load reads it (compiler/graphcheck.py): the
graph description against its schema, its buffers, labels, arena, on-chip figures and dims against the
program and the machine.  Each corruption gets one CompileError line naming the field and the value."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest

import compiler
from compiler import CompileError
from compiler.graphcheck import GRAPH_SCHEMA, check_schema
from isa_spec.program import Program
from nnpsim.config import Config

from tests.helpers.compiled import graph_of, seeds, with_graph

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
