"""A small kernel IR: buffers in memory spaces, and a flat schedule of unit commands.

A kernel is a list of buffers and a list of statements in CU issue order.
Statements are commands for a queue (Dma, NuConv, Vu), CU semaphore waits
(CuWait), comments (Note) that name the op, the tile (loop indices) and the
buffers of the block that follows, labels, and counted loops (Loop).  The
lowering unrolls every tile (each has its own descriptors: edge tiles differ
in size and padding), so allocation, synchronisation and pricing see a flat
body; passes.loops then rolls runs of tiles that differ only in addresses
moving by a constant stride per tile (or rotating through buffer slots) back
into Loops whose body addresses are LoopRefs.  Passes fill in what the
lowering leaves open: buffer addresses (alloc), semaphores (sync), loops
(loops); emit turns the result into assembly text.

Footprints are byte intervals [lo, hi) relative to a buffer, or absolute once
the buffer has an address; an interval bounds every byte the command can touch.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

SPACES = ("ddr", "dm", "ibuf", "wbuf", "abuf", "vbuf")
ON_CHIP = SPACES[1:]
DTYPE_BYTES = {"i8": 1, "i32": 4}


LOCAL = ("ibuf", "wbuf", "abuf", "vbuf")      # one of each per NU (ibuf, wbuf, abuf) or VU (vbuf)


@dataclass(eq=False)
class Buffer:
    """A named region of one memory space; `addr` is fixed by alloc (DDR by emit).

    `unit` says whose local buffer (ibuf, wbuf, abuf: an NU's; vbuf: a VU's) holds it.
    """

    name: str
    space: str
    nbytes: int
    align: int = 32
    addr: int | None = None
    unit: int = 0
    # DDR buffers only: what the binary declares (dtype, logical shape, layout) and constant data
    dtype: str = "int8"
    shape: tuple[int, ...] = ()
    layout: str = ""
    data: np.ndarray | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.space not in SPACES:
            raise ValueError(f"buffer {self.name}: unknown space {self.space!r}")
        if self.nbytes <= 0:
            raise ValueError(f"buffer {self.name}: size must be positive, got {self.nbytes}")

    @property
    def memory(self) -> str:
        """The memory that holds it, as the assembler names it: ddr, dm, ibuf0, vbuf1 ..."""
        return f"{self.space}{self.unit}" if self.space in LOCAL else self.space


@dataclass(frozen=True, eq=False)
class Ref:
    """An address: a buffer plus a byte offset."""

    buf: Buffer
    offset: int = 0

    def __add__(self, delta: int) -> "Ref":
        return Ref(self.buf, self.offset + int(delta))

    @property
    def addr(self) -> int:
        if self.buf.addr is None:
            raise ValueError(f"buffer {self.buf.name} has no address yet (run alloc)")
        return self.buf.addr + self.offset


@dataclass(frozen=True, eq=False)
class LoopRef(Ref):
    """An address in a Loop body that moves with the loop variable `var`.

    At iteration v it is `cycle[v % len(cycle)] + v * stride`, with `cycle` the buffer slots
    it rotates through (empty: just `buf + offset`, so `buf + offset + v * stride`).  As a
    Ref it is the address of iteration 0.
    """

    var: str = ""
    stride: int = 0
    cycle: tuple[Ref, ...] = ()

    def at(self, v: int) -> Ref:
        """The plain address at iteration v."""
        base = self.cycle[v % len(self.cycle)] if self.cycle else Ref(self.buf, self.offset)
        return Ref(base.buf, base.offset + v * self.stride)

    def describe(self) -> str:
        """`base + var * stride` or `[slot0, slot1 ...][var % n]`, for comments."""
        def one(r: Ref) -> str:
            return r.buf.name + (f" + {r.offset}" if r.offset else "")
        if self.cycle:
            text = f"[{', '.join(one(r) for r in self.cycle)}][{self.var} % {len(self.cycle)}]"
        else:
            text = one(self)
        return text + (f" + {self.var} * {self.stride}" if self.stride else "")


@dataclass(frozen=True)
class Access:
    """Bytes [lo, hi) of buffer `buf` (offsets relative to it), read or written."""

    buf: Buffer
    lo: int
    hi: int
    write: bool

    @property
    def space(self) -> str:
        return self.buf.space

    def absolute(self) -> tuple[str, int, int]:
        """(memory, first byte, end byte) once the buffer has an address."""
        base = self.buf.addr
        if base is None:
            raise ValueError(f"buffer {self.buf.name} has no address yet (run alloc)")
        return self.buf.memory, base + self.lo, base + self.hi


def box_extent(sizes, strides, elem: int) -> tuple[int, int]:
    """[lo, hi) byte interval covered by a strided box of elements of `elem` bytes."""
    try:
        return _box_extent(sizes, strides, elem)
    except TypeError:       # a list: not hashable
        return _box_extent.__wrapped__(sizes, strides, elem)


@lru_cache(maxsize=1 << 16)
def _box_extent(sizes, strides, elem: int) -> tuple[int, int]:
    # memoised: the passes ask every command's footprints many times, with few distinct boxes
    lo = sum(min(0, (n - 1) * s) for n, s in zip(sizes, strides))
    hi = sum(max(0, (n - 1) * s) for n, s in zip(sizes, strides))
    return lo, hi + elem


def _access(ref: Ref, extent: tuple[int, int], write: bool) -> Access:
    return Access(ref.buf, ref.offset + extent[0], ref.offset + extent[1], write)


@dataclass(eq=False)
class Command:
    """A command for one queue; wait/signal/signal2 are semaphore numbers filled in by sync."""

    comment: str = field(default="", kw_only=True)
    wait: int | None = field(default=None, kw_only=True)
    signal: int | None = field(default=None, kw_only=True)
    signal2: int | None = field(default=None, kw_only=True)

    @property
    def queue(self) -> str:
        raise NotImplementedError

    def accesses(self) -> list[Access]:
        raise NotImplementedError


@dataclass(eq=False)
class Dma(Command):
    """A 4-D strided copy (dim 0 innermost) with padding fill, as docs/architecture.md says."""

    chan: int
    dst: Ref
    src: Ref
    size: tuple[int, ...]
    src_stride: tuple[int, ...]
    dst_stride: tuple[int, ...]
    pad_lo: tuple[int, ...] = (0, 0, 0, 0)
    pad_hi: tuple[int, ...] = (0, 0, 0, 0)
    pad_value: int = 0
    elem: int = 1

    def __post_init__(self):
        self.size, self.src_stride, self.dst_stride = (
            _dims4(self.size, 1), _dims4(self.src_stride, 0), _dims4(self.dst_stride, 0))
        self.pad_lo, self.pad_hi = _dims4(self.pad_lo, 0), _dims4(self.pad_hi, 0)
        for k in range(4):
            if self.size[k] < 1 or self.pad_lo[k] + self.pad_hi[k] > self.size[k]:
                raise ValueError(f"dma: bad size/padding in dim {k}: {self.size}, {self.pad_lo}, {self.pad_hi}")

    @property
    def queue(self) -> str:
        return f"dma{self.chan}"

    @property
    def inner(self) -> tuple[int, ...]:
        """Source box sizes (the destination box without its padding)."""
        return tuple(n - a - b for n, a, b in zip(self.size, self.pad_lo, self.pad_hi))

    @property
    def nbytes(self) -> int:
        """Bytes written to the destination."""
        return math.prod(self.size) * self.elem

    def accesses(self) -> list[Access]:
        out = [_access(self.dst, box_extent(self.size, self.dst_stride, self.elem), True)]
        inner = self.inner
        if min(inner) > 0:
            out.append(_access(self.src, box_extent(inner, self.src_stride, self.elem), False))
        return out


def _dims4(v, fill: int) -> tuple[int, ...]:
    """v padded to 4 dimensions with `fill` (hot: called for every command built)."""
    n = len(v)
    if n == 4 and type(v) is tuple:
        return v
    if n > 4:
        raise ValueError(f"at most 4 dimensions, got {v}")
    return tuple(v) + _FILL[fill][n] if n < 4 else tuple(v)


_FILL = {f: [(f,) * (4 - n) for n in range(4)] for f in (0, 1)}


NU_PARAMS = ("in_h", "in_w", "in_cb", "out_h", "out_w", "out_cb", "k_h", "k_w",
             "stride_h", "stride_w", "dil_h", "dil_w", "x_zp")
RQ_ENTRY = 12
"""Bytes of one channel's (bias, M, S) entry in nu.conv.rq's table."""


@dataclass(eq=False)
class NuConv(Command):
    """nu.conv / nu.conv.acc (nu.dwconv when depthwise) on NU `unit` with its parameters (names as in
    NU_PARAMS; nu.dwconv reads no out_cb).  With `rq`, the (bias, M, S) table in WBUF: nu.conv.rq,
    whose int8 result goes to racc in VBUF (params then also rq_zp_out, rq_lo, rq_hi); with `psum`
    too, nu.conv.acc.rq, which adds the int32 partial sums there in ABUF first."""

    acc: bool
    racc: Ref
    rin: Ref
    rw: Ref
    params: dict[str, int]
    rows: int = 32
    cols: int = 32
    unit: int = 0
    depthwise: bool = False
    rq: Ref | None = None
    psum: Ref | None = None
    fmode: bool = False
    """The float32 mode: nu.fconv (racc its (total, part) state in ABUF, read too when params f_mode = 1) or, with
    rq, nu.fconv.rq (psum: the state it continues); float32 weights.  Depthwise: nu.fdwconv, whose int8 result goes
    to racc in VBUF and whose (bias, scale) rows lie in its weight blocks (no rq table)."""

    @property
    def queue(self) -> str:
        return f"nu{self.unit}"

    @property
    def mnemonic(self) -> str:
        if self.fmode:
            return "nu.fdwconv" if self.depthwise else "nu.fconv.rq" if self.rq is not None else "nu.fconv"
        if self.rq is not None:
            return "nu.conv.rq" if self.psum is None else "nu.conv.acc.rq"
        return ("nu.dwconv" if self.depthwise else "nu.conv") + (".acc" if self.acc else "")

    @property
    def macs(self) -> int:
        p = self.params
        if self.depthwise:
            return p["in_cb"] * p["k_h"] * p["k_w"] * p["out_h"] * p["out_w"] * self.cols
        return (p["out_cb"] * p["in_cb"] * p["k_h"] * p["k_w"] * p["out_h"] * p["out_w"]
                * self.rows * self.cols)

    def accesses(self) -> list[Access]:
        p, r, c = self.params, self.rows, self.cols
        blocks = p["in_cb"] if self.depthwise else p["out_cb"]
        # nu.dwconv's blocks: 4 bytes of int32 bias a lane, then the taps; nu.fdwconv's: 2 float32 rows, then the taps
        w_elems = (p["in_cb"] * ((2 if self.fmode else 4) + p["k_h"] * p["k_w"]) * c if self.depthwise
                   else p["out_cb"] * p["in_cb"] * p["k_h"] * p["k_w"] * r * c)
        elem = 8 if self.fmode else 4       # an accumulator's bytes (the float mode's (total, part) pair)
        to_vbuf = self.rq is not None or (self.fmode and self.depthwise)        # int8 results
        a_bytes = blocks * p["out_h"] * p["out_w"] * c * (1 if to_vbuf else elem)
        out = [_access(self.rin, (0, p["in_cb"] * p["in_h"] * p["in_w"] * r), False),
               _access(self.rw, (0, w_elems * (4 if self.fmode else 1)), False),
               _access(self.racc, (0, a_bytes), True)]
        if self.rq is not None:
            out.append(_access(self.rq, (0, blocks * c * RQ_ENTRY), False))
        if self.psum is not None:
            out.append(_access(self.psum, (0, a_bytes * elem), False))
        if self.fmode and not to_vbuf and p.get("f_mode") == 1:
            out.append(_access(self.racc, (0, a_bytes), False))
        if self.acc:
            out.append(_access(self.racc, (0, a_bytes), False))
        return out


VU_SCALARS = ("za", "zb", "ma", "mb", "shift", "zp_out", "lo", "hi")


U8_READERS = ("vu.fadd", "vu.fmul", "vu.pool.favg", "vu.slide.favg")
"""The VU commands that read vu.mode as their uint8 switch (docs/isa.md); one without a "mode" scalar runs on
int8 (vu.mode = 0)."""


def u8_scalar(uint8: bool) -> dict[str, int]:
    """The "mode" scalar of a float-form command on uint8 tensors held as int8; none for int8 tensors."""
    return {"mode": 1} if uint8 else {}


@dataclass(eq=False)
class Vu(Command):
    """A VU command on VU `unit`: mnemonic, operands with dtypes, iteration space, window, scalars."""

    mnemonic: str
    d: Ref
    a: Ref
    b: Ref | None = None
    d_type: str = "i8"
    a_type: str = "i8"
    b_bytes: int = 0            # bytes per element of b (8 for (M, S) pairs, 4 for divisors, 1 for int8)
    n: tuple[int, ...] = (1, 1, 1, 1)
    d_stride: tuple[int, ...] = (0, 0, 0, 0)
    a_stride: tuple[int, ...] = (0, 0, 0, 0)
    b_stride: tuple[int, ...] = (0, 0, 0, 0)
    win: tuple[int, int] = (1, 1)
    win_stride: tuple[int, int] = (0, 0)
    scalars: dict[str, int] = field(default_factory=dict)
    unit: int = 0

    def __post_init__(self):
        self.n = _dims4(self.n, 1)
        self.d_stride, self.a_stride, self.b_stride = (
            _dims4(self.d_stride, 0), _dims4(self.a_stride, 0), _dims4(self.b_stride, 0))

    @property
    def queue(self) -> str:
        return f"vu{self.unit}"

    def accesses(self) -> list[Access]:
        a_lo, a_hi = box_extent(self.n, self.a_stride, DTYPE_BYTES[self.a_type])
        wlo, whi = box_extent(self.win, self.win_stride, 1)
        out = [_access(self.d, box_extent(self.n, self.d_stride, DTYPE_BYTES[self.d_type]), True),
               _access(self.a, (a_lo + wlo, a_hi + whi - 1), False)]
        if self.b is not None:
            out.append(_access(self.b, box_extent(self.n, self.b_stride, self.b_bytes), False))
        return out


@dataclass(eq=False)
class CuWait:
    """The CU stalls until semaphore `sem` holds a token (inserted by sync)."""

    sem: int
    comment: str = ""


@dataclass(eq=False)
class Note:
    """A comment line in the emitted assembly (op, tile, buffers of the block that follows)."""

    text: str


@dataclass(eq=False)
class Label:
    """A code label in the emitted assembly: where a layer of a network program starts."""

    name: str


REF_FIELDS = {"Dma": ("dst", "src"), "NuConv": ("racc", "rin", "rw"), "Vu": ("d", "a", "b")}
"""The address fields of each command class, in the order the instruction names its registers."""


def ref_fields(cmd: Command) -> tuple[str, ...]:
    """The names of cmd's address fields."""
    return REF_FIELDS[type(cmd).__name__]


@dataclass(eq=False)
class Loop:
    """`extent` iterations of `body` (extent >= 2), counted by the CU's `loop` instruction.

    The body is iteration 0's statements; its addresses that move from one iteration to the
    next are LoopRefs of `var`.  Every iteration issues the same commands with the same
    parameters, waits and signals: only addresses differ.  passes.loops builds loops from a
    flat body (reroll) and expands them again (flatten).
    """

    var: str
    extent: int
    body: list

    def iteration(self, v: int) -> list:
        """The statements of iteration v, with plain addresses (new command objects)."""
        out = []
        for stmt in self.body:
            if isinstance(stmt, Command):
                moved = {f: getattr(stmt, f).at(v) for f in ref_fields(stmt)
                         if isinstance(getattr(stmt, f), LoopRef)}
                stmt = copy_command(stmt, moved)
            elif isinstance(stmt, CuWait):
                stmt = CuWait(stmt.sem, stmt.comment)
            out.append(stmt)
        return out

    def flat(self) -> list:
        """Every iteration, one after the other."""
        return [s for v in range(self.extent) for s in self.iteration(v)]


def copy_command(cmd: Command, fields: dict | None = None) -> Command:
    """A copy of cmd (its own parameter dicts) with some fields replaced."""
    new = copy.copy(cmd)
    for name in ("params", "scalars"):
        if hasattr(new, name):
            setattr(new, name, dict(getattr(new, name)))
    for name, value in (fields or {}).items():
        setattr(new, name, value)
    return new


def flat_body(body: list) -> list:
    """The body with every Loop expanded into its iterations."""
    out = []
    for stmt in body:
        out += stmt.flat() if isinstance(stmt, Loop) else [stmt]
    return out


Stmt = Dma | NuConv | Vu | CuWait | Note | Label | Loop


@dataclass(eq=False)
class KernelIR:
    """Buffers plus a schedule; `inputs` and `output` name the DDR tensors the caller sees."""

    name: str
    buffers: list[Buffer]
    body: list[Stmt]
    inputs: list[Buffer]
    output: Buffer
    notes: list[str] = field(default_factory=list)

    def commands(self) -> list[Command]:
        """The commands the body issues, in issue order (loops expanded)."""
        return [s for s in flat_body(self.body) if isinstance(s, Command)]

    def text(self) -> str:
        """Readable IR: one line per buffer, then the body (ir.body_text)."""
        return "\n".join([buffer_text(b) for b in self.buffers] + [body_text(self.body)])


def _ref_text(r: Ref | None) -> str:
    if r is None:
        return ""
    if isinstance(r, LoopRef):
        return r.describe()
    return f"{r.buf.memory}:{r.buf.name}" + (f"+{r.offset}" if r.offset else "")


def _dims(v: tuple[int, ...], used: int) -> str:
    return "x".join(str(d) for d in v[:used])


def stmt_text(stmt) -> str:
    """One line of readable IR for a statement (docs, debugging): what it moves or computes, and where."""
    if isinstance(stmt, Note):
        return f"# {stmt.text}"
    if isinstance(stmt, Label):
        return f"{stmt.name}:"
    if isinstance(stmt, CuWait):
        return f"cu.wait s{stmt.sem}"
    if isinstance(stmt, Loop):
        return f"loop {stmt.var} < {stmt.extent}: {len(stmt.body)} statements"
    sync = "".join(f" {k} s{v}" for k, v in (("wait", stmt.wait), ("signal", stmt.signal),
                                              ("signal2", stmt.signal2)) if v is not None)
    if isinstance(stmt, Dma):
        used = max([k + 1 for k in range(4) if stmt.size[k] > 1] or [1])
        pad = ""
        if any(stmt.pad_lo) or any(stmt.pad_hi):
            pad = f" pad {_dims(stmt.pad_lo, used)}/{_dims(stmt.pad_hi, used)}={stmt.pad_value}"
        return (f"dma{stmt.chan} {_ref_text(stmt.dst)} <- {_ref_text(stmt.src)} [{_dims(stmt.size, used)}]"
                f"{pad}{sync}")
    if isinstance(stmt, NuConv):
        p = stmt.params
        return (f"nu{stmt.unit}.conv{'.acc' if stmt.acc else ''} {_ref_text(stmt.racc)} <- {_ref_text(stmt.rin)} * "
                f"{_ref_text(stmt.rw)} [{p['out_h']}x{p['out_w']} px, {p['in_cb']} in blocks, "
                f"{p['k_h']}x{p['k_w']}]{sync}")
    b = f", {_ref_text(stmt.b)}" if stmt.b is not None else ""
    used = max([k + 1 for k in range(4) if stmt.n[k] > 1] or [1])
    return f"vu{stmt.unit} {stmt.mnemonic} {_ref_text(stmt.d)} <- {_ref_text(stmt.a)}{b} [{_dims(stmt.n, used)}]{sync}"


def buffer_text(b: Buffer) -> str:
    """One line per buffer: where it lives, its size, and for a DDR constant its shape and stored layout."""
    if b.data is None:
        return f"buffer {b.memory}:{b.name} {b.nbytes} bytes"
    return (f"buffer {b.memory}:{b.name} {b.dtype} {list(b.shape)}"
            + (f" layout {b.layout!r}" if b.layout else "") + f" stored {list(b.data.shape)}")


def body_text(body: list) -> str:
    """The readable IR of a body, one statement per line (loop bodies indented)."""
    out = []
    for stmt in body:
        out.append(stmt_text(stmt))
        if isinstance(stmt, Loop):
            out += ["    " + stmt_text(s) for s in stmt.body]
    return "\n".join(out)
