"""The LLVM IR renderer: every program is parsed and verified by LLVM, JIT-compiled for the host with
MCJIT, run on numpy buffers through ctypes, and compared with numpy or with tg's exact ALU semantics."""
import ctypes
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tg_core.codegen import Program, linearize_kernel
from tg_core.dtype import AddrSpace, DType, dtypes
from tg_core.renderer import Renderer, UnsupportedDTypeError
from tg_core.renderer.llvmir import LLVMFunction, LLVMRenderer, render_const
from tg_core.testing.kernels import (
    INTS,
    cast_values,
    check_bitcast,
    check_cast,
    check_random_expressions,
    elementwise,
    int_pairs,
    kernel,
)
from tg_core.testing.kernels import check_alu as shared_check_alu
from tg_core.uop import AxisType, Ops, UOp

llvm = pytest.importorskip("llvmlite.binding")


# ---- helpers shared with test_codegen.py -----------------------------------------------------------------

def _target_machine():
    """A target machine for the host; a fresh one per engine, since an MCJIT engine takes ownership of it."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    return llvm.Target.from_default_triple().create_target_machine(cpu=llvm.get_host_cpu_name(),
                                                                   features=llvm.get_host_cpu_features().flatten())


def compile_and_run(src: str, prog: Program, arrays: list[np.ndarray], var_vals: dict[str, int] | None = None) -> None:
    """Verify `src`, JIT it for the host and call the kernel on `arrays` (in PARAM order) and `var_vals`."""
    mod = llvm.parse_assembly(src)
    mod.verify()
    engine = llvm.create_mcjit_compiler(mod, _target_machine())
    engine.finalize_object()
    var_types = [ctypes.c_int64 if v.dtype is dtypes.int64 else ctypes.c_int32 for v in prog.variables]
    signature = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(arrays), *var_types)
    fn = signature(engine.get_function_address(LLVMRenderer.function_name(prog)))
    assert len(arrays) == max((p.arg for p in prog.params), default=-1) + 1  # a pointer for every PARAM index
    for a in arrays:
        assert a.flags.c_contiguous
    fn(*[a.ctypes.data for a in arrays], *[(var_vals or {})[v.arg[0]] for v in prog.variables])


def run(ast: UOp, arrays: list[np.ndarray], var_vals: dict[str, int] | None = None, opts=(),
        renderer: LLVMRenderer | None = None) -> Program:
    """Linearize, render, compile and run `ast`; the program is returned for structural checks."""
    prog = linearize_kernel(ast, opts=opts)
    compile_and_run((renderer or LLVMRenderer()).render(prog), prog, arrays, var_vals)
    return prog


def check_alu(op: Ops, out_dt: DType, in_dt: DType, *columns: list) -> None:
    """`op` over the columns of values, rendered and run, equals tg's exact ALU semantics element by element."""
    shared_check_alu(run, op, out_dt, in_dt, *columns)


FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64]


# ---- ALU ops -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_binary(dt):
    a, b = int_pairs(dt)
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR):
        check_alu(op, dt, dt, a, b)
    # C division: truncation toward zero, remainder with the dividend's sign; x/0 and x%0 are 0 and MIN/-1
    # wraps, as alu.py defines them (no trap)
    lo, minus_one = dtypes.min(dt), dtypes.as_const(-1, dt)
    check_alu(Ops.IDIV, dt, dt, a + [5, lo, lo], b + [0, 0, minus_one])
    check_alu(Ops.MOD, dt, dt, a + [5, lo, lo], b + [0, 0, minus_one])
    for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        check_alu(op, dtypes.bool, dt, a, b)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_shifts_and_unary(dt):
    a, _ = int_pairs(dt)
    amounts = [1, 2, 0, 3, 1, 2, 1, 4, 1, 2]
    check_alu(Ops.SHR, dt, dt, a, amounts)  # arithmetic for signed, logical for unsigned
    small = [x for x in a if abs(x) < 1000]
    check_alu(Ops.SHL, dt, dt, small, amounts[:len(small)])
    check_alu(Ops.NEG, dt, dt, a)
    check_alu(Ops.MULACC, dt, dt, small, small, small)


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_ops(dt):
    a = [1.5, -2.25, 0.0, -0.0, 3.0, 1e3, math.inf, -math.inf, math.nan, 0.1]
    b = [0.5, 4.0, -1.0, 2.0, math.nan, -7.5, 1.0, math.inf, 2.0, 0.3]
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX):
        check_alu(op, dt, dt, a, b)
    for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        check_alu(op, dtypes.bool, dt, a, b)
    check_alu(Ops.MULACC, dt, dt, a, b, b)
    pos = [0.25, 1.0, 2.0, 10.0, 0.0, 3.5, math.inf, math.nan]
    for op in (Ops.EXP2, Ops.LOG2, Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC):
        check_alu(op, dt, dt, pos + [-1.5, -0.0])
    check_alu(Ops.SIN, dt, dt, [0.0, 0.5, -1.25, 3.0, math.nan])
    check_alu(Ops.POW, dt, dt, [2.0, 0.5, 3.0, 0.0, 1.5], [3.0, 2.0, -1.0, 2.0, 0.5])


def test_nan_compares_follow_c():
    nan = math.nan
    ast = elementwise(lambda a, b: (a.ne(b).cast(dtypes.int32) + (a < b).cast(dtypes.int32) * 2
                                    + a.eq(b).cast(dtypes.int32) * 4), [dtypes.float32] * 2, dtypes.int32, 4, "nan_cmp")
    out = np.zeros(4, np.int32)
    run(ast, [np.array([nan, 1, nan, 1], np.float32), np.array([1, nan, nan, 1], np.float32), out])
    assert out.tolist() == [1, 1, 1, 4]  # != is true for NaN, < and == are false


def test_max_propagates_nan_and_bool_ops():
    ast = elementwise(lambda a, b: a.maximum(b), [dtypes.float32] * 2, dtypes.float32, 3, "fmax")
    out = np.zeros(3, np.float32)
    run(ast, [np.array([math.nan, 1, 2], np.float32), np.array([1, math.nan, 1], np.float32), out])
    assert np.isnan(out[0]) and np.isnan(out[1]) and out[2] == 2
    for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT):
        check_alu(op, dtypes.bool, dtypes.bool, [False, False, True, True], [False, True, False, True])
    check_alu(Ops.NEG, dtypes.bool, dtypes.bool, [False, True])


def test_where():
    ast = elementwise(lambda c, a, b: c.ne(0).where(a, b), [dtypes.int32] * 3, dtypes.int32, 4, "where")
    out = np.zeros(4, np.int32)
    run(ast, [np.array([0, 1, 0, 5], np.int32), np.arange(4, dtype=np.int32), -np.arange(4, dtype=np.int32), out])
    assert out.tolist() == [0, 1, -2, 3]


# ---- casts ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("src", [dtypes.bool, *INTS, *FLOATS], ids=lambda d: d.name)
def test_casts(src):
    for dst in [dtypes.bool, *INTS, *FLOATS]:
        if dst is src:
            continue
        vals = cast_values(src, dst)
        check_cast(run, src, dst, vals)


@pytest.mark.parametrize("src,dst", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32),
                                     (dtypes.float32, dtypes.uint32), (dtypes.float16, dtypes.int16),
                                     (dtypes.bfloat16, dtypes.uint16), (dtypes.float16, dtypes.bfloat16),
                                     (dtypes.float64, dtypes.int64), (dtypes.int8, dtypes.uint8)],
                         ids=lambda d: d.name)
def test_bitcasts(src, dst):
    vals = [0.0, 1.5, -2.0, math.inf] if dtypes.is_float(src) else [0, 1, -3 if src is dtypes.int8 else -300, 77]
    check_bitcast(run, src, dst, vals)


# ---- memory, signature, errors ---------------------------------------------------------------------------

def test_gated_store_skips_invalid_lanes():
    n = 6
    a, out = UOp.param(0, dtypes.float32.ptr(n)), UOp.param(1, dtypes.float32.ptr(n))
    r = UOp.range(n, 0)
    ast = kernel(out.index(r, (r % 2).eq(0)).store(a.index(r).load() * 2.0).end(r), name="gated_store")
    res = np.full(n, -1, np.float32)
    run(ast, [np.arange(n, dtype=np.float32), res])
    assert res.tolist() == [0, -1, 4, -1, 8, -1]


def test_bool_buffers_are_bytes():
    ast = elementwise(lambda a, b: a ^ b, [dtypes.bool, dtypes.bool], dtypes.bool, 4, "bool_xor")
    out = np.zeros(4, np.bool_)
    run(ast, [np.array([0, 0, 1, 1], np.bool_), np.array([0, 1, 0, 1], np.bool_), out])
    assert out.view(np.uint8).tolist() == [0, 1, 1, 0]


def test_signature_noalias_pointers_and_int_vars():
    n = UOp.variable("n", 1, 100)
    a, out = UOp.param(0, dtypes.float32.ptr(100)), UOp.param(1, dtypes.int32.ptr(100))
    r = UOp.range(n, 0)
    src = LLVMRenderer().render(linearize_kernel(kernel(out.index(r).store(a.index(r).load().cast(dtypes.int32)).end(r),
                                                        name="sig")))
    assert "define void @sig(ptr noalias %data0, ptr noalias %data1, i32 %var.n)" in src


def test_constants_are_exact():
    assert render_const(math.inf, dtypes.float32) == "0x7FF0000000000000"
    assert render_const(-0.0, dtypes.float64) == "0x8000000000000000"
    assert render_const(1.0, dtypes.float16) == "0xH3C00"
    assert render_const(dtypes.max(dtypes.uint32), dtypes.uint32) == "-1"
    assert render_const(True, dtypes.bool) == "true"


def test_unsupported_dtype_names_dtype_and_renderer():
    ast = elementwise(lambda a: a + a, [dtypes.fp8e4m3], dtypes.fp8e4m3, 4, "fp8")
    with pytest.raises(UnsupportedDTypeError, match=r"LLVM renderer does not support dtypes\.fp8e4m3"):
        LLVMRenderer().render(linearize_kernel(ast))


class _AMDLike(LLVMRenderer):
    name = "AMDLIKE"
    addrspaces = {AddrSpace.GLOBAL: 1, AddrSpace.LOCAL: 3, AddrSpace.REG: 5}
    calling_convention = "amdgpu_kernel"
    target_triple = "amdgcn-amd-amdhsa"
    special_intrinsics = {"gidx0": "llvm.amdgcn.workgroup.id.x", "lidx0": "llvm.amdgcn.workitem.id.x"}


def test_target_knobs_for_other_llvm_targets():
    n = 8
    a, out = UOp.param(0, dtypes.float32.ptr(n * n)), UOp.param(1, dtypes.float32.ptr(n))
    i, j = UOp.range(n, 0), UOp.range(n, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(i * n + j).load().reduce(Ops.ADD, j)).end(i), name="rowsum_amd")
    src = _AMDLike().render(linearize_kernel(ast))
    assert "define amdgpu_kernel void @rowsum_amd(ptr addrspace(1) noalias %data0" in src
    assert "alloca [1 x float], addrspace(5)" in src and 'target triple = "amdgcn-amd-amdhsa"' in src
    llvm.parse_assembly(src).verify()


def test_renderer_base():
    r = Renderer()
    with pytest.raises(NotImplementedError):
        r.render(linearize_kernel(elementwise(lambda a: a, [dtypes.float32], dtypes.float32, 2)))
    assert r.opts_for(elementwise(lambda a: a, [dtypes.float32], dtypes.float32, 2)) == ()
    assert LLVMRenderer.lower_reduce and dtypes.float16 in LLVMRenderer.supported_dtypes


def test_core_does_not_import_llvmlite():
    code = ("import sys, tg_core, tg_core.codegen, tg_core.renderer, tg_core.renderer.llvmir; "
            "sys.exit('llvmlite' in sys.modules)")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root)}
    assert subprocess.run([sys.executable, "-c", code], cwd=root, env=env).returncode == 0


def test_float_flags_knob():
    class Fast(LLVMRenderer):
        float_flags = "reassoc contract"
    n, m = 4, 16
    a, out = UOp.param(0, dtypes.float32.ptr(n * m)), UOp.param(1, dtypes.float32.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(i * m + k).load().reduce(Ops.ADD, k)).end(i), name="fast_sum")
    assert "fadd reassoc contract float" in Fast().render(linearize_kernel(ast))
    assert "fadd float" in LLVMRenderer().render(linearize_kernel(ast))
    x, res = np.random.default_rng(1).standard_normal((n, m)).astype(np.float32), np.zeros(n, np.float32)
    run(ast, [x, res], renderer=Fast())
    np.testing.assert_allclose(res, x.sum(1), rtol=1e-5)


def test_reduce_flags_only_on_accumulator_updates():
    """reduce_flags reach the combine of each reduction's update (ADD, and MAX's intrinsic call), and no other
    float op: out[i] = max_k(a) + sum_k(a*2+1)."""
    class Fast(LLVMRenderer):
        float_flags, reduce_flags = "contract", "reassoc"
    n, m = 3, 37
    a, out = UOp.param(0, dtypes.float32.ptr(n * m)), UOp.param(1, dtypes.float32.ptr(n))
    i, k, k2 = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE), UOp.range(m, 2, AxisType.REDUCE)
    x = a.index(i * m + k).load()
    total = (x * 2.0 + 1.0).reduce(Ops.ADD, k) + a.index(i * m + k2).load().reduce(Ops.MAX, k2)
    ast = kernel(out.index(i).store(total).end(i), name="flags")
    src = Fast().render(linearize_kernel(ast))
    flagged = [ln for ln in src.splitlines() if "reassoc" in ln]
    assert len(flagged) == 2 and any("fadd contract reassoc float" in ln for ln in flagged)
    assert any("call contract reassoc float @llvm.maximum.f32" in ln for ln in flagged)
    assert sum("fadd contract float" in ln for ln in src.splitlines()) == 2  # x*2+1 and the final sum
    assert "reassoc" not in LLVMRenderer().render(linearize_kernel(ast))
    xs, res = np.random.default_rng(2).standard_normal((n, m)).astype(np.float32), np.zeros(n, np.float32)
    run(ast, [xs, res], renderer=Fast())
    np.testing.assert_allclose(res, (xs * 2 + 1).sum(1) + xs.max(1), rtol=1e-5)


# ---- random expressions: rendered code against tg's own evaluation ------------------------------------------------

def _random_expr(rnd: np.random.Generator, leaves: list[UOp], dt: DType, depth: int) -> UOp:
    if depth == 0 or rnd.random() < 0.2:
        if rnd.random() < 0.25:
            return UOp.const(dt, int(rnd.integers(-9, 10)) if dtypes.is_int(dt) else float(rnd.integers(-9, 10)) / 4)
        return leaves[int(rnd.integers(len(leaves)))]
    a, b = (_random_expr(rnd, leaves, dt, depth - 1) for _ in range(2))
    ops = ["add", "mul", "neg", "max", "where"] + (["idiv", "mod", "and", "or", "xor", "shr", "shl", "narrow"]
                                                    if dtypes.is_int(dt) else ["fdiv", "sqrt", "half"])
    kind = ops[int(rnd.integers(len(ops)))]
    amount = UOp.const(dt, int(rnd.integers(0, 8)))
    return {"add": lambda: a + b, "mul": lambda: a * b, "neg": lambda: -a, "max": lambda: a.maximum(b),
            "where": lambda: (a < b).where(a, b + 1), "idiv": lambda: a // b, "mod": lambda: a % b,
            "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b, "shr": lambda: a >> amount,
            "shl": lambda: a << amount, "narrow": lambda: a.cast(dtypes.int8).cast(dt), "fdiv": lambda: a / b,
            "sqrt": lambda: a.sqrt(), "half": lambda: a.cast(dtypes.float16).cast(dt)}[kind]()


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.float32], ids=lambda d: d.name)
def test_random_expressions_match_evaluation(dt):
    check_random_expressions(run, _random_expr, dt)


def _gpu_kernel() -> UOp:
    """out[g*8 + l] = max_j exp2(a[(g*8 + l)*8 + j]) with g, l the workgroup and workitem ids."""
    a, out = UOp.param(0, dtypes.float32.ptr(256)), UOp.param(1, dtypes.float32.ptr(32))
    row = UOp.special(4, "gidx0") * 8 + UOp.special(8, "lidx0")
    j = UOp.range(8, 0, AxisType.REDUCE)
    return kernel(out.index(row).store(a.index(row * 8 + j).load().exp2().reduce(Ops.MAX, j).sqrt()), name="gpu_rowmax")


def test_special_needs_an_intrinsic():
    with pytest.raises(NotImplementedError, match="no intrinsic for SPECIAL 'gidx0'"):
        LLVMRenderer().render(linearize_kernel(_gpu_kernel()))


class _FixedIdsFunction(LLVMFunction):
    """A target whose ids are constants: SPECIAL through an overridden handler method."""
    ids = {"gidx0": 2, "lidx0": 5}

    def special(self, u: UOp) -> None:
        self.names[u] = render_const(self.ids[u.arg], u.dtype)


class _FixedIds(LLVMRenderer):
    function_class = _FixedIdsFunction

    def attributes(self, program: Program) -> str:
        return f'nounwind "tg-kernel"="{program.name}"'


def test_public_extension_points():
    """A subclass's override of a handler method is what renders the op, and `attributes` is per program."""
    prog = linearize_kernel(_gpu_kernel())
    a, out = np.random.default_rng(0).standard_normal(256).astype(np.float32), np.zeros(32, np.float32)
    src = _FixedIds().render(prog)
    assert '"tg-kernel"="gpu_rowmax"' in src and "workgroup" not in src
    compile_and_run(src, prog, [a, out])
    row = 2 * 8 + 5  # only the fixed ids' row is written
    want = np.zeros(32, np.float32)
    want[row] = np.sqrt(np.exp2(a[row * 8:row * 8 + 8]).max())
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_amdgcn_object_from_the_same_renderer():
    """The AMD plugin's configuration of the renderer gives IR that LLVM compiles for gfx1100."""
    try:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        machine = llvm.Target.from_triple("amdgcn-amd-amdhsa").create_target_machine(cpu="gfx1100")
    except RuntimeError as e:
        pytest.skip(f"this llvmlite has no AMDGPU target: {e}")

    class AMD(_AMDLike):
        data_layout = str(machine.target_data)
    src = AMD().render(linearize_kernel(_gpu_kernel()))
    assert "call i32 @llvm.amdgcn.workitem.id.x()" in src
    mod = llvm.parse_assembly(src)
    mod.verify()
    assert "gpu_rowmax" in machine.emit_assembly(mod)
