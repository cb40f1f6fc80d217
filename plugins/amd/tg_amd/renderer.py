"""The LLVM IR renderer specialized for amdgcn-amd-amdhsa (filled in next)."""
from tg_core.renderer.llvmir import LLVMRenderer


class AMDRenderer(LLVMRenderer):
    name = "LLVM"
    device = "AMD"
    target_triple = "amdgcn-amd-amdhsa"
