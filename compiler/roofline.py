"""The roofline bound of an op or fused chain: the cycles no schedule can beat."""
from __future__ import annotations

from nnpsim.config import Config
from nnpsim.timing import NU_F32_PASSES

from .ops import Conv2d, Op


def needed(op: Op) -> Op:
    """The op as the NPU computes it: a conv without the taps that read only padding (Conv2d.live)."""
    return op.live() if isinstance(op, Conv2d) else op


def macs(op: Op) -> int:
    """Multiply-accumulates the op needs (0 for ops that run on the VU; a conv's taps that read only
    padding need none)."""
    return int(getattr(needed(op), "macs", 0))


def float_mode(op: Op) -> bool:
    """Does the op run in the NU's float32 mode (a conv onnxruntime runs in float: nu.fconv, nu.fdwconv)?"""
    return isinstance(op, Conv2d) and op.fmode is not None


def rate_macs(op: Op) -> int:
    """The op's MACs at the NU's int8 rate: the float mode's count NU_F32_PASSES times, the rate it runs at."""
    return macs(op) * (NU_F32_PASSES if float_mode(op) else 1)


def constant_bytes(op: Op) -> int:
    """Bytes of the op's compile-time constants in DDR: int8 weights (a conv's live taps'; the float mode's
    float32) and int32 bias (float32), a per-channel table (batch_norm's float32 pairs), a softmax's float32
    table."""
    op = needed(op)
    weight, bias = getattr(op, "weight", None), getattr(op, "bias", None)
    table = int(getattr(op, "table_bytes", 0))
    per_weight = 4 if float_mode(op) else 1
    return (per_weight * weight.size if weight is not None else 0) + (4 * bias.size if bias is not None else 0) + table


def min_ddr_bytes(ops: tuple[Op, ...] | list[Op], burst: int = 64) -> int:
    """Least DDR traffic of a chain: its inputs, every op's constants and its output, once each.

    The first op's inputs all come from DDR; a later op's first input is the
    previous op's output (kept on chip), its other inputs come from DDR.  An op that reads only
    part of its input (a slice, a crop) says how much (min_read_bytes, given the DDR burst).
    """
    part = getattr(ops[0], "min_read_bytes", None)
    first = part(burst) if part is not None else sum(t.nbytes for t in ops[0].inputs)
    total = first + ops[-1].output.nbytes
    total += sum(t.nbytes for op in ops[1:] for t in op.inputs[1:])
    return total + sum(constant_bytes(op) for op in ops)


def bound_cycles(ops: tuple[Op, ...] | list[Op], cfg: Config | None = None) -> int:
    """max(MACs / peak MACs per cycle, least DDR bytes / DDR bytes per cycle), rounded up; the float mode's MACs
    at its rate (rate_macs)."""
    cfg = cfg or Config()
    compute = -(-sum(rate_macs(op) for op in ops) // cfg.peak_macs_per_cycle)
    memory = -(-min_ddr_bytes(ops, cfg.ddr_burst_bytes) // cfg.ddr_bytes_per_cycle)
    return max(compute, memory)
