"""Core's conformance suite on DEV=AMD (the mock KFD's GPU where there is no /dev/kfd), and Tensor
programs end to end: render -> compile -> ELF -> the KFD queues (PM4 or AQL, SDMA copies) -> results against numpy.

Everything runs in the quick subset (each case well under a second on the mock) except the demo, marked slow."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core.device import Device
from tg_core.testing.conformance import BufferConformance, OpConformance
from tg_core.testing.devices import why_unavailable

_why = why_unavailable("AMD")
pytestmark = pytest.mark.skipif(_why is not None, reason=f"the AMD device does not open: {_why}")


class TestAMDBuffers(BufferConformance):
    device = "AMD"


class TestAMDOps(OpConformance):  # each case well under a second on the mock
    device = "AMD"


def test_elementwise_end_to_end():
    from tg_core.tensor import Tensor
    a = np.random.default_rng(0).standard_normal(1000).astype(np.float32)
    b = np.random.default_rng(1).standard_normal(1000).astype(np.float32)
    got = (Tensor(a, device="AMD") * 2 + Tensor(b, device="AMD")).numpy()
    np.testing.assert_allclose(got, a * 2 + b, rtol=1e-6)


def test_reduction_end_to_end():
    from tg_core.tensor import Tensor
    a = np.arange(12 * 40, dtype=np.int32).reshape(12, 40) - 100
    np.testing.assert_array_equal(Tensor(a, device="AMD").sum(1).numpy(), a.sum(1))


def test_variable_kernarg_end_to_end():
    from tg_core.dtype import dtypes
    from tg_core.tensor import Tensor
    from tg_core.uop import UOp
    v = UOp.variable("amd_scale", -50, 50, dtypes.int32)
    a = np.arange(300, dtype=np.int32)
    for k in (3, -7):
        np.testing.assert_array_equal((Tensor(a, device="AMD") * Tensor(v.bind(k), device="AMD")).numpy(), a * k)


@pytest.mark.parametrize("n", [1 << 16, 100_003])
def test_whole_tensor_reductions_end_to_end(n):
    """Scalar reductions run on a workgroup sharing the work through LDS (gpudims.group_reduce)."""
    from tg_core.tensor import Tensor
    rng = np.random.default_rng(n)
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.integers(-100, 100, n).astype(np.int32)
    np.testing.assert_allclose(Tensor(a, device="AMD").sum().numpy(), a.sum(dtype=np.float64), rtol=1e-4)
    assert Tensor(a, device="AMD").max().numpy() == a.max()
    assert Tensor(b, device="AMD").sum().numpy() == b.sum()
    assert Tensor(b > 98, device="AMD").any().numpy() == (b > 98).any()


@pytest.mark.parametrize("shape", [(5000,), (4, 3001)])
def test_long_row_softmax_end_to_end(shape):
    """Reductions over long rows are shared by a workgroup per row (gpudims.row_groups)."""
    from tg_core.tensor import Tensor
    x = np.random.default_rng(4).standard_normal(shape).astype(np.float32)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(Tensor(x, device="AMD").softmax().numpy(), e / e.sum(-1, keepdims=True), atol=1e-7)


def test_float64_math_end_to_end():
    """float64 transcendentals run as core's decompositions (gfx1100 has no instructions for them)."""
    from tg_core.tensor import Tensor
    a = np.random.default_rng(3).standard_normal(300) * 10
    t = Tensor(a, device="AMD")
    np.testing.assert_allclose(t.exp2().numpy(), np.exp2(a), rtol=1e-14)
    np.testing.assert_allclose(t.abs().log2().numpy(), np.log2(np.abs(a)), rtol=1e-14)
    np.testing.assert_allclose(t.sin().numpy(), np.sin(a), rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose((t.abs() ** t).numpy(), np.abs(a) ** a, rtol=1e-14)


@pytest.mark.parametrize("dtype", ["int32", "int8", "uint16", "int64"])
def test_integer_pow_end_to_end(dtype):
    """Integer POW (binary exponentiation, tg_core/codegen/lib/intpow.py) against alu.py's exact definition,
    constant and variable exponents, negative ones included for signed dtypes."""
    from tg_core.dtype import dtypes
    from tg_core.tensor import Tensor
    from tg_core.uop.alu import exec_alu
    from tg_core.uop.ops import Ops
    dt = getattr(dtypes, dtype)
    signed = not dtypes.is_unsigned(dt)
    xs = np.arange(-4 if signed else 0, 6)
    ys = np.arange(-3 if signed else 0, 11)
    x, y = np.meshgrid(xs, ys)
    x, y = x.ravel().astype(dtype), y.ravel().astype(dtype)
    want = [exec_alu(Ops.POW, dt, (int(a), int(b)), (dt, dt)) for a, b in zip(x, y)]
    assert (Tensor(x, device="AMD") ** Tensor(y, device="AMD")).numpy().tolist() == want
    assert (Tensor(x, device="AMD") ** 5).numpy().tolist() == [exec_alu(Ops.POW, dt, (int(a), 5), (dt, dt)) for a in x]


def test_float32_sin_of_large_arguments():
    """v_sin_f32 takes revolutions; the Cody-Waite reduction keeps large arguments accurate."""
    from tg_core.tensor import Tensor
    a = np.linspace(-2000, 2000, 4001).astype(np.float32)
    np.testing.assert_allclose(Tensor(a, device="AMD").sin().numpy(), np.sin(a.astype(np.float64)), atol=2e-6)


def test_code_object_with_an_absolute_relocation():
    """A code object whose constant data holds a pointer is uploaded relocated for its own VRAM address (image_at
    of the program buffer's address), read back from the GPU through SDMA."""
    from tg_amd.elf import load_code_object

    from amd_kernels import ABS_IR, compile_ir
    dev = Device["AMD"]
    lib = compile_ir(ABS_IR)
    code = load_code_object(lib)
    buf = dev.program_buffer(lib, code)
    va = dev.address(buf)
    assert code.image_at(va) != code.image  # the relocation depends on the address
    got = np.frombuffer(buf.copyout(), np.uint8)[:len(code.image)].tobytes()
    assert got == code.image_at(va)


def test_device_says_which_interface():
    dev = Device["AMD"]
    assert "via kfd" in repr(dev) and dev.gpu.arch == "gfx1100"
    assert ("mock KFD" in repr(dev)) == dev.system.is_mock


@pytest.mark.slow
def test_demo_trains_on_amd():
    import io

    from tg_core.demo import train
    Device.DEFAULT = "AMD"
    try:
        out = io.StringIO()
        acc = train(epochs=3, out=out, progress=False)
    finally:
        Device.reset()
    assert "on AMD" in out.getvalue()
    assert acc >= 0.9, out.getvalue()


@pytest.fixture(scope="class")
def amd_config(request):
    """The class's AMD configuration (queue kind, XCCs) for its tests; the default device again afterwards."""
    Device.configure(devices={"AMD": request.cls.config})
    yield
    Device.reset()


@pytest.mark.usefixtures("amd_config")
class TestAMDOpsAQL(OpConformance):
    """The op matrix through the AQL queue (dispatch packets, vendor PM4-IB packets)."""
    device, config = "AMD", {"queue": "aql"}

    def test_queue_is_aql(self):
        assert Device["AMD"].queue_kind == "aql"


@pytest.mark.usefixtures("amd_config")
class TestAMDOpsTwoXCCs(OpConformance):
    """The op matrix on mock GPUs of 2 XCCs (PRED_EXEC around per-XCC and one-XCC writes)."""
    device, config = "AMD", {"mock_xccs": 2}

    def test_two_xccs(self):
        dev = Device["AMD"]
        assert dev.xccs == 2 or not dev.system.is_mock
