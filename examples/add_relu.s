; add_relu.s -- a first kernel: y = relu(a + b), quantised, on the vector unit.
;
; a, b and y are int8 tensors of shape (1, C, H, W) in DDR.  Each is an
; affine-quantised real tensor, real = scale * (q - zero_point):
;   a: scale 0.05, zero point ZA       b: scale 0.08, zero point ZB
;   y: scale 0.10, zero point ZP_OUT
; so y = ZP_OUT + 0.5 * (a - ZA) + 0.8 * (b - ZB), rounded, then ReLU
; (nothing below the zero point) and int8 saturation.  The VU computes that
; in fixed point with one shift: MA = 0.5 * 2**SHIFT, MB = 0.8 * 2**SHIFT.
;
; Expected (numpy, int64; docs/semantics.md, "add"):
;   v = (a - ZA) * MA + (b - ZB) * MB
;   y = clip(((v + (1 << (SHIFT - 1))) >> SHIFT) + ZP_OUT, ZP_OUT, 127)
;
; The data below fills a and b with pseudo-random values; replace them with
;   nnpasm examples/add_relu.s -o add_relu.bin
;   nnpsim run add_relu.bin --input a=a.npy --input b=b.npy --output y=y.npy
; (a.npy and b.npy: int8 arrays of shape (1, 16, 16, 16)).

        .equ C, 16
        .equ H, 16
        .equ W, 16
        .equ N, C * H * W           ; elements per tensor (also bytes: int8)
        .equ ZA, -3                 ; zero point of a
        .equ ZB, 5                  ; zero point of b
        .equ SHIFT, 16
        .equ MA, 32768              ; 0.5 * 2**16
        .equ MB, 52429              ; 0.8 * 2**16, rounded
        .equ ZP_OUT, -10            ; zero point of y

        ; VBUF map (byte addresses in vbuf0)
        .equ V_A, 0
        .equ V_B, V_A + N
        .equ V_Y, V_B + N

        .text
main:
        la      r10, a              ; DDR address of buffer a (.buffer defines the label)
        la      r11, b
        la      r12, y
        li      r20, V_A            ; VBUF addresses: commands take addresses from registers
        li      r21, V_B
        li      r22, V_Y

        ; DDR -> VBUF: one flat copy of N one-byte elements per input.  The
        ; dma.* parameters are snapshot at each issue, so both copies use them.
        setpi   dma.elem, 1         ; element size in bytes
        setpi   dma.size0, N        ; elements in dimension 0 (size1..3 stay 1)
        setpi   dma.src_stride0, 1  ; byte step between elements, source side
        setpi   dma.dst_stride0, 1  ; and destination side
        dma     ch0, vbuf0[r20], ddr[r10], signal=s1   ; a; when done, s1 gets a token
        dma     ch1, vbuf0[r21], ddr[r11], signal=s2   ; b on a second channel, in parallel; s2

        ; vu.add parameters: one loop of N elements (n1..n3 stay 1), unit strides
        setpi   vu.n0, N
        setpi   vu.d_stride0, 1     ; y: byte step of the destination
        setpi   vu.a_stride0, 1     ; a
        setpi   vu.b_stride0, 1     ; b
        setpi   vu.za, ZA           ; subtracted from a
        setpi   vu.zb, ZB           ; subtracted from b
        setpi   vu.ma, MA           ; multiplies (a - za)
        setpi   vu.mb, MB           ; multiplies (b - zb)
        setpi   vu.shift, SHIFT     ; rounding right shift of the sum
        setpi   vu.zp_out, ZP_OUT   ; added after the shift
        setpi   vu.lo, ZP_OUT       ; ReLU: clamp below at the output zero point
        setpi   vu.hi, 127

        ; The add needs both loads.  A command waits on at most one semaphore,
        ; so the CU takes s1 (a is in VBUF) before issuing it, and the command
        ; itself waits on s2 (b is in VBUF).
        sem.wait s1
        vu.add  vu0, r22, r20, r21, wait=s2, signal=s3  ; y = ...; s3 when done

        ; VBUF -> DDR, once the add has written y (same flat descriptor)
        dma     ch2, ddr[r12], vbuf0[r22], wait=s3

        halt                        ; the run ends when every queue has drained

        .data
        .set    SEED, 2024
        .buffer a, int8, (1, C, H, W)
        .rept   N
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .byte   (SEED >> 16) % 256 - 128
        .endr

        .align  64
        .buffer b, int8, (1, C, H, W)
        .rept   N
        .set    SEED, (SEED * 1103515245 + 12345) % 2147483648
        .byte   (SEED >> 16) % 256 - 128
        .endr

        .align  64
        .buffer y, int8, (1, C, H, W)
        .space  N
