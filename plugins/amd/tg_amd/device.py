"""The AMD device: GPU memory through the chosen interface, kernels rendered to LLVM IR, compiled for gfx1100,
read by tg_amd's ELF reader and dispatched through the interface."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tg_core.device import BufferSpec, Compiled, LRUAllocator
from tg_amd.interface import GPUBuffer
from tg_amd.select import open_interface


class AMDAllocator(LRUAllocator):
    """GPU memory from the interface; the host reaches it only through the interface's copies (the mock's pages are
    not contiguous in its backing store, so there is no single host view of a buffer)."""

    def __init__(self, iface: Any):
        super().__init__()
        self.iface = iface

    def _alloc(self, size: int, options: BufferSpec) -> GPUBuffer:
        return self.iface.alloc(size)

    def _free(self, opaque: GPUBuffer, size: int, options: BufferSpec) -> None:
        self.iface.free(opaque)

    def _offset(self, opaque: GPUBuffer, offset: int, size: int) -> GPUBuffer:
        return opaque.view(offset, size)

    def copyin(self, dest: GPUBuffer, src: memoryview) -> None:
        self.iface.copyin(dest, src)

    def copyout(self, dest: memoryview, src: GPUBuffer) -> None:
        self.iface.copyout(dest, src)


class AMDDevice(Compiled):
    def __init__(self, device: str, options: Mapping[str, Any]):
        self.interface, self.interface_reason = open_interface(device, options["interface"])
        super().__init__(device, AMDAllocator(self.interface))

    def close(self) -> None:
        super().close()
        self.interface.close()

    def __repr__(self) -> str:
        return f"<AMDDevice {self.device} {self.interface.arch} via {self.interface.name} ({self.interface_reason})>"
