; requant_pool.s -- vector unit: requantise, max pooling, average pooling.
;
; x (int32, 1x4x8x8) is requantised to q (int8), then pooled 2x2 with
; stride 2 two ways: mp = max pooling, ap = average pooling done as
; vu.pool.sum (int32 window sums) then vu.divr by the window size 4, which
; rounds half away from zero.  A pooling stride is expressed through the
; `a` strides; the window through win_h/win_w and their byte steps.
;
; Expected (numpy, int64):
;   q  = clip(((x * MQ + (1 << (SQ - 1))) >> SQ) + ZQ, -128, 127)
;   w  = q.reshape(1, 4, 4, 2, 4, 2)              (windows)
;   mp = w.max(axis=(3, 5))
;   s  = w.sum(axis=(3, 5));  ap = sign(s) * ((abs(s) + 2) // 4)

        .equ C, 4
        .equ H, 8
        .equ W, 8
        .equ OH, H / 2
        .equ OW, W / 2
        .equ MQ, 1518500250
        .equ SQ, 38
        .equ ZQ, 2

        ; VBUF map (byte addresses)
        .equ V_X, 0                 ; x     int32 [C][H][W]
        .equ V_Q, V_X + C * H * W * 4   ; q     int8  [C][H][W]
        .equ V_MP, V_Q + C * H * W  ; mp    int8  [C][OH][OW]
        .equ V_S, V_MP + C * OH * OW    ; sums  int32 [C][OH][OW]
        .equ V_AP, V_S + C * OH * OW * 4    ; ap    int8  [C][OH][OW]
        .equ V_DIV, V_AP + C * OH * OW  ; the divisor, int32

; VU iteration over a C x R x S box (n0 = S innermost) and its strides
.macro vu_box s, r, c
        setpi   vu.n0, \s
        setpi   vu.n1, \r
        setpi   vu.n2, \c
        setpi   vu.n3, 1
.endm
.macro vu_strides x, s0, s1, s2
        setpi   vu.\x\()_stride0, \s0
        setpi   vu.\x\()_stride1, \s1
        setpi   vu.\x\()_stride2, \s2
.endm

; flat DMA of `bytes` bytes
.macro flat_dma bytes
        setpi   dma.elem, 1
        setpi   dma.size0, \bytes
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
.endm

        .text
main:
        la      r10, x
        la      r11, divisor
        li      r20, V_X
        li      r21, V_Q
        li      r22, V_MP
        li      r23, V_S
        li      r24, V_AP
        li      r25, V_DIV

        ; DDR -> VBUF: x and the divisor (same channel: s1 means both)
        flat_dma C * H * W * 4
        dma     ch0, vbuf0[r20], ddr[r10]
        flat_dma 4
        dma     ch0, vbuf0[r25], ddr[r11], signal=s1

        ; q = requant(x)
        vu_box  W, H, C
        vu_strides a, 4, W * 4, H * W * 4
        vu_strides d, 1, W, H * W
        setpi   vu.za, 0
        setpi   vu.ma, MQ
        setpi   vu.shift, SQ
        setpi   vu.zp_out, ZQ
        vu.requant vu0, r21, r20, i32, wait=s1

        ; mp = max over 2x2 windows, stride 2 (the VU queue keeps the order)
        vu_box  OW, OH, C
        vu_strides a, 2, 2 * W, H * W
        vu_strides d, 1, OW, OH * OW
        setpi   vu.win_h, 2
        setpi   vu.win_w, 2
        setpi   vu.win_stride_h, W
        setpi   vu.win_stride_w, 1
        vu.pool.max vu0, r22, r21

        ; s = sum over the same windows (int32)
        vu_strides d, 4, OW * 4, OH * OW * 4
        vu.pool.sum vu0, r23, r21

        ; ap = s / 4 rounded half away from zero; b: one divisor (strides 0)
        setpi   vu.win_h, 1
        setpi   vu.win_w, 1
        vu_strides a, 4, OW * 4, OH * OW * 4
        vu_strides b, 0, 0, 0
        vu_strides d, 1, OW, OH * OW
        vu.divr vu0, r24, r23, r25, signal=s2

        ; VBUF -> DDR: q, mp, ap (ch1 in order, after the VU)
        flat_dma C * H * W
        la      r1, q
        dma     ch1, ddr[r1], vbuf0[r21], wait=s2
        flat_dma C * OH * OW
        la      r1, mp
        dma     ch1, ddr[r1], vbuf0[r22]
        la      r1, ap
        dma     ch1, ddr[r1], vbuf0[r24]

        barrier Q_ALL
        halt

        .data
        .set    SEED, 99
        .buffer x, int32, (1, C, H, W)
        .rept   C * H * W
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .word   (SEED >> 8) % 100001 - 50000
        .endr

        .align  64
        .buffer divisor, int32, (1,)
        .word   4

        .align  64
        .buffer q, int8, (1, C, H, W)
        .space  C * H * W
        .align  64
        .buffer mp, int8, (1, C, OH, OW)
        .space  C * OH * OW
        .align  64
        .buffer ap, int8, (1, C, OH, OW)
        .space  C * OH * OW
