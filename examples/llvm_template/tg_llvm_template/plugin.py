"""The hooks: the HOSTJIT device with its options, and the renderer it compiles kernels with."""
from __future__ import annotations

from tg_core.plugin_api import DeviceSpec, Option, Renderer, hookimpl


@hookimpl
def tg_devices() -> list[DeviceSpec]:
    # imported here, not at the top: `tg devices` lists plugins without paying for LLVM's initialization
    from tg_llvm_template.device import HostJITDevice
    return [DeviceSpec("HOSTJIT", HostJITDevice, description="template backend: LLVM IR JIT-compiled for this CPU",
                       options={"opt_level": Option(int, 2, "LLVM's optimization level", minimum=0, maximum=3)})]


@hookimpl
def tg_renderers(device: str) -> list[type[Renderer]]:
    if device.split(":")[0] != "HOSTJIT":
        return []  # any plugin's hook is asked about every device: offer renderers for your own only
    from tg_llvm_template.compiler import HostLLVMRenderer
    return [HostLLVMRenderer]
