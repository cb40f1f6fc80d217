"""MULTI: options of every type, two renderers, matcher hooks and a profiler."""
from tg_core.device import Compiled
from tg_core.plugins import DeviceSpec, Option, hookimpl
from tg_core.plugins.builtin import PythonAllocator
from tg_core.uop import Ops, PatternMatcher, UOp, UPat


class MultiDevice(Compiled):
    def __init__(self, device, options):
        super().__init__(device, PythonAllocator())
        self.options = dict(options)


class FastRenderer:
    name = "FAST"


class ExactRenderer:
    name = "EXACT"


@hookimpl
def tg_devices():
    return [DeviceSpec("MULTI", MultiDevice, description="test device", options={
        "flag": Option(bool, False, "a bool"),
        "count": Option(int, 3, "an int"),
        "scale": Option(float, 1.5, "a float"),
        "mode": Option(str, "fast", "a choice", choices=("fast", "slow")),
    })]


@hookimpl
def tg_renderers(device):
    return [FastRenderer, ExactRenderer] if device.startswith("MULTI") else []


@hookimpl
def tg_pm_encode(device):
    return PatternMatcher([(UPat(Ops.CONST, arg=1, name="x"), lambda x: UOp.const(x.dtype, 10))])


@hookimpl
def tg_pm_lower(device):
    return None


@hookimpl
def tg_profilers(device):
    return ["multi-profiler"]
