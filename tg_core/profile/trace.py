"""Profile events as a Chrome trace-event JSON file (the format Perfetto and chrome://tracing open).

Layout: process 1 is the host, one track (thread) per host thread (spans, schedules, compiles, JIT phases); every
device is a process of its own, one track per queue ("COMPUTE:0", "COPY:0"; "host <thread>" for the kernels a
device without queues runs while the host waits) and a counter track "memory" (the device's live buffer bytes).
Durations are complete events (`ph: X`, `ts` and `dur` in microseconds); memory samples are counter events
(`ph: C`); names come from metadata events (`ph: M`). Device times are aligned to the host's clock (clock.py)
and every time is relative to the first event. Events are written sorted by time, so no track runs backwards.
"""
from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tg_core.profile.clock import clocks
from tg_core.profile.estimates import estimate
from tg_core.profile.events import HOST, Event


def aligned(e: Event) -> tuple[float, float]:
    """The event's (start, end) on the host's clock, in ns."""
    if e.clock is None:
        return float(e.start), float(e.end)
    offset = clocks[e.clock].offset if e.clock in clocks else 0.0
    return e.start - offset, e.end - offset


def kernel_args(e: Event) -> dict[str, Any]:
    """What a kernel or copy event shows: its estimates and where it ran."""
    data = e.data or {}
    out: dict[str, Any] = {"device": e.process, "queue": e.track}
    if data.get("jit"):
        out["jit"] = data["jit"]
    out["clock"] = "device timestamps" if data.get("device_clock") else "host"
    if data.get("counters"):  # what a profiler plugin counted for the kernel (tg-profiler-sqtt: PMC totals)
        out["counters"] = dict(data["counters"])
    if e.kind == "kernel" and data.get("ast") is not None:
        ops, nbytes = estimate(data["ast"], data.get("var_vals"))
        out.update(ops=ops, bytes=nbytes)
        if data.get("var_vals"):
            out["vars"] = dict(data["var_vals"])
    elif e.kind == "copy":
        out["bytes"] = data.get("bytes", 0)
    return out


def _json_safe(v: Any) -> Any:
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_json_safe(x) for x in v]
    return repr(v)


def trace_events(events: Iterable[Event]) -> list[dict[str, Any]]:
    """The trace-event list of `events` (metadata first, then every event in time order)."""
    evs = list(events)
    times = [aligned(e) for e in evs]
    origin = min((s for s, _ in times), default=0.0)
    pids: dict[str, int] = {HOST: 1}
    tids: dict[tuple[str, str], int] = {}
    body: list[tuple[float, float, dict[str, Any]]] = []
    for e, (s, t) in zip(evs, times):
        pid = pids.setdefault(e.process, len(pids) + 1)
        tid = tids.setdefault((e.process, e.track), sum(1 for p, _ in tids if p == e.process) + 1)
        ts = round((s - origin) / 1000, 3)
        if e.kind == "memory":
            body.append((ts, 0.0, {"name": "memory", "cat": "memory", "ph": "C", "ts": ts, "pid": pid, "tid": tid,
                                   "args": {"bytes": e.data["bytes"]}}))
            continue
        dur = round(max(t - s, 0.0) / 1000, 3)
        if e.kind in ("kernel", "copy"):
            args = kernel_args(e)
        else:
            args = _json_safe(e.data) if e.data else {}
        body.append((ts, dur, {"name": e.name, "cat": e.kind, "ph": "X", "ts": ts, "dur": dur, "pid": pid,
                               "tid": tid, "args": args}))
    body.sort(key=lambda x: (x[0], -x[1]))  # an enclosing span before what it encloses
    meta: list[dict[str, Any]] = []
    for name, pid in pids.items():
        meta.append({"name": "process_name", "ph": "M", "ts": 0, "pid": pid, "tid": 0,
                     "args": {"name": "tg host" if name == HOST else name}})
        meta.append({"name": "process_sort_index", "ph": "M", "ts": 0, "pid": pid, "tid": 0, "args": {"sort_index": pid}})
    for (process, track), tid in tids.items():
        meta.append({"name": "thread_name", "ph": "M", "ts": 0, "pid": pids[process], "tid": tid,
                     "args": {"name": track}})
    return meta + [d for _, _, d in body]


def alignment() -> dict[str, dict[str, Any]]:
    """Per device with its own clock: the offset used, its uncertainty and how many samples bound it."""
    return {d: {"offset_ns": c.offset, "uncertainty_ns": None if math.isinf(c.uncertainty) else c.uncertainty,
                "samples": c.samples, "consistent": c.consistent} for d, c in clocks.items()}


def write(events: Iterable[Event], path: str | Path) -> Path:
    """Write the trace file of `events` to `path`; returns the path."""
    path = Path(path)
    doc = {"traceEvents": trace_events(events), "displayTimeUnit": "ns",
           "otherData": {"generator": "tg_core.profile", "clock_alignment": alignment()}}
    path.write_text(json.dumps(doc, separators=(",", ":"), allow_nan=False, default=repr))
    return path
