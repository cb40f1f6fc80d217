"""Codegen: kernel AST -> linear program. Structure (order, nesting, where reductions and invariant values
go, the dtypes of index math) and values (rendered with the LLVM IR renderer, run on the host, compared
with numpy)."""
import numpy as np
import pytest

from tg_core.codegen import LinearizeError, Opt, OptError, OptOps, Program, apply_opts, linearize_kernel, verify_program
from tg_core.codegen.lower_index import lower_index_dtype
from tg_core.dtype import AddrSpace, dtypes, to_numpy_dtype
from tg_core.uop import AxisType, Ops, UOp
from tg_core.uop.validate import check_oob

pytest.importorskip("llvmlite.binding")
from test_llvmir import kernel, run  # noqa: E402  (shared JIT helpers)

F32 = dtypes.float32
rng = np.random.default_rng(0)


def randn(*shape: int) -> np.ndarray:
    return rng.standard_normal(shape, np.float32)


def loops(prog) -> list[tuple[int, str]]:
    """(depth, "RANGE r<id>" / "END r<id>") for every loop op, in program order."""
    out, depth = [], 0
    for u in prog.uops:
        if u.op is Ops.RANGE:
            out.append((depth, f"RANGE r{u.arg[0]}"))
            depth += 1
        elif u.op is Ops.END:
            depth -= 1
            out.append((depth, f"END r{u.src[1].arg[0]}"))
    assert depth == 0
    return out


def enclosing(prog) -> dict:
    """Each uop -> the tuple of RANGEs open where it is (outermost first)."""
    out, stack = {}, []
    for u in prog.uops:
        if u.op is Ops.END:
            assert stack and stack[-1] is u.src[1], "ENDs must close the innermost open loop"
            stack.pop()
        out[u] = tuple(stack)
        if u.op is Ops.RANGE:
            stack.append(u)
    return out


def check_program(prog) -> None:
    verify_program(prog)


# ---- kernels ---------------------------------------------------------------------------------------------

def ew_2d(n: int, m: int):
    """out[i, j] = a[i, j] * b[i, j] + 1"""
    a, b, out = (UOp.param(k, F32.ptr(n * m)) for k in range(3))
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    idx = i * m + j
    return kernel(out.index(idx).store(a.index(idx).load() * b.index(idx).load() + 1.0).end(i, j), name="ew")


def row_sum(n: int, m: int, op: Ops = Ops.ADD):
    a, out = UOp.param(0, F32.ptr(n * m)), UOp.param(1, F32.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    return kernel(out.index(i).store(a.index(i * m + k).load().reduce(op, k)).end(i), name="row_reduce")


def softmax(n: int, m: int):
    a, out = UOp.param(0, F32.ptr(n * m)), UOp.param(1, F32.ptr(n * m))
    row, col = UOp.range(n, 0), UOp.range(m, 3)
    c1, c2 = UOp.range(m, 1, AxisType.REDUCE), UOp.range(m, 2, AxisType.REDUCE)
    mx = a.index(row * m + c1).load().reduce(Ops.MAX, c1)

    def e(c):
        return ((a.index(row * m + c).load() - mx) * 1.4426950408889634).exp2()
    total = e(c2).reduce(Ops.ADD, c2)
    return kernel(out.index(row * m + col).store(e(col) / total).end(row, col), name="softmax")


def matmul(n: int, m: int, k: int):
    a, b, out = UOp.param(0, F32.ptr(n * k)), UOp.param(1, F32.ptr(k * m)), UOp.param(2, F32.ptr(n * m))
    i, j, r = UOp.range(n, 0), UOp.range(m, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * m + j).load()).reduce(Ops.ADD, r)
    return kernel(out.index(i * m + j).store(acc).end(i, j), name="matmul")


def np_softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


# ---- structure and values ----------------------------------------------------------------------------------

def test_elementwise_2d():
    n, m = 5, 7
    x, y, out = randn(n, m), randn(n, m), np.zeros((n, m), np.float32)
    prog = run(ew_2d(n, m), [x, y, out])
    assert loops(prog) == [(0, "RANGE r0"), (1, "RANGE r1"), (1, "END r1"), (0, "END r0")]
    check_program(prog)
    np.testing.assert_allclose(out, x * y + 1, rtol=1e-6)
    # the row part of the index is computed once per row, outside the column loop
    where = enclosing(prog)
    row_mul = [u for u in prog.uops if u.op is Ops.MUL and u.dtype is dtypes.int32]
    assert row_mul and all(len(where[u]) == 1 for u in row_mul)
    assert [p.arg for p in prog.params] == [0, 1, 2] and prog.name == "ew"


def test_row_sum_accumulator():
    n, m = 6, 9
    x, out = rng.standard_normal((n, m), np.float32), np.zeros(n, np.float32)
    prog = run(row_sum(n, m), [x, out])
    check_program(prog)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)
    ops = [u.op for u in prog.uops]
    assert ops.count(Ops.DEFINE_REG) == 1 and ops.index(Ops.DEFINE_REG) < ops.index(Ops.RANGE)
    where, uops = enclosing(prog), list(prog.uops)
    reg = next(u for u in uops if u.op is Ops.DEFINE_REG)
    assert reg.dtype == F32.ptr(1, AddrSpace.REG)
    stores = [u for u in uops if u.op is Ops.STORE and u.src[0].dtype.addrspace is AddrSpace.REG]
    init, update = stores
    assert init.src[1].op is Ops.CONST and init.src[1].arg == 0.0 and len(where[init]) == 1  # in the row loop
    assert len(where[update]) == 2 and update.src[1].op is Ops.ADD
    result = next(u for u in uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.AFTER
                  and u.src[0].src[0].src[1].op is Ops.END)
    assert uops.index(result) > uops.index(next(u for u in uops if u.op is Ops.END)) and len(where[result]) == 1


@pytest.mark.parametrize("op,ref,ident", [(Ops.MAX, np.max, -np.inf), (Ops.MUL, np.prod, 1.0)])
def test_reduce_identities(op, ref, ident):
    n, m = 3, 5
    x, out = (rng.standard_normal((n, m)) - 3).astype(np.float32), np.zeros(n, np.float32)
    prog = run(row_sum(n, m, op), [x, out])
    np.testing.assert_allclose(out, ref(x, axis=1), rtol=1e-5)
    init = next(u for u in prog.uops if u.op is Ops.STORE and u.src[1].op is Ops.CONST)
    assert init.src[1].arg == ident


def test_softmax_reductions_once_per_row():
    n, m = 4, 10
    x, out = rng.standard_normal((n, m), np.float32), np.zeros((n, m), np.float32)
    prog = run(softmax(n, m), [x, out])
    check_program(prog)
    np.testing.assert_allclose(out, np_softmax(x), rtol=1e-5, atol=1e-7)
    # the max loop and the sum loop are siblings inside the row loop, before the column loop
    assert loops(prog) == [(0, "RANGE r0"), (1, "RANGE r1"), (1, "END r1"), (1, "RANGE r2"), (1, "END r2"),
                           (1, "RANGE r3"), (1, "END r3"), (0, "END r0")]
    where = enclosing(prog)
    exp2 = [u for u in prog.uops if u.op is Ops.EXP2]
    assert [tuple(r.arg[0] for r in where[u]) for u in exp2] == [(0, 2), (0, 3)]
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) == 2


def test_softmax_with_dynamic_rows():
    rows = UOp.variable("rows", 1, 64)
    m = 8
    a, out = UOp.param(0, F32.ptr(64 * m)), UOp.param(1, F32.ptr(64 * m))
    row, c1, col = UOp.range(rows, 0), UOp.range(m, 1, AxisType.REDUCE), UOp.range(m, 2)
    mx = a.index(row * m + c1).load().reduce(Ops.MAX, c1)
    ast = kernel(out.index(row * m + col).store(a.index(row * m + col).load() - mx).end(row, col), name="sub_max")
    x, res = rng.standard_normal((64, m), np.float32), np.zeros((64, m), np.float32)
    prog = run(ast, [x, res], {"rows": 5})
    np.testing.assert_allclose(res[:5], x[:5] - x[:5].max(1, keepdims=True))
    assert not res[5:].any()
    assert [v.arg[0] for v in prog.variables] == ["rows"] and prog.variables[0].dtype is dtypes.int32


def test_define_var_sized_range():
    nv = UOp.variable("n", 0, 32)
    a, out = UOp.param(0, F32.ptr(32)), UOp.param(1, F32.ptr(32))
    r = UOp.range(nv, 0)
    ast = kernel(out.index(r).store(a.index(r).load() * 2.0).end(r), name="scale_n")
    x = np.arange(32, dtype=np.float32)
    for n in (0, 7, 32):
        res = np.full(32, -1, np.float32)
        prog = run(ast, [x, res], {"n": n})
        assert res[:n].tolist() == (x[:n] * 2).tolist() and (res[n:] == -1).all()
    rng_op = next(u for u in prog.uops if u.op is Ops.RANGE)
    assert rng_op.src[0].op is Ops.DEFINE_VAR and rng_op.dtype is dtypes.int32


def test_gated_load_pad():
    """out[i] = a[i-2] for 2 <= i < n+2, else 0: a pad by 2 on each side."""
    n = 6
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n + 4))
    i = UOp.range(n + 4, 0)
    valid = (i >= 2) & (i < n + 2)
    ast = kernel(out.index(i).store(a.index(i - 2, valid).load() + 1.0).end(i), name="pad")
    x, res = np.arange(1, n + 1, dtype=np.float32), np.zeros(n + 4, np.float32)
    prog = run(ast, [x, res])
    np.testing.assert_array_equal(res, np.pad(x, 2) + 1)
    gated = [u for u in prog.uops if u.op is Ops.INDEX and len(u.src) == 3]
    assert len(gated) == 1 and gated[0].src[2].dtype is dtypes.bool


def test_int_division_of_negative_values():
    """Index math and values divide as C does: truncation toward zero, remainder with the dividend's sign."""
    n = 12
    a, b = UOp.param(0, dtypes.int32.ptr(n)), UOp.param(1, dtypes.int32.ptr(n))
    qo, ro, io = UOp.param(2, dtypes.int32.ptr(n)), UOp.param(3, dtypes.int32.ptr(n)), UOp.param(4, dtypes.int32.ptr(n))
    i = UOp.range(n, 0)
    va, vb = a.index(i).load(), b.index(i).load()
    idx_expr = ((i - 7) // 3 * 10 + (i - 7) % 3).cast(dtypes.int32)  # weakint index math on negatives
    ast = kernel(qo.index(i).store(va // vb).end(i), ro.index(i).store(va % vb).end(i),
                 io.index(i).store(idx_expr).end(i), name="cdiv")
    x = np.array([7, -7, 7, -7, 0, 5, -5, 100, -100, 1, -1, 2**31 - 1], np.int32)
    y = np.array([2, 2, -2, -2, 3, 7, 7, -9, 9, 1, 3, -2], np.int32)
    q, r, ix = (np.zeros(n, np.int32) for _ in range(3))
    prog = run(ast, [x, y, q, r, ix])
    tq = (np.abs(x.astype(np.int64)) // np.abs(y)) * np.sign(x) * np.sign(y)
    np.testing.assert_array_equal(q, tq)
    np.testing.assert_array_equal(r, x - tq * y)
    k = np.arange(n) - 7
    tk = np.trunc(k / 3).astype(np.int64)
    np.testing.assert_array_equal(ix, tk * 10 + (k - tk * 3))
    assert loops(prog) == [(0, "RANGE r0"), (0, "END r0")]  # three stores over one range: one loop


def test_casts_in_kernel():
    n = 6
    a = UOp.param(0, F32.ptr(n))
    out_dts = [dtypes.int32, dtypes.uint8, dtypes.bool, dtypes.float16]
    oi, ou, ob, oh = (UOp.param(k, dt.ptr(n)) for k, dt in enumerate(out_dts, 1))
    i = UOp.range(n, 0)
    v = a.index(i).load()
    ast = kernel(oi.index(i).store(v.cast(dtypes.int32)).end(i),
                 ou.index(i).store(v.cast(dtypes.int32).cast(dtypes.uint8)).end(i),
                 ob.index(i).store(v.cast(dtypes.bool)).end(i), oh.index(i).store(v.cast(dtypes.float16)).end(i),
                 name="casts")
    x = np.array([1.9, -1.9, 0.0, 300.5, -0.0, np.nan], np.float32)
    ri, ru, rb, rh = np.zeros(n, np.int32), np.zeros(n, np.uint8), np.zeros(n, np.bool_), np.zeros(n, np.float16)
    run(ast, [x, ri, ru, rb, rh])
    assert ri[:5].tolist() == [1, -1, 0, 300, 0] and ru[:5].tolist() == [1, 255, 0, 44, 0]
    assert rb.tolist() == [True, True, False, True, False, True]  # NaN is truthy
    np.testing.assert_array_equal(rh, x.astype(np.float16))


def test_nested_reduce_and_scalar_output():
    """out[0] = sum_i max_j a[i, j]: the inner max loop inside the outer sum loop; the store is in no loop."""
    n, m = 5, 6
    a, out = UOp.param(0, F32.ptr(n * m)), UOp.param(1, F32.ptr(1))
    i, j = UOp.range(n, 0, AxisType.REDUCE), UOp.range(m, 1, AxisType.REDUCE)
    val = a.index(i * m + j).load().reduce(Ops.MAX, j).reduce(Ops.ADD, i)
    x, res = rng.standard_normal((n, m), np.float32), np.zeros(1, np.float32)
    prog = run(kernel(out.index(UOp.const(dtypes.weakint, 0)).store(val), name="sum_max"), [x, res])
    check_program(prog)
    np.testing.assert_allclose(res[0], x.max(1).sum(), rtol=1e-5)
    assert loops(prog) == [(0, "RANGE r0"), (1, "RANGE r1"), (1, "END r1"), (0, "END r0")]
    assert not enclosing(prog)[next(u for u in prog.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM)]


def test_loop_invariant_load_hoisted():
    """out[i, j] = a[i] * b[j]: a[i] is loaded once per row, outside the column loop."""
    n, m = 4, 5
    a, b, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(m)), UOp.param(2, F32.ptr(n * m))
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    ast = kernel(out.index(i * m + j).store(a.index(i).load() * b.index(j).load()).end(i, j), name="outer")
    x, y, res = rng.standard_normal(n, np.float32), rng.standard_normal(m, np.float32), np.zeros((n, m), np.float32)
    prog = run(ast, [x, y, res])
    np.testing.assert_allclose(res, np.outer(x, y), rtol=1e-6)
    where = enclosing(prog)
    loads = {u.src[0].src[0].arg: len(where[u]) for u in prog.uops if u.op is Ops.LOAD}
    assert loads == {0: 1, 1: 2}


def test_deterministic():
    assert linearize_kernel(softmax(4, 8)).uops == linearize_kernel(softmax(4, 8)).uops


def test_lower_reduce_false_keeps_reduce():
    prog = linearize_kernel(row_sum(3, 4), lower_reduce=False)
    assert any(u.op is Ops.REDUCE for u in prog.uops) and not any(u.op is Ops.DEFINE_REG for u in prog.uops)
    assert not any(u.dtype is dtypes.weakint for u in prog.uops)


# ---- weakint lowering ---------------------------------------------------------------------------------------

def test_index_int64_only_where_needed():
    a = UOp.param(0, F32.ptr(2**40))
    i, j = UOp.range(2**20, 0), UOp.range(2**12, 1)
    sink = kernel(a.index(i * 2**20 + j).store(UOp.const(F32, 1.0)).end(i, j))
    low = lower_index_dtype(sink)
    idx = next(u for u in low.toposort() if u.op is Ops.INDEX).src[1]
    assert idx.dtype is dtypes.int64
    rngs = {u.arg[0]: u.dtype for u in low.toposort() if u.op is Ops.RANGE}
    assert rngs == {0: dtypes.int32, 1: dtypes.int32}  # the ranges fit; the products and sums are cast up
    assert not any(u.dtype is dtypes.weakint for u in low.toposort())
    small = lower_index_dtype(kernel(a.index(i).store(UOp.const(F32, 1.0)).end(i)))
    assert next(u for u in small.toposort() if u.op is Ops.INDEX).src[1].dtype is dtypes.int32


def test_wide_computation_with_narrow_result():
    v = UOp.variable("v", 0, 2**40)
    low = lower_index_dtype((v % 7).sink())
    mod = low.src[0]
    assert mod.dtype is dtypes.int64 and mod.src[0].dtype is dtypes.int64


# ---- opts ----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("opts", [[Opt(OptOps.UPCAST, 0, 4)], [Opt(OptOps.UPCAST, 1, 2)],
                                  [Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UPCAST, 1, 3)], [Opt(OptOps.UPCAST, 1, 0)]],
                         ids=str)
def test_upcast_elementwise(opts):
    n, m = 8, 6
    x, y, out = randn(n, m), randn(n, m), np.zeros((n, m), np.float32)
    prog = run(ew_2d(n, m), [x, y, out], opts=opts)
    check_program(prog)
    np.testing.assert_allclose(out, x * y + 1, rtol=1e-6)
    lanes = 1
    for o in opts:
        lanes *= o.amt or m
    assert sum(u.op is Ops.STORE for u in prog.uops) == lanes
    assert not any(u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL) for u in prog.uops)


@pytest.mark.parametrize("amt", [2, 4, 0])
def test_unroll_reduce(amt):
    n, m = 4, 8
    x, out = rng.standard_normal((n, m), np.float32), np.zeros(n, np.float32)
    prog = run(row_sum(n, m), [x, out], opts=[Opt(OptOps.UNROLL, 0, amt)])
    check_program(prog)
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5)
    loads = [u for u in prog.uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    assert len(loads) == (amt or m)
    assert len(loops(prog)) == (2 if amt == 0 else 4)  # a full unroll leaves only the row loop
    # one accumulator per lane, all updated in the one loop left over the reduce axis
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) == (0 if amt == 0 else amt)


def test_unrolled_lanes_combine_pairwise():
    """8 accumulator lanes are combined by a tree of depth 3 after the loop, not a chain of 7."""
    prog = linearize_kernel(row_sum(2, 16), opts=[Opt(OptOps.UNROLL, 0, 8)])
    out_store = next(u for u in prog.uops if u.op is Ops.STORE and u.src[0].src[0].op is Ops.PARAM)

    def depth(u):
        return 1 + max(depth(s) for s in u.src) if u.op is Ops.ADD else 0
    assert depth(out_store.src[1]) == 3


def test_matmul_upcast_unroll_share_one_reduce_loop():
    n, m, k = 4, 8, 6
    x, y = rng.standard_normal((n, k), np.float32), rng.standard_normal((k, m), np.float32)
    ref = x @ y
    opts = [Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 2)]
    out = np.zeros((n, m), np.float32)
    prog = run(matmul(n, m, k), [x, y, out], opts=opts)
    check_program(prog)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    # 4 output lanes x 2 reduce lanes: 8 accumulators, updated in one loop over k/2 (their ENDs merge)
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) == 8
    assert [d for d, _ in loops(prog)] == [0, 1, 2, 2, 1, 0]
    plain = np.zeros((n, m), np.float32)
    run(matmul(n, m, k), [x, y, plain])
    np.testing.assert_allclose(out, plain, rtol=1e-5, atol=1e-6)


def test_upcast_softmax_rows():
    n, m = 4, 6
    x, out = rng.standard_normal((n, m), np.float32), np.zeros((n, m), np.float32)
    prog = run(softmax(n, m), [x, out], opts=[Opt(OptOps.UPCAST, 0, 2), Opt(OptOps.UNROLL, 1, 3)])
    check_program(prog)
    np.testing.assert_allclose(out, np_softmax(x), rtol=1e-5, atol=1e-7)


def test_apply_opts_splits_ranges():
    ast = apply_opts(ew_2d(8, 6), [Opt(OptOps.UPCAST, 0, 4)])
    rngs = sorted((u.arg[0], u.arg[1], u.src[0].arg) for u in ast.toposort() if u.op is Ops.RANGE)
    assert rngs == [(0, AxisType.LOOP, 2), (1, AxisType.LOOP, 6), (2, AxisType.UPCAST, 4)]
    end = ast.src[0]
    assert [r.arg[0] for r in end.src[1:]] == [0, 2, 1]


def test_opt_errors():
    with pytest.raises(OptError, match="must be in 1..6"):
        apply_opts(ew_2d(8, 6), [Opt(OptOps.UPCAST, 1, 7)])
    with pytest.raises(OptError, match="REDUCE axes"):
        apply_opts(ew_2d(8, 6), [Opt(OptOps.UNROLL, 0, 2)])
    nv = UOp.variable("n", 1, 9)
    a = UOp.param(0, F32.ptr(9))
    r = UOp.range(nv, 0)
    with pytest.raises(OptError, match="not a constant"):
        apply_opts(kernel(a.index(r).store(UOp.const(F32, 0.0)).end(r)), [Opt(OptOps.UPCAST, 0, 0)])


@pytest.mark.parametrize("nv", [0, 1, 3, 4, 9])
def test_upcast_and_unroll_of_a_variable_size(nv):
    """An axis of size n (a variable) splits into n//4 groups of 4 lanes and a tail loop of n%4."""
    n = UOp.variable("n", 0, 9)
    a, out = UOp.param(0, F32.ptr(9 * 9)), UOp.param(1, F32.ptr(9))
    i, k = UOp.range(n, 0), UOp.range(n, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(i * 9 + k).load().reduce(Ops.ADD, k) * 2.0).end(i), name="var_split")
    x, res = randn(9, 9), np.full(9, -1.0, np.float32)
    prog = run(ast, [x, res], {"n": nv}, opts=[Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 4)])
    check_program(prog)
    want = np.full(9, -1.0, np.float32)
    want[:nv] = x[:nv, :nv].sum(1) * 2
    np.testing.assert_allclose(res, want, rtol=1e-5, atol=1e-6)


# ---- tails: amounts that do not divide the axis -----------------------------------------------------------------

def _lane_ranges_left(prog) -> bool:
    return any(u.op is Ops.RANGE and u.arg[1] in (AxisType.UPCAST, AxisType.UNROLL) for u in prog.uops)


@pytest.mark.parametrize("n,m,opts", [
    (7, 13, [Opt(OptOps.UPCAST, 1, 4)]),                            # 3 columns left: a tail range
    (7, 13, [Opt(OptOps.UPCAST, 1, 6)]),                            # 1 column left: a constant
    (7, 13, [Opt(OptOps.UPCAST, 0, 3), Opt(OptOps.UPCAST, 1, 5)]),  # both axes: the row tail copies the column split
    (7, 13, [Opt(OptOps.UPCAST, 1, 5), Opt(OptOps.UPCAST, 0, 3)]),  # the other order
    (1, 13, [Opt(OptOps.UPCAST, 1, 8)]),
], ids=str)
def test_upcast_with_tail_elementwise(n, m, opts):
    x, y, out = randn(n, m), randn(n, m), np.full((n, m), np.nan, np.float32)
    prog = run(ew_2d(n, m), [x, y, out], opts=opts)
    check_program(prog)
    np.testing.assert_allclose(out, x * y + 1, rtol=1e-6)  # every element written once, none missed
    assert not _lane_ranges_left(prog)


@pytest.mark.parametrize("op,ref", [(Ops.ADD, np.sum), (Ops.MAX, np.max)])
@pytest.mark.parametrize("amt", [3, 8, 12])
def test_unroll_with_tail_reduce(op, ref, amt):
    n, m = 5, 13
    x, out = randn(n, m), np.zeros(n, np.float32)
    prog = run(row_sum(n, m, op), [x, out], opts=[Opt(OptOps.UNROLL, 0, amt)])
    check_program(prog)
    np.testing.assert_allclose(out, ref(x, axis=1), rtol=1e-5, atol=1e-6)  # a sum near 0 has no relative accuracy
    loads = [u for u in prog.uops if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM]
    assert len(loads) == amt + (1 if m % amt else 0)  # the lanes, and the tail's one load in its own loop


@pytest.mark.parametrize("n,m,k", [(7, 21, 5), (9, 35, 3), (4, 16, 1)])
def test_matmul_register_tile_with_tails(n, m, k):
    x, y = randn(n, k), randn(k, m)
    out = np.zeros((n, m), np.float32)
    opts = [Opt(OptOps.UPCAST, 1, 16), Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UNROLL, 0, 2)]
    prog = run(matmul(n, m, k), [x, y, out], opts=opts[:2] + (opts[2:] if k >= 2 else []))
    check_program(prog)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)


def test_tail_keeps_values_that_do_not_depend_on_the_split_range_shared():
    """Splitting softmax's columns with a tail copies the store, not the row's max and sum: still one
    reduction loop each per row."""
    n, m = 3, 11
    x, out = randn(n, m), np.zeros((n, m), np.float32)
    prog = run(softmax(n, m), [x, out], opts=[Opt(OptOps.UPCAST, 1, 4)])
    check_program(prog)
    np.testing.assert_allclose(out, np_softmax(x), rtol=1e-5, atol=1e-7)
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) == 2
    # the max and sum reductions over a tail: both in the same row loop, combined after their loops
    prog = run(softmax(n, m), [x, out], opts=[Opt(OptOps.UNROLL, 0, 4), Opt(OptOps.UNROLL, 1, 8)])
    check_program(prog)
    np.testing.assert_allclose(out, np_softmax(x), rtol=1e-5, atol=1e-7)


def test_tail_int_reduction_exact():
    n, m = 3, 29
    a, out = UOp.param(0, dtypes.int32.ptr(n * m)), UOp.param(1, dtypes.int32.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store((a.index(i * m + k).load() * 3).reduce(Ops.ADD, k)).end(i), name="isum")
    x = rng.integers(-2**31, 2**31, (n, m), dtype=np.int64).astype(np.int32)
    res = np.zeros(n, np.int32)
    run(ast, [x, res], opts=[Opt(OptOps.UNROLL, 0, 8)])
    np.testing.assert_array_equal(res, (x * np.int32(3)).sum(1, dtype=np.int32))  # wrapping, as numpy's int32


def test_tail_of_a_triangular_loop():
    """A range whose size depends on the split range (cumsum's k < i+1) is renamed in the tail with its
    size at the tail's index."""
    n = 11
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n))
    i = UOp.range(n, 0)
    k = UOp.range(i + 1, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(k).load().reduce(Ops.ADD, k)).end(i), name="cumsum")
    x, res = randn(n), np.zeros(n, np.float32)
    prog = run(ast, [x, res], opts=[Opt(OptOps.UPCAST, 0, 4)])
    check_program(prog)
    np.testing.assert_allclose(res, np.cumsum(x), rtol=1e-5, atol=1e-6)


# ---- PACK: B panels in scratch ----------------------------------------------------------------------------------

@pytest.mark.parametrize("n,m,k,w,axis", [(5, 32, 7, 16, 1), (4, 12, 9, 4, 1), (3, 8, 1, 8, 1), (8, 5, 6, 4, 0),
                                           (4, 21, 5, 16, 1), (3, 10, 4, 3, 1)])  # a padded last panel
def test_pack_panels_values_and_loop_order(n, m, k, w, axis):
    """Panels of B's columns (axis 1), or of A's rows (axis 0: the same copy, reused by every column)."""
    x, y, out = randn(n, k), randn(k, m), np.zeros((n, m), np.float32)
    prog = run(matmul(n, m, k), [x, y, out], opts=[Opt(OptOps.PACK, axis, w)])
    check_program(prog)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-5)
    panel = next(u for u in prog.uops if u.op is Ops.DEFINE_REG and u.dtype.size > 1)
    assert panel.dtype.size == k * w
    # the panel loop is outermost; inside it the copy (k x w) comes before the loops that read it
    assert loops(prog)[0] == (0, f"RANGE r{axis}") or (n, m)[axis] == w
    stores = [u for u in prog.uops if u.op is Ops.STORE]
    copy = next(i for i, u in enumerate(prog.uops) if u.op is Ops.STORE and u.src[0].src[0].op is Ops.DEFINE_REG
                and u.src[0].src[0] is panel)
    assert copy < next(i for i, u in enumerate(prog.uops) if u.op is Ops.LOAD and u.src[0].src[0].op is Ops.AFTER
                       and u.src[0].src[0].src[0] is panel)
    assert len(stores) >= 2


def test_pack_in_a_fused_kernel_with_tiles():
    """out = relu(x @ y + bias): the bias (which uses the packed axis outside the reduction) reads the right
    columns; PACK then a register tile over the panel (its columns axis is LOOP axis 2) with a row tail."""
    n, m, k = 7, 32, 5
    a, b, bias, out = (UOp.param(0, F32.ptr(n * k)), UOp.param(1, F32.ptr(k * m)), UOp.param(2, F32.ptr(m)),
                       UOp.param(3, F32.ptr(n * m)))
    i, j, r = UOp.range(n, 0), UOp.range(m, 1), UOp.range(k, 2, AxisType.REDUCE)
    acc = (a.index(i * k + r).load() * b.index(r * m + j).load()).reduce(Ops.ADD, r) + bias.index(j).load()
    ast = kernel(out.index(i * m + j).store(UOp(Ops.MAX, F32, (acc, UOp.const(F32, 0.0)))).end(i, j), name="fused")
    x, y, bv, res = randn(n, k), randn(k, m), randn(m), np.zeros((n, m), np.float32)
    tile = [Opt(OptOps.PACK, 1, 16), Opt(OptOps.UPCAST, 2, 16), Opt(OptOps.UPCAST, 0, 4)]
    prog = run(ast, [x, y, bv, res], opts=tile)
    check_program(prog)
    np.testing.assert_allclose(res, np.maximum(x @ y + bv, 0), rtol=1e-5, atol=1e-5)
    # 20 columns: a padded second panel; the bias and the store are gated there, nothing is written past the end
    m2 = 20
    b2, bias2, out2 = UOp.param(1, F32.ptr(k * m2)), UOp.param(2, F32.ptr(m2)), UOp.param(3, F32.ptr(n * m2))
    j2 = UOp.range(m2, 1)
    acc2 = (a.index(i * k + r).load() * b2.index(r * m2 + j2).load()).reduce(Ops.ADD, r) + bias2.index(j2).load()
    relu2 = UOp(Ops.MAX, F32, (acc2, UOp.const(F32, 0.0)))
    ast2 = kernel(out2.index(i * m2 + j2).store(relu2).end(i, j2), name="fused2")
    y2, bv2 = randn(k, m2), randn(m2)
    res2 = np.full((n * m2 + 8,), 7.0, np.float32)  # 8 guard elements after the output
    opts2 = tile
    check_oob(apply_opts(ast2, opts2[:1]))  # the gates make every access of the packed kernel provably in bounds
    run(ast2, [x, y2, bv2, res2[:n * m2]], opts=opts2)
    np.testing.assert_allclose(res2[:n * m2].reshape(n, m2), np.maximum(x @ y2 + bv2, 0), rtol=1e-5, atol=1e-5)
    assert (res2[n * m2:] == 7.0).all()


def test_pack_errors():
    with pytest.raises(OptError, match="at least 16"):
        apply_opts(matmul(4, 12, 3), [Opt(OptOps.PACK, 1, 16)])
    with pytest.raises(OptError, match="one reduction"):
        apply_opts(ew_2d(4, 8), [Opt(OptOps.PACK, 1, 4)])
    # out[i, j] = sum_k a[i, k, j]: the load uses the rows too, so one panel cannot serve every row
    a, out = UOp.param(0, F32.ptr(4 * 3 * 8)), UOp.param(1, F32.ptr(4 * 8))
    i, j, r = UOp.range(4, 0), UOp.range(8, 1), UOp.range(3, 2, AxisType.REDUCE)
    ast = kernel(out.index(i * 8 + j).store(a.index(i * 24 + r * 8 + j).load().reduce(Ops.ADD, r)).end(i, j))
    with pytest.raises(OptError, match="exactly axes"):
        apply_opts(ast, [Opt(OptOps.PACK, 1, 4)])
    with pytest.raises(OptError, match="bytes of scratch"):
        apply_opts(matmul(2, 64, 2048), [Opt(OptOps.PACK, 1, 64)])


# ---- errors ------------------------------------------------------------------------------------------------

def test_unclosed_range_is_an_error():
    a = UOp.param(0, F32.ptr(4))
    r = UOp.range(4, 0)
    with pytest.raises(LinearizeError, match="never closed"):
        linearize_kernel(kernel(a.index(r).store(UOp.const(F32, 0.0))))


def test_improper_nesting_is_an_error():
    a = UOp.param(0, F32.ptr(16))
    i, j = UOp.range(4, 0), UOp.range(4, 1)
    st = a.index(i * 4 + j).store(UOp.const(F32, 0.0))
    st2 = a.index(j * 4 + i).store(UOp.const(F32, 1.0))
    with pytest.raises(LinearizeError, match="properly nested"):
        linearize_kernel(kernel(st.end(i, j), st2.end(j, i)))


def test_range_ended_inside_its_own_end_is_an_error():
    """A loop over r whose body needs another loop over r to have finished: the two ENDs cannot merge."""
    a, b = UOp.param(0, F32.ptr(16)), UOp.param(1, F32.ptr(16))
    r = UOp.range(16, 0)
    first = a.index(r).store(UOp.const(F32, 1.0)).end(r)
    second = b.index(r).store(a.after(first).index(r).load()).end(r)
    with pytest.raises(LinearizeError, match="r0 is ended twice"):
        linearize_kernel(kernel(first, second))


def test_index_simplification():
    """A reshape round trip ((i*m+j)//m*m + (i*m+j)%m) folds back to i*m+j: no division is left."""
    n, m = 3, 4
    a, out = UOp.param(0, F32.ptr(n * m)), UOp.param(1, F32.ptr(n * m))
    i, j = UOp.range(n, 0), UOp.range(m, 1)
    flat = i * m + j
    ast = kernel(out.index(flat).store(a.index(flat // m * m + flat % m).load()).end(i, j), name="reshape")
    x, res = randn(n, m), np.zeros((n, m), np.float32)
    prog = run(ast, [x, res])
    np.testing.assert_array_equal(res, x)
    assert not any(u.op in (Ops.IDIV, Ops.MOD) for u in prog.uops)
    assert len({u for u in prog.uops if u.op is Ops.INDEX and u.src[0].op is Ops.PARAM}) == 2


def test_variable_as_a_value():
    """A DEFINE_VAR cast to the value dtype: out[i] = a[i] + n."""
    nv = UOp.variable("n", 0, 8)
    a, out = UOp.param(0, F32.ptr(8)), UOp.param(1, F32.ptr(8))
    r = UOp.range(nv, 0)
    ast = kernel(out.index(r).store(a.index(r).load() + nv.cast(F32)).end(r), name="add_n")
    x, res = randn(8), np.zeros(8, np.float32)
    run(ast, [x, res], {"n": 6})
    np.testing.assert_allclose(res[:6], x[:6] + 6)


def test_renderer_program_uses_its_opts():
    from tg_core.renderer.llvmir import LLVMRenderer

    class Upcasting(LLVMRenderer):
        def opts_for(self, ast):
            return [Opt(OptOps.UNROLL, 0, 4)]
    prog = Upcasting().program(row_sum(2, 8))
    assert sum(u.op is Ops.LOAD and u.src[0].src[0].op is Ops.PARAM for u in prog.uops) == 4
    assert Upcasting().program(row_sum(2, 8), opts=[]).uops == linearize_kernel(row_sum(2, 8)).uops


def test_triangular_loop_cumsum():
    """out[i] = sum(a[j] for j <= i): the reduce range's end depends on the row range."""
    n = 7
    a, out = UOp.param(0, F32.ptr(n)), UOp.param(1, F32.ptr(n))
    i = UOp.range(n, 0)
    j = UOp.range(i + 1, 1, AxisType.REDUCE)
    x, res = randn(n), np.zeros(n, np.float32)
    prog = run(kernel(out.index(i).store(a.index(j).load().reduce(Ops.ADD, j)).end(i), name="cumsum"), [x, res])
    check_program(prog)
    np.testing.assert_allclose(res, np.cumsum(x), rtol=1e-5)
    assert loops(prog) == [(0, "RANGE r0"), (1, "RANGE r1"), (1, "END r1"), (0, "END r0")]


def test_independent_reductions_over_one_range_share_the_loop():
    n, m = 3, 6
    a, out = UOp.param(0, F32.ptr(n * m)), UOp.param(1, F32.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    v = a.index(i * m + k).load()
    ast = kernel(out.index(i).store(v.reduce(Ops.ADD, k) + v.reduce(Ops.MAX, k)).end(i), name="sum_plus_max")
    x, res = randn(n, m), np.zeros(n, np.float32)
    prog = run(ast, [x, res])
    check_program(prog)
    np.testing.assert_allclose(res, x.sum(1) + x.max(1), rtol=1e-5)
    assert loops(prog) == [(0, "RANGE r0"), (1, "RANGE r1"), (1, "END r1"), (0, "END r0")]
    assert sum(u.op is Ops.DEFINE_REG for u in prog.uops) == 2


def test_dependent_reductions_need_distinct_ranges():
    """sum_k (a[k] - max_k a[k]) with one RANGE for both reductions cannot be one loop: an error, not a cycle."""
    a, out = UOp.param(0, F32.ptr(4)), UOp.param(1, F32.ptr(1))
    k = UOp.range(4, 0, AxisType.REDUCE)
    v = a.index(k).load()
    bad = (v - v.reduce(Ops.MAX, k)).reduce(Ops.ADD, k)
    with pytest.raises(LinearizeError, match="r0"):
        linearize_kernel(kernel(out.index(UOp.const(dtypes.weakint, 0)).store(bad)))


@pytest.mark.parametrize("dt,op", [(dtypes.int32, Ops.MAX), (dtypes.int32, Ops.ADD), (dtypes.uint8, Ops.MAX),
                                   (dtypes.bool, Ops.MAX), (dtypes.bool, Ops.ADD), (dtypes.int64, Ops.MUL)])
def test_int_and_bool_reductions(dt, op):
    n, m = 4, 5
    a, out = UOp.param(0, dt.ptr(n * m)), UOp.param(1, dt.ptr(n))
    i, k = UOp.range(n, 0), UOp.range(m, 1, AxisType.REDUCE)
    ast = kernel(out.index(i).store(a.index(i * m + k).load().reduce(op, k)).end(i), name=f"reduce_{dt.name}")
    npdt = to_numpy_dtype(dt)
    x = (rng.integers(-3, 4, (n, m)) if dt is not dtypes.uint8 else rng.integers(0, 255, (n, m))).astype(npdt)
    x[0] = x[0].min() if dt is not dtypes.bool else False  # a row of equal (or all-false) values
    res = np.zeros(n, npdt)
    run(ast, [x, res])
    ref = {Ops.MAX: np.max, Ops.ADD: np.any if dt is dtypes.bool else np.sum, Ops.MUL: np.prod}[op](x, axis=1)
    np.testing.assert_array_equal(res, ref.astype(npdt))


def test_program_text():
    text = str(linearize_kernel(row_sum(2, 3)))
    assert text.startswith("program row_reduce\n") and "  RANGE dtypes.int" in text and "    LOAD dtypes.float" in text


def test_arguments_survive_simplification():
    """b[i]*0 folds away, and so does the only use of n: the signature still takes every buffer and variable."""
    nv = UOp.variable("n", 0, 9)
    a, b, out = (UOp.param(k, dtypes.int32.ptr(4)) for k in range(3))
    i = UOp.range(4, 0)
    val = a.index(i).load() + b.index(i).load() * 0 + (nv * 0).cast(dtypes.int32)
    prog = linearize_kernel(kernel(out.index(i).store(val).end(i)))
    assert not any(u.op is Ops.PARAM and u.arg == 1 for u in prog.uops)
    assert [p.arg for p in prog.params] == [0, 1, 2]
    assert [(v.arg[0], v.dtype) for v in prog.variables] == [("n", dtypes.int32)]
    x, res = np.arange(4, dtype=np.int32), np.zeros(4, np.int32)
    run(kernel(out.index(i).store(val).end(i)), [x, x, res], {"n": 3})
    assert res.tolist() == [0, 1, 2, 3]


def test_int64_loop_and_variable():
    """A range whose bound may exceed int32 loops in int64, and its variable is an int64 argument."""
    nv = UOp.variable("n", 0, 2**33)
    a, out = UOp.param(0, F32.ptr(2**33)), UOp.param(1, F32.ptr(2**33))
    i = UOp.range(nv, 0)
    ast = kernel(out.index(i).store(a.index(i).load() + 1.0).end(i), name="long_loop")
    x, res = randn(8), np.zeros(8, np.float32)
    prog = run(ast, [x, res], {"n": 5})
    np.testing.assert_allclose(res[:5], x[:5] + 1)
    assert not res[5:].any()
    assert prog.variables[0].dtype is dtypes.int64
    assert next(u for u in prog.uops if u.op is Ops.RANGE).dtype is dtypes.int64


# ---- the scheduler's kernels ------------------------------------------------------------------------------------

def _softmax(t):
    e = (t - t.max(1, keepdim=True)).exp()
    return e / e.sum(1, keepdim=True)


_X = rng.standard_normal((5, 7)).astype(np.float32)
_W = rng.standard_normal((7, 3)).astype(np.float32)
_TENSOR_CASES = {
    "softmax": lambda T: _softmax(T(_X)),
    "matmul": lambda T: (T(_X).reshape(5, 7, 1).expand(5, 7, 3) * T(_W).reshape(1, 7, 3).expand(5, 7, 3)).sum(1),
    "pad_flip": lambda T: T(_X).pad(((1, 2), (0, 3))).flip(0).exp2(),
    "int_where": lambda T: (T(_X) > 0).where(T((_X * 10).astype(np.int32)) * 3 - 7, -1).sum(0),
}


@pytest.mark.parametrize("name", list(_TENSOR_CASES))
def test_scheduler_kernels_match_the_reference_device(name, monkeypatch):
    """Kernel ASTs as the scheduler emits them, linearized, rendered and run on the host, give what the
    reference device computes (with and without opts)."""
    Tensor = pytest.importorskip("tg_core.tensor").Tensor
    from tg_core.codegen.opts import kernel_ranges
    from tg_core.plugins.builtin import PythonDevice
    from tg_core.renderer.llvmir import LLVMRenderer

    from test_llvmir import compile_and_run

    ref = _TENSOR_CASES[name](Tensor).numpy()

    def opts_for(ast, upcast: bool):
        if not upcast:
            return []
        picks = []
        for kind, op in ((AxisType.LOOP, OptOps.UPCAST), (AxisType.REDUCE, OptOps.UNROLL)):
            rs = [r for r in kernel_ranges(ast, kind) if r.src[0].op is Ops.CONST]
            amt = next((d for d in (2, 3, 5, 7) if rs and rs[0].src[0].arg % d == 0), 0)
            if amt:
                picks.append(Opt(op, kernel_ranges(ast, kind).index(rs[0]), amt))
        return picks

    for upcast in (False, True):
        def llvm_runner(self, ast, upcast=upcast):  # bound now: the runner must not see a later iteration's value
            prog = linearize_kernel(ast, opts=opts_for(ast, upcast))
            src = LLVMRenderer().render(prog)

            def run(bufs, var_vals):
                arrays = [np.frombuffer(b.opaque, dtype=to_numpy_dtype(b.dtype)) for b in bufs]
                compile_and_run(src, prog, arrays, var_vals)
            return run
        monkeypatch.setattr(PythonDevice, "get_runner", llvm_runner)
        np.testing.assert_allclose(_TENSOR_CASES[name](Tensor).numpy(), ref, rtol=1e-5, atol=1e-6)


def test_verify_program_rejects_broken_programs():
    prog = linearize_kernel(row_sum(2, 3))
    verify_program(prog)
    uops = list(prog.uops)
    inner, outer = (i for i, u in enumerate(uops) if u.op is Ops.END)
    swapped = list(uops)
    swapped[inner], swapped[outer] = uops[outer], uops[inner]
    broken = {
        "before it is defined": uops[1:] + uops[:1],
        "innermost open loop": swapped,
        "never closed": uops[:outer],
        "appears twice": uops + uops[-1:],
    }
    for msg, bad in broken.items():
        with pytest.raises(RuntimeError, match=msg):
            verify_program(Program(prog.name, tuple(bad), prog.params, prog.variables))
