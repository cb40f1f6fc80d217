"""The AMD renderer and compiler without a GPU: the IR it writes, what LLVM makes of it for gfx1100 (assembly,
descriptor, metadata), and the kernarg layout against LLVM's own metadata."""
from __future__ import annotations

import pytest

from tg_core.codegen import linearize_kernel
from tg_core.dtype import AddrSpace, dtypes
from tg_core.uop import Ops, UOp
from tg_amd.compiler import AMDCompiler
from tg_amd.device import prepare_kernel
from tg_amd.elf import load_code_object
from tg_amd.interface import KernelDescriptor, KernelSymbol
from tg_amd.kernargs import pack_kernargs
from tg_amd.renderer import AMDRenderer, kernarg_layout

from amd_kernels import compile_ast, kernel, rowmax, saxpy, scaled


def render(ast: UOp) -> str:
    r = AMDRenderer()
    return r.render(r.program(prepare_kernel(ast).ast))


def test_kernel_signature_and_ids():
    src = render(saxpy())
    assert ("define amdgpu_kernel void @saxpy(ptr addrspace(1) noalias %data0, ptr addrspace(1) noalias %data1, "
            "ptr addrspace(1) noalias %data2)") in src
    assert '"amdgpu-flat-work-group-size"="1,256"' in src
    assert "@llvm.amdgcn.workgroup.id.x()" in src and "@llvm.amdgcn.workitem.id.x()" in src
    src2 = render(rowmax())
    assert "@llvm.amdgcn.workgroup.id.y()" in src2 and '"amdgpu-flat-work-group-size"="1,40"' in src2


def test_o2_pipeline_keeps_only_the_kernarg_pointer():
    """default<O2> runs the AMDGPU attributor: no dispatch/queue pointers, no hidden kernargs (amd.md 1.2)."""
    for ast in (saxpy(), rowmax(), scaled()):
        lib, name = compile_ast(ast)
        k = load_code_object(lib).kernel(name)
        assert k.descriptor.user_sgprs == {"kernarg_segment_ptr": 0}
        assert not any(a[".value_kind"].startswith("hidden_") for a in k.metadata[".args"])
        # float modes: denormals kept for f32 and f16/f64, round to nearest even (the mock refuses others)
        d = k.descriptor
        assert (d.float_denorm_mode_32, d.float_denorm_mode_16_64, d.float_round_mode_32) == (3, 3, 0)


@pytest.mark.parametrize("ast", [saxpy(), rowmax(), scaled()], ids=["saxpy", "rowmax", "scaled"])
def test_kernarg_layout_matches_llvm_metadata(ast):
    r = AMDRenderer()
    prog = r.program(prepare_kernel(ast).ast)
    k = load_code_object(AMDCompiler().compile(r.render(prog))).kernel(r.function_name(prog))
    layout, end = kernarg_layout(prog)
    assert layout == [(a[".offset"], a[".size"]) for a in k.metadata[".args"]]
    assert end == k.descriptor.kernarg_size


def test_float32_math_uses_the_hardware_instructions():
    n = 64
    ins = [UOp.param(i, dtypes.float32.ptr(n)) for i in range(6)]
    i = UOp.range(n, 0)
    x = ins[0].index(i).load()
    vals = [x.exp2(), x.log2(), x.sqrt(), x.reciprocal(), x.sin()]
    ast = kernel(*[o.index(i).store(v).end(i) for o, v in zip(ins[1:], vals)], name="math")
    src = render(ast)
    for call in ("@llvm.exp2.f32(", "@llvm.log2.f32(", "@llvm.amdgcn.sin.f32("):
        assert call in src
    assert src.count("!fpmath") == 2 and "= !{float 2.5}" in src   # sqrt and 1/x at the hardware's accuracy
    asm = AMDCompiler().assembly(src)
    for mnemonic in ("v_exp_f32", "v_log_f32", "v_sqrt_f32", "v_rcp_f32", "v_sin_f32", "v_rndne_f32"):
        assert mnemonic in asm, mnemonic
    # LLVM's denormal fix-ups around the instructions (they flush), but no full division or correctly rounded sqrt
    assert "v_ldexp_f32" in asm and "v_frexp_mant_f32" in asm
    assert "v_div_scale" not in asm and "v_cmp_class_f32" not in asm


def test_float64_transcendentals_are_decomposed():
    """gfx1100 has no float64 exp2/log2/sin and LLVM would need a library: core's decompositions are used."""
    a, outs = UOp.param(0, dtypes.float64.ptr(8)), [UOp.param(i, dtypes.float64.ptr(8)) for i in (1, 2, 3, 4)]
    i = UOp.range(8, 0)
    x = a.index(i).load()
    vals = [x.exp2(), x.log2(), x.sin(), x.alu(Ops.POW, x)]
    ast = kernel(*[o.index(i).store(v).end(i) for o, v in zip(outs, vals)], name="math64")
    src = render(ast)
    assert "@llvm.exp2" not in src and "@llvm.log2" not in src and "@llvm.sin" not in src and "@llvm.pow" not in src
    lib, name = compile_ast(ast)
    assert load_code_object(lib).kernel(name).descriptor.wavefront32


def test_half_math_compiles():
    a, out = UOp.param(0, dtypes.float16.ptr(32)), UOp.param(1, dtypes.float16.ptr(32))
    i = UOp.range(32, 0)
    v = a.index(i).load()
    ast = kernel(out.index(i).store(v.exp2() * v.sin() + v.sqrt()).end(i), name="half_math")
    lib, name = compile_ast(ast)
    assert load_code_object(lib).kernel(name).descriptor.wavefront32


def test_lds_and_barrier():
    """DEFINE_LOCAL becomes an addrspace(3) global sized into the descriptor; BARRIER an s_barrier with fences."""
    a, out = UOp.param(0, dtypes.float32.ptr(256)), UOp.param(1, dtypes.float32.ptr(256))
    lds = UOp(Ops.DEFINE_LOCAL, dtypes.float32.ptr(256, AddrSpace.LOCAL), (), "rev")
    t = UOp.special(256, "lidx0")
    bar = UOp(Ops.BARRIER, dtypes.void, (lds.index(t).store(a.index(t).load()),))
    ast = kernel(out.index(t).store(lds.after(bar).index(255 - t).load()), name="lds_rev")
    r = AMDRenderer()
    src = r.render(linearize_kernel(ast))
    assert "@lds.rev = internal addrspace(3) global [256 x float] undef" in src
    assert "call void @llvm.amdgcn.s.barrier()" in src
    asm = AMDCompiler().assembly(src)
    assert "s_barrier" in asm and "ds_store_b32" in asm and "ds_load_b32" in asm
    k = load_code_object(AMDCompiler().compile(src)).kernel("lds_rev")
    assert k.descriptor.group_segment_fixed_size == 1024


def _symbol(kernarg_size: int, args: list[dict] | None) -> KernelSymbol:
    desc = KernelDescriptor(0, 0, kernarg_size, 0, 0, 0, 0, 0x408, 0)
    return KernelSymbol("k", 0, 0, 0, desc, {".args": args} if args is not None else {})


def test_pack_kernargs_explicit_and_hidden():
    """Hidden kernargs are filled by their metadata kind (COV5 offsets as LLVM lays them out after the explicit ones)."""
    args = [{".offset": 0, ".size": 8, ".value_kind": "global_buffer"},
            {".offset": 8, ".size": 4, ".value_kind": "by_value"},
            {".offset": 16, ".size": 4, ".value_kind": "hidden_block_count_x"},
            {".offset": 20, ".size": 4, ".value_kind": "hidden_block_count_y"},
            {".offset": 28, ".size": 2, ".value_kind": "hidden_group_size_x"},
            {".offset": 80, ".size": 2, ".value_kind": "hidden_grid_dims"},
            {".offset": 96, ".size": 8, ".value_kind": "hidden_hostcall_buffer"}]
    out = pack_kernargs(_symbol(272, args), [(0x1234_5678_9000, 8), (-3, 4)], (7, 5, 1), (64, 1, 1), [])
    assert len(out) == 272
    assert int.from_bytes(out[0:8], "little") == 0x1234_5678_9000
    assert int.from_bytes(out[8:12], "little", signed=True) == -3
    assert int.from_bytes(out[16:20], "little") == 7 and int.from_bytes(out[20:24], "little") == 5
    assert int.from_bytes(out[28:30], "little") == 64 and int.from_bytes(out[80:82], "little") == 2
    assert out[96:104] == bytes(8)


def test_pack_kernargs_errors():
    with pytest.raises(ValueError, match="takes 1 explicit kernargs, got 2"):
        pack_kernargs(_symbol(8, None), [(1, 8), (2, 4)], (1, 1, 1), (1, 1, 1), [(0, 8)])
    with pytest.raises(ValueError, match="past kernarg_size 8"):
        pack_kernargs(_symbol(8, None), [(1, 8), (2, 4)], (1, 1, 1), (1, 1, 1), [(0, 8), (8, 4)])
