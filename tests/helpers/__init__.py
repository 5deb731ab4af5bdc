"""Helpers shared by several test modules (no test module imports from another one).

  machine   small configurations, encoded instruction words and programs, operand strategies,
            the event engine against the cycle-stepped reference
  races     run logs stated as lists of CU operations (a model of the engine's cycle phases),
            and the hand-written 3x3 conv kernel with its synchronisation removable
  kernels   random single-op kernels as the compiler tests draw them (shapes, requantisation)
  networks  small graphs (ResNet bottlenecks, inverted residuals, a stem, random topologies)
            and the fused chains of the pipelining tests
  mutation  semaphore-wait mutants of compiled and dynamic programs, judged by the race checker
  hosted    models with nodes the NPU does not run (LayerNorm, attention, a detector tail), for host fallback
  activations  ONNX models of x * act(x) after a conv (SiLU, HardSwish) and of a squeeze-excite block,
            run against onnxruntime at both levels
  mlas      onnxruntime's float32 Conv (MLAS's SGEMM order of additions) of a QDQ group it does not fuse

tests/reference.py, tests/isa_reference.py, tests/onnx_helpers.py and tests/fuzz/strategies.py
are helper modules too; fixtures live in tests/conftest.py.
"""
