"""`HCQCompiled`: the base of a device driven by command queues, and running exec items on such devices.

A device becomes an HCQ device by subclassing `HCQCompiled` (instead of `Compiled`) and implementing
`address(buf)` (the device address of a buffer), `host_view(buf)` (the bytes of a host-visible buffer as a uint8
numpy array), `ring(queue)` (the doorbell write that wakes a queue) and `queue_stalls()`/`abort_queues()` (what
its queues wait for; drop their work after a timeout); its plugin returns the `tg_pm_encode` and `tg_pm_lower`
matchers for it (and `tg_pm_bufferize` for its own buffers: ring, doorbell, program, ...). The engine then runs
consecutive kernels and copies on HCQ devices as one batch (engine/realize.py), and TinyJit replays linked
batches (hcq/jit.py). See plugins/README.md ("An HCQ device") and the reference device (refdev.py).

Each device has a timeline: 16 bytes of host memory, `[0]` the value the device's queues signalled last, `[1]`
the value of the last batch the host submitted; both zero when the memory is allocated, also when the allocator
hands back memory that was used before.
"""
from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_core.device import Buffer, BufferSpec, Compiled
from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.hcq.batch import Item, build
from tg_core.hcq.encode import HCQError, encode
from tg_core.hcq.host import HCQTimeout, wait_until
from tg_core.hcq.link import LinkedBatch, link
from tg_core.profile import state as profiling
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp


class HCQCompiled(Compiled):
    """A device whose work goes through command queues (see the module docstring)."""
    hcq = True
    has_copy_queue = True  # False: copies run on COMPUTE:0
    timestamp_hz = 1e9     # ticks per second of what a `timestamp` queue op stores (profiling; AMD: 100 MHz)

    def __init__(self, device: str, allocator: Any, compiler: Any = None, runtime: Any = None):
        super().__init__(device, allocator, compiler, runtime)
        self._inflight: deque[tuple[int, LinkedBatch]] = deque()
        self._inflight_lock = threading.Lock()
        self.submit_lock = threading.RLock()  # held while a host program pushes to this device's queues
        self.timeline = self.new_timeline()
        self.timeline_view = self.host_view(self.timeline).view(np.uint64)

    # ---- to implement --------------------------------------------------------------------------------------

    def address(self, buf: Buffer) -> int:
        raise NotImplementedError(f"{type(self).__name__} must implement address(buf)")

    def host_view(self, buf: Buffer) -> np.ndarray:
        raise NotImplementedError(f"{type(self).__name__} must implement host_view(buf)")

    def ring(self, queue: q.Queue) -> None:
        raise NotImplementedError(f"{type(self).__name__} must implement ring(queue)")

    def queue_stalls(self) -> list[str]:
        """What each stalled queue waits for, in words (for timeout errors)."""
        return []

    def abort_queues(self) -> None:
        """Drop the work queued on every queue (after a timeout)."""

    def check_fault(self) -> None:
        """Raise the error a queue met while running (a kernel that raised), if any."""

    # ---- the timeline ----------------------------------------------------------------------------------------

    def host_buffer(self, nbytes: int, nolru: bool = False) -> Buffer:
        """`nbytes` of host-visible memory of this device, allocated now (also while the device is being opened,
        before the registry knows it)."""
        buf = Buffer(self.device, nbytes, dtypes.uint8, BufferSpec(host=True, nolru=nolru))
        buf._allocator = self.allocator
        return buf.ensure_allocated()

    def new_timeline(self) -> Buffer:
        """16 zeroed bytes of host memory (allocator caches hand back freed memory with its old contents)."""
        buf = self.host_buffer(16)
        self.host_view(buf)[:] = 0
        return buf

    def synchronize(self) -> None:
        """Wait until the queues signalled the value of the last batch submitted."""
        tl = self.timeline_view
        wait_until(lambda: int(tl[0]), int(tl[1]), f"{self.device} timeline", self.on_host_timeout, self.check_fault)
        self.check_fault()
        if profiling.on:  # the device timestamps of the profiled runs it finished (tg_core/profile/hcq.py)
            from tg_core.profile.hcq import collect
            collect(wait=False)
        self._retire()

    def on_host_timeout(self) -> str:
        """After a host wait timed out: what the queues wait for; then drop their work and mark the timeline
        done, so that the device is usable for the next batch."""
        stalls = self.queue_stalls()
        self.abort_queues()
        self.timeline_view[0] = self.timeline_view[1]
        with self._inflight_lock:
            self._inflight.clear()
        return "; " + "; ".join(stalls) + f"; {self.device}'s queued work was dropped" if stalls else \
            f"; no queue of {self.device} is stalled on a wait; its queued work was dropped"

    # ---- running -------------------------------------------------------------------------------------------

    def retain(self, linked: LinkedBatch) -> None:
        """Keep a one-shot batch (its command buffers, signals, buffers) alive until the queues are past it."""
        with self._inflight_lock:
            self._inflight.append((int(self.timeline_view[1]), linked))
        self._retire()

    def _retire(self) -> None:
        done = int(self.timeline_view[0])
        with self._inflight_lock:
            while self._inflight and self._inflight[0][0] <= done:
                self._inflight.popleft()

    def plan_of(self, ast: UOp) -> Any:
        """What the device's encoder needs of a kernel AST, built once: by default what core's stages make of it
        (Compiled.get_runner: prepare .. make_runner, cached per AST). A build error surfaces here, when the engine
        prepares a schedule, before any of its kernels runs."""
        return Compiled.get_runner(self, ast)

    def get_runner(self, ast: Any) -> Callable[[list[Buffer], dict[str, int]], None]:
        """The engine's contract: a runner for one kernel; on an HCQ device it submits a batch of one."""
        self.plan_of(ast)
        writes = written_params(ast)

        def run(bufs: list[Buffer], var_vals: dict[str, int]) -> None:
            run_items([Item(ast, [q.mem(b.ensure_allocated()) for b in bufs], writes)], var_vals)
        return run

    def copy_buffers(self, dst: Buffer, src: Buffer) -> None:
        """Copy `src` into `dst` (equal sizes; either on this device or another HCQ device) on the source's copy
        queue, as a batch of one, without waiting: ordered after earlier work by the timeline, and the buffers
        stay alive until the copy is done (the batch holds them)."""
        if dst.nbytes != src.nbytes:
            raise ValueError(f"copy of {src!r} ({src.nbytes} bytes) into {dst!r} ({dst.nbytes} bytes)")
        run_items([Item(_COPY, [q.mem(dst.ensure_allocated()), q.mem(src.ensure_allocated())], (0,))])

    def close(self) -> None:
        try:
            self.synchronize()
        except HCQTimeout:
            pass
        super().close()


_COPY = UOp(Ops.COPY, dtypes.void)  # the exec item of a plain buffer copy (batch.py reads only its op)


def is_hcq(device: str) -> bool:
    from tg_core.device import Device
    return bool(getattr(Device[device], "hcq", False))


def written_params(ast: UOp) -> tuple[int, ...]:
    """The PARAM indices a kernel stores into (a COPY writes its first buffer)."""
    if ast.op is Ops.COPY:
        return (0,)
    out = set()
    for u in ast.toposort():
        if u.op is Ops.STORE:
            p = u.src[0]
            while p.op is not Ops.PARAM and p.src:
                p = p.src[0]
            if p.op is Ops.PARAM:
                out.add(p.arg if isinstance(p.arg, int) else p.arg[0])
    return tuple(sorted(out))


def copy_queues(devices: list[str]) -> dict[str, bool]:
    from tg_core.device import Device
    return {d: bool(getattr(Device[d], "has_copy_queue", True)) for d in devices}


def run_items(items: list[Item], var_vals: dict[str, int] | None = None) -> LinkedBatch:
    """Build, encode, link and submit one batch now (eager); its memory stays alive until its devices are past it."""
    from tg_core.device import Device
    devs = sorted({q.device_of(r) for it in items for r in it.refs})
    batch = build(items, copy_queues(devs))
    linked = link(encode(batch), batch.devices)
    linked.run(None, var_vals)
    for d in batch.devices:
        dev = Device[d]
        assert isinstance(dev, HCQCompiled), f"{d} is not an HCQ device"
        dev.retain(linked)
    return linked


__all__ = ["HCQCompiled", "HCQError", "HCQTimeout", "is_hcq", "run_items", "written_params"]
