"""Race checker: hand-written racy and synchronised programs, and random programs against an oracle.

Run logs come from `schedule` (tests/helpers/races.py), a tiny model of the engine's cycle phases
(completions, starts, CU) over a list of CU operations, so that every test
states a program rather than hand-timed events.  The oracle decides races
independently of nnpsim.races: byte sets by plain loops over the
architecture's definitions, happens-before by reachability in the graph of
sync events (no vector clocks).
"""
from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nnpsim import errors
from nnpsim.config import Config
from nnpsim.errors import SimError
from nnpsim.footprint import (BASE, DIMS, PATTERN_COLS, SPACE, WIDTH, WRITE, N, S, agent_units, build_patterns,
                              footprint_rules, pattern_bytes, run_at, run_count, space_sizes, window_dims)
from nnpsim.races import _runs, check
from nnpsim.runlog import BARRIER, END, ISSUE, SIGNAL, START, TAKE, RunLog
from tests.helpers.races import (DT, GROUP_BASE, ISA, PARAMS, SMALL, SPACES, VU_OP_CODE, Barrier, Cmd, CuSignal,
                                 CuWait, conv, conv_inputs, dma, mask_bit, row, run_conv, schedule, vu)


# --------------------------------------------------------------------------- oracle

def footprint_sets(log: RunLog, c: int, cfg: Config) -> tuple[set, set]:
    """(reads, writes) of command c as sets of (space, byte), by the architecture's loops."""
    mn = ISA.instructions[log.cmd_op[c]].mnemonic
    p = {name: int(log.cmd_params[c][num - GROUP_BASE[ISA.by_mnemonic[mn].unit]])
         for name, num in PARAMS.items() if name.startswith(mn.split(".")[0] + ".")}
    r0, r1, r2 = (int(v) for v in log.cmd_regs[c])
    reads, writes = set(), set()
    if mn == "dma":
        ds, ss = int(log.cmd_fields[c][0]), int(log.cmd_fields[c][1])
        e = p["dma.elem"]
        for idx in np.ndindex(*[p[f"dma.size{k}"] for k in (3, 2, 1, 0)]):
            i = idx[::-1]
            d = r0 + sum(i[k] * p[f"dma.dst_stride{k}"] for k in range(4))
            writes |= {(ds, d + j) for j in range(e)}
            if all(p[f"dma.pad_lo{k}"] <= i[k] < p[f"dma.size{k}"] - p[f"dma.pad_hi{k}"] for k in range(4)):
                s = r1 + sum((i[k] - p[f"dma.pad_lo{k}"]) * p[f"dma.src_stride{k}"] for k in range(4))
                reads |= {(ss, s + j) for j in range(e)}
    elif mn.startswith("nu."):
        u = int(log.agents[log.cmd_agent[c]][2:])
        R, C = cfg.nu_rows, cfg.nu_cols
        g = lambda k: p["nu." + k]  # noqa: E731
        depthwise = mn.startswith("nu.dwconv")   # one lane per column: only C bytes of each pixel
        for cb in range(g("in_cb")):
            for oh in range(g("out_h")):
                for ow in range(g("out_w")):
                    for kh in range(g("k_h")):
                        for kw in range(g("k_w")):
                            ih, iw = oh * g("stride_h") + kh * g("dil_h"), ow * g("stride_w") + kw * g("dil_w")
                            at = r1 + ((cb * g("in_h") + ih) * g("in_w") + iw) * R
                            reads |= {(8 + u, at + r) for r in range(C if depthwise else R)}
        blocks = g("in_cb") if depthwise else g("out_cb")
        nw = (g("in_cb") * (4 + g("k_h") * g("k_w")) * C if depthwise
              else g("out_cb") * g("in_cb") * g("k_h") * g("k_w") * R * C)
        reads |= {(16 + u, r2 + j) for j in range(nw)}
        n_out = blocks * g("out_h") * g("out_w") * C
        if mn.endswith(".rq"):      # int8 into the VU's VBUF; the (bias, M, S) table; partial sums in ABUF
            writes |= {(32 + u, r0 + j) for j in range(n_out)}
            reads |= {(16 + u, g("rq_table") + j) for j in range(blocks * C * 12)}
            if mn == "nu.conv.acc.rq":
                reads |= {(24 + u, g("rq_psum") + j) for j in range(n_out * 4)}
            return reads, writes
        acc = {(24 + u, r0 + j) for j in range(n_out * 4)}
        writes |= acc
        if mn.endswith(".acc"):
            reads |= acc
    else:
        u = int(log.agents[log.cmd_agent[c]][2:])
        sp = 32 + u
        sdt, ddt = 1 << int(log.cmd_fields[c][1]), 1 << int(log.cmd_fields[c][2])
        dw, aw, bw = {"vu.requant": (1, sdt, 0), "vu.requant.pc": (1, sdt, 8), "vu.add": (1, 1, 1),
                      "vu.mul": (1, 1, 1), "vu.clip": (1, 1, 0), "vu.pool.max": (1, 1, 0),
                      "vu.pool.sum": (4, 1, 0), "vu.divr": (1, 4, 4), "vu.mov": (ddt, sdt, 0),
                      "vu.requant.f": (1, sdt, 0), "vu.requant.fpc": (1, sdt, 4), "vu.fadd": (1, 1, 1),
                      "vu.fmul": (1, 1, 1), "vu.pool.favg": (1, 1, 4), "vu.pool.acc": (4, 1, 0),
                      "vu.pool.avg": (1, 1, 4), "vu.slide.acc": (4, 1, 0), "vu.slide.avg": (1, 1, 4),
                      "vu.slide.favg": (1, 1, 4), "vu.lut": (1, 1, 0), "vu.fsub": (1, 1, 1),
                      "vu.fdiv": (1, 1, 1), "vu.fmax": (1, 1, 1), "vu.fmin": (1, 1, 1),
                      "vu.softmax": (1, 1, 0), "vu.pool.fmean": (1, 1, 0), "vu.faffine": (1, 1, 8), "vu.lerp": (1, 1, 0),
                      "vu.pool.faffavg": (1, 1, 8)}[mn]
        win = mn.startswith(("vu.pool", "vu.slide")) or mn == "vu.lerp"     # vu.lerp: the plane it picks from
        for idx in np.ndindex(*[p[f"vu.n{k}"] for k in (3, 2, 1, 0)]):
            i = idx[::-1]
            off = lambda x: sum(i[k] * p[f"vu.{x}_stride{k}"] for k in range(4))  # noqa: E731
            writes |= {(sp, r0 + off("d") + j) for j in range(dw)}
            for wh in range(p["vu.win_h"] if win else 1):
                for ww in range(p["vu.win_w"] if win else 1):
                    a = r1 + off("a") + wh * p["vu.win_stride_h"] + ww * p["vu.win_stride_w"]
                    reads |= {(sp, a + j) for j in range(aw)}
            reads |= {(sp, r2 + off("b") + j) for j in range(bw)}
        if mn == "vu.lut":          # its whole 256-entry table, whatever the inputs
            reads |= {(sp, r2 + j) for j in range(256)}
        if mn == "vu.softmax":      # its whole float32[256] table, whatever the inputs
            reads |= {(sp, r2 + j) for j in range(1024)}
        if mn == "vu.lerp":         # its n0 column and n1 row entries of 16 bytes
            reads |= {(sp, r2 + j) for j in range(16 * (p["vu.n0"] + p["vu.n1"]))}
    return reads, writes


def happens_before(log: RunLog) -> set[tuple[int, int]]:
    """All (a, b) with command a ordered before command b, by reachability over sync events."""
    kind, agent, sem, cmd = log.sync_kind, log.sync_agent, log.sync_sem, log.sync_cmd
    m = len(kind)
    succ = [[] for _ in range(m)]
    start, end, take_of = {}, {}, {}
    last_cu, last_end, sig_q = None, {}, {}
    for e in range(m):
        k, c, a = int(kind[e]), int(cmd[e]), int(agent[e])
        cu_event = k in (ISSUE, BARRIER) or (k in (SIGNAL, TAKE) and c < 0)
        if cu_event:
            if last_cu is not None:
                succ[last_cu].append(e)
            last_cu = e
        if k == START:
            start[c] = e
            if c in take_of:
                succ[take_of[c]].append(e)
            if a in last_end:
                succ[last_end[a]].append(e)
        elif k == END:
            end[c] = e
            succ[start[c]].append(e)
            last_end[a] = e
        elif k == ISSUE:
            issue_e = e
            start.setdefault(("issue", c), issue_e)
        elif k == SIGNAL:
            if c >= 0:
                succ[end[c]].append(e)
            sig_q.setdefault(int(sem[e]), []).append(e)
        elif k == TAKE:
            succ[sig_q[int(sem[e])].pop(0)].append(e)
            if c >= 0:
                take_of[c] = e
        elif k == BARRIER:
            for b, last in last_end.items():
                if mask_bit(log.agents[b]) & int(sem[e]):
                    succ[last].append(e)
    for c in range(len(log.cmd_agent)):
        if c in start:
            succ[start[("issue", c)]].append(start[c])
    hb = set()
    for a in end:
        seen, todo = set(), [end[a]]
        while todo:
            e = todo.pop()
            for f in succ[e]:
                if f not in seen:
                    seen.add(f)
                    todo.append(f)
        hb |= {(a, b) for b in start if isinstance(b, int) and start[b] in seen}
    return hb


def oracle_races(log: RunLog, cfg: Config) -> list[tuple[int, int]]:
    """Every racing pair of started commands."""
    started = [c for c in range(len(log.cmd_agent)) if log.cmd_start[c] >= 0]
    fp = {c: footprint_sets(log, c, cfg) for c in started}
    hb = happens_before(log)
    out = []
    for i, a in enumerate(started):
        for b in started[i + 1:]:
            if log.cmd_agent[a] == log.cmd_agent[b] or (a, b) in hb or (b, a) in hb:
                continue
            (ra, wa), (rb, wb) = fp[a], fp[b]
            if wa & (rb | wb) or wb & ra:
                out.append((a, b))
    return out


def race_message(prog, cfg=SMALL, program=None) -> str | None:
    """The checker's race message for prog, or None when it passes."""
    log = schedule(prog, cfg)
    try:
        check(log, program, cfg)
    except SimError as exc:
        assert exc.code == errors.DATA_RACE
        return str(exc)
    return None


# --------------------------------------------------------------------------- hand-written programs

DDR_IN, DDR_W, DDR_OUT = 0x1000, 0x8000, 0x20000
IN_H = IN_W = 4


def load_input(ch=0, dst=0, **kw) -> Cmd:
    return row(ch, ("ibuf0", dst), ("ddr", DDR_IN), IN_H * IN_W * 4, **kw)


def load_weights(ch=1, **kw) -> Cmd:
    return row(ch, ("wbuf0", 0), ("ddr", DDR_W), 9 * 16, **kw)


def conv3x3(inp=0, acc=0, **kw) -> Cmd:
    return conv(0, acc, inp, 0, in_h=IN_H, in_w=IN_W, out_h=2, out_w=2, k_h=3, k_w=3, **kw)


def store_acc(ch=2, acc=0, **kw) -> Cmd:
    return row(ch, ("ddr", DDR_OUT + acc), ("abuf0", acc), 2 * 2 * 4 * 4, **kw)


def test_conv_pipeline_synchronised_passes():
    prog = [load_input(signal=0), load_weights(signal=1), CuWait(1), conv3x3(wait=0),
            Barrier(0x0001), store_acc()]
    assert race_message(prog) is None
    early = [load_input(signal=0), load_weights(signal=1), conv3x3(wait=0), CuWait(1), Barrier(0x0001),
             store_acc()]
    assert "wbuf0 bytes 0x0..0x8f" in race_message(early)


def test_missing_wait_dma_in_then_nu():
    prog = [load_input(), load_weights(signal=1), CuWait(1), conv3x3(signal=2), CuWait(2), store_acc()]
    msg = race_message(prog)
    assert msg is not None
    assert "ibuf0" in msg and "dma0" in msg and "nu0" in msg
    assert "`dma` at pc 0x0" in msg and "`nu.conv` at pc 0x18" in msg
    assert "writes" in msg and "reads" in msg
    assert "bytes 0x0..0x3f" in msg


def test_missing_wait_nu_then_dma_reading_abuf():
    ok = [load_input(signal=0), load_weights(signal=1), CuWait(1), conv3x3(wait=0, signal=2), store_acc(wait=2)]
    assert race_message(ok) is None
    racy = [load_input(signal=0), load_weights(signal=1), CuWait(1), conv3x3(wait=0), store_acc()]
    msg = race_message(racy)
    assert "abuf0" in msg and "bytes 0x0..0x3f" in msg and "dma2" in msg and "nu0" in msg


def test_war_reuse_of_double_buffer():
    """The second load into buffer 0 must wait until the conv reading buffer 0 is done."""
    half = IN_H * IN_W * 4
    prog = [load_weights(signal=1), CuWait(1),
            load_input(dst=0, signal=0), load_input(dst=half, signal=0),
            conv3x3(inp=0, wait=0), conv3x3(inp=half, wait=0, accumulate=True),
            load_input(dst=0, signal=0)]        # WAR: no wait for the first conv
    msg = race_message(prog)
    assert msg is not None and "ibuf0" in msg and "nu.conv" in msg and "dma0" in msg
    fixed = prog[:4] + [conv3x3(inp=0, wait=0, signal=3), conv3x3(inp=half, wait=0, accumulate=True),
                        load_input(dst=0, wait=3)]
    assert race_message(fixed) is None


def test_double_buffered_pipeline_passes():
    """Four tiles through two input buffers: load (ch0/ch1 alternate), conv, store; fully synchronised."""
    half = IN_H * IN_W * 4
    prog = [load_weights(ch=3, signal=9), CuWait(9)]
    for t in range(4):
        buf = t % 2
        if t >= 2:
            prog.append(CuWait(4 + buf))     # the conv that read this buffer is done
        prog.append(load_input(ch=buf, dst=buf * half, signal=buf))
        prog.append(conv3x3(inp=buf * half, acc=buf * 64, wait=buf, signal=2))
        prog.append(store_acc(ch=2, acc=buf * 64, wait=2, signal=4 + buf))
    prog.append(Barrier(0xFFFF))
    assert race_message(prog) is None


def test_double_buffer_store_overwritten_by_next_conv():
    """The next conv writes ABUF while the previous store still reads it."""
    half = IN_H * IN_W * 4
    prog = [load_weights(signal=9), CuWait(9),
            load_input(dst=0, signal=0), conv3x3(inp=0, wait=0, signal=2), store_acc(wait=2),
            load_input(ch=1, dst=half, signal=1), conv3x3(inp=half, wait=1, signal=2), store_acc(wait=2)]
    msg = race_message(prog)
    assert msg is not None and "abuf0" in msg


def test_strided_rows_interleaved_overlap_in_one_byte():
    """Two channels write interleaved strided rows of one DDR matrix; one byte is written by both."""
    even = dma(0, ("ddr", 0x100), ("dm", 0), sizes=(8, 4, 1, 1), dst_strides=(1, 32, 0, 0),
               src_strides=(1, 8, 0, 0))
    odd_ok = dma(1, ("ddr", 0x110), ("dm", 64), sizes=(8, 4, 1, 1), dst_strides=(1, 32, 0, 0),
                 src_strides=(1, 8, 0, 0))
    assert race_message([even, odd_ok]) is None
    odd_bad = dma(1, ("ddr", 0x107 + 0x40), ("dm", 64), sizes=(8, 1, 1, 1), dst_strides=(1, 32, 0, 0),
                  src_strides=(1, 8, 0, 0))     # ends exactly on byte 0x147, the last of even row 2
    msg = race_message([even, odd_bad])
    assert msg is not None and "ddr byte 0x147:" in msg
    assert "dma0 `dma` at pc 0x0" in msg and "dma1 `dma` at pc 0x8" in msg


def test_strided_tiles_with_holes_do_not_overlap():
    """Bounding ranges overlap but the byte sets interleave: no race."""
    a = dma(0, ("ddr", 0), ("dm", 0), sizes=(4, 16, 1, 1), dst_strides=(1, 8, 0, 0), src_strides=(1, 4, 0, 0))
    b = dma(1, ("ddr", 4), ("dm", 64), sizes=(4, 16, 1, 1), dst_strides=(1, 8, 0, 0), src_strides=(1, 4, 0, 0))
    assert race_message([a, b]) is None
    b_shift = dma(1, ("ddr", 3), ("dm", 64), sizes=(4, 16, 1, 1), dst_strides=(1, 8, 0, 0),
                  src_strides=(1, 4, 0, 0))
    msg = race_message([a, b_shift])
    assert msg is not None and "16 of them overlap" in msg


def test_a_one_byte_access_splits_the_granules_of_whole_rows():
    """Rows of 64 bytes make 64-byte granules until a one-byte write lands among them: the shadow is then
    kept byte by byte on that page, and only a byte both commands write races, named exactly."""
    rows = row(0, ("ddr", 0x2000), ("dm", 0), 256)
    beside = row(1, ("ddr", 0x2100 + 0x41), ("dm", 512), 1)          # a byte past the rows, on their page
    assert race_message([rows, beside]) is None
    inside = row(1, ("ddr", 0x2000 + 0x41), ("dm", 512), 1)          # byte 0x41 of the second 64-byte row
    msg = race_message([rows, inside])
    assert msg is not None and "ddr byte 0x2041:" in msg
    last = row(1, ("ddr", 0x2000 + 0xff), ("dm", 512), 1)            # the rows' very last byte
    assert "ddr byte 0x20ff:" in race_message([rows, last])


def test_pages_one_agent_alone_touches_cannot_race():
    """A page only one DMA channel writes and reads is never shadowed, and never reported."""
    write = row(0, ("ddr", 0x3000), ("dm", 0), 128)
    again = row(0, ("ddr", 0x3000), ("dm", 0), 128)                  # the same queue: program order
    assert race_message([write, again]) is None
    other = row(1, ("ddr", 0x3010), ("dm", 256), 16)
    assert "ddr byte" in race_message([write, other])


def test_reads_of_the_same_bytes_never_race():
    a = row(0, ("dm", 0), ("ddr", 0), 64)
    b = row(1, ("dm", 64), ("ddr", 0), 64)
    assert race_message([a, b]) is None


def test_cu_barrier_missing():
    """Reusing a DM staging buffer after a barrier is safe; without the barrier it races."""
    fill = row(0, ("dm", 0), ("ddr", 0), 256)
    drain = row(1, ("vbuf0", 0), ("dm", 0), 256, wait=0)
    refill = row(2, ("dm", 0), ("ddr", 0x1000), 256)
    assert race_message([fill, CuSignal(0), drain, refill]) is not None   # signal before fill ends
    ok = [fill, Barrier(0x0100), CuSignal(0), drain, Barrier(0x0200), refill]
    assert race_message(ok) is None
    msg = race_message([fill, Barrier(0x0100), CuSignal(0), drain, Barrier(0x0100), refill])
    assert msg is not None and "dma1" in msg and "dma2" in msg and "reads" in msg


def test_barrier_on_the_wrong_queue_does_not_order():
    w = row(0, ("dm", 0), ("ddr", 0), 64)
    r = row(1, ("ddr", 0x1000), ("dm", 0), 64)
    assert race_message([w, Barrier(0x0200), r]) is not None
    assert race_message([w, Barrier(0x0100), r]) is None


def test_token_from_the_wrong_producer():
    """Two producers signal the same semaphore; the consumer's token comes from the first (FIFO)."""
    slow = row(0, ("dm", 0), ("ddr", 0), 64, signal=0, dur=50)
    fast = row(1, ("dm", 128), ("ddr", 0x100), 64, signal=0, dur=5)
    consumer = row(2, ("ddr", 0x1000), ("dm", 0), 64, wait=0)
    # fast ends first, so the consumer gets fast's token and reads slow's bytes unordered
    msg = race_message([slow, fast, consumer])
    assert msg is not None and "dma0" in msg and "dma2" in msg
    assert race_message([slow, consumer.__class__(**{**consumer.__dict__, "regs": (0x1000, 128, 0)})]) is None


def test_a_second_signal_orders_a_second_consumer():
    """One load's signal and signal2 each release a consumer on another channel: both reads of its
    bytes are ordered after its write; without signal2, the second consumer's token comes from a
    command that never wrote them."""
    first = row(1, ("ddr", 0x1000), ("dm", 0), 64, wait=0)
    second = row(2, ("ddr", 0x2000), ("dm", 0), 64, wait=1)
    load = row(0, ("dm", 0), ("ddr", 0), 64, signal=0, signal2=1, dur=30)
    assert race_message([load, first, second]) is None
    other = row(3, ("dm", 256), ("ddr", 0x100), 64, signal=1, dur=1)
    msg = race_message([row(0, ("dm", 0), ("ddr", 0), 64, signal=0, dur=30), other, first, second])
    assert msg is not None and "dma0" in msg and "dma2" in msg and "dma1" not in msg


def test_transitive_order_through_the_cu():
    """dma0 -> sem -> CU wait -> issue of vu0 orders dma0's write before the VU's read."""
    load = row(0, ("vbuf0", 0), ("ddr", 0), 64, signal=3)
    clip = vu(0, "vu.clip", 64, 0, n0=64, d_stride0=1, a_stride0=1)
    assert race_message([load, CuWait(3), clip]) is None
    assert race_message([load, clip]) is not None


def test_pooling_window_reads_are_exact():
    """pool.max reads rows 0..2 of a strided window; a write to row 3 of that plane is no race."""
    pool = vu(0, "vu.pool.max", 512, 0, n0=2, a_stride0=1, d_stride0=1, win_h=3, win_w=2,
              win_stride_h=16, win_stride_w=1)
    other_row = row(0, ("vbuf0", 48), ("ddr", 0), 3)
    assert race_message([pool, other_row]) is None
    in_window = row(0, ("vbuf0", 34), ("ddr", 0), 1)
    msg = race_message([pool, in_window])
    assert msg is not None and "vbuf0 byte 0x22:" in msg


def test_requant_pc_table_and_divr_divisor_are_read():
    table = row(0, ("vbuf0", 256), ("ddr", 0), 16)
    rq = vu(0, "vu.requant.pc", 0, 64, 256, sdt="i32", n0=2, d_stride0=1, a_stride0=4, b_stride0=8)
    assert "vbuf0 bytes 0x100..0x10f" in race_message([table, rq])
    divisor = row(0, ("vbuf0", 512), ("ddr", 0), 4)
    dv = vu(0, "vu.divr", 0, 64, 512, n0=8, d_stride0=1, a_stride0=4, b_stride0=0)
    assert "vbuf0 bytes 0x200..0x203" in race_message([divisor, dv])


def test_lut_table_is_read_whole():
    """vu.lut reads all 256 bytes of its table: a DMA still loading the table's last byte, with no wait
    between them, is a race even when no input selects that entry; one past the table is not."""
    last_entry = row(0, ("vbuf0", 512 + 255), ("ddr", 0), 1)
    lut = vu(0, "vu.lut", 0, 64, 512, n0=4, d_stride0=1, a_stride0=1)
    assert "vbuf0 byte 0x2ff" in race_message([last_entry, lut])
    past = row(0, ("vbuf0", 512 + 256), ("ddr", 0), 1)
    assert race_message([past, lut]) is None


def test_softmax_table_is_read_whole():
    """vu.softmax reads all 1024 bytes of its float32 table, whatever the rows: a DMA still loading the last
    entry's last byte is a race; one past the table is not."""
    last_byte = row(0, ("vbuf0", 2048 + 1023), ("ddr", 0), 1)
    softmax = vu(0, "vu.softmax", 0, 64, 2048, n0=4, n1=2, d_stride0=1, a_stride0=1, d_stride1=4, a_stride1=4)
    assert "vbuf0 byte 0xbff" in race_message([last_byte, softmax])
    past = row(0, ("vbuf0", 2048 + 1024), ("ddr", 0), 1)
    assert race_message([past, softmax]) is None


def test_source_lines_in_message():
    class Prog:
        lines = [("net.s", 10), ("net.s", 11)]
    msg = race_message([row(0, ("dm", 0), ("ddr", 0), 8), row(1, ("dm", 4), ("ddr", 8), 8)], program=Prog())
    assert "(net.s:10)" in msg and "(net.s:11)" in msg and "dm bytes 0x4..0x7" in msg


def test_first_race_is_the_earliest():
    prog = [row(0, ("dm", 0), ("ddr", 0), 8), row(1, ("dm", 0), ("ddr", 8), 8),
            row(2, ("dm", 100), ("ddr", 0), 8), row(3, ("dm", 100), ("ddr", 8), 8)]
    log = schedule(prog)
    with pytest.raises(SimError) as ei:
        check(log, None, SMALL)
    assert "dm bytes 0x0..0x7" in str(ei.value) and ei.value.cycle == log.cmd_start[1]


# --------------------------------------------------------------------------- merged runs and page summaries

def _first_seen(byte_lists) -> list[int]:
    """The bytes of the lists in order, each at its first appearance."""
    seen, out = set(), []
    for b in itertools.chain.from_iterable(byte_lists):
        if b not in seen:
            seen.add(b)
            out.append(b)
    return out


@st.composite
def patterns(draw) -> np.ndarray:
    """One pattern of up to four dims: strides that continue, overlap, repeat (0), step back or leave holes."""
    pat = np.zeros((1, 1, PATTERN_COLS), np.int64)
    pat[0, 0, SPACE] = 0
    pat[0, 0, BASE] = draw(st.integers(-8, 300))
    pat[0, 0, WIDTH] = draw(st.integers(1, 5))
    pat[0, 0, N:N + DIMS] = 1
    for k in range(draw(st.integers(0, 4))):
        pat[0, 0, N + k] = draw(st.integers(1, 5))
        pat[0, 0, S + k] = draw(st.integers(-12, 40))
    return pat


@settings(max_examples=150, deadline=None)
@given(patterns(), st.integers(64, 400))
def test_merged_runs_see_bytes_first_in_run_at_order(pats, size):
    """_runs folds and merges a pattern's runs and keeps runs apart as entries of n runs; the bytes it walks,
    each at its first appearance, are run_at's clipped to the memory in the same order, so the first
    conflicting byte, and the race found, are the same.  An entry's runs lie inside the memory, apart."""
    first, runs = _runs(pats, np.zeros(1, np.int64), np.array([size], np.int64))
    pat = pats[0, 0]
    plain = [range(max(a, 0), min(a + n, size)) for a, n in (run_at(pat, r) for r in range(run_count(pat)))]
    entries = runs[first[0]:first[1]]
    walked = [range(lo + k * step, hi + k * step) for lo, hi, n, step in entries for k in range(n)]
    assert all(len(r) > 0 for r in walked) and len(entries) <= len(plain)
    assert all(n == 1 or (step > hi - lo and lo >= 0 and hi + (n - 1) * step <= size) for lo, hi, n, step in entries)
    assert _first_seen(walked) == _first_seen(plain)


def test_accesses_meeting_at_a_page_edge():
    """Accesses that cross the DDR page edge at 0x1000 or end on it: only a shared byte races, and it is named."""
    across = row(0, ("ddr", 0xffc), ("dm", 0), 8)                   # bytes 0xffc..0x1003
    assert "ddr byte 0x1003:" in race_message([across, row(1, ("dm", 64), ("ddr", 0x1003), 1)])
    assert race_message([across, row(1, ("dm", 64), ("ddr", 0x1004), 4)]) is None
    assert race_message([across, row(1, ("dm", 64), ("ddr", 0xff8), 4)]) is None
    assert "ddr byte 0xffc:" in race_message([across, row(1, ("dm", 64), ("ddr", 0xffa), 3)])
    assert "ddr bytes 0xffe..0x1001" in race_message([across, row(1, ("ddr", 0xffe), ("dm", 64), 4)])


def test_overlapping_pooling_windows_merged_into_rows():
    """Windows of three bytes every two bytes merge into one read of each window row; a write to a byte of a
    row races, one to the bytes between the two window rows does not."""
    pool = vu(0, "vu.pool.max", 512, 0, n0=4, a_stride0=2, d_stride0=1, win_h=2, win_w=3,
              win_stride_h=16, win_stride_w=1)                      # rows 0..8 and 16..24
    for byte, racy in ((7, True), (8, True), (9, False), (15, False), (16, True), (24, True), (25, False)):
        msg = race_message([pool, row(0, ("vbuf0", byte), ("ddr", 0), 1)])
        assert (msg is not None) == racy, (byte, msg)
        assert not racy or f"vbuf0 byte {byte:#x}:" in msg


def test_an_ordered_access_does_not_hide_a_later_unordered_one():
    """dma1's read of the page is ordered after dma0's write (the page summary takes the fast path), dma2's
    write is ordered after dma0's but not after dma1's read: that pair races; a token from dma1 orders it."""
    write = row(0, ("ddr", 0x4000), ("dm", 0), 64, signal=0)
    read = row(1, ("dm", 128), ("ddr", 0x4000), 64, signal=1)
    again = row(2, ("ddr", 0x4020), ("dm", 256), 8)
    msg = race_message([write, CuWait(0), read, again])
    assert msg is not None and "ddr bytes 0x4020..0x4027" in msg and "dma1" in msg and "dma2" in msg
    assert race_message([write, CuWait(0), read, CuWait(1), again]) is None
    assert race_message([write, CuWait(0), read, row(2, ("ddr", 0x4020), ("dm", 256), 8, wait=1)]) is None


def test_one_queue_rewriting_its_bytes_and_a_reader_ordered_by_a_token():
    """Program order in one queue and a semaphore token are orders: two writes of the same bytes by dma0 and a
    read by vu0 that waits for the second's token are no race; the read without the wait is."""
    first = row(0, ("vbuf0", 0), ("ddr", 0), 48)
    second = row(0, ("vbuf0", 16), ("ddr", 64), 48, signal=3)
    reader = vu(0, "vu.mov", 256, 8, n0=40, d_stride0=1, a_stride0=1, wait=3)
    assert race_message([first, second, reader]) is None
    unordered = vu(0, "vu.mov", 256, 8, n0=40, d_stride0=1, a_stride0=1)     # starts before the second write
    msg = race_message([first, second, unordered])
    assert "vbuf0 bytes 0x8..0x2f" in msg and "dma0 `dma` at pc 0x0 writes" in msg


# --------------------------------------------------------------------------- random programs vs oracle

MEMS = ("ddr", "dm", "ibuf0", "vbuf0", "vbuf1", "abuf0")
TWO_OF_EACH = Config(nu_rows=4, nu_cols=4, nu_count=2, vu_count=2)


def _random_dma(draw, wait: int | None, signal: int | None, **extra) -> Cmd:
    """A random small 2-D DMA between two of MEMS, aligned for ABUF, overlapping others."""
    dspace, sspace = draw(st.sampled_from(MEMS)), draw(st.sampled_from(MEMS))
    elem = 4 if "abuf0" in (dspace, sspace) else draw(st.sampled_from([1, 2, 4]))
    sizes = [draw(st.integers(1, 4)) for _ in range(2)] + [1, 1]
    lo = [draw(st.integers(0, 1)) if n > 1 else 0 for n in sizes]
    return dma(draw(st.integers(0, 3)), (dspace, 4 * draw(st.integers(0, 8))),
               (sspace, 4 * draw(st.integers(0, 8))), sizes,
               [elem * draw(st.integers(1, 3)), 4 * draw(st.integers(0, 6)), 0, 0],
               [elem * draw(st.integers(0, 3)), 4 * draw(st.integers(0, 6)), 0, 0],
               elem, lo, [0, 0, 0, 0], wait=wait, signal=signal, **extra)


def _command(draw, wait: int | None, signal: int | None) -> Cmd:
    """A random DMA, VU or NU command over small, overlapping regions."""
    dur = draw(st.integers(1, 30))
    what = draw(st.sampled_from(["dma", "dma", "vu", "nu"]))
    if what == "dma":
        return _random_dma(draw, wait, signal, dur=dur)
    if what == "vu":
        mn = draw(st.sampled_from(sorted(VU_OP_CODE)))
        kw = {f"{x}_stride0": draw(st.integers(0, 8)) for x in "dab"}
        if mn.startswith(("vu.pool", "vu.slide")):
            kw.update(win_h=draw(st.integers(1, 3)), win_w=draw(st.integers(1, 2)),
                      win_stride_h=draw(st.integers(0, 9)), win_stride_w=draw(st.integers(0, 3)))
        return vu(draw(st.integers(0, 1)), mn, draw(st.integers(0, 40)), draw(st.integers(0, 40)),
                  draw(st.integers(0, 40)), sdt=draw(st.sampled_from(["i8", "i32"])),
                  ddt=draw(st.sampled_from(["i8", "i32"])), n0=draw(st.integers(1, 6)),
                  wait=wait, signal=signal, dur=dur, **kw)
    s, d, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    out = draw(st.integers(1, 3))
    size = (out - 1) * s + (k - 1) * d + 1
    depthwise = draw(st.booleans())
    rq = not depthwise and draw(st.integers(0, 2)) == 0     # nu.conv.rq / nu.conv.acc.rq
    extra = dict(rq_table=4 * draw(st.integers(0, 6)), rq_psum=16 * draw(st.integers(0, 3))) if rq else {}
    return conv(draw(st.integers(0, 1)), 16 * draw(st.integers(0, 3)), 4 * draw(st.integers(0, 6)), 0,
                accumulate=draw(st.booleans()), depthwise=depthwise, rq=rq, in_h=size,
                in_w=size + draw(st.integers(0, 1)), out_h=out, out_w=out, k_h=k, k_w=k, stride_h=s, stride_w=s,
                dil_h=d, dil_w=d, wait=wait, signal=signal, dur=dur, **extra)


@st.composite
def programs(draw):
    """Random commands with random sync: loose tokens, chains (a command waits for the previous
    one's token), forks (a command's signal2 token taken by a later command than its signal's),
    CU waits on a command's token, CU signals and barriers."""
    prog, sems, chained, forked = [], 3, None, []
    sem = st.integers(0, sems - 1)
    for _ in range(draw(st.integers(3, 14))):
        what = draw(st.sampled_from(["cmd"] * 6 + ["signal", "wait", "barrier"]))
        if what == "signal":
            prog.append(CuSignal(draw(sem)))
        elif what == "wait":
            prog.append(CuWait(draw(sem)))
        elif what == "barrier":
            prog.append(Barrier(draw(st.sampled_from([0x0001, 0x0002, 0x0010, 0x0020, 0x0100, 0x0300,
                                                      0x0F00, 0xFFFF]))))
        else:
            if chained is None and forked and draw(st.booleans()):
                chained = forked.pop(0)
            wait = chained if chained is not None else draw(st.one_of(st.none(), st.none(), sem))
            link = draw(st.sampled_from(["none", "token", "chain", "chain", "cu", "fork"]))
            signal = None if link == "none" else draw(sem)
            prog.append(_command(draw, wait, signal))
            if link == "fork":
                prog[-1].signal2 = draw(sem)
                forked.append(prog[-1].signal2)
            chained = signal if link in ("chain", "fork") else None
            if link == "cu":
                prog.append(CuWait(signal))
    return prog


@settings(max_examples=300, deadline=None)
@given(programs())
def test_random_programs_agree_with_oracle(prog):
    log = schedule(prog, TWO_OF_EACH, limit=2000)
    races = oracle_races(log, TWO_OF_EACH)
    try:
        check(log, None, TWO_OF_EACH)
    except SimError as exc:
        assert races, f"checker reported a race the oracle does not see: {exc}"
        return
    assert not races, f"checker missed races {races}"


def _take_after_start(log: RunLog) -> RunLog:
    """The same run with every command's TAKE logged just after its START instead of just before."""
    order = list(range(len(log.sync_kind)))
    for e in range(len(order) - 1):
        a, b = order[e], order[e + 1]
        if log.sync_kind[a] == TAKE and log.sync_kind[b] == START and log.sync_cmd[a] == log.sync_cmd[b] >= 0:
            order[e], order[e + 1] = b, a
    for f in ("sync_kind", "sync_cycle", "sync_agent", "sync_sem", "sync_cmd"):
        setattr(log, f, getattr(log, f)[order])
    return log


@pytest.mark.parametrize("racy", [False, True])
def test_take_logged_after_start_gives_the_same_verdict(racy):
    load = row(0, ("vbuf0", 0), ("ddr", 0), 64, signal=3)
    clip = vu(0, "vu.clip", 64, 0, n0=64, d_stride0=1, a_stride0=1, wait=None if racy else 3)
    log = _take_after_start(schedule([load, clip]))
    assert list(log.sync_kind).count(TAKE) == (0 if racy else 1)
    if racy:
        with pytest.raises(SimError):
            check(log, None, SMALL)
    else:
        assert list(log.sync_kind).index(START, 2) < list(log.sync_kind).index(TAKE)
        check(log, None, SMALL)


def test_second_units_and_their_barrier_bits():
    """vu1 writes vbuf1; only a barrier on Q_VU1 (bit 5) orders the DMA that reads it."""
    cfg = TWO_OF_EACH
    fill = vu(1, "vu.clip", 0, 64, n0=64, d_stride0=1, a_stride0=1)
    read = row(0, ("ddr", 0), ("vbuf1", 0), 64)
    assert race_message([fill, Barrier(0x0020), read], cfg) is None
    msg = race_message([fill, Barrier(0x0010), read], cfg)
    assert msg is not None and "vbuf1" in msg and "vu1" in msg
    acc = conv(1, 0, 0, 0, in_h=1, in_w=1)
    store = dma(1, ("ddr", 0), ("abuf1", 0), sizes=(4, 1, 1, 1), dst_strides=(4, 0, 0, 0),
                src_strides=(4, 0, 0, 0), elem=4)
    assert race_message([acc, Barrier(0x0002), store], cfg) is None
    assert "abuf1" in race_message([acc, Barrier(0x0001), store], cfg)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_footprints_are_the_exact_byte_sets(data):
    """nnpsim.footprint's patterns cover exactly the oracle's bytes, per memory and direction."""
    cmd = _command(data.draw, None, None)
    log = schedule([cmd], TWO_OF_EACH)
    _, unit = agent_units(log.agents)
    pats = build_patterns(footprint_rules(), log.cmd_op, unit[log.cmd_agent], log.cmd_regs, log.cmd_fields,
                          log.cmd_params, TWO_OF_EACH.nu_rows, TWO_OF_EACH.nu_cols)[0]
    size = space_sizes(TWO_OF_EACH)
    got = (set(), set())
    for p in pats:
        if p[WIDTH] > 0:
            got[p[WRITE]].update((int(p[SPACE]), int(b)) for b in pattern_bytes(p, size[p[SPACE]]))
    reads, writes = footprint_sets(log, 0, TWO_OF_EACH)
    assert got == (reads, writes)


def test_window_index_sets_exhaustive():
    """window_dims merges {o*step + j*dil} into one dense dim only when that loses nothing."""
    for out, step, k, dil in itertools.product(range(1, 6), repeat=4):
        n0, s0, n1, s1 = window_dims(out, step, k, dil)
        got = {a * s0 + b * s1 for a in range(n0) for b in range(n1)}
        assert got == {o * step + j * dil for o in range(out) for j in range(k)}, (out, step, k, dil)


# --------------------------------------------------------------------------- scale

def test_compiler_sized_kernel_is_fast():
    """768 commands over ~30 MB of footprint (a double-buffered conv layer) check in a few seconds."""
    cfg = Config()
    tile, acc = 64 * 1024, 4 * 14 * 30 * 32
    shape = dict(in_cb=4, in_h=16, in_w=32, out_h=14, out_w=30, k_h=3, k_w=3)
    prog = [row(3, ("wbuf0", 0), ("ddr", 0x800000), 9 * 4 * 32 * 32, signal=9), CuWait(9)]
    for t in range(256):
        buf = t % 2
        if t >= 2:
            prog.append(CuWait(4 + buf))
        prog.append(row(buf, ("ibuf0", buf * tile), ("ddr", t * tile), tile, signal=buf, dur=40))
        prog.append(conv(0, buf * 65536, buf * tile, 0, wait=buf, signal=2, dur=40, **shape))
        prog.append(row(2, ("ddr", 0x1000000 + t * acc), ("abuf0", buf * 65536), acc, wait=2,
                        signal=4 + buf, dur=40))
    log = schedule(prog, cfg, limit=10 ** 6)
    check(log, None, cfg)    # compile outside the timing
    t0 = time.perf_counter()
    check(log, None, cfg)
    assert time.perf_counter() - t0 < 5.0
    # one more load into buffer 0 without waiting for the conv that last read it
    log_bad = schedule(prog + [row(0, ("ibuf0", 0), ("ddr", 0), tile)], cfg, limit=10 ** 6)
    with pytest.raises(SimError, match="ibuf0"):
        check(log_bad, None, cfg)


# --------------------------------------------------------------------------- real runs (nnpasm + Simulator)


def test_real_run_synchronised_passes_and_is_correct():
    sim, _ = run_conv()
    assert np.array_equal(sim.read("y"), conv_inputs()[2])


@pytest.mark.parametrize("drop, memory", [("WEIGHTS", "wbuf0"), ("INPUT", "ibuf0"), ("RESULT", "abuf0")])
def test_real_run_missing_sync_is_a_race(drop, memory):
    with pytest.raises(SimError) as ei:
        run_conv(drop)
    assert ei.value.code == errors.DATA_RACE
    msg = str(ei.value)
    assert f"data race on {memory}" in msg and "conv.s:" in msg and "nu.conv" in msg
    run_conv(drop, check_races=False)     # without the checker the run completes


def _sync_removals(source: str):
    """Each variant of source with one synchronisation removed (a wait=, a sem.wait or a barrier)."""
    lines = source.splitlines()
    for i, line in enumerate(lines):
        code = line.split(";")[0]
        variants = []
        if ", wait=s" in code:
            head, tail = code.split(", wait=s")
            rest = tail.split(",", 1)
            variants.append(head + ("," + rest[1] if len(rest) > 1 else ""))
        if code.strip().startswith(("sem.wait", "barrier")):
            variants.append("        nop")
        for v in variants:
            yield i + 1, "\n".join(lines[:i] + [v] + lines[i + 1:])


@pytest.mark.parametrize("example", ["matmul_db", "requant_pool", "dma_pad_layout", "scalar_loop"])
def test_examples_with_one_sync_removed_agree_with_oracle(example):
    """The project's examples pass; each with one wait removed is judged as the oracle judges it."""
    from pathlib import Path

    from nnpasm import assemble
    from nnpsim.simulator import Simulator
    source = (Path(__file__).resolve().parents[2] / "examples" / f"{example}.s").read_text()
    cfg = Config()
    sim = Simulator(cfg)
    sim.load(assemble(source, f"{example}.s"))
    sim.run(check_races=True)
    verdicts = []
    for line, variant in _sync_removals(source):
        sim.load(assemble(variant, f"{example}.s"))
        try:
            sim.run()
        except SimError:
            continue                # e.g. a deadlock: nothing to judge
        log = sim.last_log
        races = oracle_races(log, cfg)
        try:
            check(log, sim.program, cfg)
            verdicts.append(False)
        except SimError as exc:
            assert exc.code == errors.DATA_RACE
            verdicts.append(True)
        assert verdicts[-1] == bool(races), f"line {line}: checker {verdicts[-1]}, oracle {races}"
    assert verdicts and (example == "scalar_loop" or any(verdicts))


# --------------------------------------------------------------------------- random programs on the real engine

ENGINE_CFG = Config(nu_rows=4, nu_cols=4, nu_count=2, vu_count=2, ddr_bytes=1 << 16, dm_bytes=1 << 14,
                    ibuf_bytes=1 << 12, wbuf_bytes=1 << 12, abuf_bytes=1 << 12, vbuf_bytes=1 << 12)
ENGINE_VU_OPS = ("vu.add", "vu.mul", "vu.clip", "vu.pool.max", "vu.pool.sum", "vu.mov", "vu.requant",
                 "vu.pool.acc")


def _engine_command(draw, wait: int | None, signal: int | None) -> Cmd:
    """A random command the engine accepts (aligned, in bounds, legal scalars)."""
    what = draw(st.sampled_from(["dma", "dma", "vu", "nu"]))
    if what == "dma":
        return _random_dma(draw, wait, signal)
    if what == "vu":
        mn = draw(st.sampled_from(ENGINE_VU_OPS))
        kw = {f"{x}_stride0": 4 * draw(st.integers(0, 2)) for x in "dab"}
        if mn.startswith("vu.pool"):
            kw.update(win_h=draw(st.integers(1, 3)), win_w=draw(st.integers(1, 2)),
                      win_stride_h=4 * draw(st.integers(0, 3)), win_stride_w=draw(st.integers(0, 3)))
        addr = st.integers(0, 10).map(lambda v: 4 * v)
        return vu(draw(st.integers(0, 1)), mn, draw(addr), draw(addr), draw(addr),
                  sdt=draw(st.sampled_from(["i8", "i32"])), ddt=draw(st.sampled_from(["i8", "i32"])),
                  n0=draw(st.integers(1, 6)), wait=wait, signal=signal, **kw)
    s, d, k = draw(st.integers(1, 3)), draw(st.integers(1, 3)), draw(st.integers(1, 3))
    out = draw(st.integers(1, 3))
    size = (out - 1) * s + (k - 1) * d + 1
    return conv(draw(st.integers(0, 1)), 16 * draw(st.integers(0, 3)), 4 * draw(st.integers(0, 6)),
                4 * draw(st.integers(0, 3)), accumulate=draw(st.booleans()), depthwise=draw(st.booleans()),
                in_h=size,
                in_w=size + draw(st.integers(0, 1)), out_h=out, out_w=out, k_h=k, k_w=k, stride_h=s,
                stride_w=s, dil_h=d, dil_w=d, wait=wait, signal=signal)


def to_assembly(prog: list) -> str:
    """prog as NNP-1 assembly: every parameter of a command's group set before it."""
    out = []
    for op in prog:
        if isinstance(op, CuSignal):
            out.append(f"    sem.signal s{op.sem}")
        elif isinstance(op, CuWait):
            out.append(f"    sem.wait s{op.sem}")
        elif isinstance(op, Barrier):
            out.append(f"    barrier {op.mask:#x}")
        else:
            group = op.mnemonic.split(".")[0] + "."
            out += [f"    setpi {name}, {op.params.get(name, ISA.param_defaults.get(name, 0))}"
                    for name in PARAMS if name.startswith(group)]
            out += [f"    li r{1 + i}, {v}" for i, v in enumerate(op.regs)]
            sync = "".join(f", {k}=s{v}" for k, v in (("wait", op.wait), ("signal", op.signal)) if v is not None)
            unit = op.agent[:-1] if op.agent.startswith("dma") else op.agent
            spaces = {v: k for k, v in reversed(SPACES.items())}
            if op.mnemonic == "dma":
                text = f"dma ch{op.agent[3:]}, {spaces[op.fields[0]]}[r1], {spaces[op.fields[1]]}[r2]"
            elif op.mnemonic.startswith("nu."):
                text = f"{op.mnemonic} {unit}, r1, r2, r3"
            else:
                dt = {v: k for k, v in DT.items()}
                sdt, ddt = dt[op.fields[1]], dt[op.fields[2]]
                operands = {"vu.requant": f"r1, r2, {sdt}", "vu.mov": f"{ddt}, r1, {sdt}, r2",
                            "vu.clip": "r1, r2", "vu.pool.max": "r1, r2", "vu.pool.sum": "r1, r2",
                            "vu.pool.acc": "r1, r2"}
                text = f"{op.mnemonic} {unit}, " + operands.get(op.mnemonic, "r1, r2, r3")
            out.append(f"    {text}{sync}")
    return "\n".join(out + ["    halt", ""])


@st.composite
def engine_programs(draw):
    """Random engine-legal commands and sync like programs(), but every wait takes a token some
    earlier operation gives (so that few runs deadlock)."""
    prog, chained, tokens = [], None, [0, 0, 0]

    def some_token():
        ready = [k for k, n in enumerate(tokens) if n > 0]
        if not ready or draw(st.integers(0, 2)):
            return None
        k = draw(st.sampled_from(ready))
        tokens[k] -= 1
        return k

    for _ in range(draw(st.integers(2, 10))):
        what = draw(st.sampled_from(["cmd"] * 6 + ["signal", "wait", "barrier", "barrier"]))
        if what == "signal":
            k = draw(st.integers(0, 2))
            tokens[k] += 1
            prog.append(CuSignal(k))
        elif what == "wait":
            k = some_token()
            if k is not None:
                prog.append(CuWait(k))
        elif what == "barrier":
            prog.append(Barrier(draw(st.sampled_from([0x0001, 0x0002, 0x0010, 0x0020, 0x0100, 0x0300, 0xFFFF]))))
        else:
            wait = chained if chained is not None else some_token()
            link = draw(st.sampled_from(["none", "none", "token", "chain", "cu"]))
            signal = None if link == "none" else draw(st.integers(0, 2))
            prog.append(_engine_command(draw, wait, signal))
            chained = signal if link == "chain" else None
            if link == "cu":
                prog.append(CuWait(signal))
            elif link == "token":
                tokens[signal] += 1
    return prog


@settings(max_examples=200, deadline=None)
@given(engine_programs())
def test_engine_runs_agree_with_oracle(prog):
    """Random programs on the real engine: the checker's verdict is the oracle's."""
    from nnpasm import assemble
    from nnpsim.simulator import Simulator
    sim = Simulator(ENGINE_CFG)
    sim.load(assemble(to_assembly(prog), "fuzz.s"))
    try:
        sim.run(max_cycles=100_000)
    except SimError as exc:
        assert exc.code == errors.DEADLOCK, str(exc)
        return
    log = sim.last_log
    races = oracle_races(log, ENGINE_CFG)
    try:
        check(log, sim.program, ENGINE_CFG)
    except SimError as exc:
        assert races, f"checker reported a race the oracle does not see: {exc}"
        return
    assert not races, f"checker missed races {races}"


# --------------------------------------------------------------------------- the CU's ld

LD_PROGRAM = """
        .text
main:   la      r10, src
        la      r11, dst
        setpi   dma.elem, 1
        setpi   dma.size0, 64
        setpi   dma.src_stride0, 1
        setpi   dma.dst_stride0, 1
{before}
        ld      r3, r11, 8
{after}
        halt
        .data
        .align  64
        .buffer src, int32, (16,)
        .rept   16
        .word   7
        .endr
        .buffer dst, int32, (16,)
        .space  64
"""
COPY = "        dma     ch0, ddr[r11], ddr[r10], signal=s1"


@pytest.mark.parametrize("before, after, racy", [
    (COPY, "        sem.wait s1", True),                    # ld reads dst while the copy may still write it
    (COPY + "\n        sem.wait s1", "", False),            # the token orders the copy's write before ld
    ("", COPY + "\n        sem.wait s1", False),            # issued after ld: the copy writes later
    ("        dma     ch0, ddr[r10], ddr[r11], signal=s1", "        sem.wait s1", False),   # both only read dst
])
def test_a_cu_ld_is_checked_against_the_dmas_that_write_ddr(before, after, racy):
    # `ld` reads DDR (a dynamic kernel's argument block, or sums a DMA stored): unordered against a
    # DMA that writes those bytes it is a race, reported naming the ld and its source line
    from nnpasm import assemble
    from nnpsim.simulator import Simulator

    sim = Simulator(Config())
    sim.load(assemble(LD_PROGRAM.format(before=before, after=after), "ld.s"))
    if not racy:
        sim.run(check_races=True)
        return
    with pytest.raises(SimError) as exc:
        sim.run(check_races=True)
    assert exc.value.code == errors.DATA_RACE
    assert "cu `ld` at pc" in str(exc.value) and "ld.s:" in str(exc.value) and "dma0 `dma`" in str(exc.value)
