"""Single-layer workloads: a [[sweep.layer]] table to a chain of compiler.ops, its inputs and reference.

Weights, biases and requantisation come from the layer's `seed`: int8 weights uniform over
[-128, 127], int32 biases, and per-channel scales sized so that outputs spread over the int8
range rather than saturate (a test on saturated outputs would prove little).
"""
from __future__ import annotations

import math

import numpy as np

from .. import ops
from ..errors import CompileError
from ..quant import quantize_multipliers


MAX_DIM = 1 << 30           # the largest dimension compiler.ops accepts
MAX_WEIGHTS = 1 << 26       # weights are drawn (and widened to int64 by the op) in memory: bound them first
NDIM = {"conv2d": 4, "dense": 2, "max_pool2d": 4, "avg_pool2d": 4, "global_avg_pool2d": 4}


def layer_ops(p: dict) -> tuple[ops.Op, ...]:
    """The ops of one layer table (CompileError when the op refuses its parameters)."""
    rng = np.random.default_rng(p.get("seed", 0))
    kind, shape = p["op"], tuple(_dims(p["x_shape"], "x_shape", NDIM.get(p["op"])))
    if kind in ("conv2d", "dense"):
        zp_out = p.get("zp_out", 0)
        if kind == "conv2d":
            groups = p.get("groups", 1)
            kh, kw = (_count(k, "kernel") for k in _pair(p["kernel"], "kernel"))   # 0 would give fan_in 0
            if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1 or shape[1] % groups:
                raise CompileError(f"groups = {groups!r} must divide the {shape[1]} input channels")
            o = _count(p["out_channels"], "out_channels")
            w_shape = (o, shape[1] // groups, kh, kw)
        else:
            o = _count(p["out_features"], "out_features")
            w_shape = (shape[1], o)
        if math.prod(w_shape) > MAX_WEIGHTS:
            raise CompileError(f"the weights {list(w_shape)} are more than {MAX_WEIGHTS} elements")
        w = rng.integers(-128, 128, w_shape, dtype=np.int8)
        fan_in = w[0].size if kind == "conv2d" else shape[1]
        bias = rng.integers(-5000, 5000, o, dtype=np.int32)
        # |acc| is about 74 * 74 * sqrt(fan_in): scale it to a spread of some tens of steps
        m, s = quantize_multipliers(rng.uniform(0.5, 1.0, o) * 0.01 / math.sqrt(fan_in))
        q = {"x_zp": p.get("x_zp", 0), "multiplier": m, "shift": s, "zp_out": zp_out}
        if kind == "conv2d":
            op = ops.conv2d(shape, w, bias, stride=_pair(p.get("stride", 1), "stride"),
                            padding=p.get("padding", 0), dilation=_pair(p.get("dilation", 1), "dilation"),
                            groups=p.get("groups", 1), **q)
        else:
            op = ops.dense(shape, w, bias, **q)
        return (op, ops.relu(op.output.shape, zp_out)) if p.get("relu", False) else (op,)
    if kind == "global_avg_pool2d":
        return (ops.global_avg_pool2d(shape),)
    if kind in ("max_pool2d", "avg_pool2d"):
        stride = p.get("stride")
        return (getattr(ops, kind)(shape, _pair(p["kernel"], "kernel"),
                                   None if stride is None else _pair(stride, "stride"), p.get("padding", 0)),)
    if kind == "add":
        return (ops.add(shape, za=-3, zb=5, ma=32768, mb=52429, shift=16, zp_out=-10),)
    raise CompileError(f"unknown layer op {kind!r}")


def _ints(v, name: str) -> list[int]:
    if not isinstance(v, list) or not v or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise CompileError(f"{name} must be a list of integers, got {v!r}")
    return v


def _dims(v, name: str, ndim: int | None) -> list[int]:
    """A shape: positive dimensions, as many as the op takes (checked before anything is allocated)."""
    dims = _ints(v, name)
    if ndim is not None and len(dims) != ndim:
        raise CompileError(f"{name} must have {ndim} dimensions, got {v!r}")
    for i, d in enumerate(dims):
        if not 1 <= d <= MAX_DIM:
            raise CompileError(f"{name}[{i}] = {d} is out of range [1, {MAX_DIM}]")
    return dims


def _count(v, name: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_DIM:
        raise CompileError(f"{name} must be an integer in [1, {MAX_DIM}], got {v!r}")
    return v


def chain_bytes(chain: tuple[ops.Op, ...]) -> int:
    """Bytes of DDR the chain's tensors take: every input, output and weight array."""
    total = sum(t.nbytes for op in chain for t in (*op.inputs, op.output))
    return total + sum(op.weight.size for op in chain if getattr(op, "weight", None) is not None)


def _pair(v, name: str) -> tuple[int, int]:
    if isinstance(v, int) and not isinstance(v, bool):
        return v, v
    a = _ints(v, name)
    if len(a) != 2:
        raise CompileError(f"{name} must be an integer or [h, w], got {v!r}")
    return a[0], a[1]


def layer_inputs(chain: tuple[ops.Op, ...], seed: int) -> list[np.ndarray]:
    """Seeded random inputs over the whole int8 range, one per input of the chain (first op first)."""
    rng = np.random.default_rng(seed)
    tensors = list(chain[0].inputs) + [t for op in chain[1:] for t in op.inputs[1:]]
    return [rng.integers(-128, 128, t.shape, dtype=np.int8) if t.dtype == "int8"
            else rng.integers(-(1 << 20), 1 << 20, t.shape, dtype=np.int32) for t in tensors]


def layer_reference(chain: tuple[ops.Op, ...], inputs: list[np.ndarray]) -> np.ndarray:
    """The chain's result by the numpy model (compiler.reference): each op's output feeds the next."""
    k = len(chain[0].inputs)
    y = chain[0].reference(*inputs[:k])
    for op in chain[1:]:
        extra = len(op.inputs) - 1
        y = op.reference(y, *inputs[k:k + extra])
        k += extra
    return y
