"""The AMD device: GPU memory through the chosen interface; kernels rendered to LLVM IR (tg_amd/renderer.py),
compiled for the interface's gfx target (tg_amd/compiler.py), read by tg-amd's ELF reader (tg_amd/elf.py) and
dispatched synchronously through the interface with their kernargs (tg_amd/kernargs.py)."""
from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

from tg_core.device import Buffer, BufferSpec, Compiled, LRUAllocator
from tg_core.uop.uop import UOp
from tg_amd.compiler import AMDCompiler
from tg_amd.elf import load_code_object
from tg_amd.interface import CodeObject, GPUBuffer
from tg_amd.kernargs import pack_kernargs
from tg_amd.renderer import AMDRenderer, kernarg_layout
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


class AMDDevice(Compiled):
    def __init__(self, device: str, options: Mapping[str, Any]):
        self.interface, self.interface_reason = open_interface(device, options["interface"])
        super().__init__(device, AMDAllocator(self.interface), AMDCompiler(self.interface.arch))
        self._runners: dict[UOp, Callable[[list[Buffer], dict[str, int]], None]] = {}
        self._objects: dict[bytes, CodeObject] = {}
        self._lock = threading.Lock()

    def code_object(self, lib: bytes) -> CodeObject:
        """The code object of a compiled ELF, read once."""
        if lib not in self._objects:
            self._objects[lib] = load_code_object(lib)
        return self._objects[lib]

    def get_runner(self, ast: UOp) -> Callable[[list[Buffer], dict[str, int]], None]:
        with self._lock:
            if ast not in self._runners:
                self._runners[ast] = self._build(ast)
            return self._runners[ast]

    def _build(self, ast: UOp) -> Callable[[list[Buffer], dict[str, int]], None]:
        renderer = self.renderer() if self.renderer is not None else AMDRenderer()
        if not isinstance(renderer, AMDRenderer):
            raise TypeError(f"{self.device} renders with {type(renderer).__name__}; its runtime needs an AMDRenderer "
                            "(kernel ids, launch dims and kernarg layout)")
        asts, temps = split_nested(ast)
        launches = [self._launcher(renderer, part) for part in asts]
        sizes = [max(n * dt.itemsize, 1) for n, dt in temps]
        alloc = self.allocator

        def run(bufs: list[Buffer], var_vals: dict[str, int]) -> None:
            held = [alloc.alloc(n) for n in sizes]
            try:
                vas = [b.opaque.va for b in bufs] + [t.va for t in held]
                for launch in launches:
                    launch(vas, var_vals)
            finally:
                for t, n in zip(held, sizes):
                    alloc.free(t, n)
        return run

    def _launcher(self, renderer: AMDRenderer, ast: UOp) -> Callable[[list[int], dict[str, int]], None]:
        """Compile one kernel AST; the callable dispatches it given every buffer's GPU address and the variables."""
        prog = renderer.program(ast)
        code = self.code_object(self.compile(renderer.render(prog)))
        kernel = code.kernel(renderer.function_name(prog))
        layout, _ = kernarg_layout(prog)
        sizes = [size for _, size in layout]
        names = [v.arg[0] for v in prog.variables]
        nbufs = len(sizes) - len(names)
        iface, launch = self.interface, prog.launch

        def dispatch(vas: list[int], var_vals: dict[str, int]) -> None:
            if len(vas) < nbufs:
                raise ValueError(f"kernel {kernel.name} takes {nbufs} buffers, got {len(vas)}")
            grid, local = launch.evaluate(var_vals)
            if 0 in grid:
                return  # an empty range: nothing to run
            vals = vas[:nbufs] + [var_vals[n] for n in names]
            iface.dispatch(code, kernel.name, grid, local, pack_kernargs(kernel, list(zip(vals, sizes)), grid, local,
                                                                           layout))
        return dispatch

    def close(self) -> None:
        super().close()
        self.interface.close()

    def __repr__(self) -> str:
        return f"<AMDDevice {self.device} {self.interface.arch} via {self.interface.name} ({self.interface_reason})>"
