"""Which OS layer the KFD interface runs on: the real kernel where /dev/kfd exists, else a mock driver a plugin
offers through the `amd_kfd_os()` hook (tg-mockgpu's `MockKFD`), with the mock options of `devices.AMD`."""
from __future__ import annotations

import os
from typing import Any

from tg_amd.kfd.oslayer import OSLayer, RealOS

KFD_PATH = "/dev/kfd"
MOCK_DIST = "tg-mockgpu"


class KFDUnavailable(RuntimeError):
    """Neither /dev/kfd nor a mock KFD driver is there."""


def mock_kfd_classes(device: str = "AMD") -> dict[str, Any]:
    """The mock KFD drivers offered through `amd_kfd_os()`; the hook exists once tg has loaded tg-amd (opening
    or listing the AMD device does)."""
    from tg_core.plugin_api import collect_named
    return collect_named("amd_kfd_os", device)


def kfd_choice() -> str:
    """Which KFD the AMD device opens on this machine, in words (for `tg devices`; asks no plugin hook, since it
    runs while tg-amd's own devices are being listed)."""
    import importlib.util
    if os.path.exists(KFD_PATH):
        return KFD_PATH
    if importlib.util.find_spec("tg_mockgpu") is not None:
        return f"no {KFD_PATH}: the mock KFD driver ({MOCK_DIST})"
    return f"no {KFD_PATH} and no mock KFD driver (install {MOCK_DIST})"


def open_os(device: str = "AMD", mock_gpus: int = 2, mock_xccs: int = 1, prefer_mock: bool = False,
            mocks: dict[str, Any] | None = None) -> OSLayer:
    """The real OS when /dev/kfd exists (unless `prefer_mock`), else the first mock KFD driver offered, built for
    `mock_gpus` GPUs of `mock_xccs` XCCs. `mocks` replaces the hook's answer (tests)."""
    if os.path.exists(KFD_PATH) and not prefer_mock:
        return RealOS()
    offered = mock_kfd_classes(device) if mocks is None else mocks
    if not offered:
        raise KFDUnavailable(
            f"{device}: the KFD interface needs {KFD_PATH} (the amdgpu kernel driver with KFD: a Linux kernel with "
            f"CONFIG_HSA_AMD and an AMD GPU) or a mock KFD driver: install `python -m pip install {MOCK_DIST}`")
    cls = next(iter(offered.values()))
    os_layer: OSLayer = cls(gpus=mock_gpus, xccs=mock_xccs)
    return os_layer
