"""RealOS, the OS layer of real hardware, on what this machine has: files, directories, anonymous and fixed
mmaps, 64-bit stores, and an ioctl the kernel refuses (named by the driver's wrapper)."""
from __future__ import annotations

import ctypes
import errno
import os

import pytest

from tg_amd.kfd.driver import call
from tg_amd.kfd.oslayer import (
    MAP_ANONYMOUS,
    MAP_FIXED,
    MAP_NORESERVE,
    MAP_PRIVATE,
    MAP_SHARED,
    PROT_NONE,
    PROT_READ,
    PROT_WRITE,
    OSLayer,
    RealOS,
)


def test_files_and_directories(tmp_path):
    (tmp_path / "node").mkdir()
    (tmp_path / "node" / "gpu_id").write_text("4096\n")
    real = RealOS()
    assert isinstance(real, OSLayer) and real.name == "linux"
    assert real.listdir(str(tmp_path)) == ["node"] and real.read(str(tmp_path / "node" / "gpu_id")) == "4096\n"
    assert real.exists(str(tmp_path / "node")) and not real.exists(str(tmp_path / "nothing"))
    fd = real.open(str(tmp_path / "node" / "gpu_id"), os.O_RDONLY)
    real.close(fd)


def test_reserve_then_map_fixed_then_store():
    real = RealOS()
    va = real.mmap(0, 0x3000, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)
    assert va % 0x1000 == 0
    got = real.mmap(va, 0x3000, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_FIXED, -1, 0)
    assert got == va
    real.write64(va + 0x1ff8, 0x1122_3344_5566_7788)
    assert ctypes.string_at(va + 0x1ff8, 8) == bytes.fromhex("8877665544332211")
    real.munmap(va, 0x3000)


def test_mmap_failure_names_the_call():
    with pytest.raises(OSError, match=r"mmap\(addr=0x0, size=0x1000, prot=3, flags=0x1, fd=-1, offset=0x0\)") as e:
        RealOS().mmap(0, 0x1000, PROT_READ | PROT_WRITE, MAP_SHARED, -1, 0)  # no fd and not anonymous
    assert e.value.errno == errno.EBADF


def test_an_ioctl_the_kernel_refuses_is_named():
    real = RealOS()
    fd = real.open(os.devnull, os.O_RDWR)
    try:
        with pytest.raises(OSError, match=r"KFD GET_VERSION \(GetVersionArgs\(major_version=0, minor_version=0\)\) "
                                          "failed") as e:
            call(real, fd, "GET_VERSION")
        assert e.value.errno == errno.ENOTTY
    finally:
        real.close(fd)
