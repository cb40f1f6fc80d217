"""Operands of x86-64 instructions: registers (a data table), memory references, immediates and labels.

Register numbers are the hardware numbers (the low 3 bits go in ModRM/SIB/opcode, bit 3 in REX/VEX/EVEX,
bit 4, which only vector registers 16-31 have, in EVEX alone). k0-k7 are AVX-512's opmask registers. The 8-bit registers ah/ch/dh/bh are left out on purpose: they cannot be encoded together with a
REX prefix, and an instruction selector never needs them.
"""
from __future__ import annotations

from dataclasses import dataclass

# The register file as data: (names by width in bytes, hardware number).
_GPR_NAMES: tuple[tuple[str, str, str, str], ...] = (
    # 64-bit  32-bit  16-bit  8-bit
    ("rax", "eax", "ax", "al"), ("rcx", "ecx", "cx", "cl"), ("rdx", "edx", "dx", "dl"), ("rbx", "ebx", "bx", "bl"),
    ("rsp", "esp", "sp", "spl"), ("rbp", "ebp", "bp", "bpl"), ("rsi", "esi", "si", "sil"), ("rdi", "edi", "di", "dil"),
) + tuple((f"r{n}", f"r{n}d", f"r{n}w", f"r{n}b") for n in range(8, 16))
_GPR_WIDTHS = (8, 4, 2, 1)
_VECTOR_WIDTHS = {"xmm": 16, "ymm": 32, "zmm": 64}
_VECTOR_CLASSES = {size: cls for cls, size in _VECTOR_WIDTHS.items()}


@dataclass(frozen=True)
class Reg:
    """A physical register. cls is "gpr", "xmm", "ymm", "zmm", "k" (an opmask) or "rip" (only valid as a memory
    base)."""
    name: str
    num: int
    size: int  # bytes
    cls: str

    @property
    def ext(self) -> int:
        """Bit 3 of the number: set for r8-r15 and xmm8-xmm15, carried by REX.R/X/B, VEX or EVEX."""
        return (self.num >> 3) & 1

    @property
    def hi(self) -> int:
        """Bit 4 of the number: set for xmm16-31/ymm16-31/zmm16-31, which only EVEX encodes."""
        return self.num >> 4

    @property
    def low(self) -> int:
        return self.num & 7

    @property
    def needs_rex(self) -> bool:
        """spl, bpl, sil and dil exist only with a REX prefix (without one these numbers mean ah..bh)."""
        return self.cls == "gpr" and self.size == 1 and 4 <= self.num <= 7

    def __str__(self) -> str:
        return self.name


def _build_table() -> dict[str, Reg]:
    table: dict[str, Reg] = {}
    for num, names in enumerate(_GPR_NAMES):
        for name, width in zip(names, _GPR_WIDTHS):
            table[name] = Reg(name, num, width, "gpr")
    for num in range(32):
        for cls, size in _VECTOR_WIDTHS.items():
            table[f"{cls}{num}"] = Reg(f"{cls}{num}", num, size, cls)
    for num in range(8):
        table[f"k{num}"] = Reg(f"k{num}", num, 8, "k")
    table["rip"] = Reg("rip", 5, 8, "rip")
    return table


REGS: dict[str, Reg] = _build_table()
GPR64: tuple[Reg, ...] = tuple(REGS[names[0]] for names in _GPR_NAMES)
XMM: tuple[Reg, ...] = tuple(REGS[f"xmm{n}"] for n in range(16))
YMM: tuple[Reg, ...] = tuple(REGS[f"ymm{n}"] for n in range(16))
ZMM: tuple[Reg, ...] = tuple(REGS[f"zmm{n}"] for n in range(32))
KREGS: tuple[Reg, ...] = tuple(REGS[f"k{n}"] for n in range(8))


def reg(name: str) -> Reg:
    """The register called name ("rax", "r9d", "sil", "xmm3", "ymm15", "rip")."""
    try: return REGS[name]
    except KeyError: raise ValueError(f"unknown x86-64 register {name!r} (allowed: {', '.join(REGS)})") from None


def gpr(num: int, size: int = 8) -> Reg:
    """General purpose register number num (0..15) viewed at width size (1, 2, 4 or 8 bytes)."""
    if not 0 <= num < 16 or size not in _GPR_WIDTHS:
        raise ValueError(f"no general purpose register {num} of {size} bytes")
    return REGS[_GPR_NAMES[num][_GPR_WIDTHS.index(size)]]


def vreg(num: int, size: int = 16) -> Reg:
    """Vector register number num (0..31; 16-31 need EVEX encodings): xmm for size 16, ymm for 32, zmm for 64."""
    if not 0 <= num < 32 or size not in _VECTOR_CLASSES:
        raise ValueError(f"no vector register {num} of {size} bytes (numbers 0..31, sizes 16, 32 or 64)")
    return REGS[f"{_VECTOR_CLASSES[size]}{num}"]


def kreg(num: int) -> Reg:
    """AVX-512 opmask register k0..k7 (k0 as a write mask means "no mask")."""
    if not 0 <= num < 8: raise ValueError(f"no opmask register k{num} (k0..k7)")
    return REGS[f"k{num}"]


def resize(r: Reg, size: int) -> Reg:
    """The same hardware register at another width (eax -> rax, xmm1 -> ymm1 -> zmm1)."""
    return gpr(r.num, size) if r.cls == "gpr" else vreg(r.num, size)


def _as_reg(r: Reg | str | None) -> Reg | None:
    return reg(r) if isinstance(r, str) else r


@dataclass(frozen=True)
class Label:
    """A position in the code (jump target) or in the assembler's data section (rip-relative constant)."""
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Mem:
    """[base + index*scale + disp], accessing size bytes (0 = no size: lea).

    An xmm/ymm index makes a gather's vector of addresses (VSIB); size is then the bytes all lanes read.
    bcst (EVEX embedded broadcast, `dword ptr [rax]{1to16}`): one element of size bytes read for every lane.

    base may be a 64-bit register, "rip" or None (absolute disp32). With base rip, disp may be a Label: the
    assembler fills in the distance to it when it places the code.
    """
    base: Reg | None
    index: Reg | None = None
    scale: int = 1
    disp: int | Label = 0
    size: int = 0
    bcst: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _as_reg(self.base))
        object.__setattr__(self, "index", _as_reg(self.index))
        b, i = self.base, self.index
        if b is not None and not (b.cls == "rip" or (b.cls == "gpr" and b.size == 8)):
            raise ValueError(f"memory base must be a 64-bit register or rip, got {b}")
        if i is not None:
            if not (i.cls == "gpr" and i.size == 8 or i.cls in ("xmm", "ymm", "zmm")):
                raise ValueError(f"memory index must be a 64-bit register (or xmm/ymm/zmm for a gather), got {i}")
            if i.name == "rsp": raise ValueError("rsp cannot be a memory index (its number means 'no index' in SIB)")
            if b is not None and b.cls == "rip": raise ValueError("a rip-relative address cannot have an index")
        if self.scale not in (1, 2, 4, 8): raise ValueError(f"memory scale must be 1, 2, 4 or 8, got {self.scale}")
        if isinstance(self.disp, Label):
            if b is None or b.cls != "rip": raise ValueError("a label displacement needs base rip")
        elif not -2**31 <= self.disp < 2**31:
            raise ValueError(f"displacement {self.disp} does not fit in a signed 32-bit field")
        if self.size not in (0, 1, 2, 4, 8, 16, 32, 64):
            raise ValueError(f"memory access size must be 0, 1, 2, 4, 8, 16, 32 or 64 bytes, got {self.size}")
        if self.bcst and self.size not in (4, 8):
            raise ValueError(f"a broadcast memory operand reads one 4- or 8-byte element, got size {self.size}")

    def with_size(self, size: int) -> Mem:
        return Mem(self.base, self.index, self.scale, self.disp, size)


@dataclass(frozen=True)
class Imm:
    """An immediate. size 0 lets the encoder pick the shortest form that holds value; 1/2/4/8 asks for that width."""
    value: int
    size: int = 0
    bcst: bool = False

    def __post_init__(self) -> None:
        if self.size not in (0, 1, 2, 4, 8):
            raise ValueError(f"immediate size must be 0, 1, 2, 4 or 8 bytes, got {self.size}")


Operand = Reg | Mem | Imm | Label
