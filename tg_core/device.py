"""Devices and their memory: Buffer, Allocator, LRUAllocator, and Compiled with its pipeline to running code.

A device is a `Compiled` subclass that a plugin provides (`tg_devices` hook). Core opens it on first use as
`cls(device, options)`, where `device` is the canonical name ("AMD", "AMD:1") and `options` the validated
per-device options of the config. The simplest device needs only an allocator; to run kernels it takes the
pipeline of `Compiled.get_runner` (prepare -> lower -> render -> compile -> load -> runner), overriding only the
stages it does differently. The registry of opened devices, `Device`, lives in tg_core/plugins/device_registry.py
and is re-exported here.
"""
from __future__ import annotations

import dataclasses
import itertools
import logging
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tg_core.dtype import DType, from_numpy_dtype, to_dtype, to_numpy_dtype
from tg_core.helpers import ContextVar
from tg_core.profile import events as profile_events
from tg_core.profile import state as profiling

if TYPE_CHECKING:
    from tg_core.codegen.lib.gpudims import LaunchDims
    from tg_core.codegen.program import Program
    from tg_core.renderer import Renderer
    from tg_core.uop.uop import UOp

log = logging.getLogger("tg.device")

LRU = ContextVar("LRU", 1)


@dataclass(frozen=True)
class BufferSpec:
    """Allocation options. Part of the LRU cache key: a cached buffer is reused only for equal options."""
    host: bool = False   # host memory the device can reach directly (staging for copies)
    nolru: bool = False  # never keep it in the LRU cache when freed (memory shared outside tg)

    def __hash__(self) -> int:
        # the LRU cache hashes (size, options) on every allocation and free: the two flags as a number, cheaper
        # than the dataclass's generated hash of a tuple of the fields (equal specs still hash equal)
        return hash(self.host) * 2 + hash(self.nolru)


_DEFAULT_SPEC = BufferSpec()  # shared: allocations without options are the common case (frozen, so safe)


def format_bytes(n: int) -> str:
    """`n` bytes for people: 4398046511104 -> '4.00 TiB'."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.2f} {unit}"
    return f"{n} bytes"


def host_memory() -> int | None:
    """The host's physical memory in bytes (None where the OS does not tell)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


class Allocator:
    """Base of a device's memory allocator. A subclass implements `_alloc`, `_free`, `copyin`, `copyout` and,
    for views, `_offset`. `_alloc` raises MemoryError when the device is out of memory (LRUAllocator then
    empties its cache and tries once more). `opaque` is whatever the device uses as a handle. `capacity` is
    the device's memory in bytes, when known: a larger allocation is refused before asking for it (host memory
    would otherwise be promised by the OS and fail only when touched)."""
    capacity: int | None = None

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        self.check_size(size)
        return self._alloc(size, options or _DEFAULT_SPEC)

    def check_size(self, size: int) -> None:
        """Raise unless `size` bytes could be allocated at all (ValueError: not a size; MemoryError: too big)."""
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"allocation size must be a positive number of bytes, got {size!r}")
        if self.capacity is not None and size > self.capacity:
            raise MemoryError(f"more than the device's {format_bytes(self.capacity)} of memory")

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        self._free(opaque, size, options or _DEFAULT_SPEC)

    def offset(self, opaque: Any, offset: int, size: int) -> Any:
        """A handle to bytes [offset, offset+size) of an allocation, sharing its memory (used by views)."""
        return self._offset(opaque, offset, size)

    @property
    def supports_views(self) -> bool:
        return type(self)._offset is not Allocator._offset

    def _alloc(self, size: int, options: BufferSpec) -> Any:
        raise NotImplementedError(f"{type(self).__name__} must implement _alloc")

    def _free(self, opaque: Any, size: int, options: BufferSpec) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement _free")

    def _offset(self, opaque: Any, offset: int, size: int) -> Any:
        raise NotImplementedError(f"{type(self).__name__} does not support buffer views (implement _offset)")

    def copyin(self, dest: Any, src: memoryview) -> None:
        """Copy host bytes `src` (format 'B', exactly the allocation's size) into `dest`."""
        raise NotImplementedError(f"{type(self).__name__} must implement copyin")

    def copyout(self, dest: memoryview, src: Any) -> None:
        """Copy the allocation `src` into the host bytes `dest` (format 'B', exactly its size)."""
        raise NotImplementedError(f"{type(self).__name__} must implement copyout")

    def adopt_host(self, array: np.ndarray) -> Any | None:
        """An opaque for the bytes of `array` (a contiguous uint8 array the caller keeps unchanged) used in
        place, kept alive by the opaque, or None (the default) when this device's kernels cannot address host
        memory, and the caller copies instead. The CPU devices adopt: a memory-mapped model file is then the
        device memory of its weights, with no copy of them in RAM."""
        return None

    def host_view(self, opaque: Any) -> memoryview | None:
        """The allocation as host bytes the host may read now (format 'B'), or None (the default) when its memory
        is not host memory: a copy between devices then reads it straight from there instead of through a
        temporary (CPU devices: the copies of multi-device tensors)."""
        return None


class LRUAllocator(Allocator):
    """An allocator that keeps freed allocations, by (size, options), for the next allocation of that shape.

    Real allocation is slow on every device and a tensor program allocates the same sizes again and again.
    `cache_limit` bounds the cached bytes; past it the least recently freed allocations are really freed.
    LRU=0 in the environment (or `Context(LRU=0)`) turns the cache off."""

    def __init__(self, cache_limit: int | None = None):
        self.cache_limit = cache_limit
        # ticket -> (key, size, options, opaque); key -> the tickets cached under it, oldest first. The key is the
        # size alone for the default options (an int hashes in C; a (size, BufferSpec) tuple calls BufferSpec's
        # Python __hash__, on every allocation and free of an eager loop), else (size, options): never equal
        self._entries: OrderedDict[int, tuple[Any, int, BufferSpec, Any]] = OrderedDict()
        self._by_key: dict[Any, list[int]] = {}
        self._tickets = itertools.count()
        self.cached_bytes = 0
        # the cache's bookkeeping is shared by every thread using the device: one change at a time
        self._cache_lock = threading.RLock()

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        if options is None or options is _DEFAULT_SPEC or options == _DEFAULT_SPEC:
            key: Any = size
            options = _DEFAULT_SPEC
        else:
            key = (size, options)
        with self._cache_lock:
            tickets = self._by_key.get(key)
            if tickets:
                # the most recently freed one: its memory is the likeliest to be warm
                opaque = self._entries.pop(tickets.pop())[3]
                self.cached_bytes -= size
                return opaque
        self.check_size(size)  # emptying the cache cannot help an allocation bigger than the device
        try:
            return super().alloc(size, options)
        except MemoryError:
            self.free_cache()
            return super().alloc(size, options)

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        if options is None or options is _DEFAULT_SPEC or options == _DEFAULT_SPEC:
            key: Any = size
            options = _DEFAULT_SPEC
        else:
            key = (size, options)
        if not LRU.value or options.nolru or (self.cache_limit is not None and size > self.cache_limit):
            super().free(opaque, size, options)
            return
        with self._cache_lock:
            ticket = next(self._tickets)
            self._entries[ticket] = (key, size, options, opaque)
            tickets = self._by_key.get(key)
            if tickets is None:
                self._by_key[key] = [ticket]
            else:
                tickets.append(ticket)
            self.cached_bytes += size
            while self.cache_limit is not None and self.cached_bytes > self.cache_limit:
                self._evict_oldest()

    def _evict_oldest(self) -> None:
        ticket, (key, size, options, opaque) = self._entries.popitem(last=False)
        self._by_key[key].remove(ticket)
        self.cached_bytes -= size
        super().free(opaque, size, options)

    def free_cache(self) -> None:
        """Really free every cached allocation."""
        with self._cache_lock:
            while self._entries:
                self._evict_oldest()

    @property
    def cached_count(self) -> int:
        return len(self._entries)


class Buffer:
    """`size` elements of `dtype` on `device`, allocated on first use.

    A view (`buf.view(...)`) shares the memory of its base at a byte offset; views of views refer to the
    root base. Copies in and out go through the device's allocator; `numpy()` and `from_numpy` convert."""

    def __init__(self, device: str, size: int, dtype: DType | str, options: BufferSpec | None = None,
                 base: Buffer | None = None, offset: int = 0):
        self._base, self._opaque = None, None  # first: __del__ runs even when a check below raises
        self.device = Device.canonicalize(device)
        self.dtype = to_dtype(dtype)
        if not isinstance(size, int) or size < 0:
            raise ValueError(f"a buffer's size is a number of elements >= 0, got {size!r}")
        self.size, self.options, self.offset = size, options, offset
        self._base = base
        self._allocator: Allocator | None = None
        self._views: weakref.WeakSet[Buffer] | None = None  # made with the first view: most buffers have none
        if base is not None:
            if base._base is not None:
                raise ValueError("a view's base must be a base buffer, not another view")
            if offset < 0 or offset + self.nbytes > base.nbytes:
                raise ValueError(f"view of {self.nbytes} bytes at offset {offset} does not fit in a buffer of "
                                 f"{base.nbytes} bytes")
            if base._views is None:
                base._views = weakref.WeakSet()
            base._views.add(self)

    @classmethod
    def unchecked(cls, device: str, size: int, dtype: DType) -> Buffer:
        """`Buffer(device, size, dtype)` for arguments already valid (a canonical device name, an int size >= 0, a
        DType), made without checking them again: the engine makes one for every BUFFER node a schedule writes,
        and on a tiny eager realize the checks were a tenth of the engine's time."""
        b = cls.__new__(cls)
        b._base = b._opaque = b._allocator = b._views = b.options = None
        b.device, b.size, b.dtype, b.offset = device, size, dtype, 0
        return b

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def base(self) -> Buffer:
        return self._base if self._base is not None else self

    @property
    def is_view(self) -> bool:
        return self._base is not None

    def is_allocated(self) -> bool:
        return self._opaque is not None

    @property
    def allocator(self) -> Allocator:
        if self._allocator is None:
            self._allocator = Device[self.device].allocator
        return self._allocator

    @property
    def opaque(self) -> Any:
        """The device's handle to this buffer's memory (allocates it)."""
        return self.ensure_allocated()._opaque

    def allocate(self, opaque: Any = None) -> Buffer:
        """Allocate now, or adopt `opaque`, a handle the caller allocated on this device."""
        if self.is_allocated():
            raise RuntimeError(f"{self!r} is already allocated")
        if self.nbytes == 0:
            raise ValueError(f"{self!r} holds no bytes; nothing to allocate")
        allocator = self.allocator  # resolved even for adopted memory: freeing it goes back through it
        if self._base is not None:
            self._base.ensure_allocated()
            self._opaque = opaque if opaque is not None else allocator.offset(self._base._opaque, self.offset,
                                                                              self.nbytes)
        else:
            if opaque is not None:
                self._opaque = opaque
            else:
                try:
                    self._opaque = allocator.alloc(self.nbytes, self.options)
                except MemoryError as e:  # the allocator says why; the user needs what was asked for and where
                    raise MemoryError(f"cannot allocate {format_bytes(self.nbytes)} ({self.size} x {self.dtype!r}) "
                                      f"on {self.device}: {e or 'out of memory'}") from e
            if profiling.on:  # the memory counter of the device (views share their base's bytes)
                profile_events.memory(self.device, self.nbytes)
        return self

    def ensure_allocated(self) -> Buffer:
        return self if self.is_allocated() else self.allocate()

    def deallocate(self) -> None:
        """Give the memory back to the allocator (a view only drops its handle)."""
        if not self.is_allocated():
            return
        if self._base is None:
            live = [v for v in self._views or () if v.is_allocated()]
            if live:
                raise RuntimeError(f"cannot free {self!r}: {len(live)} allocated view(s) still use its memory")
            self.allocator.free(self._opaque, self.nbytes, self.options)
            if profiling.on:
                profile_events.memory(self.device, -self.nbytes)
        self._opaque = None

    def view(self, size: int, dtype: DType | str, offset: int = 0) -> Buffer:
        """`size` elements of `dtype` starting `offset` bytes into this buffer, sharing its memory."""
        return Buffer(self.device, size, dtype, self.base.options, base=self.base, offset=self.offset + offset)

    def copyin(self, src: Any) -> Buffer:
        """Copy host data (bytes, bytearray, memoryview, a contiguous numpy array) of exactly nbytes in."""
        mv = _host_bytes(src)
        if mv.nbytes != self.nbytes:
            raise ValueError(f"copyin of {mv.nbytes} bytes into {self!r}, which holds {self.nbytes} bytes")
        self.allocator.copyin(self.opaque, mv)
        return self

    def copyout(self, dest: Any = None) -> memoryview:
        """Copy the contents into `dest` (a writable host buffer of nbytes; new when omitted) and return it."""
        # the device buffer first: a size the device cannot hold is its MemoryError naming size and device,
        # not a bare one from the host bytearray
        opaque = self.opaque
        # a new destination is np.empty, not bytearray: the copy writes every byte, so zero-filling first costs a
        # second pass over memory (a third of `Tensor.numpy`'s time on 64 MB)
        mv = _host_bytes(np.empty(self.nbytes, np.uint8) if dest is None else dest)
        if mv.readonly or mv.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self!r} needs a writable host buffer of {self.nbytes} bytes")
        self.allocator.copyout(mv, opaque)
        return mv

    def copy_from(self, src: Buffer) -> Buffer:
        """Copy another buffer's bytes in, through host memory (devices add faster paths with the engine)."""
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy of {src!r} ({src.nbytes} bytes) into {self!r} ({self.nbytes} bytes)")
        view = src.allocator.host_view(src.opaque) if src.nbytes else None
        return self.copyin(view if view is not None else src.copyout())

    def numpy(self) -> np.ndarray:
        """The contents as a new 1-D numpy array (bfloat16/fp8 as their raw bits)."""
        return np.frombuffer(self.copyout(), dtype=to_numpy_dtype(self.dtype))

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: str) -> Buffer:
        array = np.ascontiguousarray(array)
        buf = cls(device, array.size, from_numpy_dtype(array.dtype))
        return buf.copyin(array) if buf.nbytes else buf

    @classmethod
    def from_host(cls, array: np.ndarray, device: str) -> Buffer:
        """A buffer of `array`'s elements that uses its memory in place where the device adopts host memory
        (`Allocator.adopt_host`), else a copy. In place, the array must stay unchanged while the buffer lives
        (a read-only weight, such as a memory-mapped file's); the buffer never enters the LRU cache, so its
        memory is not handed to another allocation."""
        array = np.ascontiguousarray(array)
        buf = cls(device, array.size, from_numpy_dtype(array.dtype), BufferSpec(nolru=True))
        if not buf.nbytes:
            return buf
        adopted = buf.allocator.adopt_host(array.reshape(-1).view(np.uint8))
        return buf.allocate(adopted) if adopted is not None else buf.copyin(array)

    def __repr__(self) -> str:
        view = f", view of offset {self.offset}" if self._base is not None else ""
        return f"<Buffer {self.device} {self.size} x {self.dtype!r}{view}>"

    def __del__(self, _finalizing: Callable[[], bool] = sys.is_finalizing) -> None:
        # a dropped base buffer returns its memory (views keep their base alive, so none is live here); the check
        # is bound at definition, since at interpreter exit this module's globals (sys) may already be None
        if self._base is None and self._opaque is not None and not _finalizing():
            try:
                self._allocator.free(self._opaque, self.nbytes, self.options)
                if profiling.on:
                    profile_events.memory(self.device, -self.nbytes)
            except Exception as e:
                log.debug("freeing %r in __del__ failed: %s", self, e)


def _host_bytes(x: Any) -> memoryview:
    mv = memoryview(x)
    if not mv.c_contiguous:
        raise ValueError("host data must be contiguous")
    return mv.cast("B") if mv.format != "B" or mv.ndim != 1 else mv


class Compiler:
    """Turns rendered source into the binary a runtime loads. This base passes the source through as bytes,
    which suits devices that run source directly; real compilers override `compile`."""

    def compile(self, src: str) -> bytes:
        return src.encode()


# what `get_runner(ast)` returns and the engine calls per launch: the kernel's buffers (PARAM i is bufs[i]) and the
# values of its variables by name
RunnerFn = Callable[[list[Buffer], dict[str, int]], None]


@dataclass(frozen=True)
class PreparedKernel:
    """One kernel AST ready for codegen, and (for a GPU kernel whose parallel ranges became ids) its launch dims."""
    ast: UOp
    launch: LaunchDims | None = None


@dataclass(frozen=True)
class Prepared:
    """What `Compiled.prepare` makes of a kernel AST: the kernels to run in this order, and the temporaries they
    share beyond the caller's buffers, as (elements, dtype): temporary i is PARAM `len(bufs) + i` of every kernel."""
    kernels: tuple[PreparedKernel, ...]
    temps: tuple[tuple[int, DType], ...] = ()


class KernelSequence:
    """The runner of a kernel prepared into several: each call allocates the temporaries (through the device's
    allocator, whose cache makes that cheap), runs the kernels in order on the buffers then the temporaries, and
    gives the temporaries back."""
    __slots__ = ("device", "allocator", "runners", "temps")

    def __init__(self, device: str, allocator: Allocator, runners: Sequence[RunnerFn],
                 temps: Sequence[tuple[int, DType]]):
        self.device, self.allocator, self.runners = device, allocator, tuple(runners)
        self.temps = tuple((max(n, 1), dt) for n, dt in temps)

    def _temporary(self, size: int, dtype: DType) -> Buffer:
        buf = Buffer(self.device, size, dtype)
        buf._allocator = self.allocator  # the device's own, also for one made directly rather than by the registry
        return buf.allocate()

    def __call__(self, bufs: list[Buffer], var_vals: dict[str, int]) -> None:
        held = [self._temporary(n, dt) for n, dt in self.temps]
        try:
            for run in self.runners:
                run(bufs + held if held else bufs, var_vals)
        finally:
            for t in held:
                t.deallocate()

    def __repr__(self) -> str:
        return f"<KernelSequence of {len(self.runners)} kernels on {self.device}>"


class Compiled:
    """Base of every device: an allocator, renderers, a compiler and a program runtime, and the pipeline that turns
    a kernel AST into a runner with them.

    Core sets `renderers` (classes from the `tg_renderers` hooks, preferred first) and `renderer` (the one this
    device renders with) right after construction. `get_runner(ast)` runs the stages below once per AST and caches
    the runner; a device overrides only the stages it does differently (docs/architecture.md, "From Tensor.realize
    to the device call"):

      prepare(ast) -> Prepared          device-specific rewrites of the AST (default: none)
      lower(kernel) -> Program          codegen with the renderer's opts and rules (`renderer.program`)
      render(program) -> source         the renderer's text or machine code
      compile(source) -> lib            the compiler's output, once per source
      load(program, lib) -> runner      the runtime object: a callable(bufs, var_vals) running that program
      make_runner(prepared, programs, loaded) -> runner   one kernel: its runner; several: a KernelSequence

    `runtime(name, lib)`, when given, is the default `load`. A device without a renderer or runtime can hold
    buffers but not run kernels.

    `host_shared`: this device's buffers are memory of this process that its kernels address directly, and its
    kernels have finished when their runner returns (the CPU devices). Two such devices are peers (`shares_memory`):
    a kernel of one may read the other's buffers in place, so the scheduler turns a copy between them that a kernel
    reads into that read. Any other pair of devices moves data by copies only, and a kernel given another device's
    buffer is an error."""
    host_shared: bool = False

    def __init__(self, device: str, allocator: Allocator, compiler: Compiler | None = None,
                 runtime: Callable[[str, bytes], Any] | None = None):
        self.device, self.allocator = device, allocator
        self.compiler = compiler if compiler is not None else Compiler()
        self.runtime = runtime
        self.renderers: list[type[Renderer]] = []
        self.renderer: type[Renderer] | None = None
        self.renderer_reason = ""
        self._compiled: dict[Any, Any] = {}
        self._renderer_instance: Renderer | None = None
        self._runners: dict[UOp, RunnerFn] = {}
        # one build at a time: two threads asking for the same new kernel build it once; a cache hit takes no lock
        self._build_lock = threading.RLock()

    # ---- the pipeline ----

    def get_runner(self, ast: UOp) -> RunnerFn:
        """A callable running the kernel AST `ast` on buffers (PARAM i is bufs[i]) with variable values, built by
        the stages once per AST. Thread-safe; a cached runner is one dict lookup away."""
        runner = self._runners.get(ast)
        if runner is None:
            with self._build_lock:
                runner = self._runners.get(ast)
                if runner is None:
                    runner = self._runners[ast] = self.build_runner(ast)
        return runner

    def build_runner(self, ast: UOp) -> RunnerFn:
        """Every stage for `ast`, uncached (get_runner caches what this returns)."""
        from tg_core.uop.rewrite import gc_paused
        start = profile_events.now() if profiling.on else 0
        with gc_paused():  # codegen allocates many acyclic objects: collections would only slow it down
            prepared = self.prepare(ast)
            programs = [self.lower(k) for k in prepared.kernels]
            loaded = [self.load(p, self.compile(self.render(p))) for p in programs]
        runner = self.make_runner(prepared, programs, loaded)
        if start:
            name = ast.arg.name if getattr(ast, "arg", None) is not None else "kernel"
            profile_events.host_event("compile", f"compile {name}", start, {"device": self.device})
        return runner

    def start_runner(self, ast: UOp) -> RunnerFn:
        """`get_runner(ast)`, except that the device may return before the runner's code is ready (CPU:LLVM
        compiles in a thread while the caller lowers the next kernel: LLVM releases the GIL); the caller then
        calls `finish_builds()` before running anything. The engine builds a schedule's kernels with it. The
        default is get_runner itself."""
        return self.get_runner(ast)

    def finish_builds(self) -> None:
        """Wait for the code of the runners `start_runner` returned on this thread; raises what building them
        raised, after forgetting those runners (a later call builds them again). The engine calls it after
        building a schedule's kernels and before running any, so a kernel that fails to build still fails the
        realize before anything ran. The default builds at once: nothing to wait for."""

    def forget_runners(self) -> None:
        """Drop the cached runners (after a change of renderer or of what `prepare` does); compiled code stays."""
        with self._build_lock:
            self._runners.clear()

    def prepare(self, ast: UOp) -> Prepared:
        """Stage 1: the device's own rewrites of the kernel AST before codegen (splitting it across cores, into
        several kernels, parallel ranges into GPU ids). The default changes nothing."""
        return Prepared((PreparedKernel(ast),))

    def lower(self, kernel: PreparedKernel) -> Program:
        """Stage 2: the kernel's linear program for this device's renderer (codegen/pipeline.py with the
        renderer's opts and rules), carrying the launch dims `prepare` chose."""
        program = self.render_with.program(kernel.ast)
        return program if kernel.launch is None else dataclasses.replace(program, launch=kernel.launch)

    def render(self, program: Program) -> Any:
        """Stage 3: the renderer's output for `program` (source text, or machine code bytes)."""
        return self.render_with.render(program)

    def compile(self, src: Any) -> Any:
        """Stage 4: the compiler's output for `src`, compiled once per device."""
        if src not in self._compiled:
            self._compiled[src] = self.compiler.compile(src)
        return self._compiled[src]

    def load(self, program: Program, lib: Any) -> Any:
        """Stage 5: the runtime object of a compiled program, a callable(bufs, var_vals) that runs it. The default
        is the `runtime` the device was made with, given the program's name and the compiled bytes."""
        return self.program(program.name, lib)

    def make_runner(self, prepared: Prepared, programs: Sequence[Program], loaded: Sequence[Any]) -> RunnerFn:
        """Stage 6: what `get_runner` returns: a single kernel's loaded program itself, or several run in order
        with their temporaries (KernelSequence)."""
        if len(loaded) == 1 and not prepared.temps:
            return loaded[0]
        return KernelSequence(self.device, self.allocator, loaded, prepared.temps)

    @property
    def render_with(self) -> Renderer:
        """An instance of the device's renderer class (`renderer`, chosen by the registry right after opening),
        made again when the class changes."""
        if self._renderer_instance is None or type(self._renderer_instance) is not self.renderer:
            if self.renderer is None:
                raise RuntimeError(f"{self.device} has no renderer: no plugin offered one")
            self._renderer_instance = self.renderer()
        return self._renderer_instance

    def program(self, name: str, lib: bytes) -> Any:
        """The `runtime` the device was made with, applied to a compiled program."""
        if self.runtime is None:
            raise NotImplementedError(f"device {self.device} has no program runtime")
        return self.runtime(name, lib)

    def compile_host_function(self, render: Callable[[Any], str], function: str) -> Any | None:
        """A capability of a device that runs code on this machine's CPU: compile a host function (hcq's host
        programs, tg_core/hcq/hostc.py). `render(renderer)` gives LLVM IR text for the device's `LLVMRenderer`
        (its target triple and data layout); the result is the loaded code, `.address` the function named
        `function`, valid while the result lives. None (the default): this device does not compile them."""
        return None

    def synchronize(self) -> None:
        """Wait for all work queued on this device. Devices that run synchronously need not override it."""

    def close(self) -> None:
        """Release what the device holds; here the allocator's cache of freed buffers."""
        if isinstance(self.allocator, LRUAllocator):
            self.allocator.free_cache()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


def shares_memory(a: str, b: str) -> bool:
    """Whether a kernel on device `a` may read the buffers of device `b` in place: the same device, or two
    host-shared ones (`Compiled.host_shared`)."""
    if a == b:
        return True
    da, db = Device[a], Device[b]
    return da is db or (da.host_shared and db.host_shared)


# last: the registry's module imports Compiled from this one (`from tg_core.device import Device` keeps working)
from tg_core.plugins.device_registry import Device  # noqa: E402
