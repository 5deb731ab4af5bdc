"""The model zoo: vision networks from their libraries' own definitions, exported and quantised as a user would.

    python benchmarks/zoo.py [--models NAME,...] [--variants qoperator-int8-pc,qdq-uint8-pt,...]
                             [--cache DIR] [--repeats R] [--rows FILE [--resume | --recorded]]
                             [--no-run] [--list] [--write-docs]

Needs the `zoo` extra (`pip install -e '.[zoo]'`: torch, torchvision, timm, ultralytics); `make zoo` runs it.
Each network is built by its library with random weights (torchvision and timm classifiers, torchvision's
SSDLite detector and segmenters, an ultralytics YOLO detector built from its configuration file), exported
with `torch.onnx.export`, pre-processed by onnxruntime's `quant_pre_process` and quantised by its
`quantize_static` on seeded N(0, 1) calibration inputs, in each variant asked for: QOperator or QDQ, int8
or uint8 activations, per-channel (`pc`) or per-tensor (`pt`) weights.  Every file is cached under
--cache (default $NNP_ZOO_CACHE, else ~/.cache/nnp/zoo), written whole (a temporary file renamed).

The detectors are exported as they are deployed on an accelerator: the network and its decoding of boxes
and class scores per anchor, without the score threshold, top-k and non-maximum suppression the host runs
on them (ultralytics' export of YOLO; for torchvision's SSDLite also without its resize-and-normalise
transform, which prepares the input on the host).  torchvision's whole SSD module, exported as it stands,
sizes every tensor after its transform and its post-processing by the data (NonZero, TopK, an If), which
onnxruntime's quant_pre_process cannot infer ("Incomplete symbolic shape inference").

Then each variant is imported (compiler.from_onnx), compiled (compiler.build, with an empty compile cache
on one process, its CPU time measured, then again from the cache it filled), run on the simulator on a
seeded input, and compared with onnxruntime at its default optimisation level and at ORT_DISABLE_ALL:
  * QOperator: every output bit-exact with onnxruntime;
  * QDQ: the same top-1 (detectors and segmenters: the same arg max per position, over the class scores
    alone: a YOLO head's box rows and an SSD's boxes output are judged by the range only), and no element outside the range of onnxruntime's two levels; the text also gives the largest distance of
    ours from the default run next to the largest distance of the two levels from each other.
A refused network reports the first line of its refusal.  Two tables (docs/performance.md):
  * `zoo`, per network and variant: import, the share of the MACs on the NPU, agreement, cycles against
    the sum of the kernels' bounds and against the MAC bound, and the first compile's CPU seconds;
  * `zoo-performance`, per network in qoperator-int8-pc, every figure as a ratio measured in the run:
    cycles / the roofline (the network's max(live MACs / 1024, least DDR bytes / 32), a conv's taps that read
    only padding counted as compiler.roofline does, not at all; for a weight-streaming
    network the sum of its kernels' bounds, zoo_results.weight_streaming), the first and second compile's
    CPU seconds, race-checked / unchecked simulation and unchecked simulation / onnxruntime on one thread
    (best CPU seconds of --repeats interleaved runs, benchmarks/measuring.py), with a geometric-mean row.

A run records every result as it comes in --rows FILE (default: zoo-rows.json in the cache), written whole
each time.  --resume keeps the results already there and measures only the others; --recorded measures
nothing and writes the tables from the file alone, naming the pairs it has no result for.  Neither changes
what a row measures, so a `--write-docs` run may add them to the table's command; the tables name the
commits their rows were measured on.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import zoo_results as zr  # noqa: E402  benchmarks/zoo_results.py (benchmarks/ is on sys.path)
from measuring import compile_twice, run_side_by_side  # noqa: E402  benchmarks/measuring.py
from tables import commit, markdown, write_table  # noqa: E402  benchmarks/tables.py

from compiler.models import quiet  # noqa: E402

ZOO_EXTRA = "pip install -e '.[zoo]' (torch, torchvision, timm, ultralytics)"
@dataclass(frozen=True)
class Entry:
    """One network of the zoo: the library that defines it, what it is, its input size and its constructor."""

    library: str
    kind: str                       # classifier, detector or segmenter
    size: int
    make: Callable[[], object]      # the torch module, random weights, in eval mode
    outputs: tuple[str, ...] = ()   # the exported model's output names (default: torch's)
    classes: zr.Classes = zr.Classes()   # detectors and segmenters: the class scores their arg max runs over


def _tv(name: str, **kw) -> Callable[[], object]:
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def _tv_detector(name: str) -> Callable[[], object]:
    def make():
        import torch
        import torchvision
        from torchvision.models.detection.image_list import ImageList

        class Decoded(torch.nn.Module):
            """An SSD's boxes (decoded against its anchors) and class scores (softmax) per anchor, as deployed:
            the input already resized and normalised, thresholds, top-k and NMS left to the host."""

            def __init__(self, size: int = 320):
                super().__init__()
                self.net = getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None).eval()
                x = torch.zeros(1, 3, size, size)
                with torch.no_grad():     # the anchors of a size x size image: constants of the exported model
                    features = list(self.net.backbone(x).values())
                    anchors = self.net.anchor_generator(ImageList(x, [(size, size)]), features)[0]
                self.register_buffer("anchors", anchors)

            def forward(self, x):
                out = self.net.head(list(self.net.backbone(x).values()))
                boxes = self.net.box_coder.decode_single(out["bbox_regression"][0], self.anchors)
                return boxes[None], torch.softmax(out["cls_logits"], -1)
        return Decoded()
    return make


def _tv_segmentation(name: str) -> Callable[[], object]:
    def make():
        import torch
        import torchvision

        class Out(torch.nn.Module):
            """The segmenter's `out` map alone (torchvision returns a dict)."""

            def __init__(self):
                super().__init__()
                self.net = getattr(torchvision.models.segmentation, name)(weights=None, weights_backbone=None)

            def forward(self, x):
                return self.net(x)["out"]
        return Out()
    return make


def _timm(name: str) -> Callable[[], object]:
    def make():
        import timm
        return timm.create_model(name, pretrained=False)
    return make


def _yolo(cfg: str) -> Callable[[], object]:
    def make():
        import torch
        from ultralytics.nn.tasks import DetectionModel

        class Head(torch.nn.Module):
            """The detector's decoded predictions (boxes and class scores per anchor), as ultralytics exports."""

            def __init__(self):
                super().__init__()
                self.net = DetectionModel(cfg, verbose=False)
                self.net.model[-1].export = True

            def forward(self, x):
                out = self.net(x)
                return out[0] if isinstance(out, (tuple, list)) else out
        return Head()
    return make


ZOO: dict[str, Entry] = {
    "mobilenet_v3_small": Entry("torchvision", "classifier", 224, _tv("mobilenet_v3_small")),
    "mobilenet_v3_large": Entry("torchvision", "classifier", 224, _tv("mobilenet_v3_large")),
    "efficientnet_b0": Entry("torchvision", "classifier", 224, _tv("efficientnet_b0")),
    "regnet_y_400mf": Entry("torchvision", "classifier", 224, _tv("regnet_y_400mf")),
    "mnasnet1_0": Entry("torchvision", "classifier", 224, _tv("mnasnet1_0")),
    "shufflenet_v2_x1_0": Entry("torchvision", "classifier", 224, _tv("shufflenet_v2_x1_0")),
    "densenet121": Entry("torchvision", "classifier", 224, _tv("densenet121")),
    "resnet18": Entry("torchvision", "classifier", 224, _tv("resnet18")),
    "resnet50": Entry("torchvision", "classifier", 224, _tv("resnet50")),
    "mobilenet_v2": Entry("torchvision", "classifier", 224, _tv("mobilenet_v2")),
    "squeezenet1_1": Entry("torchvision", "classifier", 224, _tv("squeezenet1_1")),
    "googlenet": Entry("torchvision", "classifier", 224, _tv("googlenet", aux_logits=False, init_weights=True)),
    "vgg11": Entry("torchvision", "classifier", 224, _tv("vgg11")),
    "alexnet": Entry("torchvision", "classifier", 224, _tv("alexnet")),
    "convnext_tiny": Entry("torchvision", "classifier", 224, _tv("convnext_tiny")),
    "vit_tiny": Entry("timm", "classifier", 224, _timm("vit_tiny_patch16_224")),
    "yolov8n": Entry("ultralytics", "detector", 320, _yolo("yolov8n.yaml"), classes=zr.Classes(axis=1, first=4)),
    "ssdlite320": Entry("torchvision", "detector", 320, _tv_detector("ssdlite320_mobilenet_v3_large"),
                        ("boxes", "scores"), zr.Classes(axis=-1, outputs=(1,))),
    "lraspp_mobilenet_v3": Entry("torchvision", "segmenter", 256, _tv_segmentation("lraspp_mobilenet_v3_large")),
    "deeplabv3_mobilenet_v3": Entry("torchvision", "segmenter", 256,
                                    _tv_segmentation("deeplabv3_mobilenet_v3_large")),
}


def cache_dir(given: str | None) -> Path:
    """Where exported and quantised models are kept: --cache, $NNP_ZOO_CACHE or ~/.cache/nnp/zoo."""
    d = Path(given or os.environ.get("NNP_ZOO_CACHE") or Path.home() / ".cache" / "nnp" / "zoo").resolve()
    d.mkdir(parents=True, exist_ok=True)
    return d


def _atomic(path: Path, write: Callable[[str], None]) -> Path:
    """Call write(temporary path) and rename the file over path, so the cache never holds a torn file."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix, dir=path.parent)
    os.close(fd)
    try:
        with warnings.catch_warnings(), quiet():
            warnings.simplefilter("ignore")
            write(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


def _in_scratch(fn: Callable, *args, **kwargs) -> object:
    """fn(*args, **kwargs) in an empty temporary working directory: onnxruntime's symbolic shape inference
    saves the model it failed on as ./sym_shape_infer_temp.onnx with its weights beside it, and a failed
    pre-process must leave nothing behind where the script was started."""
    with tempfile.TemporaryDirectory(prefix="zoo-pre.") as scratch, contextlib.chdir(scratch):
        return fn(*args, **kwargs)


def exported(name: str, cache: Path) -> Path:
    """The float ONNX model of a zoo network, exported once with torch.onnx.export."""
    path = cache / f"{name}-{ZOO[name].size}-float.onnx"
    if path.exists():
        return path
    import torch

    torch.manual_seed(0)
    model = ZOO[name].make().eval()
    x = torch.randn(1, 3, ZOO[name].size, ZOO[name].size)

    def write(tmp: str) -> None:
        with torch.no_grad():
            torch.onnx.export(model, (x,), tmp, opset_version=17, input_names=["input"],
                              output_names=list(ZOO[name].outputs) or None, dynamo=False)
    return _atomic(path, write)


def preprocessed(name: str, cache: Path) -> Path:
    """The float model after onnxruntime's quant_pre_process (optimised, every shape inferred), made once."""
    pre = cache / f"{name}-{ZOO[name].size}-pre.onnx"
    if pre.exists():
        return pre
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src = exported(name, cache)
    return _atomic(pre, lambda tmp: _in_scratch(quant_pre_process, str(src), tmp, skip_symbolic_shape=False))


def quantised(name: str, variant: str, cache: Path) -> Path:
    """The quantised model of a variant, `fmt-act-weights`: quant_pre_process, then quantize_static."""
    fmt, act, weights = zr.split_variant(variant)
    path = cache / f"{name}-{ZOO[name].size}-{variant}.onnx"
    if path.exists():
        return path
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static

    import onnx

    from compiler.models import RandomReader

    pre = preprocessed(name, cache)
    reader = RandomReader(onnx.load(str(pre)), samples=4, seed=0)

    def write(tmp: str) -> None:
        quantize_static(str(pre), tmp, reader,
                        quant_format=QuantFormat.QOperator if fmt == "qoperator" else QuantFormat.QDQ,
                        per_channel=weights == "pc", weight_type=QuantType.QInt8,
                        activation_type=QuantType.QInt8 if act == "int8" else QuantType.QUInt8)
    return _atomic(path, write)


def onnx_macs(path: Path) -> int:
    """Multiply-accumulates of a float model's Conv, ConvTranspose, Gemm and MatMul nodes, from the shapes its
    value_info and onnx's shape inference give: the whole network's work, wherever it runs.  Take the
    pre-processed model (preprocessed()): onnx alone leaves the shapes after a computed Reshape unknown
    (ShuffleNet's channel shuffle), and the convolutions after it uncounted."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.value_info) + list(g.input) + list(g.output)}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    total = 0
    for n in g.node:
        if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul") and len(n.input) > 1:
            trans_b = next((a.i for a in n.attribute if a.name == "transB"), 0)
            shape = [shapes.get(n.input[0]), shapes.get(n.input[1]), shapes.get(n.output[0])]
            if all(shape) and all(0 not in x for x in shape):
                total += zr.node_macs(n.op_type, *shape, trans_b=bool(trans_b))
    return total


def ort_outputs(path: Path, x: np.ndarray, level: str) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 1, 1, 3
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def npu_graphs(graph) -> list:
    """The NPU's graphs of what from_onnx returned: the Graph itself, or a HostedGraph's NPU stages."""
    from compiler import Graph

    return [graph] if isinstance(graph, Graph) else [s for s in graph.stages if isinstance(s, Graph)]


def kernels(graph, lib) -> tuple[list[zr.Kernel], int]:
    """(every NPU kernel's MACs, constant bytes and bound, the bytes of the NPU stages' inputs and outputs).  The
    MACs and bytes are what the NPU needs, as compiler.roofline counts them: a conv's taps that read only padding
    (DeepLabV3's dilated ASPP convs) need neither MACs nor weights, and the float mode's MACs count at its rate
    (rate_macs) and its weights as float32."""
    from compiler.network.storage import nbytes
    from compiler.roofline import constant_bytes, rate_macs

    graphs = npu_graphs(graph)
    ops = {n.name: n.op for g in graphs for n in g.nodes}
    out = [zr.Kernel(sum(rate_macs(ops[n]) for n in layer["nodes"] if n in ops),
                     sum(constant_bytes(ops[n]) for n in layer["nodes"] if n in ops),
                     int(layer["bound_cycles"])) for layer in lib.layers if layer.get("ran_on", "npu") == "npu"]
    io = sum(nbytes(g.values[v]) for g in graphs for v in [*g.inputs, *g.outputs])
    return out, io


def _compile(name: str, variant: str, path: Path) -> tuple[zr.Result, object, object, object]:
    """(the result so far, the graph, the library, its compiles) of importing and compiling one variant; a
    refusal gives a result with its first line and None for the rest."""
    from compiler import CompileError, from_onnx

    res = zr.Result(name, variant, "ok", ZOO[name].library, commit())
    start = time.process_time()
    try:
        graph = from_onnx(str(path))
        imported = time.process_time() - start
        compiles = compile_twice(graph)
    except CompileError as exc:
        res.imported = str(exc).splitlines()[0][:160]
        return res, None, None, None
    res.compile_s, res.second_s = imported + compiles.first_cpu, compiles.second_cpu
    if not compiles.same:
        res.agreement = "the first and second compile gave different programs"
    return res, graph, compiles.lib, compiles


def evaluate(name: str, variant: str, path: Path, macs: int, repeats: int) -> zr.Result:
    """Import, compile, run and compare one variant of a network; in the performance variant also the
    simulator's race-checked and unchecked runs against onnxruntime's, side by side."""
    from compiler import GraphModule
    from compiler.agreement import onnxruntime_session

    entry, fmt = ZOO[name], zr.split_variant(variant)[0]
    res, graph, lib, compiles = _compile(name, variant, path)
    if lib is None:
        return res
    x = np.random.default_rng(1).standard_normal((1, 3, entry.size, entry.size)).astype(np.float32)
    m = GraphModule(lib)
    m.set_input(0, x)
    stats = m.run()
    ours = [m.get_output(k) for k in range(m.num_outputs)]
    res.ok, text = zr.judge(entry.kind, fmt, ours, ort_outputs(path, x, "ORT_ENABLE_ALL"),
                            ort_outputs(path, x, "ORT_DISABLE_ALL"), entry.classes)
    res.ok &= compiles.same
    res.agreement = text if compiles.same else f"{text}; {res.agreement}"
    npu = sum(int(layer.get("macs", 0)) for layer in lib.layers if layer.get("ran_on", "npu") == "npu")
    res.npu_share = npu / macs if macs else None
    cfg = lib.config
    ks, io = kernels(graph, lib)
    bound = zr.roofline(ks, io, cfg.peak_macs_per_cycle, cfg.ddr_bytes_per_cycle)
    res.cycles, res.bound_sum, res.network_bound, res.streaming = stats.cycles, bound.kernels, bound.network, \
        bound.streaming
    res.mac_bound = -(-macs // cfg.peak_macs_per_cycle)
    if variant == zr.PERFORMANCE_VARIANT:
        sess = onnxruntime_session(str(path), threads=1)
        runs = run_side_by_side(m, sess, {sess.get_inputs()[0].name: x}, repeats, f"{name} {variant}")
        res.checked_ratio, res.ort_ratio = runs.checked_ratio, runs.ort_ratio
    return res


def _requirements() -> None:
    missing = [m for m in ("torch", "torchvision", "onnx", "onnxruntime") if _absent(m)]
    if missing:
        sys.exit(f"zoo.py: error: needs {', '.join(missing)}: {ZOO_EXTRA}")


def _absent(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is None


def _model_macs(name: str, cache: Path, macs: dict) -> int | str:
    """The float model's MACs (cached in `macs`), or the first line of why it could not be exported."""
    if name not in macs:
        try:
            macs[name] = onnx_macs(preprocessed(name, cache))
        except Exception as exc:  # noqa: BLE001 -- a library's export failure is a row, not the end of the run
            macs[name] = f"export or pre-process failed: {type(exc).__name__}: {exc}".splitlines()[0]
    return macs[name]


def _prepared(name: str, variant: str, cache: Path, macs: dict) -> tuple[Path | None, int, zr.Result | None]:
    """(the quantised model, the float model's MACs, None), or (None, 0, the result saying why there is none)."""
    total = _model_macs(name, cache, macs)
    if isinstance(total, str):
        return None, 0, zr.Result(name, variant, total, ZOO[name].library, commit())
    try:
        return quantised(name, variant, cache), total, None
    except Exception as exc:  # noqa: BLE001 -- onnxruntime's quantiser failing is a row too
        why = f"quantisation failed: {type(exc).__name__}: {exc}".splitlines()[0]
        return None, 0, zr.Result(name, variant, why, ZOO[name].library, commit())


def _evaluated(name: str, variant: str, path: Path, macs: int, repeats: int) -> zr.Result:
    """evaluate(), a crash of the toolchain (anything but its one-line refusals) recorded as the row's import
    column ("crashed: ...") so that one network's bug does not end a run of hours."""
    try:
        return evaluate(name, variant, path, macs, repeats)
    except Exception as exc:  # noqa: BLE001 -- a traceback is a bug to report in the table, not the run's end
        why = f"crashed: {type(exc).__name__}: {exc}".splitlines()[0][:160]
        return zr.Result(name, variant, why, ZOO[name].library, commit())


def fill(names: list[str], variants: list[str], cache: Path) -> int:
    """--no-run: export and quantise every pair into the cache; the exit status (1 if one failed)."""
    macs: dict[str, int | str] = {}
    failed = [r for r in (_prepared(n, v, cache, macs)[2] for n in names for v in variants) if r is not None]
    for r in failed:
        print(f"zoo.py: {r.name} {r.variant}: {r.imported}")
    print(f"zoo.py: {len(names)} networks in {len(variants)} variants in {cache}, {len(failed)} failed")
    return 1 if failed else 0


def measure(names: list[str], variants: list[str], cache: Path, rows: Path, repeats: int,
            results: list[zr.Result]) -> list[zr.Result]:
    """Every pair without a result measured, the performance variant's first (so that a run cut short has
    that table), each result saved in `rows` as it comes."""
    done = {(r.name, r.variant) for r in results}
    macs: dict[str, int | str] = {}
    for v in sorted(variants, key=lambda v: v != zr.PERFORMANCE_VARIANT):
        for name in (n for n in names if (n, v) not in done):
            path, total, res = _prepared(name, v, cache, macs)
            res = res or _evaluated(name, v, path, total, repeats)
            results = zr.merged(results, res)
            zr.save_rows(rows, results)
            print(" | ".join(map(str, zr.row(res))), flush=True)
    return results


HOW = ("--rows", "--resume", "--recorded")
"""Arguments that change how the rows are obtained, not what they measure (left out of a table's command)."""


def table_argv(argv: list[str]) -> list[str]:
    """argv without HOW's arguments (and --rows's value): what a table's command must match."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--rows":
            skip = True
        elif not a.startswith(HOW):
            out.append(a)
    return out


def write_docs(results: list[zr.Result], missing: list[str], variants: list[str], argv: list[str],
               doc: Path | None = None) -> None:
    """Both tables into docs/performance.md (or `doc`), the pairs with no result named under them."""
    at = zr.commits(results)
    names = list(dict.fromkeys([r.name for r in results] + [m.rsplit(" ", 1)[0] for m in missing]))
    said = lambda pairs: f". No result (the run did not reach them) for {zr.missing_text(pairs, names)}" \
        if pairs else ""  # noqa: E731
    note = said(missing)
    write_table("zoo", zr.HEADER, [zr.row(r) for r in results], zr.GOAL + note, argv=table_argv(argv), at=at,
                doc=doc)
    perf = [r for r in results if r.variant == zr.PERFORMANCE_VARIANT]
    if zr.PERFORMANCE_VARIANT in variants:
        write_table("zoo-performance", zr.PERFORMANCE_HEADER,
                    [zr.performance_row(r) for r in perf] + [zr.performance_summary(perf)],
                    zr.PERFORMANCE_GOAL + said([m for m in missing if m.endswith(f" {zr.PERFORMANCE_VARIANT}")]),
                    argv=table_argv(argv), at=zr.commits(perf), doc=doc)


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="zoo.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO), help="comma-separated names (--list shows them)")
    ap.add_argument("--variants", default=",".join(zr.VARIANTS),
                    help=f"comma-separated, of {', '.join(zr.ALL_VARIANTS)}")
    ap.add_argument("--cache", help="the folder of exported and quantised models")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved timed runs of the performance variant")
    ap.add_argument("--rows", help="the results file (default: zoo-rows.json in the cache)")
    how = ap.add_mutually_exclusive_group()
    how.add_argument("--resume", action="store_true", help="keep the results already in --rows; measure the rest")
    how.add_argument("--recorded", action="store_true", help="measure nothing: the tables from --rows alone")
    how.add_argument("--no-run", action="store_true", help="only export and quantise (fill the cache)")
    ap.add_argument("--list", action="store_true", help="list the networks and stop")
    ap.add_argument("--write-docs", action="store_true", help="write the tables into docs/performance.md")
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats must be at least 1, got {args.repeats}")
    try:
        args.names, args.variant_list = zr.parse_names(args.models, ZOO, "--models"), zr.parse_variants(args.variants)
    except zr.UsageError as exc:
        ap.error(str(exc))
    return args


def main(argv: list[str] | None = None) -> int:
    """Export, quantise, compile, run and compare every network asked for; print (and write) the tables."""
    argv = sys.argv[1:] if argv is None else argv
    args = _arguments(argv)
    if args.list:
        for name, e in ZOO.items():
            print(f"{name:<26} {e.library:<12} {e.kind:<11} {e.size}")
        return 0
    if not args.recorded:
        _requirements()
    cache = cache_dir(args.cache)
    if args.no_run:
        return fill(args.names, args.variant_list, cache)
    rows = Path(args.rows).resolve() if args.rows else cache / "zoo-rows.json"
    try:
        results = zr.load_rows(rows) if args.resume or args.recorded else []
    except zr.UsageError as exc:
        sys.exit(f"zoo.py: error: {exc}")
    if not args.recorded:
        results = measure(args.names, args.variant_list, cache, rows, args.repeats, results)
    results, missing = zr.in_order(results, args.names, args.variant_list)
    print(markdown(zr.HEADER, [zr.row(r) for r in results]))
    perf = [r for r in results if r.variant == zr.PERFORMANCE_VARIANT]
    if perf:
        print(markdown(zr.PERFORMANCE_HEADER, [zr.performance_row(r) for r in perf] + [zr.performance_summary(perf)]))
    for line in [f"no result: {m}" for m in missing] + [f"goal missed: {m}" for m in zr.missed(perf)]:
        print(line)
    if args.write_docs:
        write_docs(results, missing, args.variant_list, argv)
    return 0 if not missing and all(r.ok for r in results) and not zr.missed(perf) else 1


if __name__ == "__main__":
    sys.exit(main())
