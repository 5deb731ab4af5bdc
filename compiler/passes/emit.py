"""Emission: a synchronised, allocated KernelIR as NNP-1 assembly text.

Every command sets only the parameters that differ from what the parameter
registers already hold (they keep their values between commands), and loads
addresses into registers only when no register holds them yet.  Notes become
comment lines naming the op, tile and buffers of the block that follows;
every command line carries its own comment.  DDR buffers go in `.data` as
`.buffer` declarations followed by their constant bytes (`.byte`, or `.incbin`
of a file beside the source for large weights) or `.space`.
"""
from __future__ import annotations

import numpy as np

from isa_spec import load_isa

from ..ir import Buffer, Command, CuWait, Dma, KernelIR, Label, Note, NuConv, Ref, Vu

SCRATCH = tuple(range(1, 32))       # r1..r31 hold addresses; r0 reads 0
BUFFER_ALIGN = 64
BYTES_PER_LINE = 32
INCBIN_BYTES = 4096     # larger constants (weights) go to .incbin files
FLOAT_PARAMS = ("vu.fscale", "vu.fscale_b", "vu.fbias")     # hold float32 bit patterns


class _Registers:
    """Which register holds which address expression (least recently used is replaced)."""

    def __init__(self):
        self.holds: dict[str, int] = {}
        self.order: list[int] = []

    def get(self, expr: str, lines: list[str], pinned: set[int]) -> int:
        """A register holding expr, loading it (li / la) into a free or least recently used one."""
        if expr in self.holds:
            reg = self.holds[expr]
            self.order.remove(reg)
            self.order.append(reg)
            return reg
        free = [r for r in SCRATCH if r not in self.holds.values()]
        if free:
            reg = free[0]
        else:
            reg = next(r for r in self.order if r not in pinned)
            self.order.remove(reg)
            del self.holds[next(e for e, r in self.holds.items() if r == reg)]
        self.holds[expr] = reg
        self.order.append(reg)
        op = "la" if not expr.lstrip("-").isdigit() else "li"
        lines.append(f"        {op:<8}r{reg}, {expr}")
        return reg


def _addr_expr(ref: Ref) -> str:
    if ref.buf.space == "ddr":
        return ref.buf.name if ref.offset == 0 else f"{ref.buf.name} + {ref.offset}"
    return str(ref.addr)


def _space(ref: Ref) -> str:
    return ref.buf.memory


class Emitter:
    """Turns statements into lines, tracking parameter and register contents."""

    def __init__(self):
        isa = load_isa()
        self.params = {name: isa.param_defaults.get(name, 0) for name in isa.params}
        self.regs = _Registers()
        self.lines: list[str] = []

    def setp(self, name: str, value: int) -> None:
        """Set a parameter register unless it already holds value."""
        value = int(value)
        if self.params[name] != value:
            self.params[name] = value
            if name in FLOAT_PARAMS:       # the bits in hex, the float32 they stand for in the comment
                f = np.array([value], np.uint32).view(np.float32)[0]
                self.lines.append(f"{f'        setpi   {name}, {value:#010x}':<60} ; float32 {f}")
            else:
                self.lines.append(f"        setpi   {name}, {value}")

    def regs_for(self, *refs: Ref | None) -> list[int]:
        """Registers holding the addresses of refs (r0 for None), distinct from each other."""
        pinned: set[int] = set()
        out = []
        for ref in refs:
            if ref is None:
                out.append(0)
                continue
            reg = self.regs.get(_addr_expr(ref), self.lines, pinned)
            pinned.add(reg)
            out.append(reg)
        return out

    def command(self, c: Command) -> None:
        """The lines of one command: its parameters, its addresses, the command with its comment."""
        if isinstance(c, Dma):
            text = self._dma(c)
        elif isinstance(c, NuConv):
            text = self._nu(c)
        else:
            text = self._vu(c)
        sync = "".join(f", {k}=s{v}" for k, v in (("wait", c.wait), ("signal", c.signal)) if v is not None)
        line = f"        {text}{sync}"
        self.lines.append(f"{line:<60} ; {c.comment}" if c.comment else line)

    def _dma(self, c: Dma) -> str:
        for k in range(4):
            self.setp(f"dma.size{k}", c.size[k])
            if c.size[k] > 1:           # a stride of a size-1 dimension is never used
                self.setp(f"dma.src_stride{k}", c.src_stride[k])
                self.setp(f"dma.dst_stride{k}", c.dst_stride[k])
            self.setp(f"dma.pad_lo{k}", c.pad_lo[k])
            self.setp(f"dma.pad_hi{k}", c.pad_hi[k])
        if any(c.pad_lo) or any(c.pad_hi):
            self.setp("dma.pad_value", c.pad_value)
        self.setp("dma.elem", c.elem)
        rd, rs = self.regs_for(c.dst, c.src)
        return f"dma     ch{c.chan}, {_space(c.dst)}[r{rd}], {_space(c.src)}[r{rs}]"

    def _nu(self, c: NuConv) -> str:
        for name, value in c.params.items():
            self.setp(f"nu.{name}", value)
        racc, rin, rw = self.regs_for(c.racc, c.rin, c.rw)
        return f"{'nu.conv.acc' if c.acc else 'nu.conv':<8} nu{c.unit}, r{racc}, r{rin}, r{rw}"

    def _vu(self, c: Vu) -> str:
        for k in range(4):
            self.setp(f"vu.n{k}", c.n[k])
            if c.n[k] > 1:
                self.setp(f"vu.d_stride{k}", c.d_stride[k])
                self.setp(f"vu.a_stride{k}", c.a_stride[k])
                if c.b is not None:
                    self.setp(f"vu.b_stride{k}", c.b_stride[k])
        if c.mnemonic.startswith("vu.pool"):
            self.setp("vu.win_h", c.win[0])
            self.setp("vu.win_w", c.win[1])
            self.setp("vu.win_stride_h", c.win_stride[0])
            self.setp("vu.win_stride_w", c.win_stride[1])
        for name, value in c.scalars.items():
            self.setp(f"vu.{name}", value)
        rd, ra, rb = self.regs_for(c.d, c.a, c.b)
        m, vu = c.mnemonic, f"vu{c.unit}"
        if m == "vu.mov":
            return f"{m:<8} {vu}, {c.d_type}, r{rd}, {c.a_type}, r{ra}"
        if m in ("vu.requant", "vu.requant.f"):
            return f"{m:<8} {vu}, r{rd}, r{ra}, {c.a_type}"
        if m in ("vu.requant.pc", "vu.requant.fpc"):
            return f"{m:<8} {vu}, r{rd}, r{ra}, r{rb}, {c.a_type}"
        if c.b is not None:
            return f"{m:<8} {vu}, r{rd}, r{ra}, r{rb}"
        return f"{m:<8} {vu}, r{rd}, r{ra}"


def constant_bytes(buf: Buffer) -> bytes:
    """The stored little-endian bytes of a constant DDR buffer."""
    raw = np.ascontiguousarray(buf.data).astype("<i4" if buf.dtype == "int32" else "i1").tobytes()
    if len(raw) != buf.nbytes:
        raise ValueError(f"buffer {buf.name}: {len(raw)} data bytes for {buf.nbytes}")
    return raw


def incbin_name(buf: Buffer) -> str:
    """File name of a constant emitted with .incbin."""
    return f"{buf.name}.bin"


def constant_files(kir: KernelIR, threshold: int = INCBIN_BYTES) -> dict[str, bytes]:
    """The files the emitted text includes with .incbin: constants of more than `threshold` bytes."""
    return {incbin_name(b): constant_bytes(b) for b in kir.buffers
            if b.space == "ddr" and b.data is not None and b.nbytes > threshold}


def _data_lines(buf: Buffer, threshold: int) -> list[str]:
    shape = "(" + ", ".join(str(d) for d in buf.shape) + ("," if len(buf.shape) == 1 else "") + ")"
    layout = f', "{buf.layout}"' if buf.layout else ""
    out = ["", f"        .align  {BUFFER_ALIGN}", f"        .buffer {buf.name}, {buf.dtype}, {shape}{layout}"]
    if buf.data is None:
        out.append(f"        .space  {buf.nbytes}")
    elif buf.nbytes > threshold:
        out.append(f'        .incbin "{incbin_name(buf)}"')
    else:
        vals = np.frombuffer(constant_bytes(buf), dtype=np.uint8)
        for i in range(0, len(vals), BYTES_PER_LINE):
            out.append("        .byte   " + ", ".join(str(v) for v in vals[i:i + BYTES_PER_LINE]))
    return out


def emit(kir: KernelIR, header: list[str] | None = None, threshold: int = INCBIN_BYTES,
         target: dict[str, int] | None = None) -> str:
    """The assembly text of an allocated, synchronised kernel (constants_files() lists its .incbin files).

    `target` (configuration key -> value) becomes `.target` lines: the machine the kernel was built for.
    """
    em = Emitter()
    em.lines += [f"; {line}" for line in (header or [])]
    em.lines += [""] + [f"        .target {key}, {value}" for key, value in (target or {}).items()]
    em.lines += ["", "        .text", "main:"]
    for stmt in kir.body:
        if isinstance(stmt, Note):
            em.lines.append(f"        ; ---- {stmt.text}")
        elif isinstance(stmt, Label):
            em.lines.append(f"{stmt.name}:")
        elif isinstance(stmt, CuWait):
            em.lines.append(f"{'        sem.wait s' + str(stmt.sem):<60} ; {stmt.comment}")
        else:
            em.command(stmt)
    em.lines.append("        halt")
    em.lines += ["", "        .data"]
    for buf in kir.buffers:
        if buf.space == "ddr":
            em.lines += _data_lines(buf, threshold)
    return "\n".join(em.lines) + "\n"
