"""Concat over a range of shapes: one DDR -> DDR copy per input, its sizes from the argument block.

In a packed row-major tensor, concat along axis a is, for every index of the
axes before a (`outer` of them), input k's `inner_k = prod(shape_k[a:])`
elements placed at `off_k * prod(shape[a + 1:])` within the output's
`inner = sum of inner_k` (off_k: the channels of the inputs before k).  So
each input is one two-axis DMA, DDR to DDR: size0 = inner_k, size1 = outer,
the destination's row stride the output's inner.  The CU computes outer and
the inner sizes from the argument block; the DMAs run on two channels at
once, and the program waits for all of them before it ends.  The concat
axis may be a dim d in the first input only (the others fixed on it, c in
all): the output's axis is then the derived dim d + c, and the CU computes
every input's offset along it.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from nnpsim.config import Config

from ..dims import Dim, DynamicOp
from ..errors import CompileError
from .asm import Mem, Reg, Scope
from .common import Part, args_buffer, axis_name, times_sizes


def lower_concat(b: Scope, op: DynamicOp, cfg: Config, shapes: list[tuple]) -> Part:
    """Write a dynamic concat's buffers and code (ending on its copies' tokens) into b; shapes are its inputs'
    symbolic shapes."""
    big = op.largest
    return _concat(b, shapes, big.axis, op.dims, big.dtype, cfg, list(op.names))


class _Regs(NamedTuple):
    """The concat's registers, r1 up in the order taken."""

    args: Reg
    outer: Reg      # the product of the axes before the concat axis
    inner: Reg      # the inner size of one index of the axis
    stride: Reg     # the output's row stride, bytes
    row: Reg        # the input's row, bytes
    src: Reg
    dst: Reg
    at: Reg         # the input's offset in the output's row, bytes
    tmp: Reg
    total: Reg      # the output's size along the axis
    off: Reg        # the input's offset along the axis
    size: Reg       # the input's size along the axis


def _check(shapes: list[tuple], axis: int) -> None:
    ndim = len(shapes[0])
    for k, s in enumerate(shapes):
        if k and isinstance(s[axis], Dim):
            raise CompileError(f"concat along axis {axis}: input {k}'s axis is the dimension {s[axis]}; a dynamic "
                               f"concat needs a fixed size there in every input but the first")
        if len(s) != ndim or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
            raise CompileError(f"concat along axis {axis}: input {k} has shape {_show(s)}, input 0 has "
                               f"{_show(shapes[0])}: all dimensions but the axis must agree")


def _concat(b: Scope, shapes: list[tuple], axis: int, dims: tuple[Dim, ...], dtype: str, cfg: Config,
            names: list[str]) -> Part:
    """The concat's buffers, then the CU's sizes and one DMA per input, then a wait for each."""
    _check(shapes, axis)
    esz = 4 if dtype == "int32" else 1
    y_shape = shapes[0][:axis] + (_joined(shapes, axis, dims),) + shapes[0][axis + 1:]
    inputs = dict(zip(names, shapes))            # an input given twice is one buffer
    _buffers(b, list(inputs.items()) + [("y", y_shape)], dims, dtype, esz)
    r = _Regs(*b.regs.take(*_Regs._fields))
    copy = b.sems.one("copy")
    idx = {d.name: k for k, d in enumerate(dims)}

    def product(reg: Reg, axes) -> None:
        b.i("li", reg, 1)
        times_sizes(b, reg, axes, idx, r.args, r.tmp)
    b.i("la", r.args, b.buf("args"))
    product(r.outer, shapes[0][:axis])
    product(r.inner, shapes[0][axis + 1:])
    product(r.total, (y_shape[axis],))
    b.i("mul", r.stride, r.inner, r.total)
    if esz > 1:
        b.i("slli", r.stride, r.stride, esz.bit_length() - 1)
    for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1), ("size2", 1), ("size3", 1),
                 *((f"pad_{side}{k}", 0) for side in ("lo", "hi") for k in range(4))):
        b.setp(f"dma.{p}", v)
    b.setp("dma.size1", r.outer)
    b.setp("dma.dst_stride1", r.stride)
    b.i("li", r.off, 0)
    for k, (t, s) in enumerate(zip(names, shapes)):
        b.comment(f"input {k} ({t}): its {axis_name(s[axis])} of the {axis_name(y_shape[axis])} along the axis")
        product(r.size, (s[axis],))
        b.i("mul", r.row, r.inner, r.size)
        if esz > 1:
            b.i("slli", r.row, r.row, esz.bit_length() - 1)
        b.setp("dma.size0", r.row)
        b.setp("dma.src_stride1", r.row)
        b.i("la", r.src, b.buf(t))
        b.i("la", r.dst, b.buf("y"))
        b.i("mul", r.at, r.inner, r.off)
        if esz > 1:
            b.i("slli", r.at, r.at, esz.bit_length() - 1)
        b.i("add", r.dst, r.dst, r.at)
        b.i("dma", b.ch(k % 2), Mem("ddr", r.dst), Mem("ddr", r.src), signal=copy)
        b.i("add", r.off, r.off, r.size)
    for _ in shapes:
        b.i("sem.wait", copy)
    b.fold_channels(cfg.dma_channels)
    return Part([f"dynamic concat along axis {axis}: {' + '.join(_show(s) for s in shapes)} -> {_show(y_shape)}",
                 "one DDR -> DDR DMA per input"], _notes(list(inputs.items()) + [("y", y_shape)], dims))


def _notes(tensors: list[tuple[str, tuple]], dims: tuple[Dim, ...]) -> list[tuple[str, str]]:
    """The dims, the argument block and each buffer's axes, for nnpsim."""
    return ([("dynamic.dims", " ".join(f"{d.name}:{d.lo}:{d.hi}" for d in dims)), ("dynamic.args", "args")]
            + [(f"dynamic.buffer.{t}", " ".join(map(axis_name, s))) for t, s in tensors])


def _buffers(b: Scope, tensors: list[tuple[str, tuple]], dims: tuple[Dim, ...], dtype: str, esz: int) -> None:
    """The argument block, then each tensor at its largest shape."""
    hi = {d.name: d.hi for d in dims}
    args_buffer(b, dims)
    for t, s in tensors:
        big = tuple(hi[d.name] if isinstance(d, Dim) else d for d in s)
        b.prog.buffer(b.buf(t).name, dtype, big, math.prod(big) * esz)


def _joined(shapes: list[tuple], axis: int, dims: tuple[Dim, ...]):
    """The output's size along the axis: the inputs' sum, or, when the first input's is a dim d (the others
    fixed, adding up to c), the derived dim d + c among `dims` (dynamic_network.layout_shape made it)."""
    d, c = shapes[0][axis], sum(s[axis] for s in shapes[1:])
    if not isinstance(d, Dim):
        return d + c
    if c == 0:
        return d
    # d's derived dims are named d_<k>; one of stride 1 with d + c's range is d + c at every size (another
    # stride cannot meet it at both ends of a range)
    match = [e for e in dims if _derived_from(e, d) and (e.lo, e.hi) == (d.lo + c, d.hi + c)]
    if not match:
        raise CompileError(f"concat along axis {axis}: no dimension {d.name} + {c} among {[e.name for e in dims]}")
    return match[0]


def _derived_from(e: Dim, d: Dim) -> bool:
    """Is e named as a dim derived from d (d_<k>)?"""
    head, _, k = e.name.rpartition("_")
    return head == d.name and k.isdecimal()


def _show(axes) -> str:
    return "(" + ", ".join(map(axis_name, axes)) + ")"
