"""The X86 renderer's ALU ops, casts and memory forms on every dtype it supports, against tg's exact
scalar semantics (alu.py) element by element; every kernel's code is checked against capstone."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tg_core.codegen import linearize_kernel
from tg_core.dtype import DType, dtypes, to_numpy_dtype
from tg_core.renderer import UnsupportedDTypeError
from tg_core.testing.kernels import (
    INTS,
    cast_values,
    check_bitcast,
    check_cast,
    check_random_expressions,
    elementwise,
    int_pairs,
    kernel,
    np_buf,
)
from tg_core.testing.kernels import check_alu as shared_check_alu
from tg_core.uop import Ops, UOp
from tg_core.uop.alu import exec_alu
from tg_cpu_x86.x86.renderer import X86Renderer

from x86_harness import run_x86

FLOATS = [dtypes.float16, dtypes.float32, dtypes.float64]


def check_alu(op: Ops, out_dt: DType, in_dt: DType, *columns: list) -> None:
    """`op` over the columns, run as X86 code, equals alu.py's value element by element."""
    shared_check_alu(run_x86, op, out_dt, in_dt, *columns)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_binary(dt):
    a, b = int_pairs(dt)
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.MAX, Ops.AND, Ops.OR, Ops.XOR):
        check_alu(op, dt, dt, a, b)
    lo, minus_one = dtypes.min(dt), dtypes.as_const(-1, dt)
    check_alu(Ops.IDIV, dt, dt, a + [5, lo, lo], b + [0, 0, minus_one])  # x/0 is 0 and MIN/-1 wraps: no trap
    check_alu(Ops.MOD, dt, dt, a + [5, lo, lo], b + [0, 0, minus_one])
    for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        check_alu(op, dtypes.bool, dt, a, b)


@pytest.mark.parametrize("dt", INTS, ids=lambda d: d.name)
def test_int_shifts_and_unary(dt):
    a, _ = int_pairs(dt)
    amounts = [1, 2, 0, 3, 1, 2, 1, 4, 1, 2]
    check_alu(Ops.SHR, dt, dt, a, amounts)  # arithmetic for signed, logical for unsigned; count in cl
    small = [x for x in a if abs(x) < 1000]
    check_alu(Ops.SHL, dt, dt, small, amounts[:len(small)])
    check_alu(Ops.NEG, dt, dt, a)
    check_alu(Ops.MULACC, dt, dt, small, small, small)
    exps = [0, 1, 2, 3, 5, 13, 31, 63] + ([-1, -2, -3, -1] if not dtypes.is_unsigned(dt) else [7, 8, 9, 100])
    bases = [3, -3, 2, 0, -1, 7, 2, 3, 2, -1, -1, 1] if not dtypes.is_unsigned(dt) else \
        [3, 5, 2, 0, 1, 7, 2, 3, 2, 9, 1, 4]
    check_alu(Ops.POW, dt, dt, bases, exps)  # square and multiply; negative powers truncate


def test_division_by_constants():
    for d in (3, -3, 1, -1, 0, 7):
        n = 6
        ast = elementwise(lambda a, d=d: (a // UOp.const(dtypes.int32, d)) * 100 + a % UOp.const(dtypes.int32, d),
                          [dtypes.int32], dtypes.int32, n, f"divc{d}")
        xs = np.array([17, -17, 0, 2**31 - 1, -2**31, 5], np.int32)
        out = np.zeros(n, np.int32)
        run_x86(ast, [xs, out])
        for x, got in zip(xs.tolist(), out.tolist()):
            q, r = exec_alu(Ops.IDIV, dtypes.int32, (x, d)), exec_alu(Ops.MOD, dtypes.int32, (x, d))
            assert got == exec_alu(Ops.ADD, dtypes.int32, (exec_alu(Ops.MUL, dtypes.int32, (q, 100)), r))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_float_ops(dt):
    a = [1.5, -2.25, 0.0, -0.0, 3.0, 1e3, math.inf, -math.inf, math.nan, 0.1]
    b = [0.5, 4.0, -1.0, 2.0, math.nan, -7.5, 1.0, math.inf, 2.0, 0.3]
    for op in (Ops.ADD, Ops.SUB, Ops.MUL, Ops.FDIV, Ops.MAX):
        check_alu(op, dt, dt, a, b)
    for op in (Ops.CMPLT, Ops.CMPNE, Ops.CMPEQ):
        check_alu(op, dtypes.bool, dt, a, b)
    pos = [0.25, 1.0, 2.0, 10.0, 0.0, 3.5, math.inf, math.nan]
    for op in (Ops.SQRT, Ops.RECIPROCAL, Ops.NEG, Ops.TRUNC):
        check_alu(op, dt, dt, pos + [-1.5, -0.0])


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_mulacc_is_fused(dt):
    a, b, c = [1.5, -2.0, 3.0, 0.1], [2.0, 0.5, -1.0, 3.0], [0.25, 1.0, 2.0, 0.3]
    ast = elementwise(lambda x, y, z: UOp(Ops.MULACC, dt, (x, y, z)), [dt] * 3, dt, 4, "fma")
    out = np.zeros(4, to_numpy_dtype(dt))
    k = run_x86(ast, [np_buf(a, dt), np_buf(b, dt), np_buf(c, dt), out])
    assert "vfmadd231" in k.asm_str()
    rtol = 1e-3 if dt is dtypes.float16 else 1e-6
    np.testing.assert_allclose(out, np.array(a) * np.array(b) + np.array(c), rtol=rtol)


def test_nan_compares_follow_c():
    nan = math.nan
    ast = elementwise(lambda a, b: (a.ne(b).cast(dtypes.int32) + (a < b).cast(dtypes.int32) * 2
                                    + a.eq(b).cast(dtypes.int32) * 4), [dtypes.float32] * 2, dtypes.int32, 4, "nan_cmp")
    out = np.zeros(4, np.int32)
    run_x86(ast, [np.array([nan, 1, nan, 1], np.float32), np.array([1, nan, nan, 1], np.float32), out])
    assert out.tolist() == [1, 1, 1, 4]  # != is true for NaN, < and == are false


def test_bool_ops():
    for op in (Ops.AND, Ops.OR, Ops.XOR, Ops.MAX, Ops.CMPNE, Ops.CMPEQ, Ops.CMPLT, Ops.ADD, Ops.MUL):
        check_alu(op, dtypes.bool if op not in (Ops.ADD, Ops.MUL) else dtypes.bool, dtypes.bool,
                  [False, False, True, True], [False, True, False, True])
    check_alu(Ops.NEG, dtypes.bool, dtypes.bool, [False, True])


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.uint8, dtypes.float32, dtypes.float64],
                         ids=lambda d: d.name)
def test_where(dt):
    ast = elementwise(lambda c, a, b: c.ne(0).where(a, b), [dtypes.int32, dt, dt], dt, 4, "where")
    out = np.zeros(4, to_numpy_dtype(dt))
    a, b = np.arange(4).astype(to_numpy_dtype(dt)), (np.arange(4) * 3 + 1).astype(to_numpy_dtype(dt))
    run_x86(ast, [np.array([0, 1, 0, 5], np.int32), a, b, out])
    np.testing.assert_array_equal(out, np.where([0, 1, 0, 5], a, b))


@pytest.mark.parametrize("dt", FLOATS, ids=lambda d: d.name)
def test_where_on_float_compare_blends(dt):
    ast = elementwise(lambda a, b: (a < b).where(a, b * 2.0), [dt, dt], dt, 5, "fwhere")
    x = np_buf([1.0, 5.0, math.nan, -2.0, 3.0], dt)
    y = np_buf([2.0, 1.0, 1.0, -2.0, math.nan], dt)
    out = np.zeros(5, to_numpy_dtype(dt))
    k = run_x86(ast, [x, y, out])
    assert "vblendv" in k.asm_str() and "vcmplt" in k.asm_str()
    np.testing.assert_array_equal(out, np.where(x < y, x, y * 2))


@pytest.mark.parametrize("src", [dtypes.bool, *INTS, *FLOATS], ids=lambda d: d.name)
def test_casts(src):
    for dst in [dtypes.bool, *INTS, *FLOATS]:
        if dst is src:
            continue
        vals = cast_values(src, dst)
        check_cast(run_x86, src, dst, vals)


@pytest.mark.parametrize("src,dst", [(dtypes.float32, dtypes.int32), (dtypes.int32, dtypes.float32),
                                     (dtypes.float32, dtypes.uint32), (dtypes.float64, dtypes.int64),
                                     (dtypes.uint64, dtypes.float64), (dtypes.int8, dtypes.uint8),
                                     (dtypes.uint16, dtypes.int16), (dtypes.float16, dtypes.int16),
                                     (dtypes.uint16, dtypes.float16)], ids=lambda d: d.name)
def test_bitcasts(src, dst):
    vals = [0.0, 1.5, -2.0, math.inf] if dtypes.is_float(src) else \
        [0, 1, dtypes.max(src), 77] if dtypes.is_unsigned(src) else [0, 1, -3, 77]
    check_bitcast(run_x86, src, dst, vals)


def test_gated_load_and_store():
    n = 6
    a, out = UOp.param(0, dtypes.float32.ptr(n)), UOp.param(1, dtypes.float32.ptr(n))
    r = UOp.range(n, 0)
    ast = kernel(out.index(r, (r % 2).eq(0)).store(a.index(r + 1, (r + 1) < n).load() * 2.0).end(r), name="gated")
    res = np.full(n, -1, np.float32)
    run_x86(ast, [np.arange(n, dtype=np.float32) + 1, res])
    assert res.tolist() == [4, -1, 8, -1, 12, -1]


def test_bool_buffers_are_bytes():
    ast = elementwise(lambda a, b: a ^ b, [dtypes.bool, dtypes.bool], dtypes.bool, 4, "bool_xor")
    out = np.zeros(4, np.bool_)
    run_x86(ast, [np.array([0, 0, 1, 1], np.bool_), np.array([0, 1, 0, 1], np.bool_), out])
    assert out.view(np.uint8).tolist() == [0, 1, 1, 0]


@pytest.mark.parametrize("dt", [dtypes.bfloat16, dtypes.fp8e4m3], ids=lambda d: d.name)
def test_unsupported_dtype_names_dtype_and_renderer(dt):
    ast = elementwise(lambda a: a + a, [dt], dt, 4, "narrow_float")
    with pytest.raises(UnsupportedDTypeError, match=rf"X86 renderer does not support dtypes\.{dt.name}"):
        X86Renderer().render(linearize_kernel(ast))


def _random_expr(rnd: np.random.Generator, leaves: list[UOp], dt: DType, depth: int) -> UOp:
    if depth == 0 or rnd.random() < 0.2:
        if rnd.random() < 0.25:
            return UOp.const(dt, int(rnd.integers(-9, 10)) if dtypes.is_int(dt) else float(rnd.integers(-9, 10)) / 4)
        return leaves[int(rnd.integers(len(leaves)))]
    a, b = (_random_expr(rnd, leaves, dt, depth - 1) for _ in range(2))
    ops = ["add", "mul", "neg", "max", "where", "sub"] + (["idiv", "mod", "and", "or", "xor", "shr", "shl", "narrow"]
                                                           if dtypes.is_int(dt) else ["fdiv", "sqrt", "wide"])
    kind = ops[int(rnd.integers(len(ops)))]
    amount = UOp.const(dt, int(rnd.integers(0, 8)))
    return {"add": lambda: a + b, "mul": lambda: a * b, "neg": lambda: -a, "max": lambda: a.maximum(b),
            "sub": lambda: a - b, "where": lambda: (a < b).where(a, b + 1), "idiv": lambda: a // b,
            "mod": lambda: a % b, "and": lambda: a & b, "or": lambda: a | b, "xor": lambda: a ^ b,
            "shr": lambda: a >> amount, "shl": lambda: a << amount, "narrow": lambda: a.cast(dtypes.int8).cast(dt),
            "fdiv": lambda: a / b, "sqrt": lambda: a.sqrt(), "wide": lambda: a.cast(dtypes.float64).cast(dt)}[kind]()


@pytest.mark.parametrize("dt", [dtypes.int32, dtypes.int64, dtypes.float32], ids=lambda d: d.name)
def test_random_expressions_match_evaluation(dt):
    check_random_expressions(run_x86, _random_expr, dt)
