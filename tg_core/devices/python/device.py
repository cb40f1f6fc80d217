"""The PYTHON device: host bytes for memory, kernel ASTs run by the reference interpreter (interpreter.py).

It takes the same pipeline as every device (`Compiled.get_runner`), with the trivial stages of `InterpretedKernels`:
there is no renderer or compiler, since the interpreter runs the kernel AST itself. Other devices whose kernels run
on the interpreter (the plugin template) subclass `InterpretedKernels` too.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from tg_core.codegen.pipeline import ast_program
from tg_core.codegen.program import Program
from tg_core.device import Buffer, BufferSpec, Compiled, LRUAllocator, PreparedKernel, RunnerFn, host_memory
from tg_core.devices.python.interpreter import plan_kernel, run_kernel
from tg_core.dtype import to_numpy_dtype
from tg_core.uop.uop import UOp


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


class InterpretedKernels(Compiled):
    """The pipeline's stages for a device whose kernels run on core's reference interpreter: the program is the
    kernel AST as it is (`ast_program`: no codegen stage runs, so the oracle shares no pass with the backends it
    checks), "rendering" hands on that AST, compiling is nothing, and loading plans the kernel (a dtype the
    interpreter cannot compute in fails here, before anything runs) and returns the runner that interprets it.
    A device subclassing it says only how its memory looks as a numpy array (`array`)."""

    def array(self, buf: Buffer) -> np.ndarray:
        """The 1-D numpy array of `buf`'s elements, sharing the device memory (the interpreter writes into it)."""
        raise NotImplementedError(f"{type(self).__name__} must say how its buffers look as numpy arrays (array)")

    def lower(self, kernel: PreparedKernel) -> Program:
        return ast_program(kernel.ast)

    def render(self, program: Program) -> UOp:
        return program.uops[-1]  # the kernel's SINK: what the interpreter runs

    def compile(self, src: Any) -> Any:
        return src  # nothing to compile (nor to cache: the AST is hash-consed)

    def load(self, program: Program, lib: UOp) -> RunnerFn:
        ast, array = lib, self.array
        plan_kernel(ast)

        def run(bufs: list[Buffer], var_vals: Mapping[str, int]) -> None:
            run_kernel(ast, [array(b) for b in bufs], var_vals)
        return run


class PythonDevice(InterpretedKernels):
    """Runs kernel ASTs with core's reference interpreter (numpy over whole ranges, exact semantics)."""

    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, PythonAllocator())

    def array(self, buf: Buffer) -> np.ndarray:
        return np.frombuffer(buf.opaque, dtype=to_numpy_dtype(buf.dtype))
