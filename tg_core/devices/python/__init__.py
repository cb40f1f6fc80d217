"""The PYTHON device: the reference device, always available. device.py is the device (host memory, the
pipeline's trivial stages), interpreter.py its runtime (kernel ASTs run exactly with numpy), the oracle the other
backends are tested against."""
from tg_core.devices.python.device import PythonAllocator, PythonDevice
from tg_core.devices.python.interpreter import plan_kernel, run_kernel

__all__ = ["PythonAllocator", "PythonDevice", "plan_kernel", "run_kernel"]
