"""Small compiled networks to corrupt: a static one and two dynamic ones (one with a derived dim), built once
per session, and the means to rewrite the graph description (nnp_graph) a binary carries."""
from __future__ import annotations

import copy
import functools
import json

import numpy as np

import compiler
from compiler import Dim, ops
from compiler.dynamic.graph import DynamicGraph
from compiler.graph import Graph, QuantParams
from isa_spec.program import Buffer, Program

from .networks import conv_op


@functools.lru_cache(maxsize=None)
def seeds() -> dict[str, bytes]:
    """The seed binaries, built once per session (a second or two in all)."""
    rng = np.random.default_rng(0)
    g = Graph("small")
    x = g.input("x", (1, 4, 6, 6), quant=QuantParams(np.float32(0.05), np.int64(2)))
    c = conv_op(rng, (1, 4, 6, 6), 8, relu=True)
    g.output(g.add(ops.max_pool2d(c.output.shape, 2), g.add(c, x, name="conv"), name="pool"))
    out = {"static": compiler.build(g.validate()).program.to_bytes()}

    def clip(values):
        shape = (1, 8, values["h"], 5)
        d = Graph()
        d.output(d.add(ops.relu(shape, 1), d.input("x", shape), name="relu"))
        return d

    out["dynamic"] = compiler.build(DynamicGraph(clip, (Dim("h", 3, 9),))).program.to_bytes()
    w = rng.integers(-20, 21, (8, 8, 3, 3))
    b, mult, shift = rng.integers(-500, 500, 8), rng.integers(2 ** 29, 2 ** 31, 8), rng.integers(20, 24, 8)

    def strided(values):
        shape = (1, 8, values["h"], values["w"])
        d = Graph()
        s = d.add(ops.add(shape, za=3, zb=-2, ma=3 << 20, mb=5 << 20, shift=22, zp_out=1), d.input("a", shape),
                  d.input("b", shape), name="sum")
        d.output(d.add(ops.conv2d(shape, w, b, stride=2, padding=1, multiplier=mult, shift=shift),
                       d.add(ops.relu(shape, 1), s, name="relu"), name="conv"))
        return d

    out["derived"] = compiler.build(DynamicGraph(strided, (Dim("h", 5, 12), Dim("w", 5, 12)))).program.to_bytes()
    return out


# ------------------------------------------------------------------ mutations

def graph_of(prog: Program) -> dict:
    buf = prog.buffers["nnp_graph"]
    return json.loads(bytes(prog.data[buf.addr - prog.data_base:][:buf.nbytes]).decode())


def with_graph(prog: Program, text: str) -> Program:
    """The program with its nnp_graph buffer holding `text` (the buffer is the last in the data: it moves
    nothing else)."""
    p = copy.deepcopy(prog)
    buf = p.buffers["nnp_graph"]
    raw = text.encode()
    start = buf.addr - p.data_base
    assert start + buf.nbytes == p.data_size, "nnp_graph is not the last buffer"
    p.data = bytes(p.data[:start]) + raw
    p.data_size = start + len(raw)
    p.buffers["nnp_graph"] = Buffer("nnp_graph", buf.addr, "int8", (len(raw),))
    return p
