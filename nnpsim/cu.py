"""The control unit: internal op codes, the decoded program table and pure-instruction semantics.

The engine never sees ISA opcode numbers: `decode_for_engine` maps every
instruction, through its row of nnpsim.semantics, to an internal op code and
packs its operands into fixed columns, so renumbering opcodes in nnp1.toml
changes nothing here.
"""
from __future__ import annotations

import numpy as np
from numba import njit

from isa_spec import Isa, decode_program, load_isa

from . import errors
from .semantics import SEMANTICS, unit_op_codes
from .timing import cu_cycles

# Internal op codes.  Below OP_SYNC: pure CU instructions (registers, pc and
# parameter file only); the engine runs them in a tight loop.  From OP_SYNC:
# instructions that touch queues, semaphores or the run state.
(OP_NOP, OP_ADD, OP_SUB, OP_MUL, OP_AND, OP_OR, OP_XOR, OP_SLL, OP_SRL, OP_SRA, OP_SLT,
 OP_SLTU, OP_MIN, OP_MAX, OP_LI, OP_BEQ, OP_BNE, OP_BLT, OP_BGE, OP_BLTU, OP_BGEU,
 OP_JAL, OP_JALR, OP_LOOP, OP_SETP, OP_SETPI, OP_MULHU) = range(27)
OP_SYNC = 64
OP_HALT, OP_SEM_SIGNAL, OP_SEM_WAIT, OP_BARRIER, OP_DMA, OP_NU, OP_VU, OP_LD = range(OP_SYNC, OP_SYNC + 8)

CU_OPERATIONS = {
    "nop": OP_NOP, "add": OP_ADD, "sub": OP_SUB, "mul": OP_MUL, "and": OP_AND, "or": OP_OR,
    "xor": OP_XOR, "sll": OP_SLL, "srl": OP_SRL, "sra": OP_SRA, "slt": OP_SLT, "sltu": OP_SLTU,
    "min": OP_MIN, "max": OP_MAX, "li": OP_LI, "beq": OP_BEQ, "bne": OP_BNE,
    "blt": OP_BLT, "bge": OP_BGE, "bltu": OP_BLTU, "bgeu": OP_BGEU, "jal": OP_JAL,
    "jalr": OP_JALR, "loop": OP_LOOP, "setp": OP_SETP, "setpi": OP_SETPI, "mulhu": OP_MULHU, "halt": OP_HALT,
    "sem_signal": OP_SEM_SIGNAL, "sem_wait": OP_SEM_WAIT, "barrier": OP_BARRIER,
    "ld": OP_LD,
}
"""The operations the CU implements, by the name a semantics row gives in its `op`."""
UNIT_OPS = {"DMA": OP_DMA, "NU": OP_NU, "VU": OP_VU}

# Columns of the engine's program table (int64 [n, N_COLS]).
C_OP = 0       # internal op code
C_RD = 1       # rd / DMA rd / NU racc / VU rd
C_RS1 = 2      # rs1 / DMA rs / NU rin / VU ra
C_RS2 = 3      # rs2 / NU rw / VU rb
C_IMM = 4      # imm, branch offset (bytes), semaphore, barrier mask
C_PARAM = 5    # parameter register number (setp, setpi)
C_UNIT = 6     # unit index or DMA channel
C_WAIT = 7     # wait semaphore or -1
C_SIGNAL = 8   # signal semaphore or -1
C_F0 = 9       # DMA dspace; NU accumulate 0/1; VU op code
C_F1 = 10      # DMA sspace; VU sdt
C_F2 = 11      # VU ddt
C_ISA = 12     # index into isa.instructions (for logs and messages)
C_BIMM = 13    # 1: an immediate-form ALU op (the second operand is C_IMM, not rs2's value)
C_SIGNAL2 = 14  # second signal semaphore or -1
N_COLS = 15

MASK32 = 0xFFFFFFFF
PARAM_REGS = 256
"""The parameter file: registers 0..255.  The engine's `params` array is twice that long:
params[PARAM_REGS + p] is 1 once register p has been written by setp/setpi (its valid bit),
so a command can be told it read a register still at its reset value."""


def new_param_file(isa: Isa | None = None) -> np.ndarray:
    """The parameter file at reset, followed by its (all clear) written flags."""
    out = np.zeros(2 * PARAM_REGS, dtype=np.int64)
    out[:PARAM_REGS] = (isa or load_isa()).param_file()
    return out


@njit(cache=True)
def unset_mask(params: np.ndarray, base: int) -> int:
    """Bit j set for each register base + j (j < 32) never written since reset."""
    mask = 0
    for j in range(32):
        if params[PARAM_REGS + base + j] == 0:
            mask |= 1 << j
    return mask


def wrap32_py(v: int) -> int:
    """A Python int as the signed 32-bit value of its low 32 bits."""
    v &= MASK32
    return v - (1 << 32) if v >= 1 << 31 else v


DECODED_CACHE_BYTES = 32 << 20
"""Most bytes of decoded tables kept for programs loaded again (the oldest go first)."""
_decoded: dict[tuple[int, bytes], tuple[Isa, np.ndarray]] = {}


def decode_for_engine(words: np.ndarray, isa: Isa | None = None) -> np.ndarray:
    """Decode program words into the engine's table (int64 [n, N_COLS]).

    A program loaded again (a kernel called once per input) reuses its table:
    decoding runs the strict decoder per distinct word in Python, milliseconds
    per program, more than simulating a small layer.  Keyed on the words
    themselves, so an edited program decodes afresh; the caller gets a copy.
    """
    isa = isa or load_isa()
    words = np.asarray(words, dtype=np.uint64)
    key = (id(isa), words.tobytes())
    hit = _decoded.get(key)
    if hit is None:
        hit = (isa, _decode(words, isa))   # holding isa keeps its id unique while cached
        _decoded[key] = hit
        total = sum(_entry_bytes(k, t) for k, (_, t) in _decoded.items())
        while total > DECODED_CACHE_BYTES and len(_decoded) > 1:
            oldest = next(iter(_decoded))
            total -= _entry_bytes(oldest, _decoded.pop(oldest)[1])
    return hit[1].copy()


def _entry_bytes(key: tuple[int, bytes], table: np.ndarray) -> int:
    return len(key[1]) + table.nbytes


def _decode(words: np.ndarray, isa: Isa) -> np.ndarray:
    dec = decode_program(words, isa)
    col = {name: 1 + j for j, name in enumerate(isa.slots)}
    vu_codes = unit_op_codes("VU")
    from .units.nu import OPS as nu_ops     # here: the units build their tables from nnpsim.semantics
    out = np.zeros((len(dec), N_COLS), dtype=np.int64)
    out[:, C_ISA] = dec[:, 0]
    out[:, C_WAIT] = -1
    out[:, C_SIGNAL] = -1
    out[:, C_SIGNAL2] = -1
    for index, ins in enumerate(isa.instructions):
        rows = dec[:, 0] == index
        if not rows.any():
            continue
        sem = SEMANTICS[ins.mnemonic]
        d = dec[rows]
        block = out[rows]
        block[:, C_OP] = UNIT_OPS[sem.unit] if sem.unit in UNIT_OPS else CU_OPERATIONS[sem.op]
        block[:, C_BIMM] = sem.imm
        for name, dst in _COLUMN_OF.items():
            if name in ins.fields:
                block[:, dst] = d[:, col[name]]
        if sem.unit == "NU":
            block[:, C_F0] = nu_ops.index(sem.op)
        if sem.unit == "VU":
            block[:, C_F0] = vu_codes[sem.op]
        if "imm" in ins.fields and ins.fields["imm"].kind.cls in ("imm32", "addr"):
            block[:, C_IMM] = [wrap32_py(int(v)) for v in block[:, C_IMM]]
        out[rows] = block
    return out


_COLUMN_OF = {
    "rd": C_RD, "rs1": C_RS1, "rs2": C_RS2, "imm": C_IMM, "off": C_IMM, "sem": C_IMM,
    "mask": C_IMM, "param": C_PARAM, "ch": C_UNIT, "unit": C_UNIT, "wait": C_WAIT,
    "signal": C_SIGNAL, "signal2": C_SIGNAL2, "rs": C_RS1, "dspace": C_F0, "sspace": C_F1, "racc": C_RD,
    "rin": C_RS1, "rw": C_RS2, "ra": C_RS1, "rb": C_RS2, "sdt": C_F1, "ddt": C_F2,
}


@njit(cache=True, inline="always")
def load_word(mem: np.ndarray, base: int, size: int, addr: int, err: np.ndarray) -> tuple[int, int]:
    """(error code, value) of `ld`: the little-endian int32 at byte addr of a memory at base, size bytes."""
    if addr % 4 != 0:
        err[1] = 0
        err[2] = addr
        err[3] = addr + 3
        err[4] = -1
        return errors.MISALIGNED, 0
    if addr < 0 or addr + 4 > size:
        err[1] = 0
        err[2] = addr
        err[3] = addr + 3
        return errors.OUT_OF_BOUNDS, 0
    a = base + addr
    v = np.int64(mem[a]) | (np.int64(mem[a + 1]) << 8) | (np.int64(mem[a + 2]) << 16) | (np.int64(mem[a + 3]) << 24)
    return 0, wrap32(v)


@njit(cache=True)
def wrap32(v: int) -> int:
    """The signed 32-bit value of the low 32 bits of v."""
    return ((v + 0x80000000) & MASK32) - 0x80000000


@njit(cache=True, inline="always")
def mulhu32(a: int, b: int) -> int:
    """The high 32 bits of the unsigned 64-bit product of a's and b's low 32 bits, in int64 arithmetic
    (16-bit halves: numba's int64 would overflow on the whole product)."""
    x, y = a & MASK32, b & MASK32
    xl, xh, yl, yh = x & 0xFFFF, x >> 16, y & 0xFFFF, y >> 16
    p1, p2 = xl * yh, xh * yl
    mid = ((xl * yl) >> 16) + (p1 & 0xFFFF) + (p2 & 0xFFFF)
    return xh * yh + (p1 >> 16) + (p2 >> 16) + (mid >> 16)


@njit(cache=True, inline="always")
def exec_pure(prog: np.ndarray, i: int, regs: np.ndarray, params: np.ndarray,
              branch_penalty: int) -> tuple:
    """Execute pure instruction i; return (next pc in bytes, cycles it took)."""
    op = prog[i, C_OP]
    rd = prog[i, C_RD]
    a = regs[prog[i, C_RS1]]
    imm = prog[i, C_IMM]
    b = imm if prog[i, C_BIMM] else regs[prog[i, C_RS2]]
    pc = i * 8
    nxt = pc + 8
    taken = False
    v = 0
    write = True
    if op == OP_ADD:
        v = a + b
    elif op == OP_SUB:
        v = a - b
    elif op == OP_MUL:
        v = a * b
    elif op == OP_AND:
        v = a & b
    elif op == OP_OR:
        v = a | b
    elif op == OP_XOR:
        v = a ^ b
    elif op == OP_SLL:
        v = a << (b & 31)
    elif op == OP_SRL:
        v = (a & MASK32) >> (b & 31)
    elif op == OP_SRA:
        v = a >> (b & 31)
    elif op == OP_SLT:
        v = 1 if a < b else 0
    elif op == OP_SLTU:
        v = 1 if (a & MASK32) < (b & MASK32) else 0
    elif op == OP_MIN:
        v = a if a < b else b
    elif op == OP_MAX:
        v = a if a > b else b
    elif op == OP_MULHU:
        v = mulhu32(a, b)
    elif op == OP_LI:
        v = imm
    else:
        write = False
        if op == OP_BEQ:
            taken = a == b
        elif op == OP_BNE:
            taken = a != b
        elif op == OP_BLT:
            taken = a < b
        elif op == OP_BGE:
            taken = a >= b
        elif op == OP_BLTU:
            taken = (a & MASK32) < (b & MASK32)
        elif op == OP_BGEU:
            taken = (a & MASK32) >= (b & MASK32)
        elif op == OP_JAL:
            write = True
            v = nxt
            taken = True
        elif op == OP_JALR:
            write = True
            v = nxt
            taken = True
            imm = (wrap32(a + imm) & ~7) - pc
        elif op == OP_LOOP:
            cnt = wrap32(regs[rd] - 1)
            if rd != 0:
                regs[rd] = cnt
            taken = regs[rd] != 0
        elif op == OP_SETP:
            params[prog[i, C_PARAM]] = wrap32(a + imm)
            params[PARAM_REGS + prog[i, C_PARAM]] = 1
        elif op == OP_SETPI:
            params[prog[i, C_PARAM]] = imm
            params[PARAM_REGS + prog[i, C_PARAM]] = 1
        if taken:
            nxt = pc + imm
    if write and rd != 0:
        regs[rd] = wrap32(v)
    return nxt, cu_cycles(taken, branch_penalty)
