"""The Simulator: load a Program, write inputs, run, read outputs, get stats and the RunLog."""
from __future__ import annotations

import numpy as np

from isa_spec import DecodeError, decode, load_isa
from isa_spec.layout import from_stored, stored_shape, to_stored

from . import argblock, errors, races
from .config import Config, target_mismatches
from .cu import PARAM_REGS, decode_for_engine, new_param_file
from .engine import (N_STATE, ST_CU_STATE, ST_CYCLE, ST_ERR_AGENT, ST_ERR_CMD, ST_ERR_PC,
                     ST_INSTR, ST_NCMD, ST_NCTR, ST_NSTALL, ST_NSYNC, ST_PC, ST_STALL_ARG,
                     ST_STALL_REASON, CU_HALTED, CU_STALLED, engine, new_tables)
from .errors import SimError
from .runlog import STALL_BARRIER, STALL_QUEUE_FULL, STALL_SEMAPHORE, RunLog
from .state import SPACE_DDR, Memory, agent_names, config_vector, space_name
from .stats import Stats, summarize
from .trace import write_trace

DEFAULT_MAX_CYCLES = 10 ** 9
DTYPES = {"int8": np.dtype("<i1"), "int32": np.dtype("<i4")}


def check_machine(program, config: Config) -> None:
    """SimError unless the program was built (.target) for this machine and its data fits its DDR
    (what load() checks before decoding; the compiler checks it before writing a program)."""
    wrong = target_mismatches(config, program.config)
    if wrong:
        raise SimError("it was built (.target) for another machine: "
                       + "; ".join(wrong) + "; run it on the machine it was built for, or rebuild it "
                       "for this one", errors.TARGET_MISMATCH)
    extent = max(int(program.data_size), len(program.data))
    if program.data_base < 0 or program.data_base + extent > config.ddr_bytes:
        raise SimError(f"its data [{program.data_base:#x}, "
                       f"{program.data_base + extent:#x}) does not fit DDR of "
                       f"{config.ddr_bytes:#x} bytes", errors.OUT_OF_BOUNDS)


class Simulator:
    """One NNP-1 machine: its memories, a loaded program and the log of its last run."""

    def __init__(self, config: Config | None = None):
        self.config = (config or Config()).validate()
        self.isa = load_isa()
        self.memory = Memory.for_config(self.config)
        self.program = None
        self.last_log: RunLog | None = None
        self._table: np.ndarray | None = None
        self._dynamic = None
        self._dims: dict[str, int] = {}
        self._shapes: dict[str, tuple] = {}     # the shapes the dynamic buffers were written with
        self._conflict: str | None = None       # why those shapes disagree, if they do

    def load(self, program) -> None:
        """Check its `.target` against this machine, decode it, clear every memory, place its data in DDR."""
        try:
            check_machine(program, self.config)
        except SimError as exc:
            raise SimError(f"cannot load program: {exc}", exc.code) from None
        try:
            table = decode_for_engine(program.code, self.isa)
        except DecodeError as exc:
            raise SimError(f"cannot load program: {exc}", errors.ILLEGAL_INSTRUCTION) from None
        data = bytes(program.data)
        self.memory = Memory.for_config(self.config)
        self.memory.view(SPACE_DDR, program.data_base, len(data))[:] = np.frombuffer(data, np.uint8)
        self.program = program
        self._table = table
        self.last_log = None
        self._dynamic = argblock.signature(program)     # None unless built for a range of shapes
        self._dims: dict[str, int] = {}
        self._shapes: dict[str, tuple] = {}     # the shapes the dynamic buffers were written with
        self._conflict: str | None = None       # why those shapes disagree, if they do

    def write(self, name: str, array) -> None:
        """Store a tensor, given in the buffer's logical shape and dtype, into its DDR buffer."""
        buf = self._buffer(name)
        a = np.asarray(array)
        want = DTYPES[buf.dtype]
        if self._dynamic is not None and name in self._dynamic.buffers:
            self._write_dynamic(name, buf, a)
            return
        if a.shape != tuple(buf.shape) or a.dtype.newbyteorder("<") != want:
            raise ValueError(f"buffer {name} holds {buf.dtype} of shape {tuple(buf.shape)}; "
                             f"got {a.dtype} of shape {a.shape}")
        stored = to_stored(buf.layout, a).astype(want, copy=False)
        raw = stored.view(np.uint8).reshape(-1)
        self._ddr(buf, raw.size, "write")[:] = raw

    def _write_dynamic(self, name: str, buf, a: np.ndarray) -> None:
        """A tensor of an in-range shape packed at the start of its buffer, and the argument block."""
        if a.dtype.newbyteorder("<") != DTYPES[buf.dtype]:
            raise ValueError(f"buffer {name} holds {buf.dtype}; got {a.dtype}")
        argblock.infer(self._dynamic, name, a.shape, {})        # in range on its own, or ValueError
        self._shapes[name] = tuple(a.shape)
        raw = np.ascontiguousarray(a.astype(DTYPES[buf.dtype], copy=False)).view(np.uint8).reshape(-1)
        self._ddr(buf, raw.size, "write")[:] = raw
        # Inputs that share a dim may be rewritten one at a time (a new shape for every input): until they
        # agree again the block is left alone and run() refuses, naming the dimension.
        try:
            dims: dict[str, int] = {}
            for other, shape in self._shapes.items():
                dims = argblock.infer(self._dynamic, other, shape, dims)
        except ValueError as exc:
            self._conflict = str(exc)
            return
        self._dims, self._conflict = dims, None
        words = argblock.block(self._dynamic, self._dims).view(np.uint8)
        self._ddr(self._buffer(self._dynamic.args), words.size, "write")[:] = words

    @property
    def inputs_disagree(self) -> str | None:
        """Why the dynamic inputs written so far disagree on a dim (run() refuses then), or None."""
        return self._conflict

    def dims(self) -> dict[str, int]:
        """The dim values the argument block holds (SimError naming one out of range)."""
        args = self._buffer(self._dynamic.args)
        words = self._ddr(args, 4 * len(self._dynamic.dims), "read").copy().view("<i4")
        return argblock.check(self._dynamic, words)

    def read(self, name: str) -> np.ndarray:
        """A buffer's contents in its logical shape and dtype."""
        buf = self._buffer(name)
        want = DTYPES[buf.dtype]
        if self._dynamic is not None and name in self._dynamic.buffers:
            shape = self._dynamic.shape(name, self.dims())
            n = int(np.prod(shape, dtype=np.int64))
            return self._ddr(buf, n * want.itemsize, "read").copy().view(want).reshape(shape)
        shape = stored_shape(buf.layout, tuple(buf.shape))
        nbytes = int(np.prod(shape, dtype=np.int64)) * want.itemsize
        raw = self._ddr(buf, nbytes, "read").copy()
        return from_stored(buf.layout, raw.view(want).reshape(shape), tuple(buf.shape))

    def run(self, max_cycles: int | None = None, trace=None, check_races: bool = False) -> Stats:
        """Run the loaded program to halt; return its Stats (SimError, with .log and .stats, on failure)."""
        if self._table is None:
            raise SimError("no program loaded: call load(program) first")
        if self._dynamic is not None:
            if self.inputs_disagree:
                raise SimError(f"the inputs' shapes disagree: {self.inputs_disagree}", errors.BAD_PARAM)
            self.dims()          # a bad argument block stops here, naming the dimension
        limit = DEFAULT_MAX_CYCLES if max_cycles is None else int(max_cycles)
        if limit < 0:
            raise ValueError(f"max_cycles must be >= 0, got {limit}")
        log, failure = run_program(self._table, self.memory, self.config, limit, self.program)
        self.last_log = log
        if check_races and (failure is None or failure.code not in (errors.DEADLOCK, errors.CYCLE_LIMIT)):
            # A fault (a parameter table overwritten early, say) is often a race's symptom: name the race.
            failure = _check_races(log, self.program, self.config, failure) or failure
        log.error = failure
        if trace is not None:
            write_trace(trace, log, self.program, self.config)
        stats = summarize(log, self.program, self.config)
        if failure is not None:
            failure.stats = stats
            failure.log = log
            raise failure
        return stats

    def _ddr(self, buf, nbytes: int, what: str) -> np.ndarray:
        """The DDR bytes of the first `nbytes` of a buffer; SimError if they are more than the buffer holds, so
        that no write or read leaves the buffer it names, whatever the program's notes say."""
        if not 0 <= nbytes <= buf.nbytes:
            raise SimError(f"cannot {what} buffer {buf.name}: {nbytes} bytes do not fit its {buf.nbytes}",
                           errors.OUT_OF_BOUNDS)
        return self.memory.view(SPACE_DDR, buf.addr, nbytes)

    def _buffer(self, name: str):
        if self.program is None:
            raise SimError("no program loaded: call load(program) first")
        buf = self.program.buffers.get(name)
        if buf is None:
            known = ", ".join(sorted(self.program.buffers)) or "none"
            raise ValueError(f"no buffer named {name!r} (known buffers: {known})")
        if buf.dtype not in DTYPES:
            raise ValueError(f"buffer {name}: unknown dtype {buf.dtype!r}")
        return buf


def _check_races(log: RunLog, program, config: Config, fault: SimError | None = None) -> SimError | None:
    """The run's first data race, or None; after a fault, the race names it (and races.check looks past it)."""
    try:
        races.check(log, program, config, getattr(fault, "bad_value_cmd", -1))
    except SimError as exc:
        if fault is not None:
            exc.args = (f"{exc}; the run stopped with {fault}",)
        return exc
    return None


def run_program(table: np.ndarray, memory: Memory, config: Config, max_cycles: int,
                program=None) -> tuple[RunLog, SimError | None]:
    """Run a decoded program on `memory` with the event engine; the RunLog and the error (or None)."""
    isa = load_isa()
    regs = np.zeros(32, dtype=np.int64)
    params = new_param_file(isa)
    st = np.zeros(N_STATE, dtype=np.int64)
    err = np.zeros(8, dtype=np.int64)
    cfg = config_vector(config, max_cycles, isa)
    cmd, sync, ctr, stall = new_tables()
    cmd, sync, ctr, stall, sems, heads = engine()(
        table, memory.mem, memory.table, cfg, regs, params, st, err, cmd, sync, ctr, stall)
    log = RunLog.from_tables(st[ST_CYCLE], st[ST_INSTR], agent_names(config), cmd[:st[ST_NCMD]],
                             sync[:st[ST_NSYNC]], ctr[:st[ST_NCTR]], stall[:st[ST_NSTALL]])
    log.registers = regs
    log.params = params[:PARAM_REGS]
    log.pc = int(st[ST_PC])
    failure = None
    if err[0] != errors.OK:
        failure = SimError(error_message(int(err[0]), err, st, log, program, sems, heads),
                           int(err[0]), int(st[ST_CYCLE]))
        failure.bad_value_cmd = int(st[ST_ERR_CMD]) if _read_bad_value(err) else -1
        log.error = failure
    return log, failure


def _read_bad_value(err: np.ndarray) -> bool:
    """The command failed on a value it read from memory (its footprint had passed the checks)."""
    code = int(err[0])
    return code in (errors.DIV_BY_ZERO, errors.ARITH_OVERFLOW) or (code == errors.BAD_PARAM and int(err[1]) >= 0)


def instruction_text(pc: int, program, isa=None) -> str:
    """'mnemonic at 0xADDR (file:line)' for the instruction at byte address pc."""
    isa = isa or load_isa()
    i = pc // 8
    if program is None or pc < 0 or i >= len(program.code):
        return f"pc {pc:#x}"
    try:
        mnemonic = decode(int(program.code[i]), isa)[0].mnemonic
    except DecodeError:
        mnemonic = "?"
    where = ""
    if program.lines is not None and i < len(program.lines) and program.lines[i] is not None:
        file, line = program.lines[i]
        where = f" ({file}:{line})"
    return f"{mnemonic} at {pc:#x}{where}"


def _param_name(number: int, isa) -> str:
    for name, value in isa.params.items():
        if value == number:
            return name
    return f"parameter {number}"


def error_message(code: int, err: np.ndarray, st: np.ndarray, log: RunLog, program,
                  sems: np.ndarray, heads: np.ndarray) -> str:
    """What went wrong, where and when, in words."""
    isa = load_isa()
    cycle = int(st[ST_CYCLE])
    name = errors.NAMES.get(code, f"error {code}")
    if code == errors.DEADLOCK:
        return f"deadlock at cycle {cycle}: " + _waiters(st, log, program, sems, heads, isa)
    if code == errors.CYCLE_LIMIT:
        return (f"cycle limit exceeded: the program had not finished at cycle {cycle} "
                f"(cu at {instruction_text(int(st[ST_PC]), program, isa)}, "
                f"{int((log.cmd_end < 0).sum())} commands not finished)")
    agent = log.agents[int(st[ST_ERR_AGENT])]
    where = instruction_text(int(st[ST_ERR_PC]), program, isa)
    parts = [f"{name} on {agent} at cycle {cycle}", f"instruction {where}"]
    if int(st[ST_ERR_CMD]) >= 0:
        parts.append(f"command #{int(st[ST_ERR_CMD])}")
    if code == errors.PC_OUT_OF_RANGE:
        size = f"{8 * len(program.code):#x} bytes" if program is not None else "unknown size"
        parts = [f"{name} on cu at cycle {cycle}",
                 f"pc {int(err[5]):#x} is outside the program ({size}; did it run past its end without halt?)"]
    elif code == errors.BAD_SEMAPHORE:
        parts.append(f"semaphore s{int(err[4])} does not exist (the configuration has "
                     f"{len(sems)}: s0..s{len(sems) - 1})")
    elif code == errors.ILLEGAL_INSTRUCTION and int(st[ST_ERR_AGENT]) == 0:
        parts.append(_missing_unit(int(st[ST_ERR_PC]), int(err[4]), program, log.agents))
    else:
        if int(err[1]) >= 0 and int(err[2]) >= 0:
            parts.append(f"memory {space_name(int(err[1]))} bytes [{int(err[2]):#x}, {int(err[3]):#x}]")
        elif code == errors.NO_SUCH_MEMORY:
            parts.append(f"memory space {int(err[5])} ({space_name(int(err[5]))}) is not in this configuration")
        if code in (errors.BAD_PARAM, errors.MISALIGNED) and int(err[4]) >= 0:
            parts.append(f"{_param_name(int(err[4]), isa)} = {int(err[5])}")
        if code == errors.ARITH_OVERFLOW:
            parts.append(f"element {int(err[5])}")
    return ": ".join(parts[:1]) + ("; " + "; ".join(parts[1:]) if len(parts) > 1 else "")


def _missing_unit(pc: int, unit: int, program, agents: list[str]) -> str:
    kind = "unit"
    if program is not None and 0 <= pc // 8 < len(program.code):
        kind = {"NU": "nu", "VU": "vu", "DMA": "dma"}[decode(int(program.code[pc // 8]))[0].unit]
    have = sum(1 for a in agents if a.rstrip("0123456789") == kind)
    return f"{kind}{unit} does not exist in this configuration (it has {have})"


def _waiters(st: np.ndarray, log: RunLog, program, sems: np.ndarray, heads: np.ndarray, isa) -> str:
    who = []
    at = instruction_text(int(st[ST_PC]), program, isa)
    if int(st[ST_CU_STATE]) == CU_HALTED:
        who.append("cu has halted")
    elif int(st[ST_CU_STATE]) == CU_STALLED:
        reason, arg = int(st[ST_STALL_REASON]), int(st[ST_STALL_ARG])
        if reason == STALL_SEMAPHORE:
            who.append(f"cu waits on s{arg} (0 tokens) at {at}")
        elif reason == STALL_BARRIER:
            who.append(f"cu waits at barrier {arg:#06x} at {at}")
        elif reason == STALL_QUEUE_FULL:
            who.append(f"cu waits for room in the full queue of {log.agents[arg]} at {at}")
    for a, c in enumerate(heads):
        if c >= 0:
            s = int(log.cmd_wait[c])
            who.append(f"{log.agents[a]} command #{c} ({instruction_text(int(log.cmd_pc[c]), program, isa)}) "
                       f"waits on s{s} ({int(sems[s])} tokens)")
    return "; ".join(who) + "; nothing is in flight that could signal"
