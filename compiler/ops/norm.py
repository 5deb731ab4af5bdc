"""batch_norm: onnxruntime's BatchNormalization between DequantizeLinear and QuantizeLinear, as one per-channel
float32 affine on the VU (vu.faffine); batch_norm_global_avg: the same BatchNormalization, a Relu if any, and
the float GlobalAveragePool after it (DenseNet's tail), as one pool on vu.pool.faffavg, whose float32 values
never leave the VU.

onnxruntime folds the four parameters into new_scale and new_bias per channel (compiler.reference.
batch_norm_params, in float32 as its kernel does) and computes x * new_scale + new_bias with two roundings;
the op keeps the folded pair, which is what vu.faffine reads from its table, so the fold happens here once.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import reference as sem
from ..dims import has_dims
from ..errors import CompileError
from ..quant import f32_table
from .base import INT8
from .checks import check_sizes, clamp_args, f32_scale_arg, int_arg, shape_arg
from .elementwise import Elementwise
from .pool import Pool2d


@dataclass(frozen=True, eq=False, repr=False)
class BatchNorm(Elementwise):
    """y = clip(QuantizeLinear(f32(f32(DequantizeLinear(x) * new_scale[c]) + new_bias[c])), lo, hi), c along
    axis 1; lo and hi also hold a Relu or Clip after it (the island's QuantizeLinear range)."""

    new_scale: np.ndarray | None = None     # float32 [C], finite
    new_bias: np.ndarray | None = None      # float32 [C], finite
    scale_x: np.float32 = np.float32(1)     # the input's DequantizeLinear scale (its zero point is za)
    scale_out: np.float32 = np.float32(1)   # the output's QuantizeLinear scale (its zero point is zp_out)

    @property
    def is_float(self) -> bool:
        return True

    def table(self) -> np.ndarray:
        """int32 [C, 2]: the bits of each channel's float32 (new_scale, new_bias), vu.faffine's pairs."""
        return f32_table(np.stack([self.new_scale, self.new_bias], axis=1))

    @property
    def table_bytes(self) -> int:
        """Bytes of the pair table in DDR (a compile-time constant, compiler.roofline counts it)."""
        return 8 * int(self.new_scale.size)

    def _compute(self, *arrays: np.ndarray) -> np.ndarray:
        return sem.channel_affine_f32(arrays[0], self.za, self.scale_x, self.new_scale, self.new_bias,
                                      self.scale_out, self.zp_out, self.lo, self.hi)


def _channel_vector(name: str, v, c: int) -> np.ndarray:
    """A float vector of c values (one per channel), as float32."""
    a = np.asarray(v)
    if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
        raise CompileError(f"batch_norm: {name} must be numbers, got dtype {a.dtype}")
    if a.shape != (c,):
        raise CompileError(f"batch_norm: {name} must have one value per channel, shape ({c},), got {a.shape}")
    with np.errstate(over="ignore"):
        return a.astype(np.float32)


def batch_norm(shape, *, scale, bias, mean, var, epsilon=1e-5, za=0, scale_x, scale_out, zp_out=0, lo=-128,
               hi=127) -> BatchNorm:
    """QuantizeLinear(BatchNormalization(DequantizeLinear(x))) over axis 1 of int8 x, as onnxruntime computes it.

    scale, bias, mean, var: one value per channel (shape[1]); epsilon as the node's float32 attribute;
    za, scale_x: the input's zero point and scale; scale_out, zp_out: the output's; lo, hi: a clamp of the
    int8 result (a Relu or Clip before the QuantizeLinear).
    """
    shape, ns, nb = _folded("batch_norm", shape, 2, scale, bias, mean, var, epsilon)
    zp_out, lo, hi = clamp_args(zp_out, lo, hi)
    return BatchNorm("batch_norm", shape, "int8", int_arg("za", za, *INT8), 0, 0, 0, 0, zp_out, lo, hi,
                     new_scale=_frozen(ns), new_bias=_frozen(nb), scale_x=f32_scale_arg("scale_x", scale_x),
                     scale_out=f32_scale_arg("scale_out", scale_out))


@dataclass(frozen=True, eq=False, repr=False)
class BatchNormPool(Pool2d):
    """y[n, c] = QuantizeLinear(GlobalAveragePool(Relu?(DequantizeLinear(x) * new_scale[c] + new_bias[c]))), the
    float32 values in onnxruntime's order (reference.batch_norm_global_avg_f32): mode "bnavg", the plane as its
    window; relu: a Relu between the BatchNormalization and the pool."""

    new_scale: np.ndarray | None = None     # float32 [C], finite
    new_bias: np.ndarray | None = None      # float32 [C], finite
    relu: bool = False

    def table(self) -> np.ndarray:
        """int32 [C, 2]: the bits of each channel's float32 (new_scale, new_bias), vu.pool.faffavg's pairs."""
        return f32_table(np.stack([self.new_scale, self.new_bias], axis=1))

    @property
    def table_bytes(self) -> int:
        """Bytes of the pair table in DDR (a compile-time constant, compiler.roofline counts it)."""
        return 8 * int(self.new_scale.size)

    def _compute(self, x: np.ndarray) -> np.ndarray:
        return sem.batch_norm_global_avg_f32(x, self.x_zp, self.scale_x, self.new_scale, self.new_bias, self.relu,
                                             self.scale_out, self.zp_out)


def batch_norm_global_avg(x_shape, *, scale, bias, mean, var, epsilon=1e-5, za=0, scale_x, scale_out, zp_out=0,
                          relu=False) -> BatchNormPool:
    """QuantizeLinear(GlobalAveragePool(Relu?(BatchNormalization(DequantizeLinear(x))))) of NCHW int8 x: [N, C,
    1, 1] int8, as onnxruntime computes it (the parameters as batch_norm's; relu: a Relu before the pool)."""
    x_shape, ns, nb = _folded("batch_norm_global_avg", x_shape, 4, scale, bias, mean, var, epsilon)
    if not isinstance(relu, (bool, np.bool_)):
        raise CompileError(f"batch_norm_global_avg: relu must be a bool, got {relu!r}")
    op = BatchNormPool("bnavg", x_shape, x_shape[2:], x_shape[2:], (0, 0, 0, 0), True, int_arg("za", za, *INT8),
                       int_arg("zp_out", zp_out, *INT8), f32_scale_arg("scale_x", scale_x),
                       f32_scale_arg("scale_out", scale_out), new_scale=_frozen(ns), new_bias=_frozen(nb),
                       relu=bool(relu))
    check_sizes(op)
    return op


def _folded(what: str, shape, ndim: int, scale, bias, mean, var, epsilon) -> tuple[tuple[int, ...], np.ndarray,
                                                                                     np.ndarray]:
    """The checked shape (a channel axis 1; NCHW for ndim 4) and onnxruntime's folded (new_scale,
    new_bias), refusing a channel whose pair is not finite."""
    if has_dims(shape):
        raise CompileError(f"{what}: shape {tuple(shape)} holds a Dim; {what} has a static lowering only")
    shape = shape_arg("shape", shape, 4 if ndim == 4 else None)
    if len(shape) < 2:
        raise CompileError(f"{what}: shape {shape} has no channel axis (axis 1)")
    c = shape[1]
    vecs = [_channel_vector(n, v, c) for n, v in (("scale", scale), ("bias", bias), ("mean", mean), ("var", var))]
    try:
        eps = np.float32(float(epsilon))
    except (TypeError, ValueError):
        raise CompileError(f"{what}: epsilon must be a number, got {epsilon!r}") from None
    ns, nb = sem.batch_norm_params(*vecs, eps)
    bad = np.flatnonzero(~(np.isfinite(ns) & np.isfinite(nb)))
    if bad.size:
        k = int(bad[0])
        scale, bias, mean, var = (str(v[k]) for v in vecs)
        raise CompileError(f"{what}: channel {k} folds to new_scale {ns[k]!s}, new_bias {nb[k]!s} (scale {scale}, "
                           f"bias {bias}, mean {mean}, var {var}, epsilon {eps!s}): the VU takes finite float32 "
                           "pairs only")
    return shape, ns, nb


def _frozen(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a, np.float32).copy()
    a.flags.writeable = False
    return a
