"""The TEMPLATE device: buffers are numpy byte arrays, so the plugin shows the device model without hardware.

Replace the allocator's numpy calls with your device's API (allocate, free, copy in, copy out, sub-buffer)
and the device is usable by tg. Kernels run on core's reference interpreter until you give the device a
renderer, a compiler and a loader of its own: examples/llvm_template is this device compiling with LLVM.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tg_core.plugin_api import (
    Buffer,
    BufferSpec,
    DeviceSpec,
    InterpretedKernels,
    LRUAllocator,
    Option,
    hookimpl,
    to_numpy_dtype,
)


class TemplateAllocator(LRUAllocator):
    """Device memory is a numpy uint8 array per allocation; `max_bytes` caps what is in use, like a real VRAM."""

    def __init__(self, max_bytes: int, zero: bool):
        # cache at most a quarter of the device's memory in freed buffers
        super().__init__(cache_limit=max_bytes // 4)
        self.max_bytes, self.zero, self.in_use = max_bytes, zero, 0

    def _alloc(self, size: int, options: BufferSpec) -> np.ndarray:
        if self.in_use + size > self.max_bytes:
            # MemoryError makes LRUAllocator free its cache and try once more
            raise MemoryError(f"TEMPLATE: {size} bytes requested, {self.max_bytes - self.in_use} free")
        self.in_use += size
        return np.zeros(size, np.uint8) if self.zero else np.empty(size, np.uint8)

    def _free(self, opaque: np.ndarray, size: int, options: BufferSpec) -> None:
        self.in_use -= size

    def _offset(self, opaque: np.ndarray, offset: int, size: int) -> np.ndarray:
        # a numpy slice shares memory with its array: that is what a view needs
        return opaque[offset:offset + size]

    def copyin(self, dest: np.ndarray, src: memoryview) -> None:
        dest[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, src: np.ndarray) -> None:
        dest[:] = src.data


class TemplateDevice(InterpretedKernels):
    """Kernels run on core's reference interpreter (InterpretedKernels gives the pipeline's stages for that),
    over this device's own memory. A device with a compiler overrides the stages instead (examples/llvm_template)."""

    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, TemplateAllocator(options["max_bytes"], options["zero"]))

    def array(self, buf: Buffer) -> np.ndarray:
        """The buffer's elements as numpy sees them, sharing the device memory."""
        return buf.opaque.view(to_numpy_dtype(buf.dtype))


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    return [DeviceSpec("TEMPLATE", TemplateDevice, description="template plugin: numpy-backed host memory", options={
        "max_bytes": Option(int, 1 << 30, "bytes the device may have allocated at once", minimum=1),
        "zero": Option(bool, True, "fill new allocations with zeros (real devices usually don't)"),
    })]
