"""Core's LLVM IR renderer specialized for amdgcn-amd-amdhsa (gfx1100, RDNA3, wave32), through llvmir.py's
public extension points only: the renderer's configuration attributes and `attributes(program)`, and an
`LLVMFunction` subclass (`function_class`) that adds DEFINE_LOCAL and BARRIER to its `handlers` table and
overrides `float_alu`.

What changes against the host renderer:
- the kernel is an `amdgpu_kernel`: its arguments (buffer pointers, then the int variables) arrive in the
  kernarg segment, laid out by LLVM at their natural alignment (`kernarg_layout` computes the same offsets);
- buffers live in the global address space (1), LDS (DEFINE_LOCAL) in the local one (3), accumulators in
  private memory (5, registers after mem2reg);
- the parallel ranges become workgroup and workitem ids (tg_core/codegen/lib/gpudims.py, run by the device's
  prepare stage: tg_amd/device.py `prepare_kernel`), read with
  `llvm.amdgcn.workgroup.id.*` / `llvm.amdgcn.workitem.id.x`; the kernel declares its workgroup size
  (`amdgpu-flat-work-group-size`), which lets LLVM drop barriers of single-wave workgroups;
- float32 math uses the hardware's transcendental instructions (v_exp_f32, v_log_f32, v_sqrt_f32, v_rcp_f32,
  v_sin_f32: about 1 ulp), as AMD's own fast math does, inside LLVM's denormal fix-ups (the instructions
  flush denormals; the code objects keep them, so exp(-100) is 3.8e-44 as on the CPU); sin gets a
  Cody-Waite reduction to [-pi, pi] first, since v_sin_f32 takes revolutions and loses accuracy on large
  ones. float16 math runs in float32. float64 exp2/log2/sin/pow have no AMD instruction and LLVM would need a
  library call (which aborts the process), so core's decompositions (tg_core/codegen/lib/decomp.py) turn them into
  float64 and integer arithmetic first; so they do pow of every float dtype, since LLVM's expansion of
  llvm.pow.f32 (exp2(y * log2(x))) is NaN for a negative x even with an integer y.
"""
from __future__ import annotations

import math

from tg_core.plugin_api import (
    AddrSpace,
    DType,
    LLVMFunction,
    LLVMRenderer,
    Ops,
    PatternMatcher,
    Program,
    PtrDType,
    UOp,
    UPat,
    decomp,
    dtypes,
    ltype,
    pm_int_pow,
    render_const,
)

ARCH = "gfx1100"
MAX_LOCAL = 256  # work-items per workgroup at most (8 waves of 32): the device's prepare stage asks gpudims for it
_SPECIALS = {"gidx0": "llvm.amdgcn.workgroup.id.x", "gidx1": "llvm.amdgcn.workgroup.id.y",
             "gidx2": "llvm.amdgcn.workgroup.id.z", "lidx0": "llvm.amdgcn.workitem.id.x",
             "lidx1": "llvm.amdgcn.workitem.id.y", "lidx2": "llvm.amdgcn.workitem.id.z"}
# f32 op -> LLVM's form of it that runs the hardware instruction (v_exp/v_log/v_sqrt/v_rcp_f32, about 1 ulp)
# inside LLVM's denormal fix-up. The instructions flush denormal inputs and results whatever the descriptor's
# denormal mode; the code objects keep denormals (FLOAT_DENORM_MODE 3), and LLVM scales the operand or result into
# the normal range around the instruction (a compare, two selects, an add or ldexp), so exp(-100) is 3.8e-44
# as on the CPU instead of 0. SQRT and RECIPROCAL get !fpmath 2.5 ulp: the scaled instruction rather than
# LLVM's correctly rounded expansions (16 and 11 instructions).
_FAST_F32 = {Ops.EXP2: "call float @llvm.exp2.f32(float {x})", Ops.LOG2: "call float @llvm.log2.f32(float {x})",
             Ops.SQRT: "call float @llvm.sqrt.f32(float {x}), !fpmath {ulp}",
             Ops.RECIPROCAL: "fdiv float 1.0, {x}, !fpmath {ulp}"}
# the bare instructions, for float16 math widened to f32: there neither operand nor kept result can be an f32
# denormal, and LLVM would narrow the forms above to f16 instructions (v_rcp_f16 flushes f16 denormals)
_BARE_F32 = {Ops.EXP2: "llvm.amdgcn.exp2.f32", Ops.LOG2: "llvm.amdgcn.log.f32", Ops.SQRT: "llvm.amdgcn.sqrt.f32",
             Ops.RECIPROCAL: "llvm.amdgcn.rcp.f32"}
# float64 transcendentals and every float pow as plain arithmetic (the renderer's extra_matcher); float32
# exp2/log2/sin keep the hardware's. LLVM expands llvm.pow.f32 as exp2(y * log2(x)): NaN for every negative
# x (C99 gives (-2)**3 = -8) and an error growing with the result, where decomp's pow is within 0.5 ulp.
_MATH = PatternMatcher([(UPat((Ops.EXP2, Ops.LOG2, Ops.SIN), dtype=dtypes.float64, name="u"),
                         lambda u: decomp.rewrite(u)),
                        (UPat(Ops.POW, name="u"), lambda u: decomp.rewrite(u))])
# 2*pi split for Cody-Waite: the high part has 12 significant bits, so k*_TWO_PI_HI is exact for |k| < 2**12
_TWO_PI_HI = 6.28125
_TWO_PI_LO = 2 * math.pi - 6.28125


def kernarg_layout(program: Program) -> tuple[list[tuple[int, int]], int]:
    """(offset, size) of each kernel argument in the kernarg segment, and the explicit arguments' end: buffers
    (8-byte pointers, by PARAM index) then variables, each at its natural alignment, as LLVM lays them out."""
    layout = program.layout
    by_index = {b.index: b.dtype for b in layout.buffers}
    sizes = [8 if i not in by_index or isinstance(by_index[i], PtrDType) else by_index[i].itemsize
             for i in range(layout.nbuffers)]
    sizes += [v.dtype.itemsize for v in layout.variables]
    out, at = [], 0
    for size in sizes:
        at = (at + size - 1) // size * size
        out.append((at, size))
        at += size
    return out, at


class AMDFunction(LLVMFunction):
    """Rendering one program for amdgcn: LDS buffers, barriers and the hardware's math."""
    handlers = {**LLVMFunction.handlers, Ops.DEFINE_LOCAL: "define_local", Ops.BARRIER: "barrier"}

    def barrier(self, u: UOp) -> None:
        """Workgroup fences around s_barrier, so LDS writes before it are seen by every work-item after it."""
        self.stmt('fence syncscope("workgroup") release')
        self.stmt("call void @llvm.amdgcn.s.barrier()")
        self.declare("declare void @llvm.amdgcn.s.barrier()")
        self.stmt('fence syncscope("workgroup") acquire')

    def define_local(self, u: UOp) -> None:
        """An LDS array: a module-level global in address space 3 (its size goes into group_segment_fixed_size)."""
        name = f"@lds.{u.arg}" if isinstance(u.arg, (int, str)) else f"@lds.{len(self.declares)}"
        name = name.replace(" ", "_")
        elem = "i8" if u.dtype.base is dtypes.bool else ltype(u.dtype.base)
        self.declare(f"{name} = internal addrspace(3) global [{u.ptrdtype.size} x {elem}] undef, align 16")
        self.names[u] = name

    def float_alu(self, op: Ops, dt: DType, vals: list[str], *rest: str) -> str:
        if dt is dtypes.float16 and (op in _FAST_F32 or op is Ops.SIN):
            wide = [self.cast(dtypes.float16, dtypes.float32, v) for v in vals]
            out = (self.sin_f32(wide[0]) if op is Ops.SIN else
                   self.call(_BARE_F32[op], "float", [("float", wide[0])]))
            return self.cast(dtypes.float32, dtypes.float16, out)
        if dt is dtypes.float32 and op in _FAST_F32:
            if op in (Ops.EXP2, Ops.LOG2, Ops.SQRT):
                self.declare(f"declare float @llvm.{op.name.lower()}.f32(float)")
            return self.ins(_FAST_F32[op].format(x=vals[0], ulp=self.ulp_metadata()))
        if dt is dtypes.float32 and op is Ops.SIN:
            return self.sin_f32(vals[0])
        return super().float_alu(op, dt, vals, *rest)

    def ulp_metadata(self) -> str:
        """The metadata node `!{float 2.5}` (an !fpmath accuracy)."""
        return self.metadata_node("!{float 2.5}")

    def sin_f32(self, x: str) -> str:
        """sin(x) = v_sin_f32(y / 2pi) with y = x - k*2pi reduced to [-pi, pi] in two fma steps (Cody-Waite)."""
        inv = render_const(1 / (2 * math.pi), dtypes.float32)
        k = self.call("llvm.rint.f32", "float", [("float", self.ins(f"fmul float {x}, {inv}"))])
        nk = self.ins(f"fneg float {k}")
        fma = "llvm.fma.f32"
        y = self.call(fma, "float", [("float", nk), ("float", render_const(_TWO_PI_HI, dtypes.float32)), ("float", x)])
        y = self.call(fma, "float", [("float", nk), ("float", render_const(_TWO_PI_LO, dtypes.float32)), ("float", y)])
        return self.call("llvm.amdgcn.sin.f32", "float", [("float", self.ins(f"fmul float {y}, {inv}"))])


def _operands(u: UOp, want: tuple[DType, ...], form: str) -> None:
    got = tuple(s.dtype for s in u.src)
    if got != want:
        raise TypeError(f"intrinsic {u.arg} takes {form}: ({', '.join(map(repr, want))}), got ({', '.join(map(repr, got))})")


def _sudot4(fn: LLVMFunction, u: UOp) -> str:
    """acc + the dot of the four signed bytes of a and b (v_dot4_i32_iu8, both signed, no clamp): the seed's
    __builtin_amdgcn_sudot4(true, a, true, b, acc, false)."""
    _operands(u, (dtypes.int32,) * 3, "(a, b, acc): int32 words of four int8 each, and an int32 accumulator")
    a, b, acc = (fn.names[x] for x in u.src)
    fn.declare("declare i32 @llvm.amdgcn.sudot4(i1, i32, i1, i32, i32, i1)")
    return fn.ins(f"call i32 @llvm.amdgcn.sudot4(i1 true, i32 {a}, i1 true, i32 {b}, i32 {acc}, i1 false)")


_HALF16, _FLOAT8 = dtypes.float16.vec(16), dtypes.float32.vec(8)


def _wmma_f16(fn: LLVMFunction, u: UOp) -> str:
    """D = A x B + C for 16x16 f16 tiles, f32 accumulation (v_wmma_f32_16x16x16_f16), per lane l of a wave: A row
    l % 16 and B column l % 16 (16 halves each; lanes 16..31 repeat 0..15), C/D element [2*i + l // 16][l % 16] in
    lane i of the 8 floats."""
    _operands(u, (_HALF16, _HALF16, _FLOAT8), "(a, b, c): half.vec(16), half.vec(16), float.vec(8)")
    if u.dtype != _FLOAT8:
        raise TypeError(f"intrinsic {u.arg} gives float.vec(8), not {u.dtype!r}")
    a, b, c = (fn.names[x] for x in u.src)
    name = "llvm.amdgcn.wmma.f32.16x16x16.f16"
    fn.declare(f"declare <8 x float> @{name}(<16 x half>, <16 x half>, <8 x float>)")
    return fn.ins(f"call <8 x float> @{name}(<16 x half> {a}, <16 x half> {b}, <8 x float> {c})")


def _ds_swizzle(fn: LLVMFunction, u: UOp) -> str:
    """Lane exchange within a wave by a constant pattern (ds_swizzle_b32: bitmask mode `and | or<<5 | xor<<10`, or
    QDMode with bit 15): e.g. 0x041F exchanges lanes l and l ^ 1."""
    if len(u.src) != 2 or u.src[0].dtype is not dtypes.int32 or u.src[1].op is not Ops.CONST or \
            not 0 <= int(u.src[1].arg) < 1 << 16:
        raise TypeError(f"intrinsic {u.arg} takes (value: int32, pattern: a constant 16-bit int), got "
                        f"{[(x.op.name, x.dtype) for x in u.src]}")
    fn.declare("declare i32 @llvm.amdgcn.ds.swizzle(i32, i32)")
    return fn.ins(f"call i32 @llvm.amdgcn.ds.swizzle(i32 {fn.names[u.src[0]]}, i32 {int(u.src[1].arg)})")


def _perm(fn: LLVMFunction, u: UOp) -> str:
    """v_perm_b32: the bytes of the 64-bit value (a:b) each selector byte of sel picks (0..7; 12 gives 0x00, 13 0xFF)."""
    _operands(u, (dtypes.int32,) * 3, "(a, b, sel): int32")
    a, b, sel = (fn.names[x] for x in u.src)
    fn.declare("declare i32 @llvm.amdgcn.perm(i32, i32, i32)")
    return fn.ins(f"call i32 @llvm.amdgcn.perm(i32 {a}, i32 {b}, i32 {sel})")


INTRINSICS = {"sudot4": _sudot4, "wmma_f32_16x16x16_f16": _wmma_f16, "ds_swizzle": _ds_swizzle, "perm": _perm}


class AMDRenderer(LLVMRenderer):
    name = "LLVM"
    device = "AMD"
    addrspaces = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}
    calling_convention = "amdgpu_kernel"
    target_triple = "amdgcn-amd-amdhsa"
    special_intrinsics = _SPECIALS
    extra_matcher = _MATH + pm_int_pow
    arch = ARCH
    function_class = AMDFunction
    intrinsics = INTRINSICS  # what a custom kernel's CUSTOM nodes may name on AMD

    def __init__(self) -> None:
        from tg_amd.compiler import data_layout  # llvmlite knows the target's layout
        self.data_layout = data_layout(self.arch)

    def attributes(self, program: Program) -> str:
        """The kernel's workgroup size bounds the ids and lets LLVM drop barriers of single-wave workgroups."""
        local = math.prod(int(u.src[0].arg) for u in program.uops
                          if u.op is Ops.SPECIAL and u.arg in ("lidx0", "lidx1", "lidx2"))
        return f'nounwind "amdgpu-flat-work-group-size"="1,{local}"'
