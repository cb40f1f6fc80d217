"""Hook implementations of tg-mockgpu: the mock GPU as an interface of tg-amd's AMD device, and the mock KFD
driver the KFD interface runs on where no /dev/kfd exists."""
from __future__ import annotations

from typing import TYPE_CHECKING

from tg_core.plugin_api import hookimpl

if TYPE_CHECKING:
    from tg_amd.interface import AMDInterface


@hookimpl
def amd_interfaces() -> list[type[AMDInterface]]:
    """The mock interface class; tg-amd instantiates it when no real AMD GPU is present."""
    from tg_mockgpu.interface import MockInterface
    return [MockInterface]


@hookimpl
def amd_kfd_os() -> list[type]:
    """The mock KFD driver (an OS layer for tg-amd's KFD interface)."""
    from tg_mockgpu.kfd.driver import MockKFD
    return [MockKFD]
