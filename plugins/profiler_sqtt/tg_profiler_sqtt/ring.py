"""The slot ring of one AMD device: the host-visible buffers every profiled dispatch writes into, and reading them.

    prof_log    u64[1 + slots]: [0] the dispatches profiled so far, [1 + s] the tag of the dispatch in slot s
    pmc_buf     slots x the PMC readback (counters.py schedule)
    sqtt_buf    SEs x slots trace windows: SE e, slot s at ((e * slots) + s) * window
    sqtt_wptrs  u32[slots x SEs]: slot s, SE e at s * SEs + e (SQ_THREAD_TRACE_WPTR after the dispatch)
    prof_ts     u64[2 x slots]: the GPU clock before and after the dispatch of slot s

The k-th profiled dispatch of a submit takes slot (prof_log[0] + k) mod slots: the host program of the submit
reads prof_log[0] once, the command words derive every address from it, and after writing them it stores each
dispatch's tag and bumps prof_log[0] by the submit's dispatches (instrumenter.py). `collect` (after synchronize,
the queues idle) reads every slot written since the last read.

A tag names what ran (`Site`: kernel name, code object, grid), registered once per distinct dispatch site (a
replayed batch keeps its tags).
"""
from __future__ import annotations

import hashlib
import threading
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np

from tg_profiler_sqtt.counters import ScheduledCounter, Topology, readback_bytes, schedule
from tg_profiler_sqtt.settings import Settings

WPTR_UNITS = 0x1FFFFFFF  # SQ_THREAD_TRACE_WPTR offset [28:0], 32-byte units
UNIT = 32


class ProfileWarning(UserWarning):
    """Profiles lost or cut: overwritten slots, a full trace window, a write pointer that makes no sense."""


@dataclass(frozen=True)
class Site:
    """What a tag stands for: the kernel, its code object (ELF) and symbol, its launch."""
    name: str
    symbol: str
    lib: bytes
    grid: tuple[int | None, int | None, int | None]   # None: a dim that depends on a variable
    local: tuple[int, int, int]
    queue: str
    cmd_id: int

    @property
    def code_hash(self) -> int:
        return int.from_bytes(hashlib.md5(self.lib).digest()[:8], "little")


@dataclass(frozen=True)
class SlotRead:
    """One dispatch as read from its slot: its place in the device's order, its site, the raw results."""
    sequence: int
    slot: int
    site: Site
    start: int        # GPU clock ticks (0: not written)
    end: int
    pmc: bytes | None
    sqtt: dict[int, bytes] | None   # SE -> the bytes of its window up to its write pointer
    full: tuple[int, ...]           # SEs whose window filled


class Ring:
    """The slot ring of device `dev` (an AMDDevice) under `settings`."""

    def __init__(self, dev: Any, settings: Settings):
        self.device, self.settings, self.slots = dev.device, settings, settings.slots
        props = dict(dev.gpu.node.properties)
        self.topo = Topology.of_properties(props, dev.xccs)
        self.ses = self.topo.ses * self.topo.xccs
        arch = str(getattr(dev.gpu, "arch", "gfx1100"))
        # gfx 11.0.x counts SQ_THREAD_TRACE_WPTR from address 0, later parts from the buffer (amd.md section 9)
        self.wptr_from_zero = arch.startswith("gfx110")
        self.sched: list[ScheduledCounter] = schedule(settings.counters, self.topo) if settings.pmc else []
        self.pmc_size = readback_bytes(self.sched)
        self.window = settings.window() if settings.sqtt else 0
        self._host_view = dev.host_view
        self.buffers: dict[str, Any] = {}
        self.address: dict[str, int] = {}
        self._alloc(dev, "prof_log", 8 * (1 + self.slots))
        self._alloc(dev, "prof_ts", 16 * self.slots)
        if settings.pmc:
            self._alloc(dev, "pmc_buf", self.pmc_size * self.slots)
        if settings.sqtt:
            # never zeroed (fresh memory is): a slot's window is read only up to the pointer its dispatch stored
            self._alloc(dev, "sqtt_buf", self.window * self.slots * self.ses, zero=False)
            self._alloc(dev, "sqtt_wptrs", 4 * self.slots * self.ses)
        self.log = self.view("prof_log").view(np.uint64)
        self.read = 0
        self.sites: list[Site] = []
        self._site_ids: dict[Any, int] = {}
        self.lock = threading.Lock()

    def _alloc(self, dev: Any, tag: str, nbytes: int, zero: bool = True) -> None:
        buf = self.buffers[tag] = dev.host_buffer(max(nbytes, 8), nolru=True)
        if zero:
            dev.host_view(buf)[:] = 0
        self.address[tag] = dev.address(buf)

    def view(self, tag: str) -> np.ndarray:
        return self._host_view(self.buffers[tag])

    # ---- layout ----

    def window_offset(self, se: int, slot: int) -> int:
        return (se * self.slots + slot) * self.window

    def wptr_offset(self, se: int, slot: int) -> int:
        return 4 * (slot * self.ses + se)

    # ---- tags ----

    def tag(self, key: Any, make: Any) -> int:
        """The tag (>= 1) of the dispatch site `key`; `make(cmd_id)` builds its Site the first time."""
        with self.lock:
            got = self._site_ids.get(key)
            if got is None:
                self.sites.append(make(len(self.sites)))
                got = self._site_ids[key] = len(self.sites)
            return got

    # ---- reading ----

    def collect(self) -> list[SlotRead]:
        """Every dispatch profiled since the last read (the queues must be idle), oldest first; warns when slots
        were overwritten before this read and when a trace window filled."""
        with self.lock:
            total = int(self.log[0])
            first = max(self.read, total - self.slots)
            lost = first - self.read
            self.read = total
        if lost > 0:
            warnings.warn(f"{self.device}: {lost} profiled dispatch{'es were' if lost > 1 else ' was'} overwritten "
                          f"before being read: the {self.slots} slots (PROF_SLOTS) hold the last {self.slots} "
                          "dispatches between two synchronizes; synchronize more often or raise PROF_SLOTS",
                          ProfileWarning, stacklevel=3)
        ts = self.view("prof_ts").view(np.uint64)
        out = []
        for k in range(first, total):
            slot = k % self.slots
            tag = int(self.log[1 + slot])
            if not 1 <= tag <= len(self.sites):
                warnings.warn(f"{self.device}: slot {slot} holds tag {tag}, which names no profiled dispatch (memory "
                              "of the slot ring was overwritten): dispatch skipped", ProfileWarning, stacklevel=3)
                continue
            site = self.sites[tag - 1]
            pmc = bytes(self.view("pmc_buf")[slot * self.pmc_size:(slot + 1) * self.pmc_size]) \
                if self.settings.pmc else None
            sqtt, full = self._traces(slot, site) if self.settings.sqtt else (None, ())
            out.append(SlotRead(k, slot, site, int(ts[2 * slot]), int(ts[2 * slot + 1]), pmc, sqtt, full))
        return out

    def trace_bytes(self, wptr: int, window_va: int) -> int:
        """The bytes an SE wrote into its window, from the write pointer it stored."""
        n = (wptr & WPTR_UNITS) * UNIT
        if self.wptr_from_zero:
            n -= ((window_va // UNIT) & WPTR_UNITS) * UNIT
        return n

    def _traces(self, slot: int, site: Site) -> tuple[dict[int, bytes], tuple[int, ...]]:
        wptrs = self.view("sqtt_wptrs").view(np.uint32)
        data = self.view("sqtt_buf")
        out: dict[int, bytes] = {}
        full = []
        for se in range(self.ses):
            off = self.window_offset(se, slot)
            raw = int(wptrs[self.wptr_offset(se, slot) // 4])
            n = self.trace_bytes(raw, self.address["sqtt_buf"] + off)
            if not 0 <= n <= self.window:
                warnings.warn(f"{self.device}: SE {se} of {site.name} (slot {slot}) stored write pointer {raw:#x}, "
                              f"{n} bytes into its {self.window}-byte window: not a trace; skipped",
                              ProfileWarning, stacklevel=4)
                continue
            if n >= self.window - UNIT:  # the pointer stops at the last unit: the trace did not fit
                full.append(se)
            out[se] = bytes(data[off:off + n])
        if full:
            ses = ", ".join(map(str, full))
            warnings.warn(f"{self.device}: the SQTT window{'s' if len(full) > 1 else ''} of SE {ses} filled during "
                          f"{site.name}: the trace is cut at {self.window} bytes per SE; raise SQTT_BUFFER_SIZE (now "
                          f"{self.settings.buffer_mib} MiB per SE over {self.slots} slots)", ProfileWarning,
                          stacklevel=4)
        return out, tuple(full)
