"""Host memory for the CPU device: 64-byte aligned allocations that kernels address directly.

An allocation is a `HostMemory`: a numpy uint8 array over the bytes and their address, computed once, so
the runner passes addresses to kernels without asking numpy per call. A view shares its base's array.
"""
from __future__ import annotations

import numpy as np

from tg_core.plugin_api import BufferSpec, DType, LRUAllocator, host_memory, to_numpy_dtype

ALIGN = 64  # a cache line, and the widest vector load (AVX-512) kernels may align to


class HostMemory:
    """`array` (uint8, writable, `size` bytes) and `addr`, the address of its first byte."""
    __slots__ = ("array", "addr")

    def __init__(self, array: np.ndarray, addr: int):
        self.array, self.addr = array, addr

    def numpy(self, dtype: DType) -> np.ndarray:
        """A numpy view of the memory as `dtype` elements: no copy, writes show in the buffer."""
        return self.array.view(to_numpy_dtype(dtype))

    def __len__(self) -> int:
        return self.array.nbytes

    def __repr__(self) -> str:
        return f"<HostMemory {self.array.nbytes} bytes at {self.addr:#x}>"


class CPUAllocator(LRUAllocator):
    """Aligned host memory; freed allocations are kept for reuse by `LRUAllocator`. New memory is not zeroed
    (kernels write every element they own), which keeps large allocations cheap."""
    capacity = host_memory()

    def _alloc(self, size: int, options: BufferSpec) -> HostMemory:
        raw = np.empty(size + ALIGN, np.uint8)
        start = -raw.ctypes.data % ALIGN
        array = raw[start:start + size]
        return HostMemory(array, raw.ctypes.data + start)

    def _free(self, opaque: HostMemory, size: int, options: BufferSpec) -> None:
        pass  # numpy frees the memory when the last view of it is gone

    def _offset(self, opaque: HostMemory, offset: int, size: int) -> HostMemory:
        return HostMemory(opaque.array[offset:offset + size], opaque.addr + offset)

    def adopt_host(self, array: np.ndarray) -> HostMemory:
        # kernels address any byte (no alignment beyond their element's is assumed); the view keeps it alive
        return HostMemory(array, array.ctypes.data)

    def copyin(self, dest: HostMemory, src: memoryview) -> None:
        dest.array[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, src: HostMemory) -> None:
        np.frombuffer(dest, np.uint8)[:] = src.array

    def host_view(self, opaque: HostMemory) -> memoryview:
        # kernels run synchronously, so the memory holds its final contents whenever the host asks
        return memoryview(opaque.array.data)
