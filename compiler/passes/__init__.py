"""Lowering passes over compiler.ir, each a function that can be run and tested alone."""
