"""Lowering: ops to the statements of a KernelIR (tiling, layouts, units, double buffering, the NU and VU lowerings).

It uses compiler.ir, compiler.sizes (the memories' sizes) and compiler.schedule
(the decisions it carries out); it never imports the IR passes
(compiler.passes: allocation, synchronisation, loops, emission), and they never
import it.
"""
