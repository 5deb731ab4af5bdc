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

KINDS = {"Add": "QLinearAdd", "Mul": "QLinearMul", "Conv": "QLinearConv", "Gemm": "QGemm", "MatMul": "QLinearMatMul",
         "AveragePool": "QLinearAveragePool"}
"""The QDQ op types whose arithmetic the importer picks from this answer, and the QLinear op each fuses into."""
ZERO_POINTS = {"QLinearAdd": (2, 5, 7), "QLinearMul": (2, 5, 7), "QLinearConv": (2, 7), "QGemm": (2, 8),
               "QLinearMatMul": (2, 7), "QLinearAveragePool": (2, 4)}
"""The activations' zero-point inputs of each fused op: all uint8 means its uint8 kernel."""
NCHWC = "com.microsoft.nchwc"
"""The domain of the float ops onnxruntime's NCHWc pass moves to blocked channels."""


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
    """A node's first output -> how onnxruntime runs the node: "float" (not fused), "uint8" or "int8" (its fused QLinear kernel on
    those types: the QDQS8ToU8 pass makes int8 groups uint8), for the nodes of KINDS it can tell; an unfused
    AveragePool that its NCHWc pass moved to blocked channels (the NCHWc AveragePool, then a ReorderOutput
    writing its output) is "nchwc".

    A node is unfused when the optimised graph holds a node of its op type (default domain) writing its output
    (tensor names are unique, so unnamed nodes are told too), or for a Conv a FusedConv (its float Conv and the
    activation after it) under its name; fused when it holds the QLinear op of KINDS under
    the node's name, which must be unique in the model.  Any other outcome (onnxruntime's layout pass renames
    the QLinearConvs it moves to NHWC) is left out."""
    counts: dict[str, int] = {}
    for n in model.graph.node:
        counts[n.name] = counts.get(n.name, 0) + 1
    inits = {t.name: t.data_type for t in optimised_model.graph.initializer}
    unfused = {(n.op_type, n.output[0]) for n in optimised_model.graph.node
               if n.op_type in KINDS and n.domain in ("", "ai.onnx") and n.output}
    # a float Conv whose activation onnxruntime fused after it (MLAS's conv, then the activation) keeps its name
    activated = {n.name for n in optimised_model.graph.node if n.op_type == "FusedConv" and n.domain == "com.microsoft"}
    fused: dict[str, str] = {}
    for n in optimised_model.graph.node:
        if n.op_type in ZERO_POINTS:
            zps = [inits.get(n.input[i]) for i in ZERO_POINTS[n.op_type] if i < len(n.input)]
            fused[n.name] = "uint8" if zps and all(t == 2 for t in zps) else "int8"    # 2: TensorProto.UINT8
    writers = {o: n for n in optimised_model.graph.node for o in n.output}
    out: dict[str, str] = {}
    for n in model.graph.node:
        if n.op_type not in KINDS or n.domain not in ("", "ai.onnx") or not n.output:
            continue
        if n.op_type == "AveragePool" and _nchwc_pool(writers, n.output[0]):
            out[n.output[0]] = "nchwc"
            continue
        activation_fused = n.op_type == "Conv" and n.name and counts[n.name] == 1 and n.name in activated
        if (n.op_type, n.output[0]) in unfused or activation_fused:
            out[n.output[0]] = "float"
        elif n.name and counts[n.name] == 1 and n.name in fused:
            out[n.output[0]] = fused[n.name]
    return out


def _nchwc_pool(writers: dict, tensor: str) -> bool:
    """Is the tensor written by an NCHWc AveragePool, directly or through the ReorderOutput back to NCHW?"""
    w = writers.get(tensor)
    if w is not None and w.op_type == "ReorderOutput" and w.domain == NCHWC:
        w = writers.get(w.input[0])
    return w is not None and w.op_type == "AveragePool" and w.domain == NCHWC
