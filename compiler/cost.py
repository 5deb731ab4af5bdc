"""Analytic cycle model of a schedule, on nnpsim.timing's formulas and a Config.

A tiled kernel is a pipeline: each tile's work spreads over resources (the NU,
the VU, the DDR port shared by every DMA that touches DDR, and the ABUF and
VBUF DMA ports), and double buffering lets the resources of different tiles
overlap.  The model charges each tile the busiest resource's time, adds the
first tile's loads (nothing to overlap them with) and the last tile's
epilogue (nothing after it), and a per-command CU issue cost.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from nnpsim import timing
from nnpsim.config import Config
from nnpsim.semantics import SEMANTICS, element_bytes

from .ir import DTYPE_BYTES, Command, Dma, NuConv, Ref, Vu

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


def ddr_burst_bytes(cmd: Dma, cfg: Config) -> tuple[int, int]:
    """(source, destination) DDR burst bytes of a DMA, as the simulator counts them (0 for a side on chip)."""
    burst = cfg.ddr_burst_bytes
    src = dst = 0
    if cmd.src.buf.space == "ddr":
        src = _burst_bytes(_ddr_residue(cmd.src, burst), cmd.inner, cmd.src_stride, cmd.elem, burst)
    if cmd.dst.buf.space == "ddr":
        dst = _burst_bytes(_ddr_residue(cmd.dst, burst), cmd.size, cmd.dst_stride, cmd.elem, burst)
    return src, dst


def stream_bytes(cmd: Dma, cfg: Config) -> int:
    """Bytes a DMA streams through its ports: its bytes, or its DDR bursts if more (timing.dma_stream_bytes)."""
    if cmd.src.buf.space != "ddr" and cmd.dst.buf.space != "ddr":
        return cmd.nbytes
    return _stream_bytes(cmd.nbytes, *ddr_burst_bytes(cmd, cfg))


@lru_cache(maxsize=1 << 16)
def _stream_bytes(nbytes: int, src_bursts: int, dst_bursts: int) -> int:
    return int(timing.dma_stream_bytes(nbytes, src_bursts, dst_bursts))


def dma_cycles(cmd: Dma, cfg: Config, nbytes: int | None = None) -> int:
    """Cycles of a DMA that shares no port (nbytes: its stream_bytes, if the caller has them)."""
    return _dma_cycles(stream_bytes(cmd, cfg) if nbytes is None else nbytes,
                       *timing.memory_port(cfg, SPACE_ID[cmd.src.buf.space]),
                       *timing.memory_port(cfg, SPACE_ID[cmd.dst.buf.space]))


@lru_cache(maxsize=1 << 16)
def _dma_cycles(nbytes: int, sbw: int, slat: int, dbw: int, dlat: int) -> int:
    return int(timing.dma_cycles(nbytes, sbw, slat, dbw, dlat))


def nu_cycles(cmd: NuConv, cfg: Config) -> int:
    """Cycles of an NU command."""
    p = cmd.params
    if cmd.depthwise:
        return int(timing.nu_dwconv_cycles(p["in_cb"], p["k_h"], p["k_w"], p["out_h"], p["out_w"],
                                           cfg.nu_rows, cfg.nu_latency))
    return int(timing.nu_conv_cycles(p["out_cb"], p["in_cb"], p["k_h"], p["k_w"], p["out_h"], p["out_w"],
                                     cfg.nu_rows, cfg.nu_latency))


def vu_cycles(cmd: Vu, cfg: Config) -> int:
    """Cycles of a VU command by its instruction's timing formula (vu_cycles: its widest operand by its
    row of nnpsim.semantics; vu_pool_cycles: the window at a's width, d and b once an output)."""
    n = cmd.n
    if SEMANTICS[cmd.mnemonic].timing == "vu_slide_cycles":
        return vu_slide_cycles(cmd, cfg)
    return _vu_cycles(cmd.mnemonic, cmd.a_type, cmd.d_type, n[0] * n[1] * n[2] * n[3], cmd.win[0] * cmd.win[1],
                      cfg.vu_bytes_per_cycle, cfg.vu_latency)


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
    for c in cmds:
        if isinstance(c, NuConv):
            ld.add(c.queue, nu_cycles(c, cfg))
        elif isinstance(c, Vu):
            ld.add(c.queue, vu_cycles(c, cfg))
        elif isinstance(c, Dma):
            nbytes = stream_bytes(c, cfg)
            cycles = dma_cycles(c, cfg, nbytes)
            ld.add(c.queue, cycles)
            ld.latency = max(ld.latency, cycles - nbytes // max(1, _rate(c, cfg)))
            for port, space in dma_ports(c).items():
                bw, _ = timing.memory_port(cfg, SPACE_ID[space])
                ld.add(port, nbytes / bw)
    return ld


def dma_ports(c: Dma) -> dict[str, str]:
    """The memory ports a DMA streams through, each with its memory space: the source memory's read
    port and the destination's write port (DDR has one port for both: nnpsim.timing.read_port)."""
    def port(buf, side: str) -> str:
        return "ddr" if buf.space == "ddr" else f"{buf.memory}.{side}"
    return {port(c.src.buf, "read"): c.src.buf.space, port(c.dst.buf, "write"): c.dst.buf.space}


def _rate(c: Dma, cfg: Config) -> int:
    return min(timing.memory_port(cfg, SPACE_ID[c.src.buf.space])[0],
               timing.memory_port(cfg, SPACE_ID[c.dst.buf.space])[0])


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
    last = load_of([c for c in steps[-1].epilogue if isinstance(c, Command)], cfg)
    return int(total + first.bound + first.latency + last.bound + last.latency + ncmds)


def schedule_cycles(body: list, cfg: Config) -> int:
    """Predicted cycles of a synchronised schedule, replayed command by command.

    The CU issues in order, one instruction per cycle (the emitter tells how
    many instructions each command takes); a queue runs its commands in order;
    a command starts once its queue is free and its semaphore token exists (the
    k-th wait on a semaphore takes the k-th signal); a full queue stalls the CU.
    A DMA spends its latency, then streams its bytes (or its DDR bursts, if
    more: stream_bytes) at the smaller share of its on-chip ports, a port's
    bandwidth being split between it and the transfers placed before it that
    are still streaming there (nnpsim.timing.port_share); each of those ends
    later by the bytes the new one moves while they overlap (the simulator
    shares a port both ways: a drain into VBUF beside a residual load into it
    slows down too), and so do its token and its queue.  On DDR's one port
    a transfer shares with every DDR transfer placed before it that still has
    bytes left, the port's floor(bw / n) going to each of the n streaming
    until one runs out (_ddr_share); each of those ends later by what the new
    one took from it, and so does its token and its queue, for the commands
    placed after (those placed before have seen its earlier end).  The kernel
    takes at least as long as its busiest on-chip port needs for its bytes,
    and as DDR's port needs to serve every DDR transfer, each from its first
    byte, never idling while one waits.
    A Loop costs the instructions the emitter gives it (set-up, body, each
    iteration's address steps and `loop`, a taken `loop` adding the branch
    penalty) and its body's commands are replayed once per iteration.
    """
    from .ir import CuWait, Loop
    from .passes.emit import Emitter

    em = Emitter()
    cu = 0
    queue_free: dict[str, int] = {}
    starts: dict[str, list[int]] = {}
    port_busy: dict[str, float] = {}
    port_streams: dict[str, list[_Stream]] = {}
    ddr_work: list[tuple[int, float]] = []   # DDR transfers: (first streaming cycle, cycles of DDR's port)
    tokens: dict[int, list[int]] = {}
    taken: dict[int, int] = {}
    end = 0

    def token_time(sem: int) -> int | None:
        k = taken.get(sem, 0)
        times = tokens.get(sem, [])
        return times[k] if k < len(times) else None

    def replay():
        """(statement, CU instructions before it issues) in issue order, loops expanded."""
        for stmt in body:
            if not isinstance(stmt, Loop):
                yield stmt, em.statement(stmt)
                continue
            lc = em.loop(stmt)
            yield None, lc.setup
            for v in range(stmt.extent):
                for k, inner in enumerate(stmt.body):
                    yield inner, lc.per_stmt[k]
                yield None, lc.tail + (cfg.branch_penalty if v < stmt.extent - 1 else 0)

    for stmt, instrs in replay():
        if isinstance(stmt, CuWait):
            t = token_time(stmt.sem)
            taken[stmt.sem] = taken.get(stmt.sem, 0) + 1
            cu = max(cu, t if t is not None else cu) + instrs
            continue
        if not isinstance(stmt, Command):
            cu += instrs
            continue
        cu += instrs
        q = stmt.queue
        mine = starts.setdefault(q, [])
        if len(mine) >= cfg.queue_depth:
            cu = max(cu, mine[-cfg.queue_depth])
        start = max(cu + 1, queue_free.get(q, 0))
        if stmt.wait is not None:
            t = token_time(stmt.wait)
            taken[stmt.wait] = taken.get(stmt.wait, 0) + 1
            start = max(start, t if t is not None else start)
        finish, stream, late = _finish(stmt, start, port_busy, port_streams, ddr_work, cfg)
        mine.append(start)
        queue_free[q] = finish
        if stmt.signal is not None:
            tokens.setdefault(stmt.signal, []).append(finish)
        end = max(end, finish)
        if stream is not None:
            stream.queue, stream.seq = q, len(mine)
            if stmt.signal is not None:
                stream.sem, stream.token = stmt.signal, len(tokens[stmt.signal]) - 1
        for other in late:
            fin = int(-(-other.end // 1))
            end = max(end, fin)
            if len(starts[other.queue]) == other.seq:          # still the last command of its queue
                queue_free[other.queue] = max(queue_free[other.queue], fin)
            if other.sem is not None and other.token >= taken.get(other.sem, 0):   # token not taken yet
                tokens[other.sem][other.token] = max(tokens[other.sem][other.token], fin)
    ddr = 0.0
    for first, work in sorted(ddr_work):
        ddr = max(ddr, first) + work
    port_busy.pop("ddr", None)
    return int(max(end, cu, max(port_busy.values(), default=0), -(-ddr // 1)))


@dataclass
class _Stream:
    """A DMA as the replay placed it: first streaming cycle, end, bytes streamed, its queue and position
    there, and its token (semaphore, index among its signals)."""

    first: int
    end: float
    nbytes: int
    queue: str = ""
    seq: int = 0
    sem: int | None = None
    token: int = -1


def _finish(c: Command, start: int, port_busy: dict[str, float], port_streams: dict[str, list[_Stream]],
            ddr_work: list[tuple[int, float]], cfg: Config) -> tuple[int, _Stream | None, list[_Stream]]:
    """(end, its _Stream if a DMA, the transfers placed before that it makes end later)."""
    if isinstance(c, NuConv):
        return start + nu_cycles(c, cfg), None, []
    if isinstance(c, Vu):
        return start + vu_cycles(c, cfg), None, []
    spaces = dma_ports(c)
    ports = {m: timing.memory_port(cfg, SPACE_ID[s]) for m, s in spaces.items()}
    first = start + max(lat for _, lat in ports.values())
    nbytes = stream_bytes(c, cfg)
    rate = None
    sharing: dict[int, tuple[_Stream, int]] = {}
    for s, (bw, _) in ports.items():
        port_busy[s] = port_busy.get(s, 0) + nbytes / bw
        share = bw
        if s != "ddr":
            # transfers already placed that still stream through this port when this one begins
            here = [o for o in port_streams.get(s, ()) if o.first <= first < o.end]
            share = timing.port_share(bw, 1 + len(here))
            sharing.update((id(o), (o, bw)) for o in here)
        rate = share if rate is None else min(rate, share)
    finish = first + -(-nbytes // rate)
    late = []
    if "ddr" in ports:
        end, work, late = _ddr_share(first, nbytes, ports["ddr"][0], port_streams.get("ddr", []))
        finish = max(finish, end)
        ddr_work.append((first, work))
    # the port is shared both ways: a transfer it now shares with streams slower while they overlap, by
    # the bytes this one moves meanwhile (a drain into VBUF beside a residual load into it, say)
    for o, bw in sharing.values():
        if all(o is not d for d in late):
            left = o.nbytes * (o.end - first) / max(1, o.end - o.first)
            o.end += min(left, nbytes) / bw
            late.append(o)
    # and one placed before it that begins streaming while it does takes its half meanwhile
    for s, (bw, _) in ports.items():
        if s == "ddr":
            continue
        for o in port_streams.get(s, ()):
            if first < o.first < finish and all(o is not d for d in late):
                both = min(o.end, finish) - o.first
                finish += both * (1 - min(rate, bw // 2) / rate)
                o_rate = o.nbytes / max(1, o.end - o.first)
                o.end += both * max(0.0, 1 - min(o_rate, bw // 2) / o_rate)
                late.append(o)
    finish = int(-(-finish // 1))
    me = _Stream(first, finish, nbytes)
    for s in spaces:
        port_streams.setdefault(s, []).append(me)
        port_streams[s] = port_streams[s][-16:]
    return int(finish), me, late


def _ddr_share(first: int, nbytes: int, bw: int, placed: list[_Stream]) -> tuple[int, float, list[_Stream]]:
    """(end, cycles of DDR's port, transfers it delays) of a DDR transfer streaming nbytes from `first`.

    The transfers placed before it that end after `first` have, by then, bytes left in
    proportion to the time they have left (all of them if they begin later).  The port
    gives each of the n transfers streaming floor(bw / n) bytes per cycle
    (timing.port_share), so they all move alike until the one with the fewest bytes
    left runs out.  Each of them ends later by the bytes this one moved meanwhile
    over the port's bandwidth (its end is moved on here; the caller moves its token).
    """
    rest, late = [], []
    for o in placed:
        if o.end > first:
            left = o.nbytes if o.first >= first else o.nbytes * (o.end - first) / (o.end - o.first)
            rest.append(left)
            o.end += min(left, nbytes) / bw
            late.append(o)
    rest.sort()
    t, done, n, work = float(first), 0.0, 1 + len(rest), 0.0
    for left in rest + [float(nbytes)]:
        step = min(left, nbytes) - done
        if step > 0:
            share = timing.port_share(bw, n)
            t += step / share
            work += step / (share * n)
            done += step
        n -= 1
        if done >= nbytes:
            break
    return int(-(-t // 1)), work, late

def instructions(body: list) -> int:
    """CU instructions the emitter writes for a body (its program size, without the final halt)."""
    from .passes.emit import Emitter

    em = Emitter()
    return sum(em.statement(stmt) for stmt in body)
