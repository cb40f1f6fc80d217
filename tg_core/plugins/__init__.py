"""The plugin system: hook specs, discovery, the registry, config.

What a plugin author uses: `hookimpl` (the marker for hook implementations), `DeviceSpec` and `Option`
(what `tg_devices` returns), `DeviceUnavailable` (raised by a device class when its hardware is absent),
and `API_VERSION` (what the manifest's `API` range is checked against). pluggy is imported only when
`hookimpl` or the registry is first used, so `import tg_core` stays light.
"""
from __future__ import annotations

from typing import Any

from tg_core.plugins.errors import (
    ConfigError,
    DeviceClashError,
    DeviceNotFoundError,
    DeviceStringError,
    DeviceUnavailable,
    PluginBlockedError,
    PluginBrokenError,
    PluginError,
    PluginRefusedError,
)
from tg_core.plugins.specs import DeviceSpec, Option
from tg_core.plugins.version import API_VERSION, API_VERSION_STR

__all__ = ["API_VERSION", "API_VERSION_STR", "ConfigError", "DeviceClashError", "DeviceNotFoundError", "DeviceSpec",
           "DeviceStringError", "DeviceUnavailable", "Option", "PluginBlockedError", "PluginBrokenError", "PluginError",
           "PluginRefusedError", "PluginRegistry", "PluginWarning", "get_registry", "hookimpl"]


def __getattr__(name: str) -> Any:
    if name == "hookimpl":
        from tg_core.plugins.hookspecs import hookimpl
        return hookimpl
    if name in ("get_registry", "PluginWarning", "PluginRegistry"):
        from tg_core.plugins import manager
        return getattr(manager, name)
    raise AttributeError(f"module 'tg_core.plugins' has no attribute {name!r}")
