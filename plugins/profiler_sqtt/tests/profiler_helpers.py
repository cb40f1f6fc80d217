"""Helpers of tg-profiler-sqtt's tests on the mock GPU."""
from __future__ import annotations

from tg_profiler_sqtt.instrumenter import Profiler
from tg_profiler_sqtt.settings import Settings


def profile_with(monkeypatch, dev, settings: Settings) -> Profiler:
    """A profiler with `settings` as the device's only dispatch instrumenter, for the rest of the test."""
    prof = Profiler(settings)
    monkeypatch.setattr(dev, "_instrumenters", [prof])
    return prof
