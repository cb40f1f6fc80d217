"""The machine-instruction model shared by ISA backends: what instruction selection produces and the register
allocator consumes.

An `MInst` is one target instruction (or a pseudo such as a label) whose operands are virtual registers
(`VReg`), register views (`View`: a register read or written at another width), immediates, memory
references and labels. Which register operands the instruction reads and writes is data on the instruction
(`reads`/`writes` operand positions; a position in both is a two-address, read-modify-write operand), so the
allocator needs no knowledge of the ISA. Control flow is explicit: labels, jumps (conditional or not) and
returns; loops are the back edges (a jump to an earlier label), from which the allocator derives loop depth.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field


@dataclass(frozen=True, eq=False)
class PReg:
    """A physical register: its name, its register class ("gpr", "vec", ...) and its hardware number. A target
    makes each once, so identity is equality (and hashing is cheap: the allocator hashes them constantly)."""
    name: str
    cls: str
    num: int

    def __str__(self) -> str:
        return self.name


_vreg_ids = itertools.count()


class VReg:
    """A virtual register of a class and a natural width in bytes (what a spill slot must hold).

    `fixed`: the physical register it must live in (ABI arguments, implicit operands like a divide's).
    `hint`: a register or vreg whose register is preferred (copies, two-address results).
    `remat`: an instruction without register sources that recomputes the value (a constant): a spilled
    rematerializable value is recomputed at each use instead of stored and reloaded."""
    __slots__ = ("id", "cls", "width", "fixed", "hint", "remat")

    def __init__(self, cls: str, width: int, fixed: PReg | None = None, hint: VReg | PReg | None = None):
        self.id, self.cls, self.width, self.fixed, self.hint = next(_vreg_ids), cls, width, fixed, hint
        self.remat: MInst | None = None
        if fixed is not None and fixed.cls != cls:
            raise ValueError(f"a {cls} virtual register cannot be fixed to {fixed.cls} register {fixed}")

    def __repr__(self) -> str:
        return f"%{self.cls[0]}{self.id}" + (f"<{self.fixed}>" if self.fixed else "")


Reg = VReg | PReg


@dataclass(frozen=True)
class View:
    """Register `reg` accessed at `size` bytes (eax of rax, al of rax): the same register to the allocator."""
    reg: Reg
    size: int


@dataclass(frozen=True)
class Imm:
    value: int
    size: int = 0  # 0: the encoder picks


@dataclass(frozen=True)
class FrameRef:
    """A place in the stack frame, resolved once the frame is laid out: `kind` "slot" (spill slot at byte
    `index` of the spill area), "local" (byte `index` of the function's stack arrays) or "arg" (incoming
    stack argument number `index`)."""
    kind: str
    index: int


@dataclass(frozen=True)
class Mem:
    """[base + index*scale + disp] of `size` bytes; base/index are registers, `frame` a frame place (then
    base is None until the frame is laid out), `data` the name of a constant in the code's data section;
    `bcst`: one element of `size` bytes read for every lane of the instruction's vector (x86's EVEX embedded
    broadcast)."""
    base: Reg | None = None
    index: Reg | None = None
    scale: int = 1
    disp: int = 0
    size: int = 0
    frame: FrameRef | None = None
    data: str | None = None
    bcst: bool = False

    def regs(self) -> tuple[Reg, ...]:
        return tuple(r for r in (self.base, self.index) if r is not None)


@dataclass(frozen=True)
class Label:
    name: str


Operand = VReg | PReg | View | Imm | Mem | Label

# instruction kinds: what the allocator must know about control flow and copies
NORMAL, LABEL, JUMP, CJUMP, RET, MOVE = "normal", "label", "jump", "cjump", "ret", "move"


@dataclass(eq=False)
class MInst:
    """`op operands...`; `writes`/`reads` are positions of register operands written/read (registers inside
    memory operands are always read); `implicit_writes`/`implicit_reads` are registers the instruction
    touches without naming them (a divide's rax/rdx). `kind` says what it is to control flow; `target` is a
    jump's label. A MOVE copies operand 1 into operand 0 (the allocator coalesces and may drop it)."""
    op: str
    operands: tuple[Operand, ...] = ()
    writes: tuple[int, ...] = ()
    reads: tuple[int, ...] = ()
    kind: str = NORMAL
    target: str | None = None
    implicit_writes: tuple[Reg, ...] = ()
    implicit_reads: tuple[Reg, ...] = ()
    comment: str = field(default="", compare=False)
    _uses: tuple[Reg, ...] = field(init=False, repr=False, compare=False)
    _defs: tuple[Reg, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # computed once: the allocator and dead-code passes ask for them many times
        uses: list[Reg] = []
        for i, o in enumerate(self.operands):
            if isinstance(o, Mem):
                uses.extend(o.regs())
            elif i in self.reads and not isinstance(o, (Imm, Label)):
                uses.append(base_reg(o))
        self._uses = (*uses, *self.implicit_reads)
        self._defs = (*(base_reg(self.operands[i]) for i in self.writes), *self.implicit_writes)

    def used_regs(self) -> tuple[Reg, ...]:
        """Registers read, in operand order (implicit ones last); a read position may hold an immediate."""
        return self._uses

    def defined_regs(self) -> tuple[Reg, ...]:
        return self._defs

    def __str__(self) -> str:
        if self.kind == LABEL:
            return f"{self.target}:"
        text = f"{self.op} " + ", ".join(_fmt(o) for o in self.operands)
        return text + (f"  ; {self.comment}" if self.comment else "")


def base_reg(o: Operand) -> Reg:
    """The register of a register operand (a View's underlying register)."""
    if isinstance(o, View):
        return o.reg
    if isinstance(o, (VReg, PReg)):
        return o
    raise TypeError(f"operand {o!r} is not a register")


def _fmt(o: Operand) -> str:
    if isinstance(o, View):
        return f"{_fmt(o.reg)}:{o.size}"
    if isinstance(o, Mem):
        parts = [str(p) for p in (o.base, o.index) if p is not None]
        if o.index is not None and o.scale != 1:
            parts[-1] += f"*{o.scale}"
        if o.frame is not None:
            parts.append(f"{o.frame.kind}{o.frame.index}")
        if o.data is not None:
            parts.append(o.data)
        if o.disp or not parts:
            parts.append(str(o.disp))
        return f"[{' + '.join(parts)}]:{o.size}"
    if isinstance(o, Imm):
        return str(o.value)
    if isinstance(o, Label):
        return o.name
    return repr(o) if isinstance(o, VReg) else str(o)


def label(name: str) -> MInst:
    return MInst("label", kind=LABEL, target=name)


@dataclass
class MFunction:
    """A function body of machine instructions, entry first; the allocator adds the prologue and epilogue.
    `local_bytes`: the stack arrays the body addresses as FrameRef("local", offset)."""
    name: str
    insts: list[MInst]
    local_bytes: int = 0

    def __str__(self) -> str:
        return "\n".join([f"{self.name}:"] + [("" if i.kind == LABEL else "  ") + str(i) for i in self.insts])
