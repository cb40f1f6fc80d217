"""The code-object data tg-amd works with (descriptors, kernel symbols, code objects), and `AMDInterface`, the
protocol of a synchronous direct-dispatch GPU.

The AMD device runs on the KFD's command queues (tg_amd/device.py); `AMDInterface` is no longer a device
interface but the contract of tg-mockgpu's `MockInterface`, the harness its emulator tests dispatch through.

The device does everything that is the same for every interface: rendering, compiling, reading the ELF
(tg_amd/elf.py gives a `CodeObject`), packing kernel arguments to the descriptor's `kernarg_size`. The interface
does what a GPU and its runtime do: owns GPU memory (virtual addresses, copies to and from the host), loads a
code object into GPU memory, and runs a dispatch: it writes the kernargs to GPU memory, builds each wave's
initial state as the descriptor asks (user SGPRs, workgroup ids, packed workitem ids in v0, EXEC, LDS, scratch;
amd.md 2.5) and waits for the dispatch to finish. The LDS size is `group_segment_fixed_size`: LLVM leaves RSRC2's
LDS field 0, so a hardware interface ORs ceil(size / 512) << 15 into RSRC2 itself.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

# ---- GPU memory ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPUBuffer:
    """A range of GPU virtual memory. `handle` is the interface's own record of the allocation; a view of a buffer
    (a sub-range) has the same handle, with `va` moved by its offset."""
    va: int
    size: int
    handle: Any = field(default=None, compare=False)

    def view(self, offset: int, size: int) -> GPUBuffer:
        if offset < 0 or size < 0 or offset + size > self.size:
            raise ValueError(f"view [{offset}, {offset + size}) is outside the {self.size}-byte buffer at {self.va:#x}")
        return GPUBuffer(self.va + offset, size, self.handle)


# ---- the kernel descriptor -----------------------------------------------------------------------------

def _bits(word: int, lo: int, hi: int) -> int:
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


# kernel_code_properties bits (amd.md 1.2), in the order their user SGPRs are laid out (amd.md 2.5):
# name -> (bit, SGPRs it takes)
USER_SGPR_FIELDS: dict[str, tuple[int, int]] = {
    "private_segment_buffer": (0, 4),
    "dispatch_ptr": (1, 2),
    "queue_ptr": (2, 2),
    "kernarg_segment_ptr": (3, 2),
    "dispatch_id": (4, 2),
    "flat_scratch_init": (5, 2),
    "private_segment_size": (6, 1),
}
WAVEFRONT_SIZE32_BIT = 10
USES_DYNAMIC_STACK_BIT = 11

DESCRIPTOR_SIZE = 64
_DESCRIPTOR = struct.Struct("<IIII q 20x IIIHH I")  # amd.md 1.2; reserved1 is 20 bytes


@dataclass(frozen=True)
class KernelDescriptor:
    """The 64-byte AMDHSA kernel descriptor (`<name>.kd`), raw words and decoded fields."""
    group_segment_fixed_size: int      # LDS bytes per workgroup
    private_segment_fixed_size: int    # scratch bytes per work-item
    kernarg_size: int                  # bytes of kernel arguments, hidden ones included
    kernel_code_entry_byte_offset: int  # code address = descriptor address + this
    compute_pgm_rsrc1: int
    compute_pgm_rsrc2: int
    compute_pgm_rsrc3: int
    kernel_code_properties: int
    kernarg_preload: int

    @classmethod
    def from_bytes(cls, data: bytes) -> KernelDescriptor:
        if len(data) != DESCRIPTOR_SIZE:
            raise ValueError(f"a kernel descriptor is {DESCRIPTOR_SIZE} bytes, got {len(data)}")
        (group, private, kernarg, _r0, entry, rsrc3, rsrc1, rsrc2, props, preload, _r3) = _DESCRIPTOR.unpack(data)
        return cls(group, private, kernarg, entry, rsrc1, rsrc2, rsrc3, props, preload)

    def to_bytes(self) -> bytes:
        return _DESCRIPTOR.pack(self.group_segment_fixed_size, self.private_segment_fixed_size, self.kernarg_size, 0,
                                self.kernel_code_entry_byte_offset, self.compute_pgm_rsrc3, self.compute_pgm_rsrc1,
                                self.compute_pgm_rsrc2, self.kernel_code_properties, self.kernarg_preload, 0)

    # -- COMPUTE_PGM_RSRC1 --
    @property
    def vgpr_granules(self) -> int:
        """GRANULATED_WORKITEM_VGPR_COUNT: VGPRs in blocks, minus one."""
        return _bits(self.compute_pgm_rsrc1, 0, 5)

    @property
    def sgpr_granules(self) -> int:
        """GRANULATED_WAVEFRONT_SGPR_COUNT (0 on RDNA: SGPRs are not allocated per wave)."""
        return _bits(self.compute_pgm_rsrc1, 6, 9)

    @property
    def float_round_mode_32(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 12, 13)

    @property
    def float_round_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 14, 15)

    @property
    def float_denorm_mode_32(self) -> int:
        """0 flush source and result denormals, 1 flush results, 2 flush sources, 3 keep them."""
        return _bits(self.compute_pgm_rsrc1, 16, 17)

    @property
    def float_denorm_mode_16_64(self) -> int:
        return _bits(self.compute_pgm_rsrc1, 18, 19)

    @property
    def dx10_clamp(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 21, 21))

    @property
    def ieee_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 23, 23))

    @property
    def wgp_mode(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 29, 29))

    @property
    def mem_ordered(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 30, 30))

    @property
    def fwd_progress(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc1, 31, 31))

    # -- COMPUTE_PGM_RSRC2 --
    @property
    def enable_private_segment(self) -> bool:
        """Scratch is used (the wave gets a scratch base)."""
        return bool(_bits(self.compute_pgm_rsrc2, 0, 0))

    @property
    def user_sgpr_count(self) -> int:
        """USER_SGPR_COUNT: s[0 .. count-1] are user SGPRs (padded past the enabled fields on gfx1100)."""
        return _bits(self.compute_pgm_rsrc2, 1, 5)

    @property
    def enable_trap_handler(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 6, 6))

    @property
    def enable_sgpr_workgroup_id(self) -> tuple[bool, bool, bool]:
        """Whether the workgroup id X, Y, Z are written to system SGPRs (after the user SGPRs, in that order)."""
        return tuple(bool(_bits(self.compute_pgm_rsrc2, b, b)) for b in (7, 8, 9))  # type: ignore[return-value]

    @property
    def enable_sgpr_workgroup_info(self) -> bool:
        return bool(_bits(self.compute_pgm_rsrc2, 10, 10))

    @property
    def enable_vgpr_workitem_id(self) -> int:
        """0: X only, 1: X and Y, 2: X, Y and Z (gfx11 packs them all into v0 anyway)."""
        return _bits(self.compute_pgm_rsrc2, 11, 12)

    @property
    def granulated_lds_size(self) -> int:
        """RSRC2's LDS field as the descriptor has it; LLVM leaves it 0 and the runtime fills it in."""
        return _bits(self.compute_pgm_rsrc2, 15, 23)

    # -- COMPUTE_PGM_RSRC3 (gfx11) --
    @property
    def shared_vgpr_count(self) -> int:
        return _bits(self.compute_pgm_rsrc3, 0, 3)

    @property
    def inst_pref_size(self) -> int:
        return _bits(self.compute_pgm_rsrc3, 4, 9)

    # -- kernel_code_properties --
    def enables(self, user_sgpr: str) -> bool:
        """Whether the user SGPR field `user_sgpr` (a key of USER_SGPR_FIELDS) is enabled."""
        return bool(self.kernel_code_properties >> USER_SGPR_FIELDS[user_sgpr][0] & 1)

    @property
    def user_sgprs(self) -> dict[str, int]:
        """The enabled user SGPR fields and the first SGPR of each, in hardware order."""
        out, at = {}, 0
        for name, (_, count) in USER_SGPR_FIELDS.items():
            if self.enables(name):
                out[name] = at
                at += count
        return out

    @property
    def wavefront32(self) -> bool:
        return bool(self.kernel_code_properties >> WAVEFRONT_SIZE32_BIT & 1)

    @property
    def uses_dynamic_stack(self) -> bool:
        return bool(self.kernel_code_properties >> USES_DYNAMIC_STACK_BIT & 1)

    @property
    def system_sgprs(self) -> dict[str, int]:
        """The enabled system SGPRs (workgroup ids, workgroup info) and their SGPR numbers."""
        out, at = {}, self.user_sgpr_count
        for name, on in zip(("workgroup_id_x", "workgroup_id_y", "workgroup_id_z", "workgroup_info"),
                            (*self.enable_sgpr_workgroup_id, self.enable_sgpr_workgroup_info)):
            if on:
                out[name] = at
                at += 1
        return out

    def vgprs(self, wave32: bool | None = None) -> int:
        """VGPRs allocated per work-item: granules of 8 in wave32, 4 in wave64 (gfx10+)."""
        w32 = self.wavefront32 if wave32 is None else wave32
        return (self.vgpr_granules + 1) * (8 if w32 else 4)


# ---- code objects --------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Relocation:
    """A relocation that depends on where the image is loaded (absolute types); offsets are image offsets."""
    offset: int
    type: int
    value: int  # S + A as an image offset (add the load base)


@dataclass(frozen=True)
class KernelSymbol:
    """One kernel of a code object: where its code and descriptor sit in the image, and the descriptor."""
    name: str
    code_offset: int        # image offset of the first instruction (256-byte aligned)
    code_size: int
    descriptor_offset: int  # image offset of `<name>.kd`
    descriptor: KernelDescriptor
    # the kernel's entry of the AMDGPU metadata note (".args" with offsets and value kinds, ".sgpr_count", ...)
    metadata: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class CodeObject:
    """A loadable image made from an AMDGPU ELF (tg_amd/elf.py): its allocated sections placed at offsets from 0,
    position-independent relocations already applied. `image_at(base)` is the bytes to copy to GPU address `base`
    (which must be 256-byte aligned: the hardware takes code addresses in units of 256)."""
    arch: str                       # e.g. "gfx1100"
    image: bytes
    kernels: dict[str, KernelSymbol]
    absolute_relocations: tuple[Relocation, ...] = ()

    def image_at(self, base: int) -> bytes:
        if base % 256:
            raise ValueError(f"code objects load at 256-byte aligned addresses, not {base:#x}")
        if not self.absolute_relocations:
            return self.image
        from tg_amd.elf import apply_absolute  # the ELF module owns relocation arithmetic
        return apply_absolute(self.image, self.absolute_relocations, base)

    def kernel(self, name: str) -> KernelSymbol:
        if name not in self.kernels:
            raise KeyError(f"no kernel {name!r} in this code object; kernels: {', '.join(self.kernels) or 'none'}")
        return self.kernels[name]


# ---- the interface -------------------------------------------------------------------------------------

@runtime_checkable
class AMDInterface(Protocol):
    """A GPU that dispatches synchronously (tg-mockgpu's MockInterface, the emulator tests' harness).

    Class attributes: `name` (what `devices.AMD.interface` selects, e.g. "mock"), `description` (one line for
    `tg devices`). `available()` (a classmethod) returns None when the interface can be opened here, else why
    not. The constructor takes no arguments. All calls are synchronous, and may come from several threads at once
    (the device runs kernels for whichever threads use it): an interface serializes what its calls share."""
    name: ClassVar[str]
    description: ClassVar[str]
    arch: str  # the gfx target the GPU runs, e.g. "gfx1100"

    @classmethod
    def available(cls) -> str | None: ...

    def alloc(self, nbytes: int, align: int = 4096) -> GPUBuffer:
        """GPU memory of at least `nbytes` at an `align`-aligned virtual address; MemoryError when out of memory."""
        ...

    def free(self, buf: GPUBuffer) -> None:
        """Free a buffer `alloc` returned (not a view of one)."""
        ...

    def copyin(self, buf: GPUBuffer, src: memoryview, offset: int = 0) -> None:
        """Copy host bytes to GPU memory at `buf.va + offset`."""
        ...

    def copyout(self, dest: memoryview, buf: GPUBuffer, offset: int = 0) -> None:
        """Copy `len(dest)` bytes of GPU memory at `buf.va + offset` to the host."""
        ...

    def dispatch(self, code: CodeObject, entry: str, global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int], kernargs: bytes) -> None:
        """Run kernel `entry` of `code` on a grid of `global_size` workgroups of `local_size` work-items and wait for
        it. `kernargs` is the whole kernarg segment (`descriptor.kernarg_size` bytes); the interface copies it to
        GPU memory and passes its address (and whatever else the descriptor enables) in the user SGPRs. The
        interface loads `code` into GPU memory on first use (and may keep it for later dispatches)."""
        ...

    def close(self) -> None:
        """Release everything (GPU memory, loaded code)."""
        ...


__all__ = ["AMDInterface", "CodeObject", "DESCRIPTOR_SIZE", "GPUBuffer", "KernelDescriptor", "KernelSymbol",
           "Relocation", "USER_SGPR_FIELDS"]
