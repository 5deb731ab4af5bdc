"""Fuzzing suite: hostile inputs for the assembler, binaries, simulator and command lines."""
