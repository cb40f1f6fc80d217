"""The AMD device: a command-queue device (core's HCQCompiled) on a GPU of the KFD (tg_amd/kfd/).

`AMD:i` is GPU i of the process's KFD system (kfd/system.py: /dev/kfd, or tg-mockgpu's mock driver behind the same
OS layer when there is none). It has one compute queue (PM4, or AQL with `queue: aql`) and one SDMA queue, created
through CREATE_QUEUE; the hcq pipeline writes their rings (queues/rules.py, queues/kernels.py) and rings their
doorbells. Buffers are VRAM (host-visible ones GTT), copies between host and VRAM go through SDMA (memory.py).

Core's pipeline stages build what the encoder needs, once per kernel AST: `prepare` splits nested reductions into
kernels of their own (split.py) and turns parallel ranges into GPU ids (`prepare_kernel`), the core stages render
and compile, `load` reads the code object and uploads it into VRAM (a `KernelPart`), and `make_runner` gives the
`KernelPlan` the encoder reads (`kernel_plan(ast)`).
"""
from __future__ import annotations

import ctypes
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg_core.plugin_api import (
    Buffer,
    BufferSpec,
    DeviceUnavailable,
    DType,
    HCQCompiled,
    LaunchDims,
    Ops,
    PatternMatcher,
    Prepared,
    PreparedKernel,
    Program,
    UOp,
    UPat,
    add_gpudims,
    dtypes,
)
from tg_core.plugin_api import hcq_ops as q
from tg_amd.compiler import AMDCompiler
from tg_amd.elf import load_code_object
from tg_amd.interface import CodeObject, KernelSymbol
from tg_amd.kfd import system as kfd_system
from tg_amd.kfd.events import GPUHardwareException, GPUMemoryFault
from tg_amd.kfd.queues import KFDQueue, QueueKind
from tg_amd.memory import AMDAllocator, KFDBuffer, borrowed
from tg_amd.queues import pm4, rules, sdma
from tg_amd.renderer import MAX_LOCAL, AMDRenderer, kernarg_layout
from tg_amd.split import split_nested

QUEUE_KINDS = ("pm4", "aql")
SCRATCH_WAVES = 32            # waves the scratch of one XCC holds (COMPUTE_TMPRING_SIZE.WAVES)
# amd_queue_t (the AQL queue's pointer page starts with it, amd.md 3.3): the scratch fields the packet processor reads
AQL_TMPRING, AQL_SCRATCH_SRD, AQL_SCRATCH_VA, AQL_SCRATCH_BYTES, AQL_SCRATCH_LANE = 140, 144, 160, 168, 176


def prepare_kernel(ast: UOp) -> PreparedKernel:
    """One kernel AST for the GPU: its parallel ranges as workgroup/workitem ids, with the launch dims."""
    gpu_ast, launch = add_gpudims(ast, MAX_LOCAL)
    return PreparedKernel(gpu_ast, launch)


@dataclass(frozen=True)
class KernelPart:
    """One compiled kernel as the encoder dispatches it: `key` names its program buffer (the code object's image,
    `image_size` bytes in VRAM), `layout` the kernarg offsets and sizes of its arguments (`nbufs` buffers, then the
    `variables` by name), `launch` its grid (expressions over the variables) and workgroup size."""
    key: bytes
    code: CodeObject
    kernel: KernelSymbol
    image_size: int
    layout: list[tuple[int, int]]
    nbufs: int
    variables: tuple[str, ...]
    launch: LaunchDims

    @property
    def sizes(self) -> list[int]:
        return [size for _, size in self.layout]


@dataclass(frozen=True)
class KernelPlan:
    """What one kernel AST runs as: its parts in order, sharing the temporaries (elements, dtype)."""
    parts: tuple[KernelPart, ...]
    temps: tuple[tuple[int, DType], ...]


def scratch_per_xcc(private_bytes: int) -> int:
    """The scratch one XCC needs for kernels of `private_bytes` per lane (what TMPRING_SIZE says it holds)."""
    return SCRATCH_WAVES * ((pm4.tmpring_size(private_bytes, SCRATCH_WAVES) >> 12) & 0x7FFF) * 256


class AMDDevice(HCQCompiled):
    """An AMD GPU on the KFD (see the module docstring)."""
    timestamp_hz = 100e6   # the GPU clock RELEASE_MEM and SDMA TIMESTAMP store: 100 MHz on gfx11

    def __init__(self, device: str, options: Mapping[str, Any]):
        interface, kind = options.get("interface", "auto"), options.get("queue", "pm4")
        if interface not in ("auto", "kfd"):
            raise DeviceUnavailable(f"{device}: devices.AMD.interface {interface!r}: allowed auto, kfd (the mock GPU "
                                    "is behind the KFD interface: tg-mockgpu's mock /dev/kfd)")
        if kind not in QUEUE_KINDS:
            raise DeviceUnavailable(f"{device}: devices.AMD.queue {kind!r}: allowed {', '.join(QUEUE_KINDS)}")
        last = device.split(":")[-1]
        index = int(last) if last.isdigit() else 0  # NAME[:RENDERER][:INDEX]
        self.system = kfd_system.acquire(device, dict(options))
        try:
            self.gpu = self.system.gpu(index, device)
        except BaseException:
            kfd_system.release(self.system)
            raise
        self.queue_kind, self.xccs = kind, self.gpu.node.xccs
        self.max_copy = sdma.MAX_COPY_BYTES
        self.fault: str | None = None
        self._programs: dict[bytes, Buffer] = {}
        self._programs_lock = threading.Lock()
        self._scratch: Buffer | None = None
        self._scratch_private = 0
        self.hw_queues: dict[str, KFDQueue] = {}
        super().__init__(device, AMDAllocator(self), AMDCompiler(self.gpu.arch))
        self._shadows: dict[str, tuple[Buffer, Buffer]] = {}
        self._instrumenters: list[Any] | None = None
        self._create_queues()

    # ---- queues ----

    def _create_queues(self) -> None:
        sizes = {"pm4": 4 * rules.PM4_RING_DWORDS, "aql": 64 * rules.AQL_RING_PACKETS, "sdma": rules.SDMA_RING_BYTES}
        compute: QueueKind = "aql" if self.queue_kind == "aql" else "pm4"
        for slug, kind in (("compute_0", compute), ("copy_0", "sdma")):
            kq = self.gpu.create_queue(kind, sizes[kind])
            self.hw_queues[slug] = kq
            # the host's put value and the doorbell value the host program writes (ring() sends it to the doorbell)
            shadows = (self.host_buffer(8, nolru=True), self.host_buffer(8, nolru=True))
            for b in shadows:
                self.host_view(b)[:] = 0
            self._shadows[slug] = shadows
        if self.queue_kind == "aql":
            self._write_amd_queue(self.hw_queues["compute_0"])

    def _queue_buffer(self, tag: str, nbytes: int) -> Buffer | None:
        """The device memory of a ring placeholder: `ring_<q>`, `write_ptr_<q>`, `read_ptr_<q>` (the KFD queue's),
        `doorbell_<q>`, `put_value_<q>` (host shadows)."""
        for part in ("ring", "write_ptr", "read_ptr", "doorbell", "put_value"):
            if not tag.startswith(part + "_"):
                continue
            slug = tag[len(part) + 1:]
            kq = self.hw_queues.get(slug)
            if kq is None:
                return None
            if part == "doorbell":
                return self._shadows[slug][1]
            if part == "put_value":
                return self._shadows[slug][0]
            va, size = {"ring": (kq.ring.va, kq.ring.size), "write_ptr": (kq.wptr, 8), "read_ptr": (kq.rptr, 8)}[part]
            if nbytes > size:
                raise ValueError(f"{self.device}: placeholder {tag} of {nbytes} bytes; the queue's is {size}")
            return borrowed(self.device, self.allocator, va, size)
        return None

    def ring(self, queue: q.Queue) -> None:
        kq = self.hw_queues[queue.slug]
        kq.ring_doorbell(int(self.host_view(self._shadows[queue.slug][1]).view(np.uint64)[0]))

    def queue_stalls(self) -> list[str]:
        out = []
        for slug, kq in self.hw_queues.items():
            r, w = kq.read_rptr(), ctypes.c_uint64.from_address(kq.wptr).value
            if r < w:
                out.append(f"queue {slug.upper().replace('_', ':')} ({kq.kind}) read to {r} of {w}")
        return out

    def abort_queues(self) -> None:
        """A hardware queue's work cannot be dropped from the host: after a timeout the device is faulted."""
        self.fault = self.fault or "a wait timed out (TG_HCQ_TIMEOUT_MS); its queues may still hold work"

    def _check_usable(self) -> None:
        if self.fault is not None:
            raise RuntimeError(f"{self.device} faulted earlier and is unusable: {self.fault}")

    def check_fault(self) -> None:
        self._check_usable()
        try:
            self.gpu.events.wait(0)
        except (GPUMemoryFault, GPUHardwareException) as e:
            detail = self.system.fault_detail(getattr(e, "gpu_id", self.gpu.gpu_id))
            self.fault = f"{e}" + (f": {detail}" if detail else "")
            raise RuntimeError(f"{self.device}: {self.fault}") from e

    # ---- memory ----

    def address(self, buf: Buffer) -> int:
        opaque: Any = buf._opaque
        return (opaque if opaque is not None else buf.opaque).va

    def host_view(self, buf: Buffer) -> np.ndarray:
        return buf.opaque.host_array()

    def sdma_copy(self, dst: KFDBuffer | Buffer, src: KFDBuffer | Buffer) -> None:
        """Copy between two of this device's memories (raw KFD buffers or Buffers) on its SDMA queue (no wait)."""
        wrap = lambda b: b if isinstance(b, Buffer) else borrowed(self.device, self.allocator, b.va, b.size)  # noqa: E731
        self.check_fault()
        self.copy_buffers(wrap(dst), wrap(src))

    def program_buffer(self, key: bytes, code: CodeObject) -> Buffer:
        """The VRAM holding a code object's image (relocated for its address), uploaded once per code object."""
        with self._programs_lock:
            buf = self._programs.get(key)
            if buf is None:
                buf = Buffer(self.device, max(len(code.image), 1), dtypes.uint8, BufferSpec(nolru=True))
                buf.ensure_allocated()
                image = code.image_at(self.address(buf))
                buf.copyin(image + bytes(buf.nbytes - len(image)))
                self._programs[key] = buf
            return buf

    def ensure_scratch(self, private_bytes: int) -> None:
        """Grow the scratch to hold kernels of `private_bytes` per lane on every XCC (AQL: and tell the queue)."""
        if private_bytes <= self._scratch_private and self._scratch is not None:
            return
        self._scratch_private = max(private_bytes, self._scratch_private)
        per_xcc = scratch_per_xcc(self._scratch_private)
        self._scratch = Buffer(self.device, per_xcc * self.xccs, dtypes.uint8, BufferSpec(nolru=True))
        self._scratch.ensure_allocated()  # batches linked before keep the old one (they reference it)
        if self.queue_kind == "aql":
            self.synchronize()  # the queue must not read the descriptor while it changes
            self._write_amd_queue(self.hw_queues["compute_0"])

    def _write_amd_queue(self, kq: KFDQueue) -> None:
        """The scratch fields of the AQL queue's amd_queue_t (the start of its pointer page)."""
        page = kq.pointers.va
        scratch = self._scratch
        va = self.address(scratch) if scratch is not None else 0
        nbytes = scratch.nbytes if scratch is not None else 0
        u32 = lambda off, v: setattr(ctypes.c_uint32.from_address(page + off), "value", v)  # noqa: E731
        u64 = lambda off, v: setattr(ctypes.c_uint64.from_address(page + off), "value", v)  # noqa: E731
        u32(AQL_TMPRING, pm4.tmpring_size(self._scratch_private, SCRATCH_WAVES) if scratch is not None else 0)
        for i, v in enumerate((va & 0xFFFFFFFF, va >> 32, nbytes, 0)):
            u32(AQL_SCRATCH_SRD + 4 * i, v)
        u64(AQL_SCRATCH_VA, va)
        u64(AQL_SCRATCH_BYTES, nbytes)
        u32(AQL_SCRATCH_LANE, -(-max(self._scratch_private, 128) // 4) * 4 if scratch is not None else 0)

    def scratch_bases(self, kernel: KernelSymbol) -> list[Any]:
        """Per XCC, the scratch base a PM4 dispatch of `kernel` programs (0 without a private segment)."""
        private = kernel.descriptor.private_segment_fixed_size
        if not private:
            return [0] * self.xccs
        per_xcc = scratch_per_xcc(private)
        ref = q.placeholder("scratch", per_xcc * self.xccs, self.device)
        return [q.addr(ref, i * per_xcc) for i in range(self.xccs)]

    def bufferize(self, p: UOp) -> UOp | None:
        """Device-owned placeholders: timeline, program, scratch, temp, and the queues' rings and pointers."""
        tag, nbytes = p.tag, p.arg[2]
        if tag == "timeline":
            return q.mem(self.timeline)
        if tag == "program":
            return q.mem(self._programs[p.arg[3]])
        if tag == "scratch":
            if self._scratch is None or self._scratch.nbytes < nbytes:
                raise RuntimeError(f"{self.device}: a batch needs {nbytes} bytes of scratch, the device holds "
                                   f"{0 if self._scratch is None else self._scratch.nbytes} (kernel_plan sizes it)")
            return q.mem(self._scratch)
        if tag == "temp":
            return q.mem(Buffer(self.device, nbytes, dtypes.uint8).ensure_allocated())
        buf = self._queue_buffer(tag, nbytes)
        return None if buf is None else q.mem(buf)

    # ---- the pipeline's AMD stages ----

    def kernel_plan(self, ast: UOp) -> KernelPlan:
        plan = self.plan_of(ast)
        assert isinstance(plan, KernelPlan)
        return plan

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

    def load(self, program: Program, lib: bytes) -> KernelPart:
        """The compiled program as the encoder dispatches it, its code object uploaded and its scratch sized."""
        if program.launch is None:
            raise ValueError(f"kernel {program.name} has no launch dims: AMD kernels come from prepare_kernel")
        renderer = self.render_with
        assert isinstance(renderer, AMDRenderer)  # lower checked it
        code = load_code_object(lib)
        kernel = code.kernel(renderer.function_name(program))
        layout, _ = kernarg_layout(program)
        names = tuple(v.name for v in program.layout.variables)
        self.program_buffer(lib, code)
        if kernel.descriptor.private_segment_fixed_size:
            self.ensure_scratch(kernel.descriptor.private_segment_fixed_size)
        return KernelPart(lib, code, kernel, len(code.image), layout, len(layout) - len(names), names, program.launch)

    def make_runner(self, prepared: Prepared, programs: Sequence[Program], loaded: Sequence[Any]) -> Any:
        return KernelPlan(tuple(loaded), prepared.temps)

    # ---- instrumentation (queues/instrument.py: what profiler plugins add through amd_dispatch_instrumenters) ----

    def instrumenters(self) -> list[Any]:
        """The instrumenters plugins offer for this device, asked once."""
        if self._instrumenters is None:
            from tg_amd.queues.instrument import instrumenters
            self._instrumenters = instrumenters(self.device)
        return self._instrumenters

    def submit_instrumentation(self, queue: q.Queue, batch: int) -> list[Any]:
        """Each instrumenter's instrumentation of one compute submit (the ones that instrument it)."""
        insts = self.instrumenters()
        if not insts:
            return []
        return [got for i in insts if (got := i.submit(self, queue, batch)) is not None]

    def synchronize(self) -> None:
        self._check_usable()
        super().synchronize()
        for inst in self._instrumenters or ():
            inst.synchronized(self)

    def close(self) -> None:
        try:
            super().close()
        finally:
            kfd_system.release(self.system)

    def __repr__(self) -> str:
        where = "mock KFD (tg-mockgpu)" if self.system.is_mock else "/dev/kfd"
        return (f"<AMDDevice {self.device} {self.gpu.arch} via kfd on {where}, GPU {self.gpu.gpu_id:#x}, "
                f"{self.queue_kind} + sdma queues, {self.xccs} XCC{'s' if self.xccs > 1 else ''}>")


def _bufferize(p: UOp) -> UOp | None:
    from tg_core.plugin_api import Device
    if not isinstance(p.tag, str) or not isinstance(p.arg, tuple) or p.arg[0] != "hcq" or \
            p.arg[1].split(":")[0] != "AMD":
        return None
    dev = Device[p.arg[1]]
    return dev.bufferize(p) if isinstance(dev, AMDDevice) else None


pm_bufferize = PatternMatcher([(UPat(Ops.PARAM, name="p"), _bufferize)])
