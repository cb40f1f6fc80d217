"""Choosing the GPU interface the AMD device talks to (config key `devices.AMD.interface`)."""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from tg_core.plugin_api import DeviceUnavailable, collect_named

if TYPE_CHECKING:
    from tg_amd.interface import AMDInterface

KFD_PATH = "/dev/kfd"
MOCK_DIST = "tg-mockgpu"
# interfaces named even where no installed plugin offers them, so that their absence gets its own message
KNOWN_INTERFACES = ("kfd", "mock")


def auto_choice() -> str:
    """What `interface: auto` means on this machine: the kernel driver when there is one, else the mock GPU."""
    return "kfd" if os.path.exists(KFD_PATH) else "mock"


def collect_interfaces(device: str) -> dict[str, type[AMDInterface]]:
    """Interface classes offered through `amd_interfaces()` by the plugins taking part in `device`, by name, in
    plugin order (the first class of each name kept; errors name the plugin at fault)."""
    return collect_named("amd_interfaces", device)


def interface_names(device: str = "AMD") -> tuple[str, ...]:
    """The values `devices.AMD.interface` may take: auto, the known interfaces, and any other one a plugin offers."""
    offered = collect_interfaces(device)
    return ("auto", *KNOWN_INTERFACES, *(n for n in offered if n not in KNOWN_INTERFACES))


def open_interface(device: str, wanted: str) -> tuple[Any, str]:
    """An opened interface for `device` and why it was chosen. `wanted` is the config value ("auto" or a name)."""
    offered = collect_interfaces(device)
    name, why = (auto_choice(), f"auto: {'found' if os.path.exists(KFD_PATH) else 'no'} {KFD_PATH}") \
        if wanted == "auto" else (wanted, "devices.AMD.interface")
    if name not in offered:
        if not offered:
            raise DeviceUnavailable(
                f"{device}: no AMD GPU interface is installed (wanted {name!r}); install the mock GPU with "
                f"`python -m pip install {MOCK_DIST}` (the real KFD interface is not written yet)")
        if name == "kfd":
            raise DeviceUnavailable(
                f"{device}: {KFD_PATH} {'exists' if os.path.exists(KFD_PATH) else 'is absent'} and no plugin "
                f"offers the 'kfd' interface (not written yet); "
                f"use the mock GPU with `devices: {{AMD: {{interface: mock}}}}` in ./tg.yaml; offered: "
                f"{', '.join(offered)}")
        raise DeviceUnavailable(f"{device}: no AMD interface named {name!r} ({why}); offered: {', '.join(offered)}"
                                + (f" (the mock comes with {MOCK_DIST})" if name == "mock" else ""))
    cls = offered[name]
    reason = cls.available()
    if reason is not None:
        raise DeviceUnavailable(f"{device}: interface {name!r} cannot be opened here: {reason}")
    return cls(), why
