"""Hook implementations of tg-profiler-sqtt: the AMD compute queue's instrumenter (tg-amd's
`amd_dispatch_instrumenters` hook spec), offered when PMC=1 or SQTT=1 (settings.py; read once, when the AMD
device first asks). Everything else of this plugin is used directly: `sqtt`, `mapper`, `pmc`, `results`."""
from __future__ import annotations

import threading
from typing import Any

from tg_core.plugin_api import hookimpl

_profiler: Any = None
_lock = threading.Lock()


def profiler() -> Any:
    """The process's Profiler (instrumenter.py), made from the environment on first use."""
    global _profiler
    with _lock:
        if _profiler is None:
            from tg_profiler_sqtt.instrumenter import Profiler
            from tg_profiler_sqtt.settings import Settings
            try:
                _profiler = Profiler(Settings.from_env())
            except ValueError as e:  # raised where it is seen, at the first profiled submit (not a broken plugin)
                _profiler = Profiler(Settings(), error=e)
        return _profiler


@hookimpl
def amd_dispatch_instrumenters(device: str) -> list:
    p = profiler()
    return [p] if p.settings.enabled or p.error is not None else []
