"""The native core pool (tg_cpu_x86/native_pool.py): its machine code against capstone, kernels of up to many
arguments (registers, an odd and an even number on the stack) run on every core with the right arguments,
spinning and sleeping workers, errors, close, and the CPU device's split kernels through it."""
from __future__ import annotations

import ctypes
import threading
import time

import numpy as np
import pytest

from tg_cpu_x86 import native_pool
from tg_cpu_x86.execmem import ExecMemory
from tg_cpu_x86.x86.encode import Assembler
from tg_cpu_x86.x86.operands import Mem, reg

from test_x86_encode import _disasm_check

pytestmark = pytest.mark.skipif(not native_pool.available(), reason="the native pool needs Linux on x86-64")


def test_pool_code_matches_capstone():
    for make in (native_pool.worker_assembler, native_pool.wait_assembler, native_pool.post_assembler):
        asm = make()
        assert not _disasm_check(asm), make.__name__
        text = asm.asm_str()
        assert "syscall" in text and ("pause" in text or make is native_pool.post_assembler)


def _weighted_sum_kernel(nargs: int) -> tuple[ExecMemory, object]:
    """`void k(long *out, long core, long a2, ..., a_{n-1})`: out[core] = sum of (i + 1) * a_i over i >= 2, which
    tells a swapped or missing argument from the right ones."""
    asm = Assembler()
    asm.emit("xor", "eax", "eax")
    regs = ("rdx", "rcx", "r8", "r9")
    for i in range(2, nargs):
        src = regs[i - 2] if i < 6 else Mem(reg("rsp"), disp=8 * (i - 5), size=8)
        asm.emit("mov", "r10", src)
        asm.emit("imul", "r10", "r10", i + 1)
        asm.emit("add", "rax", "r10")
    asm.emit("mov", Mem(reg("rdi"), reg("rsi"), 8, 0, 8), "rax")
    asm.emit("ret")
    mem = ExecMemory(asm.assemble())
    return mem, mem.function(None, *([ctypes.c_int64] * nargs))


@pytest.mark.parametrize("spin_us", [0, 200])
@pytest.mark.parametrize("nargs", [2, 6, 7, 8, 13])
def test_every_core_gets_its_arguments(spin_us, nargs):
    mem, fn = _weighted_sum_kernel(nargs)
    pool = native_pool.NativeCorePool(3, spin_us)
    out = np.zeros(3, np.int64)
    try:
        for trial in range(50):
            out[:] = -1
            args = [[out.ctypes.data, c] + [trial * 1000 + 10 * c + i - 7 for i in range(2, nargs)] for c in range(3)]
            pool.run(fn, args)
            want = [sum((i + 2 + 1) * v for i, v in enumerate(a[2:])) for a in args]
            assert out.tolist() == want
            if trial % 10 == 9:
                time.sleep(0.002)  # past the spin: the workers sleep and must be woken
        pool.run(fn, args[:1])  # fewer parts than cores: only the caller's
        with pytest.raises(ValueError, match="4 parts of a kernel for a pool of 3 cores"):
            pool.run(fn, args + args[:1])
    finally:
        pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(fn, args)
    del mem


def test_too_many_arguments_is_an_error():
    mem, fn = _weighted_sum_kernel(2)
    pool = native_pool.NativeCorePool(2, 0)
    try:
        with pytest.raises(ValueError, match=f"at most {native_pool.MAX_ARGS}"):
            pool.run(fn, [[0, 0], [0] * (native_pool.MAX_ARGS + 1)])
    finally:
        pool.close()
    del mem


def test_close_ends_the_workers():
    pool = native_pool.NativeCorePool(3, 100_000)  # spinning long: close must still end them at once
    threads = list(pool._threads)
    assert all(t.is_alive() for t in threads)
    t0 = time.perf_counter()
    pool.close()
    assert not any(t.is_alive() for t in threads) and time.perf_counter() - t0 < 5
    pool.close()  # twice is fine
    assert not [t for t in threading.enumerate() if t in threads]


def test_device_split_kernels_run_on_the_native_pool():
    from tg_core import Tensor
    from tg_core.device import Device
    cpu = Device["CPU"]
    assert isinstance(cpu.pool, native_pool.NativeCorePool)
    cpu.configure_threads(2, 0)
    try:
        rng = np.random.default_rng(3)
        a, b = rng.standard_normal((37, 53)).astype(np.float32), rng.standard_normal((53, 70)).astype(np.float32)
        np.testing.assert_allclose((Tensor(a) @ Tensor(b)).numpy(), a @ b, rtol=1e-4, atol=1e-4)
        x = rng.standard_normal(100_001).astype(np.float32)
        np.testing.assert_allclose(Tensor(x).sum().numpy(), x.sum(dtype=np.float64), rtol=1e-4)
    finally:
        cpu.configure_threads()


def test_a_forked_child_gets_workers_of_its_own():
    import os
    mem, fn = _weighted_sum_kernel(8)
    pool = native_pool.NativeCorePool(2, 100)
    out = np.zeros(2, np.int64)
    args = [[out.ctypes.data, c] + [10 * c + i for i in range(2, 8)] for c in range(2)]
    want = [sum((i + 3) * v for i, v in enumerate(a[2:])) for a in args]
    try:
        pool.run(fn, args)
        assert out.tolist() == want
        pid = os.fork()
        if pid == 0:  # the child: its pool restarted its workers (the parent's do not exist here)
            out[:] = 0
            pool.run(fn, args)
            os._exit(0 if out.tolist() == want else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        out[:] = 0
        pool.run(fn, args)
        assert out.tolist() == want
    finally:
        pool.close()
    del mem


def test_unsigned_arguments_past_int64_keep_their_bits():
    """A uint64 variable above 2**63 - 1 (or a negative int) reaches the kernel as the same 64 bits."""
    asm = Assembler()
    asm.emit("mov", Mem(reg("rdi"), reg("rsi"), 8, 0, 8), "rdx")  # out[core] = the third argument
    asm.emit("ret")
    mem = ExecMemory(asm.assemble())
    fn = mem.function(None, ctypes.c_void_p, ctypes.c_int64, ctypes.c_uint64)
    pool = native_pool.NativeCorePool(2, 0)
    out = np.zeros(2, np.uint64)
    try:
        pool.run(fn, [[out.ctypes.data, 0, 5], [out.ctypes.data, 1, 2**64 - 3]])
        assert out.tolist() == [5, 2**64 - 3]
        pool.run(fn, [[out.ctypes.data, 0, 5], [out.ctypes.data, 1, -2]])
        assert out.tolist() == [5, 2**64 - 2]
    finally:
        pool.close()
    del mem
