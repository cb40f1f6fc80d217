"""Building test kernels for the mock GPU: gfx1100 assembly through llvm-mc-19, LLVM IR through llvmlite, and a
runner that dispatches them on a MockInterface and reads buffers back."""
from __future__ import annotations

import shutil
import struct
import subprocess

import numpy as np
import pytest

from tg_amd.elf import load_code_object, read_elf
from tg_amd.interface import DESCRIPTOR_SIZE, CodeObject, GPUBuffer, KernelDescriptor, KernelSymbol
from tg_mockgpu.interface import MockInterface

LLVM_MC = "llvm-mc-19"
needs_llvm_mc = pytest.mark.skipif(shutil.which(LLVM_MC) is None,
                                   reason="llvm-mc-19 is not installed (apt-get install llvm-19)")

KERNARG_PTR, WAVE32 = 1 << 3, 1 << 10


def assemble(asm: str) -> bytes:
    """The .text bytes of gfx1100 assembly (labels and branches resolved by llvm-mc). 16-bit operands may name
    register halves (v1.l, v1.h: real true16, which is what LLVM 22 emits for gfx1100)."""
    cmd = [LLVM_MC, "-triple=amdgcn-amd-amdhsa", "-mcpu=gfx1100", "-mattr=+real-true16", "-filetype=obj", "-o", "-"]
    p = subprocess.run(cmd, input=asm.encode(), capture_output=True, check=False)
    if p.returncode:
        raise ValueError(f"llvm-mc failed:\n{p.stderr.decode()}")
    return read_elf(p.stdout).section(".text").data


def asm_kernel(asm: str, name: str = "k", vgprs: int = 8, user_sgprs: int = 2, tgid: tuple[int, int, int] = (1, 0, 0),
               tidig: int = 0, lds: int = 0, scratch: int = 0, props: int = KERNARG_PTR | WAVE32,
               kernarg_size: int = 64) -> CodeObject:
    """A code object holding one hand-written kernel: its code at offset 0 and a descriptor enabling what is asked."""
    code = assemble(asm + "\ns_endpgm\n")
    desc_at = -(-len(code) // 256) * 256
    rsrc1 = (-(-vgprs // 8) - 1) | (3 << 16) | (3 << 18)       # VGPR granules of 8; keep f32 and f16/f64 denormals
    rsrc2 = (scratch > 0) | (user_sgprs << 1) | (tgid[0] << 7) | (tgid[1] << 8) | (tgid[2] << 9) | (tidig << 11)
    kd = KernelDescriptor(lds, scratch, kernarg_size, -desc_at, rsrc1, rsrc2, 0, props, 0)
    image = code + bytes(desc_at - len(code)) + kd.to_bytes()
    return CodeObject("gfx1100", image, {name: KernelSymbol(name, 0, len(code), desc_at, kd)})


def ir_kernel(ir: str) -> CodeObject:
    """Compile LLVM IR for gfx1100 with llvmlite (the O2 pipeline, as tg-amd does) and load its code object."""
    from tg_amd.compiler import AMDCompiler
    return load_code_object(AMDCompiler("gfx1100").compile(ir))


class Runner:
    """A mock GPU with helpers to put numpy arrays in buffers, dispatch and read results."""

    def __init__(self) -> None:
        self.gpu = MockInterface()
        self.bufs: list[GPUBuffer] = []

    def buffer(self, arr: np.ndarray) -> GPUBuffer:
        arr = np.ascontiguousarray(arr)
        b = self.gpu.alloc(max(arr.nbytes, 4))
        self.gpu.copyin(b, memoryview(arr.tobytes()))
        self.bufs.append(b)
        return b

    def read(self, buf: GPUBuffer, dtype: type, n: int) -> np.ndarray:
        out = bytearray(np.dtype(dtype).itemsize * n)
        self.gpu.copyout(memoryview(out), buf)
        return np.frombuffer(bytes(out), dtype)

    def run(self, co: CodeObject, global_size: tuple[int, int, int], local_size: tuple[int, int, int],
            *args: GPUBuffer | int, name: str = "k") -> None:
        kernargs = b"".join(struct.pack("<Q", a.va) if isinstance(a, GPUBuffer) else struct.pack("<I", a & 0xFFFFFFFF)
                            for a in args)
        size = co.kernel(name).descriptor.kernarg_size
        self.gpu.dispatch(co, name, global_size, local_size, kernargs + bytes(max(0, size - len(kernargs))))

    def close(self) -> None:
        self.gpu.close()


__all__ = ["DESCRIPTOR_SIZE", "Runner", "asm_kernel", "assemble", "ir_kernel", "needs_llvm_mc"]
