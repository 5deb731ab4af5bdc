"""Lowering: ops to the statements of a KernelIR (tiling, layouts, units, double buffering, the NU and VU lowerings).

It uses compiler.ir and, for the memories' sizes, compiler.passes.alloc; the IR
passes (compiler.passes: allocation, synchronisation, loops, emission) never
import it.
"""
