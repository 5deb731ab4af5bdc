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

from nnpsim import timing
from nnpsim.config import Config
from nnpsim.semantics import element_bytes

from .ir import DTYPE_BYTES, Command, Dma, NuConv, Vu

SPACE_ID = {"ddr": 0, "dm": 1, "ibuf": 8, "wbuf": 16, "abuf": 24, "vbuf": 32}


def dma_cycles(cmd: Dma, cfg: Config) -> int:
    """Cycles of a DMA that shares no port."""
    sbw, slat = timing.memory_port(cfg, SPACE_ID[cmd.src.buf.space])
    dbw, dlat = timing.memory_port(cfg, SPACE_ID[cmd.dst.buf.space])
    return int(timing.dma_cycles(cmd.nbytes, sbw, slat, dbw, dlat))


def nu_cycles(cmd: NuConv, cfg: Config) -> int:
    """Cycles of an NU command."""
    p = cmd.params
    return int(timing.nu_conv_cycles(p["out_cb"], p["in_cb"], p["k_h"], p["k_w"], p["out_h"], p["out_w"],
                                     cfg.nu_rows, cfg.nu_latency))


def vu_cycles(cmd: Vu, cfg: Config) -> int:
    """Cycles of a VU command (element width: its widest operand, by its row of nnpsim.semantics)."""
    elem = timing.vu_elem_bytes(*element_bytes(cmd.mnemonic, DTYPE_BYTES[cmd.a_type], DTYPE_BYTES[cmd.d_type]))
    n_out = cmd.n[0] * cmd.n[1] * cmd.n[2] * cmd.n[3]
    return int(timing.vu_cycles(n_out, cmd.win[0] * cmd.win[1], elem, cfg.vu_bytes_per_cycle, cfg.vu_latency))


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
            ld.add(c.queue, dma_cycles(c, cfg))
            ld.latency = max(ld.latency, dma_cycles(c, cfg) - c.nbytes // max(1, _rate(c, cfg)))
            for buf in {c.src.buf.memory: c.src.buf, c.dst.buf.memory: c.dst.buf}.values():
                bw, _ = timing.memory_port(cfg, SPACE_ID[buf.space])
                ld.add(buf.memory, c.nbytes / bw)
    return ld


def _rate(c: Dma, cfg: Config) -> int:
    return min(timing.memory_port(cfg, SPACE_ID[c.src.buf.space])[0],
               timing.memory_port(cfg, SPACE_ID[c.dst.buf.space])[0])


def pipeline_cycles(steps, cfg: Config) -> int:
    """Predicted cycles of a double-buffered pipeline of Steps (passes.double_buffer)."""
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
    A DMA spends its latency, then streams at the smaller share of its two
    ports, a port's bandwidth being split between it and the transfers placed
    before it that are still streaming there (nnpsim.timing.port_share), and
    a DDR transfer ends no sooner than DDR's one port, serving the transfers
    placed so far back to back, could have moved its bytes; the kernel takes
    at least as long as its busiest port needs for its bytes.  A Loop costs
    the instructions the emitter gives it (set-up, body, each iteration's
    address steps and `loop`, a taken `loop` adding the branch penalty) and
    its body's commands are replayed once per iteration.
    """
    from .ir import CuWait, Loop
    from .passes.emit import Emitter

    em = Emitter()
    cu = 0
    queue_free: dict[str, int] = {}
    starts: dict[str, list[int]] = {}
    port_busy: dict[str, float] = {}
    port_streams: dict[str, list[tuple[int, int]]] = {}
    served: dict[str, float] = {}      # when DDR, serving its transfers back to back, is through
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
        finish = _finish(stmt, start, port_busy, port_streams, served, cfg)
        mine.append(start)
        queue_free[q] = finish
        if stmt.signal is not None:
            tokens.setdefault(stmt.signal, []).append(finish)
        end = max(end, finish)
    return int(max(end, cu, max(port_busy.values(), default=0)))


def _finish(c: Command, start: int, port_busy: dict[str, float],
            port_streams: dict[str, list[tuple[int, int]]], served: dict[str, float], cfg: Config) -> int:
    if isinstance(c, NuConv):
        return start + nu_cycles(c, cfg)
    if isinstance(c, Vu):
        return start + vu_cycles(c, cfg)
    spaces = {c.src.buf.memory: c.src.buf.space, c.dst.buf.memory: c.dst.buf.space}
    ports = {m: timing.memory_port(cfg, SPACE_ID[s]) for m, s in spaces.items()}
    first = start + max(lat for _, lat in ports.values())
    rate = None
    for s, (bw, _) in ports.items():
        port_busy[s] = port_busy.get(s, 0) + c.nbytes / bw
        # transfers already placed that still stream through this port when this one begins
        streams = 1 + sum(1 for a, b in port_streams.get(s, ()) if a <= first < b)
        share = timing.port_share(bw, streams)
        rate = share if rate is None else min(rate, share)
    finish = first + -(-c.nbytes // rate)
    if "ddr" in ports:
        # DDR's one port (both directions) never moves more than its bandwidth: transfers that
        # start later and share it slow this one down too, which the share above (taken when it
        # begins) does not see.  So a transfer also ends no sooner than the port, serving the
        # transfers placed before it back to back, could have moved its bytes.
        bw = ports["ddr"][0]
        served["ddr"] = max(served.get("ddr", 0), first) + c.nbytes / bw
        finish = max(finish, int(-(-served["ddr"] // 1)))
    for s in spaces:
        port_streams.setdefault(s, []).append((first, finish))
        port_streams[s] = port_streams[s][-16:]
    return int(finish)



def instructions(body: list) -> int:
    """CU instructions the emitter writes for a body (its program size, without the final halt)."""
    from .passes.emit import Emitter

    em = Emitter()
    return sum(em.statement(stmt) for stmt in body)
