"""Core's built-in plugin: the reference device PYTHON, the registry's last resort.

It is registered like any plugin (its manifest is built in, see manager._builtin_record) so that the
registry always has a device. Its memory is host bytes; running programs on it (the reference
interpreter, the oracle for tests) comes with the Tensor API.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tg_core.device import BufferSpec, Compiled, LRUAllocator
from tg_core.plugins.hookspecs import hookimpl
from tg_core.plugins.specs import DeviceSpec


class PythonAllocator(LRUAllocator):
    """Host memory as memoryviews of bytearrays; a view is a slice of its base's memoryview."""

    def _alloc(self, size: int, options: BufferSpec) -> memoryview:
        return memoryview(bytearray(size))

    def _free(self, opaque: memoryview, size: int, options: BufferSpec) -> None:
        pass  # the garbage collector frees the bytearray once no view of it is left

    def _offset(self, opaque: memoryview, offset: int, size: int) -> memoryview:
        return opaque[offset:offset + size]

    def copyin(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src

    def copyout(self, dest: memoryview, src: memoryview) -> None:
        dest[:] = src


class PythonDevice(Compiled):
    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, PythonAllocator())


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    return [DeviceSpec("PYTHON", PythonDevice, description="reference device (slow, exact); always available")]
