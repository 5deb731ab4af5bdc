"""The data-movement ops: Transpose, Slice (Split is several), Pad with a constant, nearest and linear Resize,
and Strided, a chain of Slice and Transpose (with reshapes between) composed into one copy (compose).

Each but linear Resize moves elements without arithmetic: its reference is numpy indexing, and the
lowering (compiler/lowering/movement.py) is DMA boxes staged through VBUF.  Concat (ops/layout.py) is
lowered the same way when its inputs cannot share the output's bytes.  Linear Resize (ResizeLinear)
mixes four neighbours as onnxruntime's bilinear kernels do, and runs on the VU (vu.lerp).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import CompileError
from ..reference import quantize_f32
from .base import INT8, INT32, Op, Tensor
from .checks import int_arg, shape_arg
from .layout import check_dtype

COORDINATE_MODES = ("half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric", "tf_half_pixel_for_nn")
NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")


@dataclass(frozen=True, eq=False, repr=False)
class Transpose(Op):
    """y = x.transpose(perm): output axis k is input axis perm[k]."""

    in_shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="transpose")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        check_dtype(self.dtype)
        try:
            perm = tuple(int(p) for p in self.perm)
        except (TypeError, ValueError):
            raise CompileError(f"perm must be a sequence of axes, got {self.perm!r}") from None
        if sorted(perm) != list(range(len(self.in_shape))):
            raise CompileError(f"perm {list(perm)} is not a permutation of the {len(self.in_shape)} axes of "
                               f"{list(self.in_shape)}")
        object.__setattr__(self, "perm", perm)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", tuple(self.in_shape[p] for p in self.perm), self.dtype)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.transpose(self.perm))


@dataclass(frozen=True, eq=False, repr=False)
class Slice(Op):
    """y[i0, i1, ...] = x[start0 + i0 * step0, start1 + i1 * step1, ...], counts[k] elements along axis k.

    `slice_op` makes one from ONNX's starts / ends / axes / steps (clamped as ONNX defines them).
    """

    in_shape: tuple[int, ...]
    starts: tuple[int, ...]
    steps: tuple[int, ...]
    counts: tuple[int, ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="slice")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        check_dtype(self.dtype)
        n = len(self.in_shape)
        for name in ("starts", "steps", "counts"):
            v = tuple(int_arg(f"{name}[{k}]", x) for k, x in enumerate(_seq(name, getattr(self, name))))
            if len(v) != n:
                raise CompileError(f"{name} has {len(v)} entries, the input {list(self.in_shape)} {n} axes")
            object.__setattr__(self, name, v)
        for k, (d, s, st, c) in enumerate(zip(self.in_shape, self.starts, self.steps, self.counts)):
            if st == 0 or c < 1 or not 0 <= s < d or not 0 <= s + (c - 1) * st < d:
                raise CompileError(f"slice axis {k}: start {s}, step {st}, {c} elements leave the axis of {d} "
                                   f"(or select none)")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.counts, self.dtype)

    def view_offset(self) -> int | None:
        """The byte offset of y in x when y is one contiguous run of x's elements (a channel range of one
        image, a band of whole rows), else None: such a slice moves nothing (network.storage.alias)."""
        a = len(self.in_shape) - 1
        while a >= 0 and self.counts[a] == self.in_shape[a] and (self.steps[a] == 1 or self.counts[a] == 1):
            a -= 1
        if a >= 0 and (any(c != 1 for c in self.counts[:a]) or (self.steps[a] != 1 and self.counts[a] != 1)):
            return None
        strides = [math.prod(self.in_shape[k + 1:]) for k in range(len(self.in_shape))]
        return sum(s * st for s, st in zip(self.starts, strides)) * np.dtype(self.dtype).itemsize

    def min_read_bytes(self, burst: int) -> int:
        """The least DDR bytes the slice reads: its elements, or along the innermost axis, when its step
        is shorter than a DDR burst, the whole span (every burst of it holds a selected element)."""
        return _read_bytes([(c, st) for c, st in zip(self.counts, self.steps)], self.dtype, burst)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        index = np.ix_(*[s + st * np.arange(c) for s, st, c in zip(self.starts, self.steps, self.counts)])
        return np.ascontiguousarray(x[index])


def _read_bytes(axes: list[tuple[int, int]], dtype: str, burst: int) -> int:
    """Bytes read when axis k takes axes[k] = (count, step) elements, the innermost one's span whole
    when its step is shorter than a burst."""
    size = np.dtype(dtype).itemsize
    n = [c for c, _ in axes]
    c, st = axes[-1]
    if abs(st) * size < burst:
        n[-1] = (c - 1) * abs(st) + 1
    return math.prod(n) * size


def _seq(name: str, v) -> tuple:
    try:
        return tuple(v)
    except TypeError:
        raise CompileError(f"{name} must be a sequence, got {v!r}") from None


def slice_op(in_shape, starts, ends, axes=None, steps=None, dtype: str = "int8") -> Slice:
    """ONNX Slice: starts / ends per axis in `axes` (default all), negative counting from the end,
    clamped to [0, dim] (to [-1, dim - 1] for a negative step); CompileError for an empty result."""
    in_shape = shape_arg("in_shape", in_shape)
    n = len(in_shape)
    starts, ends = _seq("starts", starts), _seq("ends", ends)
    axes = tuple(range(len(starts))) if axes is None else _seq("axes", axes)
    steps = (1,) * len(starts) if steps is None else _seq("steps", steps)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise CompileError(f"slice: starts, ends, axes and steps have {len(starts)}, {len(ends)}, {len(axes)} "
                           f"and {len(steps)} entries: they must agree")
    first, step, count = [0] * n, [1] * n, list(in_shape)
    seen = set()
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int_arg("axes", a, -n, n - 1) % n
        if a in seen:
            raise CompileError(f"slice: axis {a} is given twice")
        seen.add(a)
        d, s, e, st = in_shape[a], int(s), int(e), int(st)
        if st == 0:
            raise CompileError(f"slice: step 0 on axis {a}")
        s, e = s + d if s < 0 else s, e + d if e < 0 else e
        lo, hi = (0, d) if st > 0 else (-1, d - 1)
        s, e = min(max(s, lo), hi), min(max(e, lo), hi)
        c = max(0, -(-(e - s) // st)) if st > 0 else max(0, -(-(s - e) // -st))
        if c == 0:
            raise CompileError(f"slice: axis {a} selects no element (start {s}, end {e}, step {st} of {d}): "
                               "an empty tensor")
        first[a], step[a], count[a] = s, st, c
    return Slice(in_shape, tuple(first), tuple(step), tuple(count), dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Pad(Op):
    """ONNX Pad, constant mode: pads = (begin_0, ..., begin_n-1, end_0, ..., end_n-1), negative crops;
    the new elements are `value` (a quantised graph's zero point)."""

    in_shape: tuple[int, ...]
    pads: tuple[int, ...]
    value: int = 0
    dtype: str = "int8"
    kind: str = field(init=False, default="pad")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        check_dtype(self.dtype)
        n = len(self.in_shape)
        pads = tuple(int_arg(f"pads[{k}]", p) for k, p in enumerate(_seq("pads", self.pads)))
        if len(pads) != 2 * n:
            raise CompileError(f"pads has {len(pads)} entries, expected {2 * n} for {n} axes")
        object.__setattr__(self, "pads", pads)
        lo, hi = INT8 if self.dtype == "int8" else INT32
        object.__setattr__(self, "value", int_arg("value", self.value, lo, hi))
        for k, d in enumerate(self.output.shape):
            if d < 1:
                raise CompileError(f"pad axis {k}: pads {pads[k]}, {pads[k + n]} leave {d} elements of "
                                   f"{self.in_shape[k]}")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        n = len(self.in_shape)
        return Tensor("y", tuple(d + self.pads[k] + self.pads[k + n] for k, d in enumerate(self.in_shape)),
                      self.dtype)

    def min_read_bytes(self, burst: int) -> int:
        """The least DDR bytes the pad reads: the input less what negative pads crop."""
        n = len(self.in_shape)
        kept = [d + min(0, self.pads[k]) + min(0, self.pads[k + n]) for k, d in enumerate(self.in_shape)]
        return math.prod(kept) * np.dtype(self.dtype).itemsize

    def _compute(self, x: np.ndarray) -> np.ndarray:
        n = len(self.in_shape)
        widths = [(max(0, self.pads[k]), max(0, self.pads[k + n])) for k in range(n)]
        padded = np.pad(x, widths, constant_values=self.value)      # then negative pads crop the padded tensor
        crop = tuple(slice(max(0, -self.pads[k]), d - max(0, -self.pads[k + n])) for k, d in enumerate(padded.shape))
        return np.ascontiguousarray(padded[crop]).astype(self.dtype)


@dataclass(frozen=True, eq=False, repr=False)
class Resize(Op):
    """Nearest-neighbour resize by index maps: y[o0, o1, ...] = x[maps[0][o0], maps[1][o1], ...].

    `resize_nearest` computes the maps as onnxruntime's Resize does from its scales, coordinate
    transformation mode and nearest mode.
    """

    in_shape: tuple[int, ...]
    maps: tuple[tuple[int, ...], ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="resize")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        check_dtype(self.dtype)
        maps = tuple(tuple(int(i) for i in m) for m in _seq("maps", self.maps))
        if len(maps) != len(self.in_shape):
            raise CompileError(f"maps has {len(maps)} entries, the input {list(self.in_shape)} "
                               f"{len(self.in_shape)} axes")
        for k, (m, d) in enumerate(zip(maps, self.in_shape)):
            if not m or min(m) < 0 or max(m) >= d:
                raise CompileError(f"resize axis {k}: the index map must be non-empty and index the axis "
                                   f"of {d}")
        object.__setattr__(self, "maps", maps)

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", tuple(len(m) for m in self.maps), self.dtype)

    def min_read_bytes(self, burst: int) -> int:
        """The least DDR bytes the resize reads: the input indices its maps name (the innermost axis's
        span whole when they step by less than a burst)."""
        last = sorted(set(self.maps[-1]))
        step = max((b - a for a, b in zip(last, last[1:])), default=1)
        axes = [(len(set(m)), 1) for m in self.maps[:-1]] + [(len(last), step)]
        return _read_bytes(axes, self.dtype, burst)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x[np.ix_(*[np.asarray(m) for m in self.maps])])


def _original(mode: str, o: int, scale: np.float32, n_out: int, n_in: int) -> np.float32:
    """onnxruntime's GetOriginalCoordinateFromResizedCoordinate, in float32 as it computes."""
    f, half = np.float32, np.float32(0.5)
    x = f(o)
    if mode == "asymmetric":
        return x / scale
    if mode == "pytorch_half_pixel":
        return (x + half) / scale - half if n_out > 1 else f(0)
    if mode == "tf_half_pixel_for_nn":
        return (x + half) / scale
    if mode == "align_corners":
        return f(0) if n_out == 1 else x * (f(n_in) - f(1)) / (f(n_out) - f(1))
    return (x + half) / scale - half          # half_pixel


def _nearest(mode: str, x: np.float32) -> int:
    """onnxruntime's GetNearestPixelFromOriginal (std::round rounds half away from zero)."""
    v = float(x)
    if mode == "floor":
        return math.floor(v)
    if mode == "ceil":
        return math.ceil(v)
    away = int(math.copysign(math.floor(abs(v) + 0.5), v))
    if mode == "round_prefer_floor" and np.float32(int(v)) + np.float32(0.5) == x:
        return math.floor(v)
    return away


def nearest_map(n_in: int, n_out: int, scale: float, coordinate_mode: str, nearest_mode: str) -> tuple[int, ...]:
    """The input index of every output index along one axis, as onnxruntime's nearest Resize takes it."""
    if coordinate_mode not in COORDINATE_MODES:
        raise CompileError(f"coordinate_transformation_mode {coordinate_mode!r}: expected one of "
                           f"{', '.join(COORDINATE_MODES)}")
    if nearest_mode not in NEAREST_MODES:
        raise CompileError(f"nearest_mode {nearest_mode!r}: expected one of {', '.join(NEAREST_MODES)}")
    s = np.float32(scale)
    if s == 1:                  # onnxruntime maps one to one without the transformation
        return tuple(range(n_out))
    out = []
    for o in range(n_out):
        i = _nearest(nearest_mode, _original(coordinate_mode, o, s, n_out, n_in))
        out.append(min(max(i, 0), n_in - 1))
    return tuple(out)


def resize_nearest(in_shape, out_shape, scales, coordinate_mode: str = "half_pixel",
                   nearest_mode: str = "round_prefer_floor", dtype: str = "int8") -> Resize:
    """A nearest Resize to `out_shape` with onnxruntime's per-axis float32 `scales`."""
    in_shape, out_shape = shape_arg("in_shape", in_shape), shape_arg("out_shape", out_shape, len(in_shape))
    scales = _seq("scales", scales)
    if len(scales) != len(in_shape):
        raise CompileError(f"scales has {len(scales)} entries, the input {len(in_shape)} axes")
    maps = tuple(nearest_map(a, b, s, coordinate_mode, nearest_mode) for a, b, s in zip(in_shape, out_shape, scales))
    return Resize(in_shape, maps, dtype)


LINEAR_FORMS = ("float", "fixed", "qdq")
"""How onnxruntime computes a linear Resize: on the int8 values in float32, the result truncated (its NCHW
kernel, UpsampleBilinear); on them in fixed point, weights in 1/1024, the sum truncated (NhwcUpsampleBilinearInteger,
an int8 Resize its layout pass moved to NHWC); in float32 on the dequantised values, then QuantizeLinear (QDQ)."""
ONE_10 = 1 << 10             # the fixed-point weights' unit


@dataclass(frozen=True)
class LinearAxis:
    """One interpolated axis: output index o mixes input indices i1[o] and i2[o] with weights w2[o] and w1[o]
    (float32, or ints in 1/1024 for the fixed form), as onnxruntime's SetupUpsampleBilinear(Integer) makes them."""

    i1: np.ndarray
    i2: np.ndarray
    w1: np.ndarray           # the weight of i2 (onnxruntime's d1 = |in - i1|)
    w2: np.ndarray           # the weight of i1 (d2 = |in - i2|)


def linear_axis(n_in: int, n_out: int, scale: float, coordinate_mode: str, fixed: bool = False) -> LinearAxis:
    """onnxruntime's bilinear indices and weights along one axis (float32; fixed: in 1/1024, truncated)."""
    if coordinate_mode not in COORDINATE_MODES or coordinate_mode == "tf_half_pixel_for_nn":
        modes = ", ".join(m for m in COORDINATE_MODES if m != "tf_half_pixel_for_nn")
        raise CompileError(f"coordinate_transformation_mode {coordinate_mode!r} for a linear resize: expected one "
                           f"of {modes}")
    s, f = np.float32(scale), np.float32
    i1, i2, w1, w2 = (np.zeros(n_out, np.int64) for _ in range(4))
    fw1, fw2 = np.zeros(n_out, f), np.zeros(n_out, f)
    for o in range(n_out):
        v = f(o) if s == 1 else _original(coordinate_mode, o, s, n_out, n_in)
        v = max(f(0), min(v, f(n_in - 1)))
        a = min(int(v), n_in - 1)
        b = min(a + 1, n_in - 1)
        i1[o], i2[o] = a, b
        v10 = int(f(v * f(ONE_10)))          # static_cast<int32_t>(in * (1 << 10)), truncated
        w1[o], w2[o] = (abs(v10 - a * ONE_10), abs(v10 - b * ONE_10)) if a != b else (ONE_10 // 2, ONE_10 // 2)
        fw1[o], fw2[o] = (abs(v - f(a)), abs(v - f(b))) if a != b else (f(0.5), f(0.5))
    return LinearAxis(i1, i2, w1, w2) if fixed else LinearAxis(i1, i2, fw1, fw2)


@dataclass(frozen=True, eq=False, repr=False)
class ResizeLinear(Op):
    """Linear Resize of a 4-D tensor along two axes (ay outer, ax inner), the others kept, as onnxruntime computes:

    y = w11 * X11 + w21 * X21 + w12 * X12 + w22 * X22 (X21 the ax neighbour, X12 the ay one), w11 = wx2 * wy2 ...;
    float: in float32, summed in that order, of f32(x - za), truncated, + zp_out; fixed: in integers, the sum
    divided by 2**20 toward zero, + zp_out; qdq: in float32 of f32(x - za) * scale_in, QuantizeLinear(scale_out,
    zp_out).  Then clipped to [lo, hi].  `resize_linear` makes one from onnxruntime's scales and layout.
    """

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    axes: tuple[int, int]
    scales: tuple[float, float]
    coordinate_mode: str = "half_pixel"
    form: str = "float"
    za: int = 0
    zp_out: int = 0
    scale_in: float = 1.0
    scale_out: float = 1.0
    lo: int = -128
    hi: int = 127
    kind: str = field(init=False, default="resize_linear")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape, 4))
        object.__setattr__(self, "out_shape", shape_arg("out_shape", self.out_shape, 4))
        if self.form not in LINEAR_FORMS:
            raise CompileError(f"form {self.form!r}: expected one of {', '.join(LINEAR_FORMS)}")
        ay, ax = (int_arg("axes", a, 0, 3) for a in _seq("axes", self.axes))
        if ay == ax:
            raise CompileError(f"axes {[ay, ax]}: two different axes")
        object.__setattr__(self, "axes", (ay, ax))
        for k, (a, b) in enumerate(zip(self.in_shape, self.out_shape)):
            if k not in (ay, ax) and a != b:
                raise CompileError(f"resize axis {k}: {a} -> {b}, but only axes {ay} and {ax} are interpolated")
        for name in ("za", "zp_out"):
            object.__setattr__(self, name, int_arg(name, getattr(self, name), -256, 255))
        object.__setattr__(self, "lo", int_arg("lo", self.lo, *INT8))
        object.__setattr__(self, "hi", int_arg("hi", self.hi, self.lo, INT8[1]))
        for name in ("scale_in", "scale_out"):
            v = np.float32(getattr(self, name))
            if not (np.isfinite(v) and v > 0):
                raise CompileError(f"{name} = {getattr(self, name)!r} must be a positive finite float32")
            object.__setattr__(self, name, v)
        self.tables()           # checks the coordinate mode

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, "int8"),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.out_shape, "int8")

    def tables(self) -> tuple[LinearAxis, LinearAxis]:
        """(the ay axis's, the ax axis's) indices and weights."""
        return tuple(linear_axis(self.in_shape[a], self.out_shape[a], s, self.coordinate_mode, self.form == "fixed")
                     for a, s in zip(self.axes, self.scales))

    def _compute(self, x: np.ndarray) -> np.ndarray:
        ty, tx = self.tables()
        v = np.moveaxis(x.astype(np.int64) - self.za, self.axes, (2, 3))
        taps = [v[:, :, iy][:, :, :, ix] for iy in (ty.i1, ty.i2) for ix in (tx.i1, tx.i2)]   # 11, 21, 12, 22
        wy = (ty.w2[:, None], ty.w1[:, None])
        wx = (tx.w2[None, :], tx.w1[None, :])
        weights = [wy[j] * wx[i] for j in (0, 1) for i in (0, 1)]
        if self.form == "fixed":
            total = sum(w * t for w, t in zip(weights, taps))
            y = np.sign(total) * (np.abs(total) >> 20) + self.zp_out       # C's division: toward zero
        else:
            f = np.float32
            data = [t.astype(f) * (self.scale_in if self.form == "qdq" else f(1)) for t in taps]
            r = f(0)
            for k, (w, t) in enumerate(zip(weights, data)):
                p = (w.astype(f) * t).astype(f)
                r = p if k == 0 else (r + p).astype(f)
            if self.form == "qdq":
                y = quantize_f32(r, self.scale_out, self.zp_out).astype(np.int64)
            else:
                y = np.trunc(r).astype(np.int64) + self.zp_out
        return np.ascontiguousarray(np.moveaxis(np.clip(y, self.lo, self.hi).astype(np.int8), (2, 3), self.axes))


def resize_linear(in_shape, out_shape, scales, coordinate_mode: str = "half_pixel", *, layout: str = "nchw",
                  quantized: bool = False, **kw) -> ResizeLinear:
    """onnxruntime's linear Resize of an NCHW tensor with per-axis float32 `scales`, run in `layout`.

    An int8 Resize in NCHW is its float kernel; one its layout pass moved to NHWC the fixed-point kernel,
    unless the height's scale is 1: then the kernel takes (N, H, W, C) for (N, C, H, W) and interpolates W and C
    (C by a scale of 1) in float.  quantized: the QDQ float form (DQ -> Resize -> Q), same axes.
    """
    in_shape, out_shape = shape_arg("in_shape", in_shape, 4), shape_arg("out_shape", out_shape, 4)
    s = tuple(np.float32(v) for v in _seq("scales", scales))
    if len(s) != 4 or s[0] != 1 or s[1] != 1:
        raise CompileError(f"scales {[float(v) for v in s]}: a linear resize takes [1, 1, scale_h, scale_w]")
    if layout not in ("nchw", "nhwc"):
        raise CompileError(f"layout {layout!r}: expected nchw or nhwc")
    form = "qdq" if quantized else "float"
    axes, pair = (2, 3), (s[2], s[3])
    if layout == "nhwc" and s[2] == 1:
        axes, pair = (3, 1), (s[3], np.float32(1))
    elif layout == "nhwc" and not quantized:
        form = "fixed"
    return ResizeLinear(in_shape, out_shape, axes, pair, coordinate_mode, form, **kw)


@dataclass(frozen=True, eq=False, repr=False)
class Strided(Op):
    """y[i0, i1, ...] = x.flat[base + i0 * strides0 + i1 * strides1 + ...]: a chain of Slice, Transpose and the
    reshapes between them as one copy (compose), which reads its input once and stores no intermediate."""

    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    base: int
    strides: tuple[int, ...]
    dtype: str = "int8"
    kind: str = field(init=False, default="strided")

    def __post_init__(self):
        object.__setattr__(self, "in_shape", shape_arg("in_shape", self.in_shape))
        object.__setattr__(self, "out_shape", shape_arg("out_shape", self.out_shape))
        check_dtype(self.dtype)
        strides = tuple(int_arg(f"strides[{k}]", v) for k, v in enumerate(_seq("strides", self.strides)))
        if len(strides) != len(self.out_shape):
            raise CompileError(f"strides has {len(strides)} entries, the output {list(self.out_shape)} "
                               f"{len(self.out_shape)} axes")
        object.__setattr__(self, "strides", strides)
        lo = self.base + sum(min(0, (n - 1) * st) for n, st in zip(self.out_shape, strides))
        hi = self.base + sum(max(0, (n - 1) * st) for n, st in zip(self.out_shape, strides))
        if lo < 0 or hi >= math.prod(self.in_shape):
            raise CompileError(f"a strided copy at {self.base} by {list(strides)} over {list(self.out_shape)} reads "
                               f"elements {lo}..{hi}, outside the {math.prod(self.in_shape)} of {list(self.in_shape)}")

    @property
    def inputs(self) -> tuple[Tensor, ...]:
        return (Tensor("x", self.in_shape, self.dtype),)

    @property
    def output(self) -> Tensor:
        return Tensor("y", self.out_shape, self.dtype)

    def min_read_bytes(self, burst: int) -> int:
        """The least DDR bytes the copy reads: its elements, the dim of the shortest stride taken as the
        innermost (its whole span when that stride is shorter than a burst)."""
        dims = sorted(((n, st) for n, st in zip(self.out_shape, self.strides) if n > 1), key=lambda d: -abs(d[1]))
        return _read_bytes(dims or [(1, 1)], self.dtype, burst)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(x.reshape(-1)[_offsets(self.out_shape, self.base, self.strides)])


def _offsets(shape: tuple[int, ...], base: int, strides: tuple[int, ...]) -> np.ndarray:
    """base + sum(i_k * strides_k) at every index i of `shape`, as an int64 array of that shape."""
    out = np.full(shape, base, np.int64)
    for k, (n, st) in enumerate(zip(shape, strides)):
        out += (np.arange(n, dtype=np.int64) * st).reshape([n if j == k else 1 for j in range(len(shape))])
    return out


def affine(op: Op) -> tuple[int, tuple[int, ...]] | None:
    """(base, strides): output index i of op reads its input's element base + sum(i_k * strides_k), for a
    Transpose, a Slice or a Strided; None for another op."""
    if isinstance(op, Strided):
        return op.base, op.strides
    st = [math.prod(op.in_shape[k + 1:]) for k in range(len(op.in_shape))]
    if isinstance(op, Transpose):
        return 0, tuple(st[p] for p in op.perm)
    if isinstance(op, Slice):
        return sum(a * b for a, b in zip(op.starts, st)), tuple(b * c for b, c in zip(st, op.steps))
    return None


def compose(first: Op, second: Op) -> Strided | None:
    """The copy that does `second` on the result of `first` (its bytes read under second's input shape, as a
    reshape between them gives them), when each is a Transpose, Slice or Strided and the two index maps make
    one affine map (always, but where second's strides cut across first's axes unevenly); else None."""
    a, b = affine(first), affine(second)
    if a is None or b is None or first.dtype != second.dtype or first.output.size != math.prod(second.in_shape):
        return None
    out = tuple(second.output.shape)
    flat = _offsets(out, *b)
    # a flat array: numpy 2.4's unravel_index misreads some multi-dimensional ones (a (7, 31, 38, 1) array)
    index = [i.reshape(out) for i in np.unravel_index(flat.reshape(-1), first.output.shape)]
    got = a[0] + sum(i.astype(np.int64) * st for i, st in zip(index, a[1]))
    base = int(got.reshape(-1)[0])
    strides = tuple(int(got[tuple(1 if j == k else 0 for j in range(len(out)))]) - base if n > 1 else 0
                    for k, n in enumerate(out))
    if not np.array_equal(got, _offsets(out, base, strides)):
        return None
    return Strided(first.in_shape, out, base, strides, first.dtype)


MOVEMENT_OPS = (Transpose, Slice, Pad, Resize, Strided)
"""The ops of this module (Concat, in ops/layout.py, is lowered as they are)."""
