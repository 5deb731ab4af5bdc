"""The dynamic wing's program builder: a program as objects, emitted as assembly once.

A dynamic program reads its sizes from an argument block at run time, so its
CU code computes addresses and sizes in registers: it is written instruction
by instruction, not through the static IR.  This module is what it is
written with.  Nothing here formats text until `Program.emit`, and nothing
edits text after it:

- registers come from a `Pool` that a section of code owns (a one-op
  program, or one fused chain whose ops share the CU's registers);
- semaphores come from a `Pool` too: the ops of a fused chain run at once
  and take consecutive ones, the layers of a network run one after another
  and each starts again at s0;
- labels and constant files are named through a `Scope`, whose prefix
  keeps the names of several ops apart in one program (`L1_tile`,
  `F0_dyn_w`), and buffers through its binding (an op's `x` is the
  network's `t3`);
- DMA channels are logical (`Chan`) until `Scope.fold_channels` deals the
  ones a section uses onto the configured channels.

`Program.emit` writes the header (comments, `.target` lines), `.data` and
`.text` with one line per item, so what a builder adds is what the
assembler reads, line for line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from isa_spec.model import load_isa

from ..errors import CompileError

INDENT = " " * 8


@dataclass(frozen=True)
class Reg:
    """A CU register."""

    n: int

    def __str__(self) -> str:
        return f"r{self.n}"


ZERO = Reg(0)


@dataclass(frozen=True)
class Sem:
    """A semaphore."""

    n: int

    def __str__(self) -> str:
        return f"s{self.n}"


@dataclass
class Chan:
    """A logical DMA channel; `physical` is set when its section's channels are folded."""

    k: int
    physical: int | None = None

    def __str__(self) -> str:
        return f"ch{self.k if self.physical is None else self.physical}"


@dataclass(frozen=True)
class Sym:
    """A name in the program (a label, buffer or constant), plus a byte offset."""

    name: str
    offset: int = 0

    def __add__(self, k: int) -> Sym:
        return Sym(self.name, self.offset + k)

    def __sub__(self, k: int) -> Sym:
        return Sym(self.name, self.offset - k)

    def __str__(self) -> str:
        if self.offset == 0:
            return self.name
        return f"{self.name} {'+' if self.offset > 0 else '-'} {abs(self.offset)}"


@dataclass(frozen=True)
class Mem:
    """An on-chip or DDR address operand: `space[base]` (e.g. vbuf0[r11], ddr[r13])."""

    space: str
    base: Reg | int

    def __str__(self) -> str:
        return f"{self.space}[{self.base}]"


Operand = Reg | Sem | Chan | Sym | Mem | int | str


@lru_cache(maxsize=1)
def _mnemonics() -> frozenset[str]:
    return frozenset(ins.mnemonic for ins in load_isa().instructions)


@dataclass
class Instr:
    """One instruction: mnemonic, operands in order, then `key=value` operands (wait=, signal=)."""

    mnemonic: str
    operands: tuple
    keywords: tuple = ()
    comment: str = ""

    def text(self) -> str:
        """The instruction's line."""
        ops = [str(o) for o in self.operands] + [f"{k}={v}" for k, v in self.keywords]
        line = f"{INDENT}{self.mnemonic:<7} {', '.join(ops)}".rstrip() if ops else f"{INDENT}{self.mnemonic}"
        return _with_comment(line, self.comment)


@dataclass(frozen=True)
class Line:
    """A line that is not an instruction: a label, a comment, a directive, or blank."""

    text: str


def _with_comment(line: str, comment: str) -> str:
    return f"{line:<50} ; {comment}" if comment else line


class Pool:
    """Registers or semaphores handed out in order, each to one name, from `first` to `last`."""

    def __init__(self, kind: type, first: int, last: int):
        self.kind, self.next, self.last = kind, first, last
        self.top = last
        self.names: dict[str, object] = {}

    def take(self, *names: str) -> tuple:
        """One fresh register or semaphore per name, in order."""
        out = []
        for name in names:
            if self.next > self.top:
                raise CompileError(f"internal: a dynamic program needs more than {self.last + 1} "
                                   f"{self.kind.__name__.lower()}s ({name!r})")
            out.append(self.kind(self.next))
            self.names[name] = out[-1]
            self.next += 1
        return tuple(out)

    def one(self, name: str) -> Reg | Sem:
        """One fresh register or semaphore."""
        return self.take(name)[0]

    def take_top(self, name: str) -> Reg | Sem:
        """A register or semaphore from the top of the pool (kept apart from the ones taken in order)."""
        if self.top < self.next:
            raise CompileError(f"internal: a dynamic program ran out of {self.kind.__name__.lower()}s ({name!r})")
        got = self.kind(self.top)
        self.names[name] = got
        self.top -= 1
        return got


def registers() -> Pool:
    """A section's CU registers: r1 up (r0 reads zero)."""
    return Pool(Reg, 1, 31)


def semaphores(count: int = 32) -> Pool:
    """A section's semaphores: s0 up."""
    return Pool(Sem, 0, count - 1)


@dataclass
class Program:
    """A dynamic program being built: header, .data and .text items, and its .incbin files."""

    header: list = field(default_factory=list)
    data: list = field(default_factory=list)
    text: list = field(default_factory=list)
    files: dict[str, bytes] = field(default_factory=dict)
    declared: set[str] = field(default_factory=set)
    # a repeated declaration still writes its `.align 64` (the programs composed from text kept it: the
    # line numbers of what follows stay)
    repeat_align: bool = False

    def head(self, line: str) -> None:
        """A header line (a comment at column 0, or blank)."""
        self.header.append(Line(line))

    def target(self, key: str, value: object, quote: bool = False) -> None:
        """A `.target KEY, VALUE` line (the value quoted when it is text)."""
        self.header.append(Line(f'{INDENT}.target {key}, "{value}"' if quote else f"{INDENT}.target {key}, {value}"))

    def _directive(self, text: str) -> None:
        """A .data directive line (.align, .space, ...)."""
        self.data.append(Line(f"{INDENT}{text}"))

    def _data_line(self, text: str) -> None:
        """A .data line as it stands (a label, or blank)."""
        self.data.append(Line(text))

    def align(self, n: int = 64) -> None:
        """Align the next data item to n bytes."""
        self._directive(f".align {n}")

    def gap(self) -> None:
        """An empty line in .data."""
        self._data_line("")

    def label(self, label: Sym, comment: str = "") -> None:
        """A data label here."""
        self.data.append(Line(_with_comment(f"{label.name}:", comment)))

    def words(self, values, per_line: int = 1) -> None:
        """int32 words here, `per_line` of them a `.word` line."""
        values = [int(v) for v in values]
        for k in range(0, len(values), per_line):
            self._directive(".word " + ", ".join(map(str, values[k:k + per_line])))

    def space(self, nbytes: int, fill: int | None = None) -> None:
        """nbytes bytes here, zero or `fill`."""
        self._directive(f".space {nbytes}" if fill is None else f".space {nbytes}, {fill}")

    def table(self, label: Sym, words, comment: str = "", per_line: int = 1) -> Sym:
        """A 64-byte aligned table of int32 words at a label."""
        self.align()
        self.label(label, comment)
        self.words(words, per_line)
        return label

    def buffer(self, name: str, dtype: str, shape: tuple, nbytes: int, align: bool = True) -> Sym:
        """Declare a DDR buffer once (a second declaration of the same name adds nothing, or with
        repeat_align its `.align 64` line only)."""
        if name in self.declared and align and self.repeat_align:
            self.align()
        if name not in self.declared:
            self.declared.add(name)
            if align:
                self.align()
            self._directive(f".buffer {name}, {dtype}, ({', '.join(map(str, shape))},)")
            self.space(nbytes)
        return Sym(name)

    def const_buffer(self, name: str, dtype: str, shape: tuple, blob: bytes) -> Sym:
        """A DDR buffer with contents: .align 64, its `.buffer` line, `.incbin` of its file (named like it)."""
        self.declared.add(name)
        self.align()
        self._directive(f".buffer {name}, {dtype}, ({', '.join(map(str, shape))},)")
        self.incbin(name, blob)
        return Sym(name)

    def incbin(self, name: str, blob: bytes) -> None:
        """The bytes of blob here, from the file `name`.bin written beside the assembly."""
        self.files[f"{name}.bin"] = bytes(blob)
        self._directive(f'.incbin "{name}.bin"')

    def emit(self) -> str:
        """The program's assembly: header, .data, .text."""
        for item in self.text:
            if isinstance(item, Instr) and item.mnemonic not in _mnemonics():
                raise CompileError(f"internal: no instruction {item.mnemonic!r} in the ISA")
        lines = [_text(item) for item in self.header + [Line(f"{INDENT}.data")] + self.data
                 + [Line(""), Line(f"{INDENT}.text")] + self.text]
        return "\n".join(lines) + "\n"


def _text(item) -> str:
    return item.text() if isinstance(item, Instr) else item.text


class Scope:
    """Where one op's code goes: its program, its name prefix and buffer binding, its registers and semaphores.

    Several scopes may share one register and semaphore pool (the ops of a fused chain) or have their own
    (the layers of a network, one after another)."""

    def __init__(self, prog: Program, prefix: str = "", bind: dict[str, str] | None = None,
                 regs: Pool | None = None, sems: Pool | None = None):
        self.prog, self.prefix, self.bind = prog, prefix, dict(bind or {})
        self.regs = regs if regs is not None else registers()
        self.sems = sems if sems is not None else semaphores()
        self.first = len(prog.text)        # this scope's instructions start here (for fold_channels)

    def sub(self, prefix: str = "", bind: dict[str, str] | None = None) -> Scope:
        """A scope in the same program sharing these registers and semaphores, its names prefixed."""
        return Scope(self.prog, self.prefix + prefix, {**self.bind, **(bind or {})}, self.regs, self.sems)

    def label(self, name: str) -> Sym:
        """A code or data label of this scope."""
        return Sym(self.prefix + name)

    def buf(self, name: str) -> Sym:
        """A DDR buffer by the op's own name for it (x, a, b, y ...), bound to the program's name."""
        return Sym(self.bind.get(name, name))

    def const(self, name: str, blob: bytes) -> Sym:
        """A constant table in DDR: .align 64, its label, `.incbin` of its file (named like the label)."""
        sym = self.label(name)
        self.prog.align()
        self.prog.label(sym)
        self.prog.incbin(sym.name, blob)
        return sym

    def ch(self, k: int) -> Chan:
        """Logical DMA channel k (a fresh object: fold_channels gives it its real number)."""
        return Chan(k)

    def i(self, mnemonic: str, *operands: Operand, comment: str = "", **keywords: Operand) -> None:
        """An instruction."""
        self.prog.text.append(Instr(mnemonic, operands, tuple(keywords.items()), comment))

    def at(self, label: Sym, comment: str = "") -> None:
        """Place a label here."""
        self.prog.text.append(Line(_with_comment(f"{label.name}:", comment)))

    def comment(self, text: str) -> None:
        """A comment line in the code."""
        self.prog.text.append(Line(f"{INDENT}; {text}"))

    def blank(self) -> None:
        """An empty line in the code."""
        self.prog.text.append(Line(""))

    def setp(self, param: str, v: Reg | int) -> None:
        """A command parameter from a register or an immediate."""
        if isinstance(v, Reg):
            self.i("setp", param, v, 0)
        else:
            self.i("setpi", param, int(v))

    def fold_channels(self, channels: int) -> None:
        """Deal the logical DMA channels this scope's code uses onto `channels` real ones.

        One queue only adds order (no command waits on one behind it).  The used channels keep their
        numbers when they fit, else are dealt out in turn (nu.conv.rq's programs use only ch0 and ch2:
        on two channels, loads on one, stores on the other)."""
        chans = [o for item in self.prog.text[self.first:] if isinstance(item, Instr)
                 for o in item.operands if isinstance(o, Chan)]
        used = sorted({c.k for c in chans})
        if len(used) <= channels:
            place = {k: k if k < channels else used.index(k) for k in used}
            if len(set(place.values())) < len(used):
                place = {k: j for j, k in enumerate(used)}
        else:
            place = {k: j % channels for j, k in enumerate(used)}
        for c in chans:
            c.physical = place[c.k]
