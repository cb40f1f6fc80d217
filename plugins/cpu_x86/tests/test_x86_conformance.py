"""The core conformance suite (buffers and the op matrix) on the CPU device rendering with X86; every kernel
compiled meanwhile is also read back by capstone and compared with asm_str."""
import platform

import pytest

from tg_core.device import Device
from tg_core.testing import DeviceConformance
from tg_cpu_x86.x86.renderer import X86Renderer

from x86_harness import CHECKED, check_disassembly

pytestmark = pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="needs an x86-64 host")


@pytest.fixture(autouse=True, scope="module")
def disassemble_every_kernel():
    """Check each kernel the device compiles during this module against capstone."""
    original = X86Renderer.compile

    def checked(self, program):
        k = original(self, program)
        check_disassembly(k)
        return k
    X86Renderer.compile = checked
    Device["CPU:X86"].forget_runners()  # kernels compiled by earlier modules are compiled again, and checked
    yield
    X86Renderer.compile = original


def test_compiled_kernels_are_checked_against_capstone():
    """The fixture really checks: a kernel compiled here goes through capstone. (A test of its own, not an assert
    at module teardown: pytest-xdist may give a worker only this module's buffer tests, which compile nothing.)"""
    from tg_core import Tensor
    before = CHECKED["kernels"]
    Device["CPU:X86"].forget_runners()
    out = (Tensor([1.0, 2.0, 3.0], device="CPU:X86") * 3 + 1).numpy()
    assert out.tolist() == [4.0, 7.0, 10.0]
    assert CHECKED["kernels"] > before


class TestX86Conformance(DeviceConformance):
    device = "CPU:X86"


def _rebuild_renderer(dev) -> None:
    """A new X86 renderer instance (reading TG_X86_ISA again) through the public API: the device keeps its
    instance while the renderer class stays the same."""
    dev.select_renderer("LLVM")
    _ = dev.render_with
    dev.select_renderer("X86")


class TestX86ConformanceAVX2(DeviceConformance):
    """The same suite with TG_X86_ISA=avx2: the ymm code, which an AVX-512 host would otherwise not run (the
    class above runs the host's widest ISA)."""
    device = "CPU:X86"

    @pytest.fixture(autouse=True, scope="class")
    @classmethod
    def avx2_code(cls):
        dev, patch = Device["CPU:X86"], pytest.MonkeyPatch()
        patch.setenv("TG_X86_ISA", "avx2")
        _rebuild_renderer(dev)
        assert dev.render_with.vector_isa == "avx2"
        yield
        patch.undo()
        _rebuild_renderer(dev)
