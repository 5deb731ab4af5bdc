"""IR passes over a lowered KernelIR (allocation, synchronisation, loops, emission), each a function that can be run and tested alone.

Module order, each importing only those before it: alloc, sync, families (loop
address families), emit, loops.  They never import compiler.lowering or
compiler.cost (which sits above them: it counts CU instructions with the Emitter).
"""
