"""The engines behind the mock KFD's queues: each created queue gets the command processor of its kind
(tg_mockgpu/cp/), and doorbells and host waits run them.

- CREATE_QUEUE attaches: PM4 -> `PM4Queue` (the GPU's XCC count, its `EmulatorLauncher`), AQL -> `AQLQueue` (queue
  descriptor = the amd_queue_t at the start of the pointer page: write pointer - 56), SDMA -> `SDMAQueue`; each over
  its GPU's `GPUView` (which also reaches other GPUs' memory mapped on that GPU, so SDMA copies between GPUs; each
  SDMA queue counts its bytes by source and destination location, into the GPU's `sdma_traffic` too).
  DESTROY_QUEUE detaches.
- A doorbell store runs its queue in the writing thread until idle or stalled at an unsatisfied wait (the
  processor keeps its place); then every stalled queue of every GPU runs again, until a whole pass makes no
  progress (a copy on one GPU can release a wait on another). A WAIT_EVENTS runs the stalled queues the same way.
- Re-entrancy: everything runs under the driver's RLock, so two host threads ringing at once take turns. A doorbell
  written while a run is on this thread's stack only records its value: the outermost run picks it up (a
  processor is never entered twice).
- Faults: a `PacketError`, an emulator `GPUFault`/`EmulatorError`, a `PageFault` of an engine's own access, or any
  other error while a queue runs marks that queue faulted: its work up to the doorbell is dropped (read pointer =
  write pointer), later doorbells run nothing (their work is dropped too) and the fault stays. A page fault is
  reported through the GPU's memory-exception event (`MockKFD.report_fault`), anything else through its
  hardware-exception event; the full text waits in `MockKFD.fault_detail(gpu_id)`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from tg_mockgpu.cp.aql import AQLQueue
from tg_mockgpu.cp.memory import PacketError
from tg_mockgpu.cp.pm4 import PM4Queue
from tg_mockgpu.cp.sdma import SDMAQueue
from tg_mockgpu.emu.machine import GPUFault
from tg_mockgpu.kfd.queue import MockQueue
from tg_mockgpu.memory import PageFault

if TYPE_CHECKING:
    from tg_mockgpu.kfd.driver import MockKFD

AQL_PACKET, AMD_QUEUE_WPTR = 64, 56     # bytes per AQL packet; write_dispatch_id's offset in amd_queue_t
Processor = PM4Queue | AQLQueue | SDMAQueue


@dataclass(eq=False)
class Engine:
    """A queue and its processor: `target` is the last doorbell value, `state` what the last run ended in."""
    queue: MockQueue
    proc: Processor
    name: str
    target: int | None = None
    state: Literal["idle", "stalled", "faulted"] = "idle"
    fault: str | None = None


def _mark(proc: Processor) -> tuple:
    """Where a processor is: read pointer, open frames and stall; a run that changes none made no progress."""
    pm4 = proc.pm4 if isinstance(proc, AQLQueue) else proc
    frames = tuple((f.base, f.pos) for f in pm4.frames) if isinstance(pm4, PM4Queue) else ()
    return proc.read_pointer, frames, proc.stalled


class Engines:
    """The processors of one MockKFD's queues and the rule that runs them."""

    def __init__(self, kfd: MockKFD):
        self.kfd = kfd
        self.by_id: dict[int, Engine] = {}
        self._running = False          # a run is on the lock holder's stack
        self._rung: set[int] = set()   # queues with a doorbell not yet run

    def attach(self, q: MockQueue) -> None:
        g = self.kfd.gpus[q.gpu]
        name = f"GPU {g.gpu_id:#x} {q.kind} queue {q.queue_id}"

        def interrupt(ctxid: int) -> None:
            self.kfd.signal_interrupt(q.gpu, ctxid)
        proc: Processor
        if q.kind == "pm4":
            proc = PM4Queue(name, q.mem, q.ring, q.ring_size // 4, q.rptr, g.launcher, g.xccs, interrupt)
        elif q.kind == "aql":
            proc = AQLQueue(name, q.mem, q.ring, q.ring_size // AQL_PACKET, q.rptr, q.wptr - AMD_QUEUE_WPTR,
                            g.launcher, g.xccs, interrupt)
        else:
            proc = SDMAQueue(name, q.mem, q.ring, q.ring_size, q.rptr, interrupt, locate=q.mem.location,
                             gpu_traffic=g.sdma_traffic)
        self.by_id[q.queue_id] = Engine(q, proc, name)
        q.on_doorbell = self.doorbell

    def detach(self, q: MockQueue) -> None:
        self.by_id.pop(q.queue_id, None)
        self._rung.discard(q.queue_id)
        q.on_doorbell = None

    def doorbell(self, q: MockQueue, value: int) -> None:
        with self.kfd._lock:
            e = self.by_id.get(q.queue_id)
            if e is None:
                return
            e.target = value
            if e.state == "faulted":
                self._drop(e)
                return
            self._rung.add(q.queue_id)
            self.run()

    def run(self) -> None:
        """Run rung and stalled queues until nothing progresses (the doorbell path and the wait hook)."""
        with self.kfd._lock:
            if self._running:
                return
            self._running = True
            try:
                progressed = True
                while progressed or self._rung:
                    progressed = False
                    for e in list(self.by_id.values()):
                        rung = e.queue.queue_id in self._rung
                        self._rung.discard(e.queue.queue_id)
                        if e.target is not None and (rung or e.state == "stalled") and e.state != "faulted":
                            progressed |= self._step(e)
            finally:
                self._running = False

    def _step(self, e: Engine) -> bool:
        assert e.target is not None
        before = _mark(e.proc)
        try:
            idle = e.proc.run(e.target)
        except Exception as ex:  # noqa: BLE001 -- every failure of a queue is that queue's fault, reported as hardware does
            self._fault(e, ex)
            return True
        e.state = "idle" if idle else "stalled"
        return _mark(e.proc) != before

    def _where(self, e: Engine) -> str:
        """Where the processor was when it failed (for faults that do not name it themselves)."""
        pm4 = e.proc.pm4 if isinstance(e.proc, AQLQueue) else e.proc
        if isinstance(pm4, PM4Queue) and pm4.frames:
            f = pm4.frames[-1]
            inner = f"dword {f.pos} of {f.where}"
            return inner if isinstance(e.proc, PM4Queue) else f"AQL packet {e.proc.read_pointer}, {inner}"
        return f"packet at read pointer {e.proc.read_pointer}"

    def _fault(self, e: Engine, ex: Exception) -> None:
        page: tuple[int, bool] | None = None
        if isinstance(ex, PacketError):
            text = str(ex)
        else:
            text = f"{e.name}: {type(ex).__name__} at {self._where(e)}: {ex}"
            if isinstance(ex, GPUFault) and ex.address is not None:
                page = (ex.address, bool(ex.write))
            elif isinstance(ex, PageFault):
                page = (ex.address, ex.write)
        e.state, e.fault = "faulted", text
        self._drop(e)
        self.kfd.queue_fault(e.queue.gpu, text, page)

    def _drop(self, e: Engine) -> None:
        """The queue's work up to its doorbell is dropped: no open frames or stall, read pointer = write pointer."""
        pm4 = e.proc.pm4 if isinstance(e.proc, AQLQueue) else e.proc
        if isinstance(pm4, PM4Queue):
            pm4.frames, pm4.stalled = [], None
        if isinstance(e.proc, SDMAQueue):
            e.proc.stalled = None
        end = (e.target or 0) + (1 if isinstance(e.proc, AQLQueue) else 0)   # AQL's doorbell is the last index
        try:
            end = max(end, e.queue.read_wptr())
        except PageFault:
            pass
        e.queue.write_rptr(end)
