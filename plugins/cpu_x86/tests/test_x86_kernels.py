"""Whole kernels through the X86 renderer against numpy: the kernels of real Tensor programs, register
pressure that forces spills (many values live across loops, many accumulators), more arguments than the
System V argument registers, loops whose trip count is a variable (zero included), and optimized (upcast,
unrolled) kernels. Every kernel's code is also checked against capstone (x86_harness)."""
from __future__ import annotations

import numpy as np
import pytest

from tg_core import Tensor
from tg_core.codegen.opts import Opt, OptOps
from tg_core.dtype import dtypes, to_numpy_dtype
from tg_core.testing.kernels import kernel, run_schedule
from tg_core.testing.programs import tensor_programs
from tg_core.uop import AxisType, Ops, UOp

from x86_harness import compile_x86, renderer_for, run_x86

RNG = np.random.default_rng(3)


def run_tensor(t: Tensor, opts_for=lambda ast: (), own_opts: bool = False, isa: str | None = None) -> list:
    """Every kernel of `t`'s schedule through X86 for `isa` (see run_x86), on numpy copies of the input buffers;
    the result and the compiled kernels."""
    kernels: list = []
    out = run_schedule(t, lambda ast, bufs: kernels.append(
        run_x86(ast, bufs, opts=() if own_opts else opts_for(ast), own_opts=own_opts, isa=isa)))
    return out, kernels


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


CASES = tensor_programs(RNG)


@pytest.mark.parametrize("tuned", [False, True], ids=["plain", "renderer_opts"])
@pytest.mark.parametrize("name", CASES)
def test_tensor_kernels_match_numpy(name, tuned):
    """As scheduled, and with the opts the renderer asks for (lanes, register tiles, peeled tails)."""
    Tensor.manual_seed(11)
    t = CASES[name]()
    got, _ = run_tensor(t, renderer_for().opts_for if tuned else lambda ast: ())
    want = t.numpy()  # the default device, or the reference interpreter
    if want.dtype.kind == "f":
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    else:
        np.testing.assert_array_equal(got, want)


def test_optimized_matmul():
    """UPCAST and UNROLL make many accumulators and values live in one loop body."""
    a, b = f32(8, 16), f32(16, 8)
    t = Tensor(a) @ Tensor(b)
    opts = (Opt(OptOps.UPCAST, 0, 4), Opt(OptOps.UPCAST, 1, 4), Opt(OptOps.UNROLL, 0, 4))
    got, _ = run_tensor(t, lambda ast: opts if any(u.op is Ops.REDUCE for u in ast.toposort()) else ())
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


# ---- register pressure ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dt, n_live", [(dtypes.float32, 24), (dtypes.float64, 20), (dtypes.int32, 20),
                                        (dtypes.int64, 18)], ids=lambda x: getattr(x, "name", str(x)))
def test_values_live_across_a_loop_spill(dt, n_live):
    """n_live loop-invariant values (more than the registers of their class) all used in every iteration:
    out[i] = sum_k x[k] * (b[i] + k)."""
    n = 13
    xs, b, out = UOp.param(0, dt.ptr(n_live)), UOp.param(1, dt.ptr(n)), UOp.param(2, dt.ptr(n))
    vals = [xs.index(UOp.const(dtypes.weakint, k)).load() for k in range(n_live)]
    r = UOp.range(n, 0)
    bi = b.index(r).load()
    total = None
    for k, v in enumerate(vals):
        term = v * (bi + UOp.const(dt, k))
        total = term if total is None else total + term
    ast = kernel(out.index(r).store(total).end(r), name="pressure")
    npdt = to_numpy_dtype(dt)
    x_np = (RNG.integers(-5, 5, n_live) if dtypes.is_int(dt) else RNG.standard_normal(n_live)).astype(npdt)
    b_np = (RNG.integers(-5, 5, n) if dtypes.is_int(dt) else RNG.standard_normal(n)).astype(npdt)
    res = np.zeros(n, npdt)
    k = run_x86(ast, [x_np, b_np, res])
    assert k.allocation.spilled, "more live values than registers must spill"
    want = sum(x_np[j] * (b_np + npdt.type(j)) for j in range(n_live))
    if dtypes.is_float(dt):
        np.testing.assert_allclose(res, want, rtol=1e-5)
    else:
        np.testing.assert_array_equal(res, want)


def test_many_accumulators_spill_and_stay_correct():
    """20 reductions over one loop: 20 loop-carried accumulators (more than 16 xmm registers)."""
    n_acc, m = 20, 11
    a, out = UOp.param(0, dtypes.float32.ptr(n_acc * m)), UOp.param(1, dtypes.float32.ptr(n_acc))
    stores = []
    for j in range(n_acc):
        k = UOp.range(m, 1, AxisType.REDUCE)
        stores.append(out.index(UOp.const(dtypes.weakint, j)).store(
            (a.index(k * n_acc + j).load() * float(j + 1)).reduce(Ops.ADD, k)))
    ast = kernel(*stores, name="accs")
    x, res = f32(m, n_acc), np.zeros(n_acc, np.float32)
    k = run_x86(ast, [x, res])
    np.testing.assert_allclose(res, (x * np.arange(1, n_acc + 1, dtype=np.float32)).sum(0), rtol=1e-5)
    assert k.allocation.spilled


def test_pressure_uses_callee_saved_registers():
    """Under integer pressure the callee-saved registers are used: saved at entry, restored before ret (the
    caller, Python itself, would crash otherwise)."""
    prog, k = compile_x86(_int_pressure_kernel(14))
    text = k.asm_str()
    assert "push rbx" in text and "pop rbx" in text
    light, kl = compile_x86(_int_pressure_kernel(2))
    assert "push" not in kl.asm_str(), "callee-saved registers are saved only when used"
    x, b, res = np.arange(14, dtype=np.int32), np.arange(9, dtype=np.int32), np.zeros(9, np.int32)
    run_x86(_int_pressure_kernel(14), [x, b, res])
    np.testing.assert_array_equal(res, sum(x[j] ^ (b + j) for j in range(14)))


def _int_pressure_kernel(n_live: int):
    n = 9
    xs, b = UOp.param(0, dtypes.int32.ptr(n_live)), UOp.param(1, dtypes.int32.ptr(n))
    out = UOp.param(2, dtypes.int32.ptr(n))
    vals = [xs.index(UOp.const(dtypes.weakint, k)).load() for k in range(n_live)]
    r = UOp.range(n, 0)
    bi = b.index(r).load()
    total = None
    for k, v in enumerate(vals):
        term = v ^ (bi + UOp.const(dtypes.int32, k))
        total = term if total is None else total + term
    return kernel(out.index(r).store(total).end(r), name=f"ipressure{n_live}")


# ---- the ABI -------------------------------------------------------------------------------------------

def test_more_arguments_than_registers():
    """10 buffers and 3 int variables: arguments 7 to 13 come on the stack."""
    n_in, n = 9, 5
    ins = [UOp.param(i, dtypes.float32.ptr(n)) for i in range(n_in)]
    out = UOp.param(n_in, dtypes.float32.ptr(n))
    s, t, u = (UOp.variable(name, 0, 100, dtypes.int32) for name in ("s", "t", "u"))
    r = UOp.range(n, 0)
    total = None
    for i, p in enumerate(ins):
        term = p.index(r).load() * float(i + 1)
        total = term if total is None else total + term
    total = total + (s * 100 + t * 10 + u).cast(dtypes.float32)
    ast = kernel(out.index(r).store(total).end(r), name="many_args")
    arrays = [f32(n) for _ in range(n_in)]
    res = np.zeros(n, np.float32)
    k = run_x86(ast, arrays + [res], {"s": 3, "t": 5, "u": 7})
    assert "[rsp +" in k.asm_str()  # stack arguments are read relative to rsp
    want = sum(a * (i + 1) for i, a in enumerate(arrays)) + 357
    np.testing.assert_allclose(res, want, rtol=1e-5)


@pytest.mark.parametrize("count", [0, 1, 17])
def test_variable_trip_count(count):
    n = UOp.variable("n", 0, 32, dtypes.int32)
    a, out = UOp.param(0, dtypes.float32.ptr(32)), UOp.param(1, dtypes.float32.ptr(32))
    r = UOp.range(n, 0)
    ast = kernel(out.index(r).store(a.index(r).load() + 1.0).end(r), name="var_loop")
    x, res = f32(32), np.full(32, -9, np.float32)
    run_x86(ast, [x, res], {"n": count})
    np.testing.assert_allclose(res[:count], x[:count] + 1)
    assert (res[count:] == -9).all(), "nothing is written past the trip count"


def test_nested_loops_with_reduction():
    a = f32(6, 7, 8)
    got, _ = run_tensor(Tensor(a).sum(2).max(1))
    np.testing.assert_allclose(got, a.sum(2).max(1), rtol=1e-5)


# ---- ymm vectors -----------------------------------------------------------------------------------------

VECTOR_CASES = {
    "elementwise": (lambda a, b: a * b[:24] + 1.5, True),
    "broadcast_div_max": (lambda a, b: (a / (b[:24].abs() + 1)).maximum(a - b[0:1, :]), False),
    "matmul": (lambda a, b: a @ b, True),
    "matmul_transposed": (lambda a, b: a @ b.T, False),
    "matmul_bias_relu": (lambda a, b: (a @ b + b[0]).relu(), True),
    "sum_rows": (lambda a, b: a.sum(1), True),
    "sum_all": (lambda a, b: a.sum(), True),
    "max_rows": (lambda a, b: a.max(1), True),
    "peeled_tail": (lambda a, b: a[:, :13] * 2 + b[:24, 3:16], True),  # 8 lanes as a vector, 5 scalar
    "conv": (lambda a, b: a.reshape(1, 1, 24, 32).conv2d(b[:4, :3].reshape(4, 1, 3, 1)).relu(), False),
    "softmax": (lambda a, b: a.softmax(), True),
    "exp_where": (lambda a, b: (a > 0).where(a.exp(), b[:24] * 2), True),
    "log_softmax": (lambda a, b: a.log_softmax(), True),  # the row's log is scalar code on a vector sum
    "log_elementwise": (lambda a, b: (a.abs() + 1).log() * 2, False),
    "layernorm": (lambda a, b: a.layernorm() * b[0, :32] + b[1, :32], True),  # per-row sqrt/reciprocal scalar
    "sqrt_elementwise": (lambda a, b: (a.abs() + 1).sqrt() + b[:24].reciprocal(), False),
    "max_rows_nan": (lambda a, b: (a / (a - a[0:1])).max(1, keepdim=True) + b[:24], False),
    "int_roundtrip": (lambda a, b: (a * 100).cast("int32").cast("float32") + (a * 8).cast("int32").bitcast("float32"),
                      True),
}


@pytest.mark.parametrize("name", VECTOR_CASES)
def test_vector_lanes(name):
    """The renderer's own linearization (vector lanes where a kernel packs into ymm registers whole, scalar
    code otherwise) against numpy; the kernels expected to pack do."""
    fn, packs = VECTOR_CASES[name]
    a, b = f32(24, 32), f32(32, 32)
    t = fn(Tensor(a), Tensor(b))
    got, kernels = run_tensor(t, own_opts=True)
    np.testing.assert_allclose(got, fn(Tensor(a), Tensor(b)).numpy(), rtol=1e-5, atol=1e-5)
    if packs:
        assert any("ymm" in k.asm_str() for k in kernels)


def test_vector_reductions_keep_nan():
    x = f32(4, 64)
    x[1, 37], x[3, 0] = np.nan, np.nan
    for t, want in ((Tensor(x).max(1), x.max(1)), (Tensor(x).sum(1), x.sum(1))):
        got, kernels = run_tensor(t, own_opts=True)
        assert any("vextractf128" in k.asm_str() for k in kernels)
        np.testing.assert_allclose(got, want, rtol=1e-5)


def test_vector_max_keeps_nan():
    x = np.array([np.nan, 1, 2, 3, -1, np.nan, 5, 6] * 2, np.float32)
    y = np.array([1, np.nan, 1, 4, -2, np.nan, 9, 0] * 2, np.float32)
    got, kernels = run_tensor(Tensor(x).maximum(Tensor(y)), own_opts=True)
    assert "vmaxps" in kernels[0].asm_str()
    np.testing.assert_array_equal(got, np.maximum(x, y))


def test_reduction_read_by_scalar_math_is_a_vector_reduction():
    """A max whose scalar result is scaled before use (softmax's first pass) still runs its accumulators as
    one ymm vector folded by shuffles, NaN kept."""
    x = f32(4, 64)
    x[2, 9] = np.nan
    t = Tensor(x).max(1) * 3 + Tensor(x).sum(1) * 0.5
    got, kernels = run_tensor(t, own_opts=True)
    text = "\n".join(k.asm_str() for k in kernels)
    assert "vmaxps ymm" in text and "vextractf128" in text
    np.testing.assert_allclose(got, x.max(1) * 3 + x.sum(1) * 0.5, rtol=1e-5)


def test_vector_products_added_once_are_fmas():
    """a*b + c on ymm lanes is one vfmadd213ps when the product has no other use; a product also used
    elsewhere stays a vmulps."""
    a, b, c = f32(4, 32), f32(4, 32), f32(4, 32)
    got, kernels = run_tensor(Tensor(a) * Tensor(b) + Tensor(c), own_opts=True)
    np.testing.assert_allclose(got, a * b + c, rtol=1e-5, atol=1e-6)
    assert "vfmadd213ps ymm" in kernels[-1].asm_str() and "vmulps" not in kernels[-1].asm_str()
    p = Tensor(a) * Tensor(b)
    got, kernels = run_tensor((p + Tensor(c)) * p, own_opts=True)
    np.testing.assert_allclose(got, (a * b + c) * (a * b), rtol=1e-5, atol=1e-6)
    assert "vmulps" in kernels[-1].asm_str()


def _random_tensor_expr(rnd: np.random.Generator, leaves: list, depth: int):
    if depth == 0 or rnd.random() < 0.2:
        return leaves[int(rnd.integers(len(leaves)))] if rnd.random() < 0.8 else float(rnd.integers(-4, 5)) / 2
    a, b = (_random_tensor_expr(rnd, leaves, depth - 1) for _ in range(2))
    if not isinstance(a, Tensor):
        a, b = b, a
    if not isinstance(a, Tensor):
        return a + b
    kind = ["add", "sub", "mul", "div", "max", "where", "exp", "relu"][int(rnd.integers(8))]
    return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "div": lambda: a / (a * a + 1),
            "max": lambda: a.maximum(b), "where": lambda: (a < b).where(a, b * 3), "exp": lambda: (a * 0.25).exp(),
            "relu": lambda: a.relu()}[kind]()


def test_random_vector_kernels_match_reference():
    """Random float expressions (broadcasts, reductions at the end) through the renderer's own linearization
    (ymm vectors where they pack) against the reference interpreter; most of them do take the vector path."""
    vectorized = 0
    for seed in range(12):
        x, y, z = f32(3, 40), f32(3, 40), f32(1, 40)

        def build(dev, seed=seed, x=x, y=y, z=z):
            leaves = [Tensor(x, device=dev), Tensor(y, device=dev), Tensor(z, device=dev)]
            e = _random_tensor_expr(np.random.default_rng(seed), leaves, 4)
            e = e if isinstance(e, Tensor) else leaves[0] + e
            return [e, e.sum(1), e.max(1)][seed % 3]
        got, kernels = run_tensor(build("PYTHON"), own_opts=True)
        np.testing.assert_allclose(got, build("PYTHON").numpy(), rtol=1e-4, atol=1e-5, err_msg=f"seed {seed}")
        vectorized += any("ymm" in k.asm_str() for k in kernels)
    assert vectorized >= 6


@pytest.mark.parametrize("m, k, n", [(40, 64, 48), (8, 1024, 16)])
def test_vector_matmul_with_packed_panels(m, k, n):
    """B's columns are copied into a panel on the stack (a register array wider than one element), which the
    4x16 tile then reads with vector loads; a K of 1024 makes a 64 KB frame."""
    a, b = f32(m, k), f32(k, n)
    got, kernels = run_tensor(Tensor(a) @ Tensor(b), own_opts=True)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4)
    text = "\n".join(k.asm_str() for k in kernels)
    assert "vfmadd231ps ymm" in text and "ymmword ptr [rsp + " in text
    # the panel copy's columns are lanes too: rows are copied by vector stores into the stack array
    assert any(t.startswith("vmovups ymmword ptr [rsp + ") for t in text.splitlines())
