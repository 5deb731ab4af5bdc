"""An independent numpy model of one DMA, NU or VU command, for tests only.

Written from docs/architecture.md (DMA, NU, VU) without reference to nnpsim.  Memories are
a dict {space id: np.uint8 array}; parameters are a dict of named command parameters
({"dma.size0": 5, ...}), missing ones taking their ISA defaults.  A command either applies
its effect to the memories or raises Fault before changing anything.

Checks follow the order documented in nnpsim/units: parameters (in parameter order),
memory spaces, alignment, bounds (operands in assembly order), then per-element checks.
Addresses are enumerated element by element here (the kernels compute footprints in O(1)).
"""
from __future__ import annotations

import itertools
import struct
from fractions import Fraction

import numpy as np

from isa_spec import load_isa

GROUP_BASE = {"dma": 0, "nu": 32, "vu": 64}
ABUF_IDS = range(24, 32)
VBUF0 = 32
LIMIT62 = 1 << 62


class Fault(Exception):
    """A command the machine refuses: kind is param, memory, align, bounds, overflow, div0, illegal."""

    def __init__(self, kind: str, space: int = -1, first: int = -1, last: int = -1,
                 param: int = -1):
        super().__init__(f"{kind} space={space} bytes={first}..{last} param={param}")
        self.kind, self.space, self.first, self.last, self.param = kind, space, first, last, param


def param_values(named: dict[str, int], group: str) -> dict[str, int]:
    """Every parameter of the group, short name -> value (ISA defaults, then `named`)."""
    isa = load_isa()
    out = {}
    for name in isa.params:
        if name.startswith(group + "."):
            out[name.split(".", 1)[1]] = isa.param_defaults.get(name, 0)
    for name, v in named.items():
        assert name.startswith(group + "."), name
        out[name.split(".", 1)[1]] = int(v)
    return out


def snapshot(named: dict[str, int], group: str) -> np.ndarray:
    """The int64[32] parameter snapshot p the kernels take (p[j] = parameter group_base + j)."""
    isa = load_isa()
    p = np.zeros(32, dtype=np.int64)
    for short, v in param_values(named, group).items():
        p[isa.params[f"{group}.{short}"] - GROUP_BASE[group]] = v
    return p


def _pnum(group: str, short: str) -> int:
    return load_isa().params[f"{group}.{short}"]


def _need_memory(mems: dict, space: int) -> np.ndarray:
    if space not in mems:
        raise Fault("memory", space=space)
    return mems[space]


def _check_inside(mem: np.ndarray, space: int, addrs: list[int], nbytes: int) -> None:
    if not addrs:
        return
    first, last = min(addrs), max(addrs) + nbytes - 1
    if first < 0 or last >= mem.size:
        raise Fault("bounds", space=space, first=first, last=last)


def _int(mem: np.ndarray, at: int, nbytes: int) -> int:
    return int.from_bytes(bytes(mem[at:at + nbytes]), "little", signed=True)


def _put(mem: np.ndarray, at: int, nbytes: int, value: int) -> None:
    mem[at:at + nbytes] = np.frombuffer((value % (1 << (8 * nbytes))).to_bytes(nbytes, "little"),
                                        dtype=np.uint8)


def _box(sizes: list[int]):
    """Every index (i0, i1, i2, i3) of the box, i0 fastest."""
    for i3, i2, i1, i0 in itertools.product(*(range(n) for n in reversed(sizes))):
        yield (i0, i1, i2, i3)


# --------------------------------------------------------------------------- DMA

def dma(mems: dict, dspace: int, daddr: int, sspace: int, saddr: int, named: dict) -> None:
    """dma ch, dspace[daddr], sspace[saddr] with the named dma.* parameters."""
    q = param_values(named, "dma")
    elem = q["elem"]
    if elem not in (1, 2, 4):
        raise Fault("param", param=_pnum("dma", "elem"))
    sizes = [q[f"size{k}"] for k in range(4)]
    for k in range(4):
        if sizes[k] < 1:
            raise Fault("param", param=_pnum("dma", f"size{k}"))
    lo = [q[f"pad_lo{k}"] for k in range(4)]
    hi = [q[f"pad_hi{k}"] for k in range(4)]
    for k in range(4):
        if lo[k] < 0:
            raise Fault("param", param=_pnum("dma", f"pad_lo{k}"))
        if hi[k] < 0:
            raise Fault("param", param=_pnum("dma", f"pad_hi{k}"))
        if lo[k] + hi[k] > sizes[k]:
            raise Fault("param", param=_pnum("dma", f"pad_lo{k}"))
    dmem = _need_memory(mems, dspace)
    smem = _need_memory(mems, sspace)
    dst, src = [], []
    for i in _box(sizes):
        d = daddr + sum(i[k] * q[f"dst_stride{k}"] for k in range(4))
        if all(lo[k] <= i[k] < sizes[k] - hi[k] for k in range(4)):
            src.append(saddr + sum((i[k] - lo[k]) * q[f"src_stride{k}"] for k in range(4)))
            dst.append((d, len(src) - 1))
        else:
            dst.append((d, None))
    for space, addrs in ((dspace, [d for d, _ in dst]), (sspace, src)):
        if space in ABUF_IDS and addrs and (elem != 4 or any(a % 4 for a in addrs)):
            raise Fault("align", space=space)
    _check_inside(dmem, dspace, [d for d, _ in dst], elem)
    _check_inside(smem, sspace, src, elem)
    data = [bytes(smem[a:a + elem]) for a in src]
    pad = (q["pad_value"] % (1 << (8 * elem))).to_bytes(elem, "little")
    for d, j in dst:
        dmem[d:d + elem] = np.frombuffer(pad if j is None else data[j], dtype=np.uint8)


# --------------------------------------------------------------------------- NU

def _nu_params(named: dict) -> dict:
    """The nu.* parameters, checked as every NU command checks them."""
    q = param_values(named, "nu")
    names = ["in_h", "in_w", "in_cb", "out_h", "out_w", "out_cb", "k_h", "k_w",
             "stride_h", "stride_w", "dil_h", "dil_w"]
    for n in names:
        if q[n] < 1:
            raise Fault("param", param=_pnum("nu", n))
    if not -128 <= q["x_zp"] <= 127:
        raise Fault("param", param=_pnum("nu", "x_zp"))
    for d in ("h", "w"):
        last = (q[f"out_{d}"] - 1) * q[f"stride_{d}"] + (q[f"k_{d}"] - 1) * q[f"dil_{d}"]
        if last >= q[f"in_{d}"]:
            raise Fault("param", param=_pnum("nu", f"in_{d}"))
    return q


def _nu_memories(mems: dict, unit: int, addrs: tuple[int, int, int], w_align: int, dims: tuple,
                 rows: int | None = None) -> tuple:
    """ABUF, IBUF and WBUF of an NU command after its checks: the memories exist, racc is 4-aligned,
    rin rows-aligned (rows = w_align unless given), rw w_align-aligned, each operand (dims of ABUF,
    IBUF, WBUF; ABUF's in int32) inside its memory."""
    spaces = (24 + unit, 8 + unit, 16 + unit)
    bufs = tuple(_need_memory(mems, s) for s in spaces)
    for space, addr, align in zip(spaces, addrs, (4, rows or w_align, w_align)):
        if addr % align:
            raise Fault("align", space=space)
    for mem, space, addr, shape in zip(bufs, spaces, addrs, dims):
        n = int(np.prod(shape))
        if addr < 0 or addr + n > mem.size:
            raise Fault("bounds", space=space, first=addr, last=addr + n - 1)
    return bufs


def _wrap_store(abuf: np.ndarray, racc: int, acc: np.ndarray, accumulate: bool) -> None:
    """ABUF[racc] = acc (+ the old int32s when accumulating), modulo 2**32."""
    n_acc = acc.size * 4
    old = abuf[racc:racc + n_acc].view("<i4").astype(np.int64).reshape(acc.shape)
    total = acc + old if accumulate else acc
    wrapped = ((total + (1 << 31)) % (1 << 32)) - (1 << 31)
    abuf[racc:racc + n_acc] = wrapped.astype("<i4").view(np.uint8).ravel()


def nu_conv(mems: dict, unit: int, racc: int, rin: int, rw: int, named: dict, accumulate: bool,
            rows: int, cols: int) -> None:
    """nu.conv (or nu.conv.acc) on NU `unit` with the named nu.* parameters."""
    q = _nu_params(named)
    in_cb, out_cb, k_h, k_w = q["in_cb"], q["out_cb"], q["k_h"], q["k_w"]
    oh, ow = q["out_h"], q["out_w"]
    abuf, ibuf, wbuf = _nu_memories(mems, unit, (racc, rin, rw), rows,
                                    ((out_cb, oh, ow, cols, 4), (in_cb, q["in_h"], q["in_w"], rows),
                                     (out_cb, in_cb, k_h, k_w, rows, cols)))
    n_in = in_cb * q["in_h"] * q["in_w"] * rows
    x = ibuf[rin:rin + n_in].view(np.int8).astype(np.int64).reshape(in_cb, q["in_h"], q["in_w"], rows)
    n_w = out_cb * in_cb * k_h * k_w * rows * cols
    w = wbuf[rw:rw + n_w].view(np.int8).astype(np.int64).reshape(out_cb, in_cb, k_h, k_w, rows, cols)
    acc = np.zeros((out_cb, oh, ow, cols), dtype=np.int64)
    for kh in range(k_h):
        for kw in range(k_w):
            h0, w0 = kh * q["dil_h"], kw * q["dil_w"]
            patch = x[:, h0:h0 + (oh - 1) * q["stride_h"] + 1:q["stride_h"],
                      w0:w0 + (ow - 1) * q["stride_w"] + 1:q["stride_w"], :] - q["x_zp"]
            acc += np.einsum("bhwr,obrc->ohwc", patch, w[:, :, kh, kw])
    _wrap_store(abuf, racc, acc, accumulate)


def nu_conv_rq(mems: dict, unit: int, racc: int, rin: int, rw: int, named: dict, rows: int, cols: int,
               psum: bool = False) -> None:
    """nu.conv.rq: nu.conv's sums plus each column's int32 bias, wrapped to int32, requantised by its
    (M, S) (WBUF[rq_table], [out_cb][cols] of (bias, M, S) int32) and stored as int8 to VBUF[racc].
    nu.conv.acc.rq (psum): the int32 partial sums at ABUF[rq_psum], [out_cb][out_h][out_w][cols], are
    added too (checked after the table: the parameter, its 4-byte alignment, its bounds)."""
    q = _nu_params(named)
    out_cb, oh, ow = q["out_cb"], q["out_h"], q["out_w"]
    spaces = (32 + unit, 8 + unit, 16 + unit)
    vbuf, ibuf, wbuf = (_need_memory(mems, s) for s in spaces)
    for space, addr in zip(spaces[1:], (rin, rw)):
        if addr % rows:
            raise Fault("align", space=space)
    for mem, space, addr, n in zip((vbuf, ibuf, wbuf), spaces, (racc, rin, rw),
                                   (out_cb * oh * ow * cols, q["in_cb"] * q["in_h"] * q["in_w"] * rows,
                                    out_cb * q["in_cb"] * q["k_h"] * q["k_w"] * rows * cols)):
        if addr < 0 or addr + n > mem.size:
            raise Fault("bounds", space=space, first=addr, last=addr + n - 1)
    for n in ("rq_table", "rq_zp_out", "rq_lo", "rq_hi", "rq_float"):
        if abs(q[n]) > 1 << 32:
            raise Fault("param", param=_pnum("nu", n))
    if q["rq_float"] not in (0, 1):
        raise Fault("param", param=_pnum("nu", "rq_float"))
    for n in ("rq_zp_out", "rq_lo", "rq_hi"):
        if not -128 <= q[n] <= 127:
            raise Fault("param", param=_pnum("nu", n))
    if q["rq_lo"] > q["rq_hi"]:
        raise Fault("param", param=_pnum("nu", "rq_lo"))
    t, wspace = q["rq_table"], 16 + unit
    if t % 4:
        raise Fault("align", space=wspace, first=t, last=t + 3)
    n_ch = out_cb * cols
    if t < 0 or t + 12 * n_ch > wbuf.size:
        raise Fault("bounds", space=wspace, first=t, last=t + 12 * n_ch - 1)
    table = [[_int(wbuf, t + 12 * e + 4 * j, 4) for j in range(3)] for e in range(n_ch)]
    for e, (_, m, sh) in enumerate(table):
        if q["rq_float"]:
            if not _positive_finite(f32_bits(m)):
                raise Fault("param", space=wspace, first=t + 12 * e + 4, last=t + 12 * e + 7)
            continue
        if m <= 0:
            raise Fault("param", space=wspace, first=t + 12 * e + 4, last=t + 12 * e + 7)
        if not 0 <= sh <= 62:
            raise Fault("param", space=wspace, first=t + 12 * e + 8, last=t + 12 * e + 11)
    n_acc = out_cb * oh * ow * cols * 4
    part = np.zeros(n_acc, np.uint8)
    if psum:
        a, aspace = q["rq_psum"], 24 + unit
        if abs(a) > 1 << 32:
            raise Fault("param", param=_pnum("nu", "rq_psum"))
        abuf = _need_memory(mems, aspace)
        if a % 4:
            raise Fault("align", space=aspace, first=a, last=a + 3)
        if a < 0 or a + n_acc > abuf.size:
            raise Fault("bounds", space=aspace, first=a, last=a + n_acc - 1)
        part = abuf[a:a + n_acc].copy()
    scratch = {24 + unit: part, 8 + unit: ibuf, 16 + unit: wbuf}
    nu_conv(scratch, unit, 0, rin, rw, named, True, rows, cols)      # onto the partial sums (zeros without)
    acc = scratch[24 + unit].view("<i4").astype(np.int64).reshape(out_cb, oh, ow, cols)
    out = np.empty(acc.shape, np.int64)
    for ob, h, w, c in itertools.product(range(out_cb), range(oh), range(ow), range(cols)):
        bias, m, sh = table[ob * cols + c]
        v = ((int(acc[ob, h, w, c]) + bias + (1 << 31)) % (1 << 32)) - (1 << 31)
        zp, lo, hi = q["rq_zp_out"], q["rq_lo"], q["rq_hi"]
        if q["rq_float"]:           # vu.requant.f's arithmetic: exact rationals rounded to float32
            t = min(max(round_f32(round_f32(v) * Fraction(f32_bits(m))), -128 - zp), 127 - zp)
            out[ob, h, w, c] = _clip(_round_half_even(t) + zp, lo, hi)
        else:
            out[ob, h, w, c] = _clip(rshift_round(v * m, sh) + zp, lo, hi)
    vbuf[racc:racc + out.size] = out.astype(np.int8).view(np.uint8).ravel()


def nu_dwconv(mems: dict, unit: int, racc: int, rin: int, rw: int, named: dict, accumulate: bool,
              rows: int, cols: int) -> None:
    """nu.dwconv (or nu.dwconv.acc): column c of block b adds its int32 bias to lane c of IBUF block b
    convolved with weight lane c; WBUF per block: [cols] int32 biases, [k_h][k_w][cols] int8 weights;
    ABUF [in_cb][out_h][out_w][cols] int32 (docs/architecture.md)."""
    q = _nu_params(named)
    if cols > rows:
        raise Fault("param", param=-1)
    in_cb, k_h, k_w, oh, ow = q["in_cb"], q["k_h"], q["k_w"], q["out_h"], q["out_w"]
    abuf, ibuf, wbuf = _nu_memories(mems, unit, (racc, rin, rw), cols,
                                    ((in_cb, oh, ow, cols, 4), (in_cb, q["in_h"], q["in_w"], rows),
                                     (in_cb, 4 + k_h * k_w, cols)), rows)
    n_in = in_cb * q["in_h"] * q["in_w"] * rows
    x = ibuf[rin:rin + n_in].view(np.int8).astype(np.int64).reshape(in_cb, q["in_h"], q["in_w"], rows)
    blocks = wbuf[rw:rw + in_cb * (4 + k_h * k_w) * cols].reshape(in_cb, (4 + k_h * k_w) * cols)
    bias = blocks[:, :4 * cols].copy().view("<i4").astype(np.int64)              # [in_cb, cols]
    w = blocks[:, 4 * cols:].view(np.int8).astype(np.int64).reshape(in_cb, k_h, k_w, cols)
    acc = np.zeros((in_cb, oh, ow, cols), dtype=np.int64) + bias[:, None, None, :]
    for kh in range(k_h):
        for kw in range(k_w):
            h0, w0 = kh * q["dil_h"], kw * q["dil_w"]
            patch = x[:, h0:h0 + (oh - 1) * q["stride_h"] + 1:q["stride_h"],
                      w0:w0 + (ow - 1) * q["stride_w"] + 1:q["stride_w"], :cols] - q["x_zp"]
            acc += patch * w[:, None, None, kh, kw, :]
    _wrap_store(abuf, racc, acc, accumulate)


# --------------------------------------------------------------------------- VU

VU_MNEMONICS = ("vu.requant", "vu.requant.pc", "vu.add", "vu.mul", "vu.clip", "vu.pool.max",
                "vu.pool.sum", "vu.divr", "vu.mov", "vu.requant.f", "vu.requant.fpc", "vu.fadd", "vu.fmul",
                "vu.pool.favg", "vu.pool.acc", "vu.pool.avg", "vu.slide.acc", "vu.slide.avg", "vu.slide.favg",
                "vu.lut", "vu.fsub", "vu.fdiv", "vu.fmax", "vu.fmin", "vu.softmax", "vu.pool.fmean", "vu.faffine",
                "vu.lerp", "vu.pool.faffavg")
LUT_ENTRIES = 256
LERP_ENTRY = 16
"""vu.lerp's table entry: two int32 indices, two 32-bit weights (docs/isa.md)."""
"""vu.lut's table: one int8 entry per int8 input, entry a + 128 for input a."""
FBIN_OPS = ("vu.fsub", "vu.fdiv", "vu.fmax", "vu.fmin")
"""DequantizeLinear a and b, one float32 op, QuantizeLinear by fbias (onnxruntime's QDQ float island)."""
FLOAT_OPS = ("vu.requant.f", "vu.requant.fpc", "vu.fadd", "vu.fmul", "vu.pool.favg", "vu.slide.favg",
             "vu.pool.fmean", "vu.faffine", "vu.pool.faffavg") + FBIN_OPS
SOFTMAX_ENTRIES = 256
"""vu.softmax's table: float32 exponentials, entry x - max(row) + 255 for element x of a row."""
SLIDE_OPS = ("vu.slide.acc", "vu.slide.avg", "vu.slide.favg")
U8_OPS = ("vu.fadd", "vu.fmul", "vu.pool.favg", "vu.slide.favg")     # the ones vu.mode switches to uint8 operands
POOL_OPS = ("vu.pool.max", "vu.pool.sum", "vu.pool.favg", "vu.pool.acc", "vu.pool.avg", "vu.pool.fmean",
            "vu.pool.faffavg") + SLIDE_OPS
MEAN_LANES = 4
"""vu.pool.fmean's SIMD lanes: a 4-lane float32 reduction (onnxruntime's Eigen SSE packet)."""
SLIDE_AS_POOL = {"vu.slide.acc": "vu.pool.acc", "vu.slide.avg": "vu.pool.avg", "vu.slide.favg": "vu.pool.favg"}
"""The sliding-window engine's ops compute what these compute (docs/architecture.md); only their cycles differ."""
SLIDE_MAX_COLS, SLIDE_LINE_BYTES = 1024, 4096
F32_MAX = Fraction(2) ** 128 - Fraction(2) ** 104


def rshift_round(v: int, s: int) -> int:
    """(v + 2**(s-1)) >> s for s >= 1, v for s = 0 (Python ints: exact)."""
    return v if s == 0 else (v + (1 << (s - 1))) >> s


def _clip(v: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, v))


# Float32, exactly: every value is a Fraction (or +-inf), every operation on exact rationals is
# rounded once with round_f32.  Independent of numpy's and numba's floating point.

def round_f32(q) -> Fraction | float:
    """The float32 nearest to the rational q, ties to even; +-inf beyond the float32 range.

    An infinity or nan (from an overflow earlier on) passes through.
    """
    if isinstance(q, float) and not abs(q) < float("inf"):
        return q
    q = Fraction(q)
    if q == 0:
        return Fraction(0)
    m = abs(q)
    e = m.numerator.bit_length() - m.denominator.bit_length()
    if Fraction(2) ** e > m:
        e -= 1                                   # 2**e <= m < 2**(e + 1)
    step = Fraction(2) ** max(e - 23, -149)      # 24 significant bits, or the subnormal spacing
    r = round(m / step) * step                   # Fraction rounds half to even
    if r > F32_MAX:
        return float("inf") if q > 0 else float("-inf")
    return r if q > 0 else -r


def f32_bits(bits: int) -> float:
    """The float32 whose IEEE-754 bit pattern is the low 32 bits of `bits`."""
    return struct.unpack("<f", struct.pack("<I", bits & 0xFFFFFFFF))[0]


def _positive_finite(v: float) -> bool:
    return 0 < v < float("inf")


def _round_half_even(v) -> int:
    return round(Fraction(v))


def _cvt8(t, o: int = 0) -> int:
    """cvtps2dq then saturating packs: |t| >= 2**31 (or nan) is INT_MIN, so -128.  o = 128 (vu.mode): t is a uint8
    result, packed to [0, 255] (INT_MIN to 0), then less 128."""
    if t != t or abs(t) >= 2 ** 31:
        return -128
    return _clip(_round_half_even(t) - o, -128, 127)


def _fits(*values: int) -> bool:
    return all(abs(v) < LIMIT62 for v in values)


def _vu_layout(mnemonic: str, sdt: int, ddt: int) -> tuple[int, int, int]:
    """Bytes per element of d, a and b (0: no b) of each VU instruction."""
    return {"vu.requant": (1, 1 << sdt, 0), "vu.requant.pc": (1, 1 << sdt, 8),
            "vu.add": (1, 1, 1), "vu.mul": (1, 1, 1), "vu.clip": (1, 1, 0),
            "vu.pool.max": (1, 1, 0), "vu.pool.sum": (4, 1, 0), "vu.divr": (1, 4, 4),
            "vu.mov": (1 << ddt, 1 << sdt, 0), "vu.requant.f": (1, 1 << sdt, 0),
            "vu.requant.fpc": (1, 1 << sdt, 4), "vu.fadd": (1, 1, 1), "vu.fmul": (1, 1, 1),
            "vu.pool.favg": (1, 1, 4), "vu.pool.acc": (4, 1, 0), "vu.pool.avg": (1, 1, 4),
            "vu.slide.acc": (4, 1, 0), "vu.slide.avg": (1, 1, 4), "vu.slide.favg": (1, 1, 4),
            "vu.lut": (1, 1, 1), "vu.softmax": (1, 1, 4), "vu.pool.fmean": (1, 1, 0), "vu.faffine": (1, 1, 8),
            "vu.pool.faffavg": (1, 1, 8), "vu.lerp": (1, 1, LERP_ENTRY),
            **{m: (1, 1, 1) for m in FBIN_OPS}}[mnemonic]


def _vu_check_params(mnemonic: str, q: dict) -> None:
    pool = mnemonic in POOL_OPS
    for n in ["n0", "n1", "n2", "n3"] + (["win_h", "win_w"] if pool else []):
        if q[n] < 1:
            raise Fault("param", param=_pnum("vu", n))
    if mnemonic in ("vu.requant", "vu.add", "vu.mul") and not 0 <= q["shift"] <= 62:
        raise Fault("param", param=_pnum("vu", "shift"))
    if mnemonic in ("vu.requant", "vu.requant.pc", "vu.add", "vu.mul", "vu.clip", "vu.softmax") + FLOAT_OPS:
        if not -128 <= q["lo"] <= 127:
            raise Fault("param", param=_pnum("vu", "lo"))
        if not -128 <= q["hi"] <= 127:
            raise Fault("param", param=_pnum("vu", "hi"))
        if q["lo"] > q["hi"]:
            raise Fault("param", param=_pnum("vu", "lo"))
    if mnemonic in ("vu.requant", "vu.add", "vu.mul") and not 0 <= q["ma"] < 1 << 31:
        raise Fault("param", param=_pnum("vu", "ma"))
    if mnemonic == "vu.add" and not 0 <= q["mb"] < 1 << 31:
        raise Fault("param", param=_pnum("vu", "mb"))
    if mnemonic in FLOAT_OPS + ("vu.softmax",):
        _vu_check_float_params(mnemonic, q)
    if mnemonic in SLIDE_OPS:
        _vu_check_slide_params(q)


def _vu_check_slide_params(q: dict) -> None:
    """The engine's grid: window strides >= 1, a_stride0 / a_stride1 whole steps of them; its line buffer."""
    for d in ("w", "h"):
        if q[f"win_stride_{d}"] < 1:
            raise Fault("param", param=_pnum("vu", f"win_stride_{d}"))
    for k, d in ((0, "w"), (1, "h")):
        a, ws = q[f"a_stride{k}"], q[f"win_stride_{d}"]
        if q[f"n{k}"] > 1 and (a < ws or a % ws):
            raise Fault("param", param=_pnum("vu", f"a_stride{k}"))
    step = q["a_stride0"] // q["win_stride_w"] if q["n0"] > 1 else 1
    cols = min(q["n0"] * q["win_w"], (q["n0"] - 1) * step + q["win_w"])
    if cols > SLIDE_MAX_COLS:
        raise Fault("param", param=_pnum("vu", "n0"))
    if q["win_h"] * cols > SLIDE_LINE_BYTES:
        raise Fault("param", param=_pnum("vu", "win_h"))


def _vu_check_float_params(mnemonic: str, q: dict) -> None:
    """zp_out an int8; fscale (and fscale_b, but vu.fsub's: nonzero finite) positive finite float32s; fbias finite."""
    if mnemonic != "vu.fadd" and not -128 <= q["zp_out"] <= 127:
        raise Fault("param", param=_pnum("vu", "zp_out"))
    if mnemonic != "vu.requant.fpc" and not _positive_finite(f32_bits(q["fscale"])):
        raise Fault("param", param=_pnum("vu", "fscale"))
    sb = f32_bits(q["fscale_b"])
    if mnemonic == "vu.fsub":       # any nonzero finite b scale: a negative one makes it the float add
        if not (0 < abs(sb) < float("inf")):
            raise Fault("param", param=_pnum("vu", "fscale_b"))
    elif mnemonic in ("vu.fadd", "vu.pool.favg", "vu.slide.favg", "vu.pool.fmean", "vu.pool.faffavg") + FBIN_OPS \
            and not _positive_finite(sb):
        raise Fault("param", param=_pnum("vu", "fscale_b"))
    if mnemonic == "vu.pool.fmean" and not 0 <= q["mode"] < MEAN_LANES:
        raise Fault("param", param=_pnum("vu", "mode"))
    if mnemonic == "vu.pool.faffavg" and q["mode"] not in (0, 1):
        raise Fault("param", param=_pnum("vu", "mode"))
    fbias = f32_bits(q["fbias"])
    if mnemonic == "vu.fadd" and not abs(fbias) < float("inf"):
        raise Fault("param", param=_pnum("vu", "fbias"))
    if mnemonic in FBIN_OPS + ("vu.faffine",) and not _positive_finite(fbias):
        raise Fault("param", param=_pnum("vu", "fbias"))
    if mnemonic in U8_OPS and q["mode"] not in ((0, 1, 2) if mnemonic in ("vu.pool.favg", "vu.slide.favg") else (0, 1)):
        raise Fault("param", param=_pnum("vu", "mode"))


def vu(mems: dict, unit: int, mnemonic: str, rd: int, ra: int, rb: int, named: dict,
       sdt: int = 0, ddt: int = 0) -> None:
    """One VU instruction `mnemonic` on VU `unit` with the named vu.* parameters."""
    q = param_values(named, "vu")
    if mnemonic in ("vu.requant", "vu.requant.pc", "vu.mov", "vu.requant.f", "vu.requant.fpc") and sdt not in (0, 2):
        raise Fault("illegal")
    if mnemonic == "vu.mov" and ddt not in (0, 2):
        raise Fault("illegal")
    if mnemonic == "vu.lerp":
        _vu_lerp(mems, unit, rd, ra, rb, q)
        return
    _vu_check_params(mnemonic, q)
    space = VBUF0 + unit
    mem = _need_memory(mems, space)
    d_bytes, a_bytes, b_bytes = _vu_layout(mnemonic, sdt, ddt)
    sizes = [q[f"n{k}"] for k in range(4)]
    window = [(0, 0)]
    if mnemonic in POOL_OPS:
        window = [(wh * q["win_stride_h"], ww * q["win_stride_w"])
                  for wh in range(q["win_h"]) for ww in range(q["win_w"])]
    elems = []
    for i in _box(sizes):
        elems.append(tuple(base + sum(i[k] * q[f"{x}_stride{k}"] for k in range(4))
                           for x, base in (("d", rd), ("a", ra), ("b", rb))))
    if mnemonic in ("vu.lut", "vu.softmax"):     # b is one table, whatever the b strides say
        elems = [(d, a, rb) for d, a, _ in elems]
    d_addrs = [e[0] for e in elems]
    a_addrs = [e[1] + dh + dw for e in elems for dh, dw in window]
    b_addrs = [e[2] for e in elems] if b_bytes else []
    if mnemonic == "vu.lut":
        b_addrs = [rb + k for k in range(LUT_ENTRIES)]
    if mnemonic == "vu.softmax":
        b_addrs = [rb + 4 * k for k in range(SOFTMAX_ENTRIES)]
    for addrs, nbytes in ((d_addrs, d_bytes), (a_addrs, a_bytes), (b_addrs, b_bytes)):
        if nbytes >= 4 and any(a % 4 for a in addrs):
            raise Fault("align", space=space)
    for addrs, nbytes in ((d_addrs, d_bytes), (a_addrs, a_bytes), (b_addrs, b_bytes)):
        _check_inside(mem, space, addrs, nbytes)
    if mnemonic == "vu.softmax":
        results = _vu_softmax(mem, space, [a for _, a, _ in elems], rb, q)
    elif mnemonic == "vu.pool.fmean":      # output e's window starts in lane phase + e * window (mod 4)
        results = [_fmean_element(mem, a, q, window, (q["mode"] + e * len(window)) % MEAN_LANES)
                   for e, (_, a, _) in enumerate(elems)]
    elif mnemonic == "vu.pool.faffavg":
        results = [_faffavg_element(mem, space, a, b, q, window) for _, a, b in elems]
    else:
        results = [_vu_element(mem, space, mnemonic, a, b, a_bytes, q, window) for _, a, b in elems]
    for d, v in zip(d_addrs, results):
        if d_bytes == 1:
            v = _clip(v, -128, 127)
        _put(mem, d, d_bytes, v)


def _vu_lerp_params(q: dict) -> None:
    """vu.lerp's parameters, in the order the architecture checks them."""
    for n in ("n0", "n1", "n2", "n3", "win_h", "win_w"):
        if q[n] < 1:
            raise Fault("param", param=_pnum("vu", n))
    form = q["ma"]
    checks = [("ma", 0 <= form <= 2), ("lo", -128 <= q["lo"] <= 127), ("hi", q["lo"] <= q["hi"] <= 127),
              ("zp_out", (-128 if form == 2 else -256) <= q["zp_out"] <= (127 if form == 2 else 255)),
              ("za", -256 <= q["za"] <= 255), ("shift", form != 1 or 0 <= q["shift"] <= 62)]
    if form == 2:
        checks += [(f, _positive_finite(f32_bits(q[f]))) for f in ("fscale", "fscale_b")]
    for name, ok in checks:
        if not ok:
            raise Fault("param", param=_pnum("vu", name))


def _vu_lerp_entry(mem: np.ndarray, space: int, at: int, size: int, form: int) -> tuple:
    """(i1, i2, w1, w2) of a table entry, the weights exact (Fractions or ints); Fault for a bad one."""
    out = []
    for k in range(2):
        i = _int(mem, at + 4 * k, 4)
        if not 0 <= i < size:
            raise Fault("param", space=space, first=at + 4 * k, last=at + 4 * k + 3)
        out.append(i)
    for k in range(2):
        raw = _int(mem, at + 8 + 4 * k, 4)
        w = raw if form == 1 else f32_bits(raw)
        if not (0 <= w <= 1 << 16 if form == 1 else 0 <= w <= 1):     # nan and infinities fail too
            raise Fault("param", space=space, first=at + 8 + 4 * k, last=at + 11 + 4 * k)
        out.append(w if form == 1 else Fraction(w))
    return tuple(out)


def _vu_lerp(mems: dict, unit: int, rd: int, ra: int, rb: int, q: dict) -> None:
    """vu.lerp: each output from its column entry (b + 16 i0) and row entry (b + 16 (n0 + i1)), exactly."""
    _vu_lerp_params(q)
    space = VBUF0 + unit
    mem = _need_memory(mems, space)
    if rb % 4:
        raise Fault("align", space=space)
    sizes = [q[f"n{k}"] for k in range(4)]
    outs = [(i, rd + sum(i[k] * q[f"d_stride{k}"] for k in range(4)), ra + sum(i[k] * q[f"a_stride{k}"]
                                                                            for k in range(4))) for i in _box(sizes)]
    window = [wh * q["win_stride_h"] + ww * q["win_stride_w"] for wh in range(q["win_h"]) for ww in range(q["win_w"])]
    _check_inside(mem, space, [d for _, d, _ in outs], 1)
    _check_inside(mem, space, [a + w for _, _, a in outs for w in window], 1)
    _check_inside(mem, space, [rb], LERP_ENTRY * (sizes[0] + sizes[1]))
    form, results = q["ma"], []
    for i, d, a in outs:
        if i[0] == 0:
            row = _vu_lerp_entry(mem, space, rb + LERP_ENTRY * (sizes[0] + i[1]), q["win_h"], form)
        col = _vu_lerp_entry(mem, space, rb + LERP_ENTRY * i[0], q["win_w"], form)
        taps = [_int(mem, a + y * q["win_stride_h"] + x * q["win_stride_w"], 1) - q["za"]
                for y in row[:2] for x in col[:2]]
        weights = [col[3] * row[3], col[2] * row[3], col[3] * row[2], col[2] * row[2]]
        results.append((d, _clip(_lerp_value(taps, weights, q), q["lo"], q["hi"])))
    for d, v in results:
        _put(mem, d, 1, v)


def _lerp_value(taps: list[int], weights: list, q: dict) -> int:
    """One vu.lerp output before the clip: integer (vu.ma = 1) or float32 rounded after every operation."""
    form, zp = q["ma"], q["zp_out"]
    if form == 1:
        total = sum(w * t for w, t in zip(weights, taps))
        mag = abs(total) >> q["shift"]
        return (mag if total >= 0 else -mag) + zp
    s = Fraction(f32_bits(q["fscale"])) if form == 2 else 1
    v = None
    for w, t in zip(weights, taps):
        p = round_f32(round_f32(w) * round_f32(t * s))
        v = p if v is None else round_f32(v + p) if not (isinstance(v, float) or isinstance(p, float)) \
            else float(v) + float(p)
    if form == 0:
        return (int(v) if v == v and abs(v) < 2 ** 31 else -2 ** 31) + zp      # toward zero; else INT_MIN
    t = v if isinstance(v, float) else round_f32(v / Fraction(f32_bits(q["fscale_b"])))
    if isinstance(t, float) and t == t:
        t = float(t)
    t = -128 - zp if t != t else min(max(t, -128 - zp), 127 - zp)
    return _clip(_round_half_even(t) + zp, q["lo"], q["hi"])


def _vu_element(mem: np.ndarray, space: int, mnemonic: str, a: int, b: int, a_bytes: int,
                q: dict, window: list) -> int:
    """The value one element of a VU instruction computes, in exact integers."""
    za, zb, ma, mb, shift = q["za"], q["zb"], q["ma"], q["mb"], q["shift"]
    mnemonic = SLIDE_AS_POOL.get(mnemonic, mnemonic)
    if mnemonic in FLOAT_OPS:
        return _vu_float_element(mem, space, mnemonic, a, b, a_bytes, q, window)
    if mnemonic in ("vu.pool.max", "vu.pool.sum", "vu.pool.acc", "vu.pool.avg"):
        xs = [_int(mem, a + dh + dw, 1) for dh, dw in window]
        if mnemonic == "vu.pool.max":
            return max(xs)
        if not -(1 << 31) <= sum(xs) < 1 << 31:
            raise Fault("overflow", space=space, first=a, last=a)
        if mnemonic == "vu.pool.avg":
            return _divide_round(mem, space, sum(xs), b)
        return sum(xs)
    x = _int(mem, a, a_bytes)
    if mnemonic in ("vu.requant", "vu.requant.pc"):
        m, s = ma, shift
        if mnemonic == "vu.requant.pc":
            m, s = _int(mem, b, 4), _int(mem, b + 4, 4)
            if not 0 < m < 1 << 31:
                raise Fault("param", space=space, first=b, last=b + 3)
            if not 0 <= s <= 62:
                raise Fault("param", space=space, first=b + 4, last=b + 7)
        if not _fits((x - za) * m):
            raise Fault("overflow", space=space, first=a, last=a + a_bytes - 1)
        return _clip(rshift_round((x - za) * m, s) + q["zp_out"], q["lo"], q["hi"])
    if mnemonic == "vu.add":
        y = _int(mem, b, 1)
        ta, tb = (x - za) * ma, (y - zb) * mb
        if not _fits(ta, tb, ta + tb):
            raise Fault("overflow", space=space, first=a, last=a)
        return _clip(rshift_round(ta + tb, shift) + q["zp_out"], q["lo"], q["hi"])
    if mnemonic == "vu.mul":
        y = _int(mem, b, 1)
        prod = (x - za) * (y - zb)
        if not _fits(prod, prod * ma):
            raise Fault("overflow", space=space, first=a, last=a)
        return _clip(rshift_round(prod * ma, shift) + q["zp_out"], q["lo"], q["hi"])
    if mnemonic == "vu.clip":
        return _clip(x, q["lo"], q["hi"])
    if mnemonic == "vu.divr":
        return _divide_round(mem, space, x, b)
    if mnemonic == "vu.lut":
        return _int(mem, b + x + 128, 1)
    assert mnemonic == "vu.mov", mnemonic
    return x


def _vu_softmax(mem: np.ndarray, space: int, a_addrs: list, rb: int, q: dict) -> list:
    """vu.softmax over rows of n0 elements (a_addrs in i0-fastest order), exact rationals rounded to float32
    after each operation: max, the table entries summed first to last, quotient, product, round, zp, clip."""
    table = []
    for k in range(SOFTMAX_ENTRIES):
        v = f32_bits(_int(mem, rb + 4 * k, 4))
        if not _positive_finite(v):
            raise Fault("param", space=space, first=rb + 4 * k, last=rb + 4 * k + 3)
        table.append(Fraction(v))
    scale, n0, out = Fraction(f32_bits(q["fscale"])), q["n0"], []
    for r in range(0, len(a_addrs), n0):
        xs = [_int(mem, a, 1) for a in a_addrs[r:r + n0]]
        es = [table[x - max(xs) + 255] for x in xs]
        total = Fraction(0)
        for e in es:
            total = round_f32(total + e)
        for e in es:
            quotient = Fraction(0) if total == float("inf") else round_f32(e / total)
            out.append(_clip(_round_half_even(round_f32(quotient * scale)) + q["zp_out"], q["lo"], q["hi"]))
    return out


def _divide_round(mem: np.ndarray, space: int, x: int, b: int) -> int:
    """x / n (n the int32 at b) rounded half away from zero, saturated to int8."""
    n = _int(mem, b, 4)
    if n <= 0:
        raise Fault("div0", space=space, first=b, last=b + 3)
    mag = (abs(x) + n // 2) // n
    return _clip(mag if x >= 0 else -mag, -128, 127)


def _vu_float_element(mem: np.ndarray, space: int, mnemonic: str, a: int, b: int, a_bytes: int,
                      q: dict, window: list) -> int:
    """One element of a float VU instruction: exact rationals, each operation rounded to float32."""
    za, zp, lo, hi = q["za"], q["zp_out"], q["lo"], q["hi"]
    o = 128 * q["mode"] if mnemonic in U8_OPS and q["mode"] == 1 else 0
    s = Fraction(f32_bits(q["fscale"])) if _positive_finite(f32_bits(q["fscale"])) else None
    if mnemonic == "vu.pool.favg":
        n = _int(mem, b, 4)
        if n <= 0:
            raise Fault("div0", space=space, first=b, last=b + 3)
        total = Fraction(0)
        for dh, dw in window:
            total = round_f32(total + round_f32(s * round_f32(_int(mem, a + dh + dw, 1) - za)))
        t = round_f32(round_f32(total / round_f32(n)) / Fraction(f32_bits(q["fscale_b"])))
        if q["mode"] == 2:          # QuantizeLinear: clamp, round half to even, then the zero point
            return _clip(_round_half_even(min(max(t, -128 - zp), 127 - zp)) + zp, lo, hi)
        return _clip(_cvt8(round_f32(t + zp + o), o), lo, hi)
    x = _int(mem, a, a_bytes)
    if mnemonic in ("vu.requant.f", "vu.requant.fpc"):
        if mnemonic == "vu.requant.fpc":
            s = f32_bits(_int(mem, b, 4))
            if not _positive_finite(s):
                raise Fault("param", space=space, first=b, last=b + 3)
            s = Fraction(s)
        v = round_f32(round_f32(x - za) * s)
        v = min(max(v, -128 - zp), 127 - zp)             # clamped in float, before the rounding
        return _clip(_round_half_even(v) + zp, lo, hi)
    if mnemonic == "vu.faffine":
        return _faffine_element(mem, space, x - za, b, q)
    y = _int(mem, b, 1)
    if mnemonic in FBIN_OPS:
        return _fbin_element(mnemonic, x - za, y - q["zb"], q)
    if mnemonic == "vu.fadd":
        inner = round_f32((y + o) * Fraction(f32_bits(q["fscale_b"])) + Fraction(f32_bits(q["fbias"])))
        return _clip(_cvt8(round_f32((x + o) * s + inner), o), lo, hi)
    prod = (x - za) * (y - q["zb"])
    if not _fits(prod):
        raise Fault("overflow", space=space, first=a, last=a)
    return _clip(_cvt8(round_f32(round_f32(round_f32(prod) * s) + zp + o), o), lo, hi)


def _simd_sum(values: list, lane0: int):
    """A 4-lane float32 SIMD sum as Eigen's redux runs it (Redux.h): values[k] sits in lane (lane0 + k) % 4; the
    loads start at the first value in lane 0, two packet registers take every second packet until fewer than
    two remain, are added, take one more packet if one remains, then fold (r0 + r2) + (r1 + r3); the values
    before the first load and after the last are added one by one, head first.  Too few for one packet: in order."""
    head = min((MEAN_LANES - lane0) % MEAN_LANES, len(values))
    packets = [values[k:k + MEAN_LANES] for k in range(head, len(values) - MEAN_LANES + 1, MEAN_LANES)]
    if not packets:
        total = values[0]
        for v in values[1:]:
            total = round_f32(total + v)
        return total
    regs = [list(packets[0]), list(packets[1])] if len(packets) > 1 else [list(packets[0])]
    pairs = (len(packets) // 2) * 2
    for k in range(2, pairs):
        regs[k % 2] = [round_f32(r + v) for r, v in zip(regs[k % 2], packets[k])]
    if len(regs) == 2:
        regs = [[round_f32(r + v) for r, v in zip(regs[0], regs[1])]]
        if pairs < len(packets):
            regs = [[round_f32(r + v) for r, v in zip(regs[0], packets[pairs])]]
    r = regs[0]
    total = round_f32(round_f32(r[0] + r[2]) + round_f32(r[1] + r[3]))
    used = head + len(packets) * MEAN_LANES
    for v in values[:head] + values[used:]:
        total = round_f32(total + v)
    return total


def _fmean_element(mem: np.ndarray, a: int, q: dict, window: list, lane0: int) -> int:
    """vu.pool.fmean: f32(sx * f32(x - za)) over the window, _simd_sum, / f32(n), then QuantizeLinear by fscale_b."""
    s = Fraction(f32_bits(q["fscale"]))
    values = [round_f32(s * round_f32(_int(mem, a + dh + dw, 1) - q["za"])) for dh, dw in window]
    mean = round_f32(_simd_sum(values, lane0) / round_f32(len(values)))
    zp = q["zp_out"]
    t = mean if mean != mean else round_f32(mean / Fraction(f32_bits(q["fscale_b"])))   # nan: inf - inf
    t = -128 - zp if t != t else min(max(t, -128 - zp), 127 - zp)
    return _clip(_round_half_even(t) + zp, q["lo"], q["hi"])


def _faffavg_element(mem: np.ndarray, space: int, a: int, b: int, q: dict, window: list) -> int:
    """vu.pool.faffavg: each window element's f32(f32(fa * s) + c) with the finite pair (s, c) at b (max(v, 0)
    for vu.mode 1), summed in four lanes (element k in lane k mod 4, each from 0), the lanes folded
    (l0 + l2) + (l1 + l3), the n mod 4 last elements added in order, / f32(n), then QuantizeLinear."""
    s, c = f32_bits(_int(mem, b, 4)), f32_bits(_int(mem, b + 4, 4))
    for k, v in enumerate((s, c)):
        if not abs(v) < float("inf"):
            raise Fault("param", space=space, first=b + 4 * k, last=b + 4 * k + 3)
    sx = Fraction(f32_bits(q["fscale"]))
    values = []
    for dh, dw in window:
        fa = round_f32(sx * round_f32(_int(mem, a + dh + dw, 1) - q["za"]))
        u = round_f32(round_f32(fa * Fraction(s)) + Fraction(c))
        values.append(max(u, Fraction(0)) if q["mode"] == 1 else u)
    body = len(values) // MEAN_LANES * MEAN_LANES
    lanes = [Fraction(0)] * MEAN_LANES
    for k, v in enumerate(values[:body]):
        lanes[k % MEAN_LANES] = round_f32(lanes[k % MEAN_LANES] + v)
    total = round_f32(round_f32(lanes[0] + lanes[2]) + round_f32(lanes[1] + lanes[3]))
    for v in values[body:]:
        total = round_f32(total + v)
    mean = round_f32(total / len(values))
    zp = q["zp_out"]
    t = mean if mean != mean else round_f32(mean / Fraction(f32_bits(q["fscale_b"])))   # nan: inf - inf
    t = -128 - zp if t != t else min(max(t, -128 - zp), 127 - zp)
    return _clip(_round_half_even(t) + zp, q["lo"], q["hi"])


def _faffine_element(mem: np.ndarray, space: int, x: int, b: int, q: dict) -> int:
    """vu.faffine: fa = f32(f32(x) * sa), then f32(fa * s) and f32(+ c) with the finite float32 pair (s, c) at b,
    then QuantizeLinear as the binary float ops do.  An infinite fa (a dequantisation that overflowed)
    goes on in float: inf * 0 is nan."""
    s, c = f32_bits(_int(mem, b, 4)), f32_bits(_int(mem, b + 4, 4))
    for k, v in enumerate((s, c)):
        if not abs(v) < float("inf"):
            raise Fault("param", space=space, first=b + 4 * k, last=b + 4 * k + 3)
    fa = round_f32(round_f32(x) * Fraction(f32_bits(q["fscale"])))
    t = fa * s if isinstance(fa, float) else round_f32(fa * Fraction(s))
    u = t + c if isinstance(t, float) else round_f32(t + Fraction(c))
    zp = q["zp_out"]
    v = u if isinstance(u, float) else round_f32(u / Fraction(f32_bits(q["fbias"])))
    v = -128 - zp if v != v else min(max(v, -128 - zp), 127 - zp)
    return _clip(_round_half_even(v) + zp, q["lo"], q["hi"])


def _fbin_element(mnemonic: str, x: int, y: int, q: dict) -> int:
    """vu.fsub / fdiv / fmax / fmin: fa = f32(f32(x) * sa), fb = f32(f32(y) * sb) (DequantizeLinear: x = a - za is
    rounded to float32 first, inexact beyond 2**24), f32(fa op fb), then QuantizeLinear: t = f32(r / sy) clamped to
    [-128 - zp, 127 - zp] (nan: the low end), rounded half to even, + zp."""
    fa = round_f32(round_f32(x) * Fraction(f32_bits(q["fscale"])))
    fb = round_f32(round_f32(y) * Fraction(f32_bits(q["fscale_b"])))
    r = _exact_op(mnemonic, fa, fb)
    zp = q["zp_out"]
    t = r if r != r or isinstance(r, float) else round_f32(r / Fraction(f32_bits(q["fbias"])))
    t = -128 - zp if t != t else min(max(t, -128 - zp), 127 - zp)
    return _clip(_round_half_even(t) + zp, q["lo"], q["hi"])


def _exact_op(mnemonic: str, fa, fb):
    """fa op fb rounded to float32 once (fa, fb finite Fractions or +-inf floats; nan for 0 / 0 or inf - inf)."""
    if mnemonic == "vu.fmax":
        return max(fa, fb)
    if mnemonic == "vu.fmin":
        return min(fa, fb)
    if isinstance(fa, float) or isinstance(fb, float):     # an infinity (an overflowed dequantisation)
        fa, fb = float(fa), float(fb)
        return round_f32(fa - fb) if mnemonic == "vu.fsub" else _float_div(fa, fb)
    if mnemonic == "vu.fsub":
        return round_f32(fa - fb)
    if fb == 0:
        return float("nan") if fa == 0 else (float("inf") if fa > 0 else float("-inf"))
    return round_f32(fa / fb)


def _float_div(fa: float, fb: float) -> float:
    """fa / fb for floats of which one is infinite (b's zero is +0.0)."""
    if fb == 0:
        return float("nan") if fa == 0 else (float("inf") if fa > 0 else float("-inf"))
    return fa / fb


# --------------------------------------------------------------------------- test harness

FAULT_ERRORS = {"param": "BAD_PARAM", "memory": "NO_SUCH_MEMORY", "align": "MISALIGNED",
                "bounds": "OUT_OF_BOUNDS", "overflow": "ARITH_OVERFLOW", "div0": "DIV_BY_ZERO",
                "illegal": "ILLEGAL_INSTRUCTION"}
"""Name of the error code (in the simulator's errors module) each Fault kind stands for."""


def pack(mems: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The simulator's memory model: one flat uint8 array, 64-aligned bases, sizes per space id."""
    base = np.zeros(64, dtype=np.int64)
    size = np.zeros(64, dtype=np.int64)
    at = 0
    for space in sorted(mems):
        base[space], size[space] = at, mems[space].size
        at += -(-mems[space].size // 64) * 64 + 64
    flat = np.zeros(at, dtype=np.uint8)
    for space, m in mems.items():
        flat[base[space]:base[space] + m.size] = m
    return flat, base, size


def run_reference(fn, mems: dict, *args) -> tuple[dict, Fault | None]:
    """Run fn on copies of mems: (memories after, the Fault raised or None)."""
    out = {s: m.copy() for s, m in mems.items()}
    try:
        fn(out, *args)
    except Fault as f:
        return out, f
    return out, None


def assert_same(rc: int, err: np.ndarray, flat: np.ndarray, flat_before: np.ndarray,
                base: np.ndarray, ref_mems: dict, fault: Fault | None, codes: dict) -> None:
    """The kernel's outcome (rc, err, flat memory) equals the reference's (memories, fault)."""
    if fault is not None:
        assert rc == codes[fault.kind], (rc, err, fault)
        assert err[0] == rc
        if fault.space != -1:
            assert err[1] == fault.space, (err, fault)
        if fault.first != -1:
            assert (err[2], err[3]) == (fault.first, fault.last), (err, fault)
        if fault.param != -1:
            assert err[4] == fault.param, (err, fault)
        assert np.array_equal(flat, flat_before), "a failing command changed memory"
        return
    assert rc == 0, (rc, err)
    expected = flat_before.copy()
    for space, m in ref_mems.items():
        expected[base[space]:base[space] + m.size] = m
    diff = np.flatnonzero(flat != expected)
    assert diff.size == 0, f"bytes differ at flat offsets {diff[:10]} (bases {base[base > 0]})"
