"""nnpc, the NNP-1 compiler: quantised ops -> IR -> passes -> assembly -> a Kernel on the simulator.

Whole networks: build(graph) compiles a compiler.graph.Graph into one program (a Library),
GraphModule runs it, load() reads a saved one back.

The modules in layers, bottom to top (LAYERS): a module imports only from its own layer's
modules and those below, never from above (tests/test_layers.py checks it, and that no two
modules import each other, directly or round about).

   1  errors, sizes, compile_cache           the error type, the on-chip capacities, the compile cache
   2  dims, quant, reference, ir              Dims, quantisation, the numpy model of each op, the IR
   3  ops, structure                          the op constructors (layout ops too), chain structure
   4  roofline, symbolic, dynamic.graph       bounds, symbolic shape inference, the DynamicGraph
   5  graph, passes                           the dataflow Graph; allocation, sync, loops, emission
   6  cost                                    the cost model
   7  lowering, dynamic.{asm, common, conv,   static lowering; the dynamic wing's program builder and
      dense, pool, global_pool, elementwise,  its lowerings, each op written through a Scope
      concat, fused, chain}
   8  schedule, interleave, assembler         the scheduling language, tile interleaving, nnpasm
   9  pipeline                                lowering through pricing, shared by the layers above
  10  search                                  candidates, ranking, floors, finalists
  11  kernel, runtime, dynamic.kernel, host   the Kernel build, running a network, dynamic kernels, host parts
  12  library, graphcheck, schedule_doc       what a network binary carries and its checks, the schedule doc
  13  network, dynamic.network                whole networks, static and dynamic
  14  build, onnx, models, report             the front door, ONNX import, the model zoo, the layer table
  15  agreement, demos, sweep, cli_network    onnxruntime agreement, the demos, sweeps, nnpc compile / run
  16  cli, __main__                           nnpc
"""
from . import ops
from .build import Built, build
from .dims import Dim
from .errors import CompileError
from .graph import Graph, QuantParams
from .kernel import Kernel
from .library import Library, load
from .onnx import from_onnx
from .quant import quantize_multiplier, quantize_multipliers
from .runtime import GraphModule
from .schedule import Schedule

LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "sizes", "compile_cache"),
    ("dims", "quant", "reference", "ir"),
    ("ops", "structure"),
    ("roofline", "symbolic", "dynamic.graph"),
    ("graph", "passes"),
    ("cost",),
    ("lowering", "dynamic.asm", "dynamic.common", "dynamic.conv", "dynamic.dense", "dynamic.pool",
     "dynamic.global_pool", "dynamic.elementwise", "dynamic.concat", "dynamic.fused", "dynamic.chain"),
    ("schedule", "interleave", "assembler"),
    ("pipeline",),
    ("search",),
    ("kernel", "runtime", "dynamic.kernel", "host"),
    ("library", "graphcheck", "schedule_doc"),
    ("network", "dynamic.network"),
    ("build", "onnx", "models", "report"),
    ("agreement", "demos", "sweep", "cli_network"),
    ("cli", "__main__"),
)
"""The modules and packages of compiler/ in layers, bottom to top (the docstring says what each holds)."""

__all__ = ["Built", "CompileError", "Dim", "Graph", "GraphModule", "Kernel", "LAYERS", "Library", "QuantParams",
           "Schedule", "build", "from_onnx", "load", "ops", "quantize_multiplier", "quantize_multipliers"]
