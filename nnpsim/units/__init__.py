"""Functional semantics of the NU, VU and DMA commands as numba kernels (checks first, then effect).

Memory model: one flat uint8 `mem`; memory space s lives at mem[space_base[s]:space_base[s] +
space_size[s]] (space_size[s] == 0: no such memory).  `p` is the command's int64[32] parameter
snapshot (p[j] = parameter group_base + j, values sign-extended from 32 bits).  Addresses in
err are relative to their memory.  err fields by code (unused fields: -1 in err[1..4], 0 after):

  BAD_PARAM       err[4] = parameter number, err[5] = value, err[6] = extra (the other pad for
                  pad_lo + pad_hi > size, the window extent needed for NU, hi for lo > hi, the
                  limit for an oversized element count; err[4] = -1, err[5] = rows or cols
                  for an NU array size below 1, or err[5] = cols, err[6] = rows for a
                  nu.dwconv on an array with more columns than rows).  A bad (M, S) table entry of
                  vu.requant.pc: err[1..3] = space and bytes of the int32, err[5] = value,
                  err[6] = element index, err[7] = 0 for M, 1 for S.
  NO_SUCH_MEMORY  err[1] = err[5] = the space id.
  MISALIGNED      err[1] = space, err[2..3] = address .. address + alignment - 1,
                  err[4] = -1 (the address) or the stride's parameter number (dma.elem for an
                  ABUF side whose elem is not 4), err[5] = offending value, err[6] = alignment.
  OUT_OF_BOUNDS   err[1] = space, err[2..3] = first and last byte of the operand's footprint.
  ARITH_OVERFLOW  err[1..3] = space and bytes of the a element, err[5] = element index.
  DIV_BY_ZERO     err[1..3] = space and bytes of the divisor, err[5] = divisor, err[6] = element.
  ILLEGAL_INSTRUCTION  err[5] = value, err[6] = 0 bad VU op code, 1 unit index, 2 sdt, 3 ddt
                  (NU: err[5] = unit).
"""
from .dma import dma_burst_bytes, dma_bytes, dma_copy
from .nu import (NU_CONV, NU_CONV_ACC, NU_CONV_ACC_RQ, NU_CONV_RQ, NU_DWCONV, NU_DWCONV_ACC, nu_conv, nu_conv_rq, nu_dw_macs,
                 nu_dwconv, nu_macs)
from .vu import (VU_ADD, VU_CLIP, VU_DIVR, VU_LUT, VU_MOV, VU_MUL, VU_OPS, VU_POOL_MAX, VU_POOL_SUM,
                 VU_REQUANT, VU_REQUANT_PC, vu_exec, vu_work)

__all__ = ["dma_burst_bytes", "dma_bytes", "dma_copy", "nu_conv", "nu_macs", "nu_dwconv", "nu_dw_macs",
           "NU_CONV", "NU_CONV_ACC", "NU_CONV_RQ", "NU_CONV_ACC_RQ", "nu_conv_rq", "NU_DWCONV", "NU_DWCONV_ACC", "vu_exec", "vu_work", "VU_OPS",
           "VU_REQUANT", "VU_REQUANT_PC", "VU_ADD", "VU_MUL", "VU_CLIP", "VU_POOL_MAX",
           "VU_POOL_SUM", "VU_DIVR", "VU_MOV", "VU_LUT"]
