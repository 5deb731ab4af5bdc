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
the static lowering's (`vu.elementwise_vu`).  A requantize of int32
reads four bytes an element (its loads four times the chunk's bytes, the
VU's a stride 4) and writes int8 in place.

An op whose second operand is one entry per channel (an add / mul whose b is
[1, C, 1, 1] or a scalar, a requantize with per-channel (M, S) or scales)
walks the tensor plane by plane instead (_planes): the entries sit in VBUF,
loaded once (the static lowering's table, `vu.requant_table`), and the VU
reads the plane's with stride 0.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from nnpsim.config import Config

from ..dims import DynamicOp
from ..errors import CompileError
from ..ir import Buffer, Ref, Vu
from ..ops import Elementwise
from ..lowering.vu import broadcast_problem, broadcast_strides, elementwise_vu, requant_per_channel, requant_table
from .asm import ZERO, Mem, Reg, Scope, Sem
from .common import Part, args_buffer, axis_name, drain, target_notes, times_sizes

CHUNKS_LOG2 = 1          # about 2**1 chunks per run (benchmarks/dynamic.py: 4 or more cost more than they overlap)


def vu_command(op: Elementwise) -> Vu:
    """The static lowering's VU command for op (mnemonic, types, scalars) over a one-element tile at VBUF 0."""
    at = Ref(Buffer("tile", "vbuf", 64))
    return elementwise_vu(op, at, (at, (1, 1)) if op.binary else None, at if requant_per_channel(op) else None,
                          1, 1, name="dyn")


def lower_elementwise(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """Write a dynamic add / mul / relu / clip / requantize's buffers and code (ending on its drain) into b."""
    if not isinstance(op.largest, Elementwise):
        raise CompileError(f"dynamic shapes are lowered for conv2d, add, mul, relu and clip so far, not {op.kind}")
    big = op.largest
    part = _planes(b, op, cfg) if big.b_shape is not None or requant_per_channel(big) else _flat(b, op, cfg)
    b.fold_channels(cfg.dma_channels)
    return part


class _Walk(NamedTuple):
    """The registers both programs walk their chunks with (r6 up: the offset, the set, stores in flight)."""

    off: Reg
    set: Reg
    pend: Reg


class _Sems(NamedTuple):
    load: Sem
    vu: Sem
    store: Sem
    load_b: Sem


def _buffers(b: Scope, op: DynamicOp, tensors: list[tuple[str, str, tuple, int]]) -> None:
    """The argument block, then each (name, dtype, shape, bytes an element) aligned."""
    args_buffer(b, op.dims)
    for t, dtype, shape, size in tensors:
        b.prog.buffer(b.buf(t).name, dtype, tuple(shape), int(np.prod(shape)) * size)


def _defaults(b: Scope, vu: tuple[tuple[str, int], ...], cmd: Vu) -> None:
    """Every DMA and VU parameter the commands read, set (in a chain the previous op's values are still there),
    then the command's scalars."""
    for p, v in (("elem", 1), ("src_stride0", 1), ("dst_stride0", 1), *((f"size{k}", 1) for k in (1, 2, 3)),
                 *((f"pad_{side}{k}", 0) for side in ("lo", "hi") for k in range(4))):
        b.setp(f"dma.{p}", v)
    for p, v in vu + tuple(cmd.scalars.items()):
        b.setp(f"vu.{p}", v)


def _free_set(b: Scope, w: _Walk, tmp: Reg, store: Sem) -> None:
    """Take chunk k-2's store token before reusing its set."""
    b.i("li", tmp, 2)
    b.i("blt", w.pend, tmp, b.label("free"))
    b.i("sem.wait", store)
    b.i("addi", w.pend, w.pend, -1)
    b.at(b.label("free"))


def _store_chunk(b: Scope, w: _Walk, s: _Sems, esz: int, count: Reg, ddr: Reg, vbuf: Reg) -> None:
    """A chunk's int8 result (`count` elements at y + w.off) stored on ch2 after the VU's token; the chunk
    counted and the buffer set flipped.  An int32 input's loads moved 4 bytes an element, so dma.size0 is
    reset to the output's bytes."""
    if esz > 1:
        b.setp("dma.size0", count)
    b.i("la", ddr, b.buf("y"))
    b.i("add", ddr, ddr, w.off)
    b.i("dma", b.ch(2), Mem("ddr", ddr), Mem("vbuf0", vbuf), wait=s.vu, signal=s.store)
    b.i("addi", w.pend, w.pend, 1)
    b.i("xori", w.set, w.set, 1)


def _command(b: Scope, cmd: Vu, operands: tuple, wait: Sem, signal: Sem) -> None:
    """The op's VU command in place on the chunk (a requantize names its input type)."""
    dt = (cmd.a_type,) if cmd.mnemonic.startswith("vu.requant") else ()
    b.i(cmd.mnemonic, "vu0", *operands, *dt, wait=wait, signal=signal)


# ----------------------------------------------------------------------------- the flat walk

def _flat(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """The dynamic elementwise kernel over the flat tensor, in chunks of at most `fit` elements."""
    big: Elementwise = op.largest
    cmd = vu_command(big)
    esz = 4 if big.in_dtype == "int32" else 1             # input bytes an element (a requantize of int32)
    sets = 2 * (2 if big.binary else 1)
    fit = min(cfg.vbuf_bytes // sets // esz // 64 * 64, 1 << 24)     # elements a chunk
    _buffers(b, op, [(t, big.in_dtype, big.output.shape, esz) for t in op.names]
             + [("y", "int8", big.output.shape, 1)])
    args, total, tmp, chunk, tmp2 = b.regs.take("args", "total", "tmp", "chunk", "tmp2")
    w = _Walk(*b.regs.take("off", "set", "pend"))
    count, two, va, vb, ddr, nbytes = b.regs.take("count", "two", "va", "vb", "ddr", "bytes")
    s = _Sems(*b.sems.take("load", "vu", "store", "load_b"))
    b.i("la", args, b.buf("args"))
    b.i("li", total, 1)
    times_sizes(b, total, op.x_shape, {d.name: k for k, d in enumerate(op.dims)}, args, tmp)
    b.comment("chunk: a half of the elements rounded up to 64, at least 64, at most half of VBUF's sets")
    b.i("srli", chunk, total, CHUNKS_LOG2)
    b.i("addi", chunk, chunk, 63)
    b.i("andi", chunk, chunk, -64)
    b.i("li", tmp2, 64)
    b.i("max", chunk, chunk, tmp2)
    b.i("li", tmp2, fit)
    b.i("min", chunk, chunk, tmp2)
    _defaults(b, (("n1", 1), ("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", esz), ("b_stride0", 1)), cmd)
    for reg in w:
        b.i("li", reg, 0)
    b.at(b.label("chunk"))
    b.i("sub", count, total, w.off)
    b.i("min", count, count, chunk)           # this chunk's elements: the chunk, or the remainder
    _free_set(b, w, two, s.store)
    b.i("muli", va, w.set, fit * esz * (sets // 2))      # set base: a, then b
    b.i("addi", vb, va, fit)
    if esz > 1:
        b.i("slli", nbytes, count, esz.bit_length() - 1)
    b.setp("dma.size0", nbytes if esz > 1 else count)     # the input's bytes
    for k, t in enumerate(op.names):
        b.i("la", ddr, b.buf(t))
        if esz > 1:
            b.i("slli", nbytes, w.off, esz.bit_length() - 1)
        b.i("add", ddr, ddr, nbytes if esz > 1 else w.off)
        # a and b on two channels at once (one's DDR latency under the other's streaming), each its token
        b.i("dma", b.ch(k), Mem("vbuf0", (va, vb)[k]), Mem("ddr", ddr), signal=(s.load, s.load_b)[k])
    if big.binary:
        # a command takes one token: a one-element copy of a onto itself takes a's, the VU queue's order
        # hands it on to the command, which takes b's
        b.setp("vu.n0", 1)
        b.i("vu.mov", "vu0", "i8", va, "i8", va, wait=s.load)
    b.setp("vu.n0", count)
    _command(b, cmd, (va, va, vb) if big.binary else (va, va), s.load_b if big.binary else s.load, s.vu)
    _store_chunk(b, w, s, esz, count, ddr, va)
    b.i("add", w.off, w.off, count)
    b.i("blt", w.off, total, b.label("chunk"))
    drain(b, w.pend, s.store)
    return Part([f"dynamic kernel: {op!r}", "about two chunks per run; two buffer sets"],
                target_notes(op, [axis_name(d) for d in op.x_shape]))


# ----------------------------------------------------------------------------- the plane walk

@dataclass(frozen=True)
class _PlaneOp:
    """What the plane walk needs of its op: the command, bytes an element, the per-channel operand's entry
    bytes, whether it is per channel (else one for the tensor), its words if a requantising table, the
    table's VBUF bytes and the elements a set holds."""

    cmd: Vu
    esz: int
    entry: int
    chan: bool
    words: list[int] | None
    table: int
    fit: int


def _plane_op(op: DynamicOp, cfg: Config) -> _PlaneOp:
    """The plane walk's command and sizes; CompileError for a b that is not per channel or a scalar."""
    big: Elementwise = op.largest
    shape = op.x_shape
    if big.mode == "requantize":
        t = requant_table(big)
        words, entry = [int(v) for v in t.ravel()], t.nbytes // len(t)
        cmd, esz, chan = vu_command(big), (4 if big.in_dtype == "int32" else 1), True
    else:
        if broadcast_problem(big) or len(shape) != 4 or broadcast_strides(big)[::2] != (0, 0):
            raise CompileError(f"{op.kind}: b of shape {big.b_shape} broadcast to ({', '.join(map(axis_name, shape))}):"
                               f" a dynamic add or mul broadcasts a per-channel b [1, C, 1, 1] or a scalar one "
                               f"so far")
        cmd, esz, entry, chan, words = vu_command(big), 1, 1, broadcast_strides(big)[1] > 0, None
    table = -(-shape[1] * entry // 64) * 64
    fit = min((cfg.vbuf_bytes - table) // 2 // esz // 64 * 64, 1 << 24)     # elements a set
    return _PlaneOp(cmd, esz, entry, chan, words, table, fit)


def _plane_data(b: Scope, op: DynamicOp, p: _PlaneOp) -> None:
    """The plane walk's buffers: the argument block, a, b or the requantising table's words, y."""
    big: Elementwise = op.largest
    requant = p.words is not None
    b_buffer = [] if requant else [("b", "int8", big.b_shape, 1)]
    _buffers(b, op, [(op.names[0], big.in_dtype, big.shape, p.esz)] + b_buffer + [("y", "int8", big.shape, 1)])
    if requant:
        form = "float32 scale" if p.entry == 4 else "(M, S)"
        b.prog.table(b.label("channel_table"), p.words, f"one {form} a channel", per_line=8)


class _PlaneRegs(NamedTuple):
    """The plane walk's registers, r1 up, in the order taken (the chunk walk's r6..r8 among them)."""

    args: Reg
    images: Reg
    plane: Reg        # a plane's elements (a whole image's for a scalar b: one "channel")
    tmp: Reg
    src: Reg
    w: _Walk
    ch0: Reg          # the chunk's first channel
    at: Reg           # offset in the plane
    piece: Reg        # of each plane: all of it, a set, or the plane's remainder
    tmp2: Reg
    vbuf: Reg
    ddr: Reg
    tmp3: Reg
    k: Reg            # planes a chunk
    kn: Reg
    tmp4: Reg
    planes: Reg       # the chunk's planes: k, or the channels left
    elems: Reg        # the chunk's elements


def _plane_regs(b: Scope) -> _PlaneRegs:
    first = b.regs.take("args", "images", "plane", "tmp", "src")
    w = _Walk(*b.regs.take("off", "set", "pend"))
    return _PlaneRegs(*first, w, *b.regs.take("ch0", "at", "piece", "tmp2", "vbuf", "ddr", "tmp3", "k", "kn",
                                              "tmp4", "planes", "elems"))


def _planes(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """A dynamic op whose second operand is one entry per channel (or one for the tensor): an add / mul whose b
    broadcasts ([1, C, 1, 1] or all ones), or a per-channel requantize (its (M, S) or float32 scale table).
    That operand is loaded into VBUF once; a is walked in chunks of k whole planes (the product of the axes
    after the channel axis, one per image and channel; one per image for a scalar b), k as many as a set
    holds and at most half the channels, so that two chunks overlap, or, when a plane exceeds a set, in
    pieces of one plane.  The VU reads each plane's entry with stride 0 along the plane and the entry's size
    across the planes.  Two buffer sets, as the flat kernel."""
    big: Elementwise = op.largest
    shape, p = op.x_shape, _plane_op(op, cfg)
    requant = p.words is not None
    _plane_data(b, op, p)
    r, s = _plane_regs(b), _Sems(*b.sems.take("load", "vu", "store", "load_b"))
    groups = shape[1] if p.chan else 1
    _plane_sizes(b, op, r, p.chan)
    _planes_a_chunk(b, r, -(-groups // 2), p.fit)
    _defaults(b, (("n2", 1), ("n3", 1), ("d_stride0", 1), ("a_stride0", p.esz), ("b_stride0", 0),
                  ("b_stride1", p.entry if p.chan else 0)), p.cmd)
    what = "the per-channel table" if requant else "b"
    b.comment(f"{what} once, at VBUF 0: on ch0 ahead of every load of a, which the VU waits for")
    b.setp("dma.size0", shape[1] * p.entry if requant else int(np.prod(big.b_shape)))
    b.i("la", r.src, b.label("channel_table") if requant else b.buf("b"))
    b.i("dma", b.ch(0), Mem("vbuf0", ZERO), Mem("ddr", r.src))
    for reg in r.w:
        b.i("li", reg, 0)
    _plane_loops(b, op, r, s, p, groups)
    drain(b, r.w.pend, s.store)
    notes = [(k, v) for k, v in target_notes(op, [axis_name(d) for d in shape]) if k != "dynamic.buffer.b"]
    return Part([f"dynamic kernel: {op!r}" + ("" if requant else f", b {big.b_shape} broadcast"),
                 f"{what} in VBUF once; planes in chunks; two buffer sets"], notes)


def _plane_sizes(b: Scope, op: DynamicOp, r: _PlaneRegs, chan: bool) -> None:
    """r.images = the images, r.plane = a plane's elements (a whole image's for a scalar b)."""
    shape, idx = op.x_shape, {d.name: k for k, d in enumerate(op.dims)}
    b.i("la", r.args, b.buf("args"))
    b.i("li", r.images, 1)
    b.i("li", r.plane, 1)
    times_sizes(b, r.images, shape[:1], idx, r.args, r.tmp)
    times_sizes(b, r.plane, shape[2:], idx, r.args, r.tmp)
    if not chan:
        b.i("muli", r.plane, r.plane, shape[1])


def _planes_a_chunk(b: Scope, r: _PlaneRegs, half: int, fit: int) -> None:
    """r.k = planes a chunk: as many as a set holds, at most half the channels (two chunks overlap)."""
    b.comment("k: planes a chunk, as many as a set holds, at most half the channels (two chunks overlap)")
    b.i("li", r.k, half)
    b.i("muli", r.kn, r.plane, half)
    b.i("li", r.tmp4, fit)
    b.i("bge", r.tmp4, r.kn, b.label("planes_done"))     # small planes: half the channels at once, no loop
    b.i("li", r.k, 1)
    b.i("add", r.kn, r.plane, ZERO)
    b.at(b.label("planes"))
    b.i("li", r.tmp4, half)
    b.i("bge", r.k, r.tmp4, b.label("planes_done"))
    b.i("add", r.kn, r.kn, r.plane)
    b.i("li", r.tmp4, fit)
    b.i("blt", r.tmp4, r.kn, b.label("planes_done"))
    b.i("addi", r.k, r.k, 1)
    b.i("jal", ZERO, b.label("planes"))
    b.at(b.label("planes_done"))


def _plane_loops(b: Scope, op: DynamicOp, r: _PlaneRegs, s: _Sems, p: _PlaneOp, groups: int) -> None:
    """Per image, per group of k planes, per piece of a plane: load, the VU's command, store."""
    w, log = r.w, p.esz.bit_length() - 1
    b.at(b.label("image"))
    b.i("li", r.ch0, 0)
    b.at(b.label("group"))
    b.i("li", r.planes, groups)
    b.i("sub", r.planes, r.planes, r.ch0)
    b.i("min", r.planes, r.planes, r.k)
    b.i("li", r.at, 0)
    b.at(b.label("chunk"))
    b.i("sub", r.piece, r.plane, r.at)
    b.i("li", r.tmp2, p.fit)
    b.i("min", r.piece, r.piece, r.tmp2)
    b.i("mul", r.elems, r.piece, r.planes)
    _free_set(b, w, r.tmp2, s.store)
    b.i("muli", r.vbuf, w.set, p.fit * p.esz)
    b.i("addi", r.vbuf, r.vbuf, p.table)      # the set's base, after the entries
    b.i("la", r.ddr, b.buf(op.names[0]))
    if p.esz > 1:
        b.i("slli", r.tmp3, r.elems, log)
        b.setp("dma.size0", r.tmp3)           # the input's bytes
        b.i("slli", r.tmp3, w.off, log)
        b.i("add", r.ddr, r.ddr, r.tmp3)
    else:
        b.setp("dma.size0", r.elems)
        b.i("add", r.ddr, r.ddr, w.off)
    b.setp("vu.n0", r.piece)
    b.setp("vu.n1", r.planes)
    b.setp("vu.d_stride1", r.piece)
    if p.esz > 1:
        b.i("slli", r.tmp3, r.piece, log)
    b.setp("vu.a_stride1", r.tmp3 if p.esz > 1 else r.piece)
    b.i("dma", b.ch(0), Mem("vbuf0", r.vbuf), Mem("ddr", r.ddr), signal=s.load)
    b.i("muli", r.tmp3, r.ch0, p.entry if p.chan else 0)     # the first plane's entry
    _command(b, p.cmd, (r.vbuf, r.vbuf, r.tmp3), s.load, s.vu)
    _store_chunk(b, w, s, p.esz, r.elems, r.ddr, r.vbuf)
    b.i("add", w.off, w.off, r.elems)
    b.i("add", r.at, r.at, r.piece)
    b.i("blt", r.at, r.plane, b.label("chunk"))
    b.i("add", r.ch0, r.ch0, r.planes)
    b.i("li", r.tmp2, groups)
    b.i("blt", r.ch0, r.tmp2, b.label("group"))
    b.i("addi", r.images, r.images, -1)
    b.i("blt", ZERO, r.images, b.label("image"))
