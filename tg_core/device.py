"""Devices and their memory: Buffer, Allocator, LRUAllocator, Compiled, and the `Device` registry.

A device is a `Compiled` subclass that a plugin provides (`tg_devices` hook). Core opens it on first use as
`cls(device, options)`, where `device` is the canonical name ("AMD", "AMD:1") and `options` the validated
per-device options of the config. The simplest device needs only an allocator; the compile/run part
(renderer, compiler, program runtime) is used by codegen and the engine, which arrive with the Tensor API.
"""
from __future__ import annotations

import itertools
import logging
import os
import sys
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg_core.dtype import DType, from_numpy_dtype, to_dtype, to_numpy_dtype
from tg_core.helpers import ContextVar
from tg_core.plugins.config import parse_device_string
from tg_core.plugins.errors import (DeviceClashError, DeviceNotFoundError, DeviceUnavailable, PluginBlockedError,
                                    PluginBrokenError, PluginError, PluginRefusedError, suggest)

log = logging.getLogger("tg.device")

LRU = ContextVar("LRU", 1)


@dataclass(frozen=True)
class BufferSpec:
    """Allocation options. Part of the LRU cache key: a cached buffer is reused only for equal options."""
    host: bool = False   # host memory the device can reach directly (staging for copies)
    nolru: bool = False  # never keep it in the LRU cache when freed (memory shared outside tg)


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


class LRUAllocator(Allocator):
    """An allocator that keeps freed allocations, by (size, options), for the next allocation of that shape.

    Real allocation is slow on every device and a tensor program allocates the same sizes again and again.
    `cache_limit` bounds the cached bytes; past it the least recently freed allocations are really freed.
    LRU=0 in the environment (or `Context(LRU=0)`) turns the cache off."""

    def __init__(self, cache_limit: int | None = None):
        self.cache_limit = cache_limit
        self._entries: OrderedDict[int, tuple[tuple[int, BufferSpec], Any]] = OrderedDict()
        self._by_key: dict[tuple[int, BufferSpec], list[int]] = {}
        self._tickets = itertools.count()
        self.cached_bytes = 0
        # the cache's bookkeeping is shared by every thread using the device: one change at a time
        self._cache_lock = threading.RLock()

    def alloc(self, size: int, options: BufferSpec | None = None) -> Any:
        options = options or _DEFAULT_SPEC
        with self._cache_lock:
            tickets = self._by_key.get((size, options))
            if tickets:
                # the most recently freed one: its memory is the likeliest to be warm
                _, opaque = self._entries.pop(tickets.pop())
                self.cached_bytes -= size
                return opaque
        self.check_size(size)  # emptying the cache cannot help an allocation bigger than the device
        try:
            return super().alloc(size, options)
        except MemoryError:
            self.free_cache()
            return super().alloc(size, options)

    def free(self, opaque: Any, size: int, options: BufferSpec | None = None) -> None:
        options = options or _DEFAULT_SPEC
        if not LRU or options.nolru or (self.cache_limit is not None and size > self.cache_limit):
            super().free(opaque, size, options)
            return
        with self._cache_lock:
            ticket = next(self._tickets)
            self._entries[ticket] = ((size, options), opaque)
            self._by_key.setdefault((size, options), []).append(ticket)
            self.cached_bytes += size
            while self.cache_limit is not None and self.cached_bytes > self.cache_limit:
                self._evict_oldest()

    def _evict_oldest(self) -> None:
        ticket, ((size, options), opaque) = self._entries.popitem(last=False)
        self._by_key[(size, options)].remove(ticket)
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
        elif opaque is not None:
            self._opaque = opaque
        else:
            try:
                self._opaque = allocator.alloc(self.nbytes, self.options)
            except MemoryError as e:  # the allocator says why; the user needs what was asked for and where
                raise MemoryError(f"cannot allocate {format_bytes(self.nbytes)} ({self.size} x {self.dtype!r}) on "
                                  f"{self.device}: {e or 'out of memory'}") from e
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
        mv = _host_bytes(bytearray(self.nbytes) if dest is None else dest)
        if mv.readonly or mv.nbytes != self.nbytes:
            raise ValueError(f"copyout of {self!r} needs a writable host buffer of {self.nbytes} bytes")
        self.allocator.copyout(mv, opaque)
        return mv

    def copy_from(self, src: Buffer) -> Buffer:
        """Copy another buffer's bytes in, through host memory (devices add faster paths with the engine)."""
        if src.nbytes != self.nbytes:
            raise ValueError(f"copy of {src!r} ({src.nbytes} bytes) into {self!r} ({self.nbytes} bytes)")
        return self.copyin(src.copyout())

    def numpy(self) -> np.ndarray:
        """The contents as a new 1-D numpy array (bfloat16/fp8 as their raw bits)."""
        return np.frombuffer(self.copyout(), dtype=to_numpy_dtype(self.dtype))

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: str) -> Buffer:
        array = np.ascontiguousarray(array)
        buf = cls(device, array.size, from_numpy_dtype(array.dtype))
        return buf.copyin(array) if buf.nbytes else buf

    def __repr__(self) -> str:
        view = f", view of offset {self.offset}" if self._base is not None else ""
        return f"<Buffer {self.device} {self.size} x {self.dtype!r}{view}>"

    def __del__(self) -> None:
        # a dropped base buffer returns its memory (views keep their base alive, so none is live here)
        if self._base is None and self._opaque is not None and not sys.is_finalizing():
            try:
                self._allocator.free(self._opaque, self.nbytes, self.options)
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


class Compiled:
    """Base of every device: an allocator, renderers, a compiler and a program runtime.

    Core sets `renderers` (classes from the `tg_renderers` hooks, preferred first) and `renderer` (the one this
    device renders with) right after construction. `runtime(name, lib)` returns a callable program; codegen and
    the engine (with the Tensor API) define its calling convention. A device without a runtime can hold buffers
    but not run programs."""

    def __init__(self, device: str, allocator: Allocator, compiler: Compiler | None = None,
                 runtime: Callable[[str, bytes], Any] | None = None):
        self.device, self.allocator = device, allocator
        self.compiler = compiler if compiler is not None else Compiler()
        self.runtime = runtime
        self.renderers: list[type] = []
        self.renderer: type | None = None
        self.renderer_reason = ""
        self._compiled: dict[str, bytes] = {}

    def compile(self, src: str) -> bytes:
        """The compiler's output for `src`, compiled once per device."""
        if src not in self._compiled:
            self._compiled[src] = self.compiler.compile(src)
        return self._compiled[src]

    def program(self, name: str, lib: bytes) -> Any:
        if self.runtime is None:
            raise NotImplementedError(f"device {self.device} has no program runtime")
        return self.runtime(name, lib)

    def get_runner(self, ast: Any) -> Callable[[list[Buffer], dict[str, int]], None]:
        """A callable running the kernel AST `ast` on buffers (PARAM i is bufs[i]) with variable values.
        Devices with a renderer and runtime get this from codegen; a device may override it."""
        raise NotImplementedError(f"device {self.device} cannot run kernels: it has no renderer/runtime for them yet")

    def synchronize(self) -> None:
        """Wait for all work queued on this device. Devices that run synchronously need not override it."""

    def close(self) -> None:
        """Release what the device holds; here the allocator's cache of freed buffers."""
        if isinstance(self.allocator, LRUAllocator):
            self.allocator.free_cache()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device}>"


_canonical_names: dict[str, str] = {}
_UNUSABLE = (PluginBrokenError, PluginRefusedError, PluginBlockedError, DeviceClashError)


class _Devices:
    """The registry of opened devices: `Device["AMD:1"]`, `Device.DEFAULT`. Plugins load on first use."""

    def __init__(self) -> None:
        self._opened: dict[str, Compiled] = {}
        self._lock = threading.RLock()
        self._default: tuple[str, str] | None = None

    @property
    def registry(self) -> Any:
        from tg_core.plugins.manager import get_registry
        return get_registry()

    @staticmethod
    def canonicalize(name: str) -> str:
        """'amd' -> 'AMD', 'AMD:0' -> 'AMD', 'AMD:1' -> 'AMD:1', 'cpu:llvm' -> 'CPU:LLVM'. A named renderer is part
        of the device: CPU:LLVM is the CPU rendering with LLVM, whatever renderer plain CPU uses."""
        got = _canonical_names.get(name) if isinstance(name, str) else None
        if got is None:
            base, renderer, idx = parse_device_string(name)
            got = ":".join([base] + ([renderer] if renderer else []) + ([str(idx)] if idx else []))
            if len(_canonical_names) < 1024:  # every tensor op passes its device through here
                _canonical_names[name] = got
        return got

    def __getitem__(self, name: str) -> Compiled:
        """The device named `name`, opened on first use. Errors name what to install or how to fix the config."""
        dev = self._opened.get(name)  # a canonical name of an open device: the engine asks this per kernel
        if dev is not None:
            return dev
        with self._lock:
            return self._open(name)

    def _open(self, name: str) -> Compiled:
        base, renderer, _ = parse_device_string(name)
        canonical = self.canonicalize(name)
        if canonical in self._opened:
            return self._opened[canonical]
        reg = self.registry
        rec, spec = reg.device_spec(base)
        options = reg.config.device_options(base, spec.options)
        renderers = self._renderers(canonical, renderer)  # checked before the device touches anything
        try:
            dev = spec.cls(canonical, options)
        except DeviceUnavailable:
            raise
        except Exception as e:
            raise PluginBrokenError(f"{rec.label}: opening device {canonical} failed: {type(e).__name__}: {e}\n"
                                    f"{reg.disable_hint(rec)}") from e
        if not isinstance(dev, Compiled):
            raise PluginBrokenError(f"{rec.label}: {spec.cls.__name__} is not a tg_core.device.Compiled")
        dev.renderers, why = renderers
        dev.renderer, dev.renderer_reason = (dev.renderers[0] if dev.renderers else None), why
        self._opened[canonical] = dev
        log.debug("opened %s from %s", canonical, rec.label)
        return dev

    def _renderers(self, device: str, wanted: str | None) -> tuple[list[type], str]:
        """The renderers of `device`, the one it renders with first, and why; `wanted` is the renderer named in
        the device string, which must be one of those offered."""
        ordered, why = self.registry.choose_renderer(device)
        if wanted is None:
            return ordered, why
        by_name = {c.name.upper(): c for c in ordered}
        if wanted not in by_name:
            hint = suggest(wanted, list(by_name))
            raise DeviceNotFoundError(f"no renderer {wanted!r} for {parse_device_string(device)[0]}; offered: "
                                      f"{', '.join(by_name) or 'none'}" + (f"; did you mean {hint}?" if hint else ""))
        ordered = [by_name[wanted]] + [c for c in ordered if c is not by_name[wanted]]
        return ordered, f"{wanted}: named in the device string"

    @property
    def DEFAULT(self) -> str:  # noqa: N802 -- the registry's public name
        """The default device's name: the config's `device` (or DEV), else the highest-priority working device."""
        return self.default_with_reason()[0]

    @DEFAULT.setter
    def DEFAULT(self, name: str) -> None:  # noqa: N802
        self[name]  # the device named, with its index and renderer ("AMD:1", "CPU:LLVM"), as Tensor(device=) has it
        self._default = (self.canonicalize(name), f"set by Device.DEFAULT = {name!r}")

    def default_with_reason(self) -> tuple[str, str]:
        """(default device, why it was chosen)."""
        with self._lock:
            if self._default is None:
                self._default = self._choose_default()
            return self._default

    def _choose_default(self) -> tuple[str, str]:
        reg = self.registry
        if reg.config.device is not None:
            # selected: every failure is the user's error to see. The renderer part is a config preference for
            # every instance of the device (see Config.renderer_order), so the default is the device without it.
            base, _, idx = parse_device_string(reg.config.device)
            name = self.canonicalize(f"{base}:{idx}" if idx else base)
            self[name]
            return name, f"device: {reg.config.device} from {reg.config.source('device')}"
        skipped = []
        for name, prio in reg.candidates():
            try:
                self._open(name)
            except DeviceUnavailable as e:
                log.info("default device: %s is unavailable: %s", name, e)
                skipped.append(f"{name} (unavailable: {e})")
                continue
            except _UNUSABLE as e:
                provs = reg.providers(name)
                if isinstance(e, DeviceClashError):
                    reg.warn_once(f"device:{name}", f"tg: skipping device {name} for the default device: "
                                                    f"{str(e).splitlines()[0]}")
                elif not any(r.status.value == "loaded" for r in provs):
                    for r in provs:  # its plugin could not be loaded: it provides no device to fall back from
                        reg.report(r)
                else:
                    # a loaded plugin whose device fails to open: the device exists, so using another one instead
                    # would hide the failure behind a different (often much slower) device
                    raise PluginBrokenError(
                        f"default device: {name} (priority {prio}) is the highest-priority device and fails to open, "
                        f"and tg does not fall back to another device; fix the cause below, or choose a device with "
                        f"DEV=NAME or `device:` in ./tg.yaml ({', '.join(d for d, _ in reg.candidates())})\n{e}"
                    ) from e
                skipped.append(f"{name} ({str(e).splitlines()[0]})")
                continue
            why = f"highest-priority working device (priority {prio})"
            return name, why + (f"; skipped: {'; '.join(skipped)}" if skipped else "")
        raise PluginError("no working device: " + "; ".join(skipped))

    def opened(self) -> list[str]:
        return list(self._opened)

    def reset(self, registry: Any = None) -> None:
        """Close every opened device and forget the default; use `registry` (None: rebuild from config on next use)."""
        from tg_core.plugins.manager import set_registry
        with self._lock:
            for dev in self._opened.values():
                dev.close()
            self._opened.clear()
            self._default = None
            set_registry(registry)

    def configure(self, **explicit: Any) -> None:
        """Rebuild the registry with explicit settings, the last config layer: `Device.configure(device="CPU")`."""
        from tg_core.plugins.manager import PluginRegistry
        self.reset(PluginRegistry.create(explicit))


Device = _Devices()
