"""The System V x86-64 ABI as the register allocator's target description: registers, the callee-saved set,
spill slots and the frame.

Frame: callee-saved registers the function uses are pushed at entry, then one `sub rsp, N` reserves the
spill area (N keeps rsp 16-byte aligned); before each return `add rsp, N` and the pops undo it. There is
no frame pointer: rbp is an ordinary callee-saved register, and frame places are addressed from rsp.
Incoming stack arguments (the seventh integer argument on) sit above the return address. A function with
stack arrays (packed panels) instead keeps its entry rsp in rbp (not allocated then) and rounds rsp down to
64 bytes, so its arrays start on a cache line; stack arguments are then addressed from rbp.
"""
from __future__ import annotations

from collections.abc import Sequence

from tg_core.plugin_api import MOVE, ArchContext, Frame, Imm, Mem, MInst, PReg, View

_GPR_NAMES = ("rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi") + tuple(f"r{n}" for n in range(8, 16))
GPR = {name: PReg(name, "gpr", num) for num, name in enumerate(_GPR_NAMES)}
VEC = tuple(PReg(f"xmm{n}", "vec", n) for n in range(16))
# AVX-512 opmasks: k0 cannot be a write mask (its number means "no mask"), so k1-k7 are allocated
MASK = tuple(PReg(f"k{n}", "mask", n) for n in range(1, 8))
# zmm vectors (AVX-512 code): registers 16-31, which only EVEX encodes, first, then the xmm0-15 that scalar and
# VEX code also use (the allocator keeps the two classes off each other's registers): a VEX instruction never
# meets 16-31, and a register tile has all 32 (a 14x32 tile's 28 accumulators, two column vectors, a broadcast)
ZVEC = tuple(PReg(f"xmm{n}", "zvec", n) for n in range(16, 32)) + VEC
RSP, RBP = GPR["rsp"], GPR["rbp"]
ARG_REGS = tuple(GPR[n] for n in ("rdi", "rsi", "rdx", "rcx", "r8", "r9"))
CALLEE_SAVED = frozenset(GPR[n] for n in ("rbx", "rbp", "r12", "r13", "r14", "r15"))
# caller-saved first: a callee-saved register costs a push and a pop, so it is taken only under pressure
_GPR_ORDER = tuple(GPR[n] for n in ("rax", "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11",
                                    "rbx", "rbp", "r12", "r13", "r14", "r15"))


def gpr_move(dst: PReg | View, src: PReg | View) -> MInst:
    return MInst("mov", (dst, src), writes=(0,), reads=(1,), kind=MOVE)


def vec_move(dst: PReg | View, src: PReg | View) -> MInst:
    return MInst("vmovaps", (dst, src), writes=(0,), reads=(1,), kind=MOVE)


_VEC_STORE = {4: "vmovss", 8: "vmovsd", 16: "vmovups", 32: "vmovups", 64: "vmovups"}


class X86Frame(Frame):
    def __init__(self, saved: Sequence[PReg], spill_bytes: int, local_bytes: int = 0):
        pushed = 8 * len(saved)
        self.fp = local_bytes > 0 and GPR["rbp"] not in saved
        if self.fp:
            # stack arrays (packed panels, read by 32-byte loads) sit on a 64-byte boundary so that no load splits
            # a cache line: rbp keeps the entry rsp (for the epilogue and the stack arguments), rsp is rounded down
            self.local_base = -(-spill_bytes // 64) * 64
            size = -(-(self.local_base + local_bytes) // 64) * 64
            self.arg_base = 16  # [rbp]: the saved rbp, then the return address
            pro = [MInst("push", (RBP,), reads=(0,)), MInst("mov", (RBP, RSP), writes=(0,), reads=(1,))]
            pro += [MInst("push", (r,), reads=(0,)) for r in saved]
            pro += [MInst("sub", (RSP, Imm(size)), writes=(0,), reads=(0,)),
                    MInst("and", (RSP, Imm(-64)), writes=(0,), reads=(0,))]
            epi = [MInst("lea", (RSP, Mem(base=RBP, disp=-pushed, size=8)), writes=(0,))]
            epi += [MInst("pop", (r,), writes=(0,)) for r in reversed(saved)]
            epi.append(MInst("pop", (RBP,), writes=(0,)))
            super().__init__(pro, epi, size)
            return
        # stack arrays above the spill slots, 32-byte aligned relative to rsp
        self.local_base = -(-spill_bytes // 32) * 32
        # at entry rsp is 8 past a 16-byte boundary (the return address); keep rsp aligned inside
        size = -(-(self.local_base + local_bytes if local_bytes else spill_bytes) // 16) * 16
        if size and (8 + pushed + size) % 16:
            size += 8
        self.arg_base = size + pushed + 8  # the first stack argument, above the pushes and the return address
        pro = [MInst("push", (r,), reads=(0,)) for r in saved]
        epi = []
        if size:
            pro.append(MInst("sub", (RSP, Imm(size)), writes=(0,), reads=(0,)))
            epi.append(MInst("add", (RSP, Imm(size)), writes=(0,), reads=(0,)))
        epi += [MInst("pop", (r,), writes=(0,)) for r in reversed(saved)]
        super().__init__(pro, epi, size)

    def resolve(self, mem: Mem) -> Mem:
        ref = mem.frame
        assert ref is not None
        if ref.kind == "arg" and self.fp:
            return Mem(base=RBP, disp=self.arg_base + 8 * ref.index + mem.disp, size=mem.size, bcst=mem.bcst)
        disp = {"slot": ref.index, "local": self.local_base + ref.index, "arg": self.arg_base + 8 * ref.index}[ref.kind]
        return Mem(base=RSP, index=mem.index, scale=mem.scale, disp=disp + mem.disp, size=mem.size, bcst=mem.bcst)


class X86Arch(ArchContext):
    """System V x86-64. With `frame_pointer` (a function with stack arrays) rbp is not allocated: the frame
    keeps the entry stack pointer in it while rsp is aligned to 64 bytes."""
    callee_saved = CALLEE_SAVED

    def __init__(self, frame_pointer: bool = False):
        gpr = tuple(r for r in _GPR_ORDER if r is not RBP) if frame_pointer else _GPR_ORDER
        self.reg_classes = {"gpr": gpr, "vec": VEC, "zvec": ZVEC, "mask": MASK}

    def slot_size(self, cls: str, width: int) -> int:
        return width

    def move(self, dst: PReg, src: PReg, width: int) -> MInst:
        if dst.cls == "mask":
            return MInst("kmovw", (dst, src), writes=(0,), reads=(1,), kind=MOVE)
        if dst.cls == "gpr":
            return gpr_move(dst, src)
        return vec_move(View(dst, width), View(src, width)) if width > 16 else vec_move(dst, src)

    def spill(self, src: PReg, slot: Mem, width: int) -> MInst:
        if src.cls == "mask":
            return MInst("kmovw", (slot, src), reads=(1,))
        if src.cls == "gpr":
            return MInst("mov", (slot, View(src, width)), reads=(1,))
        return MInst(_VEC_STORE[width], (slot, View(src, max(width, 16))), reads=(1,))

    def fill(self, dst: PReg, slot: Mem, width: int) -> MInst:
        if dst.cls == "mask":
            return MInst("kmovw", (dst, slot), writes=(0,))
        if dst.cls == "gpr":
            return MInst("mov", (View(dst, width), slot), writes=(0,))
        return MInst(_VEC_STORE[width], (View(dst, max(width, 16)), slot), writes=(0,))

    def frame(self, saved: Sequence[PReg], spill_bytes: int, local_bytes: int = 0) -> X86Frame:
        return X86Frame(saved, spill_bytes, local_bytes)
