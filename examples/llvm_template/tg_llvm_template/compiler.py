"""LLVM for this host: the renderer's target, LLVM IR -> an object file, and an object file -> a function address.

Compiling and loading are separate stages of the device's pipeline: `compile` (cached per source by core) gives
bytes, `load` places them in memory with MCJIT and looks the kernel up.
"""
from __future__ import annotations

from typing import Any

import llvmlite.binding as llvm

from tg_core.plugin_api import Compiler, LLVMRenderer, decomp, pm_int_pow

llvm.initialize_native_target()
llvm.initialize_native_asmprinter()
TRIPLE, CPU, FEATURES = llvm.get_process_triple(), llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()


def target_machine() -> Any:
    # a new one per use: MCJIT takes ownership of the target machine it is given
    return llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=CPU, features=FEATURES, codemodel="jitdefault")


class HostLLVMRenderer(LLVMRenderer):
    """Core's LLVM IR renderer aimed at this host. Its `name` is what `DEV=HOSTJIT:LLVM` and the config's
    `devices.HOSTJIT.renderers` refer to."""
    name = "LLVM"
    device = "HOSTJIT"
    target_triple = TRIPLE
    data_layout = str(target_machine().target_data)
    # no libm in a JIT-loaded object: exp2/log2/sin/pow become arithmetic, integer pow multiplies
    extra_matcher = decomp + pm_int_pow


class ObjectCompiler(Compiler):
    """LLVM IR text -> a relocatable object file for this host, optimized at `opt_level`."""

    def __init__(self, opt_level: int):
        self.opt_level = opt_level

    def compile(self, src: str) -> bytes:
        try:
            mod = llvm.parse_assembly(src)
            mod.verify()
        except RuntimeError as e:  # the renderer's bug, not the user's: show what LLVM was given
            raise RuntimeError(f"LLVM rejected the rendered kernel: {e}\n{src}") from e
        tm = target_machine()
        pb = llvm.create_pass_builder(tm, llvm.create_pipeline_tuning_options(speed_level=self.opt_level))
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_object(mod)


class LoadedObject:
    """An object file placed in executable memory; `address(name)` is valid while this object lives."""

    def __init__(self, obj: bytes):
        self._engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), target_machine())
        self._engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        self._engine.finalize_object()

    def address(self, name: str) -> int:
        addr = self._engine.get_function_address(name)
        if not addr:
            raise RuntimeError(f"the compiled object has no function {name!r}")
        return addr
