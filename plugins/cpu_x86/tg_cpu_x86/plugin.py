"""The hooks of tg-cpu-x86: device CPU and its renderers (X86 first on x86-64 hosts, then LLVM)."""
from __future__ import annotations

import logging
import platform
from typing import TYPE_CHECKING

from tg_core.plugin_api import MIN_WORK, DeviceSpec, Option, hookimpl

if TYPE_CHECKING:
    from tg_core.plugin_api import Renderer

log = logging.getLogger("tg.cpu")
X86_64 = ("x86_64", "amd64")
MAX_THREADS = 1024  # one OS thread per core of a kernel's split: more is a typo, not a machine
# how long a worker of a split kernel polls for its next part, and the caller for a worker's end, before sleeping
# (native_pool.py): waking a sleeping thread on an idle CPU of a VM costs far more than on a busy host
SPIN_US = 1000


def native_renderers() -> list[type[Renderer]]:
    """The renderers generating x86-64 machine code themselves (the host must be x86-64)."""
    from tg_cpu_x86.x86.renderer import X86Renderer
    return [X86Renderer]


def host_renderers() -> list[type[Renderer]]:
    """The renderers for this host, best first; a host that is not x86-64 gets LLVM only, with a message."""
    from tg_cpu_x86.llvm import CPULLVMRenderer
    machine = platform.machine()
    if machine.lower() in X86_64:
        return [*native_renderers(), CPULLVMRenderer]
    log.warning("tg CPU: host machine %s is not x86-64; the X86 renderer needs one, using LLVM", machine)
    return [CPULLVMRenderer]


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    from tg_cpu_x86.device import CPUDevice
    return [DeviceSpec("CPU", CPUDevice, description="this machine's CPU: native x86-64 or LLVM-compiled kernels",
                       options={
                           "threads": Option(int, 0, "cores a large kernel is split across; 0: every core", minimum=0,
                                             maximum=MAX_THREADS),
                           "thread_min_work": Option(int, MIN_WORK, "a kernel with fewer loop iterations than "
                                                                    "this runs on one core", minimum=0),
                           "spin_us": Option(int, SPIN_US, "microseconds a split kernel's worker polls for its next "
                                                        "part before sleeping (0: sleep at once)", minimum=0,
                                             maximum=1_000_000),
                           "count": Option(int, 1, "CPU devices (CPU:0 .. CPU:n-1: separate devices, each with its "
                                                   "own buffers, for multi-device tensors)", minimum=1, maximum=64),
                       })]


@hookimpl
def tg_renderers(device: str) -> list[type[Renderer]]:
    return host_renderers() if device.split(":")[0] == "CPU" else []
