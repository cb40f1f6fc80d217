"""Integer POW as multiplies (tg_core/codegen/lib/intpow.py), compiled on the CPU's LLVM path and compared with alu.py,
which defines it: wrapped exact powers for y >= 0, the truncated real power for y < 0."""
import numpy as np
import pytest

from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.alu import exec_alu

pytest.importorskip("llvmlite.binding")
from tg_core.codegen.lib.intpow import int_pow  # noqa: E402

RNG = np.random.default_rng(3)


@pytest.fixture(scope="module")
def cpu():
    dev = Device["CPU"]
    before = dev.renderer.name
    dev.select_renderer("LLVM")
    yield dev
    dev.select_renderer(before)


def pow_kernel(dt, n, exponent=None):
    """out[i] = x[i] ** y[i], or x[i] ** exponent for a constant exponent."""
    x, y, out = UOp.param(0, dt.ptr(n)), UOp.param(1, dt.ptr(n)), UOp.param(2, dt.ptr(n))
    r = UOp.range(n, 0)
    e = y.index(r).load() if exponent is None else UOp.const(dt, exponent)
    value = UOp(Ops.POW, dt, (x.index(r).load(), e))
    return UOp(Ops.SINK, dtypes.void, (out.index(r).store(value).end(r),), KernelInfo("ipow"))


def run(cpu, dt, xs, ys, exponent=None):
    npdt = to_numpy_dtype(dt)
    bufs = [Buffer.from_numpy(np.array(xs, npdt), "CPU"), Buffer.from_numpy(np.array(ys, npdt), "CPU"),
            Buffer("CPU", len(xs), dt)]
    cpu.get_runner(pow_kernel(dt, len(xs), exponent))(bufs, {})
    return bufs[2].numpy().tolist()


def values(dt, n):
    lo, hi = dtypes.min(dt), dtypes.max(dt)
    small = RNG.integers(max(lo, -5), min(hi, 5), n, endpoint=True)
    wide = RNG.integers(lo, hi, n, endpoint=True, dtype=np.int64 if dt is not dtypes.uint64 else np.uint64)
    return [int(v) for v in np.concatenate([small, wide])]


@pytest.mark.parametrize("dt", [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.int32, dtypes.uint32, dtypes.int64],
                         ids=str)
def test_variable_exponent_matches_alu(cpu, dt):
    xs = values(dt, 60)
    ys = [int(v) for v in RNG.integers(max(dtypes.min(dt), -4), 70, len(xs))]
    ys[:6] = [0, 1, dtypes.max(dt), -1 if dtypes.min(dt) < 0 else 2, 63, 2]
    xs[:6] = [0, 0, 3, 0, -1 if dtypes.min(dt) < 0 else 1, 1]
    want = [exec_alu(Ops.POW, dt, (x, y)) for x, y in zip(xs, ys)]
    assert run(cpu, dt, xs, ys) == want


@pytest.mark.parametrize("exponent", [0, 1, 2, 5, 13, 31, -1, -2])
def test_constant_exponent_matches_alu(cpu, exponent):
    xs = [-3, -2, -1, 0, 1, 2, 3, 7, 46341, -46341, 2**31 - 1]
    want = [exec_alu(Ops.POW, dtypes.int32, (x, exponent)) for x in xs]
    assert run(cpu, dtypes.int32, xs, [0] * len(xs), exponent) == want


def test_constant_exponent_uses_its_set_bits_only():
    x = UOp.variable("x", -10, 10, dtypes.int32)
    muls = [u for u in int_pow(x, UOp.const(dtypes.int32, 5)).toposort() if u.op is Ops.MUL]
    assert len(muls) == 3  # x*x, (x*x)*(x*x), then times x
    assert int_pow(x, UOp.const(dtypes.int32, 0)).op is Ops.CONST
