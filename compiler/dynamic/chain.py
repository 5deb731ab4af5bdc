"""A chain of dynamic ops as one program: each op's program in turn, through DDR, a barrier between.

Each op is lowered alone (its own argument-block loads, tiles and semaphores,
all of which it drains), its labels and constant files prefixed `L<k>_`, its
input the previous op's output buffer `t<k-1>`.  `barrier Q_ALL` between two
ops orders op k+1's loads after op k's stores.  So far every op must keep
the Dims (op k's output shape, axis by axis, is op k+1's input shape: stride
1 and same padding), so that one argument block describes every buffer.
"""
from __future__ import annotations

import re

from ..errors import CompileError

_LABEL = re.compile(r"^(\w+):", re.M)
_NOTE = re.compile(r'^\s*\.target dynamic\.buffer\.(\w+), "([^"]*)"', re.M)


def _parts(asm: str) -> tuple[list[str], list[str], list[str]]:
    """(header lines, .data lines, .text lines between main: and the final halt) of one op's program."""
    lines = asm.splitlines()
    d, t = lines.index("        .data"), lines.index("        .text")
    body = lines[t + 2:]
    assert lines[t + 1] == "main:" and body[-1].strip() == "halt", "a dynamic program ends with halt"
    return lines[:d], lines[d + 1:t], body[:-1]


def _drop_buffer(data: list[str], name: str) -> list[str]:
    """The data lines without buffer `name` (its .align, .buffer and .space)."""
    out = []
    skip = False
    for line in data:
        if line.strip().startswith(".buffer "):
            skip = line.strip().startswith(f".buffer {name},")
        if not skip:
            out.append(line)
        elif line.strip().startswith(".space"):
            skip = False
    while out and out[-1].strip() == ".align 64":
        out.pop()
    return out


def compose(programs: list[tuple[str, dict[str, bytes]]], kinds: list[str]) -> tuple[str, dict[str, bytes]]:
    """One program running the ops' programs in order; (assembly, .incbin files)."""
    last = len(programs) - 1
    header, data, text, files, prev_y = [], [], [], {}, None
    for k, (asm, consts) in enumerate(programs):
        notes = dict(_NOTE.findall(asm))
        if k and notes["x"] != prev_y:
            raise CompileError(f"a dynamic chain's ops must keep the Dims so far: {kinds[k - 1]}'s output is "
                               f"({prev_y}) but {kinds[k]}'s input is ({notes['x']})")
        prev_y = notes["y"]
        names = {"x": f"t{k - 1}" if k else "x", "y": "y" if k == last else f"t{k}"}
        asm = _rename(asm, k, names)
        files.update({f"L{k}_{name}": blob for name, blob in consts.items()})
        h, d, t = _parts(asm)
        if k == 0:
            header = [line for line in h if "dynamic.buffer.y" not in line]
            data = d
        else:
            d = _drop_buffer(_drop_buffer(d, "args"), names["x"])
            data += ["        .align 64"] + d
            text += ["        barrier Q_ALL                              ; the previous op's stores are done"]
        if k == last:
            header += [line for line in h if "dynamic.buffer.y" in line]
        text += [f"        ; ---- op {k}: {kinds[k]}"] + t
    header = [line for line in header if "dynamic.buffer.t" not in line]
    return _program(header, data, text), files


def join(programs: list[tuple[str, dict[str, bytes]]]) -> tuple[str, dict[str, bytes]]:
    """Programs over the same buffers (args, x, y: parts of one conv, each writing its channels of y) run
    one after another in one program; (assembly, .incbin files).  Each ends waiting for its last stores,
    which every command it issued feeds, so the next starts after all of it."""
    header, data, text, files = [], [], [], {}
    for k, (asm, consts) in enumerate(programs):
        asm = _rename(asm, k, {})                  # labels, and so the constant files, prefixed L<k>_
        files.update({f"L{k}_{name}": blob for name, blob in consts.items()})
        h, d, t = _parts(asm)
        if k == 0:
            header, data = h, d
        else:
            for name in ("args", "x", "y"):
                d = _drop_buffer(d, name)
            data += ["        .align 64"] + d
        text += [f"        ; ---- part {k}"] + t
    return _program(header, data, text), files


def _rename(asm: str, k: int, names: dict[str, str]) -> str:
    """op k's program with its labels prefixed and its buffers renamed in one pass (a -> b and b -> c at
    once do not make a into c)."""
    labels = set(_LABEL.findall(asm)) - {"main"}
    if labels:          # not in the .target notes: a Dim may share a label's name (batch, tile, ...)
        pattern = re.compile(r"\b(" + "|".join(sorted(labels, key=len, reverse=True)) + r")\b")
        asm = "\n".join(line if line.lstrip().startswith(".target") else pattern.sub(rf"L{k}_\1", line)
                         for line in asm.split("\n"))
    if not names:
        return asm
    pattern = re.compile(r"(?<![\w.])(" + "|".join(map(re.escape, sorted(names, key=len, reverse=True))) + r")\b")
    return pattern.sub(lambda m: names[m.group(1)], asm)


def _program(header: list[str], data: list[str], text: list[str]) -> str:
    """The linked program: header, .data, then main: running the ops' text and one halt."""
    return "\n".join(header + ["        .data"] + data + ["", "        .text", "main:"] + text + ["        halt"]) + "\n"


def _declared(data: list[str]) -> list[str]:
    return [line.split()[1].rstrip(",") for line in data if line.strip().startswith(".buffer ")]


def link(programs: list[tuple[str, dict[str, bytes], dict[str, str]]], notes: dict[str, str], derived: str,
         graph_blob) -> tuple[str, dict[str, bytes]]:
    """A network's dynamic ops as one program, in order; (assembly, .incbin files).

    No barrier between two: each op ends waiting for its last stores (its drain), and every command
    it issued feeds them, so the next op's loads and on-chip writes come after all of it.

    Each program comes with its binding (its buffer names x / a / b / y -> the network's buffers); a
    buffer is declared once, by the first op that names it.  `notes` are the `.target dynamic.buffer.*`
    axes of the network's inputs and outputs, `derived` its `.target dynamic.derived` note, and
    `graph_blob` (int8) the graph description, stored as buffer nnp_graph.
    """
    header, data, text, files, declared = [], [], [], {}, {"args"}
    for k, (asm, consts, bind) in enumerate(programs):
        asm = _rename(asm, k, bind)
        files.update({f"L{k}_{name}": blob for name, blob in consts.items()})
        h, d, t = _parts(asm)
        if k == 0:
            header = [line for line in h if "dynamic.buffer." not in line]
            data = d
        else:
            for name in set(_declared(d)) & declared:
                d = _drop_buffer(d, name)
            data += ["        .align 64"] + d
        declared |= set(_declared(d))
        text += [f"L{k}_layer:                                      ; ---- op {k}"] + t
    header += [f'        .target dynamic.buffer.{b}, "{axes}"' for b, axes in notes.items()]
    if derived:
        header += [f'        .target dynamic.derived, "{derived}"']
    files["nnp_graph.bin"] = bytes(graph_blob.view("uint8"))
    data += ["        .align 64", f"        .buffer nnp_graph, int8, ({graph_blob.size},)", '        .incbin "nnp_graph.bin"']
    return _program(header, data, text), files
