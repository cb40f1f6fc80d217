"""GPU memory of the AMD device: buffers are KFD allocations (VRAM, or GTT for host-visible buffers), and copies
between the host and VRAM go through SDMA, staged in host-visible memory.

The host never touches VRAM: on a real GPU most of it is not CPU-visible (and the mock's VRAM pages are scattered
in its backing store on purpose). `copyin` writes the bytes into a staging GTT buffer and lets the device's copy
queue (SDMA) move them; `copyout` the other way round, then waits. A host-visible buffer (BufferSpec(host=True):
timelines, signals, command buffers) is copied directly, after the device is idle.
"""
from __future__ import annotations

import ctypes
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.plugin_api import Buffer, BufferSpec, LRUAllocator, dtypes
from tg_amd.kfd.driver import KFDMemory, MemoryKind

if TYPE_CHECKING:
    from tg_amd.device import AMDDevice


@dataclass(frozen=True)
class KFDBuffer:
    """A buffer's memory: `va` (the GPU and CPU address) and `size`, inside allocation `mem` (None: memory the device
    borrows, such as a queue's ring, which is not freed through the allocator)."""
    va: int
    size: int
    host_visible: bool
    mem: KFDMemory | None

    def view(self, offset: int, size: int) -> KFDBuffer:
        if offset < 0 or offset + size > self.size:
            raise ValueError(f"a view of {size} bytes at offset {offset} of a buffer of {self.size} bytes")
        return KFDBuffer(self.va + offset, size, self.host_visible, self.mem)

    def host_array(self) -> np.ndarray:
        """The bytes as a uint8 numpy array over the mapping (host-visible memory only)."""
        if not self.host_visible:
            raise ValueError(f"the buffer at {self.va:#x} is VRAM, which the host does not map; copy it with SDMA")
        if self.size == 0:
            return np.zeros(0, np.uint8)
        return np.ctypeslib.as_array((ctypes.c_uint8 * self.size).from_address(self.va))


class AMDAllocator(LRUAllocator):
    """KFD memory of one GPU (mapped on every GPU of the system, kfd/system.py)."""

    def __init__(self, dev: AMDDevice):
        super().__init__()
        self.dev = weakref.ref(dev)
        self.system, self.gpu = dev.system, dev.gpu

    def _alloc(self, size: int, options: BufferSpec) -> KFDBuffer:
        kind: MemoryKind = "gtt" if options.host else "vram"
        try:
            mem = self.system.alloc(self.gpu, size, kind)
        except OSError as e:
            raise MemoryError(f"KFD {kind} allocation of {size} bytes on GPU {self.gpu.gpu_id:#x}: {e}") from e
        return KFDBuffer(mem.va, size, mem.host_visible, mem)

    def _free(self, opaque: KFDBuffer, size: int, options: BufferSpec) -> None:
        if opaque.mem is not None:
            self.system.free(self.gpu, opaque.mem)

    def _offset(self, opaque: KFDBuffer, offset: int, size: int) -> KFDBuffer:
        return opaque.view(offset, size)

    def _device(self) -> AMDDevice:
        dev = self.dev()
        if dev is None:
            raise RuntimeError("the AMD device of this buffer was closed")
        return dev

    def copyin(self, dest: KFDBuffer, src: memoryview) -> None:
        dev = self._device()
        if dest.host_visible:
            dev.synchronize()  # the queues may still read the old contents
            dest.host_array()[:] = np.frombuffer(src, np.uint8)
            return
        staging = dev.host_buffer(dest.size)
        staging.opaque.host_array()[:] = np.frombuffer(src, np.uint8)
        dev.sdma_copy(dest, staging)

    def copyout(self, dest: memoryview, src: KFDBuffer) -> None:
        dev = self._device()
        if src.host_visible:
            dev.synchronize()
            np.frombuffer(dest, np.uint8)[:] = src.host_array()
            return
        staging = dev.host_buffer(src.size)
        dev.sdma_copy(staging, src)
        dev.synchronize()
        np.frombuffer(dest, np.uint8)[:] = staging.opaque.host_array()


def borrowed(device: str, allocator: Any, va: int, size: int) -> Buffer:
    """A Buffer over host-visible memory the device owns outside the allocator (a queue's ring or pointers)."""
    buf = Buffer(device, size, dtypes.uint8, BufferSpec(host=True, nolru=True))
    buf._allocator = allocator
    return buf.allocate(KFDBuffer(va, size, True, None))
