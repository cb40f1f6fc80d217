"""The register state of every resident wave of a dispatch, and batches of waves that share a program counter.

Registers are stored register-major so that one register of a whole batch is one numpy row:
  s[r, w]          SGPR r of wave w (uint32); 106/107 VCC, 124 NULL, 125 M0, 126/127 EXEC (wave32 uses the low words)
  v[r, w, lane]    VGPR r (uint32); `v16` views the same memory as 16-bit halves (lane*2 low, lane*2+1 high)
  scc[w]           SCC (0 or 1)
A `Batch` is the set of waves one instruction runs for: a slice when they are consecutive (numpy then works on
views, without copies) or an index array. It caches the EXEC mask of its waves until an instruction writes EXEC.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from tg_mockgpu.memory import GPUMemory

NUM_SGPRS = 128
VCC, NULL, M0, EXEC = 106, 124, 125, 126
WAVE = 32
LANES = np.arange(WAVE, dtype=np.uint32)
FULL = np.uint32(0xFFFFFFFF)


class EmulatorError(RuntimeError):
    """An instruction the emulator cannot run (unknown or not implemented), or a malformed dispatch."""


class GPUFault(MemoryError):
    """A memory access the GPU would fault on, with the address, the instruction and the wave and lane. A page
    fault (an unmapped address) also carries `address` and `write`, which the mock KFD reports as the hardware's
    VM fault does; LDS and scratch range faults leave them None."""

    def __init__(self, message: str, address: int | None = None, write: bool | None = None):
        super().__init__(message)
        self.address, self.write = address, write


@dataclass
class Machine:
    """The state of the waves of one batch of resident workgroups."""
    mem: GPUMemory
    nwaves: int
    nvgprs: int
    waves_per_group: int
    lds_bytes: int
    scratch_bytes: int               # private bytes per lane
    kernel: str = "?"
    s: np.ndarray = field(init=False)
    v: np.ndarray = field(init=False)
    scc: np.ndarray = field(init=False)
    lds: np.ndarray = field(init=False)
    scratch: np.ndarray = field(init=False)
    group_ids: np.ndarray | None = None              # (workgroups, 3): the dispatch's id of each resident workgroup
    lane_count: int = 0                              # executed lane-instructions (32 per wave per instruction)

    def __post_init__(self) -> None:
        self.s = np.zeros((NUM_SGPRS, self.nwaves), np.uint32)
        self.v = np.zeros((self.nvgprs, self.nwaves, WAVE), np.uint32)
        self.v16 = self.v.view(np.uint16)
        self.scc = np.zeros(self.nwaves, np.uint32)
        ngroups = -(-self.nwaves // self.waves_per_group)
        self.lds = np.zeros(ngroups * max(self.lds_bytes, 4), np.uint8)
        self.scratch = np.zeros((self.nwaves * WAVE, max(self.scratch_bytes, 4)), np.uint8)
        self.group_of = np.arange(self.nwaves) // self.waves_per_group

    def wave_name(self, w: int) -> str:
        """'workgroup (x, y, z) wave i' for error messages."""
        g = int(self.group_of[w])
        xyz = tuple(int(x) for x in self.group_ids[g]) if self.group_ids is not None else (g, 0, 0)
        return f"workgroup {xyz} wave {w % self.waves_per_group}"

    def vgpr(self, r: int) -> np.ndarray:
        if r >= self.nvgprs:
            self._too_few(r)
        return self.v[r]

    def _too_few(self, r: int) -> None:
        raise EmulatorError(f"kernel {self.kernel} uses v{r}, but its descriptor allocates only {self.nvgprs} "
                            "VGPRs")

    def vgpr16(self, r: int, hi: int) -> np.ndarray:
        """The low (hi=0) or high (hi=1) 16-bit halves of VGPR r, as a (waves, 32) uint16 view."""
        if r >= self.nvgprs:
            self._too_few(r)
        return self.v16[r][:, hi::2]


class Batch:
    """Waves that execute the next instruction together (all at the same program counter)."""
    __slots__ = ("idx", "n", "m", "_mask", "_mask_ok", "waves")

    def __init__(self, m: Machine, waves: np.ndarray):
        self.m = m
        self.waves = waves
        self.n = len(waves)
        if self.n and waves[-1] - waves[0] == self.n - 1:
            self.idx: slice | np.ndarray = slice(int(waves[0]), int(waves[-1]) + 1)
        else:
            self.idx = waves
        self._mask_ok = False
        self._mask: np.ndarray | None = None

    def mask(self) -> np.ndarray | None:
        """The EXEC mask of the batch as bool (waves, 32), or None when every lane of every wave is active."""
        if not self._mask_ok:
            e = self.m.s[EXEC][self.idx]
            if (e == FULL).all():
                self._mask = None
            else:
                b = np.ascontiguousarray(e).view(np.uint8).reshape(-1, 4)
                self._mask = np.unpackbits(b, axis=1, bitorder="little").view(bool)
            self._mask_ok = True
        return self._mask

    def exec_written(self) -> None:
        self._mask_ok = False

    def active_lanes(self) -> np.ndarray:
        """(waves-in-batch, 32) bool of the active lanes (all True when EXEC is full)."""
        mk = self.mask()
        return np.ones((self.n, WAVE), bool) if mk is None else mk
