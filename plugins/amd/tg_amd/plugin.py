"""tg-amd's hooks: the AMD device (its queue matchers: encode, lower, bufferize), its renderer, its named kernels
for core's LLM code (tg_amd/kernels), and the `amd_kfd_os` hook spec for mock KFD drivers."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from tg_core.plugin_api import DeviceSpec, Option, hookimpl

if TYPE_CHECKING:
    from tg_core.plugin_api import PatternMatcher, Renderer


@hookimpl
def tg_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    from tg_amd import hookspecs
    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    from tg_amd.device import QUEUE_KINDS, AMDDevice
    from tg_amd.kfd.select import KFD_PATH, kfd_choice
    return [DeviceSpec("AMD", AMDDevice, description=(
        f"AMD gfx1100 (RDNA3, wave32) on command queues through the KFD: {KFD_PATH}, or tg-mockgpu's mock KFD "
        f"where there is none; here: {kfd_choice()}"), options={
        "interface": Option(str, "auto", "the GPU interface: 'kfd' (the kernel driver's /dev/kfd, or the mock KFD "
                                         "driver of tg-mockgpu when there is none); 'auto' is kfd",
                            choices=("auto", "kfd")),
        "queue": Option(str, "pm4", "the compute queue: 'pm4' (PM4 packets, the command buffer as an "
                                    "INDIRECT_BUFFER) or 'aql' (AQL kernel-dispatch and vendor packets)",
                        choices=QUEUE_KINDS),
        # the mock KFD driver (tg-mockgpu, tg_amd/kfd/select.py) behind the KFD interface where no /dev/kfd exists
        "mock_gpus": Option(int, 2, "GPUs the mock KFD driver presents", minimum=1, maximum=64),
        "mock_xccs": Option(int, 1, "XCCs (compute dies) of each mock GPU", minimum=1, maximum=8),
    })]


@hookimpl
def tg_pm_encode(device: str) -> PatternMatcher | None:
    if device.split(":")[0] != "AMD":
        return None
    from tg_amd.queues.rules import device_pm_encode
    return device_pm_encode()


@hookimpl
def tg_pm_lower(device: str) -> PatternMatcher | None:
    if device.split(":")[0] != "AMD":
        return None
    from tg_amd.queues.rules import pm_lower
    return pm_lower(None)


@hookimpl
def tg_pm_bufferize(device: str) -> PatternMatcher | None:
    if device.split(":")[0] != "AMD":
        return None
    from tg_amd.device import pm_bufferize
    return pm_bufferize


@hookimpl
def tg_renderers(device: str) -> list[type[Renderer]]:
    if device.split(":")[0] != "AMD":
        return []
    from tg_amd.renderer import AMDRenderer
    return [AMDRenderer]


@hookimpl
def tg_kernels(device: str) -> list:
    if device.split(":")[0] != "AMD":
        return []
    from tg_amd.kernels import named_kernels
    return named_kernels()
