"""Emission: a synchronised, allocated KernelIR as NNP-1 assembly text.

Every command sets only the parameters that differ from what the parameter
registers already hold (they keep their values between commands), and loads
addresses into registers only when no register holds them yet.  Notes become
comment lines naming the op, tile and buffers of the block that follows;
every command line carries its own comment.  DDR buffers go in `.data` as
`.buffer` declarations followed by their constant bytes (`.byte`, or `.incbin`
of a file beside the source for large weights) or `.space`.

A Loop becomes a counted CU loop: `li` of the count into a register, the
moving addresses' registers set to their first values, the body, then one
`addi` per address family that steps (`xori` for one that alternates between
two slots, moves for a longer rotation) and `loop rC, .loopN`.  Addresses
that do not move stay in registers loaded before the loop; a moving address
that differs from its family's register by a constant is made with `addi`
where it is used.  Parameters the body sets are set in every iteration
before their first use (at the top of the second iteration they hold what
the first one left); those it never sets hold their values throughout.
"""
from __future__ import annotations

import numpy as np

from isa_spec import load_isa
from nnpsim.semantics import SEMANTICS

from dataclasses import dataclass

from ..ir import (U8_READERS, Buffer, Command, CuWait, Dma, KernelIR, Label, Loop, LoopRef, Note, NuConv, Ref, Vu,
                  ref_fields)
from .families import Family, families, family_of, family_registers, rotation_period

SCRATCH = tuple(range(1, 32))       # r1..r31 hold addresses; r0 reads 0
BUFFER_ALIGN = 64
BYTES_PER_LINE = 32
INCBIN_BYTES = 4096     # larger constants (weights) go to .incbin files
FLOAT_PARAMS = ("vu.fscale", "vu.fscale_b", "vu.fbias")     # hold float32 bit patterns
_DMA_PARAMS = tuple(tuple(f"dma.{name}{k}" for name in ("size", "src_stride", "dst_stride", "pad_lo", "pad_hi"))
                    for k in range(4))     # each dimension's parameter names (the cost model emits every command)
_VU_PARAMS = tuple(tuple(f"vu.{name}{k}" for name in ("n", "d_stride", "a_stride", "b_stride")) for k in range(4))


class _Registers:
    """Which register holds which address expression (least recently used is replaced)."""

    def __init__(self, pool=SCRATCH):
        self.pool = tuple(pool)
        self.holds: dict[str, int] = {}
        self.expr_of: dict[int, str] = {}
        self.order: list[int] = []

    def get(self, expr: str, lines: list[str], pinned: set[int], make: str | None = None) -> int:
        """A register holding expr, loading it (li / la, or the line `make` with {reg}) into a
        free or least recently used one."""
        if expr in self.holds:
            reg = self.holds[expr]
            self.order.remove(reg)
            self.order.append(reg)
            return reg
        reg = next((r for r in self.pool if r not in self.expr_of), None)
        if reg is None:
            reg = next(r for r in self.order if r not in pinned)
            self.order.remove(reg)
            del self.holds[self.expr_of.pop(reg)]
        self.holds[expr] = reg
        self.expr_of[reg] = expr
        self.order.append(reg)
        lines.append(make.format(reg=f"r{reg}") if make else _load(reg, expr))
        return reg

    def forget(self, regs: set[int]) -> None:
        """The registers in regs no longer hold what they held."""
        for reg in regs:
            if reg in self.expr_of:
                del self.holds[self.expr_of.pop(reg)]
        self.order = [r for r in self.order if r not in regs]

    def claim(self, expr: str, reg: int) -> None:
        """reg now holds expr."""
        self.forget({reg} | ({self.holds[expr]} if expr in self.holds else set()))
        self.holds[expr] = reg
        self.expr_of[reg] = expr
        self.order.append(reg)


def _addr_expr(ref: Ref) -> str:
    if ref.buf.space == "ddr":
        return ref.buf.name if ref.offset == 0 else f"{ref.buf.name} + {ref.offset}"
    return str(ref.addr)


def _space(ref: Ref) -> str:
    return ref.buf.memory


def _const(value: int, space: object) -> str:
    """The assembler expression of an address value: a number on chip, `buffer + offset` in DDR."""
    if space == "chip":
        return str(value)
    name = space[1]
    return name if value == 0 else f"{name} + {value}"


def _load(reg: int, expr: str) -> str:
    op = "la" if not expr.lstrip("-").isdigit() else "li"
    return f"        {op:<8}r{reg}, {expr}"


@dataclass
class LoopCost:
    """CU instructions of an emitted loop: before it, per body statement, and per iteration's end."""

    setup: int
    per_stmt: list[int]
    tail: int


class _LoopRegisters:
    """The registers of one loop: a counter, per family a register stepped or rotated at the
    end of each iteration, invariant addresses pinned for the whole loop, and temporaries (an
    address made inside an iteration, kept until the iteration's end)."""

    def __init__(self, loop: Loop, outer: _Registers):
        self.fams = families(loop.body)
        free = list(SCRATCH)
        self.counter = free.pop()
        self.fam_regs: dict[Family, list[int]] = {}
        for fam in self.fams:
            n = family_registers(fam)
            self.fam_regs[fam] = [free.pop() for _ in range(n)]
        self.spare = free.pop() if any(rotation_period(f) > 2 for f in self.fams) else None
        if len(free) < 4:
            raise ValueError(f"internal: loop {loop.var} needs too many registers")
        uses: dict[str, int] = {}
        for stmt in loop.body:
            if isinstance(stmt, Command):
                for f in ref_fields(stmt):
                    ref = getattr(stmt, f)
                    if ref is not None and not isinstance(ref, LoopRef):
                        uses[_addr_expr(ref)] = uses.get(_addr_expr(ref), 0) + 1
        room = len(free) - 6          # keep some temporaries
        self.pinned: dict[str, int] = {}
        held = {e: r for e, r in outer.holds.items() if r in free}
        for expr in sorted(uses, key=lambda e: (e not in held, -uses[e])):
            if len(self.pinned) >= room:
                break
            if expr in held:
                reg = held.pop(expr)
            else:
                reg = next((r for r in free if r not in held.values()), free[0])
                held = {e: r for e, r in held.items() if r != reg}
            free.remove(reg)
            self.pinned[expr] = reg
        self.temps = free
        self.outer_held = {e: outer.holds[e] for e in self.pinned if outer.holds.get(e) == self.pinned[e]}

    def setup_lines(self, extent: int, var: str) -> list[str]:
        """Lines before the loop: the count, each family's first values, the pinned addresses."""
        lines = [f"{f'        li      r{self.counter}, {extent}':<60} ; loop {var}: {extent} iterations"]
        for fam, regs in self.fam_regs.items():
            first = self.fams[fam][0]
            if len(fam.shape) == 1:
                lines.append(f"{_load(regs[0], _const(first, fam.space)):<60} ; {var} steps by {fam.shape[0]}")
                continue
            period, offsets, _ = fam.shape
            if period == 2 and fam.space != "chip":
                lines.append(_load(regs[0], _const(first, fam.space)))
                lines.append(f"{_load(regs[1], str(offsets[1])):<60} ; {var} alternates")
                continue
            for k, reg in enumerate(regs):
                lines.append(f"{_load(reg, _const(first + offsets[k], fam.space)):<60} ; {var} rotates")
        for expr, reg in self.pinned.items():
            if self.outer_held.get(expr) != reg:
                lines.append(_load(reg, expr))
        return lines

    def tail_lines(self) -> list[str]:
        """Lines at the end of each iteration that move every family to the next iteration."""
        lines = []
        for fam, regs in self.fam_regs.items():
            if len(fam.shape) == 1:
                lines.append(f"        addi    r{regs[0]}, r{regs[0]}, {fam.shape[0]}")
                continue
            period, offsets, _ = fam.shape
            if period == 2 and fam.space == "chip":
                first = self.fams[fam][0]
                lines.append(f"        xori    r{regs[0]}, r{regs[0]}, {first ^ (first + offsets[1])}")
            elif period == 2:
                lines.append(f"        add     r{regs[0]}, r{regs[0]}, r{regs[1]}")
                lines.append(f"        sub     r{regs[1]}, r0, r{regs[1]}")
            else:
                t = self.spare
                lines.append(f"        addi    r{t}, r{regs[0]}, 0")
                for a, b in zip(regs, regs[1:]):
                    lines.append(f"        addi    r{a}, r{b}, 0")
                lines.append(f"        addi    r{regs[-1]}, r{t}, 0")
        return lines


class _BodyRegisters:
    """Address registers inside one iteration of a loop body (temporaries start empty)."""

    def __init__(self, lr: _LoopRegisters):
        self.lr = lr
        self.temps = _Registers(lr.temps)

    def get(self, ref: Ref, lines: list[str], pinned: set[int]) -> int:
        if not isinstance(ref, LoopRef):
            expr = _addr_expr(ref)
            if expr in self.lr.pinned:
                return self.lr.pinned[expr]
            return self.temps.get(expr, lines, pinned)
        fam, v0 = family_of(ref)
        base = self.lr.fam_regs[fam][0]
        delta = v0 - self.lr.fams[fam][0]
        if delta == 0:
            return base
        return self.temps.get(f"r{base} + {delta}", lines, pinned, f"        addi    {{reg}}, r{base}, {delta}")


class Emitter:
    """Turns statements into lines, tracking parameter and register contents."""

    def __init__(self):
        isa = load_isa()
        self.params = {name: isa.param_defaults.get(name, 0) for name in isa.params}
        self.regs = _Registers()
        self.lines: list[str] = []
        self.body_regs: _BodyRegisters | None = None     # inside a loop body
        self.loops = 0
        self.counting = False       # only counting instructions (cost.schedule_cycles): commands' lines left blank

    def fork(self) -> "Emitter":
        """A new emitter in this one's state (parameters, registers), with no lines yet."""
        em = Emitter.__new__(Emitter)
        em.params, em.lines, em.body_regs, em.loops = dict(self.params), [], None, self.loops
        em.counting = self.counting
        em.regs = _Registers(self.regs.pool)
        em.regs.holds, em.regs.expr_of = dict(self.regs.holds), dict(self.regs.expr_of)
        em.regs.order = list(self.regs.order)
        return em

    def statement(self, stmt) -> int:
        """Emit one statement; returns the CU instructions it took."""
        before = len(self.lines)
        if isinstance(stmt, Note):
            self.lines.append(f"        ; ---- {stmt.text}")
            return 0
        if isinstance(stmt, Label):
            self.lines.append(f"{stmt.name}:")
            return 0
        if isinstance(stmt, CuWait):
            self.lines.append(f"{'        sem.wait s' + str(stmt.sem):<60} ; {stmt.comment}")
            return 1
        if isinstance(stmt, Loop):
            cost = self.loop(stmt)
            return cost.setup + sum(cost.per_stmt) + cost.tail
        self.command(stmt)
        return len(self.lines) - before

    def count(self, stmt) -> int:
        """The CU instructions of one statement, its lines (except a loop's) left blank: the same
        count and the same parameters and registers after it as statement()."""
        if isinstance(stmt, Loop):      # a loop's emission reads its body's lines back
            return self.statement(stmt)
        self.counting = True
        try:
            return self.statement(stmt)
        finally:
            self.counting = False

    def loop(self, lp: Loop) -> LoopCost:
        """Emit a Loop as a counted CU loop; returns its instruction counts."""
        if self.body_regs is not None:
            raise ValueError("internal: nested loops are not emitted")
        lr = _LoopRegisters(lp, self.regs)
        # parameters the body sets are unknown at the top of an iteration (the first iteration
        # starts from what came before, the next ones from what the body left)
        unknown: set[str] = set()
        while True:
            trial = self._body(lp, lr, {**self.params, **{p: None for p in unknown}})
            if trial[2] <= unknown:
                break
            unknown |= trial[2]
        lines, params, _, per_stmt = trial
        name = f".loop{self.loops}"
        self.loops += 1
        setup = lr.setup_lines(lp.extent, lp.var)
        tail = lr.tail_lines()
        moving = sorted({getattr(s, f).describe() for s in lp.body if isinstance(s, Command)
                         for f in ref_fields(s) if isinstance(getattr(s, f), LoopRef)})
        where = ", ".join(moving[:8]) + (f" and {len(moving) - 8} more" if len(moving) > 8 else "")
        self.lines.append(f"        ; ---- loop {lp.var} = 0 .. {lp.extent - 1}: {where}")
        self.lines += setup + [f"{name}:"] + lines + tail
        self.lines.append(f"{f'        loop    r{lr.counter}, {name}':<60} ; next {lp.var}")
        self.params = params
        used = {lr.counter, *lr.temps, *(r for regs in lr.fam_regs.values() for r in regs)}
        used |= {lr.spare} if lr.spare is not None else set()
        self.regs.forget(used)
        for expr, reg in lr.pinned.items():
            self.regs.claim(expr, reg)
        return LoopCost(sum(1 for line in setup if not line.lstrip().startswith(";")), per_stmt,
                        len(tail) + 1)

    def _body(self, lp: Loop, lr: _LoopRegisters, params: dict):
        """(lines, parameters after, parameters set, instructions per statement) of one iteration."""
        saved = self.lines, self.params, self.body_regs
        self.lines, self.params, self.body_regs = [], dict(params), _BodyRegisters(lr)
        try:
            per_stmt = [self.statement(stmt) for stmt in lp.body]
            changed = {p for p, v in self.params.items() if v != params[p] or v is None}
            setp = {line.split()[1].rstrip(",") for line in self.lines if line.lstrip().startswith("setp")}
            return self.lines, self.params, (changed | setp), per_stmt
        finally:
            self.lines, self.params, self.body_regs = saved

    def setp(self, name: str, value: int) -> None:
        """Set a parameter register unless it already holds value."""
        value = int(value)
        if self.params[name] != value:
            self.params[name] = value
            if self.counting:
                self.lines.append("")
            elif name in FLOAT_PARAMS:       # the bits in hex, the float32 they stand for in the comment
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
            if self.body_regs is not None:
                reg = self.body_regs.get(ref, self.lines, pinned)
            else:
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
        if self.counting:
            self.lines.append("")
            return
        sync = "".join(f", {k}=s{v}" for k, v in (("wait", c.wait), ("signal", c.signal), ("signal2", c.signal2))
                       if v is not None)
        line = f"        {text}{sync}"
        self.lines.append(f"{line:<60} ; {c.comment}" if c.comment else line)

    def _dma(self, c: Dma) -> str:
        for k, (size, src_stride, dst_stride, pad_lo, pad_hi) in enumerate(_DMA_PARAMS):
            self.setp(size, c.size[k])
            if c.size[k] > 1:           # a stride of a size-1 dimension is never used
                self.setp(src_stride, c.src_stride[k])
                self.setp(dst_stride, c.dst_stride[k])
            self.setp(pad_lo, c.pad_lo[k])
            self.setp(pad_hi, c.pad_hi[k])
        if any(c.pad_lo) or any(c.pad_hi):
            self.setp("dma.pad_value", c.pad_value)
        self.setp("dma.elem", c.elem)
        rd, rs = self.regs_for(c.dst, c.src)
        return f"dma     ch{c.chan}, {_space(c.dst)}[r{rd}], {_space(c.src)}[r{rs}]"

    def _nu(self, c: NuConv) -> str:
        for name, value in c.params.items():
            self.setp(f"nu.{name}", value)
        if c.rq is not None:            # a constant table: the same address in every loop iteration
            self.setp("nu.rq_table", c.rq.addr)
        if c.psum is not None:          # a slot: loops.py keys on it, so it too is fixed within a loop
            self.setp("nu.rq_psum", c.psum.addr)
        racc, rin, rw = self.regs_for(c.racc, c.rin, c.rw)
        return f"{c.mnemonic:<8} nu{c.unit}, r{racc}, r{rin}, r{rw}"

    def _vu(self, c: Vu) -> str:
        for k, (n, d_stride, a_stride, b_stride) in enumerate(_VU_PARAMS):
            self.setp(n, c.n[k])
            if c.n[k] > 1:
                self.setp(d_stride, c.d_stride[k])
                self.setp(a_stride, c.a_stride[k])
                if c.b is not None:
                    self.setp(b_stride, c.b_stride[k])
        if SEMANTICS[c.mnemonic].footprint in ("vu_window", "vu_lerp"):
            self.setp("vu.win_h", c.win[0])
            self.setp("vu.win_w", c.win[1])
            self.setp("vu.win_stride_h", c.win_stride[0])
            self.setp("vu.win_stride_w", c.win_stride[1])
        if c.mnemonic in U8_READERS:      # a command before may have left vu.mode at 1 (or a phase)
            self.setp("vu.mode", c.scalars.get("mode", 0))
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
        em.statement(stmt)
    em.lines.append("        halt")
    em.lines += ["", "        .data"]
    for buf in kir.buffers:
        if buf.space == "ddr":
            em.lines += _data_lines(buf, threshold)
    return "\n".join(em.lines) + "\n"
