"""The HOSTJIT device: numpy host memory, and the one stage of core's pipeline a compiling device must add.

`Compiled.get_runner(ast)` runs prepare -> lower -> render -> compile -> load -> make_runner once per kernel.
Core's defaults do the rest (lowering with the renderer's rules, rendering, caching compiled code by source);
this device gives the compiler and overrides `load`: it turns an object file into a callable over buffers.
"""
from __future__ import annotations

import ctypes
from collections.abc import Mapping
from typing import Any

import numpy as np

from tg_core.plugin_api import Buffer, BufferSpec, Compiled, LRUAllocator, Program, dtypes
from tg_llvm_template.compiler import LoadedObject, ObjectCompiler

# the C types of the int variables a kernel takes after its buffers (DEFINE_VARs are int32 or int64)
_CTYPES = {dtypes.int32: ctypes.c_int32, dtypes.int64: ctypes.c_int64}


class HostAllocator(LRUAllocator):
    """A numpy byte array per allocation; a view is a slice, which shares its memory."""

    def _alloc(self, size: int, options: BufferSpec) -> np.ndarray:
        return np.empty(size, np.uint8)

    def _free(self, opaque: np.ndarray, size: int, options: BufferSpec) -> None:
        pass  # numpy frees the array when nothing refers to it

    def _offset(self, opaque: np.ndarray, offset: int, size: int) -> np.ndarray:
        return opaque[offset:offset + size]

    def copyin(self, dest: np.ndarray, src: memoryview) -> None:
        dest[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, src: np.ndarray) -> None:
        dest[:] = src.data


class JITRunner:
    """Calls a loaded kernel `void f(void *buf0, ..., var0, ...)`: buffer addresses, then the variables' values."""

    def __init__(self, program: Program, loaded: LoadedObject, symbol: str):
        layout = program.layout
        argtypes = [ctypes.c_void_p] * layout.nbuffers + [_CTYPES[v.dtype] for v in layout.variables]
        self.fn = ctypes.CFUNCTYPE(None, *argtypes)(loaded.address(symbol))
        self.var_names = [v.name for v in layout.variables]
        self._keep = loaded  # the machine code lives as long as the object holding it

    def __call__(self, bufs: list[Buffer], var_vals: Mapping[str, int]) -> None:
        self.fn(*(b.opaque.ctypes.data for b in bufs), *(var_vals[n] for n in self.var_names))


class HostJITDevice(Compiled):
    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, HostAllocator(), compiler=ObjectCompiler(options["opt_level"]))

    def load(self, program: Program, lib: bytes) -> JITRunner:
        # core builds one kernel at a time per device (get_runner holds a lock), so LLVM is never used concurrently
        return JITRunner(program, LoadedObject(lib), self.render_with.function_name(program))
