"""Whole networks: a compiler.Graph partitioned into kernels, fused, laid out, stored, linked into one
program (build.build_network).  Below it: compiler.search, compiler.kernel, compiler.pipeline."""
