"""RDNA3 (gfx1100, wave32) machine code: decoder (decode.py), operand codes (operands.py), disassembler (disasm.py)."""
