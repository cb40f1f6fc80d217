"""x86-64 machine code: operands, instruction forms (data), the encoder/assembler and its Intel-syntax text."""
from .operands import Reg, Mem, Imm, Label, Operand, REGS, GPR64, XMM, YMM, reg, gpr, vreg, resize
from .encode import Assembler, Instruction, EncodeError, select_form, encode_form
from .forms import Form, FORMS, BRANCHES, CONDITIONS, CMP_PREDICATES

__all__ = ["Reg", "Mem", "Imm", "Label", "Operand", "REGS", "GPR64", "XMM", "YMM", "reg", "gpr", "vreg", "resize",
           "Assembler", "Instruction", "EncodeError", "select_form", "encode_form", "Form", "FORMS", "BRANCHES",
           "CONDITIONS", "CMP_PREDICATES"]
