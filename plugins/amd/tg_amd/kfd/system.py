"""The process's KFD: one driver (/dev/kfd or a mock's), every GPU of it opened, and memory visible to all of them.

AMD device `AMD:i` is GPU i of this system. Every allocation is mapped on every GPU (MAP_MEMORY_TO_GPU with all
their ids, as amd.md 6 allows), so a queue of one GPU reaches the memory of another: SDMA copies between GPUs, and a
queue waiting on another GPU's signal. The system is opened once per process (the first AMD device to open decides
the mock options, which are per device kind anyway) and closed when the last device closes.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from tg_amd.kfd.driver import KFDGPU, KFDDriver, KFDMemory, MemoryKind
from tg_amd.kfd.oslayer import OSLayer
from tg_amd.kfd.select import open_os


@dataclass
class KFDSystem:
    os: OSLayer
    driver: KFDDriver
    gpus: list[KFDGPU]
    users: int = 0
    closed: bool = False
    lock: threading.RLock = field(default_factory=threading.RLock)

    @property
    def is_mock(self) -> bool:
        return self.os.name != "linux"

    def gpu(self, index: int, device: str) -> KFDGPU:
        if not 0 <= index < len(self.gpus):
            from tg_core.plugin_api import DeviceUnavailable
            raise DeviceUnavailable(f"{device}: there is no AMD GPU {index}; this system has {len(self.gpus)} "
                                    f"(AMD:0..AMD:{len(self.gpus) - 1})"
                                    + (" (the mock's count is devices.AMD.mock_gpus / TG_AMD_MOCK_GPUS)"
                                       if self.is_mock else ""))
        return self.gpus[index]

    def alloc(self, owner: KFDGPU, size: int, kind: MemoryKind) -> KFDMemory:
        """`size` bytes of `kind` memory of `owner`, mapped on every GPU of the system."""
        with self.lock:
            mem = owner.alloc(size, kind)
            try:
                for g in self.gpus:
                    if g is not owner:
                        g.map(mem)
            except BaseException:
                self.free(owner, mem)
                raise
            return mem

    def free(self, owner: KFDGPU, mem: KFDMemory) -> None:
        with self.lock:
            if self.closed:
                return  # closing the driver freed everything
            for g in self.gpus:
                if g is not owner:
                    try:
                        g.unmap(mem)
                    except OSError:
                        pass  # never mapped there (a failed alloc): freeing still releases it
            owner.free(mem)

    def fault_detail(self, gpu_id: int) -> str | None:
        """The text the OS layer gives for a fault of GPU `gpu_id` it reported (a mock's; real KFD gives none)."""
        return self.os.fault_detail(gpu_id)


_systems: dict[tuple[int, int], KFDSystem] = {}
_lock = threading.Lock()


def acquire(device: str, options: dict[str, Any]) -> KFDSystem:
    """The process's KFD system for these mock options (opened now if it is not; on a machine with /dev/kfd
    there is one whatever the options), counted as used by one more device."""
    key = (int(options.get("mock_gpus", 2)), int(options.get("mock_xccs", 1)))
    with _lock:
        # a real /dev/kfd is one system whatever the mock options; mock systems are one per option pair
        system = next((s for s in _systems.values() if not s.is_mock), None) or _systems.get(key)
        if system is None:
            os_layer = open_os(device.split(":")[0], *key)
            driver = KFDDriver(os_layer)
            gpus = [driver.gpu(i) for i in range(len(driver.nodes))]
            system = _systems[key] = KFDSystem(os_layer, driver, gpus)
        system.users += 1
        return system


def release(system: KFDSystem) -> None:
    """One device is done with the system; the last one closes the driver (and a mock's GPUs)."""
    with _lock:
        system.users -= 1
        if system.users > 0 or system.closed:
            return
        for k, v in list(_systems.items()):
            if v is system:
                del _systems[k]
        system.closed = True
        system.driver.close()
        rel = getattr(system.os, "release", None)
        if callable(rel):
            rel()
