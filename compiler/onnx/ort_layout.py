"""Which layout onnxruntime runs a model's Resize nodes in at its default level (ORT_ENABLE_ALL).

Its layout pass moves an int8 Resize next to NHWC QLinearConvs into NHWC by pushing Transposes through it
(the sizes or scales permuted to [N, H, W, C]), and its NHWC kernel computes a linear Resize in fixed
point rather than float; whether it does depends on the whole graph, so the importer asks onnxruntime
(ort_graph.optimised) and reads the Resize nodes of the optimised graph.
"""
from __future__ import annotations

import numpy as np

from .ort_graph import optimised

NCHW_TO_NHWC = (0, 2, 3, 1)


def resize_layouts(onnx, model) -> dict[str, str]:
    """Resize node name -> "nhwc" or "nchw" as onnxruntime runs it by default; raises onnxruntime's error."""
    optimised_model = optimised(onnx, model)
    before = _resize_targets(onnx, model)
    after = _resize_targets(onnx, optimised_model)
    producers = {o: n for n in optimised_model.graph.node for o in n.output}
    found: dict[str, set] = {}
    for n in optimised_model.graph.node:
        if n.op_type != "Resize" or n.name not in before:
            continue
        old, new = before[n.name], after.get(n.name)
        if new is not None and old is not None and len(old) == 4 and not np.array_equal(old, new):
            layout = "nhwc" if np.array_equal(old[list(NCHW_TO_NHWC)], new) else "nchw"
        else:       # the same values both ways (or not constants): the layout of what feeds it
            layout = "nhwc" if _channels_last(onnx, producers.get(n.input[0])) else "nchw"
        found.setdefault(n.name, set()).add(layout)
    # nodes are told apart by name (onnxruntime renames the tensors around a moved Resize): Resizes that
    # share a name (unnamed ones) are known only where they all run in one layout
    return {name: layouts.pop() for name, layouts in found.items() if len(layouts) == 1}


def _resize_targets(onnx, model) -> dict[str, np.ndarray | None]:
    """Each Resize node's constant sizes (or scales), None where they are not initializers (by node name: a
    later one of the same name wins, and resize_layouts then compares those)."""
    inits = {t.name: t for t in model.graph.initializer}
    out = {}
    for n in model.graph.node:
        if n.op_type != "Resize":
            continue
        ins = list(n.input) + ["", "", "", ""]
        name = ins[3] or ins[2]
        out[n.name] = onnx.numpy_helper.to_array(inits[name]) if name in inits else None
    return out


def _channels_last(onnx, node) -> bool:
    """Does the node write an NHWC tensor (a Transpose to NHWC, or an op with channels_last = 1)?"""
    if node is None:
        return False
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Transpose":
        return tuple(attrs.get("perm", ())) == NCHW_TO_NHWC
    return attrs.get("channels_last", 0) == 1
