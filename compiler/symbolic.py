"""Symbolic shape inference: every tensor's axes as a compiler.Dim, a size, or a derived Dim.

A conv or pool of stride s makes (h + add) // s + 1 of its input's h, a Dim of its
own (Shapes.window); a reshape's and a concat's outputs follow their inputs'
(layout_shape).  compiler.graph infers a DynamicOp node's output with it, and
compiler.dynamic.network every tensor of a dynamic network.
"""
from __future__ import annotations

from .dims import Dim, check_divisor, window_out
from .errors import CompileError
from .ops import Concat, Conv2d, Dense, Elementwise, Pool2d


class Shapes:
    """Symbolic shapes of a graph's tensors, and the derived dims they need."""

    def __init__(self, dims: tuple[Dim, ...]):
        self.dims = list(dims)
        self.derived: dict[str, tuple[str, int, int]] = {}     # name -> (parent, add, stride)
        self._by_rule: dict[tuple[str, int, int], Dim] = {}

    def window(self, d: int | Dim, add: int, stride: int, where: str) -> int | Dim:
        """The axis (d + add) // stride + 1 of a window op: a size, d itself, or a derived Dim."""
        if not isinstance(d, Dim):
            return window_out(d, add, stride)
        if (add, stride) == (-1, 1):
            return d
        key = (d.name, add, stride)
        if key not in self._by_rule:
            lo, hi = window_out(d.lo, add, stride), window_out(d.hi, add, stride)
            if d.lo + add < 0:
                raise CompileError(f"{where}: its output is empty at {d.name} = {d.lo}; raise the range's low end")
            name = f"{d.name}_{sum(k[0] == d.name for k in self._by_rule) + 1}"
            new = Dim(name, lo, hi)
            self._by_rule[key] = new
            self.derived[name] = key
            self.dims.append(new)
        return self._by_rule[key]

    def values(self, base: dict[str, int]) -> dict[str, int]:
        """base values with every derived dim's value added."""
        out = dict(base)
        for name, (parent, add, stride) in self.derived.items():
            out[name] = window_out(out[parent], add, stride)
        return out


def output_shape(node, x, shapes: Shapes) -> tuple:
    """The symbolic shape of a node's output from its first input's; CompileError for an op not lowered."""
    op, where = node.op, f"node {node.name} ({node.op.kind})"
    if isinstance(op, Conv2d):
        (kh, kw), (dh, dw), (t, l, b, r) = op.kernel, op.dilation, op.padding
        ekh, ekw = (kh - 1) * dh + 1, (kw - 1) * dw + 1
        sh, sw = (check_divisor(where, "stride", s) for s in op.stride)
        return (x[0], op.out_channels, shapes.window(x[2], t + b - ekh, sh, where),
                shapes.window(x[3], l + r - ekw, sw, where))
    if isinstance(op, Pool2d):
        if global_pool(op):                     # its window is the plane, whatever the plane's size
            return (x[0], x[1], 1, 1)
        (kh, kw), (t, l, b, r) = op.kernel, op.padding
        return (x[0], x[1], shapes.window(x[2], t + b - kh, check_divisor(where, "stride", op.stride[0]), where),
                shapes.window(x[3], l + r - kw, check_divisor(where, "stride", op.stride[1]), where))
    if isinstance(op, Elementwise) and op.mode in ("add", "mul", "clip", "requantize"):
        return x
    if isinstance(op, Dense):
        if any(isinstance(d, Dim) for d in x[1:]):
            raise CompileError(f"{where}: its input {show_axes(x)} has a dynamic feature axis; only the batch of a "
                               f"dense layer's input may vary")
        return (x[0], op.weight.shape[1])
    raise CompileError(f"{where} has no dynamic lowering yet: a dynamic network takes conv2d (grouped and "
                       f"depthwise too), dense, max, sum and average pooling, add, mul, relu, clip, "
                       f"requantize, reshape and concat")


def layout_shape(node, ins: list[tuple], dg, shapes: Shapes) -> tuple:
    """The symbolic shape of a Reshape's or Concat's output; dg is the compiler.dynamic.graph.DynamicGraph
    sampled for a reshape."""
    op, where = node.op, f"node {node.name} ({node.op.kind})"
    if isinstance(op, Concat):
        a = op.axis
        rest = {s[:a] + s[a + 1:] for s in ins}
        if len(rest) != 1:
            raise CompileError(f"{where}: its inputs {', '.join(map(show_axes, ins))} differ off the axis {a}")
        moving = [k for k, s in enumerate(ins) if isinstance(s[a], Dim)]
        if not moving:
            return ins[0][:a] + (sum(s[a] for s in ins),) + ins[0][a + 1:]
        if moving != [0]:
            raise CompileError(f"{where}: its axis {a} is dynamic in input(s) {moving} "
                               f"({', '.join(map(show_axes, ins))}); a dynamic concat joins along a fixed axis, or "
                               f"along one that is dynamic in its first input only (the output's size is then "
                               f"that dim plus the others' sizes; a sum of two dims cannot be described yet)")
        fixed = sum(s[a] for s in ins[1:])          # the output's axis: d + fixed, a derived dim of d
        return ins[0][:a] + (shapes.window(ins[0][a], fixed - 1, 1, where),) + ins[0][a + 1:]
    # a reshape: each output axis is fixed or follows exactly one dim of the graph or derived
    samples = [dg.low, dg.high] + [{**dg.low, d.name: d.hi} for d in dg.dims]
    outs = [(shapes.values(b), dg.at(b).values[node.output].shape) for b in samples]
    axes = []
    for k, size in enumerate(outs[1][1]):
        if all(o[k] == size for _, o in outs):
            axes.append(size)
            continue
        match = [d for d in shapes.dims if all(v[d.name] == o[k] for v, o in outs)]
        if not match:
            raise CompileError(f"{where}: output axis {k} is {[o[k] for _, o in outs]} at the sampled shapes, "
                               f"no one dimension ({', '.join(d.name for d in shapes.dims)}), reshaping "
                               f"{show_axes(ins[0])}: a dynamic reshape may only move whole dimensions (flatten what is "
                               f"fixed; merging a dynamic axis with another needs a product of dims, which the "
                               f"argument block cannot describe yet)")
        axes.append(match[0])
    return tuple(axes)


def global_pool(op) -> bool:
    """Is op a global average pool (its window, and so its stride, the plane: they follow the shape)?"""
    return isinstance(op, Pool2d) and op.mode == "avg" and op.is_global


def show_axes(axes) -> str:
    """A symbolic shape as text: (n, 3, h, w)."""
    return "(" + ", ".join(d.name if isinstance(d, Dim) else str(d) for d in axes) + ")"
