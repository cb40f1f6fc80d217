"""`tg demo` trains on the CPU device's LLVM path to the accuracy it reaches on the reference device."""
import io

import pytest

from tg_core.demo import train
from tg_core.device import Device

pytest.importorskip("llvmlite.binding")


@pytest.fixture
def cpu_llvm_default():
    dev = Device["CPU"]
    renderer, default = dev.renderer.name, Device.default_with_reason()
    dev.select_renderer("LLVM")
    Device.DEFAULT = "CPU"
    yield
    dev.select_renderer(renderer)
    Device._default = default


@pytest.mark.slow
def test_demo_trains_on_cpu_llvm(cpu_llvm_default):
    out = io.StringIO()
    acc = train(epochs=12, out=out, progress=False)
    text = out.getvalue()
    assert "on CPU" in text.splitlines()[0], text
    assert acc >= 0.95, text
