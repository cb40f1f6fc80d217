"""Registering the reference HCQ device (refdev.py) for tests and benchmarks, and its plugin hooks.

`hcqref_registry()` builds a plugin registry that has core's built-in plugin (PYTHON) and a plugin `hcqref`
providing the device `HCQREF` (with this module as its hooks module), plus optional test plugins extending it;
`Device.reset(hcqref_registry())` makes it the process's registry. Nothing installed is discovered, so tests see
the same plugins on every machine, and `HCQREF` never appears in `tg devices` nor becomes a default device.

    from tg_core.device import Device
    from tg_core.hcq.testing import hcqref_registry
    Device.reset(hcqref_registry())
    x = Tensor([1.0, 2.0], device="HCQREF")
"""
from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from tg_core.hcq import refisa
from tg_core.plugins.config import load_config
from tg_core.plugins.discovery import PluginRecord
from tg_core.plugins.hookspecs import hookimpl
from tg_core.plugins.manager import PluginRegistry
from tg_core.plugins.manifest import Manifest
from tg_core.plugins.specs import DeviceSpec, Option
from tg_core.plugins.version import API_VERSION_STR

PLUGIN = "hcqref"


def hcqref_registry(extensions: Sequence[tuple[str, str]] = (), order: Sequence[str] = (),
                    env: Mapping[str, str] | None = None, execute: bool = True, cpu: bool = False) -> PluginRegistry:
    """A registry with PYTHON and HCQREF; each of `extensions` is (plugin name, hooks module) of a test plugin that
    extends HCQREF; `order` is the config's plugins.order; `execute=False` sets HCQREF's option `execute` (its
    queues consume commands without running kernels or copies: host time only). `cpu=True` adds the installed
    plugin providing the CPU device, if any (then JIT-linked host programs are compiled, hcq/hostc.py)."""
    home = tempfile.mkdtemp(prefix="tg-hcq-")
    explicit: dict[str, Any] = {"plugins": {"order": list(order)}} if order else {}
    if not execute:
        explicit["devices"] = {refisa.KIND: {"execute": False}}
    records = list(PluginRegistry.create(path=[], env=dict(env or {}), cwd=home, home=home).records)  # core only
    if cpu:
        installed = PluginRegistry.create(env=dict(env or {}), cwd=home, home=home).records
        records += [r for r in installed if r.manifest is not None and "CPU" in r.manifest.devices]
    records.append(PluginRecord(PLUGIN, "tg-core", API_VERSION_STR, f"(test registration) {__name__}", None,
                                manifest=Manifest(f"=={API_VERSION_STR}", {refisa.KIND: 0}, __name__)))
    for name, hooks in extensions:
        records.append(PluginRecord(name, f"tg-test-{name}", "0", f"(test registration) {hooks}", None,
                                    manifest=Manifest(f"=={API_VERSION_STR}", {}, hooks, (refisa.KIND,))))
    reg = PluginRegistry(load_config(explicit or None, dict(env or {}), home, home), records)
    return reg


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    from tg_core.hcq.refdev import HCQRefDevice
    execute = Option(bool, True, "run kernels and copies (false: consume commands only, to measure host time)")
    return [DeviceSpec(refisa.KIND, HCQRefDevice, {"execute": execute},
                       description="reference HCQ device: software queues (tests only)")]


@hookimpl
def tg_pm_encode(device: str) -> Any:
    return refisa.pm_encode


@hookimpl
def tg_pm_lower(device: str) -> Any:
    return refisa.pm_lower


@hookimpl
def tg_pm_bufferize(device: str) -> Any:
    return refisa.pm_bufferize
