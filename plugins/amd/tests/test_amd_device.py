"""The AMD device without a GPU emulator: interface selection and its errors, memory through an interface, and
what a dispatch hands the interface (code object, entry, grid, kernargs) for a recording interface."""
from __future__ import annotations

import struct
from types import SimpleNamespace

import pytest

from tg_core.plugins.errors import DeviceUnavailable
from tg_amd import device as amd_device
from tg_amd import select
from tg_amd.interface import AMDInterface, CodeObject, GPUBuffer
from tg_amd.renderer import AMDRenderer

from amd_kernels import rowmax, saxpy, scaled


class RecordingInterface:
    """Host memory at made-up GPU addresses; dispatch records its arguments instead of running anything."""
    name, description, arch = "rec", "records dispatches", "gfx1100"

    def __init__(self) -> None:
        self.mem: dict[int, bytearray] = {}
        self.next_va = 0x7000_0000_0000
        self.dispatches: list[tuple] = []

    @classmethod
    def available(cls) -> str | None:
        return None

    def alloc(self, nbytes: int, align: int = 4096) -> GPUBuffer:
        va = self.next_va
        self.next_va += (nbytes + align - 1) // align * align
        self.mem[va] = bytearray(nbytes)
        return GPUBuffer(va, nbytes, va)

    def free(self, buf: GPUBuffer) -> None:
        del self.mem[buf.handle]

    def copyin(self, buf: GPUBuffer, src: memoryview, offset: int = 0) -> None:
        at = buf.va - buf.handle + offset
        self.mem[buf.handle][at:at + len(src)] = src

    def copyout(self, dest: memoryview, buf: GPUBuffer, offset: int = 0) -> None:
        at = buf.va - buf.handle + offset
        dest[:] = self.mem[buf.handle][at:at + len(dest)]

    def dispatch(self, code: CodeObject, entry: str, global_size, local_size, kernargs: bytes) -> None:
        self.dispatches.append((code, entry, global_size, local_size, kernargs))

    def close(self) -> None:
        self.mem.clear()


@pytest.fixture
def dev(monkeypatch) -> amd_device.AMDDevice:
    monkeypatch.setattr(amd_device, "open_interface", lambda device, wanted: (RecordingInterface(), "test"))
    d = amd_device.AMDDevice("AMD", {"interface": "rec"})
    d.renderer = AMDRenderer
    return d


def test_recording_interface_satisfies_the_protocol():
    assert isinstance(RecordingInterface(), AMDInterface)


def test_memory_through_the_interface(dev):
    a = dev.allocator.alloc(64)
    dev.allocator.copyin(a, memoryview(bytes(range(64))))
    view = dev.allocator.offset(a, 16, 8)
    out = bytearray(8)
    dev.allocator.copyout(memoryview(out), view)
    assert out == bytes(range(16, 24)) and view.va == a.va + 16
    with pytest.raises(ValueError, match="outside the 64-byte buffer"):
        a.view(60, 8)
    assert "via rec" in repr(dev)


def _bufs(*vas: int) -> list:
    return [SimpleNamespace(opaque=GPUBuffer(va, 4096)) for va in vas]


def test_dispatch_gets_grid_and_kernargs(dev):
    dev.get_runner(saxpy(1000))(_bufs(0x1000, 0x2000, 0x3000), {})
    code, entry, grid, local, args = dev.interface.dispatches[-1]
    assert entry == "saxpy" and grid == (4, 1, 1) and local == (256, 1, 1)
    assert len(args) == code.kernel("saxpy").descriptor.kernarg_size == 24
    assert struct.unpack("<3Q", args) == (0x1000, 0x2000, 0x3000)


def test_dispatch_with_variables(dev):
    run = dev.get_runner(scaled())
    run(_bufs(0x10000, 0x20000), {"n": 3000, "k": -7})
    code, entry, grid, local, args = dev.interface.dispatches[-1]
    assert grid == (12, 1, 1) and local == (256, 1, 1)
    assert struct.unpack("<2Q2i", args) == (0x10000, 0x20000, -7, 3000)  # variables by name: k, n
    assert dev.get_runner(scaled()) is run  # one runner per kernel
    run(_bufs(0x10000, 0x20000), {"n": 0, "k": 1})
    assert len(dev.interface.dispatches) == 1  # an empty launch is not dispatched


def test_two_dimensional_launch(dev):
    dev.get_runner(rowmax())(_bufs(0x1000, 0x2000), {})
    assert dev.interface.dispatches[-1][2:4] == ((1, 12, 1), (40, 1, 1))


def test_no_interface_plugin_names_tg_mockgpu(monkeypatch):
    monkeypatch.setattr(select, "collect_interfaces", lambda device: {})
    monkeypatch.setattr(select, "auto_choice", lambda: "mock")
    with pytest.raises(DeviceUnavailable, match="install the mock GPU with `python -m pip install tg-mockgpu`"):
        select.open_interface("AMD", "auto")


def test_interface_selection(monkeypatch):
    monkeypatch.setattr(select, "collect_interfaces", lambda device: {"rec": RecordingInterface})
    iface, why = select.open_interface("AMD", "rec")
    assert isinstance(iface, RecordingInterface) and why == "devices.AMD.interface"
    with pytest.raises(DeviceUnavailable, match="no AMD interface named 'mock'.*offered: rec.*tg-mockgpu"):
        select.open_interface("AMD", "mock")
    with pytest.raises(DeviceUnavailable, match="no plugin offers the 'kfd' interface"):
        select.open_interface("AMD", "kfd")

    class Absent(RecordingInterface):
        @classmethod
        def available(cls) -> str | None:
            return "no such GPU"
    monkeypatch.setattr(select, "collect_interfaces", lambda device: {"rec": Absent})
    with pytest.raises(DeviceUnavailable, match="cannot be opened here: no such GPU"):
        select.open_interface("AMD", "rec")
