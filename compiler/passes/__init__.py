"""IR passes over a lowered KernelIR (allocation, synchronisation, loops, emission), each a function that can be run and tested alone.

They never import compiler.lowering.
"""
