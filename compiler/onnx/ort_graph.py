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

KINDS = {"Add": "QLinearAdd", "Mul": "QLinearMul"}
"""The QDQ op types whose arithmetic the importer picks from this answer, and the kernel each fuses into."""
ZERO_POINTS = (2, 5, 7)
"""The zero-point inputs of a fused QLinearAdd / QLinearMul: uint8 ones mean its uint8 kernel."""


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


def kernels(model, optimised_model) -> dict[str, str]:
    """Node name -> how onnxruntime runs it: "float" (not fused), "uint8" or "int8" (its fused QLinear kernel on
    those types: the QDQS8ToU8 pass makes int8 groups uint8), for the uniquely named nodes of KINDS.

    A node is unfused when the optimised graph holds a node of its name and op type in the default domain, and
    fused when it holds the QLinear node of KINDS under that name; unnamed and same-named nodes, and any other
    outcome, are left out, their arithmetic being unknown."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.name] = counts.get(n.name, 0) + 1
    inits = {t.name: t.data_type for t in optimised_model.graph.initializer}
    found: dict[str, str] = {}
    for n in optimised_model.graph.node:
        if n.op_type in KINDS and n.domain in ("", "ai.onnx"):
            found[n.name] = "float"
        elif n.op_type in KINDS.values() and n.domain == "com.microsoft":
            zps = [inits.get(n.input[i]) for i in ZERO_POINTS if i < len(n.input)]
            found[n.name] = "uint8" if zps and all(t == 2 for t in zps) else "int8"    # 2: TensorProto.UINT8
    return {n.name: found[n.name] for n in model.graph.node
            if n.op_type in KINDS and n.domain in ("", "ai.onnx") and n.name and counts[n.name] == 1
            and n.name in found}
