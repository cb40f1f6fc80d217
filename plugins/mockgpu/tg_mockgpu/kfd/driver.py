"""MockKFD: an OS layer (tg_amd/kfd/oslayer.py) that is /dev/kfd, the render nodes and the KFD sysfs topology of
`gpus` emulated gfx1100s with `xccs` XCCs each, whose GPU side is the RDNA3 emulator.

Files: `open` of /dev/kfd or a render node gives a virtual fd; `read`/`listdir` answer the topology
(kfd/topology.py). ioctls on the /dev/kfd fd are checked (the request number must be the one amd.md 6 gives for
its nr: direction and struct size included; the struct passed must have that size) and answered here. Memory:
the host's anonymous mmaps (the VA reservations of allocations, USERPTR host memory) come from one window of
address space the mock reserved, which each GPU's `GPUMemory` page table covers; VRAM is pages of the GPU's paged
`GPUMemory`; GTT is a memfd mapped for the GPU side at ALLOC and for the host where it mmaps the render node
(MAP_FIXED at the VA); USERPTR is the host's memory (a memfd the mock backs MAP_SHARED anonymous mmaps with);
MAP_MEMORY_TO_GPU puts the pages in that GPU's page table (host memory aliased into its store), so kernels reach
all of it (kfd/vm.py). Doorbells: a 0x2000-byte host page per GPU, mmapped from /dev/kfd at the doorbell offset
CREATE_QUEUE returns; `write64` into it stores the value and calls the queue's `MockQueue.doorbell`, which runs the
queue's command processor (kfd/engines.py). Events: signal events fire by SET_EVENT or `interrupt(event_id)` (what
a RELEASE_MEM with an interrupt does); `report_fault` queues a memory exception that the next WAIT_EVENTS on each
MEMORY event returns (KFD sets every exception event of the process; the data names the GPU), `queue_fault` a
hardware exception (and the text `fault_detail` returns). WAIT_EVENTS first
runs the wait hooks (`add_wait_hook`; the stalled queues run there), and never sleeps: with nothing fired it
answers timeout at once.
"""
from __future__ import annotations

import ctypes
import errno
import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar

from tg_amd.kfd import ioctl as K
from tg_amd.kfd.oslayer import (
    MAP_ANONYMOUS,
    MAP_FIXED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    MAP_SHARED,
    PROT_NONE,
    PROT_READ,
    PROT_WRITE,
    host_mmap,
    host_munmap,
)
from tg_mockgpu.cp.launch import EmulatorLauncher
from tg_mockgpu.cp.sdma import Traffic
from tg_mockgpu.kfd.engines import Engines
from tg_mockgpu.kfd.queue import KIND_OF_TYPE, MockQueue
from tg_mockgpu.kfd.topology import gpu_id_of, render_node, sysfs_files
from tg_mockgpu.kfd.vm import AddressSpace, GPUView, Region, VAWindow
from tg_mockgpu.memory import PAGE_SIZE, GPUMemory

KFD_PATH = "/dev/kfd"
VERSION = (1, 14)
DOORBELL_PAGES = 0x2000
MMAP_TYPE_DOORBELL = 3 << 62          # KFD's mmap offset encoding: type in bits 62-63, gpu id in bits 46-61
MAX_SIGNAL_SLOTS = 0x8000 // 8
VA_WINDOW = 64 << 30                  # bytes of host address space the mock's GPU VAs come from (reserved, not used)
# hw_exception_data of a queue fault (kfd_ioctl.h): a per-engine reset (the queue's), caused by a GPU hang
HW_EXCEPTION_PER_ENGINE_RESET, HW_EXCEPTION_GPU_HANG = 1, 0
_KINDS = {K.AllocFlags.VRAM: "vram", K.AllocFlags.GTT: "gtt", K.AllocFlags.USERPTR: "userptr"}


def _err(code: int, msg: str) -> OSError:
    return OSError(code, f"mock KFD: {msg}")


@dataclass
class MockEvent:
    event_id: int
    type: int
    auto_reset: bool
    slot: int = 0
    signaled: bool = False
    # MEMORY: (gpu_id, va, write); HW_EXCEPTION: (gpu_id, reset_type, reset_cause) -- not yet returned by a wait.
    # A fault goes to every event of its type, as KFD sets each of the process's exception events
    pending: list[tuple[int, int, int]] = field(default_factory=list)


@dataclass
class MockGPU:
    index: int
    gpu_id: int
    xccs: int
    vram: GPUMemory
    view: GPUView
    doorbell_page: int
    launcher: EmulatorLauncher
    vm_drm_fd: int = -1
    queues: dict[int, MockQueue] = field(default_factory=dict)     # doorbell slot -> queue
    sdma_traffic: Traffic = field(default_factory=dict)            # its SDMA engines' bytes by (source, destination)


class MockKFD:
    """The mock KFD driver (an OSLayer)."""
    name: ClassVar[str] = "mock"

    def __init__(self, gpus: int = 2, xccs: int = 1):
        if not isinstance(gpus, int) or gpus < 1:
            raise ValueError(f"mock GPUs: {gpus!r}; allowed: an integer >= 1")
        if not isinstance(xccs, int) or not 1 <= xccs <= 8:
            raise ValueError(f"mock XCCs: {xccs!r}; allowed: 1..8")
        self.files = sysfs_files(gpus, xccs)
        self.space = AddressSpace()
        base = host_mmap(0, VA_WINDOW, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE)
        self.window = VAWindow(base, VA_WINDOW)
        self.host_memory: dict[int, tuple[int, int]] = {}   # MAP_SHARED anonymous mmaps: va -> (memfd, size)
        vram = [GPUMemory(seed=0x7A11 + i, va_base=base) for i in range(gpus)]
        self.gpus = [MockGPU(i, gpu_id_of(i), xccs, vram[i], GPUView(self.space, vram, i),
                             host_mmap(0, DOORBELL_PAGES, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS),
                             EmulatorLauncher(vram[i]))
                     for i in range(gpus)]
        self._by_id = {g.gpu_id: g for g in self.gpus}
        self.fds: dict[int, str] = {}
        self._next_fd = itertools.count(1000)
        self.handles: dict[int, Region] = {}
        self._next_handle = itertools.count(1)
        self.queues: dict[int, MockQueue] = {}
        self._next_queue = itertools.count(1)
        self.events: dict[int, MockEvent] = {}
        self._next_event = itertools.count(0x100)   # memory / hw-exception event ids (signal ids are slots)
        self.event_page: Region | None = None
        self.fault_details: dict[int, list[str]] = {g.gpu_id: [] for g in self.gpus}
        self.wait_hooks: list[Callable[[], None]] = []
        self.runtime_enabled = False
        # the device may call from several threads: ioctls and mappings change shared tables (handles, regions,
        # queues, events), so they take this lock; re-entrant because a doorbell hook may call back in
        self._lock = threading.RLock()
        self.engines = Engines(self)
        self.add_wait_hook(self.engines.run)

    # ---- the seam for command processors ----

    def gpu_view(self, index: int) -> GPUView:
        return self.gpus[index].view

    def peer_copies(self) -> dict[tuple[int, int], int]:
        """Bytes the SDMA engines of every GPU have copied from one GPU's VRAM into another's, by (source GPU,
        destination GPU) index: what a multi-device collective moves between GPUs. Copies that touch host memory
        (GTT staging, USERPTR) or stay in one GPU's VRAM are not counted here (`MockGPU.sdma_traffic` has them)."""
        out: dict[tuple[int, int], int] = {}
        with self._lock:
            for g in self.gpus:
                for ((skind, sgpu), (dkind, dgpu)), n in g.sdma_traffic.items():
                    if skind == dkind == "vram" and sgpu != dgpu:
                        out[(sgpu, dgpu)] = out.get((sgpu, dgpu), 0) + n
        return out

    def add_wait_hook(self, hook: Callable[[], None]) -> None:
        self.wait_hooks.append(hook)

    def interrupt(self, event_id: int) -> None:
        """An end-of-pipe interrupt with ctxid `event_id` (RELEASE_MEM INT_SEL 2): fires that signal event."""
        ev = self.events.get(event_id)
        if ev is not None and ev.type == K.EventType.SIGNAL:
            ev.signaled = True

    def signal_interrupt(self, gpu: int, ctxid: int) -> None:
        """An interrupt a queue of GPU `gpu` (index) raised (RELEASE_MEM INT_SEL, SDMA TRAP) with context id
        `ctxid`: the signal event of that id fires. tg-amd's signals send ctxid 0 (no event id), and then every
        signal event fires, as KFD does when the context id names no event: a woken waiter checks its signal
        again, so a wake-up too many is harmless, and one too few would hang it."""
        ev = self.events.get(ctxid) if ctxid else None
        if ev is not None and ev.type == K.EventType.SIGNAL:
            ev.signaled = True
            return
        for ev in self.events.values():
            if ev.type == K.EventType.SIGNAL:
                ev.signaled = True

    def report_fault(self, gpu: int, va: int, write: bool) -> None:
        """A GPU page fault on mock GPU `gpu` (index): reported by the next WAIT_EVENTS on each MEMORY event."""
        self._raise_events(K.EventType.MEMORY, (self.gpus[gpu].gpu_id, va, int(write)))

    def _raise_events(self, kind: int, data: tuple[int, int, int]) -> None:
        with self._lock:
            for ev in self.events.values():
                if ev.type == kind:
                    ev.pending.append(data)

    def queue_fault(self, gpu: int, detail: str, page: tuple[int, bool] | None = None) -> None:
        """A queue of GPU `gpu` (index) faulted: a page fault (`page` = (address, write)) goes to the MEMORY
        event, anything else to the HW_EXCEPTION event; `detail` waits for `fault_detail`."""
        g = self.gpus[gpu]
        with self._lock:
            self.fault_details[g.gpu_id].append(detail)
            if page is not None:
                self.report_fault(gpu, *page)
            else:
                self._raise_events(K.EventType.HW_EXCEPTION,
                                   (g.gpu_id, HW_EXCEPTION_PER_ENGINE_RESET, HW_EXCEPTION_GPU_HANG))

    def fault_detail(self, gpu_id: int) -> str | None:
        """The oldest fault message of GPU `gpu_id` not yet returned (the queue, the dword offset, the header and
        opcode of a bad packet; the emulator's address, instruction, kernel and lane), or None."""
        with self._lock:
            pending = self.fault_details.get(gpu_id)
            if pending is None:
                raise ValueError(f"fault_detail: gpu_id {gpu_id:#x} is not a GPU; GPUs: "
                                 + ", ".join(f"{g.gpu_id:#x}" for g in self.gpus))
            return pending.pop(0) if pending else None

    def release(self) -> None:
        """Free what the mock itself holds (each GPU's VRAM store and doorbell page); the driver is unusable after."""
        for g in self.gpus:
            host_munmap(g.doorbell_page, DOORBELL_PAGES)
            g.vram.close()
        for r in self.handles.values():
            if r.kind == "gtt":
                host_munmap(r.backing, r.size)
                os.close(r.memfd)
        self.handles.clear()
        for fd, _ in self.host_memory.values():
            os.close(fd)
        self.host_memory.clear()
        host_munmap(self.window.base, self.window.size)

    # ---- files ----

    def open(self, path: str, flags: int) -> int:
        nodes = {render_node(g.index): f"render:{g.index}" for g in self.gpus}
        if path != KFD_PATH and path not in nodes:
            raise FileNotFoundError(errno.ENOENT, f"mock KFD: no device file {path!r}; it provides {KFD_PATH} and "
                                                  f"{', '.join(nodes)}")
        fd = next(self._next_fd)
        self.fds[fd] = "kfd" if path == KFD_PATH else nodes[path]
        return fd

    def close(self, fd: int) -> None:
        if self.fds.pop(fd, None) is None:
            raise _err(errno.EBADF, f"close of fd {fd}, which is not open")

    def read(self, path: str) -> str:
        if path not in self.files:
            raise FileNotFoundError(errno.ENOENT, f"mock KFD: no file {path!r}")
        return self.files[path]

    def listdir(self, path: str) -> list[str]:
        prefix = path.rstrip("/") + "/"
        out = sorted({p[len(prefix):].split("/")[0] for p in self.files if p.startswith(prefix)})
        if not out:
            raise FileNotFoundError(errno.ENOENT, f"mock KFD: no directory {path!r}")
        return out

    def exists(self, path: str) -> bool:
        prefix = path.rstrip("/") + "/"
        return path == KFD_PATH or path in self.files or any(p.startswith(prefix) for p in self.files) \
            or path in {render_node(g.index) for g in self.gpus}

    # ---- ioctl ----

    def ioctl(self, fd: int, request: int, args: ctypes.Structure) -> None:
        with self._lock:
            self._ioctl(fd, request, args)

    def _ioctl(self, fd: int, request: int, args: ctypes.Structure) -> None:
        if self.fds.get(fd) != "kfd":
            raise _err(errno.EBADF if fd not in self.fds else errno.ENOTTY,
                       f"ioctl {request:#x} on fd {fd}, which is not /dev/kfd")
        nr = request & 0xFF
        spec = K.BY_NR.get(nr) if (request >> 8) & 0xFF == K.IOC_MAGIC else None
        if spec is None:
            raise _err(errno.ENOTTY, f"unknown ioctl request {request:#x} (nr {nr:#x}); known: "
                       + ", ".join(f"{i.name} {i.request:#x}" for i in K.IOCTLS.values()))
        size = ctypes.sizeof(spec.args)
        if request != spec.request:
            raise _err(errno.EINVAL, f"{spec.name}: request {request:#x} (size {request >> 16 & 0x3FFF}, direction "
                       f"{request >> 30}) is not {spec.request:#x} (size {size}, direction {spec.direction})")
        if ctypes.sizeof(args) != size:
            raise _err(errno.EINVAL, f"{spec.name}: argument struct of {ctypes.sizeof(args)} bytes, expected {size}")
        # the caller's struct, seen as this ioctl's (any ctypes struct of the right size is accepted, as the kernel
        # sees only bytes)
        view = spec.args.from_buffer(args) if type(args) is not spec.args else args
        getattr(self, f"_{spec.name.lower()}")(view)

    def _gpu(self, gpu_id: int, what: str) -> MockGPU:
        if gpu_id not in self._by_id:
            raise _err(errno.EINVAL, f"{what}: gpu_id {gpu_id:#x} is not a GPU; GPUs: "
                       + ", ".join(f"{g.gpu_id:#x}" for g in self.gpus))
        return self._by_id[gpu_id]

    def _get_version(self, a: K.GetVersionArgs) -> None:
        a.major_version, a.minor_version = VERSION

    def _acquire_vm(self, a: K.AcquireVMArgs) -> None:
        g = self._gpu(a.gpu_id, "ACQUIRE_VM")
        if self.fds.get(a.drm_fd) != f"render:{g.index}":
            raise _err(errno.EINVAL, f"ACQUIRE_VM: drm_fd {a.drm_fd} is not an open {render_node(g.index)}")
        g.vm_drm_fd = a.drm_fd

    def _runtime_enable(self, a: K.RuntimeEnableArgs) -> None:
        self.runtime_enabled = True

    def _alloc_memory_of_gpu(self, a: K.AllocMemoryArgs) -> None:
        g = self._gpu(a.gpu_id, "ALLOC_MEMORY_OF_GPU")
        if g.vm_drm_fd < 0:
            raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: GPU {g.gpu_id:#x} has no VM (ACQUIRE_VM first)")
        kinds = [k for bit, k in _KINDS.items() if a.flags & bit]
        if len(kinds) != 1 or a.flags & (K.AllocFlags.DOORBELL | K.AllocFlags.MMIO_REMAP):
            raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: flags {a.flags:#x} must hold exactly one of VRAM (1<<0), "
                       "GTT (1<<1), USERPTR (1<<2); the mock has no DOORBELL or MMIO_REMAP memory")
        kind = kinds[0]
        if a.size <= 0 or a.size % PAGE_SIZE or a.va_addr == 0 or a.va_addr % PAGE_SIZE:
            raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: va {a.va_addr:#x} and size {a.size:#x} must be non-zero "
                       "multiples of 4096")
        if kind == "vram" and a.flags & K.AllocFlags.PUBLIC:
            raise _err(errno.EINVAL, "ALLOC_MEMORY_OF_GPU: the mock's VRAM is not CPU-visible (its pages are "
                       "scattered): allocate host-visible memory as GTT or USERPTR")
        if kind == "userptr" and a.mmap_offset == 0:
            raise _err(errno.EINVAL, "ALLOC_MEMORY_OF_GPU: USERPTR needs the host address in mmap_offset")
        if not (self.window.contains(a.va_addr) and self.window.contains(a.va_addr + a.size - 1)):
            raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: [{a.va_addr:#x}, +{a.size:#x}) is outside the mock's GPU "
                       f"address window [{self.window.base:#x}, +{self.window.size:#x}): reserve the VA with this OS "
                       "layer's mmap (fd -1, address 0)")
        host = self._host_memory(a.mmap_offset, a.size) if kind == "userptr" else None
        if self.space.find(a.va_addr) or self.space.find(a.va_addr + a.size - 1):
            raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: [{a.va_addr:#x}, +{a.size:#x}) overlaps an allocation")
        handle = g.gpu_id << 32 | next(self._next_handle)
        region = Region(a.va_addr, a.size, kind, g.index, handle, a.flags, 0)  # type: ignore[arg-type]
        if kind == "vram":
            region.phys = g.vram.take_pages(a.size // PAGE_SIZE)
        elif kind == "gtt":
            region.memfd = region.host_fd = os.memfd_create(f"tg-mock-gtt-{handle:x}", os.MFD_CLOEXEC)
            os.ftruncate(region.memfd, a.size)
            region.backing = host_mmap(0, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, region.memfd, 0)
        else:
            assert host is not None
            region.backing, (region.host_fd, region.host_offset) = a.mmap_offset, host
        region.mmap_offset = (handle & 0xFFFFFFFF) << 24
        self.space.add(region)
        self.handles[handle] = region
        a.handle, a.mmap_offset = handle, region.mmap_offset if kind != "userptr" else a.mmap_offset

    def _host_memory(self, addr: int, size: int) -> tuple[int, int]:
        """(memfd, offset) of host memory [addr, +size) the mock mapped (USERPTR must be such memory: the mock shows
        it to a GPU by mapping the same file into that GPU's store)."""
        for start, (fd, n) in self.host_memory.items():
            if start <= addr and addr + size <= start + n:
                return fd, addr - start
        raise _err(errno.EINVAL, f"ALLOC_MEMORY_OF_GPU: USERPTR [{addr:#x}, +{size:#x}) is not host memory this OS "
                   "layer mapped; the mock reaches host memory from mmap(0, size, PROT_READ|PROT_WRITE, "
                   "MAP_SHARED|MAP_ANONYMOUS, -1, 0) through it")

    def _map_on(self, r: Region, g: MockGPU) -> None:
        """Put `r` in GPU `g`'s page table: its own VRAM pages, or host memory aliased into its store (another
        GPU's VRAM is reached by g's engines through GPUView only)."""
        if g.index in r.mapped_on:
            return
        if r.phys is not None:
            if r.gpu == g.index:
                g.vram.map_pages(r.va, r.phys)
        else:
            phys = g.vram.alias_pages(r.host_fd, r.host_offset, r.size // PAGE_SIZE)
            g.vram.map_pages(r.va, phys)
            r.aliases[g.index] = phys
        r.mapped_on.add(g.index)

    def _unmap_from(self, r: Region, g: MockGPU) -> None:
        if g.index not in r.mapped_on:
            return
        r.mapped_on.discard(g.index)
        if r.phys is None or r.gpu == g.index:
            g.vram.unmap_pages(r.va, r.size // PAGE_SIZE)
        alias = r.aliases.pop(g.index, None)
        if alias is not None:
            g.vram.release_pages(alias)

    def _region(self, handle: int, what: str) -> Region:
        if handle not in self.handles:
            raise _err(errno.EINVAL, f"{what}: handle {handle:#x} is not a live allocation")
        return self.handles[handle]

    def _free_memory_of_gpu(self, a: K.FreeMemoryArgs) -> None:
        r = self._region(a.handle, "FREE_MEMORY_OF_GPU")
        if r is self.event_page:
            if self.events:
                raise _err(errno.EBUSY, f"FREE_MEMORY_OF_GPU: the event page is in use by {len(self.events)} events")
            self.event_page = None
        del self.handles[a.handle]
        self.space.remove(r)
        for i in sorted(r.mapped_on):
            self._unmap_from(r, self.gpus[i])
        if r.phys is not None:
            self.gpus[r.gpu].vram.release_pages(r.phys)
        elif r.kind == "gtt":
            host_munmap(r.backing, r.size)
            os.close(r.memfd)
        if r.host_unmapped:
            self._release_va(r.va)

    def _device_ids(self, a: K.MapMemoryArgs, what: str) -> list[MockGPU]:
        if not 0 < a.n_devices <= len(self.gpus) or not a.device_ids_array_ptr:
            raise _err(errno.EINVAL, f"{what}: n_devices {a.n_devices} (allowed 1..{len(self.gpus)}) with "
                       f"device_ids_array_ptr {a.device_ids_array_ptr:#x}")
        ids = (ctypes.c_uint32 * a.n_devices).from_address(a.device_ids_array_ptr)
        return [self._gpu(i, what) for i in ids]

    def _map_memory_to_gpu(self, a: K.MapMemoryArgs) -> None:
        r = self._region(a.handle, "MAP_MEMORY_TO_GPU")
        gpus = self._device_ids(a, "MAP_MEMORY_TO_GPU")
        for g in gpus:
            self._map_on(r, g)
        a.n_success = len(gpus)

    def _unmap_memory_from_gpu(self, a: K.MapMemoryArgs) -> None:
        r = self._region(a.handle, "UNMAP_MEMORY_FROM_GPU")
        gpus = self._device_ids(a, "UNMAP_MEMORY_FROM_GPU")
        for g in gpus:
            self._unmap_from(r, g)
        a.n_success = len(gpus)

    def _create_queue(self, a: K.CreateQueueArgs) -> None:
        g = self._gpu(a.gpu_id, "CREATE_QUEUE")
        if a.queue_type not in KIND_OF_TYPE:
            raise _err(errno.EINVAL, f"CREATE_QUEUE: queue_type {a.queue_type}; the mock has 0 (COMPUTE, PM4), "
                       "1 (SDMA), 2 (COMPUTE_AQL)")
        kind = KIND_OF_TYPE[a.queue_type]
        xcc, pct = a.queue_percentage >> 8, a.queue_percentage & 0xFF
        if pct > K.MAX_QUEUE_PERCENTAGE or xcc >= g.xccs or a.queue_priority > K.MAX_QUEUE_PRIORITY:
            raise _err(errno.EINVAL, f"CREATE_QUEUE: queue_percentage {pct} (allowed 0..100), xcc {xcc} (allowed "
                       f"0..{g.xccs - 1}), priority {a.queue_priority} (allowed 0..15)")
        if a.ring_size < 0x100 or a.ring_size & (a.ring_size - 1):
            raise _err(errno.EINVAL, f"CREATE_QUEUE: ring_size {a.ring_size:#x} is not a power of two >= 256")
        need = [("ring", a.ring_base_address, a.ring_size, True), ("read pointer", a.read_pointer_address, 8, True),
                ("write pointer", a.write_pointer_address, 8, True)]
        if kind != "sdma":
            need += [("EOP buffer", a.eop_buffer_address, a.eop_buffer_size, False),
                     ("CWSR area", a.ctx_save_restore_address, a.ctx_save_restore_size, False)]
        for what, va, size, host in need:
            r = self.space.find(va, max(size, 1)) if va else None
            if r is None or g.index not in r.mapped_on or size == 0 or (host and r.kind == "vram"):
                raise _err(errno.EINVAL, f"CREATE_QUEUE: {what} [{va:#x}, +{size:#x}) is not "
                           f"{'host-visible memory ' if host else ''}mapped on GPU {g.gpu_id:#x}")
        slot = len(g.queues)
        if slot >= DOORBELL_PAGES // 8:
            raise _err(errno.ENOSPC, f"CREATE_QUEUE: GPU {g.gpu_id:#x} has no free doorbell")
        slot = min(set(range(DOORBELL_PAGES // 8)) - set(g.queues))
        q = MockQueue(g.view, next(self._next_queue), kind, g.index, a.ring_base_address, a.ring_size,
                      a.read_pointer_address, a.write_pointer_address,
                      self._doorbell_base(g) | slot * 8, xcc, a.queue_priority,
                      (a.eop_buffer_address, a.eop_buffer_size),
                      (a.ctx_save_restore_address, a.ctx_save_restore_size))
        self.engines.attach(q)
        g.queues[slot] = q
        self.queues[q.queue_id] = q
        a.queue_id, a.doorbell_offset = q.queue_id, q.doorbell_offset

    def _doorbell_base(self, g: MockGPU) -> int:
        return MMAP_TYPE_DOORBELL | (g.gpu_id & 0xFFFF) << 46

    def _destroy_queue(self, a: K.DestroyQueueArgs) -> None:
        q = self.queues.pop(a.queue_id, None)
        if q is None:
            raise _err(errno.EINVAL, f"DESTROY_QUEUE: queue {a.queue_id} does not exist")
        self.engines.detach(q)
        del self.gpus[q.gpu].queues[(q.doorbell_offset & 0x1FFF) // 8]

    def _create_event(self, a: K.CreateEventArgs) -> None:
        if self.event_page is None:
            r = self.handles.get(a.event_page_offset)
            if r is None or r.kind != "gtt" or r.size < 0x8000:
                raise _err(errno.EINVAL, f"CREATE_EVENT: the first call needs the handle of a >= 0x8000-byte GTT "
                           f"allocation (the event page) in event_page_offset, got {a.event_page_offset:#x}")
            self.event_page = r
        if a.event_type not in (K.EventType.SIGNAL, K.EventType.MEMORY, K.EventType.HW_EXCEPTION):
            raise _err(errno.EINVAL, f"CREATE_EVENT: event_type {a.event_type}; allowed 0 (SIGNAL), "
                       "3 (HW_EXCEPTION), 8 (MEMORY)")
        if a.event_type == K.EventType.SIGNAL:
            used = {e.slot for e in self.events.values() if e.type == K.EventType.SIGNAL}
            free = [s for s in range(MAX_SIGNAL_SLOTS) if s not in used]
            if not free:
                raise _err(errno.ENOSPC, "CREATE_EVENT: all signal slots are used")
            ev = MockEvent(free[0], a.event_type, bool(a.auto_reset), free[0])
        else:
            ev = MockEvent(next(self._next_event), a.event_type, bool(a.auto_reset))
        self.events[ev.event_id] = ev
        a.event_id, a.event_slot_index = ev.event_id, ev.slot

    def _event(self, event_id: int, what: str) -> MockEvent:
        if event_id not in self.events:
            raise _err(errno.EINVAL, f"{what}: event {event_id} does not exist")
        return self.events[event_id]

    def _destroy_event(self, a: K.EventIdArgs) -> None:
        del self.events[self._event(a.event_id, "DESTROY_EVENT").event_id]

    def _set_event(self, a: K.EventIdArgs) -> None:
        self._event(a.event_id, "SET_EVENT").signaled = True

    def _reset_event(self, a: K.EventIdArgs) -> None:
        self._event(a.event_id, "RESET_EVENT").signaled = False

    def _wait_events(self, a: K.WaitEventsArgs) -> None:
        if not a.num_events or not a.events_ptr:
            raise _err(errno.EINVAL, f"WAIT_EVENTS: {a.num_events} events at {a.events_ptr:#x}")
        data = (K.EventData * a.num_events).from_address(a.events_ptr)
        events = [self._event(d.event_id, "WAIT_EVENTS") for d in data]
        for hook in list(self.wait_hooks):
            hook()
        fired = []
        for d, ev in zip(data, events):
            if ev.type == K.EventType.MEMORY and ev.pending:
                gpu_id, va, _ = ev.pending.pop(0)
                m = d.memory_exception_data
                m.gpu_id, m.va, m.failure.NotPresent, m.failure.ReadOnly = gpu_id, va, 1, 0
                ev.signaled = True
            elif ev.type == K.EventType.HW_EXCEPTION and ev.pending:
                h = d.hw_exception_data
                h.gpu_id, h.reset_type, h.reset_cause = ev.pending.pop(0)
                h.memory_lost = 0
                ev.signaled = True
            fired.append(ev.signaled)
        done = all(fired) if a.wait_for_all else any(fired)
        if done:
            for ev, f in zip(events, fired):
                if f and (ev.auto_reset or ev.type != K.EventType.SIGNAL):
                    ev.signaled = False
        a.wait_result = K.WAIT_COMPLETE if done else K.WAIT_TIMEOUT

    # ---- memory mappings ----

    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        with self._lock:
            return self._mmap(addr, size, prot, flags, fd, offset)

    def _mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        if fd == -1:
            if addr or flags & MAP_FIXED or not flags & MAP_ANONYMOUS:
                return host_mmap(addr, size, prot, flags, -1, 0)
            return self._window_mmap(size, prot, flags)
        kind = self.fds.get(fd)
        if kind == "kfd":
            for g in self.gpus:
                if offset == self._doorbell_base(g):
                    if size != DOORBELL_PAGES:
                        raise _err(errno.EINVAL, f"mmap of the doorbells: size {size:#x}, expected {DOORBELL_PAGES:#x}")
                    return g.doorbell_page
            raise _err(errno.EINVAL, f"mmap of /dev/kfd at offset {offset:#x}: not a doorbell offset")
        if kind is None or not kind.startswith("render:"):
            raise _err(errno.EBADF, f"mmap of fd {fd}, which is not open")
        r = next((r for r in self.handles.values() if r.mmap_offset == offset and r.kind != "userptr"), None)
        if r is None or f"render:{r.gpu}" != kind:
            raise _err(errno.EINVAL, f"mmap of the render node at offset {offset:#x}: no allocation of this GPU has it")
        if size != r.size or not flags & MAP_FIXED or addr != r.va:
            raise _err(errno.EINVAL, f"mmap of allocation {r.handle:#x}: map all {r.size:#x} bytes MAP_FIXED at its "
                       f"VA {r.va:#x} (got {size:#x} bytes at {addr:#x}, flags {flags:#x})")
        if r.kind == "vram":
            return addr  # no CPU access: the VA stays the caller's PROT_NONE reservation
        return host_mmap(addr, size, prot, MAP_SHARED | MAP_FIXED, r.memfd, 0)

    def _window_mmap(self, size: int, prot: int, flags: int) -> int:
        """An anonymous mapping at an address of the mock's window (so a GPU page table can map it); MAP_SHARED
        ones are backed by a memfd, which lets USERPTR show the same pages to a GPU."""
        if size <= 0:
            raise _err(errno.EINVAL, f"mmap of {size} bytes")
        va = self.window.take(size)
        if flags & MAP_SHARED:
            fd = os.memfd_create(f"tg-mock-host-{va:x}", os.MFD_CLOEXEC)
            os.ftruncate(fd, size)
            host_mmap(va, size, prot, MAP_SHARED | MAP_FIXED, fd, 0)
            self.host_memory[va] = (fd, size)
        else:
            host_mmap(va, size, prot, (flags & ~MAP_SHARED) | MAP_PRIVATE | MAP_FIXED, -1, 0)
        return va

    def _release_va(self, va: int) -> None:
        self.window.give(va)
        host = self.host_memory.pop(va, None)
        if host is not None:
            os.close(host[0])

    def munmap(self, addr: int, size: int) -> None:
        if any(addr == g.doorbell_page for g in self.gpus):
            return  # the doorbell pages belong to the mock
        with self._lock:
            if not self.window.contains(addr):
                host_munmap(addr, size)
                return
            if addr not in self.window.used:
                raise _err(errno.EINVAL, f"munmap({addr:#x}, {size:#x}): not the start of a mapping this OS layer made")
            # the range goes back to the reservation; a live allocation at it keeps the VA until it is freed
            host_mmap(addr, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED)
            r = self.space.find(addr)
            if r is not None and r.va == addr:
                r.host_unmapped = True
            else:
                self._release_va(addr)

    def write64(self, addr: int, value: int) -> None:
        ctypes.c_uint64.from_address(addr).value = value
        for g in self.gpus:
            if g.doorbell_page <= addr < g.doorbell_page + DOORBELL_PAGES:
                q = g.queues.get((addr - g.doorbell_page) // 8)
                if q is None:
                    raise _err(errno.EINVAL, f"doorbell write at slot {(addr - g.doorbell_page) // 8} of GPU "
                               f"{g.gpu_id:#x}: no queue has it")
                q.doorbell(value)
                return
