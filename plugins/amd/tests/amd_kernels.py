"""Kernels the tg-amd tests compile: ASTs rendered by the AMD renderer, and hand-written IR for what tg's codegen
does not make yet (constant tables, LDS with a barrier, scratch)."""
from __future__ import annotations

from tg_core.dtype import dtypes
from tg_core.uop import AxisType, KernelInfo, Ops, UOp
from tg_amd.compiler import AMDCompiler
from tg_amd.device import prepare_kernel
from tg_amd.renderer import AMDRenderer


def kernel(*effects: UOp, name: str) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def saxpy(n: int = 1000) -> UOp:
    """out[i] = a[i]*2 + b[i]; n not a multiple of 256, so the last workgroup is gated."""
    out, a, b = (UOp.param(i, dtypes.float32.ptr(n)) for i in range(3))
    i = UOp.range(n, 0)
    return kernel(out.index(i).store(a.index(i).load() * 2.0 + b.index(i).load()).end(i), name="saxpy")


def rowmax(rows: int = 12, cols: int = 40) -> UOp:
    """out[r, c] = sqrt(max_j exp2(a[r, j])) + c: two parallel ranges (workgroup y and x) and a reduction."""
    a, out = UOp.param(0, dtypes.float32.ptr(rows * cols)), UOp.param(1, dtypes.float32.ptr(rows * cols))
    r, c, j = UOp.range(rows, 0), UOp.range(cols, 1), UOp.range(cols, 2, AxisType.REDUCE)
    m = a.index(r * cols + j).load().exp2().reduce(Ops.MAX, j).sqrt()
    return kernel(out.index(r * cols + c).store(m + c.cast(dtypes.float32)).end(r, c), name="rowmax")


def scaled(n_max: int = 4096) -> UOp:
    """out[i] = a[i] * k for i < n, with n and k int variables: symbolic launch size, int kernargs."""
    n = UOp.variable("n", 1, n_max)
    k = UOp.variable("k", -100, 100)
    a, out = UOp.param(0, dtypes.int32.ptr(n_max)), UOp.param(1, dtypes.int32.ptr(n_max))
    i = UOp.range(n, 0)
    return kernel(out.index(i).store(a.index(i).load() * k.cast(dtypes.int32)).end(i), name="scaled")


# a constant table read at a run-time index: LLVM addresses it with s_getpc_b64 and REL32_LO/HI relocations
TABLE_IR = """
@table = internal addrspace(4) constant [8 x i32] [i32 3, i32 1, i32 4, i32 1, i32 5, i32 9, i32 2, i32 6], align 4
define amdgpu_kernel void @table_lookup(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) "amdgpu-flat-work-group-size"="1,64" {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ip = getelementptr inbounds i32, ptr addrspace(1) %idx, i32 %t
  %i = load i32, ptr addrspace(1) %ip
  %m = and i32 %i, 7
  %vp = getelementptr inbounds [8 x i32], ptr addrspace(4) @table, i32 0, i32 %m
  %v = load i32, ptr addrspace(4) %vp
  %op = getelementptr inbounds i32, ptr addrspace(1) %out, i32 %t
  store i32 %v, ptr addrspace(1) %op
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""

# LDS and a barrier: out[t] = in[255 - t] through a 1 KiB LDS array, 256 work-items (8 waves)
LDS_IR = """
@lds = internal addrspace(3) global [256 x float] undef, align 16
define amdgpu_kernel void @lds_reverse(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) "amdgpu-flat-work-group-size"="1,256" {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ip = getelementptr inbounds float, ptr addrspace(1) %in, i32 %t
  %v = load float, ptr addrspace(1) %ip
  %lp = getelementptr inbounds [256 x float], ptr addrspace(3) @lds, i32 0, i32 %t
  store float %v, ptr addrspace(3) %lp
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %r = sub i32 255, %t
  %rp = getelementptr inbounds [256 x float], ptr addrspace(3) @lds, i32 0, i32 %r
  %w = load float, ptr addrspace(3) %rp
  %op = getelementptr inbounds float, ptr addrspace(1) %out, i32 %t
  store float %w, ptr addrspace(1) %op
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
declare void @llvm.amdgcn.s.barrier()
"""

# a private array indexed at run time stays in scratch memory
SCRATCH_IR = """
define amdgpu_kernel void @scratch_pick(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) "amdgpu-flat-work-group-size"="1,32" {
entry:
  %arr = alloca [64 x i32], align 4, addrspace(5)
  br label %fill
fill:
  %j = phi i32 [0, %entry], [%jn, %fill]
  %p = getelementptr inbounds [64 x i32], ptr addrspace(5) %arr, i32 0, i32 %j
  %sq = mul i32 %j, %j
  store volatile i32 %sq, ptr addrspace(5) %p
  %jn = add i32 %j, 1
  %more = icmp slt i32 %jn, 64
  br i1 %more, label %fill, label %done
done:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ip = getelementptr inbounds i32, ptr addrspace(1) %idx, i32 %t
  %i = load i32, ptr addrspace(1) %ip
  %m = and i32 %i, 63
  %q = getelementptr inbounds [64 x i32], ptr addrspace(5) %arr, i32 0, i32 %m
  %v = load volatile i32, ptr addrspace(5) %q
  %op = getelementptr inbounds i32, ptr addrspace(1) %out, i32 %t
  store i32 %v, ptr addrspace(1) %op
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


# a pointer stored in constant data: an ABS64 relocation, which depends on where the image is loaded
ABS_IR = """
@table = internal addrspace(4) constant [4 x i32] [i32 11, i32 22, i32 33, i32 44], align 4
@ptrs = internal addrspace(4) constant [1 x ptr addrspace(4)] [ptr addrspace(4) @table], align 8
define amdgpu_kernel void @via_pointer(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %idx) "amdgpu-flat-work-group-size"="1,32" {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %ip = getelementptr inbounds i32, ptr addrspace(1) %idx, i32 %t
  %i = load i32, ptr addrspace(1) %ip
  %m = and i32 %i, 3
  %pp = load volatile ptr addrspace(4), ptr addrspace(4) @ptrs
  %vp = getelementptr inbounds i32, ptr addrspace(4) %pp, i32 %m
  %v = load i32, ptr addrspace(4) %vp
  %op = getelementptr inbounds i32, ptr addrspace(1) %out, i32 %t
  store i32 %v, ptr addrspace(1) %op
  ret void
}
declare i32 @llvm.amdgcn.workitem.id.x()
"""


def compile_ast(ast: UOp) -> tuple[bytes, str]:
    """(ELF object, kernel name) of an AST through the AMD device's prepare stage and renderer."""
    r = AMDRenderer()
    prog = r.program(prepare_kernel(ast).ast)
    return AMDCompiler().compile(r.render(prog)), r.function_name(prog)


def compile_ir(src: str) -> bytes:
    return AMDCompiler().compile('target triple = "amdgcn-amd-amdhsa"\n' + src)
