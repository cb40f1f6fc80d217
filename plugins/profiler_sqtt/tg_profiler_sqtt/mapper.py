"""The instruction mapper: each traced wave's instruction packets, walked through its kernel's code object.

SQTT instruction packets carry no PC: a wave starts at the kernel's entry (WAVESTART), and each INST, VALUINST
and IMMEDIATE packet is the next instruction it issued (s_delay_alu issues none), an IMMEDIATE_MASK one SOPP
instruction for each wave in its mask, a JUMP the taken branch (the PC moves to the target), and WAVEEND the
wave's s_endpgm (amd.md section 9). So the mapper keeps one PC per wave and checks every step against the code:
a packet whose class does not fit the instruction at the PC (an SMEM packet on a VALU instruction, a branch
without a JUMP/JUMP_NO packet, a WAVEEND not at s_endpgm) is a MappingError, never a guess.

Instruction packets name only a wave slot: they belong to the one unit the trace follows (SQ_THREAD_TRACE_MASK:
SA 0, WGP 0, the SIMD the layout header names), so waves of other units are not walked.

The code object is read with tg-amd's ELF reader and the instructions with tg-mockgpu's decoder and
disassembler, imported here only when mapping (`pip install tg-profiler-sqtt[mapper]`).
"""
from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tg_profiler_sqtt.sqtt import Packet, Trace, decode

DESCRIPTOR_BYTES = 64
VALU = frozenset({"VOP1", "VOP2", "VOPC", "VOP3", "VOP3SD", "VOP3P", "VOPD", "VINTERP"})
SALU = frozenset({"SOP1", "SOP2", "SOPK", "SOPC", "SOPP"})
VMEM = frozenset({"GLOBAL", "SCRATCH", "MUBUF", "MTBUF"})
# the encodings an INST packet's op class may issue from (ops not listed are not checked)
INST_ENCODINGS: dict[str, frozenset[str]] = {
    "SALU": SALU, "SALU_WR_EXEC": SALU, "SMEM_RD": frozenset({"SMEM"}), "JUMP": frozenset({"SOPP"}),
    "JUMP_NO": frozenset({"SOPP"}), "MESSAGE": frozenset({"SOPP"}), "BARRIER": frozenset({"SOPP"}),
    "VALUT_4": VALU, "VALUB_2": VALU, "VALUB_4": VALU, "VALUB_16": VALU, "VALU1_WR_EXEC": VALU,
    **{op: frozenset({"FLAT"}) for op in ("FLAT_RD_2", "FLAT_WR_3", "FLAT_WR_4", "FLAT_WR_5", "FLAT_WR_6")},
    **{op: VMEM for op in ("SGMEM_RD_1", "SGMEM_RD_2", "SGMEM_WR_2", "SGMEM_WR_3", "SGMEM_WR_4", "SGMEM_WR_5",
                           "SGMEM_WR_6")},
    **{op: frozenset({"DS"}) for op in ("LDS_RD", "LDS_WR_1", "LDS_WR_2", "LDS_WR_3", "LDS_WR_4", "LDS_WR_5")},
}
NO_PACKET = frozenset({"s_delay_alu"})  # instructions that issue no instruction packet


class Mapped(tuple[Packet, str, int]):
    """One issued instruction: the tuple (packet, instruction text, PC offset), plus `.wave`, the wave slot that
    issued it (an IMMEDIATE_MASK packet stands for one instruction of each wave in its mask)."""
    wave: int

    def __new__(cls, packet: Packet, text: str, pc: int, wave: int) -> Mapped:
        self = super().__new__(cls, (packet, text, pc))
        self.wave = wave
        return self

    @property
    def packet(self) -> Packet:
        return self[0]

    @property
    def text(self) -> str:
        return self[1]

    @property
    def pc(self) -> int:
        return self[2]


class MappingError(ValueError):
    """The trace and the code object disagree: the message names the packet, the wave and the instruction."""


@dataclass(frozen=True)
class KernelCode:
    """A kernel's code as the GPU sees it: `image[a]` is the byte at offset `a` from the load address (a traced
    PC minus the code object's base), `entry` the offset of its first instruction."""
    name: str
    image: bytes
    entry: int
    _decoded: dict[int, Any] = field(default_factory=dict, compare=False, repr=False)

    def instruction(self, pc: int) -> Any:
        """The tg_mockgpu Inst at offset `pc` (decoded once)."""
        inst = self._decoded.get(pc)
        if inst is None:
            from tg_mockgpu.rdna3.decode import decode as decode_inst
            if not 0 <= pc < len(self.image):
                raise MappingError(f"kernel {self.name}: PC offset {pc:#x} is outside the code object "
                                   f"(0..{len(self.image):#x})")
            inst = self._decoded[pc] = decode_inst(self.image, pc, pc, self.name)
        return inst

    def text(self, pc: int) -> str:
        from tg_mockgpu.rdna3.disasm import disasm
        return disasm(self.instruction(pc))


def _needs_mapper_plugins() -> None:
    try:
        import tg_amd.elf  # noqa: F401
        import tg_mockgpu.rdna3.decode  # noqa: F401
    except ImportError as e:
        raise ImportError("the SQTT instruction mapper reads code objects with tg-amd and decodes them with "
                          f"tg-mockgpu; install them (pip install tg-profiler-sqtt[mapper]): {e}") from e


def kernel_code(elf: bytes, kernel: str | None = None) -> KernelCode:
    """The code of `kernel` (the only one when None) in an AMDGPU ELF: a relocatable object as tg-amd loads it,
    or a linked shared object (what other compilers ship), whose sections sit at their virtual addresses."""
    _needs_mapper_plugins()
    from tg_amd.elf import ET_REL, SHF_ALLOC, SHT_PROGBITS, STT_OBJECT, KernelDescriptor, load_code_object, read_elf
    obj = read_elf(elf)
    names = [s.name[:-3] for s in obj.symbols if s.name.endswith(".kd") and s.type == STT_OBJECT]
    if kernel is None:
        if len(names) != 1:
            raise ValueError(f"the code object has {len(names)} kernels ({', '.join(names) or 'none'}): name one")
        kernel = names[0]
    if kernel not in names:
        raise ValueError(f"no kernel {kernel!r} in the code object; kernels: {', '.join(names) or 'none'}")
    if obj.type == ET_REL:
        co = load_code_object(elf)
        return KernelCode(kernel, co.image, co.kernel(kernel).code_offset)
    loaded = [s for s in obj.sections if s.flags & SHF_ALLOC and s.type == SHT_PROGBITS and s.size]
    image = bytearray(max(s.addr + s.size for s in loaded))
    for s in loaded:
        image[s.addr:s.addr + s.size] = s.data
    kd = obj.symbol(kernel + ".kd").value
    desc = KernelDescriptor.from_bytes(bytes(image[kd:kd + DESCRIPTOR_BYTES]))
    return KernelCode(kernel, bytes(image), kd + desc.kernel_code_entry_byte_offset)


def _traced_unit(trace: Trace) -> tuple[int, int, int]:
    header = trace[0]
    return 0, 0, header.simd  # (sa, wgp, simd): SQ_THREAD_TRACE_MASK selects SA 0, WGP 0 and one SIMD


def map_instructions(trace: Trace | bytes, code: KernelCode | bytes, kernel: str | None = None,
                     unit: tuple[int, int, int] | None = None) -> Iterator[Mapped]:
    """(packet, instruction text, PC offset) for every instruction a traced wave issued, in stream order (each a
    `Mapped`, which also names the wave): INST,
    VALUINST, IMMEDIATE, each wave of an IMMEDIATE_MASK, and WAVEEND (its s_endpgm). `code` is the kernel's
    KernelCode or its ELF; `unit` the (sa, wgp, simd) the trace follows (default: SA 0, WGP 0, the header's
    SIMD)."""
    _needs_mapper_plugins()
    from tg_mockgpu.rdna3.decode import branch_target
    trace = trace if isinstance(trace, Trace) else decode(trace)
    code = code if isinstance(code, KernelCode) else kernel_code(code, kernel)
    unit = unit or _traced_unit(trace)
    pcs: dict[int, int] = {}  # wave slot -> PC offset of its next instruction

    def issue(p: Packet, wave: int) -> tuple[int, Any]:
        if wave not in pcs:
            raise MappingError(f"{p.kind} at nibble offset {p.offset} is an instruction of wave {wave}, which has "
                               "no WAVESTART before it on the traced unit")
        pc = pcs[wave]
        inst = code.instruction(pc)
        while inst.op in NO_PACKET:
            pc += inst.size
            inst = code.instruction(pc)
        return pc, inst

    def mismatch(p: Packet, wave: int, pc: int, expected: str) -> MappingError:
        return MappingError(f"{p.kind}{' ' + p.op_name if p.kind == 'INST' else ''} at nibble offset {p.offset} "
                            f"(wave {wave}) is not {code.text(pc)!r} at PC offset {pc:#x} of {code.name}: "
                            f"expected {expected}")

    for p in trace:
        kind = p.kind
        if kind == "WAVESTART" or kind == "WAVEEND":
            if (p.sa, p.wgp, p.simd) != unit:
                continue
            if kind == "WAVESTART":
                pcs[p.wave] = code.entry
                continue
            pc, inst = issue(p, p.wave)
            if inst.op != "s_endpgm":
                raise mismatch(p, p.wave, pc, "s_endpgm")
            del pcs[p.wave]
            yield Mapped(p, code.text(pc), pc, p.wave)
        elif kind == "IMMEDIATE_MASK":
            for wave in (w for w in range(16) if p.mask >> w & 1):
                pc, inst = issue(p, wave)
                if inst.enc != "SOPP":
                    raise mismatch(p, wave, pc, "a SOPP instruction")
                pcs[wave] = pc + inst.size
                yield Mapped(p, code.text(pc), pc, wave)
        elif kind in ("INST", "VALUINST", "IMMEDIATE"):
            if kind == "INST" and p.op_name.startswith("OTHER_SIMD"):
                continue  # issued on a SIMD the trace does not follow
            pc, inst = issue(p, p.wave)
            allowed = VALU if kind == "VALUINST" else frozenset({"SOPP"}) if kind == "IMMEDIATE" else \
                INST_ENCODINGS.get(p.op_name)
            if allowed is not None and inst.enc not in allowed:
                raise mismatch(p, p.wave, pc, f"an instruction encoded as {' or '.join(sorted(allowed))}")
            branch = inst.op.startswith(("s_branch", "s_cbranch"))
            jump = kind == "INST" and p.op_name in ("JUMP", "JUMP_NO")
            if branch != jump:
                raise mismatch(p, p.wave, pc, "a JUMP or JUMP_NO packet for a branch, and only for one")
            pcs[p.wave] = branch_target(inst) if kind == "INST" and p.op_name == "JUMP" else pc + inst.size
            yield Mapped(p, code.text(pc), pc, p.wave)
