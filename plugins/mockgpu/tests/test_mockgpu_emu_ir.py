"""The RDNA3 emulator on what LLVM emits: kernels written in LLVM IR, compiled for gfx1100 by llvmlite (tg-amd's
compiler, O2), run on the mock GPU and compared with numpy -- float division (div_scale/fmas/fixup), integer
division, f64, half precision, transcendentals, LDS reductions with barriers, divergent loops and scratch arrays."""
import numpy as np
import pytest
from mockgpu_helpers import Runner, ir_kernel

from tg_mockgpu.sample_kernels import TREE_SUM

pytest.importorskip("llvmlite")

HEAD = """target triple = "amdgcn-amd-amdhsa"
declare i32 @llvm.amdgcn.workitem.id.x()
declare i32 @llvm.amdgcn.workgroup.id.x()
declare void @llvm.amdgcn.s.barrier()
"""
ATTRS = 'attributes #0 = {{ "amdgpu-flat-work-group-size"="1,{wg}" }}\n'


def elementwise(body: str, ins: list[str], out: str, decls: str = "", wg: int = 64) -> str:
    """A kernel computing out[i] = body(in0[i], in1[i], ...) for i < n; the body reads %x0, %x1, ... and sets %r."""
    args = ", ".join(["ptr addrspace(1) noalias %out"] + [f"ptr addrspace(1) noalias %in{i}" for i in range(len(ins))])
    loads = "".join(f"  %p{i} = getelementptr {t}, ptr addrspace(1) %in{i}, i32 %i\n"
                    f"  %x{i} = load {t}, ptr addrspace(1) %p{i}\n" for i, t in enumerate(ins))
    return HEAD + decls + f"""define amdgpu_kernel void @k({args}, i32 %n) #0 {{
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %gs = mul i32 %g, {wg}
  %i = add i32 %gs, %t
  %in = icmp slt i32 %i, %n
  br i1 %in, label %body, label %done
body:
{loads}{body}
  %po = getelementptr {out}, ptr addrspace(1) %out, i32 %i
  store {out} %r, ptr addrspace(1) %po
  br label %done
done:
  ret void
}}
""" + ATTRS.format(wg=wg)


@pytest.fixture
def gpu():
    r = Runner()
    yield r
    r.close()


def run_elementwise(gpu: Runner, ir: str, inputs: list[np.ndarray], out_dtype: type, wg: int = 64) -> np.ndarray:
    n = len(inputs[0])
    out = gpu.buffer(np.zeros(n, out_dtype))
    gpu.run(ir_kernel(ir), (-(-n // wg), 1, 1), (wg, 1, 1), out, *[gpu.buffer(x) for x in inputs], n)
    return gpu.read(out, out_dtype, n)


def special_floats(rng: np.random.Generator, n: int, dtype: type) -> np.ndarray:
    """Random values over many magnitudes, with zeros, infinities, NaN and (for f32) denormals mixed in."""
    x = (rng.standard_normal(n) * np.exp2(rng.integers(-40, 40, n))).astype(dtype)
    info = np.finfo(dtype)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny, -info.tiny, info.max, 1.0, -3.0], dtype)
    x[:len(specials)] = specials
    if dtype == np.float32:
        denormals = [1e-40, -3e-42, 2e-39, 7e-45, 1.5e-38, -1e-39, 3e-41, 1e-44]
        x[len(specials):len(specials) + 8] = np.array(denormals, dtype)
    return x


def test_f32_division_is_correctly_rounded(gpu):
    rng = np.random.default_rng(0)
    a, b = special_floats(rng, 4000, np.float32), special_floats(rng, 4000, np.float32)[::-1].copy()
    ir = elementwise("  %r = fdiv float %x0, %x1", ["float", "float"], "float")
    got = run_elementwise(gpu, ir, [a, b], np.float32)
    with np.errstate(all="ignore"):
        want = a / b
    np.testing.assert_array_equal(got, want)


def test_f64_division_sqrt_fma(gpu):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500)
    b = rng.standard_normal(500) * 10.0 ** rng.integers(-30, 30, 500)
    body = """  %q = fdiv double %x0, %x1
  %s = call double @llvm.sqrt.f64(double %q)
  %f = call double @llvm.fabs.f64(double %x1)
  %r = fadd double %s, %f"""
    decls = "declare double @llvm.sqrt.f64(double)\ndeclare double @llvm.fabs.f64(double)\n"
    got = run_elementwise(gpu, elementwise(body, ["double", "double"], "double", decls), [a, b], np.float64)
    with np.errstate(all="ignore"):
        want = np.sqrt(a / b) + np.abs(b)
    np.testing.assert_allclose(got, want, rtol=2e-16, equal_nan=True)


@pytest.mark.parametrize("op", ["sdiv", "srem", "udiv", "urem"])
def test_integer_division(gpu, op):
    rng = np.random.default_rng(2)
    a = rng.integers(-2**31, 2**31, 2000).astype(np.int32)
    b = rng.integers(-2**31, 2**31, 2000).astype(np.int32)
    b[:500] = rng.integers(-50, 50, 500)
    b[b == 0] = 7
    a[:4], b[:4] = [-2**31, -2**31, 7, -7], [-1 + 2, -1 + 3, -2, 2]
    got = run_elementwise(gpu, elementwise(f"  %r = {op} i32 %x0, %x1", ["i32", "i32"], "i32"), [a, b], np.int32)
    a64, b64 = a.astype(np.int64), b.astype(np.int64)
    ua, ub = a.view(np.uint32).astype(np.int64), b.view(np.uint32).astype(np.int64)
    want = {"sdiv": np.trunc(a64 / b64).astype(np.int64), "srem": np.fmod(a64, b64),
            "udiv": ua // ub, "urem": ua % ub}[op]
    np.testing.assert_array_equal(got, want.astype(np.int64).astype(np.uint32).view(np.int32))


def test_f32_transcendentals(gpu):
    rng = np.random.default_rng(3)
    x = rng.uniform(-20, 20, 2000).astype(np.float32)
    body = """  %e = call float @llvm.exp2.f32(float %x0)
  %ax = call float @llvm.fabs.f32(float %x0)
  %l = call float @llvm.log2.f32(float %ax)
  %s = call float @llvm.sin.f32(float %x0)
  %q = call float @llvm.sqrt.f32(float %ax)
  %a1 = fadd float %e, %l
  %a2 = fadd float %s, %q
  %r = fmul float %a1, %a2"""
    decls = "".join(f"declare float @llvm.{f}.f32(float)\n" for f in ("exp2", "log2", "sin", "sqrt", "fabs"))
    got = run_elementwise(gpu, elementwise(body, ["float"], "float", decls), [x], np.float32)
    xd = x.astype(np.float64)
    want = (np.exp2(xd) + np.log2(np.abs(xd))) * (np.sin(xd) + np.sqrt(np.abs(xd)))
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=1e-5)


def test_half_precision(gpu):
    rng = np.random.default_rng(4)
    a = rng.uniform(-4, 4, 1000).astype(np.float16)
    b = rng.uniform(0.5, 4, 1000).astype(np.float16)
    body = """  %m = fmul half %x0, %x1
  %s = fadd half %m, 0xH3C00
  %d = fdiv half %s, %x1
  %c = fcmp olt half %d, 0xH0000
  %r = select i1 %c, half %x1, half %d"""
    got = run_elementwise(gpu, elementwise(body, ["half", "half"], "half"), [a, b], np.float16)
    d = ((a * b) + np.float16(1)) / b
    np.testing.assert_array_equal(got, np.where(d < 0, b, d))


def test_lds_tree_reduction_with_barriers(gpu):
    """Each 256-item workgroup sums its slice through LDS in 8 halving steps separated by barriers."""
    x = np.random.default_rng(5).integers(-100, 100, 256 * 20).astype(np.float32)
    out = gpu.buffer(np.zeros(20, np.float32))
    gpu.run(ir_kernel(TREE_SUM), (20, 1, 1), (256, 1, 1), out, gpu.buffer(x), name="tree_sum")
    np.testing.assert_array_equal(gpu.read(out, np.float32, 20), x.reshape(20, 256).sum(1))


def test_divergent_loop_and_scratch_array(gpu):
    """Per-lane trip counts (i % 13) fill a private array with a dynamic index (scratch), then read it back in
    reverse."""
    ir = HEAD + """define amdgpu_kernel void @k(ptr addrspace(1) noalias %out) #0 {
entry:
  %arr = alloca [16 x i32], align 4, addrspace(5)
  %t = call i32 @llvm.amdgcn.workitem.id.x()
  %g = call i32 @llvm.amdgcn.workgroup.id.x()
  %gs = mul i32 %g, 64
  %i = add i32 %gs, %t
  %n = urem i32 %i, 13
  %z = icmp eq i32 %n, 0
  br i1 %z, label %sum, label %fill
fill:
  %k = phi i32 [0, %entry], [%k2, %fill]
  %slot = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %k
  %v = mul i32 %k, %i
  store volatile i32 %v, ptr addrspace(5) %slot
  %k2 = add i32 %k, 1
  %c = icmp ult i32 %k2, %n
  br i1 %c, label %fill, label %sum
sum:
  %cnt = phi i32 [0, %entry], [%n, %fill]
  br label %rd
rd:
  %j = phi i32 [%cnt, %sum], [%j2, %rdb]
  %acc = phi i32 [0, %sum], [%acc2, %rdb]
  %more = icmp ne i32 %j, 0
  br i1 %more, label %rdb, label %done
rdb:
  %j2 = sub i32 %j, 1
  %s2 = getelementptr [16 x i32], ptr addrspace(5) %arr, i32 0, i32 %j2
  %x = load volatile i32, ptr addrspace(5) %s2
  %w = mul i32 %x, %j
  %acc2 = add i32 %acc, %w
  br label %rd
done:
  %po = getelementptr i32, ptr addrspace(1) %out, i32 %i
  store i32 %acc, ptr addrspace(1) %po
  ret void
}
""" + ATTRS.format(wg=64)
    n = 64 * 5
    out = gpu.buffer(np.zeros(n, np.int32))
    co = ir_kernel(ir)
    assert co.kernel("k").descriptor.private_segment_fixed_size >= 64
    gpu.run(co, (5, 1, 1), (64, 1, 1), out)
    i = np.arange(n)
    want = np.array([sum(k * ii * (k + 1) for k in range(ii % 13)) for ii in i])
    np.testing.assert_array_equal(gpu.read(out, np.int32, n), want)


def test_64bit_indexing(gpu):
    """i64 indices: out[i] = in[i * 4097 % n] over a buffer spanning many shuffled pages."""
    body = """  %i64 = sext i32 %i to i64
  %m = mul i64 %i64, 4097
  %n64 = sext i32 %n to i64
  %j = urem i64 %m, %n64
  %q = getelementptr float, ptr addrspace(1) %in1, i64 %j
  %r = load float, ptr addrspace(1) %q"""
    n = 40000
    x = np.arange(n, dtype=np.float32)
    got = run_elementwise(gpu, elementwise(body, ["float", "float"], "float"), [x, x * 2], np.float32)
    np.testing.assert_array_equal(got, (np.arange(n, dtype=np.int64) * 4097 % n * 2).astype(np.float32))
