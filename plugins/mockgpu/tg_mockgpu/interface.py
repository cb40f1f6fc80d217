"""The mock AMD GPU behind tg-amd's AMDInterface: paged GPU memory and synchronous dispatch on the RDNA3 emulator.

A dispatch does what the command processor and the wave launcher do (amd.md 2.5): it copies the kernarg segment
(and, if the descriptor asks for the dispatch pointer, a dispatch packet) to GPU memory, then starts every wave with
the initial state its kernel descriptor enables -- user SGPRs in hardware order, workgroup ids after them, packed
work-item ids in v0, EXEC covering the live lanes of a partial wave -- with the workgroup's LDS and each lane's
private (scratch) memory. Workgroups are made resident in batches as large as the register budget allows and run
to completion by the emulator (emu/run.py).

The device may call the interface from several threads. The mock has one in-order queue: a dispatch holds the
interface's lock from writing its kernargs (one segment, reused) to its last wave, so another thread's dispatch
cannot overwrite them mid-run; code loading takes the same lock, and GPUMemory locks its own mapping changes.
"""
from __future__ import annotations

import struct
import threading
import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from tg_amd.interface import CodeObject, GPUBuffer, KernelDescriptor
from tg_mockgpu.emu.machine import EXEC, M0, VCC, WAVE, EmulatorError, Machine
from tg_mockgpu.emu.program import Program
from tg_mockgpu.emu.run import run
from tg_mockgpu.memory import PAGE_SIZE, GPUMemory

# gfx1100 limits a dispatch is checked against
MAX_LDS = 64 * 1024              # bytes of LDS per workgroup
MAX_VGPRS = 256                  # VGPRs per wave32 wave
MAX_WORKGROUP = 1024             # work-items per workgroup
# bytes of private memory per lane: COMPUTE_TMPRING_SIZE.WAVESIZE is 15 bits of 256-byte units per wave (amd.md 2.3)
MAX_SCRATCH_LANE = ((1 << 15) - 1) * 256 // WAVE
# the emulator's residency budget: bytes of VGPRs, scratch and LDS of the resident workgroups, and a cap on the
# waves run together (numpy arrays of 8192 x 32 lanes still sit in the caches well enough)
STATE_BUDGET = 256 << 20
MAX_RESIDENT_WAVES = 8192
# COMPUTE_PGM_RSRC1 float modes the emulator implements (amd.md 1.2): keep f32 and f16/f64 denormals, round to
# nearest even (the transcendental instructions flush regardless, as on hardware: emu/fp.py trans)
DENORM_KEEP, ROUND_NEAREST_EVEN = 3, 0
DISPATCH_PACKET_HEADER = 0x1502  # KERNEL_DISPATCH with barrier and system-scope acquire/release fences (amd.md 3.1)


@dataclass
class DispatchStats:
    """What the last dispatch cost: lane-instructions (32 per wave per instruction) and wall time."""
    lane_instructions: int = 0
    waves: int = 0
    seconds: float = 0.0


class MockInterface:
    """The mock GPU: a gfx1100 with wave32 waves, emulated on the CPU."""
    name: ClassVar[str] = "mock"
    description: ClassVar[str] = "tg-mockgpu: an emulated gfx1100 (RDNA3 wave32 emulator, paged GPU memory)"
    arch = "gfx1100"

    @classmethod
    def available(cls) -> str | None:
        return None

    def __init__(self) -> None:
        self.mem = GPUMemory()
        self.loaded: dict[int, tuple[CodeObject, int, dict[str, Program]]] = {}
        self.dispatch_id = 0
        self.queue = self.mem.alloc(256)     # stands in for the amd_queue_t a queue pointer would point at
        self.kernarg_va, self.kernarg_size = 0, 0
        self.last = DispatchStats()
        self._queue = threading.RLock()      # one dispatch (or code load) at a time; load runs inside dispatch

    # ---- memory ----

    def alloc(self, nbytes: int, align: int = PAGE_SIZE) -> GPUBuffer:
        va = self.mem.alloc(max(nbytes, 1), max(align, PAGE_SIZE))
        return GPUBuffer(va, nbytes, va)

    def free(self, buf: GPUBuffer) -> None:
        if buf.handle != buf.va:
            raise ValueError(f"free of a view ({buf.va:#x}); free the buffer alloc returned")
        self.mem.free(buf.handle)

    def copyin(self, buf: GPUBuffer, src: memoryview, offset: int = 0) -> None:
        src = memoryview(src).cast("B")
        self._check(buf, offset, len(src))
        self.mem.write(buf.va + offset, src)

    def copyout(self, dest: memoryview, buf: GPUBuffer, offset: int = 0) -> None:
        dest = memoryview(dest).cast("B")
        self._check(buf, offset, len(dest))
        self.mem.readinto(buf.va + offset, dest)

    @staticmethod
    def _check(buf: GPUBuffer, offset: int, n: int) -> None:
        if offset < 0 or offset + n > buf.size:
            raise ValueError(f"copy of {n} bytes at offset {offset} is outside the {buf.size}-byte buffer "
                             f"at {buf.va:#x}")

    # ---- code ----

    def load(self, code: CodeObject) -> int:
        """Copy a code object into GPU memory once; returns its load address."""
        with self._queue:
            hit = self.loaded.get(id(code))
            if hit is not None and hit[0] is code:
                return hit[1]
            va = self.mem.alloc(len(code.image), 256)
            self.mem.write(va, code.image_at(va))
            self.loaded[id(code)] = (code, va, {})
            return va

    def program(self, code: CodeObject, entry: str) -> tuple[Program, int]:
        with self._queue:
            va = self.load(code)
            progs = self.loaded[id(code)][2]
            if entry not in progs:
                progs[entry] = Program(self.mem.read(va, len(code.image)), va, entry)
            return progs[entry], va + code.kernel(entry).code_offset

    # ---- dispatch ----

    def dispatch(self, code: CodeObject, entry: str, global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int], kernargs: bytes) -> None:
        ks = code.kernel(entry)
        kd = ks.descriptor
        check_launch(entry, kd, global_size, local_size)
        with self._queue:  # the kernarg segment, the dispatch id and `last` are the running dispatch's
            prog, pc = self.program(code, entry)
            kbuf = self._kernarg_segment(max(len(kernargs), kd.kernarg_size, 1) + 128)
            self.mem.write(kbuf, kernargs)
            packet = kbuf + (-(-max(len(kernargs), kd.kernarg_size) // 64) * 64)
            descriptor = self.load(code) + ks.descriptor_offset
            self.mem.write(packet, dispatch_packet(global_size, local_size, kd, descriptor, kbuf))
            self.dispatch_id += 1
            user = user_sgpr_values(kd, {"dispatch_ptr": packet, "queue_ptr": self.queue, "kernarg_segment_ptr": kbuf,
                                         "dispatch_id": self.dispatch_id})
            t0 = time.perf_counter()
            self.last = DispatchStats()
            for groups in resident_batches(global_size, local_size, kd):
                m = start_waves(self.mem, kd, entry, groups, local_size, user)
                run(m, prog, pc)
                self.last.lane_instructions += m.lane_count
                self.last.waves += m.nwaves
            self.last.seconds = time.perf_counter() - t0

    def _kernarg_segment(self, nbytes: int) -> int:
        """GPU memory for a dispatch's kernargs and packet: one region, reused (dispatches are synchronous), grown
        when a dispatch needs more."""
        if self.kernarg_size < nbytes:
            if self.kernarg_va:
                self.mem.free(self.kernarg_va)
            self.kernarg_size = max(nbytes, PAGE_SIZE)
            self.kernarg_va = self.mem.alloc(self.kernarg_size)
        return self.kernarg_va

    def close(self) -> None:
        with self._queue:
            self.loaded.clear()
            self.mem.close()


def check_launch(entry: str, kd: KernelDescriptor, global_size: tuple[int, int, int],
                 local_size: tuple[int, int, int]) -> None:
    """Refuse what a gfx1100 cannot run, with the numbers."""
    if not kd.wavefront32:
        raise EmulatorError(f"kernel {entry} is compiled for wave64; the mock gfx1100 runs wave32 kernels only")
    if any(g < 1 for g in global_size) or any(x < 1 for x in local_size) or any(x > 1023 for x in local_size):
        raise ValueError(f"kernel {entry}: bad launch {global_size} x {local_size}: sizes must be >= 1 "
                         "(and each local size < 1024, it is packed in 10 bits)")
    n = local_size[0] * local_size[1] * local_size[2]
    if n > MAX_WORKGROUP:
        raise ValueError(f"kernel {entry}: workgroup of {n} work-items; gfx1100 allows at most {MAX_WORKGROUP}")
    if kd.group_segment_fixed_size > MAX_LDS:
        raise ValueError(f"kernel {entry} needs {kd.group_segment_fixed_size} bytes of LDS; gfx1100 has {MAX_LDS} "
                         "per workgroup")
    if kd.vgprs() > MAX_VGPRS:
        raise ValueError(f"kernel {entry} needs {kd.vgprs()} VGPRs; a gfx1100 wave32 wave has at most {MAX_VGPRS}")
    if kd.private_segment_fixed_size > MAX_SCRATCH_LANE:
        raise ValueError(f"kernel {entry} needs {kd.private_segment_fixed_size} bytes of scratch per work-item; "
                         f"gfx1100 allows at most {MAX_SCRATCH_LANE}")
    if kd.uses_dynamic_stack:
        raise EmulatorError(f"kernel {entry} uses a dynamic stack, whose size the mock cannot know")
    modes = (kd.float_denorm_mode_32, kd.float_denorm_mode_16_64, kd.float_round_mode_32, kd.float_round_mode_16_64)
    if modes != (DENORM_KEEP, DENORM_KEEP, ROUND_NEAREST_EVEN, ROUND_NEAREST_EVEN):
        # the emulator's float ops keep denormals and round to nearest even; another mode would silently differ
        raise EmulatorError(f"kernel {entry}'s descriptor asks for FLOAT_DENORM_MODE_32 {modes[0]}, _16_64 "
                            f"{modes[1]}, FLOAT_ROUND_MODE_32 {modes[2]}, _16_64 {modes[3]}; the mock runs only "
                            f"denormals kept ({DENORM_KEEP}) and round to nearest even ({ROUND_NEAREST_EVEN}), "
                            "what LLVM's code objects ask for unless a function sets \"denormal-fp-math\"")


def dispatch_packet(global_size: tuple[int, int, int], local_size: tuple[int, int, int], kd: KernelDescriptor,
                    kernel_object: int, kernarg: int) -> bytes:
    """The 64-byte hsa_kernel_dispatch_packet_t (amd.md 3.1); grid sizes in work-items."""
    grid = [g * lo for g, lo in zip(global_size, local_size)]
    return struct.pack("<HHHHHHIIIIIQQQQ", DISPATCH_PACKET_HEADER, 3, *local_size, 0, *grid,
                       kd.private_segment_fixed_size, kd.group_segment_fixed_size, kernel_object, kernarg, 0, 0)


def user_sgpr_values(kd: KernelDescriptor, values: dict[str, int]) -> list[int]:
    """The user SGPR words s[0 .. USER_SGPR_COUNT-1] for the fields the descriptor enables, in hardware order."""
    words = [0] * kd.user_sgpr_count
    fields = kd.user_sgprs
    need = 0
    for name, at in fields.items():
        if name in ("private_segment_buffer", "flat_scratch_init"):
            # gfx11 has architected flat scratch: the hardware provides scratch addressing; these stay zero
            vals: list[int] = [0] * (4 if name == "private_segment_buffer" else 2)
        elif name == "private_segment_size":
            vals = [kd.private_segment_fixed_size]
        else:
            v = values[name]
            vals = [v & 0xFFFFFFFF, v >> 32]
        need = at + len(vals)
        if need > len(words):
            raise EmulatorError(f"descriptor enables user SGPRs up to s{need - 1} ({', '.join(fields)}) but its "
                                f"USER_SGPR_COUNT is {kd.user_sgpr_count}")
        words[at:at + len(vals)] = vals
    return words


def resident_batches(global_size: tuple[int, int, int], local_size: tuple[int, int, int],
                     kd: KernelDescriptor) -> list[np.ndarray]:
    """Workgroup ids (n, 3) in dispatch order (x fastest), split into batches that fit the residency budget."""
    gx, gy, _ = global_size
    flat = np.arange(global_size[0] * global_size[1] * global_size[2])
    ids = np.stack([flat % gx, flat // gx % gy, flat // (gx * gy)], -1)
    waves = -(-(local_size[0] * local_size[1] * local_size[2]) // WAVE)
    per_group = waves * WAVE * (4 * kd.vgprs() + max(kd.private_segment_fixed_size, 4)) + kd.group_segment_fixed_size
    fit = max(1, min(STATE_BUDGET // per_group, MAX_RESIDENT_WAVES // waves))
    return [ids[i:i + fit] for i in range(0, len(ids), fit)]


def start_waves(mem: GPUMemory, kd: KernelDescriptor, entry: str, groups: np.ndarray, local_size: tuple[int, int, int],
                user: list[int]) -> Machine:
    """A machine holding the waves of `groups` (workgroup ids) in their initial state."""
    lx, ly, lz = local_size
    n = lx * ly * lz
    wpg = -(-n // WAVE)
    nwaves = len(groups) * wpg
    m = Machine(mem, nwaves, kd.vgprs(), wpg, kd.group_segment_fixed_size, kd.private_segment_fixed_size, entry)
    for i, u in enumerate(user):
        m.s[i] = u
    group = np.repeat(groups, wpg, axis=0)                 # (nwaves, 3)
    for name, at in kd.system_sgprs.items():
        if name == "workgroup_info":
            m.s[at] = wpg                                   # waves in the workgroup
        else:
            m.s[at] = group[:, "xyz".index(name[-1])]
    # work-items of a workgroup, x fastest, 32 to a wave; the packed ids go to v0
    flat = np.arange(wpg * WAVE)
    tid = np.stack([flat % lx, (flat // lx) % ly, flat // (lx * ly)], -1)
    packed = (tid[:, 0] | (tid[:, 1] << 10) | (tid[:, 2] << 20)).astype(np.uint32).reshape(wpg, WAVE)
    packed = np.where(flat.reshape(wpg, WAVE) < n, packed, 0)
    m.v[0] = np.tile(packed, (len(groups), 1))
    live = np.minimum(np.maximum(n - np.arange(wpg) * WAVE, 0), WAVE)
    exec_mask = np.where(live >= WAVE, 0xFFFFFFFF, (1 << live) - 1).astype(np.uint32)
    m.s[EXEC] = np.tile(exec_mask, len(groups))
    m.s[VCC] = 0
    m.s[M0] = 0
    m.group_ids = groups
    return m
