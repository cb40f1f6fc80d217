"""tg-amd's own ELF64 reader for AMDGPU code objects (the relocatable objects LLVM emits; amd.md 1.1-1.3).

`read_elf` parses the headers, sections, symbols, relocations and the AMDGPU metadata note. `load_code_object`
turns an object into a `CodeObject`: the allocated sections placed one after another from offset 0 (each at
its alignment; `.text` asks for 256), the position-independent relocations applied (the descriptor's
`kernel_code_entry_byte_offset` is one), the absolute ones kept for the load address, and every kernel found
by its `<name>.kd` descriptor symbol. Kernels that need more than gfx1100 has are refused with the numbers.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from tg_amd.interface import DESCRIPTOR_SIZE, CodeObject, KernelDescriptor, KernelSymbol, Relocation
from tg_amd.msgpack import unpackb


class ELFError(ValueError):
    """The bytes are not an AMDGPU code object tg-amd can load (the message says what was found)."""


class KernelResourceError(ValueError):
    """A kernel needs more of a resource (LDS, scratch, registers) than the target has."""


EM_AMDGPU = 224
ET_REL, ET_DYN = 1, 3
SHT_PROGBITS, SHT_SYMTAB, SHT_STRTAB, SHT_RELA, SHT_NOTE, SHT_NOBITS, SHT_REL = 1, 2, 3, 4, 7, 8, 9
SHF_ALLOC = 0x2
SHN_UNDEF, SHN_ABS = 0, 0xFFF1
STT_OBJECT, STT_FUNC, STT_SECTION = 1, 2, 3
NT_AMDGPU_METADATA = 32
# e_flags & 0xFF (EF_AMDGPU_MACH) for the RDNA3 targets
MACH = {0x41: "gfx1100", 0x42: "gfx1101", 0x43: "gfx1102", 0x44: "gfx1103", 0x55: "gfx1150", 0x56: "gfx1151"}

# relocation types (amd.md 1.3): name, bytes written, whether the result depends on the load address
R_AMDGPU = {0: ("NONE", 0, False), 1: ("ABS32_LO", 4, True), 2: ("ABS32_HI", 4, True), 3: ("ABS64", 8, True),
            4: ("REL32", 4, False), 5: ("REL64", 8, False), 6: ("ABS32", 4, True), 10: ("REL32_LO", 4, False),
            11: ("REL32_HI", 4, False), 13: ("RELATIVE64", 8, True), 16: ("REL16", 2, False)}


@dataclass(frozen=True)
class Section:
    index: int
    name: str
    type: int
    flags: int
    addr: int
    offset: int
    size: int
    link: int
    info: int
    addralign: int
    entsize: int
    data: bytes


@dataclass(frozen=True)
class Symbol:
    name: str
    value: int
    size: int
    type: int   # STT_*
    bind: int   # STB_*
    other: int  # visibility
    shndx: int


@dataclass(frozen=True)
class Rela:
    section: int   # index of the section it patches
    offset: int
    type: int
    symbol: int    # index into the symbol table
    addend: int


@dataclass(frozen=True)
class ELF:
    type: int
    machine: int
    flags: int
    osabi: int
    abiversion: int
    sections: list[Section]
    symbols: list[Symbol]
    relocations: list[Rela]
    metadata: dict[str, Any] | None  # the AMDGPU note's msgpack map (amdhsa.kernels ...)

    @property
    def arch(self) -> str:
        mach = self.flags & 0xFF
        return MACH.get(mach, f"mach {mach:#x}")

    def section(self, name: str) -> Section:
        for s in self.sections:
            if s.name == name:
                return s
        raise KeyError(f"no section {name!r}; sections: {', '.join(s.name for s in self.sections if s.name)}")

    def symbol(self, name: str) -> Symbol:
        for s in self.symbols:
            if s.name == name:
                return s
        raise KeyError(f"no symbol {name!r}")

    def display_name(self, sym: Symbol) -> str:
        """The symbol's name; a section symbol (which has none) is called by its section's name, as readelf does."""
        return self.sections[sym.shndx].name if sym.type == STT_SECTION and not sym.name else sym.name

    def kernel_metadata(self, name: str) -> dict[str, Any]:
        for k in (self.metadata or {}).get("amdhsa.kernels", []):
            if k.get(".name") == name:
                return k
        return {}


def _cstr(table: bytes, at: int) -> str:
    end = table.find(b"\0", at)
    return table[at:end if end >= 0 else len(table)].decode()


def read_elf(data: bytes) -> ELF:
    """Parse an ELF64 little-endian AMDGPU object."""
    data = bytes(data)
    if len(data) < 64 or data[:4] != b"\x7fELF":
        raise ELFError(f"not an ELF file (starts with {data[:4]!r})")
    if data[4] != 2 or data[5] != 1:
        raise ELFError(f"not a 64-bit little-endian ELF (class {data[4]}, data encoding {data[5]})")
    osabi, abiversion = data[7], data[8]
    (e_type, machine, _version, _entry, _phoff, shoff, flags, _ehsize, _phentsize, _phnum, shentsize, shnum,
     shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", data, 16)
    if machine != EM_AMDGPU:
        raise ELFError(f"e_machine is {machine}, not EM_AMDGPU ({EM_AMDGPU})")
    if e_type not in (ET_REL, ET_DYN):
        raise ELFError(f"e_type is {e_type}; code objects are ET_REL (1) or ET_DYN (3)")
    if shentsize != 64 or shoff + shnum * 64 > len(data):
        raise ELFError(f"section headers ({shnum} x {shentsize} bytes at {shoff}) do not fit the {len(data)}-byte file")
    raw = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * 64) for i in range(shnum)]
    names = data[raw[shstrndx][4]:raw[shstrndx][4] + raw[shstrndx][5]] if shstrndx < shnum else b""
    sections = []
    for i, (nm, typ, fl, addr, off, size, link, info, align, ent) in enumerate(raw):
        body = b"" if typ == SHT_NOBITS else data[off:off + size]
        if typ != SHT_NOBITS and off + size > len(data):
            raise ELFError(f"section {i} ({size} bytes at {off}) runs past the end of the file")
        sections.append(Section(i, _cstr(names, nm), typ, fl, addr, off, size, link, info, align, ent, body))
    symbols: list[Symbol] = []
    relocations: list[Rela] = []
    metadata = None
    for s in sections:
        if s.type == SHT_SYMTAB:
            strtab = sections[s.link].data
            for at in range(0, s.size, 24):
                nm, info, other, shndx, value, size = struct.unpack_from("<IBBHQQ", s.data, at)
                symbols.append(Symbol(_cstr(strtab, nm), value, size, info & 0xF, info >> 4, other & 3, shndx))
        elif s.type == SHT_RELA:
            for at in range(0, s.size, 24):
                off, info, addend = struct.unpack_from("<QQq", s.data, at)
                relocations.append(Rela(s.info, off, info & 0xFFFFFFFF, info >> 32, addend))
        elif s.type == SHT_REL:
            raise ELFError(f"section {s.name} has REL relocations; AMDGPU objects use RELA")
        elif s.type == SHT_NOTE:
            metadata = _amdgpu_note(s.data) or metadata
    return ELF(e_type, machine, flags, osabi, abiversion, sections, symbols, relocations, metadata)


def _amdgpu_note(data: bytes) -> dict[str, Any] | None:
    at = 0
    while at + 12 <= len(data):
        namesz, descsz, typ = struct.unpack_from("<III", data, at)
        name = data[at + 12:at + 12 + namesz].rstrip(b"\0")
        desc_at = at + 12 + (namesz + 3) // 4 * 4
        if name == b"AMDGPU" and typ == NT_AMDGPU_METADATA:
            return unpackb(data[desc_at:desc_at + descsz])
        at = desc_at + (descsz + 3) // 4 * 4
    return None


# ---- loading --------------------------------------------------------------------------------------------

def _write(image: bytearray, at: int, size: int, value: int, what: str) -> None:
    if at < 0 or at + size > len(image):
        raise ELFError(f"{what}: writes {size} bytes at image offset {at}, outside the {len(image)}-byte image")
    image[at:at + size] = (value & ((1 << 8 * size) - 1)).to_bytes(size, "little")


def _relocated(typ: int, s_plus_a: int, place: int) -> int:
    """The value a position-independent relocation writes at `place`."""
    if typ in (4, 5):
        return s_plus_a - place
    if typ == 10:
        return (s_plus_a - place) & 0xFFFFFFFF
    if typ == 11:
        return (s_plus_a - place) >> 32
    if typ == 16:
        return ((s_plus_a - place) - 4) // 4
    raise AssertionError(typ)


def apply_absolute(image: bytes, relocations: tuple[Relocation, ...], base: int) -> bytes:
    """`image` with its load-address-dependent relocations applied for the load address `base`."""
    out = bytearray(image)
    for r in relocations:
        v = r.value + base
        value = {1: v & 0xFFFFFFFF, 2: v >> 32, 3: v, 6: v, 13: v}[r.type]
        _write(out, r.offset, R_AMDGPU[r.type][1], value, f"relocation {R_AMDGPU[r.type][0]}")
    return bytes(out)


def load_code_object(data: bytes, limits: Limits | None = None) -> CodeObject:
    """The loadable image of an AMDGPU object with every kernel it defines (see the module docstring)."""
    elf = read_elf(data)
    placed: dict[int, int] = {}  # section index -> image offset
    end = 0
    for s in elf.sections:
        if s.flags & SHF_ALLOC and s.type in (SHT_PROGBITS, SHT_NOBITS) and s.size:
            align = max(s.addralign, 1)
            end = (end + align - 1) // align * align
            placed[s.index] = end
            end += s.size
    image = bytearray(end)
    for idx, at in placed.items():
        s = elf.sections[idx]
        if s.type == SHT_PROGBITS:
            image[at:at + s.size] = s.data

    def address(sym: Symbol, what: str) -> int:
        if sym.shndx == SHN_ABS:
            return sym.value
        if sym.shndx == SHN_UNDEF:
            raise ELFError(f"{what} refers to the undefined symbol {sym.name!r}; code objects must be self-contained")
        if sym.shndx not in placed:
            raise ELFError(f"{what} refers to {sym.name!r} in section {elf.sections[sym.shndx].name}, "
                           "which is not loaded")
        return placed[sym.shndx] + sym.value

    absolute = []
    for r in elf.relocations:
        if r.section not in placed:
            continue  # relocations of sections that are not loaded (debug info) do not matter
        if r.type not in R_AMDGPU:
            raise ELFError(f"relocation type {r.type} at {elf.sections[r.section].name}+{r.offset:#x} is not "
                           f"supported; tg-amd applies {', '.join(f'{n} ({t})' for t, (n, _, _) in R_AMDGPU.items())}")
        name, size, is_abs = R_AMDGPU[r.type]
        if r.type == 0:
            continue
        what = f"relocation R_AMDGPU_{name} at {elf.sections[r.section].name}+{r.offset:#x}"
        place = placed[r.section] + r.offset
        s_plus_a = (address(elf.symbols[r.symbol], what) if r.symbol else 0) + r.addend
        if r.type == 13:  # B + A: the symbol plays no part
            s_plus_a = r.addend
        if is_abs:
            absolute.append(Relocation(place, r.type, s_plus_a))
            _write(image, place, size, 0, what)  # checked now, filled in at load time
        else:
            _write(image, place, size, _relocated(r.type, s_plus_a, place), what)

    kernels: dict[str, KernelSymbol] = {}
    for sym in elf.symbols:
        if not (sym.name.endswith(".kd") and sym.type == STT_OBJECT):
            continue
        name = sym.name[:-3]
        if sym.size != DESCRIPTOR_SIZE:
            raise ELFError(f"descriptor {sym.name} is {sym.size} bytes, not {DESCRIPTOR_SIZE}")
        at = address(sym, f"descriptor {sym.name}")
        desc = KernelDescriptor.from_bytes(bytes(image[at:at + DESCRIPTOR_SIZE]))
        code = at + desc.kernel_code_entry_byte_offset
        fn = next((s for s in elf.symbols if s.name == name and s.type == STT_FUNC), None)
        if fn is not None and address(fn, f"kernel {name}") != code:
            raise ELFError(f"kernel {name}: the descriptor's entry offset leads to {code:#x}, the symbol is at "
                           f"{address(fn, name):#x}")
        if not 0 <= code < len(image) or code % 256:
            raise ELFError(f"kernel {name}: code at image offset {code:#x} is outside the image or not "
                           "256-byte aligned")
        kernels[name] = KernelSymbol(name, code, fn.size if fn is not None else 0, at, desc, elf.kernel_metadata(name))
        check_resources(name, desc, elf.kernel_metadata(name), limits or GFX1100)
    if not kernels:
        raise ELFError("the object defines no kernel (no <name>.kd descriptor symbol)")
    return CodeObject(elf.arch, bytes(image), kernels, tuple(absolute))


# ---- resource limits ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Limits:
    """What one kernel may use on a target."""
    lds_bytes: int           # per workgroup
    scratch_bytes: int       # per work-item
    vgprs: int               # per work-item (wave32)
    sgprs: int               # per wave, VCC included
    user_sgprs: int


# gfx1100: 64 KiB LDS per workgroup; 256 VGPRs per lane in wave32; 106 SGPRs plus VCC (the metadata's
# .sgpr_count includes VCC, so 108); 16 user SGPRs (a 5-bit field
# the hardware caps at 16 on gfx11). Scratch: COMPUTE_TMPRING_SIZE.WAVESIZE is a 15-bit count of 256-byte
# units per wave, so a wave32 work-item may have at most 32767 * 256 / 32 bytes.
GFX1100 = Limits(lds_bytes=65536, scratch_bytes=32767 * 256 // 32, vgprs=256, sgprs=108, user_sgprs=16)


def check_resources(name: str, desc: KernelDescriptor, meta: dict[str, Any], limits: Limits) -> None:
    """Raise KernelResourceError naming every resource kernel `name` needs beyond `limits`."""
    need = {"LDS bytes per workgroup": (desc.group_segment_fixed_size, limits.lds_bytes),
            "scratch bytes per work-item": (desc.private_segment_fixed_size, limits.scratch_bytes),
            "VGPRs per work-item": (max(desc.vgprs(), meta.get(".vgpr_count", 0)), limits.vgprs),
            "SGPRs": (meta.get(".sgpr_count", 0), limits.sgprs),
            "user SGPRs": (desc.user_sgpr_count, limits.user_sgprs)}
    over = [f"{what}: needs {n}, the target has {have}" for what, (n, have) in need.items() if n > have]
    if over:
        raise KernelResourceError(f"kernel {name} does not fit gfx1100: " + "; ".join(over))
