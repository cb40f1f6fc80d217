"""vmin/vmax range analysis: the cast rules, each op's bounds, deep graphs, and a property test that
random integer expressions stay within their bounds at sampled points."""
import math

import numpy as np
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tg_core.dtype import WEAKINT_BOUND, DType, dtypes
from tg_core.uop import Ops, UOp


def var(lo, hi, dt: DType = dtypes.weakint, name: str = "v") -> UOp:
    return UOp.variable(name, lo, hi, dt)


def bounds(u: UOp) -> tuple:
    return u.vmin, u.vmax


# ---- casts -------------------------------------------------------------------------------------------------

def test_cast_to_signed_from_int_wraps_so_only_an_in_range_source_keeps_its_bounds():
    # alu.py and every device wrap: arange(300).cast(int8) < 0 is true for 128 values, not folded to False
    assert bounds(var(-5, 300).cast(dtypes.int8)) == (-128, 127)
    assert bounds(var(-1000, 1000).cast(dtypes.int8)) == (-128, 127)
    assert bounds(var(100, 200, dtypes.int16).cast(dtypes.int8)) == (-128, 127)
    assert bounds(var(0, 2 ** 40, dtypes.uint64).cast(dtypes.int32)) == (-2 ** 31, 2 ** 31 - 1)
    assert bounds(var(-3, 3, dtypes.int8).cast(dtypes.int64)) == (-3, 3)
    assert bounds(var(-100, 127, dtypes.int32).cast(dtypes.int8)) == (-100, 127)


def test_cast_from_float_gives_0_for_what_the_int_cannot_hold():
    assert bounds(var(-5.5, 300.0, dtypes.float32).cast(dtypes.int8)) == (-5, 127)
    assert bounds(var(5.5, 300.0, dtypes.float32).cast(dtypes.int8)) == (0, 127)
    assert bounds(var(5.5, 100.0, dtypes.float32).cast(dtypes.int8)) == (5, 100)
    assert bounds(var(-0.9, 0.9, dtypes.float32).cast(dtypes.uint8)) == (0, 0)
    # an infinite bound (a loaded value) may be NaN or inf: 0 too
    assert bounds(var(3.0, math.inf, dtypes.float32).cast(dtypes.int16)) == (0, 32767)


def test_cast_to_float_keeps_the_overlap_on_the_float_grid():
    c = var(0, 2 ** 24 + 1, dtypes.int32).cast(dtypes.float32)
    assert bounds(c) == (0.0, 2.0 ** 24) and type(c.vmax) is float
    assert bounds(var(-3, 2049).cast(dtypes.float16)) == (-3.0, 2048.0)
    assert bounds(var(0, 70000).cast(dtypes.float16)) == (0.0, math.inf)
    f = var(0.1, 0.3, dtypes.float64).cast(dtypes.float32)
    assert bounds(f) == (float(np.float32(0.1)), float(np.float32(0.3)))
    assert bounds(var(0.1, 0.3, dtypes.float64).cast(dtypes.bfloat16)) == (0.10009765625, 0.30078125)
    assert bounds(var(-1e300, 1e300, dtypes.float64).cast(dtypes.float32)) == (-math.inf, math.inf)
    assert bounds(var(-1000.0, 1000.0, dtypes.float32).cast(dtypes.fp8e4m3)) == (-448.0, 448.0)


def test_cast_entirely_outside():
    assert bounds(var(200, 300).cast(dtypes.int8)) == (-128, 127)
    assert bounds(var(-500, -200).cast(dtypes.int8)) == (-128, 127)
    assert bounds(var(2 ** 40, 2 ** 41, dtypes.int64).cast(dtypes.int32)) == (-2 ** 31, 2 ** 31 - 1)
    assert bounds(var(1e10, 1e11, dtypes.float64).cast(dtypes.int32)) == (0, 0)  # all give alu.py's 0


def test_cast_of_a_nan_bound_gives_the_destinations_full_range():
    n = var(math.nan, math.nan, dtypes.float32)
    assert bounds(n.cast(dtypes.int8)) == (-128, 127)
    assert bounds(n.cast(dtypes.uint16)) == (0, 65535)
    assert bounds(n.cast(dtypes.bool)) == (False, True)
    assert bounds(n.cast(dtypes.float16)) == (-math.inf, math.inf)
    assert bounds(n.cast(dtypes.weakint)) == (-WEAKINT_BOUND, WEAKINT_BOUND - 1)
    assert bounds(UOp.const(dtypes.float32, math.nan).cast(dtypes.int8)) == (-128, 127)


def test_cast_to_a_weak_dtype_does_not_clamp():
    big = 2 ** 100
    assert bounds(var(-big, big).cast(dtypes.weakfloat)) == (-2.0 ** 100, 2.0 ** 100)
    assert bounds(var(-2 ** 40, 2 ** 40, dtypes.int64).cast(dtypes.weakint)) == (-2 ** 40, 2 ** 40)
    # a weakint of a float truncates
    assert bounds(var(-2.5, 1e30, dtypes.float32).cast(dtypes.weakint)) == (-2, int(1e30))
    assert bounds(var(-2.5, math.inf, dtypes.float32).cast(dtypes.weakint)) == (-WEAKINT_BOUND, WEAKINT_BOUND - 1)
    assert bounds(var(False, True, dtypes.bool).cast(dtypes.weakint)) == (0, 1)


def test_cast_to_unsigned_from_int_wraps_so_only_an_in_range_source_keeps_its_bounds():
    assert bounds(var(0, 200, dtypes.int32).cast(dtypes.uint8)) == (0, 200)
    assert bounds(var(-1, 200, dtypes.int32).cast(dtypes.uint8)) == (0, 255)
    assert bounds(var(100, 300).cast(dtypes.uint8)) == (0, 255)
    assert bounds(var(-5, -1).cast(dtypes.uint32)) == (0, 2 ** 32 - 1)
    b = var(False, True, dtypes.bool).cast(dtypes.uint8)
    assert bounds(b) == (0, 1) and type(b.vmin) is int
    # from a float, an out-of-range value gives 0 (alu.py), inside [0, 10] here
    assert bounds(var(-3.5, 10.7, dtypes.float32).cast(dtypes.uint8)) == (0, 10)


def test_cast_to_bool():
    assert bounds(var(0, 0).cast(dtypes.bool)) == (False, False)
    assert bounds(var(1, 5).cast(dtypes.bool)) == (True, True)
    assert bounds(var(-5, -1).cast(dtypes.bool)) == (True, True)
    assert bounds(var(-1, 1).cast(dtypes.bool)) == (False, True)
    assert bounds(var(0.5, 2.0, dtypes.float32).cast(dtypes.bool)) == (True, True)
    assert bounds(var(-0.5, 2.0, dtypes.float32).cast(dtypes.bool)) == (False, True)


def test_bitcast_keeps_bounds_only_when_they_fit():
    assert bounds(var(0, 100, dtypes.int32).bitcast(dtypes.uint32)) == (0, 100)
    assert bounds(var(-1, 100, dtypes.int32).bitcast(dtypes.uint32)) == (0, 2 ** 32 - 1)
    assert bounds(var(0, 1, dtypes.int32).bitcast(dtypes.float32)) == (-math.inf, math.inf)


# ---- ops ---------------------------------------------------------------------------------------------------

def test_constants_variables_ranges():
    assert bounds(UOp.const(dtypes.int8, -3)) == (-3, -3)
    assert bounds(UOp.const(dtypes.float32, math.nan)) == (-math.inf, math.inf)
    assert bounds(UOp.const(dtypes.int32.vec(3), (4, -1, 9))) == (-1, 9)
    r = UOp.range(var(3, 8, name="n"), 0)
    assert bounds(r) == (0, 7)
    assert bounds(UOp.range(0, 1)) == (0, 0)
    assert bounds(var(1, 10, name="b").bind(4)) == (1, 10)
    v = UOp(Ops.VECTORIZE, dtypes.weakint.vec(2), (var(0, 3, name="a"), var(-2, 1, name="b")))
    assert bounds(v) == (-2, 3) and bounds(UOp(Ops.GEP, dtypes.weakint, (v,), (0,))) == (-2, 3)


def test_arithmetic_bounds():
    x, y = var(-3, 5, name="x"), var(2, 4, name="y")
    assert bounds(x + y) == (-1, 9) and bounds(x - y) == (-7, 3) and bounds(x * y) == (-12, 20)
    assert bounds(x * -2) == (-10, 6) and bounds(-x) == (-5, 3) and bounds(x.maximum(y)) == (2, 5)
    assert bounds(x.minimum(y)) == (-3, 5)  # minimum is a WHERE: the union of both sides
    assert bounds(x // 2) == (-1, 2) and bounds(x // -2) == (-2, 1) and bounds(x // y) == (-1, 2)
    assert bounds(x // var(-1, 1, name="z")) == (-WEAKINT_BOUND, WEAKINT_BOUND - 1)  # may divide by zero
    assert bounds(x % 3) == (-2, 2) and bounds(var(0, 100) % 7) == (0, 6) and bounds(var(3, 5) % 7) == (3, 5)
    assert bounds(var(-20, -1) % 7) == (-6, 0) and bounds(var(-9, -8) % 7) == (-2, -1)
    assert bounds(var(0, 100) % var(0, 0, name="z")) == (0, 0)  # x % 0 is 0


def test_strong_int_overflow_gives_the_full_range():
    x = var(100, 120, dtypes.int8)
    assert bounds(x + 7) == (107, 127) and bounds(x + 8) == (-128, 127) and bounds(x * 2) == (-128, 127)
    assert bounds(var(0, 200, dtypes.uint8) - 1) == (0, 255)
    assert bounds(var(-128, -128, dtypes.int8) // -1) == (-128, 127)
    assert bounds(var(2 ** 120, 2 ** 125) * 16) == (2 ** 124, 2 ** 129)  # weakint never overflows


def test_comparisons_and_where():
    x, y = var(0, 5, name="x"), var(6, 9, name="y")
    assert bounds(x < y) == (True, True) and bounds(y < x) == (False, False) and bounds(x < 3) == (False, True)
    assert bounds(x.ne(y)) == (True, True) and bounds(x.eq(y)) == (False, False)
    assert bounds(var(3, 3).eq(3)) == (True, True) and bounds(x.eq(3)) == (False, True)
    assert bounds((x < y).where(x, y)) == (0, 5) and bounds((x < 3).where(x, y)) == (0, 9)
    f = var(0.0, 1.0, dtypes.float32, "f")
    assert bounds(f < 5.0) == (False, True)  # f may be NaN; float comparisons are not decided


def test_bool_arithmetic_bounds():
    b = var(False, True, dtypes.bool, "b")
    t = UOp.const(dtypes.bool, True)
    assert bounds(b.alu(Ops.NEG)) == (False, True)
    assert bounds(t.alu(Ops.NEG)) == (False, False) and t.alu(Ops.NEG).evaluate() is False
    # truth is not monotonic: [-1, 1] holds 0
    d = UOp(Ops.SUB, dtypes.bool, (b, b))
    assert bounds(d) == (False, True) and d.evaluate({b: True}) is False
    assert bounds(UOp(Ops.ADD, dtypes.bool, (t, t))) == (True, True)
    assert bounds(b & t) == (False, True) and bounds(b & UOp.const(dtypes.bool, False)) == (False, False)
    assert bounds(b | t) == (True, True) and bounds(t ^ t) == (False, False)


def test_bitwise_and_shifts():
    x, y = var(0, 12, name="x"), var(0, 5, name="y")
    assert bounds(x & y) == (0, 5) and bounds(x | y) == (0, 15) and bounds(x ^ y) == (0, 15)
    assert bounds(x << 2) == (0, 48) and bounds(x >> 2) == (0, 3) and bounds(x >> y) == (0, 12)
    # a mask without the sign bit bounds the result whatever the other side's sign (shifts.py relies on it)
    assert bounds(var(-1, 3, dtypes.int8) & 3) == (0, 3) and bounds(var(-9, -2, dtypes.int8) & 12) == (0, 12)
    assert bounds(var(-1, 3, dtypes.int8) & var(-2, 1, dtypes.int8)) == (-128, 127)
    # past the width a strong shift is 0 (alu.py), without building the 2**62-bit exact value
    assert bounds(var(0, 5, dtypes.int64) << UOp.const(dtypes.int64, 2 ** 62)) == (0, 0)


def test_float_op_bounds():
    f = var(1.0, 4.0, dtypes.float32, "f")
    assert bounds(f.sqrt()) == (1.0, 2.0) and bounds(f.exp2()) == (2.0, 16.0)
    assert bounds(var(-2.5, 3.5, dtypes.float32).trunc()) == (-2.0, 3.0)
    assert bounds(f * var(-math.inf, math.inf, dtypes.float32, "g")) == (-math.inf, math.inf)
    assert bounds(var(0.0, 1.0, dtypes.float32) * var(math.inf, math.inf, dtypes.float32, "i")) == (-math.inf, math.inf)
    assert bounds(f.reciprocal()) == (-math.inf, math.inf)
    assert bounds(var(-1.0, 4.0, dtypes.float32).sqrt()) == (-math.inf, math.inf)
    # float results are on the dtype's grid
    h = var(0.0, 1.0, dtypes.float16, "h") + 0.1
    assert bounds(h) == (float(np.float16(0.1)), float(np.float16(1.0) + np.float16(0.1)))


def test_deep_chain_bounds():
    x = var(0, 10, name="x")
    y = x
    for i in range(10_000):
        y = (y + 1) if i % 2 else y * 1
    assert bounds(y) == (5000, 5010)
    z = var(0.0, 1.0, dtypes.float32, "z")
    for _ in range(10_000):
        z = z.maximum(0.5)
    assert bounds(z) == (0.5, 1.0)


# ---- property: vmin <= value <= vmax --------------------------------------------------------------------------

STRONG = [dtypes.int8, dtypes.uint8, dtypes.int32, dtypes.uint32, dtypes.int64]
FLOATS = [dtypes.float16, dtypes.bfloat16, dtypes.float32, dtypes.float64, dtypes.weakfloat]
NONZERO = st.integers(-9, 9).filter(bool)

leaf = st.one_of(st.tuples(st.just("var"), st.integers(0, 2)), st.tuples(st.just("const"), st.integers(-300, 300)))


def _extend(inner):
    return st.one_of(
        st.tuples(st.just("add"), inner, inner),
        st.tuples(st.just("mul"), inner, st.integers(-9, 9)),
        st.tuples(st.just("idiv"), inner, NONZERO),
        st.tuples(st.just("mod"), inner, NONZERO),
        st.tuples(st.just("max"), inner, inner),
        st.tuples(st.just("where"), inner, inner, inner, inner),  # where(a < b, c, d)
        st.tuples(st.just("lt"), inner, inner),                    # (a < b) as an int
        st.tuples(st.just("cast"), inner, st.sampled_from(STRONG + [dtypes.weakint])),
        st.tuples(st.just("fcast"), inner, st.sampled_from(FLOATS)),  # to a float and back to weakint
        st.tuples(st.just("bool"), inner),                          # to bool and back to weakint
    )


recipes = st.recursive(leaf, _extend, max_leaves=10)


def build(r, vs: list[UOp]) -> UOp:
    kind = r[0]
    if kind == "var":
        return vs[r[1]]
    if kind == "const":
        return UOp.const(dtypes.weakint, r[1])
    if kind == "add":
        return build(r[1], vs) + build(r[2], vs)
    if kind == "mul":
        return build(r[1], vs) * r[2]
    if kind == "idiv":
        return build(r[1], vs) // r[2]
    if kind == "mod":
        return build(r[1], vs) % r[2]
    if kind == "max":
        return build(r[1], vs).maximum(build(r[2], vs))
    if kind == "where":
        return (build(r[1], vs) < build(r[2], vs)).where(build(r[3], vs), build(r[4], vs))
    if kind == "lt":
        return (build(r[1], vs) < build(r[2], vs)).cast(dtypes.weakint)
    if kind == "cast":
        return build(r[1], vs).cast(r[2])
    if kind == "fcast":
        return build(r[1], vs).cast(r[2]).cast(dtypes.weakint)
    if kind == "bool":
        return build(r[1], vs).cast(dtypes.bool).cast(dtypes.weakint)
    raise AssertionError(kind)


def _undefined_cast(u: UOp, env: dict) -> bool:
    """A cast whose input lies outside a signed int destination is undefined (C, LLVM); range analysis may
    assume it does not happen, so such points are not checked. Casts to unsigned wrap and are checked."""
    if u.op is not Ops.CAST or dtypes.is_unsigned(u.dtype) or not dtypes.is_int(u.dtype) or dtypes.is_weak(u.dtype):
        return False
    v = u.src[0].evaluate(env)
    if isinstance(v, float) and not math.isfinite(v):
        return True
    return not dtypes.min(u.dtype) <= v <= dtypes.max(u.dtype)


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recipes, st.lists(st.tuples(st.integers(-200, 200), st.integers(0, 120)), min_size=3, max_size=3), st.data())
def test_values_lie_within_vmin_vmax(recipe, var_bounds, data):
    vs = [UOp.variable(f"p{i}", lo, lo + span) for i, (lo, span) in enumerate(var_bounds)]
    root = build(recipe, vs)
    nodes = [u for u in root.toposort() if u.dtype is not dtypes.void]
    used = [v for v in vs if v in nodes]
    for _ in range(6):
        env = {v: data.draw(st.one_of(st.just(v.arg[1]), st.just(v.arg[2]), st.integers(v.arg[1], v.arg[2]))) for v in used}
        if any(_undefined_cast(u, env) for u in nodes):
            continue
        for u in nodes:
            val = u.evaluate(env)
            assert u.vmin <= val <= u.vmax, (u.render(), env, val, u.vmin, u.vmax)
    assume(True)
