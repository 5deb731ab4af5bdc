"""add / mul / relu / clip / requantize over a range of shapes: one program that reads its sizes from an
argument block.

The CU `ld`s the sizes, multiplies them into the element count and cuts it
into about two chunks (a half, rounded up to 64 bytes, at most what half
of VBUF holds), so that loads, the VU and stores overlap whatever the size;
chunk k+1 loads while chunk k is computed and stored (two buffer sets, the CU
taking chunk k-2's store token before reusing its set).  A binary op loads a
on ch0 and b on ch1 at once, each signalling its own semaphore; a command
takes one token, so a one-element in-place `vu.mov` of a takes a's and the
command, behind it in the VU queue, b's.  The VU command and its scalars are
the static lowering's (`ElementwiseLowering._vu`).  A requantize of int32
reads four bytes an element (its loads four times the chunk's bytes, the
VU's a stride 4) and writes int8 in place.

An op whose second operand is one entry per channel (an add / mul whose b is
[1, C, 1, 1] or a scalar, a requantize with per-channel (M, S) or scales)
walks the tensor plane by plane instead (plane_program_text): the entries
sit in VBUF, loaded once, and the VU reads the plane's with stride 0.
"""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp
from ..errors import CompileError
from ..ir import Buffer
from ..ops import Elementwise
from ..quant import f32_table
from ..lowering.dynamic import axis_name, drain_and_halt, fold_channels, target_notes
from ..lowering.vu import ElementwiseLowering, broadcast_problem, broadcast_strides

CHUNKS_LOG2 = 1          # about 2**1 chunks per run (benchmarks/dynamic.py: 4 or more cost more than they overlap)
S_LOAD, S_VU, S_STORE, S_LOAD_B = "s0", "s1", "s2", "s3"


def vu_command(op: Elementwise, per_channel: bool = False):
    """The static lowering's VU command for op (mnemonic, scalars) over a one-element placeholder."""
    table = Buffer("table", "vbuf", 64) if per_channel else None
    fake = SimpleNamespace(op=op, name="dyn", vu=0, per_channel=per_channel, table_vbuf=table)
    fake._binary_f32 = lambda *a: ElementwiseLowering._binary_f32(fake, *a)
    fake._b_operand = lambda *a: ElementwiseLowering._b_operand(fake, *a)
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
    for k, t in enumerate(op.names):
        i(f"la      r13, {t}")
        if esz > 1:
            i(f"slli    r14, r6, {esz.bit_length() - 1}")
        i(f"add     r13, r13, {'r14' if esz > 1 else 'r6'}")
        # a and b on two channels at once (one's DDR latency under the other's streaming), each its token
        i(f"dma     ch{k}, vbuf0[{'r11' if k == 0 else 'r12'}], ddr[r13], signal={(S_LOAD, S_LOAD_B)[k]}")
    if big.binary:
        # a command takes one token: a one-element copy of a onto itself takes a's, the VU queue's order
        # hands it on to the command, which takes b's
        i("setpi   vu.n0, 1")
        i(f"vu.mov  vu0, i8, r11, i8, r11, wait={S_LOAD}")
    i("setp    vu.n0, r9, 0")
    b = ", r12" if big.binary else ""
    dt = f", {cmd.a_type}" if cmd.mnemonic in ("vu.requant", "vu.requant.f") else ""
    i(f"{cmd.mnemonic} vu0, r11, r11{b}{dt}, wait={S_LOAD_B if big.binary else S_LOAD}, signal={S_VU}")
    store_chunk(i, esz, count="r9", ddr="r13", vbuf="r11")
    i("add     r6, r6, r9")
    i("blt     r6, r2, chunk")
    L += drain_and_halt("r8", S_STORE)
    return "\n".join(L) + "\n", fit


def store_chunk(i, esz: int, count: str, ddr: str, vbuf: str) -> None:
    """A chunk's int8 result (`count` elements at y + r6) stored on ch2 after the VU's token; the chunk
    counted (r8) and the buffer set flipped (r7).  An int32 input's loads moved 4 bytes an element, so
    dma.size0 is reset to the output's bytes."""
    if esz > 1:
        i(f"setp    dma.size0, {count}, 0")
    i(f"la      {ddr}, y")
    i(f"add     {ddr}, {ddr}, r6")
    i(f"dma     ch2, ddr[{ddr}], vbuf0[{vbuf}], wait={S_VU}, signal={S_STORE}")
    i("addi    r8, r8, 1")
    i("xori    r7, r7, 1")


def per_channel(op: Elementwise) -> bool:
    """Is op a requantize with one multiplier and shift (or scale) per channel?"""
    return op.mode == "requantize" and any(np.ndim(v) for v in (op.ma, op.shift, op.scale))


def lower_elementwise(op: DynamicOp, cfg: Config):
    """A dynamic add / mul / relu / clip / requantize's (assembly, .incbin files, None)."""
    if not isinstance(op.largest, Elementwise):
        raise CompileError(f"dynamic shapes are lowered for conv2d, add, mul, relu and clip so far, not {op.kind}")
    big = op.largest
    planes = big.b_shape is not None or per_channel(big)
    asm = plane_program_text(op, cfg) if planes else program_text(op, cfg)[0]
    return fold_channels(asm, cfg.dma_channels), {}, None


def channel_table(op: Elementwise) -> tuple[list[int], int]:
    """A per-channel requantize's table as int32 words ((M, S) pairs, or float32 scales' bits), and the
    bytes of one channel's entry."""
    if op.scale is not None:
        return [int(v) for v in f32_table(op.scale)], 4
    return [int(v) for v in np.stack([np.asarray(op.ma), np.asarray(op.shift)], axis=1).astype(np.int32).ravel()], 8


def plane_program_text(op: DynamicOp, cfg: Config) -> str:
    """The assembly of a dynamic op whose second operand is one entry per channel (or one for the tensor):
    an add / mul whose b broadcasts ([1, C, 1, 1] or all ones), or a per-channel requantize (its (M, S) or
    float32 scale table).  That operand is loaded into VBUF once; a is walked in chunks of k whole planes
    (the product of the axes after the channel axis, one per image and channel; one per image for a scalar
    b), k as many as a set holds and at most half the channels, so that two chunks overlap, or, when a
    plane exceeds a set, in pieces of one plane.  The VU reads each plane's entry with stride 0 along the
    plane and the entry's size across the planes.  Two buffer sets, as the flat kernel."""
    big: Elementwise = op.largest
    shape = op.x_shape
    requant = big.mode == "requantize"
    if requant:
        words, entry = channel_table(big)
        cmd = vu_command(big, per_channel=True)
        esz, b_shape, chan = (4 if big.in_dtype == "int32" else 1), None, True
    else:
        b_shape = big.b_shape
        if broadcast_problem(big) or len(shape) != 4 or broadcast_strides(big)[::2] != (0, 0):
            raise CompileError(f"{op.kind}: b of shape {b_shape} broadcast to ({', '.join(map(axis_name, shape))}):"
                               f" a dynamic add or mul broadcasts a per-channel b [1, C, 1, 1] or a scalar one "
                               f"so far")
        cmd, esz, entry, chan = vu_command(big), 1, 1, broadcast_strides(big)[1] > 0
    channels = shape[1]
    table = -(-channels * entry // 64) * 64
    fit = min((cfg.vbuf_bytes - table) // 2 // esz // 64 * 64, 1 << 24)     # elements a set
    idx = {d.name: k for k, d in enumerate(op.dims)}
    what = "the per-channel table" if requant else "b"
    L = [f"; dynamic kernel: {op!r}" + ("" if requant else f", b {b_shape} broadcast"),
         f"; {what} in VBUF once; planes in chunks; two buffer sets", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    notes = target_notes(op, [axis_name(d) for d in shape])
    L += ["        " + s for s in notes if "dynamic.buffer.b," not in s]
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}"]
    a_name = op.names[0]
    tensors = ([(a_name, big.in_dtype, big.shape, esz)] + ([] if requant else [("b", "int8", b_shape, 1)])
               + [("y", "int8", big.shape, 1)])
    for t, dtype, s, size in tensors:
        L += ["        .align 64", f"        .buffer {t}, {dtype}, ({', '.join(map(str, s))},)",
              f"        .space {int(np.prod(s)) * size}"]
    if requant:
        form = "float32 scale" if entry == 4 else "(M, S)"
        L += ["        .align 64", f"channel_table:                          ; one {form} a channel"]
        L += [f"        .word {', '.join(map(str, words[k:k + 8]))}" for k in range(0, len(words), 8)]
    L += ["", "        .text", "main:", "        la      r1, args"]
    e = L.append

    def i(s):
        e("        " + s)

    # r2 = images, r3 = a plane's elements (a whole image's for a scalar b: one "channel")
    groups = channels if chan else 1
    i("li      r2, 1")
    i("li      r3, 1")
    for reg, axes in (("r2", shape[:1]), ("r3", shape[2:])):
        for d in axes:
            if isinstance(d, Dim):
                i(f"ld      r4, r1, {4 * idx[d.name]}")
                i(f"mul     {reg}, {reg}, r4")
            elif d != 1:
                i(f"muli    {reg}, {reg}, {d}")
    if not chan:
        i(f"muli    r3, r3, {channels}")
    half = -(-groups // 2)
    e("        ; k: planes a chunk, as many as a set holds, at most half the channels (two chunks overlap)")
    i(f"li      r16, {half}")
    i(f"muli    r17, r3, {half}")
    i(f"li      r18, {fit}")
    i("bge     r18, r17, planes_done")     # small planes: half the channels at once, no loop
    i("li      r16, 1")
    i("add     r17, r3, r0")
    e("planes:")
    i(f"li      r18, {half}")
    i("bge     r16, r18, planes_done")
    i("add     r17, r17, r3")
    i(f"li      r18, {fit}")
    i("blt     r18, r17, planes_done")
    i("addi    r16, r16, 1")
    i("jal     r0, planes")
    e("planes_done:")
    for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1), *((f"size{k}", 1) for k in (1, 2, 3)),
                 *((f"pad_{side}{k}", 0) for side in ("lo", "hi") for k in range(4))):
        i(f"setpi   dma.{p}, {v}")
    for p, v in (("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", esz), ("b_stride0", 0),
                 ("b_stride1", entry if chan else 0)):
        i(f"setpi   vu.{p}, {v}")
    for k, v in cmd.scalars.items():
        i(f"setpi   vu.{k}, {v}")
    e(f"        ; {what} once, at VBUF 0: on ch0 ahead of every load of a, which the VU waits for")
    i(f"setpi   dma.size0, {channels * entry if requant else int(np.prod(b_shape))}")
    i(f"la      r5, {'channel_table' if requant else 'b'}")
    i("dma     ch0, vbuf0[r0], ddr[r5]")
    i("li      r6, 0")                   # offset of the chunk in a and y, elements
    i("li      r7, 0")                   # buffer set
    i("li      r8, 0")                   # stores in flight
    e("image:")
    i("li      r9, 0")                   # the chunk's first channel
    e("group:")
    i(f"li      r19, {groups}")
    i("sub     r19, r19, r9")
    i("min     r19, r19, r16")           # the chunk's planes: k, or the channels left
    i("li      r10, 0")                  # offset in the plane
    e("chunk:")
    i("sub     r11, r3, r10")
    i(f"li      r12, {fit}")
    i("min     r11, r11, r12")           # of each plane: all of it, a set, or the plane's remainder
    i("mul     r20, r11, r19")           # the chunk's elements
    i("li      r12, 2")
    i("blt     r8, r12, free")
    i(f"sem.wait {S_STORE}")
    i("addi    r8, r8, -1")
    e("free:")
    i(f"muli    r13, r7, {fit * esz}")
    i(f"addi    r13, r13, {table}")      # the set's base, after the entries
    i("la      r14, " + a_name)
    if esz > 1:
        i(f"slli    r15, r20, {esz.bit_length() - 1}")
        i("setp    dma.size0, r15, 0")   # the input's bytes
        i(f"slli    r15, r6, {esz.bit_length() - 1}")
        i("add     r14, r14, r15")
    else:
        i("setp    dma.size0, r20, 0")
        i("add     r14, r14, r6")
    i("setp    vu.n0, r11, 0")
    i("setp    vu.n1, r19, 0")
    i("setp    vu.d_stride1, r11, 0")
    if esz > 1:
        i(f"slli    r15, r11, {esz.bit_length() - 1}")
        i("setp    vu.a_stride1, r15, 0")
    else:
        i("setp    vu.a_stride1, r11, 0")
    i(f"dma     ch0, vbuf0[r13], ddr[r14], signal={S_LOAD}")
    i(f"muli    r15, r9, {entry if chan else 0}")   # the first plane's entry
    dt = f", {cmd.a_type}" if requant else ""
    i(f"{cmd.mnemonic} vu0, r13, r13, r15{dt}, wait={S_LOAD}, signal={S_VU}")
    store_chunk(i, esz, count="r20", ddr="r14", vbuf="r13")
    i("add     r6, r6, r20")
    i("add     r10, r10, r11")
    i("blt     r10, r3, chunk")
    i("add     r9, r9, r19")
    i(f"li      r12, {groups}")
    i("blt     r9, r12, group")
    i("addi    r2, r2, -1")
    i("blt     r0, r2, image")
    L += drain_and_halt("r8", S_STORE)
    return "\n".join(L) + "\n"
