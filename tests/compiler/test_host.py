"""Host fallback end to end: models with nodes the NPU does not run compile, save, load and run, the host parts
through onnxruntime, and equal onnxruntime's whole model element for element; the report says where each node
ran and the NPU's share of the MACs; host_fallback=False refuses with the importer's listing."""
from __future__ import annotations

import sys

import numpy as np
import pytest

import compiler
from compiler import CompileError, Graph, GraphModule, build, from_onnx, models
from compiler.host import HostedGraph, HostPart
from compiler.library import HostedLibrary
from compiler.report import layer_rows
from compiler.runtime import HostedModule
from tests.helpers.hosted import LEVELS, compiled, inputs, model, ort_outputs

HOST_OPS = {"layernorm": {"LayerNormalization"}, "attention": {"QLinearMatMul"},
            "detector": {"TopK", "Greater", "NonZero"}}


def _run(lib, x: np.ndarray) -> list[np.ndarray]:
    m = GraphModule(lib)
    m.set_input(0, x)
    m.run(check_races=True)
    return [m.get_output(k) for k in range(m.num_outputs)]


@pytest.mark.parametrize("name", sorted(HOST_OPS))
def test_runs_end_to_end_bit_exact_against_onnxruntime(name, tmp_path):
    onnx_model, hosted, lib = compiled(name)
    assert isinstance(hosted, HostedGraph) and isinstance(lib, HostedLibrary)
    assert {n[1] for p in hosted.host_parts for n in p.nodes} >= HOST_OPS[name]
    assert any(isinstance(s, Graph) for s in hosted.stages), "the convs run on the NPU"
    lib.save(tmp_path / "m.nnp")
    loaded = compiler.load(tmp_path / "m.nnp")
    assert isinstance(GraphModule(loaded), HostedModule)
    for seed in range(2):
        x = inputs(seed)
        ours, again = _run(lib, x), _run(loaded, x)
        for level in LEVELS:
            theirs = ort_outputs(onnx_model, x, level)
            assert len(ours) == len(theirs)
            for a, b, c in zip(ours, again, theirs):
                assert a.dtype == c.dtype and a.shape == c.shape and (a == c).all(), (name, seed, level)
                assert (b == a).all()


def test_qdq_host_parts_fuse_as_a_default_session_does():
    """In QDQ the host part's DQ -> MatMul -> Q groups fuse at ORT_ENABLE_ALL (the sessions' level), as they do
    in onnxruntime's default session of the whole model; at ORT_DISABLE_ALL onnxruntime computes them in float."""
    onnx_model, hosted, lib = compiled("attention", "qdq")
    on_host = {n[1] for p in hosted.host_parts for n in p.nodes}
    assert "MatMul" in on_host and "Softmax" not in on_host, on_host       # the NPU runs the softmax
    for seed in range(2):
        x = inputs(seed)
        (ours,) = _run(lib, x)
        (theirs,) = ort_outputs(onnx_model, x, LEVELS[0])
        assert (ours == theirs).all()


def test_the_report_says_where_each_node_ran_and_the_npu_share_of_the_macs():
    _, hosted, lib = compiled("attention")
    parts = lib.host_parts           # the two matmuls of activations; the softmax between them runs on the NPU
    assert [[n[0] for n in p.nodes] for p in parts] == [["scores_quant"], ["mix_quant"]]
    assert [p.macs for p in parts] == [16 * 16 * 8, 16 * 8 * 16]   # q k^T and p v: [16, 8] x [8, 16], [16, 16] x [16, 8]
    host = sum(p.macs for p in parts)
    npu = 1 * 8 * 4 * 4 * (4 * 9) + 3 * 16 * 8 * 8 + 1 * 8 * 4 * 4 * (8 * 9)   # conv, three denses, conv
    assert lib.npu_macs == npu and lib.host_macs == host
    assert lib.npu_mac_share == pytest.approx(npu / (npu + host))
    report = lib.fusion_report()
    for node in ("scores_quant", "mix_quant"):
        assert f"  {node} (" in report
    assert "  softmax_quant (" not in report
    assert "QLinearMatMul of two activations" in report and f"{100 * npu / (npu + host):.2f}% of" in report
    rows = layer_rows(lib)
    host_rows = [r for r in rows if r["ran_on"] == "host"]
    assert [(r["layer"], r["macs"], r["cycles"]) for r in host_rows] == [("host0", parts[0].macs, None),
                                                                          ("host1", parts[1].macs, None)]
    m = GraphModule(lib)
    m.set_input(0, inputs(0))
    stats = m.run()
    assert stats.host_nodes == {"host0": ["scores_quant"], "host1": ["mix_quant"]}
    assert stats.npu_mac_share == lib.npu_mac_share and stats.cycles == sum(s.cycles for s in stats.stages)
    measured = layer_rows(lib, m.layer_stats())
    assert [r["layer"] for r in measured] == [r["layer"] for r in rows] and all(r["measured"] for r in measured)


@pytest.mark.parametrize("name", sorted(HOST_OPS))
def test_host_fallback_false_refuses_with_the_listing_by_op_type(name):
    onnx_model, hosted, _ = compiled(name)
    with pytest.raises(CompileError) as direct:
        from_onnx(onnx_model, host_fallback=False)
    with pytest.raises(CompileError) as built:
        build(hosted, host_fallback=False)
    assert str(direct.value) == str(built.value)
    first = str(direct.value).splitlines()[0]
    assert first.startswith("cannot import the ONNX model: ") and "cannot run (" in first
    assert any(op in first for op in HOST_OPS[name]), first


def test_an_op_the_npu_runs_never_falls_back():
    """The convs, the denses and the transposes stay on the NPU: only the registry's host ops (and the Q / DQ
    at their edges) are in host parts."""
    _, hosted, _ = compiled("attention", "qdq")
    ran = {n[1] for p in hosted.host_parts for n in p.nodes}
    assert ran <= {"MatMul", "Softmax", "QuantizeLinear", "DequantizeLinear"}
    weights = [n for p in hosted.host_parts for n in p.nodes if n[1] == "MatMul"]
    assert [n[0] for n in weights] == ["scores", "mix"]


def test_a_model_without_host_parts_is_a_graph_and_needs_no_onnxruntime(monkeypatch):
    net = models.Net("plain", (1, 3, 8, 8), 0)
    net.output(net.conv(net.input, 4, 3, 1))
    plain = models.quantize(net.model(), "qoperator", samples=1)
    monkeypatch.setitem(sys.modules, "onnxruntime", None)        # `import onnxruntime` raises ImportError
    g = from_onnx(plain)
    assert type(g) is Graph
    lib = build(g)
    assert type(lib) is compiler.Library and type(GraphModule(lib)) is GraphModule


def test_without_onnxruntime_a_model_with_host_parts_says_which_extra(monkeypatch):
    _, hosted, lib = compiled("layernorm")
    monkeypatch.setitem(sys.modules, "onnxruntime", None)        # `import onnxruntime` raises ImportError
    for call in (lambda: build(hosted), lambda: GraphModule(lib)):
        with pytest.raises(CompileError) as e:
            call()
        assert str(e.value) == ("this model has host parts, which run on onnxruntime: "
                                "pip install 'nnp-toolchain[onnx]'")


def test_a_host_part_onnxruntime_refuses_is_one_line():
    part = HostPart("host9", b"not a model", [], [{"name": "y", "dtype": "float32", "shape": [1]}], [["n", "X", ""]])
    with pytest.raises(CompileError, match=r"^host part host9: onnxruntime cannot load it: ") as e:
        part.session()
    assert "\n" not in str(e.value)
