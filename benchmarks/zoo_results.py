"""The model zoo's results: what one network in one variant measured, how it is judged, its roofline, the
rows file a long run keeps, and the two tables of docs/performance.md (`zoo`, `zoo-performance`).

Nothing here needs torch or a compiled network: benchmarks/zoo.py measures, this module judges and
formats (tests/benchmarks/test_zoo_results.py checks it on hand-made results).
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Iterable

import numpy as np

FORMATS, ACTIVATIONS, WEIGHTS = ("qoperator", "qdq"), ("int8", "uint8"), ("pc", "pt")
ALL_VARIANTS = tuple(f"{f}-{a}-{w}" for f in FORMATS for a in ACTIVATIONS for w in WEIGHTS)
VARIANTS = ("qoperator-int8-pc", "qdq-int8-pc", "qoperator-uint8-pt", "qdq-uint8-pt")   # the default run
PERFORMANCE_VARIANT = "qoperator-int8-pc"        # the variant the performance table measures

ROOFLINE_GOAL, ROOFLINE_MEAN_GOAL = 1.5, 1.2      # cycles / roofline: each network, geometric mean
FIRST_COMPILE_GOAL, SECOND_COMPILE_GOAL = 10.0, 1.0   # CPU seconds
CHECKED_GOAL = 2.0                                # race-checked / unchecked simulation, CPU
ORT_GOALS = {"resnet50": 1.5, "mobilenet_v2": 1.5}    # unchecked simulation / onnxruntime, one thread, CPU
ORT_GOAL = 2.0                                    # every other network


class UsageError(ValueError):
    """A bad --models or --variants value, said in one line."""


def parse_names(text: str, known: Iterable[str], what: str) -> list[str]:
    """The comma-separated names of `text`, each of `known`, in order and without repeats."""
    known = tuple(known)
    names = list(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
    bad = [n for n in names if n not in known]
    if bad or not names:
        raise UsageError(f"{what}: unknown {', '.join(map(repr, bad))} (choose from {', '.join(known)})" if bad
                         else f"{what}: none given (choose from {', '.join(known)})")
    return names


def parse_variants(text: str) -> list[str]:
    """The variants of a --variants value, each `format-activations-weights` (ALL_VARIANTS)."""
    return parse_names(text, ALL_VARIANTS, "--variants")


def split_variant(variant: str) -> tuple[str, str, str]:
    """(format, activation type, weight granularity) of a variant: qdq-uint8-pt -> (qdq, uint8, pt)."""
    fmt, act, weights = parse_variants(variant)[0].split("-")
    return fmt, act, weights


# ----------------------------------------------------------------------------- the roofline

def node_macs(op_type: str, x: list[int], w: list[int], y: list[int], trans_b: bool = False) -> int:
    """Multiply-accumulates of one float ONNX node from its input, weight and output shapes: a Conv's output
    elements times its weights per output channel, a ConvTranspose's input elements times its weights per
    input channel, a MatMul's or Gemm's output elements times the inner dimension (Gemm's B is [N, K]
    with transB, as torch exports a Linear)."""
    if op_type == "Conv":
        return math.prod(y) * math.prod(w[1:])
    if op_type == "ConvTranspose":
        return math.prod(x) * math.prod(w[1:])
    if op_type == "Gemm":
        return math.prod(y) * (w[1] if trans_b else w[0])
    if op_type == "MatMul":
        return math.prod(y) * x[-1]
    raise ValueError(f"no MACs for op type {op_type!r}")


@dataclass(frozen=True)
class Kernel:
    """What the roofline needs of one NPU kernel: its MACs (at the int8 rate: compiler.roofline.rate_macs) and its
    constants' DDR bytes as the NPU needs them (a conv's taps that read only padding have neither), its own
    bound."""

    macs: int
    constant_bytes: int
    bound_cycles: int


@dataclass(frozen=True)
class Roofline:
    """A network's bound: the whole network's, the sum of its kernels', and which one it is judged against."""

    network: int            # max(MACs / peak, least DDR bytes / bandwidth) of the NPU's whole work
    kernels: int            # the sum of its kernels' bounds
    streaming: bool         # weight-streaming: judged against `kernels`

    @property
    def cycles(self) -> int:
        return self.kernels if self.streaming else self.network


def weight_streaming(kernels: list[Kernel], peak_macs: int, ddr_bytes_per_cycle: int) -> bool:
    """Whether most of the network's constant bytes sit in kernels that use each weight too few times to hide
    its load (constant bytes / bandwidth > MACs / peak: VGG's and AlexNet's fully-connected layers).  Those
    kernels stream their weights while no other kernel computes, so the network's one roofline, which lets
    every byte overlap every MAC, is out of reach; the sum of the kernels' bounds is not."""
    total = sum(k.constant_bytes for k in kernels)
    bound = sum(k.constant_bytes for k in kernels
                if k.constant_bytes * peak_macs > k.macs * ddr_bytes_per_cycle)
    return total > 0 and 2 * bound > total


def roofline(kernels: list[Kernel], io_bytes: int, peak_macs: int, ddr_bytes_per_cycle: int) -> Roofline:
    """The roofline of a network's NPU work: kernels, and the bytes of the NPU stages' inputs and outputs."""
    macs = sum(k.macs for k in kernels)
    least = io_bytes + sum(k.constant_bytes for k in kernels)
    network = max(-(-macs // peak_macs), -(-least // ddr_bytes_per_cycle))
    return Roofline(network, sum(k.bound_cycles for k in kernels),
                    weight_streaming(kernels, peak_macs, ddr_bytes_per_cycle))


# ----------------------------------------------------------------------------- agreement

@dataclass(frozen=True)
class Classes:
    """Where a detector's or segmenter's class scores lie, so its arg max per position runs over them alone:
    the axis, the first class index on it (a YOLO head's rows 0-3 are its box, not classes) and the outputs
    that hold scores (None: every output; an SSD's boxes output holds none)."""

    axis: int = 1
    first: int = 0
    outputs: tuple[int, ...] | None = None


def _positions(a: np.ndarray, kind: str, classes: Classes) -> np.ndarray:
    """The arg max the networks are judged by: per image (classifiers) or per position over the class scores."""
    a = np.asarray(a)
    if kind == "classifier" or a.ndim < 3:
        return a.reshape(a.shape[0], -1).argmax(1)
    scores = np.moveaxis(a, classes.axis, -1)[..., classes.first:]
    return scores.argmax(-1)


def _deviation(a: np.ndarray, b: np.ndarray) -> float:
    """The largest element-wise distance of two outputs."""
    return float(np.abs(a - b).max()) if a.size else 0.0


def judge(kind: str, fmt: str, ours: list[np.ndarray], default: list[np.ndarray],
          plain: list[np.ndarray], classes: Classes = Classes()) -> tuple[bool, str]:
    """(the variant's target met, a short text): QOperator bit-exact with onnxruntime's default run; QDQ the same
    arg max (per position over `classes` for detectors and segmenters) and no element outside the range of
    onnxruntime's two levels (default, ORT_DISABLE_ALL).  The QDQ text also gives the largest distance of ours
    from the default run next to the largest distance of the two levels from each other."""
    if not len(ours) == len(default) == len(plain):
        return False, f"{len(ours)} outputs, onnxruntime {len(default)}"
    texts, ok = [], True
    for index, (o, d, p) in enumerate(zip(ours, default, plain)):
        o, d, p = (np.asarray(v, np.float64) for v in (o, d, p))
        if o.shape != d.shape or d.shape != p.shape:
            return False, f"shape {o.shape}, onnxruntime {d.shape}"
        if fmt == "qoperator":
            same = int((o == d).sum())
            ok &= same == o.size
            texts.append("bit-exact" if same == o.size else f"{o.size - same}/{o.size} differ")
            continue
        outside = int(((o < np.minimum(d, p)) | (o > np.maximum(d, p))).sum())
        scored = classes.outputs is None or index in classes.outputs
        top = not scored or bool(np.array_equal(_positions(o, kind, classes), _positions(d, kind, classes)))
        ok &= top and outside == 0
        texts.append(f"arg max {'same' if top else 'DIFFERS'}, {outside} outside ORT's levels "
                     f"(max distance {_deviation(o, d):.4g}, ORT's levels {_deviation(p, d):.4g})")
    return ok, "; ".join(texts)


# ----------------------------------------------------------------------------- one result

@dataclass
class Result:
    """One network in one variant: its import, agreement, cycles, bounds and, for the performance variant,
    the compile and simulation ratios."""

    name: str
    variant: str
    imported: str                   # "ok", or the first line of the refusal
    library: str = ""
    commit: str = ""                # the tree it was measured on
    npu_share: float | None = None  # MACs on the NPU / the model's MACs
    agreement: str = "-"
    ok: bool = False                # the agreement the variant must reach
    cycles: int = 0
    bound_sum: int = 0              # the sum of the kernels' roofline bounds
    network_bound: int = 0          # the network's one roofline
    streaming: bool = False         # weight-streaming: judged against bound_sum
    mac_bound: int = 0              # the whole model's MACs / peak MACs per cycle
    compile_s: float | None = None  # CPU seconds of from_onnx + the first build (an empty compile cache)
    second_s: float | None = None   # CPU seconds of the second build (the cache holding it)
    checked_ratio: float | None = None   # race-checked / unchecked simulation, CPU
    ort_ratio: float | None = None       # unchecked simulation / onnxruntime one thread, CPU

    @property
    def ran(self) -> bool:
        return self.imported == "ok"

    @property
    def roofline_ratio(self) -> float | None:
        """Cycles over the bound the network is judged against (None if it did not run)."""
        bound = self.bound_sum if self.streaming else self.network_bound
        return self.cycles / bound if self.ran and bound else None


def _ratio(x: float | None) -> str:
    return f"{x:.2f}" if x is not None else "-"


NOT_REFUSALS = ("crashed: ", "export or pre-process failed: ", "quantisation failed: ")
"""How a result that is no refusal of the compiler's says why it did not run."""


def outcome(r: Result) -> str:
    """The import column: ok, the compiler's refusal, or what else stopped it (NOT_REFUSALS)."""
    return "ok" if r.ran else r.imported if r.imported.startswith(NOT_REFUSALS) else f"refused: {r.imported}"


def row(r: Result) -> list[object]:
    """A row of the `zoo` table."""
    return [r.name, r.library, r.variant, outcome(r),
            f"{100 * r.npu_share:.1f}%" if r.npu_share is not None else "-", r.agreement,
            _ratio(r.cycles / r.bound_sum if r.ran and r.bound_sum else None),
            _ratio(r.cycles / r.mac_bound if r.ran and r.mac_bound else None),
            f"{r.compile_s:.1f}" if r.compile_s is not None else "-"]


HEADER = ["network", "library", "variant", "import", "NPU MACs", "against onnxruntime", "cycles / Σ bounds",
          "cycles / MAC bound", "compile CPU s"]
GOAL = ("every network imports, compiles and runs in every variant; QOperator bit-exact, QDQ the same arg max "
        "and within onnxruntime's default-vs-ORT_DISABLE_ALL difference; at least 99% of a convolutional "
        "network's MACs on the NPU; compile at most 10 s")


def ort_goal(name: str) -> float:
    """The unchecked-simulation / onnxruntime goal of a network."""
    return ORT_GOALS.get(name, ORT_GOAL)


def _judged(x: float | None, goal: float) -> str:
    return "-" if x is None else f"{x:.2f}" + ("" if x <= goal else " (over)")


def performance_row(r: Result) -> list[object]:
    """A row of the `zoo-performance` table: every figure as a ratio, '(over)' where it misses its goal."""
    bound = r.bound_sum if r.streaming else r.network_bound
    return [r.name, f"{r.cycles:,}" if r.ran else outcome(r),
            f"{bound:,} ({'Σ kernels' if r.streaming else 'network'})" if r.ran else "-",
            _judged(r.roofline_ratio, ROOFLINE_GOAL),
            _judged(r.compile_s, FIRST_COMPILE_GOAL) if r.ran else "-",
            _judged(r.second_s, SECOND_COMPILE_GOAL) if r.ran else "-",
            _judged(r.checked_ratio, CHECKED_GOAL), f"{_judged(r.ort_ratio, ort_goal(r.name))} (goal {ort_goal(r.name):g})"
            if r.ort_ratio is not None else "-"]


def geometric_mean(xs: list[float]) -> float | None:
    """The geometric mean (None of nothing)."""
    return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None


def performance_summary(results: list[Result]) -> list[object]:
    """The table's last row: geometric means of the ratios over the networks that ran."""
    ran = [r for r in results if r.ran]
    mean = lambda get: geometric_mean([v for v in map(get, ran) if v is not None])  # noqa: E731
    roof = mean(lambda r: r.roofline_ratio)
    return [f"geometric mean, {len(ran)} of {len(results)} networks", "-", "-",
            _judged(roof, ROOFLINE_MEAN_GOAL) + " (goal 1.2)" if roof is not None else "-",
            _ratio(mean(lambda r: r.compile_s)), _ratio(mean(lambda r: r.second_s)),
            _ratio(mean(lambda r: r.checked_ratio)), _ratio(mean(lambda r: r.ort_ratio))]


PERFORMANCE_HEADER = ["network", "cycles", "roofline (judged against)", "cycles / roofline", "first compile CPU s",
                      "second compile CPU s", "race-checked / unchecked", "unchecked / onnxruntime"]
PERFORMANCE_GOAL = (f"cycles / roofline at most {ROOFLINE_GOAL:g} for each network and {ROOFLINE_MEAN_GOAL:g} "
                    f"in geometric mean; a first compile at most {FIRST_COMPILE_GOAL:g} s of CPU, a second at most "
                    f"{SECOND_COMPILE_GOAL:g} s; race-checked simulation at most {CHECKED_GOAL:g}x unchecked; "
                    f"unchecked simulation at most {ORT_GOAL:g}x onnxruntime's one-thread CPU time "
                    f"({ORT_GOALS['resnet50']:g}x for resnet50 and mobilenet_v2)")


def missed(results: list[Result]) -> list[str]:
    """Every goal of the performance table a result misses, one line each."""
    out = []
    for r in results:
        if not r.ran:
            out.append(f"{r.name} {r.variant}: {r.imported}")
            continue
        figures = [("cycles / roofline", r.roofline_ratio, ROOFLINE_GOAL),
                   ("first compile CPU s", r.compile_s, FIRST_COMPILE_GOAL),
                   ("second compile CPU s", r.second_s, SECOND_COMPILE_GOAL),
                   ("race-checked / unchecked", r.checked_ratio, CHECKED_GOAL),
                   ("unchecked / onnxruntime", r.ort_ratio, ort_goal(r.name))]
        out += [f"{r.name}: {what} {x:.2f}, goal {goal:g}" for what, x, goal in figures
                if x is not None and x > goal]
    roof = geometric_mean([r.roofline_ratio for r in results if r.roofline_ratio is not None])
    if roof is not None and roof > ROOFLINE_MEAN_GOAL:
        out.append(f"geometric mean of cycles / roofline {roof:.2f}, goal {ROOFLINE_MEAN_GOAL:g}")
    return out


# ----------------------------------------------------------------------------- the rows file

def load_rows(path: Path) -> list[Result]:
    """The results a run recorded (none if the file is not there); ValueError naming the file if it is not one."""
    if not path.exists():
        return []
    try:
        rows = json.loads(path.read_text())
        names = {f.name for f in fields(Result)}
        return [Result(**{k: v for k, v in r.items() if k in names}) for r in rows]
    except (json.JSONDecodeError, TypeError, AttributeError) as exc:
        raise UsageError(f"{path}: not a rows file of benchmarks/zoo.py ({exc})") from None


def save_rows(path: Path, results: list[Result]) -> None:
    """Write the results whole: a temporary file beside `path`, renamed over it (never a torn file)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump([asdict(r) for r in results], f, indent=1)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def merged(old: list[Result], new: Result) -> list[Result]:
    """The recorded results with `new` in place of an older one of the same network and variant."""
    return [r for r in old if (r.name, r.variant) != (new.name, new.variant)] + [new]


def in_order(results: list[Result], names: list[str], variants: list[str]) -> tuple[list[Result], list[str]]:
    """The results of the networks and variants asked for, in their order, and the pairs with no result."""
    got = {(r.name, r.variant): r for r in results}
    pairs = [(n, v) for n in names for v in variants]
    return [got[p] for p in pairs if p in got], [f"{n} {v}" for n, v in pairs if (n, v) not in got]


def missing_text(missing: list[str], names: list[str]) -> str:
    """The pairs with no result ("network variant"), grouped by variant: "qdq-int8-pc: every network; ..."."""
    by: dict[str, list[str]] = {}
    for pair in missing:
        name, variant = pair.rsplit(" ", 1)
        by.setdefault(variant, []).append(name)
    return "; ".join(f"{v}: {'every network' if len(ns) == len(names) else ', '.join(ns)}" for v, ns in by.items())


def commits(results: list[Result]) -> str:
    """The commits the results were measured on, as a table names them."""
    return ", ".join(dict.fromkeys(r.commit or "unknown" for r in results)) or "unknown"
