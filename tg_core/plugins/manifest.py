"""Phase one of discovery: a plugin's manifest, read before anything heavy of the plugin is imported.

A plugin's entry point in the group `tg.plugins` names its manifest module, which holds only constants:

    API = ">=1.0,<2"             # the core API versions the plugin works with (see tg_core.plugins.version)
    DEVICES = {"TEMPLATE": 10}   # the devices it provides, with their priority for the default device
    HOOKS = "tg_template.plugin" # the module with its hook implementations, imported on first use
    EXTENDS = ["AMD"]            # optional: devices of other plugins it adds hooks to ("*": every device)

The manifest module and its package's `__init__` must import nothing heavy (no backend, no numpy): core
imports them for every installed plugin whenever the registry is first used.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from types import ModuleType

from tg_core.plugins.errors import suggest
from tg_core.plugins.specs import DEVICE_NAME
from tg_core.plugins.version import parse_range

MANIFEST_KEYS = ("API", "DEVICES", "HOOKS", "EXTENDS")


class ManifestError(ValueError):
    """A manifest that is missing a constant or holds a bad one."""


@dataclass(frozen=True)
class Manifest:
    api: str
    devices: dict[str, int]
    hooks: str
    extends: tuple[str, ...] = ()


def manifest_from_module(mod: ModuleType) -> Manifest:
    """Validate a manifest module's constants."""
    where = f"manifest {mod.__name__}"
    declared = {k for k in vars(mod) if k.isupper() and not k.startswith("_")}
    for k in sorted(declared - set(MANIFEST_KEYS)):
        hint = suggest(k, MANIFEST_KEYS)
        raise ManifestError(f"{where}: unknown constant {k}; allowed: {', '.join(MANIFEST_KEYS)}"
                            + (f"; did you mean {hint}?" if hint else ""))
    for k in ("API", "HOOKS"):
        if not isinstance(getattr(mod, k, None), str):
            raise ManifestError(f"{where}: {k} must be a string, got {getattr(mod, k, None)!r}")
    parse_range(mod.API)
    devices = getattr(mod, "DEVICES", {})
    if not isinstance(devices, dict):
        raise ManifestError(f"{where}: DEVICES must be a dict of device name to priority, got {devices!r}")
    for name, prio in devices.items():
        if not isinstance(name, str) or not DEVICE_NAME.fullmatch(name):
            raise ManifestError(f"{where}: device name {name!r} must be upper-case letters and digits")
        if not isinstance(prio, int) or isinstance(prio, bool):
            raise ManifestError(f"{where}: the priority of {name} must be an int, got {prio!r}")
    extends = getattr(mod, "EXTENDS", ())
    if isinstance(extends, str) or not all(isinstance(e, str) and (e == "*" or DEVICE_NAME.fullmatch(e))
                                           for e in extends):
        raise ManifestError(f"{where}: EXTENDS must be a list of device names or '*', got {extends!r}")
    if not devices and not extends:
        raise ManifestError(f"{where}: declares neither DEVICES nor EXTENDS, so it would never be used")
    return Manifest(mod.API, dict(devices), mod.HOOKS, tuple(extends))


def read_manifest(module: str) -> Manifest:
    """Import the manifest module (and its package) and validate it."""
    return manifest_from_module(importlib.import_module(module))
