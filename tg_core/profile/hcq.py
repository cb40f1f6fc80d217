"""Device timestamps for the kernels and copies of HCQ batches (tg_core/hcq), eager and replayed alike.

When profiling is on, batch.py asks `Stamps` for a `timestamp` queue op before and after every exec and copy of
the batch (after the item's waits, before its signal): two u64 slots per item in one host-visible placeholder
per device, tagged `timestamps`, whose key is the `Stamps` itself (so link.py finds it and hangs it on the
`LinkedBatch`). Every device's pm_encode already encodes `timestamp` (the device clock stored at an address), so
an HCQ device gets device times with no code of its own; it declares its clock rate as `timestamp_hz` (default
1e9: timestamps in ns, as HCQREF's).

`LinkedBatch.run` hands a profiled batch to `Stamps.run`: it first reads the previous run's slots (the batch's
host fence would wait for that run anyway, and this run overwrites them), zeroes them, submits, and remembers the
run (host submit time, the timeline value the run signals when done, variable values, the TinyJit phase). A run
is read back as soon as its devices' timelines passed it: checked without waiting after every profiled submit,
and waited for by the next run of the same batch and by `collect()` (the export; it synchronizes the devices).
Each item becomes an event on its queue's track in the device's clock, and each run is a sample of that
device's clock alignment (clock.py), as is a one-timestamp calibration submit when a device is first profiled.
A slot left 0 (the run was dropped after a timeout) gives no event.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tg_core.dtype import dtypes
from tg_core.hcq import ops as q
from tg_core.profile import events as ev
from tg_core.profile.clock import clock_of
from tg_core.uop.ops import Ops
from tg_core.uop.uop import UOp

TAG = "timestamps"
_pending: dict[int, Stamps] = {}  # batches with a run not read back yet, by id
_pending_lock = threading.Lock()
_calibrated: set[str] = set()
_calibrate_lock = threading.Lock()


def _dev(name: str) -> Any:
    from tg_core.device import Device
    return Device[name]


@dataclass(frozen=True)
class Slot:
    """What one item's two timestamp slots (at byte `16 * index` of its device's placeholder) measure."""
    index: int
    queue: q.Queue
    kind: str            # "kernel" or "copy"
    name: str
    data: Any            # a kernel's AST; a copy's byte count and devices


@dataclass
class _Run:
    submitted: int
    targets: dict[str, int]
    var_vals: dict[str, int]
    jit: str | None


@dataclass(eq=False)
class Stamps:
    """The timestamp slots of one batch (see the module docstring)."""
    counts: dict[str, int]
    sched: dict[str, int]                      # byte offset of each device's sched slot in its `slots` placeholder
    slots: dict[str, list[Slot]] = field(default_factory=dict)
    placeholders: dict[str, UOp] = field(default_factory=dict)
    views: dict[str, np.ndarray] = field(default_factory=dict)        # per device: its stamps as u64
    sched_views: dict[str, np.ndarray] = field(default_factory=dict)  # per device: its slots buffer as u64
    pending: _Run | None = None
    lock: Any = field(default_factory=threading.RLock)  # reentrant: a read may synchronize, which collects

    @classmethod
    def for_batch(cls, placed: list[q.Queue], queues_of: dict[str, list[q.Queue]], slot_bytes: int) -> Stamps:
        counts: dict[str, int] = {}
        for queue in placed:
            counts[queue.device] = counts.get(queue.device, 0) + 1
        return cls(counts, {d: slot_bytes * len(qs) for d, qs in queues_of.items()})

    def around(self, item: Any, queue: q.Queue, op: UOp) -> list[UOp]:
        """`op` (the item's exec or copy) between the timestamps of its start and its end."""
        d = queue.device
        ph = self.placeholders.get(d)
        if ph is None:
            ph = self.placeholders[d] = q.placeholder(TAG, 16 * self.counts[d], d, key=self)
        mine = self.slots.setdefault(d, [])
        k = len(mine)
        if item.is_copy:
            dst, src = item.refs
            mine.append(Slot(k, queue, "copy", f"copy {q.device_of(src)} -> {q.device_of(dst)}",
                             min(q.nbytes_of(dst), q.nbytes_of(src))))
        else:
            mine.append(Slot(k, queue, "kernel", item.ast.arg.name if item.ast.arg is not None else "kernel", item.ast))
        return [q.ins("timestamp", queue, q.addr(ph, 16 * k)), op, q.ins("timestamp", queue, q.addr(ph, 16 * k + 8))]

    # ---- running ---------------------------------------------------------------------------------------------

    def _bind(self, linked: Any) -> None:
        for d in self.placeholders:
            dev = _dev(d)
            self.views[d] = dev.host_view(linked.buffers[(TAG, d)]).view(np.uint64)
            self.sched_views[d] = dev.host_view(linked.buffers[("slots", d)]).view(np.uint64)
            calibrate(d)

    def run(self, linked: Any, inputs: Any, var_vals: dict[str, int] | None) -> None:
        """Run the linked batch `linked` (whose stamps these are) and remember the run to read it back."""
        with self.lock:  # one run of a batch at a time, as its host fence makes it anyway
            if self.pending is not None:
                self._read(wait=True)
            elif not self.views:
                self._bind(linked)
            for v in self.views.values():
                v[:] = 0
            submitted = ev.now()
            linked.submit(inputs, var_vals)
            targets = {d: int(v[self.sched[d] // 8]) for d, v in self.sched_views.items()}
            self.pending = _Run(submitted, targets, dict(var_vals or {}), ev.jit_label())
        with _pending_lock:
            _pending[id(self)] = self
        collect(wait=False)

    def _read(self, wait: bool) -> bool:
        """Turn the pending run into events once its devices are past it; False if it is not done (and not
        `wait`). Called with `self.lock` held."""
        run = self.pending
        assert run is not None
        for d, target in run.targets.items():
            dev = _dev(d)
            if int(dev.timeline_view[0]) < target:
                if not wait:
                    return False
                dev.synchronize()  # which reads back what it finished: this run too, on this thread (reentrant lock)
                if self.pending is not run:
                    return True
        observed = ev.now()
        for d, slots in self.slots.items():
            dev = _dev(d)
            scale = 1e9 / float(getattr(dev, "timestamp_hz", 1e9))
            raw = self.views[d]
            first, last = None, None
            for s in slots:
                t0, t1 = int(raw[2 * s.index]), int(raw[2 * s.index + 1])
                if t0 == 0 or t1 == 0:
                    continue  # not written: the run was dropped
                start, end = int(t0 * scale), int(t1 * scale)
                first = start if first is None else min(first, start)
                last = end if last is None else max(last, end)
                data: dict[str, Any] = {"jit": run.jit, "device_clock": True}
                if s.kind == "kernel":
                    data.update(ast=s.data, var_vals=run.var_vals)
                else:
                    data["bytes"] = s.data
                ev.record(s.kind, s.name, d, s.queue.name, start, end, d, data)
            if first is not None and last is not None:
                clock_of(d).observe(run.submitted, first, last, observed)
        self.pending = None
        with _pending_lock:
            _pending.pop(id(self), None)
        return True


def collect(wait: bool = True) -> None:
    """Read back every pending run whose devices are past it (`wait`: synchronize them first, so all are)."""
    with _pending_lock:
        batches = list(_pending.values())
    for stamps in batches:
        if wait:
            with stamps.lock:
                if stamps.pending is not None:
                    stamps._read(wait=True)
        elif stamps.lock.acquire(blocking=False):  # another thread is running this batch: it reads it back
            try:
                if stamps.pending is not None:
                    stamps._read(wait=False)
            finally:
                stamps.lock.release()


def forget_calibration() -> None:
    """Calibrate every device again when next profiled (after `tg_core.profile.reset`)."""
    with _calibrate_lock:
        _calibrated.clear()


def calibrate(device: str, rounds: int = 3) -> None:
    """Once per device: submit a lone timestamp `rounds` times, each a sample of the device's clock offset."""
    with _calibrate_lock:
        if device in _calibrated:
            return
        _calibrated.add(device)
        from tg_core.hcq.batch import Batch, new_batch_id
        from tg_core.hcq.encode import encode
        from tg_core.hcq.host import wait_until
        from tg_core.hcq.link import link
        dev = _dev(device)
        queue = q.Queue(device, "COMPUTE:0")
        ph = q.placeholder(TAG, 8, device, key=("calibration", device))
        sink = UOp(Ops.SINK, dtypes.void, (q.submit(queue, [q.ins("timestamp", queue, q.addr(ph, 0))]),))
        linked = link(encode(Batch(sink, [device], new_batch_id())), [device])
        view = dev.host_view(linked.buffers[(TAG, device)]).view(np.uint64)
        scale = 1e9 / float(getattr(dev, "timestamp_hz", 1e9))
        for _ in range(rounds):
            view[0] = 0
            submitted = ev.now()
            linked.submit(None, None)
            wait_until(lambda: int(view[0]), 1, f"{device} profiling clock calibration", dev.on_host_timeout,
                       dev.check_fault)
            observed = ev.now()
            t = int(int(view[0]) * scale)
            clock_of(device).observe(submitted, t, t, observed)
