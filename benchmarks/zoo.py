"""The model zoo: vision networks from their libraries' own definitions, exported and quantised as a user would.

    python benchmarks/zoo.py [--models NAME,...] [--variants qoperator-int8-pc,qdq-uint8-pt,...]
                             [--cache DIR] [--no-run] [--list] [--write-docs]

Needs the `zoo` extra (`pip install -e '.[zoo]'`: torch, torchvision, timm, ultralytics); `make zoo` runs it.
Each network is built by its library with random weights (torchvision and timm classifiers, torchvision's
SSDLite detector and segmenters, an ultralytics YOLO detector built from its configuration file), exported
with `torch.onnx.export`, pre-processed by onnxruntime's `quant_pre_process` and quantised by its
`quantize_static` on seeded N(0, 1) calibration inputs, in each variant asked for: QOperator or QDQ, int8
or uint8 activations, per-channel (`pc`) or per-tensor (`pt`) weights.  Every file is cached under
--cache (default $NNP_ZOO_CACHE, else ~/.cache/nnp/zoo), written whole (a temporary file renamed).

Then each variant is imported (compiler.from_onnx), compiled (compiler.build, its CPU time measured),
run on the simulator on a seeded input, and compared with onnxruntime at its default optimisation level
and at ORT_DISABLE_ALL:
  * QOperator: every output bit-exact with onnxruntime;
  * QDQ: the same top-1 (detectors and segmenters: the same arg max per position), and no element further
    from onnxruntime's default run than onnxruntime's two levels are from each other.
A refused network reports the first line of its refusal.  The table (docs/performance.md, `zoo`) has per
network and variant: import, the share of the MACs on the NPU, agreement, cycles against the sum of the
layers' bounds and against the MAC bound, and compile time.
"""
from __future__ import annotations

import argparse
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

from tables import FLAG, markdown, write_table  # noqa: E402  benchmarks/tables.py (benchmarks/ is on sys.path)

from compiler.models import quiet  # noqa: E402

ZOO_EXTRA = "pip install -e '.[zoo]' (torch, torchvision, timm, ultralytics)"
VARIANTS = ("qoperator-int8-pc", "qdq-int8-pc", "qoperator-uint8-pt", "qdq-uint8-pt")
ALL_VARIANTS = tuple(f"{f}-{a}-{w}" for f in ("qoperator", "qdq") for a in ("int8", "uint8") for w in ("pc", "pt"))


@dataclass(frozen=True)
class Entry:
    """One network of the zoo: the library that defines it, what it is, its input size and its constructor."""

    library: str
    kind: str                       # classifier, detector or segmenter
    size: int
    make: Callable[[], object]      # the torch module, random weights, in eval mode


def _tv(name: str, **kw) -> Callable[[], object]:
    def make():
        import torchvision
        return getattr(torchvision.models, name)(weights=None, **kw)
    return make


def _tv_detection(name: str) -> Callable[[], object]:
    def make():
        import torchvision
        return getattr(torchvision.models.detection, name)(weights=None, weights_backbone=None)
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
    "yolov8n": Entry("ultralytics", "detector", 320, _yolo("yolov8n.yaml")),
    "ssdlite320": Entry("torchvision", "detector", 320, _tv_detection("ssdlite320_mobilenet_v3_large")),
    "lraspp_mobilenet_v3": Entry("torchvision", "segmenter", 256, _tv_segmentation("lraspp_mobilenet_v3_large")),
    "deeplabv3_mobilenet_v3": Entry("torchvision", "segmenter", 256,
                                    _tv_segmentation("deeplabv3_mobilenet_v3_large")),
}


def cache_dir(given: str | None) -> Path:
    """Where exported and quantised models are kept: --cache, $NNP_ZOO_CACHE or ~/.cache/nnp/zoo."""
    d = Path(given or os.environ.get("NNP_ZOO_CACHE") or Path.home() / ".cache" / "nnp" / "zoo")
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
            torch.onnx.export(model, (x,), tmp, opset_version=17, input_names=["input"], dynamo=False)
    return _atomic(path, write)


def quantised(name: str, variant: str, cache: Path) -> Path:
    """The quantised model of a variant, `fmt-act-weights`: quant_pre_process, then quantize_static."""
    fmt, act, weights = variant.split("-")
    path = cache / f"{name}-{ZOO[name].size}-{variant}.onnx"
    if path.exists():
        return path
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    import onnx

    from compiler.models import RandomReader

    src = exported(name, cache)
    pre = cache / f"{name}-{ZOO[name].size}-pre.onnx"
    if not pre.exists():
        _atomic(pre, lambda tmp: quant_pre_process(str(src), tmp, skip_symbolic_shape=False))
    reader = RandomReader(onnx.load(str(pre)), samples=4, seed=0)

    def write(tmp: str) -> None:
        quantize_static(str(pre), tmp, reader,
                        quant_format=QuantFormat.QOperator if fmt == "qoperator" else QuantFormat.QDQ,
                        per_channel=weights == "pc", weight_type=QuantType.QInt8,
                        activation_type=QuantType.QInt8 if act == "int8" else QuantType.QUInt8)
    return _atomic(path, write)


def onnx_macs(path: Path) -> int:
    """Multiply-accumulates of a model's Conv, ConvTranspose, Gemm and MatMul nodes (float or QDQ/QOperator),
    from onnx's own shape inference: the whole network's work, wherever it runs."""
    import onnx

    model = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    g = model.graph
    shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim]
              for vi in list(g.value_info) + list(g.input) + list(g.output)}
    shapes.update({t.name: list(t.dims) for t in g.initializer})
    total = 0
    for n in g.node:
        kind = n.op_type.removeprefix("QLinear")
        w = n.input[3] if n.op_type in ("QLinearConv", "QLinearMatMul") else n.input[1] if len(n.input) > 1 else ""
        out, wshape = shapes.get(n.output[0]), shapes.get(w)
        if not out or not wshape or 0 in out or 0 in wshape:
            continue
        if kind in ("Conv", "ConvTranspose"):
            total += int(np.prod(out)) * int(np.prod(wshape[1:]))
        elif kind in ("MatMul", "Gemm", "QGemm"):
            total += int(np.prod(out)) * int(wshape[0] if kind != "MatMul" else wshape[-2])
    return total


@dataclass
class Result:
    """One network in one variant."""

    name: str
    variant: str
    imported: str                   # "ok", or the first line of the refusal
    npu_share: float | None = None  # MACs on the NPU / the model's MACs
    agreement: str = "-"
    ok: bool = False                # the agreement the variant must reach
    cycles: int = 0
    bound_sum: int = 0              # the sum of the layers' roofline bounds
    mac_bound: int = 0              # MACs / peak MACs per cycle
    compile_s: float | None = None  # CPU seconds of from_onnx + build


def _ort_outputs(path: Path, x: np.ndarray, level: str) -> list[np.ndarray]:
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads, opts.log_severity_level = 1, 1, 3
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    sess = ort.InferenceSession(str(path), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})


def _positions(a: np.ndarray, kind: str) -> np.ndarray:
    """The arg max the networks are judged by: per image (classifiers) or per position over axis 1."""
    a = np.asarray(a)
    return a.reshape(a.shape[0], -1).argmax(1) if kind == "classifier" or a.ndim < 3 else a.argmax(1)


def judge(kind: str, fmt: str, ours: list[np.ndarray], default: list[np.ndarray],
          plain: list[np.ndarray]) -> tuple[bool, str]:
    """(the variant's target met, a short text): QOperator bit-exact; QDQ same arg max and within ORT's levels."""
    if len(ours) != len(default):
        return False, f"{len(ours)} outputs, onnxruntime {len(default)}"
    texts, ok = [], True
    for o, d, p in zip(ours, default, plain):
        o, d, p = (np.asarray(v, np.float64) for v in (o, d, p))
        if o.shape != d.shape:
            return False, f"shape {o.shape}, onnxruntime {d.shape}"
        if fmt == "qoperator":
            same = int((o == d).sum())
            ok &= same == o.size
            texts.append("bit-exact" if same == o.size else f"{o.size - same}/{o.size} differ")
            continue
        outside = int(((o < np.minimum(d, p)) | (o > np.maximum(d, p))).sum())
        top = bool(np.array_equal(_positions(o, kind), _positions(d, kind)))
        ok &= top and outside == 0
        texts.append(f"arg max {'same' if top else 'DIFFERS'}, {outside} outside ORT's levels")
    return ok, "; ".join(texts)


def evaluate(name: str, variant: str, path: Path, macs: int) -> Result:
    """Import, compile, run and compare one variant of a network."""
    from compiler import CompileError, GraphModule, build, from_onnx

    entry, fmt = ZOO[name], variant.split("-")[0]
    start = time.process_time()
    try:
        lib = build(from_onnx(str(path)))
    except CompileError as exc:
        return Result(name, variant, str(exc).splitlines()[0][:160])
    res = Result(name, variant, "ok", compile_s=time.process_time() - start)
    x = np.random.default_rng(1).standard_normal((1, 3, entry.size, entry.size)).astype(np.float32)
    m = GraphModule(lib)
    m.set_input(0, x)
    stats = m.run()
    ours = [m.get_output(k) for k in range(m.num_outputs)]
    res.ok, res.agreement = judge(entry.kind, fmt, ours, _ort_outputs(path, x, "ORT_ENABLE_ALL"),
                                  _ort_outputs(path, x, "ORT_DISABLE_ALL"))
    npu_macs = sum(int(layer.get("macs", 0)) for layer in lib.layers if layer.get("ran_on", "npu") == "npu")
    res.npu_share = npu_macs / macs if macs else None
    res.cycles, res.bound_sum = stats.cycles, sum(int(layer["bound_cycles"]) for layer in lib.layers)
    res.mac_bound = -(-macs // lib.config.peak_macs_per_cycle)
    return res


def row(r: Result) -> list[object]:
    """A table row of a result."""
    ran = r.imported == "ok"
    return [r.name, ZOO[r.name].library, r.variant, "ok" if ran else f"refused: {r.imported}",
            f"{100 * r.npu_share:.1f}%" if r.npu_share is not None else "-", r.agreement,
            f"{r.cycles / r.bound_sum:.2f}" if ran and r.bound_sum else "-",
            f"{r.cycles / r.mac_bound:.2f}" if ran and r.mac_bound else "-",
            f"{r.compile_s:.1f}" if r.compile_s is not None else "-"]


HEADER = ["network", "library", "variant", "import", "NPU MACs", "against onnxruntime", "cycles / Σ bounds",
          "cycles / MAC bound", "compile CPU s"]
GOAL = ("every network imports, compiles and runs in every variant; QOperator bit-exact, QDQ the same arg max "
        "and within onnxruntime's default-vs-ORT_DISABLE_ALL difference; at least 99% of a convolutional "
        "network's MACs on the NPU; compile at most 10 s")


def _requirements() -> None:
    missing = [m for m in ("torch", "torchvision", "onnx", "onnxruntime") if _absent(m)]
    if missing:
        sys.exit(f"zoo.py: error: needs {', '.join(missing)}: {ZOO_EXTRA}")


def _absent(module: str) -> bool:
    import importlib.util
    return importlib.util.find_spec(module) is None


def main(argv: list[str] | None = None) -> int:
    """Export, quantise, compile, run and compare every network asked for; print (and write) the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default=",".join(ZOO), help="comma-separated names (--list shows them)")
    ap.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of {', '.join(ALL_VARIANTS)}")
    ap.add_argument("--cache", help="the folder of exported and quantised models")
    ap.add_argument("--no-run", action="store_true", help="only export and quantise (fill the cache)")
    ap.add_argument("--list", action="store_true", help="list the networks and stop")
    ap.add_argument(FLAG, action="store_true", help="write the table into docs/performance.md")
    args = ap.parse_args(argv)
    if args.list:
        for name, e in ZOO.items():
            print(f"{name:<26} {e.library:<12} {e.kind:<11} {e.size}")
        return 0
    names, variants = args.models.split(","), args.variants.split(",")
    bad = [n for n in names if n not in ZOO] + [v for v in variants if v not in ALL_VARIANTS]
    if bad:
        sys.exit(f"zoo.py: error: unknown {', '.join(map(repr, bad))} (see --list and --help)")
    _requirements()
    cache = cache_dir(args.cache)
    results = []
    for name in names:
        try:
            macs = onnx_macs(exported(name, cache))
        except Exception as exc:  # noqa: BLE001 -- a library's export failure is a row, not the end of the run
            results += [Result(name, v, f"export failed: {type(exc).__name__}: {exc}".splitlines()[0])
                        for v in variants]
            continue
        for v in variants:
            try:
                path = quantised(name, v, cache)
            except Exception as exc:  # noqa: BLE001 -- onnxruntime's quantiser failing is a row too
                results.append(Result(name, v, f"quantisation failed: {type(exc).__name__}: {exc}".splitlines()[0]))
                continue
            if not args.no_run:
                results.append(evaluate(name, v, path, macs))
                print(" | ".join(map(str, row(results[-1]))), flush=True)
    if args.no_run:
        for r in results:
            print(f"zoo.py: {r.name} {r.variant}: {r.imported}")
        print(f"zoo.py: {len(names)} networks in {len(variants)} variants in {cache}, {len(results)} failed")
        return 1 if results else 0
    print(markdown(HEADER, [row(r) for r in results]))
    if args.write_docs:
        write_table("zoo", HEADER, [row(r) for r in results], GOAL, argv=argv)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
