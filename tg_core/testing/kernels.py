"""Helpers for testing a renderer or compiler on kernels, shared by core's tests and plugins' tests.

Building kernel ASTs (`kernel`, `elementwise`), numpy buffers of any dtype and tg's exact values back
(`np_buf`, `py_values`, `same`), checking ALU ops, casts and random expressions against tg's exact semantics
with any way of running a kernel (`check_alu`, `check_cast`, `check_bitcast`, `check_random_expressions`),
running every kernel of a Tensor's schedule on numpy copies of its buffers (`run_schedule`), and capturing
the kernels the PYTHON reference device runs (`capture_kernels`, `op_matrix_programs`).

A "run" function takes a kernel AST and its numpy arrays in PARAM order and fills the arrays in place.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.uop import KernelInfo, Ops, UOp
from tg_core.uop.alu import bitcast_const, cast_const, exec_alu

INTS = [dtypes.int8, dtypes.uint8, dtypes.int16, dtypes.uint16, dtypes.int32, dtypes.uint32, dtypes.int64,
        dtypes.uint64]


def kernel(*effects: UOp, name: str = "k") -> UOp:
    return UOp(Ops.SINK, dtypes.void, effects, KernelInfo(name))


def softmax_kernel(rows: int = 8, cols: int = 16) -> UOp:
    """A row softmax as one kernel AST: a max over the row, then a sum of exp2(x - max) that needs it (dependent
    reduce ranges), then the output over the columns: the shape that END merging and lane expansion must keep."""
    from tg_core.uop.ops import AxisType
    f32 = dtypes.float32
    a, out = UOp.param(0, f32.ptr(rows * cols)), UOp.param(1, f32.ptr(rows * cols))
    i = UOp.range(rows, 0)
    r1, r2 = UOp.range(cols, 1, AxisType.REDUCE), UOp.range(cols, 2, AxisType.REDUCE)
    j = UOp.range(cols, 3)
    mx = a.index(i * cols + r1).load().reduce(Ops.MAX, r1)
    sm = (a.index(i * cols + r2).load() - mx).exp2().reduce(Ops.ADD, r2)
    return kernel(out.index(i * cols + j).store((a.index(i * cols + j).load() - mx).exp2() / sm).end(i, j))


def elementwise(fn, in_dts: list[DType], out_dt: DType, n: int, name: str = "ew") -> UOp:
    """out[i] = fn(in0[i], in1[i], ...) for i < n; PARAM i is input i, the output is the last PARAM."""
    ins = [UOp.param(i, dt.ptr(n)) for i, dt in enumerate(in_dts)]
    out = UOp.param(len(in_dts), out_dt.ptr(n))
    r = UOp.range(n, 0)
    return kernel(out.index(r).store(fn(*[p.index(r).load() for p in ins])).end(r), name=name)


def np_buf(values, dt: DType) -> np.ndarray:
    """A numpy array holding `values` as `dt` stores them (bfloat16 as its uint16 bits)."""
    if dt is dtypes.bfloat16:
        return np.array([bitcast_const(float(v), dt, dtypes.uint16) for v in values], dtype=np.uint16)
    return np.array(values, dtype=to_numpy_dtype(dt))


def py_values(arr: np.ndarray, dt: DType | None = None) -> list:
    """The Python values of an array `np_buf` made (bfloat16 read back from its bits)."""
    if dt is dtypes.bfloat16:
        return [bitcast_const(int(v), dtypes.uint16, dt) for v in arr]
    return [v.item() for v in arr]


def same(got, want, dt: DType) -> bool:
    """Equal, NaN for NaN, and floats within a tolerance of their dtype."""
    if dtypes.is_float(dt):
        if math.isnan(want):
            return math.isnan(got)
        tol = {dtypes.float16: 1e-3, dtypes.bfloat16: 1e-2, dtypes.float32: 1e-6}.get(dt, 1e-12)
        return got == want or math.isclose(got, want, rel_tol=tol, abs_tol=tol * 1e-3)
    return got == want


def int_pairs(dt: DType) -> tuple[list[int], list[int]]:
    """Operands for integer binary ops: signs, zero, the extremes; the divisors are never 0 for unsigned."""
    lo, hi = int(dtypes.min(dt)), int(dtypes.max(dt))  # an int dtype's bounds are ints
    a = [7, -7, 7, -7, 0, hi, lo, 100, lo + 1, 13]
    b = [2, 2, -2, -2, 3, 7, 3, -1, -1, 5]
    if dtypes.is_unsigned(dt):
        a, b = [x % (hi + 1) for x in a], [x % (hi + 1) or 1 for x in b]
    return a, b


def check_alu(run: Callable[[UOp, list[np.ndarray]], Any], op: Ops, out_dt: DType, in_dt: DType,
              *columns: list) -> None:
    """`op` over the columns of values, run by `run`, equals tg's exact ALU semantics element by element."""
    n = len(columns[0])
    ast = elementwise(lambda *xs: UOp(op, out_dt, xs), [in_dt] * len(columns), out_dt, n,
                      name=f"{op.name.lower()}_{in_dt.name}")
    out = np.zeros(n, to_numpy_dtype(out_dt))
    run(ast, [np_buf(c, in_dt) for c in columns] + [out])
    ins = [py_values(np_buf(c, in_dt), in_dt) for c in columns]
    for i, got in enumerate(py_values(out, out_dt)):
        want = exec_alu(op, out_dt, tuple(col[i] for col in ins), (in_dt,) * len(columns))
        assert same(got, want, out_dt), f"{op} {in_dt!r} {[c[i] for c in ins]}: got {got}, want {want}"


def cast_values(src: DType, dst: DType) -> list:
    """Values of `src` worth casting to `dst`: zero, signs, fractions, the type's ends, NaN and infinities, and
    floats near 2**63; a float -> int cast keeps only the values that fit `dst` (out of range is undefined)."""
    if dtypes.is_bool(src):
        return [False, True, True, False]
    if dtypes.is_float(src):
        vals = [0.0, 1.75, -2.5, 100.25, -0.0, 3e4, math.nan, math.inf, 2.0 ** 40, 1.5 * 2.0 ** 63]
        with np.errstate(over="ignore"):
            vals = [float(v) for v in np_buf(vals, src)]  # as src holds them (float16 overflows to inf)
        if dtypes.is_int(dst):
            lo, hi = dtypes.min(dst), dtypes.max(dst)
            vals = [v for v in vals if not math.isnan(v) and not math.isinf(v) and lo <= math.trunc(v) <= hi]
        return vals
    lo, hi = dtypes.min(src), dtypes.max(src)
    return [0, 1, hi, lo, 100 % (hi + 1), (-5) % (hi + 1) if lo == 0 else -5, hi // 3 * 2 + 1]


def check_cast(run: Callable[[UOp, list[np.ndarray]], Any], src: DType, dst: DType, vals: list) -> None:
    """`vals` as `src` cast to `dst`, run by `run`, equal tg's exact cast semantics (cast_const) value by value."""
    ast = elementwise(lambda a: a.cast(dst), [src], dst, len(vals), f"cast_{src.name}_{dst.name}")
    out = np.zeros(len(vals), to_numpy_dtype(dst))
    run(ast, [np_buf(vals, src), out])
    for v, got in zip(py_values(np_buf(vals, src), src), py_values(out, dst)):
        want = cast_const(v, src, dst)
        assert same(got, want, dst), f"cast {v!r} {src!r} -> {dst!r}: got {got!r}, want {want!r}"


def check_bitcast(run: Callable[[UOp, list[np.ndarray]], Any], src: DType, dst: DType, vals: list) -> None:
    """`vals` as `src` bitcast to `dst`, run by `run`, keep their bytes."""
    ast = elementwise(lambda a: a.bitcast(dst), [src], dst, len(vals), f"bitcast_{src.name}_{dst.name}")
    out = np.zeros(len(vals), to_numpy_dtype(dst))
    inp = np_buf(vals, src)
    run(ast, [inp, out])
    assert out.tobytes() == inp.tobytes()


def check_random_expressions(run: Callable[[UOp, list[np.ndarray]], Any], random_expr, dt: DType,
                             cases: int = 25, n: int = 8, seed: int = 7) -> None:
    """`cases` random expressions of two loaded values (built by `random_expr(rnd, leaves, dt, depth)`), run by
    `run` on random inputs, equal tg's own evaluation of the expression element by element."""
    rnd = np.random.default_rng(seed)
    for case in range(cases):
        a, b, out = UOp.param(0, dt.ptr(n)), UOp.param(1, dt.ptr(n)), UOp.param(2, dt.ptr(n))
        r = UOp.range(n, 0)
        la, lb = a.index(r).load(), b.index(r).load()
        expr = random_expr(rnd, [la, lb], dt, 4)
        ast = kernel(out.index(r).store(expr).end(r), name=f"rand_{case}")
        npdt = to_numpy_dtype(dt)
        if dtypes.is_int(dt):
            xa, xb = rnd.integers(-2**31, 2**31, n).astype(npdt), rnd.integers(-50, 50, n).astype(npdt)
        else:
            xa, xb = (rnd.standard_normal(n) * 4).astype(npdt), (rnd.standard_normal(n) * 4).astype(npdt)
        res = np.zeros(n, npdt)
        run(ast, [xa, xb, res])
        for i in range(n):
            want = expr.substitute({la: UOp.const(dt, xa[i].item()), lb: UOp.const(dt, xb[i].item())}).evaluate()
            assert same(res[i].item(), want, dt), f"case {case}, {expr.render()} at {xa[i]}, {xb[i]}: {res[i]}"


def run_schedule(t, run: Callable[[UOp, list[np.ndarray]], Any]) -> np.ndarray:
    """Every kernel of Tensor `t`'s schedule through `run`, on numpy copies of the input buffers (COPY items
    copied by numpy); `t`'s value as an array."""
    from tg_core.engine.realize import _buffers
    from tg_core.schedule import create_schedule
    items, out = create_schedule([t.uop], [t.device])
    arrays: dict = {}

    def array_of(node):
        if node not in arrays:
            known = _buffers.get(node)
            arrays[node] = known.numpy().copy() if known is not None and known.is_allocated() else \
                np.zeros(node.arg, dtype=to_numpy_dtype(node.dtype))
        return arrays[node]
    for ast, nodes in items:
        bufs = [array_of(n) for n in nodes]
        if ast.op is Ops.COPY:
            bufs[0][:] = bufs[1]
            continue
        run(ast, bufs)
    return array_of(out[t.uop]).reshape(t.shape)


def capture_kernels(build: Callable[[], Any]) -> list[UOp]:
    """The kernel ASTs the PYTHON reference device runs while `build()` runs, each once, in order."""
    from tg_core.device import Device
    asts: dict = {}
    cls = type(Device["PYTHON"])
    orig = cls.get_runner
    # patched on the class for the duration of build() (every PYTHON device instance), restored after
    cls.get_runner = lambda self, ast: (asts.setdefault(ast, None), orig(self, ast))[1]  # type: ignore[method-assign]
    try:
        build()
    finally:
        cls.get_runner = orig  # type: ignore[method-assign]
    return list(asts)


def op_matrix_programs() -> None:
    """Every unary and binary op of the conformance op matrix in every dtype it tests, plus matmul and conv2d,
    realized on the PYTHON reference device (for `capture_kernels`)."""
    from tg_core.tensor import Tensor
    from tg_core.testing import conformance as C
    rng = np.random.default_rng(0)

    def t(shape, dt):
        return Tensor((rng.standard_normal(shape) * 3).astype(dt), device="PYTHON")
    for _, op, _, dts in C._UNARY:
        for dt in dts:
            op(t((4, 6), dt)).numpy()
    for _, bop, _, dts in C._BINARY:
        for dt in dts:
            bop(t((4, 6), dt), t((6,), dt)).numpy()
    (t((5, 7), np.float32) @ t((7, 3), np.float32)).numpy()
    t((1, 2, 5, 5), np.float32).conv2d(t((3, 2, 3, 3), np.float32)).numpy()
