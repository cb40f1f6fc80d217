"""Whether profiling is on: the one flag every instrumented place checks first, so that nothing else runs when it
is off.

It starts from the environment variable `PROFILE` (read here, without the config machinery, because the engine
checks it before any registry exists); the config key `profile` (YAML files, `tg --set profile=true`) is applied
when a registry becomes the process's (tg_core/plugins/manager.py), unless `enable()` forced a value (`tg profile`
runs its script with profiling on whatever the config says). The config checks the value's spelling; this module
only reads it. Turned on by the environment or the config, the trace is written when the process exits.
"""
from __future__ import annotations

import atexit
import os
from typing import Any

_TRUE = ("1", "true", "yes", "on")

on: bool = False
exported = False  # set by whoever wrote the trace themselves (`tg profile`): nothing to write at exit
_forced = False
_armed = False


def _set(value: bool, at_exit: bool) -> None:
    global on, _armed
    on = value
    if on and at_exit and not _armed:
        _armed = True
        atexit.register(_write_at_exit)


def _write_at_exit() -> None:
    from tg_core.profile import write_at_exit
    write_at_exit()


def enable(value: bool = True) -> None:
    """Turn profiling on (or off) for this process from now on; later config changes do not override it. The caller
    writes the trace (`tg_core.profile.write_trace`)."""
    global _forced
    _forced = True
    _set(bool(value), at_exit=False)


def configure(config: Any) -> None:
    """Apply a config's `profile` key when one of its layers set it (and `enable` was not called)."""
    if not _forced and config.profile is not None:
        _set(config.profile, at_exit=True)


_set(os.environ.get("PROFILE", "").strip().lower() in _TRUE, at_exit=True)
