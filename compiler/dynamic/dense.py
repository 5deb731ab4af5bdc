"""A dense layer over a range of batch sizes: the dynamic 1x1 conv it equals.

A dense layer's x [N, K] is, byte for byte, the NCHW tensor [N, K, 1, 1], its
output [N, O] is [N, O, 1, 1], and (x - x_zp) @ w + bias requantised per
output feature is the 1x1 conv with weight w.T[:, :, None, None] requantised
per output channel (compiler/semantics.py: dense and conv2d share requant and
requant_f32).  So a dynamic dense is the dynamic conv's program
(dynamic/conv.py) with its buffers described as two-axis tensors: the notes
the conv's lowering is given to write.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from nnpsim.config import Config

from ..dims import DynamicOp
from ..errors import CompileError
from ..ops import Conv2d, Dense, conv2d
from .asm import Scope
from .common import Part, axis_name, target_notes
from .conv import prepare as conv_prepare


def as_conv(d: Dense) -> Conv2d:
    """The 1x1 conv over [N, K, 1, 1] that computes dense layer d."""
    n, k = d.x_shape
    w = np.ascontiguousarray(d.weight.T)[:, :, None, None]
    return conv2d((n, k, 1, 1), w, d.bias, x_zp=d.x_zp, multiplier=d.multiplier, shift=d.shift, scale=d.scale,
                  zp_out=d.zp_out, lo=d.lo, hi=d.hi)


def conv_op(op: DynamicOp) -> DynamicOp:
    """The dynamic 1x1 conv of a dynamic dense op (batch the only Dim)."""
    if not isinstance(op.largest, Dense):
        raise CompileError(f"expected a dense op, got {op.kind}")
    n, k = op.x_shape
    make = lambda shape: as_conv(op.make((shape[0], shape[1])))          # noqa: E731
    return DynamicOp("conv2d", (n, k, 1, 1), op.dims, make, as_conv(op.largest), as_conv(op.smallest), op.names)


def prepare(op: DynamicOp, cfg: Config) -> Callable[[Scope], Part]:
    """A dynamic dense layer planned: the function writing its 1x1 conv into a scope, its x and y described
    as [n, k] and [n, o]."""
    conv = conv_op(op)
    return conv_prepare(conv, cfg, note=target_notes(op, [axis_name(op.x_shape[0]), str(conv.largest.out_channels)]))


def lower_dense(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """Write a dynamic dense layer into b."""
    return prepare(op, cfg)(b)
