"""The OS layer: every operating-system call the KFD interface makes goes through one of these objects.

`OSLayer` is what the driver (tg_amd/kfd/driver.py) asks of the OS: open/close a device file, read a sysfs file,
list a sysfs directory, ioctl, mmap/munmap, and `write64`, a 64-bit store to mapped device memory (a doorbell):
on hardware that store is an MMIO write, and routing it here is what lets a mock driver see it. `RealOS` does
these with os, fcntl and libc's mmap (Python's mmap module cannot map at a fixed address); tg-mockgpu's
`MockKFD` answers them for emulated GPUs. Failures are OSError (errno and the call named), as from the kernel.
"""
from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
from typing import ClassVar, Protocol, runtime_checkable

PROT_NONE, PROT_READ, PROT_WRITE = 0, mmap.PROT_READ, mmap.PROT_WRITE
MAP_SHARED, MAP_PRIVATE, MAP_ANONYMOUS = mmap.MAP_SHARED, mmap.MAP_PRIVATE, mmap.MAP_ANONYMOUS
MAP_FIXED = 0x10
MAP_NORESERVE = 0x4000


@runtime_checkable
class OSLayer(Protocol):
    """The OS calls of the KFD interface. `name` says which OS this is ("linux" or "mock")."""
    name: ClassVar[str]

    def open(self, path: str, flags: int) -> int: ...
    def close(self, fd: int) -> None: ...
    def read(self, path: str) -> str:
        """The text of a (sysfs) file."""
        ...
    def listdir(self, path: str) -> list[str]: ...
    def exists(self, path: str) -> bool: ...
    def ioctl(self, fd: int, request: int, args: ctypes.Structure) -> None:
        """Run ioctl `request` with `args` in place (the driver fills the out fields)."""
        ...
    def fault_detail(self, gpu_id: int) -> str | None:
        """What a reported GPU fault was, in words, when the OS layer knows (a mock driver); None on real KFD."""
        ...
    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        """Map and return the address (`addr` with MAP_FIXED: exactly there; fd -1 with MAP_ANONYMOUS)."""
        ...
    def munmap(self, addr: int, size: int) -> None: ...
    def write64(self, addr: int, value: int) -> None:
        """A 64-bit store to mapped device memory (a doorbell)."""
        ...


class _Libc:
    """libc's mmap/munmap through ctypes, loaded on first use."""
    _lib: ClassVar[ctypes.CDLL | None] = None

    @classmethod
    def get(cls) -> ctypes.CDLL:
        if cls._lib is None:
            lib = ctypes.CDLL(None, use_errno=True)
            lib.mmap.restype = ctypes.c_void_p
            lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                 ctypes.c_long]
            lib.munmap.restype = ctypes.c_int
            lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
            cls._lib = lib
        return cls._lib


def host_mmap(addr: int, size: int, prot: int, flags: int, fd: int = -1, offset: int = 0) -> int:
    """libc mmap; OSError naming the call on failure. Shared by RealOS and mock drivers (whose host-visible
    memory is real host memory mapped at the GPU VA)."""
    res = _Libc.get().mmap(addr or None, size, prot, flags, fd, offset)
    if res is None or res == ctypes.c_void_p(-1).value:
        err = ctypes.get_errno()
        raise OSError(err, f"mmap(addr={addr:#x}, size={size:#x}, prot={prot}, flags={flags:#x}, fd={fd}, "
                           f"offset={offset:#x}): {os.strerror(err)}")
    return int(res)


def host_munmap(addr: int, size: int) -> None:
    if _Libc.get().munmap(addr, size) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"munmap({addr:#x}, {size:#x}): {os.strerror(err)}")


class RealOS:
    """The Linux kernel: /dev/kfd, the render nodes and sysfs."""
    name: ClassVar[str] = "linux"

    def fault_detail(self, gpu_id: int) -> str | None:
        return None  # the kernel reports a fault's address and kind through the event data only

    def open(self, path: str, flags: int) -> int:
        return os.open(path, flags)

    def close(self, fd: int) -> None:
        os.close(fd)

    def read(self, path: str) -> str:
        with open(path) as f:
            return f.read()

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def ioctl(self, fd: int, request: int, args: ctypes.Structure) -> None:
        fcntl.ioctl(fd, request, args, True)  # a ctypes struct is a writable buffer

    def mmap(self, addr: int, size: int, prot: int, flags: int, fd: int, offset: int) -> int:
        return host_mmap(addr, size, prot, flags, fd, offset)

    def munmap(self, addr: int, size: int) -> None:
        host_munmap(addr, size)

    def write64(self, addr: int, value: int) -> None:
        ctypes.c_uint64.from_address(addr).value = value
