"""Core's built-in plugin: the reference device PYTHON, the registry's last resort.

It is registered like any plugin (its manifest is built in, see manager._builtin_record) so that the
registry always has a device. The device itself is tg_core/devices/python/ (device.py and its runtime,
the reference interpreter).
"""
from __future__ import annotations

from tg_core.devices.python import PythonAllocator, PythonDevice
from tg_core.plugins.hookspecs import hookimpl
from tg_core.plugins.specs import DeviceSpec


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    return [DeviceSpec("PYTHON", PythonDevice, description="reference device (slow, exact); always available")]


__all__ = ["PythonAllocator", "PythonDevice", "tg_devices"]
