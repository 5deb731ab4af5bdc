"""NNP-1 instruction set as data: load it, encode and decode words."""
from .encoding import NONE, DecodeError, EncodeError, decode, decode_program, encode
from .model import Field, Instruction, Isa, IsaError, Kind, Operand, load_isa

__all__ = ["NONE", "DecodeError", "EncodeError", "decode", "decode_program", "encode",
           "Field", "Instruction", "Isa", "IsaError", "Kind", "Operand", "load_isa"]
from .layout import LayoutError, compose, from_stored, parse_layout, stored_shape, to_stored
from .program import BinaryError, Buffer, Program, Symbol

__all__ += ["LayoutError", "compose", "from_stored", "parse_layout", "stored_shape", "to_stored",
            "BinaryError", "Buffer", "Program", "Symbol"]
