"""tg-profiler-sqtt's instrumenter of the AMD compute queue (tg-amd's contract: tg_amd/queues/instrument.py).

Per profiled dispatch, in the places the contract gives:

    before          PMC: select and start the counters; SQTT: start tracing into the slot's windows, RGP markers;
                    then the GPU clock into prof_ts (start)
    after_dispatch  SQTT: THREAD_TRACE_MARKER
    after           the GPU clock (end); PMC: sample every counter instance into the slot; SQTT: stop, store
                    each SE's write pointer into the slot
    host            per dispatch its tag into prof_log[1 + slot], then prof_log[0] += dispatches (ring.py)

The slot is a run-time word: (prof_log[0] + k) mod slots, prof_log[0] read by the submit's host program (one
load per run), so a replayed batch takes new slots at every run.
"""
from __future__ import annotations

import threading
from typing import Any

from tg_core.plugin_api import UOp, dtypes
from tg_core.plugin_api import hcq_ops as q
from tg_amd.queues import pm4
from tg_amd.queues.pm4 import Word
from tg_profiler_sqtt import sequences as seq
from tg_profiler_sqtt.ring import Ring, Site
from tg_profiler_sqtt.settings import Settings


def _static(w: Word) -> int | None:
    return w if isinstance(w, int) else None


class Submit:
    """The instrumentation of one compute submit (SubmitInstrumentation)."""

    def __init__(self, ring: Ring, queue: q.Queue):
        self.ring, self.queue, self.settings = ring, queue, ring.settings
        self.perfcount = self.settings.pmc
        self.tags: dict[int, int] = {}   # site index -> tag
        self.log = q.mem(ring.buffers["prof_log"])
        self.count = q.host_load(self.log, 0)  # prof_log[0] at this run's submit (read once per run)

    def _slot(self, index: int) -> UOp:
        return (self.count + UOp.const(dtypes.uint64, index)) % UOp.const(dtypes.uint64, self.ring.slots)

    def _addr(self, tag: str, slot: UOp, stride: int, off: int = 0) -> UOp:
        return UOp.const(dtypes.uint64, self.ring.address[tag] + off) + slot * UOp.const(dtypes.uint64, stride)

    def _site(self, site: Any) -> int:
        part = site.part
        key = (part.key, site.name, tuple(map(_static, site.grid)), tuple(site.local), site.queue.name)
        return self.ring.tag(key, lambda cmd_id: Site(
            site.name, part.kernel.name, bytes(part.key), tuple(map(_static, site.grid)),  # type: ignore[arg-type]
            tuple(site.local), site.queue.name, cmd_id))

    def before(self, site: Any) -> list[Word]:
        tag = self.tags[site.index] = self._site(site)
        slot, ring, ws = self._slot(site.index), self.ring, []
        if self.settings.pmc:
            ws += seq.pmc_start(ring.sched)
        if self.settings.sqtt:
            windows = [self._addr("sqtt_buf", slot, ring.window, ring.window_offset(se, 0)) for se in range(ring.ses)]
            ws += seq.sqtt_start(windows, ring.window, ring.topo, self.settings.itrace_se_mask, self.settings.simd_sel)
            info = ring.sites[tag - 1]
            ws += seq.rgp_markers(info.code_hash, info.cmd_id, [pm4.u32(g) for g in site.grid])
        return ws + pm4.timestamp(self._addr("prof_ts", slot, 16), ring.topo.xccs)

    def after_dispatch(self, site: Any) -> list[Word]:
        return seq.sqtt_marker() if self.settings.sqtt else []

    def after(self, site: Any) -> list[Word]:
        slot, ring = self._slot(site.index), self.ring
        ws = pm4.timestamp(self._addr("prof_ts", slot, 16, 8), ring.topo.xccs)
        if self.settings.pmc:
            ws += seq.pmc_read(ring.sched, self._addr("pmc_buf", slot, ring.pmc_size), ring.topo)
        if self.settings.sqtt:
            wptrs = [self._addr("sqtt_wptrs", slot, 4 * ring.ses, 4 * se) for se in range(ring.ses)]
            ws += seq.sqtt_stop(wptrs, ring.topo)
        return ws

    def end(self) -> list[Word]:
        return []

    def host(self) -> list[UOp]:
        stmts = []
        for index, tag in sorted(self.tags.items()):
            off = self._slot(index) * UOp.const(dtypes.uint64, 8) + UOp.const(dtypes.uint64, 8)
            stmts.append(q.host_store(self.log, off, UOp.const(dtypes.uint64, tag)))
        if self.tags:
            stmts.append(q.host_store(self.log, 0, self.count + UOp.const(dtypes.uint64, len(self.tags))))
        return stmts


class Profiler:
    """The instrumenter tg-profiler-sqtt offers the AMD device: a slot ring per device, results kept per device
    (results.py) until taken."""
    name = "tg-profiler-sqtt"

    def __init__(self, settings: Settings, error: ValueError | None = None):
        self.settings, self.error = settings, error
        self.rings: dict[str, Ring] = {}
        self.lock = threading.Lock()

    def ring(self, dev: Any) -> Ring:
        with self.lock:
            got = self.rings.get(dev.device)
            if got is None:
                got = self.rings[dev.device] = Ring(dev, self.settings)
                if len(self.rings) == 1:  # the trace's export (tg profile, PROFILE=1 at exit) reads what is unread
                    from tg_core.plugin_api import profile_events as events
                    events.collectors.append(self.flush)
            return got

    def flush(self) -> None:
        """Synchronize every device with dispatches profiled but not read yet (which reads them)."""
        from tg_core.plugin_api import Device
        for name, ring in list(self.rings.items()):
            if int(ring.log[0]) != ring.read:
                dev = Device[name]
                dev.synchronize()
                if int(ring.log[0]) != ring.read:  # this profiler no longer instruments the device
                    self.synchronized(dev)

    def submit(self, device: Any, queue: q.Queue, batch: int) -> Submit | None:
        if self.error is not None:
            raise ValueError(f"{device.device}: profiling asked for but not possible: {self.error}")
        if not self.settings.enabled:
            return None
        return Submit(self.ring(device), queue)

    def synchronized(self, device: Any) -> None:
        ring = self.rings.get(device.device)
        if ring is not None:
            from tg_profiler_sqtt.results import gather
            gather(ring, ring.collect())
