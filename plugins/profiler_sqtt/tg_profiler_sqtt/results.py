"""What the profiler collected: one `DispatchProfile` per profiled dispatch, kept per device until taken, and (with
PROFILE=1) events in core's trace file.

    from tg_profiler_sqtt import results
    for p in results.take("AMD"):
        p.totals["SQ_INSTS_VALU"], p.counters["SQ_INSTS_VALU"].values   # per-counter total, per-instance values
        p.traces[0]                                                      # SE 0's decoded SQTT stream

Trace file (tg_core.profile's events): per dispatch a `pmc` event on the device's "<queue> PMC" track, named after
the kernel, its counter totals as args, at the dispatch's own GPU clock stamps (the device clock core aligns);
per traced dispatch, per wave of each SE a track "SQTT SE<e> <sa>.<wgp>.<simd> wave <w>" with the wave's span and
its instructions (mapped onto the kernel's code where the SE traced instructions, else the packet kinds).
SQTT times are SQ clock cycles placed from the dispatch's start at SQTT_CLOCK_MHZ (the trace has no absolute
time); at most MAX_INSTRUCTION_EVENTS instructions per dispatch are written.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tg_profiler_sqtt.pmc import Counter, decode_pmc
from tg_profiler_sqtt.ring import Ring, Site, SlotRead
from tg_profiler_sqtt.sqtt import Trace, decode

SQTT_CLOCK_MHZ = 2500            # gfx1100's shader clock: SQTT deltas are its cycles
MAX_INSTRUCTION_EVENTS = 20000   # per dispatch in the trace file (a big grid issues millions)


@dataclass
class DispatchProfile:
    """One profiled dispatch: `sequence` orders the device's profiled dispatches; start/end in GPU ticks."""
    device: str
    sequence: int
    slot: int
    site: Site
    start: int
    end: int
    counters: dict[str, Counter] = field(default_factory=dict)
    raw_traces: dict[int, bytes] = field(default_factory=dict)  # SE -> stream bytes
    full: tuple[int, ...] = ()
    _decoded: dict[int, Trace] = field(default_factory=dict, repr=False)

    @property
    def kernel(self) -> str:
        return self.site.name

    @property
    def totals(self) -> dict[str, int]:
        return {n: c.total for n, c in self.counters.items()}

    @property
    def traces(self) -> dict[int, Trace]:
        """SE -> its decoded stream (SEs that wrote nothing are left out)."""
        for se, data in self.raw_traces.items():
            if se not in self._decoded and data:
                self._decoded[se] = decode(data)
        return {se: self._decoded[se] for se in self.raw_traces if se in self._decoded}


_results: dict[str, list[DispatchProfile]] = {}
_lock = threading.Lock()


def gather(ring: Ring, reads: list[SlotRead]) -> list[DispatchProfile]:
    """Decode what a ring read and keep it (and, with profiling on, record its events)."""
    got = []
    for r in reads:
        p = DispatchProfile(ring.device, r.sequence, r.slot, r.site, r.start, r.end, full=r.full)
        if r.pmc is not None:
            p.counters = decode_pmc(r.pmc, ring.sched)
        if r.sqtt is not None:
            p.raw_traces = {se: b for se, b in r.sqtt.items() if b}
        got.append(p)
    with _lock:
        _results.setdefault(ring.device, []).extend(got)
    from tg_core.plugin_api import profile_state as state
    if state.on and got:
        record_events(ring, got)
    return got


def profiles(device: str = "AMD") -> list[DispatchProfile]:
    """The dispatches of `device` collected so far (kept)."""
    with _lock:
        return list(_results.get(device, []))


def take(device: str = "AMD") -> list[DispatchProfile]:
    """The dispatches of `device` collected so far, removed."""
    with _lock:
        return _results.pop(device, [])


# ---- trace-file events ---------------------------------------------------------------------------------------

def record_events(ring: Ring, got: list[DispatchProfile]) -> None:
    from tg_core.plugin_api import Device
    from tg_core.plugin_api import profile_events as ev
    scale = 1e9 / float(getattr(Device[ring.device], "timestamp_hz", 1e9))
    for p in got:
        if not p.start or not p.end:
            continue
        start, end = int(p.start * scale), int(p.end * scale)
        args: dict[str, Any] = {"slot": p.slot, "sequence": p.sequence, "grid": list(p.site.grid),
                                "local": list(p.site.local)}
        if p.counters:
            args["counters"] = p.totals
        if p.raw_traces:
            args["sqtt_bytes"] = {str(se): len(b) for se, b in p.raw_traces.items()}
        ev.record("pmc" if p.counters else "sqtt", p.kernel, ring.device, f"{p.site.queue} PMC", start, end,
                  ring.device, args)
        if p.counters:
            _annotate_kernel(ring.device, start, end, p.totals)
        if p.raw_traces:
            _wave_events(ring, p, start)


def _annotate_kernel(device: str, start: int, end: int, totals: dict[str, int], window: int = 4096) -> None:
    """Core's event of the kernel this dispatch belongs to (on the device's clock, enclosing the dispatch's own
    stamps: core stamps each exec around all of its dispatches) gets the counters as args; the recent events
    are searched, since core records a run's kernels when it reads the run back, just before this."""
    from tg_core.plugin_api import profile_events as ev
    recent = ev.events[-window:]
    for e in reversed(recent):
        if e.kind == "kernel" and e.process == device and e.clock == device and e.start <= start and end <= e.end:
            got = e.data.setdefault("counters", {})
            for k, v in totals.items():  # a split kernel's parts add up
                got[k] = got.get(k, 0) + v
            return


def _wave_events(ring: Ring, p: DispatchProfile, start_ns: int) -> None:
    from tg_core.plugin_api import profile_events as ev
    ns = 1e3 / SQTT_CLOCK_MHZ
    budget = MAX_INSTRUCTION_EVENTS
    for se, trace in p.traces.items():
        if not len(trace):
            continue
        t0 = int(trace[0].time)

        def at(t: int, t0: int = t0) -> int:
            return start_ns + int((t - t0) * ns)
        waves: dict[tuple[int, int, int, int], tuple[str, int]] = {}  # (sa, wgp, simd, wave) -> (track, start)
        for w in trace:
            if w.kind in ("WAVESTART", "WAVEEND"):
                key = (w.sa, w.wgp, w.simd, w.wave)
                if w.kind == "WAVESTART":
                    waves[key] = (f"SQTT SE{se} {w.sa}.{w.wgp}.{w.simd} wave {w.wave}", int(w.time))
                elif key in waves:
                    track, t = waves.pop(key)
                    ev.record("wave", f"wave {w.wave}", ring.device, track, at(t), at(int(w.time)), ring.device,
                              {"se": se, "sa": w.sa, "wgp": w.wgp, "simd": w.simd, "wave": w.wave})
        if ring.settings.itrace_se_mask >> se & 1 and budget > 0:
            budget -= _instruction_events(ring, p, se, trace, at, budget)


def _instruction_events(ring: Ring, p: DispatchProfile, se: int, trace: Trace, at: Any, budget: int) -> int:
    """Instruction events of the traced unit's waves (as many as `budget`); the number written."""
    from tg_core.plugin_api import profile_events as ev
    from tg_profiler_sqtt.mapper import MappingError, map_instructions
    starts = {w.wave: w for w in trace if w.kind == "WAVESTART" and w.sa == 0 and w.wgp == 0}
    n = 0
    try:
        for m in map_instructions(trace, p.site.lib, p.site.symbol):
            w = starts.get(m.wave)
            if w is None:
                continue
            t = at(int(m.packet.time))
            ev.record("instruction", m.text, ring.device, f"SQTT SE{se} {w.sa}.{w.wgp}.{w.simd} wave {m.wave}", t, t,
                      ring.device, {"pc": m.pc, "packet": m.packet.kind})
            n += 1
            if n >= budget:
                break
    except (MappingError, ImportError, ValueError):
        pass  # a trace the code does not explain still has its waves; the mapping is what the mapper tests check
    return n
