"""LLVM IR kernels that tg-mockgpu's benchmark and its tests both run on the emulator (one copy, so the benchmark
times the kernel the tests check)."""

# Each 256-item workgroup sums its slice of `in` through LDS in 8 halving steps separated by barriers and writes
# the sum to out[workgroup]. Kernel name: tree_sum; arguments (out, in).
TREE_SUM = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
@lds = internal addrspace(3) global [256 x float] undef, align 4
define amdgpu_kernel void @tree_sum(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in) #0 {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 256
  %i = add i32 %base, %t
  %p = getelementptr float, ptr addrspace(1) %in, i32 %i
  %v = load float, ptr addrspace(1) %p
  %slot = getelementptr [256 x float], ptr addrspace(3) @lds, i32 0, i32 %t
  store float %v, ptr addrspace(3) %slot
  br label %loop
loop:
  %s = phi i32 [128, %entry], [%s2, %next]
  call void @llvm.amdgcn.s.barrier()
  %act = icmp ult i32 %t, %s
  br i1 %act, label %add, label %next
add:
  %o = add i32 %t, %s
  %op = getelementptr [256 x float], ptr addrspace(3) @lds, i32 0, i32 %o
  %a = load float, ptr addrspace(3) %slot
  %b = load float, ptr addrspace(3) %op
  %c = fadd float %a, %b
  store float %c, ptr addrspace(3) %slot
  br label %next
next:
  %s2 = lshr i32 %s, 1
  %more = icmp ne i32 %s2, 0
  br i1 %more, label %loop, label %fin
fin:
  call void @llvm.amdgcn.s.barrier()
  %first = icmp eq i32 %t, 0
  br i1 %first, label %w, label %end
w:
  %r = load float, ptr addrspace(3) @lds
  %po = getelementptr float, ptr addrspace(1) %out, i32 %g
  store float %r, ptr addrspace(1) %po
  br label %end
end:
  ret void
}
attributes #0 = { "amdgpu-flat-work-group-size"="1,256" }
"""
