"""CPURunner.prebind (the argument lists a TinyJit replay reuses): the bound call computes what the runner
computes, for one core and split across cores, with inputs and variables changing between calls, and a split full
reduction's partials combined into a fixed or an input buffer; and TinyJit replays through it match numpy."""
from typing import Any

import numpy as np
import pytest

from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes
from tg_core.engine.jit import TinyJit
from tg_core.tensor import Tensor
from tg_core.uop import AxisType, KernelInfo, Ops, UOp

pytest.importorskip("llvmlite.binding")


def _sink(*effects: UOp) -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo("k"))


def rows_kernel(n: UOp | int, m: int = 3) -> UOp:
    """out[i*m + j] = i*m + j + sum_k in[k] for i < n, j < m."""
    inp, out = UOp.param(0, dtypes.int32.ptr(16)), UOp.param(1, dtypes.int32.ptr(64 * m))
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    k = UOp.range(16, 2, AxisType.REDUCE)
    total = inp.index(k).load().reduce(Ops.ADD, k)
    return _sink(out.index(i * m + j).store((i * m + j).cast(dtypes.int32) + total).end(i, j))


def total_kernel(n: int) -> UOp:
    """out[0] = sum(in[k] for k < n): split across cores, a partial per core."""
    inp, out = UOp.param(0, dtypes.int32.ptr(n)), UOp.param(1, dtypes.int32.ptr(1))
    k = UOp.range(n, 0, AxisType.REDUCE)
    return _sink(out.index(UOp.const(dtypes.weakint, 0)).store(inp.index(k).load().reduce(Ops.ADD, k)))


@pytest.fixture(params=["LLVM", "X86"])
def cpu(request):
    dev: Any = Device["CPU"]  # the CPU device: select_renderer, configure_threads
    if request.param not in {c.name.upper() for c in dev.renderers}:
        pytest.skip(f"{request.param} is not offered on this host")
    before = dev.renderer.name
    dev.select_renderer(request.param)
    yield dev
    dev.configure_threads(0)
    dev.select_renderer(before)


def ints(a) -> Buffer:
    return Buffer.from_numpy(np.asarray(a, np.int32), "CPU")


@pytest.mark.parametrize("cores", [1, 2])
def test_bound_call_matches_the_runner_with_new_inputs_and_variables(cpu, cores):
    cpu.configure_threads(cores, 0)
    n = UOp.variable("n_rows", 0, 64)
    runner = cpu.get_runner(rows_kernel(n))
    assert runner.cores == cores
    out = ints(np.full(192, -1))
    call = runner.prebind([None, out], [(0, 0)])  # buffer 0 is the call's input 0; the output is fixed
    for rows, fill in ((5, 1), (0, 2), (64, 3), (17, 4)):
        out.copyin(np.full(192, -1, np.int32))
        call([ints(np.full(16, fill))], {"n_rows": rows})
        want = np.full(192, -1, np.int32)
        want[:rows * 3] = np.arange(rows * 3) + 16 * fill
        np.testing.assert_array_equal(out.numpy(), want)
        # the runner itself gives the same on fresh buffers
        out2 = ints(np.full(192, -1))
        runner([ints(np.full(16, fill)), out2], {"n_rows": rows})
        np.testing.assert_array_equal(out2.numpy(), want)


@pytest.mark.parametrize("out_is_input", [False, True])
def test_bound_split_reduction_combines_into_its_output(cpu, out_is_input):
    cpu.configure_threads(2, 0)
    runner = cpu.get_runner(total_kernel(4096))
    assert runner.cores == 2 and runner.partial is not None
    fixed_out = ints([0])
    call = runner.prebind([None, None], [(0, 0), (1, 1)]) if out_is_input else \
        runner.prebind([None, fixed_out], [(0, 0)])
    rng = np.random.default_rng(3)
    for _ in range(3):
        a = rng.integers(-1000, 1000, 4096).astype(np.int32)
        out = ints([7]) if out_is_input else fixed_out
        call([ints(a), out] if out_is_input else [ints(a)], {})
        assert out.numpy()[0] == a.sum()


def test_jit_replays_of_split_kernels_match_numpy(cpu):
    cpu.configure_threads(2, 0)
    step = TinyJit(lambda a, b: ((a * b + 1).sum(), (a - b).relu()))
    rng = np.random.default_rng(5)
    for _ in range(5):
        a_np, b_np = rng.standard_normal(1 << 15).astype(np.float32), rng.standard_normal(1 << 15).astype(np.float32)
        total, diff = step(Tensor(a_np, device="CPU"), Tensor(b_np, device="CPU"))
        np.testing.assert_allclose(total.numpy(), (a_np * b_np + 1).sum(), rtol=1e-4)
        np.testing.assert_allclose(diff.numpy(), np.maximum(a_np - b_np, 0), rtol=1e-6)
    assert step.cnt == 2 and any(getattr(it.runner, "cores", 1) == 2 for it in step.jit_cache)
