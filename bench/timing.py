"""Timing shared by the bench scripts (run as `python bench/NAME.py`, so this directory is on sys.path)."""
from __future__ import annotations

import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], repeat: int) -> float:
    """The fastest wall time of `repeat` calls of `fn`, in seconds: on a shared machine the minimum is the run
    least disturbed by others."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
