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
import re

from nnpsim.config import Config, shape_target

from ..dims import Dim
from ..errors import CompileError
from ..lowering.dynamic import axis_name, fold_channels

S_COPY = "s0"


def _product(axes, idx: dict[str, int], rd: str, tmp: str) -> list[str]:
    """CU code leaving the product of axes (Dims read from the block at r1, sizes) in rd."""
    out = [f"li      {rd}, 1"]
    for d in axes:
        if isinstance(d, Dim):
            out += [f"ld      {tmp}, r1, {4 * idx[d.name]}", f"mul     {rd}, {rd}, {tmp}"]
        elif d != 1:
            out.append(f"muli    {rd}, {rd}, {d}")
    return out


def program_text(shapes: list[tuple], axis: int, dims: tuple[Dim, ...], dtype: str, cfg: Config,
                 names: list[str]) -> str:
    """The assembly of the dynamic concat of inputs `names` of symbolic `shapes` along `axis`."""
    ndim = len(shapes[0])
    for k, s in enumerate(shapes):
        if k and isinstance(s[axis], Dim):
            raise CompileError(f"concat along axis {axis}: input {k}'s axis is the dimension {s[axis]}; a dynamic "
                               f"concat needs a fixed size there in every input but the first")
        if len(s) != ndim or s[:axis] + s[axis + 1:] != shapes[0][:axis] + shapes[0][axis + 1:]:
            raise CompileError(f"concat along axis {axis}: input {k} has shape {_show(s)}, input 0 has "
                               f"{_show(shapes[0])}: all dimensions but the axis must agree")
    esz = 4 if dtype == "int32" else 1
    y_shape = shapes[0][:axis] + (_joined(shapes, axis, dims),) + shapes[0][axis + 1:]
    total = y_shape[axis]
    idx = {d.name: k for k, d in enumerate(dims)}
    hi = {d.name: d.hi for d in dims}
    big = lambda s: tuple(hi[d.name] if isinstance(d, Dim) else d for d in s)       # noqa: E731
    dim_note = " ".join(f"{d.name}:{d.lo}:{d.hi}" for d in dims)
    L = [f"; dynamic concat along axis {axis}: {' + '.join(_show(s) for s in shapes)} -> {_show(y_shape)}",
         "; one DDR -> DDR DMA per input", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += [f'        .target dynamic.dims, "{dim_note}"', '        .target dynamic.args, "args"']
    inputs = dict(zip(names, shapes))            # an input given twice is one buffer
    L += [f'        .target dynamic.buffer.{t}, "{" ".join(map(axis_name, s))}"' for t, s in inputs.items()]
    L += [f'        .target dynamic.buffer.y, "{" ".join(map(axis_name, y_shape))}"']
    L += ["", "        .data", f"        .buffer args, int32, ({len(dims)},)", f"        .space {4 * len(dims)}"]
    for t, s in list(inputs.items()) + [("y", y_shape)]:
        b = big(s)
        L += ["        .align 64", f"        .buffer {t}, {dtype}, ({', '.join(map(str, b))},)",
              f"        .space {math.prod(b) * esz}"]
    L += ["", "        .text", "main:", "        la      r1, args"]

    def i(s):
        L.append("        " + s)

    for line in _product(shapes[0][:axis], idx, "r2", "r9"):          # outer
        i(line)
    for line in _product(shapes[0][axis + 1:], idx, "r3", "r9"):      # the inner size of one index of the axis
        i(line)
    for line in _product((total,), idx, "r10", "r9"):                  # the output's size along the axis
        i(line)
    i("mul     r4, r3, r10")
    if esz > 1:
        i(f"slli    r4, r4, {esz.bit_length() - 1}")                 # the output's row stride, bytes
    for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1), ("size2", 1), ("size3", 1),
                 *((f"pad_{side}{k}", 0) for side in ("lo", "hi") for k in range(4))):
        i(f"setpi   dma.{p}, {v}")
    i("setp    dma.size1, r2, 0")
    i("setp    dma.dst_stride1, r4, 0")
    i("li      r11, 0")                                              # the input's offset along the axis
    for k, (t, s) in enumerate(zip(names, shapes)):
        L.append(f"        ; input {k} ({t}): its {axis_name(s[axis])} of the {axis_name(total)} along the axis")
        for line in _product((s[axis],), idx, "r12", "r9"):
            i(line)
        i("mul     r5, r3, r12")
        if esz > 1:
            i(f"slli    r5, r5, {esz.bit_length() - 1}")               # its row, bytes
        i("setp    dma.size0, r5, 0")
        i("setp    dma.src_stride1, r5, 0")
        i(f"la      r6, {t}")
        i("la      r7, y")
        i("mul     r8, r3, r11")
        if esz > 1:
            i(f"slli    r8, r8, {esz.bit_length() - 1}")
        i("add     r7, r7, r8")
        i(f"dma     ch{k % 2}, ddr[r7], ddr[r6], signal={S_COPY}")
        i("add     r11, r11, r12")
    for _ in shapes:
        i(f"sem.wait {S_COPY}")
    i("halt")
    return fold_channels("\n".join(L) + "\n", cfg.dma_channels)


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
    match = [e for e in dims if re.fullmatch(rf"{re.escape(d.name)}_\d+", e.name) and (e.lo, e.hi) == (d.lo + c, d.hi + c)]
    if not match:
        raise CompileError(f"concat along axis {axis}: no dimension {d.name} + {c} among {[e.name for e in dims]}")
    return match[0]


def _show(axes) -> str:
    return "(" + ", ".join(map(axis_name, axes)) + ")"
