"""x86-64 machine code: operands, instruction forms (data), the encoder/assembler and its Intel-syntax text."""
from .encode import Assembler, EncodeError, Instruction, encode_form, select_form
from .forms import BRANCHES, CMP_PREDICATES, CONDITIONS, FORMS, Form
from .operands import GPR64, REGS, XMM, YMM, Imm, Label, Mem, Operand, Reg, gpr, reg, resize, vreg

__all__ = ["Reg", "Mem", "Imm", "Label", "Operand", "REGS", "GPR64", "XMM", "YMM", "reg", "gpr", "vreg", "resize",
           "Assembler", "Instruction", "EncodeError", "select_form", "encode_form", "Form", "FORMS", "BRANCHES",
           "CONDITIONS", "CMP_PREDICATES"]
