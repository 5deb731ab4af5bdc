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
from ..reference import global_avg_pool_scale
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
    """The most channels per tile whose two sets (planes at the largest shape, int32 results) fit VBUF; 0
    when one channel's plane does not (the plane is then summed in bands of rows: row_program_text)."""
    big: Pool2d = op.largest
    c, plane = big.x_shape[1], big.x_shape[2] * big.x_shape[3]
    free = cfg.vbuf_bytes - 128 - (0 if big.is_float else plane)     # the integer form's ones and their sum
    return max(0, min(c, free // 2 // (plane + 4 + 64)))


def set_bytes(cc: int, plane: int) -> int:
    """Bytes of one buffer set: cc planes, then cc int32 results (64-byte aligned)."""
    return -(-(cc * plane + 3 + 4 * cc) // 64) * 64


def program_text(op: DynamicOp, cfg: Config) -> str:
    """The assembly of the dynamic global average pool."""
    big: Pool2d = op.largest
    c = op.x_shape[1]
    _, _, h_max, w_max = big.x_shape
    cc = tile_channels(op, cfg)
    if cc == 0:
        return row_program_text(op, cfg)
    size = set_bytes(cc, h_max * w_max)
    count_at = 2 * size                         # the integer form's ones plane and its sum, after the sets
    n_lo, _ = _plane_range(op)
    data = (scale_table(op) if big.is_float else
            ["pool_ones:                               ; one row of ones: the VU counts the plane",
             f"        .space {w_max}, 1"])
    em = _start(op, cfg, f"global average pool, {cc} channels per tile; two buffer sets", data)
    e, i, L = em.e, em.i, em.L
    for p, v in (("win_stride_w", 1), ("n0", 1), ("n1", 1), ("n3", 1), ("b_stride0", 0), ("b_stride1", 0),
                 ("b_stride2", 0)):
        i(f"setpi   vu.{p}, {v}")
    for p, v in (("win_h", RH), ("win_w", RW), ("win_stride_h", RW), ("a_stride2", RHW)):
        i(f"setp    vu.{p}, {v}, 0")
    if big.is_float:
        load_scale(em, n_lo)
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


def _start(op: DynamicOp, cfg: Config, what: str, data: list[str]) -> Emit:
    """A global pool program up to its first own instruction: notes, buffers and `data`, the sizes in RN, RH,
    RW and RHW, and the DMA parameters both programs keep (one contiguous run)."""
    big: Pool2d = op.largest
    n, c, h, w = op.x_shape
    idx = {d.name: k for k, d in enumerate(op.dims)}
    L = [f"; dynamic kernel: {op!r}", f"; {what}", ""]
    L += [f"        .target {k}, {v}" for k, v in shape_target(cfg).items()]
    L += ["        " + s for s in target_notes(op, [axis_name(n), str(c), "1", "1"])]
    L += ["", "        .data", f"        .buffer args, int32, ({len(op.dims)},)", f"        .space {4 * len(op.dims)}",
          "        .align 64", f"        .buffer x, int8, ({', '.join(map(str, big.x_shape))},)",
          f"        .space {big.inputs[0].nbytes}", "        .align 64",
          f"        .buffer y, int8, ({', '.join(map(str, big.output.shape))},)", f"        .space {big.output.nbytes}",
          "        .align 64", *data, "", "        .text", "main:", "        la      r1, args"]
    em = Emit(L)
    for reg, d in ((RN, n), (RH, h), (RW, w)):
        em.i(f"ld      {reg}, r1, {4 * idx[d.name]}" if isinstance(d, Dim) else f"li      {reg}, {d}")
    em.i(f"mul     {RHW}, {RH}, {RW}")
    for p, v in ((("elem", 1), ("pad_value", 0), ("src_stride0", 1), ("dst_stride0", 1), ("size1", 1),
                  ("size2", 1), ("size3", 1)) + tuple((f"{q}{k}", 0) for k in range(4) for q in ("pad_lo", "pad_hi"))):
        em.i(f"setpi   dma.{p}, {v}")
    return em


def scale_table(op: DynamicOp) -> list[str]:
    """The float form's table: f32(sx / f32(sy * n)) for every plane size n of the range."""
    big: Pool2d = op.largest
    n_lo, n_hi = _plane_range(op)
    if n_hi - n_lo + 1 > MAX_SCALES:
        raise CompileError(f"dynamic global average pool: the range allows {n_hi - n_lo + 1} plane sizes, "
                           f"more than the {MAX_SCALES} float32 factors its table may hold; narrow the range")
    return ([f"pool_scales:                             ; f32(sx / f32(sy * n)) for n = {n_lo}..{n_hi}"]
            + [f"        .word {f32_bits(global_avg_pool_scale(big.scale_x, big.scale_out, k))}"
               for k in range(n_lo, n_hi + 1)])


def load_scale(em: Emit, n_lo: int) -> None:
    """vu.fscale = the table's factor for this plane size (RHW)."""
    i = em.i
    em.e("        ; the factor for this plane size from the table")
    i(f"addi    {T[0]}, {RHW}, {-n_lo}")
    i(f"slli    {T[0]}, {T[0]}, 2")
    i(f"la      {T[1]}, pool_scales")
    i(f"add     {T[0]}, {T[0]}, {T[1]}")
    i(f"ld      {T[2]}, {T[0]}, 0")
    i(f"setp    vu.fscale, {T[2]}, 0")


MAX_BAND_ROWS = 2047                 # a VU window's height
RACC, RR0, RROWS, ROLD = "r15", "r16", "r17", "r18"     # the channel's sum, the band's first row and rows, oldest
RNB, RLEFT, ROUT = "r5", "r6", "r7"      # bands a channel; the oldest channel's bands left, its output index
BAND_SETS = 3      # a band's load waits for the sum of the band BAND_SETS before: its set's and DDR word's release
S_SUM, S_OUT = "s4", "s5"


def row_program_text(op: DynamicOp, cfg: Config) -> str:
    """The assembly of a dynamic global average pool whose plane does not fit VBUF at the largest shape.

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
    c = op.x_shape[1]
    n_max, _, h_max, w_max = big.x_shape
    out_bytes = -(-n_max * c // 64) * 64
    th = min(MAX_BAND_ROWS, h_max, (cfg.vbuf_bytes - 64 - out_bytes) // BAND_SETS // w_max - 1)
    band = -(-(-(-th * w_max // 4) * 4 + 4) // 64) * 64        # a set: th rows, then the int32 sum
    sum_at = -(-th * w_max // 4) * 4
    if th < 1 or BAND_SETS * band + 64 + out_bytes > cfg.vbuf_bytes:
        raise CompileError(f"dynamic global average pool: one row at the largest width ({w_max} bytes) does not "
                           f"fit {BAND_SETS} buffer sets in VBUF ({cfg.vbuf_bytes} bytes) beside the output "
                           f"({n_max * c} bytes); narrow the range")
    zero, out = BAND_SETS * band, BAND_SETS * band + 64
    n_lo, _ = _plane_range(op)
    data = (["pool_partial:                            ; the sums of the bands in flight",
             f"        .space {4 * BAND_SETS}",
             "pool_zero:", "        .word 0"] + (scale_table(op) if big.is_float else []))
    em = _start(op, cfg, f"global average pool in bands of {th} rows (the plane does not fit VBUF); partial sums "
                f"added up by the CU; {BAND_SETS} buffer sets", data)
    e, i, L = em.e, em.i, em.L
    for p in ("n0", "n1", "n2", "n3", "win_stride_w"):
        i(f"setpi   vu.{p}, 1")
    i(f"setp    vu.win_stride_h, {RW}, 0")
    if big.is_float:
        load_scale(em, n_lo)
        i(f"setpi   vu.zp_out, {big.zp_out}")
    else:
        i(f"setpi   vu.fscale, {f32_bits(1.0)}")         # the CU's rounded average, as it is
        i("setpi   vu.zp_out, 0")
    i("setpi   vu.lo, -128")
    i("setpi   vu.hi, 127")
    e("        ; an int32 zero in VBUF: ch0 loads it ahead of every band, which the VU waits for")
    i("setpi   dma.size0, 4")
    i(f"la      {T[0]}, pool_zero")
    i(f"li      {T[1]}, {zero}")
    i(f"dma     ch0, vbuf0[{T[1]}], ddr[{T[0]}]")
    for reg in (RIMG, RB, RPEND, ROLD):
        i(f"li      {reg}, 0")

    labels = iter(range(1 << 30))

    def next_slot(reg: str, what: str):
        """reg + 1, back to 0 after the last set."""
        k = next(labels)
        i(f"addi    {reg}, {reg}, 1")
        i(f"li      {T[0]}, {BAND_SETS}")
        i(f"blt     {reg}, {T[0]}, {what}{k}")
        i(f"li      {reg}, 0")
        e(f"{what}{k}:")

    def take_sum():
        """The oldest band's partial sum: its token, then ld from its DDR word; after its channel's last band,
        that channel's byte."""
        k = next(labels)
        i(f"sem.wait {S_SUM}")
        i(f"slli    {T[0]}, {ROLD}, 2")
        i(f"la      {T[1]}, pool_partial")
        i(f"add     {T[1]}, {T[1]}, {T[0]}")
        i(f"ld      {T[2]}, {T[1]}, 0")
        i(f"add     {RACC}, {RACC}, {T[2]}")
        next_slot(ROLD, "old")
        i(f"addi    {RPEND}, {RPEND}, -1")
        i(f"addi    {RLEFT}, {RLEFT}, -1")
        i(f"bne     {RLEFT}, r0, more{k}")
        channel_byte(k)
        i(f"li      {RACC}, 0")
        i(f"add     {RLEFT}, {RNB}, r0")
        i(f"addi    {ROUT}, {ROUT}, 1")
        e(f"more{k}:")

    def channel_byte(k: int):
        """The output of the channel whose sum RACC is, into the output row at ROUT."""
        if big.is_float:
            e("        ; za = x_zp * n - s: requant.f of zero computes f32(s - x_zp * n) * factor")
            i(f"muli    {T[0]}, {RHW}, {big.x_zp}")
            i(f"sub     {T[0]}, {T[0]}, {RACC}")
        else:
            e("        ; q = (|s| + n // 2) // n by long division (q <= 128), signed, saturated; za = -q")
            q, t, m = T[2], T[3], T[4]
            i(f"srai    {T[0]}, {RACC}, 31")
            i(f"xor     {t}, {RACC}, {T[0]}")
            i(f"sub     {t}, {t}, {T[0]}")                   # |s|
            i(f"srli    {T[1]}, {RHW}, 1")
            i(f"add     {t}, {t}, {T[1]}")
            i(f"li      {q}, 0")
            for bit in range(7, -1, -1):
                i(f"slli    {m}, {RHW}, {bit}")
                i(f"blt     {t}, {m}, q{k}_{bit}")
                i(f"sub     {t}, {t}, {m}")
                i(f"addi    {q}, {q}, {1 << bit}")
                e(f"q{k}_{bit}:")
            i(f"xor     {q}, {q}, {T[0]}")
            i(f"sub     {q}, {q}, {T[0]}")                   # the sign of s
            i(f"li      {T[1]}, 127")
            i(f"min     {q}, {q}, {T[1]}")
            i(f"sub     {T[0]}, r0, {q}")
        i(f"setp    vu.za, {T[0]}, 0")
        i("setpi   vu.win_h, 1")
        i("setpi   vu.win_w, 1")
        i(f"addi    {T[1]}, {ROUT}, {out}")
        i(f"li      {T[2]}, {zero}")
        i(f"vu.requant.f vu0, {T[1]}, {T[2]}, i32")

    e("        ; bands a channel: the CU counts each channel's sums down from it")
    i(f"li      {RNB}, 0")
    i(f"li      {T[0]}, 0")
    e("count:")
    i(f"addi    {T[0]}, {T[0]}, {th}")
    i(f"addi    {RNB}, {RNB}, 1")
    i(f"blt     {T[0]}, {RH}, count")
    for reg in (RACC, ROUT):
        i(f"li      {reg}, 0")
    i(f"add     {RLEFT}, {RNB}, r0")
    e("batch:")
    i(f"li      {RC0}, 0")
    e("channel:")
    i(f"li      {RR0}, 0")
    e("band:")
    i(f"sub     {RROWS}, {RH}, {RR0}")
    i(f"li      {T[0]}, {th}")
    i(f"min     {RROWS}, {RROWS}, {T[0]}")
    i(f"li      {T[0]}, {BAND_SETS}")
    i(f"blt     {RPEND}, {T[0]}, free")
    take_sum()
    e("free:")
    e("        ; the band's rows, contiguous in DDR and VBUF")
    i(f"mul     {T[3]}, {RROWS}, {RW}")
    i(f"setp    dma.size0, {T[3]}, 0")
    i(f"muli    {T[4]}, {RIMG}, {c}")
    i(f"add     {T[4]}, {T[4]}, {RC0}")
    i(f"mul     {T[4]}, {T[4]}, {RHW}")
    i(f"mul     {T[5]}, {RR0}, {RW}")
    i(f"add     {T[4]}, {T[4]}, {T[5]}")
    i(f"la      {T[5]}, x")
    i(f"add     {T[4]}, {T[4]}, {T[5]}")
    i(f"muli    {T[6]}, {RB}, {band}")
    i(f"dma     ch0, vbuf0[{T[6]}], ddr[{T[4]}], signal={S_LOAD}")
    i(f"setp    vu.win_h, {RROWS}, 0")
    i(f"setp    vu.win_w, {RW}, 0")
    i(f"addi    {T[7]}, {T[6]}, {sum_at}")
    i(f"vu.pool.acc vu0, {T[7]}, {T[6]}, wait={S_LOAD}, signal={S_VU}")
    e("        ; its sum to the set's DDR word, for the CU")
    i("setpi   dma.size0, 4")
    i(f"slli    {T[0]}, {RB}, 2")
    i(f"la      {T[1]}, pool_partial")
    i(f"add     {T[1]}, {T[1]}, {T[0]}")
    i(f"dma     ch2, ddr[{T[1]}], vbuf0[{T[7]}], wait={S_VU}, signal={S_SUM}")
    i(f"addi    {RPEND}, {RPEND}, 1")
    next_slot(RB, "set")
    i(f"add     {RR0}, {RR0}, {RROWS}")
    i(f"blt     {RR0}, {RH}, band")
    i(f"addi    {RC0}, {RC0}, 1")
    i(f"li      {T[0]}, {c}")
    i(f"blt     {RC0}, {T[0]}, channel")
    i(f"addi    {RIMG}, {RIMG}, 1")
    i(f"blt     {RIMG}, {RN}, batch")
    e("sums:                                    ; the last bands' sums")
    i(f"beq     {RPEND}, r0, stored")
    take_sum()
    i("jal     r0, sums")
    e("stored:")
    e("        ; every channel's byte written (the VU's queue is in order): one store")
    i(f"li      {T[1]}, {out}")
    i(f"vu.mov  vu0, i8, {T[1]}, i8, {T[1]}, signal={S_OUT}")
    i(f"muli    {T[0]}, {RN}, {c}")
    i(f"setp    dma.size0, {T[0]}, 0")
    i(f"la      {T[2]}, y")
    i(f"dma     ch2, ddr[{T[2]}], vbuf0[{T[1]}], wait={S_OUT}, signal={S_STORE}")
    e("drain:")                                         # the store's token, so that none is left at halt
    i(f"sem.wait {S_STORE}")
    i("halt")
    return "\n".join(L) + "\n"


def lower_global_pool(op: DynamicOp, cfg: Config):
    """A dynamic global average pool's (assembly, .incbin files, None)."""
    return fold_channels(program_text(op, cfg), cfg.dma_channels), {}, None

