"""The AMD device: GPU memory through the chosen interface, and core's pipeline (tg_core/device.py, `Compiled`)
with two stages of its own. `prepare` moves reductions nested in reductions into kernels of their own
(tg_amd/split.py) and turns each kernel's parallel ranges into workgroup and workitem ids with its launch dims
(tg_core/codegen/lib/gpudims.py); the kernels are rendered to LLVM IR (tg_amd/renderer.py) and compiled for the
interface's gfx target (tg_amd/compiler.py) by the core stages; `load` reads the code object with tg-amd's ELF
reader (tg_amd/elf.py) and returns a runner dispatching it synchronously through the interface with its kernargs
(tg_amd/kernargs.py). Core runs the parts of a split kernel in order with their temporaries."""
from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from tg_core.plugin_api import (
    Buffer,
    BufferSpec,
    Compiled,
    LRUAllocator,
    Prepared,
    PreparedKernel,
    Program,
    RunnerFn,
    UOp,
    add_gpudims,
)
from tg_amd.compiler import AMDCompiler
from tg_amd.elf import load_code_object
from tg_amd.interface import CodeObject, GPUBuffer
from tg_amd.kernargs import pack_kernargs
from tg_amd.renderer import MAX_LOCAL, AMDRenderer, kernarg_layout
from tg_amd.select import open_interface
from tg_amd.split import split_nested


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


def prepare_kernel(ast: UOp) -> PreparedKernel:
    """One kernel AST for the GPU: its parallel ranges as workgroup/workitem ids, with the launch dims."""
    gpu_ast, launch = add_gpudims(ast, MAX_LOCAL)
    return PreparedKernel(gpu_ast, launch)


class AMDDevice(Compiled):
    def __init__(self, device: str, options: Mapping[str, Any]):
        self.interface, self.interface_reason = open_interface(device, options["interface"])
        super().__init__(device, AMDAllocator(self.interface), AMDCompiler(self.interface.arch))
        self._objects: dict[bytes, CodeObject] = {}
        self._objects_lock = threading.Lock()

    def code_object(self, lib: bytes) -> CodeObject:
        """The code object of a compiled ELF, read once."""
        with self._objects_lock:
            if lib not in self._objects:
                self._objects[lib] = load_code_object(lib)
            return self._objects[lib]

    # ---- the pipeline's AMD stages ----

    def prepare(self, ast: UOp) -> Prepared:
        """Nested reductions split into kernels of their own (run in order, sharing temporaries), each with its
        parallel ranges as GPU ids."""
        asts, temps = split_nested(ast)
        return Prepared(tuple(prepare_kernel(a) for a in asts), tuple(temps))

    def lower(self, kernel: PreparedKernel) -> Program:
        if not isinstance(self.render_with, AMDRenderer):
            raise TypeError(f"{self.device} renders with {type(self.render_with).__name__}; its runtime needs an "
                            "AMDRenderer (kernel ids, launch dims and kernarg layout)")
        return super().lower(kernel)

    def load(self, program: Program, lib: bytes) -> RunnerFn:
        """A runner dispatching the compiled program through the interface, given every buffer (the caller's, then
        the temporaries of a split kernel) and the variables."""
        if program.launch is None:
            raise ValueError(f"kernel {program.name} has no launch dims: AMD kernels come from prepare_kernel")
        renderer = self.render_with
        assert isinstance(renderer, AMDRenderer)  # lower checked it
        code = self.code_object(lib)
        kernel = code.kernel(renderer.function_name(program))
        layout, _ = kernarg_layout(program)
        sizes = [size for _, size in layout]
        names = [v.name for v in program.layout.variables]
        nbufs = len(sizes) - len(names)
        iface, launch = self.interface, program.launch

        def dispatch(bufs: list[Buffer], var_vals: Mapping[str, int]) -> None:
            if len(bufs) < nbufs:
                raise ValueError(f"kernel {kernel.name} takes {nbufs} buffers, got {len(bufs)}")
            grid, local = launch.evaluate(var_vals)
            if 0 in grid:
                return  # an empty range: nothing to run
            vals = [b.opaque.va for b in bufs[:nbufs]] + [var_vals[n] for n in names]
            iface.dispatch(code, kernel.name, grid, local, pack_kernargs(kernel, list(zip(vals, sizes)), grid, local,
                                                                           layout))
        return dispatch

    def close(self) -> None:
        super().close()
        self.interface.close()

    def __repr__(self) -> str:
        return f"<AMDDevice {self.device} {self.interface.arch} via {self.interface.name} ({self.interface_reason})>"
