"""Standard networks built in code as float ONNX models, then quantised by onnxruntime.

Nothing is downloaded: ResNet-18, ResNet-50 and MobileNetV2 are written node by
node with onnx.helper, with seeded He-initialised weights and BatchNorm omitted
(a folded BatchNorm is just another conv weight and bias), then quantised with
`onnxruntime.quantization.quantize_static` on seeded random calibration inputs,
in QOperator or QDQ format.  Needs the `onnx` extra (pip install nnp-toolchain[onnx]).

    model = models.build("resnet18", fmt="qdq", size=64, classes=10)
    graph = compiler.from_onnx(model)
"""
from __future__ import annotations

import contextlib
import logging
import math
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np

from .errors import CompileError

if TYPE_CHECKING:          # onnx is an optional extra: only its type is named here
    from onnx import ModelProto

FORMATS = ("qoperator", "qdq")
OPSET = 17


def names() -> tuple[str, ...]:
    """The standard networks build() knows (it also builds "tiny", the test model)."""
    return tuple(n for n in _NETWORKS if n != "tiny")


def build(name: str, fmt: str = "qoperator", size: int = 224, classes: int = 1000, seed: int = 0,
          *, per_channel: bool = True, samples: int = 4) -> ModelProto:
    """The int8 onnx.ModelProto of a named network, quantised by onnxruntime in `fmt`."""
    return quantize(float_model(name, size=size, classes=classes, seed=seed), fmt, seed=seed,
                    per_channel=per_channel, samples=samples)


def float_model(name: str, size: int = 224, classes: int = 1000, seed: int = 0) -> ModelProto:
    """The float32 onnx.ModelProto of a named network, input [1, 3, size, size]."""
    if name not in _NETWORKS:
        raise CompileError(f"unknown network {name!r}: expected one of {names() + ('tiny',)}")
    _check_int("size", size, 8 if name == "tiny" else 32)
    _check_int("classes", classes, 1)
    net = Net(name, (1, 3, size, size), seed)
    _NETWORKS[name](net, classes)
    return net.model()


def tiny(fmt: str = "qoperator", size: int = 16, classes: int = 10, seed: int = 0, *,
         per_channel: bool = True, samples: int = 4) -> ModelProto:
    """A small quantised model for tests and the demo: convs, a residual add, pooling and a gemm."""
    _check_int("size", size, 8)
    return build("tiny", fmt, size, classes, seed, per_channel=per_channel, samples=samples)


def quantize(model: ModelProto, fmt: str = "qoperator", *, seed: int = 0, samples: int = 4,
             per_channel: bool = True, activations: str = "int8", weights: str = "int8") -> ModelProto:
    """Quantise a float model with onnxruntime's quantize_static on seeded N(0, 1) calibration inputs
    (activations and weights "int8" or "uint8")."""
    onnx, qz = _onnx(), _quantization()
    if fmt not in FORMATS:
        raise CompileError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    _check_int("samples", samples, 1)
    quant_format = qz.QuantFormat.QOperator if fmt == "qoperator" else qz.QuantFormat.QDQ
    reader = RandomReader(model, samples, seed)
    with tempfile.TemporaryDirectory(prefix="nnp-quant-") as tmp, quiet():
        src, dst = Path(tmp) / "float.onnx", Path(tmp) / "int8.onnx"
        onnx.save(model, str(src))      # quantize_static edits a ModelProto in place: give it a file
        qz.quantize_static(str(src), str(dst), reader, quant_format=quant_format, per_channel=per_channel,
                           activation_type=_qtype(qz, "activations", activations),
                           weight_type=_qtype(qz, "weights", weights))
        return onnx.load(str(dst))


def _qtype(qz, what: str, dtype: str):
    """onnxruntime's QuantType for "int8" or "uint8"."""
    if dtype not in ("int8", "uint8"):
        raise CompileError(f"{what} must be 'int8' or 'uint8', got {dtype!r}")
    return qz.QuantType.QInt8 if dtype == "int8" else qz.QuantType.QUInt8


class RandomReader:
    """A CalibrationDataReader over seeded standard-normal inputs for every float graph input."""

    def __init__(self, model, samples: int, seed: int):
        inits = {t.name for t in model.graph.initializer}
        rng = np.random.default_rng(seed)
        shapes = {vi.name: tuple(d.dim_value or 1 for d in vi.type.tensor_type.shape.dim)
                  for vi in model.graph.input if vi.name not in inits}
        self._batches = [{n: rng.standard_normal(s).astype(np.float32) for n, s in shapes.items()}
                         for _ in range(samples)]
        self._it = iter(self._batches)

    def get_next(self) -> dict | None:
        """The next calibration batch, or None at the end."""
        return next(self._it, None)

    def rewind(self) -> None:
        """Start again from the first batch."""
        self._it = iter(self._batches)


# ---------------------------------------------------------------- the builder

class Net:
    """Writes a float ONNX graph node by node; each method returns its output tensor name."""

    def __init__(self, name: str, input_shape: tuple[int, ...], seed: int = 0, input_name: str = "input"):
        _onnx()     # a clear error now rather than an ImportError at the first node
        self.name = name
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.shapes: dict[str, tuple[int, ...]] = {input_name: tuple(input_shape)}
        self.input = input_name
        self.outputs: list[str] = []
        self._count: dict[str, int] = {}

    def _fresh(self, kind: str) -> str:
        self._count[kind] = self._count.get(kind, 0) + 1
        return f"{kind}{self._count[kind]}"

    def _init(self, name: str, a: np.ndarray) -> str:
        from onnx import numpy_helper
        self.inits.append(numpy_helper.from_array(np.asarray(a), name))
        return name

    def _node(self, op: str, inputs: list[str], shape: tuple[int, ...], name: str | None = None, **attrs) -> str:
        from onnx import helper
        name = name or self._fresh(op.lower())
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        self.shapes[name] = tuple(shape)
        return name

    def conv(self, x: str, out: int, k: int = 3, stride: int = 1, pad: int | None = None, dilation: int = 1,
             groups: int = 1, act: str | None = "relu", bias: bool = True, gain: float = 1.0) -> str:
        """Conv with He-initialised weights (std sqrt(2 / fan_in) * gain), then relu / relu6 / nothing."""
        n, c, h, w = self.shapes[x]
        pad = dilation * (k - 1) // 2 if pad is None else pad
        span = dilation * (k - 1) + 1
        oh, ow = (h + 2 * pad - span) // stride + 1, (w + 2 * pad - span) // stride + 1
        name = self._fresh("conv")
        fan_in = c // groups * k * k
        wt = self.rng.normal(0.0, gain * math.sqrt(2.0 / fan_in), (out, c // groups, k, k)).astype(np.float32)
        ins = [x, self._init(f"{name}.w", wt)]
        if bias:
            ins.append(self._init(f"{name}.b", self.rng.normal(0.0, 0.05, out).astype(np.float32)))
        y = self._node("Conv", ins, (n, out, oh, ow), name, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[pad] * 4, dilations=[dilation, dilation], group=groups)
        return self.activation(y, act)

    def activation(self, x: str, act: str | None) -> str:
        """relu, relu6 (Clip 0..6) or nothing."""
        if act is None:
            return x
        if act == "relu":
            return self.relu(x)
        if act == "relu6":
            return self.clip(x, 0.0, 6.0)
        raise CompileError(f"act must be 'relu', 'relu6' or None, got {act!r}")

    def relu(self, x: str) -> str:
        return self._node("Relu", [x], self.shapes[x])

    def clip(self, x: str, lo: float, hi: float) -> str:
        name = self._fresh("clip")
        lo_n = self._init(f"{name}.min", np.array(lo, dtype=np.float32))
        hi_n = self._init(f"{name}.max", np.array(hi, dtype=np.float32))
        return self._node("Clip", [x, lo_n, hi_n], self.shapes[x], name)

    def add(self, a: str, b: str, act: str | None = None) -> str:
        return self.activation(self._node("Add", [a, b], self.shapes[a]), act)

    def mul(self, a: str, b: str) -> str:
        return self._node("Mul", [a, b], self.shapes[a])

    def max_pool(self, x: str, k: int, stride: int, pad: int = 0) -> str:
        return self._pool("MaxPool", x, k, stride, pad)

    def avg_pool(self, x: str, k: int, stride: int, pad: int = 0, count_include_pad: int = 0) -> str:
        return self._pool("AveragePool", x, k, stride, pad, count_include_pad=count_include_pad)

    def _pool(self, op: str, x: str, k: int, stride: int, pad: int, **attrs) -> str:
        n, c, h, w = self.shapes[x]
        shape = (n, c, (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1)
        return self._node(op, [x], shape, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, **attrs)

    def global_avg_pool(self, x: str) -> str:
        n, c = self.shapes[x][:2]
        return self._node("GlobalAveragePool", [x], (n, c, 1, 1))

    def reduce_mean(self, x: str, keepdims: int = 0) -> str:
        """ReduceMean over H and W (axes [2, 3]): the head torchvision's MnasNet and ShuffleNetV2 export."""
        n, c = self.shapes[x][:2]
        return self._node("ReduceMean", [x], (n, c, 1, 1) if keepdims else (n, c), axes=[2, 3], keepdims=keepdims)

    def flatten(self, x: str) -> str:
        s = self.shapes[x]
        return self._node("Flatten", [x], (s[0], int(np.prod(s[1:]))), axis=1)

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        name = self._fresh("reshape")
        target = self._init(f"{name}.shape", np.array(shape, dtype=np.int64))
        real = list(shape)
        if -1 in real:
            real[real.index(-1)] = int(np.prod(self.shapes[x])) // -int(np.prod(shape))
        return self._node("Reshape", [x, target], tuple(real), name)

    def concat(self, xs: list[str], axis: int = 1) -> str:
        shape = list(self.shapes[xs[0]])
        shape[axis] = sum(self.shapes[x][axis] for x in xs)
        return self._node("Concat", xs, tuple(shape), axis=axis)

    def batch_norm(self, x: str, epsilon: float = 1e-5, act: str | None = None) -> str:
        """BatchNormalization in inference with seeded statistics (scale ~ N(1, 0.2), B and mean ~ N(0, 0.3),
        var ~ U(0.2, 2)), then relu / relu6 / nothing: one a conv cannot absorb when it follows a Concat."""
        c = self.shapes[x][1]
        name = self._fresh("bn")
        stats = [self.rng.normal(1.0, 0.2, c), self.rng.normal(0.0, 0.3, c), self.rng.normal(0.0, 0.3, c),
                 self.rng.uniform(0.2, 2.0, c)]
        ins = [x] + [self._init(f"{name}.{k}", v.astype(np.float32)) for k, v in zip(("scale", "b", "mean", "var"),
                                                                                     stats)]
        y = self._node("BatchNormalization", ins, self.shapes[x], name, epsilon=float(epsilon))
        return self.activation(y, act)

    def gemm(self, x: str, out: int, act: str | None = None) -> str:
        """Gemm with weight [out, K] (transB = 1, as exported by PyTorch) and a bias."""
        n, k = self.shapes[x]
        name = self._fresh("gemm")
        wt = self.rng.normal(0.0, math.sqrt(2.0 / k), (out, k)).astype(np.float32)
        b = self.rng.normal(0.0, 0.05, out).astype(np.float32)
        y = self._node("Gemm", [x, self._init(f"{name}.w", wt), self._init(f"{name}.b", b)], (n, out), name,
                       transB=1)
        return self.activation(y, act)

    def matmul(self, x: str, out: int) -> str:
        """MatMul with a weight [K, out] (no bias)."""
        n, k = self.shapes[x]
        name = self._fresh("matmul")
        wt = self.rng.normal(0.0, math.sqrt(2.0 / k), (k, out)).astype(np.float32)
        return self._node("MatMul", [x, self._init(f"{name}.w", wt)], (n, out), name)

    def output(self, *xs: str) -> None:
        self.outputs.extend(xs)

    def model(self) -> ModelProto:
        """The float onnx.ModelProto (checked by onnx.checker)."""
        import onnx
        from onnx import TensorProto, helper
        outputs = self.outputs or [self.nodes[-1].output[0]]
        graph = helper.make_graph(
            self.nodes, self.name, [helper.make_tensor_value_info(self.input, TensorProto.FLOAT,
                                                                  list(self.shapes[self.input]))],
            [helper.make_tensor_value_info(o, TensorProto.FLOAT, list(self.shapes[o])) for o in outputs],
            self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name="nnp-toolchain compiler.models")
        model.ir_version = 8     # readable by every onnxruntime >= 1.17
        onnx.checker.check_model(model)
        return model


# ---------------------------------------------------------------- the networks

def _resnet_basic(net: Net, x: str, out: int, stride: int) -> str:
    y = net.conv(x, out, 3, stride)
    y = net.conv(y, out, 3, 1, act=None, gain=0.5)   # without BatchNorm, keep the residual sum's growth slow
    short = x if stride == 1 and net.shapes[x][1] == out else net.conv(x, out, 1, stride, act=None)
    return net.add(y, short, act="relu")


def _resnet_bottleneck(net: Net, x: str, width: int, stride: int) -> str:
    y = net.conv(x, width, 1)
    y = net.conv(y, width, 3, stride)
    y = net.conv(y, width * 4, 1, act=None, gain=0.5)
    short = x if stride == 1 and net.shapes[x][1] == width * 4 else net.conv(x, width * 4, 1, stride, act=None)
    return net.add(y, short, act="relu")


def _resnet(blocks: list[int], bottleneck: bool):
    def make(net: Net, classes: int) -> None:
        x = net.conv(net.input, 64, 7, 2, 3)
        x = net.max_pool(x, 3, 2, 1)
        for stage, count in enumerate(blocks):
            width = 64 << stage
            for i in range(count):
                stride = 2 if stage > 0 and i == 0 else 1
                x = (_resnet_bottleneck if bottleneck else _resnet_basic)(net, x, width, stride)
        net.output(net.gemm(net.flatten(net.global_avg_pool(x)), classes))
    return make


# MobileNetV2 inverted residual settings: expansion t, channels c, repeats n, first stride s.
_MBV2 = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]


def _mobilenet_v2(net: Net, classes: int) -> None:
    x = net.conv(net.input, 32, 3, 2, act="relu6")
    for t, c, n, s in _MBV2:
        for i in range(n):
            stride = s if i == 0 else 1
            cin = net.shapes[x][1]
            y = net.conv(x, cin * t, 1, act="relu6") if t != 1 else x
            y = net.conv(y, cin * t, 3, stride, groups=cin * t, act="relu6")
            y = net.conv(y, c, 1, act=None)
            x = net.add(y, x) if stride == 1 and cin == c else y
    x = net.conv(x, 1280, 1, act="relu6")
    net.output(net.gemm(net.flatten(net.global_avg_pool(x)), classes))


def _tiny(net: Net, classes: int) -> None:
    x = net.conv(net.input, 8, 3, 1)
    x = net.max_pool(x, 2, 2)
    y = net.conv(x, 8, 3, 1, act=None)
    x = net.add(y, x, act="relu")
    x = net.conv(x, 16, 3, 2)
    net.output(net.gemm(net.flatten(net.global_avg_pool(x)), classes))


_NETWORKS = {"resnet18": _resnet([2, 2, 2, 2], False), "resnet50": _resnet([3, 4, 6, 3], True),
             "mobilenetv2": _mobilenet_v2, "tiny": _tiny}


# ---------------------------------------------------------------- helpers

def _check_int(name: str, v, lo: int) -> None:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < lo:
        raise CompileError(f"{name} must be an integer >= {lo}, got {v!r}")


def _onnx():
    try:
        import onnx
    except ImportError:
        raise CompileError("compiler.models needs onnx: pip install nnp-toolchain[onnx]") from None
    return onnx


def _quantization():
    try:
        from onnxruntime import quantization
    except ImportError:
        raise CompileError("compiler.models needs onnxruntime: pip install nnp-toolchain[onnx]") from None
    return quantization


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence quantize_static's advice to pre-process (logged on the root logger)."""
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)
