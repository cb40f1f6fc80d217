"""tg-mockgpu as a plugin: its manifest extends AMD without providing a device, its hook offers the mock interface,
and the interface satisfies tg-amd's AMDInterface protocol (memory round trips through shuffled pages)."""
import numpy as np
import pytest

from tg_core.plugins.manifest import read_manifest
from tg_amd.interface import AMDInterface
from tg_mockgpu import plugin
from tg_mockgpu.interface import MockInterface


def test_manifest_extends_amd():
    m = read_manifest("tg_mockgpu.manifest")
    assert m.devices == {} and m.extends == ("AMD",) and m.hooks == "tg_mockgpu.plugin"


def test_hook_offers_the_mock_kfd():
    from tg_mockgpu.kfd.driver import MockKFD
    assert plugin.amd_kfd_os() == [MockKFD]


def test_interface_protocol_and_copies():
    gpu = MockInterface()
    try:
        assert isinstance(gpu, AMDInterface) and gpu.arch == "gfx1100"
        data = np.random.default_rng(0).integers(0, 256, 3 * 4096 + 100, dtype=np.uint8)
        buf = gpu.alloc(len(data))
        gpu.copyin(buf, memoryview(data.tobytes()))
        part = bytearray(5000)
        gpu.copyout(memoryview(part), buf, offset=3000)
        assert bytes(part) == data[3000:8000].tobytes()
        view = buf.view(4000, 200)
        gpu.copyin(view, memoryview(b"\x07" * 200))
        back = bytearray(len(data))
        gpu.copyout(memoryview(back), buf)
        want = data.copy()
        want[4000:4200] = 7
        assert bytes(back) == want.tobytes()
        with pytest.raises(ValueError, match="outside the 200-byte buffer"):
            gpu.copyin(view, memoryview(b"\x00" * 201))
        with pytest.raises(ValueError, match="free of a view"):
            gpu.free(view)
        gpu.free(buf)
    finally:
        gpu.close()
