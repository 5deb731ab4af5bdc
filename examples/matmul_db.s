; matmul_db.s -- tiled int8 matrix product on the NU with double buffering.
;
;   out = requant(bias + (A - ZA) @ B)       A: M x K int8, B: K x N int8,
;                                            bias: N int32, out: M x N int8
; The product is a 1x1 convolution over a 1 x M "image" with K channels.
; K is cut into T = K / 32 tiles.  Tile t of A goes to IBUF half t % 2 and
; tile t of B to WBUF half t % 2, so the DMA of tile t + 1 (and t + 2 as soon
; as tile t's half is free) overlaps nu.conv.acc on tile t.  Semaphores:
;   s1, s2  half 0 / 1 loaded (signalled by the B copy, which follows the A
;           copy on the same DMA channel, so it implies both)
;   s3, s4  half 0 / 1 free again (signalled by the conv that read it)
;   s5      the last conv is done          s6  accumulators are in VBUF
;   s7      requantised result is in VBUF
; The bias is broadcast into ABUF by a DMA with source stride 0 across the
; M pixels; every tile then accumulates onto it.
;
; Expected (numpy, int64): acc = bias + (A - ZA) @ B;
;   out = clip(((acc * MQ + (1 << (SQ - 1))) >> SQ) + ZQ, -128, 127)

        .equ M, 16
        .equ K, 128
        .equ N, 64
        .equ T, K / 32              ; K tiles
        .equ NB, N / 32             ; output channel blocks
        .equ ZA, 3                  ; zero point of A
        .equ MQ, 1518500250         ; requantisation multiplier ...
        .equ SQ, 40                 ; ... and shift
        .equ ZQ, -5                 ; output zero point
        .equ IB_HALF, M * 32        ; bytes of one IBUF half
        .equ WB_HALF, NB * 32 * 32  ; bytes of one WBUF half
        .equ ACC_BYTES, NB * M * 32 * 4

; DMA parameters for A tile `tile`: IBUF[m][r] = A[m][32 * tile + r]; r1 = source
.macro a_tile tile
        setpi   dma.elem, 1
        setpi   dma.size0, 32
        setpi   dma.size1, M
        setpi   dma.size2, 1
        setpi   dma.src_stride0, 1
        setpi   dma.src_stride1, K
        setpi   dma.dst_stride0, 1
        setpi   dma.dst_stride1, 32
        addi    r1, r10, 32 * \tile
.endm

; DMA parameters for B tile `tile`: WBUF[ob][r][c] = B[32 * tile + r][32 * ob + c]; r2 = source
.macro b_tile tile
        setpi   dma.elem, 1
        setpi   dma.size0, 32
        setpi   dma.size1, 32
        setpi   dma.size2, NB
        setpi   dma.src_stride0, 1
        setpi   dma.src_stride1, N
        setpi   dma.src_stride2, 32
        setpi   dma.dst_stride0, 1
        setpi   dma.dst_stride1, 32
        setpi   dma.dst_stride2, 32 * 32
        addi    r2, r11, 32 * N * \tile
.endm

        .text
main:
        la      r10, A
        la      r11, B
        la      r12, bias
        la      r13, out
        li      r20, 0              ; IBUF half 0
        li      r21, IB_HALF        ; IBUF half 1
        li      r22, 0              ; WBUF half 0
        li      r23, WB_HALF        ; WBUF half 1
        li      r24, 0              ; ABUF accumulators [ob][m][c] int32
        li      r25, 0              ; VBUF: accumulators (int32)
        li      r26, ACC_BYTES      ; VBUF: result (int8, [m][n])

        ; bias -> ABUF[ob][m][c] = bias[32 * ob + c]: stride 0 across m
        setpi   dma.elem, 4
        setpi   dma.size0, 32
        setpi   dma.size1, M
        setpi   dma.size2, NB
        setpi   dma.src_stride0, 4
        setpi   dma.src_stride1, 0
        setpi   dma.src_stride2, 32 * 4
        setpi   dma.dst_stride0, 4
        setpi   dma.dst_stride1, 32 * 4
        setpi   dma.dst_stride2, M * 32 * 4
        dma     ch0, abuf0[r24], ddr[r12]

        ; the NU tile: 1 x M pixels, one 32-channel input block, NB output blocks
        setpi   nu.in_h, 1
        setpi   nu.in_w, M
        setpi   nu.in_cb, 1
        setpi   nu.out_h, 1
        setpi   nu.out_w, M
        setpi   nu.out_cb, NB
        setpi   nu.k_h, 1
        setpi   nu.k_w, 1
        setpi   nu.x_zp, ZA

        ; prologue: tiles 0 and 1 into both halves (ch0 after the bias)
        a_tile  0
        dma     ch0, ibuf0[r20], ddr[r1]
        b_tile  0
        dma     ch0, wbuf0[r22], ddr[r2], signal=s1
        a_tile  1
        dma     ch1, ibuf0[r21], ddr[r1]
        b_tile  1
        dma     ch1, wbuf0[r23], ddr[r2], signal=s2

        ; tile 0 on half 0, then refill half 0 with tile 2 once it is free
        nu.conv.acc nu0, r24, r20, r22, wait=s1, signal=s3
        a_tile  2
        dma     ch0, ibuf0[r20], ddr[r1], wait=s3
        b_tile  2
        dma     ch0, wbuf0[r22], ddr[r2], signal=s1

        ; tile 1 on half 1, then refill half 1 with tile 3
        nu.conv.acc nu0, r24, r21, r23, wait=s2, signal=s4
        a_tile  3
        dma     ch1, ibuf0[r21], ddr[r1], wait=s4
        b_tile  3
        dma     ch1, wbuf0[r23], ddr[r2], signal=s2

        ; tiles 2 and 3 (nothing left to load)
        nu.conv.acc nu0, r24, r20, r22, wait=s1
        nu.conv.acc nu0, r24, r21, r23, wait=s2, signal=s5

        ; ABUF -> VBUF, flat
        setpi   dma.elem, 4
        setpi   dma.size0, ACC_BYTES / 4
        setpi   dma.size1, 1
        setpi   dma.size2, 1
        setpi   dma.src_stride0, 4
        setpi   dma.dst_stride0, 4
        dma     ch2, vbuf0[r25], abuf0[r24], wait=s5, signal=s6

        ; requantise [ob][m][c] int32 into [m][32 * ob + c] int8
        setpi   vu.n0, 32
        setpi   vu.n1, M
        setpi   vu.n2, NB
        setpi   vu.n3, 1
        setpi   vu.a_stride0, 4
        setpi   vu.a_stride1, 32 * 4
        setpi   vu.a_stride2, M * 32 * 4
        setpi   vu.d_stride0, 1
        setpi   vu.d_stride1, N
        setpi   vu.d_stride2, 32
        setpi   vu.za, 0
        setpi   vu.ma, MQ
        setpi   vu.shift, SQ
        setpi   vu.zp_out, ZQ
        setpi   vu.lo, -128
        setpi   vu.hi, 127
        vu.requant vu0, r26, r25, i32, wait=s6, signal=s7

        ; VBUF -> DDR out (already row-major)
        setpi   dma.elem, 1
        setpi   dma.size0, M * N
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
        dma     ch3, ddr[r13], vbuf0[r26], wait=s7

        barrier Q_ALL
        halt

        .data
; inputs: pseudo-random data from a linear congruential generator
        .set    SEED, 7
        .buffer A, int8, (M, K)
        .rept   M * K
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .byte   (SEED >> 16) % 256 - 128
        .endr

        .align  64
        .buffer B, int8, (K, N)
        .rept   K * N
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .byte   (SEED >> 16) % 256 - 128
        .endr

        .align  64
        .buffer bias, int32, (N,)
        .rept   N
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .word   (SEED >> 8) % 40001 - 20000
        .endr

        .align  64
        .buffer out, int8, (M, N)
        .space  M * N
