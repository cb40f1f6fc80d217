"""The CPU opts heuristic: which opts it picks for the kernel shapes that matter, and that the kernels it
shapes (register tiles, tails, vector-width lanes) compute what numpy computes when compiled through LLVM
with the CPU's fast-math flags."""
import dataclasses

import numpy as np
import pytest

from tg_core.codegen import Opt, OptOps, linearize_kernel
from tg_core.codegen.lib.heuristic import CPUTarget, cpu_opts
from tg_core.dtype import dtypes
from tg_core.renderer.llvmir import LLVMRenderer
from tg_core.schedule import create_schedule
from tg_core.uop import AxisType, Ops, UOp

pytest.importorskip("llvmlite.binding")
from test_codegen import ew_2d, matmul, np_softmax, randn, row_sum, softmax  # noqa: E402
from test_llvmir import kernel, run  # noqa: E402

NO_AUTOVEC = CPUTarget(auto_vectorize=False)


class FastCPU(LLVMRenderer):
    float_flags, reduce_flags = "contract", "reassoc"


def test_matmul_gets_a_register_tile():
    unpacked = CPUTarget(pack=False)
    assert cpu_opts(matmul(64, 64, 32), unpacked) == [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4)]
    # AVX-512: two vectors of 16 columns
    assert cpu_opts(matmul(64, 64, 32), CPUTarget(vector_bytes=64, pack=False))[0] == Opt(OptOps.UPCAST, 1, 32)
    # few columns: all of them; few rows: all of them (the full split leaves no LOOP axis, so the count stays)
    assert cpu_opts(matmul(3, 10, 8), unpacked) == [Opt(OptOps.UPCAST, 1, 10), Opt(OptOps.UPCAST, 0, 3)]


def test_matmul_packs_b_then_tiles_the_panel():
    # PACK leaves axes (jo, i) plus the panel's columns jw (axis 2), which become the tile's 16 lanes
    packed_tile = [Opt(OptOps.PACK, 1, 16), Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UPCAST, 0, 4)]
    assert cpu_opts(matmul(64, 64, 32)) == packed_tile
    # AVX-512: panels of 32 columns; with K = 4096 that is 512 KB of scratch: two K blocks of 2048 rows, or (LLVM's
    # order) one vector (16) wide
    avx512 = CPUTarget(vector_bytes=64)
    assert cpu_opts(matmul(64, 64, 32), avx512)[0] == Opt(OptOps.PACK, 1, 32)
    assert cpu_opts(matmul(8, 64, 4096), avx512)[0] == Opt(OptOps.PACK, 1, 32, 2048)
    assert cpu_opts(matmul(8, 64, 4096), dataclasses.replace(avx512, blocks_first=False))[0] == Opt(OptOps.PACK, 1, 16)
    # columns the panel width does not divide: a padded last panel
    assert cpu_opts(matmul(64, 40, 32)) == packed_tile


def test_fewer_columns_than_lanes_tile_with_the_widest_vector_they_fill():
    """An MLP's 10 classes on AVX-512 (16 lanes): the tile of 8 lanes (10 columns, 4 rows), as on AVX2, not no
    tile at all; below 4 columns (an xmm vector) there is none."""
    avx512, avx2 = CPUTarget(vector_bytes=64, pack=False), CPUTarget(vector_bytes=32, pack=False)
    tile = [Opt(OptOps.UPCAST, 1, 10), Opt(OptOps.UPCAST, 0, 4)]
    assert cpu_opts(matmul(64, 10, 32), avx512) == tile == cpu_opts(matmul(64, 10, 32), avx2)
    assert cpu_opts(matmul(64, 10, 32), CPUTarget(vector_bytes=64))[0] == Opt(OptOps.PACK, 1, 10)
    assert cpu_opts(matmul(64, 5, 32), avx512) == [Opt(OptOps.UPCAST, 1, 5), Opt(OptOps.UPCAST, 0, 4)]
    assert cpu_opts(matmul(64, 3, 32), avx512) == []


def test_masked_targets_tile_more_than_half_a_vector_with_one_vector():
    """With masked partial vectors (X86's AVX-512), 9-15 columns are one 16-lane vector per row, with twice the
    rows (one vector of accumulators each); 8 columns fill half a vector: the 8-lane tile (one vector too).
    Without masks, the 10 columns are 8 lanes and 2 more (two vectors' worth of rows: 4)."""
    masked = CPUTarget(vector_bytes=64, pack=False, masked=True)
    assert cpu_opts(matmul(64, 10, 32), masked) == [Opt(OptOps.UPCAST, 1, 10), Opt(OptOps.UPCAST, 0, 8)]
    assert cpu_opts(matmul(64, 8, 32), masked) == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UPCAST, 0, 8)]
    assert cpu_opts(matmul(64, 10, 32), CPUTarget(vector_bytes=64, pack=False))[1] == Opt(OptOps.UPCAST, 0, 4)
    assert cpu_opts(matmul(64, 40, 32), masked)[:1] == cpu_opts(matmul(64, 40, 32), CPUTarget(vector_bytes=64,
                                                                                               pack=False))[:1]


def test_tile_rows_that_alias_in_l1_are_halved():
    """A's rows K floats apart: at K = 1024 (4 KB, L1's way size) every row of a tile maps to one L1 set, so the
    masked one-vector tile keeps 8 rows (an 8-way L1) instead of 16; where rows spread over sets (K = 1000, or
    784) or fit the ways (K = 512: two sets of 8 rows) the rows stay; a 12-way L1 of 64 sets (48 KB) keeps 8 too,
    the halving of 16, and a 16 KB 4-way one (64 sets) 4. The two-vector tile's 8 rows fit 8 ways and stay."""
    masked = CPUTarget(vector_bytes=64, tile_rows=8, masked=True)
    def rows(k: int, target: CPUTarget = masked, m: int = 10) -> int:
        return next(o.amt for o in cpu_opts(matmul(64, m, k), target) if o.op is OptOps.UPCAST and o.axis == 0)
    assert [rows(k) for k in (1024, 3072, 1000, 784, 512)] == [8, 8, 16, 16, 16]
    assert rows(1024, dataclasses.replace(masked, l1_bytes=48 * 1024, l1_ways=12)) == 8
    assert rows(1024, dataclasses.replace(masked, l1_bytes=16 * 1024, l1_ways=4)) == 4
    assert rows(1024, m=64) == 8 == rows(1000, m=64)


@pytest.mark.parametrize("n,m,k", [(9, 10, 33), (8, 5, 16)])
def test_narrow_tile_values_on_a_wide_target(n, m, k):
    x, y, out = randn(n, k), randn(k, m), np.zeros((n, m), np.float32)
    opts = cpu_opts(matmul(n, m, k), CPUTarget(vector_bytes=64))
    assert opts and opts[0].op is OptOps.PACK
    run(matmul(n, m, k), [x, y, out], opts=opts, renderer=FastCPU())
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_elementwise_and_row_reductions_left_to_the_loop_vectorizer():
    assert cpu_opts(ew_2d(64, 64)) == []
    assert cpu_opts(row_sum(64, 64)) == []
    assert cpu_opts(softmax(64, 64)) == []


def test_without_a_loop_vectorizer_lanes_are_vector_width():
    assert cpu_opts(ew_2d(64, 64), NO_AUTOVEC) == [Opt(OptOps.UPCAST, 1, 8)]
    assert cpu_opts(row_sum(64, 64), NO_AUTOVEC) == [Opt(OptOps.UNROLL, 0, 8)]
    # softmax: its columns, and both of its reductions over them
    assert cpu_opts(softmax(64, 64), NO_AUTOVEC) == [Opt(OptOps.UPCAST, 1, 8), Opt(OptOps.UNROLL, 0, 8),
                                                     Opt(OptOps.UNROLL, 1, 8)]
    # float64: 4 lanes of 32 bytes
    a, out = UOp.param(0, dtypes.float64.ptr(64)), UOp.param(1, dtypes.float64.ptr(64))
    r = UOp.range(64, 0)
    double = kernel(out.index(r).store(a.index(r).load() * 2.0).end(r))
    assert cpu_opts(double, NO_AUTOVEC) == [Opt(OptOps.UPCAST, 0, 4)]


def test_strided_axes_are_not_upcast():
    """A transpose's contiguous output axis reads with stride n: lanes there would be gathers."""
    n = 16
    a, out = UOp.param(0, dtypes.float32.ptr(n * n)), UOp.param(1, dtypes.float32.ptr(n * n))
    i, j = UOp.range(n, 0), UOp.range(n, 1)
    ast = kernel(out.index(i * n + j).store(a.index(j * n + i).load()).end(i, j))
    assert cpu_opts(ast, NO_AUTOVEC) == []


@pytest.mark.parametrize("n,m,k", [(64, 64, 32), (13, 37, 19), (5, 10, 784), (3, 9, 2), (13, 48, 7), (6, 32, 1)])
def test_tiled_matmul_values(n, m, k):
    x, y, out = randn(n, k), randn(k, m), np.zeros((n, m), np.float32)
    prog = run(matmul(n, m, k), [x, y, out], opts=cpu_opts(matmul(n, m, k)), renderer=FastCPU())
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) >= min(n, 4) * min(m, 16)


@pytest.mark.parametrize("shape", [(7, 13), (3, 64), (1, 5)])
def test_vector_width_lanes_values(shape):
    n, m = shape
    x, y, out = randn(n, m), randn(n, m), np.zeros((n, m), np.float32)
    run(ew_2d(n, m), [x, y, out], opts=cpu_opts(ew_2d(n, m), NO_AUTOVEC), renderer=FastCPU())
    np.testing.assert_allclose(out, x * y + 1, rtol=1e-6, atol=1e-6)  # an FMA rounds once
    s = np.zeros(n, np.float32)
    run(row_sum(n, m), [x, s], opts=cpu_opts(row_sum(n, m), NO_AUTOVEC), renderer=FastCPU())
    np.testing.assert_allclose(s, x.sum(1), rtol=1e-5, atol=1e-6)
    sm = np.zeros((n, m), np.float32)
    run(softmax(n, m), [x, sm], opts=cpu_opts(softmax(n, m), NO_AUTOVEC), renderer=FastCPU())
    np.testing.assert_allclose(sm, np_softmax(x), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("m", [20, 32])
def test_int_matmul_tile_is_exact(m):
    """Integer kernels get the same packed tiles (20 columns: a padded last panel); their arithmetic stays
    exact (wrapping int32, no float flags)."""
    n, k = 6, 7
    a, b, out = (UOp.param(p, dtypes.int32.ptr(size)) for p, size in enumerate((n * k, k * m, n * m)))
    i, j, r = UOp.range(n, 0), UOp.range(m, 1), UOp.range(k, 2, AxisType.REDUCE)
    ast = kernel(out.index(i * m + j).store((a.index(i * k + r).load() * b.index(r * m + j).load()).reduce(Ops.ADD, r))
                 .end(i, j), name="imatmul")
    opts = cpu_opts(ast)
    assert opts and opts[0].op is OptOps.PACK
    rng = np.random.default_rng(3)
    x = rng.integers(-2**31, 2**31, (n, k), dtype=np.int64).astype(np.int32)
    y = rng.integers(-2**31, 2**31, (k, m), dtype=np.int64).astype(np.int32)
    res = np.zeros((n, m), np.int32)
    run(ast, [x, y, res], opts=opts, renderer=FastCPU())
    exact = (x.astype(np.int64)[:, :, None] * y.astype(np.int64)[None]).sum(1)
    want = (exact & 0xFFFFFFFF).astype(np.uint32).view(np.int32)  # wrapped to int32
    np.testing.assert_array_equal(res, want)


def test_tiled_loops_are_not_loop_vectorized():
    """A loop updating several accumulators (a register tile) carries metadata turning off LLVM's loop
    vectorizer (the SLP vectorizer packs the lanes); a plain reduction loop does not."""
    tiled = FastCPU().render(linearize_kernel(matmul(8, 32, 16), opts=cpu_opts(matmul(8, 32, 16))))
    assert '!"llvm.loop.vectorize.enable", i1 false' in tiled and ", !llvm.loop !0" in tiled
    plain = FastCPU().render(linearize_kernel(row_sum(8, 32)))
    assert "llvm.loop" not in plain


_R = np.random.default_rng(5)
_X, _W1, _B1, _W2 = (_R.standard_normal(s).astype(np.float32) for s in ((9, 20), (20, 32), (32,), (32, 10)))
_IMG, _K = _R.standard_normal((2, 3, 9, 19)).astype(np.float32), _R.standard_normal((5, 3, 3, 3)).astype(np.float32)
_TENSOR_CASES = {
    "mlp": (lambda T: (T(_X) @ T(_W1) + T(_B1)).relu() @ T(_W2), lambda: np.maximum(_X @ _W1 + _B1, 0) @ _W2),
    "x_wT": (lambda T: T(_X) @ T(_W1.T.copy()).T, lambda: _X @ _W1),
    "col_max": (lambda T: T(_W1).max(0), lambda: _W1.max(0)),
    "conv_relu": (lambda T: T(_IMG).conv2d(T(_K), padding=1).relu(), None),
}


@pytest.mark.parametrize("name", list(_TENSOR_CASES))
def test_scheduler_kernels_with_cpu_opts(name):
    """Tensor programs' kernels (matmul + bias + relu fused, a 10-column layer, a transposed weight, a column
    reduction, a padded convolution) with the heuristic's opts (PACK, tiles, tails), compiled with the CPU
    flags, against numpy (the convolution against the reference device)."""
    from tg_core import Tensor

    import test_tensor_llvm

    def T(data):  # the reference device: what is compared is the compiled kernels, not another backend
        return Tensor(data, device="PYTHON")
    build, ref = _TENSOR_CASES[name]
    want = build(T).numpy() if ref is None else ref()
    orig = test_tensor_llvm.run
    test_tensor_llvm.run = lambda ast, bufs: run(ast, bufs, opts=cpu_opts(ast), renderer=FastCPU())
    try:
        got = test_tensor_llvm.run_llvm(build(T))
    finally:
        test_tensor_llvm.run = orig
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert any(cpu_opts(ast) for ast, _ in create_schedule([build(T).uop], ["PYTHON"])[0])


def _col_sum(n: int, m: int):
    a, out = UOp.param(0, dtypes.float32.ptr(n * m)), UOp.param(1, dtypes.float32.ptr(m))
    i, j = UOp.range(n, 1, AxisType.REDUCE), UOp.range(m, 0)
    return kernel(out.index(j).store(a.index(i * m + j).load().reduce(Ops.ADD, i)).end(j), name="col_sum")


@pytest.mark.parametrize("n,m", [(33, 64), (5, 19), (3, 8), (4, 100)])
def test_column_reduction_upcasts_the_columns(n, m):
    opts = cpu_opts(_col_sum(n, m))
    assert opts == [Opt(OptOps.UPCAST, 0, min(64, m))]
    x, out = randn(n, m), np.zeros(m, np.float32)
    run(_col_sum(n, m), [x, out], opts=opts, renderer=FastCPU())
    np.testing.assert_allclose(out, x.sum(0), rtol=1e-5, atol=1e-5)


def _matmul_bt(n: int, m: int, k: int):
    """out = x @ y.T with y stored (m, k): B's columns are rows of y."""
    a, b, out = (UOp.param(0, dtypes.float32.ptr(n * k)), UOp.param(1, dtypes.float32.ptr(m * k)),
                 UOp.param(2, dtypes.float32.ptr(n * m)))
    i, j, r = UOp.range(n, 0), UOp.range(m, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(j * k + r).load()).reduce(Ops.ADD, r)
    return kernel(out.index(i * m + j).store(acc).end(i, j), name="matmul_bt")


def test_transposed_b_is_packed_then_tiled():
    assert cpu_opts(_matmul_bt(64, 64, 32))[0] == Opt(OptOps.PACK, 1, 16)
    assert cpu_opts(_matmul_bt(64, 64, 32), CPUTarget(pack=False)) == []  # no unit-stride B: left to LLVM
    n, m, k = 9, 32, 13
    x, y, out = randn(n, k), randn(m, k), np.zeros((n, m), np.float32)
    run(_matmul_bt(n, m, k), [x, y, out], opts=cpu_opts(_matmul_bt(n, m, k)), renderer=FastCPU())
    np.testing.assert_allclose(out, x @ y.T, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("n", [13, 8])
def test_tile_on_a_core_share_of_rows(n):
    """A kernel split across 2 cores has a row axis whose size is an expression of core_id (13 rows: 6 and
    7): the tile still upcasts it, with a tail loop, and both cores together compute the product."""
    from tg_core.codegen.lib.threads import split_cores
    m, k = 32, 5
    ast = split_cores(matmul(n, m, k), 2, 0)
    opts = cpu_opts(ast)
    assert [o.op for o in opts] == [OptOps.PACK, OptOps.UPCAST, OptOps.UPCAST]
    x, y, out = randn(n, k), randn(k, m), np.zeros((n, m), np.float32)
    for core in range(2):
        run(ast, [x, y, out], {"core_id": core}, opts=opts, renderer=FastCPU())
    np.testing.assert_allclose(out, x @ y, rtol=1e-4, atol=1e-4)


def test_quantized_block_halves_are_unrolled_as_vectors():
    """A Q4_1 matvec reads each block's 16 bytes twice (low nibbles, then high): without a loop vectorizer the
    16 bytes are lanes and the two halves vectors of them (their shift amounts constants); LLVM's loop
    vectorizer gets no opts."""
    from tg_core.llm.dequant import GGMLType, dequantize
    from tg_core.tensor import Tensor
    raw = np.random.default_rng(0).integers(0, 256, size=(8 * 64 // 32, 20), dtype=np.uint8)
    w = dequantize(Tensor(raw), int(GGMLType.Q4_1)).reshape(8, 64)
    items, _ = create_schedule([(Tensor(np.ones((1, 64), np.float32)) @ w.T).uop])
    (ast,) = [a for a, _ in items if a.op is Ops.SINK]
    from tg_core.codegen.opts import kernel_ranges
    assert [r.src[0].arg for r in kernel_ranges(ast, AxisType.REDUCE)] == [2, 2, 16]  # blocks, halves, bytes
    assert cpu_opts(ast) == []
    assert cpu_opts(ast, CPUTarget(vector_bytes=64, auto_vectorize=False)) == [Opt(OptOps.UNROLL, 2, 16),
                                                                              Opt(OptOps.UNROLL, 1, 2)]
    # 8 lanes: the 16 bytes are two vectors, so the halves are four
    assert cpu_opts(ast, NO_AUTOVEC) == [Opt(OptOps.UNROLL, 2, 16), Opt(OptOps.UNROLL, 1, 2)]
    # a Q8_0 block's 32 int8s: two vectors (AVX-512), four (AVX2), no loop of their own
    raw = np.random.default_rng(0).integers(0, 256, size=(8 * 64 // 32, 34), dtype=np.uint8)
    w = dequantize(Tensor(raw), int(GGMLType.Q8_0)).reshape(8, 64)
    items, _ = create_schedule([(Tensor(np.ones((1, 64), np.float32)) @ w.T).uop])
    (ast,) = [a for a, _ in items if a.op is Ops.SINK]
    assert cpu_opts(ast, NO_AUTOVEC) == cpu_opts(ast, CPUTarget(vector_bytes=64, auto_vectorize=False)) == \
        [Opt(OptOps.UNROLL, 1, 32)]
    assert cpu_opts(ast) == []
    # rows of x (prefill's tokens) share each decoded weight vector where the target asks for it
    items, _ = create_schedule([(Tensor(np.ones((6, 64), np.float32)) @ w.T).uop])
    (ast,) = [a for a, _ in items if a.op is Ops.SINK]
    rows = CPUTarget(vector_bytes=64, auto_vectorize=False, quant_rows=4)
    assert cpu_opts(ast, rows) == [Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 1, 32)]
    assert cpu_opts(ast, CPUTarget(vector_bytes=64, auto_vectorize=False)) == [Opt(OptOps.UNROLL, 1, 32)]
    assert cpu_opts(ast, CPUTarget(quant_rows=4)) == []  # the LLVM target: its loop vectorizer
