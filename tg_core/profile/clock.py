"""Aligning a device's clock to the host's, from causality alone.

A device timestamp `d` (converted to ns) taken by work the host submitted at host time `s` and saw finished at
host time `o` was taken at a host time in [s, o]; with `offset = d - host time`, every such sample bounds the
offset: `d_start - s >= offset >= d_end - o`. Intersecting the bounds of every sample (a calibration submit of one
timestamp when a device is first profiled, then every profiled run) narrows the interval around the true offset,
and the export uses its midpoint: every device event then lies inside the host interval that submitted and
observed it, the error is at most half the interval's width, and it shrinks as samples accumulate. An empty
intersection (the device's `timestamp_hz` is wrong, or its clock jumped) keeps the midpoint of the crossed bounds
and is reported in the trace's metadata.
"""
from __future__ import annotations

import math
import threading


class ClockSync:
    """The bounds on one device's clock offset (device ns - host ns)."""

    def __init__(self) -> None:
        self.lo, self.hi = -math.inf, math.inf
        self.samples = 0
        self._lock = threading.Lock()

    def observe(self, submitted: int, first: int, last: int, observed: int) -> None:
        """Device work submitted at host time `submitted` took timestamps `first`..`last` (device ns) and was seen
        done at host time `observed`."""
        with self._lock:
            self.lo = max(self.lo, last - observed)
            self.hi = min(self.hi, first - submitted)
            self.samples += 1

    @property
    def consistent(self) -> bool:
        return self.lo <= self.hi

    @property
    def offset(self) -> float:
        """The offset to subtract from a device time (ns) to get host time (0 without samples)."""
        if math.isinf(self.lo) and math.isinf(self.hi):
            return 0.0
        if math.isinf(self.lo):
            return self.hi
        if math.isinf(self.hi):
            return self.lo
        return (self.lo + self.hi) / 2

    @property
    def uncertainty(self) -> float:
        """Half the width of the interval (ns): how far the offset may be from the truth."""
        return abs(self.hi - self.lo) / 2 if self.samples else math.inf


clocks: dict[str, ClockSync] = {}
_clocks_lock = threading.Lock()


def clock_of(device: str) -> ClockSync:
    got = clocks.get(device)
    if got is None:
        with _clocks_lock:
            got = clocks.setdefault(device, ClockSync())
    return got
