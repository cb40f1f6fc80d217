"""The CPU device on its LLVM renderer: core's conformance suite, Tensor programs against numpy with and
without multi-core splitting, renderer selection, and kernels called directly through get_runner."""
import logging

import numpy as np
import pytest

from tg_core.codegen.lib.threads import MIN_WORK
from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes
from tg_core.renderer import UnsupportedDTypeError
from tg_core.tensor import Tensor
from tg_core.testing import DeviceConformance
from tg_core.uop import KernelInfo, Ops, UOp

pytest.importorskip("llvmlite.binding")
from tg_cpu_x86 import plugin  # noqa: E402
from tg_cpu_x86.device import CPUDevice  # noqa: E402
from tg_cpu_x86.llvm import CPULLVMRenderer  # noqa: E402
from tg_cpu_x86.memory import ALIGN  # noqa: E402
from tg_cpu_x86.x86.isa import UnsupportedISAError  # noqa: E402

DEV = "CPU"
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True, scope="module")
def llvm_renderer():
    """The tests here are about the LLVM path, whatever renderer the CPU device was opened with."""
    dev = Device[DEV]
    before = dev.renderer.name
    dev.select_renderer("LLVM")
    yield
    dev.select_renderer(before)


class TestCPULLVM(DeviceConformance):
    device = DEV


@pytest.fixture
def cpu():
    return Device[DEV]


@pytest.fixture(params=["1 core", "2 cores"])
def cores(request, cpu):
    """Every kernel on one core, or every kernel with an outer range of 2+ rows split across two."""
    if request.param == "2 cores":
        cpu.configure_threads(2, 0)
    yield request.param
    cpu.configure_threads(0, MIN_WORK)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def t(a):
    return Tensor(a, device=DEV)


# ---- Tensor programs against numpy ---------------------------------------------------------------------

@pytest.mark.parametrize("n, m, k", [(1, 1, 1), (2, 40, 64), (17, 33, 9), (64, 128, 96)])
def test_matmul(cores, n, m, k):
    a, b = f32(n, k), f32(k, m)
    np.testing.assert_allclose((t(a) @ t(b)).numpy(), a @ b, rtol=1e-4, atol=1e-5)


def test_conv2d_relu(cores):
    x, w, b = f32(2, 3, 9, 8), f32(4, 3, 3, 3), f32(4)
    got = t(x).conv2d(t(w), t(b), stride=2, padding=1).relu().numpy()
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((2, 4, 5, 4), np.float32)
    for i in range(5):
        for j in range(4):
            want[:, :, i, j] = np.einsum("ncyx,ocyx->no", xp[:, :, 2 * i:2 * i + 3, 2 * j:2 * j + 3], w) + b
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-4, atol=1e-5)


def test_softmax_and_logsumexp(cores):
    x = f32(37, 51) * 4
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(t(x).softmax().numpy(), e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(t(x).logsumexp(1).numpy(), np.log(np.exp(x.astype(np.float64)).sum(1)), rtol=1e-5)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_reductions(cores, axis):
    x = f32(129, 65)
    np.testing.assert_allclose(t(x).sum(axis).numpy(), x.sum(axis), rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(t(x).max(axis).numpy(), x.max(axis))
    np.testing.assert_allclose(t(x).mean(axis).numpy(), x.mean(axis), rtol=1e-4, atol=1e-5)
    xi = RNG.integers(-1000, 1000, (129, 65)).astype(np.int32)
    np.testing.assert_array_equal(t(xi).sum(axis).numpy(), xi.sum(axis, dtype=np.int32))
    np.testing.assert_array_equal(t(xi).argmax(axis).numpy() if axis is not None else t(xi).argmax().numpy(),
                                  xi.argmax(axis))


def test_int_ops(cores):
    a = RNG.integers(-2**31, 2**31, 300, dtype=np.int64).astype(np.int32)
    b = RNG.integers(-50, 50, 300).astype(np.int32)
    b[b == 0] = 7
    np.testing.assert_array_equal((t(a) + t(b)).numpy(), a + b)  # wraps
    np.testing.assert_array_equal((t(a) * t(b)).numpy(), a * b)
    np.testing.assert_array_equal((t(a) // t(b)).numpy(), a // b)
    np.testing.assert_array_equal((t(a) % t(b)).numpy(), a % b)
    np.testing.assert_array_equal((t(a) ^ t(b)).numpy(), a ^ b)
    np.testing.assert_array_equal((t(a) >> 3).numpy(), a >> 3)
    u = a.view(np.uint32)
    np.testing.assert_array_equal((t(u) >> 3).numpy(), u >> 3)
    np.testing.assert_array_equal((t(u) // 7).numpy(), u // 7)
    wide = a.astype(np.int64) * 100003
    np.testing.assert_array_equal((t(wide) * 3 - 1).numpy(), wide * 3 - 1)


def test_casts(cores):
    x = f32(200) * 1000
    for dt in [np.int8, np.int32, np.int64, np.float16, np.float64, np.bool_]:
        want = x.astype(dt) if dt is not np.int8 else x.astype(np.int64).astype(np.int8)
        got = t(x).cast(np.dtype(dt).name if dt is not np.bool_ else "bool").numpy()
        if dt is np.int8:  # out of range float -> int8 is undefined in C: only in-range values are compared
            ok = np.abs(x) < 127
            np.testing.assert_array_equal(got[ok], want[ok])
        else:
            np.testing.assert_array_equal(got, want)
    xi = RNG.integers(0, 255, 100).astype(np.uint8)
    np.testing.assert_array_equal(t(xi).cast("float32").numpy(), xi.astype(np.float32))
    np.testing.assert_array_equal(t(xi).cast("int16").numpy() - 200, xi.astype(np.int16) - 200)


def test_gated_loads(cores):
    x = f32(20, 7)
    # -1 is the last row and -20 the first (an index out of range is an IndexError, tests/test_tensor_edge.py);
    # the gather is one load gated by 0 <= index < 20
    idx = np.array([3, -1, 0, 19, -20, 7], np.int32)
    got = t(x)[t(idx)].numpy()
    want = x[idx]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(t(x).pad(((2, 1), (0, 3)), value=-1.0).numpy(),
                                  np.pad(x, ((2, 1), (0, 3)), constant_values=-1.0))


def test_large_kernels_split_only_when_big(cpu):
    """With default settings a big elementwise kernel runs on every core and a tiny one on one."""
    cpu.configure_threads(2, MIN_WORK)
    try:
        x = f32(1 << 18)
        np.testing.assert_allclose((t(x) * 2 + 1).numpy(), x * 2 + 1, rtol=1e-6)
        y = f32(16)
        # y*3+1 contracts to one FMA (a single rounding): near zero it differs from numpy's two roundings by an ulp of 3y
        np.testing.assert_allclose((t(y) * 3 + 1).numpy(), y * 3 + 1, rtol=1e-6, atol=1e-6)
        cores = {ast.arg.name + str(r.cores) for ast, r in cpu._runners.items()}
        assert cores == {"k0_mul_add2", "k0_mul_add1"}, cores
    finally:
        cpu.configure_threads(0, MIN_WORK)


# ---- get_runner directly: buffers, int variables, dtypes the renderer lacks -----------------------------

def _scale_kernel(dt):
    """out[i] = in[i] * k for i < n, with n and k int variables."""
    n, k = UOp.variable("n", 0, 1000), UOp.variable("k", -100, 100)
    src, out = UOp.param(0, dt.ptr(1000)), UOp.param(1, dt.ptr(1000))
    r = UOp.range(n, 0)
    value = src.index(r).load() * k.cast(dt)
    return UOp(Ops.SINK, dtypes.void, (out.index(r).store(value).end(r),), KernelInfo("scale"))


def test_runner_with_variables(cpu):
    src = Buffer.from_numpy(np.arange(1000, dtype=np.int32), cpu.device)
    out = Buffer.from_numpy(np.full(1000, -1, np.int32), cpu.device)
    runner = cpu.get_runner(_scale_kernel(dtypes.int32))
    assert cpu.get_runner(_scale_kernel(dtypes.int32)) is runner  # cached per AST
    runner([src, out], {"n": 10, "k": -3})
    want = np.full(1000, -1, np.int32)
    want[:10] = np.arange(10) * -3
    np.testing.assert_array_equal(out.numpy(), want)


def test_debug_prints_the_rendered_kernel(cpu, capsys):
    from tg_core.helpers import Context
    with Context(DEBUG=4):
        cpu.get_runner(_scale_kernel(dtypes.int64))
    err = capsys.readouterr().err
    assert "tg: CPU LLVM kernel scale on 1 core(s)" in err and "define void @scale" in err  # the IR
    assert "scale:" in err and "ret" in err  # the host assembly


def test_memory_is_aligned_and_zero_copy(cpu):
    bufs = [Buffer(cpu.device, n, "float32").ensure_allocated() for n in (1, 3, 1000, 12345)]
    assert all(b._opaque.addr % ALIGN == 0 for b in bufs)
    b = Buffer.from_numpy(np.arange(8, dtype=np.float32), cpu.device)
    view = b._opaque.numpy(b.dtype)
    view[3] = 42.0  # a view, not a copy: the buffer sees the write
    assert b.numpy()[3] == 42.0 and view.ctypes.data == b._opaque.addr


def test_unsupported_dtype_names_dtype_and_renderer():
    class NoHalf(CPULLVMRenderer):
        name = "NOHALF"
        supported_dtypes = CPULLVMRenderer.supported_dtypes - {dtypes.float16}

    dev = CPUDevice("CPU", {})
    dev.renderer = NoHalf
    try:
        dev.get_runner(_scale_kernel(dtypes.int32))  # fine
        with pytest.raises(UnsupportedDTypeError, match=r"NOHALF renderer does not support dtypes.half.*kernel scale"):
            dev.get_runner(_scale_kernel(dtypes.float16))
    finally:
        dev.close()


# ---- renderer selection ----------------------------------------------------------------------------------

def test_llvm_renderer_targets_this_host():
    import llvmlite.binding as llvm

    from tg_cpu_x86.llvm import HOST, LLVMCompiler
    assert HOST.cpu == llvm.get_host_cpu_name() and HOST.triple == llvm.get_process_triple()
    renderer = CPULLVMRenderer()
    src = renderer.render(renderer.program(_scale_kernel(dtypes.float32)))
    assert f'target triple = "{HOST.triple}"' in src and f'"target-cpu"="{HOST.cpu}"' in src
    asm = LLVMCompiler().assembly(src)
    # vectorized for the widest float vectors of the ISA (the host's unless TG_X86_ISA limits it): LLVM's
    # AVX-512 Xeon tuning alone stays at ymm
    target = renderer.target
    widest = {"avx512": "zmm", "avx2": "ymm"}.get(target.vector_isa)
    assert f'"prefer-vector-width"="{target.vector_bytes * 8}"' in src
    if widest:
        assert widest in asm


def test_llvm_vector_width_follows_the_host_features(monkeypatch):
    import tg_cpu_x86.llvm as llvm_mod
    from tg_cpu_x86.llvm import HostTarget
    host = "x86_64-unknown-linux-gnu", "x"
    avx512 = HostTarget(*host, "+avx2,+avx512f,+avx512vl")
    assert HostTarget(*host, "+sse2,+avx,+avx2,+fma,-avx512f").vector_isa == "avx2"
    assert avx512.vector_isa == "avx512" and avx512.vector_bytes == 64
    assert HostTarget(*host, "+sse2,-avx2").vector_bytes == 16
    # the heuristic picks lanes from the host's width (16 float32 lanes with AVX-512)
    seen = []
    monkeypatch.delenv("TG_X86_ISA", raising=False)
    monkeypatch.setattr(llvm_mod, "HOST", avx512)
    monkeypatch.setattr(llvm_mod, "cpu_opts", lambda ast, target: seen.append(target) or [])
    CPULLVMRenderer().opts_for(_scale_kernel(dtypes.float32))
    assert [t.vector_bytes for t in seen] == [64]


def test_llvm_avx2_turns_avx512_off(monkeypatch):
    """TG_X86_ISA=avx2 holds for CPU:LLVM too: no AVX-512 feature reaches LLVM, the vectors are ymm wide, and
    the heuristic plans 8 float32 lanes."""
    import tg_cpu_x86.llvm as llvm_mod
    from tg_cpu_x86.llvm import HOST, HostTarget, LLVMCompiler
    host = HostTarget("x86_64-unknown-linux-gnu", "x", "+avx2,+fma,+avx512f,+avx512vl,-avx512fp16,+avx10.1,+sse2")
    assert host.for_isa("avx2").features == "+avx2,+fma,-avx512f,-avx512vl,-avx512fp16,-avx10.1,+sse2"
    assert host.for_isa("avx2").vector_isa == "avx2" and host.for_isa("avx512") is host
    with pytest.raises(UnsupportedISAError, match="avx512 .*TG_X86_ISA.*lacks"):
        HostTarget("x86_64-unknown-linux-gnu", "x", "+avx2,-avx512f").for_isa("avx512")
    monkeypatch.setenv("TG_X86_ISA", "avx2")
    assert CPULLVMRenderer.vector_isa == "avx2"
    r = CPULLVMRenderer()
    assert r.vector_isa == "avx2" and "+avx512" not in r.target.features
    seen = []
    monkeypatch.setattr(llvm_mod, "cpu_opts", lambda ast, target: seen.append(target) or [])
    r.opts_for(_scale_kernel(dtypes.float32))
    assert [t.vector_bytes for t in seen] == [32]
    monkeypatch.undo()
    if HOST.vector_isa == "sse":
        pytest.skip("this host has no AVX2")
    for isa, widest in (("avx2", "ymm"), ("avx512", "zmm")):
        if isa == "avx512" and HOST.vector_isa != "avx512":
            continue
        r = CPULLVMRenderer(isa)
        src = r.render(r.program(_scale_kernel(dtypes.float32)))
        asm = LLVMCompiler().assembly(src)  # the host's target machine: the function's attributes decide
        assert widest in asm and (isa == "avx512" or "zmm" not in asm)


def test_llvm_isa_value_is_checked(monkeypatch):
    monkeypatch.setenv("TG_X86_ISA", "avx1024")
    with pytest.raises(ValueError, match=r"TG_X86_ISA='avx1024' is not a vector ISA of CPU:LLVM; allowed: auto, "
                                         r"avx2, avx512"):
        CPULLVMRenderer()


def test_renderer_order_and_choice(cpu):
    ordered, why = Device.registry.choose_renderer("CPU")
    assert CPULLVMRenderer in ordered and cpu.renderer is CPULLVMRenderer
    with pytest.raises(ValueError, match="no renderer 'ARM' for CPU; offered: .*LLVM"):
        cpu.select_renderer("ARM")
    assert [c.name for c in plugin.host_renderers()][-1] == "LLVM"


@pytest.mark.parametrize("settings, env", [({"devices": {"CPU": {"renderers": ["LLVM"]}}}, {}),
                                           ({}, {"DEV": "CPU:LLVM"})], ids=["config", "DEV"])
def test_config_and_dev_choose_llvm(settings, env):
    from tg_core.plugins import ConfigError
    from tg_core.plugins.manager import PluginRegistry
    reg = PluginRegistry.create(settings, env=env)
    ordered, why = reg.choose_renderer("CPU")
    assert ordered[0] is CPULLVMRenderer and "LLVM" in why
    if settings:
        bad = PluginRegistry.create({"devices": {"CPU": {"renderers": ["ARM"]}}}, env={})
        with pytest.raises(ConfigError, match=r"(?s)ARM.*renderers offered for CPU: .*LLVM"):
            bad.choose_renderer("CPU")


def test_non_x86_host_falls_back_to_llvm(monkeypatch, caplog):
    monkeypatch.setattr(plugin.platform, "machine", lambda: "aarch64")
    with caplog.at_level(logging.WARNING, logger="tg.cpu"):
        assert plugin.host_renderers() == [CPULLVMRenderer]
    assert "aarch64 is not x86-64" in caplog.text and "using LLVM" in caplog.text
    assert plugin.tg_renderers("GPU") == []


def test_thread_options_are_checked(cpu):
    with pytest.raises(ValueError, match="threads must be an int >= 0"):
        cpu.configure_threads(-1)
    with pytest.raises(ValueError, match="thread_min_work"):
        cpu.configure_threads(1, -5)


def test_renderer_output_must_be_ir_or_machine_code():
    class Bad(CPULLVMRenderer):
        name = "BAD"

        def render(self, program):
            return bytearray(b"\xc3")

    dev = CPUDevice("CPU", {})
    dev.renderer = Bad
    try:
        with pytest.raises(TypeError, match=r"BAD renderer returned bytearray; .*LLVM IR \(str\) or x86-64 machine code"):
            dev.get_runner(_scale_kernel(dtypes.int32))
    finally:
        dev.close()


def test_rendering_with_x86_loads_no_llvm():
    """A process whose CPU device renders with X86 never loads LLVM (40 MB resident, 50 ms): CPU:LLVM is
    registered, but llvmlite is imported only when it renders or its host target is asked for."""
    import subprocess
    import sys
    code = ("import sys; from tg_core.tensor import Tensor; "
            "assert (Tensor([1.0, 2.0], device='CPU:X86') * 3).numpy().tolist() == [3.0, 6.0]; "
            "print('llvmlite' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"
