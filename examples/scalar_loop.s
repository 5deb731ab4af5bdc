; scalar_loop.s -- the CU on its own: a counted loop, a conditional, a
; while-style loop, a subroutine call, and results written to DDR.
;
; The CU has no store instruction.  It writes a register to DDR with a DMA
; whose only element is padding: `dma.pad_value` (set from the register by
; `setp`) is written, truncated to `dma.elem` bytes, and nothing is read.
;
; Expected: result = [sum(1..N), sum(i*i, 1..N), count of multiples of 3
; in 1..N, fib(N)] = [210, 2870, 6, 6765] for N = 20.

        .equ N, 20

        .text
main:
        li      r1, N               ; `loop` counter: the body runs N times
        li      r2, 0               ; sum of i
        li      r3, 0               ; sum of i * i
        li      r4, 0               ; multiples of 3 seen
        li      r5, 1               ; i
        li      r8, 3               ; countdown to the next multiple of 3
.body:
        add     r2, r2, r5
        mul     r6, r5, r5
        add     r3, r3, r6
        addi    r8, r8, -1
        bne     r8, r0, .not3       ; i % 3 != 0
        addi    r4, r4, 1
        li      r8, 3
.not3:
        addi    r5, r5, 1
        loop    r1, .body           ; r1 -= 1; again while r1 != 0

fib:                                ; r9 = fib(k), r10 = fib(k + 1)
        li      r9, 0
        li      r10, 1
        li      r11, 0              ; k
        li      r13, N
.step:
        add     r12, r9, r10
        addi    r9, r10, 0
        addi    r10, r12, 0
        addi    r11, r11, 1
        blt     r11, r13, .step     ; while k < N

store_all:
        ; one-element DMA that is all padding: writes pad_value as 4 bytes
        setpi   dma.elem, 4
        setpi   dma.size0, 1
        setpi   dma.pad_lo0, 1
        la      r21, result
        addi    r20, r2, 0
        jal     r31, store
        addi    r20, r3, 0
        jal     r31, store
        addi    r20, r4, 0
        jal     r31, store
        addi    r20, r9, 0
        jal     r31, store
        barrier Q_ALL               ; wait until every DMA has landed
        halt

; store: DDR[r21] = r20 (4 bytes), then r21 += 4; returns through r31.
store:
        setp    dma.pad_value, r20, 0
        dma     ch0, ddr[r21], ddr[r21]
        addi    r21, r21, 4
        jalr    r0, r31, 0

        .data
        .buffer result, int32, (4,)
        .space  4 * 4
