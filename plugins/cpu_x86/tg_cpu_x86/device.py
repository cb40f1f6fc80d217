"""The CPU device: host memory, kernels compiled for this machine, run on all its cores.

`get_runner(ast)` is core's pipeline (tg_core/device.py, `Compiled`); the CPU overrides three of its stages:
`prepare` splits the kernel across cores (tg_core.codegen.lib.threads), `load` turns the renderer's output into
a ctypes function (loaded once per rendered source), and `make_runner` wraps it in a `CPURunner` that runs it
on every core of the split. A renderer's output says how it is loaded: LLVM IR text (str) is JIT-compiled by
llvmlite (MCJIT compiles and loads in one step, so the compile stage passes the source through), machine code
(bytes, entry at offset 0) is placed in executable memory. Both are a C function
`void kernel(void *buf0, ..., int/long var0, ...)` called through ctypes, which releases the GIL, so the cores
of a split kernel run it at once from a persistent thread pool.
"""
from __future__ import annotations

import ctypes
import operator
import os
import platform
import sys
import threading
import weakref
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NamedTuple

import numpy as np

from tg_core.plugin_api import (
    CORE_ID,
    DEBUG,
    MIN_WORK,
    Buffer,
    Compiled,
    DType,
    LLVMRenderer,
    Ops,
    Prepared,
    PreparedKernel,
    Program,
    Renderer,
    UOp,
    core_count,
    dtypes,
    partial_reduction,
    split_cores,
    to_numpy_dtype,
)
from tg_cpu_x86 import native_pool
from tg_cpu_x86.execmem import ExecMemory
from tg_cpu_x86.memory import CPUAllocator
from tg_cpu_x86.native_pool import NativeCorePool
from tg_cpu_x86.plugin import SPIN_US

# how a split full reduction's per-core partial results combine (threads.partial_reduction)
_COMBINE = {Ops.ADD: np.add, Ops.MAX: np.maximum, Ops.MUL: np.multiply}
# the dtypes numpy computes in natively (bfloat16 and fp8 it only stores as raw bits)
_COMBINABLE = frozenset((dtypes.bool, dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32,
                         dtypes.uint32, dtypes.int64, dtypes.uint64, dtypes.float16, dtypes.float32, dtypes.float64))
_CTYPE = {dtypes.int32: ctypes.c_int32, dtypes.int64: ctypes.c_int64, dtypes.uint32: ctypes.c_uint32,
          dtypes.uint64: ctypes.c_uint64}


def host_cores() -> int:
    """The cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


class CorePool:
    """`cores - 1` persistent worker threads; the calling thread runs part 0 itself.

    Each worker waits on a lock of its own and signals another when done: two lock operations per part, no
    queue or future objects, since this is on the path of every split kernel."""

    def __init__(self, cores: int):
        self.cores = cores
        self._parts: list[tuple[Callable[..., Any], Any] | None] = [None] * cores
        self._errors: list[BaseException] = []
        self._closed = False
        self._start()
        native_pool.restart_workers_after_fork(self)

    def _start(self) -> None:
        self._run_lock = threading.Lock()  # one split kernel at a time uses the workers
        self._go = [threading.Lock() for _ in range(self.cores - 1)]
        self._done = [threading.Lock() for _ in range(self.cores - 1)]
        for go, done in zip(self._go, self._done):
            go.acquire()
            done.acquire()
        self._threads = [threading.Thread(target=self._worker, args=(i,), name=f"tg-cpu-{i + 1}", daemon=True)
                         for i in range(self.cores - 1)]
        for t in self._threads:
            t.start()

    def _worker(self, i: int) -> None:
        go, done = self._go[i], self._done[i]
        while True:
            go.acquire()
            if self._closed:
                return
            part = self._parts[i + 1]
            assert part is not None, "run() sets a core's part before releasing it"
            fn, args = part
            try:
                fn(*args)
            except BaseException as e:  # handed to the caller, which re-raises it
                self._errors.append(e)
            done.release()

    def run(self, fn: Callable[..., Any], args_per_core: list[list[Any]]) -> None:
        """Call `fn(*args)` for each entry of `args_per_core` at once, one per core; return when all have."""
        n = len(args_per_core)
        if n > self.cores:
            raise ValueError(f"{n} parts of a kernel for a pool of {self.cores} cores")
        if self._closed:
            raise RuntimeError("this core pool has been closed")
        with self._run_lock:
            for i in range(1, n):
                self._parts[i] = (fn, args_per_core[i])
                self._go[i - 1].release()
            try:
                fn(*args_per_core[0])
            finally:
                for i in range(1, n):
                    self._done[i - 1].acquire()
            if self._errors:
                err, self._errors[:] = self._errors[0], []
                raise err

    def close(self) -> None:
        """Stop the workers (they finish the part they run)."""
        with self._run_lock:
            if not self._closed:
                self._closed = True
                for go in self._go:
                    go.release()
                for t in self._threads:
                    t.join()


def make_pool(cores: int, spin_us: int = SPIN_US) -> CorePool | NativeCorePool:
    """The workers of `cores`-way split kernels: native ones that spin before sleeping (Linux x86-64), else
    threads waiting on locks."""
    return NativeCorePool(cores, spin_us) if native_pool.available() else CorePool(cores)


class CPUKernel(NamedTuple):
    """A loaded program: the ctypes function, and the loaded code it runs (kept alive with the runner)."""
    fn: Any
    keep: Any


class CPURunner:
    """Calls a loaded kernel: buffer addresses, then the int variables in program order; for a split
    kernel once per core with its `core_id`. Everything per kernel is prepared here, not per call."""
    __slots__ = ("fn", "name", "var_names", "core_pos", "cores", "pool", "keep", "partial")

    def __init__(self, fn: Any, name: str, variables: list[str], cores: int, pool: CorePool | NativeCorePool, keep: Any,
                 partial: tuple[int, Ops, DType] | None = None):
        self.fn, self.name, self.cores, self.pool, self.keep = fn, name, cores, pool, keep
        # a split full reduction: (output buffer, operation, dtype) whose per-core partials the runner combines
        self.partial = partial
        self.var_names = tuple(v for v in variables if v != CORE_ID)
        # core_id's place among the variables (the arguments after the buffers)
        self.core_pos = variables.index(CORE_ID) if CORE_ID in variables else None

    def __call__(self, bufs: list[Buffer], var_vals: Mapping[str, int]) -> None:
        try:  # the addresses through one C-level getter (an eager realize calls this once per kernel)
            args = list(map(_ADDRESS, bufs))
        except AttributeError:  # a buffer without memory yet (_opaque None): allocated here
            args = [_addr(b) for b in bufs]
        if self.var_names:
            args += [var_vals[n] for n in self.var_names]
        if self.core_pos is None:
            self.fn(*args)
            return
        pos = len(bufs) + self.core_pos
        if self.partial is None:
            self.pool.run(self.fn, [args[:pos] + [c] + args[pos:] for c in range(self.cores)])
            return
        # each core writes its partial to its own slot of a scratch array (one per call: calls may overlap)
        out, op, dtype = self.partial
        slots = np.empty(self.cores, to_numpy_dtype(dtype))
        args[out] = slots.ctypes.data
        self.pool.run(self.fn, [args[:pos] + [c] + args[pos:] for c in range(self.cores)])
        bufs[out].opaque.numpy(dtype)[0] = _COMBINE[op].reduce(slots, dtype=slots.dtype)

    def prebind(self, bufs: Sequence[Buffer | None], inputs: Sequence[tuple[int, int]]) -> BoundCall:
        """This kernel on `bufs`, the entries at `inputs` ((position, input index) pairs; None in `bufs`) taken
        from each call's input buffers: TinyJit replays call the result (see BoundCall)."""
        return BoundCall(self, bufs, inputs)

    def __repr__(self) -> str:
        return f"<CPURunner {self.name} on {self.cores} core(s)>"


_ADDRESS = operator.attrgetter("_opaque.addr")  # an allocated buffer's address (HostMemory.addr)


def _addr(b: Buffer) -> int:
    """A buffer's address, allocating it first if it has no memory yet."""
    o = b._opaque
    return (o if o is not None else b.opaque).addr


class _Pending(NamedTuple):
    """A kernel whose LLVM compile runs in the device's build thread: the future of its loaded code, and the
    ctypes argument types of its function."""
    future: Future
    argtypes: tuple[Any, ...]


class _PendingCPURunner(CPURunner):
    """A CPURunner whose code is still being compiled (`keep` is its _Pending): the first call or prebind waits
    for it and turns the object into a plain CPURunner, so later calls pay nothing."""
    __slots__ = ()

    def _ready(self) -> None:
        pending = self.keep
        loaded = pending.future.result()
        self.fn, self.keep = ctypes.CFUNCTYPE(None, *pending.argtypes)(loaded.address), loaded
        self.__class__ = CPURunner  # type: ignore[assignment]

    def __call__(self, bufs: list[Buffer], var_vals: Mapping[str, int]) -> None:
        self._ready()
        CPURunner.__call__(self, bufs, var_vals)

    def prebind(self, bufs: Sequence[Buffer | None], inputs: Sequence[tuple[int, int]]) -> BoundCall:
        self._ready()
        return CPURunner.prebind(self, bufs, inputs)


class BoundCall:
    """A CPURunner's call with its arguments made once: one list per core (the buffers' addresses, the
    variables, core_id in its place), into which a call writes only the input buffers' addresses and the
    variables' values before calling. A replay of a TinyJit runs its items one at a time, so reusing the lists
    is safe; the fixed buffers are the capture's, whose memory stays where it is while they live."""
    __slots__ = ("fn", "pool", "lists", "split", "inputs", "vars", "partial", "out_buf", "out_input", "slots", "keep")

    def __init__(self, runner: CPURunner, bufs: Sequence[Buffer | None], inputs: Sequence[tuple[int, int]]):
        self.fn, self.pool = runner.fn, runner.pool
        self.keep = (runner, [b for b in bufs if b is not None])  # the code and the fixed buffers stay alive
        n = len(bufs)
        base: list[int] = [0 if b is None else _addr(b) for b in bufs] + [0] * len(runner.var_names)
        self.split = runner.core_pos is not None
        if runner.core_pos is None:
            self.lists = [base]
            at: Sequence[int] = range(len(base))  # where argument j of `base` is in each list
        else:
            pos = n + runner.core_pos
            self.lists = [base[:pos] + [c] + base[pos:] for c in range(runner.cores)]
            at = [j if j < pos else j + 1 for j in range(len(base))]
        self.vars = tuple((at[n + i], name) for i, name in enumerate(runner.var_names))
        self.partial = runner.partial
        self.out_buf: Buffer | None = None
        self.out_input: int | None = None
        if self.partial is not None:
            out, _, dtype = self.partial
            # each core writes its partial to its own slot of a scratch array, made once for this call
            self.slots = np.empty(runner.cores, to_numpy_dtype(dtype))
            for lst in self.lists:
                lst[at[out]] = self.slots.ctypes.data
            self.out_buf = bufs[out]
            self.out_input = next((i for p, i in inputs if p == out), None)
            inputs = [(p, i) for p, i in inputs if p != out]
        self.inputs = tuple((at[p], i) for p, i in inputs)

    def __call__(self, in_bufs: Sequence[Buffer], var_vals: Mapping[str, int]) -> None:
        lists = self.lists
        for p, i in self.inputs:
            b = in_bufs[i]
            a = (o if (o := b._opaque) is not None else b.opaque).addr  # _addr, inlined
            for lst in lists:
                lst[p] = a
        for p, name in self.vars:
            v = var_vals[name]
            for lst in lists:
                lst[p] = v
        if not self.split:
            self.fn(*lists[0])
            return
        self.pool.run(self.fn, lists)
        if self.partial is not None:
            _, op, dtype = self.partial
            out = in_bufs[self.out_input] if self.out_input is not None else self.out_buf
            assert out is not None  # the output is a fixed buffer or an input
            out.opaque.numpy(dtype)[0] = _COMBINE[op].reduce(self.slots, dtype=self.slots.dtype)


class CPUDevice(Compiled):
    """The host CPU. Options: `threads` (0: every core this process may use), `thread_min_work` (the
    work estimate below which a kernel runs on one core) and `spin_us` (how long the core pool's threads poll
    before they sleep: native_pool.py).

    Every CPU device (CPU:0..CPU:n-1) is this process's memory and runs its kernels to completion before the runner
    returns, so they are host-shared peers: a kernel of one reads another's buffers in place."""
    host_shared = True

    def __init__(self, device: str, options: Mapping[str, Any]):
        super().__init__(device, CPUAllocator())
        self._lock = threading.Lock()
        self._loaded: dict[str | bytes, Any] = {}
        self._llvm: Any = None
        self._builder: ThreadPoolExecutor | None = None  # CPU:LLVM's compiles while the engine builds (load)
        self._pending: dict[int, list[str]] = {}  # per thread: sources compiling since its last finish_builds
        self._deferring = threading.local()  # on: inside start_runner's build
        # a forked child has no build thread (its executor would queue work no thread runs): it starts its own
        me = weakref.ref(self)

        def forget_builder() -> None:
            dev = me()
            if dev is not None:
                dev._builder, dev._pending = None, {}
        os.register_at_fork(after_in_child=forget_builder)
        self._pools: dict[int, CorePool | NativeCorePool] = {}
        self._peaks: dict[str, float | None] = {}  # fp32_peak_gflops of one core, measured when first asked
        self.pool: CorePool | NativeCorePool | None = None
        self.spin_us = options.get("spin_us", SPIN_US)
        self.configure_threads(options.get("threads", 0), options.get("thread_min_work", MIN_WORK))

    def configure_threads(self, threads: int = 0, min_work: int = MIN_WORK) -> None:
        """Use `threads` cores (0: all) for kernels with at least `min_work` work; forgets compiled runners."""
        if not isinstance(threads, int) or threads < 0:
            raise ValueError(f"CPU threads must be an int >= 0 (0: every core), got {threads!r}")
        if not isinstance(min_work, int) or min_work < 0:
            raise ValueError(f"CPU thread_min_work must be an int >= 0, got {min_work!r}")
        with self._lock:
            self.threads = threads or host_cores()
            self.thread_min_work = min_work
            # pools are kept per size: runners compiled earlier (a JIT may hold some) still use theirs
            if self.threads not in self._pools:
                self._pools[self.threads] = make_pool(self.threads, self.spin_us)
            self.pool = self._pools[self.threads]
        self.forget_runners()

    def select_renderer(self, name: str) -> None:
        """Render with the offered renderer called `name` from now on (benchmarks and tests compare them);
        kernels compiled so far are forgotten."""
        by_name = {c.name.upper(): c for c in self.renderers}
        if name.upper() not in by_name:
            raise ValueError(f"no renderer {name!r} for {self.device}; offered: {', '.join(by_name) or 'none'}")
        with self._build_lock:
            self.renderer = by_name[name.upper()]
            self.renderer_reason = f"{name.upper()}: chosen by select_renderer"
            self.forget_runners()

    # ---- the pipeline's CPU stages ----

    def prepare(self, ast: UOp) -> Prepared:
        """The kernel split across the device's cores when it has the work for it (threads.split_cores)."""
        # the renderer may name the axis (a matmul's columns: each core then packs only its own panels of B)
        choose = getattr(self.render_with, "core_axis", None)
        axis = choose(ast, self.threads) if choose is not None and self.threads > 1 else None
        split = split_cores(ast, self.threads, self.thread_min_work, axis)
        partial = partial_reduction(split)
        if partial is not None and partial[2] not in _COMBINABLE:
            split = ast  # the runner combines partials with numpy: this dtype stays on one core
        return Prepared((PreparedKernel(split),))

    def compile(self, src: str | bytes) -> str | bytes:
        """Nothing: MCJIT compiles LLVM IR and loads it in one step (`load`), and X86 machine code is ready to run."""
        return src

    def load(self, program: Program, lib: str | bytes) -> CPUKernel:
        """The program as a ctypes function taking its layout's buffers (addresses) then variables."""
        renderer = self.render_with
        argtypes: list[Any] = [ctypes.c_void_p] * program.layout.nbuffers
        for v in program.layout.variables:
            if v.dtype not in _CTYPE:
                raise TypeError(f"kernel {program.name}: variable {v.name} has dtype {v.dtype!r}; the CPU device "
                                f"passes {', '.join(repr(d) for d in _CTYPE)}")
            argtypes.append(_CTYPE[v.dtype])
        fn_name = renderer.function_name(program) if hasattr(renderer, "function_name") else program.name
        if isinstance(lib, str) and getattr(self._deferring, "on", False) and DEBUG < 3:
            # start_runner (the engine building a schedule): LLVM optimizes and compiles this kernel in the build
            # thread (its calls release the GIL) while the engine lowers the next one; finish_builds waits for it
            return CPUKernel(None, _Pending(self._load_later(lib, fn_name), tuple(argtypes)))
        loaded = self._load(lib, fn_name)
        fn = ctypes.CFUNCTYPE(None, *argtypes)(loaded.address)
        if DEBUG >= 3:
            self._show(renderer, program, lib, next((int(v.arg[2]) + 1 for v in program.variables
                                                     if v.arg[0] == CORE_ID), 1))
        return CPUKernel(fn, loaded)

    def make_runner(self, prepared: Prepared, programs: Sequence[Program], loaded: Sequence[CPUKernel]) -> CPURunner:
        """The CPURunner of the one kernel `prepare` made: on as many cores as it was split across."""
        (kernel,), (program,), (code,) = prepared.kernels, programs, loaded
        assert self.pool is not None  # configure_threads, in __init__, made it
        runner = CPURunner if code.fn is not None else _PendingCPURunner
        return runner(code.fn, program.name, [v.name for v in program.layout.variables], core_count(kernel.ast),
                         self.pool, code.keep, partial_reduction(kernel.ast))

    def _show(self, renderer: Renderer, program: Any, src: str | bytes, cores: int) -> None:
        """DEBUG=3: the rendered kernel (LLVM IR, or the X86 renderer's assembly); DEBUG=4 adds LLVM's assembly."""
        if isinstance(src, str):
            text = src + (f"\n{self._llvm.assembly(src)}" if DEBUG >= 4 else "")
        else:
            text = renderer.asm_str(program) if hasattr(renderer, "asm_str") else f"({len(src)} bytes of machine code)"
        print(f"tg: CPU {renderer.name} kernel {program.name} on {cores} core(s):\n{text}", file=sys.stderr)

    def _load_later(self, src: str, fn_name: str) -> Future:
        """The future of `src`'s loaded code, compiled in the build thread (once per source, as `_load`)."""
        with self._lock:
            loaded = self._loaded.get(src)
            if isinstance(loaded, Future):
                return loaded
            future: Future = Future()
            if loaded is not None:
                future.set_result(loaded)
                return future
            if self._llvm is None:
                from tg_cpu_x86.llvm import LLVMCompiler
                self._llvm = LLVMCompiler()
            if self._builder is None:
                # two threads, each compiling in an LLVM context of its own: once the engine has lowered the
                # schedule's last kernel, its kernels' compiles use both cores of a two-core machine
                self._builder = ThreadPoolExecutor(min(2, host_cores()), thread_name_prefix="tg-llvm")
            future = self._loaded[src] = self._builder.submit(self._llvm.load, src, fn_name, True, True)
            self._pending.setdefault(threading.get_ident(), []).append(src)
            return future

    def start_runner(self, ast: UOp) -> Any:
        """get_runner, with an LLVM kernel's compile left to the build thread (see load); finish_builds waits."""
        runner = self._runners.get(ast)
        if runner is None:
            self._deferring.on = True
            try:
                runner = self.get_runner(ast)
            finally:
                self._deferring.on = False
        return runner

    def finish_builds(self) -> None:
        """Wait for the compiles `load` started in the build thread for this thread's start_runner calls; a failed
        one's runners are forgotten (a later get_runner compiles again) and its error raised."""
        if not self._pending:
            return
        with self._lock:
            pending = self._pending.pop(threading.get_ident(), [])
        error: BaseException | None = None
        for src in pending:
            future = self._loaded[src]
            assert isinstance(future, Future)  # only finish_builds replaces it
            try:
                loaded = future.result()
            except BaseException as e:
                with self._build_lock:
                    del self._loaded[src]
                    for ast in [a for a, r in self._runners.items()
                                if isinstance(r, _PendingCPURunner) and r.keep.future is future]:
                        del self._runners[ast]
                error = error or e
            else:
                self._loaded[src] = loaded
        if error is not None:
            raise error

    def _load(self, src: str | bytes, fn_name: str) -> Any:
        """The loaded code of `src` (its `address` is the kernel's), compiled and loaded once per source."""
        if not isinstance(src, (str, bytes)):
            raise TypeError(f"the {self.render_with.name} renderer returned {type(src).__name__}; the CPU device "
                            "loads LLVM IR (str) or x86-64 machine code (bytes)")
        with self._lock:
            loaded = self._loaded.get(src)
            if loaded is None:
                if isinstance(src, str):
                    if self._llvm is None:
                        from tg_cpu_x86.llvm import LLVMCompiler
                        self._llvm = LLVMCompiler()
                    loaded = self._llvm.load(src, fn_name, cache=True)
                else:
                    loaded = ExecMemory(src)
                self._loaded[src] = loaded
        # being compiled in the build thread (asked for again outside the engine's build): wait for it
        return loaded.result() if isinstance(loaded, Future) else loaded

    def compile_host_function(self, render: Callable[[Any], str], function: str) -> Any | None:
        """hcq's host programs as functions of this process: `render` is given the CPU's LLVM renderer (this
        host's triple and data layout) and its IR is JIT-compiled like a kernel's. Not cached by source: each
        linked batch's program is its own (its addresses are constants)."""
        cls = next((r for r in self.renderers if isinstance(r, type) and issubclass(r, LLVMRenderer)), None)
        if cls is None:
            return None
        src = render(cls())
        with self._lock:
            if self._llvm is None:
                from tg_cpu_x86.llvm import LLVMCompiler
                self._llvm = LLVMCompiler()
            llvm = self._llvm
        return llvm.load(src, function)

    def fp32_peak_gflops(self) -> float | None:
        """The machine's fp32 peak in GFLOP/s on the cores kernels run on (`threads`): peak.py's loop of FMAs at
        the host's widest vectors on one core, times the cores, measured once; None off x86-64 or without AVX2."""
        if platform.machine().lower() not in ("x86_64", "amd64"):
            return None
        from tg_cpu_x86 import peak
        from tg_cpu_x86.x86.isa import UnsupportedISAError
        with self._lock:
            if "core" not in self._peaks:
                try:
                    self._peaks["core"] = peak.measure(peak.machine_isa())
                except UnsupportedISAError:
                    self._peaks["core"] = None
            one, cores = self._peaks["core"], self.threads
        return None if one is None else one * cores

    def synchronize(self) -> None:
        """Kernels run to completion before their runner returns: nothing is ever pending."""

    def close(self) -> None:
        super().close()
        if self._builder is not None:
            self._builder.shutdown(wait=True)
        for pool in self._pools.values():
            pool.close()
