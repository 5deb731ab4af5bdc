"""Global average pooling over a range of shapes: the window is the (dynamic) plane.

The CU sets the VU's window to the actual height and width (`setp vu.win_h,
rh`) and loops over images and over tiles of channels (a fixed count: the
channels do not vary), each tile's planes one contiguous DMA into VBUF, one
window command, one store of a byte a channel.  Two buffer sets; the CU takes
tile k-2's store token before reusing a set.

The divisor changes with the shape:
  integer form  vu.pool.avg divides by n = h * w, an int32 word in VBUF that
                the VU itself makes once per run: it sums a plane of ones
                (one row of ones in DDR read h times) over the same window;
  float form    onnxruntime's QLinearGlobalAveragePool requantises the int32
                sum minus x_zp * n by f32(sx / f32(sy * n)).  The CU computes
                x_zp * n into vu.za and `ld`s the float32 factor from a table
                by n (one word for every n the range allows) into vu.fscale,
                so every factor is the one the host computes, bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import count
from typing import NamedTuple

from nnpsim.config import Config

from ..dims import DynamicOp
from ..errors import CompileError
from ..ops import Pool2d
from ..quant import f32_bits
from ..reference import global_avg_pool_scale
from .asm import ZERO, Mem, Reg, Scope, Sem
from .common import Part, args_buffer, axis_name, drain, load_size, target_notes

MAX_SCALES = 1 << 18               # float32 factors a float global pool's table may hold (1 MB of DDR)
MAX_BAND_ROWS = 2047               # a VU window's height
BAND_SETS = 3      # a band's load waits for the sum of the band BAND_SETS before: its set's and DDR word's release


def is_global(op: DynamicOp) -> bool:
    """Is op an average pool whose window is the whole plane at both ends of its range?"""
    return (isinstance(op.largest, Pool2d) and op.largest.mode == "avg" and op.largest.is_global
            and op.smallest.is_global)


def _plane_range(op: DynamicOp) -> tuple[int, int]:
    lo, hi = op.smallest.x_shape, op.largest.x_shape
    return lo[2] * lo[3], hi[2] * hi[3]


def tile_channels(op: DynamicOp, cfg: Config) -> int:
    """The most channels per tile whose two sets (planes at the largest shape, int32 results) fit VBUF; 0
    when one channel's plane does not (the plane is then summed in bands of rows: _banded)."""
    big: Pool2d = op.largest
    c, plane = big.x_shape[1], big.x_shape[2] * big.x_shape[3]
    free = cfg.vbuf_bytes - 128 - (0 if big.is_float else plane)     # the integer form's ones and their sum
    return max(0, min(c, free // 2 // (plane + 4 + 64)))


def set_bytes(cc: int, plane: int) -> int:
    """Bytes of one buffer set: cc planes, then cc int32 results (64-byte aligned)."""
    return -(-(cc * plane + 3 + 4 * cc) // 64) * 64


def lower_global_pool(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """Write a dynamic global average pool's buffers and code (ending on its drain) into b."""
    cc = tile_channels(op, cfg)
    part = _one_set(b, op, cfg, cc) if cc else _banded(b, op, cfg)
    b.fold_channels(cfg.dma_channels)
    return part


class _Regs(NamedTuple):
    """Both programs' registers, r1 up in the order taken (the numbers a conv's program gives its sizes)."""

    args: Reg
    n: Reg
    h: Reg
    w: Reg
    bands: Reg      # banded: bands a channel
    left: Reg       # banded: the oldest channel's bands left
    out: Reg        # banded: the oldest channel's output index
    hw: Reg
    spare: Reg      # unused: taken so that the numbers after it stay the conv's
    c0: Reg         # the tile's first channel
    cc: Reg         # the tile's channel count
    img: Reg
    set: Reg
    pend: Reg
    acc: Reg        # banded: the channel's sum
    row0: Reg       # banded: the band's first row
    rows: Reg       # banded: the band's rows
    old: Reg        # banded: the oldest band's set
    t: tuple[Reg, ...]


class _Sems(NamedTuple):
    load: Sem
    vu: Sem
    store: Sem
    count: Sem      # the integer form's plane of ones
    sum: Sem        # banded: a band's partial sum in DDR
    out: Sem        # banded: the output row written


def _start(b: Scope, op: DynamicOp, data) -> tuple[_Regs, _Sems]:
    """A global pool program up to its first own instruction: buffers and `data(b)`, the sizes in n, h, w
    and hw, and the DMA parameters both programs keep (one contiguous run)."""
    big: Pool2d = op.largest
    args_buffer(b, op.dims)
    b.prog.buffer(b.buf("x").name, "int8", big.x_shape, big.inputs[0].nbytes)
    b.prog.buffer(b.buf("y").name, "int8", big.output.shape, big.output.nbytes)
    b.prog.align()
    data(b)
    names = ("args", "n", "h", "w", "bands", "left", "out", "hw", "spare", "c0", "cc", "img", "set", "pend",
             "acc", "row0", "rows", "old")
    r = _Regs(*b.regs.take(*names), b.regs.take(*(f"t{k}" for k in range(12))))
    s = _Sems(*b.sems.take("load", "vu", "store", "count", "sum", "out"))
    idx = {d.name: k for k, d in enumerate(op.dims)}
    b.i("la", r.args, b.buf("args"))
    for reg, d in ((r.n, op.x_shape[0]), (r.h, op.x_shape[2]), (r.w, op.x_shape[3])):
        load_size(b, reg, d, idx, r.args)
    b.i("mul", r.hw, r.h, r.w)
    for p, v in ((("elem", 1), ("pad_value", 0), ("src_stride0", 1), ("dst_stride0", 1), ("size1", 1),
                  ("size2", 1), ("size3", 1)) + tuple((f"{q}{k}", 0) for k in range(4) for q in ("pad_lo", "pad_hi"))):
        b.setp(f"dma.{p}", v)
    return r, s


def _part(op: DynamicOp, what: str) -> Part:
    n, c = op.x_shape[:2]
    return Part([f"dynamic kernel: {op!r}", what], target_notes(op, [axis_name(n), str(c), "1", "1"]))


def _scale_table(b: Scope, op: DynamicOp) -> None:
    """The float form's table: f32(sx / f32(sy * n)) for every plane size n of the range."""
    big: Pool2d = op.largest
    n_lo, n_hi = _plane_range(op)
    if n_hi - n_lo + 1 > MAX_SCALES:
        raise CompileError(f"dynamic global average pool: the range allows {n_hi - n_lo + 1} plane sizes, "
                           f"more than the {MAX_SCALES} float32 factors its table may hold; narrow the range")
    b.prog.label(b.label("pool_scales"), f"f32(sx / f32(sy * n)) for n = {n_lo}..{n_hi}")
    b.prog.words(f32_bits(global_avg_pool_scale(big.scale_x, big.scale_out, k)) for k in range(n_lo, n_hi + 1))


def _load_scale(b: Scope, r: _Regs, n_lo: int) -> None:
    """vu.fscale = the table's factor for this plane size (r.hw)."""
    t = r.t
    b.comment("the factor for this plane size from the table")
    b.i("addi", t[0], r.hw, -n_lo)
    b.i("slli", t[0], t[0], 2)
    b.i("la", t[1], b.label("pool_scales"))
    b.i("add", t[0], t[0], t[1])
    b.i("ld", t[2], t[0], 0)
    b.setp("vu.fscale", t[2])


# ----------------------------------------------------------------------------- planes that fit: one set a tile

def _one_set(b: Scope, op: DynamicOp, cfg: Config, cc: int) -> Part:
    """The dynamic global average pool in tiles of cc channels' whole planes, two buffer sets."""
    big: Pool2d = op.largest
    w_max = big.x_shape[3]

    def data(b: Scope) -> None:
        if big.is_float:
            _scale_table(b, op)
        else:
            b.prog.label(b.label("pool_ones"), "one row of ones: the VU counts the plane")
            b.prog.space(w_max, 1)
    r, s = _start(b, op, data)
    count_at = 2 * set_bytes(cc, big.x_shape[2] * w_max)   # the integer form's ones and their sum, after the sets
    for p, v in (("win_stride_w", 1), ("n0", 1), ("n1", 1), ("n3", 1), ("b_stride0", 0), ("b_stride1", 0),
                 ("b_stride2", 0), ("win_h", r.h), ("win_w", r.w), ("win_stride_h", r.w), ("a_stride2", r.hw)):
        b.setp(f"vu.{p}", v)
    if big.is_float:
        _load_scale(b, r, _plane_range(op)[0])
        b.i("muli", r.t[2], r.hw, big.x_zp)
        for p, v in (("za", r.t[2]), ("zp_out", big.zp_out), ("lo", -128), ("hi", 127)):
            b.setp(f"vu.{p}", v)
    else:
        b.comment("n = h * w in VBUF: the window sum of a plane of ones, made by the VU")
        for p, v in (("size0", r.w), ("size1", r.h), ("dst_stride1", r.w), ("src_stride1", 0)):
            b.setp(f"dma.{p}", v)
        b.i("la", r.t[0], b.label("pool_ones"))
        b.i("li", r.t[1], count_at + 64)
        b.i("dma", b.ch(0), Mem("vbuf0", r.t[1]), Mem("ddr", r.t[0]), signal=s.count)
        b.setp("vu.n2", 1)
        b.setp("vu.d_stride0", 4)
        b.i("li", r.t[2], count_at)
        b.i("vu.pool.acc", "vu0", r.t[2], r.t[1], wait=s.count)
    b.setp("dma.size1", 1)
    for reg in (r.img, r.set, r.pend):
        b.i("li", reg, 0)
    _tiles(b, op, r, s, cc, count_at)
    drain(b, r.pend, s.store)
    return _part(op, f"global average pool, {cc} channels per tile; two buffer sets")


def _tiles(b: Scope, op: DynamicOp, r: _Regs, s: _Sems, cc: int, count_at: int) -> None:
    """Per image, per tile of cc channels: their planes loaded, pooled to a byte a channel, stored."""
    big: Pool2d = op.largest
    c, t = op.x_shape[1], r.t
    b.at(b.label("batch"))
    b.i("li", r.c0, 0)
    b.at(b.label("tile"))
    b.i("li", r.cc, c)
    b.i("sub", r.cc, r.cc, r.c0)
    b.i("li", t[0], cc)
    b.i("min", r.cc, r.cc, t[0])
    b.i("li", t[0], 2)
    b.i("blt", r.pend, t[0], b.label("free"))
    b.i("sem.wait", s.store)
    b.i("addi", r.pend, r.pend, -1)
    b.at(b.label("free"))
    inb, outb, src = t[1], t[2], t[3]
    b.i("muli", inb, r.set, set_bytes(cc, big.x_shape[2] * big.x_shape[3]))
    b.i("mul", outb, r.hw, r.cc)
    b.i("add", outb, outb, inb)
    b.i("addi", outb, outb, 3)
    b.i("andi", outb, outb, -4)
    b.comment("the tile's planes, contiguous in DDR and VBUF")
    _channel_address(b, r, src, c, "x")
    b.i("mul", t[4], r.hw, r.cc)
    b.setp("dma.size0", t[4])
    b.i("dma", b.ch(0), Mem("vbuf0", inb), Mem("ddr", src), signal=s.load)
    b.setp("vu.n2", r.cc)
    _pool_tile(b, r, s, big.is_float, count_at)
    b.comment("store: one byte a channel")
    _channel_address(b, r, src, c, "y")
    b.setp("dma.size0", r.cc)
    b.i("dma", b.ch(2), Mem("ddr", src), Mem("vbuf0", outb), wait=s.vu, signal=s.store)
    b.i("addi", r.pend, r.pend, 1)
    b.i("xori", r.set, r.set, 1)
    b.i("add", r.c0, r.c0, r.cc)
    b.i("li", t[0], c)
    b.i("blt", r.c0, t[0], b.label("tile"))
    b.i("addi", r.img, r.img, 1)
    b.i("blt", r.img, r.n, b.label("batch"))


def _channel_address(b: Scope, r: _Regs, reg: Reg, c: int, buf: str) -> None:
    """reg = the address of channel r.c0 of image r.img: its plane in x, its byte in y."""
    b.i("muli", reg, r.img, c)
    b.i("add", reg, reg, r.c0)
    if buf == "x":
        b.i("mul", reg, reg, r.hw)
    b.i("la", r.t[0], b.buf(buf))
    b.i("add", reg, reg, r.t[0])


def _pool_tile(b: Scope, r: _Regs, s: _Sems, is_float: bool, count_at: int) -> None:
    """The tile's window command: the integer form's vu.pool.avg by the count, or the float form's int32
    sums requantised in place."""
    inb, outb = r.t[1], r.t[2]
    if is_float:
        b.comment("int32 sums, then requantised in place to int8 (one byte a channel)")
        b.setp("vu.d_stride0", 4)
        b.setp("vu.d_stride2", 4)
        b.i("vu.pool.acc", "vu0", outb, inb, wait=s.load)
        for p, v in (("n2", 1), ("d_stride0", 1), ("a_stride0", 4), ("n0", r.cc)):
            b.setp(f"vu.{p}", v)
        b.i("vu.requant.f", "vu0", outb, outb, "i32", signal=s.vu)
        b.setp("vu.n0", 1)
        b.setp("vu.a_stride2", r.hw)
    else:
        b.setp("vu.d_stride0", 1)
        b.setp("vu.d_stride2", 1)
        b.i("li", r.t[0], count_at)
        b.i("vu.pool.avg", "vu0", outb, inb, r.t[0], wait=s.load, signal=s.vu)


# ----------------------------------------------------------------------------- planes in bands of rows

@dataclass
class _Bands:
    """The banded program's geometry and state: rows a band, a set's bytes, where its sum and the zero word
    and the output row sit in VBUF, and the counter that numbers its local labels."""

    op: DynamicOp
    r: _Regs
    s: _Sems
    th: int
    band: int
    sum_at: int
    zero: int
    out: int
    labels: count


def _band_geometry(op: DynamicOp, cfg: Config) -> tuple[int, int, int]:
    """(rows a band, bytes a set, the set's sum offset); CompileError when one row does not fit."""
    big: Pool2d = op.largest
    n_max, c, h_max, w_max = big.x_shape
    out_bytes = -(-n_max * c // 64) * 64
    th = min(MAX_BAND_ROWS, h_max, (cfg.vbuf_bytes - 64 - out_bytes) // BAND_SETS // w_max - 1)
    band = -(-(-(-th * w_max // 4) * 4 + 4) // 64) * 64        # a set: th rows, then the int32 sum
    if th < 1 or BAND_SETS * band + 64 + out_bytes > cfg.vbuf_bytes:
        raise CompileError(f"dynamic global average pool: one row at the largest width ({w_max} bytes) does not "
                           f"fit {BAND_SETS} buffer sets in VBUF ({cfg.vbuf_bytes} bytes) beside the output "
                           f"({n_max * c} bytes); narrow the range")
    return th, band, -(-th * w_max // 4) * 4


def _banded(b: Scope, op: DynamicOp, cfg: Config) -> Part:
    """A dynamic global average pool whose plane does not fit VBUF at the largest shape.

    Each channel's plane is summed in bands of rows: per band one DMA of its rows into a buffer set, one
    vu.pool.acc over them (int32), and one 4-byte DMA of that partial sum to a DDR word, which the CU `ld`s
    and adds up once its token says it is there (three bands in flight, three sets, three DDR words: a
    band's load then waits for the sum of the band three before, long stored, not of the one before it,
    whose 4-byte store would leave DDR idle for its latency every band).  After the
    channel's last band the CU has the plane's sum s and computes the output as the one-set kernel's VU
    does: the integer form's round(s / n), half away from zero and saturated (a long division, the quotient
    being at most 128), the float form's s - x_zp * n; `vu.requant.f` of a zero int32 word with za = minus
    that (scale 1.0 for the integer form, the table's factor for the float one) writes the channel's byte
    into an output row in VBUF, stored once at the end.  The bands run on across channels and images; the
    CU counts each channel's sums down from its bands per channel, so a channel's end stalls nothing."""
    big: Pool2d = op.largest
    th, band, sum_at = _band_geometry(op, cfg)

    def data(b: Scope) -> None:
        b.prog.label(b.label("pool_partial"), "the sums of the bands in flight")
        b.prog.space(4 * BAND_SETS)
        b.prog.label(b.label("pool_zero"))
        b.prog.words([0])
        if big.is_float:
            _scale_table(b, op)
    r, s = _start(b, op, data)
    g = _Bands(op, r, s, th, band, sum_at, BAND_SETS * band, BAND_SETS * band + 64, count())
    _band_setup(b, g)
    _band_loops(b, g)
    _band_end(b, g)
    return _part(op, f"global average pool in bands of {th} rows (the plane does not fit VBUF); partial sums "
                 f"added up by the CU; {BAND_SETS} buffer sets")


def _band_setup(b: Scope, g: _Bands) -> None:
    """The VU's constant parameters, the int32 zero in VBUF, the loop state and the bands a channel."""
    big: Pool2d = g.op.largest
    r, t = g.r, g.r.t
    for p in ("n0", "n1", "n2", "n3", "win_stride_w"):
        b.setp(f"vu.{p}", 1)
    b.setp("vu.win_stride_h", r.w)
    if big.is_float:
        _load_scale(b, r, _plane_range(g.op)[0])
        b.setp("vu.zp_out", big.zp_out)
    else:
        b.setp("vu.fscale", f32_bits(1.0))         # the CU's rounded average, as it is
        b.setp("vu.zp_out", 0)
    b.setp("vu.lo", -128)
    b.setp("vu.hi", 127)
    b.comment("an int32 zero in VBUF: ch0 loads it ahead of every band, which the VU waits for")
    b.setp("dma.size0", 4)
    b.i("la", t[0], b.label("pool_zero"))
    b.i("li", t[1], g.zero)
    b.i("dma", b.ch(0), Mem("vbuf0", t[1]), Mem("ddr", t[0]))
    for reg in (r.img, r.set, r.pend, r.old):
        b.i("li", reg, 0)
    b.comment("bands a channel: the CU counts each channel's sums down from it")
    b.i("li", r.bands, 0)
    b.i("li", t[0], 0)
    b.at(b.label("count"))
    b.i("addi", t[0], t[0], g.th)
    b.i("addi", r.bands, r.bands, 1)
    b.i("blt", t[0], r.h, b.label("count"))
    for reg in (r.acc, r.out):
        b.i("li", reg, 0)
    b.i("add", r.left, r.bands, ZERO)


def _band_loops(b: Scope, g: _Bands) -> None:
    """Per image, channel and band: the band's rows loaded, summed by the VU, the sum stored to its DDR word."""
    r, s, t, c = g.r, g.s, g.r.t, g.op.x_shape[1]
    b.at(b.label("batch"))
    b.i("li", r.c0, 0)
    b.at(b.label("channel"))
    b.i("li", r.row0, 0)
    b.at(b.label("band"))
    b.i("sub", r.rows, r.h, r.row0)
    b.i("li", t[0], g.th)
    b.i("min", r.rows, r.rows, t[0])
    b.i("li", t[0], BAND_SETS)
    b.i("blt", r.pend, t[0], b.label("free"))
    _take_sum(b, g)
    b.at(b.label("free"))
    b.comment("the band's rows, contiguous in DDR and VBUF")
    b.i("mul", t[3], r.rows, r.w)
    b.setp("dma.size0", t[3])
    b.i("muli", t[4], r.img, c)
    b.i("add", t[4], t[4], r.c0)
    b.i("mul", t[4], t[4], r.hw)
    b.i("mul", t[5], r.row0, r.w)
    b.i("add", t[4], t[4], t[5])
    b.i("la", t[5], b.buf("x"))
    b.i("add", t[4], t[4], t[5])
    b.i("muli", t[6], r.set, g.band)
    b.i("dma", b.ch(0), Mem("vbuf0", t[6]), Mem("ddr", t[4]), signal=s.load)
    b.setp("vu.win_h", r.rows)
    b.setp("vu.win_w", r.w)
    b.i("addi", t[7], t[6], g.sum_at)
    b.i("vu.pool.acc", "vu0", t[7], t[6], wait=s.load, signal=s.vu)
    b.comment("its sum to the set's DDR word, for the CU")
    b.setp("dma.size0", 4)
    _partial_word(b, g, r.set)
    b.i("dma", b.ch(2), Mem("ddr", t[1]), Mem("vbuf0", t[7]), wait=s.vu, signal=s.sum)
    b.i("addi", r.pend, r.pend, 1)
    _next_slot(b, g, r.set, "set")
    b.i("add", r.row0, r.row0, r.rows)
    b.i("blt", r.row0, r.h, b.label("band"))
    b.i("addi", r.c0, r.c0, 1)
    b.i("li", t[0], c)
    b.i("blt", r.c0, t[0], b.label("channel"))
    b.i("addi", r.img, r.img, 1)
    b.i("blt", r.img, r.n, b.label("batch"))


def _band_end(b: Scope, g: _Bands) -> None:
    """The last bands' sums, then the output row in one store, and its token (none left at the end)."""
    r, s, t = g.r, g.s, g.r.t
    b.at(b.label("sums"), "the last bands' sums")
    b.i("beq", r.pend, ZERO, b.label("stored"))
    _take_sum(b, g)
    b.i("jal", ZERO, b.label("sums"))
    b.at(b.label("stored"))
    b.comment("every channel's byte written (the VU's queue is in order): one store")
    b.i("li", t[1], g.out)
    b.i("vu.mov", "vu0", "i8", t[1], "i8", t[1], signal=s.out)
    b.i("muli", t[0], r.n, g.op.x_shape[1])
    b.setp("dma.size0", t[0])
    b.i("la", t[2], b.buf("y"))
    b.i("dma", b.ch(2), Mem("ddr", t[2]), Mem("vbuf0", t[1]), wait=s.out, signal=s.store)
    b.at(b.label("drain"))
    b.i("sem.wait", s.store)


def _partial_word(b: Scope, g: _Bands, slot: Reg) -> None:
    """r.t[1] = the address of slot's DDR word for its band's partial sum."""
    t = g.r.t
    b.i("slli", t[0], slot, 2)
    b.i("la", t[1], b.label("pool_partial"))
    b.i("add", t[1], t[1], t[0])


def _next_slot(b: Scope, g: _Bands, reg: Reg, what: str) -> None:
    """reg + 1, back to 0 after the last set."""
    k = next(g.labels)
    b.i("addi", reg, reg, 1)
    b.i("li", g.r.t[0], BAND_SETS)
    b.i("blt", reg, g.r.t[0], b.label(f"{what}{k}"))
    b.i("li", reg, 0)
    b.at(b.label(f"{what}{k}"))


def _take_sum(b: Scope, g: _Bands) -> None:
    """The oldest band's partial sum: its token, then ld from its DDR word; after its channel's last band,
    that channel's byte."""
    r, t = g.r, g.r.t
    k = next(g.labels)
    b.i("sem.wait", g.s.sum)
    _partial_word(b, g, r.old)
    b.i("ld", t[2], t[1], 0)
    b.i("add", r.acc, r.acc, t[2])
    _next_slot(b, g, r.old, "old")
    b.i("addi", r.pend, r.pend, -1)
    b.i("addi", r.left, r.left, -1)
    b.i("bne", r.left, ZERO, b.label(f"more{k}"))
    _channel_byte(b, g, k)
    b.i("li", r.acc, 0)
    b.i("add", r.left, r.bands, ZERO)
    b.i("addi", r.out, r.out, 1)
    b.at(b.label(f"more{k}"))


def _channel_byte(b: Scope, g: _Bands, k: int) -> None:
    """The output of the channel whose sum r.acc is, into the output row at r.out."""
    big: Pool2d = g.op.largest
    r, t = g.r, g.r.t
    if big.is_float:
        b.comment("za = x_zp * n - s: requant.f of zero computes f32(s - x_zp * n) * factor")
        b.i("muli", t[0], r.hw, big.x_zp)
        b.i("sub", t[0], t[0], r.acc)
    else:
        _rounded_average(b, r, k)
    b.setp("vu.za", t[0])
    b.setp("vu.win_h", 1)
    b.setp("vu.win_w", 1)
    b.i("addi", t[1], r.out, g.out)
    b.i("li", t[2], g.zero)
    b.i("vu.requant.f", "vu0", t[1], t[2], "i32")


def _rounded_average(b: Scope, r: _Regs, k: int) -> None:
    """r.t[0] = -round(s / n) for s = r.acc, n = r.hw: half away from zero, saturated at 127."""
    t = r.t
    q, rem, m = t[2], t[3], t[4]
    b.comment("q = (|s| + n // 2) // n by long division (q <= 128), signed, saturated; za = -q")
    b.i("srai", t[0], r.acc, 31)
    b.i("xor", rem, r.acc, t[0])
    b.i("sub", rem, rem, t[0])                   # |s|
    b.i("srli", t[1], r.hw, 1)
    b.i("add", rem, rem, t[1])
    b.i("li", q, 0)
    for bit in range(7, -1, -1):
        b.i("slli", m, r.hw, bit)
        b.i("blt", rem, m, b.label(f"q{k}_{bit}"))
        b.i("sub", rem, rem, m)
        b.i("addi", q, q, 1 << bit)
        b.at(b.label(f"q{k}_{bit}"))
    b.i("xor", q, q, t[0])
    b.i("sub", q, q, t[0])                       # the sign of s
    b.i("li", t[1], 127)
    b.i("min", q, q, t[1])
    b.i("sub", t[0], ZERO, q)
