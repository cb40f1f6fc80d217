"""The mock KFD's address space: which GPU VA ranges are allocated, what backs them, and which GPUs map them.

GPU VA = CPU VA, as with KFD, and every VA the host reserves through the mock's mmap lies in one window
(`VAWindow`), which is each GPU's `GPUMemory` page table's range: so a GPU's page table maps exactly what is
mapped on it, and kernels reach it with the emulator's gather/scatter unchanged. A `Region` is one
ALLOC_MEMORY_OF_GPU: VRAM is a set of the owning GPU's physical pages (`phys`: 4 KiB pages scattered in its
backing store); GTT is a memfd the driver maps twice, privately at `backing` and, when the host mmaps the render
node, at the region's VA, so host stores are seen by the GPU side; USERPTR is the host's own memory at `backing`
(a memfd-backed mapping the mock made, `host_fd`/`host_offset`). MAP_MEMORY_TO_GPU puts the pages in that GPU's
page table: its own VRAM pages, or host memory aliased into its store (`GPUMemory.alias_pages`; `aliases` keeps
them per GPU). Another GPU's VRAM is reachable by that GPU's engines (command processors, SDMA) but not by its
kernels (the mock's stores are separate; a kernel's access there is a page fault).
`GPUView` is one GPU's side for the engines: reads and writes of ranges mapped on that GPU, a `PageFault` otherwise.
"""
from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tg_mockgpu.memory import PAGE_SIZE, GPUMemory, PageFault

RegionKind = Literal["vram", "gtt", "userptr"]


@dataclass
class Region:
    va: int
    size: int
    kind: RegionKind
    gpu: int              # the allocating GPU's index
    handle: int
    flags: int
    backing: int          # vram: unused (0); gtt: the driver's own mapping; userptr: the host address
    mmap_offset: int = 0
    memfd: int = -1       # gtt: the region's own memfd (closed at free)
    mapped_on: set[int] = field(default_factory=set)
    phys: np.ndarray | None = None                 # vram: its physical pages in the owner's store
    host_fd: int = -1                              # host memory (gtt, userptr): the file and offset its pages are
    host_offset: int = 0
    aliases: dict[int, np.ndarray] = field(default_factory=dict)   # GPU index -> store pages aliasing it there
    host_unmapped: bool = False                    # the host munmapped its VA (the window range waits for FREE)


class VAWindow:
    """The mock's range of virtual addresses: one PROT_NONE reservation of the host's address space, handed out
    first fit (page-aligned, each range followed by an unmapped guard page, so an overrun faults)."""

    def __init__(self, base: int, size: int):
        self.base, self.size = base, size
        self.free: list[tuple[int, int]] = [(base, size)]     # (start, bytes), sorted
        self.used: dict[int, int] = {}                         # start -> bytes taken (with the guard page)

    def take(self, nbytes: int) -> int:
        need = -(-nbytes // PAGE_SIZE) * PAGE_SIZE + PAGE_SIZE
        for i, (start, n) in enumerate(self.free):
            if n >= need:
                self.free[i:i + 1] = [(start + need, n - need)] if n > need else []
                self.used[start] = need
                return start
        raise MemoryError(f"mock KFD: no {nbytes:#x} bytes of GPU virtual address space left in its "
                          f"{self.size:#x}-byte window")

    def contains(self, va: int) -> bool:
        return self.base <= va < self.base + self.size

    def give(self, va: int) -> None:
        n = self.used.pop(va)
        bisect.insort(self.free, (va, n))
        merged: list[tuple[int, int]] = []
        for start, k in self.free:
            if merged and merged[-1][0] + merged[-1][1] == start:
                merged[-1] = (merged[-1][0], merged[-1][1] + k)
            else:
                merged.append((start, k))
        self.free = merged


class AddressSpace:
    """Regions by VA (non-overlapping)."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._regions: list[Region] = []

    def add(self, region: Region) -> None:
        i = bisect.bisect_left(self._starts, region.va)
        prev_end = self._regions[i - 1].va + self._regions[i - 1].size if i else 0
        if region.va < prev_end or (i < len(self._starts) and region.va + region.size > self._starts[i]):
            raise ValueError(f"[{region.va:#x}, {region.va + region.size:#x}) overlaps an allocation")
        self._starts.insert(i, region.va)
        self._regions.insert(i, region)

    def remove(self, region: Region) -> None:
        i = self._starts.index(region.va)
        del self._starts[i], self._regions[i]

    def find(self, va: int, nbytes: int = 1) -> Region | None:
        """The region holding all of [va, va + nbytes), or None."""
        i = bisect.bisect_right(self._starts, va) - 1
        if i < 0:
            return None
        r = self._regions[i]
        return r if va + nbytes <= r.va + r.size else None


class GPUView:
    """GPU `gpu`'s view of the address space: what its engines (command processors, SDMA, shaders) read and
    write. Accesses may not cross a region's end (each allocation is followed by unmapped space)."""

    def __init__(self, space: AddressSpace, vram: list[GPUMemory], gpu: int):
        self.space, self.vram, self.gpu = space, vram, gpu

    def region(self, va: int, nbytes: int, write: bool) -> Region:
        r = self.space.find(va, max(nbytes, 1))
        if r is None or self.gpu not in r.mapped_on:
            raise PageFault(va, write, what=f"GPU {self.gpu}: not mapped to this GPU" if r else f"GPU {self.gpu}")
        return r

    def location(self, va: int) -> tuple[str, int]:
        """Where `va` is, as the SDMA traffic counts it: (memory kind, the allocating GPU's index)."""
        r = self.region(va, 1, False)
        return r.kind, r.gpu

    def read(self, va: int, nbytes: int) -> bytes:
        r = self.region(va, nbytes, False)
        if r.phys is not None:
            return self.vram[r.gpu].read_pages(r.phys, va - r.va, nbytes)
        return ctypes.string_at(r.backing + va - r.va, nbytes)

    def write(self, va: int, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        r = self.region(va, len(data), True)
        if r.phys is not None:
            self.vram[r.gpu].write_pages(r.phys, va - r.va, data)
        else:
            ctypes.memmove(r.backing + va - r.va, data, len(data))

    def read64(self, va: int) -> int:
        return int.from_bytes(self.read(va, 8), "little")

    def write64(self, va: int, value: int) -> None:
        self.write(va, (value & (1 << 64) - 1).to_bytes(8, "little"))
