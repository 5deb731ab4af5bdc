"""nnpc, the NNP-1 compiler: quantised ops -> IR -> passes -> assembly -> a Kernel on the simulator."""
from . import ops
from .errors import CompileError
from .graph import Graph, QuantParams
from .kernel import Kernel, build
from .onnx_import import from_onnx
from .quant import quantize_multiplier, quantize_multipliers

__all__ = ["CompileError", "Graph", "Kernel", "QuantParams", "build", "from_onnx", "ops", "quantize_multiplier",
           "quantize_multipliers"]
