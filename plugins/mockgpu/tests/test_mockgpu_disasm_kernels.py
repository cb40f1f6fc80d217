"""Real gfx1100 kernels compiled by llvmlite (LLVM 22): our disassembly of every instruction must equal
llvm-objdump-19's (and, for true16 instructions LLVM 19 cannot print, LLVM 22's own assembly).

Hand-written IR covers what tensor kernels need (f32/f16/f64/i32/i64 arithmetic, integer division, conversions, the
hardware transcendentals, LDS with barriers, loops and divergent branches); the tg-amd renderer adds kernels tg
itself generates.
"""
from __future__ import annotations

import shutil
import subprocess

import numpy as np
import pytest

from tg_core.testing.kernels import capture_kernels, op_matrix_programs
from tg_amd.compiler import AMDCompiler
from tg_amd.device import prepare_kernel
from tg_amd.elf import read_elf
from tg_mockgpu.rdna3.decode import decode_all
from tg_mockgpu.rdna3.disasm import disasm

pytestmark = pytest.mark.skipif(shutil.which("llvm-objdump-19") is None,
                                reason="llvm-objdump-19 (Debian package llvm-19) is not installed")

HEADER = """
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
"""


def ptrs(*names: str) -> str:
    return ", ".join(f"ptr addrspace(1) noalias %{n}" for n in names)


def ir_kernel(name: str, params: str, body: str, decls: tuple[str, ...] = ()) -> str:
    """A 256-work-item kernel whose body starts with %tid, %wg and the global index %i."""
    declare = "".join(f"declare {d}\n" for d in decls)
    return (f"{HEADER}{declare}define amdgpu_kernel void @{name}({params}) "
            f"\"amdgpu-flat-work-group-size\"=\"1,256\" {{\nentry:\n  %tid = call i32 @llvm.amdgcn.workitem.id.x()\n"
            f"  %wg = call i32 @llvm.amdgcn.workgroup.id.x()\n  %wgb = shl i32 %wg, 8\n  %i = add i32 %wgb, %tid\n"
            f"{body}\n}}\n")


P3 = ptrs("out", "a", "b") + ", i32 %n"

KERNELS = {
    # exp2/log2/sqrt/sin/fdiv as LLVM expands them, sdiv by a constant, a gated tail
    "f32_math": ir_kernel("f32_math", P3, """
  %c = icmp slt i32 %i, %n
  br i1 %c, label %body, label %exit
body:
  %pa = getelementptr float, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr float, ptr addrspace(1) %b, i32 %i
  %x = load float, ptr addrspace(1) %pa
  %y = load float, ptr addrspace(1) %pb
  %m = fmul float %x, %y
  %e = call float @llvm.exp2.f32(float %m)
  %s = call float @llvm.sqrt.f32(float %e)
  %q = fdiv float %s, %y
  %sn = call float @llvm.sin.f32(float %q)
  %l = call float @llvm.log2.f32(float %sn)
  %mx = call float @llvm.maxnum.f32(float %l, float %x)
  %fl = call float @llvm.floor.f32(float %mx)
  %tr = call float @llvm.trunc.f32(float %fl)
  %ii = sdiv i32 %i, 7
  %fi = sitofp i32 %ii to float
  %r = fadd float %tr, %fi
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %r, ptr addrspace(1) %po
  br label %exit
exit:
  ret void""", decls=("float @llvm.exp2.f32(float)", "float @llvm.sqrt.f32(float)", "float @llvm.sin.f32(float)",
                      "float @llvm.log2.f32(float)", "float @llvm.maxnum.f32(float, float)",
                      "float @llvm.floor.f32(float)", "float @llvm.trunc.f32(float)")),
    # integer division and remainder by a run-time value, 64-bit integer math, min/max/select, int<->float conversions
    "int_math": ir_kernel("int_math", ptrs("out", "o64", "a") + ", i32 %d, i64 %k", """
  %pa = getelementptr i32, ptr addrspace(1) %a, i32 %i
  %x = load i32, ptr addrspace(1) %pa
  %q = sdiv i32 %x, %d
  %r = urem i32 %x, %d
  %u = udiv i32 %x, 12345
  %s = srem i32 %x, -9
  %t1 = add i32 %q, %r
  %t2 = xor i32 %u, %s
  %mn = call i32 @llvm.smin.i32(i32 %t1, i32 %t2)
  %mx = call i32 @llvm.umax.i32(i32 %mn, i32 %x)
  %ab = call i32 @llvm.abs.i32(i32 %mx, i1 false)
  %f = uitofp i32 %ab to float
  %g = fptosi float %f to i32
  %h = fptoui float %f to i32
  %c = icmp ugt i32 %g, %h
  %sel = select i1 %c, i32 %g, i32 %h
  %x64 = sext i32 %sel to i64
  %m64 = mul i64 %x64, %k
  %sh = lshr i64 %m64, 3
  %as = ashr i64 %m64, 5
  %sum = add i64 %sh, %as
  %dv = sdiv i64 %sum, %k
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %sel, ptr addrspace(1) %po
  %p64 = getelementptr i64, ptr addrspace(1) %o64, i32 %i
  store i64 %dv, ptr addrspace(1) %p64
  ret void""", decls=("i32 @llvm.smin.i32(i32, i32)", "i32 @llvm.umax.i32(i32, i32)", "i32 @llvm.abs.i32(i32, i1)")),
    # half precision arithmetic and conversions, bytes and shorts
    "half": ir_kernel("half", ptrs("out", "a", "b", "c8"), """
  %pa = getelementptr half, ptr addrspace(1) %a, i32 %i
  %pb = getelementptr half, ptr addrspace(1) %b, i32 %i
  %x = load half, ptr addrspace(1) %pa
  %y = load half, ptr addrspace(1) %pb
  %m = fmul half %x, %y
  %s = fadd half %m, 0xH3C00
  %mx = call half @llvm.maxnum.f16(half %s, half %y)
  %e = fpext half %mx to float
  %ex = call float @llvm.exp2.f32(float %e)
  %t = fptrunc float %ex to half
  %cmp = fcmp olt half %t, %x
  %sel = select i1 %cmp, half %t, half %x
  %pc = getelementptr i8, ptr addrspace(1) %c8, i32 %i
  %byte = load i8, ptr addrspace(1) %pc
  %bi = sext i8 %byte to i16
  %bh = sitofp i16 %bi to half
  %r = fsub half %sel, %bh
  %po = getelementptr half, ptr addrspace(1) %out, i32 %i
  store half %r, ptr addrspace(1) %po
  %ti = fptosi half %r to i8
  store i8 %ti, ptr addrspace(1) %pc
  ret void""", decls=("half @llvm.maxnum.f16(half, half)", "float @llvm.exp2.f32(float)")),
    # 16-bit math on both halves of packed data: VOP3 true16 forms (op_sel halves), 16-bit integers, f16 compares
    "half_packed": ir_kernel("half_packed", ptrs("out", "a", "o16"), """
  %pa = getelementptr <2 x half>, ptr addrspace(1) %a, i32 %i
  %v = load <2 x half>, ptr addrspace(1) %pa
  %x = extractelement <2 x half> %v, i32 0
  %y = extractelement <2 x half> %v, i32 1
  %f = call half @llvm.fma.f16(half %x, half %y, half %x)
  %s = call half @llvm.sqrt.f16(half %f)
  %e = call half @llvm.exp2.f16(half %s)
  %fl = call half @llvm.floor.f16(half %e)
  %mn = call half @llvm.minnum.f16(half %fl, half %y)
  %c = fcmp ugt half %mn, %x
  %sel = select i1 %c, half %mn, half 0xH4000
  %k0 = fptosi half %sel to i16
  %j = add i16 %k0, 7
  %k = mul i16 %j, %k0
  %sh = shl i16 %k, 2
  %cmp = icmp slt i16 %sh, 100
  %z = zext i1 %cmp to i16
  %w = sitofp i16 %z to half
  %r = insertelement <2 x half> %v, half %w, i32 1
  %po = getelementptr <2 x half>, ptr addrspace(1) %out, i32 %i
  store <2 x half> %r, ptr addrspace(1) %po
  %p16 = getelementptr i16, ptr addrspace(1) %o16, i32 %i
  store i16 %sh, ptr addrspace(1) %p16
  ret void""", decls=("half @llvm.fma.f16(half, half, half)", "half @llvm.sqrt.f16(half)", "half @llvm.exp2.f16(half)",
                      "half @llvm.floor.f16(half)", "half @llvm.minnum.f16(half, half)")),
    # double precision: arithmetic, division, conversions
    "f64": ir_kernel("f64", ptrs("out", "a"), """
  %pa = getelementptr double, ptr addrspace(1) %a, i32 %i
  %x = load double, ptr addrspace(1) %pa
  %m = fmul double %x, 3.0
  %d = fdiv double %m, %x
  %s = call double @llvm.sqrt.f64(double %d)
  %fi = sitofp i32 %i to double
  %r = fadd double %s, %fi
  %f = fptrunc double %r to float
  %back = fpext float %f to double
  %c = fcmp ogt double %back, %x
  %sel = select i1 %c, double %back, double %x
  %po = getelementptr double, ptr addrspace(1) %out, i32 %i
  store double %sel, ptr addrspace(1) %po
  ret void""", decls=("double @llvm.sqrt.f64(double)",)),
    # a workgroup reduction: a strided loop, LDS tree with barriers, divergent control flow, wave 0 writes
    "lds_reduce": """
@lds = internal addrspace(3) global [256 x float] undef, align 16
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
define amdgpu_kernel void @lds_reduce(ptr addrspace(1) noalias %out, ptr addrspace(1) noalias %in, i32 %n)
    "amdgpu-flat-work-group-size"="1,256" {
entry:
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %base = mul i32 %g, 4096
  br label %loop
loop:
  %j = phi i32 [ %t, %entry ], [ %jn, %loop ]
  %acc = phi float [ 0.0, %entry ], [ %accn, %loop ]
  %idx = add i32 %base, %j
  %p = getelementptr inbounds float, ptr addrspace(1) %in, i32 %idx
  %v = load float, ptr addrspace(1) %p
  %accn = fadd float %acc, %v
  %jn = add i32 %j, 256
  %more = icmp ult i32 %jn, %n
  br i1 %more, label %loop, label %tree
tree:
  %lp = getelementptr inbounds [256 x float], ptr addrspace(3) @lds, i32 0, i32 %t
  store float %accn, ptr addrspace(3) %lp
  br label %step
step:
  %w = phi i32 [ 128, %tree ], [ %wn, %next ]
  fence syncscope("workgroup") release
  call void @llvm.amdgcn.s.barrier()
  fence syncscope("workgroup") acquire
  %active = icmp ult i32 %t, %w
  br i1 %active, label %add, label %next
add:
  %o = add i32 %t, %w
  %op = getelementptr inbounds [256 x float], ptr addrspace(3) @lds, i32 0, i32 %o
  %a = load float, ptr addrspace(3) %op
  %b = load float, ptr addrspace(3) %lp
  %s = fadd float %a, %b
  store float %s, ptr addrspace(3) %lp
  br label %next
next:
  %wn = lshr i32 %w, 1
  %again = icmp ne i32 %wn, 0
  br i1 %again, label %step, label %done
done:
  %first = icmp eq i32 %t, 0
  br i1 %first, label %write, label %exit
write:
  %r = load float, ptr addrspace(3) @lds
  %q = getelementptr inbounds float, ptr addrspace(1) %out, i32 %g
  store float %r, ptr addrspace(1) %q
  br label %exit
exit:
  ret void
}
""",
    # many loads with immediate offsets and vector math: the clause/VOPD/waitcnt chains of unrolled kernels
    "unrolled": ir_kernel("unrolled", ptrs("out", "a"), """
  %base = mul i32 %i, 16
  %p0 = getelementptr float, ptr addrspace(1) %a, i32 %base
""" + "".join(f"""  %p{k} = getelementptr float, ptr addrspace(1) %p0, i32 {k}
  %v{k} = load float, ptr addrspace(1) %p{k}
  %e{k} = fmul float %v{k}, {1.0 + k}
""" for k in range(1, 16)) + "  %s2 = fadd float %e1, %e2\n" + "".join(
        f"  %s{k} = fadd float %s{k - 1}, %e{k}\n" for k in range(3, 16)) + """
  %mx = call float @llvm.maxnum.f32(float %s15, float %e3)
  %po = getelementptr float, ptr addrspace(1) %out, i32 %i
  store float %mx, ptr addrspace(1) %po
  ret void""", decls=("float @llvm.maxnum.f32(float, float)",)),
}


def objdump_lines(obj: bytes, tmp_path) -> list[str]:
    path = tmp_path / "k.o"
    path.write_bytes(obj)
    out = subprocess.run(["llvm-objdump-19", "-d", "--mcpu=gfx1100", str(path)], capture_output=True, text=True,
                         check=True)
    # instruction lines start with a tab; the text ends where objdump's "// address: words" comment starts
    return [line.split("//")[0].strip() for line in out.stdout.splitlines() if line.startswith("\t")]


def llvm22_lines(asm: str) -> list[str]:
    """The instructions of LLVM 22's own assembly output (llvmlite emit_assembly), without directives and labels."""
    return [" ".join(line.split()) for line in asm.splitlines()
            if line.startswith("\t") and not line.startswith(("\t.", "\t\t")) and not line.strip().endswith(":")]


def compare(ir: str, tmp_path) -> tuple[int, int]:
    """Our text for every instruction against llvm-objdump-19; instructions with 16-bit operands (true16 forms,
    which LLVM 19 cannot print) against LLVM 22's assembly of the same kernel instead. Returns (lines compared, how
    many of them against LLVM 22)."""
    comp = AMDCompiler()
    obj = comp.compile(ir)
    ref, asm = objdump_lines(obj, tmp_path), llvm22_lines(comp.assembly(ir))
    text = read_elf(obj).section(".text")
    insts = decode_all(obj[text.offset:text.offset + text.size], kernel="test")
    assert len(ref) == len(insts), f"objdump shows {len(ref)} instructions, we decoded {len(insts)}"
    bad, k, t16 = [], 0, 0
    for n, inst in enumerate(insts):
        mine = disasm(inst)
        # the assembly has no alignment padding (s_nop before loops, s_code_end after the kernel): skip those in step
        if k < len(asm) and (asm[k].split()[0] == mine.split()[0] or inst.op not in ("s_nop", "s_code_end")):
            oracle_22, k = asm[k], k + 1
        else:
            oracle_22 = None
        oracle = oracle_22 if inst.t16 else ref[n]
        t16 += bool(inst.t16)
        if inst.t16 and oracle_22 is None or mine != oracle:
            bad.append(f"{n}: {'LLVM 22' if inst.t16 else 'objdump'} {oracle!r}\n   ours {mine!r}")
    assert k == len(asm), f"{len(asm) - k} instructions of LLVM 22's assembly left unmatched"
    assert not bad, f"{len(bad)} of {len(insts)} lines differ:\n" + "\n".join(bad[:20])
    return len(insts), t16


@pytest.mark.parametrize("name", KERNELS)
def test_hand_written_kernel_disassembly_matches_objdump(name: str, tmp_path) -> None:
    lines, t16 = compare(KERNELS[name], tmp_path)
    assert lines > 20 and (t16 >= 8 if name.startswith("half") else True)


def _tensor_programs() -> None:
    from tg_core.tensor import Tensor
    rng = np.random.default_rng(0)
    a = Tensor(rng.standard_normal((33, 65)).astype(np.float32), device="PYTHON")
    b = Tensor(rng.standard_normal((65, 17)).astype(np.float32), device="PYTHON")
    (a @ b).relu().sum(axis=1).numpy()
    (a.exp2() * 2 + a.sqrt().sin()).max(axis=0).numpy()
    Tensor(rng.integers(-1000, 1000, 300).astype(np.int32), device="PYTHON").div(7, rounding_mode="trunc").numpy()
    Tensor(rng.standard_normal(300).astype(np.float16), device="PYTHON").cast("float32").log2().numpy()


def test_tg_kernels_disassembly_matches_objdump(tmp_path) -> None:
    from tg_amd.renderer import AMDRenderer
    asts = capture_kernels(_tensor_programs)
    assert len(asts) >= 4
    r = AMDRenderer()
    lines = sum(compare(r.render(r.program(prepare_kernel(ast).ast)), tmp_path)[0] for ast in asts)
    assert lines > 100


@pytest.mark.slow
def test_op_matrix_kernels_disassembly_matches_objdump(tmp_path) -> None:
    from tg_amd.renderer import AMDRenderer
    asts = capture_kernels(op_matrix_programs)
    assert len(asts) >= 30
    r = AMDRenderer()
    results = [compare(r.render(r.program(prepare_kernel(ast).ast)), tmp_path) for ast in asts]
    assert sum(n for n, _ in results) > 1000 and sum(t for _, t in results) > 0
