"""tg-amd's hooks: the AMD device, its renderer, and the `amd_interfaces` hook spec for interface plugins."""
from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

from tg_core.plugin_api import DeviceSpec, Option, hookimpl

if TYPE_CHECKING:
    from tg_core.plugin_api import Renderer


@hookimpl
def tg_addhooks(pluginmanager: pluggy.PluginManager) -> None:
    from tg_amd import hookspecs
    pluginmanager.add_hookspecs(hookspecs)


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    from tg_amd.device import AMDDevice
    from tg_amd.select import KFD_PATH, auto_choice, interface_names
    return [DeviceSpec("AMD", AMDDevice, description=(
        f"AMD gfx1100 (RDNA3, wave32) through an interface plugin; interface 'auto' is 'kfd' when {KFD_PATH} exists, "
        f"else 'mock' (tg-mockgpu); here: {auto_choice()}"), options={
        "interface": Option(str, "auto", "the GPU interface by name: 'mock' (tg-mockgpu's emulator), 'kfd' (the "
                                         "kernel driver, not written yet) or 'auto'", choices=interface_names),
        # the mock KFD driver (tg-mockgpu, tg_amd/kfd/select.py) behind the KFD interface where no /dev/kfd exists
        "mock_gpus": Option(int, 2, "GPUs the mock KFD driver presents", minimum=1, maximum=64),
        "mock_xccs": Option(int, 1, "XCCs (compute dies) of each mock GPU", minimum=1, maximum=8),
    })]


@hookimpl
def tg_renderers(device: str) -> list[type[Renderer]]:
    if device.split(":")[0] != "AMD":
        return []
    from tg_amd.renderer import AMDRenderer
    return [AMDRenderer]
