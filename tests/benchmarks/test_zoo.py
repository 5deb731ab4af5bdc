"""benchmarks/zoo.py without its frameworks: the script imports and parses without torch, refuses bad
arguments in one line, writes both tables from a rows file alone (--recorded), and a table's command
leaves out the arguments that only say how the rows were obtained."""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import tables  # noqa: E402
import zoo  # noqa: E402
import zoo_results as zr  # noqa: E402

PAGE = ("# R\n\n<!-- table: zoo (benchmarks/zoo.py) -->\n<!-- end table -->\n\n"
        "<!-- table: zoo-performance (benchmarks/zoo.py) -->\n<!-- end table -->\n")


def _ok(name: str, variant: str, **kw) -> zr.Result:
    base = dict(imported="ok", library=zoo.ZOO[name].library, commit="abc1234", npu_share=1.0, agreement="bit-exact",
                ok=True, cycles=1100, bound_sum=1200, network_bound=1000, mac_bound=1000, compile_s=3.0, second_s=0.1,
                checked_ratio=1.5, ort_ratio=1.25)
    return zr.Result(name, variant, **{**base, **kw})


def test_the_script_and_its_listing_need_no_torch():
    code = ("import sys; sys.argv = ['zoo.py', '--list']; sys.path.insert(0, 'benchmarks'); import zoo; "
            "status = zoo.main(['--list']); "
            "assert not {'torch', 'torchvision', 'timm', 'ultralytics'} & set(sys.modules), 'a framework was imported'; "
            "sys.exit(status)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert len(out.stdout.splitlines()) == len(zoo.ZOO) == 20
    assert "ssdlite320" in out.stdout and "detector" in out.stdout


@pytest.mark.parametrize("argv, says", [(["--models", "resnet18,nope"], "'nope'"),
                                         (["--variants", "qdq-int8"], "'qdq-int8'"),
                                         (["--repeats", "0"], "--repeats must be at least 1, got 0"),
                                         (["--resume", "--recorded"], "not allowed with")])
def test_bad_arguments_are_refused_in_one_line(argv, says, capsys):
    with pytest.raises(SystemExit) as e:
        zoo.main(argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("zoo.py: error:") and says in err


def test_a_tables_command_leaves_out_how_the_rows_were_obtained():
    assert zoo.table_argv(["--rows", "r.json", "--resume", "--write-docs", "--models", "a"]) == \
        ["--write-docs", "--models", "a"]
    assert zoo.table_argv(["--recorded", "--rows=x.json", "--variants", "qdq-int8-pc"]) == ["--variants", "qdq-int8-pc"]


def test_recorded_rows_make_both_tables_and_name_what_is_missing(tmp_path, capsys):
    rows = tmp_path / "rows.json"
    results = [_ok("resnet18", "qoperator-int8-pc"), _ok("vgg11", "qoperator-int8-pc", streaming=True, cycles=1300),
               _ok("resnet18", "qdq-int8-pc", agreement="arg max same, 0 outside ORT's levels", commit="def5678")]
    rows.write_text(json.dumps([asdict(r) for r in results]))
    argv = ["--recorded", "--rows", str(rows), "--models", "resnet18,vgg11", "--variants", "qoperator-int8-pc,qdq-int8-pc"]
    assert zoo.main(argv) == 1                    # vgg11 qdq-int8-pc has no result
    out = capsys.readouterr().out
    assert "no result: vgg11 qdq-int8-pc" in out and "goal missed" not in out
    assert "| vgg11 | 1,300 | 1,200 (Σ kernels) | 1.08 |" in out
    page = tmp_path / "performance.md"
    page.write_text(PAGE)
    got, missing = zr.in_order(results, ["resnet18", "vgg11"], ["qoperator-int8-pc", "qdq-int8-pc"])
    zoo.write_docs(got, missing, ["qoperator-int8-pc", "qdq-int8-pc"], ["--write-docs", "--recorded"], doc=page)
    text = page.read_text()
    zoo_table, perf_table = (m["body"] for m in tables.markers(text))
    assert zoo_table.count("| resnet18 |") == 2 and zoo_table.count("| vgg11 |") == 1
    assert "No result (the run did not reach them) for qdq-int8-pc: vgg11\n" in zoo_table
    assert "at commit `abc1234, def5678`" in zoo_table
    assert "at commit `abc1234`" in perf_table       # its rows alone: the qdq row was measured elsewhere
    assert "| geometric mean, 2 of 2 networks |" in perf_table and "| resnet18 | 1,100 | 1,000 (network) | 1.10 |" in perf_table
    with pytest.raises(SystemExit, match="not written"):      # a partial run does not overwrite a full one
        zoo.write_docs(got, missing, ["qoperator-int8-pc"], ["--write-docs", "--models", "vgg11"], doc=page)


def test_a_rows_file_that_is_not_one_is_refused_in_one_line(tmp_path):
    rows = tmp_path / "rows.json"
    rows.write_text("[1, 2]")
    with pytest.raises(SystemExit) as e:
        zoo.main(["--recorded", "--rows", str(rows)])
    assert str(e.value).startswith("zoo.py: error:") and str(rows) in str(e.value) and "\n" not in str(e.value)


def test_a_crash_on_one_network_becomes_its_row(monkeypatch):
    def crash(*args):
        raise KeyError("/GatherND_178_output_0")
    monkeypatch.setattr(zoo, "evaluate", crash)
    r = zoo._evaluated("ssdlite320", "qoperator-int8-pc", Path("x.onnx"), 1, 1)
    assert r.imported == "crashed: KeyError: '/GatherND_178_output_0'" and not r.ran and not r.ok
    assert zr.row(r)[3] == zr.performance_row(r)[1] == "crashed: KeyError: '/GatherND_178_output_0'"


def _shuffle_then_conv(path: Path) -> None:
    """x [1, 4, 8, 8] -> a Reshape to the shape Shape(x) gives (as ShuffleNet's channel shuffle computes it)
    -> a 1x1 Conv to 8 channels: 8 * 64 * 4 MACs that onnx's shape inference alone cannot see."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((8, 4, 1, 1), np.float32), "w")
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Reshape", ["x", "s"], ["r"]),
             helper.make_node("Conv", ["r", "w"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))


def test_macs_are_counted_on_the_preprocessed_model_where_every_shape_is_known(tmp_path, monkeypatch):
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src, pre = tmp_path / "f.onnx", tmp_path / "pre.onnx"
    _shuffle_then_conv(src)
    monkeypatch.chdir(tmp_path)
    assert zoo.onnx_macs(src) == 0                      # the Reshape's output shape is unknown to onnx alone
    zoo._in_scratch(quant_pre_process, str(src), str(pre), skip_symbolic_shape=False)
    assert zoo.onnx_macs(pre) == 8 * 64 * 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.onnx", "pre.onnx"]     # nothing left beside them


def test_a_kernels_macs_and_weights_are_its_live_taps_as_the_compiler_counts_them():
    """A dilated conv whose outer taps read only padding (DeepLabV3's ASPP on a small plane) next to one whose taps
    all read pixels: the roofline takes the first's MACs and weights from compiler.roofline (its centre tap alone),
    the second's whole, so its bound is one the network can reach."""
    from compiler import build, ops
    from compiler.graph import Graph, QuantParams
    from compiler.quant import quantize_multipliers
    from compiler.roofline import constant_bytes, macs

    rng = np.random.default_rng(3)
    g = Graph("aspp")
    x = g.input("x", (1, 12, 5, 7), quant=QuantParams(np.float32(0.05), np.int64(2)))
    convs = []
    for name, dil in (("dead", 7), ("live", 1)):
        m, s = quantize_multipliers(rng.uniform(0.5, 2.0, 20) / 900)
        op = ops.conv2d((1, 12, 5, 7), rng.integers(-20, 21, (20, 12, 3, 3)).astype(np.int8),
                        rng.integers(-800, 800, 20).astype(np.int32), padding=dil, dilation=dil, x_zp=1,
                        multiplier=m, shift=s, zp_out=-3)
        convs.append(op)
        g.output(g.add(op, x, name=name))
    lib = build(g.validate())
    ks, io = zoo.kernels(g, lib)
    dead, live = convs
    assert macs(dead) == dead.macs // 9 and macs(live) == live.macs          # the centre tap of 3 x 3
    assert sorted(k.macs for k in ks) == sorted([macs(dead), macs(live)])
    assert sorted(k.constant_bytes for k in ks) == sorted([constant_bytes(dead), constant_bytes(live)])
    assert constant_bytes(dead) == 20 * 12 + 4 * 20
    bound = zr.roofline(ks, io, lib.config.peak_macs_per_cycle, lib.config.ddr_bytes_per_cycle)
    cfg = lib.config
    assert bound.network == max(-(-(macs(dead) + macs(live)) // cfg.peak_macs_per_cycle),
                                -(-(io + constant_bytes(dead) + constant_bytes(live)) // cfg.ddr_bytes_per_cycle))
