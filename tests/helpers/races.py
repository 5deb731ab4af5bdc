"""Run logs stated as programs, for the race checker's tests, and a real kernel to break.

`schedule` runs a list of CU operations (Cmd, CuSignal, CuWait, Barrier) through a tiny model of the
engine's cycle phases (completions, starts, CU) and returns the RunLog, so that a test states a
program rather than hand-timed events.  `run_conv` assembles and runs a 3x3 conv kernel whose
synchronisation can be removed piece by piece (`conv_source`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from isa_spec import load_isa
from nnpsim.config import Config
from nnpsim.units.nu import OPS as NU_OPS
from nnpsim.units.vu import VU_OPS
from nnpsim.runlog import BARRIER, CMD_COLS, END, ISSUE, M_PARAMS, M_SIGNAL2, SIGNAL, START, TAKE, RunLog


ISA = load_isa()


PARAMS = ISA.params


SPACES = ISA.kinds["space"].values


GROUP_BASE = {"DMA": 0, "NU": 32, "VU": 64}


VU_OP_CODE = VU_OPS   # what the engine's decoder writes into a VU command's fields[0]


DT = {"i8": 0, "i32": 2}


SMALL = Config(nu_rows=4, nu_cols=4)


@dataclass
class Cmd:
    """One command as the CU issues it."""

    agent: str
    mnemonic: str
    regs: tuple[int, int, int]
    fields: tuple[int, int, int, int] = (0, 0, 0, 0)
    params: dict[str, int] = field(default_factory=dict)
    wait: int | None = None
    signal: int | None = None
    signal2: int | None = None
    dur: int = 10
    macs: int = 0
    nbytes: int = 0


def dma(ch: int, dst: tuple[str, int], src: tuple[str, int], sizes=(1, 1, 1, 1), dst_strides=(0, 0, 0, 0),
        src_strides=(0, 0, 0, 0), elem=1, pad_lo=(0, 0, 0, 0), pad_hi=(0, 0, 0, 0), **kw) -> Cmd:
    """A dma command copying a 4-D box (strides in bytes, sizes in elements)."""
    p = {"dma.elem": elem}
    for k in range(4):
        p.update({f"dma.size{k}": sizes[k], f"dma.dst_stride{k}": dst_strides[k],
                  f"dma.src_stride{k}": src_strides[k], f"dma.pad_lo{k}": pad_lo[k],
                  f"dma.pad_hi{k}": pad_hi[k]})
    nbytes = int(np.prod(sizes)) * elem
    return Cmd(f"dma{ch}", "dma", (dst[1], src[1], 0), (SPACES[dst[0]], SPACES[src[0]], 0, 0), p,
               nbytes=nbytes, **kw)


def row(ch: int, dst: tuple[str, int], src: tuple[str, int], n: int, **kw) -> Cmd:
    """A contiguous 1-D dma of n bytes."""
    return dma(ch, dst, src, sizes=(n, 1, 1, 1), dst_strides=(1, 0, 0, 0), src_strides=(1, 0, 0, 0), **kw)


def conv(unit: int, acc: int, inp: int, w: int, accumulate=False, depthwise=False, rq=False, **kw) -> Cmd:
    """nu.conv (nu.dwconv when depthwise; nu.conv.rq, or nu.conv.acc.rq when accumulating, with rq)
    with nu.* parameters given as keyword arguments without the prefix (in_h=4 ...)."""
    names = [n[3:] for n in PARAMS if n.startswith("nu.")]
    p = {f"nu.{k}": kw.pop(k) for k in list(kw) if k in names}
    base = "nu.dwconv" if depthwise else "nu.conv"
    op = ("dwconv" if depthwise else "conv") + "_acc" * bool(accumulate) + "_rq" * bool(rq)
    mn = base + ".acc" * bool(accumulate) + ".rq" * bool(rq)
    return Cmd(f"nu{unit}", mn, (acc, inp, w), (NU_OPS.index(op), 0, 0, 0), p, **kw)


def vu(unit: int, mnemonic: str, d: int, a: int, b: int = 0, sdt="i8", ddt="i8", **kw) -> Cmd:
    """A VU command; vu.* parameters as keyword arguments without the prefix."""
    names = [n[3:] for n in PARAMS if n.startswith("vu.")]
    p = {f"vu.{k}": kw.pop(k) for k in list(kw) if k in names}
    return Cmd(f"vu{unit}", mnemonic, (d, a, b), (VU_OP_CODE[mnemonic], DT[sdt], DT[ddt], 0), p, **kw)


@dataclass
class CuSignal:
    sem: int


@dataclass
class CuWait:
    sem: int


@dataclass
class Barrier:
    mask: int


def agents_for(cfg: Config) -> list[str]:
    return (["cu"] + [f"nu{k}" for k in range(cfg.nu_count)] + [f"vu{k}" for k in range(cfg.vu_count)]
            + [f"dma{k}" for k in range(cfg.dma_channels)])


def mask_bit(agent: str) -> int:
    kind, k = agent.rstrip("0123456789"), int(agent.lstrip("nuvdma"))
    return 1 << ({"nu": 0, "vu": 4, "dma": 8}[kind] + k)


def schedule(prog: list, cfg: Config = SMALL, depth: int = 4, limit: int = 100_000) -> RunLog:
    """Run prog (Cmd, CuSignal, CuWait, Barrier) through the engine's three cycle phases; the RunLog."""
    agents = agents_for(cfg)
    aid = {a: i for i, a in enumerate(agents)}
    defaults = ISA.param_file()
    cmds, sync = [], []
    queues = {a: [] for a in range(1, len(agents))}
    running = {}                       # agent -> (cmd id, end cycle)
    sems = [0] * 64
    pc, t = 0, 0

    def ev(kind, agent, sem, c):
        sync.append((kind, t, agent, sem, c))

    while t < limit and (pc < len(prog) or running or any(queues.values())):
        for a in sorted(running):                          # 1. completions
            c, end = running[a]
            if end == t:
                del running[a]
                cmds[c]["end"] = t
                ev(END, a, -1, c)
                for s in (cmds[c]["spec"].signal, cmds[c]["spec"].signal2):
                    if s is not None:
                        sems[s] += 1
                        ev(SIGNAL, a, s, c)
        for a in sorted(queues):                           # 2. starts
            if a in running or not queues[a]:
                continue
            c = queues[a][0]
            w = cmds[c]["spec"].wait
            if w is not None:
                if sems[w] == 0:
                    continue
                sems[w] -= 1
                ev(TAKE, a, w, c)
            queues[a].pop(0)
            cmds[c]["start"] = t
            ev(START, a, -1, c)
            running[a] = (c, t + cmds[c]["spec"].dur)
        if pc < len(prog):                                 # 3. CU
            op = prog[pc]
            if isinstance(op, Cmd):
                a = aid[op.agent]
                if len(queues[a]) < depth:
                    cmds.append({"spec": op, "agent": a, "issue": t, "start": -1, "end": -1, "pc": 8 * pc})
                    queues[a].append(len(cmds) - 1)
                    ev(ISSUE, 0, -1, len(cmds) - 1)
                    pc += 1
            elif isinstance(op, CuSignal):
                sems[op.sem] += 1
                ev(SIGNAL, 0, op.sem, -1)
                pc += 1
            elif isinstance(op, CuWait):
                if sems[op.sem]:
                    sems[op.sem] -= 1
                    ev(TAKE, 0, op.sem, -1)
                    pc += 1
            else:
                idle = all(not (mask_bit(agents[a]) & op.mask) or (a not in running and not queues[a])
                           for a in queues)
                if idle:
                    ev(BARRIER, 0, op.mask, -1)
                    pc += 1
        t += 1
    return _runlog(t, pc, agents, cmds, sync, defaults)


def _runlog(cycles, instructions, agents, cmds, sync, defaults) -> RunLog:
    n = len(cmds)
    table = np.zeros((n, CMD_COLS), np.int64)
    params = np.zeros((n, 32), np.int64)
    for i, c in enumerate(cmds):
        spec = c["spec"]
        unit = ISA.by_mnemonic[spec.mnemonic].unit
        base = GROUP_BASE[unit]
        regs = list(defaults)
        for name, v in spec.params.items():
            regs[PARAMS[name]] = v
        params[i] = regs[base:base + 32]
        table[i, :M_PARAMS] = [c["agent"], ISA.index[spec.mnemonic], c["pc"], c["issue"], c["start"], c["end"],
                         *spec.regs, *spec.fields,
                         -1 if spec.wait is None else spec.wait, -1 if spec.signal is None else spec.signal,
                         spec.nbytes, spec.macs]
        table[i, M_SIGNAL2] = -1 if spec.signal2 is None else spec.signal2
    table[:, M_PARAMS:M_PARAMS + 32] = params
    sync_a = np.array(sync, np.int64).reshape(-1, 5)
    return RunLog.from_tables(cycles, instructions, agents, table, sync_a,
                              np.zeros((0, 3), np.int64), np.zeros((0, 4), np.int64))


CONV_SOURCE = """
    .data
    .buffer x, int8, (512,)
    .space 512
    .buffer w, int8, (9216,)
    .space 9216
    .buffer y, int32, (128,)
    .space 512
    .text
    la r1, x
    la r2, w
    la r3, y
    setpi dma.src_stride0, 1
    setpi dma.dst_stride0, 1
    setpi dma.size0, 512
    dma ch0, ibuf[r0], ddr[r1], signal=s0
    setpi dma.size0, 9216
    dma ch1, wbuf[r0], ddr[r2], signal=s1
    setpi nu.in_h, 4
    setpi nu.in_w, 4
    setpi nu.out_h, 2
    setpi nu.out_w, 2
    setpi nu.k_h, 3
    setpi nu.k_w, 3
    sem.wait s1                                  ; WEIGHTS
    nu.conv nu0, r0, r0, r0, wait=s0, signal=s2 ; INPUT
    setpi dma.elem, 4
    setpi dma.size0, 128
    setpi dma.src_stride0, 4
    setpi dma.dst_stride0, 4
    dma ch2, ddr[r3], abuf[r0], wait=s2          ; RESULT
    halt
"""


def conv_source(drop: str = "") -> str:
    """The 3x3 conv kernel; drop = WEIGHTS, INPUT or RESULT removes that synchronisation."""
    out = []
    for line in CONV_SOURCE.splitlines():
        if drop and line.endswith("; " + drop):
            line = line.replace("sem.wait s1", "nop").replace("wait=s0, ", "").replace(", wait=s2", "")
        out.append(line)
    return "\n".join(out)


def conv_inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Random x, w and the expected int32 y (numpy model of the NU on this tile)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, 512, dtype=np.int8)
    w = rng.integers(-128, 128, 9216, dtype=np.int8)
    xi = x.reshape(4, 4, 32).astype(np.int64)
    wi = w.reshape(3, 3, 32, 32).astype(np.int64)
    y = np.zeros((2, 2, 32), np.int64)
    for kh in range(3):
        for kw in range(3):
            y += np.einsum("hwr,rc->hwc", xi[kh:kh + 2, kw:kw + 2], wi[kh, kw])
    return x, w, y.astype(np.int32).reshape(-1)


def run_conv(drop: str = "", check_races: bool = True):
    """Assemble and run the conv kernel; (simulator, stats)."""
    from nnpasm import assemble
    from nnpsim.simulator import Simulator
    sim = Simulator()
    sim.load(assemble(conv_source(drop), "conv.s"))
    x, w, _ = conv_inputs()
    sim.write("x", x)
    sim.write("w", w)
    return sim, sim.run(check_races=check_races)
