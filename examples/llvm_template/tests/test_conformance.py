"""The template passes core's conformance suite: run `python -m pytest tests` after installing the plugin."""
import numpy as np

from tg_core import Tensor
from tg_core.plugin_api import Device, DeviceConformance


class TestHostJIT(DeviceConformance):
    device = "HOSTJIT"


def test_kernels_run_compiled_code() -> None:
    dev = Device["HOSTJIT"]
    assert dev.renderer.__name__ == "HostLLVMRenderer" and dev.compiler.opt_level == 2  # the option's default
    a = Tensor(np.arange(6, dtype=np.float32), device="HOSTJIT")
    np.testing.assert_array_equal((a * 2 + 1).sum().numpy(), 36)
