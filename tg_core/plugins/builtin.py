"""Core's built-in plugin: the reference device PYTHON, the registry's last resort.

It is registered like any plugin (its manifest is built in, see manager._builtin_record) so that the
registry always has a device. Its memory is host bytes; running programs on it (the reference
interpreter, the oracle for tests) comes with the Tensor API.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tg_core.device import Buffer, BufferSpec, Compiled, LRUAllocator, host_memory
from tg_core.dtype import to_numpy_dtype
from tg_core.plugins.hookspecs import hookimpl
from tg_core.plugins.specs import DeviceSpec


class PythonAllocator(LRUAllocator):
    """Host memory as memoryviews of bytearrays; a view is a slice of its base's memoryview."""
    capacity = host_memory()

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
    """Runs kernel ASTs with core's reference interpreter (numpy over whole ranges, exact semantics)."""

    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, PythonAllocator())

    def get_runner(self, ast: Any) -> Callable[[list[Buffer], dict[str, int]], None]:
        from tg_core.interpreter import plan_kernel, run_kernel
        plan_kernel(ast)

        def run(bufs: list[Buffer], var_vals: dict[str, int]) -> None:
            arrays = [np.frombuffer(b.opaque, dtype=to_numpy_dtype(b.dtype)) for b in bufs]
            run_kernel(ast, arrays, var_vals)
        return run


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    return [DeviceSpec("PYTHON", PythonDevice, description="reference device (slow, exact); always available")]
