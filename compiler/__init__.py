"""nnpc, the NNP-1 compiler: quantised ops -> IR -> passes -> assembly -> a Kernel on the simulator.

Whole networks: build(graph) compiles a compiler.graph.Graph into one program (a Library),
GraphModule runs it, load() reads a saved one back.
"""
from . import ops
from .dims import Dim
from .errors import CompileError
from .graph import Graph, QuantParams
from .kernel import Kernel, build
from .network import Library, load
from .onnx import from_onnx
from .quant import quantize_multiplier, quantize_multipliers
from .runtime import GraphModule
from .schedule import Schedule

__all__ = ["CompileError", "Dim", "Graph", "GraphModule", "Kernel", "Library", "QuantParams", "Schedule", "build", "from_onnx", "load",
           "ops", "quantize_multiplier",
           "quantize_multipliers"]
