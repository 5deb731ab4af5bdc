"""The compiler's error type."""
from __future__ import annotations


class CompileError(ValueError):
    """An op or its parameters cannot be compiled; the message names the argument and why."""
