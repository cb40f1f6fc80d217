"""The KFD driver and its GPUs, on an OS layer (tg_amd/kfd/oslayer.py).

`KFDDriver(os_layer)` opens /dev/kfd, reads the topology (tg_amd/kfd/topology.py) and the KFD version;
`driver.gpu(i)` opens GPU i: its render node, ACQUIRE_VM, RUNTIME_ENABLE (KFD >= 1.14), the events
(tg_amd/kfd/events.py). A `KFDGPU` allocates memory the way amd.md 6 describes: reserve the VA with an anonymous
PROT_NONE mmap, ALLOC_MEMORY_OF_GPU at that VA, mmap the render node over it at the returned mmap_offset (or, for
USERPTR, allocate host memory first and pass its address), then MAP_MEMORY_TO_GPU: the GPU VA is the CPU VA.
Queues are tg_amd/kfd/queues.py.
"""
from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tg_amd.kfd import ioctl as K
from tg_amd.kfd.oslayer import (
    MAP_ANONYMOUS,
    MAP_FIXED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    MAP_SHARED,
    PROT_NONE,
    PROT_READ,
    PROT_WRITE,
    OSLayer,
)
from tg_amd.kfd.topology import KFDNode, read_gpu_nodes

if TYPE_CHECKING:
    from tg_amd.kfd.queues import KFDQueue, QueueKind

KFD_PATH = "/dev/kfd"
PAGE = 0x1000
MemoryKind = Literal["vram", "gtt", "userptr"]
MEMORY_KINDS = ("vram", "gtt", "userptr")


def round_page(n: int) -> int:
    return (n + PAGE - 1) & ~(PAGE - 1)


def call(os_layer: OSLayer, fd: int, name: str, **fields: int) -> ctypes.Structure:
    """Run KFD ioctl `name` with its struct's fields set from `fields`; returns the struct (out fields filled)."""
    spec = K.IOCTLS[name]
    args = spec.args(**fields)
    try:
        os_layer.ioctl(fd, spec.request, args)
    except OSError as e:
        raise OSError(e.errno, f"KFD {name} ({args!r}) failed: {e.strerror or e}") from e
    return args


def alloc_flags(kind: MemoryKind, cpu_access: bool) -> int:
    """amd.md 6: always WRITABLE|EXECUTABLE|NO_SUBSTITUTE; GTT is uncached (+COHERENT|UNCACHED); host memory is
    USERPTR; PUBLIC when the CPU reaches it."""
    if kind not in MEMORY_KINDS:
        raise ValueError(f"memory kind {kind!r}: allowed {', '.join(MEMORY_KINDS)}")
    F = K.AllocFlags
    flags = F.WRITABLE | F.EXECUTABLE | F.NO_SUBSTITUTE
    flags |= {"vram": F.VRAM, "gtt": F.GTT | F.COHERENT | F.UNCACHED, "userptr": F.USERPTR}[kind]
    if cpu_access or kind == "userptr":
        flags |= F.PUBLIC
    return flags


@dataclass(frozen=True)
class KFDMemory:
    """An allocation: `va` is both the GPU and the CPU address; `host_visible` when the CPU may read and write it."""
    va: int
    size: int
    handle: int
    flags: int
    kind: MemoryKind
    host_visible: bool


class KFDDriver:
    """/dev/kfd on an OS layer: the GPU nodes and the KFD version."""

    def __init__(self, os_layer: OSLayer):
        self.os = os_layer
        self.fd = os_layer.open(KFD_PATH, os.O_RDWR | os.O_CLOEXEC)
        self.nodes: list[KFDNode] = read_gpu_nodes(os_layer)
        ver = call(os_layer, self.fd, "GET_VERSION")
        self.version: tuple[int, int] = (ver.major_version, ver.minor_version)
        self.event_page: KFDMemory | None = None   # one per process, shared by the GPUs (events.py)
        self._gpus: dict[int, KFDGPU] = {}

    def gpu(self, index: int) -> KFDGPU:
        if not 0 <= index < len(self.nodes):
            raise IndexError(f"no KFD GPU {index}: this system has {len(self.nodes)} GPU node(s)")
        if index not in self._gpus:
            self._gpus[index] = KFDGPU(self, self.nodes[index])
        return self._gpus[index]

    def close(self) -> None:
        for g in self._gpus.values():
            g.close()
        self._gpus.clear()
        page, self.event_page = self.event_page, None
        if page is not None:  # shared by the GPUs' events: freed once they are all destroyed
            self.os.munmap(page.va, page.size)
            call(self.os, self.fd, "FREE_MEMORY_OF_GPU", handle=page.handle)
        self.os.close(self.fd)


class KFDGPU:
    """One GPU: its VM acquired, memory, queues (queues.py) and events (events.py)."""

    def __init__(self, driver: KFDDriver, node: KFDNode):
        from tg_amd.kfd.events import KFDEvents
        self.driver, self.node, self.os = driver, node, driver.os
        self.gpu_id, self.arch = node.gpu_id, node.arch
        self.drm_fd = self.os.open(node.render_node, os.O_RDWR | os.O_CLOEXEC)
        call(self.os, driver.fd, "ACQUIRE_VM", drm_fd=self.drm_fd, gpu_id=self.gpu_id)
        if driver.version >= K.RUNTIME_ENABLE_MIN_VERSION:
            call(self.os, driver.fd, "RUNTIME_ENABLE", mode_mask=0)
        self.doorbell_base, self.doorbell_map = -1, 0   # the two doorbell pages, mapped at the first queue
        self.allocations: dict[int, KFDMemory] = {}
        self.queues: list[KFDQueue] = []                 # queues.create_queue adds, KFDQueue.destroy removes
        self.events = KFDEvents(self)

    def ioctl(self, name: str, **fields: int) -> ctypes.Structure:
        return call(self.os, self.driver.fd, name, **fields)

    # ---- memory ----

    def alloc(self, size: int, kind: MemoryKind = "vram", cpu_access: bool = False) -> KFDMemory:
        """`size` bytes (rounded up to pages) of `kind` memory mapped on this GPU, at a VA the CPU shares."""
        if size <= 0:
            raise ValueError(f"allocation size must be positive, got {size}")
        flags, size = alloc_flags(kind, cpu_access), round_page(size)
        if kind == "userptr":
            addr = self.os.mmap(0, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)
        else:
            addr = self.os.mmap(0, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
        try:
            mem = self.ioctl("ALLOC_MEMORY_OF_GPU", va_addr=addr, size=size, gpu_id=self.gpu_id, flags=flags,
                             mmap_offset=addr if kind == "userptr" else 0)
        except OSError:
            self.os.munmap(addr, size)
            raise
        handle = mem.handle
        if kind != "userptr":
            got = self.os.mmap(addr, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, self.drm_fd,
                               mem.mmap_offset)
            if got != addr:
                raise OSError(f"the render node mapped allocation {handle:#x} at {got:#x}, not at its VA {addr:#x}")
        out = KFDMemory(addr, size, handle, flags, kind, host_visible=kind != "vram" or cpu_access)
        self.map(out)
        self.allocations[out.va] = out
        return out

    def _map_call(self, name: str, mem: KFDMemory) -> None:
        ids = (ctypes.c_uint32 * 1)(self.gpu_id)
        res = self.ioctl(name, handle=mem.handle, device_ids_array_ptr=ctypes.addressof(ids), n_devices=1)
        if res.n_success != 1:
            raise OSError(f"KFD {name} of {mem.va:#x} succeeded on {res.n_success} of 1 GPU")

    def map(self, mem: KFDMemory) -> None:
        """Map `mem` (maybe another GPU's) into this GPU's VM."""
        self._map_call("MAP_MEMORY_TO_GPU", mem)

    def unmap(self, mem: KFDMemory) -> None:
        self._map_call("UNMAP_MEMORY_FROM_GPU", mem)

    def free(self, mem: KFDMemory) -> None:
        if self.allocations.pop(mem.va, None) is None:
            raise ValueError(f"free of {mem.va:#x}, which is not a live allocation of GPU {self.gpu_id}")
        self.unmap(mem)
        self.os.munmap(mem.va, mem.size)
        self.ioctl("FREE_MEMORY_OF_GPU", handle=mem.handle)

    # ---- doorbells ----

    def doorbell_address(self, doorbell_offset: int) -> int:
        """The CPU address of a queue's doorbell: two pages of /dev/kfd are mapped at the first queue's offset
        (rounded down to 0x2000), and every queue's doorbell is in them (amd.md 6)."""
        base = doorbell_offset & ~0x1FFF
        if self.doorbell_base < 0:
            self.doorbell_map = self.os.mmap(0, 0x2000, PROT_READ | PROT_WRITE, MAP_SHARED, self.driver.fd, base)
            self.doorbell_base = base
        if base != self.doorbell_base:
            raise OSError(f"doorbell offset {doorbell_offset:#x} is outside this GPU's doorbell pages at "
                          f"{self.doorbell_base:#x}")
        return self.doorbell_map + doorbell_offset - base

    def create_queue(self, kind: QueueKind, ring_size: int = 16 << 20) -> KFDQueue:
        """A PM4 ("pm4"), AQL ("aql") or SDMA ("sdma") queue (tg_amd/kfd/queues.py)."""
        from tg_amd.kfd.queues import create_queue
        return create_queue(self, kind, ring_size)

    def close(self) -> None:
        for q in list(self.queues):
            q.destroy()
        for mem in list(self.allocations.values()):
            if self.driver.event_page is not None and mem.va == self.driver.event_page.va:
                continue
            self.free(mem)
        self.events.close()
        if self.doorbell_base >= 0:
            self.os.munmap(self.doorbell_map, 0x2000)
            self.doorbell_base = -1
        self.os.close(self.drm_fd)
