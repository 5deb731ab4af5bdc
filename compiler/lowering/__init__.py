"""Lowering: ops to the statements of a KernelIR (tiling, layouts, units, double buffering, the NU and VU lowerings).

Module order, each importing only those before it: double_buffer, layout, units,
conv_plan (a conv's plan and tiling before any command), depthwise, tiling, nu,
vu, movement, softmax, driver (segments, lower: the lowering driver), ring.  The static lowering
uses compiler.ir, compiler.sizes, compiler.cost and compiler.ops; it carries
out a compiler.schedule.Schedule's decisions without importing compiler.schedule,
and never imports the IR passes (compiler.passes: allocation, synchronisation,
loops, emission), which never import it.  dynamic*.py are the run-time-sized wing.
"""
