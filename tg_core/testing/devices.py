"""Test helpers shared by core's and the plugins' tests: which devices open here, and races between threads."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable

from tg_core.device import Device


def why_unavailable(device: str) -> str | None:
    """None when `device` opens; else the first line of why not (no interface plugin, one that cannot run here)."""
    try:
        Device[device]
    except Exception as e:  # any failure to open is a reason to skip, said in the skip message
        return f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return None


def run_in_threads(work: Callable[[int], None], threads: int = 4) -> None:
    """Run `work(k)` for k in range(threads) at once, switching threads as often as the interpreter allows so that
    races show within a few hundred rounds; the first exception any thread raised is raised here."""
    errors: list[BaseException] = []

    def run(k: int) -> None:
        try:
            work(k)
        except BaseException as e:  # reported by the calling thread
            errors.append(e)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        started = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
        for t in started:
            t.start()
        for t in started:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
