"""Profile events: what the instrumented places record, in one process-wide list, and the host spans users wrap
their own code in.

An event is a `NamedTuple` (cheap to make: recording one costs well under a microsecond) of
- `kind`: one of KINDS;
- `name`: the kernel's name, the span's, "memory", ...;
- `process`: the device it happened on, or HOST for work of the host itself (spans, scheduling, compiles);
- `track`: the queue of a device ("COMPUTE:0", "COPY:0"; "host <thread>" for a kernel timed on the host), the
  thread of a host event;
- `start`, `end`: nanoseconds; on the host's clock (`time.perf_counter_ns`) when `clock` is None, else on the
  device `clock`'s own clock (its timestamps converted to ns), which the export aligns to the host's
  (tg_core/profile/clock.py);
- `data`: what the export and the summary need beyond that (a kernel's AST and variable values for its
  estimates, a copy's bytes, a counter's value, a span's arguments).

The instrumented places check `state.on` first and call these functions only when it is set.
"""
from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from tg_core.profile import state

HOST = "host"
KINDS = ("kernel", "copy", "compile", "schedule", "jit", "span", "memory", "batch")
now = time.perf_counter_ns


class Event(NamedTuple):
    kind: str
    name: str
    process: str
    track: str
    start: int
    end: int
    clock: str | None
    data: Any


events: list[Event] = []  # list.append is atomic: threads record without a lock
_memory: dict[str, int] = {}  # live bytes per device
_memory_lock = threading.Lock()
_jit = threading.local()  # the TinyJit whose capture or replay this thread runs (labels its kernels)
# called by `tg_core.profile.collect()` before it returns the events: a plugin whose records are read back from
# device memory (tg-profiler-sqtt's counters and traces, read at synchronize) reads what is still unread there
collectors: list[Callable[[], None]] = []


def record(kind: str, name: str, process: str, track: str, start: int, end: int, clock: str | None = None,
           data: Any = None) -> None:
    events.append(Event(kind, name, process, track, start, end, clock, data))


def take() -> list[Event]:
    """The events recorded so far, removed from the list."""
    global events
    got, events = events, []
    return got


def thread_track() -> str:
    return threading.current_thread().name


def jit_label() -> str | None:
    """'replay of NAME' / 'capture of NAME' while this thread runs a TinyJit's replay or capture, else None."""
    return getattr(_jit, "label", None)


@contextmanager
def jit_phase(label: str) -> Iterator[None]:
    """Label the kernels this thread runs inside (a TinyJit's capture or replay) and record the phase as a span."""
    prev = jit_label()
    _jit.label = label
    start = now()
    try:
        yield
    finally:
        _jit.label = prev
        record("jit", label, HOST, thread_track(), start, now())


def timed_kernel(runner: Callable[[list[Any], dict[str, int]], None], bufs: list[Any], var_vals: dict[str, int],
                 ast: Any) -> None:
    """Run a kernel whose device runs it before returning (CPU, PYTHON) and record it on the host's clock."""
    start = now()
    runner(bufs, var_vals)
    end = now()
    device = bufs[0].device if bufs else "?"
    record("kernel", ast.arg.name if ast.arg is not None else "kernel", device, f"host {thread_track()}", start, end,
           None, {"ast": ast, "var_vals": dict(var_vals), "jit": jit_label()})


def timed_copy(runner: Callable[[list[Any], dict[str, int]], None], bufs: list[Any], var_vals: dict[str, int]) -> None:
    """Run a copy (bufs[0] <- bufs[1]) and record it on the host's clock, on the destination's track."""
    start = now()
    runner(bufs, var_vals)
    end = now()
    dst, src = bufs[0], bufs[1]
    record("copy", f"copy {src.device} -> {dst.device}", dst.device, f"host {thread_track()}", start, end, None,
           {"bytes": dst.nbytes, "jit": jit_label()})


def timed_item(runner: Callable[[list[Any], dict[str, int]], None], bufs: list[Any], var_vals: dict[str, int],
               ast: Any) -> None:
    """A captured exec item (a kernel, or a copy when `ast` is a COPY) run and recorded on the host's clock."""
    if ast.op.name == "COPY":
        timed_copy(runner, bufs, var_vals)
    else:
        timed_kernel(runner, bufs, var_vals, ast)


def host_event(kind: str, name: str, start: int, data: Any = None) -> None:
    """A piece of host work (a schedule, a compile) that started at `start` and ends now."""
    record(kind, name, HOST, thread_track(), start, now(), None, data)


def memory(device: str, delta: int) -> None:
    """`delta` bytes of buffers were allocated (> 0) or freed (< 0) on `device`: a sample of its counter track."""
    t = now()
    with _memory_lock:
        total = _memory[device] = _memory.get(device, 0) + delta
    record("memory", "memory", device, "memory", t, t, None, {"bytes": total})


@contextmanager
def span(name: str, **args: Any) -> Iterator[None]:
    """Wrap your own code in a named span of the profile (its thread's host track): `with span("load data"):`.
    Keyword arguments are shown with it. Nothing is recorded when profiling is off."""
    if not state.on:
        yield
        return
    start = now()
    try:
        yield
    finally:
        record("span", name, HOST, thread_track(), start, now(), None, args or None)
