"""DISPATCH_DIRECT on the RDNA3 emulator: the wave state comes from the registers the SET_SH_REGs wrote, as the
hardware's wave launcher takes it (amd.md 2.5), not from a kernel descriptor.

- code: COMPUTE_PGM_LO/HI << 8 (the first instruction);
- COMPUTE_PGM_RSRC1/2/3: VGPR granules, float modes, USER_SGPR_COUNT, workgroup-id SGPR enables, LDS granules;
- COMPUTE_USER_DATA_0..: s[0 .. USER_SGPR_COUNT-1];
- COMPUTE_NUM_THREAD_X/Y/Z: the workgroup size; the DISPATCH_DIRECT payload: the grid in workgroups;
- COMPUTE_TMPRING_SIZE.WAVESIZE: the scratch each lane may use (256-byte units per 64 lanes); when RSRC2 enables
  scratch, TMPRING must program some and each XCC's COMPUTE_DISPATCH_SCRATCH_BASE must point at WAVES x WAVESIZE
  mapped bytes, else the dispatch is refused naming the sizes. The emulator keeps each lane's private memory in its
  own arrays (emu/machine.py), not in that memory: an access past the programmed per-lane size is a GPUFault;
- the initiator's CS_W32_EN: wave32 (the emulator runs wave32 only).

When the GPU's PerfUnit (perf.py) counts or traces the dispatch (`watch`), the emulator logs what each batch
executed and the launcher reports the dispatch's work (work.py) to it.

The waves start as the mock interface's do (interface.py `start_waves`, `resident_batches`), and run on the
emulator over the launcher's GPUMemory. The code is read from GPU memory once per (address, bytes) seen.
"""
from __future__ import annotations

import time

from tg_amd.interface import WAVEFRONT_SIZE32_BIT, KernelDescriptor
from tg_mockgpu.cp.perf import PerfUnit
from tg_mockgpu.cp.pm4 import DispatchState
from tg_mockgpu.cp.work import WorkBuilder
from tg_mockgpu.emu.machine import EmulatorError
from tg_mockgpu.emu.program import Program
from tg_mockgpu.emu.run import run
from tg_mockgpu.interface import DispatchStats, check_launch, resident_batches, start_waves
from tg_mockgpu.memory import PAGE_SIZE, GPUMemory

# absolute register addresses (amd.md 10)
PGM_LO, PGM_HI = 0x2E0C, 0x2E0D
RSRC1, RSRC2, RSRC3 = 0x2E12, 0x2E13, 0x2E28
TMPRING_SIZE = 0x2E18
NUM_THREAD = (0x2E07, 0x2E08, 0x2E09)
USER_DATA_0 = 0x2E40
CS_W32_EN = 1 << 15
SCRATCH_EN = 1                # COMPUTE_PGM_RSRC2 bit 0: the kernel has a private segment
MAX_CODE = 1 << 20            # bytes of code read after the entry point (bounded by the mapping)


class EmulatorLauncher:
    """Runs DISPATCH_DIRECTs on the emulator over `mem` (the GPU memory kernels address)."""

    def __init__(self, mem: GPUMemory):
        self.mem = mem
        self.programs: dict[int, Program] = {}
        self.last = DispatchStats()  # what the last DISPATCH_DIRECT cost (bench/emulator.py reads it)
        self.perf = PerfUnit(mem)    # XCC 0's performance monitor (dispatches run there); the GPU's queues share it
        self._idle_xccs: dict[int, PerfUnit] = {}

    def perf_of(self, xcc: int) -> PerfUnit:
        """The performance monitor of XCC `xcc` (the others see no dispatch: their counters stay 0)."""
        if xcc == 0:
            return self.perf
        return self._idle_xccs.setdefault(xcc, PerfUnit(self.mem))

    def _code(self, va: int) -> bytes:
        """The bytes from the entry point to the end of its mapping (at most MAX_CODE)."""
        n = PAGE_SIZE - va % PAGE_SIZE
        while n < MAX_CODE and self.mem.mapped(va + n, PAGE_SIZE):
            n += PAGE_SIZE
        return self.mem.read(va, n)

    def _program(self, va: int, name: str) -> Program:
        prog = self.programs.get(va)
        image = self._code(va)
        if prog is None or prog.image != image:
            prog = self.programs[va] = Program(image, va, name)
        return prog

    def __call__(self, st: DispatchState) -> None:
        r = st.regs
        need = (PGM_LO, PGM_HI, RSRC1, RSRC2, RSRC3, *NUM_THREAD)
        missing = [f"{a:#x}" for a in need if a not in r]
        if missing:
            raise ValueError(f"{st.queue}: DISPATCH_DIRECT before its registers were set (missing {', '.join(missing)})")
        code = ((r[PGM_HI] << 32) | r[PGM_LO]) << 8
        rsrc2 = r[RSRC2]
        private = ((r.get(TMPRING_SIZE, 0) >> 12) & 0x7FFF) * 256 // 64
        kd = KernelDescriptor(group_segment_fixed_size=((rsrc2 >> 15) & 0x1FF) * 512,
                              private_segment_fixed_size=private, kernarg_size=0, kernel_code_entry_byte_offset=0,
                              compute_pgm_rsrc1=r[RSRC1], compute_pgm_rsrc2=rsrc2, compute_pgm_rsrc3=r[RSRC3],
                              kernel_code_properties=(1 << WAVEFRONT_SIZE32_BIT) if st.initiator & CS_W32_EN else 0,
                              kernarg_preload=0)
        name = f"kernel at {code:#x}"
        if rsrc2 & SCRATCH_EN:
            self._check_scratch(st, name)
        local = tuple(r[a] & 0xFFFF for a in NUM_THREAD)
        grid = st.grid
        if 0 in grid:
            return  # a dispatch of no workgroups launches no wave (tg's run-time grids may be empty)
        check_launch(name, kd, grid, local)  # type: ignore[arg-type]
        user = [r.get(USER_DATA_0 + i, 0) for i in range(kd.user_sgpr_count)]
        prog = self._program(code, name)
        t0 = time.perf_counter()
        self.last = DispatchStats()
        traced = self.perf.watch(r)
        work = None if traced is None else WorkBuilder(prog, grid, traced)
        for groups in resident_batches(grid, local, kd):  # type: ignore[arg-type]
            m = start_waves(self.mem, kd, name, groups, local, user)  # type: ignore[arg-type]
            log: list | None = None if work is None else []
            run(m, prog, code, log)
            if work is not None and log is not None:
                work.add(groups, m.waves_per_group, log)
            self.last.lane_instructions += m.lane_count
            self.last.waves += m.nwaves
        self.last.seconds = time.perf_counter() - t0
        if work is not None:
            self.perf.dispatched(work.finish(), r)

    def _check_scratch(self, st: DispatchState, name: str) -> None:
        """A kernel with a private segment needs the scratch its queue programmed: TMPRING_SIZE's waves x wave size
        of mapped memory at each XCC's scratch base."""
        tmpring = st.regs.get(TMPRING_SIZE, 0)
        waves, wavesize = tmpring & 0xFFF, ((tmpring >> 12) & 0x7FFF) * 256
        if not waves or not wavesize:
            raise EmulatorError(f"{st.queue}: {name} has a private segment (RSRC2 SCRATCH_EN) but COMPUTE_TMPRING_SIZE "
                                f"{tmpring:#x} programs {waves} waves of {wavesize} bytes of scratch")
        need = waves * wavesize
        for x, base in enumerate(st.scratch or (0,)):
            have = 0
            while base and have < need and self.mem.mapped(base + have, min(PAGE_SIZE - (base + have) % PAGE_SIZE,
                                                                              need - have)):
                have += min(PAGE_SIZE - (base + have) % PAGE_SIZE, need - have)
            if have < need:
                raise EmulatorError(f"{st.queue}: {name} has a private segment: TMPRING_SIZE programs {waves} waves of "
                                    f"{wavesize} bytes ({need} bytes of scratch per XCC), but XCC {x}'s "
                                    f"COMPUTE_DISPATCH_SCRATCH_BASE {base:#x} has {have} bytes mapped")
