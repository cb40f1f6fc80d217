"""A core pool whose workers wait for work in machine code, spinning a while before they sleep.

A kernel split across cores runs part 0 on the calling thread and the others on worker threads. Waking a thread
that sleeps in the kernel (a lock, a futex) costs the time the OS and, in a virtual machine, the hypervisor take
to run an idle CPU again: on this project's VMs (guest halt-polling off) that is far more than the few
microseconds of a busy host, and it is paid twice per kernel (the worker's start, then the caller's wake-up when
the worker finishes last). BLAS libraries avoid it by spinning: a worker that has just finished keeps polling for
the next job for a while. This pool does the same, without the GIL: each worker thread calls `worker(ctl)` (machine
code, through ctypes, which releases the GIL) once and stays in it; `ctl` is its control block:

  u32 seq at byte 0      bumped by the caller (`post`) for each job, and at close
  u32 done at byte 8     set to the job's seq by the worker when the kernel returned
  u32 quit at byte 16    nonzero: the worker returns at its next job
  u32 nargs at byte 24   the number of the kernel's arguments (at most MAX_ARGS), 8 bytes each
  u64 fn at byte 32      the kernel's address
  u64 spin at byte 40    TSC ticks to poll a word before sleeping on it (FUTEX_WAIT)
  u64 gap, backoff, until at bytes 48, 56, 64: a poll `gap` ticks after the last was descheduled; then waits
                         sleep at once until the TSC reaches `until` (`backoff` ticks later)
  the arguments          at byte 128 on

The worker polls `seq` with `pause` until it changes or `spin` ticks have passed, then sleeps in FUTEX_WAIT on it;
it calls `fn` with the arguments in the System V registers and stack (the kernels' convention: pointers and ints,
all passed as 64-bit words, of which an int32 parameter reads the low half), stores `done` and FUTEX_WAKEs it.
The caller's `wait(ctl, seq)` polls `done` the same way (called through ctypes too, so the worker never needs
the GIL either way). `post` and the worker always issue FUTEX_WAKE after their store (a few hundred nanoseconds
when nobody sleeps), and a sleeper re-checks its word in FUTEX_WAIT itself, so no wake-up is lost.

Linux x86-64 only (raw futex syscalls, rdtsc): elsewhere the device uses device.CorePool's lock-based workers.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import platform
import threading
import time
import weakref
from collections.abc import Sequence
from typing import Any

import numpy as np

from tg_cpu_x86.execmem import ExecMemory
from tg_cpu_x86.x86.encode import Assembler
from tg_cpu_x86.x86.operands import Mem, reg

MAX_ARGS = 112
CTL_BYTES = 128 + 8 * MAX_ARGS
_SEQ, _DONE, _QUIT, _NARGS, _FN, _SPIN, _GAP, _BACKOFF, _UNTIL, _ARGS = 0, 8, 16, 24, 32, 40, 48, 56, 64, 128
# a poll this long after the previous one was descheduled; then no spinning for BACKOFF_US
GAP_US, BACKOFF_US = 30, 50_000
SYS_FUTEX, FUTEX_WAIT_PRIVATE, FUTEX_WAKE_PRIVATE = 202, 128, 129
_ARG_REGS = ("rdi", "rsi", "rdx", "rcx", "r8", "r9")
_FUNCTION_POINTER: type = ctypes.CFUNCTYPE(None).__mro__[1]  # _CFuncPtr, the base class of ctypes function pointers (CFUNCTYPE's classes)


def _is_function_pointer(fn: Any) -> bool:
    return isinstance(fn, _FUNCTION_POINTER)


def available() -> bool:
    """Whether this host runs the pool's machine code (Linux on x86-64)."""
    return platform.system() == "Linux" and platform.machine().lower() in ("x86_64", "amd64")


def _m(base: str, disp: int, size: int, index: str | None = None, scale: int = 1) -> Mem:
    return Mem(reg(base), reg(index) if index else None, scale, disp, size)


def _now(asm: Assembler, dst: str) -> None:
    """dst = the 64-bit time-stamp counter (clobbers rax, rdx)."""
    asm.emit("rdtsc")
    asm.emit("shl", "rdx", 32)
    asm.emit("or", "rax", "rdx")
    asm.emit("mov", dst, "rax")


def _futex(asm: Assembler, addr: str, op: int, val: str | int) -> None:
    """futex(addr, op, val, NULL) (clobbers rax, rcx, r11 and the argument registers)."""
    if addr != "rdi":
        asm.emit("mov", "rdi", addr)
    asm.emit("mov", "esi", op)
    asm.emit("mov", "edx", val)
    asm.emit("xor", "r10d", "r10d")
    asm.emit("mov", "eax", SYS_FUTEX)
    asm.emit("syscall")


def _wait_for(asm: Assembler, ctl: str, offset: int, value: str, equal: bool, tag: str) -> None:
    """Poll the u32 at ctl+offset until it differs from the register `value` (with `equal`: equals it) or the spin
    budget ends,
    then sleep on it (FUTEX_WAIT on the value seen) until it does; its value is left in eax. A poll that finds
    more than `gap` ticks since the previous one was descheduled (another process wanted this CPU): spinning
    then only costs that process time and this thread its scheduler credit, so waits sleep at once for the
    next `backoff` ticks. Uses rbp and rax, rcx, rdx, rsi, rdi, r10, r11."""
    def done_if(label: str) -> None:  # jump to `label` when the condition holds for eax
        asm.emit("cmp", "eax", value)
        asm.emit("je" if equal else "jne", label)
    _now(asm, "rsi")
    asm.emit("cmp", "rsi", _m(ctl, _UNTIL, 8))
    asm.emit("jb", f"{tag}_sleep")  # backing off: no spin
    asm.emit("mov", "rbp", "rsi")
    asm.emit("add", "rbp", _m(ctl, _SPIN, 8))
    asm.label(f"{tag}_spin")
    asm.emit("mov", "eax", _m(ctl, offset, 4))
    done_if(f"{tag}_out")
    asm.emit("pause")
    _now(asm, "rcx")
    asm.emit("mov", "rdx", "rcx")
    asm.emit("sub", "rdx", "rsi")
    asm.emit("cmp", "rdx", _m(ctl, _GAP, 8))
    asm.emit("ja", f"{tag}_preempted")
    asm.emit("mov", "rsi", "rcx")
    asm.emit("cmp", "rcx", "rbp")
    asm.emit("jb", f"{tag}_spin")
    asm.emit("jmp", f"{tag}_sleep")
    asm.label(f"{tag}_preempted")
    asm.emit("add", "rcx", _m(ctl, _BACKOFF, 8))
    asm.emit("mov", _m(ctl, _UNTIL, 8), "rcx")
    asm.label(f"{tag}_sleep")
    asm.emit("mov", "eax", _m(ctl, offset, 4))
    done_if(f"{tag}_out")
    asm.emit("lea", "rdi", Mem(reg(ctl), disp=offset))
    _futex(asm, "rdi", FUTEX_WAIT_PRIVATE, "eax")
    asm.emit("jmp", f"{tag}_sleep")
    asm.label(f"{tag}_out")


def worker_assembler() -> Assembler:
    """`void worker(ctl *)`: run posted jobs until `quit` (see the module docstring)."""
    asm = Assembler()
    for r in ("rbx", "rbp", "r12", "r13", "r14", "r15"):
        asm.emit("push", r)
    asm.emit("sub", "rsp", 8)  # entry rsp is 8 mod 16; six pushes and this make it 0 mod 16 at each call
    asm.emit("mov", "rbx", "rdi")
    # the last seq seen: 0, the control block's first value (not read here: a job may be posted before this
    # thread gets to run, and must not be taken for the one already seen)
    asm.emit("xor", "r12d", "r12d")
    asm.label("next")
    _wait_for(asm, "rbx", _SEQ, "r12d", equal=False, tag="job")
    asm.emit("mov", "r12d", "eax")
    asm.emit("cmp", _m("rbx", _QUIT, 4), 0)
    asm.emit("jne", "quit")
    asm.emit("mov", "r15", "rsp")
    asm.emit("mov", "r14d", _m("rbx", _NARGS, 4))
    # arguments past the sixth on the stack, the seventh lowest; an odd count is padded to keep rsp 16-aligned
    asm.emit("mov", "eax", "r14d")
    asm.emit("sub", "eax", 6)
    asm.emit("jle", "regs")
    asm.emit("test", "eax", 1)
    asm.emit("je", "even")
    asm.emit("sub", "rsp", 8)
    asm.label("even")
    asm.emit("mov", "eax", "r14d")
    asm.label("push")
    asm.emit("dec", "eax")
    asm.emit("push", _m("rbx", _ARGS, 8, index="rax", scale=8))
    asm.emit("cmp", "eax", 6)
    asm.emit("jg", "push")
    asm.label("regs")
    for n, r in enumerate(_ARG_REGS):
        asm.emit("mov", r, _m("rbx", _ARGS + 8 * n, 8))
    asm.emit("call", _m("rbx", _FN, 8))
    asm.emit("mov", "rsp", "r15")
    asm.emit("mov", _m("rbx", _DONE, 4), "r12d")
    asm.emit("lea", "rdi", Mem(reg("rbx"), disp=_DONE))
    _futex(asm, "rdi", FUTEX_WAKE_PRIVATE, 1)
    asm.emit("jmp", "next")
    asm.label("quit")
    asm.emit("mov", _m("rbx", _DONE, 4), "r12d")
    asm.emit("add", "rsp", 8)
    for r in ("r15", "r14", "r13", "r12", "rbp", "rbx"):
        asm.emit("pop", r)
    asm.emit("ret")
    asm.assemble()
    return asm


def wait_assembler() -> Assembler:
    """`void wait(ctl *, u32 seq)`: return once the worker's `done` is `seq`, polling first."""
    asm = Assembler()
    asm.emit("push", "rbx")
    asm.emit("push", "rbp")
    asm.emit("push", "r12")
    asm.emit("mov", "rbx", "rdi")
    asm.emit("mov", "r12d", "esi")
    _wait_for(asm, "rbx", _DONE, "r12d", equal=True, tag="done")
    asm.emit("pop", "r12")
    asm.emit("pop", "rbp")
    asm.emit("pop", "rbx")
    asm.emit("ret")
    asm.assemble()
    return asm


def post_assembler() -> Assembler:
    """`void post(ctl *, u32 seq)`: publish job `seq` (the arguments are written first) and wake the worker."""
    asm = Assembler()
    asm.emit("mov", _m("rdi", _SEQ, 4), "esi")
    _futex(asm, "rdi", FUTEX_WAKE_PRIVATE, 1)
    asm.emit("ret")
    asm.assemble()
    return asm


class _Code:
    """The pool's three functions, loaded once per process."""
    _lock = threading.Lock()
    _loaded: _Code | None = None

    def __init__(self) -> None:
        self._mems = [ExecMemory(make().assemble()) for make in (worker_assembler, wait_assembler, post_assembler)]
        w, wt, p = self._mems
        self.worker = w.function(None, ctypes.c_void_p)
        self.wait = wt.function(None, ctypes.c_void_p, ctypes.c_uint32)
        self.post = p.function(None, ctypes.c_void_p, ctypes.c_uint32)

    @classmethod
    def get(cls) -> _Code:
        with cls._lock:
            if cls._loaded is None:
                cls._loaded = _Code()
            return cls._loaded


_TICKS_PER_US: list[float] = []


def ticks_per_us() -> float:
    """The time-stamp counter's rate, measured once against perf_counter over about 0.2 ms."""
    if not _TICKS_PER_US:
        mem = ExecMemory(_rdtsc_code())
        read = mem.function(ctypes.c_uint64)
        t0, c0 = time.perf_counter(), read()
        while time.perf_counter() - t0 < 0.0002:
            pass
        t1, c1 = time.perf_counter(), read()
        _TICKS_PER_US.append(max(1.0, (c1 - c0) / ((t1 - t0) * 1e6)))
    return _TICKS_PER_US[0]


def _rdtsc_code() -> bytes:
    asm = Assembler()
    _now(asm, "rax")
    asm.emit("ret")
    return asm.assemble()


_POOLS: weakref.WeakSet[NativeCorePool] = weakref.WeakSet()


@atexit.register
def _close_pools() -> None:
    """Workers stop before the interpreter tears down what they read (their control blocks, the code)."""
    for pool in list(_POOLS):
        pool.close()


def restart_workers_after_fork(pool: Any) -> None:
    """A forked child has only the forking thread: `pool._start()` gives it workers of its own there (unless the
    pool was closed). Held weakly, so the registration does not keep a dropped pool alive."""
    me = weakref.ref(pool)

    def restart() -> None:
        p = me()
        if p is not None and not p._closed:
            p._start()
    os.register_at_fork(after_in_child=restart)


class NativeCorePool:
    """`cores - 1` worker threads living in `worker` (see the module docstring); the calling thread runs part 0.
    `spin_us`: how long a worker polls for its next job, and the caller for a worker's end, before sleeping."""

    def __init__(self, cores: int, spin_us: int):
        self.cores, self.spin_us = cores, spin_us
        self._code = _Code.get()
        self._closed = False
        self._start()
        _POOLS.add(self)
        restart_workers_after_fork(self)

    def _start(self) -> None:
        self._run_lock = threading.Lock()  # one split kernel at a time uses the workers
        n = self.cores - 1
        self._ctl = np.zeros((max(n, 1), CTL_BYTES // 8), np.int64)
        self._words = self._ctl.view(np.uint32)
        self._seq = 0
        tick = ticks_per_us()
        self._ctl[:, _SPIN // 8] = int(self.spin_us * tick) if self.spin_us > 0 else 0
        self._ctl[:, _GAP // 8] = int(GAP_US * tick)
        self._ctl[:, _BACKOFF // 8] = int(BACKOFF_US * tick)
        self._addr = [self._ctl[i].ctypes.data for i in range(n)]
        self._threads = [threading.Thread(target=self._code.worker, args=(a,), name=f"tg-cpu-{i + 1}", daemon=True)
                         for i, a in enumerate(self._addr)]
        for t in self._threads:
            t.start()

    def run(self, fn: Any, args_per_core: Sequence[Sequence[int]]) -> None:
        """Call `fn(*args)` (a ctypes function of the kernels' convention) for each entry of `args_per_core` at
        once, one per core; return when all have."""
        n = len(args_per_core)
        if n > self.cores:
            raise ValueError(f"{n} parts of a kernel for a pool of {self.cores} cores")
        if self._closed:
            raise RuntimeError("this core pool has been closed")
        if not _is_function_pointer(fn):
            raise TypeError(f"the native core pool runs machine-code functions (ctypes function pointers), got "
                            f"{type(fn).__name__}")
        addr = ctypes.cast(fn, ctypes.c_void_p).value
        with self._run_lock:
            self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
            ctl = self._ctl
            for i in range(1, n):
                args = args_per_core[i]
                if len(args) > MAX_ARGS:
                    raise ValueError(f"a kernel of {len(args)} arguments; the native core pool passes at most "
                                     f"{MAX_ARGS}")
                row = ctl[i - 1]
                try:
                    row[_ARGS // 8:_ARGS // 8 + len(args)] = args
                except OverflowError:  # a uint64 value past int64's range: the same 64 bits
                    row.view(np.uint64)[_ARGS // 8:_ARGS // 8 + len(args)] = [a & 0xFFFFFFFFFFFFFFFF for a in args]
                row[_FN // 8] = addr
                self._words[i - 1, _NARGS // 4] = len(args)
                self._code.post(self._addr[i - 1], seq)
            try:
                fn(*args_per_core[0])
            finally:
                for i in range(1, n):
                    self._code.wait(self._addr[i - 1], seq)

    def close(self) -> None:
        """Stop the workers (they finish the job they run)."""
        with self._run_lock:
            if self._closed:
                return
            self._closed = True
            self._seq = seq = (self._seq + 1) & 0xFFFFFFFF
            for i, a in enumerate(self._addr):
                self._words[i, _QUIT // 4] = 1
                self._code.post(a, seq)
        for t in self._threads:
            t.join()
