"""Tests a plugin author runs against their device with pytest.

    # tests/test_conformance.py of your plugin
    from tg_core.testing import DeviceConformance

    class TestMyDevice(DeviceConformance):
        device = "MYDEV"

The device must be installed (its entry point discoverable), as a user would have it.
"""
from tg_core.testing.conformance import BufferConformance, DeviceConformance, OpConformance

__all__ = ["BufferConformance", "DeviceConformance", "OpConformance"]
