"""What onnxruntime's default session (ORT_ENABLE_ALL) makes of a model: its optimised graph, asked once.

Which DequantizeLinear -> op -> QuantizeLinear groups it fuses into QLinear kernels depends on the whole
graph (its QDQS8ToU8 pass turns int8 Q / DQ pairs into uint8 ones only where a QuantizeLinear feeds
DequantizeLinears alone, and a group whose input and output then differ in type stays float), so the
importer asks onnxruntime rather than restating its rules: it optimises the model into a temporary
directory (removed after) and reads the nodes that are still there under their own name and op type.
"""
from __future__ import annotations

import os
import tempfile

FLOAT_KINDS = ("Add",)
"""The QDQ op types whose arithmetic the importer picks from this answer (QLinearAdd, or float32)."""


def optimised(onnx, model):
    """onnxruntime's optimised graph of the model at ORT_ENABLE_ALL, as a ModelProto; raises its error."""
    import onnxruntime as ort      # optional extra, required by from_onnx

    with tempfile.TemporaryDirectory(prefix="nnp-ort-") as tmp:
        path = os.path.join(tmp, "optimised.onnx")
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        opts.optimized_model_filepath = path
        ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return onnx.load(path)


def float_nodes(model, optimised_model) -> dict[str, bool]:
    """Node name -> does onnxruntime run it in float (not fused), for the uniquely named nodes of FLOAT_KINDS.

    A node is unfused when the optimised graph holds a node of its name and op type in the default domain
    (a fused group becomes a com.microsoft QLinear node); unnamed and same-named nodes are left out, their
    fate being unknown."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.name] = counts.get(n.name, 0) + 1
    kept = {n.name for n in optimised_model.graph.node if n.domain in ("", "ai.onnx") and n.op_type in FLOAT_KINDS}
    return {n.name: n.name in kept for n in model.graph.node
            if n.op_type in FLOAT_KINDS and n.domain in ("", "ai.onnx") and n.name and counts[n.name] == 1}
