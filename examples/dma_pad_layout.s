; dma_pad_layout.s -- layout changes done by the DMA engines.
;
; x (int8, NCHW 1x40x5x6) goes from DDR into DM in the blocked layout the NU
; reads, [cb][h + 2][w + 2][32]: channels in blocks of 32 (the last block
; padded from 8 to 32 channels), a one-pixel halo all round, and every pad
; byte (halo and missing channels) set to the zero point ZP by the DMA.
; The blocked tile is then copied out to DDR as `xb`, and unpacked back to
; NCHW as `y`, which must equal x.
;
; Expected (numpy): xp = pad(x, ((0,0), (0,24), (1,1), (1,1)), constant ZP)
;   xb = xp.reshape(2, 32, 7, 8).transpose(0, 2, 3, 1)   (shape 2x7x8x32)
;   y  = x

        .equ C, 40
        .equ H, 5
        .equ W, 6
        .equ HP, H + 2              ; with the halo
        .equ WP, W + 2
        .equ ZP, -3                 ; pad value (the input zero point)
        .equ BLOCK, HP * WP * 32    ; bytes of one channel block in DM
        .equ PLANE, H * W           ; bytes of one NCHW channel

        .text
main:
        la      r10, x
        li      r11, 0              ; DM address of the blocked tile
        la      r12, xb
        la      r13, y

        ; --- DDR x -> DM blocked, one DMA per channel block ----------------
        ; dim 0 = channel within the block, dim 1 = w, dim 2 = h
        setpi   dma.elem, 1
        setpi   dma.size0, 32
        setpi   dma.size1, WP
        setpi   dma.size2, HP
        setpi   dma.size3, 1
        setpi   dma.src_stride0, PLANE
        setpi   dma.src_stride1, 1
        setpi   dma.src_stride2, W
        setpi   dma.dst_stride0, 1
        setpi   dma.dst_stride1, 32
        setpi   dma.dst_stride2, WP * 32
        setpi   dma.pad_lo1, 1      ; halo: one pixel left and right ...
        setpi   dma.pad_hi1, 1
        setpi   dma.pad_lo2, 1      ; ... and top and bottom
        setpi   dma.pad_hi2, 1
        setpi   dma.pad_value, ZP
        dma     ch0, dm[r11], ddr[r10]                  ; channels 0..31

        setpi   dma.pad_hi0, 32 - (C - 32)              ; only 8 real channels
        addi    r1, r10, 32 * PLANE
        addi    r2, r11, BLOCK
        dma     ch0, dm[r2], ddr[r1], signal=s0         ; channels 32..39 (+ pad)

        ; --- DM blocked -> DDR xb, one flat copy --------------------------
        ; (ch0 runs its commands in order: s0 means both blocks are in DM)
        setpi   dma.size0, 2 * BLOCK
        setpi   dma.size1, 1
        setpi   dma.size2, 1
        setpi   dma.pad_lo1, 0
        setpi   dma.pad_hi1, 0
        setpi   dma.pad_lo2, 0
        setpi   dma.pad_hi2, 0
        setpi   dma.pad_hi0, 0
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
        dma     ch1, ddr[r12], dm[r11], wait=s0, signal=s1

        ; --- DM blocked -> DDR y (NCHW), one DMA per block, halo dropped ----
        ; dim 0 = w, dim 1 = h, dim 2 = channel within the block
        setpi   dma.size0, W
        setpi   dma.size1, H
        setpi   dma.size2, 32
        setpi   dma.src_stride0, 32
        setpi   dma.src_stride1, WP * 32
        setpi   dma.src_stride2, 1
        setpi   dma.dst_stride0, 1
        setpi   dma.dst_stride1, W
        setpi   dma.dst_stride2, PLANE
        addi    r3, r11, (WP + 1) * 32                  ; first real pixel of block 0
        dma     ch2, ddr[r13], dm[r3], wait=s1          ; after the xb copy
        setpi   dma.size2, C - 32
        addi    r3, r3, BLOCK
        addi    r4, r13, 32 * PLANE
        dma     ch2, ddr[r4], dm[r3]

        barrier Q_ALL
        halt

        .data
; x: pseudo-random int8 from a linear congruential generator
        .set    SEED, 2024
        .buffer x, int8, (1, C, H, W)
        .rept   C * H * W
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .byte   (SEED >> 16) % 256 - 128
        .endr

        .align  64
        .buffer xb, int8, (2, HP, WP, 32)
        .space  2 * BLOCK

        .align  64
        .buffer y, int8, (1, C, H, W)
        .space  C * H * W
