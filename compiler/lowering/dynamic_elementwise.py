"""add / mul / relu / clip / requantize over a range of shapes: one program that reads its sizes from an
argument block.

The CU `ld`s the sizes, multiplies them into the element count and cuts it
into about two chunks (a half, rounded up to 64 bytes, at most what half
of VBUF holds), so that loads, the VU and stores overlap whatever the size;
chunk k+1 loads while chunk k is computed and stored (two buffer sets, the CU
taking chunk k-2's store token before reusing its set).  The VU command and
its scalars are the static lowering's (`ElementwiseLowering._vu`).  A requantize
of int32 reads four bytes an element (its loads four times the chunk's bytes,
the VU's a stride 4) and writes int8 in place.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp
from ..errors import CompileError
from ..ops import Elementwise
from .dynamic import axis_name, drain_and_halt, fold_channels, target_notes
from .vu import ElementwiseLowering

CHUNKS_LOG2 = 1          # about 2**1 chunks per run (benchmarks/dynamic.py: 4 or more cost more than they overlap)
S_LOAD, S_VU, S_STORE = "s0", "s1", "s2"


def vu_command(op: Elementwise):
    """The static lowering's VU command for op (mnemonic, scalars) over a one-element placeholder."""
    if op.mode == "requantize" and any(np.ndim(v) for v in (op.ma, op.shift, op.scale)):
        raise CompileError("a dynamic requantize takes one multiplier and shift (or one scale) for the whole "
                           "tensor; per-channel requantisation has no dynamic lowering yet")
    fake = SimpleNamespace(op=op, name="dyn", vu=0, per_channel=False, table_vbuf=None)
    fake._binary_f32 = lambda *a: ElementwiseLowering._binary_f32(fake, *a)
    fake._requant_f32 = lambda *a: ElementwiseLowering._requant_f32(fake, *a)
    return ElementwiseLowering._vu(fake, None, None, 1, 1, 0)


def program_text(op: DynamicOp, cfg: Config) -> tuple[str, int]:
    """The assembly of the dynamic elementwise kernel, and its chunk limit in bytes."""
    big: Elementwise = op.largest
    cmd = vu_command(big)
    esz = 4 if big.in_dtype == "int32" else 1             # input bytes an element (a requantize of int32)
    sets = 2 * (2 if big.binary else 1)
    fit = min(cfg.vbuf_bytes // sets // esz // 64 * 64, 1 << 24)     # elements a chunk
    idx = {d.name: k for k, d in enumerate(op.dims)}
    L = [f"; dynamic kernel: {op!r}", "; about two chunks per run; two buffer sets", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += ["        " + s for s in target_notes(op, [axis_name(d) for d in op.x_shape])]
    total_max = big.output.size
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}"]
    for t in op.names + ("y",):
        dtype, size = ("int8", 1) if t == "y" else (big.in_dtype, esz)
        L += ["        .align 64", f"        .buffer {t}, {dtype}, ({', '.join(map(str, big.output.shape))},)",
              f"        .space {total_max * size}"]
    L += ["", "        .text", "main:", "        la      r1, args", "        li      r2, 1"]
    e = L.append

    def i(s):
        e("        " + s)

    for d in op.x_shape:
        if isinstance(d, Dim):
            i(f"ld      r3, r1, {4 * idx[d.name]}")
            i("mul     r2, r2, r3")
        elif d != 1:
            i(f"muli    r2, r2, {d}")
    e("        ; chunk: a half of the elements rounded up to 64, at least 64, at most half of VBUF's sets")
    i(f"srli    r4, r2, {CHUNKS_LOG2}")
    i("addi    r4, r4, 63")
    i("andi    r4, r4, -64")
    i("li      r5, 64")
    i("max     r4, r4, r5")
    i(f"li      r5, {fit}")
    i("min     r4, r4, r5")
    # every parameter the commands read is set: in a chain, the previous op's values are still there
    for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1), *((f"size{k}", 1) for k in (1, 2, 3)),
                 *((f"pad_{side}{k}", 0) for side in ("lo", "hi") for k in range(4))):
        i(f"setpi   dma.{p}, {v}")
    for p, v in (("n1", 1), ("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", esz), ("b_stride0", 1)):
        i(f"setpi   vu.{p}, {v}")
    for k, v in cmd.scalars.items():
        i(f"setpi   vu.{k}, {v}")
    i("li      r6, 0")                   # offset of the chunk
    i("li      r7, 0")                   # buffer set
    i("li      r8, 0")                   # stores in flight
    e("chunk:")
    i("sub     r9, r2, r6")
    i("min     r9, r9, r4")              # this chunk's elements: the chunk, or the remainder
    i("li      r10, 2")
    i("blt     r8, r10, free")
    i(f"sem.wait {S_STORE}")
    i("addi    r8, r8, -1")
    e("free:")
    i(f"muli    r11, r7, {fit * esz * (sets // 2)}")      # set base: a, then b
    i(f"addi    r12, r11, {fit}")
    if esz > 1:
        i(f"slli    r14, r9, {esz.bit_length() - 1}")
        i("setp    dma.size0, r14, 0")                  # the input's bytes
    else:
        i("setp    dma.size0, r9, 0")
    i("setp    vu.n0, r9, 0")
    for k, t in enumerate(op.names):
        i(f"la      r13, {t}")
        if esz > 1:
            i(f"slli    r14, r6, {esz.bit_length() - 1}")
        i(f"add     r13, r13, {'r14' if esz > 1 else 'r6'}")
        sig = f", signal={S_LOAD}" if k == len(op.names) - 1 else ""
        i(f"dma     ch0, vbuf0[{'r11' if k == 0 else 'r12'}], ddr[r13]{sig}")
    b = ", r12" if big.binary else ""
    dt = f", {cmd.a_type}" if cmd.mnemonic in ("vu.requant", "vu.requant.f") else ""
    i(f"{cmd.mnemonic} vu0, r11, r11{b}{dt}, wait={S_LOAD}, signal={S_VU}")
    if esz > 1:
        i("setp    dma.size0, r9, 0")                   # the output's bytes
    i("la      r13, y")
    i("add     r13, r13, r6")
    i(f"dma     ch2, ddr[r13], vbuf0[r11], wait={S_VU}, signal={S_STORE}")
    i("addi    r8, r8, 1")
    i("xori    r7, r7, 1")
    i("add     r6, r6, r9")
    i("blt     r6, r2, chunk")
    L += drain_and_halt("r8", S_STORE)
    return "\n".join(L) + "\n", fit


def lower_elementwise(op: DynamicOp, cfg: Config):
    """A dynamic add / mul / relu / clip / requantize's (assembly, .incbin files, None)."""
    if not isinstance(op.largest, Elementwise):
        raise CompileError(f"dynamic shapes are lowered for conv2d, add, mul, relu and clip so far, not {op.kind}")
    asm, _ = program_text(op, cfg)
    return fold_channels(asm, cfg.dma_channels), {}, None
