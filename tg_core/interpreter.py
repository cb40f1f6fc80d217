"""The reference interpreter's public name: `tg_core.interpreter.run_kernel` is what plugin guides and templates
tell backends to check against (examples/plugin_template/README.md). It lives beside its device, in
tg_core/devices/python/interpreter.py."""
from tg_core.devices.python.interpreter import plan_kernel, run_kernel

__all__ = ["plan_kernel", "run_kernel"]
