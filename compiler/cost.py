"""Cycle models of a schedule, on nnpsim.timing's formulas and a Config.

Two of them.  pipeline_cycles, the quick one that ranks tilings: a tiled
kernel is a pipeline whose tiles' work spreads over resources (the NU, the
VU, the DDR port shared by every DMA that touches DDR, and the on-chip DMA
ports), double buffering overlapping the resources of different tiles; it
charges each tile the busiest resource's time, adds the first tile's loads
and the last tile's epilogue (nothing overlaps them), and a per-command CU
issue cost.  schedule_cycles, the exact one (a kernel's predicted cycles):
the synchronised body replayed as the simulator's engine runs it, without
the data.  conv_cycles, vector_cycles and transfer_cycles price one NU, VU
or DMA command from its plain sizes, for a caller without a Command.

It sits above compiler.passes (passes.emit's Emitter counts the CU's
instructions) and below the lowering and the schedule, which price with it.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from functools import lru_cache

from nnpsim import timing
from nnpsim.config import Config
from nnpsim.semantics import SEMANTICS, element_bytes

from .ir import DTYPE_BYTES, Command, CuWait, Dma, Loop, LoopRef, NuConv, Ref, Vu, flat_body
from .passes.emit import Emitter

SPACE_ID = {"ddr": 0, "dm": 1, "ibuf": 8, "wbuf": 16, "abuf": 24, "vbuf": 32}


@lru_cache(maxsize=1 << 16)
def _burst_bytes(residue: int, sizes: tuple[int, ...], strides: tuple[int, ...], elem: int, burst: int) -> int:
    return int(timing.burst_bytes(residue, *sizes, *strides, elem, burst))


def _ddr_residue(ref: Ref, burst: int) -> int:
    """A DDR address modulo the burst.  Before emit a DDR buffer has no address; the binary puts
    every buffer (and the arena every tensor) on a 64-byte boundary, so the offset decides it for
    bursts up to 64 bytes and larger bursts are assumed to be as aligned."""
    base = ref.buf.addr or 0
    return (base + ref.offset) & (burst - 1)


def ddr_burst_bytes(cmd: Dma, cfg: Config, v: int = 0) -> tuple[int, int]:
    """(source, destination) DDR burst bytes of a DMA, as the simulator counts them (0 for a side on chip);
    v: the loop iteration, for a command in a Loop body (its addresses move, and so may their residues)."""
    burst = cfg.ddr_burst_bytes
    src = dst = 0
    if cmd.src.buf.space == "ddr":
        src = _burst_bytes(_ddr_residue(_at(cmd.src, v), burst), cmd.inner, cmd.src_stride, cmd.elem, burst)
    if cmd.dst.buf.space == "ddr":
        dst = _burst_bytes(_ddr_residue(_at(cmd.dst, v), burst), cmd.size, cmd.dst_stride, cmd.elem, burst)
    return src, dst


def _at(ref: Ref, v: int) -> Ref:
    return ref.at(v) if v and isinstance(ref, LoopRef) else ref


def ddr_residues(cmd: Dma, cfg: Config, v: int) -> tuple[int, int] | None:
    """The DDR residues (mod the burst) of a Loop body's DMA at iteration v; None if no side moves."""
    if not v or not (isinstance(cmd.src, LoopRef) or isinstance(cmd.dst, LoopRef)):
        return None
    burst = cfg.ddr_burst_bytes
    return tuple(_ddr_residue(_at(r, v), burst) if r.buf.space == "ddr" else -1 for r in (cmd.src, cmd.dst))


def stream_bytes(cmd: Dma, cfg: Config, v: int = 0) -> int:
    """Bytes a DMA streams through its ports: its bytes, or its DDR bursts if more (timing.dma_stream_bytes)."""
    if cmd.src.buf.space != "ddr" and cmd.dst.buf.space != "ddr":
        return cmd.nbytes
    return _stream_bytes(cmd.nbytes, *ddr_burst_bytes(cmd, cfg, v))


@lru_cache(maxsize=1 << 16)
def _stream_bytes(nbytes: int, src_bursts: int, dst_bursts: int) -> int:
    return int(timing.dma_stream_bytes(nbytes, src_bursts, dst_bursts))


def dma_cycles(cmd: Dma, cfg: Config, nbytes: int | None = None) -> int:
    """Cycles of a DMA that shares no port (nbytes: its stream_bytes, if the caller has them)."""
    return transfer_cycles(stream_bytes(cmd, cfg) if nbytes is None else nbytes, cmd.src.buf.space,
                           cmd.dst.buf.space, cfg)


def transfer_cycles(nbytes: int, src_space: str, dst_space: str, cfg: Config) -> int:
    """Cycles of a transfer of nbytes streamed bytes from one memory space to another, sharing no port."""
    return _dma_cycles(nbytes, *timing.memory_port(cfg, SPACE_ID[src_space]),
                       *timing.memory_port(cfg, SPACE_ID[dst_space]))


@lru_cache(maxsize=1 << 16)
def _dma_cycles(nbytes: int, sbw: int, slat: int, dbw: int, dlat: int) -> int:
    return int(timing.dma_cycles(nbytes, sbw, slat, dbw, dlat))


def nu_cycles(cmd: NuConv, cfg: Config) -> int:
    """Cycles of an NU command."""
    p = cmd.params
    if cmd.fmode and cmd.depthwise:
        return int(timing.nu_fdwconv_cycles(p["in_cb"], p["k_h"], p["k_w"], p["out_h"], p["out_w"], cfg.nu_rows,
                                            cfg.nu_latency))
    if cmd.fmode:
        return int(timing.nu_fconv_cycles(p["out_cb"], p["in_cb"], p["k_h"], p["k_w"], p["out_h"], p["out_w"],
                                          cfg.nu_rows, cfg.nu_latency))
    return _nu_cycles(cmd.depthwise, 1 if cmd.depthwise else p["out_cb"], p["in_cb"], p["k_h"], p["k_w"],
                      p["out_h"], p["out_w"], cfg.nu_rows, cfg.nu_latency)


def conv_cycles(depthwise: bool, out_cb: int, in_cb: int, kh: int, kw: int, oh: int, ow: int, cfg: Config) -> int:
    """Cycles of one nu.conv (out_cb output blocks) or nu.dwconv (in_cb blocks; out_cb unused) command."""
    return _nu_cycles(depthwise, 1 if depthwise else out_cb, in_cb, kh, kw, oh, ow, cfg.nu_rows, cfg.nu_latency)


@lru_cache(maxsize=1 << 16)
def _nu_cycles(depthwise: bool, out_cb: int, in_cb: int, kh: int, kw: int, oh: int, ow: int, rows: int,
               latency: int) -> int:
    if depthwise:
        return int(timing.nu_dwconv_cycles(in_cb, kh, kw, oh, ow, rows, latency))
    return int(timing.nu_conv_cycles(out_cb, in_cb, kh, kw, oh, ow, rows, latency))


def vu_cycles(cmd: Vu, cfg: Config) -> int:
    """Cycles of a VU command by its instruction's timing formula (vu_cycles: its widest operand by its
    row of nnpsim.semantics; vu_pool_cycles: the window at a's width, d and b once an output; vu_lut_cycles:
    its table once, then a byte an output; vu_softmax_cycles: its table once, then its rows' stages;
    vu_affine_cycles: a byte an output, its pair once a row or an output; vu_lerp_cycles: two reads an
    output, its table once)."""
    n = cmd.n
    if SEMANTICS[cmd.mnemonic].timing == "vu_slide_cycles":
        return vu_slide_cycles(cmd, cfg)
    if SEMANTICS[cmd.mnemonic].timing == "vu_softmax_cycles":
        return int(timing.vu_softmax_cycles(n[1] * n[2] * n[3], n[0], cfg.vu_bytes_per_cycle, cfg.vu_latency))
    if SEMANTICS[cmd.mnemonic].timing == "vu_affine_cycles":
        return int(timing.vu_affine_cycles(n[0] * n[1] * n[2] * n[3], n[0], cmd.b_stride[0] == 0,
                                           cfg.vu_bytes_per_cycle, cfg.vu_latency))
    if SEMANTICS[cmd.mnemonic].timing == "vu_lerp_cycles":
        return int(timing.vu_lerp_cycles(n[0] * n[1] * n[2] * n[3], n[0], n[1], cfg.vu_bytes_per_cycle,
                                         cfg.vu_latency))
    return _vu_cycles(cmd.mnemonic, cmd.a_type, cmd.d_type, n[0] * n[1] * n[2] * n[3], cmd.win[0] * cmd.win[1],
                      cfg.vu_bytes_per_cycle, cfg.vu_latency)


def vector_cycles(mnemonic: str, a_type: str, d_type: str, n_out: int, window: int, cfg: Config) -> int:
    """Cycles of a VU command (not vu.slide.*) of n_out outputs over a window of `window` elements."""
    return _vu_cycles(mnemonic, a_type, d_type, n_out, window, cfg.vu_bytes_per_cycle, cfg.vu_latency)


def vu_slide_cycles(cmd: Vu, cfg: Config) -> int:
    """Cycles of a vu.slide.* command (timing.vu_slide_cycles): its steps are its a strides over its window's."""
    n, b = cmd.n, cmd.b_stride
    d_bytes, _, b_bytes = element_bytes(cmd.mnemonic, DTYPE_BYTES[cmd.a_type], DTYPE_BYTES[cmd.d_type])
    return _slide_cycles(n[0], n[1], n[2] * n[3], *slide_steps(cmd), cmd.win[0], cmd.win[1], d_bytes,
                         b_bytes, b[0] == 0 and b[1] == 0, cmd.mnemonic == "vu.slide.favg",
                         cfg.vu_bytes_per_cycle, cfg.vu_latency)


def slide_steps(cmd: Vu) -> tuple[int, int]:
    """(step_w, step_h) of a pooling command on the sliding-window engine's grid: its n0 and n1 a strides
    over its window strides (1 along a count of 1)."""
    (wsh, wsw), (a0, a1) = cmd.win_stride, cmd.a_stride[:2]
    return (a0 // wsw if cmd.n[0] > 1 else 1), (a1 // wsh if cmd.n[1] > 1 else 1)


@lru_cache(maxsize=1 << 16)
def _slide_cycles(*args) -> int:
    return int(timing.vu_slide_cycles(*args))


@lru_cache(maxsize=1 << 16)
def _vu_cycles(mnemonic: str, a_type: str, d_type: str, n_out: int, window: int, bytes_per_cycle: int,
               latency: int) -> int:
    """vu_cycles on plain values (a network prices millions of commands with few distinct ones)."""
    widths = element_bytes(mnemonic, DTYPE_BYTES[a_type], DTYPE_BYTES[d_type])
    if SEMANTICS[mnemonic].timing == "vu_pool_cycles":
        return int(timing.vu_pool_cycles(n_out, window, *widths, bytes_per_cycle, latency))
    if SEMANTICS[mnemonic].timing == "vu_lut_cycles":
        return int(timing.vu_lut_cycles(n_out, bytes_per_cycle, latency))
    return int(timing.vu_cycles(n_out, window, timing.vu_elem_bytes(*widths), bytes_per_cycle, latency))


@dataclass
class Load:
    """Busy cycles per resource for one group of commands."""

    busy: dict[str, float] = field(default_factory=dict)
    latency: int = 0

    def add(self, resource: str, cycles: float) -> None:
        self.busy[resource] = self.busy.get(resource, 0) + cycles

    @property
    def bound(self) -> float:
        return max(self.busy.values(), default=0)


def load_of(cmds: list[Command], cfg: Config) -> Load:
    """Resource time of a list of commands: DMA bytes charged to every port they use."""
    ld = Load()
    busy = ld.busy
    ports = _ports(cfg)
    for c in cmds:
        if isinstance(c, Vu):
            q = c.queue
            busy[q] = busy.get(q, 0) + vu_cycles(c, cfg)
        elif isinstance(c, Dma):
            src, dst = c.src.buf, c.dst.buf
            (sbw, slat), (dbw, dlat) = ports[src.space], ports[dst.space]
            nbytes = stream_bytes(c, cfg)
            cycles = _dma_cycles(nbytes, sbw, slat, dbw, dlat)
            q = c.queue
            busy[q] = busy.get(q, 0) + cycles
            late = cycles - nbytes // max(1, min(sbw, dbw))
            if late > ld.latency:
                ld.latency = late
            # the source memory's read port and the destination's write port (dma_ports: DDR's one port
            # once when both sides are DDR), in that order
            sp = "ddr" if src.space == "ddr" else f"{src.memory}.read"
            dp = "ddr" if dst.space == "ddr" else f"{dst.memory}.write"
            if sp != dp:
                busy[sp] = busy.get(sp, 0) + nbytes / sbw
            busy[dp] = busy.get(dp, 0) + nbytes / dbw
        elif isinstance(c, NuConv):
            q = c.queue
            busy[q] = busy.get(q, 0) + nu_cycles(c, cfg)
    return ld


@lru_cache(maxsize=64)
def _ports(cfg: Config) -> dict[str, tuple[int, int]]:
    """Memory space -> its DMA port's (bytes per cycle, latency) on cfg."""
    return {space: tuple(timing.memory_port(cfg, k)) for space, k in SPACE_ID.items()}


def dma_ports(c: Dma) -> dict[str, str]:
    """The memory ports a DMA streams through, each with its memory space: the source memory's read
    port and the destination's write port (DDR has one port for both: nnpsim.timing.read_port)."""
    def port(buf, side: str) -> str:
        return "ddr" if buf.space == "ddr" else f"{buf.memory}.{side}"
    return {port(c.src.buf, "read"): c.src.buf.space, port(c.dst.buf, "write"): c.dst.buf.space}


def pipeline_cycles(steps, cfg: Config) -> int:
    """Predicted cycles of a double-buffered pipeline of Steps (lowering.double_buffer)."""
    if not steps:
        return 0
    total = 0.0
    ncmds = 0
    for step in steps:
        cmds = [c for c in step.statements() if isinstance(c, Command)]
        ncmds += len(cmds)
        total += load_of(cmds, cfg).bound
    first = load_of([c for c in steps[0].loads if isinstance(c, Command)], cfg)
    last = load_of([c for c in steps[-1].epilogue + steps[-1].late if isinstance(c, Command)], cfg)
    return int(total + first.bound + first.latency + last.bound + last.latency + ncmds)


def schedule_cycles(body: list, cfg: Config) -> int:
    """Predicted cycles of a synchronised schedule: the simulator's engine replayed without the data.

    The CU runs one instruction per cycle (the emitter tells how many each statement
    takes, a taken `loop` adding the branch penalty) and issues a command with the
    last of them, stalling while the command's queue is full or a `sem.wait` finds no
    token; it ends with `halt`.  Each cycle that something can change goes through
    the engine's phases in its order (docs/architecture.md, "One cycle, in order"):
    commands end (signalling their semaphores), idle units in agent order start their
    queue's head once it holds a token it waits for, DMA transfers share their ports,
    then the CU tries its next issue or wait.  An NU or VU command lasts its timing
    formula; a DMA transfer waits its latency, then streams its bytes (or its DDR
    bursts, if more: stream_bytes) at its smallest port share (nnpsim.timing.port_share
    of every transfer streaming through the port; DDR has one port for both ways).
    A Loop's body is replayed once per iteration.
    """
    return _Engine(cfg).run(_cu_stream(body, cfg))


def floor_cycles(body: list, cfg: Config) -> int:
    """A lower bound on schedule_cycles(body, cfg) whatever its waits and signals, priced without the replay.

    The engine runs an agent's commands one at a time: an NU or VU command for its cycles, a DMA for
    its latency and then its streamed bytes at no more than its slowest port's bandwidth.  A port's
    transfers share its bandwidth and never exceed it while at most its bandwidth in bytes transfers
    stream at once (timing.port_share gives each at least one byte a cycle): then its bytes over its
    bandwidth bound the cycles too.  The search skips replaying a finalist whose bound already loses.
    """
    engine = _Engine(cfg)
    busy = [0] * len(engine.agent)
    streamed: dict[str, list[int]] = {}         # port -> [bytes through it, its bytes per cycle]
    for c in flat_body(body):
        if not isinstance(c, Command):
            continue
        w = engine.work(c)
        if not w.ports:
            busy[w.agent] += w.cycles
            continue
        rate = min(bw for _, bw in w.ports)
        busy[w.agent] += w.latency + -(-w.nbytes // rate)
        for p, bw in w.ports:
            streamed.setdefault(p, [0, bw])[0] += w.nbytes
    ports = [n // bw for n, bw in streamed.values() if cfg.dma_channels <= bw]
    return max(busy + ports, default=0)


def _cu_stream(body: list, cfg: Config):
    """(statement or None for CU-only instructions, CU instructions it takes, loop iteration) in issue
    order, loops expanded."""
    em = Emitter()
    for stmt in body:
        if not isinstance(stmt, Loop):
            yield stmt, em.count(stmt), 0
            continue
        lc = em.loop(stmt)
        yield None, lc.setup, 0
        for v in range(stmt.extent):
            for k, inner in enumerate(stmt.body):
                yield inner, lc.per_stmt[k], v
            yield None, lc.tail + (cfg.branch_penalty if v < stmt.extent - 1 else 0), v


@lru_cache(maxsize=256)
def _port_share(bytes_per_cycle: int, streams: int) -> int:
    return int(timing.port_share(bytes_per_cycle, streams))


@dataclass(frozen=True)
class _Work:
    """A command as the engine runs it: its agent, semaphores, and its cycles (an NU or VU command)
    or its latency, streamed bytes and ports as (port, bytes per cycle) (a DMA)."""

    agent: int
    wait: int | None
    signal: int | None
    signal2: int | None
    cycles: int = 0
    latency: int = 0
    nbytes: int = 0
    ports: tuple[tuple[str, int], ...] = ()


class _Units:
    """The units' side of the engine: each agent's queue, what it runs and until when, the semaphores."""

    def __init__(self, n_agents: int, dma0: int, depth: int):
        self.n_agents, self.dma0, self.depth = n_agents, dma0, depth
        self.queues: list[deque] = [deque() for _ in range(n_agents)]
        self.running: list[_Work | None] = [None] * n_agents
        self.end = [0] * n_agents                 # an NU or VU command's end
        self.stream_at = [0] * n_agents           # a DMA transfer's first streamed byte
        self.left = [0] * n_agents                # bytes it has left to stream
        self.rate = [0] * n_agents                # bytes per cycle from the last processed cycle on
        self.sems: dict[int, int] = {}
        self.busy: list[int] = []                 # agents running a command
        self.waiting = 0                          # commands issued and not started
        self.since = 0                            # the last cycle the units' phases ran

    def complete(self, t: int) -> None:
        """1. The transfers' progress since the last processed cycle; commands that end at t end,
        signalling their semaphores (signal and signal2)."""
        busy, rate, left, running, sems = self.busy, self.rate, self.left, self.running, self.sems
        for a in busy:
            if rate[a]:
                left[a] -= rate[a] * (t - self.since)
        self.since = t
        dma0, stream_at, end = self.dma0, self.stream_at, self.end
        done = [a for a in busy if (stream_at[a] <= t and left[a] <= 0 if a >= dma0 else end[a] == t)]
        for a in done:
            busy.remove(a)
            w = running[a]
            running[a] = None
            rate[a] = 0
            if w.signal is not None:
                sems[w.signal] = sems.get(w.signal, 0) + 1
            if w.signal2 is not None:
                sems[w.signal2] = sems.get(w.signal2, 0) + 1

    def start(self, t: int) -> None:
        """2. Idle agents, in agent order, start their queue's head once it holds a token it waits for."""
        queues, running, sems, dma0 = self.queues, self.running, self.sems, self.dma0
        for a in range(self.n_agents):
            if running[a] is not None or not queues[a]:
                continue
            w = queues[a][0]
            if w.wait is not None:
                if not sems.get(w.wait):
                    continue
                sems[w.wait] -= 1
            queues[a].popleft()
            self.waiting -= 1
            running[a] = w
            self.busy.append(a)
            if a >= dma0:
                self.stream_at[a], self.left[a] = t + w.latency, w.nbytes
            else:
                self.end[a] = t + w.cycles

    def next_event(self, t: int) -> float:
        """3. The port shares of the transfers streaming at t, and the next cycle a unit ends or a
        transfer begins streaming (inf: none)."""
        busy, dma0, running, rate = self.busy, self.dma0, self.running, self.rate
        stream_at, left = self.stream_at, self.left
        streams = [a for a in busy if a >= dma0 and stream_at[a] <= t]
        if streams:
            count: dict[str, int] = {}
            for a in streams:
                for p, _ in running[a].ports:
                    count[p] = count.get(p, 0) + 1
            for a in streams:
                rate[a] = min(_port_share(bw, count[p]) for p, bw in running[a].ports)
        t_units = float("inf")
        for a in busy:
            if a < dma0:
                e = self.end[a]
            elif stream_at[a] > t:
                e = stream_at[a]
            else:
                e = t + max(-(-left[a] // rate[a]), 1)
            if e < t_units:
                t_units = e
        return t_units

    def take(self, sem: int) -> bool:
        """The CU's sem.wait: take a token of sem if there is one."""
        if self.sems.get(sem):
            self.sems[sem] -= 1
            return True
        return False

    def issue(self, w: _Work) -> bool | None:
        """The CU's issue of w: None when its queue is full, else whether it can start at once (a
        sem.wait only takes tokens: the one queue that grew is the only new start)."""
        q = self.queues[w.agent]
        if len(q) >= self.depth:
            return None
        q.append(w)
        self.waiting += 1
        return self.running[w.agent] is None and (q[0].wait is None or bool(self.sems.get(q[0].wait)))


class _Engine:
    """nnpsim.engine's event loop over _Work items instead of a program's bytes."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        names = ([f"nu{i}" for i in range(cfg.nu_count)] + [f"vu{i}" for i in range(cfg.vu_count)]
                 + [f"dma{i}" for i in range(cfg.dma_channels)])
        self.agent = {name: k for k, name in enumerate(names)}     # agent order: NUs, VUs, DMA channels
        self.dma0 = cfg.nu_count + cfg.vu_count
        self.works: dict[int, _Work] = {}

    def work(self, c: Command, v: int = 0) -> _Work:
        """c as the engine runs it at loop iteration v (a loop body's commands are priced once, a DMA
        once per DDR residue: a burst's share of a run depends on where the run starts)."""
        key = id(c)
        if isinstance(c, Dma):
            moved = ddr_residues(c, self.cfg, v)
            if moved is not None:
                key = (key, moved)
        w = self.works.get(key)
        if w is None:
            agent = self.agent.get(c.queue)
            if agent is None:
                raise ValueError(f"internal: queue {c.queue} does not exist on this configuration")
            if isinstance(c, Dma):
                spaces = dma_ports(c)
                ports = tuple((p, timing.memory_port(self.cfg, SPACE_ID[s])[0]) for p, s in spaces.items())
                latency = int(timing.dma_latency(timing.memory_port(self.cfg, SPACE_ID[c.src.buf.space])[1],
                                                 timing.memory_port(self.cfg, SPACE_ID[c.dst.buf.space])[1]))
                w = _Work(agent, c.wait, c.signal, c.signal2, latency=latency, nbytes=stream_bytes(c, self.cfg, v),
                          ports=ports)
            else:
                cycles = nu_cycles(c, self.cfg) if isinstance(c, NuConv) else vu_cycles(c, self.cfg)
                w = _Work(agent, c.wait, c.signal, c.signal2, cycles=max(cycles, 1))
            self.works[key] = w
        return w

    def run(self, stream) -> int:
        """Cycles from the first instruction to the cycle the engine stops (halted and drained)."""
        inf = float("inf")
        units = _Units(len(self.agent), self.dma0, self.cfg.queue_depth)
        items = iter(stream)
        pending, pending_v, cu_at = self._next_sync(items, 0)      # pending None: the final halt
        stalled = halted = False
        t = 0
        t_units = inf                        # the next cycle a unit ends or a transfer begins streaming
        startable = False                    # an idle unit's head command can start (its token exists)
        while True:
            # the units' phases, at cycles where they can change anything (else only the CU acts)
            if t >= t_units or startable:
                units.complete(t)
                if halted and not units.busy and not units.waiting:
                    return t
                if units.waiting:
                    units.start(t)
                t_units = units.next_event(t)
                startable = False            # every head that could start has started
            elif halted and not units.busy and not units.waiting:
                return t
            # 4. the CU: its next issue, sem.wait or halt, once the instructions before it have run
            if not halted and (stalled or t >= cu_at):
                stalled = False
                if pending is None:
                    halted, cu_at = True, t + 1
                elif isinstance(pending, CuWait):
                    stalled = not units.take(pending.sem)
                else:
                    queued = units.issue(self.work(pending, pending_v))
                    stalled = queued is None          # retried at every cycle processed from now on
                    startable = startable or bool(queued)
                if not stalled and not halted:
                    pending, pending_v, cu_at = self._next_sync(items, t + 1)
            t_next = t + 1 if startable else t_units
            if not stalled and (not halted or cu_at > t) and cu_at < t_next:
                t_next = cu_at
            if t_next == inf:
                raise ValueError(f"internal: the schedule deadlocks at cycle {t} (the CU at {pending!r})")
            t = int(t_next)

    @staticmethod
    def _next_sync(items, free: int):
        """(the CU's next issue or sem.wait, None for the final halt; its loop iteration; the cycle it is
        tried) with the CU free from `free`: the instructions before it take a cycle each, the last
        being the issue."""
        for stmt, instrs, v in items:
            if isinstance(stmt, (Command, CuWait)):
                return stmt, v, free + instrs - 1
            free += instrs
        return None, 0, free


def instructions(body: list) -> int:
    """CU instructions the emitter writes for a body (its program size, without the final halt)."""
    em = Emitter()
    return sum(em.count(stmt) for stmt in body)
