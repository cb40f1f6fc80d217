"""Multi-core kernels (tg_core/codegen/lib/threads.py): which kernels are split, that the cores' rows partition
the range exactly, and that split kernels compute what numpy does when run on the CPU device's pool."""
import threading

import numpy as np
import pytest

from tg_core.codegen.lib.threads import (
    CORE_ID,
    core_count,
    parallel_ranges,
    partial_reduction,
    split_cores,
    work_estimate,
)
from tg_core.device import Buffer, Device
from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.uop import AxisType, KernelInfo, Ops, UOp

pytest.importorskip("llvmlite.binding")
from tg_cpu_x86.device import CorePool  # noqa: E402


def sink(*effects):
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo("k"))


def rows_kernel(n: UOp | int, m: int = 3):
    """out[i*m + j] = i*m + j + sum_k in[k] for i < n, j < m: a 2-D output with a reduction inside."""
    size = 64 * m
    inp, out = UOp.param(0, dtypes.int32.ptr(16)), UOp.param(1, dtypes.int32.ptr(size))
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    k = UOp.range(16, 2, AxisType.REDUCE)
    total = inp.index(k).load().reduce(Ops.ADD, k)
    value = (i * m + j).cast(dtypes.int32) + total
    return sink(out.index(i * m + j).store(value).end(i, j))


def full_reduction(n: int, op: Ops, dtype, after=None):
    """out[0] = reduce(op, in[k] for k < n), optionally followed by `after`."""
    inp, out = UOp.param(0, dtype.ptr(n)), UOp.param(1, dtype.ptr(1))
    k = UOp.range(n, 0, AxisType.REDUCE)
    total = inp.index(k).load().reduce(op, k)
    return sink(out.index(UOp.const(dtypes.weakint, 0)).store(total if after is None else after(total)))


def test_split_structure():
    ast = rows_kernel(12)
    assert [r.arg for r in parallel_ranges(ast)] == [(0, AxisType.LOOP), (1, AxisType.LOOP)]
    assert work_estimate(ast) == 12 * 3 + 16  # the stores, and the sum once: it reads no output index
    split = split_cores(ast, 3, min_work=0)
    assert core_count(split) == 3 and core_count(ast) == 1
    core = [u for u in split.toposort() if u.op is Ops.DEFINE_VAR]
    assert [(v.arg[0], v.arg[1], v.arg[2]) for v in core] == [(CORE_ID, 0, 2)]
    outer = split.src[0].src[1]
    assert outer.op is Ops.RANGE and outer.src[0].op is Ops.CONST and outer.src[0].arg == 4  # 12 rows / 3 cores


def scaled_rows(n: int, depth: int, per_row: bool):
    """out[i] = in[i] * sum_k in[k]^2 (an RMSNorm's shape: the sum read by every row), or with `per_row`
    out[i] = sum_k in[i*depth + k] (a matvec's: each row its own reduction)."""
    inp, out = UOp.param(0, dtypes.float32.ptr(n * depth)), UOp.param(1, dtypes.float32.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(depth, 1, AxisType.REDUCE)
    if per_row:
        value = inp.index(i * depth + k).load().reduce(Ops.ADD, k)
    else:
        x = inp.index(k).load()
        value = inp.index(i).load() * (x * x).reduce(Ops.ADD, k)
    return sink(out.index(i).store(value).end(i))


def test_work_counts_a_reduction_once_per_iteration_of_what_it_reads():
    """A reduction counts the loops its operand depends on: an RMSNorm's sum of squares once (576 + 576, not
    576 * 576, so it stays on one core), a matvec's once per row."""
    norm, matvec = scaled_rows(576, 576, per_row=False), scaled_rows(576, 576, per_row=True)
    assert work_estimate(norm) == 576 + 576
    assert work_estimate(matvec) == 576 * 576 + 576
    assert split_cores(norm, 2) is norm
    assert core_count(split_cores(matvec, 2)) == 2


@pytest.mark.parametrize("n, cores", [(12, 2), (13, 2), (7, 3), (100, 7)])
def test_rows_partition_the_range(n, cores):
    """Core c's rows are [start, start + trip count): together exactly 0..n-1, each once."""
    split = split_cores(rows_kernel(n), cores, min_work=0)
    outer = split.src[0].src[1]
    core = next(u for u in split.toposort() if u.op is Ops.DEFINE_VAR)
    store_index = split.src[0].src[0].src[0].src[1]  # STORE(INDEX(out, i*m + j), ...)
    j = next(u for u in split.toposort() if u.op is Ops.RANGE and u.arg[0] == 1)
    seen = []
    for c in range(cores):
        trips = outer.src[0].evaluate({core: c})
        seen += [store_index.evaluate({core: c, outer: r, j: 0}) // 3 for r in range(trips)]
    assert sorted(seen) == list(range(n))


def test_what_is_not_split():
    small = rows_kernel(12)
    assert split_cores(small, 2) is small  # too little work for the default threshold
    assert split_cores(small, 1, min_work=0) is small
    assert split_cores(rows_kernel(3, m=3), 2, min_work=0) is rows_kernel(3, m=3)  # no range of 2 rows per core
    # a reduction to one value has no parallel range; one followed by more math cannot be combined by the runner
    mean = full_reduction(1 << 20, Ops.ADD, dtypes.float32, lambda r: r / (1 << 20))
    assert parallel_ranges(mean) == [] and split_cores(mean, 2, min_work=0) is mean
    short = full_reduction(3, Ops.ADD, dtypes.int32)  # not two iterations per core
    assert split_cores(short, 2, min_work=0) is short
    # two effects not inside one outer range
    a, b = UOp.param(0, dtypes.int32.ptr(8)), UOp.param(1, dtypes.int32.ptr(8))
    r0, r1 = UOp.range(8, 0), UOp.range(8, 1)
    two = sink(a.index(r0).store(r0.cast(dtypes.int32)).end(r0), b.index(r1).store(r1.cast(dtypes.int32)).end(r1))
    assert split_cores(two, 2, min_work=0) is two


def test_inner_range_split_when_the_outer_is_short():
    """A batch of 2 rows on 2 cores: the columns are split instead (each core runs both rows)."""
    ast = rows_kernel(2, m=12)
    split = split_cores(ast, 2, min_work=0)
    loops = split.src[0].src[1:]
    assert loops[0] is ast.src[0].src[1]  # the row range is untouched
    assert loops[1].src[0].op is Ops.CONST and loops[1].src[0].arg == 6  # 12 columns / 2 cores


def test_bad_input():
    with pytest.raises(ValueError, match="positive int"):
        split_cores(rows_kernel(8), 0)
    v = UOp.variable(CORE_ID, 0, 3)
    with pytest.raises(ValueError, match="reserves"):
        split_cores(rows_kernel(v + 8), 2, min_work=0)


@pytest.fixture
def cpu():
    dev = Device["CPU"]
    before = dev.renderer.name
    dev.select_renderer("LLVM")
    yield dev
    dev.configure_threads(0)
    dev.select_renderer(before)


@pytest.mark.parametrize("cores", [2, 3])
@pytest.mark.parametrize("n, m", [(4, 3), (13, 3), (64, 3), (2, 5), (1, 7)])
def test_split_kernels_run_on_the_pool(cpu, cores, n, m):
    cpu.configure_threads(cores, 0)
    inp = Buffer.from_numpy(np.arange(16, dtype=np.int32), "CPU")
    out = Buffer.from_numpy(np.full(64 * m, -7, np.int32), "CPU")
    runner = cpu.get_runner(rows_kernel(n, m))
    assert runner.cores == (cores if max(n, m) >= 2 * cores else 1)  # two rows per core at least
    runner([inp, out], {})
    want = np.full(64 * m, -7, np.int32)
    want[:n * m] = np.arange(n * m) + np.arange(16).sum()
    np.testing.assert_array_equal(out.numpy(), want)


def test_split_kernel_with_variable_rows(cpu):
    cpu.configure_threads(2, 0)
    n = UOp.variable("n", 0, 64)
    inp = Buffer.from_numpy(np.ones(16, dtype=np.int32), "CPU")
    for rows in (0, 1, 5, 64):
        out = Buffer.from_numpy(np.full(64 * 3, -1, np.int32), "CPU")
        runner = cpu.get_runner(rows_kernel(n))
        assert runner.cores == 2
        runner([inp, out], {"n": rows})
        want = np.full(64 * 3, -1, np.int32)
        want[:rows * 3] = np.arange(rows * 3) + 16
        np.testing.assert_array_equal(out.numpy(), want)


def test_full_reduction_structure():
    """A full reduction is split by its reduce range; core c stores its partial to element c of its output."""
    ast = full_reduction(1001, Ops.MAX, dtypes.float32)
    split = split_cores(ast, 3, min_work=0)
    assert core_count(split) == 3 and partial_reduction(split) == (1, Ops.MAX, dtypes.float32)
    assert partial_reduction(ast) is None and split_cores(ast, 3) is ast  # 1001 iterations: below thread_min_work
    target, red = split.src[0].src[:2]
    assert target.src[0].dtype.size == 3 and target.src[1].op is Ops.DEFINE_VAR
    core, rng = target.src[1], red.src[1]
    load_index = red.src[0].src[0].src[1]
    seen = [load_index.evaluate({core: c, rng: r}) for c in range(3) for r in range(rng.src[0].evaluate({core: c}))]
    assert sorted(seen) == list(range(1001))


# in the array's own dtype: integer sums and products wrap as the kernel's do
_NP_REDUCE = {Ops.ADD: lambda a: np.sum(a, dtype=a.dtype), Ops.MAX: np.max,
              Ops.MUL: lambda a: np.prod(a, dtype=a.dtype)}


@pytest.mark.parametrize("renderer", ["X86", "LLVM"])
@pytest.mark.parametrize("cores", [1, 2, 3])
@pytest.mark.parametrize("op", [Ops.ADD, Ops.MAX, Ops.MUL])
@pytest.mark.parametrize("dtype", [dtypes.float32, dtypes.int32, dtypes.float64, dtypes.int64, dtypes.uint8])
def test_full_reductions_match_numpy(cpu, renderer, cores, op, dtype):
    """Sums, maxima and products of sizes no core count divides, combined from per-core partials."""
    cpu.select_renderer(renderer)
    cpu.configure_threads(cores, 0)
    n = 10007
    rng = np.random.default_rng(cores)
    np_dtype = to_numpy_dtype(dtype)
    if op is Ops.MUL:  # near 1 (floats) or mostly 1 with a few 3s (ints, which wrap): no overflow to inf
        a = (1 + rng.standard_normal(n) * 1e-3) if dtypes.is_float(dtype) else rng.choice([1, 1, 1, 3, -1], n)
    else:
        a = rng.standard_normal(n) * 100
    a = a.astype(np_dtype)
    inp, out = Buffer.from_numpy(a, "CPU"), Buffer.from_numpy(np.zeros(1, np_dtype), "CPU")
    runner = cpu.get_runner(full_reduction(n, op, dtype))
    assert runner.cores == cores
    runner([inp, out], {})
    want = _NP_REDUCE[op](a)
    if dtypes.is_float(dtype):
        np.testing.assert_allclose(out.numpy()[0], want, rtol=1e-4 if dtype is dtypes.float32 else 1e-10)
    else:
        assert out.numpy()[0] == want


def test_tensor_reductions_use_all_cores(cpu):
    from tg_core.tensor import Tensor
    cpu.configure_threads(2, 0)
    a = np.random.default_rng(0).standard_normal(1001).astype(np.float32)
    np.testing.assert_allclose(Tensor(a).sum().numpy(), a.sum(), rtol=1e-5)
    np.testing.assert_allclose(Tensor(a).max().numpy(), a.max())
    np.testing.assert_allclose(Tensor(a).mean().numpy(), a.mean(), rtol=1e-5)  # stays on one core
    b = np.arange(-500, 501, dtype=np.int32)
    assert Tensor(b).sum().numpy() == b.sum() and Tensor(b).max().numpy() == 500


def test_pool_runs_parts_concurrently():
    """Each part on its own thread, the first on the caller's: all parts wait for each other at a barrier."""
    pool = CorePool(3)
    barrier = threading.Barrier(3, timeout=5)
    seen = []

    def part(i):
        barrier.wait()
        seen.append((i, threading.current_thread() is threading.main_thread()))
    try:
        pool.run(part, [[0], [1], [2]])
        assert sorted(seen) == [(0, True), (1, False), (2, False)]
        with pytest.raises(ValueError, match="4 parts of a kernel for a pool of 3 cores"):
            pool.run(part, [[0]] * 4)

        def fails_on_a_worker(i):
            if i == 2:
                raise ZeroDivisionError("part 2")
        with pytest.raises(ZeroDivisionError, match="part 2"):
            pool.run(fails_on_a_worker, [[0], [1], [2]])
        seen.clear()
        barrier.reset()
        pool.run(part, [[0], [1], [2]])  # still usable afterwards
        assert len(seen) == 3
    finally:
        pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(part, [[0]])


def test_split_kernels_run_in_a_forked_child(cpu):
    """A forked child has no worker threads of its parent: its pool starts its own."""
    import os
    cpu.configure_threads(2, 0)
    inp = Buffer.from_numpy(np.arange(16, dtype=np.int32), "CPU")
    cpu.get_runner(rows_kernel(64))([inp, Buffer("CPU", 64 * 3, dtypes.int32)], {})  # workers started here
    pid = os.fork()
    if pid == 0:  # the child: exit code 0 only if the split kernel ran and computed the right values
        import signal
        signal.alarm(20)  # a pool waiting for a worker that does not exist would hang: die instead
        try:
            out = Buffer("CPU", 64 * 3, dtypes.int32)
            cpu.get_runner(rows_kernel(64))([inp, out], {})
            os._exit(0 if out.numpy().tolist() == list(range(64 * 3 + 120))[120:] else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
