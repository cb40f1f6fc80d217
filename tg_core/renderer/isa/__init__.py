"""The ISA-neutral machine layer: machine instructions on virtual registers (machine.py) and the target
description the register allocator (tg_core.codegen.lib.regalloc) is parameterized by (arch.py)."""
from tg_core.renderer.isa.arch import ArchContext, Frame
from tg_core.renderer.isa.machine import (
                                          CJUMP,
                                          JUMP,
                                          LABEL,
                                          MOVE,
                                          NORMAL,
                                          RET,
                                          FrameRef,
                                          Imm,
                                          Label,
                                          Mem,
                                          MFunction,
                                          MInst,
                                          Operand,
                                          PReg,
                                          View,
                                          VReg,
                                          label,
)

__all__ = ["ArchContext", "Frame", "CJUMP", "JUMP", "LABEL", "MOVE", "NORMAL", "RET", "FrameRef", "Imm", "Label",
           "MFunction", "MInst", "Mem", "Operand", "PReg", "View", "VReg", "label"]
