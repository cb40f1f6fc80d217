"""Hook implementations of tg-mockgpu: the mock KFD driver tg-amd's KFD interface runs on where no /dev/kfd
exists (its GPUs are the RDNA3 emulator behind real command processors)."""
from __future__ import annotations

from tg_core.plugin_api import hookimpl


@hookimpl
def amd_kfd_os() -> list[type]:
    """The mock KFD driver (an OS layer for tg-amd's KFD interface)."""
    from tg_mockgpu.kfd.driver import MockKFD
    return [MockKFD]
