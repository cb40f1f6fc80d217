"""Profiling: with `PROFILE=1` (config key `profile`) tg records a timeline of everything it runs, and exports it as
a Chrome trace-event file that Perfetto (https://ui.perfetto.dev) and chrome://tracing open.

    from tg_core import profile
    with profile.span("my step"):       # a span of your own on the host track of this thread
        loss = step(x, y)
    path = profile.write_trace("trace.json")

Recorded (docs/architecture.md, "Profiling"): every kernel (its device, queue, name, start and end: from the
device's own timestamps on HCQ devices, aligned to the host clock, else host clocks around the call), copies,
compiles, schedules, TinyJit captures and replays (each replayed kernel its own event), buffer allocations and
frees (a memory counter per device) and host spans. `tg profile SCRIPT [ARGS]` runs a script with profiling on,
prints the per-kernel summary (summary.py) and writes the trace. With PROFILE=1 alone the trace is written when
the process exits (its path is printed on stderr). When profiling is off each instrumented place costs one flag
check (`state.on`).

Modules: state.py (the flag), events.py (recording, spans), hcq.py (device timestamps of HCQ batches), clock.py
(device clock alignment), estimates.py (op and byte estimates of a kernel), trace.py (the trace file),
summary.py (the per-kernel table), cli.py (`tg profile`).
"""
from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from tg_core.profile import events as _events
from tg_core.profile import state
from tg_core.profile.events import Event, span
from tg_core.profile.state import enable


def enabled() -> bool:
    """Whether profiling is on."""
    return state.on


def collect() -> list[Event]:
    """Every event recorded so far (kept): the runs still pending on HCQ devices are waited for and read first."""
    if "tg_core.profile.hcq" in sys.modules:  # only HCQ batches leave runs to read back
        from tg_core.profile.hcq import collect as collect_hcq
        collect_hcq(wait=True)
    for collector in list(_events.collectors):  # plugins' records still in device memory (events.collectors)
        collector()
    return list(_events.events)


def reset() -> None:
    """Forget every event, clock alignment and memory count recorded so far."""
    from tg_core.profile.clock import clocks
    collect()
    _events.take()
    _events._memory.clear()
    clocks.clear()
    if "tg_core.profile.hcq" in sys.modules:
        from tg_core.profile.hcq import forget_calibration
        forget_calibration()


def write_trace(path: str | Path, events: list[Event] | None = None) -> Path:
    """Write the trace of `events` (default: everything recorded so far) to `path`."""
    from tg_core.profile.trace import write
    return write(collect() if events is None else events, path)


def summary(events: list[Event] | None = None, limit: int | None = 30) -> str:
    """The per-kernel summary table of `events` (default: everything recorded so far)."""
    from tg_core.profile.summary import format_rows, kernel_rows
    return format_rows(kernel_rows(collect() if events is None else events), limit)


def default_trace_path() -> Path:
    from os import getpid
    return Path(tempfile.gettempdir()) / f"tg-profile-{getpid()}.json"


def write_at_exit() -> None:
    """PROFILE=1 without `tg profile`: the trace of the whole process, written when it exits."""
    if not state.on or state.exported:
        return
    try:
        events = collect()
        if events:
            path = write_trace(default_trace_path(), events)
            print(f"tg: profile of {len(events)} events written to {path} (open it in https://ui.perfetto.dev)",
                  file=sys.stderr)
    except Exception as e:  # at exit nothing can be done about it but saying so
        print(f"tg: writing the profile failed: {type(e).__name__}: {e}", file=sys.stderr)


__all__ = ["Event", "collect", "enable", "enabled", "reset", "span", "summary", "write_trace"]
