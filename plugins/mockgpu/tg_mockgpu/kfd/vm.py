"""The mock KFD's address space: which GPU VA ranges are allocated, what backs them, and which GPUs map them.

GPU VA = CPU VA, as with KFD. A `Region` is one ALLOC_MEMORY_OF_GPU: VRAM is a range of the owning GPU's
`GPUMemory` (tg_mockgpu/memory.py: 4 KiB pages scattered in its backing store), reached at `backing + (va -
region.va)`; GTT is a memfd the driver maps twice, privately at `backing` and, when the host mmaps the render
node, at the region's VA, so host stores are seen by the GPU side; USERPTR is the host's own memory at `backing`.
`GPUView` is one GPU's side of it: reads and writes of ranges mapped on that GPU (MAP_MEMORY_TO_GPU), a
`PageFault` otherwise.
"""
from __future__ import annotations

import bisect
import ctypes
from dataclasses import dataclass, field
from typing import Literal

from tg_mockgpu.memory import GPUMemory, PageFault

RegionKind = Literal["vram", "gtt", "userptr"]


@dataclass
class Region:
    va: int
    size: int
    kind: RegionKind
    gpu: int              # the allocating GPU's index
    handle: int
    flags: int
    backing: int          # vram: GPUMemory VA; gtt: the driver's own mapping; userptr: the host address
    mmap_offset: int = 0
    memfd: int = -1
    mapped_on: set[int] = field(default_factory=set)


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

    def read(self, va: int, nbytes: int) -> bytes:
        r = self.region(va, nbytes, False)
        if r.kind == "vram":
            return self.vram[r.gpu].read(r.backing + va - r.va, nbytes)
        return ctypes.string_at(r.backing + va - r.va, nbytes)

    def write(self, va: int, data: bytes | bytearray | memoryview) -> None:
        data = bytes(data)
        r = self.region(va, len(data), True)
        if r.kind == "vram":
            self.vram[r.gpu].write(r.backing + va - r.va, data)
        else:
            ctypes.memmove(r.backing + va - r.va, data, len(data))

    def read64(self, va: int) -> int:
        return int.from_bytes(self.read(va, 8), "little")

    def write64(self, va: int, value: int) -> None:
        self.write(va, (value & (1 << 64) - 1).to_bytes(8, "little"))
