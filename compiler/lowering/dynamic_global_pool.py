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

from nnpsim.config import Config, shape_target

from ..dims import Dim, DynamicOp
from ..errors import CompileError
from ..ops import Pool2d
from ..quant import f32_bits
from ..semantics import global_avg_pool_scale
from .dynamic import RB, RH, RHW, RN, RPEND, RW, Emit, axis_name, drain_and_halt, fold_channels, target_notes

S_LOAD, S_VU, S_STORE, S_COUNT = "s0", "s1", "s2", "s3"
RC0, RCC, RIMG = "r10", "r11", "r12"    # the tile's first channel, its channel count, the image
T = [f"r{k}" for k in range(19, 31)]
MAX_SCALES = 1 << 18               # float32 factors a float global pool's table may hold (1 MB of DDR)


def is_global(op: DynamicOp) -> bool:
    """Is op an average pool whose window is the whole plane at both ends of its range?"""
    return (isinstance(op.largest, Pool2d) and op.largest.mode == "avg" and op.largest.is_global
            and op.smallest.is_global)


def _plane_range(op: DynamicOp) -> tuple[int, int]:
    lo, hi = op.smallest.x_shape, op.largest.x_shape
    return lo[2] * lo[3], hi[2] * hi[3]


def tile_channels(op: DynamicOp, cfg: Config) -> int:
    """The most channels per tile whose two sets (planes at the largest shape, int32 results) fit VBUF."""
    big: Pool2d = op.largest
    c, plane = big.x_shape[1], big.x_shape[2] * big.x_shape[3]
    free = cfg.vbuf_bytes - 128 - (0 if big.is_float else plane)     # the integer form's ones and their sum
    cc = min(c, free // 2 // (plane + 4 + 64))
    if cc < 1:
        raise CompileError(f"dynamic global average pool: one channel's plane at the largest shape "
                           f"({big.x_shape[2]}x{big.x_shape[3]}, {plane} bytes) does not fit two buffer sets in "
                           f"VBUF ({cfg.vbuf_bytes} bytes); narrow the range")
    return cc


def set_bytes(cc: int, plane: int) -> int:
    """Bytes of one buffer set: cc planes, then cc int32 results (64-byte aligned)."""
    return -(-(cc * plane + 3 + 4 * cc) // 64) * 64


def program_text(op: DynamicOp, cfg: Config) -> str:
    """The assembly of the dynamic global average pool."""
    big: Pool2d = op.largest
    n, c, h, w = op.x_shape
    _, _, h_max, w_max = big.x_shape
    cc = tile_channels(op, cfg)
    size = set_bytes(cc, h_max * w_max)
    count_at = 2 * size                         # the integer form's ones plane and its sum, after the sets
    n_lo, n_hi = _plane_range(op)
    idx = {d.name: k for k, d in enumerate(op.dims)}
    L = [f"; dynamic kernel: {op!r}", f"; global average pool, {cc} channels per tile; two buffer sets", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += ["        " + s for s in target_notes(op, [axis_name(n), str(c), "1", "1"])]
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}",
          "        .align 64", f"        .buffer x, int8, ({', '.join(map(str, big.x_shape))},)",
          f"        .space {big.inputs[0].nbytes}", "        .align 64",
          f"        .buffer y, int8, ({', '.join(map(str, big.output.shape))},)", f"        .space {big.output.nbytes}",
          "        .align 64"]
    if big.is_float:
        if n_hi - n_lo + 1 > MAX_SCALES:
            raise CompileError(f"dynamic global average pool: the range allows {n_hi - n_lo + 1} plane sizes, "
                               f"more than the {MAX_SCALES} float32 factors its table may hold; narrow the range")
        L += [f"pool_scales:                             ; f32(sx / f32(sy * n)) for n = {n_lo}..{n_hi}"]
        L += [f"        .word {f32_bits(global_avg_pool_scale(big.scale_x, big.scale_out, k))}"
              for k in range(n_lo, n_hi + 1)]
    else:
        L += ["pool_ones:                               ; one row of ones: the VU counts the plane",
              f"        .space {w_max}, 1"]
    L += ["", "        .text", "main:", "        la      r1, args"]
    em = Emit(L)
    e, i = em.e, em.i
    for reg, d in ((RN, n), (RH, h), (RW, w)):
        i(f"ld      {reg}, r1, {4 * idx[d.name]}" if isinstance(d, Dim) else f"li      {reg}, {d}")
    i(f"mul     {RHW}, {RH}, {RW}")
    for p, v in ((("elem", 1), ("pad_value", 0), ("src_stride0", 1), ("dst_stride0", 1), ("size2", 1),
                  ("size3", 1)) + tuple((f"{q}{k}", 0) for k in range(4) for q in ("pad_lo", "pad_hi"))):
        i(f"setpi   dma.{p}, {v}")
    for p, v in (("win_stride_w", 1), ("n0", 1), ("n1", 1), ("n3", 1), ("b_stride0", 0), ("b_stride1", 0),
                 ("b_stride2", 0)):
        i(f"setpi   vu.{p}, {v}")
    for p, v in (("win_h", RH), ("win_w", RW), ("win_stride_h", RW), ("a_stride2", RHW)):
        i(f"setp    vu.{p}, {v}, 0")
    if big.is_float:
        e("        ; the factor for this plane size from the table, x_zp * n into za")
        i(f"addi    {T[0]}, {RHW}, {-n_lo}")
        i(f"slli    {T[0]}, {T[0]}, 2")
        i(f"la      {T[1]}, pool_scales")
        i(f"add     {T[0]}, {T[0]}, {T[1]}")
        i(f"ld      {T[2]}, {T[0]}, 0")
        i(f"setp    vu.fscale, {T[2]}, 0")
        i(f"muli    {T[2]}, {RHW}, {big.x_zp}")
        i(f"setp    vu.za, {T[2]}, 0")
        for p, v in (("zp_out", big.zp_out), ("lo", -128), ("hi", 127)):
            i(f"setpi   vu.{p}, {v}")
    else:
        e("        ; n = h * w in VBUF: the window sum of a plane of ones, made by the VU")
        for p, v in (("size0", RW), ("size1", RH), ("dst_stride1", RW)):
            i(f"setp    dma.{p}, {v}, 0")
        i("setpi   dma.src_stride1, 0")
        i(f"la      {T[0]}, pool_ones")
        i(f"li      {T[1]}, {count_at + 64}")
        i(f"dma     ch0, vbuf0[{T[1]}], ddr[{T[0]}], signal={S_COUNT}")
        i("setpi   vu.n2, 1")
        i("setpi   vu.d_stride0, 4")
        i(f"li      {T[2]}, {count_at}")
        i(f"vu.pool.acc vu0, {T[2]}, {T[1]}, wait={S_COUNT}")
    i("setpi   dma.size1, 1")
    i(f"li      {RIMG}, 0")
    i(f"li      {RB}, 0")
    i(f"li      {RPEND}, 0")
    e("batch:")
    i(f"li      {RC0}, 0")
    e("tile:")
    i(f"li      {RCC}, {c}")
    i(f"sub     {RCC}, {RCC}, {RC0}")
    i(f"li      {T[0]}, {cc}")
    i(f"min     {RCC}, {RCC}, {T[0]}")
    i(f"li      {T[0]}, 2")
    i(f"blt     {RPEND}, {T[0]}, free")
    i(f"sem.wait {S_STORE}")
    i(f"addi    {RPEND}, {RPEND}, -1")
    e("free:")
    inb, outb, src = T[1], T[2], T[3]
    i(f"muli    {inb}, {RB}, {size}")
    i(f"mul     {outb}, {RHW}, {RCC}")
    i(f"add     {outb}, {outb}, {inb}")
    i(f"addi    {outb}, {outb}, 3")
    i(f"andi    {outb}, {outb}, -4")
    e("        ; the tile's planes, contiguous in DDR and VBUF")
    i(f"muli    {src}, {RIMG}, {c}")
    i(f"add     {src}, {src}, {RC0}")
    i(f"mul     {src}, {src}, {RHW}")
    i(f"la      {T[0]}, x")
    i(f"add     {src}, {src}, {T[0]}")
    i(f"mul     {T[4]}, {RHW}, {RCC}")
    i(f"setp    dma.size0, {T[4]}, 0")
    i(f"dma     ch0, vbuf0[{inb}], ddr[{src}], signal={S_LOAD}")
    i(f"setp    vu.n2, {RCC}, 0")
    if big.is_float:
        e("        ; int32 sums, then requantised in place to int8 (one byte a channel)")
        i("setpi   vu.d_stride0, 4")
        i("setpi   vu.d_stride2, 4")
        i(f"vu.pool.acc vu0, {outb}, {inb}, wait={S_LOAD}")
        for p, v in (("n2", 1), ("d_stride0", 1), ("a_stride0", 4)):
            i(f"setpi   vu.{p}, {v}")
        i(f"setp    vu.n0, {RCC}, 0")
        i(f"vu.requant.f vu0, {outb}, {outb}, i32, signal={S_VU}")
        i("setpi   vu.n0, 1")
        i(f"setp    vu.a_stride2, {RHW}, 0")
    else:
        i("setpi   vu.d_stride0, 1")
        i("setpi   vu.d_stride2, 1")
        i(f"li      {T[0]}, {count_at}")
        i(f"vu.pool.avg vu0, {outb}, {inb}, {T[0]}, wait={S_LOAD}, signal={S_VU}")
    e("        ; store: one byte a channel")
    i(f"muli    {src}, {RIMG}, {c}")
    i(f"add     {src}, {src}, {RC0}")
    i(f"la      {T[0]}, y")
    i(f"add     {src}, {src}, {T[0]}")
    i(f"setp    dma.size0, {RCC}, 0")
    i(f"dma     ch2, ddr[{src}], vbuf0[{outb}], wait={S_VU}, signal={S_STORE}")
    i(f"addi    {RPEND}, {RPEND}, 1")
    i(f"xori    {RB}, {RB}, 1")
    i(f"add     {RC0}, {RC0}, {RCC}")
    i(f"li      {T[0]}, {c}")
    i(f"blt     {RC0}, {T[0]}, tile")
    i(f"addi    {RIMG}, {RIMG}, 1")
    i(f"blt     {RIMG}, {RN}, batch")
    L += drain_and_halt(RPEND, S_STORE)
    return "\n".join(L) + "\n"


def lower_global_pool(op: DynamicOp, cfg: Config):
    """A dynamic global average pool's (assembly, .incbin files, None)."""
    return fold_channels(program_text(op, cfg), cfg.dma_channels), {}, None

