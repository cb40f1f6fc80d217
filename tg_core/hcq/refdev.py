"""HCQREF, the reference HCQ device: command queues in software, so core's hcq runs everywhere without a plugin.

Its memory is host memory at stable addresses (aligned numpy arrays). Its "GPU" is one host thread per queue
(`COMPUTE:0`, `COPY:0`) that reads real command words (refisa.py) from a real ring: woken by the doorbell, it
consumes INDIRECT packets from its read pointer up to the doorbell value, and runs each command buffer's
commands in order; EXEC runs the kernel with core's reference interpreter (the PYTHON device's), COPY moves
bytes, WAIT stalls until a u64 in memory reaches a value, SIGNAL/STORE/TIMESTAMP write memory.

A queue whose command fails (a kernel that raises) records the error, drops its queued work and the host's next
wait raises it. A WAIT that is never satisfied is reported by the host's timeout (TG_HCQ_TIMEOUT_MS), which then
drops every queue's work: the device stays usable.

`HCQREF` is not in core's built-in plugin (so `tg devices` and the default device stay as they are): it is
registered by `tg_core.hcq.testing.hcqref_registry()` for tests and benchmarks. Its option `execute` (config
`devices.HCQREF.execute`, `hcqref_registry(execute=False)`) false makes the queues consume commands without running
kernels or copies (waits and signals still happen), so that a benchmark measures host time only.
"""
from __future__ import annotations

import ctypes
import pickle
import threading
import time
import weakref
from collections.abc import Mapping
from typing import Any

import numpy as np

from tg_core.codegen.program import param_index
from tg_core.device import Buffer, BufferSpec, LRUAllocator, host_memory
from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.hcq import ops as q
from tg_core.hcq import refisa as isa
from tg_core.hcq.device import HCQCompiled
from tg_core.hcq.link import run_once
from tg_core.hcq.structs import Pointer, Struct
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

ALIGN = 64


def at(address: int, nbytes: int) -> np.ndarray:
    """The host bytes at a device address (HCQREF addresses are host addresses)."""
    return np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))


class RefAllocator(LRUAllocator):
    """Aligned host memory; copies in and out wait for the device first (its queues may be using the memory)."""
    capacity = host_memory()

    def __init__(self, dev: HCQRefDevice):
        super().__init__()
        self.dev = weakref.ref(dev)

    def _alloc(self, size: int, options: BufferSpec) -> np.ndarray:
        raw = np.zeros(size + ALIGN, np.uint8)
        off = (-raw.ctypes.data) % ALIGN
        return raw[off:off + size]

    def _free(self, opaque: np.ndarray, size: int, options: BufferSpec) -> None:
        pass

    def _offset(self, opaque: np.ndarray, offset: int, size: int) -> np.ndarray:
        return opaque[offset:offset + size]

    def _sync(self) -> None:
        dev = self.dev()
        if dev is not None:
            dev.synchronize()

    def copyin(self, dest: np.ndarray, src: memoryview) -> None:
        self._sync()
        dest[:] = np.frombuffer(src, np.uint8)

    def copyout(self, dest: memoryview, src: np.ndarray) -> None:
        self._sync()
        np.frombuffer(dest, np.uint8)[:] = src


# The queue descriptor the "GPU" is given when a queue is created (as KFD's CREATE_QUEUE is given the ring and
# pointer addresses): it finds everything of its queue from this one address, through a nested struct.
QUEUE_INFO = Struct.c("hcqref_queue_info", [("kind", dtypes.uint32), ("index", dtypes.uint32),
                                            ("ring_dwords", dtypes.uint32)])
QUEUE_DESC = Struct.c("hcqref_queue", [("ring", Pointer()), ("write_ptr", Pointer()), ("doorbell", Pointer()),
                                       ("read_ptr", Pointer()), ("info", Pointer(QUEUE_INFO))])


class QueueEngine:
    """One hardware queue: its ring and pointers (host memory), its descriptor, and the thread that executes it."""

    def __init__(self, dev: HCQRefDevice, queue: q.Queue):
        self.dev, self.queue = dev, queue
        mk = lambda n: dev.host_buffer(n, nolru=True)  # noqa: E731
        self.ring, self.write_ptr, self.doorbell, self.put_value, self.read_ptr = \
            mk(4 * isa.RING_DWORDS), mk(8), mk(8), mk(8), mk(8)
        self.desc, info = mk(QUEUE_DESC.size), mk(QUEUE_INFO.size)
        for b in (self.ring, self.write_ptr, self.doorbell, self.put_value, self.read_ptr, self.desc, info):
            b.opaque[:] = 0
        self._info = info
        kind_id = q.QUEUE_KINDS.index(queue.kind)
        ptrs = {name: q.addr(q.mem(getattr(self, name))) for name in ("ring", "write_ptr", "doorbell", "read_ptr")}
        desc = QUEUE_DESC.build(q.mem(self.desc), {**ptrs, "info": QUEUE_INFO.build(q.mem(info), {
            "kind": kind_id, "index": int(queue.name.split(":")[1]), "ring_dwords": isa.RING_DWORDS})})
        run_once(desc.stmts(), dev.address, lambda ref: ref.arg.buf.opaque)
        self._attach(dev.address(self.desc))
        self.wake = threading.Event()
        self.stop = False
        self.abort_to: int | None = None  # set by the host: drop the ring up to this doorbell value
        self.stall: tuple[int, int] | None = None
        self.fault: BaseException | None = None
        self.running: str | None = None  # the kernel being run (a timeout names a queue busy with one)
        self.thread = threading.Thread(target=self._main, name=f"tg {queue}", daemon=True)
        self.thread.start()

    def _attach(self, desc_address: int) -> None:
        """What the GPU does at queue creation: read the descriptor (and the info it points to)."""
        d = at(desc_address, QUEUE_DESC.size)
        ptr = lambda name: int(d[QUEUE_DESC.offset(name):QUEUE_DESC.offset(name) + 8].view(np.uint64)[0])  # noqa: E731
        info = at(ptr("info"), QUEUE_INFO.size)
        ring_dwords = int(info[QUEUE_INFO.offset("ring_dwords"):][:4].view(np.uint32)[0])
        self.ring_words = at(ptr("ring"), 4 * ring_dwords).view(np.uint32)
        self.ring_dwords = ring_dwords
        self.bell = at(ptr("doorbell"), 8).view(np.uint64)
        self.rptr = at(ptr("read_ptr"), 8).view(np.uint64)

    # ---- the "GPU" side ----

    def _main(self) -> None:
        while not self.stop:
            self.wake.wait(0.05)
            self.wake.clear()
            while not self.stop:
                self._take_abort()
                if int(self.rptr[0]) >= int(self.bell[0]):
                    break
                r = int(self.rptr[0]) % self.ring_dwords
                try:
                    self._packet(self.ring_words[r:r + 4])
                except _Aborted:
                    continue  # _take_abort moves the read pointer past the dropped work
                except BaseException as e:  # the host's next wait raises it
                    self.fault, self.running = e, None
                    self.rptr[0] = self.bell[0]
                    continue
                self.rptr[0] = int(self.rptr[0]) + 4
            self._take_abort()

    def _take_abort(self) -> None:
        """Drop the work the host aborted: everything submitted up to the doorbell value it saw (later work stays)."""
        to = self.abort_to
        if to is not None:
            if int(self.rptr[0]) < to:
                self.rptr[0] = to
            self.abort_to = None

    def _packet(self, w: np.ndarray) -> None:
        op, n = int(w[0]) >> 24, int(w[0]) & 0xFFFFFF
        if op != isa.INDIRECT or n != 3:
            raise RuntimeError(f"{self.queue}: ring packet at dword {int(self.rptr[0])} has header {int(w[0]):#x} "
                               f"(opcode {op}); a ring holds INDIRECT packets (opcode {isa.INDIRECT}, 3 dwords)")
        address = int(w[1]) | (int(w[2]) << 32)
        self._run(at(address, 4 * int(w[3])).view(np.uint32))

    def _run(self, words: np.ndarray) -> None:
        i, end = 0, len(words)
        while i < end:
            op, n = int(words[i]) >> 24, int(words[i]) & 0xFFFFFF
            body = words[i + 1:i + 1 + n]
            if op not in isa.NAMES or i + 1 + n > end:
                raise RuntimeError(f"{self.queue}: bad command at dword {i} of a command buffer: header "
                                   f"{int(words[i]):#x} (opcode {op})")
            self._command(op, body)
            i += 1 + n

    def _command(self, op: int, b: np.ndarray) -> None:
        u64 = lambda k: int(b[k]) | (int(b[k + 1]) << 32)  # noqa: E731
        if op == isa.EXEC:
            self._exec(b)
        elif op == isa.COPY:
            if self.dev.execute:
                n = u64(4)
                at(u64(0), n)[:] = at(u64(2), n)
        elif op == isa.WAIT:
            self._wait(u64(0), u64(2))
        elif op in (isa.SIGNAL, isa.STORE):
            at(u64(0), 8).view(np.uint64)[0] = u64(2)
        elif op == isa.TIMESTAMP:
            at(u64(0), 8).view(np.uint64)[0] = time.perf_counter_ns()

    def _wait(self, address: int, value: int) -> None:
        cell = at(address, 8).view(np.uint64)
        spins = 0
        while int(cell[0]) < value:
            self.stall = (address, value)
            if self.abort_to is not None or self.stop:
                self.stall = None
                raise _Aborted
            spins += 1
            time.sleep(0 if spins < 64 else 0.0002)
        self.stall = None

    def _exec(self, b: np.ndarray) -> None:
        paddr = int(b[0]) | (int(b[1]) << 32)
        ast = self.dev.loaded_program(paddr, int(b[2]))
        self.running = f"kernel {ast.arg.name if ast.arg is not None else '?'}"
        nbufs, k = int(b[3]), 4
        spans = []
        for _ in range(nbufs):
            spans.append((int(b[k]) | (int(b[k + 1]) << 32), int(b[k + 2])))
            k += 3
        nvars = int(b[k])
        values = [int(b[k + 1 + 2 * j]) | (int(b[k + 2 + 2 * j]) << 32) for j in range(nvars)]
        if not self.dev.execute:
            return
        params = sorted((u for u in ast.toposort() if u.op is Ops.PARAM), key=param_index)
        arrays: list[np.ndarray] = [np.zeros(0)] * nbufs
        for p in params:
            i = param_index(p)
            a, n = spans[i]
            arrays[i] = at(a, n).view(to_numpy_dtype(p.dtype.base)) if n else np.zeros(0, to_numpy_dtype(p.dtype.base))
        names = sorted({u.arg[0] for u in ast.toposort() if u.op is Ops.DEFINE_VAR})
        var_vals = {nm: (v - (1 << 64) if v >> 63 else v) for nm, v in zip(names, values)}
        from tg_core.devices.python.interpreter import run_kernel
        run_kernel(ast, arrays, var_vals)
        self.running = None

    def close(self) -> None:
        self.stop = True
        self.wake.set()
        self.thread.join(timeout=2)


class _Aborted(Exception):
    pass


class HCQRefDevice(HCQCompiled):
    """The reference HCQ device (see the module docstring)."""

    def __init__(self, device: str, options: Mapping[str, Any] | None = None):
        self.execute = bool((options or {}).get("execute", True))
        self._programs: dict[UOp, Buffer] = {}
        self._loaded: dict[int, tuple[bytes, UOp]] = {}
        self.labels: dict[int, str] = {}
        self._addresses: weakref.WeakKeyDictionary[Buffer, tuple[Any, int]] = weakref.WeakKeyDictionary()
        super().__init__(device, RefAllocator(self))
        self.engines = {qu.slug: QueueEngine(self, qu) for qu in (q.Queue(device, "COMPUTE:0"), q.Queue(device, "COPY:0"))}

    def plan_of(self, ast: UOp) -> Any:
        """The reference interpreter's plan of the kernel (its queues interpret the AST itself)."""
        from tg_core.devices.python.interpreter import plan_kernel
        return plan_kernel(ast)

    def address(self, buf: Buffer) -> int:
        # cached per buffer and allocation (numpy's .ctypes.data costs a microsecond; a replay asks per input)
        got = self._addresses.get(buf)
        opaque = buf._opaque
        if got is None or got[0] is not opaque or opaque is None:
            opaque = buf.ensure_allocated()._opaque
            assert opaque is not None  # allocated just above
            got = self._addresses[buf] = (opaque, int(opaque.ctypes.data))
        return got[1]

    def host_view(self, buf: Buffer) -> np.ndarray:
        return buf.ensure_allocated().opaque

    def ring(self, queue: q.Queue) -> None:
        self.engines[queue.slug].wake.set()

    def program_buffer(self, ast: UOp) -> Buffer:
        """The device memory holding a kernel's image, uploaded once per kernel."""
        buf = self._programs.get(ast)
        if buf is None:
            img = isa.program_image(ast)
            buf = Buffer(self.device, len(img), dtypes.uint8, BufferSpec(nolru=True)).ensure_allocated()
            buf.opaque[:] = np.frombuffer(img, np.uint8)
            self._programs[ast] = buf
            self.labels[self.address(buf)] = f"program {ast.arg.name if ast.arg is not None else ''}"
        return buf

    def loaded_program(self, address: int, nbytes: int) -> UOp:
        """The kernel whose image is at `address` (the "GPU" loads it: unpickled once per image)."""
        img = bytes(at(address, nbytes))
        got = self._loaded.get(address)
        if got is None or got[0] != img:
            got = self._loaded[address] = (img, pickle.loads(img))
        return got[1]

    def queue_stalls(self) -> list[str]:
        out = []
        for e in self.engines.values():
            if e.stall is not None:
                a, v = e.stall
                out.append(f"queue {e.queue} waits for signal at {a:#x} ({self.describe_address(a)}) >= {v} "
                           f"(it is {int(at(a, 8).view(np.uint64)[0])})")
            elif e.running is not None:
                out.append(f"queue {e.queue} is still running {e.running}")
        return out

    def describe_address(self, a: int) -> str:
        tl = self.address(self.timeline)
        if tl <= a < tl + 16:
            return f"the timeline of {self.device}"
        return "a signal no queue of this batch writes" if a not in self.labels else self.labels[a]

    def abort_queues(self) -> None:
        """Drop every queue's submitted work, and wait until each queue took the abort (so that work submitted after
        this returns runs)."""
        for e in self.engines.values():
            e.abort_to = int(e.bell[0])
            e.wake.set()
        deadline = time.monotonic() + 2
        while any(e.abort_to is not None for e in self.engines.values()) and time.monotonic() < deadline:
            time.sleep(0.0005)

    def check_fault(self) -> None:
        for e in self.engines.values():
            if e.fault is not None:
                err, e.fault = e.fault, None
                self.abort_queues()  # the other queues may wait for what the faulted one would have signalled
                self.timeline_view[0] = self.timeline_view[1]  # the faulted batch is dropped: later ones may run
                raise RuntimeError(f"{e.queue}: a command failed: {type(err).__name__}: {err}") from err

    def close(self) -> None:
        super().close()
        for e in self.engines.values():
            e.close()
