"""The machine's fp32 peak, measured: a loop of independent FMAs on every core, as wide as the host's vectors.

A nominal peak needs the clock and the number of FMA units, which neither CPUID nor a VM reports reliably (a
Zen 4 core issues one 512-bit FMA per cycle on two 256-bit units, a Sapphire Rapids core two), so `tg bench`
divides a matmul's GFLOP/s by this measurement instead: what this machine's FMA units sustain at its current
clock. It is measured on one core (the calling thread) and multiplied by the cores kernels run on: cores do
not share FMA units, and one free core is far likelier than all of them on a shared machine, where a
measurement on every core at once reads another process's load as a lower peak (on 2 busy cores: half).
Logical CPUs that are SMT siblings do share them, so there the figure is an upper bound.

The kernel is `void fmas(float *ab, long iters)`: it broadcasts `ab[0]` and `ab[1]`, runs `iters` times
`ACCUMULATORS` independent `vfmadd231ps acc, a, b` (enough to cover 4 cycles of FMA latency on two ports), then
stores the sum of the accumulators over `ab[0..lanes)`, so a test can check that every FMA ran.
"""
from __future__ import annotations

import ctypes
import functools
import time

import numpy as np

from tg_cpu_x86.execmem import ExecMemory
from tg_cpu_x86.x86 import isa as _isa
from tg_cpu_x86.x86.encode import Assembler
from tg_cpu_x86.x86.operands import Mem, reg

ACCUMULATORS = 12
LANES = {"avx512": 16, "avx2": 8}
# iterations of one timed run: 2^16 x 12 FMAs of 16 lanes is about 0.2 ms on a 3.6 GHz core with one zmm FMA
# per cycle, far above the call's microsecond and short enough that the best of 30 misses other processes
ITERATIONS = 1 << 16
REPEAT = 30


def fma_assembler(isa: str) -> Assembler:
    """The FMA loop for `isa` ("avx2": ymm, "avx512": zmm), assembled (its listing is what tests decode)."""
    if isa not in LANES:
        raise ValueError(f"no FMA loop for vector ISA {isa!r}; allowed: {', '.join(LANES)}")
    v = "zmm" if isa == "avx512" else "ymm"
    size = LANES[isa] * 4
    a, b = reg(f"{v}{ACCUMULATORS}"), reg(f"{v}{ACCUMULATORS + 1}")
    accs = [reg(f"{v}{i}") for i in range(ACCUMULATORS)]
    asm = Assembler()
    asm.emit("vbroadcastss", a, Mem(reg("rdi"), size=4))
    asm.emit("vbroadcastss", b, Mem(reg("rdi"), disp=4, size=4))
    for acc in accs:
        asm.emit("vxorps", acc, acc, acc)
    asm.align(16)
    asm.label("loop")
    for acc in accs:
        asm.emit("vfmadd231ps", acc, a, b)
    asm.emit("sub", "rsi", 1)
    asm.emit("jne", "loop")
    for acc in accs[1:]:
        asm.emit("vaddps", accs[0], accs[0], acc)
    asm.emit("vmovups", Mem(reg("rdi"), size=size), accs[0])
    asm.emit("vzeroupper")
    asm.emit("ret")
    asm.assemble()
    return asm


def fma_code(isa: str) -> bytes:
    """The machine code of the FMA loop for `isa`."""
    return fma_assembler(isa).assemble()


class FMALoop:
    """The FMA loop loaded for `isa`: call(ab, iters) runs it on a float32 array of at least `lanes` floats."""

    def __init__(self, isa: str):
        _isa.check_runnable(isa)
        self.isa, self.lanes = isa, LANES[isa]
        self._mem = ExecMemory(fma_code(isa))
        self.fn = self._mem.function(None, ctypes.c_void_p, ctypes.c_int64)

    def flops(self, iters: int) -> int:
        """The float operations of one call (an FMA is two per lane)."""
        return 2 * self.lanes * ACCUMULATORS * iters

    def __call__(self, ab: np.ndarray, iters: int) -> None:
        if ab.dtype != np.float32 or ab.size < self.lanes or not ab.flags.c_contiguous:
            raise ValueError(f"the FMA loop needs a contiguous float32 array of {self.lanes} floats, got "
                             f"{ab.dtype} of shape {ab.shape}")
        if iters < 1:
            raise ValueError(f"the FMA loop runs at least once, got iters={iters}")
        self.fn(ab.ctypes.data, iters)


def measure(isa: str, cores: int = 1, iters: int = ITERATIONS, repeat: int = REPEAT) -> float:
    """GFLOP/s of `cores` cores running the FMA loop: the best of `repeat` timed runs on this thread's core,
    times `cores`."""
    if cores < 1:
        raise ValueError(f"the peak of {cores} cores: at least one")
    loop = FMALoop(isa)
    ab = np.ones(loop.lanes, np.float32)
    loop(ab, iters)  # warm-up: page in the code, raise the clock
    best = float("inf")
    for _ in range(repeat):
        ab[:] = 1.0
        t = time.perf_counter()
        loop.fn(ab.ctypes.data, iters)
        best = min(best, time.perf_counter() - t)
    return loop.flops(iters) * cores / best / 1e9


@functools.cache
def machine_isa() -> str:
    """The widest vector ISA this host runs (the machine's peak is its widest FMAs, whatever a renderer uses)."""
    return _isa.resolve("auto")
