"""Provides CLASH, as does the other clash plugin."""
from tg_core.device import Compiled
from tg_core.plugins import DeviceSpec, hookimpl
from tg_core.plugins.builtin import PythonAllocator


class ClashDevice(Compiled):
    provider = "a"

    def __init__(self, device, options):
        super().__init__(device, PythonAllocator())


@hookimpl
def tg_devices():
    return [DeviceSpec("CLASH", ClashDevice)]
