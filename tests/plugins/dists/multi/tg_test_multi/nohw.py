"""NOHW: its hardware is never present."""
from tg_core.device import Compiled
from tg_core.plugins import DeviceSpec, DeviceUnavailable, hookimpl


class NoHardware(Compiled):
    def __init__(self, device, options):
        raise DeviceUnavailable("no /dev/nohw on this machine")


@hookimpl
def tg_devices():
    return [DeviceSpec("NOHW", NoHardware)]
