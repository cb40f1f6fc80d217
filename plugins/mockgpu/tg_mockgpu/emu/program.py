"""A loaded code object as executors by address: each instruction is decoded (F1's decoder) and compiled into a
small closure the first time any wave reaches it, then reused for every later wave and dispatch.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from tg_mockgpu.emu.machine import EmulatorError
from tg_mockgpu.emu.memops import compile_ds, compile_smem, compile_vmem
from tg_mockgpu.emu.salu import NEXT, compile_control, compile_salu
from tg_mockgpu.emu.valu import compile_valu, compile_vopd
from tg_mockgpu.emu.vop3p import DOT16, compile_dot2acc, compile_dot16, compile_pk_fmac, compile_vop3p
from tg_mockgpu.rdna3.decode import DecodeError, Inst, decode
from tg_mockgpu.rdna3.disasm import disasm

VALU_ENCODINGS = ("VOP1", "VOP2", "VOP3", "VOP3SD", "VOPC")
# cache invalidations (the fences around barriers emit them): memory here is coherent, there is nothing to drop
CACHE_INVALIDATES = {"buffer_gl0_inv", "buffer_gl1_inv"}
SALU_ENCODINGS = ("SOP1", "SOP2", "SOPC", "SOPK")


@dataclass(frozen=True)
class Compiled:
    fn: Callable
    size: int
    flow: str          # salu.NEXT / JUMP / END / BARRIER
    inst: Inst
    where: str         # "<op> (<words>) at <address> in kernel <name>", for error messages


def describe(inst: Inst, image: bytes, offset: int, kernel: str) -> str:
    words = " ".join(f"0x{w:08X}" for w in struct.unpack_from(f"<{inst.size // 4}I", image, offset))
    try:
        text = disasm(inst)
    except Exception:   # an error message must not fail on an operand the disassembler cannot print
        text = inst.op
    return f"{text} ({words}) at {inst.addr:#x} in kernel {kernel}"


def compile_inst(inst: Inst, kernel: str) -> tuple[Callable, str]:
    """(executor, flow) of one instruction; KeyError when the instruction is not implemented."""
    enc = inst.enc
    if enc in ("SOPP", "SOP1", "SOPK"):
        ctl = compile_control(inst, kernel)
        if ctl is not None:
            return ctl
        if enc == "SOPP":
            raise KeyError(inst.op)
    if enc in SALU_ENCODINGS:
        return compile_salu(inst), NEXT
    if enc == "SMEM":
        return compile_smem(inst), NEXT
    if enc == "VOP2" and inst.op == "v_pk_fmac_f16":
        return compile_pk_fmac(inst), NEXT
    if enc == "VOP2" and inst.op == "v_dot2acc_f32_f16":
        return compile_dot2acc(inst), NEXT
    if enc == "VOP3" and inst.op in DOT16:
        return compile_dot16(inst), NEXT
    if enc in VALU_ENCODINGS:
        return compile_valu(inst), NEXT
    if enc == "VOP3P":
        return compile_vop3p(inst), NEXT
    if enc == "VOPD":
        assert inst.dual is not None, "the decoder names both halves of every VOPD"
        return compile_vopd(inst, *inst.dual), NEXT
    if enc == "DS":
        return compile_ds(inst), NEXT
    if enc in ("GLOBAL", "FLAT", "SCRATCH"):
        return compile_vmem(inst), NEXT
    if enc == "MUBUF" and inst.op in CACHE_INVALIDATES:
        return (lambda m, bt: None), NEXT
    raise KeyError(inst.op)


class Program:
    """The instructions of a code object loaded at GPU address `base` (image = its bytes)."""

    def __init__(self, image: bytes, base: int, kernel: str):
        self.image, self.base, self.kernel = image, base, kernel
        self.cache: dict[int, Compiled] = {}

    def at(self, pc: int) -> Compiled:
        c = self.cache.get(pc)
        if c is not None:
            return c
        off = pc - self.base
        if not 0 <= off < len(self.image) or pc & 3:
            raise EmulatorError(f"kernel {self.kernel} jumped to {pc:#x}, outside its code object "
                                f"[{self.base:#x}, {self.base + len(self.image):#x}) or unaligned")
        try:
            inst = decode(self.image, pc, off, self.kernel)
        except DecodeError as e:
            raise EmulatorError(f"cannot decode: {e}") from None
        where = describe(inst, self.image, off, self.kernel)
        try:
            fn, flow = compile_inst(inst, self.kernel)
        except KeyError:
            raise EmulatorError(f"unimplemented instruction {where}") from None
        except EmulatorError as e:
            raise EmulatorError(f"{e}: {where}") from None
        c = self.cache[pc] = Compiled(fn, inst.size, flow, inst, where)
        return c
